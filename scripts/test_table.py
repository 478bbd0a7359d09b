#!/usr/bin/env python3
"""test_table.py — where the test command's time went.

Reads the steps file scripts/test.sh writes (name, seconds, exit status a line),
the per-step setup records in .deps/ (NAME.setup: cache hit or built), and ctest's
JUnit files, and prints: the setup and build steps with their times, the 15
slowest tests, every test with its time and result (a skipped test with its
reason), the counts and the total.  --markdown FILE writes the same as the
tables docs/testing.md carries.

    python3 scripts/test_table.py --steps build-report/steps.tsv --deps .deps \\
        --junit normal=build-report/normal.xml --junit asan=build-report/asan.xml
"""
import argparse
import os
import sys
import xml.etree.ElementTree as ET

SETUP = {"setup_llama": "llama", "setup_kvpress": "kvpress",
         "setup_vllm": "vllm", "setup_vllm033": "vllm033", "setup_router": "router"}


def read_steps(path):
    steps = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 3:
                steps.append((parts[0], int(parts[1]), int(parts[2])))
    return steps


def setup_state(deps, step):
    """'cache hit' or 'built' for a setup step, from .deps/NAME.setup."""
    name = SETUP.get(step)
    if not name or not deps:
        return ""
    try:
        with open(os.path.join(deps, name + ".setup")) as f:
            state = f.read().split()[0]
    except (OSError, IndexError):
        return ""
    return "cache hit" if state == "hit" else "installed"


def skip_reason(case):
    """The line a skipped test gave as its reason: the first that says so (SKIP,
    skipped, missing, needs), else its last line, else ctest's own message."""
    out = [x.strip() for x in (case.findtext("system-out") or "").splitlines() if x.strip()]
    for line in out:
        low = line.lower()
        if low.startswith("skip") or any(w in low for w in ("skipped", "missing", "needs")):
            return line
    if out:
        return out[-1]
    sk = case.find("skipped")
    return sk.get("message", "") if sk is not None else ""


def read_junit(spec):
    """[(build, test, seconds, result, why)] from 'build=file.xml'."""
    build, _, path = spec.partition("=")
    if not os.path.exists(path):
        return []
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        secs = float(case.get("time") or 0)
        status = case.get("status", "")
        why = ""
        if case.find("skipped") is not None or status in ("notrun", "disabled"):
            result = "skipped"
            why = skip_reason(case)
        elif case.find("failure") is not None or status == "fail":
            result = "FAILED"
        else:
            result = "passed"
        rows.append((build, case.get("name"), secs, result, why))
    return rows


def fmt_s(s):
    return "%d min %02d s" % (s // 60, s % 60) if s >= 60 else "%.0f s" % s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", required=True, help="scripts/test.sh's steps file")
    ap.add_argument("--deps", help=".deps/ (for the setup steps' cache records)")
    ap.add_argument("--junit", action="append", default=[], metavar="BUILD=FILE",
                    help="ctest --output-junit file of one build (repeatable)")
    ap.add_argument("--markdown", metavar="FILE", help="also write the tables as Markdown")
    a = ap.parse_args()

    steps = read_steps(a.steps)
    tests = [r for spec in a.junit for r in read_junit(spec)]
    total = sum(s for _, s, _ in steps)
    lines = []

    def row(cells):
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")

    lines.append("### Steps")
    lines.append("")
    row(["step", "time", "result"])
    row(["---", "---:", "---"])
    for name, secs, rc in steps:
        state = setup_state(a.deps, name)
        res = "ok" if rc == 0 else "FAILED (exit %d)" % rc
        row([name, fmt_s(secs), res + (", " + state if state else "")])
    row(["**total**", "**%s**" % fmt_s(total), ""])
    lines.append("")

    lines.append("### The 15 slowest tests")
    lines.append("")
    row(["test", "build", "time", "result"])
    row(["---", "---", "---:", "---"])
    for build, name, secs, result, _ in sorted(tests, key=lambda r: -r[2])[:15]:
        row([name, build, "%.1f s" % secs, result])
    lines.append("")

    counts = {}
    for build, _, secs, result, _ in tests:
        c = counts.setdefault(build, {"passed": 0, "FAILED": 0, "skipped": 0, "secs": 0.0})
        c[result] += 1
        c["secs"] += secs
    lines.append("### Counts")
    lines.append("")
    row(["build", "passed", "failed", "skipped", "sum of test times"])
    row(["---", "---:", "---:", "---:", "---:"])
    for build, c in counts.items():
        row([build, c["passed"], c["FAILED"], c["skipped"], fmt_s(c["secs"])])
    lines.append("")

    lines.append("### Every test")
    lines.append("")
    row(["test", "build", "time", "result"])
    row(["---", "---", "---:", "---"])
    for build, name, secs, result, why in sorted(tests, key=lambda r: (r[0] != "normal", r[1])):
        row([name, build, "%.1f s" % secs, result + (": " + why.replace("|", "/") if why else "")])
    text = "\n".join(lines) + "\n"

    # the terminal gets everything but the long list, which stays in the file
    short = text.split("### Every test")[0]
    print("== where the time went")
    print(short.rstrip())
    skipped = [(b, n, w) for b, n, _, r, w in tests if r == "skipped"]
    for b, n, w in skipped:
        print("skipped: %s (%s): %s" % (n, b, w))
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text)
        print("(every test: %s)" % a.markdown)
    npass = sum(c["passed"] for c in counts.values())
    nfail = sum(c["FAILED"] for c in counts.values())
    nskip = sum(c["skipped"] for c in counts.values())
    print("%d passed, %d failed, %d skipped" % (npass, nfail, nskip))
    return 0


if __name__ == "__main__":
    sys.exit(main())
