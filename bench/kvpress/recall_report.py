#!/usr/bin/env python3
"""recall_report.py — the recall comparison (docs/kvpress.md, "Recall"): MemDecay's row with a
host tier and recall, the ArkVale-style row (the same tier, estimates and recall rule, recency
eviction, no regions), the strongest fair press and the same MemDecay row without a tier, at the
resident budgets 25% and 50%, online.

    recall_report.py OUT [--md-row ROW] [--json FILE] [--docs HEADER_FILE] [--expect-rows]

OUT is a run.py output directory holding the fair set's runs and the tier rows' (run.py --rows
recall) on the same traces.  Unpinned probes, split by age as fair_report.py splits them;
paired per probe (same trace, question and budget), two-sided exact sign tests.  The targets
(issue: "Evicted is not lost"): MemDecay with recall keeps at least 2× the strongest press's
unpinned facts, and at least the ArkVale-style row's, old and recent apart.  Resident budget
and tier bytes are reported beside the retention."""
import argparse
import json
import os
import sys

import numpy as np

from fair_report import Report, bname, is_fair_baseline, num, pct, verdict, write_docs
import run as bench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUDGETS = tuple(float(x) for x in bench.RECALL_BUDGETS.split(","))
BEGIN = "<!-- BEGIN recall comparison, %s (bench/kvpress/recall_report.py writes this section) -->"
END = "<!-- END recall comparison, %s -->"
ARK = "arkvale-style"


def tier_cost(R, row):
    """Per budget: mean resident budget (tokens), tier pages and bytes held at the end of the
    trace (mean, max), restores while the trace was fed, pages recalled per question, recall
    waits that timed out."""
    out = {}
    for b in R.budgets:
        runs = [r for r in R.runs if r["row"] == row and r["budget"] == b]
        if not runs:
            continue
        qs = [p for r in runs for p in r["probes"]]
        out[bname(b)] = {
            "runs": len(runs),
            "budget_tokens_mean": float(np.mean([r["budget_tokens"] for r in runs])),
            "trace_tokens_mean": float(np.mean([r["trace_tokens"] for r in runs])),
            "tier_pages_mean": float(np.mean([r["feed"]["tier_pages"] for r in runs])),
            "tier_bytes_mean": float(np.mean([r["feed"]["tier_bytes"] for r in runs])),
            "tier_bytes_max": int(max(r["tier_bytes_max"] for r in runs)),
            "feed_restores_mean": float(np.mean([r["feed"]["restores"] for r in runs])),
            "feed_estimates_mean": float(np.mean([r["feed"]["estimates"] for r in runs])),
            "question_recalls_mean": float(np.mean([p["recalled"] for p in qs])) if qs else 0.0,
            "questions_with_recall": sum(p["recalled"] > 0 for p in qs),
            "questions": len(qs),
            "recall_timeouts": sum(p["recall_timeouts"] for p in qs)}
    return out


def build(R, md_row, base):
    plain = bench.TIER_ROWS.get(md_row)
    rows = [r for r in (md_row, ARK, base, plain) if r and r in R.rows]
    S = {"md_row": md_row, "arkvale": ARK if ARK in R.rows else None, "press": base,
         "plain": plain if plain in R.rows else None, "budgets": R.budgets, "rows": {},
         "pairs": {}, "targets": [], "tier": {}}
    for row in rows:
        S["rows"][row] = {bname(b): {g: R.retention(row, b, g)
                                     for g in ("unpinned", "old", "recent")}
                          for b in R.budgets + [None]}
    for name, other in (("press", base), ("arkvale", S["arkvale"]), ("plain", S["plain"])):
        if not other:
            continue
        S["pairs"][name] = []
        for b in R.budgets + [None]:
            for g in ("unpinned", "old", "recent"):
                c = R.paired(md_row, other, b, g)
                c.pop("lost")
                c.update(budget=bname(b), group=g, verdict=verdict(c), other=other)
                S["pairs"][name].append(c)
    for row in (md_row, ARK):
        if row in R.rows:
            S["tier"][row] = tier_cost(R, row)
    # the targets, pooled over both budgets and per budget
    for b in R.budgets + [None]:
        md = S["rows"][md_row][bname(b)]
        if base:
            pr = S["rows"][base][bname(b)]["unpinned"]
            S["targets"].append({
                "target": "unpinned facts >= 2x %s's" % base, "budget": bname(b),
                "measured": "%d against %d (%s)" % (md["unpinned"]["passed"], pr["passed"],
                                                   ratio(md["unpinned"]["passed"], pr["passed"])),
                "met": md["unpinned"]["passed"] >= 2 * pr["passed"]})
        if S["arkvale"]:
            for g in ("old", "recent"):
                ak = S["rows"][ARK][bname(b)][g]
                S["targets"].append({
                    "target": "%s facts >= %s's" % (g, ARK), "budget": bname(b),
                    "measured": "%d against %d of %d" % (md[g]["passed"], ak["passed"],
                                                         ak["scored"]),
                    "met": md[g]["passed"] >= ak["passed"]})
    return S


def ratio(a, b):
    return "%.2f×" % (a / b) if b else "∞" if a else "—"


def pair_table(S, md, rows):
    L = ["| budget | facts | %s | %s | wins/ties/losses | p | Δlog-p, difference | verdict |"
         % (md, rows[0]["other"]), "|---|---|---|---|---|---|---|---|"]
    for c in rows:
        L.append("| %s | %s | %s | %s | %d/%d/%d | %.3g | %s | %s |" % (
            c["budget"], c["group"], pct(S["rows"][md][c["budget"]][c["group"]]),
            pct(S["rows"][c["other"]][c["budget"]][c["group"]]), c["wins"], c["ties"],
            c["losses"], c["p"], num(c["dlp_diff"]), c["verdict"]))
    return L + [""]


def mib(x):
    return "%.1f MiB" % (x / 2 ** 20)


def markdown(S, R, source, evals):
    md = S["md_row"]
    L = ["*Generated by `bench/kvpress/recall_report.py` from `%s`, online, budgets %s.*"
         % (source, ", ".join(bname(b) for b in S["budgets"])), "",
         "**%d scored unpinned evaluations** at these budgets (probe × row × budget, over the %d "
         "rows run on these traces), %d of them in the rows below." % (
             evals["all_rows"], evals["n_rows"], evals["these_rows"]), ""]
    L += ["**Targets.**", "", "| target | budget | measured | met |", "|---|---|---|---|"]
    for t in S["targets"]:
        L.append("| %s | %s | %s | %s |" % (t["target"], t["budget"], t["measured"],
                                             "yes" if t["met"] else "**no**"))
    L += ["", "**Retention, unpinned facts** [95% interval] (passes/scored), resident budget "
          "and tier side by side:", "",
          "| row | budget | resident budget (mean tokens of trace) | tier at the trace's end "
          "(mean pages, mean bytes; max bytes) | unpinned | old | recent |",
          "|---|---|---|---|---|---|---|"]
    for row in S["rows"]:
        for b in S["budgets"] + [None]:
            bn = bname(b)
            tc = S["tier"].get(row, {}).get(bn)
            runs = [r for r in R.runs if r["row"] == row and (b is None or r["budget"] == b)]
            res = ("%.0f of %.0f" % (np.mean([r["budget_tokens"] for r in runs]),
                                     np.mean([r["trace_tokens"] for r in runs]))
                   if runs and b is not None else "—")
            tier = ("%.1f pages, %s; %s" % (tc["tier_pages_mean"], mib(tc["tier_bytes_mean"]),
                                             mib(tc["tier_bytes_max"])) if tc else
                    "none" if b is not None else "—")
            c = S["rows"][row][bn]
            L.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                row, bn, res, tier, pct(c["unpinned"]), pct(c["old"]), pct(c["recent"])))
    L.append("")
    for name, title in (("press", "against the strongest fair press"),
                        ("arkvale", "against the ArkVale-style row (what regions add)"),
                        ("plain", "against the same row without a tier (what recall adds)")):
        if S["pairs"].get(name):
            L += ["**%s %s, %s.** Paired per probe; a win or loss needs p < 0.05." % (
                md, title, S["pairs"][name][0]["other"]), ""]
            L += pair_table(S, md, S["pairs"][name])
    L += ["**Recall at work** (per budget): restores while the trace was fed (mean per run), "
          "pages recalled by a probe's question (mean), questions that recalled at least one "
          "page, recall waits that timed out.", "",
          "| row | budget | restores while fed | recalled per question | questions recalling | "
          "timeouts |", "|---|---|---|---|---|---|"]
    for row, per in S["tier"].items():
        for bn, tc in per.items():
            L.append("| %s | %s | %.1f | %.2f | %d of %d | %d |" % (
                row, bn, tc["feed_restores_mean"], tc["question_recalls_mean"],
                tc["questions_with_recall"], tc["questions"], tc["recall_timeouts"]))
    return L + [""]


def count_evals(R, rows):
    every = [p for p in R.pr if p["region"] != "system"]
    return {"all_rows": len(every), "n_rows": len(R.rows),
            "these_rows": sum(p["row"] in rows for p in every)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="run.py's output directory (the fair set's and the tier rows' runs)")
    ap.add_argument("--md-row", default="memdecay-turn+dens+tier",
                    help="MemDecay's tier row (one of %s)" % ", ".join(bench.TIER_ROWS))
    ap.add_argument("--press", help="the strongest fair press (default: the pinned and paged "
                    "press with the highest unpinned retention in OUT at these budgets; "
                    "run_fair.sh passes the fair comparison's own choice)")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--docs", metavar="HEADER_FILE",
                    help="write docs/results.md's recall section: HEADER_FILE's lines, then the "
                    "tables")
    ap.add_argument("--expect-rows", action="store_true",
                    help="fail unless MemDecay's tier row, the ArkVale-style row and a fair "
                    "press have scored probes at every budget that ran")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.out, "runs.jsonl")):
        ap.error("%s has no runs.jsonl (run bench/kvpress/run.py first)" % a.out)
    if a.md_row not in bench.TIER_ROWS:
        ap.error("--md-row %s is not a tier row (%s)" % (a.md_row, ", ".join(bench.TIER_ROWS)))
    R = Report(a.out, "online", budgets=BUDGETS)
    if a.md_row not in R.rows:
        ap.error("--md-row %s has no runs in %s at budgets %s (run.py --rows recall)"
                 % (a.md_row, a.out, bench.RECALL_BUDGETS))
    if a.press and a.press not in R.rows:
        ap.error("--press %s has no runs in %s at budgets %s" % (a.press, a.out,
                                                                  bench.RECALL_BUDGETS))
    S = build(R, a.md_row, a.press or R.strongest(is_fair_baseline))
    S["evaluations"] = count_evals(R, list(S["rows"]))
    src = os.path.relpath(os.path.join(a.out, "runs.jsonl"), ROOT)
    lines = markdown(S, R, src, S["evaluations"])
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(S, source=src), f, indent=1)
    if a.docs:
        models = sorted({r.get("model", "?") for r in R.runs})
        print("wrote", write_docs(lines, open(a.docs).read().splitlines(), "+".join(models),
                                  BEGIN, END, None), file=sys.stderr)
    if a.expect_rows:
        missing = [(r, bname(b)) for r in (a.md_row, ARK, S["press"]) for b in R.budgets
                   if not r or not R.by.get((r, b))] or ([] if R.budgets else ["no budget"])
        if missing:
            print("recall_report: rows without scored probes: %s" % missing, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
