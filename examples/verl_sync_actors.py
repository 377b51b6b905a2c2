"""The Ray actors of examples/verl_sync.py and the loop that drives verl's CheckpointEngineManager.

Trainer ranks are verl ``Worker``s with the two methods verl's manager calls on an actor worker group
(``execute_checkpoint_engine`` and ``update_weights``); rollout replicas are verl's own
``CheckpointEngineWorker`` (the class verl runs beside each inference server) around a server adapter
that loads what it receives into the replica's model.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import threading
import time
from typing import Any

import ray
import torch
from safetensors.torch import load_file
from verl.checkpoint_engine import CheckpointEngineManager, CheckpointEngineRegistry, CheckpointEngineWorker
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup
from verl.utils.import_utils import import_external_libs
from verl.workers.config import CheckpointEngineConfig, RolloutConfig
from verl.workers.rollout import BaseRollout
from verl.workers.rollout.utils import ensure_async_iterator

import weightport.ray as wp_ray


def load_model(model_dir: str) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(pathlib.Path(model_dir).glob("*.safetensors")):
        tensors.update(load_file(str(path)))
    return tensors


def digest(tensors: dict[str, torch.Tensor]) -> str:
    """blake2b over every tensor's name, dtype, shape and bytes: equal digests, equal models."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        h.update(f"{name}|{t.dtype}|{list(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def train_step(tensors: dict[str, torch.Tensor], step: int) -> None:
    """The same change on every trainer rank (verl's FSDP engine gives every rank the whole tensor)."""
    with torch.no_grad():
        for t in tensors.values():
            if t.is_floating_point():
                t.add_(1e-3 * step)


def engine_config(a: argparse.Namespace) -> CheckpointEngineConfig:
    return CheckpointEngineConfig(backend=a.backend, custom_backend_module=a.backend_module,
                                  engine_kwargs={a.backend: a.engine_kwargs},
                                  update_weights_bucket_megabytes=a.bucket_mb)


class Trainer(Worker):
    """One trainer rank: its model, and the checkpoint engine verl's actor worker builds."""

    def __init__(self, model_dir: str, config: CheckpointEngineConfig):
        super().__init__()
        self.tensors = load_model(model_dir)
        import_external_libs(config.custom_backend_module or None)
        self.checkpoint_engine = CheckpointEngineRegistry.new(
            config.backend, is_master=self.rank == 0, bucket_size=config.update_weights_bucket_megabytes << 20,
            **config.engine_kwargs.get(config.backend, {}))

    @register(dispatch_mode=Dispatch.DP_COMPUTE, blocking=False)
    def execute_checkpoint_engine(self, method: str, *args, **kwargs):
        return getattr(self.checkpoint_engine, method)(*args, **kwargs)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps: int | None = None, mode: str = "auto"):
        metrics = await self.checkpoint_engine.send_weights(iter(self.tensors.items()), global_steps=global_steps)
        return metrics or {}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def train(self, step: int) -> str:
        train_step(self.tensors, step)
        return digest(self.tensors)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def engine_timings(self) -> dict[str, float]:
        return dict(getattr(self.checkpoint_engine, "timings", {}))


class ModelAdapter(BaseRollout):
    """Stands in for the inference server: loads each received tensor into a shadow of the replica's
    model and swaps the shadow in at the end (one copy per tensor, as a server with shadow weights
    does). All or nothing: a tensor that does not match the model, or one that never came, fails
    the update naming it, and the model keeps the version it had."""

    def __init__(self, model_dir: str):  # no server config: nothing is served here
        self.model_dir, self.tensors, self.shadow = model_dir, None, None
        self.replica_rank, self.is_leader_rank = 0, True

    async def resume(self, tags: list[str]):
        pass

    async def release(self):
        pass

    def _load(self) -> None:
        if self.tensors is None:
            self.tensors = load_model(self.model_dir)
            self.shadow = {name: torch.empty_like(t) for name, t in self.tensors.items()}

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs):
        if wire_format != "named_tensors":
            raise ValueError(f"this adapter loads named tensors, not {wire_format!r}")
        self._load()
        seen = set()
        async for name, tensor in ensure_async_iterator(weights):
            own = self.shadow.get(name)
            if own is None:
                raise ValueError(f"the trainer sent tensor '{name}', which the replica's model "
                                 f"({self.model_dir}) does not have")
            if own.shape != tensor.shape or own.dtype != tensor.dtype:
                raise ValueError(f"tensor '{name}': the replica's model has {own.dtype} {list(own.shape)}, "
                                 f"the trainer sent {tensor.dtype} {list(tensor.shape)}")
            own.copy_(tensor)
            seen.add(name)
        missing = sorted(set(self.tensors) - seen)
        if missing:
            raise ValueError(f"the trainer sent no '{missing[0]}' ({len(missing)} of the replica's tensors missing)")
        self.tensors, self.shadow = self.shadow, self.tensors

    def digest(self) -> str:
        self._load()
        return digest(self.tensors)


class ReplicaWorker(CheckpointEngineWorker):
    """verl's CheckpointEngineWorker, plus a digest of the model its adapter holds."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def digest(self) -> str:
        return self.server_adapter.digest()


class Replica:
    """What verl's manager needs of a rollout replica: its workers, and the calls around an update
    (nothing generates here, so they have nothing to do)."""

    def __init__(self, worker: Any):
        self.workers = [worker]

    async def abort_all_requests(self, reject_request: bool = False):
        pass

    async def resume_generation(self):
        pass

    async def release_kv_cache(self):
        pass

    async def resume_kv_cache(self):
        pass


class TimedManager(CheckpointEngineManager):
    """verl's manager, timing its prepare + build_topology + init_process_group round (Ray's calls
    included) for the per-step overhead."""

    group_s = 0.0

    def build_process_group(self, rollout: RayWorkerGroup):
        start = time.perf_counter()
        super().build_process_group(rollout)
        self.group_s = time.perf_counter() - start


def _env(rank: int, world: int, addr: str) -> dict[str, Any]:
    return {"env_vars": {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": addr, "MASTER_PORT": "0",
                         "DIST_INIT_METHOD": f"tcp://{addr}:0" if world == 1 else ""}}


def start_trainers(a: argparse.Namespace, config: CheckpointEngineConfig, node: dict[str, Any]) -> RayWorkerGroup:
    trainer_cls = ray.remote(Trainer)
    trainers = [trainer_cls.options(num_cpus=0, runtime_env=_env(r, a.trainer_ranks, node["address"]),
                                    scheduling_strategy=wp_ray.spread(1, [node])[0]).remote(a.model, config)
                for r in range(a.trainer_ranks)]
    return RayWorkerGroup(worker_handles=trainers, ray_cls_with_init=RayClassWithInitArgs(cls=Trainer))


def start_replica(a: argparse.Namespace, config: CheckpointEngineConfig, node: dict[str, Any]) -> Any:
    """One rollout replica: verl's CheckpointEngineWorker (restarted by Ray once if it dies)."""
    rollout_config = RolloutConfig(name="vllm", checkpoint_engine=config)
    adapter = ModelAdapter(a.rollout_model or a.model)
    return ray.remote(ReplicaWorker).options(
        num_cpus=0, max_restarts=1, runtime_env=_env(0, 1, node["address"]),
        scheduling_strategy=wp_ray.spread(1, [node])[0]).remote(rollout_config, None, adapter)


def egress_bytes() -> int:
    """Bytes this network namespace's links have sent (the driver runs on the trainer's host)."""
    net = pathlib.Path("/sys/class/net")
    return sum(int((d / "statistics" / "tx_bytes").read_text()) for d in net.iterdir() if d.name != "lo")


def run(a: argparse.Namespace) -> dict[str, Any]:
    config = engine_config(a)
    nodes = wp_ray.alive_nodes()
    replica_nodes = nodes[1:] or nodes  # the trainer's host is the first; replicas on the others
    actor_wg = start_trainers(a, config, nodes[0])
    workers = [start_replica(a, config, replica_nodes[i % len(replica_nodes)]) for i in range(a.replicas)]
    manager = TimedManager(config=config, actor_wg=actor_wg, replicas=[Replica(w) for w in workers])
    steps, previous = [], None
    for step in range(a.steps + 1):  # step 0: the initial sync
        if step == a.add_replica_at_step:  # a replica that joins late: verl's elastic scale-up
            workers.append(start_replica(a, config, replica_nodes[len(workers) % len(replica_nodes)]))
            manager.add_replicas([Replica(workers[-1])])
        expected = set(actor_wg.train(step))
        assert len(expected) == 1, "trainer ranks disagree on the weights"
        expected = expected.pop()
        killer = None
        if a.kill_replica is not None and step == a.kill_at_step:
            victim = workers[a.kill_replica]
            killer = threading.Timer(a.kill_after, lambda: ray.kill(victim, no_restart=False))
            killer.start()
        sent_before, start = egress_bytes(), time.perf_counter()
        entry: dict[str, Any] = {"version": step + 1}
        try:
            metrics = manager.update_weights(global_steps=step) or {}
            error = None
        except Exception as e:  # noqa: BLE001 -- the step's report carries it
            metrics, error = {}, f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"
        entry["update_s"] = time.perf_counter() - start
        if killer is not None:
            killer.join()
        entry["bytes"] = metrics.get("weightport/bytes")
        # Across hosts: what the trainer's host sent (read from its link); on one host the plan's figure.
        entry["bytes_from_trainer"] = (egress_bytes() - sent_before if a.ray_address
                                       else metrics.get("weightport/plan_bytes_from_trainer"))
        entry["calls_s"] = actor_wg.engine_timings()[0]
        entry["group_s"] = manager.group_s
        if killer is None:
            got = ray.get([w.digest.remote() for w in workers])
            entry["match"] = error is None and all(d == expected for d in got)
            previous = expected if entry["match"] else previous
        else:
            # The update must fail; every replica still there must hold the previous version.
            survivors = [w for i, w in enumerate(workers) if i != a.kill_replica]
            got = ray.get([w.digest.remote() for w in survivors])
            entry["aborted"] = error is not None
            entry["match"] = error is not None and all(d == previous for d in got)
            _wait_restarted(workers[a.kill_replica], timeout=120)
        if error:
            entry["error"] = error
        steps.append(entry)
    return {"steps": steps, "ray_nodes": len(nodes), "backend": a.backend}


def _wait_restarted(worker: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(worker.digest.remote(), timeout=30)
            return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            time.sleep(0.5)
    raise TimeoutError(f"the killed replica did not come back within {timeout:.0f} s")
