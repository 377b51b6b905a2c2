"""Shadow layers: a version built beside the live model, then swapped in between engine steps.

Needs only torch (each engine's post-processing lives with its backend), so the swap is tested
without a serving engine and on a GPU by ``scripts/gpu-check``.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable

import torch


def copy_runs(runs, boxes, received, fresh) -> None:
    """Fills the fresh parameters from the received boxes: each run copies one box of a checkpoint
    tensor (as received: this worker's box of it, on the host) into one box of a parameter (on the
    worker's device: the host-to-device copy happens here, off the serving path)."""
    for r in runs:
        _, start, _ = boxes[r.tensor]
        src = received[r.tensor][tuple(slice(s - b, s - b + n) for s, b, n in zip(r.tstart, start, r.tlen))]
        dst = fresh[(r.layer, r.param)].data[tuple(slice(s, s + n) for s, n in zip(r.pstart, r.plen))]
        dst.copy_(src.reshape(dst.shape), non_blocking=dst.device.type != "cpu")


def shadow_of(layer: torch.nn.Module) -> torch.nn.Module:
    """A copy of `layer` sharing everything but its tensor tables and its quantization method, which
    is processed as on a first load: vLLM's fused-MoE method, once it has a kernel, treats a reload
    as an in-place update and skips the experts' own processing (the CPU kernels' weight prepacking),
    which leaves reloaded CPU MoE weights unpacked. The shadow's method starts without one."""
    shadow = copy.copy(layer)
    shadow._parameters = dict(layer._parameters)
    shadow._buffers = dict(layer._buffers)
    method = getattr(layer, "quant_method", None)
    if method is not None:
        method = copy.copy(method)
        if getattr(method, "moe_kernel", None) is not None:
            method.moe_kernel = None
        shadow.quant_method = method
    return shadow


def _copies_into(cur: torch.Tensor | None, t: torch.Tensor, in_place: bool = True) -> bool:
    """Whether swap_in copies `t` into the live tensor `cur` (the layout stayed, and addresses must
    stay) or replaces it."""
    return (in_place and cur is not None and cur.numel() > 0 and cur.shape == t.shape
            and cur.dtype == t.dtype and cur.device == t.device)


def snapshot(live: torch.nn.Module, shadow: torch.nn.Module, memo: dict[int, torch.Tensor],
             in_place: bool = True) -> torch.nn.Module:
    """The state of `live` that swapping `shadow` in overwrites, as a layer swap_in can put back:
    clones of the tensors the swap copies into, the very objects of those it replaces, and every
    attribute as it is now (packed GEMM handles included). `memo`: clones already made, by the id
    of the live tensor (tied parameters are cloned once). `in_place` as for swap_in."""
    kept = copy.copy(live)
    for table in ("_parameters", "_buffers"):
        live_table, shadow_table = getattr(live, table), getattr(shadow, table)
        saved = dict(live_table)
        for name, t in shadow_table.items():
            cur = live_table.get(name)
            if t is not None and cur is not t and _copies_into(cur, t, in_place):
                if id(cur) not in memo:
                    memo[id(cur)] = cur.detach().clone()
                saved[name] = memo[id(cur)]
        setattr(kept, table, saved)
    return kept


def swap_in(live: torch.nn.Module, shadow: torch.nn.Module, copied: set[int],
            in_place: bool = True) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """Makes `live` compute with `shadow`'s state. With `in_place` a tensor whose layout did not
    change is copied into the live one (its address stays: CUDA graphs and compiled code that
    cached it hold it, as vLLM's own reload keeps it); any other is replaced, and so are the
    attributes post-processing set (packed GEMM handles). Without `in_place` (a model run eagerly,
    where nothing caches an address) every tensor is replaced: the pause is a few assignments.
    `copied`: tensors already copied (tied parameters are copied once). Returns, per tensor
    replaced, (the shadow's tensor now live, the live tensor it replaced or None)."""
    replaced = []
    for table in ("_parameters", "_buffers"):
        live_table, shadow_table = getattr(live, table), getattr(shadow, table)
        for name, t in shadow_table.items():
            cur = live_table.get(name)
            if t is None or cur is t:
                continue
            if _copies_into(cur, t, in_place):
                if id(t) not in copied:
                    cur.data.copy_(t)
                    copied.add(id(t))
            else:
                live_table[name] = t
                replaced.append((t, cur))
    state = live.__dict__
    for key, value in shadow.__dict__.items():
        if key not in ("_parameters", "_buffers") and state.get(key) is not value:
            state[key] = value
    return replaced


def retie(model: torch.nn.Module, replaced: list[tuple[torch.Tensor, torch.Tensor | None]]) -> None:
    """Points every other reference the model's modules hold to a replaced tensor at its successor:
    a parameter tied into a module the shadows do not cover (an output head sharing the embedding)
    keeps computing with the version that is live."""
    successor = {id(old): new for new, old in replaced if old is not None}
    if not successor:
        return
    for module in model.modules():
        for table in (module._parameters, module._buffers):
            for name, t in table.items():
                if t is not None and id(t) in successor:
                    table[name] = successor[id(t)]


def _owns_storage(t: torch.Tensor) -> bool:
    """Whether `t` is the whole of its storage (no view of a larger tensor another module holds)."""
    return (t.is_contiguous() and t.storage_offset() == 0
            and t.untyped_storage().nbytes() == t.numel() * t.element_size())


class FreshSet:
    """The tensors each version is built into, in the parameters' loading layout, kept from one
    version to the next: allocating a model's worth of memory per version and faulting its pages in
    cost more than the copies into it, and varied with the host's memory pressure. One set: the
    worker builds a version only while no swap is reading the set. A tensor a swap made live (its
    layout differed from the live one's) leaves the set; the next build allocates it again.

    `templates`: (layer, parameter) -> its loading layout (``group``: tied parameters share one
    tensor; ``zero``: the loader wrote zeros where no box lands, so it starts from zeros).
    `make(template, layer)` allocates one bound to a shadow layer, `rebind(tensor, template, layer)`
    binds a kept one to the next version's shadow layer (its weight loaders refer to the layer)."""

    def __init__(self, templates: dict[tuple[str, str], Any],
                 make: Callable[[Any, torch.nn.Module], torch.Tensor],
                 rebind: Callable[[torch.Tensor, Any, torch.nn.Module], None]):
        self.templates = templates
        self._make, self._rebind = make, rebind
        self._by_group: dict[Any, torch.Tensor] = {}

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._by_group.values())

    def prepare(self, layers: dict[str, torch.nn.Module]) -> float:
        """Allocates every tensor and touches its pages, before the first version; returns seconds."""
        t0 = time.perf_counter()
        for (lname, _), tpl in self.templates.items():
            if tpl.group not in self._by_group:
                self._by_group[tpl.group] = self._make(tpl, layers[lname]).zero_()
        return time.perf_counter() - t0

    def shadows(self, layers: dict[str, torch.nn.Module]) -> tuple[dict[str, torch.nn.Module],
                                                                   dict[tuple[str, str], torch.Tensor], float]:
        """Shadow layers of `layers` holding the set's tensors, ready to be filled: (shadows by layer,
        tensors by (layer, parameter), seconds spent allocating tensors the set did not hold)."""
        shadows: dict[str, torch.nn.Module] = {}
        fresh: dict[tuple[str, str], torch.Tensor] = {}
        bound: set[Any] = set()
        alloc_s = 0.0
        for (lname, pname), tpl in self.templates.items():
            shadow = shadows.get(lname)
            if shadow is None:
                shadow = shadows[lname] = shadow_of(layers[lname])
            t = self._by_group.get(tpl.group)
            if t is None:
                t0 = time.perf_counter()
                t = self._by_group[tpl.group] = self._make(tpl, shadow)
                alloc_s += time.perf_counter() - t0
            elif tpl.group not in bound:
                self._rebind(t, tpl, shadow)
                if tpl.zero:  # processing may have written where no box lands
                    t.zero_()
            bound.add(tpl.group)
            shadow._parameters[pname] = t
            fresh[(lname, pname)] = t
        return shadows, fresh, alloc_s

    def release(self, replaced: list[tuple[torch.Tensor, torch.Tensor | None]], recycle: bool = False) -> None:
        """A swap made these set tensors live (pairs of (set tensor now live, the live tensor it
        replaced), or views of them): each leaves the set. With `recycle` the tensor it replaced,
        where it has the same layout and nothing else holds it, takes its place, so the next
        build needs no new memory (two sets alternating)."""
        by_storage = {}
        for new, old in replaced:
            if new.numel() > 0:
                by_storage.setdefault(new.untyped_storage().data_ptr(), old)
        for group, t in list(self._by_group.items()):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in by_storage:
                continue
            old = by_storage[ptr]
            if (recycle and old is not None and old.shape == t.shape and old.dtype == t.dtype
                    and old.device == t.device and type(old) is type(t) and _owns_storage(old)):
                self._by_group[group] = old
            else:
                del self._by_group[group]
