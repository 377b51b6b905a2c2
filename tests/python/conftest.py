import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

import xdist_groups
from cli_procs import BIN, Procs
from testbed_fixture import testbed  # noqa: F401  (a fixture: pytest finds it here)

# The weightport package as the build lays it out (<build>/python/weightport), unless one is
# installed (pip install ./python: `make test-package` tests that one).
_BUILT_PACKAGE = BIN.parent / "python"
if (_BUILT_PACKAGE / "weightport").is_dir() and importlib.util.find_spec("weightport") is None:
    sys.path.insert(0, str(_BUILT_PACKAGE))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_BUILT_PACKAGE), os.environ.get("PYTHONPATH")]))


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: reads state of the whole machine (its shared memory), so "
                            "runs while no other test does (make test-python runs these after the rest)")


_TESTBED_TESTS = xdist_groups.tests_taking(Path(__file__).parent, "testbed")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without it
def pytest_xdist_make_scheduler(config, log):
    # Under pytest-xdist (make test-python: -n 2), the testbed's tests share its namespaces and
    # bridge: one worker runs them all, one after another. The demo's tests watch the demo work
    # directories appear and go: one worker runs those too.
    def group_of(file, test):
        if file.startswith("test_testbed") or (file, test) in _TESTBED_TESTS:
            return "testbed"
        return "demo" if file == "test_demo_cli.py" else None

    return xdist_groups.group_scheduler(config, log, group_of)


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.stop_all()


@pytest.fixture
def netem_built():
    """Delay and loss need weightport-netem, built with the project when libnetfilter_queue is present."""
    from cli_procs import BIN
    path = BIN.parent / "weightport-netem"
    if not path.exists():
        pytest.skip(f"{path} was not built (libnetfilter_queue missing: run scripts/setup)")
    if not shutil.which("iptables"):
        pytest.skip("delay and loss need iptables (run scripts/setup)")
    return path
