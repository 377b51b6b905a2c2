"""The trainer of a vLLM fleet test: a transformers model sent to `vllm serve` replicas through one
weightport.vllm.FleetClient, every replica's greedy tokens checked against the trainer's after each
version. Imported by the one-host fleet test; run as a program inside a testbed host by the
cross-host one (the replicas' addresses are reachable only from the testbed's bridge):

    python fleet_trainer.py --model DIR --servers URL,URL --host ADDR --versions N

prints one JSON line per version: its send_weights report and, per replica, whether its tokens
matched. Exit status 0 only if every replica matched at every version."""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

PROMPT = [1, 5, 9, 14]
TOKENS = 6


def start(model_dir: str, bases: list[str], host: str = "127.0.0.1", timeout: float = 90.0,
          min_replicas: int | None = None, quorum: int = 0, transport: str = "auto"):
    """(the trainer's model, its sync engine, the FleetClient) once every replica's workers joined."""
    import torch
    import transformers
    from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient, WeightTransferTrainerFactory

    from weightport.vllm import FleetClient, WeightportTrainerInitInfo

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    fleet = FleetClient([HTTPVLLMWeightSyncClient(b, timeout=timeout) for b in bases], min_replicas=min_replicas)
    info = WeightportTrainerInitInfo(rank=0, coordinator=f"{host}:0", host=host, timeout=timeout, quorum=quorum,
                                     transport=transport)
    sync = WeightTransferTrainerFactory.trainer_init(info, client=fleet, source=model)
    return model, sync, fleet


def next_version(model, sync, version: int, model_dir: str, bases: list[str]) -> dict:
    """Perturbs every weight, sends the version, and asks each of `bases` for its greedy tokens:
    the send_weights report with ``tokens_match`` (one bool per base)."""
    import torch

    import trainer_process
    from serve_process import completion

    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    report = dict(sync.send_weights(version))
    expect = trainer_process.greedy(model, [PROMPT], TOKENS)[0]
    report["tokens_match"] = [completion(b, model_dir, PROMPT, TOKENS) == expect for b in bases]
    print(f"version {version}: {report['bytes']} bytes to the fleet, {report['source_bytes']} from the trainer, "
          f"{report['relayed_bytes']} relayed; update {report['update_s']:.2f} s, pause {report['pause_s']:.3f} s; "
          f"tokens match {report['tokens_match']}", file=sys.stderr)
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the model directory every replica serves")
    ap.add_argument("--servers", required=True, help="the replicas' base URLs, comma-separated")
    ap.add_argument("--host", default="127.0.0.1", help="the address the replicas reach this trainer at")
    ap.add_argument("--versions", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=90.0)
    ap.add_argument("--transport", default="auto", help="auto, tcp, ... (testbed hosts share one kernel: "
                    "tcp keeps UCX off shared memory between them)")
    args = ap.parse_args()
    bases = args.servers.split(",")
    model, sync, _ = start(args.model, bases, args.host, args.timeout, transport=args.transport)
    ok = True
    try:
        for version in range(1, args.versions + 1):
            report = next_version(model, sync, version, args.model, bases)
            keep = ("version", "bytes", "source_bytes", "relayed_bytes", "update_s", "transfer_s", "build_s",
                    "pause_s", "built_before_swap", "tokens_match")
            print(json.dumps({k: report.get(k) for k in keep}), flush=True)
            ok = ok and all(report["tokens_match"])
    finally:
        sync.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
