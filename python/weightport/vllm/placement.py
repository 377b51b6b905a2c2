"""Where each checkpoint tensor lands in a live vLLM model, learned from the model's own loader.

vLLM's parameters are not the checkpoint's: q, k and v rows are fused into ``qkv_proj``, gate and up
into ``gate_up_proj``, experts are stacked into ``w13``/``w2``, vocabularies are padded, embeddings
tied, and each tensor-parallel worker holds a slice. Rather than a table per architecture, this runs
the model's ``load_weights`` once per checkpoint dimension on *tagged* tensors -- float64 values
``(tensor id + 1) * 2**32 + index along that dimension`` -- into float64 stand-ins of the parameters in
their loading layout (before vLLM's post-processing repacks them). Reading the stand-ins back says,
element by element, which checkpoint element the loader put there. Wherever that is a box of the
tensor copied into a box of the parameter in the same dimension order (TP slices, fused rows, stacked
experts, padded vocabularies), it becomes a :class:`Run` that needs no loader at update time; anything
else (a loader that permutes or scales) is replayed through the model's own weight loader with the
whole tensor (a :class:`LoaderCall`, counted as a fallback).

The same dry run refuses, before any byte moves, a checkpoint name the model does not have and a
shape the loader disagrees with, naming the tensor and the parameter.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

TAG = float(2**32)  # tensor ids above it, indices below: exact in float64 up to 2**21 tensors
SKIP_PARAMS = {"_expert_map", "expert_mask", "expert_global_to_physical", "expert_physical_to_global",
               "expert_local_to_global"}


class PlacementError(ValueError):
    """The checkpoint does not fit the vLLM model (names the tensor and the parameter)."""


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
    zero: bool = False  # the loader wrote constant zeros somewhere (padding): start from zeros


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
                f"through vLLM's weight loader, {len(self.unused)} unused ({', '.join(self.unused[:4])})")


def _templates(model: torch.nn.Module) -> dict[tuple[str, str], ParamTemplate]:
    """Every loadable parameter in its loading layout: vLLM's recorded pre-processing metadata where
    there is some (post-processing may have replaced the live tensor), else the live tensor."""
    from vllm.model_executor.model_loader.reload.layerwise import get_layerwise_info

    out = {}
    for lname, layer in model.named_modules():
        restore = get_layerwise_info(layer).restore_metadata[0]
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


def fresh_tensor(template: ParamTemplate, layer: torch.nn.Module, dtype: torch.dtype | None = None,
                 device: torch.device | str = "cpu", fill: float | None = None) -> torch.Tensor:
    """A new tensor of the template's layout with its class and attributes (weight loaders bound to
    `layer`), the way vLLM materializes a layer for reloading."""
    from vllm.model_executor.model_loader.reload.sanitize import restore_layer_refs

    dt = dtype or template.dtype
    t = (torch.full(template.shape, fill, dtype=dt, device=device) if fill is not None
         else torch.empty(template.shape, dtype=dt, device=device))
    t.__class__ = template.like.__class__
    t.requires_grad_(False)
    return bind_to_layer(t, template, layer)


def bind_to_layer(t: torch.Tensor, template: ParamTemplate, layer: torch.nn.Module) -> torch.Tensor:
    """Gives `t` the template's attributes with its weight loaders bound to `layer`."""
    from vllm.model_executor.model_loader.reload.sanitize import restore_layer_refs

    t.__dict__ = template.like.__dict__.copy()
    return restore_layer_refs(t, layer)


@dataclass
class _Call:
    """One weight-loader call of a dry run: which tensor (id) it was given, in what shape."""

    layer: str
    param: str
    loader: Any
    param_arg: str
    tensor_arg: str
    tid: int
    shape: tuple[int, ...]
    arguments: dict[str, Any]
    untouched: bool  # the loader got the very tensor the checkpoint iterator gave (no transpose...)


class _Recorder:
    """Installs float64 stand-ins for every parameter, wraps their loaders to know which parameter a
    failing load was for and to keep each call for replay, and puts the live parameters back."""

    def __init__(self, model: torch.nn.Module, templates: dict[tuple[str, str], ParamTemplate]):
        self.model = model
        self.templates = templates
        self.modules = dict(model.named_modules())
        self.saved: dict[str, dict[str, Any]] = {}
        self.by_group: dict[Any, torch.Tensor] = {}
        self.calls: list[_Call] = []
        self.current_param: str | None = None
        self.progress: dict[str, Any] = {}  # the tensor the checkpoint iterator gave last ("given")

    def install(self) -> None:
        from vllm.model_executor.model_loader.weight_utils import default_weight_loader

        by_group = self.by_group
        for (lname, pname), tpl in self.templates.items():
            layer = self.modules[lname]
            self.saved.setdefault(lname, dict(layer._parameters))
            rec = by_group.get(tpl.group)
            if rec is None:
                rec = fresh_tensor(tpl, layer, torch.float64, fill=float("nan"))
                loader = getattr(rec, "weight_loader", default_weight_loader)
                rec.weight_loader = self._wrap(lname, pname, loader)
                by_group[tpl.group] = rec
            layer._parameters[pname] = rec

    def _wrap(self, lname: str, pname: str, loader: Any):
        signature = inspect.signature(loader)
        recorder = self

        def recording_loader(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            recorder.current_param = f"{lname}.{pname}" if lname else pname
            tensors = [k for k, v in bound.arguments.items() if isinstance(v, torch.Tensor)]
            if len(tensors) >= 2 and bound.arguments[tensors[1]].numel() > 0:
                # Kept without the tensors (the tagged ones are as large as the model in float64).
                loaded = bound.arguments[tensors[1]]
                others = {k: v for k, v in bound.arguments.items() if k not in tensors[:2]}
                recorder.calls.append(_Call(lname, pname, loader, tensors[0], tensors[1],
                                            int(float(loaded.flatten()[0]) // TAG) - 1, tuple(loaded.shape), others,
                                            loaded is recorder.progress.get("given")))
            return loader(*args, **kwargs)

        return recording_loader

    def remove(self) -> None:
        for lname, params in self.saved.items():
            layer = self.modules[lname]
            layer._parameters.clear()
            layer._parameters.update(params)

    def reset(self) -> None:
        for rec in self.by_group.values():
            rec.data.fill_(float("nan"))
        self.calls.clear()


def _tags(metas: list[TensorMeta], dim: int, progress: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    for i, m in enumerate(metas):
        progress["tensor"] = m.name
        progress["given"] = None
        base = (i + 1) * TAG
        if dim < len(m.shape):
            axis = [1] * len(m.shape)
            axis[dim] = m.shape[dim]
            t = (base + torch.arange(m.shape[dim], dtype=torch.float64)).view(axis).expand(m.shape)
        else:
            t = torch.full((), base, dtype=torch.float64).expand(m.shape)
        given = t.contiguous()
        progress["given"] = given
        yield m.name, given


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


def _decompose(values: list[torch.Tensor], ndims: list[int]):
    """One parameter's stand-in after every pass -> (runs as (tensor id, pstart, plen, tstart, tlen),
    ids of tensors no run expresses, whether the loader wrote constant zeros)."""
    first = values[0]
    written = ~torch.isnan(first)
    if not bool(written.any()):
        return [], set(), False
    zero = bool((first == 0).any())
    ids = torch.where(written & (first != 0), torch.floor(first / TAG), torch.zeros_like(first)).to(torch.int64)
    runs, failed = [], set()
    present = torch.bincount(ids.flatten(), minlength=len(ndims) + 1)  # O(n): unique() sorts
    for tag in [int(x) for x in torch.nonzero(present[1:]).flatten() + 1]:
        tid = tag - 1
        mask = ids == tag
        box = _bounding_box(mask)
        region = tuple(slice(s, s + n) for s, n in box)
        lens = [n for _, n in box]
        if int(mask[region].sum()) != int(torch.tensor(lens).prod()):  # interleaved with another
            failed.add(tid)
            continue
        idx = [values[d][region] - tag * TAG for d in range(ndims[tid])]
        subs = _split(idx, lens)
        found = []
        for rel, sub_lens in subs or []:
            sub = tuple(slice(s, s + n) for s, n in zip(rel, sub_lens))
            mapped = _affine([v[sub] for v in idx], sub_lens)
            if mapped is None:
                break
            found.append((tid, tuple(b[0] + r for b, r in zip(box, rel)), tuple(sub_lens), *mapped))
        else:
            if subs is not None:
                runs.extend(found)
                continue
        failed.add(tid)
    return runs, failed, zero


def learn_placement(model: torch.nn.Module, metas: list[TensorMeta]) -> ModelPlacement:
    """Runs the dry run (one ``load_weights`` per checkpoint dimension) and returns the placement;
    raises :class:`PlacementError` naming the tensor and parameter the model's loader refused."""
    templates = _templates(model)
    ndims = [len(m.shape) for m in metas]
    passes = max(ndims, default=1) or 1
    rec = _Recorder(model, templates)
    passes_read: dict[Any, list[torch.Tensor]] = {}  # stand-in (by tie group) -> its values per pass
    calls = []
    rec.install()
    t0 = time.perf_counter()
    try:
        for dim in range(passes):
            rec.reset()
            progress: dict[str, Any] = {"tensor": None}
            rec.progress = progress
            try:
                with torch.no_grad():
                    model.load_weights(_tags(metas, dim, progress))
            except Exception as e:  # the model's loader refused this checkpoint: say which tensor
                where = f" into parameter '{rec.current_param}'" if rec.current_param else ""
                raise PlacementError(f"checkpoint tensor '{progress['tensor']}'{where}: vLLM's "
                                     f"{type(model).__name__}.load_weights refused it: "
                                     f"{type(e).__name__}: {e}") from e
            if dim == 0:
                calls = list(rec.calls)
            for group, stand_in in rec.by_group.items():
                passes_read.setdefault(group, []).append(stand_in.data.clone())
    finally:
        rec.remove()

    t1 = time.perf_counter()
    names = [m.name for m in metas]
    shape_of = {m.name: list(m.shape) for m in metas}
    keys_of: dict[Any, list[tuple[str, str]]] = {}
    for key, t in templates.items():
        keys_of.setdefault(t.group, []).append(key)
    runs, fallback_keys, used = [], set(), set()
    for group, values in passes_read.items():
        found, failed, zero = _decompose(values, ndims)
        keys = keys_of[group]
        if not found and not failed:
            continue
        used.update(keys)
        lname, pname = keys[0]  # tied twins share the tensor: written once, through the first
        for k in keys:
            templates[k].zero |= zero
        runs += [Run(lname, pname, ps, pl, names[tid], ts, tl) for tid, ps, pl, ts, tl in found]
        fallback_keys |= {(lname, pname, names[tid]) for tid in failed}
    fallback = _fallback_calls(calls, fallback_keys, metas)

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
                          unused=[n for n in names if n not in written], load_s=t1 - t0,
                          read_s=time.perf_counter() - t1)


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
