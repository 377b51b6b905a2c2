"""The multi-host testbed (scripts/testbed): hosts as network namespaces on a bridge, links shaped
with tc, a link taken down and brought back, and nothing left behind. Skips where it cannot run
(not root, no iproute2, no namespaces). Every wait is bounded; the testbed is always taken down."""
import os
import shutil
import subprocess
import sys
import time

import pytest

from cli_procs import REPO

TESTBED = REPO / "scripts" / "testbed"
SERVER = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5201)); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.settimeout(20); n = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
c.sendall(b"k"); print(n)
"""
CLIENT = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], 5201), timeout=5); s.settimeout(20)
t = time.monotonic()
for _ in range(int(sys.argv[2])): s.sendall(b"x" * (1 << 20))
s.shutdown(socket.SHUT_WR); s.recv(1); print(time.monotonic() - t)
"""


def run_testbed(*args, check=True, timeout=60):
    return subprocess.run([str(TESTBED), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          check=check)


@pytest.fixture
def bed():
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces, bridges, tc)")
    if not shutil.which("ip") or not shutil.which("tc"):
        pytest.skip("the testbed needs iproute2 (ip, tc)")
    up = run_testbed("up", 2, "--rate", "50mbit", check=False)
    if up.returncode == 77 or "Operation not permitted" in up.stderr or "Permission denied" in up.stderr:
        pytest.skip("network namespaces are not available here: " + up.stderr.strip())
    assert up.returncode == 0, up.stderr
    yield
    run_testbed("down")


def test_hosts_talk_through_a_shaped_link_and_a_downed_link_cuts_them_off(bed):
    server = subprocess.Popen([str(TESTBED), "exec", "h1", sys.executable, "-c", SERVER], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        addr = run_testbed("addr", "h1").stdout.strip()
        assert addr.startswith("198.18.")
        client = None
        for _ in range(50):  # the server needs a moment to listen; bounded
            client = run_testbed("exec", "h0", sys.executable, "-c", CLIENT, addr, 4, check=False, timeout=30)
            if client.returncode == 0:
                break
            time.sleep(0.1)
        assert client.returncode == 0, client.stderr
        out, _ = server.communicate(timeout=30)
        assert out.strip() == str(4 << 20)
        # 4 MiB through 50 Mbit/s with a 1 MB burst allowance takes at least ~0.5 s; a slow machine
        # only makes it longer, so this bound cannot fail by noise.
        assert float(client.stdout.strip()) > 0.35
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)

    run_testbed("link", "h1", "down")
    cut = run_testbed("exec", "h0", sys.executable, "-c",
                  f"import socket; socket.create_connection(('{addr}', 5201), timeout=2)", check=False, timeout=30)
    assert cut.returncode != 0
    run_testbed("link", "h1", "up")
    assert "h0" in run_testbed("status").stdout


def test_up_is_idempotent_and_down_leaves_nothing(bed):
    assert run_testbed("up", 2, "--rate", "50mbit").returncode == 0
    assert len(run_testbed("status").stdout.strip().splitlines()) == 2
    run_testbed("down")
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    assert "wptb-" not in left


def test_bad_input_is_named():
    bad = run_testbed("shape", "nohost", check=False)
    if bad.returncode == 77:
        pytest.skip(bad.stderr.strip())
    assert bad.returncode != 0
    assert "nohost" in bad.stderr
