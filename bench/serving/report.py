#!/usr/bin/env python3
"""report.py — verdicts, a Markdown table and the plot from run.py's JSON.

  report.py RESULT.json [--plot FILE.png] [--markdown FILE.md] [--text]

A sweep's JSON (sweep.py) gives each pool's rows, the plot of turns/s and facts
kept against the pool size, and the pool mode targets: at the largest pool
(plain vLLM never recomputes) pool-turn >= 0.97x plain's turns/s, nothing
evicted, no probe plain answered lost; at the next (plain thrashes) >= 3x
plain's turns/s, 0 preemptions, facts kept >= sessions-turn's and trim's
(exact McNemar test); at the tightest, every turn answered, 0 preemptions,
and the order before preemption counted.

A run with the pool-turn-tier row (the host tier and recall, docs/tier.md)
adds its targets: facts kept >= 80% of the reference row's (on the probes the
reference answers), turns/s >= 3x plain's, the median TTFT over turns <= 1.2x
pool-turn's (recall's cost), its facts against pool-turn's (exact McNemar),
and the tier's bytes and counters as memdecayd counted them.

Targets (docs/performance.md, "Agent serving"), sessions-turn against:
  plain            turns per second >= 2x; 0 preemptions
  nosessions-turn  turns per second >= 1.5x
  itself           median TTFT of the last four turns <= 1.5x that of turns 2-5
  trim             planted facts kept at least as often, on the probes the
                   reference (unlimited pool) answers; exact McNemar test
The plot (time to first token against turn, one line per row) needs matplotlib;
without it only the JSON verdicts are printed."""
import argparse
import json
import math
import statistics
import sys


def wilson(k, n, z=1.96):
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def mcnemar(a, b):
    """Exact two-sided McNemar p-value for paired booleans a, b."""
    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    n = only_a + only_b
    if n == 0:
        return 1.0, only_a, only_b
    k = min(only_a, only_b)
    p = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * p), only_a, only_b


def probes(row):
    out = {}
    for i, s in enumerate(row["sessions"]):
        for t in s:
            if t.get("probe") is not None:
                out[(i, t["turn"])] = bool(t["probe"])
    return out


def flatness(row):
    bt = row["by_turn"]
    early = [t["ttft_p50"] for t in bt[1:5]]
    late = [t["ttft_p50"] for t in bt[-4:]]
    return statistics.median(late) / statistics.median(early) if early and late else None


def verdicts(doc):
    rows = {r["row"]: r for r in doc["rows"]}
    v = {"rows": {}}
    ref = probes(rows["reference"]) if "reference" in rows else None
    scored = [k for k, ok in (ref or {}).items() if ok] if ref is not None else None
    for name, r in rows.items():
        p = probes(r)
        keys = scored if scored is not None else sorted(p)
        k = sum(1 for x in keys if p.get(x))
        lo, hi = wilson(k, len(keys))
        last4 = [t["ttft_p50"] for t in r["by_turn"][-4:]]
        v["rows"][name] = {
            "turns_per_s": r["turns_per_s"], "output_tokens_per_s": r["output_tokens_per_s"],
            "wall_s": r["wall_s"], "preemptions": r["preemptions"],
            "ttft_turn1_p50": r["by_turn"][0]["ttft_p50"],
            "ttft_last4_p50": statistics.median(last4),
            "ttft_flatness": flatness(r),
            "computed_prompt_tokens": r["computed_prompt_tokens"],
            "kv_blocks_per_session": r.get("kv_blocks_per_session"),
            "facts": {"kept": k, "scored": len(keys), "rate": k / len(keys) if keys else None,
                      "ci95": [round(lo, 3), round(hi, 3)]}}
    s = rows.get("sessions-turn")
    t = {}
    if s is not None:
        if "plain" in rows:
            t["turns_per_s_vs_plain"] = {"ratio": s["turns_per_s"] / rows["plain"]["turns_per_s"],
                                         "target": 2.0}
        if "nosessions-turn" in rows:
            t["turns_per_s_vs_nosessions"] = {
                "ratio": s["turns_per_s"] / rows["nosessions-turn"]["turns_per_s"],
                "target": 1.5}
        t["ttft_last4_over_turns2to5"] = {"ratio": flatness(s), "target": 1.5, "at_most": True}
        t["preemptions"] = {"value": s["preemptions"], "target": 0, "at_most": True}
        if "trim" in rows and scored is not None:
            ps, pt = probes(s), probes(rows["trim"])
            a = [ps.get(x, False) for x in scored]
            b = [pt.get(x, False) for x in scored]
            p, only_s, only_t = mcnemar(a, b)
            t["facts_vs_trim"] = {"sessions": sum(a), "trim": sum(b), "scored": len(scored),
                                  "only_sessions": only_s, "only_trim": only_t,
                                  "mcnemar_p": round(p, 4), "at_least": True}
        for key, x in t.items():
            if "ratio" in x:
                x["ratio"] = round(x["ratio"], 3) if x["ratio"] is not None else None
                x["met"] = x["ratio"] is not None and (
                    x["ratio"] <= x["target"] if x.get("at_most") else x["ratio"] >= x["target"])
            elif "value" in x:
                x["met"] = x["value"] <= x["target"]
            elif key == "facts_vs_trim":
                x["met"] = x["sessions"] >= x["trim"]
    tier_targets(rows, v, scored, t)
    v["targets"] = t
    return v


def tier_targets(rows, v, scored, t):
    """The host tier row's targets (docs/performance.md, "Host tier and recall")."""
    tr = rows.get("pool-turn-tier")
    if tr is None:
        return
    x = {"row": "pool-turn-tier", "tier": tr.get("tier")}
    if scored is not None and "reference" in rows:
        kept = v["rows"]["pool-turn-tier"]["facts"]["kept"]
        ref = v["rows"]["reference"]["facts"]["kept"]
        x["facts_vs_reference"] = {"tier": kept, "reference": ref, "scored": len(scored),
                                   "ratio": round(kept / ref, 3) if ref else None,
                                   "target": 0.8}
        x["facts_vs_reference"]["met"] = bool(ref) and kept / ref >= 0.8
        if "pool-turn" in rows:
            pa = [probes(tr).get(k, False) for k in scored]
            pb = [probes(rows["pool-turn"]).get(k, False) for k in scored]
            p, only_tier, only_pool = mcnemar(pa, pb)
            x["facts_vs_pool_turn"] = {"tier": sum(pa), "pool-turn": sum(pb),
                                       "only_tier": only_tier, "only_pool_turn": only_pool,
                                       "mcnemar_p": round(p, 4)}
    if "plain" in rows:
        r = tr["turns_per_s"] / rows["plain"]["turns_per_s"]
        x["turns_per_s_vs_plain"] = {"ratio": round(r, 3), "target": 3.0, "met": r >= 3.0}
    if "pool-turn" in rows:
        def med(row):
            return statistics.median(t_["ttft"] for s_ in row["sessions"] for t_ in s_)
        r = med(tr) / med(rows["pool-turn"])
        x["ttft_vs_pool_turn"] = {"ratio": round(r, 3), "tier_p50_s": round(med(tr), 3),
                                  "pool_turn_p50_s": round(med(rows["pool-turn"]), 3),
                                  "target": 1.2, "at_most": True, "met": r <= 1.2}
    t["tier"] = x


def markdown(doc, v):
    lines = ["| row | turns/s | output tok/s | TTFT turn 1 (p50) | TTFT last 4 (p50) | last 4 / "
             "turns 2–5 | prompt tokens computed | preemptions | KV blocks / session | facts "
             "kept [95%] |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, x in v["rows"].items():
        f = x["facts"]
        lines.append("| %s | %.3f | %.2f | %.2f s | %.2f s | %s | %d | %d | %s | %s |" % (
            name, x["turns_per_s"], x["output_tokens_per_s"], x["ttft_turn1_p50"],
            x["ttft_last4_p50"], "%.2f" % x["ttft_flatness"] if x["ttft_flatness"] else "–",
            x["computed_prompt_tokens"], x["preemptions"],
            x["kv_blocks_per_session"] if x["kv_blocks_per_session"] is not None else "–",
            "%d/%d [%.0f–%.0f%%]" % (f["kept"], f["scored"], 100 * f["ci95"][0],
                                     100 * f["ci95"][1]) if f["scored"] else "–"))
    return "\n".join(lines)


def text(doc, v):
    """Time to first token per turn, one column per row, and each row's blocks and facts."""
    rows = doc["rows"]
    out = ["%-5s" % "turn" + "".join("%18s" % r["row"] for r in rows)]
    for k in range(doc["settings"]["turns"]):
        out.append("%-5d" % (k + 1) + "".join(
            "%18s" % ("%.2f s (%d new)" % (r["by_turn"][k]["ttft_p50"],
                                           r["by_turn"][k]["computed_p50"])) for r in rows))
    out.append("%-5s" % "KV" + "".join(
        "%18s" % ("%s blk/session" % v["rows"][r["row"]]["kv_blocks_per_session"])
        for r in rows))
    out.append("%-5s" % "facts" + "".join(
        "%18s" % ("%d/%d kept" % (v["rows"][r["row"]]["facts"]["kept"],
                                  v["rows"][r["row"]]["facts"]["scored"])) for r in rows))
    out.append("%-5s" % "total" + "".join("%18s" % ("%.0f s" % r["wall_s"]) for r in rows))
    out.append("%-5s" % "rate" + "".join("%18s" % ("%.3f turns/s" % r["turns_per_s"])
                                         for r in rows))
    out.append("%-5s" % "pre" + "".join("%18s" % ("%d preempted" % r["preemptions"])
                                        for r in rows))
    out.append("%-5s" % "evict" + "".join(
        "%18s" % ("%s blocks" % r["evicted_blocks"] if r.get("evicted_blocks") is not None
                  else "-") for r in rows))
    if any(r.get("tier") for r in rows):
        out.append("%-5s" % "tier" + "".join(
            "%18s" % ("%d in, %d back" % (r["tier"]["tier_in"], r["tier"]["recalls"])
                      if r.get("tier") else "-") for r in rows))
        out.append("%-5s" % "moved" + "".join(
            "%18s" % ("%.1f MiB" % (r["tier"]["tier_bytes_moved"] / (1 << 20))
                      if r.get("tier") else "-") for r in rows))
    return "\n".join(out)


def sweep_verdicts(doc, thrash=None):
    """sweep.py's JSON: each pool's rows (as verdicts() reads a run), and the pool
    mode targets, with pools sorted largest first: the largest is the one where
    plain vLLM never recomputes, `thrash` (default: the second largest) where it
    thrashes, the last the tightest."""
    pools = sorted(doc["pools"], key=lambda e: -e["pool_blocks"])
    out = {"pools": [], "targets": {}}
    for e in pools:
        v = verdicts({"rows": e["rows"], "settings": doc["settings"]})
        for r in e["rows"]:
            v["rows"][r["row"]]["evicted_blocks"] = r.get("evicted_blocks")
            v["rows"][r["row"]]["pool_counters"] = r.get("pool_counters")
            v["rows"][r["row"]]["answered"] = sum(1 for s in r["sessions"] for t in s
                                                  if t["completion"] > 0)
            v["rows"][r["row"]]["turns"] = sum(len(s) for s in r["sessions"])
        v.pop("targets", None)
        out["pools"].append({"pool_blocks": e["pool_blocks"], "rows": v["rows"]})
    rows_at = [{r["row"]: r for r in e["rows"]} for e in pools]
    t = out["targets"]
    if len(pools) >= 1 and {"plain", "pool-turn"} <= set(rows_at[0]):
        pl, po = rows_at[0]["plain"], rows_at[0]["pool-turn"]
        a, b = probes(pl), probes(po)
        lost = sorted(k for k, ok in a.items() if ok and not b.get(k))
        t["room"] = {"pool_blocks": pools[0]["pool_blocks"],
                     "turns_per_s_ratio": round(po["turns_per_s"] / pl["turns_per_s"], 3),
                     "target_ratio": 0.97, "evicted_blocks": po.get("evicted_blocks"),
                     "facts_plain": sum(a.values()), "facts_pool": sum(b.values()),
                     "probes_lost": len(lost)}
        t["room"]["met"] = (t["room"]["turns_per_s_ratio"] >= 0.97
                            and not po.get("evicted_blocks") and not lost)
    ti = next((i for i, e in enumerate(pools) if e["pool_blocks"] == thrash), 1)
    if len(pools) >= 2 and {"plain", "pool-turn"} <= set(rows_at[ti]):
        rs = rows_at[ti]
        po = rs["pool-turn"]
        x = {"pool_blocks": pools[ti]["pool_blocks"],
             "turns_per_s_ratio": round(po["turns_per_s"] / rs["plain"]["turns_per_s"], 3),
             "target_ratio": 3.0, "preemptions": po["preemptions"]}
        ok = x["turns_per_s_ratio"] >= 3.0 and po["preemptions"] == 0
        for other in ("sessions-turn", "trim"):
            if other in rs:
                keys = sorted(set(probes(po)) & set(probes(rs[other])))
                pa = [probes(po)[k] for k in keys]
                pb = [probes(rs[other])[k] for k in keys]
                p, only_pool, only_other = mcnemar(pa, pb)
                x["facts_vs_" + other] = {"pool": sum(pa), other: sum(pb), "scored": len(keys),
                                          "only_pool": only_pool, "only_" + other: only_other,
                                          "mcnemar_p": round(p, 4)}
                ok = ok and sum(pa) >= sum(pb)
        x["met"] = ok
        t["thrash"] = x
    if len(pools) >= 3 and "pool-turn" in rows_at[-1]:
        po = rows_at[-1]["pool-turn"]
        answered = sum(1 for s in po["sessions"] for k in s if k["completion"] > 0)
        n = sum(len(s) for s in po["sessions"])
        t["tight"] = {"pool_blocks": pools[-1]["pool_blocks"], "answered": answered,
                      "turns": n, "preemptions": po["preemptions"],
                      "pool_counters": po.get("pool_counters"),
                      "released_pressure": (po.get("session_counters") or {}).get(
                          "released_pressure"),
                      "met": answered == n and po["preemptions"] == 0}
    return out


def sweep_markdown(v):
    lines = ["| pool (blocks) | row | turns/s | TTFT turn 1 (p50) | TTFT last 4 (p50) | prompt "
             "tokens computed | preemptions | blocks evicted | facts kept [95%] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in v["pools"]:
        for name, x in e["rows"].items():
            f = x["facts"]
            lines.append("| %d | %s | %.3f | %.2f s | %.2f s | %d | %d | %s | %s |" % (
                e["pool_blocks"], name, x["turns_per_s"], x["ttft_turn1_p50"],
                x["ttft_last4_p50"], x["computed_prompt_tokens"], x["preemptions"],
                x["evicted_blocks"] if x["evicted_blocks"] is not None else "–",
                "%d/%d [%.0f–%.0f%%]" % (f["kept"], f["scored"], 100 * f["ci95"][0],
                                         100 * f["ci95"][1])))
    return "\n".join(lines)


def sweep_plot(v, doc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.2))
    names = []
    for e in v["pools"]:
        for n in e["rows"]:
            if n not in names:
                names.append(n)
    for n in names:
        pts = sorted((e["pool_blocks"], e["rows"][n]) for e in v["pools"] if n in e["rows"])
        xs = [p for p, _ in pts]
        a1.plot(xs, [x["turns_per_s"] for _, x in pts], marker="o", label=n)
        a2.plot(xs, [100 * (x["facts"]["rate"] or 0) for _, x in pts], marker="o", label=n)
    s = doc["settings"]
    for ax, yl in ((a1, "turns per second"), (a2, "facts kept (%)")):
        ax.set_xlabel("KV pool (blocks of %d tokens)" % s["block_tokens"])
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
    a1.legend(fontsize=8)
    fig.suptitle("%d agents x %d turns, %d questions each (%s)"
                 % (s["sessions"], s["turns"], s["asks"], doc["model"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot(doc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in doc["rows"]:
        bt = r["by_turn"]
        ax.plot([t["turn"] for t in bt], [t["ttft_p50"] for t in bt], marker="o", ms=3,
                label=r["row"])
    s = doc["settings"]
    ax.set_xlabel("turn")
    ax.set_ylabel("time to first token, median over sessions (s)")
    ax.set_title("%d agent sessions, budget %d tokens, KV pool %d blocks (%s)"
                 % (s["sessions"], s["budget_tokens"], s["pool_blocks"], doc["model"]),
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("result")
    ap.add_argument("--plot")
    ap.add_argument("--markdown")
    ap.add_argument("--thrash-pool", type=int, default=None,
                    help="a sweep's pool where plain vLLM thrashes (default: the second "
                    "largest)")
    ap.add_argument("--text", action="store_true",
                    help="print time to first token per turn (and the prompt tokens computed) "
                    "per row instead of the JSON verdicts")
    a = ap.parse_args()
    doc = json.load(open(a.result))
    if doc.get("bench") == "serving-sweep":
        v = sweep_verdicts(doc, a.thrash_pool)
        if a.markdown:
            with open(a.markdown, "w") as f:
                f.write(sweep_markdown(v) + "\n")
        if a.plot:
            try:
                sweep_plot(v, doc, a.plot)
            except ImportError:
                print("report: no matplotlib here; no plot", file=sys.stderr)
        print(json.dumps(v, indent=1))
        return 0
    v = verdicts(doc)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(markdown(doc, v) + "\n")
    if a.plot:
        try:
            plot(doc, a.plot)
        except ImportError:
            print("report: no matplotlib here; no plot", file=sys.stderr)
    if a.text:
        print(text(doc, v))
    else:
        print(json.dumps(v, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
