"""Fixtures of the verl backend's tests (run with .deps/rl/bin/python: scripts/setup --rl)."""

import os
import pathlib
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "verl_sync.py"


def write_model(path: pathlib.Path, rows: int = 256, layers: int = 3, seed: int = 0) -> pathlib.Path:
    """A small model with f32, bf16 and int64 tensors (verl models carry integer buffers too)."""
    g = torch.Generator().manual_seed(seed)
    tensors = {f"model.layers.{i}.mlp.weight": torch.randn(rows, 512, generator=g) for i in range(layers)}
    tensors["model.embed_tokens.weight"] = torch.randn(rows, 256, generator=g).to(torch.bfloat16)
    tensors["model.norm.weight"] = torch.ones(256)
    tensors["model.step"] = torch.tensor(7, dtype=torch.int64)
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"))
    return path


@pytest.fixture
def model_dir(tmp_path):
    return write_model(tmp_path / "model")


def run_example(*args, timeout: float = 600) -> subprocess.CompletedProcess:
    """examples/verl_sync.py with this interpreter; its Ray workers see the same environment."""
    return subprocess.run([sys.executable, str(EXAMPLE), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "RAY_DEDUP_LOGS": "0"})
