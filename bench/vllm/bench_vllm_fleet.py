"""One trainer feeding a fleet of vLLM engines: what leaves the trainer and how long an update takes
for 1, 2 and 4 replicas.

    .deps/vllm/bin/python bench/vllm/bench_vllm_fleet.py [--replicas 1 2 4] [--versions N] [--json]

Each replica is a `vllm serve` process on this host (float32, tensor parallel 1) with the weightport
backend; the trainer (this process, a transformers Llama) drives them through one
weightport.vllm.FleetClient. Per replica count: the plan's bytes per whole version from the trainer
(``source_bytes``) and between replicas (``relayed_bytes``), the bytes the first version moved, and
medians over N versions of update_s (publish to every replica live), transfer_s (publish to
committed everywhere) and pause_s (the swap calls). After every version every replica's greedy
tokens must equal the trainer's (the trainer and the checks are tests/vllm/fleet_trainer.py's).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def run_fleet(model_dir: str, replicas: int, versions: int, work: str) -> dict:
    from fleet_trainer import next_version, start
    from serve_process import vllm_server

    with contextlib.ExitStack() as stack:
        bases = [stack.enter_context(vllm_server(model_dir, os.path.join(work, f"serve-{replicas}-{i}.log"))).base
                 for i in range(replicas)]
        model, sync, _ = start(model_dir, bases, timeout=300)
        rows = [next_version(model, sync, v, model_dir, bases) for v in range(1, versions + 1)]
        sync.shutdown()
    return {"replicas": replicas, "source_bytes": rows[-1]["source_bytes"], "relayed_bytes": rows[-1]["relayed_bytes"],
            "first_version_bytes": rows[0]["bytes"],
            **{k: statistics.median(r[k] for r in rows) for k in ("update_s", "transfer_s", "build_s", "pause_s")},
            "tokens_match": all(all(r["tokens_match"]) for r in rows)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model directory (default: a ~75 MB Llama made here)")
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--versions", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if any(n < 1 for n in a.replicas) or a.versions < 1:
        ap.error("--replicas and --versions must be at least 1")
    import tiny_models

    work = tempfile.mkdtemp(prefix="wp-vllm-fleet-")
    model_dir = a.model or tiny_models.make_model("llama", os.path.join(work, "model"), hidden=512, layers=8,
                                                  vocab=256, positions=128)
    rows = []
    for n in a.replicas:
        r = run_fleet(model_dir, n, a.versions, work)
        rows.append(r)
        if not a.json:
            print(f"{n} replica(s): trainer sends {r['source_bytes'] / 2**20:.1f} MiB per version, replicas relay "
                  f"{r['relayed_bytes'] / 2**20:.1f} MiB; update {r['update_s']:.2f} s (transfer {r['transfer_s']:.2f} "
                  f"s, build {r['build_s']:.2f} s), pause {r['pause_s']:.3f} s; tokens "
                  f"{'match' if r['tokens_match'] else 'DIFFER'}", flush=True)
    print(json.dumps({"versions": a.versions, "rows": rows}, indent=None if a.json else 1))
    return 0 if all(r["tokens_match"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
