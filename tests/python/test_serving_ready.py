"""The serving backends' "version built" channel: workers tell the trainer, forged lines are dropped."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from weightport.serving.ready import ReadyListener, ReadyNotifier, _body, _mac

SECRET = b"s" * 32


@pytest.fixture
def two_workers():
    """A trainer's listener and the notifiers of two workers."""
    listener = ReadyListener("127.0.0.1", SECRET)
    workers = [ReadyNotifier(listener.address, SECRET, r, 2) for r in (0, 1)]
    yield listener, workers
    for n in workers:
        n.close()
    listener.close()


def test_trainer_waits_for_every_worker_and_drops_forged_lines(two_workers):
    listener, (a, b) = two_workers
    a.built(3)
    assert not listener.wait(3, 0.3), "one of two workers is not enough"
    host, port = listener.address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"1 2 3 0,0,0,0 " + b"0" * 64 + b"\n")  # a forged line: wrong MAC
    assert not listener.wait(3, 0.3), "a line without the secret's MAC must not count"
    forger = ReadyNotifier(listener.address, b"x" * 32, 1, 2)
    forger.built(3)
    assert not listener.wait(3, 0.3)
    b.built(4)
    assert listener.wait(3, 5) and not listener.wait(5, 0.2)
    forger.close()


def test_a_worker_without_a_trainer_does_not_raise():
    port = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{port.getsockname()[1]}"
    port.close()  # nothing listens there now
    messages = []
    ReadyNotifier(address, b"s", 0, 1, log=lambda *a: messages.append(a)).built(1)
    assert messages and "could not tell the trainer" in messages[0][0]


def test_the_trainer_hears_the_slowest_workers_build_phases_and_no_altered_ones(two_workers):
    listener, (a, b) = two_workers
    a.built(2, {"build_s": 0.5, "alloc_s": 0.0, "copy_s": 0.125, "process_s": 0.25})
    b.built(2, {"build_s": 0.375, "alloc_s": 0.0625, "copy_s": 0.25, "process_s": 0.0625})
    assert listener.wait(2, 5)
    assert listener.phases(2) == {"build_s": 0.5, "alloc_s": 0.0625, "copy_s": 0.25, "process_s": 0.25}
    assert listener.phases(1) == {}, "no worker's newest build is version 1"
    host, port = listener.address.rsplit(":", 1)
    body = _body(1, 2, 3, {"build_s": 1.0})
    altered = body.replace("1000000,", "9000000,")
    with socket.create_connection((host, int(port))) as s:  # a MAC made for other phases
        s.sendall(f"{altered} {_mac(SECRET, body)}\n".encode())
    assert not listener.wait(3, 0.3) and listener.phases(3) == {}


def test_commands_are_answered_done_or_refused_with_the_reason():
    secret = b"k" * 32
    listener = ReadyListener("127.0.0.1", secret)
    try:
        ok = ReadyNotifier(listener.address, secret, 0, 2)
        refused = ReadyNotifier(listener.address, secret, 1, 2)
        ok.answer("swap", 3)
        refused.answer("swap", 3, "version 3 was not built:\ntimed out in down_proj " + "x" * 300)
        got = listener.answers("swap", 3, timeout=5)
        assert set(got) == {0, 1}
        assert got[0] == ""
        assert got[1].startswith("version 3 was not built:\ntimed out in down_proj x") and len(got[1]) < 700
        assert listener.answers("swap", 4, timeout=0.2) == {}  # nobody answered that one
        assert not listener.wait(3, timeout=0.1)  # answers are not "built" notices
        ok.close()
        refused.close()
    finally:
        listener.close()


def test_an_answer_needs_the_session_secret():
    listener = ReadyListener("127.0.0.1", b"k" * 32)
    try:
        forged = ReadyNotifier(listener.address, b"z" * 32, 0, 1)
        forged.answer("join", 0)
        assert listener.answers("join", 0, timeout=0.5, world=1) == {}
        forged.close()
    finally:
        listener.close()


def test_an_answer_on_a_new_connection_is_waited_for_after_the_old_one_closed():
    secret = b"k" * 32
    listener = ReadyListener("127.0.0.1", secret)
    try:
        first = ReadyNotifier(listener.address, secret, 0, 1)
        first.answer("check", 0)
        assert listener.answers("check", 0, timeout=5) == {0: ""}
        first.close()  # the worker's first connection closes before it answers the next command
        time.sleep(0.3)

        def later():
            time.sleep(0.5)
            second = ReadyNotifier(listener.address, secret, 0, 1)
            second.answer("join", 0)
            second.close()

        threading.Thread(target=later).start()
        assert listener.answers("join", 0, timeout=10) == {0: ""}  # not {} at once
    finally:
        listener.close()
