"""The background build of a serving engine's worker: each committed version into shadow layers.

A :class:`~weightport.Subscriber` receives versions into memory weightport owns; this thread waits
for each, pins it, fills the fresh set's tensors with the worker's box copies (or the model's own
loader, for what a box cannot express), runs the engine's post-processing on the shadows and tells
the trainer the version is built. A swap then takes the built version (:meth:`VersionBuilder.take`)
and gives the set back when done (:meth:`VersionBuilder.done`); the thread builds the next version
only while no swap reads the set. An error ends the thread and is raised by the next ``take``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

import torch

from .. import errors
from ..layouts import Layout
from .placement import ModelPlacement
from .ready import ReadyNotifier
from .shadow import FreshSet, copy_runs

_JOIN_TIMEOUT_S = 30.0  # how long stop() waits for a build in progress (a build takes seconds)


class BoxLayout(Layout):
    """The subscriber layout of a worker: the box of each checkpoint tensor it needs."""

    def __init__(self, boxes: dict[str, tuple[list[int], list[int], list[int]]]):
        self.boxes = boxes

    def slice_of(self, name, shape):
        return self.boxes[name]


def box_stand_ins(placement: ModelPlacement) -> list[tuple[str, torch.Tensor]]:
    """What a worker binds: per checkpoint tensor it needs, a stand-in of its box's shape and the
    dtype of the parameter it lands in (one element, expanded: no memory)."""
    return [(name, torch.empty(1, dtype=placement.dtypes[name]).expand(*box[2]))
            for name, box in placement.boxes.items()]


@dataclass
class Built:
    """A version built into shadow layers, with the seconds of its phases."""

    version: int
    shadows: dict[str, torch.nn.Module]
    seconds: float
    copy_s: float = 0.0
    process_s: float = 0.0
    alloc_s: float = 0.0


class VersionBuilder:
    """Builds every committed version of `subscriber` into shadows of `model`'s layers.

    `post_process(shadow)`: the engine's processing after loading, per shadow layer; `context()`:
    a context manager the build runs in (the engine's current config); `on_device`: the fresh set
    lives on an accelerator (the copies are synchronized before the pin is released)."""

    def __init__(self, model: torch.nn.Module, placement: ModelPlacement, fresh: FreshSet, subscriber: Any, *,
                 post_process: Callable[[torch.nn.Module], None],
                 context: Callable[[], ContextManager] = contextlib.nullcontext, on_device: bool = False,
                 notifier: ReadyNotifier | None = None, log: logging.Logger | None = None):
        self._model, self._placement, self._fresh, self._sub = model, placement, fresh, subscriber
        self._post_process, self._context, self._on_device = post_process, context, on_device
        self._notifier = notifier
        self._log = log or logging.getLogger("weightport.serving")
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._built: Built | None = None
        self._taken: Built | None = None  # a swap reads the fresh set
        self._error: Exception | None = None
        self._threads = torch.get_num_threads()  # OpenMP's count is per thread: as many as the caller's
        self._thread = threading.Thread(target=self._run, name="weightport-build", daemon=True)

    def start(self) -> "VersionBuilder":
        self._thread.start()
        return self

    def take(self, version: int, timeout: float) -> Built:
        """Waits until `version` (or a newer one) is built and takes it for a swap; raises the error
        that stopped the builds, or ``weightport.Timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if self._error is not None:
                    raise errors.FailedPrecondition(f"weightport: version {version} cannot be applied: "
                                                    f"{self._error}") from self._error
                if self._built is not None and self._built.shadows and self._built.version >= version:
                    self._taken = self._built
                    return self._built
                left = deadline - time.monotonic()
                if left <= 0:
                    raise errors.Timeout(f"weightport: version {version} was not built within {timeout:.0f} s "
                                         f"(newest committed: {self._sub.live_version})")
                self._lock.wait(min(left, 0.5))

    def done(self, replaced: list = (), recycle: bool = True) -> None:
        """The swap of the version taken is over (or abandoned): its shadows are used up, and the
        set may be refilled; `replaced` as for :meth:`FreshSet.release`."""
        with self._lock:
            if replaced:
                self._fresh.release(replaced, recycle)
            if self._taken is not None and self._built is self._taken:
                self._built = Built(self._taken.version, {}, self._taken.seconds)
            self._taken = None
            self._lock.notify_all()

    def stop(self) -> bool:
        """Stops the thread; False when a build in progress did not end within 30 s."""
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=_JOIN_TIMEOUT_S)
        return not self._thread.is_alive()

    def _fail(self, error: Exception) -> None:
        with self._lock:
            self._error = error
            self._lock.notify_all()

    def _run(self) -> None:
        try:
            self._build_versions()
        except Exception as e:  # anything unforeseen: the next take raises it, by name
            self._log.exception("weightport: the build thread stopped")
            self._fail(e)

    def _build_versions(self) -> None:
        torch.set_num_threads(self._threads)
        with self._context(), torch.no_grad():  # the set is allocated and touched before any version
            seconds = self._fresh.prepare(dict(self._model.named_modules()))
        self._log.info("weightport: %.0f MiB to build versions into, prepared in %.2f s",
                       self._fresh.nbytes / 2**20, seconds)
        built = 0  # version numbers belong to the trainer's session
        while not self._stop.is_set():
            try:
                self._sub.wait(built + 1, timeout=0.5)
            except errors.Timeout:
                continue
            except Exception as e:  # the session ended (the trainer went away): said at take
                self._fail(e)
                return
            if not self._claim():
                return
            t0 = time.perf_counter()
            with self._sub.pinned() as pin, self._context(), torch.no_grad():
                shadows, alloc_s, copy_s, process_s = self._build(pin.tensors)
                version = pin.version
            result = Built(version, shadows, time.perf_counter() - t0, copy_s, process_s, alloc_s)
            built = version
            with self._lock:
                self._built = result
                self._lock.notify_all()
            if self._notifier is not None:
                self._notifier.built(version, {"build_s": result.seconds, "alloc_s": alloc_s, "copy_s": copy_s,
                                               "process_s": process_s})

    def _claim(self) -> bool:
        """Waits until no swap reads the fresh set (a built version not yet taken is dropped for the
        newer one). False once stopped."""
        with self._lock:
            while self._taken is not None and not self._stop.is_set():
                self._lock.wait(0.5)
            if self._stop.is_set():
                return False
            self._built = None
            return True

    def _build(self, received: dict[str, torch.Tensor]) -> tuple[dict[str, torch.nn.Module], float, float, float]:
        return build_shadows(self._model, self._placement, self._fresh, received, self._post_process,
                             self._on_device)


def build_shadows(model: torch.nn.Module, placement: ModelPlacement, fresh_set: FreshSet,
                  received: dict[str, torch.Tensor], post_process: Callable[[torch.nn.Module], None],
                  on_device: bool) -> tuple[dict[str, torch.nn.Module], float, float, float]:
    """Shadow layers of `model` holding the `received` version (the box copies, then the model's own
    loader for what no box expresses), post-processed; and the seconds allocation, the copies and
    the processing took."""
    shadows, fresh, alloc_s = fresh_set.shadows(dict(model.named_modules()))
    t0 = time.perf_counter()
    copy_runs(placement.runs, placement.boxes, received, fresh)
    for c in placement.fallback:
        args = dict(c.arguments)
        args[c.param_arg] = fresh[(c.layer, c.param)]
        args[c.tensor_arg] = received[c.tensor]
        c.loader(**args)
    if on_device:  # the copies read the pin, released after this
        torch.accelerator.synchronize()
    t1 = time.perf_counter()
    for shadow in shadows.values():
        post_process(shadow)
    return shadows, alloc_s, t1 - t0, time.perf_counter() - t1
