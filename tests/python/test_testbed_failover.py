"""Coordinator failover on the testbed: six hosts on 1 Gbit/s links. h0 runs etcd; h1 and h2 run
`weightport coordinator --rendezvous etcd://h0`; h3 and h4 run the two source ranks and h5 the
destination, each a process of its own (failover_rank.py) that finds the coordinator in etcd.

Version 2 is in flight (h3 has published it, h4 not yet) when the leading coordinator is killed with
SIGKILL. The other takes over once the leader's lease runs out; the ranks join it keeping what they
hold; h4 publishes, and version 2 commits on every rank, bit-exact at h5; version 3 too. Then etcd is
killed with SIGKILL in the middle of version 4 and restarted on the same data a second later:
versions 4 and 5 commit.

Every process is stopped by its pid; the hosts are always taken down."""
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from cli_procs import LogWatch, run_testbed, write_secret

ETCD = "/usr/bin/etcd"
RANK = pathlib.Path(__file__).resolve().parent / "failover_rank.py"
TESTBED = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "testbed"


class Rank:
    """A failover_rank.py process inside a testbed host, driven line by line."""

    def __init__(self, procs, host, *args):
        argv = [str(TESTBED), "exec", host, sys.executable, str(RANK), *map(str, args)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        procs.procs.append(self.proc)
        self.log = LogWatch(self.proc.stdout)

    def ask(self, line, answer, timeout=90):
        n = sum(answer in l for l in self.log.lines) + 1
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        self.log.wait_for(answer, n, timeout)


def test_a_coordinator_killed_on_the_testbed_is_replaced_and_the_version_commits(tmp_path, procs, testbed):
    if not os.access(ETCD, os.X_OK):
        pytest.skip(f"no {ETCD} (Debian etcd-server: scripts/setup)")
    testbed(6, "--rate", "1gbit")
    addr = {h: run_testbed("addr", h).stdout.strip() for h in ("h0", "h3", "h4", "h5")}
    secret = write_secret(tmp_path / "secret")
    data = tempfile.mkdtemp(prefix="weightport-etcd-", dir=tmp_path)
    client, peer = f"http://{addr['h0']}:2379", f"http://{addr['h0']}:2380"
    etcd_argv = [str(TESTBED), "exec", "h0", ETCD, "--name", "default", "--data-dir", data,
                 "--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                 "--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}",
                 "--heartbeat-interval", "50", "--election-timeout", "500"]
    etcd = procs.run_argv(etcd_argv)
    etcd_log = LogWatch(etcd.stdout)
    etcd_log.wait_for("ready to serve client requests", timeout=60)
    store = f"etcd://{addr['h0']}:2379"

    def coordinator(host):
        p = procs.start_on(host, "coordinator", "--rendezvous", store, "--session", "tb", "--secret-file", secret,
                           "--listen", run_testbed("addr", host).stdout.strip() + ":0", "--lease-ttl", 2,
                           "--timeout", 90, "--chunk-bytes", 4096, "--json")
        return p, LogWatch(p.stdout)

    first, first_log = coordinator("h1")
    first_log.wait_for("leading session")
    second, second_log = coordinator("h2")
    second_log.wait_for("standing by")

    common = ["--store", store, "--session", "tb", "--secret", secret, "--timeout", 90]
    pubs = [Rank(procs, h, "--role", "pub", "--rank", r, "--world", 2, "--host", addr[h], *common)
            for r, h in enumerate(("h3", "h4"))]
    sub = Rank(procs, "h5", "--role", "sub", "--host", addr["h5"], *common)
    for r in (*pubs, sub):
        r.log.wait_for("joined", timeout=90)

    def commit(v, publish=(0, 1)):
        for r in publish:
            pubs[r].ask(f"publish {v}", f"published {v}")
        for p in pubs:
            p.ask(f"wait {v}", f"committed {v}")
        sub.ask(f"wait {v}", f"live {v} ok")

    commit(1)
    pubs[0].ask("publish 2", "published 2")  # version 2 in flight: one source of two
    time.sleep(0.5)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    commit(2, publish=(1,))
    second_log.wait_for('"version":2')
    commit(3)

    pubs[0].ask("publish 4", "published 4")
    etcd.send_signal(signal.SIGKILL)
    etcd.wait(10)
    pubs[1].ask("publish 4", "published 4")
    time.sleep(1.0)
    etcd = procs.run_argv(etcd_argv)  # the same data folder and addresses
    LogWatch(etcd.stdout).wait_for("ready to serve client requests", timeout=60)
    commit(4, publish=())
    commit(5)
    print("".join(second_log.lines[-6:]))
    for r in (*pubs, sub):
        r.proc.stdin.write("quit\n")
        r.proc.stdin.flush()
        assert r.proc.wait(60) == 0
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0
