"""Hostile sizes for the model commands (topology, sim, plan, hbd): values each within its own range
whose product is too large, byte counts that overflowed, impossible jobs, endless inputs.

Each command runs with its address space limited to 4 GiB and under a timeout, so that a
regression fails the test instead of taking the machine's memory. It must end with exit code 1
(refused) or 2 (usage error), never by a signal, and say on stderr which parameter is at fault.
"""
import json
import os
import pathlib
import resource
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("WEIGHTPORT_BIN", REPO / "build" / "weightport"))
PLANS = REPO / "examples" / "plans"
MEMORY_LIMIT = 4 << 30
TIMEOUT = 60


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(*args, cwd=None):
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT,
                          preexec_fn=limit_memory, cwd=cwd)


def mesh(path, *axes):
    path.write_text(json.dumps({"mesh": [{"axis": a, "kind": k, "size": n} for a, k, n in axes]}))
    return path


def far_trace(path):
    path.write_text(json.dumps([{"node_id": "a", "event_time": 1e7, "event_type": "fault_start",
                                 "fault_type": {}}]))
    return path


# (name, arguments as a function of the test's directory, text stderr must contain)
CASES = [
    ("dgx-64-gpus", lambda d: ["topology", "show", "dgx-h100:nodes=131072,gpus_per_node=64"],
     "parameter 'nodes' = 131072"),
    ("gb200-racks", lambda d: ["topology", "show", "gb200-nvl72:racks=131072"], "parameter 'racks' = 131072"),
    ("fat-tree-hosts", lambda d: ["topology", "show", "fat-tree:hosts=1048576,gpus_per_host=64"],
     "parameter 'hosts' = 1048576"),
    ("fanout-gpus", lambda d: ["sim", "--scenario", "fanout-16k", "--param", "gpus=1000000"],
     "parameter 'gpus' = 1000000"),
    ("fanout-model-gb", lambda d: ["sim", "--scenario", "fanout-16k", "--param", "model_gb=1e12"],
     "parameter 'model_gb' must be at most"),
    ("plan-mesh-1000x1000",
     lambda d: ["plan", "--preset", "small", "--src", PLANS / "fsdp4.json", "--dst",
                mesh(d / "m.json", ("dp", "replica", 1000), ("tp", "tp", 1000))], "--dst"),
    ("plan-replica-100000",
     lambda d: ["plan", "--preset", "small", "--src", PLANS / "fsdp4.json", "--dst",
                mesh(d / "r.json", ("dp", "replica", 100000))], "--dst"),
    ("plan-ep-100000",
     lambda d: ["plan", "--preset", "small", "--arch", "moe", "--src", PLANS / "fsdp4.json", "--dst",
                mesh(d / "e.json", ("ep", "ep", 100000))], "--dst"),
    ("plan-urandom", lambda d: ["plan", "--plan", "/dev/urandom"], "--plan: /dev/urandom"),
    ("trace-days", lambda d: ["hbd", "trace", "--days", "1e9", "--out", d / "t.json"], "--days"),
    ("trace-mean-fault-days", lambda d: ["hbd", "trace", "--mean-fault-days", "1e-9", "--out", d / "t.json"],
     "--mean-fault-days"),
    ("trace-nodes", lambda d: ["hbd", "trace", "--nodes", "4194304", "--fault-ratio", "0.5", "--out",
                               d / "t.json"], "nodes 4194304"),
    ("compare-far-trace",
     lambda d: ["hbd", "compare", "--trace", far_trace(d / "far.json"), "--trace-nodes", "1"], "--sample-days"),
    ("compare-tp-over-cluster",
     lambda d: ["hbd", "compare", "--tp", "4096", "--gpus", "16", "--model", "none"], "--tp 4096"),
    ("compare-samples-x-nodes",
     lambda d: ["hbd", "compare", "--gpus", "16777216", "--samples", "100000", "--fault-ratio", "0.1", "--model",
                "none"], "--samples 100000"),
    ("sim-negative-offset", lambda d: ["sim", "--scenario", "testbed", "--dst-offset", "-5"], "--dst-offset"),
]


@pytest.mark.parametrize("name,args,names", CASES, ids=[c[0] for c in CASES])
def test_hostile_sizes_are_refused_with_a_message(tmp_path, name, args, names):
    p = run(*args(tmp_path), cwd=tmp_path)
    assert p.returncode in (1, 2), \
        f"{name}: exit {p.returncode} (a negative code is a signal)\n{p.stderr[-2000:]}"
    assert names in p.stderr, f"{name}: stderr does not name the parameter ({names!r}):\n{p.stderr[-2000:]}"
    assert "bad_alloc" not in p.stderr


def test_a_large_fsdp2_destination_plans_within_the_limits(tmp_path):
    """100,000 FSDP2 ranks were quadratic (past 60 s); most of them hold nothing of the small model."""
    p = run("plan", "--preset", "small", "--src", PLANS / "fsdp4.json", "--dst",
            mesh(tmp_path / "f.json", ("f", "fsdp2", 100000)), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    report = json.loads(p.stdout)
    assert report["bytes"] == report["destination_bytes"]


def test_an_impossible_design_is_reported_as_cannot_place(tmp_path):
    p = run("hbd", "compare", "--tp", "8", "--gpus", "16", "--model", "none", "--samples", "1", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {a["arch"]: a for a in json.loads(p.stdout)["archs"]}
    for arch in ("nvl-72", "tpuv4"):
        assert rows[arch]["cannot_place"].startswith("16 GPUs are fewer than one " + arch), rows[arch]
        assert rows[arch]["at_fault_ratio"] == []
    assert "cannot_place" not in rows["infinitehbd"]
