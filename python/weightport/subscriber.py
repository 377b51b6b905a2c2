"""The inference side: weightport.Subscriber."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

from . import _core, _options
from ._session import Bound, Member
from ._tensors import is_torch, shard_views
from .errors import InvalidArgument
from .layouts import Layout
from .naming import Rename, Rule


class PinnedVersion:
    """A version held still for reading: ``version``, ``tensors`` (name -> tensor, this rank's local
    part in the bound layout) and ``scales`` (name -> the block scales of each tensor quantised to
    f8e4m3 in flight), keyed by the bound model's own names (before any ``rename``). Valid only
    inside its ``with`` block."""

    def __init__(self, pin: Any, bound: list[Bound]):
        self.version: int = pin.version
        self.tensors: dict[str, Any] = {}
        self.scales: dict[str, Any] = {}
        for b in (b for b in bound if b.shard >= 0):
            self.tensors[b.name], scales = shard_views(pin.shard_array(b.shard), b.dtype, b.local_shape, b.tensor,
                                                       b.scales)
            if scales is not None:
                self.scales[b.name] = scales


class Subscriber(Member):
    """One rank of a group that receives a model's weights (an inference replica, a new node).

    Versions arrive in the background into memory weightport owns, each one checked chunk by chunk
    and committed only when every subscriber has all of it. The bound model keeps the version it
    has until :meth:`swap`. ``rotate_keys=True`` when the publishers' coordinator rotates keys
    (see :class:`Publisher`): the received weights stay where they are, only the keys change.

    Usage::

        sub = weightport.Subscriber("10.0.0.1:29600", secret=path)
        sub.bind(model)            # waits for every rank; the model's own names, shapes and dtypes
        sub.wait(5)                # version 5 (or newer) is committed
        sub.swap()                 # the model now computes with it
        with sub.pinned() as v:    # or read a version without touching the model
            v.tensors["lm_head.weight"]

    A tensor bound as ``torch.float8_e4m3fn`` that the publishers hold in f32 or bf16 is quantised
    in flight in 128x128 blocks (DeepSeek-V3's FP8 layout): by the publishers as they publish when
    their shards hold whole blocks (about half the bytes of bf16 travel), else here once it arrived. Its block scales (``weight_scale_inv``: values * scale ~ the weights) are in
    :attr:`scales` after :meth:`swap`, and in ``pinned().scales``.

    ``rename`` maps the bound model's names to the names the plan matches with the publishers' (a
    :class:`weightport.naming.Rename`, a dict of segment replacements or a callable; default: the
    names as given), e.g. ``rename=weightport.naming.UNWRAP`` for a replica that is itself wrapped.
    Only the plan uses the mapped names (and its errors name them): the layout, :attr:`scales` and
    ``pinned().tensors`` / ``.scales`` keep the model's own names.

    ``keep_versions`` K > 0 keeps the last K committed versions beside the live one, so that a
    publisher's :meth:`Publisher.rollback` can make one of them live again on every subscriber at
    once (or on none). Each costs one more copy of this rank's weights in host memory
    (:attr:`kept_bytes`), and the copy at each commit.

    ``max_gbps`` > 0 caps the rate this rank fetches at (Gbit/s), so that a weight sync leaves a
    shared link to the training job's own traffic; a version then takes at least its bytes over the
    cap. Default 0: no cap.

    ``priority="background"`` makes this rank's fetches yield to other traffic only while there is
    some: it keeps in flight only what keeps its inbound path busy, and while another flow shares
    that path (the training job's collectives) it holds to 5% of it, running free again once the
    flow has gone. It needs chunks that take a small part of a second on the link (on a 100 Mbit/s
    link, 1 MiB chunks: the publisher's ``chunk_bytes``). Default ``"normal"``.
    """

    _JOIN = "bind()"

    def __init__(self, coordinator: str, *, secret: bytes | str | os.PathLike, rank: int = 0,
                 world_size: int = 1, host: str | None = None, transport: str = "auto",
                 timeout: float = 60.0, pin_timeout: float = 30.0, delta: bool = True,
                 rotate_keys: bool = False, session: str = "default", rename: Rename | Rule | None = None,
                 keep_versions: int = 0, max_gbps: float = 0.0, priority: str = "normal"):
        super().__init__(coordinator, secret, rank, world_size, host, transport, timeout, session, rename)
        self._args.pin_timeout_s = _options.number("pin_timeout", pin_timeout)
        self._args.delta = bool(delta)
        self._args.rotate_keys = bool(rotate_keys)
        self._args.keep_versions = _options.whole("keep_versions", keep_versions)
        self._args.max_gbps = _options.number("max_gbps", max_gbps)
        if priority not in ("normal", "background"):
            raise InvalidArgument(f"priority must be 'normal' or 'background', got {priority!r:.60}")
        self._args.background = priority == "background"
        self._mode = "zero-copy"
        self._model_pin = None
        self._model_version = 0
        self._scales: dict[str, Any] = {}

    def bind(self, model: Any, layout: Layout | None = None, mode: str = "zero-copy") -> "Subscriber":
        """Declares what this rank receives -- the tensors of `model` (a module, a state dict or
        (name, tensor) pairs), in their own names, shapes, dtypes and `layout` -- and joins the group;
        returns once every rank has joined and the plan is made. With ``rename``, two names mapped to
        one, or a name mapped to "", raise ValueError naming the originals.

        ``mode="zero-copy"``: :meth:`swap` points the model's CPU tensors at the received version
        (no copy; the version stays pinned while the model uses it). ``mode="copy"``: :meth:`swap`
        copies into the model's own storage, whose addresses never change (CUDA tensors always copy).
        """
        if mode not in ("zero-copy", "copy"):
            raise ValueError(f"mode must be 'zero-copy' or 'copy', got '{mode}'")
        self._join(_core.Subscriber, model, layout)
        for b in (b for b in self._bound if b.shard >= 0):
            b.scales = self._core.shard_scales(b.shard)
        self._mode = mode
        return self

    @property
    def live_version(self) -> int:
        """The newest committed version (0 before the first)."""
        return self._need_core().live_version

    @property
    def kept_versions(self) -> list[int]:
        """The committed versions kept for a rollback (``keep_versions``), oldest first."""
        return list(self._need_core().kept_versions)

    @property
    def kept_bytes(self) -> int:
        """The host memory each kept version takes on this rank."""
        return int(self._need_core().kept_bytes)

    @property
    def model_version(self) -> int:
        """The version the bound model computes with (0 before the first swap)."""
        return self._model_version

    def wait(self, version: int, timeout: float | None = None) -> None:
        """Waits until `version` (or a newer one) is committed here; raises ``weightport.Timeout``,
        or at once the error that ended the session."""
        self._need_core().wait_for_version(_options.version(version), self._seconds(timeout))

    def swap(self) -> int:
        """Makes the bound model use the newest committed version; returns it."""
        core = self._need_core()
        pin = core.acquire()
        if pin.version == self._model_version:
            pin.release()
            return self._model_version
        zero_copy = False  # some tensor now points at the pin's memory: the pin stays with the model
        scales = {}
        for b in (b for b in self._bound if b.shard >= 0):
            view, block_scales = shard_views(pin.shard_array(b.shard), b.dtype, b.local_shape, b.tensor, b.scales)
            if block_scales is not None:  # kept as copies: small, and valid after the pin goes
                scales[b.name] = block_scales.clone() if is_torch(block_scales) else block_scales.copy()
            if not is_torch(b.tensor):  # NumPy arrays: always copied in place
                b.tensor[...] = view
            elif self._mode == "zero-copy" and b.tensor.device.type == "cpu":
                b.tensor.data = view
                zero_copy = True
            else:
                b.tensor.data.copy_(view)
        old, self._model_pin = self._model_pin, (pin if zero_copy else None)
        if old is not None:
            old.release()
        if not zero_copy:
            pin.release()
        self._model_version = pin.version
        self._scales = scales
        return self._model_version

    @property
    def scales(self) -> dict[str, Any]:
        """The block scales of the model version's tensors quantised to f8e4m3 in flight: name ->
        f32 [ceil(rows/128), ceil(cols/128)] (``[ceil(n/128)]`` for a vector), this rank's blocks;
        values * scale ~ the publisher's weights; keyed by the model's own names (not the ``rename``
        rule's). Empty before the first :meth:`swap`."""
        return dict(self._scales)

    @contextlib.contextmanager
    def pinned(self) -> Iterator[PinnedVersion]:
        """The newest committed version, held still until the block ends."""
        pin = self._need_core().acquire()
        try:
            yield PinnedVersion(pin, self._bound)
        finally:
            pin.release()

    def close(self) -> None:
        """Leaves the group. A zero-copy model keeps its tensors (their memory stays mapped while the
        model holds them). Idempotent."""
        super().close()
