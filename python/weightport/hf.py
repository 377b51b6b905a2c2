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
