"""Federated rounds on the testbed: 8 clients on slow, long, lossy links; one leaves mid-round.

h0 runs the server (its link unshaped); h1..h8 run one client each behind links of 10-100 Mbit/s,
20-200 ms delay and 1% loss. A 2 MiB model (synthetic bf16, folded as f32), 4 rounds, bf16 and fp8
updates with error feedback, zstd where it pays. h8 leaves after receiving round 2's model and is
started again: it is excluded from round 2 (named), rejoins and is folded in a later round (the
next one that begins after its join: its handshake over the 200 ms link may miss round 3). Every round's
aggregate is checked against the numpy reference FedAvg (test_fed_cli.check_rounds).

Prints, per round: its time, the bound (each client's bytes down and up over its link rate, the
largest), and the bytes sent against the full bf16 model once per client.

Every process is stopped by its pid; the hosts are always taken down.
"""
import json

from cli_procs import run_testbed, write_secret
from test_fed_cli import check_rounds

PORT = 7415
# (rate Mbit/s, one-way delay ms) of h1..h8
LINKS = [(100, 20), (80, 50), (60, 80), (50, 100), (40, 120), (30, 150), (20, 180), (10, 200)]


def test_eight_clients_on_slow_lossy_links_one_leaving_mid_round(tmp_path, procs, testbed, netem_built):
    testbed(9, "--rate", "100mbit")
    run_testbed("shape", "h0")
    for i, (rate, delay) in enumerate(LINKS, start=1):
        run_testbed("shape", f"h{i}", "--rate", f"{rate}mbit", "--delay", f"{delay}ms", "--loss", "1%")
    secret = write_secret(tmp_path / "secret")
    address = run_testbed("addr", "h0").stdout.strip() + f":{PORT}"
    server = procs.start_on("h0", "fed", "server", "--secret-file", secret, "--listen", address, "--model-bytes",
                            "2MiB", "--clients", 8, "--rounds", 4, "--chunk-kb", 256, "--deadline", 120,
                            "--dump-dir", tmp_path, "--json")
    samples = {f"h{i}": 10 * i for i in range(1, 9)}

    def client(i, *extra):
        encoding = "fp8" if i % 2 == 0 else "bf16"
        return procs.start_on(f"h{i}", "fed", "client", "--secret-file", secret, "--connect", address, "--name",
                              f"h{i}", "--samples", samples[f"h{i}"], "--encoding", encoding, "--dump-dir", tmp_path,
                              "--json", "--timeout", 180, *extra)

    clients = [client(i) for i in range(1, 8)]
    leaver = client(8, "--leave-in-round", 2)
    code, text = procs.finish(leaver)
    assert code == 0 and "leaves in round 2" in text, text
    clients.append(client(8))
    code, out = procs.finish(server, timeout=600)
    assert code == 0, out
    report, _ = json.JSONDecoder().raw_decode(out[out.index("{\n"):])
    for c in clients:
        code, text = procs.finish(c)
        assert code == 0, text
    rounds = report["rounds"]
    second = {c["name"]: c for c in rounds[1]["clients"]}
    assert not second["h8"]["folded"] and "connection lost" in second["h8"]["excluded"], second["h8"]
    assert "h8 excluded" in out
    for r in rounds:
        for c in r["clients"]:
            assert c["folded"] or c["name"] == "h8", (r["round"], c)
    assert any(c["name"] == "h8" and c["folded"] for r in rounds[2:] for c in r["clients"]), rounds[2:]
    check_rounds(tmp_path, report, samples)
    rates = {f"h{i}": rate * 1e6 for i, (rate, _) in enumerate(LINKS, start=1)}
    for r in rounds:
        bound = max((c["bytes_down"] + c["bytes_up"]) * 8 / rates[c["name"]] for c in r["clients"])
        sent = r["bytes_down"] + r["bytes_up"]
        full = r["full_bf16_bytes"] * 2 * len(r["clients"])  # the model down and an update up, bf16, each client
        print(json.dumps({"round": r["round"], "seconds": round(r["seconds"], 2), "bound_s": round(bound, 2),
                          "bytes_sent": sent, "full_bf16_both_ways": full, "ratio": round(sent / full, 3)}))
    print(json.dumps({"peak_rss": report["peak_rss"], "aggregation_state_bytes": report["aggregation_state_bytes"],
                      "model_f32_bytes": report["model_f32_bytes"]}))
