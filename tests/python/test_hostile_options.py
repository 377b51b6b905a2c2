"""A property of every command: each numeric option (found in its --help) given a negative, zero,
huge, overflowing or non-finite value, under an address-space limit, ends with exit code 0, 1 or 2
(1 or 2, and a message, for a value no option means), never a signal or a hang, and leaves no file
behind when it fails."""
import os
import pathlib
import re
import resource
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from cli_procs import BIN, REPO, free_port, write_secret

MEMORY_LIMIT = 4 << 30  # bytes of address space per run (RLIMIT_AS)
RUN_TIMEOUT = 45        # seconds; a run past this is a hang
# Values no numeric option means: each must be refused.
HOSTILE = ["-1", "nan", "inf", "1e308", "18446744073709551616", "-9223372036854775809"]
# Values some options mean: each must end cleanly either way.
EDGE = ["0", "4294967297"]

# Base arguments that make each command end within seconds on its own, {names} filled in per run.
# An option under test replaces its base value. demo is driven with hostile values only (a valid
# one runs the whole demo).
COMMANDS = {
    ("gen-model",): ["--preset", "tiny", "--out", "{work}/gen", "--quiet"],
    ("inspect",): ["{model}", "--no-hash"],
    ("manifest",): ["{model}"],
    ("convert",): ["{model}", "{work}/converted"],
    ("info",): [],
    ("publish",): ["--preset", "tiny", "--secret-file", "{secret}", "--listen", "127.0.0.1:0", "--wait", "0.2",
                   "--quiet"],
    ("subscribe",): ["--connect", "127.0.0.1:{closed}", "--secret-file", "{secret}", "--wait", "0"],
    ("serve",): ["--listen", "127.0.0.1:0", "--secret-file", "{secret}", "--run-for", "0.2"],
    ("plan",): ["--preset", "tiny", "--src", "{plans}/fsdp4.json", "--dst", "{plans}/tp2x2.json"],
    ("reshard",): ["--role", "coordinator", "--src", "{plans}/fsdp4.json", "--dst", "{plans}/tp2x2.json",
                   "--preset", "tiny", "--coordinator", "127.0.0.1:0", "--timeout-s", "1", "--secret-file",
                   "{secret}"],
    ("topology", "show"): ["dgx-h100:nodes=2"],
    ("topology", "route"): ["dgx-h100:nodes=2", "node0/gpu0", "node1/gpu0"],
    ("sim",): ["--scenario", "dense-50b-sync", "--param", "gpus=64"],
    ("hbd", "compare"): ["--gpus", "64", "--samples", "2"],
    ("hbd", "place"): [],
    ("hbd", "trace"): ["--nodes", "64", "--days", "10", "--out", "{work}/trace.json"],
    ("fed", "server"): ["--preset", "tiny", "--secret-file", "{secret}", "--listen", "127.0.0.1:0",
                        "--join-timeout", "0.2"],
    ("fed", "client"): ["--connect", "127.0.0.1:{closed}", "--secret-file", "{secret}", "--name", "c", "--timeout",
                        "1"],
    ("demo",): ["--preset", "tiny", "--versions", "1", "--subscribers", "1"],
}
HOSTILE_ONLY = {("demo",)}
# Values whose documented meaning is to run until a signal: not driven.
RUNS_UNTIL_SIGNALLED = {(("serve",), "--run-for", "0")}

NUMERIC = re.compile(r"^\s+(?:-\w, )?(--[\w-]+)\s+(UINT|INT|FLOAT)\b")


def numeric_options(command):
    help_text = subprocess.run([str(BIN), *command, "--help"], capture_output=True, text=True, timeout=30).stdout
    return sorted({m.group(1) for m in map(NUMERIC.match, help_text.splitlines()) if m})


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def with_option(base, option, value):
    """`base` with `option` set to `value` (its base value dropped, if it had one)."""
    args = list(base)
    if option in args:
        i = args.index(option)
        del args[i:i + 2]
    return args + [option, value]


def listing(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def ucx_shm():
    return sorted(p.name for p in pathlib.Path("/dev/shm").glob("ucx*"))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    model = root / "model"
    r = subprocess.run([str(BIN), "gen-model", "--preset", "tiny", "--out", model, "--quiet"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return {"model": model, "secret": write_secret(root / "secret"), "closed": free_port(), "root": root}


def run_case(inputs, command, option, value, index):
    work = inputs["root"] / ("-".join(command) + f"-{index}")
    work.mkdir()
    fill = {"work": work, "model": inputs["model"], "secret": inputs["secret"], "closed": inputs["closed"],
            "plans": REPO / "examples" / "plans"}
    base = [a.format(**fill) for a in COMMANDS[command]]
    argv = [str(BIN), *command, *with_option(base, option, value)]
    start = time.monotonic()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=work,
                           preexec_fn=limit_memory, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"{' '.join(argv)}: still running after {RUN_TIMEOUT} s"
    took = time.monotonic() - start
    what = f"{' '.join(map(str, argv))} (exit {r.returncode}, {took:.1f} s): {r.stderr.strip()[-300:]}"
    if r.returncode < 0:
        return f"{what}: killed by signal {-r.returncode}"
    if r.returncode not in (0, 1, 2):
        return f"{what}: exit code outside 0, 1, 2"
    if value in HOSTILE and r.returncode == 0:
        return f"{what}: accepted a value no option means"
    if r.returncode != 0 and not r.stderr.strip():
        return f"{what}: failed without a message"
    if r.returncode != 0 and listing(work):
        return f"{what}: left {listing(work)} behind"
    return None


WITHOUT_NUMERIC_OPTIONS = {("info",), ("inspect",), ("topology", "route")}


@pytest.fixture(scope="module")
def shm_before():
    return ucx_shm()


@pytest.mark.parametrize("command", list(COMMANDS), ids=" ".join)
@pytest.mark.serial  # compares this machine's shared memory before and after
def test_every_numeric_option_refuses_or_survives_hostile_values(inputs, shm_before, command):
    options = numeric_options(command)
    if command in WITHOUT_NUMERIC_OPTIONS:
        assert not options, f"{command} has numeric options now: {options}; drive them here"
        return
    assert options, f"no numeric options found in the help of {command}"
    values = HOSTILE if command in HOSTILE_ONLY else HOSTILE + EDGE
    cases = [(option, value) for option in options for value in values
             if (command, option, value) not in RUNS_UNTIL_SIGNALLED]
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [f for f in pool.map(lambda c: run_case(inputs, command, *c[1], c[0]), enumerate(cases)) if f]
    assert not failures, f"{len(failures)} of {len(cases)} runs:\n" + "\n".join(failures)
    assert ucx_shm() == shm_before, "a run left UCX shared memory in /dev/shm"
