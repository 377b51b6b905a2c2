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


def test_fused_experts_are_published_per_expert_as_views_of_the_fused_tensors():
    torch = pytest.importorskip("torch")
    from weightport.hf import checkpoint_tensors

    gate_up = torch.arange(2 * 6 * 3, dtype=torch.float32).view(2, 6, 3)  # 2 experts, intermediate 3, hidden 3
    down = torch.arange(2 * 3 * 3, dtype=torch.float32).view(2, 3, 3)
    norm = torch.ones(3)
    out = checkpoint_tensors({"m.layers.0.mlp.experts.gate_up_proj": gate_up,
                              "m.layers.0.mlp.experts.down_proj": down, "m.norm.weight": norm})
    assert sorted(out) == sorted([f"m.layers.0.mlp.experts.{e}.{p}.weight" for e in range(2)
                                  for p in ("gate_proj", "up_proj", "down_proj")] + ["m.norm.weight"])
    assert torch.equal(out["m.layers.0.mlp.experts.1.gate_proj.weight"], gate_up[1, :3])
    assert torch.equal(out["m.layers.0.mlp.experts.1.up_proj.weight"], gate_up[1, 3:])
    assert torch.equal(out["m.layers.0.mlp.experts.0.down_proj.weight"], down[0])
    assert out["m.layers.0.mlp.experts.1.up_proj.weight"].data_ptr() == gate_up[1, 3:].data_ptr()  # a view
    assert out["m.norm.weight"] is norm


def test_an_odd_fused_gate_up_is_refused_naming_it():
    torch = pytest.importorskip("torch")
    from weightport.hf import checkpoint_tensors

    with pytest.raises(ValueError, match="experts.gate_up_proj"):
        checkpoint_tensors({"x.experts.gate_up_proj": torch.zeros(2, 5, 3)})
