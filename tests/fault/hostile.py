#!/usr/bin/env python3
"""hostile.py BINDIR — promise 3: a hostile engine and control-socket abuse.

Phase A (violation limit off): memdecay-hostile --mode shm writes garbage into
its rings, page table, clocks and control words and tries to resize and
write-map its segments, while memdecay-hostile --mode ctl abuses the control
socket (random bytes, oversized lines, half-open and slow connections, a
thousand connections at once).  Phase B (limit 200): a new hostile engine is
detached for its violations, with the reason in the log.  Throughout, a
well-behaved loadgen engine runs under a budget and `memdecayctl get` is timed
every ~50 ms.  Checks: the daemon never exits; every get on a raw socket
answers within 100 ms, and none is refused (memdecayctl's, which include
process start, by their median and nine in ten); each kind of violation shows in `stats`; the seals refuse
ftruncate and a writable mapping; the persistent violator is detached with a
logged reason, also one that only writes records no correct engine writes while
requesting a resync every round (phase C); the loadgen stays attached with
every invariant at 0.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faultlib import Fail, check_invariants, ctl, ctl_json, main, memdecayctl, read_json, \
    slow_factor, stop  # noqa: E402

GET_LIMIT_S = float(os.environ.get("MD_FAULT_GET_LIMIT_MS", "100")) / 1e3


class Prober(threading.Thread):
    """Every ~50 ms: the real memdecayctl get (end to end, process start
    included) and a raw get on the socket (the daemon's own latency)."""

    def __init__(self, env):
        super().__init__(daemon=True)
        self.env = env
        self.lat = []
        self.raw = []
        self.failures = []
        self.halt = False

    def run(self):
        while not self.halt:
            rc, out, err, dt = memdecayctl(self.env, "--timeout-ms", "2000", "get",
                                           "memdecay.alpha")
            if rc != 0:
                self.failures.append((rc, err.strip()))
            else:
                self.lat.append(dt)
            t = time.monotonic()
            try:
                ctl(self.env.sock, "get memdecay.alpha", timeout=2)
                self.raw.append(time.monotonic() - t)
            except (OSError, Fail) as e:
                self.failures.append(("raw", str(e)))
            time.sleep(0.05)


def body(env):
    d = env.start_daemon()
    ctl(env.sock, "set daemon.violation_limit=0")
    # --wait-ms 2000: at budget + 1 the good engine waits up to 2 s for the
    # daemon's evictions (default 200 ms) before it opens a page over budget;
    # a loaded machine alone delays a few past 200 ms (faultlib.WAIT_MS_NOTE)
    lg = env.loadgen("good", "--seqs", 4, "--pages-per-seq", 24, "--steps", 0, "--step-hz", 400,
                     "--budget-pages", 30, "--pattern", "heavy", "--seed", 7,
                     "--wait-ms", 2000)
    time.sleep(0.3)
    pr = Prober(env)
    pr.start()

    # Phase A
    hs = env.hostile("--mode", "shm", "--duration-ms", 3000, "--engine-name", "hostile-a",
                     "--capacity", 64, "--seqs", 4, "--seed", 11)
    hc = env.hostile("--mode", "ctl", "--duration-ms", 3000, "--conns", 1000)
    time.sleep(2.5)
    st = ctl_json(env.sock, "stats")
    hs.wait(20)
    hc.wait(30)
    shm = read_json(hs.md_out)
    ctlr = read_json(hc.md_out)
    print("shm: %s" % shm)
    print("ctl: %s" % ctlr)
    if d.poll() is not None:
        raise Fail("memdecayd exited during phase A")
    he = [e for e in st["engines"] if e["name"] == "hostile-a"]
    if not he:
        raise Fail("hostile engine not attached during phase A: %s" % st)
    he = he[0]
    want_rej = ("type", "slot", "generation", "sequence", "state", "mass", "span")
    missing = [k for k in want_rej if he["rejected"][k] == 0]
    for k in ("torn", "bad_tail", "violations", "resync_pages_skipped"):
        if he[k] == 0:
            missing.append(k)
    if missing:
        raise Fail("violations not counted in stats: %s (%s)" % (missing, he))
    for k in ("ftruncate_refused", "grow_refused", "write_map_refused", "mprotect_refused"):
        if shm.get(k) is not True:
            raise Fail("seals did not refuse: %s = %s" % (k, shm.get(k)))
    if shm["detached"]:
        raise Fail("hostile engine detached with the violation limit off")
    if ctlr["storms"] < 1 or ctlr["err_replies"] < 1:
        raise Fail("control-socket abuse did not run: %s" % ctlr)

    # Phase B: a persistent violator is detached, saying why
    ctl(env.sock, "set daemon.violation_limit=200")
    hb = env.hostile("--mode", "shm", "--duration-ms", 5000, "--engine-name", "hostile-b",
                     "--seed", 12)
    hb.wait(20)
    res_b = read_json(hb.md_out)
    if not res_b["detached"]:
        raise Fail("persistent violator was not detached: %s" % res_b)
    time.sleep(0.1)
    log = open(env.dlog).read()
    tag = "engine %d (hostile-b) detached: violations:" % res_b["engine_id"]
    if tag not in log:
        raise Fail("no logged reason for detaching the violator (want %r)" % tag)
    st2 = ctl_json(env.sock, "stats")
    if st2["daemon"]["detaches"]["violations"] < 1:
        raise Fail("stats does not count the detach: %s" % st2["daemon"])
    # Phase C: no torn record, no bad tail, only records no correct engine
    # writes, and a resync request every round (each one opens a window in
    # which in-flight records may disagree with the table): still detached.
    hcx = env.hostile("--mode", "shm", "--duration-ms", 5000, "--engine-name", "hostile-c",
                      "--seed", 13, "--attacks",
                      "random_records,slot_past_capacity,bad_attention,page_table_garbage")
    hcx.wait(20)
    res_c = read_json(hcx.md_out)
    if not res_c["detached"]:
        raise Fail("an engine buying forgiveness with resync requests was not detached: %s" %
                   res_c)

    time.sleep(0.3)
    pr.halt = True
    pr.join(10)
    if stop(lg) != 0:
        raise Fail("good loadgen exited %s" % lg.returncode)
    res = read_json(lg.md_out)
    check_invariants(res, "good")
    if res["reattaches"] != 0 or not res["attached"]:
        raise Fail("the good engine lost the daemon: %s" % res)
    if d.poll() is not None:
        raise Fail("memdecayd exited")
    if stop(d) != 0:   # clean stop: LeakSanitizer's verdict in ASan builds
        raise Fail("memdecayd exited %d at SIGTERM (sanitizer report?)" % d.returncode)
    lat, raw = sorted(pr.lat), sorted(pr.raw)
    if not lat or not raw:
        raise Fail("no get answered")
    slow = slow_factor(env.bin)
    print("get: %d answered, p50 %.1f ms, max %.1f ms (raw socket p50 %.1f max %.1f ms), "
          "%d failed %s; timing x%d" %
          (len(lat), lat[len(lat) // 2] * 1e3, lat[-1] * 1e3, raw[len(raw) // 2] * 1e3,
           raw[-1] * 1e3, len(pr.failures), pr.failures[:3], slow))
    if pr.failures:
        raise Fail("get failed %d times during the abuse: %s" %
                   (len(pr.failures), pr.failures[:5]))
    # The daemon's own answer time (raw socket) is held to the limit on every
    # get.  A memdecayctl get also pays for fork+exec of a fresh process, which
    # a loaded 2-core machine stalls for reasons that are not the daemon's:
    # beside two CPU hogs, with an idle daemon and no abuse at all, 334 such
    # gets had p99 185 ms and max 484 ms while the raw gets' max was 7.2 ms.
    # So no single memdecayctl get is held to a wall-clock bound below its own
    # --timeout-ms (past it, or refused, it fails above): its median is held
    # to the limit and at most a tenth of them may exceed 2.5x.  A daemon that
    # kept making memdecayctl wait or retry would slow most of them.
    if raw[-1] > GET_LIMIT_S * slow:
        raise Fail("the daemon took %.1f ms to answer get on its socket, limit %.0f ms" %
                   (raw[-1] * 1e3, GET_LIMIT_S * slow * 1e3))
    over = sum(1 for x in lat if x > 2.5 * GET_LIMIT_S * slow)
    if lat[len(lat) // 2] > GET_LIMIT_S * slow or over > len(lat) // 10:
        raise Fail("memdecayctl get took p50 %.1f ms (limit %.0f ms); %d of %d over %.0f ms "
                   "(at most %d)" % (lat[len(lat) // 2] * 1e3, GET_LIMIT_S * slow * 1e3, over,
                                     len(lat), 2.5 * GET_LIMIT_S * slow * 1e3, len(lat) // 10))
    print("RESULT hostile violations=%d torn=%d bad_tail=%d rejected=%d detached_after_ms=%.1f "
          "get_p50_ms=%.1f get_max_ms=%.1f raw_get_max_ms=%.1f gets=%d storm_connected=%d "
          "storm_refused=%d" %
          (he["violations"], he["torn"], he["bad_tail"], sum(he["rejected"].values()),
           res_b["detached_after_ms"], lat[len(lat) // 2] * 1e3, lat[-1] * 1e3, raw[-1] * 1e3,
           len(lat),
           ctlr["storm_connected"], ctlr["storm_refused"]))


main("hostile", body)
