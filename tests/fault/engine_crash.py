#!/usr/bin/env python3
"""engine_crash.py BINDIR — promise 1: engine crash.

Three long-running loadgen engines (the survivors) run under a page budget.
Victim loadgen engines are started and killed with SIGKILL at random moments
(during HELLO, just attached, in full flight), at least KILLS times, sometimes
two at once.  Checks: memdecayd never exits; every dead engine disappears from
`engines` within 1 s of its kill; after the storm the daemon's descriptors and
segment mappings equal the baseline and its RSS is back within slack; the
survivors finish with no pinned/protected page evicted, no stale command
applied, no page freed twice, occupancy at most budget + 1.
"""
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faultlib import Fail, check_invariants, ctl_json, engines, fd_count, main, memfd_maps, \
    now, read_json, rss_kib, slow_factor, stop  # noqa: E402

KILLS = int(os.environ.get("MD_FAULT_KILLS", "50"))
SURVIVORS = 3
# MD_FAULT_VALGRIND=1: memdecayd and the survivors (libmemdecay) run under
# valgrind memcheck; fewer kills, one slow survivor; any memcheck error or
# definite leak fails (their exit status, checked at a clean stop).
VALGRIND = os.environ.get("MD_FAULT_VALGRIND") == "1"
VG = ["valgrind", "--quiet", "--error-exitcode=99", "--leak-check=full",
      "--errors-for-leak-kinds=definite", "--show-leak-kinds=definite"]
if VALGRIND:
    KILLS = int(os.environ.get("MD_FAULT_KILLS", "12"))
    SURVIVORS = 1


def body(env):
    if VALGRIND:
        env.daemon_wrap = VG + ["--log-file=%s/vg-daemon.%%p" % env.dir]
        env.loadgen_wrap = VG + ["--log-file=%s/vg-engine.%%p" % env.dir]
    # memcheck cannot see the kernel fill io_uring buffers: epoll under valgrind
    d = env.start_daemon(*(["--event-loop", "epoll"] if VALGRIND else []))
    surv = [env.loadgen("surv%d" % i, "--seqs", 4, "--pages-per-seq", 24, "--steps", 0,
                        "--step-hz", 100 if VALGRIND else 400, "--budget-pages", 40,
                        "--pattern", "heavy", "--seed", i + 1, "--heartbeat-timeout-ms",
                        20000 if VALGRIND else 2000, "--wait-ms", 2000, wrap=True)
            for i in range(SURVIVORS)]

    def wait_count(n, limit=5.0):
        t = now()
        while now() - t < limit:
            if len(engines(env.sock)) == n:
                return
            time.sleep(0.02)
        raise Fail("expected %d engines, have %s" % (n, engines(env.sock)))

    wait_count(SURVIVORS, 60.0 if VALGRIND else 5.0)
    serial = [0]

    def victim():
        serial[0] += 1
        return env.loadgen("victim%d" % serial[0], "--seqs", random.choice([2, 4, 8]),
                           "--pages-per-seq", 16, "--steps", 0,
                           "--step-hz", random.choice([0, 1000]), "--budget-pages", 24,
                           "--pattern", "recent", "--seed", 100 + serial[0])

    def kill_and_measure(vs):
        for v in vs:
            v.send_signal(signal.SIGKILL)
        t_kill = now()
        for v in vs:
            v.wait(5)
        pids = {v.pid for v in vs}
        while True:
            live = [e for e in engines(env.sock) if e["pid"] in pids]
            if not live:
                return now() - t_kill
            if now() - t_kill > 5:
                raise Fail("engine(s) %s still attached 5 s after kill -9" % live)
            time.sleep(0.005)

    # Warm up (lazily allocated buffers), then take the baseline.
    for _ in range(2):
        v = victim()
        time.sleep(0.3)
        kill_and_measure([v])
    time.sleep(0.3)
    base_fd, base_maps, base_rss = fd_count(d.pid), memfd_maps(d.pid), rss_kib(d.pid)
    print("baseline: %d fds, %d segment mappings, %d KiB RSS" % (base_fd, base_maps, base_rss))

    releases = []
    kills = 0
    attached_at_kill = 0
    while kills < KILLS:
        vs = [victim() for _ in range(2 if random.random() < 0.25 else 1)]
        r = random.random()
        if r < 0.15:
            delay = random.uniform(0, 0.03)     # mid-HELLO or before
        elif r < 0.4:
            delay = random.uniform(0.03, 0.15)  # just attached
        else:
            delay = random.uniform(0.15, 0.6)   # in flight, under budget pressure
        time.sleep(delay)
        pids = {v.pid for v in vs}
        attached_at_kill += sum(1 for e in engines(env.sock) if e["pid"] in pids)
        rel = kill_and_measure(vs)
        kills += len(vs)
        releases.append(rel)
        if rel > 1.0:
            raise Fail("dead engine released after %.3f s (> 1 s)" % rel)
        if d.poll() is not None:
            raise Fail("memdecayd exited (rc %s) after %d kills" % (d.returncode, kills))
    time.sleep(0.5)
    fd, maps, rss = fd_count(d.pid), memfd_maps(d.pid), rss_kib(d.pid)
    releases.sort()
    p50 = releases[len(releases) // 2]
    print("kills %d (%d attached when killed), release p50 %.1f ms max %.1f ms" %
          (kills, attached_at_kill, p50 * 1e3, releases[-1] * 1e3))
    print("after: %d fds, %d segment mappings, %d KiB RSS" % (fd, maps, rss))
    if attached_at_kill < KILLS // 2:
        raise Fail("only %d of %d victims were attached when killed" % (attached_at_kill, kills))
    if fd != base_fd:
        raise Fail("daemon fds %d, baseline %d: leaked descriptors %s" %
                   (fd, base_fd, os.listdir("/proc/%d/fd" % d.pid)))
    if maps != base_maps:
        raise Fail("daemon segment mappings %d, baseline %d" % (maps, base_maps))
    # ASan keeps freed memory in quarantine (RSS grows legitimately); there
    # the leak check is LeakSanitizer's, at the clean stop below.
    slack = max(8 * 1024, base_rss // 5) if slow_factor(env.bin) == 1 else max(64 * 1024, base_rss)
    if rss > base_rss + slack:
        raise Fail("daemon RSS %d KiB, baseline %d KiB (+%d allowed)" % (rss, base_rss, slack))
    st = ctl_json(env.sock, "stats")
    if st["daemon"]["engines"] != SURVIVORS:
        raise Fail("daemon has %d engines, want %d" % (st["daemon"]["engines"], SURVIVORS))
    if st["daemon"]["detaches"]["eof"] < attached_at_kill:
        raise Fail("detaches %s < %d attached kills" % (st["daemon"]["detaches"], attached_at_kill))
    for s in surv:
        rc = stop(s, timeout=60)
        res = read_json(s.md_out)
        check_invariants(res, s.md_name)
        if rc != 0:
            raise Fail("%s exited %d" % (s.md_name, rc))
        if not res["attached"] or res["reattaches"] != 0:
            raise Fail("%s lost the daemon: %s" % (s.md_name, res))
    if d.poll() is not None:
        raise Fail("memdecayd exited")
    # A clean stop: under ASan, LeakSanitizer reports (non-zero exit) what the
    # 50 crashes leaked; under valgrind, memcheck does.
    rc = stop(d, timeout=60)
    if rc != 0 and not VALGRIND:
        raise Fail("memdecayd exited %d at SIGTERM (sanitizer report?)" % rc)
    if VALGRIND:
        logs = "".join(open(os.path.join(env.dir, f)).read() for f in os.listdir(env.dir)
                       if f.startswith("vg-"))
        if rc != 0:
            raise Fail("memdecayd under valgrind exited %d:\n%s" % (rc, logs[-3000:]))
        print("valgrind: memdecayd and %d engine(s) clean" % SURVIVORS)
    print("RESULT engine_crash kills=%d release_p50_ms=%.1f release_max_ms=%.1f "
          "fd_base=%d fd_after=%d rss_base_kib=%d rss_after_kib=%d" %
          (kills, p50 * 1e3, releases[-1] * 1e3, base_fd, fd, base_rss, rss))


main("engine_crash", body)
