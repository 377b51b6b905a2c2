"""End-to-end checks of `weightport publish`, `subscribe` and `serve` as separate processes.

A subscriber writes what it received as safetensors; the reference `safetensors` package must read
it back byte-equal to the checkpoint the publisher loaded. The standalone coordinator must serve
Prometheus metrics naming each subscriber, and refuse a peer with the wrong secret.

Every process started here is stopped by its pid; every wait is bounded.
"""
import subprocess
import time
import urllib.request

import pytest

np = pytest.importorskip("numpy")
safetensors = pytest.importorskip("safetensors")
import safetensors.numpy  # noqa: E402

from cli_procs import BIN, TIMEOUT, free_port, write_secret  # noqa: E402


def tensors_of(path):
    return safetensors.numpy.load_file(str(path))


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_subscriber_writes_what_it_received_byte_equal(tmp_path, procs, transport):
    model = tmp_path / "model"
    gen = subprocess.run([str(BIN), "gen-model", "--preset", "tiny", "--dtype", "f16", "--shards", "2", "-q", "--out", str(model)],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    secret = write_secret(tmp_path / "secret")
    port = free_port()
    pub = procs.start("publish", "--model", model, "--listen", f"127.0.0.1:{port}", "--secret-file", secret,
                      "--subscribers", "2", "--versions", "1", "--transport", transport, "--json")
    subs = [procs.start("subscribe", "--connect", f"127.0.0.1:{port}", "--secret-file", secret, "--name", f"s{i}",
                        "--out", tmp_path / f"out{i}.safetensors", "--swap-mode", mode, "--transport", transport, "--quiet")
            for i, mode in enumerate(["double-buffer", "stage-copy"])]
    code, out = procs.finish(pub)
    assert code == 0, out
    for s in subs:
        code, out = procs.finish(s)
        assert code == 0, out

    source = {}
    for f in sorted(model.glob("*.safetensors")):
        source.update(tensors_of(f))
    for i in range(2):
        got = tensors_of(tmp_path / f"out{i}.safetensors")
        assert set(got) == set(source)
        for name, array in source.items():
            assert got[name].dtype == array.dtype and got[name].shape == array.shape, name
            assert got[name].tobytes() == array.tobytes(), name


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_rotated_keys_serve_every_version_from_a_new_grant(tmp_path, procs, transport):
    """--rotate-keys: every version is fetched whole (--no-delta) from a grant of its own."""
    import json
    secret = write_secret(tmp_path / "secret")
    port = free_port()
    pub = procs.start("publish", "--preset", "tiny", "--listen", f"127.0.0.1:{port}", "--secret-file", secret,
                      "--subscribers", "1", "--versions", "3", "--perturb", "0", "--rotate-keys",
                      "--transport", transport, "--json", "--quiet")
    sub = procs.start("subscribe", "--connect", f"127.0.0.1:{port}", "--secret-file", secret, "--name", "s0",
                      "--versions", "3", "--no-delta", "--transport", transport, "--json", "--quiet")
    code, out = procs.finish(pub)
    assert code == 0, out
    summary = json.loads(out[out.index("{"):])
    versions = summary["versions"]
    assert [v["version"] for v in versions] == [1, 2, 3], out
    for v in versions:
        assert v["verified"], v
        assert v["snapshot_copy_s"] > 0, v  # each version copied into its grant
        assert v["fetched_bytes"] == summary["versions"][0]["bytes"], v  # fetched whole from the new grant
    code, out = procs.finish(sub)
    assert code == 0, out


def test_standalone_coordinator_metrics_and_refusal(tmp_path, procs):
    secret = write_secret(tmp_path / "secret")
    wrong = write_secret(tmp_path / "wrong")
    port, metrics_port = free_port(), free_port()
    serve = procs.start("serve", "--listen", f"127.0.0.1:{port}", "--secret-file", secret, "--metrics",
                        f"127.0.0.1:{metrics_port}", "--run-for", "60")
    sub = procs.start("subscribe", "--connect", f"127.0.0.1:{port}", "--secret-file", secret, "--name", "metrics-sub",
                      "--versions", "2", "--timeout", "60", "--quiet")
    intruder = procs.start("subscribe", "--connect", f"127.0.0.1:{port}", "--secret-file", wrong, "--name", "intruder",
                           "--timeout", "30")
    code, out = procs.finish(intruder)
    assert code == 1 and "refused" in out, out
    pub = procs.start("publish", "--preset", "tiny", "--coordinator", f"127.0.0.1:{port}", "--secret-file", secret,
                      "--versions", "2")
    # Joined to a standalone coordinator, the publisher cannot wait for subscribers by count; the
    # subscriber started first, so version 1 finds it connected (retry until it is). It has no report
    # of the bytes each subscriber fetched, and says the model size for each version.
    code, out = procs.finish(pub)
    assert code == 0, out
    assert "version 2: " in out, out
    code, out = procs.finish(sub)
    assert code == 0, out

    body = ""
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
            break
        except OSError:
            time.sleep(0.2)
    assert 'weightport_peer_bytes_total{peer="metrics-sub"}' in body, body
    assert "weightport_versions_committed_total 2" in body, body
    assert 'weightport_peer_errors_total{peer="intruder"}' not in body  # refused before it was a peer
    serve.terminate()
    code, out = procs.finish(serve, timeout=30)
    assert code == 0, out
    assert "refused" in out and "intruder" in out, out
