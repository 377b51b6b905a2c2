"""What Publisher and Subscriber share: the secret, the host name, the layout offer, the session."""

from __future__ import annotations

import os
import socket
from typing import Any

from . import _core, _options
from ._tensors import dtype_name, local_of, named_tensors, placement_json
from .errors import FailedPrecondition, WrongType
from .layouts import Layout, Whole, dtensor_slice
from .naming import Rename, Rule, as_rename


def load_secret(secret: bytes | str | os.PathLike) -> bytes:
    """The shared secret: bytes as given, or the contents of a file named by a path, read as the
    CLI reads --secret-file (one reader, one rule): a regular file others cannot read (mode 600),
    one trailing newline dropped, at least 16 bytes."""
    if isinstance(secret, (bytes, bytearray)):
        return bytes(secret)
    if isinstance(secret, (str, os.PathLike)):
        return _core.load_secret_file(os.fsdecode(secret))
    raise WrongType(f"secret: expected bytes or a path, got {type(secret).__name__}")


def member_args(coordinator: str, rank: int, world_size: int, host: str | None, transport: str,
                timeout: float) -> Any:
    rank, world_size = _options.rank_in(rank, world_size)
    args = _core.MemberArgs()
    args.coordinator = coordinator
    args.rank = rank
    args.side_ranks = world_size
    args.host = host or socket.gethostname()
    args.transport = transport
    args.timeout_s = _options.number("timeout", timeout)
    return args


class Bound:
    """One local tensor and the shard that holds it: `name` is the user's, `plan_name` the one the
    plan knows it by (the same unless a rename rule maps it)."""

    __slots__ = ("name", "plan_name", "tensor", "dtype", "local_shape", "shard", "scales")

    def __init__(self, name: str, tensor: Any, dtype: str, local_shape: list[int], plan_name: str | None = None):
        self.name, self.tensor, self.dtype, self.local_shape = name, tensor, dtype, local_shape
        self.plan_name = name if plan_name is None else plan_name
        self.shard = -1
        self.scales = None  # a subscriber's shard quantised in flight: (offset, scale grid lengths)


def describe(tensors: Any, layout: Layout | None, rank: int,
             rename: Rename | None = None) -> tuple[list[Bound], str]:
    """The tensors to bind and this rank's layout offer (Placement JSON). The layout sees the
    tensors' own names; the offer has the names `rename` maps them to."""
    layout = layout or Whole()
    named = named_tensors(tensors)
    plan_names = rename.map_names(n for n, _ in named) if rename is not None else {n: n for n, _ in named}
    bound, entries = [], []
    for name, t in named:
        local = local_of(t)
        dtype = dtype_name(local, name)
        sl = dtensor_slice(t) or layout.slice_of(name, list(local.shape))
        shape, start, length = sl
        if list(length) != list(local.shape):
            raise ValueError(f"tensor '{name}': the layout says rank {rank} holds {list(length)}, "
                             f"the tensor is {list(local.shape)}")
        entries.append((plan_names[name], dtype, shape, start, length))
        bound.append(Bound(name, t, dtype, list(local.shape), plan_names[name]))
    return bound, placement_json(rank, entries)


def match_shards(core: Any, bound: list[Bound]) -> None:
    """Pairs each local tensor with the shard the plan gave it (by the name the plan knows)."""
    by_name = {b.plan_name: b for b in bound}
    for i in range(core.num_shards()):
        tensor, _dtype, _shape, _start, _length = core.shard_info(i)
        by_name[tensor].shard = i


class Member:
    """One rank of a group: its arguments, its core session once joined, and the calls both sides
    have. `_JOIN` names the call that joins ("register()" or "bind()")."""

    _JOIN = "join()"

    def __init__(self, coordinator: str, secret: bytes | str | os.PathLike, rank: int, world_size: int,
                 host: str | None, transport: str, timeout: float, session: str = "default",
                 rename: Rename | Rule | None = None):
        self._secret = load_secret(secret)
        self._rename = as_rename(rename)
        self._timeout = _options.number("timeout", timeout)
        store = _options.coordinator(coordinator)
        # With a store the coordinator is wherever the session's leader is now (it may change).
        self._args = member_args("" if store else coordinator, rank, world_size, host, transport, timeout)
        self._args.store = store
        self._args.session = str(session)
        self._core = None
        self._bound: list[Bound] = []

    def _join(self, core_class: Any, tensors: Any, layout: Layout | None) -> None:
        """Offers this rank's tensors and joins the group as `core_class` (waits for every rank)."""
        if self._core is not None:
            raise FailedPrecondition(f"{self._JOIN} was already called")
        self._bound, self._args.placement_json = describe(tensors, layout, self._args.rank, self._rename)
        self._core = core_class(self._secret, self._args)
        match_shards(self._core, self._bound)

    def _seconds(self, timeout: float | None) -> float:
        return self._timeout if timeout is None else _options.wait_seconds(timeout)

    def _need_core(self) -> Any:
        if self._core is None:
            raise FailedPrecondition(f"call {self._JOIN} first")
        return self._core

    def plan_json(self) -> str:
        """The plan every rank replays, as JSON."""
        return self._need_core().plan_json()

    def close(self) -> None:
        """Leaves the group. Idempotent."""
        if self._core is not None:
            self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
