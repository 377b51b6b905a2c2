"""Cross-checks weightport's safetensors reader and writer against the reference implementation.

The reference (`safetensors` from PyPI) writes files that `weightport inspect --json` must describe
exactly; `weightport convert` output must load in the reference with every byte and header field
equal to the source; malformed files must make `inspect` fail with the file named.

The binary is $WEIGHTPORT_BIN, or build/weightport under the repository root.
"""
import ctypes
import json
import pathlib
import struct
import subprocess

import pytest

np = pytest.importorskip("numpy")
safetensors = pytest.importorskip("safetensors")
xxhash = pytest.importorskip("xxhash")
import safetensors.numpy  # noqa: E402

from cli_procs import run_cli  # noqa: E402

NUMPY_DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8",
                "uint64", "uint32", "uint16", "uint8", "bool"]
# Reference TensorSpec dtype name -> (safetensors header name, weightport short name, item size).
RAW_DTYPES = {"bfloat16": ("BF16", "bf16", 2), "float8_e4m3fn": ("F8_E4M3", "f8e4m3", 1),
              "float8_e5m2": ("F8_E5M2", "f8e5m2", 1)}
SHORT_NAMES = {"F64": "f64", "F32": "f32", "F16": "f16", "BF16": "bf16", "F8_E4M3": "f8e4m3",
               "F8_E5M2": "f8e5m2", "I64": "i64", "I32": "i32", "I16": "i16", "I8": "i8", "U64": "u64",
               "U32": "u32", "U16": "u16", "U8": "u8", "BOOL": "bool"}
SHAPES = [(), (0,), (3, 0), (1,), (7,), (2, 3), (3, 1, 4)]


def run(*args, check=True):
    return run_cli(*args, check=check)


def inspect(path):
    return json.loads(run("inspect", path, "--json").stdout)


def read_header(path):
    """The header exactly as the file holds it: (json dict, data area start)."""
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), 8 + n


def reference_tensors(path):
    """name -> (header dtype, shape, bytes), as the reference reads the file."""
    out = {}
    for name, t in safetensors.deserialize(pathlib.Path(path).read_bytes()):
        out[name] = (t["dtype"], list(t["shape"]), bytes(t["data"]))
    return out


def reference_metadata(path):
    with safetensors.safe_open(str(path), framework="np") as f:
        return f.metadata() or {}


def random_array(rng, dtype, shape):
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith("float"):
        return rng.standard_normal(size=shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def write_raw_dtypes(path, rng, metadata=None, prefix=""):
    """BF16 and F8 tensors through the reference's raw serializer (numpy has no such dtypes)."""
    keep, specs = [], {}
    for dtype, (_, _, size) in RAW_DTYPES.items():
        for i, shape in enumerate(SHAPES):
            n = int(np.prod(shape, dtype=np.int64)) * size
            buf = ctypes.create_string_buffer(rng.bytes(n), max(n, 1))
            keep.append(buf)
            specs[f"{prefix}{dtype}.{i}"] = safetensors.TensorSpec(
                dtype=dtype, shape=list(shape), data_ptr=ctypes.addressof(buf), data_len=n)
    safetensors.serialize_file(specs, str(path), metadata=metadata)


def write_numpy_dtypes(path, rng, metadata=None, prefix=""):
    tensors = {f"{prefix}{dtype}.{i}": random_array(rng, dtype, shape)
               for dtype in NUMPY_DTYPES for i, shape in enumerate(SHAPES)}
    safetensors.numpy.save_file(tensors, str(path), metadata=metadata)


def check_inspect_matches_reference(report, files):
    """`report` is inspect's JSON; `files` the reference-written shard paths."""
    assert report["files"] == [pathlib.Path(f).name for f in files]
    expected = []
    for f in files:
        header, start = read_header(f)
        data = pathlib.Path(f).read_bytes()
        ref = reference_tensors(f)
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            dtype, shape, raw = ref[name]
            assert (dtype, shape) == (entry["dtype"], entry["shape"])
            assert raw == data[start + begin:start + end]
            expected.append((name, {
                "dtype": SHORT_NAMES[dtype], "safetensors_dtype": dtype, "shape": shape, "bytes": len(raw),
                "file": pathlib.Path(f).name, "data_offsets": [begin, end],
                "xxh3": xxhash.xxh3_64_hexdigest(raw)}))
    got = {t["name"]: {k: v for k, v in t.items() if k != "name"} for t in report["tensors"]}
    assert len(got) == len(report["tensors"]) == report["num_tensors"] == len(expected)
    for name, want in expected:
        assert got[name] == want, name
    assert report["total_bytes"] == sum(w["bytes"] for _, w in expected)
    assert report["metadata"] == reference_metadata(files[0])


@pytest.mark.parametrize("kind", ["numpy", "raw", "no_metadata"])
def test_inspect_matches_reference_file(tmp_path, kind):
    rng = np.random.default_rng(7)
    path = tmp_path / f"{kind}.safetensors"
    metadata = None if kind == "no_metadata" else {"format": "pt", "note": "ünïcödé \"q\"", "empty": ""}
    if kind == "raw":
        write_raw_dtypes(path, rng, metadata)
    else:
        write_numpy_dtypes(path, rng, metadata)
    report = inspect(path)
    assert report["path"] == str(path)
    check_inspect_matches_reference(report, [path])


def test_inspect_matches_reference_sharded_directory(tmp_path):
    rng = np.random.default_rng(11)
    shards = [tmp_path / "model-00001-of-00002.safetensors", tmp_path / "model-00002-of-00002.safetensors"]
    write_numpy_dtypes(shards[0], rng, {"format": "pt"}, prefix="a.")
    write_raw_dtypes(shards[1], rng, {"other": "x"}, prefix="b.")
    weight_map = {name: s.name for s in shards for name, _ in safetensors.deserialize(s.read_bytes())}
    total = sum(len(t[2]) for s in shards for t in reference_tensors(s).values())
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    check_inspect_matches_reference(inspect(tmp_path), shards)


@pytest.mark.parametrize("shards", [1, 3])
def test_convert_output_loads_in_reference(tmp_path, shards):
    rng = np.random.default_rng(shards)
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    metadata = {"format": "pt", "source": "reference"}
    write_numpy_dtypes(src_dir / "a.safetensors", rng, metadata)
    write_raw_dtypes(src_dir / "b.safetensors", rng, {"ignored": "second shard"})
    source = {**reference_tensors(src_dir / "a.safetensors"), **reference_tensors(src_dir / "b.safetensors")}

    out = tmp_path / "out"
    args = ["convert", src_dir, out, "--quiet"] + (["--shards", shards] if shards > 1 else [])
    run(*args)
    if shards == 1:
        files = [out / "model.safetensors"]
        assert not (out / "model.safetensors.index.json").exists()
    else:
        files = [out / f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
        index = json.loads((out / "model.safetensors.index.json").read_text())
        assert index["metadata"]["total_size"] == sum(len(t[2]) for t in source.values())
        assert set(index["weight_map"]) == set(source)
    assert sorted(out.glob("*.safetensors")) == sorted(files)

    converted = {}
    for f in files:
        tensors = reference_tensors(f)  # the reference accepts every shard
        assert not set(tensors) & set(converted), "a tensor is in two shards"
        converted.update(tensors)
        if shards > 1:
            assert all(index["weight_map"][name] == f.name for name in tensors)
        header, _ = read_header(f)
        assert header.get("__metadata__", {}) == metadata  # the first input shard's metadata
        assert reference_metadata(f) == metadata
    assert converted.keys() == source.keys()
    for name, (dtype, shape, data) in source.items():
        assert converted[name] == (dtype, shape, data), name
    # And our own reader agrees with the reference about the files we wrote.
    check_inspect_matches_reference(inspect(out), files)


def _file(header, data=b""):
    h = header.encode()
    return struct.pack("<Q", len(h)) + h + data


ENTRY = '{"dtype":"F32","shape":[2],"data_offsets":[%d,%d]}'
MALFORMED = {
    "short": b"\x01\x02\x03",
    "header_past_end": struct.pack("<Q", 1000) + b"{}",
    "not_json": _file('{"w": nope}'),
    "size_mismatch": _file('{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}', bytes(20)),
    "overlap": _file('{"a":%s,"b":%s}' % (ENTRY % (0, 8), ENTRY % (4, 12)), bytes(12)),
    "duplicate": _file('{"a":%s,"a":%s}' % (ENTRY % (0, 8), ENTRY % (0, 8)), bytes(8)),
    "trailing_bytes": _file('{"a":%s}' % (ENTRY % (0, 8)), bytes(9)),
    "bad_metadata": _file('{"__metadata__":{"k":1}}'),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_inspect_rejects_malformed_file(tmp_path, case):
    path = tmp_path / f"broken_{case}.safetensors"
    path.write_bytes(MALFORMED[case])
    if case not in ("duplicate",):  # the reference silently keeps the last duplicate
        with pytest.raises(Exception):
            safetensors.deserialize(MALFORMED[case])
    proc = run("inspect", path, "--json", check=False)
    assert proc.returncode == 1, proc.stdout
    assert path.name in proc.stderr
