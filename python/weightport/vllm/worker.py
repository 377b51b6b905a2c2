"""The vLLM worker side: ``weight_transfer_config={"backend": "weightport"}``.

Each vLLM worker is a weightport subscriber rank. At ``init_transfer_engine`` it learns, from a dry
run of the model's own loader (:mod:`.placement`), which box of which checkpoint tensor it needs,
binds exactly those boxes (in the dtype its parameters have: a bf16 trainer into an fp32 engine is
converted in flight) and joins the trainer's group. Versions then arrive in the background while
vLLM keeps generating; a background thread builds each committed version into *shadow* layers:
parameters in vLLM's loading layout (one set, allocated when the worker joins and refilled every
version: :class:`.shadow.FreshSet`) filled by direct box copies (or, for what a box cannot express,
by the parameter's own weight loader), then vLLM's post-processing (repacking for the CPU GEMMs,
quantization) run on the shadow. ``finish_weight_update`` only swaps the shadows in (copying into
live tensors whose layout did not change, replacing the rest), so generation pauses for the swap,
not for the transfer or the processing. A version that fails or never commits leaves the live
model untouched.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from vllm.logger import init_logger
from vllm.distributed.weight_transfer.base import (WeightTransferEngine, WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)

from .. import _options, errors
from ..subscriber import Subscriber
from ..serving.placement import ModelPlacement, TensorMeta, fresh_tensor
from ..serving.ready import ReadyNotifier
from ..serving.builder import BoxLayout, box_stand_ins, build_shadows
from ..serving.shadow import FreshSet, retie, snapshot, swap_in
from .placement import bind_to_layer, hooks, learn_placement, post_process

logger = init_logger("vllm.weightport")  # under vLLM's logger: its handlers and level

_JOIN_TIMEOUT_S = 30.0  # how long shutdown waits for the build thread (a build takes seconds)
_TORCH_TO_WP = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
                torch.float8_e4m3fn: "f8e4m3"}


@dataclass
class WeightportInitInfo(WeightTransferInitInfo):
    """What the trainer sends each worker at ``init_weight_transfer_engine``."""

    tensors: list = field(default_factory=list)  # [[name, shape, dtype], ...]: the trainer's checkpoint
    coordinator: str = ""  # empty: only check that the checkpoint fits this model (nothing joins)
    secret_hex: str = ""
    transport: str = "auto"
    delta: bool = True
    timeout: float = 120.0
    notify: str = ""  # "host:port" the trainer hears "version built" on (ready.py); empty: none
    keep_versions: int = 0  # replaced versions each worker keeps to roll back to (each about its weights)
    replica: int = 0  # this engine's place in a fleet of `replicas` alike engines (trainer.FleetClient)
    replicas: int = 1

    def __post_init__(self):
        self.timeout = _options.number("timeout", self.timeout)
        self.keep_versions = _options.whole("keep_versions", self.keep_versions)
        self.replica, self.replicas = _options.rank_in(self.replica, self.replicas, ("replica", "replicas"))


@dataclass
class WeightportUpdateInfo(WeightTransferUpdateInfo):
    """``update_weights({"version": v})``: apply version `v` (or a newer committed one);
    ``{"version": v, "rollback": True}``: go back to the kept version `v` (no trainer involved).
    With ``"check_only": True`` nothing is taken for the swap: wait until `v` is built (raise if it
    cannot be), or for a rollback raise if this worker does not keep it; a fleet checks every engine
    so before any swaps."""

    version: int
    timeout: float = 120.0
    rollback: bool = False
    check_only: bool = False

    def __post_init__(self):
        # 0 is refused later, by name, where it means something (a rollback: "version 0 is not kept").
        self.version = _options.version(self.version, lowest=0)
        self.timeout = _options.wait_seconds(self.timeout)


@dataclass
class _Prepared:
    version: int
    shadows: dict[str, torch.nn.Module]
    seconds: float
    copy_s: float = 0.0  # of `seconds`: the box copies, and vLLM's post-processing
    process_s: float = 0.0
    alloc_s: float = 0.0  # of `seconds`: allocating what the fresh set did not hold
    rollback: bool = False  # `shadows` are a kept version's layers


class WeightportWeightTransferEngine(WeightTransferEngine[WeightportInitInfo, WeightportUpdateInfo]):
    init_info_cls = WeightportInitInfo
    update_info_cls = WeightportUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, config, vllm_config, device, model):
        super().__init__(config, vllm_config, device, model)
        self._sub: Subscriber | None = None
        self._notifier: ReadyNotifier | None = None
        self._placement: ModelPlacement | None = None
        self._placement_key: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Condition()
        self._prepared: _Prepared | None = None
        self._error: Exception | None = None
        self._pending: _Prepared | None = None  # taken by update_weights: the swap reads the fresh set
        self._fresh: FreshSet | None = None
        self._keep_versions = 0
        self._kept: list[tuple[int, dict[str, torch.nn.Module]]] = []  # (version, its layers), oldest first
        self._rolled_back_from = 0
        self.applied_version = 0
        self._intra_op_threads = 1
        self.reports: list[dict[str, Any]] = []

    # -- lifecycle ---------------------------------------------------------------------------------

    def init_transfer_engine(self, init_info: WeightportInitInfo) -> None:
        """Learns the placement (cached while the trainer's checkpoint stays the same), binds the
        boxes and joins the trainer's group; a second call (a new trainer) leaves the old group.
        Without a coordinator it only checks the checkpoint against the model (raises naming the
        tensor and parameter that do not fit), so a trainer can refuse before anything moves."""
        metas = [TensorMeta(str(n), tuple(int(x) for x in s), str(d)) for n, s, d in init_info.tensors]
        key = tuple(metas)
        if self._placement is None or self._placement_key != key:
            t0 = time.perf_counter()
            self._placement = learn_placement(self.model, metas)
            self._placement_key = key
            self._fresh = None  # made for this placement below
            logger.info("weightport: placement learned in %.2f s: %s", time.perf_counter() - t0,
                        self._placement.summary())
            if self._placement.unused:  # vLLM's loader took them and wrote them nowhere
                logger.warning("weightport: %d checkpoint tensors land in no parameter of this worker "
                               "(vLLM's loader skipped them: tied, buffers, another pipeline stage): %s",
                               len(self._placement.unused), ", ".join(self._placement.unused[:20]))
            for call in self._placement.fallback:
                logger.info("weightport: %s -> %s.%s goes through vLLM's weight loader (no box copy "
                            "expresses it)", call.tensor, call.layer, call.param)
        if not init_info.coordinator:
            return
        self.shutdown()
        if self._thread is not None:
            raise errors.FailedPrecondition("weightport: the previous session's build thread is still running; "
                                            "try init_weight_transfer_engine again once it has stopped")
        # A new trainer numbers its versions afresh: what was kept, or rolled back from, was numbered
        # by the one before (roll back before a new trainer joins).
        self._keep_versions = max(0, int(init_info.keep_versions))
        self._kept, self._rolled_back_from = [], 0
        placement = self._placement
        if self._fresh is None:
            device, vllm_hooks = self.device, hooks()
            self._fresh = FreshSet(
                placement.templates,
                make=lambda tpl, layer: fresh_tensor(tpl, layer, vllm_hooks, device=device,
                                                     fill=0.0 if tpl.zero else None),
                rebind=bind_to_layer)
        rank, world = self._subscriber_rank(init_info.replica, init_info.replicas)
        sub = Subscriber(init_info.coordinator, secret=bytes.fromhex(init_info.secret_hex), rank=rank,
                         world_size=world, transport=init_info.transport, timeout=init_info.timeout,
                         delta=init_info.delta)
        sub.bind(box_stand_ins(placement), layout=BoxLayout(placement.boxes), mode="copy")
        self._sub = sub
        self._notifier = (ReadyNotifier(init_info.notify, bytes.fromhex(init_info.secret_hex), rank, world,
                                        logger.warning) if init_info.notify else None)
        self._stop.clear()
        # OpenMP's thread count is per thread: the builder uses as many as vLLM gave this worker.
        self._intra_op_threads = torch.get_num_threads()
        self._thread = threading.Thread(target=self._prepare_loop, name="weightport-prepare", daemon=True)
        self._thread.start()

    def start_weight_update(self) -> None:
        if self._sub is None:
            raise errors.FailedPrecondition("weightport: init_weight_transfer_engine was not called")
        self._release_pending()

    def _release_pending(self, replaced: list = (), recycle: bool = False) -> None:
        """The swap is done (or abandoned): the builder may refill the fresh set."""
        with self._lock:
            if replaced:
                self._fresh.release(replaced, recycle)
            self._pending = None
            self._lock.notify_all()

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class synchronizes the accelerator unconditionally, which raises on a machine
        # without one: synchronize only where this worker's model is on a device.
        self.receive_weights(self.parse_update_info(update_info))
        if self._on_device:
            torch.accelerator.synchronize()

    def receive_weights(self, update_info: WeightportUpdateInfo) -> None:
        """Waits until `version` is committed and built into shadows (normally it already is)."""
        deadline = time.monotonic() + update_info.timeout
        with self._lock:
            if update_info.rollback:
                kept = self._kept_version(update_info.version)
                if not update_info.check_only:
                    self._pending = kept
                return
            newest = self._prepared.version if self._prepared is not None else 0
            if update_info.version <= self._rolled_back_from and newest < update_info.version:
                raise ValueError(f"weightport: version {update_info.version} was rolled back from; the next "
                                 f"version to apply must be newer than {self._rolled_back_from}")
            while True:
                if self._error is not None:
                    raise errors.FailedPrecondition(f"weightport: version {update_info.version} cannot be "
                                                    f"applied: {self._error}") from self._error
                if self._prepared is not None and self._prepared.version >= update_info.version:
                    if not update_info.check_only:
                        self._pending = self._prepared
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise errors.Timeout(f"weightport: version {update_info.version} was not committed "
                                         f"within {update_info.timeout:.0f} s (newest committed: "
                                         f"{self._sub.live_version if self._sub else 0})")
                self._lock.wait(min(left, 0.5))

    def _kept_version(self, version: int) -> _Prepared:
        for v, layers in self._kept:
            if v == version:
                return _Prepared(version, layers, 0.0, rollback=True)
        kept = ", ".join(str(v) for v, _ in self._kept) or "none"
        raise ValueError(f"weightport: version {version} is not kept on this worker, so it cannot be rolled "
                         f"back to (kept: {kept}; keep_versions={self._keep_versions})")

    def finish_weight_update(self) -> None:
        """Swaps the received (or kept) version in (nothing happens when no version was received)."""
        pending = self._pending
        if pending is None:
            return
        t0 = time.perf_counter()
        modules = dict(self.model.named_modules())
        copied: set[int] = set()
        replaced: list = []
        keep = self._keep_versions > 0 and not pending.rollback and bool(pending.shadows)
        kept: dict[str, torch.nn.Module] = {}
        memo: dict[int, torch.Tensor] = {}
        keep_s = 0.0
        in_place = self._swaps_in_place
        try:
            for lname, shadow in pending.shadows.items():
                if keep:
                    k0 = time.perf_counter()
                    kept[lname] = snapshot(modules[lname], shadow, memo, in_place)
                    keep_s += time.perf_counter() - k0
                replaced += swap_in(modules[lname], shadow, copied, in_place)
            retie(self.model, replaced)
        finally:  # a replaced tensor is built into next only where no kept version holds it
            self._release_pending(replaced, recycle=not keep and not pending.rollback)
        swap_s = time.perf_counter() - t0
        if pending.rollback:
            self._rolled_back(pending.version, swap_s)
            return
        if keep:
            self._kept = (self._kept + [(self.applied_version, kept)])[-self._keep_versions:]
        self.applied_version = pending.version
        placement = self._placement
        copy_s, process_s = pending.copy_s, pending.process_s
        report = {"version": pending.version, "build_s": pending.seconds, "alloc_s": pending.alloc_s,
                  "copy_s": copy_s, "process_s": process_s, "swap_s": swap_s, "keep_s": keep_s,
                  "direct": len(placement.runs), "fallback": len(placement.fallback)}
        self.reports.append(report)
        logger.info("weightport: version %d live (built in %.3f s off the serving path: allocation "
                    "%.3f s, copies %.3f s, vLLM's processing %.3f s; swapped in %.4f s; %d direct "
                    "copies, %d through the weight loader)", pending.version, pending.seconds,
                    pending.alloc_s, copy_s, process_s, swap_s, report["direct"], report["fallback"])
        with self._lock:
            if self._prepared is pending:
                self._prepared = _Prepared(pending.version, {}, pending.seconds, copy_s, process_s)

    def _rolled_back(self, version: int, swap_s: float) -> None:
        """A kept version is live again: it and every newer kept one are used up, and the version
        rolled back from is never applied again (the trainer's next one must be newer)."""
        self._kept = [(v, layers) for v, layers in self._kept if v < version]
        self._rolled_back_from = max(self._rolled_back_from, self.applied_version)
        rolled_from, self.applied_version = self.applied_version, version
        with self._lock:
            self._prepared = None
        self.reports.append({"version": version, "rollback_from": rolled_from, "swap_s": swap_s})
        logger.info("weightport: rolled back from version %d to the kept version %d in %.4f s",
                    rolled_from, version, swap_s)

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=_JOIN_TIMEOUT_S)
            if self._thread.is_alive():  # kept: a new session must not start beside it
                logger.warning("weightport: the build thread did not stop within %.0f s (a build in "
                               "progress); a new trainer cannot join until it has", _JOIN_TIMEOUT_S)
            else:
                self._thread = None
        if self._sub is not None:
            self._sub.close()
            self._sub = None
        if self._notifier is not None:
            self._notifier.close()
            self._notifier = None
        with self._lock:
            self._prepared = None
            self._error = None
            self._pending = None

    # -- background -------------------------------------------------------------------------------

    def _subscriber_rank(self, replica: int, replicas: int) -> tuple[int, int]:
        """This worker's rank and the world's size: a fleet's engines in turn, within an engine its
        data-parallel ranks in turn, within those its worker."""
        from vllm.distributed.parallel_state import get_world_group

        pc = self.parallel_config
        group = get_world_group()
        engine_world = pc.data_parallel_size * group.world_size
        rank = pc.data_parallel_index * group.world_size + group.rank_in_group
        return replica * engine_world + rank, replicas * engine_world

    def _prepare_loop(self) -> None:
        try:
            self._prepare_versions()
        except Exception as e:  # anything unforeseen: the next update_weights raises it, by name
            logger.exception("weightport: the build thread stopped")
            self._fail(e)

    def _prepare_versions(self) -> None:
        from vllm.config import set_current_vllm_config

        built = 0  # version numbers belong to the trainer's session: a new trainer may restart them
        torch.set_num_threads(self._intra_op_threads)
        fresh = self._fresh
        try:  # the set's memory is allocated and touched now, not while the first version waits
            with set_current_vllm_config(self.vllm_config), torch.no_grad():
                seconds = fresh.prepare(dict(self.model.named_modules()))
            logger.info("weightport: %.0f MiB to build versions into, prepared in %.2f s",
                        fresh.nbytes / 2**20, seconds)
        except Exception as e:  # recorded: the next update_weights raises it
            logger.exception("weightport: preparing the memory to build versions into failed")
            self._fail(e)
            return
        while not self._stop.is_set():
            sub = self._sub
            try:
                sub.wait(built + 1, timeout=0.5)
            except errors.Timeout:
                continue
            except Exception as e:  # the session ended (the trainer went away): say so at receive
                self._fail(e)
                return
            if not self._claim_fresh_set():
                return
            try:
                t0 = time.perf_counter()
                with sub.pinned() as pin, set_current_vllm_config(self.vllm_config), torch.no_grad():
                    shadows, alloc_s, copy_s, process_s = self._build(pin.tensors)
                    version = pin.version
                prepared = _Prepared(version, shadows, time.perf_counter() - t0, copy_s, process_s, alloc_s)
            except Exception as e:
                logger.exception("weightport: building a received version failed")
                self._fail(e)
                return
            built = version
            with self._lock:
                self._prepared = prepared
                self._lock.notify_all()
            if self._notifier is not None:
                self._notifier.built(version, {"build_s": prepared.seconds, "alloc_s": alloc_s,
                                               "copy_s": copy_s, "process_s": process_s})

    def _claim_fresh_set(self) -> bool:
        """Waits until no swap reads the fresh set, then takes it for the next build (a built version
        not yet swapped in is dropped: the newer one replaces it). False once the engine stops."""
        with self._lock:
            while self._pending is not None and not self._stop.is_set():
                self._lock.wait(0.5)
            if self._stop.is_set():
                return False
            if self._prepared is not None and self._prepared.shadows:
                self._prepared = None
            return True

    def _fail(self, error: Exception) -> None:
        """Ends the background thread's session: the next update_weights raises `error`."""
        with self._lock:
            self._error = error
            self._lock.notify_all()

    @property
    def _on_device(self) -> bool:
        return self.device.type not in ("cpu", "meta")

    @property
    def _swaps_in_place(self) -> bool:
        """Whether the swap must copy into live tensors to keep their addresses: where vLLM
        compiles the model or captures CUDA graphs, both of which hold them. A model run eagerly
        reads its parameters from the modules at every step, so the swap replaces them."""
        from vllm.config import CompilationMode, CUDAGraphMode

        cc = self.vllm_config.compilation_config
        graphs = self._on_device and cc.cudagraph_mode != CUDAGraphMode.NONE
        return cc.mode != CompilationMode.NONE or graphs

    def _build(self, received: dict[str, torch.Tensor]) -> tuple[dict[str, torch.nn.Module], float, float, float]:
        """Shadow layers holding the received version, post-processed like vLLM's own loading, and
        the seconds allocation, the copies and the processing took."""
        return build_shadows(self.model, self._placement, self._fresh, received, post_process, self._on_device)
