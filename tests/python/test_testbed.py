"""The multi-host testbed (scripts/testbed): hosts as network namespaces on a bridge, links shaped
with tc, delay and loss on what a host receives, a link taken down and brought back, and nothing
left behind. Skips where it cannot run
(not root, no iproute2, no namespaces). Every wait is bounded; the testbed is always taken down."""
import subprocess
import sys
import time

import pytest

from cli_procs import TESTBED, run_testbed
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
# Times a TCP connect to a closed port: the SYN must reach the host (delayed) before the refusal.
REFUSED_AFTER = """
import socket, sys, time
best = 1e9
for _ in range(5):
    t = time.monotonic()
    try:
        socket.create_connection((sys.argv[1], 5299), timeout=5).close()
    except ConnectionRefusedError:
        best = min(best, time.monotonic() - t)
print(best)
"""
UDP_SINK = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 5202)); s.settimeout(2)
print("ready", flush=True)
n = 0
try:
    while True:
        s.recv(2048); n += 1
except socket.timeout:
    pass
print(n)
"""
UDP_SOURCE = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(400):
    s.sendto(b"x" * 100, (sys.argv[1], 5202)); time.sleep(0.001)
"""
CLIENT = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], 5201), timeout=5); s.settimeout(20)
t = time.monotonic()
for _ in range(int(sys.argv[2])): s.sendall(b"x" * (1 << 20))
s.shutdown(socket.SHUT_WR); s.recv(1); print(time.monotonic() - t)
"""


@pytest.fixture
def bed(testbed):
    testbed(2, "--rate", "50mbit")


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


def test_delay_and_loss_act_on_what_a_host_receives(testbed, netem_built):
    testbed(2, "--rate", "100mbit")
    run_testbed("shape", "h1", "--rate", "100mbit", "--delay", "20ms", "--loss", "25%")
    assert "delay 20.000 ms, loss 0.2500" in run_testbed("status").stdout
    addr = run_testbed("addr", "h1").stdout.strip()
    refused = run_testbed("exec", "h0", sys.executable, "-c", REFUSED_AFTER, addr, timeout=60)
    assert float(refused.stdout) >= 0.019  # a lost SYN only makes it longer

    sink = subprocess.Popen([str(TESTBED), "exec", "h1", sys.executable, "-c", UDP_SINK], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert sink.stdout.readline().strip() == "ready"
        run_testbed("exec", "h0", sys.executable, "-c", UDP_SOURCE, addr, timeout=60)
        out, _ = sink.communicate(timeout=30)
        # 400 datagrams at 25% loss: about 300 arrive (a binomial spread of +-9).
        assert 200 < int(out.strip()) < 380, out
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait(timeout=10)

    run_testbed("shape", "h1", "--rate", "100mbit")
    assert "weightport-netem" not in run_testbed("status").stdout
