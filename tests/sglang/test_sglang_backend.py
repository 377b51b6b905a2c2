"""weightport as SGLang's weight-update path, against a real SGLang server (its CPU path), with tiny
local models.

Run with the SGLang environment from ``scripts/setup --sglang``: ``.deps/sglang/bin/python -m
pytest tests/sglang``. Each example run starts SGLang's server (about 30 s here). SGLang 0.5.23
cannot run tensor parallel on a CPU (its TP groups always open a NCCL communicator), so every run
here is tensor parallel 1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("sglang", reason="SGLang is not installed here (scripts/setup --sglang)")
import torch  # noqa: E402
import transformers  # noqa: E402

import tiny_models  # noqa: E402  (tests/vllm's, on the path by conftest.py)
from sglang_rl_loop import SGLangServer, greedy_tokens, prompts  # noqa: E402  (examples/)
from weightport import errors  # noqa: E402
from weightport.sglang import HTTPClient, SGLangTrainer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "sglang_rl_loop.py")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    # 128 positions: the example must take the model's context length, not a fixed longer one
    return {kind: tiny_models.make_model(kind, str(root / kind), positions=128) for kind in ("dense", "moe")}


# dense: Qwen2 with tied embeddings and q/k/v biases; moe: Qwen3-MoE (transformers' fused experts
# published per expert).
@pytest.mark.parametrize("kind,delta", [("dense", True), ("dense", False), ("moe", True)])
def test_rl_loop_tokens_match_every_version(models, kind, delta, tmp_path):
    cmd = [sys.executable, EXAMPLE, "--model", models[kind], "--steps", "2", "--json",
           "--log", str(tmp_path / "sglang.log")] + ([] if delta else ["--no-delta"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = json.loads(lines[-1])["steps"]
    assert [s["version"] for s in steps] == [1, 2]
    for s in steps:
        assert s["tokens_match"], s
        assert s["tokens_changed"], s  # training moved the weights far enough to change the tokens
        assert s["bytes"] > 0 and 0 <= s["pause_s"] <= s["update_s"], s


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "sglang.log"
    s = SGLangServer(models["dense"], 1, 300, str(log))
    yield s
    s.stop()


def test_a_killed_trainer_leaves_sglang_on_the_version_it_had(models, server):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "examples"),
                                                       os.environ.get("PYTHONPATH", "")]))
    trainer = subprocess.Popen([sys.executable, os.path.join(HERE, "killed_trainer.py"), models["dense"],
                                server.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = trainer.stdout.readline()
        assert first.startswith("{"), first + trainer.stderr.read()[-3000:]
        v1 = json.loads(first)["v1_tokens"]
        assert trainer.stdout.readline().strip() == "published 2"
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(timeout=30)
        trainer.stdout.close()
        trainer.stderr.close()
    ids = prompts(transformers.AutoConfig.from_pretrained(models["dense"]).vocab_size)
    assert server.generate(ids) == v1  # version 2 was never swapped in

    # A new trainer joins the same SGLang (its workers leave the dead session) and is served.
    model = transformers.AutoModelForCausalLM.from_pretrained(models["dense"], dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    sync = SGLangTrainer(HTTPClient(server.url), model, timeout=60)
    try:
        report = sync.send_weights()
        assert report["version"] == 1 and report["bytes"] > 0
        expect = greedy_tokens(model, ids)
        assert server.generate(ids) == expect

        # A swap of a version that never arrives raises naming it; SGLang keeps what it had.
        with pytest.raises(errors.FailedPrecondition, match="version 7"):
            sync._command({"op": "swap", "version": 7, "timeout": 1}, 7, "swap in")
        assert server.generate(ids) == expect
    finally:
        sync.close()


def test_a_checkpoint_that_does_not_fit_is_refused_naming_the_tensor(models, server):
    model = transformers.AutoModelForCausalLM.from_pretrained(models["dense"], dtype=torch.float32)
    state = dict(model.named_parameters())
    state["model.layers.0.mlp.down_proj.weight"] = torch.zeros(3, 5)
    ids = prompts(model.config.vocab_size)
    before = server.generate(ids)
    with pytest.raises(errors.FailedPrecondition, match="down_proj"):
        SGLangTrainer(HTTPClient(server.url), state, timeout=30)
    assert server.generate(ids) == before  # nothing joined, nothing moved
