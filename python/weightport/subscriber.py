"""The inference side: weightport.Subscriber."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

from . import _core
from ._session import Bound, describe, load_secret, match_shards, member_args
from ._tensors import is_torch, view_as
from .errors import FailedPrecondition
from .layouts import Layout


class PinnedVersion:
    """A version held still for reading: ``version`` and ``tensors`` (name -> tensor, this rank's
    local part in the bound layout). Valid only inside its ``with`` block."""

    def __init__(self, pin: Any, bound: list[Bound]):
        self.version: int = pin.version
        self.tensors: dict[str, Any] = {
            b.name: view_as(pin.shard_array(b.shard), b.dtype, b.local_shape, b.tensor) for b in bound if b.shard >= 0
        }


class Subscriber:
    """One rank of a group that receives a model's weights (an inference replica, a new node).

    Versions arrive in the background into memory weightport owns, each one checked chunk by chunk
    and committed only when every subscriber has all of it. The bound model keeps the version it
    has until :meth:`swap`.

    Usage::

        sub = weightport.Subscriber("10.0.0.1:29600", secret=path)
        sub.bind(model)            # waits for every rank; the model's own names, shapes and dtypes
        sub.wait(5)                # version 5 (or newer) is committed
        sub.swap()                 # the model now computes with it
        with sub.pinned() as v:    # or read a version without touching the model
            v.tensors["lm_head.weight"]
    """

    def __init__(self, coordinator: str, *, secret: bytes | str | os.PathLike, rank: int = 0,
                 world_size: int = 1, host: str | None = None, transport: str = "auto",
                 timeout: float = 60.0, pin_timeout: float = 30.0, delta: bool = True):
        self._secret = load_secret(secret)
        self._timeout = float(timeout)
        self._args = member_args(coordinator, rank, world_size, host, transport, timeout)
        self._args.pin_timeout_s = float(pin_timeout)
        self._args.delta = bool(delta)
        self._core = None
        self._bound: list[Bound] = []
        self._mode = "zero-copy"
        self._model_pin = None
        self._model_version = 0

    def bind(self, model: Any, layout: Layout | None = None, mode: str = "zero-copy") -> "Subscriber":
        """Declares what this rank receives -- the tensors of `model` (a module, a state dict or
        (name, tensor) pairs), in their own names, shapes, dtypes and `layout` -- and joins the group;
        returns once every rank has joined and the plan is made.

        ``mode="zero-copy"``: :meth:`swap` points the model's CPU tensors at the received version
        (no copy; the version stays pinned while the model uses it). ``mode="copy"``: :meth:`swap`
        copies into the model's own storage, whose addresses never change (CUDA tensors always copy).
        """
        if self._core is not None:
            raise FailedPrecondition("bind() was already called")
        if mode not in ("zero-copy", "copy"):
            raise ValueError(f"mode must be 'zero-copy' or 'copy', got '{mode}'")
        self._mode = mode
        self._bound, self._args.placement_json = describe(model, layout, self._args.rank)
        self._core = _core.Subscriber(self._secret, self._args)
        match_shards(self._core, self._bound)
        return self

    @property
    def live_version(self) -> int:
        """The newest committed version (0 before the first)."""
        return self._need_core().live_version

    @property
    def model_version(self) -> int:
        """The version the bound model computes with (0 before the first swap)."""
        return self._model_version

    def wait(self, version: int, timeout: float | None = None) -> None:
        """Waits until `version` (or a newer one) is committed here; raises ``weightport.Timeout``,
        or at once the error that ended the session."""
        self._need_core().wait_for_version(int(version), self._timeout if timeout is None else float(timeout))

    def swap(self) -> int:
        """Makes the bound model use the newest committed version; returns it."""
        core = self._need_core()
        pin = core.acquire()
        if pin.version == self._model_version:
            pin.release()
            return self._model_version
        for b in self._bound:
            if b.shard < 0 or not is_torch(b.tensor):
                if b.shard >= 0:  # NumPy arrays: always copied in place
                    b.tensor[...] = view_as(pin.shard_array(b.shard), b.dtype, b.local_shape, b.tensor)
                continue
            view = view_as(pin.shard_array(b.shard), b.dtype, b.local_shape, b.tensor)
            if self._mode == "zero-copy" and b.tensor.device.type == "cpu":
                b.tensor.data = view
            else:
                b.tensor.data.copy_(view)
        zero_copy = self._mode == "zero-copy" and any(
            is_torch(b.tensor) and b.tensor.device.type == "cpu" for b in self._bound if b.shard >= 0)
        old, self._model_pin = self._model_pin, (pin if zero_copy else None)
        if old is not None:
            old.release()
        if not zero_copy:
            pin.release()
        self._model_version = pin.version
        return self._model_version

    @contextlib.contextmanager
    def pinned(self) -> Iterator[PinnedVersion]:
        """The newest committed version, held still until the block ends."""
        pin = self._need_core().acquire()
        try:
            yield PinnedVersion(pin, self._bound)
        finally:
            pin.release()

    def plan_json(self) -> str:
        """The plan every rank replays, as JSON."""
        return self._need_core().plan_json()

    def close(self) -> None:
        """Leaves the group. A zero-copy model keeps its tensors (their memory stays mapped while the
        model holds them). Idempotent."""
        if self._core is not None:
            self._core.close()

    def __enter__(self) -> "Subscriber":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _need_core(self):
        if self._core is None:
            raise FailedPrecondition("call bind() first")
        return self._core
