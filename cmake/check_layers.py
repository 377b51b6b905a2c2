#!/usr/bin/env python3
"""Fails when a file of one layer includes a header it may not: a public header of a layer it does
not depend on (directly or through its dependencies), or a private header (under src/) of another
layer. Layers and their dependencies are declared in CMakeLists.txt (weightport_layer(), see
cmake/Layers.cmake) and reach this script through the spec file the configure writes: one line a layer, "path:dep,dep". Library code only; tests may use any layer.

    check_layers.py SPEC ROOT [STAMP]
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_spec(path):
    deps = {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        layer, _, rest = line.partition(":")
        deps[layer] = [d for d in rest.split(",") if d]
    return deps


def closure(deps):
    """Each layer with every layer it may use: itself and its dependencies, transitively."""
    out = {}

    def visit(layer, stack):
        if layer in out:
            return out[layer]
        if layer in stack:
            sys.exit(f"check_layers: a dependency cycle: {' -> '.join(stack + [layer])}")
        allowed = {layer}
        for d in deps.get(layer, []):
            if d not in deps:
                sys.exit(f"check_layers: layer {layer} depends on {d}, which is not a layer")
            allowed |= visit(d, stack + [layer])
        out[layer] = allowed
        return allowed

    for layer in deps:
        visit(layer, [])
    return out


def layer_of(path, layers):
    """The layer a path under src/ or include/weightport/ belongs to: the deepest layer whose folder
    holds it (src/transport/ucx/x.cc is in transport; src/sim/hbd/x.cc in sim/hbd)."""
    folder = os.path.dirname(path)
    while folder:
        if folder in layers:
            return folder
        folder = os.path.dirname(folder)
    return None


def check_file(root, top, rel, layer, deps, allowed, errors):
    text = open(os.path.join(root, top, rel), encoding="utf-8").read()
    for m in INCLUDE.finditer(text):
        inc = m.group(1)
        where = f"{top}/{rel}:{text.count(chr(10), 0, m.start()) + 1}"
        if inc.startswith("weightport/"):
            target = layer_of(inc[len("weightport/"):], deps)
            if target is None:
                errors.append(f'{where}: "{inc}" is in no layer')
            elif target not in allowed[layer]:
                errors.append(f'{where}: layer {layer} includes "{inc}" of layer {target}, which it does '
                              f"not depend on (declared in CMakeLists.txt: {layer} -> {', '.join(deps[layer]) or 'nothing'})")
            continue
        # A private header: beside the file, or named from src/.
        beside = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
        if top == "src" and os.path.exists(os.path.join(root, "src", beside)):
            target = layer_of(beside, deps)
        elif os.path.exists(os.path.join(root, "src", inc)):
            target = layer_of(inc, deps)
        else:
            errors.append(f'{where}: "{inc}" not found beside the file or under src/')
            continue
        if top != "src":
            errors.append(f'{where}: the public header includes the private header "{inc}"')
        elif target != layer:
            errors.append(f'{where}: "{inc}" is a private header of layer {target}: make it public '
                          f"(include/weightport/) or keep it in its layer")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    spec, root = sys.argv[1], sys.argv[2]
    deps = read_spec(spec)
    allowed = closure(deps)
    errors = []
    for top in ("src", "include/weightport"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".cc", ".h", ".cu")) or re.search(r"_(test|fuzz)\.cc$|_test_util\.h$", name):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), os.path.join(root, top))
                layer = layer_of(rel, deps)
                if layer is None:
                    errors.append(f"{top}/{rel}: in no layer (CMakeLists.txt declares the layers)")
                    continue
                check_file(root, top, rel, layer, deps, allowed, errors)
    if errors:
        print("Layering violations (a layer may include only its own headers and the public headers of "
              "the layers it depends on):", file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
        sys.exit(1)
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            f.write("ok\n")


if __name__ == "__main__":
    main()
