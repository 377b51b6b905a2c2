"""The memory and time of the vLLM backend's placement dry run, inside vLLM's own worker.

    .deps/vllm/bin/python bench/vllm/bench_dry_run_memory.py [--model DIR | --hidden H --layers L
        --vocab V] [--runs N] [--placement FILE] [--json]

Loads the model in vLLM (``LLM``, float32, tensor parallel 1; without --model a random Llama of the
given shape is written first), then in vLLM's worker process runs ``learn_placement`` N times: the
worker's peak resident memory above what it held before each (its high-water mark is reset first
through /proc/self/clear_refs), the seconds, and the placement's size. ``--placement FILE`` runs
that file's ``learn_placement`` instead (an older version of the module, for a before-and-after on
the same model).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))
os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc of the function below
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(worker, metas, placement_file):
    """In vLLM's worker: one dry run, with its peak memory above the worker's before it."""
    import gc
    import importlib.util
    import math
    import time

    if placement_file:
        import sys

        spec = importlib.util.spec_from_file_location("placement_under_test", placement_file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    else:
        from weightport.vllm import placement as module
    model = worker.model_runner.model
    tensor_metas = [module.TensorMeta(n, tuple(s), d) for n, s, d in metas]
    weights = sum(4 * math.prod(shape) for _, shape, _ in metas)  # float32, tensor parallel 1: all of it
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size
    before = _status_kib("VmRSS")
    t0 = time.perf_counter()
    placement = module.learn_placement(model, tensor_metas)
    seconds = time.perf_counter() - t0
    peak = _status_kib("VmHWM")
    return {"weights_bytes": weights, "rss_before_bytes": before << 10, "peak_extra_bytes": (peak - before) << 10,
            "seconds": seconds, "load_s": placement.load_s, "read_s": placement.read_s,
            "runs": len(placement.runs), "fallback": len(placement.fallback), "tensors": len(placement.boxes)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a Hugging Face model directory (default: a random Llama)")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=15)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--runs", type=int, default=1, help="dry runs, one after another in the same worker")
    ap.add_argument("--placement", help="run this file's learn_placement instead of the package's")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from vllm import LLM
    from tiny_models import checkpoint_metas, make_model

    with tempfile.TemporaryDirectory(prefix="wp-dryrun-") as tmp:
        model_dir = a.model
        if model_dir is None:
            model_dir = make_model("llama", os.path.join(tmp, "model"), hidden=a.hidden, layers=a.layers,
                                   vocab=a.vocab)
        metas = checkpoint_metas(model_dir)
        llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=128,
                  tensor_parallel_size=1, seed=0)
        rows = []
        for run in range(a.runs):
            (r,) = llm.collective_rpc(measure, args=(metas, a.placement))
            rows.append(r)
            if not a.json:
                print(f"run {run + 1}: weights {r['weights_bytes'] / 2**30:.2f} "
                      f"GiB, worker before {r['rss_before_bytes'] / 2**30:.2f} GiB, peak extra "
                      f"{r['peak_extra_bytes'] / 2**30:.2f} GiB ({r['peak_extra_bytes'] / r['weights_bytes']:.2f}x "
                      f"the weights), {r['seconds']:.1f} s (loader passes {r['load_s']:.1f} s, reading "
                      f"{r['read_s']:.1f} s); {r['runs']} runs, {r['fallback']} fallback", flush=True)
        if a.json:
            print(json.dumps({"model": a.model or f"llama hidden {a.hidden} layers {a.layers} vocab {a.vocab}",
                              "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
