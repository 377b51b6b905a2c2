"""Updating a serving vLLM's weights: weightport against the ways people do it without a GPU.

    .deps/vllm/bin/python bench/vllm/bench_vllm_update.py [--model DIR] [--versions N] [--json]

Same process layout for every method: a trainer (this process, the model's tensors in float32) and
vLLM (``LLM``, tensor parallel 1, its engine core and worker in their own processes). Per version:
  weightport   ``send_weights``: the bytes move while vLLM could keep generating, then a swap
  filesystem   the trainer writes safetensors, vLLM's ``reload_weights(weights_path=...)`` reads them
  gloo         the trainer broadcasts each tensor over a torch.distributed gloo group into vLLM's
               ``reload_weights(weights_iterator=...)`` run through ``collective_rpc``
vLLM's own weight-transfer backends (nccl, ipc, sparse_nccl, sharded_rdt, nccl_m2n) all need a GPU,
so none of them is a CPU baseline. update_s: from the trainer starting the update until vLLM computes
with it; pause_s: the time vLLM cannot generate (its update calls). Medians over N versions; after the
last version of each method vLLM's greedy tokens must equal the trainer's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))
os.environ["PYTHONPATH"] = HERE + os.pathsep + os.environ.get("PYTHONPATH", "")  # the worker imports this
os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc of the gloo baseline's functions
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

PROMPTS = ["the water of people", "you can see the first", "when they make a long"]


# -- the gloo baseline's worker side (runs in vLLM's worker through collective_rpc) ----------------

def gloo_join(worker, address: str, port: int) -> None:
    import torch.distributed as dist

    store = dist.TCPStore(address, port, world_size=2, is_master=False)
    worker._bench_pg = dist.ProcessGroupGloo(dist.PrefixStore("bench", store), 1, 2)


def gloo_receive(worker, metas) -> None:
    import torch

    pg = worker._bench_pg

    def stream():
        for name, shape in metas:
            t = torch.empty(shape, dtype=torch.float32)
            pg.broadcast(t, 0).wait()
            yield name, t

    worker.model_runner.reload_weights(weights_iterator=stream())


# -- the trainer side ----------------------------------------------------------------------------

def vllm_tokens(llm, n=8):
    from vllm import SamplingParams

    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def perturb(params, step):
    import torch

    g = torch.Generator().manual_seed(step)
    with torch.no_grad():
        for p in params.values():
            p.add_(torch.randn(p.shape, generator=g) * 1e-3)


def bench_weightport(llm, params, versions):
    from vllm.distributed.weight_transfer import WeightTransferTrainerFactory

    from weightport.vllm import LLMWeightSyncClient, WeightportTrainerInitInfo

    sync = WeightTransferTrainerFactory.trainer_init(WeightportTrainerInitInfo(rank=0),
                                                     client=LLMWeightSyncClient(llm), source=params)
    rows = []
    for v in range(1, versions + 1):
        perturb(params, v)
        r = sync.send_weights(v)
        phases = {f"worker_{k}": r.get("worker_build", {}).get(k, float("nan")) for k in ("alloc_s", "copy_s", "process_s")}
        rows.append({"update_s": r["update_s"], "pause_s": r["pause_s"], "transfer_s": r["transfer_s"],
                     "publish_s": r["publish_s"],
                     "build_s": r["build_s"], **phases, "bytes": r["bytes"]})
    sync.shutdown()
    return rows


def bench_filesystem(llm, params, versions, directory):
    from safetensors.torch import save_file

    path = os.path.join(directory, "model.safetensors")
    rows = []
    for v in range(1, versions + 1):
        perturb(params, 100 + v)
        t0 = time.perf_counter()
        save_file({n: p.detach() for n, p in params.items()}, path)
        t1 = time.perf_counter()
        llm.collective_rpc("reload_weights", kwargs={"weights_path": directory})
        t2 = time.perf_counter()
        rows.append({"update_s": t2 - t0, "pause_s": t2 - t1, "write_s": t1 - t0})
    return rows


def bench_gloo(llm, params, versions):
    import torch.distributed as dist

    import bench_vllm_update as me

    store = dist.TCPStore("127.0.0.1", 0, world_size=2, is_master=True, wait_for_workers=False)
    joiner = threading.Thread(target=llm.collective_rpc, args=(me.gloo_join,),
                              kwargs={"args": ("127.0.0.1", store.port)})
    joiner.start()
    pg = dist.ProcessGroupGloo(dist.PrefixStore("bench", store), 0, 2)
    joiner.join()
    metas = [(n, list(p.shape)) for n, p in params.items()]
    rows = []
    for v in range(1, versions + 1):
        perturb(params, 200 + v)
        t0 = time.perf_counter()
        rpc = threading.Thread(target=llm.collective_rpc, args=(me.gloo_receive,), kwargs={"args": (metas,)})
        rpc.start()
        for p in params.values():
            pg.broadcast(p.detach(), 0).wait()
        rpc.join()
        t1 = time.perf_counter()
        rows.append({"update_s": t1 - t0, "pause_s": t1 - t0})
    return rows


def summarize(rows):
    keys = rows[0].keys()
    return {k: statistics.median(r[k] for r in rows) for k in keys}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model directory (default: a ~560 MB Llama made here)")
    ap.add_argument("--versions", type=int, default=5, help="versions per method (default 5)")
    ap.add_argument("--methods", default="weightport,filesystem,gloo",
                    help="comma-separated methods to run, in order (default all three)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    unknown = set(a.methods.split(",")) - {"weightport", "filesystem", "gloo"}
    if unknown:
        ap.error(f"--methods: unknown {', '.join(sorted(unknown))} (weightport, filesystem, gloo)")

    import torch
    import transformers
    from vllm import LLM

    from weightport.hf import context_length
    import trainer_process  # tests/vllm: the trainer's own greedy tokens

    work = tempfile.mkdtemp(prefix="wp-vllm-bench-")
    model_dir = a.model or __import__("tiny_models").make_model("llama", os.path.join(work, "model"),
                                                                hidden=1024, layers=8, vocab=32000)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    params = dict(model.named_parameters())
    size = sum(p.numel() * 4 for p in params.values())
    llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=context_length(model_dir, cap=256),
              seed=0, weight_transfer_config={"backend": "weightport"})
    prompt_ids = [llm.get_tokenizer().encode(p) for p in PROMPTS]
    results = {}
    methods = {"weightport": lambda: bench_weightport(llm, params, a.versions),
               "filesystem": lambda: bench_filesystem(llm, params, a.versions, model_dir),
               "gloo": lambda: bench_gloo(llm, params, a.versions)}
    for name in a.methods.split(","):
        fn = methods[name]
        rows = fn()
        match = vllm_tokens(llm) == trainer_process.greedy(model, prompt_ids, 8)
        results[name] = dict(summarize(rows), tokens_match=match, runs=len(rows))
        if not a.json:
            r = results[name]
            phases = (f"  (transfer {r['transfer_s']:.3f} s of which the trainer's publish "
                      f"{r['publish_s']:.3f} s, build {r['build_s']:.3f} s: allocation "
                      f"{r['worker_alloc_s']:.3f}, copies {r['worker_copy_s']:.3f}, processing "
                      f"{r['worker_process_s']:.3f})" if name == "weightport" else "")
            print(f"{name:11s} update {r['update_s']:.3f} s  pause {r['pause_s']:.4f} s  tokens "
                  f"{'match' if match else 'DIFFER'}{phases}", flush=True)
    out = {"model_bytes": size, "versions": a.versions, "methods": results}
    baselines = [m for m in ("filesystem", "gloo") if m in results]
    if "weightport" in results and baselines:
        out["update_ratio"] = results["weightport"]["update_s"] / min(results[m]["update_s"] for m in baselines)
        out["pause_ratio"] = results["weightport"]["pause_s"] / min(results[m]["pause_s"] for m in baselines)
    print(json.dumps(out, indent=None if a.json else 1))
    llm.llm_engine.engine_core.shutdown()
    return 0 if all(r["tokens_match"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
