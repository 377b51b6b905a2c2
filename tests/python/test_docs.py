"""Checks that the architecture docs match the tree, read cold.

docs/ARCHITECTURE.md, docs/ENGINE.md and docs/FORMATS.md may name only paths that exist. That
covers inline code that looks like a repository path and every relative link, including anchors
into other docs. ARCHITECTURE.md must also meet these rules:
- it keeps its table cells short;
- it names every test binary and fuzzer the build makes;
- its layer table agrees with the layers and dependencies declared in CMakeLists.txt.
The committed drawing must be what docs/img/make_architecture.py draws.

Needs no build.
"""
import fnmatch
import glob
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MAP = DOCS / "ARCHITECTURE.md"
CHECKED = [MAP, DOCS / "ENGINE.md", DOCS / "FORMATS.md"]
MAX_CELL = 300

# A token names a file when it ends in one of these (or is a folder: ends in "/", or starts with a
# top-level entry of the repository).
EXTENSIONS = (".h", ".cc", ".cu", ".py", ".md", ".json", ".txt", ".cmake", ".svg", ".png", ".dot", ".toml",
              ".supp", ".sh", ".yml", ".yaml")
# Folders the build and scripts/setup make; the docs may name them (see test_generated_folders_are_made).
GENERATED = ("build", "build-asan", "build-tsan", ".deps")
SKIP_DIRS = {".git", "__pycache__", ".deps", ".venv", "node_modules"}
PATH_WORD = re.compile(r"[\w.*+-]+(?:/[\w.*+-]*)*")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text):
    """The text without fenced code blocks (their content is not rendered as code spans or links)."""
    return FENCE.sub("", text)


def top_level():
    return {p.name for p in ROOT.iterdir()}


def all_basenames():
    names = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build")]
        names.update(filenames)
    return names


def path_words(token):
    """The words of one code span that name a repository path."""
    tops = top_level()
    for word in token.split():
        word = word.strip(",;()")
        dotted = word.startswith("./")  # "./python": a path, whatever it looks like
        if dotted:
            word = word[2:]
        if not word or "://" in word or word.startswith(("-", "/")) or re.search(r"[<>{}=@$:\\'\"]", word):
            continue  # URLs, flags, absolute paths, placeholders, key=value, C++ scopes
        if not PATH_WORD.fullmatch(word):
            continue
        first = word.split("/", 1)[0]
        if dotted or word.endswith("/") or word.endswith(EXTENSIONS) or ("/" in word and first in tops):
            yield word
        # Anything else with a slash ("f32/bf16", "shm/CMA") is prose, not a path.


def exists(word):
    if word.split("/", 1)[0] in GENERATED:
        return True
    if "/" not in word.rstrip("/"):
        # A bare file name ("plan_rank.cc", "PERFORMANCE.md"): some file of that name in the tree.
        if (ROOT / word).exists():
            return True
        names = all_basenames()
        return any(fnmatch.fnmatch(n, word) for n in names) if "*" in word else word.rstrip("/") in names
    if "*" in word:
        return bool(glob.glob(str(ROOT / word)))
    return (ROOT / word).exists()


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    text = prose(path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", text, re.M)}


def named_paths(doc):
    text = prose(doc.read_text(encoding="utf-8"))
    for m in INLINE_CODE.finditer(text):
        for word in path_words(m.group(1)):
            yield m.group(0), word


def broken_links(doc):
    text = prose(doc.read_text(encoding="utf-8"))
    bad = []
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        where = (doc.parent / file_part).resolve() if file_part else doc
        if not where.exists():
            bad.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            bad.append(f"{target}: no heading with anchor '#{anchor}' in {where.name}")
    return bad


@pytest.mark.parametrize("doc", CHECKED, ids=lambda p: p.name)
def test_every_named_path_exists(doc):
    missing = sorted({f"{span} ({word})" for span, word in named_paths(doc) if not exists(word)})
    assert not missing, f"{doc.name} names paths that do not exist:\n  " + "\n  ".join(missing)


@pytest.mark.parametrize("doc", CHECKED, ids=lambda p: p.name)
def test_every_link_resolves(doc):
    bad = broken_links(doc)
    assert not bad, f"{doc.name} has broken links:\n  " + "\n  ".join(bad)


def test_the_path_check_catches_a_missing_path(tmp_path):
    """The checks above must fail on a doc that names what is not there (and pass over prose)."""
    doc = tmp_path / "doc.md"
    doc.write_text("See `src/core/no_such_file.cc`, `src/nowhere/`, `no_such_name.h` and "
                   "[gone](NO_SUCH.md), [anchor](#nothing-here).\n"
                   "Not paths: `f32/bf16`, `shm/CMA`, `--device-direct`, `GET /metrics`, `a::b`, "
                   "`dgx-h100:nodes=4`, `https://example.org/x.md`, `fuzz/<name>/`.\n"
                   "Paths that exist: `src/core/`, `include/weightport/core/status.h`, `status.h`, "
                   "`src/cli/cmd_*.cc`, `pip install ./python`.\n", encoding="utf-8")
    missing = [word for _, word in named_paths(doc) if not exists(word)]
    assert missing == ["src/core/no_such_file.cc", "src/nowhere/", "no_such_name.h"]
    assert len(broken_links(doc)) == 2


def table_cells(text):
    for line in prose(text).splitlines():
        if not line.lstrip().startswith("|"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
            continue
        yield from cells


def test_architecture_table_cells_are_short():
    long = [c for c in table_cells(MAP.read_text(encoding="utf-8")) if len(c) > MAX_CELL]
    assert not long, f"table cells over {MAX_CELL} characters:\n  " + "\n  ".join(c[:80] + "..." for c in long)


def cmake():
    return (ROOT / "CMakeLists.txt").read_text(encoding="utf-8")


def built_test_binaries():
    """The test binaries CMakeLists.txt makes: <layer>_tests for each folder of its test list that has
    a *_test.cc (searched recursively, as CMake does)."""
    m = re.search(r'set\(WEIGHTPORT_TEST_LAYERS "([^"]*)"', cmake())
    assert m, "CMakeLists.txt: the default of WEIGHTPORT_TEST_LAYERS was not found"
    layers = m.group(1).split(";")
    return [f"{layer}_tests" for layer in layers if glob.glob(str(ROOT / "src" / layer / "**" / "*_test.cc"), recursive=True)]


def test_architecture_names_every_test_binary_and_fuzzer():
    text = MAP.read_text(encoding="utf-8")
    binaries = built_test_binaries()
    assert len(binaries) >= 10
    fuzzers = sorted(pathlib.Path(p).stem for p in glob.glob(str(ROOT / "src" / "**" / "*_fuzz.cc"), recursive=True))
    missing = [name for name in binaries + fuzzers if f"`{name}`" not in text]
    assert not missing, "docs/ARCHITECTURE.md does not name: " + ", ".join(missing)


def declared_layers():
    """{layer path: its DEPS} from the weightport_layer() calls, plus the CLI's spec line."""
    layers = {}
    for m in re.finditer(r"^weightport_layer\(([^)]*)\)", cmake(), re.M):
        args = m.group(1).split()
        deps, taking = [], False
        for a in args[1:]:
            if a in ("DEPS", "LIBS", "SOURCES", "RECURSE", "NO_GLOB"):
                taking = a == "DEPS"
            elif taking:
                deps.append(a)
        layers[args[0]] = deps
    cli = re.search(r'WEIGHTPORT_LAYER_SPEC}cli:([^\\"]*)', cmake())
    assert cli, "CMakeLists.txt: the CLI's layer spec was not found"
    layers["cli"] = cli.group(1).split(",")
    return layers


def layer_rows():
    """(layer, [deps]) per row of ARCHITECTURE.md's layer table whose folder is under src/."""
    rows = []
    for line in prose(MAP.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"\|\s*`src/([\w/]+)/`\s*\|[^|]*\|([^|]*)\|", line)
        if m:
            deps = re.sub(r"\([^)]*\)", "", m.group(2)).strip()
            rows.append((m.group(1), [] if deps == "nothing" else [d.strip() for d in deps.split(",") if d.strip()]))
    return rows


def test_layer_table_matches_cmake():
    declared = declared_layers()
    rows = layer_rows()
    assert {layer for layer, _ in rows} == set(declared), "layer table rows vs. CMakeLists.txt layers"
    for layer, deps in rows:
        assert sorted(deps) == sorted(declared[layer]), f"{layer}: the table says {deps}, CMakeLists.txt {declared[layer]}"


def test_layers_come_in_dependency_order():
    rows = layer_rows()
    seen = set()
    for layer, deps in rows:
        assert set(deps) <= seen, f"{layer} is listed before its dependencies {sorted(set(deps) - seen)}"
        seen.add(layer)
    headings = [m.group(1) for m in re.finditer(r"^### (.+)$", prose(MAP.read_text(encoding="utf-8")), re.M)]
    order = [layer for layer, _ in rows]
    index = {layer: i for i, layer in enumerate(order)}
    # Each layer's section (heading "core", "engine/rank", "sim and sim/hbd", ...) comes in table order.
    positions = []
    for h in headings:
        named = [index[w] for w in re.split(r"[\s,]+", h) if w in index]
        if named:
            positions.append(min(named))
    assert positions == sorted(positions), f"layer sections out of order: {headings}"
    assert {w for h in headings for w in re.split(r"[\s,]+", h)} >= set(order), "a layer has no section"


def test_generated_folders_are_made():
    """The folders the docs may name without their existing here are made by the build or setup."""
    makers = (ROOT / "Makefile").read_text(encoding="utf-8") + (ROOT / "scripts" / "setup").read_text(encoding="utf-8")
    for name in GENERATED:
        assert name in makers, f"{name} is not made by the Makefile or scripts/setup"


def test_architecture_drawing_is_current(tmp_path):
    assert "(img/architecture.svg)" in MAP.read_text(encoding="utf-8")
    out = tmp_path / "architecture.svg"
    subprocess.run([sys.executable, str(DOCS / "img" / "make_architecture.py"), str(out)], check=True, timeout=60)
    assert out.read_text(encoding="utf-8") == (DOCS / "img" / "architecture.svg").read_text(encoding="utf-8"), \
        "docs/img/architecture.svg is stale: run python3 docs/img/make_architecture.py"
