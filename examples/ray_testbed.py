"""A Ray cluster over testbed hosts: one Ray node per network namespace (scripts/testbed).

Each node is its own ``ray start --block`` inside its host's namespace, with the host's address as
``--node-ip-address``, its own temp dir and object-store cap, no dashboard and usage stats off. Every
node is stopped by the pid of its ``ray start`` (which stops the node's processes on SIGTERM), never
with ``ray stop``, which would end every Ray process on the machine. Needs root.
"""

from __future__ import annotations

import os
import pathlib
import secrets
import signal
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTBED = REPO / "scripts" / "testbed"
GCS_PORT = 6380
OBJECT_STORE_BYTES = 128 << 20  # weights never travel through it; only Ray's own small objects do


def testbed(*args: str) -> str:
    out = subprocess.run(["bash", str(TESTBED), *args], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"testbed {' '.join(args)}: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout.strip()


def in_host(host: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", f"wptb-{host}", *argv]


class RayCluster:
    """Ray nodes on testbed hosts h0..h{K-1}; h0 is the head. ``with RayCluster(k, rate) as c:``."""

    def __init__(self, hosts: int, rate: str = "1gbit", cpus_per_node: int = 4, env: dict | None = None):
        if os.geteuid() != 0:
            raise PermissionError("--hosts needs root: the testbed's hosts are network namespaces")
        self.hosts = [f"h{i}" for i in range(hosts)]
        self.rate, self.cpus = rate, cpus_per_node
        self.procs: list[subprocess.Popen] = []
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="wp-ray-"))
        # Ray's token authentication, with a token of this cluster's own (not ~/.ray's): every node
        # and the driver read it from the file.
        token = self.tmp / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        self.env = {**os.environ, **(env or {}), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
        self.addresses: dict[str, str] = {}

    @property
    def head_address(self) -> str:
        return f"{self.addresses['h0']}:{GCS_PORT}"

    def __enter__(self) -> "RayCluster":
        testbed("up", str(len(self.hosts)), "--rate", self.rate)
        try:
            for host in self.hosts:
                self.addresses[host] = testbed("addr", host)
                self._start_node(host)
            self._wait_nodes(timeout=120)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, host: str) -> None:
        ray = str(pathlib.Path(sys.executable).with_name("ray"))
        argv = [ray, "start", "--block", "--node-ip-address", self.addresses[host], "--disable-usage-stats",
                "--num-cpus", str(self.cpus), "--object-store-memory", str(OBJECT_STORE_BYTES),
                "--temp-dir", str(self.tmp / host)]
        if host == "h0":
            argv += ["--head", "--port", str(GCS_PORT), "--include-dashboard=false"]
        else:
            argv += ["--address", self.head_address]
        log = open(self.tmp / f"{host}.log", "w")
        self.procs.append(subprocess.Popen(in_host(host, argv), stdout=log, stderr=subprocess.STDOUT,
                                           env=self.env, start_new_session=True))
        if host == "h0":  # the others join the head: wait until it listens
            self._wait_nodes(timeout=60, count=1)

    def _wait_nodes(self, timeout: float, count: int | None = None) -> None:
        count = count or len(self.hosts)
        ray = str(pathlib.Path(sys.executable).with_name("ray"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p, host in zip(self.procs, self.hosts):
                if p.poll() is not None:
                    raise RuntimeError(f"Ray node on {host} exited ({p.returncode}): see {self.tmp / host}.log")
            probe = subprocess.run(in_host("h0", [sys.executable, "-c", _COUNT_NODES, self.head_address]),
                                   capture_output=True, text=True, timeout=60, env=self.env)
            if probe.returncode == 0 and int(probe.stdout.strip() or 0) >= count:
                return
            time.sleep(1)
        raise TimeoutError(f"{count} Ray nodes did not join within {timeout:.0f} s (logs in {self.tmp})")

    def run_driver(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        """Runs `argv` (a Python command) in h0's namespace, where the head is, as the Ray driver."""
        return subprocess.run(in_host("h0", argv), timeout=timeout, env=self.env)

    def egress_bytes(self, host: str) -> int:
        """Bytes `host` has sent on its link (the root side's veth receives them)."""
        return int(pathlib.Path(f"/sys/class/net/wptb-{host}/statistics/rx_bytes").read_text())

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.procs = []
        testbed("down")

    def __exit__(self, *exc) -> None:
        self.stop()


_COUNT_NODES = """
import sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(sum(1 for n in ray.nodes() if n.get("Alive")))
"""
