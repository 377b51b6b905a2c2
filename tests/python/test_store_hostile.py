"""The coordinator and the ranks against a store (etcd's v3 gateway) that is down, broken or
hostile: every failure is a clear weightport error or a log line, never a crash, a silent wait or
bytes that are not text.

- A gateway answering JSON nested 100,000 deep (HTTP 500, or 200 with no header), bytes that are not
  UTF-8, or escape sequences: a Python rank gets a weightport.Error whose message is printable
  ASCII (a deep answer used to be a SIGSEGV in the rank; invalid UTF-8 a UnicodeDecodeError).
- A session name the store cannot hold is refused at once, not after the rank's whole timeout.
- `weightport coordinator` with an unreachable store logs the failures (rate-limited) and reports
  the store in its --metrics; endpoints that cannot work are refused.
- SIGTERM right after versions were decided: each of them is still reported.

Every HTTP server here is this test's own, on loopback; every process is stopped by its pid."""
import http.server
import json
import threading
import time
import urllib.request

import numpy as np
import pytest

from cli_procs import LogWatch, free_port, join_all, run_cli, write_secret

weightport = pytest.importorskip("weightport")

DEEP = "[" * 100000 + "]" * 100000
HOSTILE = [
    (500, ('{"x":' + DEEP + "}").encode()),
    (200, ('{"x":' + DEEP + "}").encode()),
    (500, b'{"error":"\xff\xfe","code":14}'),
    (500, b"\xff\xfe not json"),
    (503, b'{"error":"\\u001b[2J\\n{\\"event\\":\\"version\\"}","code":14}'),
    (200, b'{"kvs":[{"key":"\xff"}]}'),
]


class CannedGateway:
    """Answers every POST with one status and body."""

    def __init__(self, status, body):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.url = f"etcd://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def printable(text):
    return all(0x20 <= ord(c) < 0x7f for c in text)


@pytest.mark.parametrize("status,body", HOSTILE, ids=[f"{s}-{i}" for i, (s, _) in enumerate(HOSTILE)])
def test_a_hostile_store_answer_is_a_weightport_error_in_a_rank(tmp_path, status, body):
    gateway = CannedGateway(status, body)
    try:
        sub = weightport.Subscriber(gateway.url, secret=write_secret(tmp_path / "secret"), session="s",
                                    transport="tcp", timeout=1.5)
        with pytest.raises(weightport.Error) as raised:
            sub.bind({"w": np.zeros(4, np.float32)})
        message = str(raised.value)
        assert printable(message), message
        assert len(message) < 2048, message
        assert "finding the coordinator of session 's'" in message, message
        sub.close()
    finally:
        gateway.close()


def test_a_session_name_the_store_cannot_hold_is_refused_at_once(tmp_path):
    start = time.monotonic()
    sub = weightport.Subscriber(f"etcd://127.0.0.1:{free_port()}", secret=write_secret(tmp_path / "secret"),
                                session="a/b", transport="tcp", timeout=60)
    with pytest.raises(weightport.InvalidArgument, match="a/b"):
        sub.bind({"w": np.zeros(4, np.float32)})
    assert time.monotonic() - start < 30  # not the 60 s timeout
    sub.close()


@pytest.mark.parametrize("endpoint", ["etcd://[]:2379", "etcd://-:1", "etcd://a..b:1"])
def test_the_coordinator_refuses_a_store_address_that_cannot_work(tmp_path, endpoint):
    out = run_cli("coordinator", "--rendezvous", endpoint, "--secret-file", write_secret(tmp_path / "secret"),
                  "--run-for", 5, check=False)
    assert out.returncode != 0, out.stdout
    assert "etcd endpoint" in out.stdout + out.stderr, out.stdout + out.stderr


def scrape(address):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        return {line.split(" ")[0]: float(line.split(" ")[1]) for line in r.read().decode().splitlines()
                if line and not line.startswith("#")}


def test_an_unreachable_store_is_logged_and_reported_in_the_metrics(tmp_path, procs):
    metrics = f"127.0.0.1:{free_port()}"
    p = procs.start("coordinator", "--rendezvous", f"etcd://127.0.0.1:{free_port()}", "--secret-file",
                    write_secret(tmp_path / "secret"), "--metrics", metrics, "--run-for", 4, "--json")
    log = LogWatch(p.stdout)
    log.wait_for("cannot connect", timeout=20)
    m = scrape(metrics)
    assert m["weightport_coordinator_store_reachable"] == 0, m
    assert m["weightport_coordinator_store_errors_total"] >= 1, m
    assert m["weightport_coordinator_leading"] == 0, m
    assert p.wait(timeout=30) == 0
    store_lines = [json.loads(line) for line in log.lines if "cannot connect" in line]
    # About two attempts a second for 4 s, logged at most once per 5 s.
    assert 1 <= len(store_lines) <= 2, log.lines


def test_versions_decided_just_before_sigterm_are_still_reported(tmp_path, procs):
    secret = write_secret(tmp_path / "secret")
    metrics = f"127.0.0.1:{free_port()}"
    p = procs.start("coordinator", "--listen", f"127.0.0.1:{free_port()}", "--secret-file", secret, "--metrics",
                    metrics, "--chunk-bytes", 4096, "--timeout", 60, "--json")
    log = LogWatch(p.stdout)
    log.wait_for('"listening"')
    address = json.loads(next(line for line in log.lines if '"listening"' in line))["address"]
    pub = weightport.Publisher(address, secret=secret, rank=0, world_size=1, serve=False, transport="tcp",
                               timeout=60)
    recv = {"w": np.zeros(256, np.float32)}
    sub = weightport.Subscriber(address, secret=secret, transport="tcp", timeout=60)
    w = np.arange(256, dtype=np.float32)
    assert join_all(lambda: pub.register({"w": w}), lambda: sub.bind(recv)) == [None, None]
    for v in (1, 2, 3):
        w += 1
        pub.publish(v)
        pub.wait(v)
        sub.wait(v)
        sub.swap()
    deadline = time.monotonic() + 30
    while scrape(metrics).get('weightport_coordinator_versions_total{outcome="committed"}', 0) < 3:
        assert time.monotonic() < deadline, "the coordinator did not decide 3 versions"
        time.sleep(0.01)
    p.send_signal(15)
    assert p.wait(timeout=30) == 0
    log.thread.join(10)
    versions = [json.loads(line)["version"] for line in log.lines if '"event":"version"' in line]
    assert versions == [1, 2, 3], log.lines
    pub.close()
    sub.close()


def test_a_lease_ttl_that_is_not_whole_seconds_is_refused(tmp_path):
    out = run_cli("coordinator", "--lease-ttl", "1.9", "--secret-file", write_secret(tmp_path / "secret"),
                  "--run-for", 1, check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "lease_ttl must be a whole number from 1 to 600 s, not 1.9" in out.stderr, out.stderr
