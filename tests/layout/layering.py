#!/usr/bin/env python3
"""layering.py — the daemon side's rooms depend one way, and no room's files
include each other in a circle (docs/architecture.md, "Rooms"); inside a
library, no files call each other in a circle.

Reads every #include "..." under sidecar/, resolves it to a project file, and
checks (1) each include crosses rooms only along an allowed arrow, and (2) the
include graph inside each room has no cycle.  With --objects LIB (a static
library, or a folder of its .o files), (3) builds the library's file -> file
call graph from its objects' symbols (nm: a file that has `U sym` where
another file of the library defines sym depends on it; functions and data
alike) and checks it has no cycle.  Exits 1 with every violation.

    layering.py [--root DIR] [--objects LIB]... [--nm NM]
"""
import argparse
import glob
import os
import re
import subprocess
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


def circles(edges):
    """The shortest circle through each node of edges (node -> nodes) that is
    on one, each once, as a node list whose last element is its first."""
    found = set()
    for start in sorted(edges):
        prev = {}
        queue = [start]
        while queue and start not in prev:
            n = queue.pop(0)
            for m in sorted(edges.get(n, ())):
                if m not in prev:
                    prev[m] = n
                    queue.append(m)
        if start not in prev:
            continue
        path = [start]
        while True:
            path.append(prev[path[-1]])
            if path[-1] == start:
                break
        path = path[::-1][:-1]            # start -> ... (each node once)
        i = path.index(min(path))         # one spelling per circle
        path = path[i:] + path[:i]
        found.add(tuple(path + [path[0]]))
    return [list(c) for c in sorted(found, key=lambda c: (len(c), c))]


def object_symbols(lib, nm):
    """{object file: (defined globals, undefined symbols)} of a static library
    or of the .o files under a folder."""
    if os.path.isdir(lib):
        objs = sorted(glob.glob(os.path.join(lib, "**", "*.o"), recursive=True))
        if not objs:
            raise RuntimeError("no .o files under %s" % lib)
        args = [nm, "-A"] + objs
    else:
        args = [nm, "-A", lib]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        # "lib.a:member.o:0000 T name", "file.o:0000 T name", "file.o:  U name"
        head, _, rest = line.rpartition(":")
        if not head or len(rest.split()) < 2:
            continue
        kind, name = rest.split()[-2:]
        obj = os.path.basename(head.split(":")[-1] if head.endswith(".o") else head)
        defined, undefined = syms.setdefault(obj, (set(), set()))
        if kind == "U":
            undefined.add(name)
        elif kind.isupper() and kind not in "N":
            defined.add(name)
    return syms


def call_circles(lib, nm):
    """The library's file -> file circles, each as a line naming its files and,
    for each step, a symbol that makes it."""
    syms = object_symbols(lib, nm)
    owner = {}
    for obj, (defined, _) in syms.items():
        for name in defined:
            owner[name] = obj
    edges, why = {}, {}
    for obj, (_, undefined) in syms.items():
        for name in sorted(undefined):
            dst = owner.get(name)
            if dst and dst != obj:
                edges.setdefault(obj, set()).add(dst)
                why.setdefault((obj, dst), name)
    name = lambda o: o[:-2] if o.endswith(".o") else o
    lines = []
    for c in circles(edges):
        steps = ", ".join("%s uses %s" % (name(a), why[(a, b)]) for a, b in zip(c, c[1:]))
        lines.append("call circle in %s: %s (%s)" % (os.path.basename(lib.rstrip("/")),
                                                     " -> ".join(name(o) for o in c), steps))
    return len(syms), sum(len(v) for v in edges.values()), lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), help="repository root (default: this checkout)")
    ap.add_argument("--objects", action="append", default=[], metavar="LIB",
                    help="a static library or a folder of its .o files: check its "
                         "file -> file call graph too (repeatable)")
    ap.add_argument("--nm", default="nm", help="the nm to read objects with")
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
    for c in circles(edges):
        errors.append("include circle: " + " -> ".join(c))
    notes = []
    for lib in args.objects:
        try:
            n_objs, n_calls, lines = call_circles(lib, args.nm)
        except (OSError, subprocess.CalledProcessError, RuntimeError) as err:
            errors.append("%s: cannot read its symbols: %s" % (lib, err))
            continue
        errors += lines
        notes.append("%s: %d files, %d call edges" % (os.path.basename(lib.rstrip("/")),
                                                       n_objs, n_calls))
    for e in errors:
        print("layering: " + e)
    n_edges = sum(len(v) for v in edges.values())
    print("layering: %d files, %d in-room includes%s, %d problem(s)"
          % (len(files), n_edges, "".join("; " + n for n in notes), len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
