"""examples/verl_sync.py end to end under Ray: verl's CheckpointEngineManager moves every version
through the weightport engine into verl's own CheckpointEngineWorker actors, and each replica's
model equals the trainer's bit for bit after every step."""

import json
import os
import shutil

import pytest
from conftest import run_example, write_model


def report_of(out):
    assert out.stdout.strip(), out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_two_replicas_on_one_host_match_the_trainer_every_step(model_dir):
    out = run_example("--model", model_dir, "--replicas", 2, "--steps", 3, "--json")
    report = report_of(out)
    assert out.returncode == 0, out.stderr[-3000:]
    assert report["backend"] == "weightport" and report["ray_nodes"] == 1
    assert [s["version"] for s in report["steps"]] == [1, 2, 3, 4]
    assert all(s["match"] for s in report["steps"])
    model_bytes = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
    for s in report["steps"]:
        assert 0.9 * 2 * model_bytes < s["bytes"] <= 2 * model_bytes  # every replica got every byte
    # After the first update the calls around the transfer only check the group.
    later = [s["calls_s"] for s in report["steps"][1:]]
    assert all(c["finalize_s"] == 0.0 for c in later)


def test_a_replica_killed_mid_version_leaves_the_others_on_the_previous_one(tmp_path):
    model = write_model(tmp_path / "model", rows=4096, layers=4)  # 32 MiB: ~2.7 s at the cap below
    out = run_example("--model", model, "--replicas", 3, "--steps", 3, "--kill-replica", 1, "--kill-at-step", 2,
                      "--kill-after", 1.0, "--engine-kwargs", json.dumps({"max_gbps": 0.1}), "--json")
    report = report_of(out)
    assert out.returncode == 0, out.stderr[-3000:]
    killed = report["steps"][2]
    assert killed["aborted"] and killed["match"], killed  # the survivors kept version 2
    assert "Unavailable" in killed["error"] and "dst rank 1" in killed["error"], killed["error"]
    assert report["steps"][3]["match"] and "error" not in report["steps"][3]  # back everywhere


def test_a_replica_that_joins_late_gets_the_next_version(model_dir):
    out = run_example("--model", model_dir, "--replicas", 1, "--steps", 2, "--add-replica-at-step", 2, "--json")
    report = report_of(out)
    assert out.returncode == 0, out.stderr[-3000:]
    assert all(s["match"] for s in report["steps"])
    assert report["steps"][2]["bytes"] > 1.9 * report["steps"][1]["bytes"]  # two replicas from step 2


def test_a_rollout_model_that_does_not_match_is_named_and_loads_nothing(tmp_path, model_dir):
    other = write_model(tmp_path / "other", rows=128)  # the mlp weights have other shapes
    out = run_example("--model", model_dir, "--rollout-model", other, "--replicas", 1, "--steps", 1, "--json")
    report = report_of(out)
    assert out.returncode == 1
    err = report["steps"][0]["error"]
    assert "model.embed_tokens.weight" in err or "model.layers.0.mlp.weight" in err, err
    assert "the replica's model has" in err


def test_an_unknown_engine_option_fails_clearly(model_dir):
    out = run_example("--model", model_dir, "--replicas", 1, "--steps", 1, "--engine-kwargs", '{"fanout": 2}')
    assert out.returncode != 0
    assert "unknown option(s) ['fanout']" in out.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="the testbed needs root and iproute2")
def test_three_hosts_over_the_testbed_relay_instead_of_copying_from_the_trainer(tmp_path):
    model = write_model(tmp_path / "model", rows=2048, layers=4)  # 16 MiB
    model_bytes = sum(f.stat().st_size for f in model.glob("*.safetensors"))
    out = run_example("--model", model, "--replicas", 2, "--steps", 2, "--hosts", 3, "--json", timeout=600)
    report = report_of(out)
    assert out.returncode == 0, out.stderr[-3000:]
    assert report["ray_nodes"] == 3 and all(s["match"] for s in report["steps"])
    for s in report["steps"][1:]:
        # Two replicas on two hosts, one copy out of the trainer's host: the second is relayed.
        assert model_bytes * 0.9 < s["bytes_from_trainer"] < model_bytes * 1.4, s
