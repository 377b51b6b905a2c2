#!/usr/bin/env python3
"""Draws docs/img/architecture.svg: weightport's data flow (docs/ARCHITECTURE.md).

No dependencies beyond Python 3. Boxes and arrows are placed by hand below; the output is
deterministic, so `tests/python/test_docs.py` can check that the committed SVG is this script's.

    python3 docs/img/make_architecture.py [OUT.svg]     (default: architecture.svg beside this file)
"""
import os
import sys
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 1160, 610
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"

# Fills by role: inputs, the contract (planner and plan), the executors, what they stand on, drivers.
INPUT, CONTRACT, EXEC, BELOW, DRIVER, CONTROL = "#eef4fb", "#fff4dc", "#e6f4ea", "#f1f1f1", "#f3ecfa", "#fdecec"


def box(x, y, w, h, title, lines=(), fill="#ffffff", code=""):
    """A rounded box: a bold title, an optional folder (monospace), then plain lines, centred."""
    out = [f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="8" fill="{fill}" stroke="#444" stroke-width="1.2"/>']
    cx = x + w / 2
    rows = [("title", title)] + ([("code", code)] if code else []) + [("line", s) for s in lines]
    step = 17
    top = y + h / 2 - (len(rows) - 1) * step / 2 + 5
    for i, (kind, text) in enumerate(rows):
        ty = top + i * step
        if kind == "title":
            style = 'font-weight="bold" font-size="14"'
        elif kind == "code":
            style = 'font-family="DejaVu Sans Mono, Menlo, monospace" font-size="11.5" fill="#555"'
        else:
            style = 'font-size="12.5"'
        out.append(f'<text x="{cx:.1f}" y="{ty:.1f}" text-anchor="middle" {style}>{escape(text)}</text>')
    return out


def arrow(points, label="", dashed=False, label_at=None, both=False):
    """A polyline with an arrow head at its end (and start with both); the label sits at label_at."""
    d = " ".join(f"{x},{y}" for x, y in points)
    dash = ' stroke-dasharray="6,4"' if dashed else ""
    start = ' marker-start="url(#head-start)"' if both else ""
    out = [f'<polyline points="{d}" fill="none" stroke="#333" stroke-width="1.5"{dash}{start} marker-end="url(#head)"/>']
    if label:
        lx, ly = label_at if label_at else ((points[0][0] + points[-1][0]) / 2, (points[0][1] + points[-1][1]) / 2 - 6)
        out.append(f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="middle" font-size="11.5" font-style="italic" '
                   f'fill="#333">{escape(label)}</text>')
    return out


def draw():
    e = []
    # Drivers on top.
    e += box(20, 20, 680, 58, "CLI: weightport", ["publish · subscribe · serve · reshard · plan · sim · topology · hbd · fed · demo"],
             DRIVER, "src/cli/")
    e += box(750, 20, 390, 58, "Python package weightport", ["Publisher · Subscriber (plan sessions) · FedServer · FedClient"],
             DRIVER, "python/")
    e += arrow([(385, 78), (385, 230)], "runs", label_at=(407, 215))
    e += arrow([(945, 78), (945, 120)])

    # Inputs.
    e += box(20, 120, 240, 80, "Manifest", ["from safetensors or live tensors:", "tensors, chunk hashes, version"], INPUT, "core/ format/")
    e += box(20, 230, 240, 80, "Placements", ["source + destination:", "who holds which slice"], INPUT, "core/")
    e += box(20, 340, 240, 80, "Topology", ["devices, links, bandwidths,", "domains; file or preset"], INPUT, "topology/ Graph")

    # The contract.
    e += box(300, 230, 170, 80, "Planner", ["MakePlan: pure function,", "no I/O"], CONTRACT, "plan/")
    e += box(510, 230, 190, 80, "Plan", ["steps, chunks, relays,", "transforms; JSON"], CONTRACT, "plan/")
    e += arrow([(260, 270), (300, 270)])
    e += arrow([(260, 380), (280, 380), (280, 295), (300, 295)], "planner's view", label_at=(330, 345))
    e += arrow([(470, 270), (510, 270)])
    e += arrow([(140, 200), (140, 230)], "tensor table", label_at=(196, 219))

    # Executors.
    e += box(750, 120, 230, 160, "Engine", ["plan rank (PlanRank)", "plan session", "whole-model publish/subscribe",
                                            "federated round"], EXEC, "engine/")
    e += box(1010, 120, 130, 160, "Control plane", ["small messages:", "authenticated", "TCP, HMAC", "frames, metrics"], CONTROL, "control/")
    e += box(510, 380, 190, 80, "Simulator", ["flow-level, max-min", "fair; any scale"], EXEC, "sim/ (+ hbd/)")
    e += arrow([(700, 255), (750, 255)], "execute", label_at=(725, 247))
    e += arrow([(605, 310), (605, 380)], "simulate", label_at=(640, 350))
    e += arrow([(260, 400), (510, 420)])
    e += arrow([(260, 150), (750, 150)], "whole-model publish/subscribe needs no plan", dashed=True, label_at=(575, 143))
    e += arrow([(980, 200), (1010, 200)], both=True, dashed=True)

    # What the engine stands on.
    e += box(750, 330, 230, 110, "Transport", ["one-sided Put / Get", "UCX: shm/CMA, TCP, RDMA verbs,", "CUDA IPC, GPUDirect;",
                                               "fake · fault"], BELOW, "transport/")
    e += box(1010, 330, 130, 110, "Kernels, GPU", ["convert, e4m3,", "xxh3, zstd;", "device memory"], BELOW, "kernels/ cuda/")
    e += arrow([(865, 280), (865, 330)], "weights", label_at=(895, 310))
    e += arrow([(960, 280), (1040, 330)])

    # Legend.
    e += ['<text x="20" y="500" font-size="12.5">Solid: data. Dashed: the path without a plan, and control messages.</text>',
          '<text x="20" y="520" font-size="12.5">The engine and the simulator never include each other: they meet only in the Plan.</text>',
          '<text x="20" y="540" font-size="12.5">Folders are under src/ (code) and include/weightport/ (public headers).</text>']
    e += box(750, 470, 390, 110, "Hosts and GPUs", ["the real network: NVLink, PCIe,", "NICs, switches",
                                                    "(the simulator models it from the Topology)"], BELOW)
    e += arrow([(865, 440), (865, 470)])

    head = ('<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" '
            'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker>'
            '<marker id="head-start" viewBox="0 0 10 10" refX="1" refY="5" markerWidth="8" markerHeight="8" '
            'orient="auto"><path d="M10,0 L0,5 L10,10 z" fill="#333"/></marker></defs>')
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'font-family="{FONT}">',
        "<title>weightport: data flow</title>",
        head,
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        *e,
        "</svg>",
        "",
    ])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "architecture.svg")
    with open(out, "w", encoding="utf-8") as f:
        f.write(draw())


if __name__ == "__main__":
    main()
