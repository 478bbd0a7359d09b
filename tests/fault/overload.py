#!/usr/bin/env python3
"""overload.py BINDIR — promise 6: overload.

One loadgen engine steps as fast as it can (8 sequences x 64 pages, attention
for every page every step, sequences ending and restarting) twice: once with
memdecayd running freely (baseline), once while the test keeps the daemon
stopped 90% of the time (SIGSTOP 90 ms / SIGCONT 10 ms), so the engine
publishes well over ten times faster than the daemon drains.  Checks: the
engine never blocks (mean step time within 3x of the baseline, at most 0.2%
of steps over 50 ms); attention records were dropped and the drop is counted by the engine
and shown by the daemon; lifecycle changes were not lost: after the burst
(the engine holds its state, attached), the daemon's view equals the engine's
page table: live pages, tokens and sequences from `stats`, and every
evictable page the daemon ranks (`top 1000 --engine E`: seq, slot,
generation, first position, tokens) is exactly the set the engine's
--dump-pages predicts (its live pages minus tail, protected and pinned ones).
"""
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faultlib import Fail, ctl_json, main, now, read_json, slow_factor, stop  # noqa: E402

STEPS = int(os.environ.get("MD_FAULT_OVERLOAD_STEPS", "15000"))
SEQS, PPS, P = 8, 64, 16
HOLD_MS = 12000   # the burst engine holds its state this long after its dump


def run_engine(env, name, dump, hold_ms):
    return env.loadgen(name, "--seqs", SEQS, "--pages-per-seq", PPS, "--steps", STEPS,
                       "--pattern", "heavy", "--seed", 5, "--dump-pages", dump,
                       "--hold-ms", hold_ms)


def expected_evictable(pages, protect_recent=1, pinned_mask=1):
    by_seq = {}
    for p in pages:
        by_seq.setdefault(p["seq"], []).append(p)
    out = set()
    for seq, ps in by_seq.items():
        ps.sort(key=lambda p: p["first_pos"])
        keep = {ps[-1]["slot"]}                      # the tail page
        full = [p for p in ps[:-1] if p["n_tokens"] == P]
        for p in full[len(full) - protect_recent:] if protect_recent else []:
            keep.add(p["slot"])
        for p in ps:
            labels = int(p["labels"], 16)
            if any(pinned_mask & (1 << ((labels >> (4 * k)) & 15)) for k in range(p["n_tokens"])):
                keep.add(p["slot"])
        for p in ps:
            if p["slot"] not in keep:
                out.add((p["seq"], p["slot"], p["gen"], p["first_pos"], p["n_tokens"]))
    return out


def body(env):
    d = env.start_daemon()
    # baseline
    dump0 = os.path.join(env.dir, "base-pages.json")
    b = run_engine(env, "base", dump0, 0)
    if b.wait(120) != 0:
        raise Fail("baseline run failed: %s" % open(b.md_out).read())
    base = read_json(b.md_out)

    # overload: the daemon drains at most 10% of the time
    dump = os.path.join(env.dir, "burst-pages.json")
    halt = threading.Event()

    def throttle():
        while not halt.is_set():
            os.kill(d.pid, signal.SIGSTOP)
            time.sleep(0.09)
            os.kill(d.pid, signal.SIGCONT)
            time.sleep(0.01)
    st0 = ctl_json(env.sock, "stats")
    th = threading.Thread(target=throttle, daemon=True)
    t0 = now()
    e = run_engine(env, "burst", dump, HOLD_MS)
    th.start()
    try:
        while not (os.path.exists(dump) and "mirror_mismatches" in open(dump).read()):
            if e.poll() is not None:
                raise Fail("burst engine exited early: %s" % open(e.md_out).read())
            if now() - t0 > 120:
                raise Fail("burst did not finish")
            time.sleep(0.02)
        burst_s = now() - t0
    finally:
        halt.set()
        th.join()
        os.kill(d.pid, signal.SIGCONT)
    with open(dump) as f:
        dj = json.load(f)
    pages = dj["pages"]
    want_pages = len(pages)
    want_tokens = sum(p["n_tokens"] for p in pages)
    want_seqs = len({p["seq"] for p in pages})
    # The daemon catches up (drains the backlog, resyncs, decides) while the
    # engine holds its state; on a loaded machine that takes from a fraction
    # of a second to a few.  Poll until its view settles on the engine's
    # table or the hold is nearly over; the comparison below is the verdict.
    deadline = now() + HOLD_MS / 1e3 - 2.0
    while True:
        st = ctl_json(env.sock, "stats")
        eng = [x for x in st["engines"] if x["name"] == "burst"]
        if not eng:
            raise Fail("burst engine not attached after the burst: %s" % st)
        eng = eng[0]
        have = (eng["pages_live"] + eng["pages_evicting"], eng["tokens_live"], eng["seqs_live"])
        if have == (want_pages, want_tokens, want_seqs) or now() > deadline:
            break
        time.sleep(0.1)
    top = ctl_json(env.sock, "top 1000 --engine %d" % eng["id"])["pages"]
    if stop(e, signal.SIGTERM) != 0 and e.returncode != 0:
        raise Fail("burst engine exited %s" % e.returncode)
    res = read_json(e.md_out)
    if dj["mirror_mismatches"] != 0:
        raise Fail("engine mirror and page table disagree: %d" % dj["mirror_mismatches"])

    # the engine never blocked
    ratio = res["step_us_mean"] / max(base["step_us_mean"], 1e-9)
    print("step mean: baseline %.1f us, burst %.1f us (x%.2f); max %.1f ms; slow %d" %
          (base["step_us_mean"], res["step_us_mean"], ratio, res["step_us_max"] / 1e3,
           res["slow_steps"]))
    # An engine that waited for the daemon would step at its drain rate, over
    # 10x slower (published >= 10 x drained, below).  The two runs are taken
    # one after the other, so on a busy machine their means differ by the
    # load's changes alone: ctest -j2 beside two CPU hogs gave x1.42, next to
    # a 1.5x bound.  3x is well clear of both.
    if ratio > 3.0:
        raise Fail("step time under overload x%.2f of baseline (limit x3)" % ratio)
    # Blocking on the stopped daemon would show as steps of up to 90 ms in every
    # stop cycle (and a mean many times the baseline); a busy 2-core box gives
    # a few scheduling stalls.  Sanitizer builds: the mean ratio only.
    allowed = max(3, res["steps"] // 500)
    if slow_factor(env.bin) == 1 and res["slow_steps"] > allowed:
        raise Fail("%d steps over 50 ms under overload (allowed %d; max %.1f ms): blocked?" %
                   (res["slow_steps"], allowed, res["step_us_max"] / 1e3))
    # publishing outran draining
    drained = eng["records"]
    published = drained + res["attn_dropped"]
    print("published >= %d records, drained %d, dropped attention %d, lifecycle %d, "
          "resyncs %d" % (published, drained, res["attn_dropped"], res["lifecycle_dropped"],
                          eng["resyncs"]))
    if res["attn_dropped"] == 0 or published < 10 * drained:
        raise Fail("no real overload: published %d, drained %d" % (published, drained))
    # dropped records counted on both sides
    if eng["attn_dropped"] != res["attn_dropped"]:
        raise Fail("daemon shows %d dropped attention records, engine counted %d" %
                   (eng["attn_dropped"], res["attn_dropped"]))
    if res["lifecycle_dropped"] > 0 and (eng["lifecycle_dropped"] != res["lifecycle_dropped"]
                                         or eng["resyncs"] < 1):
        raise Fail("lifecycle drops %d (daemon %d) without a resync (%d)" %
                   (res["lifecycle_dropped"], eng["lifecycle_dropped"], eng["resyncs"]))
    # the daemon's view equals the engine's page table
    if have != (want_pages, want_tokens, want_seqs):
        raise Fail("daemon view (pages, tokens, seqs) %s, engine page table %s" %
                   (have, (want_pages, want_tokens, want_seqs)))
    got = {(p["seq"], p["slot"], p["gen"], p["first_pos"], p["n_tokens"]) for p in top}
    want = expected_evictable(pages)
    if got != want:
        raise Fail("evictable pages differ: daemon only %s; engine only %s" %
                   (sorted(got - want)[:10], sorted(want - got)[:10]))
    if stop(d) != 0:   # clean stop: LeakSanitizer's verdict in ASan builds
        raise Fail("memdecayd exited %d at SIGTERM (sanitizer report?)" % d.returncode)
    print("RESULT overload burst_s=%.2f step_ratio=%.2f step_max_ms=%.1f attn_dropped=%d "
          "lifecycle_dropped=%d resyncs=%d published_over_drained=%.0f pages=%d evictable=%d" %
          (burst_s, ratio, res["step_us_max"] / 1e3, res["attn_dropped"],
           res["lifecycle_dropped"], eng["resyncs"], published / max(drained, 1), want_pages,
           len(want)))


main("overload", body)
