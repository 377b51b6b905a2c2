"""Updating a serving SGLang: weightport against SGLang's own weight-update paths.

    .deps/sglang/bin/python bench/sglang/bench_sglang_update.py [--model DIR] [--versions N]
                                                               [--methods weightport,tensor,disk,distributed] [--json]

One SGLang ``Engine`` (its CPU path here: float32, tensor parallel 1) on a ~560 MB Llama made here
(or DIR), the trainer a transformers copy of it in this process; each version perturbs every weight
(nothing for a delta to skip). Per method and version: update (from the trainer starting the
version until SGLang computes with it) and pause (the time SGLang cannot generate: its update
calls). Methods:

- weightport: ``SGLangTrainer.send_weights`` (publish, transfer with every chunk's hash checked,
  the worker builds the version beside the live model, then a swap session);
- tensor: ``update_weights_from_tensor`` with the whole state dict (SGLang passes CPU tensors to
  its scheduler through shared memory) inside ``begin_weight_update`` / ``end_weight_update``;
- disk: the trainer writes safetensors, ``update_weights_from_disk``;
- distributed: ``init_weights_update_group`` over gloo, then the trainer broadcasts every tensor
  into ``update_weights_from_distributed`` (SGLang's NCCL path, on gloo).

After each method SGLang's greedy tokens must equal the trainer's. Medians of the versions.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))
METHODS = ("weightport", "tensor", "disk", "distributed")


def perturb(params, step):
    import torch

    g = torch.Generator().manual_seed(step)
    with torch.no_grad():
        for p in params.values():
            p.add_(torch.randn(p.shape, generator=g) * 1e-3)


def refused(result) -> bool:
    return isinstance(result, (tuple, list)) and bool(result) and result[0] is False


def bench_weightport(engine, params, versions):
    from weightport.sglang import EngineClient, SGLangTrainer

    sync = SGLangTrainer(EngineClient(engine), params, timeout=300)
    rows = []
    try:
        for v in range(1, versions + 1):
            perturb(params, v)
            r = sync.send_weights(v)
            w = r.get("worker_build", {})
            rows.append({"update_s": r["update_s"], "pause_s": r["pause_s"], "transfer_s": r["transfer_s"],
                         "publish_s": r["publish_s"], "build_s": r["build_s"],
                         "worker_copy_s": w.get("copy_s", float("nan")),
                         "worker_process_s": w.get("process_s", float("nan")), "bytes": r["bytes"]})
    finally:
        sync.close()
    return rows


def bench_tensor(engine, params, versions):
    rows = []
    for v in range(1, versions + 1):
        perturb(params, 100 + v)
        t0 = time.perf_counter()
        assert not refused(engine.begin_weight_update())
        result = engine.update_weights_from_tensor([(n, p.detach()) for n, p in params.items()])
        assert not refused(engine.end_weight_update()) and not refused(result), result
        t1 = time.perf_counter()
        rows.append({"update_s": t1 - t0, "pause_s": t1 - t0})
    return rows


def bench_disk(engine, params, versions, directory):
    from safetensors.torch import save_file

    rows = []
    for v in range(1, versions + 1):
        perturb(params, 200 + v)
        t0 = time.perf_counter()
        save_file({n: p.detach().contiguous() for n, p in params.items()}, os.path.join(directory, "model.safetensors"))
        t1 = time.perf_counter()
        result = engine.update_weights_from_disk(directory)
        assert not refused(result), result
        t2 = time.perf_counter()
        rows.append({"update_s": t2 - t0, "pause_s": t2 - t1, "write_s": t1 - t0})
    return rows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_distributed(engine, params, versions):
    import torch
    import torch.distributed as dist

    port = free_port()
    out: list = []
    joiner = threading.Thread(target=lambda: out.append(engine.init_weights_update_group(
        master_address="127.0.0.1", master_port=port, rank_offset=1, world_size=2, group_name="bench",
        backend="gloo")))
    joiner.start()
    store = dist.TCPStore("127.0.0.1", port, world_size=2, is_master=True)
    # SGLang prefixes the group's name; bounded: on SGLang's CPU path its scheduler never joined.
    pg = dist.ProcessGroupGloo(dist.PrefixStore("bench", store), 0, 2, datetime.timedelta(seconds=120))
    joiner.join(timeout=120)
    if joiner.is_alive():
        raise TimeoutError("SGLang did not join a gloo weight-update group within 120 s")
    if out and refused(out[0]):
        raise RuntimeError(f"SGLang refused a gloo weight-update group: {out[0]}")
    names = list(params)
    dtypes = [str(params[n].dtype).replace("torch.", "") for n in names]
    shapes = [list(params[n].shape) for n in names]
    rows = []
    for v in range(1, versions + 1):
        perturb(params, 300 + v)
        t0 = time.perf_counter()
        assert not refused(engine.begin_weight_update())
        got: list = []
        rpc = threading.Thread(target=lambda: got.append(engine.update_weights_from_distributed(
            names, dtypes, shapes, group_name="bench")))
        rpc.start()
        with torch.no_grad():
            for n in names:
                pg.broadcast(params[n].detach(), 0).wait()
        rpc.join(timeout=120)
        if rpc.is_alive():
            raise TimeoutError("update_weights_from_distributed did not return within 120 s")
        assert not refused(engine.end_weight_update()) and not (got and refused(got[0])), got
        t1 = time.perf_counter()
        rows.append({"update_s": t1 - t0, "pause_s": t1 - t0})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model directory (default: a ~560 MB Llama made here)")
    ap.add_argument("--versions", type=int, default=5, help="versions per method (default 5)")
    ap.add_argument("--methods", default="weightport,tensor,disk",
                    help=f"comma-separated, in order, of {', '.join(METHODS)} (default all but distributed: "
                         f"on SGLang's CPU path its scheduler never joins the gloo group)")
    ap.add_argument("--spin", action="store_true",
                    help="leave SGLang's scheduler spinning while idle (its default; on a CPU it then "
                         "holds a core the trainer and the transfer need: --sleep-on-idle is the default here)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    unknown = set(a.methods.split(",")) - set(METHODS)
    if unknown:
        ap.error(f"--methods: unknown {', '.join(sorted(unknown))} ({', '.join(METHODS)})")
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    import sglang
    import torch
    import transformers

    from sglang_rl_loop import greedy_tokens, prompts
    from weightport.hf import context_length
    from weightport.sglang import LOADER

    work = tempfile.mkdtemp(prefix="wp-sglang-bench-")
    model_dir = a.model or __import__("tiny_models").make_model("llama", os.path.join(work, "model"),
                                                                hidden=1024, layers=8, vocab=32000)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    params = dict(model.named_parameters())
    size = sum(p.numel() * p.element_size() for p in params.values())
    cpu = {} if torch.cuda.is_available() else dict(device="cpu", attention_backend="torch_native",
                                                    disable_overlap_schedule=True, disable_cuda_graph=True,
                                                    mem_fraction_static=0.05, max_total_tokens=4096,
                                                    sleep_on_idle=not a.spin)
    engine = sglang.Engine(model_path=model_dir, dtype="float32", skip_tokenizer_init=True, random_seed=0,
                           context_length=context_length(model_dir, cap=256), log_level="warning",
                           custom_weight_loader=[LOADER], **cpu)
    ids = prompts(model.config.vocab_size)
    sampling = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}
    methods = {"weightport": lambda: bench_weightport(engine, params, a.versions),
               "tensor": lambda: bench_tensor(engine, params, a.versions),
               "disk": lambda: bench_disk(engine, params, a.versions, model_dir),
               "distributed": lambda: bench_distributed(engine, params, a.versions)}
    results = {}
    try:
        for name in a.methods.split(","):
            try:
                rows = methods[name]()
            except Exception as e:  # a path SGLang does not take here: said, not fatal
                results[name] = {"error": f"{type(e).__name__}: {e}"[:400]}
                print(f"{name:11s} failed: {results[name]['error']}", flush=True)
                continue
            got = [o["output_ids"] for o in engine.generate(input_ids=ids, sampling_params=sampling)]
            match = got == greedy_tokens(model, ids)
            results[name] = dict({k: statistics.median(r[k] for r in rows) for k in rows[0]},
                                 tokens_match=match, runs=len(rows))
            if not a.json:
                r = results[name]
                phases = (f"  (transfer {r['transfer_s']:.3f} s of which publish {r['publish_s']:.3f} s, build "
                          f"{r['build_s']:.3f} s: copies {r['worker_copy_s']:.3f}, processing "
                          f"{r['worker_process_s']:.3f})" if name == "weightport" else "")
                print(f"{name:11s} update {r['update_s']:.3f} s  pause {r['pause_s']:.4f} s  tokens "
                      f"{'match' if match else 'DIFFER'}{phases}", flush=True)
    finally:
        engine.shutdown()
    out = {"model_bytes": size, "versions": a.versions, "methods": results}
    baselines = [m for m in METHODS[1:] if "update_s" in results.get(m, {})]
    if "update_s" in results.get("weightport", {}) and baselines:
        out["update_ratio"] = results["weightport"]["update_s"] / min(results[m]["update_s"] for m in baselines)
        out["pause_ratio"] = results["weightport"]["pause_s"] / min(results[m]["pause_s"] for m in baselines)
    print(json.dumps(out, indent=None if a.json else 1))
    return 0 if all(r.get("tokens_match", True) for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
