"""Faults across processes: a subscriber killed with SIGKILL in the middle of an update, under the
all-or-nothing and the quorum commit policies, and its restart catching up.

The publisher publishes versions that change every element (--perturb 1, so each one moves the
whole 512 MiB model over TCP) and waits before each version until every subscriber is connected
(--wait-each), so a restarted one takes part in the next version. The victim is killed as soon as
the coordinator logs that version 2 began. Every process is stopped by its pid; every wait is bounded.
"""
import json
import signal
import subprocess
import time

import pytest

from cli_procs import BIN, TIMEOUT, LogWatch, free_port, write_secret


def start(args):
    return subprocess.Popen([str(BIN), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_with_kill(tmp_path, quorum):
    secret = write_secret(tmp_path / "secret")
    port = free_port()
    pub = start(["publish", "--model-bytes", "512MiB", "--listen", f"127.0.0.1:{port}", "--secret-file", secret,
                 "--subscribers", 3, "--versions", 3, "--perturb", 1, "--transport", "tcp", "--keep-going",
                 "--wait-each", "--quorum", quorum, "--json"])
    procs = [pub]

    def subscriber(name):
        p = start(["subscribe", "--connect", f"127.0.0.1:{port}", "--secret-file", secret, "--name", name,
                   "--transport", "tcp", "--versions", 3, "--timeout", 120, "--json", "--quiet"])
        procs.append(p)
        return p

    try:
        subs = {name: subscriber(name) for name in ("a", "b", "victim")}
        log = LogWatch(pub.stderr)  # the coordinator's log is the publisher's stderr
        log.wait_for("publishing version 2", timeout=TIMEOUT)
        subs["victim"].send_signal(signal.SIGKILL)
        subs["victim"].wait(10)
        time.sleep(0.5)  # the coordinator notices the lost connection at once; give the verdict a moment
        restarted = subscriber("victim")
        out = pub.stdout.read()
        pub.wait(TIMEOUT)
        log.thread.join(10)
        results = {}
        for name, p in (("a", subs["a"]), ("b", subs["b"]), ("victim", restarted)):
            so, se = p.communicate(timeout=TIMEOUT)
            results[name] = (p.returncode, so, se)
        assert "{" in out, (f"the publisher (exit {pub.returncode}) printed no report:\n{out}\nits log:\n" +
                            "".join(log.lines) + "".join(f"\n{n} (exit {r[0]}): {r[1]}{r[2]}" for n, r in results.items()))
        report, _ = json.JSONDecoder().raw_decode(out[out.index("{"):])  # UCX may warn after it
        return pub.returncode, report, results, "".join(log.lines)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)


def test_killed_subscriber_aborts_the_version_all_or_nothing_and_catches_up_after_restart(tmp_path):
    code, report, results, log = run_with_kill(tmp_path, quorum=0)
    v = report["versions"]
    assert [x["verified"] for x in v] == [True, False, True], log
    assert "'victim'" in v[1]["reason"] and "lost" in v[1]["reason"], v[1]["reason"]
    assert v[2]["subscribers_verified"] == 3
    assert code == 1  # one version aborted
    for name, (rc, so, se) in results.items():
        assert rc == 0, (name, so, se)
    # the restarted victim had nothing live: it fetched the whole model for version 3
    victim = next(s for s in v[2]["subscribers"] if s["name"] == "victim")
    assert victim["bytes"] == report["bytes"]


def test_killed_subscriber_is_dropped_under_a_quorum_and_the_others_commit(tmp_path):
    code, report, results, log = run_with_kill(tmp_path, quorum=2)
    v = report["versions"]
    assert [x["verified"] for x in v] == [True, True, True], log
    dropped = [s for s in v[1]["subscribers"] if "dropped" in s]
    assert [s["name"] for s in dropped] == ["victim"], v[1]["subscribers"]
    assert "lost" in dropped[0]["dropped"]
    assert v[1]["subscribers_verified"] == 2 and v[2]["subscribers_verified"] == 3
    assert code == 0
    for name, (rc, so, se) in results.items():
        assert rc == 0, (name, so, se)


def test_killed_publisher_leaves_the_old_version_live_and_its_restart_completes_the_update(tmp_path):
    secret = write_secret(tmp_path / "secret")
    port = free_port()
    procs = []
    try:
        serve = start(["serve", "--listen", f"127.0.0.1:{port}", "--secret-file", secret, "--run-for", 150])
        procs.append(serve)
        log = LogWatch(serve.stdout)  # serve logs its events on stdout
        log.wait_for("coordinator listening")
        subs = []
        for name in ("a", "b"):
            subs.append(start(["subscribe", "--connect", f"127.0.0.1:{port}", "--secret-file", secret, "--name", name,
                               "--transport", "tcp", "--versions", 3, "--timeout", 140, "--out", tmp_path / f"{name}.safetensors",
                               "--json", "--quiet"]))
        procs += subs
        log.wait_for("joined", 2)
        common = ["publish", "--model-bytes", "512MiB", "--coordinator", f"127.0.0.1:{port}", "--secret-file", secret,
                  "--perturb", 1, "--transport", "tcp", "--quiet"]
        pub = start(common + ["--versions", 3])
        procs.append(pub)
        log.wait_for("publishing version 2")
        pub.send_signal(signal.SIGKILL)
        pub.wait(10)
        log.wait_for("aborted version 2")
        restarted = start(common + ["--first-version", 2, "--versions", 2])
        procs.append(restarted)
        out, err = restarted.communicate(timeout=TIMEOUT)
        assert restarted.returncode == 0, err
        reports = []
        for s in subs:
            so, se = s.communicate(timeout=TIMEOUT)
            assert s.returncode == 0, se
            reports.append(json.loads(so[so.index("{"):so.rindex("}") + 1]))
        for r in reports:
            assert r["live_version"] == 3
            seen = [(v["version"], v.get("committed")) for v in r["versions"]]
            # version 2 of the killed publisher was abandoned, never live; the restart's went through
            # The killed publisher's version 2 was abandoned, once, and never made live; the
            # restart's version 2 and 3 were verified (commit events may be recorded late, so the
            # live version stands for them).
            assert seen.count((2, False)) == 1, seen
            assert [v for v, committed in seen if committed is not False] == [1, 2, 3], seen
        a = (tmp_path / "a.safetensors").read_bytes()
        assert a == (tmp_path / "b.safetensors").read_bytes()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
