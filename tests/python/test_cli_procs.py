"""The test helpers themselves: a hang must fail, never pass as success."""
import threading

import pytest

from cli_procs import join_all


def test_join_all_returns_each_calls_exception_in_order():
    def boom():
        raise ValueError("boom")

    errors = join_all(lambda: None, boom, timeout=10)
    assert errors[0] is None and isinstance(errors[1], ValueError)


def test_join_all_fails_when_a_call_is_still_running():
    release = threading.Event()
    try:
        with pytest.raises(AssertionError, match=r"call\(s\) \[1\] still running"):
            join_all(lambda: None, lambda: release.wait(30), timeout=0.3)
    finally:
        release.set()
