"""An RL-style loop: a PyTorch trainer publishes each version into a serving SGLang through weightport.

    python examples/sglang_rl_loop.py --model DIR --steps N [--tp K] [--no-delta] [--json]

DIR is any Hugging Face model directory SGLang can load (config.json, safetensors). SGLang runs as
its own server process (``python -m sglang.launch_server ... --custom-weight-loader
weightport.sglang.load``, tensor parallel K); the trainer (this process) loads DIR with transformers
in float32, makes N training steps on a small synthetic task and publishes each version with
``weightport.sglang.SGLangTrainer`` over SGLang's HTTP API. After every version SGLang's greedy
tokens for fixed prompts must equal the trainer's own. Exit code 0 only if every step matched.
``--json`` prints ``{"steps": [{"version", "tokens_match", "update_s", "pause_s", "bytes"}...]}``.

On a machine without a GPU SGLang runs its CPU path (``SGLANG_USE_CPU_ENGINE=1``, native torch
attention); use the SGLang from ``scripts/setup --sglang``: ``.deps/sglang/bin/python``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

from rl_common import MAX_TOKENS, check_model_dir, free_port, greedy_tokens, train_step

MAX_CONTEXT = 512  # the prompts are short: a longer context only reserves KV cache never used


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model", required=True, help="Hugging Face model directory")
    ap.add_argument("--steps", type=int, default=3, help="training steps, one version each (default 3)")
    ap.add_argument("--tp", type=int, default=1, help="SGLang tensor-parallel size (default 1)")
    ap.add_argument("--no-delta", dest="delta", action="store_false", help="send every chunk every version")
    ap.add_argument("--lr", type=float, default=3e-2, help="learning rate (default 3e-2: tokens change)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds any one wait may take (default 300)")
    ap.add_argument("--json", action="store_true", help="print the per-step report as JSON")
    ap.add_argument("--log", help="write SGLang's server log to this file (default: not kept)")
    a = ap.parse_args(argv)
    check_model_dir(ap, a.model)
    if a.steps < 1 or a.tp < 1:
        ap.error("--steps and --tp must be at least 1")
    return a


class SGLangServer:
    """``sglang.launch_server`` in its own process group, with weightport's loader listed."""

    def __init__(self, model: str, tp: int, timeout: float, log_path: str | None = None):
        import torch

        from weightport.hf import context_length
        from weightport.sglang import LOADER

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--tp-size", str(tp),
               "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32", "--skip-tokenizer-init",
               "--context-length", str(context_length(model, cap=MAX_CONTEXT)), "--random-seed", "0",
               "--custom-weight-loader", LOADER, "--log-level", "warning"]
        env = dict(os.environ)
        if not torch.cuda.is_available():  # SGLang's CPU path, with the native torch attention
            env["SGLANG_USE_CPU_ENGINE"] = "1"
            if tp > 1 and "SGLANG_CPU_OMP_THREADS_BIND" not in env:  # SGLang binds one NUMA node per rank
                cores = sorted(os.sched_getaffinity(0))
                per = max(1, len(cores) // tp)
                env["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(
                    ",".join(str(c) for c in (cores[i * per:(i + 1) * per] or cores[-1:])) for i in range(tp))
            cmd += ["--device", "cpu", "--attention-backend", "torch_native", "--disable-overlap-schedule",
                    "--disable-cuda-graph", "--mem-fraction-static", "0.05", "--max-total-tokens", "4096",
                    "--sleep-on-idle"]  # idle, its scheduler spins on a core the trainer needs
        self.log = open(log_path or os.devnull, "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"SGLang's server exited with {self.proc.returncode} while starting "
                                   f"(its log: {log_path or 'not kept; give --log'})")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"SGLang's server did not answer /health within {timeout:.0f} s")
            time.sleep(1)

    def generate(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        body = {"input_ids": prompt_ids,
                "sampling_params": {"temperature": 0, "max_new_tokens": MAX_TOKENS, "ignore_eos": True}}
        req = urllib.request.Request(self.url + "/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return [o["output_ids"] for o in json.loads(r.read())]

    def stop(self) -> None:
        """Ends the server and every process it started (SIGTERM to its group, then SIGKILL)."""
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # the group's last processes (its detokenizer) may outlive the server by a moment
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.log.close()


def prompts(vocab: int) -> list[list[int]]:
    """Fixed prompts as token ids (the model may come without a tokenizer)."""
    return [[(7 * i + 3 * j) % (vocab - 3) + 3 for j in range(5 + i)] for i in range(3)]


def run(args: argparse.Namespace, log_path: str | None) -> tuple[list[dict], bool]:
    import torch
    import transformers

    from weightport.sglang import HTTPClient, SGLangTrainer

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.train()
    vocab = model.config.vocab_size
    ids = prompts(vocab)
    server = SGLangServer(args.model, args.tp, args.timeout, log_path)
    steps, ok = [], True
    try:
        expect = greedy_tokens(model, ids)
        previous = server.generate(ids)
        if previous != expect:  # version 0: both loaded DIR
            raise RuntimeError(f"before any update, SGLang's greedy tokens {previous} differ from the "
                               f"trainer's {expect}: the two do not compute the same model")
        sync = SGLangTrainer(HTTPClient(server.url), model, delta=args.delta, timeout=args.timeout)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        try:
            for step in range(1, args.steps + 1):
                loss = train_step(model, opt, vocab, step)
                report = sync.send_weights(step)
                expect = greedy_tokens(model, ids)
                got = server.generate(ids)
                match = got == expect
                ok &= match
                steps.append({"version": step, "tokens_match": match, "update_s": round(report["update_s"], 4),
                              "pause_s": round(report["pause_s"], 4), "bytes": report["bytes"],
                              "transfer_s": round(report["transfer_s"], 4), "build_s": round(report["build_s"], 4),
                              "loss": round(loss, 4), "tokens_changed": got != previous})
                if not match:
                    steps[-1]["sglang_tokens"], steps[-1]["trainer_tokens"] = got, expect
                previous = got
                if not args.json:
                    print(f"version {step}: loss {loss:.3f}, tokens {'match' if match else 'DIFFER'}, "
                          f"update {report['update_s']:.3f} s, pause {report['pause_s']:.4f} s, "
                          f"{report['bytes']} bytes", flush=True)
        finally:
            sync.close()
    finally:
        server.stop()
    return steps, ok


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        steps, ok = run(args, args.log)
    except Exception as e:
        print(f"sglang_rl_loop: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"steps": steps}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
