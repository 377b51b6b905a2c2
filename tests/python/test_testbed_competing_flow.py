"""A weight sync sharing its bottleneck link with other traffic, and the cap and the priority that
make it yield.

Three testbed hosts on 100 Mbit/s links: h0 publishes a 48 MiB model, h1 subscribes, and while the
version is on its way h2 sends to h1 with iperf3 for 3 s, so both flows cross h1's inbound link.

- Uncapped: nothing collapses. The competing flow keeps at least a quarter of the link (a fair share
  is half), and the version is committed, verified.
- `subscribe --max-gbps 0.03`: the sync takes at most 30 Mbit/s, so the competing flow keeps at
  least 60% of the link (70% is left to it); the version still lands, no sooner than the cap allows.
- `subscribe --priority background`: the sync yields while the competing flow runs (it keeps 5% of
  the link once it has seen the flow), so the flow keeps at least 75% of the link (82-84% measured);
  the subscriber says it yielded, and the version lands. Alone on the link it never yields.

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


def sync_beside_iperf(tmp_path, procs, subscribe_extra, compete=True):
    """One version h0 -> h1 while h2 -> h1 runs iperf3 (unless not `compete`); returns (iperf3
    Mbit/s or None, publisher report, subscriber report, whether the sync outlasted the iperf3 flow)."""
    secret = write_secret(tmp_path / "secret")
    address = run_testbed("addr", "h0").stdout.strip() + f":{PORT}"
    h1 = run_testbed("addr", "h1").stdout.strip()
    pub = procs.start_on("h0", "publish", "--model-bytes", f"{MODEL_BYTES >> 20}MiB", "--listen", address,
                         "--secret-file", secret, "--subscribers", 1, "--versions", 1, "--transport", "tcp",
                         "--json", "--quiet")
    sub = procs.start_on("h1", "subscribe", "--connect", address, "--secret-file", secret, "--name", "h1",
                         "--transport", "tcp", "--versions", 1, "--timeout", 120, "--json", "--quiet",
                         *subscribe_extra)
    mbit, outlasted = None, True
    if compete:
        server = procs.run_argv([str(TESTBED), "exec", "h1", "iperf3", "-s", "-1", "-p", str(IPERF_PORT)])
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
    code, out = procs.finish(sub)
    assert code == 0, out
    sub_report, _ = json.JSONDecoder().raw_decode(out[out.index("{"):])
    return mbit, report, sub_report, outlasted


@pytest.mark.parametrize("how", ["uncapped", "cap", "background"])
def test_a_sync_shares_its_link_and_yields_under_a_cap_or_a_priority(tmp_path, procs, testbed, how):
    testbed(3, "--rate", f"{RATE_MBIT}mbit")
    cap_gbps = 0.03
    extra = {"uncapped": [], "cap": ["--max-gbps", cap_gbps], "background": ["--priority", "background"]}[how]
    mbit, report, sub_report, outlasted = sync_beside_iperf(tmp_path, procs, extra)
    (version,) = report["versions"]
    (sub,) = version["subscribers"]
    (fetched,) = sub_report["versions"]
    sync_mbit = version["bytes"] * 8 / 1e6 / sub["fetch_s"]
    print(f"{how}: competing flow {mbit:.1f} Mbit/s of {RATE_MBIT}; sync {sub['fetch_s']:.2f} s, "
          f"{sync_mbit:.1f} Mbit/s on average, yielded {fetched['yields']} time(s); outlasted the competing "
          f"flow: {outlasted}")
    assert sub["verified"] and sub["committed"], version
    assert outlasted, "the sync ended before the competing flow: the two did not share the link throughout"
    if how == "cap":
        assert mbit >= 0.6 * RATE_MBIT, mbit
        assert sub["fetch_s"] >= 0.9 * version["bytes"] * 8 / (cap_gbps * 1e9), sub
    elif how == "background":
        assert fetched["yields"] >= 1, fetched
        assert mbit >= 0.75 * RATE_MBIT, mbit
    else:
        assert fetched["yields"] == 0, fetched
        assert mbit >= 0.25 * RATE_MBIT, mbit


def test_a_background_sync_alone_on_its_link_never_yields(tmp_path, procs, testbed):
    testbed(2, "--rate", f"{RATE_MBIT}mbit")
    _, report, sub_report, _ = sync_beside_iperf(tmp_path, procs, ["--priority", "background"], compete=False)
    (version,) = report["versions"]
    (sub,) = version["subscribers"]
    (fetched,) = sub_report["versions"]
    bound = version["bytes"] * 8 / (RATE_MBIT * 1e6)
    print(f"background, alone: sync {sub['fetch_s']:.2f} s against {bound:.2f} s at the link's rate; yielded "
          f"{fetched['yields']} time(s)")
    assert sub["verified"] and sub["committed"], version
    assert fetched["yields"] == 0, fetched
