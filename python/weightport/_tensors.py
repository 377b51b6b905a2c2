"""Tensors in and out of weightport's shard memory: dtype names, byte views, copies.

torch tensors (CPU or CUDA, DTensors included), NumPy arrays and anything with ``__dlpack__`` are
accepted. Shard memory is host memory shared with the engine, seen as NumPy uint8 arrays.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import numpy as np

try:
    import torch
except ImportError:  # weightport works on NumPy arrays without torch
    torch = None

_NUMPY_NAMES = {
    np.dtype(np.float64): "f64", np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
    np.dtype(np.int64): "i64", np.dtype(np.int32): "i32", np.dtype(np.int16): "i16", np.dtype(np.int8): "i8",
    np.dtype(np.uint64): "u64", np.dtype(np.uint32): "u32", np.dtype(np.uint16): "u16", np.dtype(np.uint8): "u8",
    np.dtype(np.bool_): "bool",
}
_NUMPY_BY_NAME = {v: k for k, v in _NUMPY_NAMES.items()}


def _torch_names() -> dict:
    if torch is None:
        return {}
    names = {torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
             torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
             torch.bool: "bool"}
    for attr, name in (("float8_e4m3fn", "f8e4m3"), ("float8_e5m2", "f8e5m2"), ("uint16", "u16"),
                       ("uint32", "u32"), ("uint64", "u64")):
        if hasattr(torch, attr):
            names[getattr(torch, attr)] = name
    return names


_TORCH_NAMES = _torch_names()
_TORCH_BY_NAME = {v: k for k, v in _TORCH_NAMES.items()}


def is_torch(t: Any) -> bool:
    return torch is not None and isinstance(t, torch.Tensor)


def as_array_like(t: Any, name: str):
    """A torch tensor or NumPy array for `t` (zero-copy); DTensors stay DTensors."""
    if is_torch(t) or isinstance(t, np.ndarray):
        return t
    if hasattr(t, "__dlpack__"):
        return torch.from_dlpack(t) if torch is not None else np.from_dlpack(t)
    raise TypeError(f"tensor '{name}': expected a torch tensor, a NumPy array or an object with __dlpack__, "
                    f"got {type(t).__name__}")


def dtype_name(t: Any, name: str) -> str:
    names = _TORCH_NAMES if is_torch(t) else _NUMPY_NAMES
    try:
        return names[t.dtype]
    except KeyError:
        raise TypeError(f"tensor '{name}': dtype {t.dtype} is not supported") from None


def local_of(t: Any):
    """The local part of a DTensor, the tensor itself otherwise."""
    return t.to_local() if hasattr(t, "to_local") and hasattr(t, "device_mesh") else t


def named_tensors(tensors: Any) -> list[tuple[str, Any]]:
    """(name, tensor) pairs from a state dict, a module (its state_dict, parameters as themselves)
    or an iterable of pairs."""
    if hasattr(tensors, "state_dict") and callable(tensors.state_dict):
        items = tensors.state_dict(keep_vars=True).items()
    elif isinstance(tensors, Mapping):
        items = tensors.items()
    else:
        items = list(tensors)
    out = [(str(k), as_array_like(v, str(k))) for k, v in items]
    seen = set()
    for k, _ in out:
        if k in seen:
            raise ValueError(f"tensor '{k}' is given twice")
        seen.add(k)
    if not out:
        raise ValueError("no tensors given")
    return out


def placement_json(rank: int, entries: Iterable[tuple[str, str, list, list, list]]) -> str:
    """A Placement JSON with this rank's shards: entries are (name, dtype, shape, start, length)."""
    tensors, shards = [], []
    for name, dtype, shape, start, length in entries:
        tensors.append({"name": name, "dtype": dtype, "shape": list(map(int, shape))})
        if all(n > 0 for n in length):  # an empty local shard (an uneven FSDP split) holds nothing
            shards.append({"tensor": name, "start": list(map(int, start)), "length": list(map(int, length))})
    return json.dumps({"tensors": tensors, "ranks": [{"rank": rank, "shards": shards}]})


def copy_into(dst: np.ndarray, src: Any) -> None:
    """Copies the bytes of `src` (its local part, row-major) into the uint8 array `dst`."""
    src = local_of(src)
    if is_torch(src):
        flat = src.detach().contiguous().reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.to(torch.uint8)
        torch.from_numpy(dst).copy_(flat.view(torch.uint8))
    else:
        np.copyto(dst, np.ascontiguousarray(src).reshape(-1).view(np.uint8))


def view_as(array: np.ndarray, dtype: str, shape: list[int], like: Any = None):
    """The uint8 array `array` seen as `dtype` of `shape` (zero-copy): a torch tensor when `like` is
    one or NumPy cannot hold the dtype, a NumPy array otherwise."""
    if (like is not None and is_torch(like)) or dtype not in _NUMPY_BY_NAME:
        if torch is None:
            raise TypeError(f"dtype {dtype} needs torch")
        return torch.from_numpy(array).view(_TORCH_BY_NAME[dtype]).reshape(shape)
    return array.view(_NUMPY_BY_NAME[dtype]).reshape(shape)



def shard_views(array: np.ndarray, dtype: str, shape: list[int], like: Any = None, scales: Any = None):
    """A received shard as (values, scales). A tensor quantised in flight (bound as f8e4m3 while the
    publisher holds f32 or bf16) is stored as its e4m3 values, then one f32 scale per 128x128 block
    (a plan may also give one for the whole tensor: a grid of ones) that dequantises it (values * scale): `scales` is where, as the engine says (offset in the shard's
    bytes, the scale grid's lengths), or None for every other shard."""
    if scales is None:
        return view_as(array, dtype, shape, like), None
    at, grid = scales
    count = int(np.prod(shape)) if shape else 1
    block_scales = view_as(array[at:at + 4 * int(np.prod(grid))], "f32", list(grid), like)
    return view_as(array[:count], dtype, shape, like), block_scales
