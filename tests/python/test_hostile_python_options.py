"""A property of the Python API, like test_hostile_options.py's for the CLI: every numeric option of
Publisher, Coordinator and Subscriber, and every numeric argument of their calls, given a value no
option means (negative, NaN, infinite, huge, past its bound, the wrong type) is refused at once with
a weightport.Error subclass naming it: never a signal, a hang, a built-in exception or a value that
fails later as something else. The bounds are the CLI's (one table: weightport/core/option_bounds.h).
The vLLM engines' init infos are checked with the same helpers (tests/vllm/test_vllm_options.py).

Also: the secret file is read as the CLI reads it (one reader, one rule)."""
import math
import os
import stat

import numpy as np
import pytest

from cli_procs import join_all

weightport = pytest.importorskip("weightport")

SECRET = os.urandom(32)
HOSTILE = [-1, -1.0, math.nan, math.inf, -math.inf, 1e308, 2**64, -(2**63) - 1, 10**400, "abc", None, [1]]
# Past each option's bound (the table's), where the values above are not.
PAST_BOUND = {"chunk_bytes": [1, 4095, 2**30 + 1], "relay_fanout": [1025, 1.5], "quorum": [2**20 + 1],
              "timeout": [0, 0.1, 86401], "pin_timeout": [86401], "keep_versions": [17], "max_gbps": [1e6 + 1],
              "world_size": [0], "rank": [5]}


def refused(call, name):
    """Runs `call` on a thread (a hang fails within 30 s) and checks what it raised."""
    [error] = join_all(call, timeout=30)
    assert error is not None, f"{name}: accepted"
    assert isinstance(error, weightport.Error), f"{name}: {type(error).__name__}: {error}"
    return error


CONSTRUCTORS = {
    "Publisher": (lambda **kw: weightport.Publisher(secret=SECRET, serve=False, **kw),
                  ["chunk_bytes", "relay_fanout", "timeout", "quorum", "rank", "world_size"]),
    "Coordinator": (lambda **kw: weightport.Coordinator(secret=SECRET, **kw),
                    ["chunk_bytes", "relay_fanout", "timeout", "quorum"]),
    "Subscriber": (lambda **kw: weightport.Subscriber("127.0.0.1:1", secret=SECRET, **kw),
                   ["timeout", "pin_timeout", "keep_versions", "max_gbps", "rank", "world_size"]),
}
CASES = [(cls, option, value) for cls, (_, options) in CONSTRUCTORS.items() for option in options
         for value in HOSTILE + PAST_BOUND.get(option, [])]


@pytest.mark.parametrize("cls,option,value", CASES, ids=[f"{c}-{o}-{v!r:.20}" for c, o, v in CASES])
def test_every_option_refuses_what_it_cannot_mean(cls, option, value):
    make, _ = CONSTRUCTORS[cls]
    error = refused(lambda: make(**{option: value}), f"{cls}({option}={value!r:.30})")
    assert option in str(error) or "rank" in str(error), str(error)


@pytest.mark.parametrize("address", ["127.0.0.1:99999", "127.0.0.1:-1", ":65536", "abc", "127.0.0.1:x", 7])
def test_a_coordinator_address_outside_the_ports_is_refused(address):
    error = refused(lambda: weightport.Coordinator(address, secret=SECRET), f"Coordinator({address!r})")
    assert "port" in str(error) or "string" in str(error), str(error)
    refused(lambda: weightport.Subscriber(address, secret=SECRET), f"Subscriber({address!r})")


@pytest.fixture(scope="module")
def pair():
    pub = weightport.Publisher(secret=SECRET, transport="tcp", timeout=30)
    sub = weightport.Subscriber(pub.coordinator, secret=SECRET, transport="tcp", timeout=30)
    w = np.arange(64, dtype=np.float32)
    assert join_all(lambda: pub.register({"w": w}), lambda: sub.bind({"w": np.zeros(64, np.float32)})) == [None, None]
    pub.publish(1, wait=True)
    sub.wait(1)
    yield pub, sub
    sub.close()
    pub.close()


CALLS = {
    "publish(version)": lambda pub, sub, v: pub.publish(v),
    "wait(version)": lambda pub, sub, v: pub.wait(v, timeout=1),
    "wait(timeout)": lambda pub, sub, v: pub.wait(1, timeout=v),
    "rollback(version)": lambda pub, sub, v: pub.rollback(v, timeout=1),
    "Subscriber.wait(version)": lambda pub, sub, v: sub.wait(v, timeout=1),
    "Subscriber.wait(timeout)": lambda pub, sub, v: sub.wait(1, timeout=v),
}
# timeout=None means the object's own timeout.
CALL_CASES = [(call, value) for call in CALLS for value in HOSTILE + ([0] if "version" in call else [])
              if not (value is None and "timeout" in call)]


@pytest.mark.parametrize("call,value", CALL_CASES, ids=[f"{c}-{v!r:.20}" for c, v in CALL_CASES])
def test_every_call_refuses_what_it_cannot_mean(pair, call, value):
    pub, sub = pair
    refused(lambda: CALLS[call](pub, sub, value), f"{call} with {value!r:.30}")


def test_the_secret_file_is_read_as_the_cli_reads_it(tmp_path):
    echoed = tmp_path / "echoed"
    echoed.write_bytes(b"0123456789abcdef0123\n")  # as `echo` writes it: the newline is not the secret
    echoed.chmod(0o600)
    assert weightport._core.load_secret_file(str(echoed)) == b"0123456789abcdef0123"
    pub = weightport.Publisher(secret=str(echoed), timeout=5)
    sub = weightport.Subscriber(pub.coordinator, secret=b"0123456789abcdef0123", transport="tcp", timeout=5)
    assert join_all(lambda: pub.register({"w": np.ones(4, np.float32)}),
                    lambda: sub.bind({"w": np.zeros(4, np.float32)})) == [None, None]
    sub.close()
    pub.close()

    readable = tmp_path / "readable"
    readable.write_bytes(os.urandom(32))
    readable.chmod(0o644)
    with pytest.raises(weightport.PermissionDenied, match="chmod 600"):
        weightport.Publisher(secret=str(readable))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    error = refused(lambda: weightport.Subscriber("127.0.0.1:1", secret=str(fifo)), "a FIFO as the secret")
    assert "not a regular file" in str(error)
