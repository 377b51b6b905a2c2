"""Work units for pytest-xdist (`pytest -n N`): tests that share one resource run on one worker,
one after another, and every other test runs wherever a worker is free.

pytest-xdist's own `--dist loadgroup` finds its groups by rewriting each test's node id, which
pytest 9.2 no longer allows (the groups are then silently ignored and the tests collide), so the
groups are given here by file and test name, through xdist's scheduler hook, and read from the
test files' source (the controller collects nothing)."""
import ast
from pathlib import Path


def tests_taking(test_dir, fixture):
    """{(file name, test name)} of the test functions in test_dir/test_*.py taking `fixture`."""
    found = set()
    for path in sorted(Path(test_dir).glob("test_*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test") \
                    and fixture in {a.arg for a in node.args.args}:
                found.add((path.name, node.name))
    return found


def group_scheduler(config, log, group_of):
    """The scheduler for `pytest -n N`: group_of(file name, test name) names a test's group, or
    None for a test that may run beside any other. An explicit --dist other than load or loadgroup
    is left to xdist."""
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            path, _, rest = nodeid.partition("::")
            test = rest.split("::")[-1].split("[")[0]
            return group_of(Path(path).name, test) or nodeid

    return GroupScheduling(config, log)
