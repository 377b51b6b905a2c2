#!/usr/bin/env python3
"""An RL-style loop: a trainer publishes its policy after every step; inference processes hot-swap
to each new version while they serve, and their outputs equal the trainer's for that version.

    python examples/rl_loop.py --steps 10 --replicas 2

One process trains a small MLP on CPU and publishes every step (weightport.Publisher, which also
runs the coordinator). Each replica is a process of its own with a freshly initialised copy of the
model (weightport.Subscriber bound to it, zero-copy); after each swap it computes its outputs on a
fixed probe batch and reports them. The trainer checks every report against the outputs its own
model gave for that version. Exit status 0 when every report matched and every replica reached the
last version.
"""

import argparse
import json
import multiprocessing as mp
import os
import queue
import sys
import tempfile
import time

import torch

import weightport


def make_policy(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 8))


def probe_batch() -> torch.Tensor:
    g = torch.Generator().manual_seed(1234)
    return torch.randn(16, 32, generator=g)


def replica(rank: int, replicas: int, coordinator: str, secret_path: str, steps: int, reports, timeout: float):
    torch.set_num_threads(1)
    policy = make_policy(100 + rank)  # deliberately different weights until the first swap
    sub = weightport.Subscriber(coordinator, secret=secret_path, rank=rank, world_size=replicas, timeout=timeout)
    sub.bind(policy)
    x = probe_batch()
    seen = 0
    try:
        while seen < steps:
            sub.wait(seen + 1)
            seen = sub.swap()
            with torch.no_grad():
                out = policy(x)
            reports.put((rank, seen, out.numpy().tobytes()))
    except weightport.Error as e:
        reports.put((rank, -1, str(e).encode()))
    finally:
        sub.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="training steps, one version each (default 10)")
    parser.add_argument("--replicas", type=int, default=2, help="inference processes (default 2)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds any one wait may take")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    args = parser.parse_args()
    torch.set_num_threads(1)

    workdir = tempfile.mkdtemp(prefix="weightport-rl-")
    secret_path = os.path.join(workdir, "secret")
    with open(os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:  # readable by us only
        f.write(os.urandom(32))
    policy = make_policy(0)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    pub = weightport.Publisher("127.0.0.1:0", secret=secret_path, timeout=args.timeout)

    ctx = mp.get_context("spawn")
    reports = ctx.Queue()
    procs = [ctx.Process(target=replica, args=(r, args.replicas, pub.coordinator, secret_path, args.steps, reports,
                                               args.timeout)) for r in range(args.replicas)]
    for p in procs:
        p.start()
    pub.register(policy)  # returns once every replica has bound its model

    x = probe_batch()
    expected = {}
    publish_s = []
    for step in range(1, args.steps + 1):
        obs = torch.randn(64, 32)
        loss = (policy(obs) - obs[:, :8].sin()).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            expected[step] = policy(x).numpy().tobytes()
        t0 = time.perf_counter()
        pub.publish(step)
        publish_s.append(time.perf_counter() - t0)
        if not args.json:
            print(f"step {step}: loss {loss.item():.4f}, published in {publish_s[-1] * 1e3:.2f} ms", flush=True)
    last = pub.wait(args.steps)

    matched, mismatched, errors = 0, [], []
    final = {r: 0 for r in range(args.replicas)}
    deadline = time.monotonic() + args.timeout
    while any(v < args.steps for v in final.values()) and time.monotonic() < deadline:
        try:
            rank, version, out = reports.get(timeout=1.0)
        except queue.Empty:
            if not any(p.is_alive() for p in procs):
                break
            continue
        if version < 0:
            errors.append(f"replica {rank}: {out.decode()}")
            final[rank] = args.steps
            continue
        final[rank] = max(final[rank], version)
        if out == expected[version]:
            matched += 1
        else:
            mismatched.append((rank, version))
    for p in procs:
        p.join(args.timeout)
    pub.close()

    ok = not mismatched and not errors and all(v == args.steps for v in final.values())
    summary = {"steps": args.steps, "replicas": args.replicas, "swaps_checked": matched,
               "mismatched": mismatched, "errors": errors, "final_versions": final,
               "publish_ms_median": sorted(publish_s)[len(publish_s) // 2] * 1e3,
               "last_version_bytes": last["bytes"], "ok": ok}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{matched} swaps checked, {len(mismatched)} mismatched, errors: {errors or 'none'}; "
              f"replicas ended at {final}: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
