"""Rollback and membership through the Python package: subscribers keep their last versions, a
publisher rolls the whole group back to one of them (everywhere or nowhere), and versions go on
after it; a subscriber that leaves under a quorum is planned around, and one that comes back
(rejoin) receives from the next version on and takes part in a rollback."""

import os

import pytest

from cli_procs import join_all

torch = pytest.importorskip("torch")
weightport = pytest.importorskip("weightport")

TIMEOUT = 30.0


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_model_is(model, weights):
    for (name, got), want in zip(model.state_dict().items(), weights.values()):
        assert torch.equal(got, want), name


@pytest.fixture
def secret():
    return os.urandom(32)


def test_a_rollback_restores_a_kept_version_on_every_subscriber(secret):
    trainer = make_model(0)
    replicas = [make_model(1), make_model(2)]
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT)
    subs = [weightport.Subscriber(pub.coordinator, secret=secret, rank=r, world_size=2, transport="shm",
                                  timeout=TIMEOUT, keep_versions=2) for r in range(2)]
    joins = [lambda: pub.register(trainer)] + [lambda s=s, m=m: s.bind(m) for s, m in zip(subs, replicas)]
    assert join_all(*joins) == [None, None, None]
    published = {}
    for v in range(1, 5):
        with torch.no_grad():
            for p in trainer.parameters():
                p.add_(torch.randn_like(p))
        published[v] = snapshot(trainer)
        pub.publish(v, wait=True)
    for sub in subs:
        sub.wait(4)
        assert sub.kept_versions == [3, 4]
        assert sub.kept_bytes > 0

    report = pub.rollback(3)
    assert report["committed"] and report["rollback"] and report["version"] == 3
    assert report["bytes"] == 0
    for sub, model in zip(subs, replicas):
        assert sub.live_version == 3
        assert sub.swap() == 3
        assert_model_is(model, published[3])

    # Version 1 is no longer kept: nobody rolls back, version 3 stays live everywhere.
    with pytest.raises(weightport.Unavailable, match="does not keep version 1"):
        pub.rollback(1)
    assert [s.live_version for s in subs] == [3, 3]

    # Versions go on from the restored one.
    with torch.no_grad():
        for p in trainer.parameters():
            p.mul_(0.5)
    pub.publish(5, wait=True)
    for sub, model in zip(subs, replicas):
        sub.wait(5)
        assert sub.swap() == 5
        assert_model_is(model, snapshot(trainer))
    for sub in subs:
        sub.close()
    pub.close()


def test_a_subscriber_that_leaves_under_a_quorum_is_planned_around(secret):
    trainer = make_model(0)
    replicas = [make_model(r + 1) for r in range(3)]
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT, quorum=2)
    subs = [weightport.Subscriber(pub.coordinator, secret=secret, rank=r, world_size=3, transport="shm",
                                  timeout=TIMEOUT) for r in range(3)]
    joins = [lambda: pub.register(trainer)] + [lambda s=s, m=m: s.bind(m) for s, m in zip(subs, replicas)]
    assert join_all(*joins) == [None] * 4
    pub.publish(1, wait=True)
    subs[1].close()  # leaves between versions
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(1.0)
    pub.publish(2)
    report = pub.wait(2)
    assert report["committed"]
    assert len(report["dropped"]) == 1 and "dst rank 1" in report["dropped"][0]
    for r in (0, 2):
        subs[r].wait(2)
        assert subs[r].swap() == 2
        assert_model_is(replicas[r], snapshot(trainer))
    for r in (0, 2):
        subs[r].close()
    pub.close()


def test_a_subscriber_that_left_joins_again_and_rolls_back_with_the_others(secret):
    trainer = make_model(0)
    replicas = [make_model(r + 1) for r in range(3)]
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT, quorum=2, rejoin=True)

    def subscriber(rank):
        return weightport.Subscriber(pub.coordinator, secret=secret, rank=rank, world_size=3, transport="shm",
                                     timeout=TIMEOUT, keep_versions=2)

    subs = [subscriber(r) for r in range(3)]
    joins = [lambda: pub.register(trainer)] + [lambda s=s, m=m: s.bind(m) for s, m in zip(subs, replicas)]
    assert join_all(*joins) == [None] * 4
    published = {}

    def publish(v):
        with torch.no_grad():
            for p in trainer.parameters():
                p.add_(torch.randn_like(p))
        published[v] = snapshot(trainer)
        pub.publish(v)
        return pub.wait(v)

    assert publish(1)["committed"]
    subs[1].close()  # leaves
    report = publish(2)
    assert report["committed"] and len(report["dropped"]) == 1 and "dst rank 1" in report["dropped"][0]

    # A new process for rank 1 (a fresh model): it registers again while the session runs.
    replicas[1] = make_model(9)
    subs[1] = subscriber(1).bind(replicas[1])
    report = publish(3)
    assert report["committed"] and report["dropped"] == [] and report["rejoined"] == ["dst rank 1"]
    for sub, model in zip(subs, replicas):
        sub.wait(3)
        assert sub.swap() == 3
        assert_model_is(model, published[3])
    assert publish(4)["committed"]
    for sub in subs:
        sub.wait(4)
        assert sub.swap() == 4  # the readers leave version 3's copy, which the rollback restores into
    assert [s.kept_versions for s in subs] == [[3, 4]] * 3

    report = pub.rollback(3)
    assert report["committed"] and report["rollback"]
    for sub, model in zip(subs, replicas):
        assert sub.live_version == 3
        assert sub.swap() == 3
        assert_model_is(model, published[3])
    for sub in subs:
        sub.close()
    pub.close()
