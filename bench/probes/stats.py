#!/usr/bin/env python3
"""stats.py — retention and Δ log-prob per policy with 95% bootstrap intervals, and paired sign
tests between policies, from one or more runs.jsonl files (run.py).

Only probes that pass at full cache are scored (probelib.probe_rows).  Per policy × budget (and
all budgets pooled): retention = passes / scored probes, mean Δ log-prob (gold answer under
eviction minus at full cache), each with a 95% percentile bootstrap interval over scored probes
(10,000 resamples, fixed seed).  Paired comparisons match the same probe (trace, question,
budget) under two policies: on pass/fail the discordant pairs are counted (A passes where B
fails, and the reverse) and a two-sided exact sign test is applied to them; on Δ log-prob the
sign of the per-probe difference is tested the same way (ties dropped), with the mean difference
and its bootstrap interval.  Stdlib only.

    stats.py RUNS.jsonl [RUNS.jsonl ...] --manifest DIR/manifest.json
             [--against memdecay,random] [--json OUT] [--group unpinned|pinned|all|early]
"""
import argparse
import json
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probelib  # noqa: E402

B = 10000
SEED = 13


def bootstrap_mean(xs, rng):
    if not xs:
        return None, None, None
    n = len(xs)
    m = sum(xs) / n
    means = []
    for _ in range(B):
        s = 0.0
        for _ in range(n):
            s += xs[rng.randrange(n)]
        means.append(s / n)
    means.sort()
    return m, means[int(0.025 * B)], means[min(B - 1, int(0.975 * B))]


def sign_test(k_plus, k_minus):
    """two-sided exact binomial test of k_plus vs k_minus at p = 1/2"""
    n = k_plus + k_minus
    if n == 0:
        return 1.0
    k = min(k_plus, k_minus)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def group_of(r, pinned):
    if r["region"] in pinned:
        return "pinned"
    return "unpinned"


def select(rows, group, pinned):
    if group == "all":
        return rows
    if group == "early":  # unpinned facts with more than half of the trace after them
        return [r for r in rows if r["region"] not in pinned and (r["age_fraction"] or 0) > 0.5]
    return [r for r in rows if group_of(r, pinned) == group]


def summarise(rows, policies, budgets, against, rng):
    out = {"cells": [], "paired": []}
    for pol in policies:
        for b in budgets + [None]:
            sel = [r for r in rows if r["policy"] == pol and (b is None or r["budget_fraction"] == b)]
            ret = bootstrap_mean([1.0 if r["passed"] else 0.0 for r in sel], rng)
            dl = [r["delta_logprob"] for r in sel if r["delta_logprob"] is not None]
            dlm = bootstrap_mean(dl, rng)
            out["cells"].append({
                "policy": pol, "budget": b, "scored": len(sel),
                "passed": sum(r["passed"] for r in sel),
                "retention": ret[0], "retention_ci95": [ret[1], ret[2]],
                "delta_logprob_mean": dlm[0], "delta_logprob_ci95": [dlm[1], dlm[2]],
                "delta_logprob_median": sorted(dl)[len(dl) // 2] if dl else None})
    key = lambda r: (r["trace"], r["question"], r["budget_fraction"])  # noqa: E731
    by = {}
    for r in rows:
        by.setdefault(r["policy"], {})[key(r)] = r
    for pol in policies:
        for other in against:
            if other == pol or other not in by or pol not in by:
                continue
            for b in budgets + [None]:
                ks = [k for k in by[pol] if k in by[other] and (b is None or k[2] == b)]
                wins = sum(1 for k in ks if by[pol][k]["passed"] and not by[other][k]["passed"])
                losses = sum(1 for k in ks if not by[pol][k]["passed"] and by[other][k]["passed"])
                d = [by[pol][k]["delta_logprob"] - by[other][k]["delta_logprob"] for k in ks
                     if by[pol][k]["delta_logprob"] is not None and
                     by[other][k]["delta_logprob"] is not None]
                dpos = sum(1 for x in d if x > 0)
                dneg = sum(1 for x in d if x < 0)
                dm = bootstrap_mean(d, rng)
                out["paired"].append({
                    "policy": pol, "vs": other, "budget": b, "pairs": len(ks),
                    "pass_wins": wins, "pass_losses": losses,
                    "pass_sign_p": sign_test(wins, losses),
                    "dlp_higher": dpos, "dlp_lower": dneg, "dlp_sign_p": sign_test(dpos, dneg),
                    "dlp_diff_mean": dm[0], "dlp_diff_ci95": [dm[1], dm[2]]})
    return out


def fmt_pct(x):
    return "—" if x is None else f"{100 * x:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--policies", default="memdecay,memdecay-norm,random,recency,h2o,memdecay-turn")
    ap.add_argument("--against", default="memdecay,random")
    ap.add_argument("--groups", default="unpinned,early,pinned,all")
    ap.add_argument("--json", help="write the result here")
    a = ap.parse_args()
    runs = {}
    for path in a.runs:
        for k, r in probelib.load_runs(path).items():
            if r.get("ok") and (k not in runs or r["policy"] != probelib.FULL):
                runs.setdefault(k, r)
    manifest = json.load(open(a.manifest))
    rows, ceilings = probelib.probe_rows(runs, manifest)
    policies = [p for p in a.policies.split(",") if p]
    budgets = sorted({r["budget_fraction"] for r in rows})
    pinned = set(probelib.PINNED_DEFAULT)
    rng = random.Random(SEED)
    result = {"runs_files": [os.path.relpath(p) for p in a.runs],
              "traces": sorted(ceilings), "budgets": budgets,
              "ceiling": {"probes": sum(len(c) for c in ceilings.values()),
                          "passed": sum(1 for c in ceilings.values() for p in c.values()
                                        if p.get("passed"))},
              "bootstrap": {"resamples": B, "seed": SEED, "unit": "scored probe"},
              "groups": {}}
    against = [p for p in a.against.split(",") if p]
    for g in [x for x in a.groups.split(",") if x]:
        result["groups"][g] = summarise(select(rows, g, pinned), policies, budgets, against, rng)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    for g, res in result["groups"].items():
        print(f"\n## {g}")
        print(f"{'policy':<15} {'budget':>6} {'n':>4} {'retention % [95%]':>22} "
              f"{'Δlp mean [95%]':>24}")
        for c in res["cells"]:
            b = "all" if c["budget"] is None else f"{c['budget']:.0%}"
            lo, hi = c["retention_ci95"]
            dlo, dhi = c["delta_logprob_ci95"]
            dl = "—" if c["delta_logprob_mean"] is None else \
                f"{c['delta_logprob_mean']:+.2f} [{dlo:+.2f}, {dhi:+.2f}]"
            print(f"{c['policy']:<15} {b:>6} {c['scored']:>4} "
                  f"{fmt_pct(c['retention']):>6} [{fmt_pct(lo)}, {fmt_pct(hi)}]".ljust(52) +
                  f" {dl:>24}")
        print(f"{'paired':<28} {'budget':>6} {'pairs':>5} {'W/L':>7} {'p':>7} "
              f"{'Δlp ±':>9} {'p':>7} {'Δlp diff [95%]':>24}")
        for p in res["paired"]:
            b = "all" if p["budget"] is None else f"{p['budget']:.0%}"
            dd = "—" if p["dlp_diff_mean"] is None else \
                f"{p['dlp_diff_mean']:+.2f} [{p['dlp_diff_ci95'][0]:+.2f}, {p['dlp_diff_ci95'][1]:+.2f}]"
            print(f"{p['policy'] + ' vs ' + p['vs']:<28} {b:>6} {p['pairs']:>5} "
                  f"{p['pass_wins']:>3}/{p['pass_losses']:<3} {p['pass_sign_p']:>7.3f} "
                  f"{p['dlp_higher']:>4}/{p['dlp_lower']:<4} {p['dlp_sign_p']:>7.3f} {dd:>24}")


if __name__ == "__main__":
    main()
