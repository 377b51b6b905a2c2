"""A fleet of vLLM engines fed by one trainer: two `vllm serve` replicas (separate processes on this
host) behind one weightport.vllm.FleetClient. The trainer sends one copy; the replicas relay it to
each other; both swap only once both have built, and both then generate the trainer's tokens."""

from __future__ import annotations

import os
import sys

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here (scripts/setup --vllm)")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_models  # noqa: E402

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def test_two_replicas_take_each_version_from_one_copy_and_serve_it(tmp_path):
    import contextlib

    import torch
    import transformers
    from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient, WeightTransferTrainerFactory

    import trainer_process
    from serve_process import completion, vllm_server
    from weightport.vllm import FleetClient, WeightportTrainerInitInfo

    model_dir = tiny_models.make_model("llama", str(tmp_path / "llama"), hidden=256, layers=2, positions=128)
    with contextlib.ExitStack() as stack:
        bases = [stack.enter_context(vllm_server(model_dir, tmp_path / f"serve{i}.log")) for i in range(2)]
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        fleet = FleetClient([HTTPVLLMWeightSyncClient(b) for b in bases])
        sync = WeightTransferTrainerFactory.trainer_init(WeightportTrainerInitInfo(rank=0, timeout=90),
                                                         client=fleet, source=model)
        model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        ids = [1, 5, 9, 14]
        for version in (1, 2):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
            report = sync.send_weights(version)
            print(f"version {version}: {report['bytes']} bytes to the fleet, {report['source_bytes']} from the "
                  f"trainer, {report['relayed_bytes']} relayed; update {report['update_s']:.2f} s, pause "
                  f"{report['pause_s']:.3f} s")
            assert report["built_before_swap"], report
            expect = trainer_process.greedy(model, [ids], 6)[0]
            for b in bases:
                assert completion(b, model_dir, ids, 6) == expect, b
        # One copy leaves the trainer; the second replica's comes from the first.
        assert report["source_bytes"] == model_bytes and report["relayed_bytes"] == model_bytes, report
        sync.shutdown()
