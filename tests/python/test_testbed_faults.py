"""Faults on the testbed: a link that goes down for 3 s in the middle of an update, then comes back.

h0 publishes a 256 MiB model to h1 over a 1 Gbit/s link (about 2.2 s on the wire); one second
into version 1 h1's link goes down for 3 s. The update must stall and then finish without starting
over: version 1 is committed and h1 fetched each chunk about once (not the model twice).

Every process is stopped by its pid; the hosts are always taken down.
"""
import json
import time

import pytest

from cli_procs import LogWatch, run_testbed, write_secret

PORT = 7412


def test_a_link_down_for_three_seconds_stalls_the_update_and_it_resumes(tmp_path, procs, testbed):
    testbed(2, "--rate", "1gbit")
    secret = write_secret(tmp_path / "secret")
    coordinator = run_testbed("addr", "h0").stdout.strip() + f":{PORT}"
    pub = procs.start_on("h0", "publish", "--model-bytes", "256MiB", "--listen", coordinator, "--secret-file",
                         secret, "--subscribers", 1, "--versions", 1, "--transport", "tcp", "--json")
    sub = procs.start_on("h1", "subscribe", "--connect", coordinator, "--secret-file", secret, "--name", "h1",
                         "--transport", "tcp", "--versions", 1, "--timeout", 120, "--json", "--quiet")
    log = LogWatch(pub.stdout)  # start_on merges the publisher's stderr (the coordinator's log) into stdout
    log.wait_for("publishing version 1", timeout=120)
    time.sleep(1.0)
    down_at = time.monotonic()
    run_testbed("link", "h1", "down")
    time.sleep(3.0)
    run_testbed("link", "h1", "up")
    up_at = time.monotonic()
    pub.wait(180)
    log.thread.join(10)
    out = "".join(log.lines)
    assert pub.returncode == 0, out
    report, _ = json.JSONDecoder().raw_decode(out[out.rfind("\n{") + 1:])
    v = report["versions"][0]
    assert v["verified"] and v["subscribers_verified"] == 1, v
    assert v["copy_s"] > up_at - down_at, v  # it stalled through the outage
    print(json.dumps({k: v[k] for k in ("copy_s", "retries", "gbps")}))
    fetched = v["subscribers"][0]["bytes"]
    assert fetched == report["bytes"], v  # each chunk counted once: nothing started over
    code, sub_out = procs.finish(sub)
    assert code == 0, sub_out
