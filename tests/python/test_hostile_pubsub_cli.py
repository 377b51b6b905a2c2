"""Hostile but plausible input to publish and subscribe: sizes larger than the machine, values that
overflow, signals, bad output paths, runs where nobody receives anything. Each test failed before
the behaviour it checks was fixed (docs/RELIABILITY.md, "Hostile input")."""
import os
import pathlib
import signal
import subprocess
import time

import pytest
import safetensors.numpy

from cli_procs import BIN, LogWatch, free_port, write_secret

QUICK = 60  # seconds: every command here either refuses at once or ends within this


def run(*args, timeout=QUICK, cwd=None):
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def mem_total():
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def shm_state():
    """UCX's shared-memory files and this machine's SysV segments: what a dead publisher may leave."""
    files = {p.name for p in pathlib.Path("/dev/shm").iterdir() if p.name.startswith("ucx")}
    ids = set()
    for line in pathlib.Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
        ids.add(line.split()[1])
    return files, ids


@pytest.mark.serial  # compares this machine's shared memory before and after
def test_a_model_larger_than_memory_is_refused_before_anything_is_allocated(tmp_path):
    secret = write_secret(tmp_path / "s")
    before = shm_state()
    size = 4 * mem_total()
    start = time.monotonic()
    r = run("publish", "--model-bytes", size, "--secret-file", secret, "--listen", f"127.0.0.1:{free_port()}")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "does not fit in this machine's memory" in r.stderr, r.stderr
    assert "of memory available" in r.stderr and "GiB" in r.stderr, r.stderr
    assert time.monotonic() - start < 10  # refused up front, not after minutes of allocating
    assert shm_state() == before


@pytest.mark.serial  # compares this machine's shared memory before and after
@pytest.mark.parametrize("when", [0.3, 1.5, 4.0])
def test_a_publisher_killed_with_sigkill_leaves_nothing_in_dev_shm(tmp_path, when):
    secret = write_secret(tmp_path / "s")
    before = shm_state()
    pub = subprocess.Popen([str(BIN), "publish", "--model-bytes", "256MiB", "--secret-file", secret,
                            "--listen", f"127.0.0.1:{free_port()}", "--wait", "30", "--quiet"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(when)  # while loading the weights, and while waiting for subscribers
        pub.send_signal(signal.SIGKILL)
        pub.wait(timeout=10)
    finally:
        if pub.poll() is None:
            pub.kill()
            pub.wait(timeout=10)
    deadline = time.monotonic() + 5
    while shm_state() != before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert shm_state() == before


@pytest.mark.parametrize("option,value", [
    ("--model-bytes", "-5"), ("--model-bytes", "18446744073709551616"), ("--model-bytes", "0"),
    ("--model-bytes", "1.5"), ("--chunk-size", "0"), ("--chunk-size", "-1"), ("--chunk-size", "4PiB"),
    ("--subscribers", "-1"), ("--subscribers", "0"), ("--wait", "nan"), ("--wait", "-1"),
    ("--update-timeout", "inf"), ("--quorum", "-2"), ("--perturb", "nan"),
])
def test_publish_refuses_a_meaningless_size_or_count_at_parse_time(tmp_path, option, value):
    secret = write_secret(tmp_path / "s")
    r = run("publish", option, value, "--secret-file", secret, "--listen", f"127.0.0.1:{free_port()}")
    assert r.returncode == 2, r.stdout + r.stderr
    assert option in r.stderr, r.stderr
    assert "publishing" not in r.stdout


def test_subscribe_checks_out_before_joining(tmp_path):
    secret = write_secret(tmp_path / "s")
    (tmp_path / "d").mkdir()
    (tmp_path / "f.safetensors").write_bytes(b"")
    port = free_port()  # nobody listens: a check after joining would retry for --wait seconds
    for out, why in [(tmp_path / "d", "is a directory"), (tmp_path / "missing" / "m.safetensors", "does not exist"),
                     ("/proc/m.safetensors", "cannot create a file"),
                     (f"{tmp_path}/f.safetensors/", "ends with '/'"),
                     (tmp_path / "f.safetensors" / "m.safetensors", "is a file, not a directory")]:
        start = time.monotonic()
        r = run("subscribe", "--connect", f"127.0.0.1:{port}", "--secret-file", secret, "--out", out, "--wait", 30)
        assert r.returncode == 1, r.stdout + r.stderr
        assert why in r.stderr and str(out) in r.stderr, r.stderr
        assert time.monotonic() - start < 10


def start(*args):
    return subprocess.Popen([str(BIN), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop(*ps):
    for p in ps:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_subscriber_writes_the_live_version_and_exits_non_zero(tmp_path, sig):
    secret = write_secret(tmp_path / "s")
    port = free_port()
    out = tmp_path / "live.safetensors"
    pub = start("publish", "--preset", "tiny", "--secret-file", secret, "--listen", f"127.0.0.1:{port}",
                "--versions", 100000, "--perturb", 0.001, "--quiet")
    sub = start("subscribe", "--connect", f"127.0.0.1:{port}", "--secret-file", secret, "--out", out)
    try:
        log = LogWatch(sub.stdout)
        log.wait_for(": live", 3)  # three versions made live
        sub.send_signal(sig)
        sub.wait(timeout=QUICK)
        assert sub.returncode == 128 + sig, "".join(log.lines)
        log.wait_for("stopped by " + ("SIGTERM" if sig == signal.SIGTERM else "SIGINT"))
        with safetensors.safe_open(str(out), "numpy") as f:
            assert int(f.metadata()["weightport.version"]) >= 3
            assert len(list(f.keys())) == 57  # the whole tiny model
        assert not list(tmp_path.glob("live.safetensors.*")), "a temporary file was left behind"
    finally:
        stop(sub, pub)


def test_a_subscriber_that_received_nothing_fails_and_writes_nothing(tmp_path):
    secret = write_secret(tmp_path / "s")
    port = free_port()
    out = tmp_path / "v.safetensors"
    pub = start("publish", "--preset", "tiny", "--secret-file", secret, "--listen", f"127.0.0.1:{port}",
                "--subscribers", 2, "--wait", 3, "--quiet")
    sub = start("subscribe", "--connect", f"127.0.0.1:{port}", "--secret-file", secret, "--out", out, "--quiet")
    try:
        pub_out, _ = pub.communicate(timeout=QUICK)
        sub_out, _ = sub.communicate(timeout=QUICK)
        assert pub.returncode == 1, pub_out
        assert sub.returncode == 1, sub_out
        assert "no version became live" in sub_out, sub_out
        assert "wrote" not in sub_out
        assert not out.exists()
    finally:
        stop(sub, pub)


def test_a_publisher_joined_to_a_coordinator_waits_for_its_subscribers_and_fails_without_them(tmp_path):
    secret = write_secret(tmp_path / "s")
    port = free_port()
    serve = start("serve", "--listen", f"127.0.0.1:{port}", "--secret-file", secret, "--run-for", 40)
    try:
        LogWatch(serve.stdout).wait_for("coordinator listening")
        common = ["publish", "--preset", "tiny", "--coordinator", f"127.0.0.1:{port}", "--secret-file", secret]
        r = run(*common, "--subscribers", 1, "--wait", 2, "--json")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "only 0 of 1 subscriber(s) connected within 2.0 s" in r.stderr, r.stderr

        # With a subscriber that joins while version 1 waits for it: committed, counted.
        pub = start(*common, "--subscribers", 1, "--wait", 30, "--versions", 2, "--json")
        time.sleep(1)
        sub = start("subscribe", "--connect", f"127.0.0.1:{port}", "--secret-file", secret, "--versions", 2,
                    "--quiet")
        pub_out, _ = pub.communicate(timeout=QUICK)
        assert pub.returncode == 0, pub_out
        sub.communicate(timeout=QUICK)
        assert sub.returncode == 0
        assert '"subscribers_verified": 1' in pub_out, pub_out
    finally:
        stop(serve)



@pytest.mark.parametrize("env", [{}, {"UCX_TLS": "tcp"}, {"UCX_TLS": "shm"}, {"UCX_TLS": "^tcp"},
                                 {"UCX_NET_DEVICES": "eth0"}])
def test_ucx_prints_no_warning_about_settings_it_did_not_apply(tmp_path, env):
    """Tuning for a transport UCX does not open is not given to it: UCX would warn "invalid
    configurations" on every run, about nothing the user set."""
    secret = write_secret(tmp_path / "s")
    for transport in ("auto", "shm", "tcp"):
        r = subprocess.run([str(BIN), "publish", "--preset", "tiny", "--secret-file", secret, "--transport", transport,
                            "--listen", f"127.0.0.1:{free_port()}", "--wait", "0.5", "--quiet"],
                           capture_output=True, text=True, timeout=QUICK, env={**os.environ, **env})
        out = r.stdout + r.stderr  # UCX logs to stdout
        assert "invalid configuration" not in out, (transport, env, out)
        assert "UCX  WARN" not in out, (transport, env, out)


def test_metrics_on_the_listen_port_names_both_options(tmp_path):
    secret = write_secret(tmp_path / "s")
    port = free_port()
    r = run("serve", "--listen", f"127.0.0.1:{port}", "--metrics", f"127.0.0.1:{port}", "--secret-file", secret,
            "--run-for", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"--listen 127.0.0.1:{port} (--metrics 127.0.0.1:{port} took that port first)" in r.stderr, r.stderr
    assert "address already in use" in r.stderr, r.stderr
