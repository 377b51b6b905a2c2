"""The trainer side of the vLLM backend, and a sync client for an in-process ``vllm.LLM``.

Every trainer rank registers its own tensors (plain, FSDP2 DTensors: each rank publishes its shard,
nothing is gathered) with a weightport :class:`~weightport.Publisher`; rank 0 also runs the
coordinator and drives vLLM through a ``VLLMWeightSyncClient``: ``init_weight_transfer_engine`` once
(every vLLM worker joins as a subscriber rank), then per version ``start_weight_update``,
``update_weights({"version": v})`` and ``finish_weight_update``. The version's bytes move before
those calls, while vLLM keeps generating, so they pause generation only for the swap.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from vllm.distributed.weight_transfer.base import TrainerInitInfo, TrainerWeightTransferEngine

from .. import _options, errors
from ..publisher import Publisher
from .._tensors import dtype_name, named_tensors
from .plugin import register
from ..serving.ready import ReadyListener

register()  # the trainer's process: vLLM runs its plugins only in the processes it starts
logger = logging.getLogger("weightport.vllm")


@dataclass
class WeightportTrainerInitInfo(TrainerInitInfo):
    """``coordinator``: "host:port" rank 0 listens on (port 0: a free one, shared with the other
    ranks over torch.distributed). ``world_size``: trainer ranks. ``host``: the address vLLM's
    workers reach the coordinator and this rank at. ``keep_versions``: replaced versions every vLLM
    worker keeps, processed, to roll back to (:meth:`WeightportTrainerEngine.rollback`); each costs
    about the worker's weights in memory. ``quorum`` N > 0: a version commits once every worker
    still there has it and at least N do (a fleet goes on without an engine that died; 0: every
    worker or none). ``relay_fanout``: how many workers each receiving worker feeds (1: a chain;
    0: the trainer feeds every worker itself)."""

    backend: ClassVar[str] = "weightport"
    coordinator: str = "127.0.0.1:0"
    world_size: int = 1
    host: str = "127.0.0.1"
    transport: str = "auto"
    delta: bool = True
    chunk_bytes: int = 0
    timeout: float = 120.0
    secret: bytes | None = None  # default: 32 random bytes from rank 0
    keep_versions: int = 0
    quorum: int = 0
    relay_fanout: int = 1

    def __post_init__(self):
        # The bounds the Publisher and the CLI use, checked before any worker hears of them.
        self.rank, self.world_size = _options.rank_in(self.rank, self.world_size)
        self.chunk_bytes = _options.whole("chunk_bytes", self.chunk_bytes)
        self.timeout = _options.number("timeout", self.timeout)
        self.keep_versions = _options.whole("keep_versions", self.keep_versions)
        self.quorum = _options.whole("quorum", self.quorum)
        self.relay_fanout = _options.whole("relay_fanout", self.relay_fanout)
        _options.coordinator(self.coordinator)


def _state_of(source: Any) -> Mapping[str, Any]:
    """The tensors to publish: a module's parameters, a state dict, or a vLLM WeightSource over a
    module (its parameters, without the gathers its iteration would do)."""
    module = getattr(source, "_module", None)
    if module is not None:
        source = module
    if isinstance(source, torch.nn.Module):
        return dict(source.named_parameters())
    if isinstance(source, Mapping):
        return source
    raise TypeError(f"weightport trainer: source must be a module, a state dict or a ModuleSource, "
                    f"got {type(source).__name__}")


def _share(obj: Any, world_size: int) -> Any:
    """Rank 0's `obj` on every rank (torch.distributed must be initialized when world_size > 1)."""
    if world_size == 1:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


class WeightportTrainerEngine(TrainerWeightTransferEngine[WeightportTrainerInitInfo]):
    init_info_cls = WeightportTrainerInitInfo

    def __init__(self, *, client, source, is_sender, publisher: Publisher, info: WeightportTrainerInitInfo,
                 ready: ReadyListener | None = None):
        super().__init__(client=client, source=source, is_sender=is_sender)
        self.publisher = publisher
        self.info = info
        self.ready = ready
        self._ready_heard = ready is not None
        self.version = 0
        self.reports: list[dict[str, Any]] = []
        self._plan_egress: dict[str, int] | None = None  # the plan's, read once (it never changes)

    @classmethod
    def trainer_init(cls, init_info: WeightportTrainerInitInfo, *, client, source=None):
        if source is None:
            raise ValueError("weightport trainer: a source (module, state dict or ModuleSource) is needed")
        state = _state_of(source)
        rank, world = init_info.rank, init_info.world_size
        tensors = [[name, list(t.shape), dtype_name(t.to_local() if hasattr(t, "to_local") else t, name)]
                   for name, t in named_tensors(state)]
        # First every vLLM worker checks the checkpoint against its model: a name it does not have
        # or a shape its loader refuses fails here, before any rank joins or any byte moves.
        checked = None
        if rank == 0:
            try:
                client.init_weight_transfer_engine({"tensors": tensors})
            except Exception as e:
                checked = f"vLLM refused the trainer's checkpoint: {e}"
        checked = _share(checked, world)
        if checked is not None:
            raise ValueError(checked)
        secret = _share(init_info.secret or (os.urandom(32) if rank == 0 else None), world)
        publisher = Publisher(init_info.coordinator, secret=secret,
                              rank=rank, world_size=world, host=init_info.host,
                              transport=init_info.transport, chunk_bytes=init_info.chunk_bytes,
                              timeout=init_info.timeout, quorum=init_info.quorum,
                              relay_fanout=init_info.relay_fanout)
        coordinator = _share(publisher.coordinator if rank == 0 else None, world)
        if rank != 0:  # other ranks were created before rank 0's port was known: reconnect to it
            publisher._args.coordinator = coordinator
        ready = ReadyListener(init_info.host, secret) if rank == 0 else None
        engine = cls(client=client, source=source, is_sender=rank == 0, publisher=publisher, info=init_info,
                     ready=ready)
        joined: list[Exception] = []

        def init_workers():
            try:
                client.init_weight_transfer_engine({
                    "coordinator": coordinator, "secret_hex": secret.hex(), "tensors": tensors,
                    "transport": init_info.transport, "delta": init_info.delta, "timeout": init_info.timeout,
                    "notify": ready.address, "keep_versions": init_info.keep_versions})
            except Exception as e:  # raised on the caller's thread once the join returns
                joined.append(e)

        rpc = threading.Thread(target=init_workers, name="weightport-init-workers") if rank == 0 else None
        if rpc is not None:
            rpc.start()
        try:
            publisher.register(state)  # returns once every trainer rank and vLLM worker has joined
        finally:
            if rpc is not None:
                rpc.join()
        if joined:
            engine.shutdown()
            raise joined[0]
        return engine

    def send_weights(self, version: int | None = None) -> dict[str, Any]:
        """Publishes the source's current values as `version` (default: the next one) and, on rank 0,
        has vLLM swap them in; returns rank 0's report: version, bytes, update_s (publish to live),
        transfer_s (publish to committed everywhere; of it publish_s: this rank copying its tensors
        into its send buffer and hashing them), build_s (committed to built by every worker,
        while vLLM may generate), pause_s (the swap calls, during which vLLM does not) and
        worker_build: the slowest worker's seconds per build phase (build_s, alloc_s, copy_s,
        process_s: its whole build, allocating, the box copies, vLLM's post-processing)."""
        version = self.version + 1 if version is None else int(version)
        t0 = time.perf_counter()
        self.publisher.publish(version)
        t_published = time.perf_counter()
        if not self.is_sender:
            self.publisher.wait(version, self.info.timeout)
            self.version = version
            return {"version": version}
        outcome = self.publisher.wait(version, self.info.timeout) or {}
        t_commit = time.perf_counter()
        # Every worker builds the version off the serving path; swap once they all have. If their
        # notices never came (a firewall between them and this host), stop waiting for them:
        # update_weights then waits for the build itself.
        built = self._ready_heard and self.ready.wait(version, self.info.timeout)
        if not built and self._ready_heard:
            self._ready_heard = False
            logger.warning("weightport: no 'version built' notice from vLLM's workers reached %s within "
                           "%.0f s; swapping without waiting for them from now on (the swap then "
                           "includes the build)", self.ready.address, self.info.timeout)
        t1 = time.perf_counter()
        self.client.start_weight_update()
        self.client.update_weights({"version": version, "timeout": self.info.timeout})
        self.client.finish_weight_update(str(version))  # vLLM reports it as its weight version
        t2 = time.perf_counter()
        self.version = version
        report = {"version": version, "bytes": int(outcome.get("bytes", 0)), "update_s": t2 - t0,
                  "transfer_s": t_commit - t0, "publish_s": t_published - t0, "build_s": t1 - t_commit,
                  "pause_s": t2 - t1,
                  "built_before_swap": built, "worker_build": self.ready.phases(version) if built else {},
                  **self._egress()}
        self.reports.append(report)
        return report

    def _egress(self) -> dict[str, int]:
        """What a whole version moves by the plan: ``source_bytes`` from the trainer's ranks and
        ``relayed_bytes`` from one vLLM worker to another (a fleet's replicas feed each other)."""
        if self._plan_egress is None:
            service = getattr(self.publisher, "_service", None)
            text = service.plan_json() if service is not None else ""
            self._plan_egress = plan_egress(text) if text else {}
        return self._plan_egress

    def rollback(self, version: int) -> dict[str, Any]:
        """Makes the kept `version` live again on every vLLM worker, or on none: a worker that does
        not keep it refuses before any swaps (rank 0 only; nothing moves, the trainer's publisher is
        not involved). The next version sent must be newer than the one rolled back from."""
        if not self.is_sender:
            raise errors.FailedPrecondition("weightport trainer: rollback is called on rank 0, which drives vLLM")
        rollback_fleet(self.client, version, self.info.timeout)
        return {"version": version, "rolled_back_from": self.version}

    def reform(self) -> "WeightportTrainerEngine":
        """A new session with the same trainer, source and client: every engine the client reaches
        now joins it (a fleet's engines added with :meth:`FleetClient.add`, or dropped ones that
        came back), and versions go on from this one's. Every trainer rank calls it; this engine is
        shut down. Each worker keeps its learned placement, but starts with nothing received, so the
        next version moves whole (no delta) and versions kept for a rollback are gone."""
        self.shutdown()
        engine = type(self).trainer_init(self.info, client=self.client, source=self.source)
        engine.version = self.version
        return engine

    def shutdown(self) -> None:
        if self.ready is not None:
            self.ready.close()
        self.publisher.close()


def plan_egress(plan_json: str) -> dict[str, int]:
    """A plan's bytes per whole version by who sends them: its source ranks, or relaying ranks."""
    out = {"source_bytes": 0, "relayed_bytes": 0}
    for step in json.loads(plan_json).get("steps", []):
        out["source_bytes" if step["from"]["side"] == "src" else "relayed_bytes"] += int(step["bytes"])
    return out


def rollback_fleet(client: Any, version: int, timeout: float = 120.0) -> float:
    """Rolls every vLLM worker behind `client` (a ``VLLMWeightSyncClient``) back to the kept
    `version`, all or none, in one of vLLM's update sessions: every worker first checks that it
    keeps the version (one that does not raises, and the session closes with nothing swapped
    anywhere), then takes its kept layers and swaps them in at ``finish_weight_update``. Works
    without a trainer. Returns the seconds it took."""
    t0 = time.perf_counter()
    info = {"version": int(version), "timeout": timeout, "rollback": True}
    client.start_weight_update()
    try:
        client.update_weights({**info, "check_only": True})
    except BaseException:
        try:  # closes the session on the workers that passed the check; they have nothing to swap
            client.finish_weight_update()
        except Exception:  # the workers that refused have closed theirs already
            pass
        raise
    client.update_weights(info)
    client.finish_weight_update(str(version))
    return time.perf_counter() - t0


class FleetClient:
    """One ``VLLMWeightSyncClient`` over a fleet of alike vLLM engines (data-parallel replicas in
    their own processes or hosts, each behind its own client): the trainer drives them as one.

    Their workers join the trainer's group as ranks ``replica * engine_world + worker``, so the
    trainer's rank sends one copy and the replicas relay it to each other (the publisher's relay
    fan-out). Every version is checked on every engine (built, or kept for a rollback) before any
    swaps, so the fleet serves one version: an engine that cannot take it fails the update for all,
    with nothing swapped anywhere. The calls go to the engines at once, each on its own thread."""

    def __init__(self, clients: list[Any], min_replicas: int | None = None):
        if not clients:
            raise ValueError("weightport fleet: at least one engine's client is needed")
        self.clients = list(clients)
        # None: every engine or none. k: an engine that cannot be reached (its client fails to
        # connect or times out) is dropped from the fleet while at least k remain; give the
        # trainer a quorum too, so versions commit without its workers.
        self.min_replicas = len(self.clients) if min_replicas is None else _options.whole("replicas", min_replicas)
        self.lost: dict[int, str] = {}  # replica -> why it was dropped
        self.session: list[int] = list(range(len(self.clients)))  # the clients in the trainer's session, in rank order

    def add(self, client: Any) -> int:
        """Adds an engine (a replica started late, or a replacement): it joins at the trainer's
        next session (:meth:`WeightportTrainerEngine.reform`). Returns its index in `clients`."""
        self.clients.append(client)
        return len(self.clients) - 1

    def _each(self, call) -> None:
        """Runs call(client, i) for every engine still in the session at once; drops an unreachable
        one while enough remain, else raises the first error (by replica), naming the replica."""
        live = [i for i in self.session if i not in self.lost]
        failed: dict[int, Exception] = {}

        def one(i):
            try:
                call(self.clients[i], i)
            except Exception as e:  # carried to the caller's thread below
                failed[i] = e

        threads = [threading.Thread(target=one, args=(i,), name=f"weightport-fleet-{i}") for i in live]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        unreachable = [i for i in sorted(failed) if _unreachable(failed[i])]
        if unreachable and len(live) - len(unreachable) >= self.min_replicas and len(unreachable) == len(failed):
            for i in unreachable:
                self.lost[i] = str(failed[i])[:300]
                logger.warning("weightport fleet: replica %d of %d cannot be reached, dropped (%d left): %s",
                               i, len(self.clients), len(live) - len(unreachable), self.lost[i])
            return
        for i in sorted(failed):
            message = f"replica {i} of {len(self.clients)}: {failed[i]}"
            try:
                named = type(failed[i])(message)
            except Exception:  # a type that wants other arguments: the message still names the replica
                named = errors.Error(message)
            raise named from failed[i]

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        if not init_info.get("coordinator"):
            # A trainer's first call (the checkpoint checked, nothing joined): every engine is asked
            # again, those dropped before included, and the session is those that answer (while at
            # least min_replicas do), so an engine down or not yet up holds no one back.
            self.lost, self.session = {}, list(range(len(self.clients)))
            self._each(lambda c, i: c.init_weight_transfer_engine(init_info))
            self.session = [i for i in self.session if i not in self.lost]
            return
        rank_of = {i: k for k, i in enumerate(self.session)}  # engines numbered in session order
        self._each(lambda c, i: c.init_weight_transfer_engine(
            {**init_info, "replica": rank_of[i], "replicas": len(rank_of)}))

    def shutdown_weight_transfer_engine(self) -> None:
        self._each(lambda c, i: c.shutdown_weight_transfer_engine())

    def start_weight_update(self) -> None:
        self._each(lambda c, i: c.start_weight_update())

    def update_weights(self, update_info: dict[str, Any]) -> None:
        try:  # every engine first has the version ready (or kept), so none swaps alone
            self._each(lambda c, i: c.update_weights({**update_info, "check_only": True}))
        except BaseException:
            try:  # nothing was taken for the swap: this only ends each engine's update session
                self.finish_weight_update()
            except Exception:
                pass
            raise
        if not update_info.get("check_only"):
            self._each(lambda c, i: c.update_weights(update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._each(lambda c, i: c.finish_weight_update(weight_version))


def _unreachable(error: Exception) -> bool:
    """Whether a client's call failed to reach its engine (refused, reset, timed out), as opposed to
    the engine answering with an error."""
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    return any(c.__name__ in ("ConnectionError", "Timeout") for c in type(error).__mro__)  # requests'


class LLMWeightSyncClient:
    """``VLLMWeightSyncClient`` for a ``vllm.LLM`` in this process (its RL methods take requests
    wrapping the info; the protocol passes the info itself)."""

    def __init__(self, llm: Any):
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def shutdown_weight_transfer_engine(self) -> None:
        self.llm.shutdown_weight_transfer_engine()

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version)
