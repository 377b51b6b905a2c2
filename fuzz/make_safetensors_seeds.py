#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors_fuzz target into fuzz/safetensors/.

Valid files come from the reference implementation (the `safetensors` package); near-valid ones
are hand-edited copies that each break one rule the parser checks. Run from anywhere:
    python3 fuzz/make_safetensors_seeds.py
"""
import ctypes
import json
import pathlib
import struct

import numpy as np
import safetensors
import safetensors.numpy

OUT = pathlib.Path(__file__).resolve().parent / "safetensors"


def spec(dtype, shape, data):
    buf = ctypes.create_string_buffer(data, len(data))
    spec.keep.append(buf)  # the reference reads through the raw pointer during serialize()
    return safetensors.TensorSpec(dtype=dtype, shape=shape, data_ptr=ctypes.addressof(buf), data_len=len(data))


spec.keep = []


def raw(header: str, data: bytes = b"") -> bytes:
    h = header.encode()
    return struct.pack("<Q", len(h)) + h + data


def main():
    OUT.mkdir(exist_ok=True)
    for old in OUT.iterdir():
        old.unlink()
    rng = np.random.default_rng(0)
    seeds = {
        "valid_numpy.safetensors": safetensors.numpy.save(
            {
                "embed": rng.standard_normal((4, 3)).astype(np.float32),
                "bias": np.arange(5, dtype=np.int64),
                "half": rng.standard_normal((2, 2)).astype(np.float16),
                "mask": np.array([True, False, True]),
                "scalar": np.array(3.5, dtype=np.float64),
                "empty": np.zeros((0, 4), dtype=np.uint16),
            },
            metadata={"format": "np", "note": "seed"},
        ),
        "valid_bf16_f8.safetensors": safetensors.serialize(
            {
                "w.bf16": spec("bfloat16", [2, 3], bytes(range(12))),
                "w.e4m3": spec("float8_e4m3fn", [4], b"\x01\x7e\x80\xff"),
                "w.e5m2": spec("float8_e5m2", [2, 2], b"\x3c\x7c\xfc\x00"),
                "w.u8": spec("uint8", [3], b"abc"),
            },
            metadata={"format": "pt"},
        ),
        "valid_empty.safetensors": safetensors.serialize({}),
    }
    entry = '{"dtype":"F32","shape":[2],"data_offsets":[%d,%d]}'
    seeds.update(
        {
            "bad_size.safetensors": raw('{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}', bytes(20)),
            "bad_overlap.safetensors": raw('{"a":%s,"b":%s}' % (entry % (0, 8), entry % (4, 12)), bytes(12)),
            "bad_gap.safetensors": raw('{"a":%s,"b":%s}' % (entry % (0, 8), entry % (12, 20)), bytes(20)),
            "bad_duplicate.safetensors": raw('{"a":%s,"a":%s}' % (entry % (0, 8), entry % (0, 8)), bytes(8)),
            "bad_metadata.safetensors": raw('{"__metadata__":{"k":1},"a":%s}' % (entry % (0, 8)), bytes(8)),
            "bad_dtype.safetensors": raw('{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}', bytes(16)),
            "bad_leading_space.safetensors": raw(' {"a":%s}' % (entry % (0, 8)), bytes(8)),
            "bad_trailing.safetensors": raw('{"a":%s}' % (entry % (0, 8)), bytes(9)),
            "bad_overflow.safetensors": raw(
                '{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}'
            ),
            "bad_truncated.safetensors": raw('{"a":%s}' % (entry % (0, 8)), bytes(8))[:-12],
        }
    )
    for name, data in seeds.items():
        (OUT / name).write_bytes(bytes(data))
    # The reference must accept every valid seed.
    for name in seeds:
        if name.startswith("valid"):
            safetensors.deserialize((OUT / name).read_bytes())
    print(f"wrote {len(seeds)} seeds, {sum(len(d) for d in seeds.values())} bytes, to {OUT}")


if __name__ == "__main__":
    main()
