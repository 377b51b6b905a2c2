"""The vLLM backend's shadow layers without vLLM: box copies into fresh parameters (host to device
on a GPU), and the swap that keeps live tensors' addresses where the layout stayed and replaces
what post-processing changed. Runs on the CPU here and on the GPU in scripts/gpu-check."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from weightport.vllm.placement import Run  # noqa: E402
from weightport.vllm.shadow import copy_runs, shadow_of, swap_in  # noqa: E402

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
