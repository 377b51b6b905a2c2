"""What the RL-loop examples share (vllm_rl_loop.py, sglang_rl_loop.py): checking --model, the
trainer's synthetic training step, its own greedy tokens, a free port."""

from __future__ import annotations

import argparse
import os
import socket

MAX_TOKENS = 8  # greedy tokens compared per prompt


def check_model_dir(ap: argparse.ArgumentParser, model: str) -> None:
    """Refuses (through `ap`) a --model that is no Hugging Face model directory or whose config
    gives no context length."""
    if not os.path.isfile(os.path.join(model, "config.json")):
        ap.error(f"--model {model}: no config.json there (a Hugging Face model directory is needed)")
    from weightport.hf import context_length

    try:
        context_length(model)
    except ValueError as e:
        ap.error(f"--model: {e}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_step(model, opt, vocab: int, step: int) -> float:
    """One step of a synthetic task: continue a fixed random sequence (the same on every rank)."""
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    ids = torch.randint(3, vocab, (4, 16), generator=g)
    loss = model(input_ids=ids, labels=ids).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def greedy_tokens(model, prompt_ids: list[list[int]], max_tokens: int = MAX_TOKENS) -> list[list[int]]:
    """The trainer's own greedy continuation (no KV cache: every rank runs the same forwards)."""
    import torch

    out = []
    model.eval()
    with torch.no_grad():
        for ids in prompt_ids:
            seq = torch.tensor([ids])
            new = []
            for _ in range(max_tokens):
                nxt = int(model(input_ids=seq).logits[0, -1].argmax())
                new.append(nxt)
                seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
            out.append(new)
    model.train()
    return out
