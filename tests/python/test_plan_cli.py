"""End-to-end checks of `weightport plan` on the example layout specs under examples/plans/.

The report must be valid JSON whose totals agree with each other, a dumped plan must read back to
the same plan, --check must pass on every example, and a bad spec must fail naming its file.
"""
import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("WEIGHTPORT_BIN", REPO / "build" / "weightport"))
PLANS = REPO / "examples" / "plans"
TIMEOUT = 120

# (source spec, destination spec, architecture of the small preset, topology or None)
CASES = [
    ("fsdp4.json", "tp2x2.json", "dense", "topology-2hosts.json"),
    ("fsdp2-4.json", "tp2x2.json", "dense", "topology-4hosts.json"),
    ("pp2xtp2.json", "tp2x2.json", "dense", None),
    ("pp2xtp2.json", "moe-ep4.json", "moe", "topology-2hosts.json"),
    ("fsdp4.json", "moe-ep4.json", "moe", None),
]


def run(*args):
    p = subprocess.run([str(BIN), "plan", *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT)
    return p.returncode, p.stdout, p.stderr


def plan_args(src, dst, arch, topology):
    args = ["--preset", "small", "--arch", arch, "--src", PLANS / src, "--dst", PLANS / dst]
    if topology:
        args += ["--topology", PLANS / topology]
    return args


def plan_json(*args):
    code, out, err = run(*args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module", autouse=True)
def binary():
    if not BIN.exists():
        pytest.skip(f"{BIN} not built (set WEIGHTPORT_BIN)")


@pytest.mark.parametrize("src,dst,arch,topology", CASES)
def test_examples_report_consistent_json(src, dst, arch, topology):
    r = plan_json(*plan_args(src, dst, arch, topology))
    assert r["src"]["ranks"] == 4 and r["dst"]["ranks"] == 4
    assert r["tensors"] > 0 and r["model_bytes"] > 0
    steps = r["steps"]
    assert steps["total"] == steps["direct"] + steps["relayed"] > 0
    assert steps["chunks"] >= steps["total"]
    ranks = r["ranks"]
    assert len(ranks) == 8
    # Every byte moved is sent once and received once.
    assert sum(x["sent_bytes"] for x in ranks) == r["bytes"]
    assert sum(x["received_bytes"] for x in ranks) == r["bytes"]
    assert all(x["received_bytes"] == 0 for x in ranks if x["side"] == "src")
    # Every destination rank gets its shards: at least the bytes it holds, less its alignment padding.
    for x in ranks:
        if x["side"] == "dst":
            assert x["received_bytes"] <= x["buffer_bytes"]
            assert x["received_bytes"] > 0
    est = r["estimate"]
    assert 0 < est["lower_bound_s"] <= est["predicted_s"]
    assert max(h["busy_s"] for h in r["hosts"]) == pytest.approx(est["lower_bound_s"])
    if topology:
        names = {h["name"] for h in json.loads((PLANS / topology).read_text())["hosts"]}
        assert {x["host"] for x in ranks} <= names
    assert r["planning_s"] is not None and r["planning_s"] >= 0
    assert len(r["digest"]) == 16


@pytest.mark.parametrize("src,dst,arch,topology", CASES)
def test_check_passes(src, dst, arch, topology):
    r = plan_json(*plan_args(src, dst, arch, topology), "--check")
    assert r["check"]["coverage"] == "ok"


def test_dump_round_trips(tmp_path):
    dump = tmp_path / "plan.json"
    made = plan_json(*plan_args(*CASES[0]), "--dump", dump)
    assert made["dump"] == str(dump)
    assert isinstance(json.loads(dump.read_text()), dict)
    back = plan_json("--plan", dump, "--check")
    for key in ("tensors", "model_bytes", "destination_bytes", "bytes", "steps", "options", "digest", "ranks",
                "hosts", "estimate"):
        assert back[key] == made[key], key
    assert back["planning_s"] is None
    # Dumping the plan read back gives the same file.
    again = tmp_path / "again.json"
    plan_json("--plan", dump, "--dump", again)
    assert json.loads(again.read_text()) == json.loads(dump.read_text())


def test_options_reach_the_planner():
    base = plan_args("fsdp4.json", "tp2x2.json", "dense", "topology-2hosts.json")
    small_chunks = plan_json(*base, "--chunk-bytes", "1MiB")
    assert small_chunks["options"]["chunk_bytes"] == 1 << 20
    assert small_chunks["steps"]["chunks"] >= small_chunks["bytes"] // (1 << 20)
    # tp2x2 has two replicas: fed directly, nothing is relayed; with a chain, the second replica's
    # bytes come from the first.
    direct = plan_json(*base, "--relay-fanout", "0")
    chain = plan_json(*base, "--relay-fanout", "1")
    assert direct["steps"]["relayed"] == 0
    assert chain["steps"]["relayed"] > 0
    src_sent = lambda r: sum(x["sent_bytes"] for x in r["ranks"] if x["side"] == "src")
    assert src_sent(chain) < src_sent(direct)


def test_text_report():
    code, out, err = run(*plan_args("fsdp4.json", "tp2x2.json", "dense", "topology-2hosts.json"), "--check")
    assert code == 0, err
    for needle in ("4 source ranks", "lower bound", "predicted", "src rank 0", "dst rank 3", "trainer",
                   "inference", "coverage: ok"):
        assert needle in out, needle


def test_bad_spec_names_the_file(tmp_path):
    bad = tmp_path / "bad-spec.json"
    bad.write_text(json.dumps({"mesh": [{"axis": "tp", "kind": "tpp", "size": 2}]}))
    code, out, err = run("--preset", "small", "--src", PLANS / "fsdp4.json", "--dst", bad)
    assert code == 1
    assert str(bad) in err and "mesh[0].kind" in err and "tpp" in err, err

    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"mesh": [{"kind": "replica", "size": 2}], "rank_ofset": 4}))
    code, out, err = run("--preset", "small", "--src", typo, "--dst", PLANS / "tp2x2.json")
    assert code == 1
    assert str(typo) in err and "rank_ofset" in err, err


def test_spec_needs_a_model_and_usage_errors():
    code, out, err = run("--src", PLANS / "fsdp4.json", "--dst", PLANS / "tp2x2.json")
    assert code == 1
    assert "fsdp4.json" in err and "--preset" in err, err
    assert run("--preset", "small")[0] == 2  # neither --src/--dst nor --plan
    assert run("--preset", "small", "--src", PLANS / "fsdp4.json")[0] == 2  # --src needs --dst
    assert run("--preset", "small", "--src", PLANS / "fsdp4.json", "--dst", PLANS / "missing.json")[0] == 2
    # A dumped plan carries its own options and layouts.
    assert run("--plan", PLANS / "fsdp4.json", "--relay-fanout", "0")[0] == 2
    assert run("--plan", PLANS / "fsdp4.json", "--src", PLANS / "fsdp4.json", "--dst", PLANS / "tp2x2.json")[0] == 2
