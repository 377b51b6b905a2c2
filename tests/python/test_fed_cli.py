"""End-to-end checks of `weightport fed server` and `fed client` on loopback.

The server dumps the global model after every round and each client what its update decoded to
(--dump-dir); the aggregate is checked against a reference FedAvg computed here with numpy in
float32. A client that sends garbage, and one that leaves in the middle of a round, are excluded
from that round, named in the server's log, and the round's aggregate is the mean over the others;
the one that left rejoins and takes part again, fetching the whole model.

Every process is stopped by its pid; every wait is bounded.
"""
import json
import time

import pytest

np = pytest.importorskip("numpy")

from cli_procs import TIMEOUT, free_port, write_secret  # noqa: E402


def load(path):
    return np.fromfile(path, dtype=np.float32)


def start_server(procs, tmp_path, port, secret, clients, rounds, extra=()):
    return procs.start("fed", "server", "--secret-file", secret, "--listen", f"127.0.0.1:{port}", "--model-bytes",
                       "4MiB", "--clients", clients, "--rounds", rounds, "--chunk-kb", 256, "--dump-dir", tmp_path,
                       "--json", *extra)


def start_client(procs, tmp_path, port, secret, name, samples, *extra):
    return procs.start("fed", "client", "--secret-file", secret, "--connect", f"127.0.0.1:{port}", "--name", name,
                       "--samples", samples, "--dump-dir", tmp_path, "--json", "--timeout", 60, *extra)


def finish_server(procs, server):
    code, out = procs.finish(server)
    assert code == 0, out
    report, _ = json.JSONDecoder().raw_decode(out[out.index("{\n"):])
    return report, out


def check_rounds(tmp_path, report, samples):
    """Each round: global_r == global_{r-1} + sum(w_i * sent_i) / sum(w_i) over the folded clients."""
    prev = load(tmp_path / "global_0.f32")
    for r in report["rounds"]:
        folded = [c["name"] for c in r["clients"] if c["folded"]]
        assert folded, r
        acc = np.zeros_like(prev)
        weight = np.float32(0)
        for name in folded:
            w = np.float32(samples[name])
            acc += w * load(tmp_path / f"sent_{name}_{r['round']}.f32")
            weight += w
        want = prev + acc * (np.float32(1) / weight)
        got = load(tmp_path / f"global_{r['round']}.f32")
        assert np.allclose(got, want, rtol=0, atol=1e-6), (r["round"], float(np.abs(got - want).max()))
        prev = got


def test_the_aggregate_is_fedavg_and_a_garbage_client_is_excluded_by_name(tmp_path, procs):
    secret = write_secret(tmp_path / "secret")
    port = free_port()
    samples = {"a": 10, "b": 30, "c": 5}
    server = start_server(procs, tmp_path, port, secret, 3, 2)
    clients = [start_client(procs, tmp_path, port, secret, "a", 10, "--encoding", "bf16"),
               start_client(procs, tmp_path, port, secret, "b", 30, "--encoding", "fp8"),
               start_client(procs, tmp_path, port, secret, "c", 5, "--encoding", "f32", "--garbage-round", 1)]
    report, out = finish_server(procs, server)
    for c in clients:
        code, text = procs.finish(c)
        assert code == 0, text
    first = {c["name"]: c for c in report["rounds"][0]["clients"]}
    assert first["a"]["folded"] and first["b"]["folded"], first
    assert not first["c"]["folded"] and "not finite" in first["c"]["excluded"], first
    assert "c excluded" in out  # the server's log names it
    assert all(c["folded"] for c in report["rounds"][1]["clients"]), report["rounds"][1]
    check_rounds(tmp_path, report, samples)


def test_a_client_that_leaves_mid_round_is_excluded_and_rejoins(tmp_path, procs):
    secret = write_secret(tmp_path / "secret")
    port = free_port()
    samples = {"a": 1, "b": 2, "d": 3}
    server = start_server(procs, tmp_path, port, secret, 3, 4)
    a = start_client(procs, tmp_path, port, secret, "a", 1)
    b = start_client(procs, tmp_path, port, secret, "b", 2)
    d = start_client(procs, tmp_path, port, secret, "d", 3, "--leave-in-round", 2)
    code, text = procs.finish(d)
    assert code == 0 and "leaves in round 2" in text, text
    d = start_client(procs, tmp_path, port, secret, "d", 3)  # rejoins: takes part from the next round
    report, out = finish_server(procs, server)
    for c in (a, b, d):
        code, text = procs.finish(c)
        assert code == 0, text
    second = {c["name"]: c for c in report["rounds"][1]["clients"]}
    assert not second["d"]["folded"] and "connection lost" in second["d"]["excluded"], second
    assert "d excluded" in out
    back = [r for r in report["rounds"][2:] if any(c["name"] == "d" and c["folded"] for c in r["clients"])]
    assert back, report["rounds"]
    check_rounds(tmp_path, report, samples)
    # Back with nothing held, it fetched the whole model in its first round back.
    first_back = next(c for c in back[0]["clients"] if c["name"] == "d")
    full = max(c["bytes_down"] for c in report["rounds"][0]["clients"])
    assert first_back["bytes_down"] >= 0.9 * full, (first_back, full)
