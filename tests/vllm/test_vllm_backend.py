"""The vLLM weight-transfer backend against a real vLLM (CPU build), with tiny local models.

Run with the vLLM environment from ``scripts/setup --vllm``: ``.deps/vllm/bin/python -m pytest
tests/vllm``. Each example run starts vLLM (~20 s here), so the parameter grid covers every value
of every axis (model kind, tensor parallel, delta, FSDP2 trainer ranks, published dtype) in four
runs, not all 32.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here (scripts/setup --vllm)")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "vllm_rl_loop.py")
sys.path.insert(0, HERE)
import tiny_models  # noqa: E402

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # collective_rpc of a test's function


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    # 128 positions: the example must take the model's context length, not a fixed longer one
    return {kind: tiny_models.make_model(kind, str(root / kind), positions=128) for kind in ("dense", "moe")}


@pytest.mark.parametrize("kind,tp,delta,ranks,dtype", [
    ("dense", 1, True, 1, "bf16"),  # bf16 published, widened to vLLM's f32 in flight
    ("moe", 2, True, 1, "f32"),
    ("dense", 2, False, 2, "f32"),
    ("moe", 1, False, 2, "f32"),
])
def test_rl_loop_tokens_match_every_version(models, kind, tp, delta, ranks, dtype):
    cmd = [sys.executable, EXAMPLE, "--model", models[kind], "--steps", "2", "--tp", str(tp),
           "--trainer-ranks", str(ranks), "--publish-dtype", dtype, "--json"] + ([] if delta else ["--no-delta"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = json.loads(lines[-1])["steps"]
    assert [s["version"] for s in steps] == [1, 2]
    for s in steps:
        assert s["tokens_match"], s
        assert s["tokens_changed"], s  # training moved the weights far enough to change the tokens
        assert s["bytes"] > 0 and 0 <= s["pause_s"] <= s["update_s"], s


# -- one vLLM shared by the tests below (in this process, driven directly) --------------------------

PROMPTS = ["the water of people", "you can see the first"]
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def big_dense(tmp_path_factory):
    """A model large enough (~75 MB) that a version is still moving when its trainer dies."""
    return tiny_models.make_model("llama", str(tmp_path_factory.mktemp("models") / "llama"), hidden=512,
                                  layers=8)


@pytest.fixture(scope="module")
def llm(big_dense):
    from vllm import LLM

    engine = LLM(model=big_dense, dtype="float32", enforce_eager=True, max_model_len=256, seed=0,
                 weight_transfer_config={"backend": "weightport"})
    yield engine
    engine.llm_engine.engine_core.shutdown()


def generate(llm):
    from vllm import SamplingParams

    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True),
                        use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


class Trainer:
    """trainer_process.run in a spawned process; joins the vLLM workers through `llm`."""

    def __init__(self, llm, model_dir, seed, keep_versions=0):
        import threading

        import trainer_process

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=trainer_process.run, args=(child, model_dir, seed, "tcp", keep_versions))
        self.proc.start()
        assert self.conn.poll(120), "the trainer did not start"
        info = self.conn.recv()
        errors = []
        rpc = threading.Thread(target=lambda: _call(errors, llm.collective_rpc, "init_weight_transfer_engine",
                                                    args=(info,)))
        rpc.start()
        assert self.conn.poll(120), "the trainer did not join"
        assert self.conn.recv() == "joined"
        rpc.join()
        assert not errors, errors
        self.prompt_ids = [llm.get_tokenizer().encode(p) for p in PROMPTS]

    def version(self, v, only=None):
        """Publishes version `v` (every tensor changed, or only `only`): (greedy tokens, bytes moved)."""
        self.conn.send(("version", v, self.prompt_ids, MAX_TOKENS, only))
        assert self.conn.poll(120), f"version {v} was not committed"
        return self.conn.recv()

    def die_during(self, v):
        self.conn.send(("die", v))
        self.proc.join(timeout=60)
        assert self.proc.exitcode == -9, self.proc.exitcode


def _call(errors, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except BaseException as e:  # reported by the test's thread
        errors.append(e)


def apply(llm, version, timeout=60.0):
    llm.collective_rpc("start_weight_update")
    llm.collective_rpc("update_weights", args=({"version": version, "timeout": timeout},))
    llm.collective_rpc("finish_weight_update")


def test_delta_then_a_killed_trainer_leaves_the_previous_version_serving(llm, big_dense):
    first = Trainer(llm, big_dense, seed=1)
    expect_v1, full_bytes = first.version(1)
    apply(llm, 1)
    assert generate(llm) == expect_v1

    # A delta version: one tensor of 75 changed, so only its chunks move.
    expect_v2, delta_bytes = first.version(2, only="model.layers.3.mlp.down_proj.weight")
    apply(llm, 2)
    assert generate(llm) == expect_v2
    assert delta_bytes < full_bytes / 10, (delta_bytes, full_bytes)
    expect_v1 = expect_v2  # the version serving when the trainer dies below

    first.die_during(3)  # SIGKILL right after version 3 starts moving: its coordinator dies too
    llm.collective_rpc("start_weight_update")
    with pytest.raises(Exception, match="version 3 cannot be applied|was not committed"):
        llm.collective_rpc("update_weights", args=({"version": 3, "timeout": 20.0},))
    assert generate(llm) == expect_v1, "vLLM must keep serving version 2 after version 3 failed"

    second = Trainer(llm, big_dense, seed=2)  # a new trainer: vLLM's workers rejoin its group
    expect_v3, _ = second.version(3)
    assert expect_v3 != expect_v1
    apply(llm, 3)
    assert generate(llm) == expect_v3


def test_the_workers_roll_back_to_a_kept_version_without_the_trainer(llm, big_dense):
    from weightport.vllm import LLMWeightSyncClient, rollback_fleet

    trainer = Trainer(llm, big_dense, seed=4, keep_versions=1)
    expect = {}
    for v in (1, 2):
        expect[v], _ = trainer.version(v)
        apply(llm, v)
        assert generate(llm) == expect[v]
    trainer.die_during(3)  # the trainer is gone; version 3 never commits
    client = LLMWeightSyncClient(llm)
    with pytest.raises(Exception, match="version 0 is not kept.*kept: 1; keep_versions=1"):
        rollback_fleet(client, 0)  # one kept version: the one before version 2
    assert generate(llm) == expect[2], "a refused rollback changes nothing"
    rollback_fleet(client, 1)
    assert generate(llm) == expect[1]
    with pytest.raises(Exception, match="version 1 is not kept.*kept: none"):
        rollback_fleet(client, 1)  # used up
    assert generate(llm) == expect[1]
    llm.collective_rpc("start_weight_update")
    with pytest.raises(Exception, match="version 2 was rolled back from"):
        llm.collective_rpc("update_weights", args=({"version": 2, "timeout": 5.0},))

    second = Trainer(llm, big_dense, seed=5)  # a new trainer: its versions go through
    expect[3], _ = second.version(1)
    apply(llm, 1)
    assert generate(llm) == expect[3]


def _refusal(llm, model_dir, mutate):
    """trainer_init with the trainer's parameters changed by `mutate`; returns the error text."""
    import torch
    import transformers
    from vllm.distributed.weight_transfer import WeightTransferTrainerFactory

    from weightport.vllm import LLMWeightSyncClient, WeightportTrainerInitInfo

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    state = dict(model.named_parameters())
    mutate(state)
    with pytest.raises(ValueError) as err:
        WeightTransferTrainerFactory.trainer_init(WeightportTrainerInitInfo(rank=0, timeout=20),
                                                  client=LLMWeightSyncClient(llm), source=state)
    return str(err.value)


def test_unknown_checkpoint_name_is_refused_before_anything_moves(llm, big_dense):
    import torch

    msg = _refusal(llm, big_dense, lambda s: s.__setitem__("model.layers.0.mlp.bogus_proj.weight",
                                                           torch.zeros(4, 4)))
    assert "model.layers.0.mlp.bogus_proj.weight" in msg, msg


def test_disagreeing_shape_is_refused_naming_tensor_and_parameter(llm, big_dense):
    import torch

    name = "model.layers.1.self_attn.o_proj.weight"
    msg = _refusal(llm, big_dense, lambda s: s.__setitem__(name, torch.zeros(512, 500)))
    assert name in msg and "model.layers.1.self_attn.o_proj.weight" in msg, msg
    assert "parameter 'model.layers.1.self_attn.o_proj" in msg, msg


def _placement_and_peak(worker, metas):
    """In vLLM's worker: the placement learned, and the worker's peak memory above its own during it."""
    from weightport.vllm.placement import TensorMeta, learn_placement

    def kib(field):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark starts again from what the worker holds now
    before = kib("VmRSS")
    p = learn_placement(worker.model_runner.model, [TensorMeta(n, tuple(s), d) for n, s, d in metas])
    return {"runs": [(r.layer, r.param, r.tensor) for r in p.runs], "boxes": len(p.boxes),
            "fallback": len(p.fallback), "peak_extra": (kib("VmHWM") - before) << 10}


def test_the_dry_run_learns_fused_parameters_within_the_workers_weights(llm, big_dense):
    # One tensor at a time: q, k and v land in one fused parameter from three dry runs.
    import math

    metas = tiny_models.checkpoint_metas(big_dense)
    (got,) = llm.collective_rpc(_placement_and_peak, args=(metas,))
    weights = sum(4 * math.prod(shape) for _, shape, _ in metas)
    assert got["boxes"] == len(metas) and got["fallback"] == 0
    qkv = {t.rsplit(".", 2)[-2] for layer, _, t in got["runs"] if layer == "model.layers.0.self_attn.qkv_proj"}
    assert qkv == {"q_proj", "k_proj", "v_proj"}, got["runs"][:6]
    assert got["peak_extra"] <= weights, (got["peak_extra"], weights)  # was about 6x at once


def test_vllm_serve_over_http_takes_a_version(models, tmp_path):
    """`vllm serve --weight-transfer-config '{"backend": "weightport"}'` driven by vLLM's own HTTP
    client: the one config line is all the server needs."""
    import torch
    import transformers
    from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient, WeightTransferTrainerFactory

    import trainer_process
    from serve_process import completion, vllm_server
    from weightport.vllm import WeightportTrainerInitInfo

    with vllm_server(models["dense"], tmp_path / "serve.log") as server:
        base = server.base
        model = transformers.AutoModelForCausalLM.from_pretrained(models["dense"], dtype=torch.float32).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        sync = WeightTransferTrainerFactory.trainer_init(WeightportTrainerInitInfo(rank=0, timeout=60),
                                                         client=HTTPVLLMWeightSyncClient(base), source=model)
        report = sync.send_weights(1)
        assert report["bytes"] > 0
        ids = [1, 5, 9, 14]
        expect = trainer_process.greedy(model, [ids], 6)[0]
        got = completion(base, models["dense"], ids, 6)
        assert got == expect, (got, expect)
        sync.shutdown()
