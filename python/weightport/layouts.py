"""How a rank's local tensors sit in the whole model: the placements weightport plans from.

A layout maps a local tensor (by name) to the slice of the global tensor it holds:
``(global_shape, start, length)``, one entry per dimension. Layouts:

- :class:`Whole` -- every tensor whole on this rank (a plain state dict). The default.
- :class:`TensorParallel` -- Megatron-style tensor parallelism: column-parallel weights (and their
  biases) split along dim 0, row-parallel weights along dim 1, everything else whole.
- :class:`Sharded` -- every tensor split along one dimension like ``torch.chunk`` (FSDP-style flat
  sharding of the leading dimension, uneven splits included).

DTensors (FSDP2's ``fully_shard``, ``torch.distributed.tensor``) carry their own layout: the global
shape and this rank's offset are read from the tensor's device mesh and placements whatever layout
is given.
"""

from __future__ import annotations

import fnmatch
from typing import Iterable, Sequence

Slice = tuple[list[int], list[int], list[int]]  # global shape, start, length


def _chunk(length: int, parts: int, index: int) -> tuple[int, int]:
    """(start, length) of chunk `index` of `parts` when `length` is split like torch.chunk."""
    size = -(-length // parts) if length else 0
    start = min(index * size, length)
    return start, max(0, min(size, length - start))


class Layout:
    """Base class: maps a local tensor to its slice of the global tensor."""

    def slice_of(self, name: str, shape: Sequence[int]) -> Slice:
        """(global shape, start, length) of the local tensor `name` of shape `shape`."""
        raise NotImplementedError


class Whole(Layout):
    """Every tensor is held whole."""

    def slice_of(self, name: str, shape: Sequence[int]) -> Slice:
        """The whole tensor."""
        shape = list(shape)
        return shape, [0] * len(shape), shape


class Sharded(Layout):
    """Every tensor (matching `patterns`, default all) is split along `dim` into `size` chunks as
    ``torch.chunk`` does; this rank holds chunk `rank`. `global_shapes` gives the whole tensors'
    shapes (needed when the split is uneven); without it the split is taken as even."""

    def __init__(self, rank: int, size: int, dim: int = 0, patterns: Iterable[str] = ("*",),
                 global_shapes: dict[str, Sequence[int]] | None = None):
        if not 0 <= rank < size:
            raise ValueError(f"Sharded: rank {rank} is outside 0..{size - 1}")
        self.rank, self.size, self.dim = rank, size, dim
        self.patterns = tuple(patterns)
        self.global_shapes = {k: list(v) for k, v in (global_shapes or {}).items()}

    def slice_of(self, name: str, shape: Sequence[int]) -> Slice:
        """Chunk `rank` of the split along `dim`; raises ValueError when the local size is not it."""
        shape = list(shape)
        if not shape or not any(fnmatch.fnmatchcase(name, p) for p in self.patterns):
            return Whole().slice_of(name, shape)
        full = self.global_shapes.get(name) or [d * self.size if i == self.dim else d for i, d in enumerate(shape)]
        start, length = _chunk(full[self.dim], self.size, self.rank)
        if length != shape[self.dim]:
            raise ValueError(f"tensor '{name}': rank {self.rank} holds {shape[self.dim]} of dim {self.dim}, "
                             f"but chunk {self.rank} of {full[self.dim]} in {self.size} parts is {length}")
        starts = [0] * len(shape)
        starts[self.dim] = start
        return full, starts, shape


class TensorParallel(Layout):
    """Megatron-style tensor parallelism over `size` ranks (this is `rank`): tensors whose names
    match a `column` pattern are split along dim 0 (weight and bias), 2-D tensors matching a `row`
    pattern along dim 1 (their biases stay whole); the rest is replicated."""

    def __init__(self, rank: int, size: int, column: Iterable[str] = (), row: Iterable[str] = ()):
        if not 0 <= rank < size:
            raise ValueError(f"TensorParallel: rank {rank} is outside 0..{size - 1}")
        self.rank, self.size = rank, size
        self.column, self.row = tuple(column), tuple(row)

    def slice_of(self, name: str, shape: Sequence[int]) -> Slice:
        """This rank's part of a column- or row-parallel tensor; the whole of any other."""
        shape = list(shape)
        dim = None
        if any(fnmatch.fnmatchcase(name, p) for p in self.column) and len(shape) >= 1:
            dim = 0
        elif any(fnmatch.fnmatchcase(name, p) for p in self.row) and len(shape) == 2:
            dim = 1
        if dim is None:
            return Whole().slice_of(name, shape)
        full = [d * self.size if i == dim else d for i, d in enumerate(shape)]
        starts = [0] * len(shape)
        starts[dim] = self.rank * shape[dim]
        return full, starts, shape


def dtensor_slice(tensor) -> Slice | None:
    """The slice a DTensor's local shard holds, from its device mesh and placements; None when the
    tensor is not a DTensor."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch without distributed
        return None
    if not isinstance(tensor, DTensor):
        return None
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local_shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh,
                                                                tensor.placements)
    return list(tensor.shape), list(offset), list(local_shape)
