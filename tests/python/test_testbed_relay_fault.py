"""A relay killed mid-update on the testbed: the plan routes around it and its downstream completes.

Four hosts on 1 Gbit/s links: h0 runs the coordinator and the one source rank (a 256 MiB model);
h1, h2 and h3 run destination ranks 0, 1 and 2, each a whole replica. The plan is a relay chain,
src 0 -> dst 0 -> dst 1 -> dst 2, about 2.2 s per version on these links. One second into version
2, dst 1 (the relay of dst 2) is killed with SIGKILL. Under `--quorum 2` the coordinator drops it
from the version and tells the others it is lost; dst 2 fetches the steps dst 1 fed it from the
source instead. Versions 2 and 3 commit to dst 0 and dst 2, and both verify every version byte for
byte (--verify).

Every process is stopped by its pid; the hosts are always taken down.
"""
import json
import signal
import time

from cli_procs import LogWatch, run_testbed, write_secret

PORT = 7413


def test_a_relay_killed_mid_update_is_routed_around(tmp_path, procs, testbed):
    testbed(4, "--rate", "1gbit")
    secret = write_secret(tmp_path / "secret")
    (tmp_path / "src.json").write_text(json.dumps({"mesh": [{"axis": "dp", "kind": "replica", "size": 1}]}))
    (tmp_path / "dst.json").write_text(json.dumps({"mesh": [{"axis": "dp", "kind": "replica", "size": 3}]}))
    coordinator = run_testbed("addr", "h0").stdout.strip() + f":{PORT}"
    common = ["--src", tmp_path / "src.json", "--dst", tmp_path / "dst.json", "--model-bytes", "256MiB",
              "--coordinator", coordinator, "--secret-file", secret, "--versions", 3, "--transport", "tcp",
              "--timeout-s", 120]
    coord = procs.start_on("h0", "reshard", "--role", "coordinator", "--quorum", 2, *common)
    log = LogWatch(coord.stdout)
    src = procs.start_on("h0", "reshard", "--role", "src", "--rank", 0, "--json", *common)
    dsts = [procs.start_on(f"h{r + 1}", "reshard", "--role", "dst", "--rank", r, "--verify", "--json", *common)
            for r in range(3)]
    log.wait_for("version 1: committed", timeout=120)
    time.sleep(1.0)
    dsts[1].send_signal(signal.SIGKILL)
    dsts[1].wait(10)
    coord.wait(180)
    log.thread.join(10)
    out = "".join(log.lines)
    assert coord.returncode == 0, out
    lines = {v: next(l for l in log.lines if l.startswith(f"version {v}:")) for v in (1, 2, 3)}
    print("".join(lines.values()))
    for v in (2, 3):
        assert "committed" in lines[v] and "dropped dst rank 1" in lines[v], out
    assert "dropped" not in lines[1], out
    code, text = procs.finish(src)
    assert code == 0, text
    for r in (0, 2):
        code, text = procs.finish(dsts[r])
        assert code == 0, text
        report, _ = json.JSONDecoder().raw_decode(text[text.index("{"):])  # UCX may warn after it
        assert report["ok"] and report["committed"] == 3, report
        versions = {v["version"]: v for v in report["versions"]}
        assert all(versions[v]["verified"] for v in (1, 2, 3)), report
        print(f"dst {r}:", json.dumps([{k: v[k] for k in ("version", "bytes", "seconds", "rerouted_steps",
                                                           "rerouted_via_relay")}
                                       for v in report["versions"]]))
        if r == 2:  # dst 1 fed it: from version 2 on it reads dst 0, the relay upstream of dst 1
            for v in (2, 3):
                assert versions[v]["rerouted_steps"] > 0 and versions[v]["rerouted_via_relay"] > 0, report
