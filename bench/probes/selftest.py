#!/usr/bin/env python3
"""selftest.py — the probe pipeline end to end against fake_agent.py (no model, seconds).

Checks what a user of run.py relies on: every planned run lands in runs.jsonl exactly once, a
rerun resumes (skips finished runs, redoes a run whose line was cut short by a kill), a failing
agent makes run.py exit non-zero, and report.py writes docs/results.md-style output from it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = f"{sys.executable} {os.path.join(HERE, 'fake_agent.py')}"


def run(args, expect):
    p = subprocess.run([sys.executable, os.path.join(HERE, "run.py")] + args,
                       capture_output=True, text=True)
    if p.returncode != expect:
        sys.exit(f"selftest FAIL: run.py {' '.join(args)} exited {p.returncode}, want {expect}\n"
                 f"{p.stderr[-2000:]}")
    return p


def lines(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    out = os.path.join(a.workdir, "runs.jsonl")
    base = ["--agent", FAKE, "--no-daemon", "--out", out, "--short", "1", "--long", "1",
            "--policies", "random,recency,memdecay", "--budgets", "0.25,0.5"]
    run(base, 0)
    first = lines(out)
    want = 2 * (3 * 2 + 1)
    assert len(first) == want, f"{len(first)} runs recorded, want {want}"
    assert len({r["key"] for r in first}) == want, "duplicate run keys"
    # Resume: nothing to do; then cut the last line short (a kill mid-write) and rerun.
    run(base, 0)
    assert len(lines(out)) == want, "a rerun repeated finished runs"
    text = open(out).read().rstrip("\n")
    open(out, "w").write(text[: text.rfind("\n") + 1] + text[text.rfind("\n") + 1:][:20])
    run(base, 0)
    recs = lines_ok(out)
    assert len({r["key"] for r in recs}) == want, "the cut-short run was not redone"
    # More policies later: only the new runs are done.
    run(base[:-4] + ["--policies", "random,recency,memdecay,h2o", "--budgets", "0.25,0.5"], 0)
    assert len({r["key"] for r in lines_ok(out)}) == 2 * (4 * 2 + 1), "extension not resumed"
    # A failing agent is a pipeline failure.
    bad = os.path.join(a.workdir, "bad_agent.sh")
    open(bad, "w").write("#!/bin/sh\necho 'boom' >&2\nexit 3\n")
    os.chmod(bad, 0o755)
    run(["--agent", bad, "--no-daemon", "--out", os.path.join(a.workdir, "bad.jsonl"), "--quick"], 1)
    # The report.
    md = os.path.join(a.workdir, "results.md")
    p = subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "--runs", out,
                        "--traces", os.path.join(a.workdir, "traces"), "--out", md],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    text = open(md).read()
    for s in ("Full-cache ceiling", "The paper's claims", "BEGIN region half-lives", "long tier"):
        assert s in text, f"report lacks '{s}'"
    print("probes selftest: ok")
    return 0


def lines_ok(path):
    out = []
    for l in open(path):
        try:
            out.append(json.loads(l))
        except json.JSONDecodeError:
            pass
    return out


if __name__ == "__main__":
    sys.exit(main())
