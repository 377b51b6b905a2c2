"""weightport.hf: a model's context length from its config.json."""
import json

import pytest

from weightport.hf import context_length


def write(tmp_path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_context_length_reads_the_first_key_engines_use_and_caps_it(tmp_path):
    d = write(tmp_path, {"max_position_embeddings": 128, "n_positions": 4096})
    assert context_length(d) == 128
    assert context_length(d, cap=256) == 128  # a model shorter than the cap keeps its own
    assert context_length(write(tmp_path, {"n_positions": 4096}), cap=256) == 256


def test_a_multimodal_config_gives_its_text_model_length(tmp_path):
    assert context_length(write(tmp_path, {"text_config": {"max_position_embeddings": 2048}})) == 2048


@pytest.mark.parametrize("config", [{}, {"max_position_embeddings": 0}, {"max_position_embeddings": True},
                                    {"max_position_embeddings": "512"}])
def test_a_config_without_a_length_is_refused_naming_the_file(tmp_path, config):
    with pytest.raises(ValueError, match="config.json: no context length"):
        context_length(write(tmp_path, config))


def test_a_missing_or_broken_config_is_named(tmp_path):
    with pytest.raises(ValueError, match="config.json: cannot read"):
        context_length(str(tmp_path))
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ValueError, match="config.json: cannot read"):
        context_length(str(tmp_path))
