#!/usr/bin/env python3
"""report.py — tables, intervals, paired tests and plots from bench/kvpress/run.py's output.

    report.py OUT                      # writes OUT/summary.json and prints the tables
    report.py OUT --docs               # also bench/results/kvpress.json, the kvpress section of
                                       # docs/results.md and docs/img/kvpress_*.png
    report.py OUT --expect-rows        # exit 1 unless every row has results in every mode and
                                       # budget it was run at (the CI quick check)

Scored probes: those that pass at full cache.  Per row (policy × mode) and budget, and all
budgets pooled: retention (pass rate), Δ log-prob of the gold answer against the full cache,
KL(full ‖ policy) over the answer's positions, the share of the full cache's attention on kept
tokens, each a mean with a 95% percentile bootstrap interval over scored probes (10,000
resamples, fixed seed); for online runs the KL over the trace's own assistant tokens, with its
interval over runs.  Paired comparisons match the same probe (trace, question, budget) under two
rows: discordant pass/fail pairs and the sign of the Δ log-prob difference, each with a two-sided
exact sign test.  Method: docs/kvpress.md."""
import argparse
import json
import math
import os
import sys

import numpy as np

import jsonl

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
B = 10000
SEED = 13
PINNED = {"system"}
MD_ROWS = ["memdecay", "memdecay-norm", "memdecay-turn", "memdecay-cal", "md-h2o", "md-recency",
           "md-random"]
KV_ROWS = ["kv:streaming_llm", "kv:tova", "kv:snapkv", "kv:observed_attention", "kv:knorm",
           "kv:expected_attention", "kv:random"]
BEGIN = "<!-- BEGIN kvpress comparison (bench/kvpress/report.py writes this section) -->"
END = "<!-- END kvpress comparison -->"
KEPT = "<!-- Sections below are written by other scripts or by hand; bench/probes/report.py keeps them. -->"


def sign_test(k_plus, k_minus):
    """Two-sided exact binomial test of k_plus against k_minus at p = 1/2."""
    n = k_plus + k_minus
    if n == 0:
        return 1.0
    k = min(k_plus, k_minus)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def boot(xs, rng):
    """(mean, low, high): 95% percentile bootstrap interval of the mean."""
    xs = np.asarray([x for x in xs if x is not None], dtype=float)
    if len(xs) == 0:
        return None
    means = xs[rng.integers(0, len(xs), size=(B, len(xs)))].mean(1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return [float(xs.mean()), float(lo), float(hi)]


def load(out):
    seen = {}
    for r in jsonl.records(os.path.join(out, "runs.jsonl")):
        # a rerun of the same cell replaces the earlier one
        seen[(r["trace"], r["row"], r["mode"], r["budget"])] = r
    refs = {o["trace"]: o for o in jsonl.records(os.path.join(out, "reference.jsonl"))}
    return list(seen.values()), refs


def probe_rows(runs):
    rows = []
    for r in runs:
        for p in r["probes"]:
            rows.append(dict(p, trace=r["trace"], row=r["row"], mode=r["mode"], budget=r["budget"]))
    return rows


def summarise(runs, refs):
    rng = np.random.default_rng(SEED)
    pr = probe_rows(runs)
    rows = sorted({r["row"] for r in runs}, key=lambda x: (x in MD_ROWS, x))
    modes = [m for m in ("online", "oneshot") if any(r["mode"] == m for r in runs)]
    budgets = sorted({r["budget"] for r in runs})
    cells = []
    for row in rows:
        for mode in modes:
            for b in budgets + [None]:
                sel = [p for p in pr if p["row"] == row and p["mode"] == mode
                       and (b is None or p["budget"] == b)]
                rsel = [r for r in runs if r["row"] == row and r["mode"] == mode
                        and (b is None or r["budget"] == b)]
                if not rsel:
                    continue
                unp = [p for p in sel if p["region"] not in PINNED]
                pin = [p for p in sel if p["region"] in PINNED]
                cells.append({
                    "row": row, "mode": mode, "budget": b, "runs": len(rsel), "scored": len(sel),
                    "passed": sum(p["passed"] for p in sel),
                    "retention": boot([float(p["passed"]) for p in sel], rng),
                    "retention_unpinned": boot([float(p["passed"]) for p in unp], rng),
                    "pinned": [sum(p["passed"] for p in pin), len(pin)],
                    "dlp": boot([p["dlp"] for p in sel], rng),
                    "kl_answer": boot([p["kl_answer"] for p in sel], rng),
                    "att_share": boot([p["att_share"] for p in sel], rng),
                    "kl_trace": boot([r["kl_trace"] for r in rsel], rng),
                    "kept_tokens_mean": float(np.mean([r["kept_tokens"] / r["trace_tokens"]
                                                       for r in rsel])),
                    "regions": {reg: [sum(p["passed"] for p in sel if p["region"] == reg),
                                      sum(1 for p in sel if p["region"] == reg)]
                                for reg in sorted({p["region"] for p in sel})}})
    ran = {r["trace"] for r in runs}
    used = [o for t, o in refs.items() if t in ran]
    min_pass = max((o.get("min_pass", 0) for o in refs.values()), default=0)
    return {"rows": rows, "modes": modes, "budgets": budgets, "cells": cells,
            "traces": len(ran),
            "screened_out": sorted(t for t, o in refs.items() if t not in ran),
            "min_pass": min_pass,
            "below_screen_kept": sorted(t for t, o in refs.items() if t in ran and
                                        sum(p["passed"] for p in o["probes"]) < min_pass),
            "trace_tokens": sorted({r["trace_tokens"] for r in runs}),
            "ceiling": [sum(p["passed"] for o in used for p in o["probes"]),
                        sum(len(o["probes"]) for o in used)],
            "scored_evaluations": len(pr)}, pr


def cell(S, row, mode, b):
    for c in S["cells"]:
        if c["row"] == row and c["mode"] == mode and c["budget"] == b:
            return c
    return None


def paired(pr, a, b, mode_a, mode_b, budget, rng):
    key = lambda p: (p["trace"], p["question"], p["budget"])  # noqa: E731
    A = {key(p): p for p in pr if p["row"] == a and p["mode"] == mode_a
         and (budget is None or p["budget"] == budget)}
    Bm = {key(p): p for p in pr if p["row"] == b and p["mode"] == mode_b
          and (budget is None or p["budget"] == budget)}
    ks = [k for k in A if k in Bm]
    wins = sum(1 for k in ks if A[k]["passed"] and not Bm[k]["passed"])
    losses = sum(1 for k in ks if not A[k]["passed"] and Bm[k]["passed"])
    d = [A[k]["dlp"] - Bm[k]["dlp"] for k in ks]
    up = sum(1 for x in d if x > 0)
    down = sum(1 for x in d if x < 0)
    return {"row": a, "mode": mode_a, "vs": b, "vs_mode": mode_b, "budget": budget,
            "pairs": len(ks), "pass_wins": wins, "pass_losses": losses,
            "pass_sign_p": sign_test(wins, losses), "dlp_higher": up, "dlp_lower": down,
            "dlp_sign_p": sign_test(up, down), "dlp_diff": boot(d, rng)}


def best_md(S, mode):
    """MemDecay's best row in a mode: the highest pooled retention, then Δ log-prob."""
    cand = [(cell(S, r, mode, None), r) for r in S["rows"] if r in MD_ROWS]
    cand = [(c, r) for c, r in cand if c and c["retention"]]
    if not cand:
        return None
    return max(cand, key=lambda cr: (cr[0]["retention"][0], cr[0]["dlp"][0]))[1]


def comparisons(S, pr):
    rng = np.random.default_rng(SEED + 1)
    out = []
    kv = [r for r in S["rows"] if r.startswith("kv:")]
    for mode in S["modes"]:
        best = best_md(S, mode)
        if not best:
            continue
        for other in kv:
            for b in S["budgets"] + [None]:
                out.append(dict(paired(pr, best, other, mode, mode, b, rng), best_of_mode=True))
    # against kvpress's one-shot mode, which sees the whole trace: the online best row
    best = best_md(S, "online")
    if best and "oneshot" in S["modes"]:
        for other in kv:
            for b in S["budgets"] + [None]:
                out.append(dict(paired(pr, best, other, "online", "oneshot", b, rng),
                                best_of_mode=False))
    return out


# ---------------------------------------------------------------- formatting

def pct(ci):
    return "—" if not ci else "%.0f%% [%.0f, %.0f]" % tuple(100 * x for x in ci)


def num(ci, fmt="%+.2f"):
    return "—" if not ci else (fmt + " [" + fmt + ", " + fmt + "]") % tuple(ci)


def pval(p):
    return "%.2g" % p if p >= 0.001 else "<0.001"


def label(row):
    return row[3:] + " (kvpress)" if row.startswith("kv:") else row


def verdict(c):
    """(retention, Δlp) verdicts of one paired comparison: win, tie or loss for the MemDecay
    row. Retention: the sign test on discordant pairs at p < 0.05; Δlp: the 95% interval of
    the mean per-probe difference excludes 0."""
    if c["pass_sign_p"] < 0.05 and c["pass_wins"] != c["pass_losses"]:
        ret = "win" if c["pass_wins"] > c["pass_losses"] else "loss"
    else:
        ret = "tie"
    d = c["dlp_diff"]
    dlp = "tie" if not d or d[1] <= 0 <= d[2] else ("win" if d[1] > 0 else "loss")
    return ret, dlp


def headline(S, comps):
    """Per comparison and budget: against how many presses MemDecay's best row wins, ties and
    loses, on retention and on Δ log-prob."""
    L = ["### Headline", "",
         "MemDecay's best row against the %d kvpress presses, per budget: **wins / ties / "
         "losses**. Retention: a win or a loss is a paired sign test at p < 0.05; Δ log-prob: "
         "the 95%% interval of the mean per-probe difference excludes 0. Pinned: the best row's "
         "system probes passed (memdecayd never evicts a system page; a miss is the model's "
         "answer changing with the rest of the cache)." % len(
             {c["vs"] for c in comps}), "",
         "| comparison | best row | budget | retention W/T/L | Δ log-prob W/T/L | pinned |",
         "|---|---|---:|---:|---:|---:|"]
    groups = (("online", "online", "online vs online"), ("oneshot", "oneshot",
              "one-shot vs one-shot"), ("online", "oneshot", "MemDecay online vs kvpress one-shot"))
    for mode, vs_mode, title in groups:
        cs = [c for c in comps if c["mode"] == mode and c["vs_mode"] == vs_mode]
        if not cs:
            continue
        row = cs[0]["row"]
        for b in S["budgets"] + [None]:
            vs = [verdict(c) for c in cs if c["budget"] == b]
            cnt = lambda i: "%d / %d / %d" % tuple(sum(1 for v in vs if v[i] == k)  # noqa: E731
                                                   for k in ("win", "tie", "loss"))
            c0 = cell(S, row, mode, b)
            L.append("| %s | `%s` | %s | %s | %s | %d/%d |" % (
                title, row, "pooled" if b is None else "%d%%" % round(100 * b), cnt(0), cnt(1),
                c0["pinned"][0], c0["pinned"][1]))
    return L + [""]


def tables(S, comps, img_rel=None):
    L = headline(S, comps) if comps else []
    bs = S["budgets"]
    head_b = " | ".join("%d%%" % round(100 * b) for b in bs)
    for mode in S["modes"]:
        what = ("online: the cache held at the budget while the trace is fed, message by message "
                "(kvpress: DecodingPress, compression_interval=1)" if mode == "online" else
                "one-shot: the whole trace compressed to the budget once, before the probes "
                "(kvpress's own mode)")
        L += ["### %s" % what, "",
              "Retention (scored probes passed) per budget with 95% bootstrap intervals, then all "
              "budgets pooled.", "",
              "| row | " + head_b + " | pooled | unpinned | pinned (system) |",
              "|---|" + "---:|" * (len(bs) + 3)]
        for row in S["rows"]:
            c0 = cell(S, row, mode, None)
            if not c0:
                continue
            cs = [cell(S, row, mode, b) for b in bs]
            L.append("| %s | %s | **%s** (%d) | %s | %d/%d |" % (
                label(row), " | ".join(pct(c["retention"]) if c else "—" for c in cs),
                pct(c0["retention"]), c0["scored"], pct(c0["retention_unpinned"]),
                c0["pinned"][0], c0["pinned"][1]))
        L += ["", "Δ log-prob of the gold answer against the full cache (0 = unchanged, "
              "negative = less likely), per budget and pooled; KL, attention share and trace KL "
              "pooled.", "",
              "| row | " + " | ".join("Δlp %d%%" % round(100 * b) for b in bs)
              + " | Δlp pooled | KL answer | attention kept | KL trace |",
              "|---|" + "---:|" * (len(bs) + 4)]
        for row in S["rows"]:
            c0 = cell(S, row, mode, None)
            if not c0:
                continue
            cs = [cell(S, row, mode, b) for b in bs]
            L.append("| %s | %s | **%s** | %s | %s | %s |" % (
                label(row), " | ".join("%+.2f" % c["dlp"][0] if c and c["dlp"] else "—"
                                       for c in cs),
                num(c0["dlp"]), num(c0["kl_answer"], "%.2f"),
                pct(c0["att_share"]), num(c0["kl_trace"], "%.3f") if mode == "online" else "—"))
        L.append("")
    if comps:
        L += ["### Paired: MemDecay's best row against each kvpress press", "",
              "Same probe, same budget, two rows. *wins/losses*: probes one row passes and the "
              "other fails; p: two-sided exact sign test on them. Δlp diff: mean of (best row's "
              "Δlp − press's Δlp) with its bootstrap interval; p: sign test on the signs of the "
              "per-probe differences.", ""]
        for mode, vs_mode, title in (("online", "online", "online against online"),
                                     ("oneshot", "oneshot", "one-shot against one-shot"),
                                     ("online", "oneshot", "MemDecay online against kvpress "
                                      "one-shot (which sees the whole trace first)")):
            cs = [c for c in comps if c["mode"] == mode and c["vs_mode"] == vs_mode]
            if not cs:
                continue
            L += ["**%s** (best MemDecay row: `%s`)" % (title, cs[0]["row"]), "",
                  "| press | budget | pairs | wins/losses | p | Δlp diff | p |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
            for c in cs:
                L.append("| %s | %s | %d | %d/%d | %s | %s | %s |" % (
                    c["vs"][3:], "pooled" if c["budget"] is None else "%d%%" % round(100 * c["budget"]),
                    c["pairs"], c["pass_wins"], c["pass_losses"], pval(c["pass_sign_p"]),
                    num(c["dlp_diff"]), pval(c["dlp_sign_p"])))
            L.append("")
    regions = sorted({reg for c in S["cells"] for reg in c["regions"]})
    if "online" in S["modes"]:
        L += ["### Retention by region, online, all budgets pooled", "",
              "| row | " + " | ".join(regions) + " |", "|---|" + "---:|" * len(regions)]
        for row in S["rows"]:
            c0 = cell(S, row, "online", None)
            if c0:
                L.append("| %s | %s |" % (label(row), " | ".join(
                    "%d/%d" % tuple(c0["regions"].get(reg, [0, 0])) for reg in regions)))
        L.append("")
    if img_rel:
        L += ["![retention against budget](%s/kvpress_retention.png)" % img_rel, "",
              "![Δ log-prob against budget](%s/kvpress_dlp.png)" % img_rel, ""]
    return L


def plots(S, img_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(img_dir, exist_ok=True)
    paths = []
    for key, ylab, fname, scale in (("retention", "retention (%)", "kvpress_retention.png", 100),
                                    ("dlp", "Δ log-prob of the gold answer", "kvpress_dlp.png", 1)):
        fig, axes = plt.subplots(1, len(S["modes"]), figsize=(6.5 * len(S["modes"]), 4.8),
                                 sharey=True, squeeze=False)
        for ax, mode in zip(axes[0], S["modes"]):
            for i, row in enumerate(S["rows"]):
                xs, ys, lo, hi = [], [], [], []
                for b in S["budgets"]:
                    c = cell(S, row, mode, b)
                    if c and c[key]:
                        xs.append(100 * b)
                        ys.append(scale * c[key][0])
                if not xs:
                    continue
                md = row in MD_ROWS
                ax.plot(xs, ys, marker="o" if md else "s", linestyle="-" if md else "--",
                        linewidth=2.2 if row == "memdecay-turn" else 1.3, label=label(row),
                        color=plt.cm.tab20(i % 20))
            ax.set_title(mode)
            ax.set_xlabel("budget (% of the trace's tokens)")
            ax.set_xticks([100 * b for b in S["budgets"]])
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(ylab)
        axes[0][-1].legend(fontsize=7, loc="best", ncol=2)
        fig.suptitle("SmolLM2-135M, %d traces: MemDecay (solid) beside kvpress (dashed)"
                     % S["traces"], fontsize=10)
        fig.tight_layout()
        p = os.path.join(img_dir, fname)
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def screen_line(S):
    if not S.get("screened_out"):
        return "- No trace was screened out: every generated trace ran."
    return ("- Screen (`run.py --min-pass %d`): a trace runs only if at least %d of its probes "
            "pass at full cache; %d generated traces were screened out (%s). It only saves runs: "
            "every row sees the same traces, and a probe is scored only where it passes at full "
            "cache in any case." % (S["min_pass"], S["min_pass"], len(S["screened_out"]),
                                    ", ".join(t.replace(".jsonl", "") for t in S["screened_out"]))
            + (" %d traces below the screen had run before it was set and are kept." %
               len(S["below_screen_kept"]) if S.get("below_screen_kept") else ""))


def losses_section(out):
    """The section explain.py's OUT/losses.json feeds: the probes MemDecay's best row loses to a
    press, and whether the policy evicted the fact or the model failed with the fact kept."""
    path = os.path.join(out, "losses.json")
    if not os.path.exists(path):
        return []
    X = json.load(open(path))
    cases = X["cases"]
    L = ["### Where MemDecay's best row loses, and which evictions lost it", "",
         "Probes that MemDecay's best row (%s) fails while at least one kvpress press passes them "
         "at the same budget and mode. `bench/kvpress/explain.py` replayed each of those runs "
         "(%d of %d replays kept the same number of tokens as the run) and looked up the answer's "
         "tokens in the cache: **%d lost with the answer evicted, %d with it partly kept, %d with "
         "it wholly kept** (the cache held the fact; the model answered wrong)."
         % (", ".join("%s: `%s`" % kv for kv in sorted(X["best_row"].items())),
            X["replays_matching_run"], len(cases), X["answer_evicted"],
            X["answer_partly_kept"], X["answer_kept"]), ""]
    if not cases:
        return L + ["No probe is lost to a press.", ""]
    L += ["| mode | budget | trace | fact (region, age) | answer kept | presses passing it | "
          "what the row kept, by region (kept/total) |", "|---|---:|---|---|---:|---|---|"]
    for c in sorted(cases, key=lambda c: (c["mode"], c["budget"], c["trace"], c["question"])):
        kept = "" if c["answer_kept"] is None else "%d%%" % round(100 * c["answer_kept"])
        regions = ", ".join("%s %d/%d" % (r, k, k + e)
                            for r, (k, e) in sorted(c["kept_evicted_by_region"].items()))
        L.append("| %s | %d%% | %s | %s (%s, %.2f) | %s | %s | %s |" % (
            c["mode"], round(100 * c["budget"]), c["trace"].replace(".jsonl", ""), c["question"],
            c["region"], c["age_fraction"], kept,
            ", ".join(p[3:] for p in c["presses_passing"]), regions))
    by_region = {}
    for c in cases:
        e = by_region.setdefault(c["region"], [0, 0])
        e[0] += 1
        e[1] += c["answer_kept"] == 0
    L += ["", "Lost probes by the fact's region (answer evicted / lost): " + ", ".join(
        "%s %d/%d" % (r, e[1], e[0]) for r, e in sorted(by_region.items())) + ".", ""]
    return L


def llama_section(out):
    """MemDecay's rows on llama.cpp (bench/kvpress/run_llama.sh, llama_rows.py), if run."""
    path = os.path.join(out, "llama.json")
    if not os.path.exists(path):
        return []
    import llama_rows
    return ["### The same MemDecay rows on llama.cpp", "",
            "memdecayd's policies through `memdecay-agent` (llama.cpp with the Q4_1 GGUF the HF "
            "weights were converted from) on the traces the rows above ran on, at the same "
            "budgets, by `bench/kvpress/run_llama.sh` (`llama.json`). The agent feeds the trace "
            "message by message, like the online mode, and decodes answers of up to 24 tokens "
            "(16 above); its full-cache ceiling is its own, so it scores a different set of "
            "probes. kvpress's presses have no llama.cpp counterpart.", "",
            llama_rows.markdown(path)]


def write_docs(S, comps, out):
    res = os.path.join(ROOT, "docs", "results.md")
    img = os.path.join(ROOT, "docs", "img")
    plots(S, img)
    cal = {}
    cp = os.path.join(out, "calibration.json")
    if os.path.exists(cp):
        cal = {e["region"]: e["lambda"] for e in json.load(open(cp))["regions"] if e.get("applied")}
    L = [BEGIN, "", "## MemDecay beside kvpress's presses: the first run (superseded)",
         "", "**Superseded by the fair comparison above, and kept only as history.** Its "
         "headline (MemDecay's best row ahead of all seven presses at every budget) came mostly "
         "from how the rows were set up: memdecayd pinned the system message and protected the "
         "newest pages while no press had anything alike, and the system probes were counted "
         "in the wins; online, kvpress's top-k gather scrambled the cache order, so StreamingLLM "
         "dropped arbitrary old tokens, sinks included (attention kept 77% one-shot, 42% online); "
         "RandomPress reseeded on every call; ObservedAttention and ExpectedAttention ran online, "
         "which their scores do not allow. On unpinned probes the one-shot StreamingLLM row (50%, "
         "85 of 171, budgets pooled) was ahead of every MemDecay row (memdecay-turn 39% online, "
         "67 of 171), and most of that gap is budget: the three pinned system pages and page "
         "rounding took about 52 tokens of every budget. "
         "[kvpress.md](kvpress.md), \"A fair fight\", says what changed.",
         "", "*Generated by `bench/kvpress/report.py` from `%s` (the summary with every interval: "
         "`bench/results/kvpress.json`). Method and reading: [kvpress.md](kvpress.md).*"
         % os.path.relpath(os.path.join(out, "runs.jsonl"), ROOT), "",
         "- Model: SmolLM2-135M-Instruct (HF, float32, eager attention) on transformers, the same "
         "weights as the llama.cpp rows above; kvpress 0.5.5.",
         "- %d traces (`gen_traces.py` short tier, seed 11, never used for tuning), %s tokens; "
         "budgets %s of each trace's tokens." % (
             S["traces"], "–".join(str(x) for x in (S["trace_tokens"][0], S["trace_tokens"][-1])),
             ", ".join("%d%%" % round(100 * b) for b in S["budgets"])),
         "- Full-cache ceiling: %d of %d probes pass with nothing evicted; only those are scored. "
         "**%d scored probe evaluations** (probe × row × mode × budget)."
         % (S["ceiling"][0], S["ceiling"][1], S["scored_evaluations"]),
         screen_line(S),
         "- memdecay-cal: memdecay with λ per region set by `memdecayctl calibrate --apply` after "
         "4 other traces (seed 12) at full cache: %s." % (
             ", ".join("%s %.3g" % kv for kv in sorted(cal.items())) or "none applied"),
         ""]
    L += tables(S, comps, "img")
    L += losses_section(out)
    L += llama_section(out)
    L += [END]
    text = open(res).read() if os.path.exists(res) else ""
    new = replace_section(text, BEGIN, END, L)
    if new is None:
        if KEPT not in text:
            text = text.rstrip("\n") + "\n\n" + KEPT + "\n"
        new = text.rstrip("\n") + "\n\n" + "\n".join(L) + "\n"
    write_atomic(res, new)
    return res


def replace_section(text, begin, end, lines):
    """text with the section from marker `begin` to marker `end` replaced by lines (which
    carry the markers themselves), or None when text has no such section."""
    if begin not in text or end not in text:
        return None
    head, rest = text.split(begin, 1)
    return head + "\n".join(lines) + rest.split(end, 1)[1]


def write_atomic(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="run.py's output directory")
    ap.add_argument("--docs", action="store_true",
                    help="write bench/results/kvpress.json, docs/results.md's section and plots")
    ap.add_argument("--expect-rows", action="store_true",
                    help="fail unless every row ran in every mode and budget")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.out, "runs.jsonl")):
        ap.error("%s has no runs.jsonl (run bench/kvpress/run.py first)" % a.out)
    runs, refs = load(a.out)
    S, pr = summarise(runs, refs)
    comps = comparisons(S, pr)
    S["paired"] = comps
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(S, f, indent=1)
    print("\n".join(tables(S, comps)))
    if a.docs:
        with open(os.path.join(ROOT, "bench", "results", "kvpress.json"), "w") as f:
            json.dump(dict(S, source="bench/kvpress/run.py --full; bench/kvpress/report.py"), f,
                      indent=1)
        print("wrote", write_docs(S, comps, a.out), file=sys.stderr)
    if a.expect_rows:
        missing = [(r, m, b) for r in KV_ROWS + MD_ROWS for m in ("online", "oneshot") for b in S["budgets"]
                   if not cell(S, r, m, b)]
        if missing:
            print("report: rows without results: %s" % missing, file=sys.stderr)
            return 1
        bad = [c for c in S["cells"] if c["budget"] is not None and c["scored"] == 0]
        if bad:
            print("report: cells with no scored probe: %s"
                  % [(c["row"], c["mode"], c["budget"]) for c in bad], file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
