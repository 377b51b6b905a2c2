"""Helpers shared by the end-to-end CLI tests: where the binary is, free ports, secrets, and a
process list that stops every process it started (by its pid) when the test ends."""
import json
import os
import pathlib
import secrets
import socket
import subprocess
import threading
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("WEIGHTPORT_BIN", REPO / "build" / "weightport"))
TIMEOUT = 180  # bound on any one process of these tests, in seconds
TESTBED = REPO / "scripts" / "testbed"


def run_testbed(*args, check=True, timeout=60):
    return subprocess.run([str(TESTBED), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          check=check)


def run_cli(*args, check=True, timeout=120):
    """Runs weightport to the end; with `check`, fails the test (naming the command) unless it exits 0."""
    if not BIN.exists():
        pytest.fail(f"weightport binary not found at {BIN} (build it, or set WEIGHTPORT_BIN)")
    proc = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(f"weightport {' '.join(map(str, args))} exited {proc.returncode}: {proc.stderr}")
    return proc


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_secret(path):
    path.write_bytes(secrets.token_bytes(32))
    path.chmod(0o600)
    return path


def json_line(out):
    """The last line of a process's output that is a JSON object (its --json report): UCX may log to
    stderr, merged into the output, after it (a refused connect retried while the process ends)."""
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError("no JSON report in the output:\n" + out)


def join_all(*calls, timeout=120):
    """Runs each call on its own thread (each registration or bind waits for all the others);
    returns each one's exception or None, in order. A call still running after `timeout` seconds
    (all calls together) is an AssertionError naming it: a hang must not read as success."""
    errors = [None] * len(calls)

    def run(i, call):
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [i for i, t in enumerate(threads) if t.is_alive()]
    if hung:
        raise AssertionError(f"join_all: call(s) {hung} still running after {timeout} s")
    return errors


class Procs:
    """Starts weightport processes and makes sure each one is stopped."""

    def __init__(self):
        self.procs = []

    def start(self, *args):
        return self.run_argv([str(BIN), *map(str, args)])

    def start_on(self, host, *args):
        """Starts weightport inside testbed host `host` (its pid is the weightport process itself:
        `testbed exec` and `ip netns exec` both exec)."""
        return self.run_argv([str(TESTBED), "exec", host, str(BIN), *map(str, args)])

    def run_argv(self, argv):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.procs.append(p)
        return p

    def finish(self, p, timeout=TIMEOUT):
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


class LogWatch:
    """Reads a process's output stream on a thread; wait_for(text, n) waits until `text` appeared n times."""

    def __init__(self, stream):
        self.lines = []
        self.cv = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        for line in stream:
            with self.cv:
                self.lines.append(line)
                self.cv.notify_all()

    def wait_for(self, text, n=1, timeout=60):
        with self.cv:
            ok = self.cv.wait_for(lambda: sum(text in l for l in self.lines) >= n, timeout)
        assert ok, f"'{text}' x{n} not seen:\n" + "".join(self.lines)
