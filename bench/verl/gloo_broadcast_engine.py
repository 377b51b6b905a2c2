"""verl's NCCL checkpoint engine's algorithm on a CPU transport: the baseline of bench/run-verl-bench.

Registers ``"gloo-broadcast"`` in verl's CheckpointEngineRegistry. It is NCCLCheckpointEngine's
single-sender path (verl/checkpoint_engine/nccl_checkpoint_engine.py, verl 0.9.1) with gloo in
NCCL's place: trainer rank 0 packs the weights into buckets of ``bucket_size`` bytes with verl's own
``split_weight_chunks``, broadcasts each bucket's metadata and then the bucket to every rollout
worker, filling the next bucket while one is in flight (two buffers); rollout workers rebuild the
tensors with verl's ``merge_weight_chunks``. The group lives across updates (NCCL's default,
``rebuild_group=False``). What differs: the metadata goes over the same gloo group instead of a ZMQ
PUB socket, and the group is a ``ProcessGroupGloo`` over its own TCPStore on trainer rank 0 (verl's
goes through ``ray.util.collective``, whose gloo group would take over the process's default group).
"""

from __future__ import annotations

import datetime
import pickle
import socket
from typing import Any, AsyncGenerator, Generator

import ray
import torch
import torch.distributed as dist
from verl.checkpoint_engine.base import (CheckpointEngine, CheckpointEngineRegistry, merge_weight_chunks,
                                         split_weight_chunks)

TIMEOUT = datetime.timedelta(seconds=120)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@CheckpointEngineRegistry.register("gloo-broadcast")
class GlooBroadcastCheckpointEngine(CheckpointEngine):
    def __init__(self, bucket_size: int, is_master: bool = False, **_ignored: Any):
        self.bucket_size, self.is_master = bucket_size, is_master
        self.pg, self.rank = None, None
        self.timings: dict[str, float] = {}

    def prepare(self) -> dict[str, Any]:
        self.send_buf = torch.empty(self.bucket_size, dtype=torch.uint8)
        self.recv_buf = torch.empty(self.bucket_size, dtype=torch.uint8)
        meta: dict[str, Any] = {}
        if self.is_master:
            if not hasattr(self, "store_addr"):
                host = ray.util.get_node_ip_address()
                self.store_addr = (host, _free_port(host))
            meta["store"] = self.store_addr
        return meta

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]):
        store = metadata[0]["store"]
        world = 1 + rollout_world_size
        actor = {"rank": [0] + [-1] * (actor_wg_world_size - 1), "world_size": [world] * actor_wg_world_size,
                 "store": [store] * actor_wg_world_size}
        rollout = {"rank": list(range(1, world)), "world_size": [world] * rollout_world_size,
                   "store": [store] * rollout_world_size}
        return actor, rollout

    def init_process_group(self, rank: int, world_size: int, store: tuple[str, int]) -> None:
        if self.pg is not None or rank < 0:  # the group lives across updates
            self.rank = rank
            return
        host, port = store
        tcp = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=TIMEOUT)
        # Gloo's own choice of address is the machine's host name, which a testbed host (a network
        # namespace) does not have: the node's address, as Ray knows it.
        opts = dist.ProcessGroupGloo._Options()
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=ray.util.get_node_ip_address())]
        opts._timeout = TIMEOUT
        self.pg, self.rank, self._store = dist.ProcessGroupGloo(tcp, rank, world_size, opts), rank, tcp

    def finalize(self) -> None:
        self.send_buf = self.recv_buf = None

    def _bcast(self, tensor: torch.Tensor):
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = 0, 0
        return self.pg.broadcast([tensor], opts)

    def _bcast_meta(self, meta: dict | None) -> dict:
        """The bucket's metadata: its length first, then its pickled bytes."""
        if self.rank == 0:
            blob = torch.frombuffer(bytearray(pickle.dumps(meta)), dtype=torch.uint8)
            self._bcast(torch.tensor([blob.numel()], dtype=torch.int64)).wait()
            self._bcast(blob).wait()
            return meta
        size = torch.zeros(1, dtype=torch.int64)
        self._bcast(size).wait()
        blob = torch.empty(int(size.item()), dtype=torch.uint8)
        self._bcast(blob).wait()
        return pickle.loads(blob.numpy().tobytes())

    @torch.no_grad()
    async def send_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None], global_steps=None):
        if self.rank < 0:  # not in the group: still walk the generator, as verl's engines do
            for _ in weights:
                pass
            return {}
        send_buf, recv_buf, pending = self.send_buf, self.recv_buf, None
        bucket_meta, offset = {}, 0
        async for meta, chunk in split_weight_chunks(weights, self.bucket_size):
            if offset + meta.chunk_size > self.bucket_size:
                if pending is not None:
                    pending.wait()
                self._bcast_meta({"bucket_meta": bucket_meta, "is_last": False, "length": offset})
                pending = self._bcast(send_buf[:offset])
                send_buf, recv_buf = recv_buf, send_buf
                bucket_meta, offset = {}, 0
            meta.offset = offset
            bucket_meta[meta.name] = meta
            send_buf[offset:offset + meta.chunk_size] = chunk
            offset += meta.chunk_size
        if pending is not None:
            pending.wait()
        self._bcast_meta({"bucket_meta": bucket_meta, "is_last": True, "length": offset})
        self._bcast(send_buf[:offset]).wait()
        return {}

    @torch.no_grad()
    async def receive_weights(self, global_steps=None) -> AsyncGenerator[tuple[str, torch.Tensor], None]:
        async for name, weight in merge_weight_chunks(self._chunks(), self.bucket_size):
            yield name, weight

    async def _chunks(self):
        while True:
            meta = self._bcast_meta(None)
            bucket = self.recv_buf[:meta["length"]]
            self._bcast(bucket).wait()
            for tensor_meta in meta["bucket_meta"].values():
                yield tensor_meta, bucket[tensor_meta.offset:tensor_meta.offset + tensor_meta.chunk_size]
            if meta["is_last"]:
                return
