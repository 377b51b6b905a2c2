"""weightport as a verl checkpoint engine: ``checkpoint_engine.backend=weightport``.

verl calls, on every weight update: ``prepare`` on every trainer and rollout worker,
``build_topology`` on the driver, ``init_process_group`` on every worker, then ``send_weights`` on
trainer ranks and ``receive_weights`` on rollout workers, then ``finalize``. This engine makes its
session once and keeps it: trainer rank 0 (``is_master``) runs weightport's coordinator, every
trainer rank joins as a publisher rank and every rollout worker as a subscriber rank at the first
update, and the plan (resharding, relay fan-out across replicas, which ranks share a host) is made
then and replayed for every later update. After the first, ``prepare``/``init_process_group``/
``finalize`` only check that the group is the one the session was made for.

Trainer ranks publish their own part (nothing is gathered onto one rank): a DTensor's local shard
where verl hands DTensors, else, where every trainer rank holds the whole tensor (verl's FSDP engine
gathers each one on every rank), 1/N of its rows (``trainer_layout="sharded"``). A version commits
on every rollout worker or on none: a worker that dies while one is in flight leaves the others on
the previous version and ``send_weights``/``receive_weights`` raise ``weightport.Unavailable`` naming
it; when Ray restarts it, it rejoins at the next update and receives that version in full.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any, AsyncGenerator, Iterable

import torch

from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry

from .. import ray as wp_ray
from .._session import load_secret
from .._tensors import dtype_name
from ..layouts import Layout, Slice, _chunk, dtensor_slice
from ..publisher import Coordinator, Publisher
from ..subscriber import Subscriber
from .manifest import ManifestServer, fetch_manifest

# The options a user sets under checkpoint_engine.engine_kwargs.weightport (verl passes them to
# every trainer and rollout worker's engine).
OPTIONS: dict[str, Any] = {
    "transport": "auto",          # UCX transports: "auto" (shm within a host, TCP/RDMA between), "tcp", ...
    "trainer_layout": "sharded",  # whole tensors on every trainer rank: each publishes 1/N ("whole": all)
    "chunk_bytes": 0,             # transfer chunk size (0: the engine's default)
    "relay_fanout": 1,            # replicas each one forwards to (0: every replica from the trainer)
    "delta": True,                # send only the chunks that changed since the last version
    "timeout": 300.0,             # seconds for a join, a version, a manifest
    "copy": False,                # yield copies instead of views of the received version
    "secret_file": None,          # the session's shared secret; default: 32 random bytes from rank 0
    "max_gbps": 0.0,              # rollout workers' fetch rate cap (0: none)
}
_LAYOUTS = ("sharded", "whole")


class _Slices(Layout):
    """Each tensor's slice as computed when it was first seen."""

    def __init__(self, slices: dict[str, Slice]):
        self.slices = slices

    def slice_of(self, name: str, shape: Any) -> Slice:
        return self.slices[name]


def _check_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"weightport checkpoint engine: unknown option(s) {unknown} in "
                         f"engine_kwargs.weightport; known: {sorted(OPTIONS)}")
    merged = {**OPTIONS, **options}
    if merged["trainer_layout"] not in _LAYOUTS:
        raise ValueError(f"weightport checkpoint engine: trainer_layout must be one of {_LAYOUTS}, "
                         f"got {merged['trainer_layout']!r}")
    if not float(merged["timeout"]) > 0:
        raise ValueError(f"weightport checkpoint engine: timeout must be positive, got {merged['timeout']}")
    return merged


@CheckpointEngineRegistry.register("weightport")
class WeightportCheckpointEngine(CheckpointEngine):
    """See the module's description. ``bucket_size`` is accepted because verl passes it to every
    engine; weightport chunks by its plan (``chunk_bytes``) and needs no staging bucket."""

    wire_format = "named_tensors"

    def __init__(self, bucket_size: int = 0, is_master: bool = False, **options: Any):
        self.bucket_size = int(bucket_size)
        self.is_master = bool(is_master)
        self.options = _check_options(options)
        self._secret: bytes | None = None
        if self.options["secret_file"]:
            self._secret = load_secret(self.options["secret_file"])  # as the CLI reads it
        self._coordinator: Coordinator | None = None  # on trainer rank 0
        self._manifest_server: ManifestServer | None = None
        self._group: dict[str, Any] | None = None  # role, rank, world sizes and master of this session
        self._member: Publisher | Subscriber | None = None
        self._manifest: list[dict[str, Any]] | None = None
        self._slices: dict[str, Slice] = {}  # trainer: name -> where this rank's part sits in the whole
        self._plan_from_trainer: int | None = None  # bytes of a full version sent out of trainer ranks
        self._version = 0
        self._broken = False  # a join failed: the next update makes a new session
        self.timings: dict[str, float] = {}  # the last update's seconds per call, for the measurements

    # -- the calls around the transfer ------------------------------------------------------------

    def prepare(self) -> dict[str, Any]:
        start = time.perf_counter()
        host = wp_ray.node_address()
        meta: dict[str, Any] = {"node_id": wp_ray.node_id(), "host": host, "joined": self._member is not None,
                                "broken": self._broken}
        if self.is_master:
            if self._coordinator is None:
                self._secret = self._secret or os.urandom(32)
                self._coordinator = self._new_coordinator(f"{host}:0")
                self._manifest_server = ManifestServer(host, self._secret)
            group = self._group or {}
            meta["master"] = {"coordinator": self._coordinator.address, "manifest": self._manifest_server.address,
                              "secret": self._secret.hex(), "trainers": group.get("trainers"),
                              "rollouts": group.get("rollouts")}
        self.timings = {"prepare_s": time.perf_counter() - start}
        return meta

    def _new_coordinator(self, address: str) -> Coordinator:
        o = self.options
        return Coordinator(address, secret=self._secret, chunk_bytes=int(o["chunk_bytes"]),
                           relay_fanout=int(o["relay_fanout"]), timeout=float(o["timeout"]), rejoin=True)

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int,
                       metadata: list[dict[str, Any]]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        if len(metadata) != actor_wg_world_size + rollout_world_size:
            raise ValueError(f"weightport: {len(metadata)} workers reported, expected {actor_wg_world_size} "
                             f"trainer + {rollout_world_size} rollout")
        masters = [i for i, m in enumerate(metadata) if m.get("master")]
        if masters != [0]:
            raise ValueError(f"weightport: trainer rank 0, and only it, must be built with is_master=True "
                             f"(workers reporting a coordinator: {masters})")
        master = metadata[0]["master"]
        # A session is made for fixed numbers of trainer and rollout ranks: when they changed (a
        # replica added or removed), or a worker's join failed, every worker leaves it and this
        # update makes a new one.
        resized = master["rollouts"] is not None and (master["trainers"], master["rollouts"]) != (
            actor_wg_world_size, rollout_world_size)
        rebuild = resized or any(m.get("broken") for m in metadata)
        a, r = actor_wg_world_size, rollout_world_size
        common = {"trainers": a, "rollouts": r, "master": master, "rebuild": rebuild}
        actor = {"role": "trainer", **common}
        rollout = {"role": "rollout", **common}
        return ({k: [v] * a for k, v in actor.items()} | {"rank": list(range(a))},
                {k: [v] * r for k, v in rollout.items()} | {"rank": list(range(r))})

    def init_process_group(self, role: str, rank: int, trainers: int, rollouts: int, master: dict[str, Any],
                           rebuild: bool = False) -> None:
        start = time.perf_counter()
        group = {"role": role, "rank": rank, "trainers": trainers, "rollouts": rollouts,
                 "coordinator": master["coordinator"], "manifest": master["manifest"]}
        if rebuild or (self._group is not None and self._group != group):
            self._leave()
            if self.is_master and self._coordinator is not None:
                # The same address, so that the workers that got it this update reach the new one.
                self._coordinator.stop()
                self._coordinator = self._new_coordinator(master["coordinator"])
                self._manifest_server.clear()
        self._secret = self._secret or bytes.fromhex(master["secret"])
        self._group = group
        if role == "rollout" and self._member is None and master["rollouts"] is not None and not rebuild:
            # A restarted worker in a live session rejoins now, so that it is back in before the
            # trainer starts this update's version (verl waits for every init before sending).
            self._join(self._bind)
        self.timings["init_s"] = time.perf_counter() - start

    def finalize(self) -> None:
        """Nothing to free: the session, its registered memory and its plan serve the next update."""
        self.timings["finalize_s"] = 0.0

    def _leave(self) -> None:
        if self._member is not None:
            self._member.close()
        self._member, self._slices, self._version, self._broken = None, {}, 0, False
        self._plan_from_trainer = None  # a new session has a new plan

    def _join(self, join) -> Any:
        """Runs a join; one that fails leaves this worker out, and the next update starts over."""
        try:
            return join()
        except BaseException:
            self._leave()
            self._broken = True
            raise

    def close(self) -> None:
        """Leaves the session; on trainer rank 0 also stops the coordinator. Idempotent."""
        self._leave()
        if self._coordinator is not None:
            self._coordinator.stop()
            self._coordinator = None
        if self._manifest_server is not None:
            self._manifest_server.close()
            self._manifest_server = None

    def _need_group(self, role: str) -> dict[str, Any]:
        if self._group is None:
            raise RuntimeError("weightport: init_process_group was not called before the transfer")
        if self._group["role"] != role:
            raise RuntimeError(f"weightport: a {self._group['role']} worker was asked to act as a {role}")
        return self._group

    def _next_version(self, global_steps: int | None) -> int:
        # weightport's versions only grow; verl's step (0 for the initial sync) maps to step + 1.
        return max(self._version + 1, int(global_steps) + 1 if global_steps is not None else 0)

    # -- trainer ranks ------------------------------------------------------------------------------

    def _part(self, name: str, tensor: Any) -> tuple[torch.Tensor, Slice]:
        """This rank's part of a tensor verl hands over, and where it sits in the whole."""
        sl = dtensor_slice(tensor)
        if sl is not None:
            return tensor.to_local(), sl
        group = self._group
        shape = list(tensor.shape)
        if self.options["trainer_layout"] == "whole" or not shape:
            return tensor, (shape, [0] * len(shape), shape)
        begin, length = _chunk(shape[0], group["trainers"], group["rank"])
        return tensor.narrow(0, begin, length), (shape, [begin] + [0] * (len(shape) - 1),
                                                 [length] + shape[1:])

    async def send_weights(self, weights: Iterable[tuple[str, Any]], global_steps: int | None = None) -> dict:
        group = self._need_group("trainer")
        start = time.perf_counter()
        version = self._next_version(global_steps)
        if hasattr(weights, "__aiter__"):  # an async generator: walked here, its parts kept until sent
            weights = [(name, tensor) async for name, tensor in weights]
        if self._member is None:
            parts = await self._register(weights)
        else:
            parts = self._parts(weights)
        # Copies each part into the send buffer as the generator makes it, then starts the version.
        self._member.publish_tensors(version, parts)
        await asyncio.to_thread(self._member.wait, version, float(self.options["timeout"]))
        self._version = version
        self.timings["transfer_s"] = time.perf_counter() - start
        if group["rank"] != 0 or self._coordinator is None:
            return {}
        report = self._coordinator.wait_outcome(version, float(self.options["timeout"]))
        return {"weightport/version": version, "weightport/bytes": report["bytes"],
                "weightport/seconds": report["seconds"], "weightport/update_s": self.timings["transfer_s"],
                "weightport/plan_bytes_from_trainer": self._plan_bytes_from_trainer()}

    def _plan_bytes_from_trainer(self) -> int:
        """The bytes of a full version the plan sends out of trainer ranks (the rest is relayed
        between rollout workers)."""
        if self._plan_from_trainer is None:
            steps = json.loads(self._coordinator.plan_json() or "{}").get("steps", [])
            self._plan_from_trainer = sum(s["bytes"] for s in steps if s["from"].get("side") == "src")
        return self._plan_from_trainer

    def _parts(self, weights: Iterable[tuple[str, Any]]):
        for name, tensor in weights:
            if name not in self._slices:
                raise ValueError(f"weightport: the trainer sent tensor '{name}', which was not in the model "
                                 f"registered at the first update")
            part, _ = self._part(name, tensor)
            yield name, part

    async def _register(self, weights: Iterable[tuple[str, Any]]) -> list[tuple[str, torch.Tensor]]:
        """The first update: walks the weights once, keeping a copy of this rank's part of each (the
        generator's tensors may not outlive the next one), joins the session with them and returns
        them to publish."""
        group = self._group
        manifest, parts, slices = [], [], {}
        for name, tensor in weights:
            part, sl = self._part(name, tensor)
            manifest.append({"name": name, "shape": list(tensor.shape), "dtype": dtype_name(tensor, name)})
            parts.append((name, part.detach().to("cpu", copy=True).contiguous()))
            slices[name] = sl
        if self._manifest_server is not None:
            self._manifest_server.set(manifest)
        o = self.options
        pub = Publisher(group["coordinator"], secret=self._secret, rank=group["rank"],
                        world_size=group["trainers"], serve=False, host=wp_ray.node_address(),
                        transport=o["transport"], timeout=float(o["timeout"]))
        self._member = pub
        await asyncio.to_thread(self._join, lambda: pub.register(parts, _Slices(slices)))
        self._slices, self._manifest = slices, manifest
        return parts

    # -- rollout workers -------------------------------------------------------------------------------

    async def receive_weights(self, global_steps: int | None = None) -> AsyncGenerator[tuple[str, torch.Tensor], None]:
        self._need_group("rollout")
        start = time.perf_counter()
        if self._member is None:
            await asyncio.to_thread(self._join, self._bind)
        sub = self._member
        version = int(global_steps) + 1 if global_steps is not None else sub.live_version + 1
        await asyncio.to_thread(sub.wait, version, float(self.options["timeout"]))
        self.timings["transfer_s"] = time.perf_counter() - start
        copy = bool(self.options["copy"])
        with sub.pinned() as pinned:
            self._version = pinned.version
            for meta in self._manifest:
                tensor = pinned.tensors[meta["name"]]
                yield meta["name"], tensor.clone() if copy else tensor

    def _bind(self) -> None:
        group, o = self._group, self.options
        self._manifest = fetch_manifest(group["manifest"], self._secret, float(o["timeout"]))
        from .._tensors import _TORCH_BY_NAME  # dtype names as weightport writes them

        model = [(m["name"], torch.empty(m["shape"], dtype=_TORCH_BY_NAME[m["dtype"]], device="meta"))
                 for m in self._manifest]
        sub = Subscriber(group["coordinator"], secret=self._secret, rank=group["rank"],
                         world_size=group["rollouts"], host=wp_ray.node_address(), transport=o["transport"],
                         timeout=float(o["timeout"]), delta=bool(o["delta"]), max_gbps=float(o["max_gbps"]))
        self._member = sub
        sub.bind(model)
