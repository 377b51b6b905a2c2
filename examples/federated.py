#!/usr/bin/env python3
"""Federated averaging: an aggregator and several clients, each training a small PyTorch model on
its own part of the data, exchanging weights every round.

    python examples/federated.py --clients 4 --rounds 8 --encoding fp8

The task is a regression y = f(x) with a fixed random teacher network; each client holds a
different slice of the input space (non-IID) and a different amount of data. The server
(weightport.FedServer) runs in this process; each client is a process of its own
(weightport.FedClient). A client loads each round's global model, trains a few local epochs with SGD
and sends its update (new weights - the round's starting weights), weighted by its sample count;
updates travel as bf16 or fp8 with error feedback. The server folds them into the global model as
they arrive (FedAvg).

The example checks that the federated model learns: the global model's loss on a held-out set
covering every client's region falls by at least half from the initial model's. Exit status 0
when it does and every round folded every client.
"""

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile

import torch

import weightport


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 1))


def teacher_data(lo: float, hi: float, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = lo + (hi - lo) * torch.rand(n, 8, generator=g)
    torch.manual_seed(999)
    teacher = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    with torch.no_grad():
        y = teacher(x)
    return x, y


def client_data(i: int, clients: int):
    """Client i: its own band of the input space, and 200 * (i + 1) samples."""
    lo = -1 + 2 * i / clients
    return teacher_data(lo, lo + 2 / clients, 200 * (i + 1), seed=i)


def client(i: int, clients: int, address: str, secret: str, encoding: str, epochs: int, lr: float, out):
    torch.set_num_threads(1)
    x, y = client_data(i, clients)
    model = make_model(0)
    fed = weightport.FedClient(address, secret=secret, name=f"client-{i}", encoding=encoding, timeout=60)
    rounds = 0
    while (start := fed.next_round()) is not None:
        # vector_to_parameters makes the parameters views of the vector: give it a copy of `start`.
        torch.nn.utils.vector_to_parameters(torch.from_numpy(start.copy()), model.parameters())
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for _ in range(epochs):
            for b in range(0, len(x), 32):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x[b:b + 32]), y[b:b + 32])
                loss.backward()
                opt.step()
        trained = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
        fed.send_update(trained - torch.from_numpy(start), samples=len(x))
        rounds += 1
    out.put((i, rounds))


def loss_of(vector, x, y) -> float:
    model = make_model(0)
    torch.nn.utils.vector_to_parameters(torch.as_tensor(vector).clone(), model.parameters())
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(x), y))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--encoding", default="fp8", choices=["f32", "bf16", "fp8"])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    args = p.parse_args()

    initial = torch.nn.utils.parameters_to_vector(make_model(0).parameters()).detach()
    x_test, y_test = teacher_data(-1, 1, 2000, seed=12345)
    with tempfile.TemporaryDirectory() as tmp:
        secret = os.path.join(tmp, "secret")
        with open(secret, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(secret, 0o600)
        server = weightport.FedServer("127.0.0.1:0", secret=secret, initial=initial, clients=args.clients,
                                      rounds=args.rounds, chunk_elements=1024, deadline=60)
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=client, args=(i, args.clients, server.address, secret, args.encoding, args.epochs,
                                                  args.lr, out)) for i in range(args.clients)]
        for proc in procs:
            proc.start()
        try:
            reports = server.run()
        finally:
            for proc in procs:
                proc.join(60)
                if proc.is_alive():
                    proc.kill()
    before = loss_of(initial, x_test, y_test)
    after = loss_of(server.global_model(), x_test, y_test)
    folded = [sum(c["folded"] for c in r["clients"]) for r in reports]
    ok = after <= 0.5 * before and all(n == args.clients for n in folded)
    summary = {"ok": ok, "loss_before": before, "loss_after": after, "rounds": len(reports), "folded": folded,
               "bytes_up": sum(r["bytes_up"] for r in reports), "bytes_down": sum(r["bytes_down"] for r in reports),
               "full_bf16_bytes": reports[0]["full_bf16_bytes"] if reports else 0}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"test loss {before:.4f} -> {after:.4f} over {len(reports)} rounds; updates folded per round: {folded}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
