#!/usr/bin/env python3
"""llama_rows.py — MemDecay's llama.cpp rows for the kvpress comparison (docs/kvpress.md).

Reads the runs that bench/kvpress/run_llama.sh made with bench/probes/run.py (memdecay-agent:
llama.cpp, the pinned GGUF, memdecayd's policies) on the kvpress traces, and scores them the
way the probe benchmark does (bench/probes/probelib.py, stats.py): only probes that pass in
their trace's full-cache run are scored; per row and budget, and all budgets pooled, retention
(pass rate) and the mean Δ log-prob of the gold answer against the full cache, each with a 95%
percentile bootstrap interval over scored probes (stats.py: 10,000 resamples, seed 13).

    llama_rows.py [RUNS.jsonl] [--traces DIR] [--json OUT]
        defaults: bench/kvpress/results/llama-runs.jsonl, bench/kvpress/results/traces,
        llama.json next to RUNS.jsonl

Writes the JSON and prints a markdown table.  Rows are named as in the kvpress report
(memdecay, memdecay-norm, memdecay-turn, md-h2o, md-recency, md-random); cells carry
"retention" and "dlp" as [mean, low, high] like report.py's summary.json.  markdown(path)
renders a written llama.json for report.py.
"""
import argparse
import collections
import hashlib
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "probes"))
import probelib  # noqa: E402
import stats  # noqa: E402
import jsonl  # noqa: E402  (bench/kvpress/jsonl.py)

# run.py's policy → the kvpress report's row name
ROWS = collections.OrderedDict([
    ("memdecay", "memdecay"), ("memdecay-norm", "memdecay-norm"),
    ("memdecay-turn", "memdecay-turn"), ("h2o", "md-h2o"), ("recency", "md-recency"),
    ("random", "md-random")])
DEFAULT_RUNS = os.path.join(HERE, "results", "llama-runs.jsonl")
DEFAULT_TRACES = os.path.join(HERE, "results", "traces")


def log(msg):
    print("llama_rows: " + msg, file=sys.stderr, flush=True)


def current_traces(tdir):
    """{name: sha256} of the *.jsonl traces in tdir (run.py's key hashes the same bytes)."""
    if not tdir or not os.path.isdir(tdir):
        return None
    return {n: hashlib.sha256(open(os.path.join(tdir, n), "rb").read()).hexdigest()
            for n in sorted(os.listdir(tdir)) if n.endswith(".jsonl")}


def select_runs(runs, traces):
    """Finished runs of the traces as they are now (a trace rewritten since leaves its old runs
    out), of one model (the one of the latest run), of the full cache and ROWS' policies."""
    ok = [r for r in runs.values() if r.get("ok")]
    if traces is not None:
        stale = {r["trace"] for r in ok if traces.get(r["trace"]) not in (None, r["trace_sha256"])}
        if stale:
            log("left out runs of traces rewritten since: " + ", ".join(sorted(stale)))
        ok = [r for r in ok if traces.get(r["trace"]) == r["trace_sha256"]]
    models = sorted({r["model"] for r in ok})
    if len(models) > 1:
        model = max(ok, key=lambda r: r.get("finished_at", ""))["model"]
        log(f"runs of {len(models)} models ({', '.join(models)}); scoring {model}'s")
        ok = [r for r in ok if r["model"] == model]
    return {r["key"]: r for r in ok if r["policy"] == probelib.FULL or r["policy"] in ROWS}


def triple(mean, ci):
    return None if mean is None else [mean, ci[0], ci[1]]


def kvpress_traces(path):
    """The traces the transformers rows ran on (names in bench/kvpress/run.py's runs.jsonl):
    run.py screens traces by their full-cache passes, so the folder holds more than ran."""
    if not path or not os.path.exists(path):
        return None
    return {o["trace"] for o in jsonl.records(path) if "trace" in o}


def summarise(runs_path, traces_dir, only=None):
    all_runs = probelib.load_runs(runs_path)
    traces = current_traces(traces_dir)
    if traces is not None and only is not None:
        traces = {n: h for n, h in traces.items() if n in only}
    runs = select_runs(all_runs, traces)
    manifest_path = os.path.join(traces_dir, "manifest.json") if traces_dir else ""
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else None
    rows, ceilings = probelib.probe_rows(runs, manifest)
    budgets = sorted({r["budget_fraction"] for r in rows})
    policies = [p for p in ROWS if any(r["policy"] == p for r in rows)]
    pinned = set(probelib.PINNED_DEFAULT)
    rng = random.Random(stats.SEED)
    res_all = stats.summarise(rows, policies, budgets, [], rng)
    res_unp = stats.summarise(stats.select(rows, "unpinned", pinned), policies, budgets, [], rng)
    unp = {(c["policy"], c["budget"]): c for c in res_unp["cells"]}
    n_runs = collections.Counter((r["policy"], r["budget_fraction"]) for r in runs.values())
    cells = []
    for c in res_all["cells"]:
        pol, b = c["policy"], c["budget"]
        sel = [r for r in rows if r["policy"] == pol and (b is None or r["budget_fraction"] == b)]
        pin = [r for r in sel if r["region"] in pinned]
        u = unp[(pol, b)]
        cells.append({
            "row": ROWS[pol], "policy": pol, "budget": b,
            "runs": sum(n for (p, f), n in n_runs.items() if p == pol and (b is None or f == b)),
            "scored": c["scored"], "passed": c["passed"],
            "retention": triple(c["retention"], c["retention_ci95"]),
            "retention_unpinned": triple(u["retention"], u["retention_ci95"]),
            "pinned": [sum(r["passed"] for r in pin), len(pin)],
            "dlp": triple(c["delta_logprob_mean"], c["delta_logprob_ci95"]),
            "dlp_scored": sum(1 for r in sel if r["delta_logprob"] is not None),
            "dlp_median": c["delta_logprob_median"]})
    violations = sum(1 for r in runs.values() if r.get("invariant_violations"))
    expected = None
    if traces is not None:
        expected = {"traces": len(traces), "runs": len(traces) * (1 + len(ROWS) * len(budgets))}
    return {
        "engine": "llama.cpp (memdecay-agent, bench/probes/run.py)",
        "model": sorted({r["model"] for r in runs.values()}),
        "runs_file": os.path.relpath(os.path.abspath(runs_path), ROOT),
        "traces": sorted(ceilings), "budgets": budgets,
        "rows": [ROWS[p] for p in policies],
        "runs": len(runs), "runs_failed": sum(1 for r in all_runs.values() if not r.get("ok")),
        "runs_with_invariant_violations": violations, "expected": expected,
        "ceiling": [sum(1 for c in ceilings.values() for p in c.values() if p.get("passed")),
                    sum(len(c) for c in ceilings.values())],
        "scored_evaluations": len(rows),
        "bootstrap": {"resamples": stats.B, "seed": stats.SEED, "unit": "scored probe",
                      "interval": "95% percentile"},
        "cells": cells}


def _pct(ci):
    return "—" if not ci else "%.0f%% [%.0f, %.0f]" % tuple(100 * x for x in ci)


def _num(ci):
    return "—" if not ci else "%+.2f [%+.2f, %+.2f]" % tuple(ci)


def markdown(path):
    """The llama.cpp rows as a markdown table, from a llama.json this script wrote."""
    S = json.load(open(path))
    bs = S["budgets"]
    cell = {(c["row"], c["budget"]): c for c in S["cells"]}
    L = ["llama.cpp rows: memdecay-agent with memdecayd, model %s, %d traces, ceiling %d/%d probes pass at full cache. Per budget and pooled: retention "
         "[95%% interval] · Δ log-prob against the full cache [95%% interval] · scored probes."
         % (", ".join(S["model"]) or "?", len(S["traces"]), S["ceiling"][0], S["ceiling"][1]), "",
         "| row (llama.cpp) | " + " | ".join("%d%%" % round(100 * b) for b in bs) + " | pooled |",
         "|---|" + "---:|" * (len(bs) + 1)]
    for row in S["rows"]:
        out = []
        for b in bs + [None]:
            c = cell.get((row, b))
            out.append("—" if not c or not c["scored"] else "%s · %s · %d" % (
                _pct(c["retention"]), _num(c["dlp"]), c["scored"]))
        L.append("| %s | %s |" % (row, " | ".join(out)))
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("runs", nargs="?", default=DEFAULT_RUNS, help="run.py's runs file")
    ap.add_argument("--traces", default=DEFAULT_TRACES,
                    help="the traces the runs used (runs of other versions are left out)")
    ap.add_argument("--json", help="output (default: llama.json next to the runs file)")
    ap.add_argument("--kvpress-runs", default=os.path.join(HERE, "results", "runs.jsonl"),
                    help="score only the traces that run.py's rows ran on (its runs.jsonl; "
                    "default bench/kvpress/results/runs.jsonl; 'all' scores every trace)")
    a = ap.parse_args()
    if not os.path.exists(a.runs):
        log(f"{a.runs} missing: run bench/kvpress/run_llama.sh first")
        return 2
    only = None if a.kvpress_runs == "all" else kvpress_traces(a.kvpress_runs)
    S = summarise(a.runs, a.traces, only)
    if not S["cells"]:
        log(f"no scored probe in {a.runs}")
        return 1
    out = a.json or os.path.join(os.path.dirname(os.path.abspath(a.runs)), "llama.json")
    with open(out + ".tmp", "w") as f:
        json.dump(S, f, indent=1)
        f.write("\n")
    os.replace(out + ".tmp", out)
    log(f"{S['runs']} runs, ceiling {S['ceiling'][0]}/{S['ceiling'][1]}, "
        f"{S['scored_evaluations']} scored evaluations → {out}")
    if S["runs_failed"] or S["runs_with_invariant_violations"]:
        log(f"{S['runs_failed']} failed runs, {S['runs_with_invariant_violations']} with "
            "invariant violations (see the runs file)")
    print(markdown(out), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
