#!/usr/bin/env python3
"""llama_fair.py — memdecayd's rows on llama.cpp over the fair comparison's traces, scored the
way fair_report.py scores the transformers rows (docs/kvpress.md, "A fair fight").

    llama_fair.py RUNS.jsonl MANIFEST.json [--json OUT]

RUNS.jsonl is bench/probes/run.py's output (memdecay-agent with one memdecayd, a full-cache
run per trace); MANIFEST.json the traces' manifest (gen_traces.py), for each fact's age.  Only
probes that pass in their trace's full-cache run are scored.  Per policy and budget, and all
budgets pooled: retention of unpinned facts (old: age_fraction > 0.5, recent: the rest) and of
system facts, each with a 95% bootstrap interval."""
import argparse
import json
import os
import sys

import numpy as np

from report import boot

SEED = 17


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs")
    ap.add_argument("manifest")
    ap.add_argument("--json")
    a = ap.parse_args()
    for p in (a.runs, a.manifest):
        if not os.path.exists(p):
            ap.error("%s missing" % p)
    age = {(t, f["question"]): f["age_fraction"]
           for t, tr in json.load(open(a.manifest))["traces"].items() for f in tr["facts"]}
    runs = [json.loads(x) for x in open(a.runs) if x.strip()]
    runs = [r for r in runs if r.get("ok")]
    ceiling = {(r["trace"], p["question"]) for r in runs if r["policy"] == "full"
               for p in r["result"]["probes"] if p["passed"]}
    cells = {}
    for r in runs:
        if r["policy"] == "full":
            continue
        for p in r["result"]["probes"]:
            k = (r["trace"], p["question"])
            if k not in ceiling:
                continue
            g = "system" if p["region"] == "system" else (
                "old" if (age.get(k) or 0) > 0.5 else "recent")
            for b in (r["budget_fraction"], "all"):
                for grp in {g, "unpinned" if g != "system" else "system"}:
                    cells.setdefault((r["policy"], b, grp), []).append(float(p["passed"]))
    rng = np.random.default_rng(SEED)
    out = {"%s|%s|%s" % k: {"passed": int(sum(v)), "scored": len(v), "ci": boot(v, rng)}
           for k, v in sorted(cells.items(), key=lambda kv: str(kv[0]))}
    groups = ("unpinned", "old", "recent", "system")
    print("| policy | budget | " + " | ".join(groups) + " |")
    print("|---|---|" + "---|" * len(groups))
    for pol in sorted({k[0] for k in cells}):
        for b in sorted({k[1] for k in cells if k[0] == pol}, key=str):
            row = []
            for g in groups:
                c = out.get("%s|%s|%s" % (pol, b, g))
                row.append("—" if not c else "%.0f%% [%.0f–%.0f] (%d/%d)" % (
                    100 * c["ci"][0], 100 * c["ci"][1], 100 * c["ci"][2], c["passed"],
                    c["scored"]))
            print("| %s | %s | %s |" % (pol, b if b == "all" else "%d%%" % round(100 * b),
                                        " | ".join(row)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"source": a.runs, "cells": out, "ceiling": len(ceiling)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
