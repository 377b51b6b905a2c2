"""`weightport hbd cost-sweep`: its parameters' own point is the ratio `hbd compare` prints, the grid
moves the way the cost model says, and a price file changes it."""
import json
import subprocess

from cli_procs import BIN, REPO

REPO_COST = REPO / "configs" / "hbd-cost.json"


def run(*args, timeout=120):
    p = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_the_sweeps_own_point_is_the_ratio_compare_reports(tmp_path):
    sweep = json.loads(run("hbd", "cost-sweep", "--k", 3, "--json"))
    compare = json.loads(run("hbd", "compare", "--gpus", 1152, "--samples", 1, "--k", 3, "--fault-ratio", "0.02",
                             "--arch", "infinitehbd,nvl-72", "--json"))
    usd = {a["arch"]: a["cost_per_gpu"]["hbd_usd"] for a in compare["archs"]}
    own = next(p for p in sweep["points"]
               if p["ocstrx_per_gpu"] == 8 and p["ocstrx_price_scale"] == 1.0 and p["tray_usd"] == 28000)
    assert abs(own["ratio"] - usd["infinitehbd"] / usd["nvl-72"]) < 1e-9
    # More transceivers or dearer ones cost more; a dearer tray favours the ring.
    by = {(p["ocstrx_per_gpu"], p["ocstrx_price_scale"], p["tray_usd"]): p["ratio"] for p in sweep["points"]}
    assert by[(2, 1.0, 28000)] < by[(8, 1.0, 28000)]
    assert by[(8, 0.5, 28000)] < by[(8, 1.0, 28000)]
    assert by[(8, 1.0, 101000)] < by[(8, 1.0, 28000)]
    for p in sweep["points"]:
        assert p["holds"] == (p["ratio"] <= sweep["target_ratio"])
    # The thresholds sit where the ratio crosses the target.
    for t in sweep["thresholds"]:
        assert t["max_ocstrx_per_gpu_at_price"] > 0
    assert {a["arch"] for a in sweep["usd_per_tbps"]} >= {"infinitehbd", "nvl-72", "tpuv4", "dgx"}

    # A price file with the switch tray at twice the price halves NVL-72's tray share.
    cost = json.loads(REPO_COST.read_text())
    cost["parts"]["nvlink_switch_tray"]["usd"] *= 2
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(cost))
    dearer = json.loads(run("hbd", "cost-sweep", "--k", 3, "--cost", path, "--json"))
    nvl = {a["arch"]: a["hbd_usd_per_gpu"] for a in dearer["usd_per_tbps"]}["nvl-72"]
    assert nvl > {a["arch"]: a["hbd_usd_per_gpu"] for a in sweep["usd_per_tbps"]}["nvl-72"]
