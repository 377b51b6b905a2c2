"""A weight sync sharing its bottleneck link with other traffic, and the cap that makes it yield.

Three testbed hosts on 100 Mbit/s links: h0 publishes a 48 MiB model, h1 subscribes, and while the
version is on its way h2 sends to h1 with iperf3 for 3 s, so both flows cross h1's inbound link.

- Uncapped: nothing collapses. The competing flow keeps at least a quarter of the link (a fair share
  is half), and the version is committed, verified.
- `subscribe --max-gbps 0.03`: the sync takes at most 30 Mbit/s, so the competing flow keeps at
  least 60% of the link (70% is left to it); the version still lands, no sooner than the cap allows.

The figures are printed (pytest -s) for docs/PERFORMANCE.md. Every process is stopped by its pid;
the hosts are always taken down.
"""
import json
import time

import pytest

from cli_procs import TESTBED, run_testbed, write_secret

PORT = 7416
IPERF_PORT = 5203
RATE_MBIT = 100
MODEL_BYTES = 48 << 20
IPERF_SECONDS = 3


def sync_beside_iperf(tmp_path, procs, subscribe_extra):
    """One version h0 -> h1 while h2 -> h1 runs iperf3; returns (iperf3 Mbit/s, publisher report,
    whether the sync outlasted the iperf3 flow)."""
    secret = write_secret(tmp_path / "secret")
    address = run_testbed("addr", "h0").stdout.strip() + f":{PORT}"
    h1 = run_testbed("addr", "h1").stdout.strip()
    server = procs.run_argv([str(TESTBED), "exec", "h1", "iperf3", "-s", "-1", "-p", str(IPERF_PORT)])
    pub = procs.start_on("h0", "publish", "--model-bytes", f"{MODEL_BYTES >> 20}MiB", "--listen", address,
                         "--secret-file", secret, "--subscribers", 1, "--versions", 1, "--transport", "tcp",
                         "--json", "--quiet")
    sub = procs.start_on("h1", "subscribe", "--connect", address, "--secret-file", secret, "--name", "h1",
                         "--transport", "tcp", "--versions", 1, "--timeout", 120, "--json", "--quiet",
                         *subscribe_extra)
    time.sleep(1.5)  # joined, and the version is on its way
    client = procs.run_argv([str(TESTBED), "exec", "h2", "iperf3", "-c", h1, "-p", str(IPERF_PORT), "-t",
                             str(IPERF_SECONDS), "-J"])
    code, out = procs.finish(client, timeout=IPERF_SECONDS + 30)
    assert code == 0, out[-500:]
    outlasted = pub.poll() is None
    mbit = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6
    procs.finish(server, timeout=10)
    code, out = procs.finish(pub)
    assert code == 0, out
    report, _ = json.JSONDecoder().raw_decode(out[out.index("{"):])  # UCX may warn after it
    procs.finish(sub)
    return mbit, report, outlasted


@pytest.mark.parametrize("cap_gbps", [0, 0.03])
def test_a_sync_shares_its_link_and_yields_under_a_cap(tmp_path, procs, testbed, cap_gbps):
    testbed(3, "--rate", f"{RATE_MBIT}mbit")
    extra = ["--max-gbps", cap_gbps] if cap_gbps else []
    mbit, report, outlasted = sync_beside_iperf(tmp_path, procs, extra)
    (version,) = report["versions"]
    (sub,) = version["subscribers"]
    sync_mbit = version["bytes"] * 8 / 1e6 / sub["fetch_s"]
    print(f"cap {cap_gbps} Gbit/s: competing flow {mbit:.1f} Mbit/s of {RATE_MBIT}; sync {sub['fetch_s']:.2f} s, "
          f"{sync_mbit:.1f} Mbit/s on average; outlasted the competing flow: {outlasted}")
    assert sub["verified"] and sub["committed"], version
    assert outlasted, "the sync ended before the competing flow: the two did not share the link throughout"
    if cap_gbps:
        assert mbit >= 0.6 * RATE_MBIT, mbit
        assert sub["fetch_s"] >= 0.9 * version["bytes"] * 8 / (cap_gbps * 1e9), sub
    else:
        assert mbit >= 0.25 * RATE_MBIT, mbit
