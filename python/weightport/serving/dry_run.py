"""The dry run behind :mod:`.placement`, one checkpoint tensor at a time, in bounded memory.

The model's ``load_weights`` runs on one *tagged* tensor at a time -- float32 values ``index + 1``
along one of its dimensions -- into float32 stand-ins of its parameters, once per dimension of that
tensor, and the stand-ins it wrote are read back. 0 means nothing of the tensor landed there (never
written, or padding the loader zeroed). Done for the whole checkpoint at once, with float64 tags
that also carry the tensor's id, this held a float64 copy of every parameter plus each pass's
reading: about 6x the worker's float32 weights. Here:

- each stand-in is a private anonymous mapping, so its pages exist only once written; as a pass is
  read back its pages go back to the kernel (``MADV_DONTNEED``: zero again), so a pass holds pages
  of only the parameters its one tensor lands in;
- a reading is int32, the index per pass (-1: nothing of the tensor there).

What is held at once: the stand-ins one tensor lands in, the tensor tagged, and its readings (about
12 bytes per element of the largest checkpoint tensor), plus the temporaries of one parameter.
"""

from __future__ import annotations

import inspect
import math
import mmap
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

MAX_INDEX = 2**24 - 1  # index + 1 is exact in float32 up to 2**24: no checkpoint dimension is longer
_READ_CHUNK = 1 << 20  # elements read back at a time: bounds the temporaries (8 MiB each)


class DryRunError(ValueError):
    """A checkpoint dimension too long to tag: names the tensor."""


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


@dataclass
class Reading:
    """What one stand-in held after a tensor's passes: `idx[d]`, the index along dimension d of the
    tensor element that landed in each parameter element (-1: none), and whether some value was no
    tag at all (`computed`: the loader scaled, summed or cast what it was given)."""

    idx: list[torch.Tensor]
    computed: bool = False


def _lazy_zeros(shape: tuple[int, ...]) -> tuple[torch.Tensor, mmap.mmap | None]:
    """A float32 tensor of zeros whose memory is taken only where it is written."""
    n = math.prod(shape)
    if n == 0:
        return torch.zeros(shape, dtype=torch.float32), None
    m = mmap.mmap(-1, n * 4, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return torch.frombuffer(m, dtype=torch.float32, count=n).view(shape), m


class Recorder:
    """Installs lazily backed float32 stand-ins for every parameter (one per tie group), wraps their
    loaders to know which parameter a failing load was for, which stand-ins a pass wrote and each
    call for replay, and puts the live parameters back."""

    def __init__(self, model: torch.nn.Module, templates: dict, dress: Callable, default_loader: Callable):
        self.templates = templates
        self.dress = dress  # (tensor, template, layer) -> the tensor as a parameter like the template's
        self.default_loader = default_loader  # for a parameter without a weight_loader of its own
        self.modules = dict(model.named_modules())
        self.saved: dict[str, dict[str, Any]] = {}
        self.by_group: dict[Any, torch.Tensor] = {}
        self.maps: dict[Any, mmap.mmap] = {}
        self.touched: set[Any] = set()  # tie groups whose stand-in a loader was called for
        self.calls: list[_Call] = []
        self.current_param: str | None = None
        self.progress: dict[str, Any] = {}  # the tensor being loaded ("tid") and its tagged form ("given")

    def install(self) -> None:
        for (lname, pname), tpl in self.templates.items():
            layer = self.modules[lname]
            self.saved.setdefault(lname, dict(layer._parameters))
            rec = self.by_group.get(tpl.group)
            if rec is None:
                rec, m = _lazy_zeros(tpl.shape)
                rec = self.dress(rec, tpl, layer)
                loader = getattr(rec, "weight_loader", self.default_loader)
                rec.weight_loader = self._wrap(lname, pname, tpl.group, loader)
                self.by_group[tpl.group] = rec
                if m is not None:
                    self.maps[tpl.group] = m
            layer._parameters[pname] = rec

    def _wrap(self, lname: str, pname: str, group: Any, loader: Any):
        signature = inspect.signature(loader)
        recorder = self

        def recording_loader(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            recorder.current_param = f"{lname}.{pname}" if lname else pname
            recorder.touched.add(group)
            tensors = [k for k, v in bound.arguments.items() if isinstance(v, torch.Tensor)]
            if len(tensors) >= 2 and bound.arguments[tensors[1]].numel() > 0:
                # Kept without the tensors (a tagged one is as large as the checkpoint's).
                loaded = bound.arguments[tensors[1]]
                others = {k: v for k, v in bound.arguments.items() if k not in tensors[:2]}
                recorder.calls.append(_Call(lname, pname, loader, tensors[0], tensors[1],
                                            recorder.progress.get("tid", -1), tuple(loaded.shape), others,
                                            loaded is recorder.progress.get("given")))
            return loader(*args, **kwargs)

        return recording_loader

    def written_elsewhere(self) -> set[Any]:
        """The stand-ins holding anything, found by reading every one: for a pass in which some
        tensor reached no wrapped loader (a model may write a parameter directly). Reading a page
        never written maps the kernel's zero page: it costs time, not memory."""
        return {g for g, rec in self.by_group.items() if rec.numel() > 0 and bool(rec.data.reshape(-1).any())}

    def read(self, group: Any, reading: Reading | None) -> Reading:
        """:func:`read` of the stand-in of `group`, giving its pages back as it goes."""
        return read(self.by_group[group], reading, self.maps.get(group))

    def clear(self, groups) -> None:
        """Zeroes the stand-ins of `groups` and gives their pages back (an empty one has none)."""
        for g in groups:
            if g in self.maps:
                self.maps[g].madvise(mmap.MADV_DONTNEED)

    def remove(self) -> None:
        for lname, params in self.saved.items():
            layer = self.modules[lname]
            layer._parameters.clear()
            layer._parameters.update(params)
        self.by_group.clear()
        self.maps.clear()


def tagged(meta, tid: int, dim: int, progress: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """Checkpoint tensor `meta` (id `tid`) tagged for pass `dim`: index + 1 along that dimension
    (1 everywhere past its last dimension)."""
    if any(n > MAX_INDEX for n in meta.shape):
        raise DryRunError(f"checkpoint tensor '{meta.name}' has a dimension longer than {MAX_INDEX}, "
                          f"which the dry run cannot tag")
    progress.update(tensor=meta.name, tid=tid, given=None)
    if dim < len(meta.shape):
        axis = [1] * len(meta.shape)
        axis[dim] = meta.shape[dim]
        t = torch.arange(1, meta.shape[dim] + 1, dtype=torch.float32).view(axis).expand(meta.shape)
    else:
        t = torch.ones((), dtype=torch.float32).expand(meta.shape)
    given = t.contiguous()
    progress["given"] = given
    yield meta.name, given
    del t, given
    progress["given"] = None  # the tagged tensor (as large as the checkpoint's) is not kept


def read(stand_in: torch.Tensor, reading: Reading | None, mapping: mmap.mmap | None = None) -> Reading:
    """Adds one pass of `stand_in` to `reading` (a new one on the first pass), chunk by chunk; with
    the stand-in's `mapping`, the pages of each chunk read go back to the kernel (zero again) as the
    reading grows, so the two are not both whole at once.

    A tag is a whole number from 1 to 2**24 (index + 1); 0 means nothing of the tensor. A value no
    tag can be (negative, NaN, past the largest, or a fraction in a sample of every 97th element)
    the loader computed: the reading is then `computed`, and the parameter's placement goes through
    the loader itself."""
    flat = stand_in.data.reshape(-1)
    reading = reading or Reading([])
    idx = torch.empty(stand_in.shape, dtype=torch.int32)
    idx_flat = idx.view(-1)
    released = 0  # bytes of the mapping given back
    for s in range(0, flat.numel(), _READ_CHUNK):
        v = flat[s:s + _READ_CHUNK]
        whole = v.to(torch.int32)  # NaN and the out of range become the int32 minimum
        if not reading.computed:
            lo, hi = torch.aminmax(whole)
            reading.computed = (int(lo) < 0 or int(hi) > MAX_INDEX + 1
                                or not torch.equal(whole[::97].to(torch.float32), v[::97]))
        torch.sub(whole, 1, out=idx_flat[s:s + _READ_CHUNK])
        if mapping is not None:
            done = (s + v.numel()) * 4 // mmap.PAGESIZE * mmap.PAGESIZE
            if done > released:
                mapping.madvise(mmap.MADV_DONTNEED, released, done - released)
                released = done
    if mapping is not None and released < len(mapping):
        mapping.madvise(mmap.MADV_DONTNEED, released, len(mapping) - released)
    reading.idx.append(idx)
    return reading
