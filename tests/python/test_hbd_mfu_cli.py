"""`weightport hbd mfu`: the JSON's layouts respect each architecture's TP limit, DGX is its own
reference, faults shrink the GPUs counted, and bad options are refused naming the option."""
import json
import subprocess

from cli_procs import BIN


def run(*args, timeout=120):
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def mfu(*args):
    p = run("hbd", "mfu", *args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_layouts_fit_their_hbd_and_dgx_is_the_reference():
    out = mfu("--model", "moe671b", "--gpus", "1024,4096")
    assert out["model"]["params"] > 6e11
    for point in out["points"]:
        by = {a["arch"]: a for a in point["archs"]}
        assert set(by) == {"infinitehbd", "nvl-72", "tpuv4", "dgx"}
        assert by["dgx"]["tp"] <= 8 and by["dgx"]["ratio_to_dgx"] == 1
        assert by["tpuv4"]["tp"] <= 64 and by["infinitehbd"]["tp"] <= 64
        for a in by.values():
            assert a["tp"] * a["pp"] * a["dp"] <= a["counted_gpus"]
            assert 0 < a["mfu"] < 1
            assert abs(a["ratio_to_dgx"] - a["mfu"] / by["dgx"]["mfu"]) < 1e-9
            parts = a["compute_s"] + a["tp_comm_s"] + a["a2a_s"] + a["pp_p2p_s"] + a["bubble_s"]
            assert abs(a["step_s"] - parts - a["dp_exposed_s"]) < 1e-9 * a["step_s"]


def test_faults_count_only_healthy_gpus_and_trace_gives_the_ratio(tmp_path):
    clean = mfu("--gpus", "4608", "--arch", "tpuv4")
    hit = mfu("--gpus", "4608", "--arch", "tpuv4", "--fault-ratio", "0.05", "--samples", "3")
    c, h = clean["points"][0]["archs"][0], hit["points"][0]["archs"][0]
    assert h["counted_gpus"] < c["counted_gpus"] and h["mfu"] < c["mfu"]
    trace = tmp_path / "t.json"
    assert run("hbd", "trace", "--nodes", 200, "--fault-ratio", "0.03", "--days", 30, "--out", trace).returncode == 0
    t = mfu("--gpus", "1024", "--trace", trace, "--trace-nodes", 200, "--samples", 2)
    assert 0 < t["fault_ratio"] < 0.1 and t["trace"]["servers"] == 200


def test_bad_options_name_the_option():
    for args, name in [(("--model", "llama9"), "--model"), (("--gpus", "1024,x"), "--gpus"),
                       (("--arch", "nvl-99"), "--arch"), (("--fault-ratio", "1.5"), "--fault-ratio")]:
        p = run("hbd", "mfu", *args)
        assert p.returncode != 0
        assert name in p.stdout + p.stderr, (args, p.stdout + p.stderr)
    p = run("hbd", "mfu", "--help")
    assert p.returncode == 0 and "--global-batch" in p.stdout
