"""An RL-style loop: a PyTorch trainer publishes each version into a serving vLLM through weightport.

    python examples/vllm_rl_loop.py --model DIR --steps N [--tp K] [--trainer-ranks R] [--no-delta]
                                    [--publish-dtype bf16] [--json]

DIR is any Hugging Face model directory vLLM can load (config.json, tokenizer, safetensors). The
trainer loads it with transformers in float32 (as R FSDP2 ranks over gloo when R > 1), makes N
training steps on a small synthetic task and publishes each version; a vLLM engine in another
process (``LLM(..., weight_transfer_config={"backend": "weightport"})``, tensor parallel K) swaps it
in and generates greedy tokens for fixed prompts, which must equal the trainer's own greedy tokens
for that version. Exit code 0 only if every step matched. ``--json`` prints
``{"steps": [{"version", "tokens_match", "update_s", "pause_s", "bytes"}...]}``.

On a CPU-only machine run it with the vLLM from ``scripts/setup --vllm``: ``.deps/vllm/bin/python``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

from rl_common import MAX_TOKENS, check_model_dir, free_port, greedy_tokens, train_step

PROMPTS = ["the water of people", "you can see the first", "when they make a long"]
MAX_MODEL_LEN = 512


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model", required=True, help="Hugging Face model directory")
    ap.add_argument("--steps", type=int, default=3, help="training steps, one version each (default 3)")
    ap.add_argument("--tp", type=int, default=1, help="vLLM tensor-parallel size (default 1)")
    ap.add_argument("--trainer-ranks", type=int, default=1, help="FSDP2 trainer ranks over gloo (default 1)")
    ap.add_argument("--no-delta", dest="delta", action="store_false", help="send every chunk every version")
    ap.add_argument("--publish-dtype", choices=["f32", "bf16"], default="f32",
                    help="what the trainer publishes: its f32 weights, or bf16 copies of them that "
                         "weightport widens to vLLM's f32 in flight (the reference then computes with "
                         "the bf16-rounded weights); bf16 needs --trainer-ranks 1")
    ap.add_argument("--lr", type=float, default=3e-2, help="learning rate (default 3e-2: tokens change)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds any one wait may take (default 300)")
    ap.add_argument("--json", action="store_true", help="print the per-step report as JSON")
    a = ap.parse_args(argv)
    check_model_dir(ap, a.model)
    if a.steps < 1 or a.tp < 1 or a.trainer_ranks < 1:
        ap.error("--steps, --tp and --trainer-ranks must be at least 1")
    if a.publish_dtype == "bf16" and a.trainer_ranks > 1:
        ap.error("--publish-dtype bf16 needs --trainer-ranks 1")
    return a


# -- the vLLM side: its own process, driven over a pipe ----------------------------------------------

def engine_main(conn, model: str, tp: int) -> None:
    if tp > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        cores = sorted(os.sched_getaffinity(0))
        per = max(1, len(cores) // tp)
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
            ",".join(str(c) for c in cores[i * per:(i + 1) * per]) for i in range(tp))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from weightport.hf import context_length

    try:
        # The model's own context length, capped: the prompts are short and a longer one only
        # reserves KV cache this example never uses.
        llm = LLM(model=model, dtype="float32", tensor_parallel_size=tp, enforce_eager=True,
                  max_model_len=context_length(model, cap=MAX_MODEL_LEN), seed=0,
                  weight_transfer_config={"backend": "weightport"})
    except BaseException as e:
        conn.send(("error", f"vLLM could not load {model}: {e}"))
        return
    from weightport.vllm import LLMWeightSyncClient

    client = LLMWeightSyncClient(llm)
    conn.send(("ready", None))
    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    while True:
        cmd, arg = conn.recv()
        try:
            if cmd == "stop":  # shut vLLM down in order: killed, it leaves its /dev/shm queues
                llm.llm_engine.engine_core.shutdown()
                conn.send(("ok", None))
                return
            if cmd == "generate":
                t0 = time.perf_counter()
                outs = llm.generate(arg, greedy, use_tqdm=False)
                conn.send(("ok", ([list(o.outputs[0].token_ids) for o in outs], time.perf_counter() - t0)))
            elif cmd == "rpc":  # one of vLLM's weight-sync calls, by name, with its arguments
                method, args = arg
                getattr(client, method)(*args)
                conn.send(("ok", None))
            elif cmd == "encode":
                conn.send(("ok", [llm.get_tokenizer().encode(p) for p in arg]))
        except BaseException as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))


class EngineProcess:
    """The vLLM process, and a ``VLLMWeightSyncClient`` for it."""

    def __init__(self, model: str, tp: int, timeout: float):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.timeout = timeout
        self.proc = ctx.Process(target=engine_main, args=(child, model, tp), name="vllm-engine")
        self.proc.start()
        self._call(None)

    def _call(self, msg):
        if msg is not None:
            self.conn.send(msg)
        if not self.conn.poll(self.timeout):
            raise TimeoutError(f"the vLLM process did not answer {msg[0] if msg else 'its start'} "
                               f"within {self.timeout:.0f} s")
        status, value = self.conn.recv()
        if status == "error":
            raise RuntimeError(value)
        return value

    def generate(self, prompts):
        return self._call(("generate", prompts))

    def encode(self, prompts):
        return self._call(("encode", prompts))

    def init_weight_transfer_engine(self, init_info):
        self._call(("rpc", ("init_weight_transfer_engine", [init_info])))

    def start_weight_update(self):
        self._call(("rpc", ("start_weight_update", [])))

    def update_weights(self, update_info):
        self._call(("rpc", ("update_weights", [update_info])))

    def finish_weight_update(self, weight_version=None):
        self._call(("rpc", ("finish_weight_update", [weight_version])))

    def stop(self):
        """Stops vLLM and every process it started (its engine core and workers can outlive their
        parent when it exits on an error)."""
        import psutil

        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            family = []
        try:
            self._call(("stop", None))
        except (OSError, EOFError, RuntimeError, TimeoutError):
            pass
        self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.kill()
        for p in family:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(family, timeout=10)


# -- the trainer ----------------------------------------------------------------------------------

def load_trainer_model(model_dir: str, rank: int, world: int):
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    return model


def trainer(rank: int, world: int, args: argparse.Namespace, port: int, result_q) -> None:
    import torch

    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from vllm.distributed.weight_transfer import WeightTransferTrainerFactory

    from weightport.vllm import WeightportTrainerInitInfo

    model = load_trainer_model(args.model, rank, world)
    vocab = model.config.vocab_size
    engine = EngineProcess(args.model, args.tp, args.timeout) if rank == 0 else None
    steps = []
    ok = True
    try:
        prompt_ids = engine.encode(PROMPTS) if rank == 0 else None
        if world > 1:
            box = [prompt_ids]
            torch.distributed.broadcast_object_list(box, src=0)
            prompt_ids = box[0]
        info = WeightportTrainerInitInfo(rank=rank, world_size=world, delta=args.delta, timeout=args.timeout)
        published, reference = model, model
        if args.publish_dtype == "bf16":  # bf16 copies refreshed every step; the reference uses them
            import copy

            published = {n: p.detach().to(torch.bfloat16) for n, p in model.named_parameters()}
            reference = copy.deepcopy(model)
        sync = WeightTransferTrainerFactory.trainer_init(info, client=engine, source=published)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        expect = greedy_tokens(model, prompt_ids)
        previous = engine.generate(PROMPTS)[0] if rank == 0 else None
        if rank == 0 and previous != expect:  # version 0: both loaded DIR
            raise RuntimeError(f"before any update, vLLM's greedy tokens {previous} differ from the "
                               f"trainer's {expect}: the two do not compute the same model")
        for step in range(1, args.steps + 1):
            loss = train_step(model, opt, vocab, step)
            if published is not model:
                with torch.no_grad():
                    for n, p in model.named_parameters():
                        published[n].copy_(p)
                    for n, p in reference.named_parameters():
                        p.copy_(published[n])
            report = sync.send_weights(step)
            expect = greedy_tokens(reference, prompt_ids)
            if rank != 0:
                continue
            got, gen_s = engine.generate(PROMPTS)
            match = got == expect
            ok &= match
            steps.append({"version": step, "tokens_match": match, "update_s": round(report["update_s"], 4),
                          "pause_s": round(report["pause_s"], 4), "bytes": report["bytes"],
                          "transfer_s": round(report["transfer_s"], 4), "build_s": round(report["build_s"], 4),
                          "loss": round(loss, 4),
                          "tokens_changed": previous is not None and got != previous,
                          "generate_s": round(gen_s, 4)})
            if not match:
                steps[-1]["vllm_tokens"], steps[-1]["trainer_tokens"] = got, expect
            previous = got
            if not args.json:
                print(f"version {step}: loss {loss:.3f}, tokens {'match' if match else 'DIFFER'}, "
                      f"update {report['update_s']:.3f} s, pause {report['pause_s']:.4f} s, "
                      f"{report['bytes']} bytes", flush=True)
        sync.shutdown()
    finally:
        if engine is not None:
            engine.stop()
        if world > 1:
            torch.distributed.destroy_process_group()
    if rank == 0:
        result_q.put({"steps": steps, "ok": ok})


def main(argv=None) -> int:
    args = parse_args(argv)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=trainer, args=(r, args.trainer_ranks, args, port, results), name=f"trainer-{r}")
             for r in range(1, args.trainer_ranks)]
    for p in procs:
        p.start()
    failed = None
    try:
        trainer(0, args.trainer_ranks, args, port, results)
    except BaseException as e:
        failed = e
    for p in procs:
        p.join(timeout=args.timeout)
        if p.is_alive():
            p.kill()
    if failed is not None:
        print(f"vllm_rl_loop: {type(failed).__name__}: {failed}", file=sys.stderr)
        return 1
    out = results.get(timeout=10)
    if args.json:
        print(json.dumps({"steps": out["steps"]}))
    return 0 if out["ok"] and all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
