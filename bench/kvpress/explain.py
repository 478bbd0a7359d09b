#!/usr/bin/env python3
"""explain.py — which evictions lost the probes that MemDecay's best row loses to a kvpress press.

    explain.py OUT [--row ROW]     # writes OUT/losses.json; report.py --docs puts it in results.md
    explain.py OUT --row ROW --against PRESS_ROW   # the fair run: lost to that one row

A probe is *lost* by MemDecay's best row (report.py's choice, per mode, unless --row) when, at
the same budget and in the same mode, that row fails it and at least one kvpress press passes it.
For every (trace, mode, budget) holding such a probe, the row's run is replayed on a private
memdecayd exactly as run.py ran it (the same adapter, policy and budget: memdecayd's decisions are
deterministic for a given trace), and for each lost probe it records:

- where the fact is: the answer's tokens in the trace (found by its text), their region and age;
- whether they were kept: the share of the answer's tokens still in the cache after the trace;
- what the row kept instead: kept and evicted tokens per region, at that budget.

"fact evicted" then says the policy threw the fact away; "fact kept" says the cache held it and
the model still failed (attention elsewhere, a neighbour of the fact evicted, or noise).
Method: docs/kvpress.md."""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run as kv  # noqa: E402  (bench/kvpress/run.py: the runner's own model and trace helpers)
import report  # noqa: E402  (bench/kvpress/report.py: the runs as the report reads them)
import torch  # noqa: E402
from memdecay import Region  # noqa: E402
from memdecay_transformers import MemDecayOnline, MemDecayPress  # noqa: E402

REGION_NAMES = {int(r): r.name.lower() for r in Region}


def answer_span(m, tr, answer):
    """Token positions whose text covers the first occurrence of `answer` in the trace."""
    spans, text = [], ""
    for i in tr.ids:
        piece = m.tok.decode([i])
        spans.append((len(text), len(text) + len(piece)))
        text += piece
    at = text.find(answer)
    if at < 0:
        at = text.lower().find(answer.lower())
    if at < 0:
        return []
    end = at + len(answer)
    return [j for j, (a, b) in enumerate(spans) if a < end and b > at]


def replay(m, tr, row, mode, frac, d, ctl):
    """The row's kept positions after the trace, as run.py's run_one leaves them."""
    policy, _ = kv.MD_ROWS[row]
    B = kv.budget_tokens(tr.n, frac)
    f = m.feeder(tr)
    with torch.no_grad():
        if mode == "oneshot":
            press = MemDecayPress(compression_ratio=1.0 - (B + 0.5) / tr.n, policy=policy,
                                  socket=d.sock, memdecayctl=ctl)
            press.feed(tr.regions, list(tr.chunks()))
            with press(m.model):
                f.forward(tr.ids)
            kept = list(press.cache_pos)
            press.close()
        else:
            on = MemDecayOnline(f, policy=policy, budget_tokens=B, socket=d.sock)
            for a, b in tr.chunks():
                on.forward(tr.ids[a:b], tr.regions[a:b])
            kept = on.kept_positions()
            on.close()
    return set(kept)


def lost_probes(runs, summary, row_of_mode, against=None):
    by = {}
    for r in runs:
        by[(r["trace"], r["row"], r["mode"], r["budget"])] = {p["question"]: p for p in r["probes"]}
    out = {}
    for (trace, row, mode, b), probes in by.items():
        if row != row_of_mode.get(mode):
            continue
        for q, p in probes.items():
            if p["passed"]:
                continue
            won = sorted(k[1] for k, ps in by.items()
                         if k[0] == trace and k[2] == mode and k[3] == b
                         and (k[1] == against if against else k[1].startswith("kv:"))
                         and ps.get(q, {}).get("passed"))
            if won:
                out.setdefault((trace, mode, b), []).append(dict(p, presses=won))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="run.py's output directory (after report.py wrote summary.json)")
    ap.add_argument("--row", help="the MemDecay row to explain in both modes (default: report.py's "
                    "best row of each mode)")
    ap.add_argument("--against", help="with --row: a probe is lost when ROW fails it and this "
                    "row passes it (default: any kvpress row)")
    ap.add_argument("--model", default=os.environ.get("MEMDECAY_HF_MODEL"))
    ap.add_argument("--bin", default=os.environ.get("MEMDECAY_BIN"))
    a = ap.parse_args()
    if not a.model or not a.bin:
        ap.error("set MEMDECAY_HF_MODEL and MEMDECAY_BIN (tests/transformers/run.sh does)")
    sp = os.path.join(a.out, "summary.json")
    if not a.row and not os.path.exists(sp):
        ap.error("%s missing: run report.py %s first" % (sp, a.out))
    summary = json.load(open(sp)) if os.path.exists(sp) else {}
    best = {}
    for c in summary.get("paired", []):
        if c["mode"] == c["vs_mode"]:
            best.setdefault(c["mode"], c["row"])
    if a.row:
        best = {mo: a.row for mo in ("online", "oneshot")}
    if a.row and a.row not in kv.MD_ROWS:
        ap.error("unknown MemDecay row %r (rows: %s)" % (a.row, ", ".join(kv.MD_ROWS)))
    for mo, row in best.items():
        if kv.MD_ROWS[row][1] == "calibrated":
            ap.error("%s runs on a calibrated daemon; explain.py does not calibrate" % row)
    daemon = {kv.MD_ROWS[row][1] for row in best.values()}
    if len(daemon) > 1:
        ap.error("the rows %s need different daemons; explain one at a time with --row" % best)
    runs, _ = report.load(a.out)
    kept_of = {(r["trace"], r["row"], r["mode"], r["budget"]): r["kept_tokens"] for r in runs}
    lost = lost_probes(runs, summary, best, a.against)
    torch.set_num_threads(int(os.environ.get("MEMDECAY_TORCH_THREADS", "2")))
    m = kv.Model(a.model)
    ctl = os.path.join(a.bin, "memdecayctl")
    traces = {}
    manifest = json.load(open(os.path.join(a.out, "traces", "manifest.json")))
    answers = {(name, f["question"]): f for name, t in manifest["traces"].items()
               for f in t["facts"]}
    cases = []
    with kv.start_daemon(a.bin, daemon.pop()) as d:    # the row's own daemon settings
        for i, ((trace, mode, b), probes) in enumerate(sorted(lost.items())):
            tr = traces.get(trace) or traces.setdefault(
                trace, kv.Trace(m, os.path.join(a.out, "traces", trace)))
            row = best[mode]
            kept = replay(m, tr, row, mode, b, d, ctl)
            same = len(kept) == kept_of.get((trace, row, mode, b))
            per_region = {}
            for pos, reg in enumerate(tr.regions):
                k = per_region.setdefault(REGION_NAMES[int(reg)], [0, 0])
                k[0 if pos in kept else 1] += 1
            for p in probes:
                fact = answers[(trace, p["question"])]
                span = answer_span(m, tr, fact["answer"])
                share = sum(1 for j in span if j in kept) / len(span) if span else None
                cases.append({"trace": trace, "mode": mode, "budget": b, "row": row,
                              "question": p["question"], "answer": fact["answer"],
                              "region": p["region"], "age_fraction": fact["age_fraction"],
                              "answer_tokens": span, "answer_kept": share,
                              "dlp": p["dlp"], "presses_passing": p["presses"],
                              "replay_kept_tokens": len(kept), "replay_matches_run": same,
                              "kept_evicted_by_region": per_region})
            kv.log("explain %d/%d %s %s %.2f: %d lost probe(s)"
                   % (i + 1, len(lost), trace, mode, b, len(probes)))
    res = {"best_row": best, "against": a.against or "any kvpress row", "cases": cases,
           "replays_matching_run": sum(1 for c in cases if c["replay_matches_run"]),
           "answer_evicted": sum(1 for c in cases if c["answer_kept"] == 0),
           "answer_partly_kept": sum(1 for c in cases if c["answer_kept"] and c["answer_kept"] < 1),
           "answer_kept": sum(1 for c in cases if c["answer_kept"] == 1),
           "answer_not_found": sum(1 for c in cases if c["answer_kept"] is None)}
    path = os.path.join(a.out, "losses.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(res, fh, indent=1)
    os.replace(path + ".tmp", path)
    print(path)


if __name__ == "__main__":
    main()
