#!/usr/bin/env python3
"""fair_report.py — the fair comparison's report (docs/kvpress.md, "A fair fight"): retention of
unpinned facts split by the fact's age, MemDecay's row against the strongest fair baseline,
system probes apart.

    fair_report.py OUT [--md-row ROW] [--mode online] [--docs] [--expect-rows] [--json FILE]

OUT is a run.py output directory (runs.jsonl, reference.jsonl).  A probe is scored only where
it passed at full cache.  Groups: `system` (the pinned region), `unpinned` (every other
region), split into `old` (more than half of the trace after the fact: age_fraction > 0.5) and
`recent` (the rest).  The fair baselines are the press rows that are pinned and paged
(`kv:NAME+pin+page`: the same protection and granularity as memdecayd's rows); the strongest
is the one with the highest unpinned retention over all budgets, chosen on OUT itself (which
can only favour the baseline).  MemDecay's row is --md-row, chosen beforehand on the tuning
traces; without it the best MemDecay row on OUT is taken and the report says so.  Paired
comparisons are per probe (same trace, question and budget): wins, ties and losses on
pass/fail and on Δ log-prob, two-sided exact sign tests, 95% bootstrap intervals."""
import argparse
import json
import os
import sys

import numpy as np

from report import boot, load, probe_rows, replace_section, sign_test, write_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEED = 17
BEGIN = "<!-- BEGIN fair kvpress comparison, %s (bench/kvpress/fair_report.py writes this section) -->"
END = "<!-- END fair kvpress comparison, %s -->"
OLD_BEGIN = "<!-- BEGIN kvpress comparison"
GROUPS = ("unpinned", "old", "recent", "system")


def group_of(p):
    if p["region"] == "system":
        return "system"
    return "old" if (p.get("age_fraction") or 0) > 0.5 else "recent"


def in_group(p, g):
    k = group_of(p)
    return k == g or (g == "unpinned" and k != "system")


def is_md(row):
    return not row.startswith("kv:")


def is_fair_baseline(row):
    return row.startswith("kv:") and row.endswith("+pin+page")


def is_unpinned_press(row):
    return row.startswith("kv:") and "+pin" not in row


class Report:
    def __init__(self, out, mode, complete_only=False, budgets=None):
        runs, self.refs = load(out)
        self.runs = [r for r in runs if r["mode"] == mode
                     and (budgets is None or r["budget"] in budgets)]
        self.partial = []
        if complete_only:   # a run stopped mid-trace: only traces every row finished
            cells = {}
            for r in self.runs:
                cells.setdefault(r["trace"], set()).add((r["row"], r["budget"]))
            full = max((len(c) for c in cells.values()), default=0)
            self.partial = sorted(t for t, c in cells.items() if len(c) < full)
            self.runs = [r for r in self.runs if r["trace"] not in self.partial]
        self.mode = mode
        self.pr = probe_rows(self.runs)
        self.rows = sorted({r["row"] for r in self.runs}, key=lambda x: (is_md(x), x))
        self.budgets = sorted({r["budget"] for r in self.runs})
        self.rng = np.random.default_rng(SEED)
        self.by = {}
        for p in self.pr:
            self.by.setdefault((p["row"], p["budget"]), []).append(p)

    def probes(self, row, budget, group):
        bs = self.budgets if budget is None else [budget]
        return [p for b in bs for p in self.by.get((row, b), []) if in_group(p, group)]

    def retention(self, row, budget, group):
        ps = self.probes(row, budget, group)
        ci = boot([float(p["passed"]) for p in ps], self.rng)
        return {"passed": sum(p["passed"] for p in ps), "scored": len(ps), "ci": ci}

    def dlp(self, row, budget, group):
        return boot([p["dlp"] for p in self.probes(row, budget, group)], self.rng)

    def paired(self, a, b, budget, group):
        key = lambda p: (p["trace"], p["question"], p["budget"])  # noqa: E731
        pa = {key(p): p for p in self.probes(a, budget, group)}
        pb = {key(p): p for p in self.probes(b, budget, group)}
        both = sorted(set(pa) & set(pb))
        w = sum(pa[k]["passed"] and not pb[k]["passed"] for k in both)
        lo = sum(pb[k]["passed"] and not pa[k]["passed"] for k in both)
        diff = [pa[k]["dlp"] - pb[k]["dlp"] for k in both]
        dw = sum(d > 1e-6 for d in diff)
        dl = sum(d < -1e-6 for d in diff)
        return {"pairs": len(both), "wins": w, "ties": len(both) - w - lo, "losses": lo,
                "p": sign_test(w, lo), "dlp_diff": boot(diff, self.rng), "dlp_wins": dw,
                "dlp_losses": dl, "dlp_p": sign_test(dw, dl),
                "lost": [k for k in both if pb[k]["passed"] and not pa[k]["passed"]]}

    def strongest(self, pred):
        """The row with the highest unpinned retention over all budgets, ties broken by the
        mean Δ log-prob."""
        def key(r):
            ret, d = self.retention(r, None, "unpinned")["ci"], self.dlp(r, None, "unpinned")
            return ((ret or [0])[0], (d or [-1e9])[0])
        names = [r for r in self.rows if pred(r)]
        return max(names, key=key) if names else None


def verdict(c):
    if c["p"] < 0.05:
        return "**win**" if c["wins"] > c["losses"] else "**loss**"
    return "tie (p ≥ 0.05)"


def pct(r):
    if not r["scored"]:
        return "—"
    m, lo, hi = r["ci"]
    return "%.0f%% [%.0f–%.0f] (%d/%d)" % (100 * m, 100 * lo, 100 * hi, r["passed"], r["scored"])


def num(ci):
    return "—" if ci is None else "%+.2f [%+.2f, %+.2f]" % tuple(ci)


def bname(b):
    return "all" if b is None else "%d%%" % round(100 * b)


def build(R, md_row, md_note):
    base = R.strongest(is_fair_baseline)
    S = {"mode": R.mode, "md_row": md_row, "md_row_chosen": md_note, "baseline": base,
         "budgets": R.budgets, "rows": {}, "headline": [], "unpinned_pair": None}
    for row in R.rows:
        S["rows"][row] = {bname(b): {g: R.retention(row, b, g) for g in GROUPS}
                          for b in R.budgets + [None]}
        for b in R.budgets + [None]:
            S["rows"][row][bname(b)]["dlp_unpinned"] = R.dlp(row, b, "unpinned")
    S["headline"] = headline(R, md_row, base)
    # the same fight without protection on either side: MemDecay's row unpinned against the
    # strongest press that pins nothing
    nopin, free = md_row + "+nopin" if md_row else None, R.strongest(is_unpinned_press)
    if nopin in R.rows and free:
        S["unpinned_pair"] = {"md_row": nopin, "baseline": free,
                              "rows": headline(R, nopin, free)}
    return S


def headline(R, md_row, base):
    out = []
    if md_row and base:
        for b in R.budgets + [None]:
            for g in ("unpinned", "old", "recent"):
                c = R.paired(md_row, base, b, g)
                c.update(budget=bname(b), group=g, verdict=verdict(c))
                out.append(c)
    return out


def lost_lines(rows, R, md, base):
    """Where MemDecay's row lost: the probes the baseline kept and it did not, by region and
    age, all budgets pooled."""
    pooled = [c for c in rows if c["budget"] == "all" and c["group"] == "unpinned"]
    if not pooled or not pooled[0]["lost"]:
        return []
    region = {(p["trace"], p["question"], p["budget"]): p for p in R.probes(md, None, "unpinned")}
    count = {}
    for k in pooled[0]["lost"]:
        p = region[k]
        key = (p["region"], group_of(p))
        count[key] = count.get(key, 0) + 1
    return ["Probes %s kept and %s lost (all budgets): %s." % (
        base, md, ", ".join("%s %s %d" % (r, g, n) for (r, g), n in
                            sorted(count.items(), key=lambda kv: -kv[1]))), ""]


def headline_table(S, md, base, rows):
    L = ["| budget | facts | %s | %s | wins/ties/losses | p | Δlog-p, %s − baseline | "
         "Δlog-p W/L, p | verdict |" % (md, base, md),
         "|---|---|---|---|---|---|---|---|---|"]
    for c in rows:
        L.append("| %s | %s | %s | %s | %d/%d/%d | %.3g | %s | %d/%d, %.3g | %s |" % (
            c["budget"], c["group"], pct(S["rows"][md][c["budget"]][c["group"]]),
            pct(S["rows"][base][c["budget"]][c["group"]]), c["wins"], c["ties"],
            c["losses"], c["p"], num(c["dlp_diff"]), c["dlp_wins"], c["dlp_losses"],
            c["dlp_p"], c["verdict"]))
    return L + [""]


def markdown(S, R, source, json_path=None):
    md, base = S["md_row"], S["baseline"]
    L = ["*Generated by `bench/kvpress/fair_report.py` from `%s`, mode `%s`.*" % (source, S["mode"]),
         ""]
    if md and base:
        L += ["**%s against the strongest fair baseline, %s** (pinned and paged: the system "
              "message and the newest 2 pages kept, whole 16-token pages, one set for every "
              "layer and head, as memdecayd keeps them). MemDecay's row: %s. Unpinned probes "
              "only; paired per probe; a win or loss needs a two-sided sign test at p < 0.05."
              % (md, base, S["md_row_chosen"]), ""]
        L += headline_table(S, md, base, S["headline"])
        L += lost_lines(S["headline"], R, md, base)
    u = S["unpinned_pair"]
    if u:
        L += ["**Without protection on either side: %s against the strongest press that pins "
              "nothing, %s.**" % (u["md_row"], u["baseline"]), ""]
        L += headline_table(S, u["md_row"], u["baseline"], u["rows"])
        L += lost_lines(u["rows"], R, u["md_row"], u["baseline"])
    L += ["Every row, all budgets pooled%s. " % (" (per budget in `%s`)" % json_path if json_path else "") +
          "Retention [95% interval] (passes/scored); Δlog-p: mean change of the gold answer's "
          "log-probability against full cache on unpinned probes.", "",
          "| row | unpinned | old | recent | Δlog-p unpinned | system |",
          "|---|---|---|---|---|---|"]
    for row in R.rows:
        c = S["rows"][row]["all"]
        L.append("| %s | %s | %s | %s | %s | %s |" % (
            row, pct(c["unpinned"]), pct(c["old"]), pct(c["recent"]), num(c["dlp_unpinned"]),
            pct(c["system"])))
    L += ["", "Unpinned retention per budget:", "",
          "| row | " + " | ".join(bname(b) for b in S["budgets"]) + " |",
          "|---|" + "---|" * len(S["budgets"])]
    for row in R.rows:
        L.append("| %s | %s |" % (row, " | ".join(pct(S["rows"][row][bname(b)]["unpinned"])
                                                  for b in S["budgets"])))
    return L


def write_docs(lines, header, model, begin=BEGIN, end=END, before=OLD_BEGIN):
    """Writes (or replaces) model's section of docs/results.md between the markers begin and
    end (each with %s for the model); a new one goes before the marker `before` where there is
    one (the first run's section), else at the end."""
    res = os.path.join(ROOT, "docs", "results.md")
    text = open(res).read()
    begin, end = begin % model, end % model
    sec = [begin, ""] + header + lines + ["", end]
    new = replace_section(text, begin, end, sec)
    if new is None and before and before in text:
        head, rest = text.split(before, 1)
        new = head + "\n".join(sec) + "\n\n" + before + rest
    elif new is None:
        new = text.rstrip("\n") + "\n\n" + "\n".join(sec) + "\n"
    write_atomic(res, new)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="run.py's output directory")
    ap.add_argument("--mode", default="online", choices=("online", "oneshot"))
    ap.add_argument("--md-row", help="MemDecay's row for the headline, chosen on other traces")
    ap.add_argument("--md-row-note", default="chosen beforehand on the tuning traces",
                    help="how --md-row was chosen, for the headline")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--complete-only", action="store_true",
                    help="leave out traces that not every row finished (a run stopped early)")
    ap.add_argument("--best-md", action="store_true",
                    help="print the MemDecay row with the highest unpinned retention on OUT "
                    "(the tuning traces) and exit")
    ap.add_argument("--docs", metavar="HEADER_FILE",
                    help="write docs/results.md's fair section: HEADER_FILE's lines, then the "
                    "tables")
    ap.add_argument("--expect-rows", action="store_true",
                    help="fail unless every row of run.py's fair set ran in this mode at every "
                    "budget, with scored probes")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.out, "runs.jsonl")):
        ap.error("%s has no runs.jsonl (run bench/kvpress/run.py first)" % a.out)
    R = Report(a.out, a.mode, a.complete_only)
    if R.partial:
        print("fair_report: left out, not finished by every row: %s" % ", ".join(R.partial),
              file=sys.stderr)
    if a.best_md:
        print(R.strongest(is_md))
        return 0
    md, note = a.md_row, a.md_row_note
    if md and md not in R.rows:
        ap.error("--md-row %s has no runs in %s (rows: %s)" % (md, a.out, ", ".join(R.rows)))
    if not md:
        md, note = R.strongest(is_md), "the best MemDecay row on these same traces"
    S = build(R, md, note)
    src = os.path.relpath(os.path.join(a.out, "runs.jsonl"), ROOT)
    lines = markdown(S, R, src, os.path.relpath(a.json, ROOT) if a.json else None)
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(S, source=src), f, indent=1)
    if a.docs:
        models = sorted({r.get("model", "?") for r in R.runs})
        print("wrote", write_docs(lines, open(a.docs).read().splitlines(), "+".join(models)),
              file=sys.stderr)
    if a.expect_rows:
        import run as bench
        want = [r for r in bench.FAIR_ROWS if bench.runs_in(r, a.mode)]
        missing = [(r, bname(b)) for r in want for b in R.budgets
                   if not R.by.get((r, b))]
        if missing:
            print("fair_report: rows without scored probes: %s" % missing, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
