"""`weightport demo` as a user drives it: an option a scenario would ignore is refused (exit 2, no
work directory left behind), and SIGINT or SIGTERM stops every child and removes the work directory,
which holds the session's secret, unless --keep."""
import glob
import os
import signal
import subprocess
import tempfile
import time

import pytest

from cli_procs import BIN, run_cli

DEMO_DIRS = os.path.join(tempfile.gettempdir(), "weightport-demo-*")


@pytest.mark.parametrize("args", [
    ["--scenario", "reshard", "--model-bytes", "8MiB"],
    ["--scenario", "membership", "--model-bytes", "8MiB"],
    ["--scenario", "membership", "--versions", "5"],
    ["--scenario", "membership", "--subscribers", "2"],
    ["--scenario", "membership", "--relay-fanout", "2"],
    ["--scenario", "membership", "--rotate-keys"],
    ["--scenario", "reshard", "--mode", "snapshot"],
    ["--scenario", "reshard", "--swap-mode", "in-place"],
    ["--scenario", "publish", "--relay-fanout", "2"],
])
def test_an_option_the_scenario_would_ignore_is_refused(args):
    before = set(glob.glob(DEMO_DIRS))
    r = run_cli("demo", "--preset", "tiny", *args, check=False, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{args[2]} does nothing in --scenario {args[1]}" in r.stderr, r.stderr
    assert set(glob.glob(DEMO_DIRS)) == before


def _work_dir_of(pid):
    """The demo work directory a process's command line names, or None."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return None
    prefix = DEMO_DIRS[:-1]
    for a in args:
        if a.startswith(prefix):
            return a[:len(prefix)] + a[len(prefix):].split(os.sep)[0]
    return None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_children_and_removes_the_work_directory(sig):
    p = subprocess.Popen([str(BIN), "demo", "--preset", "small", "--subscribers", "2", "--versions", "10000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Its work directory is the one its children name: other tests' demos may run meanwhile.
        deadline = time.monotonic() + 60
        work, children = None, []
        while work is None and time.monotonic() < deadline:
            children = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
            for child in children:
                work = work or _work_dir_of(child)
            time.sleep(0.05)
        assert work, "no subscriber process started, or none names a work directory"
        while not os.path.exists(os.path.join(work, "secret")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the subscribers start
        assert children, "no subscriber process started"
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 128 + sig, (p.returncode, err)
        assert f"stopped by {signal.Signals(sig).name}" in err, err
        assert not os.path.exists(work), os.listdir(work)
        for pid in children:  # every child was stopped and reaped
            assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[3] != str(p.pid)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
