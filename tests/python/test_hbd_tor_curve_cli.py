"""`weightport hbd tor-curve`: never crossing a ToR gives no cross-ToR traffic, the ring's greedy cut is
a point of its own, the SVG has a line per architecture and fault ratio, and bad sizes name the option."""
import json
import subprocess

from cli_procs import BIN


def run(*args, ok=True, timeout=120):
    p = subprocess.run([str(BIN), "hbd", "tor-curve", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    assert (p.returncode == 0) == ok, p.stderr
    return p


def test_the_curve_runs_from_borrowing_to_never_crossing(tmp_path):
    svg = tmp_path / "curve.svg"
    out = json.loads(run("--dp", 8, "--fault-ratio", "0.02,0.05", "--samples", 4, "--borrow", "0,16,64,inf",
                         "--arch", "infinitehbd,nvl-72,tpuv4", "--svg", svg, "--json").stdout)
    assert out["tor_gpus"] == 576
    assert [(c["arch"], c["fault_ratio"]) for c in out["curves"]] == [
        (a, r) for a in ("infinitehbd", "nvl-72", "tpuv4") for r in (0.02, 0.05)]
    for c in out["curves"]:
        pts = c["points"]
        assert [p["borrow_gpus"] for p in pts] == [0, 16, 64, "inf"]
        assert pts[-1]["cross_tor"] in (0, None)  # never crossing: nothing crosses
        assert pts[-1]["crossing_tp_groups"] == 0
        assert pts[-1]["waste"] >= pts[0]["waste"]  # ... and it costs GPUs
        assert ("greedy" in c) == (c["arch"] == "infinitehbd")
    ring = out["curves"][0]
    assert ring["greedy"]["tp_waste"] == ring["points"][0]["tp_waste"]
    text = svg.read_text()
    assert text.count("<polyline") == 8  # 3 architectures x 2 ratios, and the ring's 2 greedy points
    assert "ring 2% greedy" in text


def test_bad_sizes_name_the_option():
    assert "--tor-gpus 500" in run("--tor-gpus", 500, ok=False).stderr
    assert "--gpus 4000" in run("--gpus", 4000, ok=False).stderr
    assert "--borrow" in run("--borrow", "1,x", ok=False).stderr
    assert "--fault-ratio" in run("--fault-ratio", "2", ok=False).stderr
