"""Checkpoint writers killed mid-write, and the reader's refusal of partial shard sets.

`weightport convert --force` and `gen-model --force` write the new checkpoint into a temporary
sibling directory and swap it in whole, so a SIGKILL at any moment leaves the old checkpoint or the
new one under the name, complete, never a part; leftovers of killed runs are cleaned by the next
run. `inspect` refuses a shard set whose -i-of-N names say a shard is missing, naming it.

The binary is $WEIGHTPORT_BIN, or build/weightport under the repository root.
"""
import json
import re
import shutil
import signal
import subprocess
import time

import pytest

from cli_procs import BIN, run_cli  # noqa: E402

KILLS = 16          # kills per writer, at delays spread over its run
KILL_BUDGET_S = 45  # and at most this long per writer


def run(*args, check=True):
    return run_cli(*args, check=check)


def contents(path):
    """(file names, {tensor: xxh3}) as `inspect` reads the checkpoint; fails the test if it cannot."""
    proc = run("inspect", "--json", path, check=False)
    assert proc.returncode == 0, f"{path} is not a readable checkpoint: {proc.stderr}"
    j = json.loads(proc.stdout)
    return j["files"], {t["name"]: t["xxh3"] for t in j["tensors"]}


def assert_whole(files, shard_counts):
    """The files are one complete shard set of one of `shard_counts`."""
    n = len(files)
    assert n in shard_counts, files
    if n == 1:
        assert files == ["model.safetensors"], files
    else:
        assert sorted(files) == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)], files


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("src") / "tiny"
    run("gen-model", "--preset", "tiny", "-q", "--out", d)
    return d, contents(d)[1]


def kill_repeatedly(argv_for, target, check):
    """Starts argv_for(i) and SIGKILLs it after a growing delay, KILLS times (bounded by time);
    after each kill runs check(i). Returns how many runs the kill caught before they finished."""
    start = time.monotonic()
    # How long one run takes here: the faster of two, so that a slow first run (cold caches, a busy
    # machine) does not set delays that outlast the later runs.
    full_run = float("inf")
    for _ in range(2):
        started = time.monotonic()
        subprocess.run([str(BIN), *map(str, argv_for(0))], check=True, capture_output=True, timeout=120)
        full_run = min(full_run, time.monotonic() - started)
    caught = 0
    for i in range(1, KILLS + 1):
        if time.monotonic() - start > KILL_BUDGET_S:
            break
        proc = subprocess.Popen([str(BIN), *map(str, argv_for(i))], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(full_run * i / (KILLS + 2))
        proc.send_signal(signal.SIGKILL)
        caught += proc.wait() == -signal.SIGKILL
        check(i)
    # A run that completes cleans what the killed ones left beside the target.
    subprocess.run([str(BIN), *map(str, argv_for(0))], check=True, capture_output=True, timeout=120)
    check(0)
    leftovers = [p.name for p in target.parent.iterdir() if p != target]
    assert leftovers == [], leftovers
    return caught


def test_convert_killed_mid_write_leaves_a_whole_checkpoint(tiny, tmp_path):
    src, want = tiny
    d = tmp_path / "d"
    run("convert", "-q", src, d, "--shards", "2")
    (d / "config.json").write_text("{}")  # not a checkpoint file: must survive the swaps

    def check(_):
        files, got = contents(d)
        assert_whole(files, {2, 3, 4})
        assert got == want
        assert (d / "config.json").read_text() == "{}"

    caught = kill_repeatedly(lambda i: ["convert", "-q", src, d, "--force", "--shards", 3 + i % 2], d, check)
    assert caught >= KILLS // 2, f"only {caught} kills landed before the run finished"


def test_gen_model_killed_mid_write_leaves_a_whole_checkpoint(tiny, tmp_path):
    src, want = tiny
    d = tmp_path / "g"
    run("gen-model", "--preset", "tiny", "-q", "--out", d, "--shards", "2")

    def check(_):
        files, got = contents(d)
        assert_whole(files, {2, 3, 4})
        assert got == want  # the same seed: the same bytes, whatever the sharding

    caught = kill_repeatedly(
        lambda i: ["gen-model", "--preset", "tiny", "-q", "--force", "--out", d, "--shards", 3 + i % 2], d, check)
    assert caught >= KILLS // 2, f"only {caught} kills landed before the run finished"


def test_perturb_killed_mid_write_leaves_a_whole_checkpoint(tiny, tmp_path):
    src, want = tiny
    d = tmp_path / "p"
    run("gen-model", "--from", src, "--perturb", "0.01", "-q", "--out", d, "--shards", "2")
    first = contents(d)[1]
    steps = {}  # shard count -> tensors, as each completed run left them

    def check(_):
        files, got = contents(d)
        assert_whole(files, {2, 3, 4})
        assert got.keys() == want.keys()
        assert got != want  # a perturbed step, not the source or a mix with it
        if len(files) == 2:
            assert got == first
        steps.setdefault(len(files), got)
        assert got == steps[len(files)]  # runs of one shard count write the same bytes (same seed)

    caught = kill_repeatedly(
        lambda i: ["gen-model", "--from", src, "--perturb", "0.01", "-q", "--force", "--out", d, "--shards",
                   3 + i % 2], d, check)
    assert caught >= KILLS // 2, f"only {caught} kills landed before the run finished"


def test_inspect_refuses_a_partial_shard_set(tiny, tmp_path):
    src, _ = tiny
    d = tmp_path / "d"
    run("convert", "-q", src, d, "--shards", "4")
    (d / "model.safetensors.index.json").unlink()
    (d / "model-00003-of-00004.safetensors").unlink()
    proc = run("inspect", d, check=False)
    assert proc.returncode == 1
    assert "checkpoint is incomplete: model-00003-of-00004.safetensors is missing" in proc.stderr, proc.stderr
    # The same with the index in place: it lists tensors in the missing file.
    run("convert", "-q", "--force", src, d, "--shards", "4")
    (d / "model-00002-of-00004.safetensors").unlink()
    proc = run("manifest", d, check=False)
    assert proc.returncode == 1
    assert re.search(r"incomplete: model-00002-of-00004\.safetensors is missing", proc.stderr), proc.stderr
