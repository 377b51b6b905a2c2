"""The layer check (cmake/check_layers.py) that the build runs before any compile: the repository
passes it, and each kind of wrong-way include fails it, naming the file and line."""
import pathlib
import subprocess
import sys

import pytest

from cli_procs import BIN

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECK = ROOT / "cmake" / "check_layers.py"


def check(spec, root):
    return subprocess.run([sys.executable, str(CHECK), str(spec), str(root)], capture_output=True, text=True)


def test_the_repository_keeps_its_layers():
    spec = BIN.parent / "weightport_layers.txt"  # written by the configure
    if not spec.exists():
        pytest.skip(f"{spec} not found: configure the build first")
    r = check(spec, ROOT)
    assert r.returncode == 0, r.stderr


@pytest.fixture
def tree(tmp_path):
    """Two layers: low (depends on nothing) and high (depends on low)."""
    (tmp_path / "spec.txt").write_text("low:\nhigh:low\n")
    for layer in ("low", "high"):
        (tmp_path / "src" / layer).mkdir(parents=True)
        (tmp_path / "include" / "weightport" / layer).mkdir(parents=True)
        (tmp_path / "include" / "weightport" / layer / f"{layer}.h").write_text("#pragma once\n")
    (tmp_path / "src" / "low" / "low_private.h").write_text("#pragma once\n")
    (tmp_path / "src" / "low" / "low.cc").write_text('#include "weightport/low/low.h"\n#include "low_private.h"\n')
    (tmp_path / "src" / "high" / "high.cc").write_text('#include "weightport/high/high.h"\n#include "weightport/low/low.h"\n')
    return tmp_path


def test_includes_down_the_layers_pass(tree):
    r = check(tree / "spec.txt", tree)
    assert r.returncode == 0, r.stderr


def test_an_include_up_the_layers_fails_naming_the_file(tree):
    (tree / "src" / "low" / "low.cc").write_text('#include "weightport/low/low.h"\n#include "weightport/high/high.h"\n')
    r = check(tree / "spec.txt", tree)
    assert r.returncode != 0
    assert "src/low/low.cc:2" in r.stderr and "layer low includes" in r.stderr and "layer high" in r.stderr


def test_a_public_header_including_up_fails(tree):
    (tree / "include" / "weightport" / "low" / "low.h").write_text('#pragma once\n#include "weightport/high/high.h"\n')
    r = check(tree / "spec.txt", tree)
    assert r.returncode != 0 and "include/weightport/low/low.h:2" in r.stderr


def test_another_layers_private_header_fails_even_below(tree):
    (tree / "src" / "high" / "high.cc").write_text('#include "low/low_private.h"\n')
    r = check(tree / "spec.txt", tree)
    assert r.returncode != 0 and "private header of layer low" in r.stderr


def test_tests_may_include_any_layer(tree):
    (tree / "src" / "low" / "low_test.cc").write_text('#include "weightport/high/high.h"\n')
    r = check(tree / "spec.txt", tree)
    assert r.returncode == 0, r.stderr


def test_a_dependency_cycle_is_refused(tree):
    (tree / "spec.txt").write_text("low:high\nhigh:low\n")
    r = check(tree / "spec.txt", tree)
    assert r.returncode != 0 and "cycle" in (r.stderr + r.stdout)
