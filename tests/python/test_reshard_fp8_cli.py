"""`weightport reshard --convert GLOB=f8e4m3`: bf16 sources quantise the matching matrices to float8
e4m3fn in 128x128 blocks as they publish; e4m3 bytes and block scales travel down a relay chain, and
every destination's file holds, per shard, the e4m3 values and a "<tensor>_scale_inv" entry that
match an independent quantisation with PyTorch (amax / 448 per block, then a cast to
torch.float8_e4m3fn), bit for bit. Every process started here is stopped by its pid."""
import json

import pytest

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")
import safetensors.torch  # noqa: E402

from fp8_reference import BLOCK, expand, quantise  # noqa: E402
from test_reshard_cli import columns_replicated, flat_placement, rows_placement, run_plan, tiny_model  # noqa: E402

QUANTISED = "*_proj.weight"


def planned_wire_bytes(dst, wire_bytes):
    """What the plan moves: wire_bytes(tensor, shard lengths, elements) summed over every shard of dst."""
    wire = 0
    for r in dst["ranks"]:
        for sh in r["shards"]:
            n = 1
            for length in sh["length"]:
                n *= length
            wire += wire_bytes(sh["tensor"], sh["length"], n)
    return wire


def written_shards(path):
    """A destination's file: its tensors by entry, and the weightport.shards index."""
    got = safetensors.torch.load_file(str(path))
    with safetensors.safe_open(str(path), framework="pt") as f:
        return got, json.loads(f.metadata()["weightport.shards"])


@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("model_bf16"), "bf16", safetensors.torch.load_file)


@pytest.mark.parametrize("sources", ["block rows", "flat"])
def test_quantising_to_fp8_in_flight_through_relays_matches_torch(tmp_path, procs, bf16_model, sources):
    """Sources on block boundaries quantise as they publish; FSDP-style flat sources send bf16 and each
    destination quantises its whole shard. Either way the files hold the same e4m3 values and scales."""
    model_dir, source = bf16_model
    at_sources = sources == "block rows"
    src = rows_placement(source, 2, dtype="bf16", unit=BLOCK) if at_sources else flat_placement(source, 3, "bf16")
    dst = columns_replicated(source, 2, 2, dtype="bf16", unit=BLOCK)
    outs, summary = run_plan(tmp_path, procs, model_dir, src, dst, "tcp", fanout=1, versions=2,
                             extra=("--convert", f"{QUANTISED}=f8e4m3"))
    def wire_bytes(tensor, lengths, n):  # e4m3 and 4 bytes per block where the sources quantise, else bf16
        if tensor.endswith("_proj.weight") and at_sources:
            return n + 4 * (-(-lengths[0] // BLOCK)) * (-(-lengths[1] // BLOCK))
        return 2 * n

    assert summary["versions"][-1]["bytes"] == planned_wire_bytes(dst, wire_bytes)
    quantised = 0
    for path in outs.values():
        got, index = written_shards(path)
        entries = {e["entry"]: e for e in index}
        for e in index:
            name = e["tensor"]
            if name.endswith("_scale_inv"):
                assert e["entry"].replace("_scale_inv", "", 1) in entries, e  # beside its weight
                continue
            want = source[name][tuple(slice(s, s + n) for s, n in zip(e["start"], e["length"]))]
            have = got[e["entry"]]
            if not name.endswith("_proj.weight"):
                assert have.dtype == torch.bfloat16 and torch.equal(have, want), e["entry"]
                continue
            assert have.dtype == torch.float8_e4m3fn, e["entry"]
            q, scales = quantise(want)
            assert torch.equal(have.view(torch.uint8), q), e["entry"]
            scale_entry = name + "_scale_inv" + e["entry"][len(name):]
            assert torch.equal(got[scale_entry], scales), scale_entry
            # And it dequantises to the weights within e4m3's rounding (3 mantissa bits).
            full = expand(scales, list(want.shape))
            err = (have.float() * full - want.float()).abs()
            assert bool((err <= want.float().abs() / 16 + full / 512).all()), e["entry"]
            quantised += 1
    assert quantised > 0


@pytest.mark.parametrize("sources", ["flat", "one whole"])
def test_per_tensor_scales_in_flight_match_torch(tmp_path, procs, bf16_model, sources):
    """--convert GLOB=f8e4m3:tensor: one scale per tensor (amax / 448 over the whole tensor), for
    destinations that hold each tensor whole; quantised at a source holding it whole, else at each
    destination. A destination layout that splits such a tensor is refused naming it."""
    from fp8_reference import quantise_per_tensor

    model_dir, source = bf16_model
    one = sources == "one whole"
    src = rows_placement(source, 1, dtype="bf16") if one else flat_placement(source, 3, "bf16")
    dst = columns_replicated(source, 2, 1, dtype="bf16")
    outs, summary = run_plan(tmp_path, procs, model_dir, src, dst, "tcp", fanout=1, versions=2,
                             extra=("--convert", f"{QUANTISED}=f8e4m3:tensor"))
    wire = planned_wire_bytes(dst, lambda tensor, _, n: n + 4 if tensor.endswith("_proj.weight") and one else 2 * n)
    assert summary["versions"][-1]["bytes"] == wire
    quantised = 0
    for path in outs.values():
        got, index = written_shards(path)
        for e in index:
            name = e["tensor"]
            if not name.endswith("_proj.weight"):
                continue
            have = got[e["entry"]]
            assert have.dtype == torch.float8_e4m3fn, e["entry"]
            q, scale = quantise_per_tensor(source[name])
            assert torch.equal(have.view(torch.uint8), q), e["entry"]
            assert torch.equal(got[name + "_scale_inv" + e["entry"][len(name):]], scale), e["entry"]
            quantised += 1
    assert quantised > 0


def test_per_tensor_scales_for_a_split_tensor_are_refused(tmp_path, bf16_model):
    import subprocess

    from cli_procs import BIN

    def wp(*args):
        return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=60)

    _, source = bf16_model
    (tmp_path / "src.json").write_text(json.dumps(flat_placement(source, 3, "bf16")))
    (tmp_path / "dst.json").write_text(json.dumps(columns_replicated(source, 2, 2, dtype="bf16", unit=BLOCK)))
    r = wp("plan", "--src", tmp_path / "src.json", "--dst", tmp_path / "dst.json",
           "--convert", f"{QUANTISED}=f8e4m3:tensor")
    assert r.returncode != 0
    assert "_proj.weight" in r.stderr and "whole tensor" in r.stderr, r.stderr
    r = wp("plan", "--src", tmp_path / "src.json", "--dst", tmp_path / "dst.json", "--convert", "*=bf16:tensor")
    assert r.returncode != 0 and "only f8e4m3 takes a scaling" in r.stderr, r.stderr
