"""The vLLM worker side: ``weight_transfer_config={"backend": "weightport"}``.

Each vLLM worker is a weightport subscriber rank. At ``init_transfer_engine`` it learns, from a dry
run of the model's own loader (:mod:`.placement`), which box of which checkpoint tensor it needs,
binds exactly those boxes (in the dtype its parameters have: a bf16 trainer into an fp32 engine is
converted in flight) and joins the trainer's group. Versions then arrive in the background while
vLLM keeps generating; a background thread builds each committed version into *shadow* layers:
fresh parameters in vLLM's loading layout filled by direct box copies (or, for what a box cannot
express, by the parameter's own weight loader), then vLLM's post-processing (repacking for the CPU
GEMMs, quantization) run on the shadow. ``finish_weight_update`` only swaps the shadows in (copying
into live tensors whose layout did not change, replacing the rest), so generation pauses for the
swap, not for the transfer or the processing. A version that fails or never commits leaves the live model untouched.
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

from .. import errors
from ..layouts import Layout
from ..subscriber import Subscriber
from .placement import ModelPlacement, TensorMeta, fresh_tensor, learn_placement
from .ready import ReadyNotifier
from .shadow import copy_runs, post_process, shadow_of, swap_in

logger = init_logger("vllm.weightport")  # under vLLM's logger: its handlers and level

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


@dataclass
class WeightportUpdateInfo(WeightTransferUpdateInfo):
    """``update_weights({"version": v})``: apply version `v` (or a newer committed one)."""

    version: int
    timeout: float = 120.0


class _Boxes(Layout):
    """The subscriber layout: each checkpoint tensor's box this worker needs."""

    def __init__(self, boxes: dict[str, tuple[list[int], list[int], list[int]]]):
        self.boxes = boxes

    def slice_of(self, name, shape):
        return self.boxes[name]


@dataclass
class _Prepared:
    version: int
    shadows: dict[str, torch.nn.Module]
    seconds: float
    copy_s: float = 0.0  # of `seconds`: the box copies, and vLLM's post-processing
    process_s: float = 0.0


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
        self._error: BaseException | None = None
        self._pending: _Prepared | None = None
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
        placement = self._placement
        rank, world = self._subscriber_rank()
        fake = [(name, torch.empty(1, dtype=placement.dtypes[name]).expand(*box[2]))
                for name, box in placement.boxes.items()]
        sub = Subscriber(init_info.coordinator, secret=bytes.fromhex(init_info.secret_hex), rank=rank,
                         world_size=world, transport=init_info.transport, timeout=init_info.timeout,
                         delta=init_info.delta)
        sub.bind(fake, layout=_Boxes(placement.boxes), mode="copy")
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
            raise RuntimeError("weightport: init_weight_transfer_engine was not called")
        self._pending = None

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
            while True:
                if self._error is not None:
                    raise RuntimeError(f"weightport: version {update_info.version} cannot be applied: "
                                       f"{self._error}") from self._error
                if self._prepared is not None and self._prepared.version >= update_info.version:
                    self._pending = self._prepared
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"weightport: version {update_info.version} was not committed "
                                       f"within {update_info.timeout:.0f} s (newest committed: "
                                       f"{self._sub.live_version if self._sub else 0})")
                self._lock.wait(min(left, 0.5))

    def finish_weight_update(self) -> None:
        """Swaps the received version in (nothing happens when no version was received)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        t0 = time.perf_counter()
        modules = dict(self.model.named_modules())
        copied: set[int] = set()
        for lname, shadow in pending.shadows.items():
            swap_in(modules[lname], shadow, copied)
        swap_s = time.perf_counter() - t0
        self.applied_version = pending.version
        placement = self._placement
        copy_s, process_s = pending.copy_s, pending.process_s
        report = {"version": pending.version, "build_s": pending.seconds, "copy_s": copy_s,
                  "process_s": process_s, "swap_s": swap_s, "direct": len(placement.runs),
                  "fallback": len(placement.fallback)}
        self.reports.append(report)
        logger.info("weightport: version %d live (built in %.3f s off the serving path: copies %.3f s, "
                    "vLLM's processing %.3f s; swapped in %.4f s; %d direct copies, %d through the "
                    "weight loader)", pending.version, pending.seconds, copy_s, process_s, swap_s,
                    report["direct"], report["fallback"])
        with self._lock:
            if self._prepared is pending:
                self._prepared = _Prepared(pending.version, {}, pending.seconds, copy_s, process_s)

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
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

    def _subscriber_rank(self) -> tuple[int, int]:
        from vllm.distributed.parallel_state import get_world_group

        pc = self.parallel_config
        group = get_world_group()
        return pc.data_parallel_index * group.world_size + group.rank_in_group, \
            pc.data_parallel_size * group.world_size

    def _prepare_loop(self) -> None:
        from vllm.config import set_current_vllm_config

        built = 0  # version numbers belong to the trainer's session: a new trainer may restart them
        torch.set_num_threads(self._intra_op_threads)
        while not self._stop.is_set():
            sub = self._sub
            try:
                sub.wait(built + 1, timeout=0.5)
            except errors.Timeout:
                continue
            except BaseException as e:  # the session ended (the trainer went away): say so at receive
                self._fail(e)
                return
            try:
                t0 = time.perf_counter()
                with sub.pinned() as pin, set_current_vllm_config(self.vllm_config), torch.no_grad():
                    shadows, copy_s, process_s = self._build(pin.tensors)
                    version = pin.version
                prepared = _Prepared(version, shadows, time.perf_counter() - t0, copy_s, process_s)
            except BaseException as e:
                logger.exception("weightport: building a received version failed")
                self._fail(e)
                return
            built = version
            with self._lock:
                self._prepared = prepared
                self._lock.notify_all()
            if self._notifier is not None:
                self._notifier.built(version)

    def _fail(self, error: BaseException) -> None:
        """Ends the background thread's session: the next update_weights raises `error`."""
        with self._lock:
            self._error = error
            self._lock.notify_all()

    @property
    def _on_device(self) -> bool:
        return self.device.type not in ("cpu", "meta")

    def _build(self, received: dict[str, torch.Tensor]) -> tuple[dict[str, torch.nn.Module], float, float]:
        """Shadow layers holding the received version, post-processed like vLLM's own loading, and
        the seconds the copies and the processing took."""
        placement = self._placement
        modules = dict(self.model.named_modules())
        shadows: dict[str, torch.nn.Module] = {}
        fresh: dict[tuple[str, str], torch.Tensor] = {}
        by_group: dict[Any, torch.Tensor] = {}  # tied parameters stay one tensor
        for (lname, pname), tpl in placement.templates.items():
            layer = modules[lname]
            shadow = shadows.get(lname)
            if shadow is None:
                shadow = shadow_of(layer)
                shadows[lname] = shadow
            t = by_group.get(tpl.group)
            if t is None:
                t = fresh_tensor(tpl, shadow, device=self.device, fill=0.0 if tpl.zero else None)
                by_group[tpl.group] = t
            shadow._parameters[pname] = t
            fresh[(lname, pname)] = t
        t0 = time.perf_counter()
        copy_runs(placement.runs, placement.boxes, received, fresh)
        for c in placement.fallback:
            args = dict(c.arguments)
            args[c.param_arg] = fresh[(c.layer, c.param)]
            args[c.tensor_arg] = received[c.tensor]
            c.loader(**args)
        if self._on_device:  # the copies read the pin, released after this
            torch.accelerator.synchronize()
        t1 = time.perf_counter()
        for shadow in shadows.values():
            post_process(shadow)
        return shadows, t1 - t0, time.perf_counter() - t1
