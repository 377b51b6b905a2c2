#!/usr/bin/env python3
"""FSDP2 trainer ranks publish to an inference process with a different layout, bit-exact.

    python examples/fsdp2_publish.py --versions 3

Two trainer processes form a torch.distributed (gloo, CPU) group and shard a small transformer-ish
model with FSDP2 (``fully_shard``: every parameter a DTensor split along dim 0, unevenly where the
rows do not divide). Each rank registers its DTensors with a weightport.Publisher -- the layout is
read from each DTensor's device mesh and placements -- and publishes after every optimizer step.
One inference process holds the whole model in one piece (another layout: weightport reshards)
and swaps to each version. For every version, rank 0 gathers the full parameters
(``DTensor.full_tensor``) and the inference process reports what it received; the two must be
equal bit for bit. Exit status 0 when they are.
"""

import argparse
import json
import multiprocessing as mp
import os
import queue
import socket
import sys
import tempfile

import torch

import weightport


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(97, 24), torch.nn.Linear(24, 72), torch.nn.GELU(),
                               torch.nn.Linear(72, 24), torch.nn.LayerNorm(24), torch.nn.Linear(24, 97))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trainer(rank: int, world: int, dist_port: int, coordinator: str, secret: str, versions: int, results,
            timeout: float):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(dist_port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = make_model()
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    pub = weightport.Publisher(coordinator, secret=secret, rank=rank, world_size=world, timeout=timeout)
    pub.register(model)  # DTensors: the layout comes from their mesh and placements
    g = torch.Generator().manual_seed(rank)
    for v in range(1, versions + 1):
        tokens = torch.randint(0, 97, (8, 12), generator=g)
        loss = torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.roll(1, 1).flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        pub.publish(v)
        full = {n: p.full_tensor().detach().numpy().copy() for n, p in model.state_dict().items()}
        if rank == 0:
            results.put(("trainer", v, full))
        pub.wait(v)
    dist.barrier()  # every rank's last version committed before rank 0 stops the coordinator
    if rank != 0:
        pub.close()
    dist.barrier()
    if rank == 0:
        pub.close()
    dist.destroy_process_group()


def inference(coordinator: str, secret: str, versions: int, results, timeout: float):
    torch.set_num_threads(1)
    torch.manual_seed(7)
    model = make_model()
    for p in model.parameters():  # start far from the trainer's weights
        torch.nn.init.zeros_(p)
    sub = weightport.Subscriber(coordinator, secret=secret, timeout=timeout)
    sub.bind(model, mode="copy")
    for v in range(1, versions + 1):
        sub.wait(v)
        with sub.pinned() as pinned:  # exactly version v, even if v + 1 lands meanwhile
            got = pinned.version
            state = {n: t.numpy().copy() for n, t in pinned.tensors.items()}
        results.put(("inference", got, state))
    sub.swap()
    sub.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=3, help="optimizer steps, one version each (default 3)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds any one wait may take")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="weightport-fsdp2-")
    secret = os.path.join(workdir, "secret")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:  # readable by us only
        f.write(os.urandom(32))
    coordinator = f"127.0.0.1:{free_port()}"
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    dist_port = free_port()
    procs = [ctx.Process(target=trainer, args=(r, 2, dist_port, coordinator, secret, args.versions, results,
                                               args.timeout)) for r in range(2)]
    procs.append(ctx.Process(target=inference, args=(coordinator, secret, args.versions, results, args.timeout)))
    for p in procs:
        p.start()
    trained, received = {}, {}
    while (len(trained) < args.versions or len(received) < args.versions) and any(p.is_alive() for p in procs):
        try:
            who, v, state = results.get(timeout=1.0)
        except queue.Empty:
            continue
        (trained if who == "trainer" else received)[v] = state
    for p in procs:
        p.join(args.timeout)
    checked, mismatched = 0, []
    for v, state in sorted(received.items()):
        for name, value in trained.get(v, {}).items():
            checked += 1
            if value.tobytes() != state[name].tobytes():
                mismatched.append(f"version {v}: {name}")
    ok = (len(received) == args.versions and not mismatched and checked > 0
          and all(p.exitcode == 0 for p in procs))
    summary = {"versions": args.versions, "tensors_checked": checked, "mismatched": mismatched,
               "exit_codes": [p.exitcode for p in procs], "ok": ok}
    print(json.dumps(summary) if args.json else
          f"{checked} tensors compared over {len(received)} versions, {len(mismatched)} differ: "
          f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
