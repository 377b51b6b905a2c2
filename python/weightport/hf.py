"""Facts read from a Hugging Face model directory's ``config.json``, for launching engines on it."""

from __future__ import annotations

import json
import os

# Where configs keep the positions a model was trained for, in the order engines look for them.
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "max_seq_len")


def context_length(model_dir: str, cap: int | None = None) -> int:
    """The model's context length (its ``config.json``, or the text model's config in a multimodal
    one), at most `cap` when given. Raises ValueError naming the file when it says none."""
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read the model's config: {e}") from e
    for section in (config, config.get("text_config") or {}):
        for key in _LENGTH_KEYS:
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return min(value, cap) if cap else value
    raise ValueError(f"{path}: no context length ({', '.join(_LENGTH_KEYS)})")


# transformers >= 5 keeps a mixture of experts' weights fused in memory, one 3-D tensor per kind
# (``experts.gate_up_proj`` [experts, 2 x intermediate, hidden], ``experts.down_proj`` [experts,
# hidden, intermediate]), and writes them per expert when it saves (``experts.{e}.gate_proj.weight``
# ...), which is what checkpoints and engines' loaders know.
_FUSED_EXPERTS = {"gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",)}


def checkpoint_tensors(state) -> dict:
    """`state` (a module's named parameters or a state dict) under the names and shapes its saved
    checkpoint has: transformers' fused expert tensors split per expert, as views (nothing is
    copied: publishing them reads the fused tensors). Every other tensor as it is."""
    out = {}
    for name, t in dict(state).items():
        prefix, _, kind = name.rpartition(".")
        parts = _FUSED_EXPERTS.get(kind)
        if parts is None or not prefix.endswith("experts") or t.dim() != 3:
            out[name] = t
            continue
        for e in range(t.shape[0]):
            pieces = t[e].chunk(len(parts), dim=0)
            if any(p.shape != pieces[0].shape for p in pieces):
                raise ValueError(f"'{name}': {t.shape[1]} rows do not split into {', '.join(parts)}")
            for part, piece in zip(parts, pieces):
                out[f"{prefix}.{e}.{part}.weight"] = piece
    return out
