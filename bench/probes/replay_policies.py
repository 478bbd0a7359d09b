#!/usr/bin/env python3
"""replay_policies.py — what each policy would evict, replayed from a full-cache memdecayd journal.

The journal (`memdecayd --journal`, docs/operations.md) holds every page open/grow and every
attention record the daemon accepted.  This replays it under a per-sequence token budget with a
model of the host's rules (system pinned, the tail page and `protect_recent` = 1 more never
evicted, evict lowest score first, ties by first position) for memdecay, memdecay-turn, h2o,
recency and random, and reports where the evictions fall.  Attention after an eviction is taken
from the full-cache run, so this shows each score's ordering, not the model's answers: that is
what run.py measures.  docs/results.md ("Held-out traces, memdecay-turn") uses it to explain memdecay's losses.

    replay_policies.py JOURNAL[.gz] [--budgets 0.4,0.6] [--json]
"""
import argparse
import gzip
import json
import math
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import journal_lifetimes  # noqa: E402

BASE = [1.0, 0.9, 0.7, 0.7, 0.6, 0.6, 0.8, 0.3]      # params.c defaults
LAMBDA = [0.0, 0.01, 0.05, 0.05, 0.05, 0.08, 0.02, 0.2]
ALPHA, BETA = 1.0, 0.9
H2O_RECENT = 0.5
POLICIES = ["memdecay", "memdecay-turn", "h2o", "recency", "random"]


def load(path):
    if path.endswith(".gz"):
        tmp = path[:-3] + ".tmp"
        with gzip.open(path) as f, open(tmp, "wb") as g:
            g.write(f.read())
        try:
            return journal_lifetimes.read(tmp)
        finally:
            os.unlink(tmp)
    return journal_lifetimes.read(path)


class Seq:
    def __init__(self):
        self.pages = {}      # (slot, gen) -> page dict
        self.order = []      # keys by first position
        self.clock = 0
        self.turns = []      # clock at which each turn began
        self.last_region = None
        self.pos = 0
        self.live = 0


def turn_at(turns, c):
    lo, hi = 0, len(turns)
    while lo < hi:
        mid = (lo + hi) // 2
        if turns[mid] <= c:
            lo = mid + 1
        else:
            hi = mid
    return lo


def terms(pol, pg, s, scale):
    """(decay term, attention term) of memdecay / memdecay-turn, raw norm."""
    n = len(pg["tok"])
    if pol == "memdecay":
        d = sum(BASE[r] * math.exp(-LAMBDA[r] * (s.clock - t)) for t, r in pg["tok"]) / n
    else:
        now = turn_at(s.turns, s.clock)
        d = sum(BASE[r] * math.exp(-LAMBDA[r] * scale * (now - turn_at(s.turns, t)))
                for t, r in pg["tok"]) / n
    return d, ALPHA * pg["ewma"] / n


def score(pol, pg, s, scale, rng_scores):
    if pol in ("memdecay", "memdecay-turn"):
        d, a = terms(pol, pg, s, scale)
        return d + a
    if pol == "h2o":
        return pg["cum"]
    if pol == "recency":
        return pg["pos"]
    return rng_scores[pg["key"]]


def replay(recs, budget_frac, pol, scale=1.0, seed=1):
    """one policy over every sequence of the journal; returns per-sequence summaries"""
    # first pass: each engine's full length (one sequence per engine in run.py's journals)
    final = {}
    for typ, n, refresh, eng, seq, slot, gen, mass, clock, labels in recs:
        if typ in (4, 5):
            final[(eng, slot, gen)] = n
    total = {}
    for (eng, slot, gen), n in final.items():
        total[eng] = total.get(eng, 0) + n
    seqs, owner = {}, {}
    rng = random.Random(seed)
    rng_scores = {}
    out = {}
    for typ, n, refresh, eng, seq, slot, gen, mass, clock, labels in recs:
        if typ not in (4, 5, 7, 10):
            continue
        if typ == 4:
            owner[(eng, slot, gen)] = seq
        q = owner.get((eng, slot, gen), seq)
        s = seqs.setdefault((eng, q), Seq())
        s.clock = max(s.clock, clock)
        key = (eng, slot, gen)
        if typ in (4, 5):
            pg = s.pages.get(key)
            if typ == 4:
                pg = {"key": key, "tok": [], "pos": s.pos, "ewma": 0.0, "cum": 0.0,
                      "live": True, "birth_pos": []}
                s.pages[key] = pg
                s.order.append(key)
                rng_scores[key] = rng.random()
            if pg is None:
                continue
            while len(pg["tok"]) < n:
                k = len(pg["tok"])
                r = (labels >> (4 * k)) & 15
                if r != s.last_region:
                    s.turns.append(s.clock)
                    s.last_region = r
                pg["tok"].append((s.clock, r))
                pg["birth_pos"].append(s.pos)
                s.pos += 1
                s.live += 1
            budget = round(budget_frac * total[eng])
            while s.live > budget:
                live = [k for k in s.order if s.pages[k]["live"]]
                protected = set(live[-2:])  # tail + protect_recent = 1
                if pol == "h2o":
                    window = max(0, int(H2O_RECENT * budget / 16))
                    protected |= set(live[-(2 + window):]) if window else set()
                cand = [k for k in live if k not in protected and
                        not any(r == 0 for _, r in s.pages[k]["tok"])]
                if not cand:
                    break
                scored = sorted(cand, key=lambda k: (score(pol, s.pages[k], s, scale, rng_scores),
                                                     s.pages[k]["pos"]))
                victim = s.pages[scored[0]]
                rec = out.setdefault((eng, q), {"evictions": [], "total": total[eng]})
                oldest_rank = sorted(cand, key=lambda k: s.pages[k]["pos"]).index(scored[0])
                d, a = terms("memdecay", victim, s, scale)
                rec["evictions"].append({"age_rank": oldest_rank, "n_cand": len(cand),
                                         "age_steps": s.clock - max(t for t, _ in victim["tok"]),
                                         "md_decay": d, "md_attn": a})
                victim["live"] = False
                s.live -= len(victim["tok"])
        elif typ == 7:
            pg = s.pages.get(key)
            if pg is None or not pg["live"]:
                continue
            pg["ewma"] = BETA * pg["ewma"] + (1 - BETA) * mass
            pg["cum"] += mass
            for k in range(len(pg["tok"])):
                if refresh >> k & 1:
                    pg["tok"][k] = (s.clock, pg["tok"][k][1])
    res = {}
    for (eng, q), s in seqs.items():
        rec = out.get((eng, q), {"evictions": [], "total": total.get(eng, 0)})
        tot = max(1, s.pos)
        # kept unpinned tokens by fifth of the trace (by birth position)
        kept, alltok = [0] * 5, [0] * 5
        for k in s.order:
            pg = s.pages[k]
            for (t, r), bp in zip(pg["tok"], pg["birth_pos"]):
                if r == 0:
                    continue
                f = min(4, bp * 5 // tot)
                alltok[f] += 1
                kept[f] += pg["live"]
        res[f"{eng}/{q}"] = {"tokens": tot, "kept_by_fifth": [k / a if a else None
                                                              for k, a in zip(kept, alltok)],
                             "evictions": rec["evictions"]}
    return res


def summarise(res):
    ev = [e for r in res.values() for e in r["evictions"]]
    fifths = [[r["kept_by_fifth"][i] for r in res.values() if r["kept_by_fifth"][i] is not None]
              for i in range(5)]
    return {
        "evictions": len(ev),
        "share_oldest_candidate": sum(e["age_rank"] == 0 for e in ev) / len(ev) if ev else None,
        "median_age_rank_fraction": statistics.median(e["age_rank"] / max(1, e["n_cand"] - 1)
                                                      for e in ev) if ev else None,
        "median_victim_age_steps": statistics.median(e["age_steps"] for e in ev) if ev else None,
        "victims_memdecay_decay_below_attn": (sum(e["md_decay"] < e["md_attn"] for e in ev)
                                              / len(ev)) if ev else None,
        "victims_memdecay_decay_median": statistics.median(e["md_decay"] for e in ev)
        if ev else None,
        "victims_memdecay_attn_median": statistics.median(e["md_attn"] for e in ev)
        if ev else None,
        "kept_unpinned_by_fifth": [statistics.mean(f) if f else None for f in fifths],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("journal")
    ap.add_argument("--budgets", default="0.4,0.6")
    ap.add_argument("--lambda-scale", type=float, default=1.0,
                    help="memdecay-turn.lambda_scale (default 1)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    _, names, recs = load(a.journal)
    table = {}
    for b in [float(x) for x in a.budgets.split(",")]:
        for pol in POLICIES:
            table[f"{pol}@{b:g}"] = summarise(replay(recs, b, pol, a.lambda_scale))
    if a.json:
        json.dump({"journal": os.path.basename(a.journal), "lambda_scale": a.lambda_scale,
                   "rows": table}, sys.stdout, indent=1)
        print()
        return
    print(f"{'policy@budget':<20} {'evict':>5} {'oldest':>6} {'age rank':>8} {'age':>5} "
          f"{'d<a':>5}  kept unpinned by fifth of the trace (first → last)")
    for k, r in table.items():
        f = " ".join("  —  " if x is None else f"{x:5.0%}" for x in r["kept_unpinned_by_fifth"])
        print(f"{k:<20} {r['evictions']:>5} {r['share_oldest_candidate']:>6.0%} "
              f"{r['median_age_rank_fraction']:>8.2f} {r['median_victim_age_steps']:>5.0f} "
              f"{r['victims_memdecay_decay_below_attn']:>5.0%}  {f}")


if __name__ == "__main__":
    main()
