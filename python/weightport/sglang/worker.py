"""The SGLang side: a custom weight loader that makes each tensor-parallel worker a weightport rank.

SGLang starts with ``--custom-weight-loader weightport.sglang.load`` (``custom_weight_loader=
["weightport.sglang.load"]`` for ``sglang.Engine``); the trainer (:mod:`.trainer`) then calls
``update_weights_from_tensor(..., load_format="weightport.sglang.load")``, which SGLang runs in every
scheduler process as ``load(model, named_tensors)`` between its steps. The tensors carry no
weights: one empty tensor whose name is a command (``weightport {json}``):

- ``check``: learn the placement by a dry run of the model's own ``load_weights``
  (:mod:`weightport.serving.placement`) and refuse a checkpoint that does not fit, before anything
  joins;
- ``join``: bind the boxes this worker needs as a :class:`~weightport.Subscriber` and start the
  background build (:class:`~weightport.serving.builder.VersionBuilder`): versions then arrive and
  are built into shadow layers while SGLang generates;
- ``swap``: make the built version live (a few assignments on a model run eagerly; a copy into the
  live tensors where CUDA graphs hold their addresses);
- ``leave``: stop building and leave the session.

An exception escaping a custom loader ends SGLang's scheduler, so this one never raises: each
command's outcome goes back to the trainer on the "version built" channel
(:mod:`weightport.serving.ready`), which the trainer reads to raise naming the version, and a
refused swap leaves the model serving the version it had.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import torch

from ..serving.placement import ModelPlacement, TensorMeta, fresh_tensor, learn_placement
from ..serving.ready import ReadyNotifier
from ..serving.shadow import FreshSet, retie, swap_in
from ..serving.builder import BoxLayout, VersionBuilder, box_stand_ins
from .hooks import hooks, post_process

logger = logging.getLogger("sglang.weightport")  # under SGLang's logger: its handlers and level

COMMAND_PREFIX = "weightport "


def command_name(command: dict[str, Any]) -> str:
    """The tensor name that carries `command` to :func:`load`."""
    return COMMAND_PREFIX + json.dumps(command, separators=(",", ":"))


def _tp_rank() -> tuple[int, int]:
    from sglang.srt.distributed.parallel_state import (get_tensor_model_parallel_rank,
                                                       get_tensor_model_parallel_world_size)

    return get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()


class _Worker:
    """One scheduler process's weightport state, for one model."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.rank, self.world = _tp_rank()
        self.placement: ModelPlacement | None = None
        self.placement_key: Any = None
        self.fresh: FreshSet | None = None
        self.sub = None
        self.builder: VersionBuilder | None = None
        self.notifier: ReadyNotifier | None = None
        self.notify_key: tuple[str, str] | None = None  # the trainer's address and secret it answers
        self.applied_version = 0
        self.device = torch.device("cpu")  # where the model's parameters live (set at join)
        self.reports: list[dict[str, Any]] = []

    def tell(self, cmd: dict[str, Any]) -> ReadyNotifier | None:
        """The notifier answering `cmd` (the session's, or a new one for the address it names)."""
        address, secret = cmd.get("notify", ""), cmd.get("secret_hex", "")
        if address and secret and (address, secret) != self.notify_key:
            if self.notifier is not None:
                self.notifier.close()
            self.notifier = ReadyNotifier(address, bytes.fromhex(secret), self.rank, self.world, logger.warning)
            self.notify_key = (address, secret)
        return self.notifier

    def learn(self, tensors: list) -> ModelPlacement:
        metas = [TensorMeta(str(n), tuple(int(x) for x in s), str(d)) for n, s, d in tensors]
        key = tuple(metas)
        if self.placement is None or self.placement_key != key:
            with torch.no_grad():
                self.placement = learn_placement(self.model, metas, hooks())
            self.placement_key, self.fresh = key, None
            logger.info("weightport: placement learned: %s", self.placement.summary())
        return self.placement

    def join(self, cmd: dict[str, Any]) -> None:
        from ..subscriber import Subscriber

        self.leave()
        placement = self.learn(cmd["tensors"])
        device = next((p.device for p in self.model.parameters()), torch.device("cpu"))
        if self.fresh is None:
            self.fresh = FreshSet(placement.templates,
                                  make=lambda tpl, layer: fresh_tensor(tpl, layer, hooks(), device=device,
                                                                       fill=0.0 if tpl.zero else None),
                                  rebind=hooks().bind)
        sub = Subscriber(cmd["coordinator"], secret=bytes.fromhex(cmd["secret_hex"]), rank=self.rank,
                         world_size=self.world, transport=cmd.get("transport", "auto"),
                         timeout=float(cmd.get("timeout", 120.0)), delta=bool(cmd.get("delta", True)))
        sub.bind(box_stand_ins(placement), layout=BoxLayout(placement.boxes), mode="copy")
        self.sub, self.applied_version, self.device = sub, 0, device
        self.builder = VersionBuilder(self.model, placement, self.fresh, sub, post_process=post_process,
                                      on_device=device.type != "cpu", notifier=self.notifier, log=logger).start()

    def swap(self, version: int, timeout: float) -> None:
        if self.builder is None:
            raise RuntimeError("weightport: no session on this worker (the join was not done or failed)")
        built = self.builder.take(version, timeout)
        # CUDA graphs hold the live tensors' addresses: there, same-layout tensors are copied into.
        in_place = self.device.type != "cpu"
        modules = dict(self.model.named_modules())
        replaced: list = []
        try:
            copied: set[int] = set()
            for lname, shadow in built.shadows.items():
                replaced += swap_in(modules[lname], shadow, copied, in_place)
            retie(self.model, replaced)
        finally:
            self.builder.done(replaced, recycle=True)
        self.applied_version = built.version
        self.reports.append({"version": built.version, "build_s": built.seconds, "copy_s": built.copy_s,
                             "process_s": built.process_s})
        logger.info("weightport: version %d live (built in %.3f s off the serving path: copies %.3f s, "
                    "processing %.3f s)", built.version, built.seconds, built.copy_s, built.process_s)

    def leave(self) -> None:
        if self.builder is not None and not self.builder.stop():
            logger.warning("weightport: a build in progress did not stop within 30 s")
        self.builder = None
        if self.sub is not None:
            self.sub.close()
            self.sub = None


_WORKERS: dict[int, _Worker] = {}  # id(model) -> its state in this process
_LOCK = threading.Lock()


def _run(worker: _Worker, cmd: dict[str, Any]) -> tuple[int, str]:
    """Runs one command; returns (the version it concerns, why it failed or "")."""
    op, version = cmd.get("op"), int(cmd.get("version", 0))
    try:
        if op == "check":
            worker.learn(cmd["tensors"])
        elif op == "join":
            worker.join(cmd)
        elif op == "swap":
            worker.swap(version, float(cmd.get("timeout", 120.0)))
        elif op == "leave":
            worker.leave()
        else:
            raise ValueError(f"unknown command {op!r}")
    except Exception as e:  # said to the trainer: an exception here would end SGLang's scheduler
        logger.exception("weightport: %s (version %d) failed on tensor-parallel rank %d", op, version, worker.rank)
        return version, f"{type(e).__name__}: {e}" or "failed"
    return version, ""


def load(model: torch.nn.Module, named_tensors: list[tuple[str, Any]]) -> None:
    """SGLang's custom weight loader entry (``load_format="weightport.sglang.load"``): runs the
    commands named in `named_tensors` on this worker; never raises."""
    with _LOCK:
        worker = _WORKERS.get(id(model))
        if worker is None:
            try:
                worker = _WORKERS[id(model)] = _Worker(model)
            except Exception:
                logger.exception("weightport: this worker cannot take part (its tensor-parallel rank is unknown)")
                return
    for name, _ in named_tensors:
        if not str(name).startswith(COMMAND_PREFIX):
            logger.error("weightport: %r is not a weightport command; weights are sent by weightport, "
                         "not in update_weights_from_tensor", str(name)[:80])
            continue
        try:
            cmd = json.loads(name[len(COMMAND_PREFIX):])
        except ValueError as e:
            logger.error("weightport: a command that is not JSON (%s)", e)
            continue
        notifier = worker.tell(cmd)
        version, error = _run(worker, cmd)
        if notifier is not None:
            notifier.answer(str(cmd.get("op")), version, error)
