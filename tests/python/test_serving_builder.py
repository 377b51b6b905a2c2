"""The serving backends' background build without an engine: a fake subscriber commits versions,
the builder fills shadows from them, a swap takes and gives back the set."""

from __future__ import annotations

import contextlib
import threading
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
from weightport import errors  # noqa: E402
from weightport.serving.builder import BoxLayout, VersionBuilder, box_stand_ins  # noqa: E402
from weightport.serving.placement import ModelPlacement, ParamTemplate, Run  # noqa: E402
from weightport.serving.shadow import FreshSet  # noqa: E402


class FakeSubscriber:
    """Versions committed by the test: `commit(v, tensor)`; `fail(e)` ends the session."""

    def __init__(self):
        self._cond = threading.Condition()
        self.versions: dict[int, torch.Tensor] = {}
        self.error: Exception | None = None
        self.pins = 0

    @property
    def live_version(self) -> int:
        return max(self.versions, default=0)

    def commit(self, version: int, values: torch.Tensor) -> None:
        with self._cond:
            self.versions[version] = values
            self._cond.notify_all()

    def fail(self, error: Exception) -> None:
        with self._cond:
            self.error = error
            self._cond.notify_all()

    def wait(self, version: int, timeout: float) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.error or self.live_version >= version, timeout):
                raise errors.Timeout(f"version {version} not committed")
            if self.error:
                raise self.error

    @contextlib.contextmanager
    def pinned(self):
        with self._cond:
            v = self.live_version
            self.pins += 1
        yield SimpleNamespace(version=v, tensors={"w": self.versions[v]})


def make(sub, post_process=lambda layer: None):
    model = torch.nn.Sequential()
    model.add_module("lin", torch.nn.Linear(3, 2, bias=False))
    live = model.lin.weight
    template = ParamTemplate("lin", "weight", live, (2, 3), torch.float32, group=id(live))
    placement = ModelPlacement(boxes={"w": ([2, 3], [0, 0], [2, 3])}, dtypes={"w": torch.float32},
                               runs=[Run("lin", "weight", (0, 0), (2, 3), "w", (0, 0), (2, 3))], fallback=[],
                               templates={("lin", "weight"): template})

    def fresh(tpl, layer):
        return torch.nn.Parameter(torch.empty(tpl.shape), requires_grad=False)

    fresh_set = FreshSet(placement.templates, make=fresh, rebind=lambda t, tpl, layer: None)
    return model, VersionBuilder(model, placement, fresh_set, sub, post_process=post_process).start()


def test_each_committed_version_is_built_and_taken_for_a_swap():
    sub = FakeSubscriber()
    processed = []
    _, builder = make(sub, post_process=lambda layer: processed.append(layer))
    try:
        sub.commit(1, torch.full((2, 3), 1.0))
        built = builder.take(1, timeout=10)
        assert built.version == 1 and set(built.shadows) == {"lin"}
        assert torch.equal(built.shadows["lin"].weight, torch.full((2, 3), 1.0))
        assert processed == [built.shadows["lin"]]  # the engine's processing ran on the shadow

        # While the swap holds the set, a newer version is not built into it.
        sub.commit(2, torch.full((2, 3), 2.0))
        time.sleep(0.3)
        assert sub.pins == 1
        builder.done()
        built = builder.take(2, timeout=10)
        assert torch.equal(built.shadows["lin"].weight, torch.full((2, 3), 2.0))
        builder.done()
    finally:
        assert builder.stop()


def test_a_version_not_committed_in_time_times_out_naming_it():
    sub = FakeSubscriber()
    _, builder = make(sub)
    try:
        with pytest.raises(errors.Timeout, match="version 3 was not built within"):
            builder.take(3, timeout=0.3)
    finally:
        assert builder.stop()


def test_a_session_that_ended_is_raised_by_the_next_take_naming_the_version():
    sub = FakeSubscriber()
    _, builder = make(sub)
    try:
        sub.fail(errors.Unavailable("the trainer went away"))
        with pytest.raises(errors.FailedPrecondition, match="version 1 cannot be applied: the trainer went away"):
            builder.take(1, timeout=10)
    finally:
        assert builder.stop()


def test_a_failing_build_is_raised_by_the_next_take():
    sub = FakeSubscriber()

    def broken(layer):
        raise RuntimeError("repacking failed")

    _, builder = make(sub, post_process=broken)
    try:
        sub.commit(1, torch.zeros(2, 3))
        with pytest.raises(errors.FailedPrecondition, match="repacking failed"):
            builder.take(1, timeout=10)
    finally:
        assert builder.stop()


def test_what_a_worker_binds_is_its_boxes_in_its_parameters_dtypes_without_memory():
    placement = ModelPlacement(boxes={"w": ([8, 4], [2, 0], [3, 4])}, dtypes={"w": torch.bfloat16}, runs=[],
                               fallback=[], templates={})
    (name, stand_in), = box_stand_ins(placement)
    assert name == "w" and stand_in.shape == (3, 4) and stand_in.dtype == torch.bfloat16
    assert stand_in.untyped_storage().nbytes() == 2  # one element, expanded
    assert BoxLayout(placement.boxes).slice_of("w", (8, 4)) == ([8, 4], [2, 0], [3, 4])
