"""weightport.naming: rename rules (segment replacements, callables, UNWRAP), their errors, and a
publisher wrapped like DDP feeding a subscriber that holds the bare model."""

import json
import os
import subprocess

import pytest

from cli_procs import BIN, join_all

torch = pytest.importorskip("torch")
weightport = pytest.importorskip("weightport")
from weightport.naming import UNWRAP, Rename, as_rename, strip_wrappers  # noqa: E402

TIMEOUT = 30.0


@pytest.fixture
def secret():
    return os.urandom(32)


def test_a_prefix_replaces_whole_leading_segments_only():
    rule = Rename({"model.decoder": "decoder"})
    assert rule("model.decoder.fc.weight") == "decoder.fc.weight"
    assert rule("model.decoders.weight") == "model.decoders.weight"  # not part of a segment
    assert rule("x.model.decoder.weight") == "x.model.decoder.weight"  # not past the start
    assert rule("model.decoder") == "decoder"  # the whole name is a prefix of itself


def test_a_trailing_dot_is_optional_and_an_empty_replacement_removes():
    for old in ("module", "module."):
        for new in ("", "."):
            assert Rename({old: new})("module.fc.weight") == "fc.weight"
    assert Rename({"module.": "net."})("module.fc.weight") == "net.fc.weight"
    assert Rename({"module": "net"})("modules.fc") == "modules.fc"


def test_a_star_prefix_replaces_the_segments_anywhere():
    rule = Rename({"*._orig_mod": ""})
    assert rule("_orig_mod.a._orig_mod.b") == "a.b"
    assert rule("a.x_orig_mod.b") == "a.x_orig_mod.b"
    assert Rename({"*.attn.qkv": "self_attn.qkv_proj"})("layers.0.attn.qkv.weight") == \
        "layers.0.self_attn.qkv_proj.weight"
    assert Rename({"*.a.b": "c"})("a.b.a.b.a") == "c.c.a"  # left to right, no overlap


def test_replacements_apply_in_order_each_to_the_last_result():
    assert Rename({"a": "b", "b": "c"})("a.x") == "c.x"
    assert Rename({"b": "c", "a": "b"})("a.x") == "b.x"


def test_a_callable_maps_every_name_and_a_rename_wraps_a_rename():
    rule = Rename(str.upper)
    assert rule("fc.weight") == "FC.WEIGHT"
    assert Rename(rule)("w") == "W"
    assert as_rename(None) is None
    assert as_rename({"a": "b"})("a.w") == "b.w"
    assert as_rename(rule)("w") == "W"


def test_unwrap_strips_ddp_fsdp_checkpoint_and_compile_wrappers():
    cases = {
        "module.layer.weight": "layer.weight",  # DDP
        "_fsdp_wrapped_module.layers.0._fsdp_wrapped_module.mlp.weight": "layers.0.mlp.weight",  # FSDP v1
        "_orig_mod.layer.weight": "layer.weight",  # torch.compile
        "_orig_mod.module.layer.weight": "layer.weight",  # compile(DDP(model))
        "module._orig_mod.layer.weight": "layer.weight",  # DDP(compile(model))
        "layers.0._checkpoint_wrapped_module.attn.weight": "layers.0.attn.weight",
        "encoder.module.weight": "encoder.module.weight",  # an inner `module` is the model's own
        "layer.weight": "layer.weight",
    }
    for wrapped, bare in cases.items():
        assert UNWRAP(wrapped) == bare, wrapped
        assert strip_wrappers(wrapped) == bare, wrapped


def test_two_names_mapped_to_one_are_an_error_naming_both():
    with pytest.raises(ValueError, match="'module.fc.weight' and 'fc.weight' both map to 'fc.weight'"):
        UNWRAP.map_names(["module.fc.weight", "fc.weight"])
    with pytest.raises(ValueError, match="'a.w' and 'b.w' both map to 'w'"):
        Rename(lambda n: n.split(".")[-1]).map_names(["a.w", "b.w"])
    assert UNWRAP.map_names(["module.a", "module.b"]) == {"module.a": "a", "module.b": "b"}


def test_an_empty_or_non_string_result_is_an_error_naming_the_tensor():
    with pytest.raises(ValueError, match="tensor 'module': the rename rule maps it to an empty name"):
        UNWRAP("module")
    with pytest.raises(ValueError, match="tensor 'module'"):
        UNWRAP.map_names(["module.a", "module"])
    with pytest.raises(TypeError, match="tensor 'w': the rename rule returned NoneType"):
        Rename(lambda n: None)("w")


def test_bad_rules_are_refused_when_made():
    for old in ("", ".", "*.", "a..b", "a.*.b", "*.*"):
        with pytest.raises(ValueError, match="is not a name prefix"):
            Rename({old: "x"})
    with pytest.raises(TypeError, match="str -> str"):
        Rename({"a": None})
    with pytest.raises(TypeError, match="a dict or a callable"):
        Rename(42)
    with pytest.raises(TypeError, match="a dict or a callable"):
        weightport.Publisher(secret=os.urandom(32), serve=False, rename=42)


def test_the_offer_has_the_mapped_names_and_the_layout_sees_the_given_ones():
    from weightport._session import describe

    seen = []

    class Recording(weightport.Whole):
        def slice_of(self, name, shape):
            seen.append(name)
            return super().slice_of(name, shape)

    tensors = {"module.fc.weight": torch.zeros(2, 3), "module.fc.bias": torch.zeros(2)}
    bound, offer = describe(tensors, Recording(), 0, UNWRAP)
    assert seen == ["module.fc.weight", "module.fc.bias"]
    assert [(b.name, b.plan_name) for b in bound] == [("module.fc.weight", "fc.weight"),
                                                      ("module.fc.bias", "fc.bias")]
    placement = json.loads(offer)
    assert [t["name"] for t in placement["tensors"]] == ["fc.weight", "fc.bias"]
    assert [s["tensor"] for s in placement["ranks"][0]["shards"]] == ["fc.weight", "fc.bias"]


class Wrapped(torch.nn.Module):
    """Names its model's parameters as DistributedDataParallel does: ``module.<name>``."""

    def __init__(self, module):
        super().__init__()
        self.module = module


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def test_a_ddp_wrapped_publisher_feeds_a_bare_subscriber_with_unwrap(secret):
    trainer, infer = Wrapped(make_model(0)), make_model(1)
    assert next(iter(trainer.state_dict())) == "module.0.weight"
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT, rename=UNWRAP)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=TIMEOUT)
    assert join_all(lambda: pub.register(trainer), lambda: sub.bind(infer)) == [None, None]
    plan = json.loads(pub.plan_json())
    assert sorted(t["name"] for t in plan["tensors"]) == sorted(infer.state_dict())
    for v in (1, 2):
        with torch.no_grad():
            for p in trainer.parameters():
                p.add_(0.1 * torch.randn_like(p))
        pub.publish(v, wait=True)
        sub.wait(v)
        assert sub.swap() == v
        for name, t in infer.state_dict().items():
            assert torch.equal(t, trainer.state_dict()["module." + name]), name
    sub.close()
    pub.close()


def test_a_renamed_subscriber_keeps_its_own_names_in_pinned_versions(secret):
    trainer = {"fc.weight": torch.randn(4, 4), "fc.bias": torch.randn(4)}
    infer = {"_orig_mod.fc.weight": torch.zeros(4, 4), "_orig_mod.fc.bias": torch.zeros(4)}
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=TIMEOUT,
                                rename={"*._orig_mod": ""})
    assert join_all(lambda: pub.register(trainer), lambda: sub.bind(infer, mode="copy")) == [None, None]
    pub.publish(1, wait=True)
    sub.wait(1)
    with sub.pinned() as pinned:
        assert set(pinned.tensors) == set(infer)
        assert torch.equal(pinned.tensors["_orig_mod.fc.weight"], trainer["fc.weight"])
    sub.swap()
    assert torch.equal(infer["_orig_mod.fc.bias"], trainer["fc.bias"])
    sub.close()
    pub.close()


def test_without_a_rule_wrapped_names_do_not_match(secret):
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=5.0)
    sub = weightport.Subscriber(pub.coordinator, secret=secret, transport="shm", timeout=5.0)
    errors = join_all(lambda: pub.register({"module.w": torch.zeros(4)}), lambda: sub.bind({"w": torch.zeros(4)}))
    for e in errors:
        assert isinstance(e, weightport.Error), e
        assert "tensor 'w' held by dst rank 0 is not held by any source rank" in str(e)
    pub.close()


def test_a_collision_is_refused_before_joining(secret):
    pub = weightport.Publisher(secret=secret, transport="shm", timeout=TIMEOUT, rename=UNWRAP)
    with pytest.raises(ValueError, match="'module.w' and 'w' both map to 'w'"):
        pub.register({"module.w": torch.zeros(2), "w": torch.zeros(2)})
    with pytest.raises(weightport.FailedPrecondition, match="register"):
        pub.publish(1)  # nothing was joined
    pub.close()


def whole_placement(names):
    return {"tensors": [{"name": n, "dtype": "f32", "shape": [4, 4]} for n in names],
            "ranks": [{"rank": 0, "shards": [{"tensor": n, "start": [0, 0], "length": [4, 4]} for n in names]}]}


def test_plan_cli_renames_a_wrapped_placement(tmp_path):
    src, dst = tmp_path / "ddp.json", tmp_path / "bare.json"
    src.write_text(json.dumps(whole_placement(["module._orig_mod.fc.weight", "module._orig_mod.out.weight"])))
    dst.write_text(json.dumps(whole_placement(["fc.weight", "out.weight"])))

    def plan(*args):
        return subprocess.run([str(BIN), "plan", "--src", src, "--dst", dst, "--json", *args], capture_output=True,
                              text=True, timeout=60)

    r = plan()
    assert r.returncode != 0 and "tensor 'fc.weight' held by dst rank 0 is not held by any source rank" in r.stderr
    r = plan("--rename", "module.=", "--rename", "*._orig_mod=")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tensors"] == 2
    r = plan("--rename", "module._orig_mod.fc=out", "--rename", "module._orig_mod=")
    assert r.returncode != 0
    assert ("tensors 'module._orig_mod.fc.weight' and 'module._orig_mod.out.weight' are both renamed "
            "'out.weight'") in r.stderr
    r = plan("--rename", "module")
    assert r.returncode != 0 and "rename 'module': expected FROM=TO" in r.stderr
