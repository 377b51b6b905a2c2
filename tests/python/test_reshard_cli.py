"""End-to-end checks of `weightport reshard`: M source processes and N destination processes with
different layouts run one plan under a coordinator process; every destination writes the shards it
ended with, and every byte must equal the matching slice of the source checkpoint (read with the
reference `safetensors` package). Also: a rank that compiled a different plan is refused by name.

Every process started here is stopped by its pid; every wait is bounded.
"""
import json
import shutil
import subprocess

import pytest

np = pytest.importorskip("numpy")
safetensors = pytest.importorskip("safetensors")
import safetensors.numpy  # noqa: E402

from cli_procs import BIN, REPO, TIMEOUT, free_port, json_line, write_secret  # noqa: E402
from shard_check import check_out  # noqa: E402


def tiny_model(out, dtype, load_file):
    """`gen-model --preset tiny --dtype DTYPE` written to `out`, and its tensors read with `load_file`."""
    gen = subprocess.run([str(BIN), "gen-model", "--preset", "tiny", "--dtype", dtype, "-q", "--out", str(out)],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    tensors = {}
    for f in sorted(out.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    return out, tensors


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("model"), "f16", safetensors.numpy.load_file)


def split(extent, parts, unit=1):
    """Megatron-style: the first parts get one more `unit` (the last may be cut short by `extent`)."""
    base, extra = divmod(-(-extent // unit), parts)
    out, start = [], 0
    for i in range(parts):
        n = min((base + (1 if i < extra else 0)) * unit, extent - start)
        out.append((start, n))
        start += n
    return out


def table(tensors, dtype="f16"):
    return [{"name": n, "dtype": dtype, "shape": list(a.shape)} for n, a in sorted(tensors.items())]


def rows_placement(tensors, ranks, dtype="f16", unit=1):
    """Each rank holds a block of dim 0 of every tensor."""
    out = []
    for r in range(ranks):
        shards = []
        for name, a in sorted(tensors.items()):
            start, n = split(a.shape[0], ranks, unit)[r]
            shards.append({"tensor": name, "start": [start] + [0] * (a.ndim - 1), "length": [n] + list(a.shape[1:])})
        out.append({"rank": r, "shards": shards})
    return {"tensors": table(tensors, dtype), "ranks": out}


def flat_placement(tensors, ranks, dtype="f16"):
    """FSDP-like: each rank holds a contiguous range of every tensor's flat elements."""
    out = []
    for r in range(ranks):
        shards = []
        for name, a in sorted(tensors.items()):
            start, n = split(int(np.prod(a.shape)), ranks)[r]
            shards.append({"tensor": name, "flat": [start, n]})
        out.append({"rank": r, "shards": shards})
    return {"tensors": table(tensors, dtype), "ranks": out}


def columns_replicated(tensors, replicas, tp, dtype="f16", unit=1):
    """`replicas` copies of a split of the last dim over `tp` ranks; 1-D tensors whole on each."""
    out = []
    for rep in range(replicas):
        for t in range(tp):
            shards = []
            for name, a in sorted(tensors.items()):
                if a.ndim < 2:
                    shards.append({"tensor": name, "start": [0], "length": [a.shape[0]]})
                    continue
                start, n = split(a.shape[-1], tp, unit)[t]
                shards.append({"tensor": name, "start": [0] * (a.ndim - 1) + [start],
                               "length": list(a.shape[:-1]) + [n]})
            out.append({"rank": rep * tp + t, "shards": shards})
    return {"tensors": table(tensors, dtype), "ranks": out}


def run_plan(tmp_path, procs, model_dir, src, dst, transport, fanout, versions=3, extra=()):
    (tmp_path / "src.json").write_text(json.dumps(src))
    (tmp_path / "dst.json").write_text(json.dumps(dst))
    secret = write_secret(tmp_path / "secret")
    port = free_port()
    common = ["--src", tmp_path / "src.json", "--dst", tmp_path / "dst.json", "--coordinator", f"127.0.0.1:{port}",
              "--secret-file", secret, "--versions", versions, "--transport", transport, "--chunk-kb", "64",
              "--relay-fanout", fanout, "--timeout-s", "120", "--json", *extra]
    coord = procs.start("reshard", "--role", "coordinator", *common)
    ranks = [procs.start("reshard", "--role", "src", "--rank", r["rank"], "--model", model_dir, *common)
             for r in src["ranks"]]
    outs = {r["rank"]: tmp_path / f"dst{r['rank']}.safetensors" for r in dst["ranks"]}
    dsts = [procs.start("reshard", "--role", "dst", "--rank", r, "--model", model_dir, "--verify", "--out", o, *common)
            for r, o in outs.items()]
    code, out = procs.finish(coord)
    assert code == 0, out
    summary = json_line(out)
    assert [v["committed"] for v in summary["versions"]] == [True] * versions
    summary["rank_reports"] = []
    for p in ranks + dsts:
        code, out = procs.finish(p)
        assert code == 0, out
        report = json_line(out)
        assert report["ok"], report
        summary["rank_reports"].append(report)
    return outs, summary


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_rows_to_flat_every_byte(tmp_path, procs, model, transport):
    model_dir, source = model
    outs, summary = run_plan(tmp_path, procs, model_dir, rows_placement(source, 2), flat_placement(source, 3),
                             transport, fanout=0)
    assert summary["versions"][-1]["bytes"] == sum(a.nbytes for a in source.values())
    for path in outs.values():
        assert check_out(path, source) == len(source)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_flat_to_replicated_columns_through_relays(tmp_path, procs, model, transport):
    model_dir, source = model
    dst = columns_replicated(source, 2, 2)
    outs, summary = run_plan(tmp_path, procs, model_dir, flat_placement(source, 3), dst, transport, fanout=1)
    held = sum(2 * int(np.prod(sh["length"])) for r in dst["ranks"] for sh in r["shards"])  # f16
    assert summary["versions"][-1]["bytes"] == held
    for path in outs.values():
        check_out(path, source)


def test_shards_on_a_device_are_published_from_there_and_land_there(tmp_path, procs, model):
    """--device stand-in (host memory playing a GPU): each source writes its versions only to its
    device copy, so what arrives came through Publish's copy from there; each destination's --verify
    checks its device copy as well as its arena, every version."""
    model_dir, source = model
    dst = columns_replicated(source, 2, 2)
    outs, summary = run_plan(tmp_path, procs, model_dir, flat_placement(source, 3), dst,
                             "tcp", fanout=1, versions=3, extra=("--device", "stand-in"))
    dsts = [r for r in summary["rank_reports"] if r["role"] == "dst"]
    assert len(dsts) == 4
    for r in (r for r in summary["rank_reports"] if r["role"] == "src"):  # every version changes it all
        assert all(v["from_device_bytes"] > 0 for v in r["versions"]), r
    for r in dsts:
        held = sum(2 * int(np.prod(sh["length"])) for sh in dst["ranks"][r["rank"]]["shards"])  # f16
        assert [v.get("verified") for v in r["versions"]] == [True] * 3, r
        # Every byte of the rank's shards went to its device once per version.
        assert all(v["device_bytes"] == held and v["to_device_s"] >= 0 for v in r["versions"]), (held, r)
    for path in outs.values():
        check_out(path, source)


@pytest.mark.parametrize("transport,fanout", [("shm", 0), ("tcp", 1)])
def test_device_direct_lands_chunks_on_the_device(tmp_path, procs, model, transport, fanout):
    """--device stand-in --device-direct: UCX writes each chunk a destination stores as sent straight
    into its device copy, verified there; a rank that relays a chunk to others stages it in its arena
    and copies it over. Every byte reaches the device once per version either way, and --verify and
    --out read the device copy (the arena does not hold what landed there). The sources publish on
    their devices: UCX reads every chunk they send from there, and nothing crosses to their hosts."""
    model_dir, source = model
    dst = columns_replicated(source, 2, 2)
    outs, summary = run_plan(tmp_path, procs, model_dir, flat_placement(source, 3), dst, transport,
                             fanout=fanout, versions=3, extra=("--device", "stand-in", "--device-direct"))
    srcs = [r for r in summary["rank_reports"] if r["role"] == "src"]
    assert len(srcs) == 3
    for r in srcs:  # no conversion: the host arena's shards are not needed
        assert all(v["from_device_bytes"] == 0 and v["on_device_bytes"] > 0 for v in r["versions"]), r
    dsts = [r for r in summary["rank_reports"] if r["role"] == "dst"]
    assert len(dsts) == 4
    # The first version (no delta yet): with fanout 0 every rank reads all it holds from the
    # sources' devices; with relays each byte the sources published is read from there once.
    first = [r["versions"][0] for r in dsts]
    if fanout == 0:
        held = [sum(2 * int(np.prod(sh["length"])) for sh in dst["ranks"][r["rank"]]["shards"]) for r in dsts]
        assert [v["source_device_bytes"] for v in first] == held, dsts
    else:
        published = sum(r["versions"][0]["on_device_bytes"] for r in srcs)
        assert sum(v["source_device_bytes"] for v in first) == published, (published, dsts)
    for r in dsts:
        held = sum(2 * int(np.prod(sh["length"])) for sh in dst["ranks"][r["rank"]]["shards"])  # f16
        assert [v.get("verified") for v in r["versions"]] == [True] * 3, r
        assert all(v["device_direct_bytes"] + v["device_bytes"] == held for v in r["versions"]), (held, r)
    versions = [v for r in dsts for v in r["versions"]]
    if fanout == 0:  # nobody relays: everything direct
        assert all(v["device_bytes"] == 0 for v in versions), dsts
    else:  # what a rank passes on down its chain is staged, the rest direct
        assert any(v["device_bytes"] > 0 for v in versions), dsts
    assert sum(v["device_direct_bytes"] for v in versions) > 0, dsts
    for path in outs.values():
        check_out(path, source)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may be present")
def test_device_cuda_without_a_gpu_says_why(tmp_path):
    """--device cuda where there is no GPU (or no CUDA in the build): the rank stops at once, naming
    the option, before it joins anything."""
    plans = REPO / "examples" / "plans"
    r = subprocess.run([BIN, "reshard", "--role", "dst", "--rank", "0", "--src", plans / "fsdp4.json",
                        "--dst", plans / "tp2x2.json",
                        "--coordinator", "127.0.0.1:9", "--secret-file", str(write_secret(tmp_path / "s")),
                        "--preset", "tiny", "--device", "cuda", "--timeout-s", "5"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode != 0
    assert "--device cuda" in r.stderr, r.stderr


def test_widening_conversion_in_flight_through_relays(tmp_path, procs, model):
    """f16 sources, f32 destinations: f16 travels down the relay chain and each receiver converts;
    the destinations' files hold the source's values as f32, every element."""
    model_dir, source = model
    dst = columns_replicated(source, 2, 2)
    outs, summary = run_plan(tmp_path, procs, model_dir, flat_placement(source, 3), dst, "tcp", fanout=1,
                             versions=2, extra=("--convert", "*=f32"))
    held = sum(int(np.prod(sh["length"])) for r in dst["ranks"] for sh in r["shards"])
    assert summary["versions"][-1]["bytes"] == 2 * held  # f16 on the wire, 4 bytes stored per element
    widened = {name: a.astype(np.float32) for name, a in source.items()}
    for path in outs.values():
        assert check_out(path, widened) == len(source)


def test_delta_through_relays_fetches_only_changed_blocks(tmp_path, procs, model):
    """--perturb 0.1: after version 1 a destination fetches about a tenth of its bytes and copies the rest
    from its live copy (through a relay chain, every byte checked); --no-delta fetches everything."""
    model_dir, source = model
    dst = columns_replicated(source, 2, 2)
    _, summary = run_plan(tmp_path, procs, model_dir, flat_placement(source, 3), dst, "tcp", fanout=1, versions=3,
                          extra=("--perturb", "0.1"))
    dst_reports = [r for r in summary["rank_reports"] if r["role"] == "dst"]
    for r in dst_reports:
        first, *later = r["versions"]
        assert first["kept_bytes"] == 0 and all(v["verified"] for v in r["versions"])
        for v in later:
            assert v["kept_bytes"] > 0 and v["bytes"] < 0.5 * first["bytes"], v
    assert sum(v["bytes"] for v in summary["versions"][1:]) < 0.5 * summary["versions"][0]["bytes"] * 2
    _, full = run_plan(tmp_path, procs, model_dir, flat_placement(source, 3), dst, "tcp", fanout=1, versions=2,
                       extra=("--perturb", "0.1", "--no-delta"))
    assert full["versions"][1]["bytes"] == full["versions"][0]["bytes"]


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_rotating_keys_moves_every_rank_after_each_version_every_byte(tmp_path, procs, model, transport):
    """--rotate-keys: after each version every rank moves to a fresh transport (new address and key)
    and the relay chain is rebuilt from the new peer table; every byte still arrives, and a delta
    still copies unchanged blocks from the live copy, which never moved."""
    model_dir, source = model
    dst = columns_replicated(source, 2, 2)
    _, summary = run_plan(tmp_path, procs, model_dir, flat_placement(source, 3), dst, transport, fanout=1,
                          versions=3, extra=("--rotate-keys", "--perturb", "0.1"))
    assert all(v["rekey_s"] > 0 for v in summary["versions"]), summary["versions"]
    dst_reports = [r for r in summary["rank_reports"] if r["role"] == "dst"]
    assert len(dst_reports) == 4
    for r in dst_reports:  # --verify: every byte of every version against the model
        assert [v["verified"] for v in r["versions"]] == [True] * 3, r
        assert r["versions"][-1]["kept_bytes"] > 0, r


def test_layout_specs_fsdp_to_replicated_tp(tmp_path, procs, model):
    """The layout specs of examples/plans: FSDP1 over 4 source ranks -> 2 replicas x TP 2."""
    model_dir, source = model
    plans = REPO / "examples" / "plans"
    secret = write_secret(tmp_path / "secret")
    port = free_port()
    common = ["--src", plans / "fsdp4.json", "--dst", plans / "tp2x2.json", "--coordinator", f"127.0.0.1:{port}",
              "--secret-file", secret, "--versions", "2", "--chunk-kb", "256", "--model", model_dir,
              "--timeout-s", "120", "--json"]
    coord = procs.start("reshard", "--role", "coordinator", *common)
    ranks = [procs.start("reshard", "--role", "src", "--rank", r, *common) for r in range(4)]
    outs = [tmp_path / f"dst{r}.safetensors" for r in range(4)]
    ranks += [procs.start("reshard", "--role", "dst", "--rank", r, "--verify", "--out", outs[r], *common)
              for r in range(4)]
    code, out = procs.finish(coord)
    assert code == 0, out
    for p in ranks:
        code, out = procs.finish(p)
        assert code == 0, out
    for path in outs:
        check_out(path, source)


def test_rank_with_a_different_plan_is_refused_by_name(tmp_path, procs, model):
    model_dir, source = model
    src, dst = rows_placement(source, 1), rows_placement(source, 1)
    (tmp_path / "src.json").write_text(json.dumps(src))
    (tmp_path / "dst.json").write_text(json.dumps(dst))
    (tmp_path / "other.json").write_text(json.dumps(flat_placement(source, 1)))
    secret = write_secret(tmp_path / "secret")
    port = free_port()
    common = ["--coordinator", f"127.0.0.1:{port}", "--secret-file", secret, "--versions", "1", "--timeout-s", "5"]
    coord = procs.start("reshard", "--role", "coordinator", "--src", tmp_path / "src.json", "--dst",
                        tmp_path / "dst.json", *common)
    bad = procs.start("reshard", "--role", "dst", "--rank", "0", "--src", tmp_path / "src.json", "--dst",
                      tmp_path / "other.json", "--model", model_dir, *common)
    code, out = procs.finish(bad)
    assert code == 1 and "refused" in out and "dst rank 0" in out, out
    code, out = procs.finish(coord)
    assert code == 1 and "dst rank 0" in out and "different plan" in out, out
