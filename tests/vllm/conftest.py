import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
import xdist_groups  # noqa: E402  (tests/python's)
from testbed_fixture import testbed  # noqa: E402,F401  (a fixture: pytest finds it here)

_ENGINE_TESTS = xdist_groups.tests_taking(Path(__file__).parent, "llm")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without it
def pytest_xdist_make_scheduler(config, log):
    # Under pytest-xdist (make test-vllm: -n 2), the tests that share the module's in-process
    # engine (fixture `llm`, about 45 s to start) run on one worker, so it starts once; the fleet
    # tests (two `vllm serve` each, one on testbed hosts) run one after another on another.
    def group_of(file, test):
        if (file, test) in _ENGINE_TESTS:
            return "in-process-engine"
        return "fleet" if file.startswith("test_vllm_fleet") else None

    return xdist_groups.group_scheduler(config, log, group_of)
