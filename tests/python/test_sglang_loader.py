"""SGLang's custom weight loader without SGLang: it never raises (an exception there would end
SGLang's scheduler) and answers each command on the notice channel."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from weightport.serving.ready import ReadyListener  # noqa: E402
from weightport.sglang import worker  # noqa: E402

SECRET = b"s" * 32


def commands(*cmds):
    return [(worker.command_name(c), torch.empty(0, dtype=torch.uint8)) for c in cmds]


def test_the_loader_never_raises_even_where_sglang_is_not_running(monkeypatch):
    def no_sglang():
        raise ImportError("No module named 'sglang'")

    monkeypatch.setattr(worker, "_tp_rank", no_sglang)
    model = torch.nn.Linear(2, 2)
    worker.load(model, commands({"op": "swap", "version": 1}))  # logged, not raised
    worker.load(model, [("model.weight", torch.zeros(2, 2)), ("weightport {not json", torch.zeros(0))])


def test_each_command_is_answered_done_or_refused_with_why(monkeypatch):
    monkeypatch.setattr(worker, "_tp_rank", lambda: (0, 1))
    listener = ReadyListener("127.0.0.1", SECRET)
    model = torch.nn.Linear(2, 2)
    notify = {"notify": listener.address, "secret_hex": SECRET.hex()}
    try:
        worker.load(model, commands({"op": "swap", "version": 4, **notify}))
        assert "no session on this worker" in listener.answers("swap", 4, timeout=10)[0]
        worker.load(model, commands({"op": "rewind", "version": 4}))
        assert "unknown command 'rewind'" in listener.answers("rewind", 4, timeout=10)[0]
        worker.load(model, commands({"op": "leave"}))
        assert listener.answers("leave", 0, timeout=10) == {0: ""}
    finally:
        worker._WORKERS.pop(id(model), None)
        listener.close()
