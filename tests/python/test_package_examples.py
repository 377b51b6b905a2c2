"""The package's examples, run as a user runs them: several processes each."""

import json
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("weightport")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def run_example(name, *args, timeout=240):
    r = subprocess.run([sys.executable, str(EXAMPLES / name), "--json", *args], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{name} exited {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_rl_loop_replicas_match_the_trainer_at_every_version():
    s = run_example("rl_loop.py", "--steps", "6", "--replicas", "2", "--timeout", "60")
    assert s["ok"], s
    assert s["final_versions"] == {"0": 6, "1": 6}
    assert s["mismatched"] == [] and s["errors"] == []
    assert s["swaps_checked"] >= 2  # at least the last version on each replica, usually every one


def test_fsdp2_ranks_publish_bit_exact_to_a_whole_model():
    s = run_example("fsdp2_publish.py", "--versions", "3", "--timeout", "60")
    assert s["ok"], s
    assert s["tensors_checked"] == 3 * 9  # 9 tensors in each of 3 versions
    assert s["mismatched"] == []


def test_federated_averaging_learns_and_folds_every_client():
    s = run_example("federated.py", "--clients", "3", "--rounds", "6", "--encoding", "fp8")
    assert s["ok"], s
    assert s["folded"] == [3] * 6
    assert s["loss_after"] <= 0.5 * s["loss_before"], s
