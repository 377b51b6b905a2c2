"""How the vLLM backend reads a dry run's tagged stand-ins into box copies (no vLLM needed): the
loaders are simulated here the way vLLM's fuse, slice, stack and pad, on the same tags."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from weightport.vllm.placement import TAG, _decompose  # noqa: E402


def tags(tid: int, shape, dim: int) -> torch.Tensor:
    """What the dry run feeds the loader for tensor `tid` in pass `dim`."""
    base = (tid + 1) * TAG
    if dim >= len(shape):
        return torch.full(shape, base, dtype=torch.float64)
    axis = [1] * len(shape)
    axis[dim] = shape[dim]
    return (base + torch.arange(shape[dim], dtype=torch.float64)).view(axis).expand(shape).clone()


def run_passes(param_shape, load, shapes):
    """The stand-in after each pass, `load(stand_in, tagged_tensors)` playing the loader."""
    out = []
    for dim in range(max(len(s) for s in shapes)):
        p = torch.full(param_shape, float("nan"), dtype=torch.float64)
        load(p, [tags(i, s, dim) for i, s in enumerate(shapes)])
        out.append(p)
    return out


def test_fused_qkv_rows_become_three_box_copies():
    shapes = [(8, 4), (2, 4), (2, 4)]

    def load(p, t):
        p[0:8], p[8:10], p[10:12] = t[0], t[1], t[2]

    runs, failed, zero = _decompose(run_passes((12, 4), load, shapes), [2, 2, 2])
    assert not failed and not zero
    assert sorted(runs) == [(0, (0, 0), (8, 4), (0, 0), (8, 4)), (1, (8, 0), (2, 4), (0, 0), (2, 4)),
                            (2, (10, 0), (2, 4), (0, 0), (2, 4))]


def test_tensor_parallel_slice_of_a_fused_gate_up_tensor_splits_in_two():
    # One checkpoint tensor [gate; up] (8 rows each half 4), TP rank 1 of 2 takes rows 2:4 of each half.
    shapes = [(8, 3)]

    def load(p, t):
        p[0:2], p[2:4] = t[0][2:4], t[0][6:8]

    runs, failed, _ = _decompose(run_passes((4, 3), load, shapes), [2])
    assert not failed
    assert sorted(runs) == [(0, (0, 0), (2, 3), (2, 0), (2, 3)), (0, (2, 0), (2, 3), (6, 0), (2, 3))]


def test_stacked_experts_and_row_parallel_columns():
    shapes = [(4, 6), (4, 6)]  # two experts' down projections, TP rank 0 of 2 takes columns 0:3

    def load(p, t):
        p[0], p[1] = t[0][:, 0:3], t[1][:, 0:3]

    runs, failed, _ = _decompose(run_passes((2, 4, 3), load, shapes), [2, 2])
    assert not failed
    assert sorted(runs) == [(0, (0, 0, 0), (1, 4, 3), (0, 0), (4, 3)), (1, (1, 0, 0), (1, 4, 3), (0, 0), (4, 3))]


def test_padded_vocabulary_marks_zeros_and_copies_the_rows():
    shapes = [(5, 2)]

    def load(p, t):
        p[:5] = t[0]
        p[5:] = 0

    runs, failed, zero = _decompose(run_passes((8, 2), load, shapes), [2])
    assert zero and not failed
    assert runs == [(0, (0, 0), (5, 2), (0, 0), (5, 2))]


def test_a_transposing_loader_is_not_a_box_copy():
    shapes = [(3, 5)]

    def load(p, t):
        p[:] = t[0].t()

    runs, failed, _ = _decompose(run_passes((5, 3), load, shapes), [2])
    assert runs == [] and failed == {0}


def test_interleaved_rows_of_two_tensors_are_not_box_copies():
    shapes = [(2, 3), (2, 3)]

    def load(p, t):
        p[0::2], p[1::2] = t[0], t[1]

    runs, failed, _ = _decompose(run_passes((4, 3), load, shapes), [2, 2])
    assert failed == {0, 1}


def test_a_parameter_nothing_wrote_has_no_runs():
    runs, failed, zero = _decompose([torch.full((3,), float("nan"), dtype=torch.float64)], [1])
    assert runs == [] and failed == set() and not zero


def _call(untouched, shape=(3, 5)):
    from weightport.vllm.placement import _Call

    return _Call("layer", "weight", loader=print, param_arg="param", tensor_arg="loaded_weight", tid=0,
                 shape=shape, arguments={"shard_id": "q"}, untouched=untouched)


def test_a_loader_given_the_whole_tensor_is_replayed():
    from weightport.vllm.placement import TensorMeta, _fallback_calls

    metas = [TensorMeta("t", (3, 5), "f32")]
    [call] = _fallback_calls([_call(True)], {("layer", "weight", "t")}, metas)
    assert (call.tensor, call.param_arg, call.tensor_arg, call.arguments) == ("t", "param", "loaded_weight",
                                                                              {"shard_id": "q"})
    assert _fallback_calls([_call(True)], set(), metas) == []  # a run expresses it: no replay


def test_a_loader_given_a_transformed_tensor_is_refused_not_replayed():
    from weightport.vllm.placement import PlacementError, TensorMeta, _fallback_calls

    metas = [TensorMeta("t", (5, 5), "f32")]
    # A square tensor transposed by the model before its loader: same shape, other elements.
    with pytest.raises(PlacementError, match="'t' into parameter 'layer.weight'.*transforms it"):
        _fallback_calls([_call(False, (5, 5))], {("layer", "weight", "t")}, metas)
