"""A subscriber's rate cap (``max_gbps``): a version takes at least its bytes, less one chunk of
burst, over the cap, and lands intact; bad values are refused before anything joins. A subscriber of
background priority receives every version intact; an unknown priority is refused."""

import os
import time

import pytest

from cli_procs import join_all

torch = pytest.importorskip("torch")
weightport = pytest.importorskip("weightport")

TIMEOUT = 60.0
CHUNK_BYTES = 4 << 20  # the planner's default chunk: the bucket's burst


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024))


def test_a_capped_subscriber_receives_no_faster_than_its_cap():
    secret = os.urandom(32)
    trainer, replica = make_model(0), make_model(1)
    cap_gbps = 0.2  # 25 MB/s: the 8 MiB model's bytes past one chunk take at least 0.17 s
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=TIMEOUT,
                                max_gbps=cap_gbps)
    assert join_all(lambda: pub.register(trainer), lambda: sub.bind(replica)) == [None, None]
    model_bytes = sum(p.numel() * p.element_size() for p in trainer.parameters())
    started = time.monotonic()
    pub.publish(1, wait=True)
    elapsed = time.monotonic() - started
    sub.wait(1)
    assert sub.swap() == 1
    for got, want in zip(replica.parameters(), trainer.parameters()):
        assert torch.equal(got, want)
    floor_s = (model_bytes - CHUNK_BYTES) / (cap_gbps * 1e9 / 8)
    assert elapsed >= floor_s, (elapsed, floor_s)
    sub.close()
    pub.close()


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_bad_cap_is_refused(bad):
    with pytest.raises(ValueError, match="max_gbps"):
        weightport.Subscriber("127.0.0.1:1", secret=os.urandom(32), max_gbps=bad)


def test_a_background_subscriber_receives_every_version_intact():
    # Over shared memory nothing competes: the priority must cost nothing in correctness.
    secret = os.urandom(32)
    trainer, replica = make_model(2), make_model(3)
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=TIMEOUT,
                                priority="background")
    assert join_all(lambda: pub.register(trainer), lambda: sub.bind(replica)) == [None, None]
    for version in (1, 2):
        with torch.no_grad():
            for p in trainer.parameters():
                p.add_(1.0)
        pub.publish(version, wait=True)
        sub.wait(version)
        assert sub.swap() == version
        for got, want in zip(replica.parameters(), trainer.parameters()):
            assert torch.equal(got, want)
    sub.close()
    pub.close()


def test_an_unknown_priority_is_refused():
    with pytest.raises(ValueError, match="priority"):
        weightport.Subscriber("127.0.0.1:1", secret=os.urandom(32), priority="urgent")
