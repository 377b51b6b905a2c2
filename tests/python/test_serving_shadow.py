"""The serving backends' shadow layers without an engine: box copies into fresh parameters (host to device
on a GPU), and the swap that keeps live tensors' addresses where the layout stayed and replaces
what post-processing changed. Runs on the CPU here and on the GPU in scripts/gpu-check."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from weightport.serving.placement import Run  # noqa: E402
from weightport.serving.shadow import FreshSet, copy_runs, retie, shadow_of, snapshot, swap_in  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device here (scripts/gpu-check runs this on one)"))]


class Packed(torch.nn.Module):
    """A layer whose processing replaces its weight with a packed copy held in a closure (what vLLM's
    CPU GEMM dispatch does) and keeps a bias of the same layout."""

    def __init__(self, device):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(4, 3, device=device), requires_grad=False)
        self.bias = torch.nn.Parameter(torch.zeros(4, device=device), requires_grad=False)
        self.process()

    def process(self):
        packed = self.weight.detach().t().contiguous()
        self.kernel = lambda x, _p=packed: x @ _p
        self.weight = torch.nn.Parameter(torch.empty(0, device=self.weight.device), requires_grad=False)

    def forward(self, x):
        return self.kernel(x) + self.bias


@pytest.mark.parametrize("device", DEVICES)
def test_fused_rows_land_in_a_shadow_and_swap_in_without_touching_the_live_version(device):
    live = Packed(device)
    bias_before = live.bias
    received = {"q": torch.arange(6.0).view(2, 3), "k": 10 + torch.arange(6.0).view(2, 3),
                "b": torch.tensor([1.0, 2.0, 3.0, 4.0])}
    boxes = {"q": ([2, 3], [0, 0], [2, 3]), "k": ([2, 3], [0, 0], [2, 3]), "b": ([4], [0], [4])}
    runs = [Run("l", "weight", (0, 0), (2, 3), "q", (0, 0), (2, 3)),
            Run("l", "weight", (2, 0), (2, 3), "k", (0, 0), (2, 3)),
            Run("l", "bias", (0,), (4,), "b", (0,), (4,))]
    shadow = shadow_of(live)
    fresh = {("l", "weight"): torch.zeros(4, 3, device=device), ("l", "bias"): torch.zeros(4, device=device)}
    shadow._parameters["weight"] = fresh[("l", "weight")]
    shadow._parameters["bias"] = fresh[("l", "bias")]
    copy_runs(runs, boxes, received, fresh)
    shadow.process()
    x = torch.ones(1, 3, device=device)
    assert torch.equal(live(x), torch.zeros(1, 4, device=device)), "the live layer changed before the swap"

    swap_in(live, shadow, set())
    expect = torch.cat([received["q"], received["k"]]).to(device) @ torch.ones(3, device=device) \
        + received["b"].to(device)
    assert torch.equal(live(x)[0], expect)
    assert live.bias is bias_before, "a tensor whose layout stayed must keep its address"
    assert torch.equal(live.bias, received["b"].to(device))


def test_tied_parameters_are_copied_once():
    a, b = torch.nn.Linear(2, 2, bias=False), torch.nn.Linear(2, 2, bias=False)
    b.weight = a.weight  # tied, like embeddings and lm_head
    new = torch.nn.Parameter(torch.full((2, 2), 7.0), requires_grad=False)
    copied: set[int] = set()
    for layer in (a, b):
        shadow = shadow_of(layer)
        shadow._parameters["weight"] = new
        swap_in(layer, shadow, copied)
    assert a.weight is b.weight and torch.equal(a.weight, new)
    assert copied == {id(new)}


class Template:
    """What FreshSet reads of a parameter's loading layout."""

    def __init__(self, shape, group, zero=False):
        self.shape, self.group, self.zero = shape, group, zero


def fresh_set(templates):
    made, bound = [], []

    def make(tpl, layer):
        made.append(layer)
        t = torch.zeros(tpl.shape) if tpl.zero else torch.empty(tpl.shape)
        return torch.nn.Parameter(t, requires_grad=False)  # as vLLM's parameters are

    def rebind(t, tpl, layer):
        bound.append(layer)

    return FreshSet(templates, make, rebind), made, bound


def test_versions_are_built_into_the_same_tensors_rebound_to_each_versions_shadows():
    live = {"a": Packed("cpu"), "b": torch.nn.Linear(4, 4, bias=False)}
    live["b"].weight.requires_grad_(False)
    templates = {("a", "bias"): Template((4,), "ab"), ("b", "weight"): Template((4, 4), "bw", zero=True)}
    fs, made, bound = fresh_set(templates)
    fs.prepare(live)
    assert len(made) == 2 and fs.nbytes == (4 + 16) * 4
    first, fresh, alloc_s = fs.shadows(live)
    assert alloc_s == 0.0, "prepare allocated everything"
    fresh[("b", "weight")][0, 0] = 5.0  # processing wrote where no box lands
    second, fresh2, _ = fs.shadows(live)
    assert all(fresh2[k] is fresh[k] for k in fresh), "the same memory, version after version"
    assert second["a"] is not first["a"], "each version has its own shadow layers"
    assert bound == [first["a"], first["b"], second["a"], second["b"]], "bound to each version's shadows"
    assert torch.equal(fresh2[("b", "weight")], torch.zeros(4, 4)), "a zero-filled layout starts from zeros again"
    assert fresh2[("a", "bias")] is second["a"]._parameters["bias"]


def test_a_tensor_a_swap_made_live_leaves_the_set():
    live = {"b": torch.nn.Linear(4, 4, bias=False)}
    fs, made, _ = fresh_set({("b", "weight"): Template((2, 8), "bw")})  # a layout the live one lacks
    fs.prepare(live)
    shadows, fresh, _ = fs.shadows(live)
    replaced = swap_in(live["b"], shadows["b"], set())
    assert [new for new, _ in replaced] == [fresh[("b", "weight")]] and live["b"].weight is fresh[("b", "weight")]
    fs.release(replaced, recycle=True)  # the replaced live tensor has another layout: not recycled
    _, fresh2, _ = fs.shadows(live)
    assert len(made) == 2 and fresh2[("b", "weight")] is not live["b"].weight, "live memory is never refilled"
    copied_only = {"c": torch.nn.Linear(4, 4, bias=False)}
    fs2, _, _ = fresh_set({("c", "weight"): Template((4, 4), "cw")})
    fs2.prepare(copied_only)
    shadows, fresh, _ = fs2.shadows(copied_only)
    assert swap_in(copied_only["c"], shadows["c"], set()) == [], "a same-layout tensor is copied, not adopted"


def test_an_eager_swap_replaces_and_the_set_alternates_with_the_live_tensors():
    live = {"e": torch.nn.Embedding(4, 2), "head": torch.nn.Linear(2, 4, bias=False)}
    model = torch.nn.ModuleDict(live)
    live["e"].weight.requires_grad_(False)
    live["head"].weight = live["e"].weight  # tied outside the shadows (no template for the head)
    first_live = live["e"].weight
    fs, made, _ = fresh_set({("e", "weight"): Template((4, 2), "ew")})
    fs.prepare(live)
    previous = first_live
    for version in (1.0, 2.0, 3.0):
        shadows, fresh, alloc_s = fs.shadows(live)
        assert version == 1.0 or fresh[("e", "weight")] is previous, "built into the tensor the last swap replaced"
        building = fresh[("e", "weight")]
        assert building is not live["e"].weight, "a build never writes the live tensor"
        building.fill_(version)
        replaced = swap_in(live["e"], shadows["e"], set(), in_place=False)
        retie(model, replaced)
        assert live["e"].weight is building, "replaced, not copied into"
        assert live["head"].weight is building, "the tie outside the shadows follows the swap"
        assert torch.equal(live["head"].weight, torch.full((4, 2), version))
        fs.release(replaced, recycle=True)
        assert alloc_s == 0.0 and len(made) == 1, "two tensors alternate: nothing allocated per version"
        previous = replaced[0][1]


def test_a_replaced_tensor_that_is_a_view_or_kept_is_not_built_into():
    base = torch.zeros(8, 2)
    live = {"e": torch.nn.Embedding(4, 2)}
    live["e"].weight = torch.nn.Parameter(base[:4], requires_grad=False)  # a view: others may read base
    fs, made, _ = fresh_set({("e", "weight"): Template((4, 2), "ew")})
    fs.prepare(live)
    shadows, _, _ = fs.shadows(live)
    fs.release(swap_in(live["e"], shadows["e"], set(), in_place=False), recycle=True)
    fs.shadows(live)
    assert len(made) == 2, "a view is not recycled: the set allocates again"
    shadows, _, _ = fs.shadows(live)
    fs.release(swap_in(live["e"], shadows["e"], set(), in_place=False), recycle=False)  # kept
    fs.shadows(live)
    assert len(made) == 3, "a replaced tensor a kept version holds is not recycled"


def test_a_snapshot_taken_at_the_swap_puts_the_replaced_version_back():
    live = Packed("cpu")
    live.bias.data.fill_(1.0)
    bias_address, x = live.bias.data_ptr(), torch.ones(1, 3)
    before = live(x)
    shadow = shadow_of(live)
    shadow._parameters["weight"] = torch.full((4, 3), 2.0)
    shadow._parameters["bias"] = torch.full((4,), 3.0)
    shadow.process()
    kept = snapshot(live, shadow, {})
    swap_in(live, shadow, set())
    assert not torch.equal(live(x), before)
    assert torch.equal(kept.bias, torch.ones(4)), "the copied-into tensor was cloned before the copy"
    swap_in(live, kept, set())
    assert torch.equal(live(x), before), "the packed kernel and the bias of the version before"
    assert live.bias.data_ptr() == bias_address, "a rollback keeps live addresses too"
