"""Tiny Hugging Face model directories (config, tokenizer, safetensors) for the vLLM backend's tests.

There is no model hub here, so models are made from transformers configs with random weights and a
small word-level tokenizer built with the `tokenizers` package. Usage:
    python tiny_models.py {dense,moe} DIR [--hidden H] [--layers L] [--vocab V]
"""

from __future__ import annotations

import argparse
import json
import os

WORDS = ("the a of to and in is it you that he was for on are with as his they be at one have this "
         "from or had by word but what some we can out other were all there when up use your how said "
         "an each she which do their time if will way about many then them write would like so these "
         "her long make thing see him two has look more day could go come did number sound no most "
         "people my over know water than call first who may down side been now find").split()


def save_tokenizer(path: str, vocab_size: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for w in WORDS:
        if len(vocab) >= vocab_size:
            break
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    fast.save_pretrained(path)


def make_model(kind: str, path: str, hidden: int = 128, layers: int = 2, vocab: int = 256,
               seed: int = 0, positions: int = 512) -> str:
    """Writes a random model of `kind` ("dense": Qwen2 with tied embeddings and qkv bias; "llama";
    "moe": Qwen3-MoE with 4 experts, 2 per token) into `path`; returns `path`."""
    import torch
    import transformers

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=positions, torch_dtype="float32",
                  bos_token_id=1, eos_token_id=2)
    if kind == "dense":
        config = transformers.Qwen2Config(intermediate_size=hidden * 2, tie_word_embeddings=True, **common)
        model = transformers.Qwen2ForCausalLM(config)
    elif kind == "llama":
        config = transformers.LlamaConfig(intermediate_size=hidden * 2, tie_word_embeddings=False, **common)
        model = transformers.LlamaForCausalLM(config)
    elif kind == "moe":
        config = transformers.Qwen3MoeConfig(intermediate_size=hidden * 2, moe_intermediate_size=hidden,
                                             num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
                                             head_dim=hidden // 4, **common)
        model = transformers.Qwen3MoeForCausalLM(config)
    else:
        raise ValueError(f"unknown model kind '{kind}' (dense, llama, moe)")
    # Larger weights than the default init: greedy tokens then depend on every layer.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.2)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    save_tokenizer(path, vocab)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    return path


def checkpoint_metas(path: str) -> list[list]:
    """[[name, shape, "f32"], ...] of every tensor in the model directory's safetensors files (the
    float32 models made here), as the vLLM backend's init info carries them."""
    from safetensors import safe_open

    out = []
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(path, name), "pt") as f:
                out += [[key, list(f.get_slice(key).get_shape()), "f32"] for key in f.keys()]
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["dense", "llama", "moe"])
    ap.add_argument("dir")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=256)
    a = ap.parse_args()
    make_model(a.kind, a.dir, a.hidden, a.layers, a.vocab)
    print(a.dir)
