#!/usr/bin/env python3
"""layering.py — the daemon side's rooms depend one way, and no room's files
include each other in a circle (docs/architecture.md, "Rooms").

Reads every #include "..." under sidecar/, resolves it to a project file, and
checks (1) each include crosses rooms only along an allowed arrow, and (2) the
include graph inside each room has no cycle.  Exits 1 with every violation.

    layering.py [--root DIR]
"""
import argparse
import os
import re
import sys

# room -> rooms (or bottom layers) its files may include
ALLOWED = {
    "shm_layout": set(),
    "kernels": {"shm_layout"},
    "sidecar/common": {"shm_layout"},
    "sidecar/host": {"shm_layout"},
    "sidecar/calib": {"sidecar/common", "shm_layout"},
    "sidecar/ctl": {"sidecar/calib", "sidecar/common", "shm_layout"},
    "sidecar/daemon": {"sidecar/host", "sidecar/calib", "sidecar/ctl", "sidecar/common",
                       "kernels", "shm_layout"},
}
SEARCH = ["shm_layout", "kernels/include", "sidecar/common", "sidecar/host", "sidecar/calib",
          "sidecar/ctl", "sidecar/daemon"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of(rel):
    for room in sorted(ALLOWED, key=len, reverse=True):
        if rel == room or rel.startswith(room + "/"):
            return room
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), help="repository root (default: this checkout)")
    args = ap.parse_args()
    root = args.root
    files = []
    for top in ("sidecar",):
        for d, _, names in os.walk(os.path.join(root, top)):
            files += [os.path.relpath(os.path.join(d, n), root) for n in names
                      if n.endswith((".c", ".h"))]
    if not files:
        print("layering: no sources under %s/sidecar" % root)
        return 1
    edges = {}
    errors = []
    for f in sorted(files):
        text = open(os.path.join(root, f), encoding="utf-8").read()
        here = os.path.dirname(f)
        for inc in INCLUDE.findall(text):
            cands = [os.path.normpath(os.path.join(here, inc))] + \
                    [os.path.join(s, inc) for s in SEARCH]
            target = next((c for c in cands if os.path.isfile(os.path.join(root, c))), None)
            if target is None:
                errors.append("%s: includes \"%s\", which is no project file" % (f, inc))
                continue
            src, dst = room_of(f), room_of(target)
            if src != dst and dst not in ALLOWED.get(src, set()):
                errors.append("%s (%s) includes %s (%s): not an allowed arrow"
                              % (f, src, target, dst))
            if src == dst:
                edges.setdefault(f, set()).add(target)
    # cycles inside a room: depth-first search with colours
    colour = {}
    stack = []

    def visit(n):
        colour[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if colour.get(m) == 1:
                errors.append("include circle: " + " -> ".join(stack[stack.index(m):] + [m]))
            elif m not in colour:
                visit(m)
        stack.pop()
        colour[n] = 2

    for n in sorted(edges):
        if n not in colour:
            visit(n)
    for e in errors:
        print("layering: " + e)
    n_edges = sum(len(v) for v in edges.values())
    print("layering: %d files, %d in-room includes, %d problem(s)" % (len(files), n_edges,
                                                                     len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
