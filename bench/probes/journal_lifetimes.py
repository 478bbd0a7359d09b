#!/usr/bin/env python3
"""journal_lifetimes.py — per-token attention lifetimes from a memdecayd --journal, by region.

A cross-check of `memdecayctl calibrate --from FILE` (docs/calibration.md) that also shows what the
one-number estimate hides: the spread of lifetimes (quantiles), and the estimate without the
sequence's first tokens (the attention sinks), which a pinned system region contains.

    journal_lifetimes.py FILE [--grace-steps N] [--sink N] [--json]

Same definitions as sidecar/calib/calibrate.c: birth b at OPEN/GROW, last refresh r (r = b if none),
L = r - b; an event when the token then went >= grace steps without a refresh by the time it
stopped being followed (FREE, SEQ_END, DETACH: the last CLOCK of its sequence), else censored.
Geometric MLE: p = d / (sum L + d), h = ln 2 / -ln(1 - p).
"""
import argparse
import json
import math
import struct
import sys

HDR = 576
REC = 40
FMT = "<BBHIIIIfQQ"  # type n refresh engine seq slot gen mass clock labels


def read(path):
    data = open(path, "rb").read()
    magic, version, hsize, rsize, grace = struct.unpack_from("<QIIII", data, 0)
    assert magic == 0x314c4e524a444d4d and rsize == REC, "not a memdecayd journal"
    names = []
    for i in range(16):
        raw = data[HDR - 16 * 32 + 32 * i: HDR - 16 * 32 + 32 * (i + 1)]
        names.append(raw.split(b"\0", 1)[0].decode())
    recs = [struct.unpack_from(FMT, data, off) for off in range(hsize, len(data) - REC + 1, REC)]
    return grace, names, recs


def lifetimes(recs, names):
    """[(region, position in sequence, L, quiet steps at the end)] per finished token."""
    pages = {}   # (engine, slot, gen) -> {"seq", "tokens": [[birth, last, region, pos]]}
    clocks = {}  # (engine, seq) -> clock
    seq_pos = {}  # (engine, seq) -> next position (tokens born so far)
    out = []

    def end_page(key, clock):
        pg = pages.pop(key, None)
        if not pg:
            return
        for b, r, reg, pos in pg["tokens"]:
            out.append((reg, pos, r - b, clock - r))

    for typ, n, refresh, eng, seq, slot, gen, mass, clock, labels in recs:
        key = (eng, slot, gen)
        if typ in (4, 5):  # OPEN / GROW
            if typ == 4:
                pages[key] = {"seq": seq, "tokens": []}
            pg = pages.get(key)
            if pg is None:
                continue
            s = (eng, pg["seq"])
            while len(pg["tokens"]) < n:
                k = len(pg["tokens"])
                reg = names[(labels >> (4 * k)) & 15] or str((labels >> (4 * k)) & 15)
                pos = seq_pos.get(s, 0)
                seq_pos[s] = pos + 1
                pg["tokens"].append([clock, clock, reg, pos])
            clocks[s] = max(clocks.get(s, 0), clock)
        elif typ == 6:  # LABELS
            pg = pages.get(key)
            if pg:
                for k, t in enumerate(pg["tokens"]):
                    t[2] = names[(labels >> (4 * k)) & 15] or t[2]
        elif typ == 7:  # ATTN
            pg = pages.get(key)
            if pg:
                for k, t in enumerate(pg["tokens"]):
                    if refresh >> k & 1 and clock > t[0]:
                        t[1] = max(t[1], clock)
                clocks[(eng, pg["seq"])] = max(clocks.get((eng, pg["seq"]), 0), clock)
        elif typ == 8:  # FREE
            end_page(key, clock)
        elif typ == 9:  # SEQ_END
            for k2 in [k for k, p in pages.items() if k[0] == eng and p["seq"] == seq]:
                end_page(k2, clock)
        elif typ == 10:  # CLOCK
            clocks[(eng, seq)] = max(clocks.get((eng, seq), 0), clock)
        elif typ in (2, 3):  # DETACH / RESYNC
            for k2 in [k for k in pages if k[0] == eng]:
                end_page(k2, clocks.get((eng, pages[k2]["seq"]), 0))
    for k2 in list(pages):
        end_page(k2, clocks.get((k2[0], pages[k2]["seq"]), 0))
    return out


def mle(samples, grace):
    d = sum(1 for L, q in samples if q >= grace)
    E = sum(L for L, q in samples) + d
    if not d or not E:
        return None
    p = d / E
    return math.log(2) / -math.log(1 - p) if p < 1 else 0.0


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("journal")
    ap.add_argument("--grace-steps", type=int)
    ap.add_argument("--sink", type=int, default=4, help="first N tokens of a sequence (default 4)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    grace, names, recs = read(a.journal)
    grace = a.grace_steps or grace
    toks = lifetimes(recs, names)
    res = {}
    for reg in [n for n in names if n]:
        s = [(L, q) for r, pos, L, q in toks if r == reg]
        if not s:
            continue
        ns = [(L, q) for r, pos, L, q in toks if r == reg and pos >= a.sink]
        Ls = [L for L, q in s]
        res[reg] = {"samples": len(s), "events": sum(1 for L, q in s if q >= grace),
                    "half_life_mle": mle(s, grace), "half_life_mle_without_sinks": mle(ns, grace),
                    "samples_without_sinks": len(ns),
                    "share_never_refreshed": sum(1 for L in Ls if L == 0) / len(Ls),
                    "L_median": quantile(Ls, 0.5), "L_p90": quantile(Ls, 0.9), "L_max": max(Ls)}
    if a.json:
        json.dump({"journal": a.journal, "grace_steps": grace, "sink_tokens": a.sink,
                   "regions": res}, sys.stdout, indent=1)
        print()
        return
    print(f"{'region':<11} {'samples':>7} {'events':>6} {'h MLE':>7} {'h w/o sinks':>11} "
          f"{'L=0':>5} {'L med':>5} {'L p90':>5} {'L max':>5}")
    for reg, e in res.items():
        f = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
        print(f"{reg:<11} {e['samples']:>7} {e['events']:>6} {f(e['half_life_mle']):>7} "
              f"{f(e['half_life_mle_without_sinks']):>11} {e['share_never_refreshed']:>5.0%} "
              f"{e['L_median']:>5} {e['L_p90']:>5} {e['L_max']:>5}")


if __name__ == "__main__":
    main()
