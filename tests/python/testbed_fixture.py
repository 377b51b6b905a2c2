"""The `testbed` fixture, shared by the test directories that bring testbed hosts up (tests/python,
tests/vllm): their conftest.py files import it."""

import os
import shutil

import pytest

from cli_procs import run_testbed


@pytest.fixture
def testbed():
    """A function that brings testbed hosts up (`testbed(n, "--rate", "1gbit")`), skipping with the
    reason where this machine cannot (not root, no iproute2, namespaces refused); every host is
    taken down when the test ends."""
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces, bridges, tc)")
    if not shutil.which("ip") or not shutil.which("tc"):
        pytest.skip("the testbed needs iproute2 (ip, tc)")

    def up(n, *shape):
        r = run_testbed("up", n, *shape, check=False)
        if r.returncode == 77 or "Operation not permitted" in r.stderr or "Permission denied" in r.stderr:
            pytest.skip("network namespaces are not available here: " + r.stderr.strip())
        assert r.returncode == 0, r.stderr

    yield up
    run_testbed("down", check=False)
