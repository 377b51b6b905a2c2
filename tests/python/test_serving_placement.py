"""How a serving backend reads a dry run's tagged stand-ins into box copies (no engine needed): the
loaders are simulated here the way vLLM's fuse, slice, stack and pad, on the same tags, one
checkpoint tensor at a time as the dry run feeds them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from weightport.serving.dry_run import DryRunError, _lazy_zeros, read, tagged  # noqa: E402
from weightport.serving.placement import TensorMeta, _decompose  # noqa: E402


def tags(shape, dim: int) -> torch.Tensor:
    """What the dry run feeds the loader for a tensor of `shape` in pass `dim`."""
    ((_, t),) = list(tagged(TensorMeta("t", tuple(shape), "f32"), 0, dim, {}))
    return t


def decompose(param_shape, load, shapes):
    """Per tensor i: _decompose of the parameter's reading after tensor i's passes, where
    `load(stand_in, i, tagged)` plays the loader writing tensor i."""
    out = []
    for i, shape in enumerate(shapes):
        reading = None
        for dim in range(max(len(shape), 1)):
            p = torch.zeros(param_shape, dtype=torch.float32)
            load(p, i, tags(shape, dim))
            reading = read(p, reading)
        out.append(_decompose(reading, len(shape)))
    return out


def test_fused_qkv_rows_become_three_box_copies():
    rows = {0: slice(0, 8), 1: slice(8, 10), 2: slice(10, 12)}

    def load(p, i, t):
        p[rows[i]] = t

    got = decompose((12, 4), load, [(8, 4), (2, 4), (2, 4)])
    assert got == [([((0, 0), (8, 4), (0, 0), (8, 4))], False, 32), ([((8, 0), (2, 4), (0, 0), (2, 4))], False, 8),
                   ([((10, 0), (2, 4), (0, 0), (2, 4))], False, 8)]


def test_tensor_parallel_slice_of_a_fused_gate_up_tensor_splits_in_two():
    # One checkpoint tensor [gate; up] (8 rows each half 4), TP rank 1 of 2 takes rows 2:4 of each half.
    def load(p, i, t):
        p[0:2], p[2:4] = t[2:4], t[6:8]

    [(runs, failed, _)] = decompose((4, 3), load, [(8, 3)])
    assert not failed
    assert sorted(runs) == [((0, 0), (2, 3), (2, 0), (2, 3)), ((2, 0), (2, 3), (6, 0), (2, 3))]


def test_stacked_experts_and_row_parallel_columns():
    def load(p, i, t):  # two experts' down projections, TP rank 0 of 2 takes columns 0:3
        p[i] = t[:, 0:3]

    got = decompose((2, 4, 3), load, [(4, 6), (4, 6)])
    assert [g[0] for g in got] == [[((0, 0, 0), (1, 4, 3), (0, 0), (4, 3))], [((1, 0, 0), (1, 4, 3), (0, 0), (4, 3))]]


def test_padded_vocabulary_copies_the_rows_and_counts_them():
    def load(p, i, t):
        p[:5] = t
        p[5:] = 0

    [(runs, failed, written)] = decompose((8, 2), load, [(5, 2)])
    assert written == 10 and not failed  # of 16: the fresh copy starts from zeros
    assert runs == [((0, 0), (5, 2), (0, 0), (5, 2))]


def test_a_transposing_loader_is_not_a_box_copy():
    def load(p, i, t):
        p[:] = t.t()

    assert decompose((5, 3), load, [(3, 5)]) == [([], True, 15)]


def test_interleaved_rows_of_two_tensors_are_not_box_copies():
    def load(p, i, t):
        p[i::2] = t

    assert [failed for _, failed, _ in decompose((4, 3), load, [(2, 3), (2, 3)])] == [True, True]


def test_a_parameter_nothing_wrote_has_no_runs():
    assert _decompose(read(torch.zeros(3), None), 1) == ([], False, 0)


def test_a_loader_that_computes_goes_through_the_loader():
    # Fractions, past the largest tag, negative, NaN: the reading says so, and the tensor is left to
    # the parameter's own loader (a fallback) instead of a box copy that would be wrong.
    for compute in (lambda t: t * 0.5, lambda t: t * 2**23, lambda t: -t, lambda t: t * float("nan")):
        [(runs, failed, _)] = decompose((4,), lambda p, i, t: p.copy_(compute(t)), [(4,)])
        assert runs == [] and failed


def test_a_dimension_too_long_to_tag_is_refused_naming_the_tensor():
    with pytest.raises(DryRunError, match="'huge'.*longer than"):
        list(tagged(TensorMeta("huge", (1 << 24, 1), "f32"), 0, 0, {}))


def test_a_stand_in_takes_memory_only_once_written_and_clears_to_zeros():
    import mmap

    t, m = _lazy_zeros((1024, 1024))
    assert not bool(t.any())
    t[3:5] = 7.0
    m.madvise(mmap.MADV_DONTNEED)  # what Recorder.clear does: the pages go back, reading zeros
    assert not bool(t.any())
    assert _lazy_zeros((0, 4))[1] is None


def test_reading_a_mapped_stand_in_gives_its_pages_back_as_it_goes():
    t, m = _lazy_zeros((3000, 700))  # 8.4 MB: several read chunks, a page boundary inside rows
    t[:] = tags((3000, 700), 0)
    reading = read(t, None, m)
    assert not bool(t.any())  # every page went back: zeros again
    assert torch.equal(reading.idx[0][:, 5], torch.arange(3000, dtype=torch.int32))


def _call(untouched, shape=(3, 5)):
    from weightport.serving.placement import _Call

    return _Call("layer", "weight", loader=print, param_arg="param", tensor_arg="loaded_weight", tid=0,
                 shape=shape, arguments={"shard_id": "q"}, untouched=untouched)


def test_a_loader_given_the_whole_tensor_is_replayed():
    from weightport.serving.placement import TensorMeta, _fallback_calls

    metas = [TensorMeta("t", (3, 5), "f32")]
    [call] = _fallback_calls([_call(True)], {("layer", "weight", "t")}, metas)
    assert (call.tensor, call.param_arg, call.tensor_arg, call.arguments) == ("t", "param", "loaded_weight",
                                                                              {"shard_id": "q"})
    assert _fallback_calls([_call(True)], set(), metas) == []  # a run expresses it: no replay


def test_a_loader_given_a_transformed_tensor_is_refused_not_replayed():
    from weightport.serving.placement import PlacementError, TensorMeta, _fallback_calls

    metas = [TensorMeta("t", (5, 5), "f32")]
    # A square tensor transposed by the model before its loader: same shape, other elements.
    with pytest.raises(PlacementError, match="'t' into parameter 'layer.weight'.*transforms it"):
        _fallback_calls([_call(False, (5, 5))], {("layer", "weight", "t")}, metas)
