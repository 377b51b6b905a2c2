"""Where each checkpoint tensor lands in a serving engine's model, learned from the model's own loader.

A serving engine's parameters are not the checkpoint's: q, k and v rows are fused into ``qkv_proj``,
gate and up into ``gate_up_proj``, experts are stacked into ``w13``/``w2``, vocabularies are padded,
embeddings tied, and each tensor-parallel worker holds a slice. Rather than a table per architecture,
this runs the model's ``load_weights`` on one checkpoint tensor at a time, once per dimension of it,
*tagged* -- float32 values ``index + 1`` along that dimension -- into float32 stand-ins of the
parameters in their loading layout (before the engine's post-processing repacks them). Reading the
stand-ins back says, element by element, which element of the tensor the loader put there. Wherever
that is a box of the tensor copied into a box of the parameter in the same dimension order (TP
slices, fused rows, stacked experts, padded vocabularies), it becomes a :class:`Run` that needs no
loader at update time; anything else (a loader that permutes or scales) is replayed through the
model's own weight loader with the whole tensor (a :class:`LoaderCall`, counted as a fallback).

The same dry run refuses, before any byte moves, a checkpoint name the model does not have and a
shape the loader disagrees with, naming the tensor and the parameter. Its memory is bounded by the
largest checkpoint tensor, not the model (:mod:`.dry_run`). What differs between engines (vLLM,
SGLang) is in :class:`LoaderHooks`: where a parameter's loading layout is recorded, how a fresh
tensor's weight loader is bound to a layer, and the loader of a parameter without one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .dry_run import DryRunError, Reading, Recorder, _Call, tagged

SKIP_PARAMS = {"_expert_map", "expert_mask", "expert_global_to_physical", "expert_physical_to_global",
               "expert_local_to_global"}


class PlacementError(ValueError):
    """The checkpoint does not fit the engine's model (names the tensor and the parameter)."""


@dataclass(frozen=True)
class TensorMeta:
    name: str
    shape: tuple[int, ...]
    dtype: str  # weightport dtype name of what the trainer holds ("f32", "bf16", ...)


@dataclass
class Run:
    """``param[pstart : pstart + plen]`` (in the parameter's dims) = ``tensor[tstart : tstart + tlen]``.
    The parameter box has the tensor box's lengths in the same order, plus singleton dims."""

    layer: str
    param: str
    pstart: tuple[int, ...]
    plen: tuple[int, ...]
    tensor: str
    tstart: tuple[int, ...]
    tlen: tuple[int, ...]


@dataclass
class LoaderCall:
    """One call of a parameter's weight loader, to replay with the whole tensor (the fallback)."""

    layer: str
    param: str
    tensor: str
    loader: Any
    param_arg: str  # the loader's argument names for the parameter and the loaded tensor
    tensor_arg: str
    arguments: dict[str, Any]  # every other bound argument (shard ids, expert ids...)


@dataclass
class ParamTemplate:
    """A parameter in its loading layout: shape, dtype, class and attributes (weight loader...)."""

    layer: str
    name: str
    like: torch.Tensor  # meta or live tensor whose class and __dict__ a fresh one copies
    shape: tuple[int, ...]
    dtype: torch.dtype
    group: Any = None  # parameters tied to one tensor (embeddings and lm_head) share a group
    zero: bool = False  # some element holds no tensor's value (padding zeroed or left alone): start from zeros


@dataclass
class ModelPlacement:
    boxes: dict[str, tuple[list[int], list[int], list[int]]]  # tensor -> (shape, start, length)
    dtypes: dict[str, torch.dtype]  # tensor -> the dtype of the parameter it lands in
    runs: list[Run]
    fallback: list[LoaderCall]
    templates: dict[tuple[str, str], ParamTemplate]  # (layer, param) -> its loading layout
    unused: list[str] = field(default_factory=list)  # consumed by the loader, written nowhere
    load_s: float = 0.0  # the dry run's loader passes, and reading the stand-ins back
    read_s: float = 0.0

    @property
    def layers(self) -> list[str]:
        return sorted({layer for layer, _ in self.templates})

    def summary(self) -> str:
        return (f"(loader passes {self.load_s:.2f} s, reading them {self.read_s:.2f} s) "
                f"{len(self.boxes)} checkpoint tensors into {len(self.templates)} parameters of "
                f"{len(self.layers)} layers: {len(self.runs)} direct copies, {len(self.fallback)} "
                f"through the model's weight loader, {len(self.unused)} unused ({', '.join(self.unused[:4])})")


@dataclass(frozen=True)
class LoaderHooks:
    """What the dry run and the build need from one serving engine.

    ``loading_layouts(layer)``: parameter name -> a (meta) tensor of its loading layout, for the
    parameters the engine's post-processing replaced (the live tensor is the layout of the others).
    ``bind(t, template, layer)``: gives `t` the template's attributes with its weight loaders bound to
    `layer` (a shadow of the live one). ``default_loader``: the loader of a parameter without one.
    ``name``: the engine, in error messages."""

    loading_layouts: Callable[[torch.nn.Module], dict[str, torch.Tensor]]
    bind: Callable[[torch.Tensor, "ParamTemplate", torch.nn.Module], torch.Tensor]
    default_loader: Callable[..., Any]
    name: str


def _templates(model: torch.nn.Module, hooks: LoaderHooks) -> dict[tuple[str, str], ParamTemplate]:
    """Every loadable parameter in its loading layout: the engine's recorded pre-processing layout
    where there is one (post-processing may have replaced the live tensor), else the live tensor."""
    out = {}
    for lname, layer in model.named_modules():
        restore = hooks.loading_layouts(layer)
        for pname, live in layer.named_parameters(recurse=False):
            if pname in SKIP_PARAMS:
                continue
            like = restore.get(pname, live)
            group = id(live) if live.numel() > 0 else (lname, pname)  # tied: one live Parameter
            out[(lname, pname)] = ParamTemplate(lname, pname, like, tuple(like.shape), like.dtype, group)
        for pname, like in restore.items():
            if (lname, pname) not in out and pname not in SKIP_PARAMS:
                out[(lname, pname)] = ParamTemplate(lname, pname, like, tuple(like.shape), like.dtype,
                                                    (lname, pname))
    return out


def fresh_tensor(template: ParamTemplate, layer: torch.nn.Module, hooks: LoaderHooks,
                 device: torch.device | str = "cpu", fill: float | None = None) -> torch.Tensor:
    """A new tensor of the template's layout with its class and attributes (weight loaders bound to
    `layer`), the way an engine materializes a layer for reloading."""
    t = (torch.full(template.shape, fill, dtype=template.dtype, device=device) if fill is not None
         else torch.empty(template.shape, dtype=template.dtype, device=device))
    return as_parameter(t, template, layer, hooks)


def as_parameter(t: torch.Tensor, template: ParamTemplate, layer: torch.nn.Module,
                 hooks: LoaderHooks) -> torch.Tensor:
    """`t` (of the template's shape) made a parameter like the template's: its class, no grad, its
    attributes with the weight loaders bound to `layer`."""
    t.__class__ = template.like.__class__
    t.requires_grad_(False)
    return hooks.bind(t, template, layer)


def _bounding_box(mask: torch.Tensor) -> list[tuple[int, int]]:
    """(start, length) per dim of the smallest box holding every True of `mask`."""
    out = []
    for k in range(mask.dim()):
        along = mask.movedim(k, 0).flatten(1).any(1) if mask.dim() > 1 else mask
        nz = torch.nonzero(along).flatten()
        out.append((int(nz[0]), int(nz[-1]) - int(nz[0]) + 1))
    return out


def _split(idx: list[torch.Tensor], lens: list[int], limit: int = 4096) -> list[tuple[list[int], list[int]]] | None:
    """Cuts a box wherever the source index stops advancing the way it did at the box's start
    (fused shards of one tensor after a tensor-parallel slice: gate rows then up rows); returns the
    sub-boxes as (start, lengths) relative to the box, or None past `limit` of them."""
    segments = []
    for k, n in enumerate(lens):
        cuts = torch.zeros(max(n - 1, 0), dtype=torch.bool)
        for values in idx:
            if n > 1:
                step = values.diff(dim=k)
                cuts |= (step != step.narrow(k, 0, 1)).movedim(k, 0).flatten(1).any(1) \
                    if step.dim() > 1 else (step != step[0])
        bounds = [0] + [int(j) + 1 for j in torch.nonzero(cuts).flatten()] + [n]
        segments.append([(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])])
    count = 1
    for seg in segments:
        count *= len(seg)
    if count > limit:
        return None
    boxes = [([], [])]
    for seg in segments:
        boxes = [(s + [lo], l + [n]) for s, l in boxes for lo, n in seg]
    return boxes


def _affine(idx: list[torch.Tensor], lens: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The tensor box (start, lengths) a parameter box copies, if each tensor dim runs along its own
    parameter dim in order (the others being singletons); None otherwise."""
    tstart, tlen, axes = [], [], []
    for values in idx:
        lo, hi = int(values.min()), int(values.max())
        tstart.append(lo)
        tlen.append(hi - lo + 1)
        if hi == lo:
            continue
        found = -1
        for k, n in enumerate(lens):
            if n == hi - lo + 1 and k not in axes:
                shape = [1] * len(lens)
                shape[k] = n
                if torch.equal(values, (lo + torch.arange(n, dtype=values.dtype)).view(shape).expand(lens)):
                    found = k
                    break
        if found < 0 or (axes and found < axes[-1]):
            return None
        axes.append(found)
    if any(n != 1 for k, n in enumerate(lens) if k not in axes):
        return None
    return tuple(tstart), tuple(tlen)


def _decompose(reading: Reading, ndim: int):
    """One parameter's reading after a tensor's passes -> (runs as (pstart, plen, tstart, tlen),
    whether some of the tensor landed there that no run expresses, how many elements of the
    parameter hold the tensor's values)."""
    mask = reading.idx[0] >= 0
    written = int(torch.count_nonzero(mask))
    if written == 0:
        return [], reading.computed, 0
    if reading.computed:  # the loader computed what it wrote: only the loader can write it again
        return [], True, written
    if written == mask.numel():  # the whole parameter: no box to find (the common case)
        box = [(0, n) for n in mask.shape]
    else:
        box = _bounding_box(mask)
    region = tuple(slice(s, s + n) for s, n in box)
    lens = [n for _, n in box]
    if written != math.prod(lens):  # interleaved with another tensor's, or scattered
        return [], True, written
    del mask
    idx = [reading.idx[d][region] for d in range(ndim)]
    mapped = _affine(idx, lens)  # one box copy: no need to look for cuts
    if mapped is not None:
        return [(tuple(b[0] for b in box), tuple(lens), *mapped)], False, written
    subs = _split(idx, lens)
    if subs is None:
        return [], True, written
    runs = []
    for rel, sub_lens in subs:
        sub = tuple(slice(s, s + n) for s, n in zip(rel, sub_lens))
        mapped = _affine([v[sub] for v in idx], sub_lens)
        if mapped is None:
            return [], True, written
        runs.append((tuple(b[0] + r for b, r in zip(box, rel)), tuple(sub_lens), *mapped))
    return runs, False, written


def learn_placement(model: torch.nn.Module, metas: list[TensorMeta], hooks: LoaderHooks) -> ModelPlacement:
    """Runs the dry run (``load_weights`` once per dimension of each checkpoint tensor, one tensor at
    a time) and returns the placement; raises :class:`PlacementError` naming the tensor and the
    parameter the model's loader refused."""
    templates = _templates(model, hooks)
    rec = Recorder(model, templates, lambda t, tpl, layer: as_parameter(t, tpl, layer, hooks),
                   hooks.default_loader)
    keys_of: dict[Any, list[tuple[str, str]]] = {}
    for key, t in templates.items():
        keys_of.setdefault(t.group, []).append(key)
    runs, fallback_keys, used, calls = [], set(), set(), []
    written: dict[Any, int] = {}  # elements holding a tensor's value, per stand-in, over all tensors
    load_s = read_s = 0.0
    rec.install()
    try:
        for tid, meta in enumerate(metas):
            readings: dict[Any, Reading] = {}
            wrote: set[Any] = set()
            for dim in range(max(len(meta.shape), 1)):
                t0 = time.perf_counter()
                rec.touched.clear()
                rec.calls.clear()
                progress: dict[str, Any] = {"tensor": meta.name}
                rec.progress = progress
                try:
                    with torch.no_grad():
                        model.load_weights(tagged(meta, tid, dim, progress))
                except DryRunError as e:
                    raise PlacementError(str(e)) from e
                except Exception as e:  # the model's loader refused this checkpoint: say which tensor
                    where = f" into parameter '{rec.current_param}'" if rec.current_param else ""
                    raise PlacementError(f"checkpoint tensor '{meta.name}'{where}: {hooks.name}'s "
                                         f"{type(model).__name__}.load_weights refused it: "
                                         f"{type(e).__name__}: {e}") from e
                progress["given"] = None  # a loader that stopped early leaves the generator holding it
                t1 = time.perf_counter()
                if dim == 0:
                    calls += rec.calls
                    wrote = set(rec.touched)
                    if not rec.calls:  # it reached no wrapped loader: the model wrote it (or skipped it)
                        wrote |= rec.written_elsewhere()
                for g in wrote:
                    readings[g] = rec.read(g, readings.get(g))
                rec.clear(rec.touched - wrote)
                load_s += t1 - t0
                read_s += time.perf_counter() - t1
            t1 = time.perf_counter()
            for g, reading in readings.items():
                found, failed, count = _decompose(reading, len(meta.shape))
                if not found and not failed:
                    continue
                keys = keys_of[g]
                used.update(keys)
                written[g] = written.get(g, 0) + count
                lname, pname = keys[0]  # tied twins share the tensor: written once, through the first
                runs += [Run(lname, pname, ps, pl, meta.name, ts, tl) for ps, pl, ts, tl in found]
                if failed:
                    fallback_keys.add((lname, pname, meta.name))
            del readings
            read_s += time.perf_counter() - t1
    finally:
        rec.remove()
    for key in used:
        t = templates[key]
        t.zero |= written[t.group] < math.prod(t.shape)
    fallback = _fallback_calls(calls, fallback_keys, metas)
    return _placement(metas, templates, runs, fallback, used, load_s, read_s)


def _placement(metas, templates, runs, fallback, used, load_s, read_s) -> ModelPlacement:
    """The boxes each checkpoint tensor is needed in, from its runs and replayed loader calls."""
    shape_of = {m.name: list(m.shape) for m in metas}
    written = {r.tensor for r in runs} | {c.tensor for c in fallback}
    boxes, dtypes = {}, {}
    for r in runs:
        shape = shape_of[r.tensor]
        lo = [s for s in r.tstart]
        hi = [s + n for s, n in zip(r.tstart, r.tlen)]
        if r.tensor in boxes:
            _, s0, l0 = boxes[r.tensor]
            lo = [min(a, b) for a, b in zip(lo, s0)]
            hi = [max(a, b + n) for a, b, n in zip(hi, s0, l0)]
        boxes[r.tensor] = (shape, lo, [h - l for h, l in zip(hi, lo)])
        dtypes.setdefault(r.tensor, templates[(r.layer, r.param)].dtype)
    for c in fallback:
        shape = shape_of[c.tensor]
        boxes[c.tensor] = (shape, [0] * len(shape), shape)
        dtypes.setdefault(c.tensor, templates[(c.layer, c.param)].dtype)
    return ModelPlacement(boxes=boxes, dtypes=dtypes, runs=runs, fallback=fallback,
                          templates={k: templates[k] for k in used},
                          unused=[m.name for m in metas if m.name not in written], load_s=load_s, read_s=read_s)


def _fallback_calls(calls: list[_Call], keys: set[tuple[str, str, str]], metas: list[TensorMeta]) -> list[LoaderCall]:
    """The recorded loader calls of the (layer, parameter, tensor) triples no run can express. Each
    must have been given the whole tensor (then it can be replayed with the received one)."""
    out = []
    for c in calls:
        if not 0 <= c.tid < len(metas) or (c.layer, c.param, metas[c.tid].name) not in keys:
            continue
        if not c.untouched or c.shape != tuple(metas[c.tid].shape):
            raise PlacementError(f"checkpoint tensor '{metas[c.tid].name}' into parameter '{c.layer}.{c.param}': "
                                 f"the model transforms it (transposes, slices or reshapes) before a load "
                                 f"that box copies cannot express, so weightport cannot replay it")
        out.append(LoaderCall(c.layer, c.param, metas[c.tid].name, c.loader, c.param_arg, c.tensor_arg,
                              c.arguments))
    return out
