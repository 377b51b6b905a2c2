"""The weightport Python package: publishers and subscribers in one process (threads), bit-exact
versions, layouts, conversion, pins and errors."""

import os
import threading

import numpy as np
import pytest

from cli_procs import join_all

torch = pytest.importorskip("torch")
weightport = pytest.importorskip("weightport")

TIMEOUT = 30.0


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))




@pytest.fixture
def secret():
    return os.urandom(32)


def step(model, amount):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(amount * torch.randn_like(p))


def test_versions_reach_the_bound_model_bit_exact_and_zero_copy(secret):
    trainer, infer = make_model(0), make_model(1)
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=TIMEOUT)
    assert join_all(lambda: pub.register(trainer), lambda: sub.bind(infer)) == [None, None]
    x = torch.randn(5, 16)
    for v in range(1, 5):
        step(trainer, 0.01)
        pub.publish(v)
        report = pub.wait(v)
        assert report["committed"] and report["version"] == v
        sub.wait(v)
        assert sub.swap() == v
        assert sub.model_version == v
        for (name, a), b in zip(trainer.state_dict().items(), infer.state_dict().values()):
            assert torch.equal(a, b), name
        assert torch.equal(trainer(x), infer(x))
    # zero-copy: the model's tensors are the received version, not copies of it
    with sub.pinned() as pinned:
        assert pinned.version == 4
        assert pinned.tensors["0.weight"].data_ptr() == infer[0].weight.data_ptr()
    sub.close()
    pub.close()
    assert torch.equal(trainer(x), infer(x))  # still readable after close


def test_publish_tensors_streams_parts_given_one_at_a_time_and_names_a_bad_one(secret):
    trainer, infer = make_model(0), make_model(1)
    coordinator = weightport.Coordinator(secret=secret, timeout=TIMEOUT)  # started before any rank
    pubs = [weightport.Publisher(coordinator.address, secret=secret, rank=r, world_size=2, serve=False,
                                 transport="shm", timeout=TIMEOUT) for r in range(2)]
    sub = weightport.Subscriber(coordinator.address, secret=secret, transport="shm", timeout=TIMEOUT)
    parts = [{n: t.detach().chunk(2)[r].clone() for n, t in trainer.state_dict().items()} for r in range(2)]
    layouts = [weightport.Sharded(r, 2) for r in range(2)]
    assert join_all(*[lambda r=r: pubs[r].register(parts[r], layouts[r]) for r in range(2)],
                    lambda: sub.bind(infer)) == [None] * 3
    step(trainer, 0.1)

    def fresh(r):  # a generator of new tensors, as an FSDP engine gathers them one by one
        for name, t in trainer.state_dict().items():
            yield name, t.detach().chunk(2)[r].clone()

    with pytest.raises(ValueError, match=r"tensor '0.weight': registered as f32 \[16, 16\], given f32 \[32, 16\]"):
        pubs[0].publish_tensors(1, [("0.weight", trainer[0].weight.detach())])
    with pytest.raises(ValueError, match="'bogus' was not registered"):
        pubs[0].publish_tensors(1, [("bogus", torch.zeros(1))])
    with pytest.raises(ValueError, match="registered tensors were not given, the first '0.bias'"):
        pubs[0].publish_tensors(1, [("0.weight", parts[0]["0.weight"])])
    for r in range(2):
        pubs[r].publish_tensors(1, fresh(r))
    for p in pubs:
        p.wait(1)
    assert coordinator.wait_outcome(1, TIMEOUT)["committed"]
    sub.wait(1)
    assert sub.swap() == 1
    for (name, a), b in zip(trainer.state_dict().items(), infer.state_dict().values()):
        assert torch.equal(a, b), name
    sub.close()
    for p in pubs:
        p.close()
    coordinator.stop()


def test_copy_mode_keeps_the_models_addresses_and_converts_to_its_dtype(secret):
    trainer = make_model(0)
    infer = make_model(1).to(torch.bfloat16)
    addresses = [p.data_ptr() for p in infer.parameters()]
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=TIMEOUT)
    assert join_all(lambda: pub.register(trainer), lambda: sub.bind(infer, mode="copy")) == [None, None]
    for v in (3, 7):
        step(trainer, 0.1)
        pub.publish(v, wait=True)
        sub.wait(v)
        assert sub.swap() == v
        assert [p.data_ptr() for p in infer.parameters()] == addresses
        for (name, a), b in zip(trainer.state_dict().items(), infer.state_dict().values()):
            assert b.dtype == torch.bfloat16
            assert torch.equal(a.to(torch.bfloat16), b), name  # round to nearest even, as torch does
    sub.close()
    pub.close()


def test_tensors_bound_as_fp8_are_quantised_by_the_publisher_in_blocks(secret):
    from fp8_reference import quantise
    torch.manual_seed(0)
    trainer = {"proj.weight": torch.randn(256, 200, dtype=torch.bfloat16), "norm.weight": torch.randn(300)}
    infer = {"proj.weight": torch.zeros(256, 200, dtype=torch.float8_e4m3fn),
             "norm.weight": torch.zeros(300, dtype=torch.float8_e4m3fn)}
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=TIMEOUT)
    assert join_all(lambda: pub.register(trainer), lambda: sub.bind(infer)) == [None, None]
    assert sub.scales == {}
    for v in (1, 2):
        for t in trainer.values():
            t.mul_(1.5)
        pub.publish(v, wait=True)
        sub.wait(v)
        assert sub.swap() == v
        assert set(sub.scales) == set(trainer)
        for name, x in trainer.items():
            values, scales = quantise(x)
            assert infer[name].dtype == torch.float8_e4m3fn
            assert torch.equal(infer[name].view(torch.uint8), values), name
            assert torch.equal(sub.scales[name], scales), name
        with sub.pinned() as pinned:
            assert torch.equal(pinned.scales["proj.weight"], sub.scales["proj.weight"])
            assert list(pinned.scales["proj.weight"].shape) == [2, 2]
    sub.close()
    pub.close()


def test_tensor_parallel_sources_reshard_into_a_whole_model(secret):
    full = make_model(0)
    shards = []
    for r in range(2):
        sd = {}
        for name, t in full.state_dict().items():
            if name.startswith("0."):  # column-parallel: rows split, bias too
                sd[name] = t.chunk(2, dim=0)[r].clone()
            elif name == "2.weight":  # row-parallel: columns split
                sd[name] = t.chunk(2, dim=1)[r].clone()
            else:
                sd[name] = t.clone()
        shards.append(sd)
    layouts = [weightport.TensorParallel(r, 2, column=["0.*"], row=["2.weight"]) for r in range(2)]
    pubs = [weightport.Publisher(secret=secret, rank=0, world_size=2, transport="shm", timeout=TIMEOUT)]
    pubs.append(weightport.Publisher(pubs[0].coordinator, secret=secret, rank=1, world_size=2, transport="shm",
                                     timeout=TIMEOUT))
    infer = make_model(5)
    sub = weightport.Subscriber(pubs[0].coordinator, secret=secret, transport="shm", timeout=TIMEOUT)
    errors = join_all(lambda: pubs[0].register(shards[0], layouts[0]),
                      lambda: pubs[1].register(shards[1], layouts[1]), lambda: sub.bind(infer))
    assert errors == [None, None, None]
    for p in pubs:
        p.publish(1)
    for p in pubs:
        p.wait(1)
    sub.wait(1)
    sub.swap()
    for name, t in full.state_dict().items():
        assert torch.equal(infer.state_dict()[name], t), name
    for p in reversed(pubs):
        p.close()
    sub.close()


def test_rotating_keys_with_a_quorum_outlives_a_subscriber_that_leaves(secret):
    """rotate_keys: every version is followed by a move of every rank to new keys, and the models stay
    bit-exact; with quorum=1 the versions after one subscriber leaves commit to the other."""
    trainer, stays, leaves = make_model(0), make_model(1), make_model(2)
    pub = weightport.Publisher(secret=secret, transport="tcp", timeout=TIMEOUT, quorum=1, rotate_keys=True)
    subs = [weightport.Subscriber(pub.coordinator, secret=secret, rank=r, world_size=2, transport="tcp",
                                  timeout=TIMEOUT, rotate_keys=True) for r in range(2)]
    assert join_all(lambda: pub.register(trainer), lambda: subs[0].bind(stays),
                    lambda: subs[1].bind(leaves)) == [None, None, None]
    for v in range(1, 4):
        step(trainer, 0.01)
        pub.publish(v)
        report = pub.wait(v)
        assert report["committed"] and report["rekey_seconds"] > 0, report
        live = subs if v == 1 else subs[:1]
        for s, m in zip(live, (stays, leaves)):
            s.wait(v)
            assert s.swap() == v
            for (name, a), b in zip(trainer.state_dict().items(), m.state_dict().values()):
                assert torch.equal(a, b), f"version {v}: {name}"
        if v == 1:
            subs[1].close()
    assert report["dropped"] == ["dst rank 1 is lost"], report
    subs[0].close()
    pub.close()


def test_numpy_arrays_publish_and_a_pinned_version_stays_still(secret):
    w = np.arange(64, dtype=np.float32).reshape(8, 8)
    b = np.ones(8, dtype=np.float32)
    recv = {"w": np.zeros((8, 8), np.float32), "b": np.zeros(8, np.float32)}
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=TIMEOUT, pin_timeout=0.5)
    assert join_all(lambda: pub.register({"w": w, "b": b}), lambda: sub.bind(recv)) == [None, None]
    pub.publish(1, wait=True)
    sub.wait(1)
    with sub.pinned() as v1:
        held = v1.tensors["w"].copy()
        w += 1
        pub.publish(2, wait=True)  # lands in the other copy
        w += 1
        pub.publish(3)  # would land in version 1's copy: waits for the pin, then is aborted
        with pytest.raises(weightport.Unavailable, match="readers still hold version 1"):
            pub.wait(3)
        assert np.array_equal(v1.tensors["w"], held)
        assert v1.version == 1
    pub.publish(4, wait=True)
    sub.wait(4)
    assert sub.swap() == 4
    assert np.array_equal(recv["w"], w) and np.array_equal(recv["b"], b)
    sub.close()
    pub.close()


def test_layouts_that_disagree_are_refused_by_tensor_name(secret):
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=TIMEOUT)
    errors = join_all(lambda: pub.register({"w": torch.zeros(4, 4)}), lambda: sub.bind({"w": torch.zeros(4, 5)}))
    for e in errors:
        assert isinstance(e, weightport.PermissionDenied), e
        assert isinstance(e, PermissionError)
        assert "tensor 'w'" in str(e)
    pub.close()


def test_a_wrong_secret_is_refused(secret):
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=3.0)
    sub = weightport.Subscriber(pub.coordinator, secret=os.urandom(32), transport="shm", timeout=3.0)
    errors = join_all(lambda: pub.register({"w": torch.zeros(4)}), lambda: sub.bind({"w": torch.zeros(4)}))
    assert isinstance(errors[1], weightport.PermissionDenied), errors[1]
    assert isinstance(errors[0], weightport.Error)  # the publisher's rendezvous times out: no subscriber
    pub.close()


def test_misuse_gives_typed_errors(secret, tmp_path):
    with pytest.raises(weightport.InvalidArgument, match="at least 16"):
        weightport.Publisher(secret=b"short")
    with pytest.raises(ValueError):
        weightport.Publisher(secret=b"short")
    with pytest.raises(weightport.IoError, match="no-such-file"):
        weightport.Publisher(secret=str(tmp_path / "no-such-file"))
    pub = weightport.Publisher(secret=secret)
    with pytest.raises(weightport.FailedPrecondition, match="register"):
        pub.publish(1)
    with pytest.raises(TypeError, match="tensor 'x'"):
        pub.register({"x": [1, 2, 3]})
    with pytest.raises(ValueError, match="rank 2 is outside"):
        weightport.Subscriber(pub.coordinator, secret=secret, rank=2, world_size=2)
    with pytest.raises(ValueError, match="holds 4 of dim 0"):
        weightport.Sharded(1, 2, global_shapes={"w": [7, 2]}).slice_of("w", [4, 2])
    pub.close()


def test_every_call_on_a_closed_member_raises_instead_of_crashing(secret):
    trainer, infer = make_model(0), make_model(1)
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=TIMEOUT)
    assert join_all(lambda: pub.register(trainer), lambda: sub.bind(infer)) == [None, None]
    pub.publish(1)
    pub.wait(1)
    sub.wait(1)
    sub.close()
    pub.close()
    pub.close()  # idempotent
    calls = {"publish": lambda: pub.publish(2), "wait": lambda: pub.wait(1), "rollback": lambda: pub.rollback(1),
             "plan_json": pub.plan_json, "sub.wait": lambda: sub.wait(1), "swap": sub.swap,
             "live_version": lambda: sub.live_version, "pinned": lambda: sub.pinned().__enter__()}
    for name, call in calls.items():  # each was a SIGSEGV in the engine: the member had no rank left
        with pytest.raises(weightport.FailedPrecondition, match="(publisher|subscriber) was closed"):
            call()
        print(name, "raises")


def test_sharded_layout_matches_torch_chunk():
    for length in (7, 8, 1, 3):
        for parts in (2, 3, 4):
            chunks = torch.arange(length).chunk(parts)
            start = 0
            for r in range(parts):
                n = chunks[r].numel() if r < len(chunks) else 0
                if n == 0:
                    continue
                shape, s, l = weightport.Sharded(r, parts, global_shapes={"t": [length]}).slice_of("t", [n])
                assert (shape, s, l) == ([length], [start], [n])
                start += n


def test_every_public_call_has_a_docstring_and_the_stubs_ship():
    import inspect
    import pathlib

    missing = []
    for name in weightport.__all__:
        obj = getattr(weightport, name)
        if not inspect.getdoc(obj):
            missing.append(name)
        if inspect.isclass(obj) and not issubclass(obj, weightport.Error):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                    if not inspect.getdoc(member):
                        missing.append(f"{name}.{attr}")
    assert missing == []
    package = pathlib.Path(weightport.__file__).parent
    assert (package / "_core.pyi").is_file() and (package / "py.typed").is_file()


class DlpackOnly:
    """An array that offers nothing but the DLPack protocol."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_anything_with_dlpack_is_read_where_it_lies(secret):
    w = np.linspace(0, 1, 24, dtype=np.float32).reshape(4, 6)
    recv = {"w": torch.zeros(4, 6)}
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=TIMEOUT)
    assert join_all(lambda: pub.register({"w": DlpackOnly(w)}), lambda: sub.bind(recv, mode="copy")) == [None, None]
    for v in (1, 2):
        w *= 3  # the publisher reads the array itself (zero-copy), so this is what version v holds
        pub.publish(v, wait=True)
        sub.wait(v)
        sub.swap()
        assert np.array_equal(recv["w"].numpy(), w)
    sub.close()
    pub.close()


def test_federated_rounds_fold_the_weighted_mean_and_refuse_bad_input(secret):
    initial = np.linspace(-1, 1, 5000, dtype=np.float32)
    server = weightport.FedServer("127.0.0.1:0", secret=secret, initial=initial, clients=2, rounds=2,
                                  chunk_elements=1024)
    updates = {"a": (np.full(5000, 0.5, np.float32), 1.0), "b": (torch.full((5000,), -0.25), 3.0)}
    starts = {}

    def client(name):
        c = weightport.FedClient(server.address, secret=secret, name=name, encoding="f32", timeout=TIMEOUT)
        while (start := c.next_round()) is not None:
            starts.setdefault(name, []).append(start)
            c.send_update(updates[name][0], samples=updates[name][1])

    threads = [threading.Thread(target=client, args=(n,)) for n in updates]
    for t in threads:
        t.start()
    reports = server.run()
    for t in threads:
        t.join(TIMEOUT)
    assert [sorted(c["name"] for c in r["clients"] if c["folded"]) for r in reports] == [["a", "b"], ["a", "b"]]
    step = (0.5 * 1.0 + -0.25 * 3.0) / 4.0  # FedAvg of the two updates, weighted by samples
    np.testing.assert_allclose(server.global_model(), initial + 2 * step, atol=1e-6)
    # Clients start each round from the global model as bf16.
    np.testing.assert_allclose(starts["a"][1], (initial + step), atol=1e-2)
    with pytest.raises(weightport.InvalidArgument, match="encoding"):
        weightport.FedClient(server.address, secret=secret, name="x", encoding="int4")
    with pytest.raises(ValueError, match="late"):
        weightport.FedServer("127.0.0.1:0", secret=secret, initial=initial, clients=1, rounds=1, late="never")
