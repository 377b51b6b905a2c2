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
    wire = 0  # what the plan moves: e4m3 and 4 bytes per block where the sources quantise, else bf16
    for r in dst["ranks"]:
        for sh in r["shards"]:
            n = 1
            for length in sh["length"]:
                n *= length
            if sh["tensor"].endswith("_proj.weight") and at_sources:
                blocks = (-(-sh["length"][0] // BLOCK)) * (-(-sh["length"][1] // BLOCK))
                wire += n + 4 * blocks
            else:
                wire += 2 * n
    assert summary["versions"][-1]["bytes"] == wire
    quantised = 0
    for path in outs.values():
        got = safetensors.torch.load_file(str(path))
        with safetensors.safe_open(str(path), framework="pt") as f:
            index = json.loads(f.metadata()["weightport.shards"])
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
