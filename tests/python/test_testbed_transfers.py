"""weightport across testbed hosts (network namespaces on this machine, scripts/testbed): a publisher
and its subscribers on different hosts, over a clean link and over one with 20 ms delay and 0.5%
loss; and a reshard whose sources and relaying destinations are on four hosts. Every received byte
is compared with the source checkpoint (read with the reference `safetensors` package).

Every process started here is stopped by its pid; every wait is bounded; the hosts are always
taken down.
"""
import json
import subprocess

import pytest

np = pytest.importorskip("numpy")
safetensors = pytest.importorskip("safetensors")
import safetensors.numpy  # noqa: E402

from cli_procs import BIN, TIMEOUT, json_line, run_testbed, write_secret  # noqa: E402
from shard_check import check_out  # noqa: E402

PORT = 7411  # each host is a fresh namespace: no other listener can hold it


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    out = tmp_path_factory.mktemp("model")
    gen = subprocess.run([str(BIN), "gen-model", "--preset", "tiny", "--dtype", "f16", "--shards", "2", "-q",
                          "--out", str(out)], capture_output=True, text=True, timeout=TIMEOUT)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    tensors = {}
    for f in sorted(out.glob("*.safetensors")):
        tensors.update(safetensors.numpy.load_file(str(f)))
    return out, tensors


def publish_to_two_hosts(tmp_path, procs, model_dir, versions):
    secret = write_secret(tmp_path / "secret")
    coordinator = run_testbed("addr", "h0").stdout.strip() + f":{PORT}"
    pub = procs.start_on("h0", "publish", "--model", model_dir, "--listen", coordinator, "--secret-file", secret,
                         "--subscribers", 2, "--versions", versions, "--perturb", 0, "--transport", "tcp", "--json")
    subs = [procs.start_on(f"h{i}", "subscribe", "--connect", coordinator, "--secret-file", secret, "--name",
                           f"h{i}", "--out", tmp_path / f"out{i}.safetensors", "--transport", "tcp", "--timeout", 120, "--quiet")
            for i in (1, 2)]
    code, out = procs.finish(pub)
    assert code == 0, out
    report = json.loads(out[out.rfind("\n{") + 1:])  # the --json report ends the output
    assert [v["subscribers_verified"] for v in report["versions"]] == [2] * versions, report
    for s in subs:
        code, out = procs.finish(s)
        assert code == 0, out
    return report


def assert_byte_equal(path, source):
    got = safetensors.numpy.load_file(str(path))
    assert set(got) == set(source)
    for name, array in source.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape, name
        assert got[name].tobytes() == array.tobytes(), name


def test_publisher_and_subscribers_on_three_hosts(tmp_path, procs, testbed, model):
    testbed(3, "--rate", "1gbit")
    model_dir, source = model
    publish_to_two_hosts(tmp_path, procs, model_dir, versions=2)
    for i in (1, 2):
        assert_byte_equal(tmp_path / f"out{i}.safetensors", source)


def test_subscribers_behind_20ms_delay_and_half_a_percent_loss(tmp_path, procs, testbed, netem_built, model):
    testbed(3, "--rate", "1gbit")
    for host in ("h0", "h1", "h2"):
        run_testbed("shape", host, "--rate", "1gbit", "--delay", "20ms", "--loss", "0.5%")
    model_dir, source = model
    publish_to_two_hosts(tmp_path, procs, model_dir, versions=1)
    for i in (1, 2):
        assert_byte_equal(tmp_path / f"out{i}.safetensors", source)
    status = run_testbed("status").stdout
    assert status.count("delay 20.000 ms, loss 0.0050") == 3, status


def rows(tensors, parts, part):
    """Rows [start, start + n) of dim 0 of every tensor for `part` of `parts` (first ones larger)."""
    shards = []
    for name, a in sorted(tensors.items()):
        base, extra = divmod(a.shape[0], parts)
        start = part * base + min(part, extra)
        n = base + (1 if part < extra else 0)
        shards.append({"tensor": name, "start": [start] + [0] * (a.ndim - 1), "length": [n] + list(a.shape[1:])})
    return shards


def test_reshard_with_relays_across_four_hosts(tmp_path, procs, testbed, model):
    """Two source ranks (h0, h1) each hold half the rows; two replicas (h2, h3) each need everything,
    and with fan-out 1 one replica relays to the other."""
    testbed(4, "--rate", "1gbit")
    model_dir, source = model
    table = [{"name": n, "dtype": "f16", "shape": list(a.shape)} for n, a in sorted(source.items())]
    src = {"tensors": table, "ranks": [{"rank": r, "shards": rows(source, 2, r)} for r in range(2)]}
    dst = {"tensors": table, "ranks": [{"rank": r, "shards": rows(source, 1, 0)} for r in range(2)]}
    (tmp_path / "src.json").write_text(json.dumps(src))
    (tmp_path / "dst.json").write_text(json.dumps(dst))
    secret = write_secret(tmp_path / "secret")
    coordinator = run_testbed("addr", "h0").stdout.strip() + f":{PORT}"
    common = ["--src", tmp_path / "src.json", "--dst", tmp_path / "dst.json", "--coordinator", coordinator,
              "--secret-file", secret, "--versions", 2, "--transport", "tcp", "--relay-fanout", 1, "--timeout-s", 120,
              "--model", model_dir, "--json"]
    coord = procs.start_on("h0", "reshard", "--role", "coordinator", *common)
    ranks = [procs.start_on(f"h{r}", "reshard", "--role", "src", "--rank", r, *common) for r in range(2)]
    ranks += [procs.start_on(f"h{2 + r}", "reshard", "--role", "dst", "--rank", r, "--verify", "--out",
                             tmp_path / f"dst{r}.safetensors", *common) for r in range(2)]
    code, out = procs.finish(coord)
    assert code == 0, out
    summary = json_line(out)
    assert [v["committed"] for v in summary["versions"]] == [True, True]
    for p in ranks:
        code, out = procs.finish(p)
        assert code == 0, out
    for r in range(2):
        assert check_out(tmp_path / f"dst{r}.safetensors", source) == len(source)
