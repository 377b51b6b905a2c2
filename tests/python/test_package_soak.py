"""1,000 consecutive versions through the Python package with a reader pinning and checking every
version it sees while they land: no torn read, and neither memory nor file descriptors grow."""

import os
import threading
import time

import numpy as np
import pytest

weightport = pytest.importorskip("weightport")

VERSIONS = 1000


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_a_thousand_versions_with_a_reader_never_tear_and_leak_nothing():
    secret = os.urandom(32)
    model = {f"t{i}": np.zeros(16384, np.float32) for i in range(4)}  # 256 KiB
    received = {k: np.zeros_like(v) for k, v in model.items()}
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=30.0)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=30.0, pin_timeout=10.0)
    errors = []
    t = threading.Thread(target=lambda: sub.bind(received, mode="copy"))
    t.start()
    pub.register(model)
    t.join(60)

    stop = threading.Event()
    stats = {"reads": 0, "torn": 0, "went_back": 0, "last": 0}

    def reader():
        deadline = time.monotonic() + 300
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                with sub.pinned() as v:
                    for arr in v.tensors.values():
                        if not (arr == np.float32(v.version)).all():
                            stats["torn"] += 1
                    if v.version < stats["last"]:
                        stats["went_back"] += 1
                    stats["last"] = v.version
                    stats["reads"] += 1
            except weightport.FailedPrecondition:  # before the first commit
                time.sleep(0.001)
            except weightport.Error as e:
                errors.append(e)
                return

    r = threading.Thread(target=reader)
    r.start()
    rss_at, fds_at = {}, {}
    try:
        for v in range(1, VERSIONS + 1):
            for arr in model.values():
                arr.fill(v)
            pub.publish(v, wait=True)
            if v in (100, VERSIONS):
                rss_at[v], fds_at[v] = rss_bytes(), open_fds()
    finally:
        stop.set()
        r.join(60)
    sub.wait(VERSIONS)
    sub.swap()
    assert all((a == np.float32(VERSIONS)).all() for a in received.values())
    sub.close()
    pub.close()
    assert errors == []
    assert stats["reads"] > 100 and stats["torn"] == 0 and stats["went_back"] == 0, stats
    assert fds_at[VERSIONS] == fds_at[100], fds_at
    assert rss_at[VERSIONS] - rss_at[100] < 8 << 20, rss_at
