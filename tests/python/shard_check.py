"""Compares what a reshard destination wrote (a safetensors file whose metadata "weightport.shards"
indexes each entry's tensor and slice) with the source checkpoint's tensors."""
import json

import numpy as np
import safetensors
import safetensors.numpy


def check_out(path, source):
    got = safetensors.numpy.load_file(str(path))
    with safetensors.safe_open(str(path), framework="np") as f:
        index = json.loads(f.metadata()["weightport.shards"])
    assert len(index) == len(got)
    for e in index:
        whole = source[e["tensor"]]
        if "flat" in e:
            start, n = e["flat"]
            expected = whole.reshape(-1)[start:start + n]
        else:
            expected = whole[tuple(slice(s, s + n) for s, n in zip(e["start"], e["length"]))]
        assert got[e["entry"]].tobytes() == np.ascontiguousarray(expected).tobytes(), e["entry"]
    return len(index)
