"""A fleet of vLLM engines across testbed hosts: the trainer on h0, a `vllm serve` replica on each of
h1 and h2 (network namespaces on this machine, joined by a bridge, TCP between them). The trainer
sends one copy over its link; the replicas relay the rest between themselves; both swap the
version in only once both have built it, and both then generate the trainer's tokens."""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here (scripts/setup --vllm)")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_models  # noqa: E402
from serve_process import vllm_server  # noqa: E402

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
NS, SUBNET = "wptb-h{}", "198.18.0.{}"  # scripts/testbed's names and addresses


def test_replicas_on_two_testbed_hosts_take_one_copy_from_a_trainer_on_a_third(tmp_path, testbed):
    testbed(3)
    model_dir = tiny_models.make_model("llama", str(tmp_path / "llama"), hidden=256, layers=2, positions=128)
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(vllm_server(model_dir, tmp_path / f"serve{h}.log", netns=NS.format(h),
                                                   address=SUBNET.format(10 + h))) for h in (1, 2)]
        trainer = subprocess.run(
            ["ip", "netns", "exec", NS.format(0), sys.executable, os.path.join(HERE, "fleet_trainer.py"),
             "--model", model_dir, "--servers", ",".join(s.base for s in servers), "--host", SUBNET.format(10),
             "--versions", "2", "--transport", "tcp", "--timeout", "90"],
            capture_output=True, text=True, timeout=600)
    assert trainer.returncode == 0, trainer.stderr[-4000:]
    reports = [json.loads(line) for line in trainer.stdout.splitlines() if line.startswith("{")]
    assert [r["version"] for r in reports] == [1, 2], trainer.stdout
    model_bytes = sum(math.prod(shape) * 4 for _, shape, _ in tiny_models.checkpoint_metas(model_dir))  # float32
    for r in reports:
        assert r["tokens_match"] == [True, True] and r["built_before_swap"], r
        # One copy crosses the trainer's link; the second replica's is relayed by the first.
        assert r["source_bytes"] == model_bytes and r["relayed_bytes"] == model_bytes, r
