"""A plan session whose coordinator is SIGKILLed: two `weightport coordinator --rendezvous etcd://`
processes campaign for one session in an etcd this test starts on loopback; the ranks (the Python
package, in this process) find the leader there. The leader is killed in the middle of a version
(one source of two has published it); the other takes over, the ranks join it keeping what they
hold, and the version commits on every rank, bit-exact. Then etcd itself is SIGKILLed and restarted
in the middle of a version, and that version and the next commit too.

The binary is $WEIGHTPORT_BIN, or build/weightport under the repository root."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

from cli_procs import LogWatch, free_port, join_all, write_secret

weightport = pytest.importorskip("weightport")

ETCD = "/usr/bin/etcd"
TIMEOUT = 60.0


class Etcd:
    """One etcd on loopback with its data in a folder of its own; kill() and restart() keep it."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="weightport-etcd-")
        self.client, self.peer = free_port(), free_port()
        self.proc = None
        self.start()

    @property
    def url(self):
        return f"etcd://127.0.0.1:{self.client}"

    def start(self):
        c, p = f"http://127.0.0.1:{self.client}", f"http://127.0.0.1:{self.peer}"
        self.log = open(os.path.join(self.root, "etcd.log"), "ab")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "default", "--data-dir", os.path.join(self.root, "data"), "--listen-client-urls", c,
             "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
             "--initial-cluster", f"default={p}", "--heartbeat-interval", "50", "--election-timeout", "500"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until it answers on its client port
            try:
                socket.create_connection(("127.0.0.1", self.client), timeout=0.5).close()
                time.sleep(0.3)
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("etcd did not start")

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def etcd():
    if not os.access(ETCD, os.X_OK):
        pytest.skip(f"no {ETCD} (Debian etcd-server: scripts/setup)")
    e = Etcd()
    yield e
    e.close()




def leader_and_standby(etcd, procs, secret, session):
    """Two `weightport coordinator` processes for `session` (lease TTL 2 s): the first leads, the
    second stands by. Returns (first, its log, second, its log)."""
    def coordinator():
        p = procs.start("coordinator", "--rendezvous", etcd.url, "--session", session, "--secret-file", secret,
                        "--lease-ttl", "2", "--timeout", TIMEOUT, "--chunk-bytes", 4096, "--json")
        return p, LogWatch(p.stdout)

    first, first_log = coordinator()
    first_log.wait_for("leading session")
    second, second_log = coordinator()
    second_log.wait_for("standing by")
    return first, first_log, second, second_log


def test_a_killed_coordinator_is_replaced_and_the_version_in_flight_commits(etcd, procs, tmp_path):
    secret = tmp_path / "secret"
    write_secret(secret)
    session = "failover"
    first, first_log, second, second_log = leader_and_standby(etcd, procs, secret, session)

    full = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    shards = [full[:32].copy(), full[32:].copy()]
    pubs = [weightport.Publisher(etcd.url, secret=str(secret), rank=r, world_size=2, session=session,
                                 transport="tcp", timeout=TIMEOUT) for r in range(2)]
    recv = {"w": np.zeros((64, 32), np.float32)}
    sub = weightport.Subscriber(etcd.url, secret=str(secret), session=session, transport="tcp", timeout=TIMEOUT)
    assert join_all(lambda: pubs[0].register({"w": shards[0]}, weightport.Sharded(0, 2)),
                    lambda: pubs[1].register({"w": shards[1]}, weightport.Sharded(1, 2)),
                    lambda: sub.bind(recv)) == [None, None, None]

    def publish(r, v):
        shards[r][:] = full[32 * r:32 * (r + 1)] + v
        pubs[r].publish(v)

    def expect(v):
        for p in pubs:
            p.wait(v)
        sub.wait(v)
        assert sub.swap() == v
        assert np.array_equal(recv["w"], full + v)

    for r in range(2):
        publish(r, 1)
    expect(1)

    # Version 2 is in flight (one source of two) when the leader is SIGKILLed.
    publish(0, 2)
    time.sleep(0.3)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    publish(1, 2)
    expect(2)
    second_log.wait_for("leading session")
    second_log.wait_for('"version":2')
    for r in range(2):
        publish(r, 3)
    expect(3)

    # etcd itself is SIGKILLed in the middle of version 4 and restarted a second later.
    publish(0, 4)
    etcd.kill()
    publish(1, 4)
    time.sleep(1.0)
    etcd.start()
    try:
        expect(4)
    except Exception:
        print("".join(second_log.lines))
        raise
    for r in range(2):
        publish(r, 5)
    expect(5)

    for p in pubs:
        p.close()
    sub.close()
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0


def test_a_frozen_leader_is_replaced_for_the_ranks_and_does_not_act_when_it_wakes(etcd, procs, tmp_path):
    """The leader is stopped (SIGSTOP) after version 1: its sockets stay open, so only the store
    says its term is over. The standby leads once the lease runs out, the ranks move to it, and
    version 2 commits; the old leader, woken, finds its lease gone and stands by instead of acting,
    and version 3 commits too."""
    secret = tmp_path / "secret"
    write_secret(secret)
    session = "frozen"
    first, first_log, second, second_log = leader_and_standby(etcd, procs, secret, session)
    w = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    pub = weightport.Publisher(etcd.url, secret=str(secret), session=session, transport="tcp", timeout=TIMEOUT)
    recv = {"w": np.zeros((64, 32), np.float32)}
    sub = weightport.Subscriber(etcd.url, secret=str(secret), session=session, transport="tcp", timeout=TIMEOUT)
    assert join_all(lambda: pub.register({"w": w}), lambda: sub.bind(recv)) == [None, None]

    def version(v):
        w[:] = v
        pub.publish(v)
        pub.wait(v, timeout=TIMEOUT)
        sub.wait(v, timeout=TIMEOUT)
        assert sub.swap() == v
        assert np.array_equal(recv["w"], w)

    version(1)
    first.send_signal(signal.SIGSTOP)
    try:
        second_log.wait_for("leading session", timeout=30)
        start = time.monotonic()
        version(2)  # the ranks moved to the new leader although the old one's sockets are open
        print(f"version 2 under the new leader {time.monotonic() - start:.2f} s after it led")
    finally:
        first.send_signal(signal.SIGCONT)
    first_log.wait_for("standing by again", timeout=30)  # its lease lapsed: it does not act
    version(3)
    assert first.poll() is None, "the woken leader exited: " + "".join(first_log.lines)
    pub.close()
    sub.close()
    for p in (first, second):
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
