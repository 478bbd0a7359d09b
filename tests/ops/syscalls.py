"""syscalls.py BIN UNIT — the SystemCallFilter= of memdecayd.service allows
every system call memdecayd really makes.

memdecayd runs under `strace -f` (its threads included) through what a node
does to it: started as a Type=notify service with a watchdog, the metrics
endpoint on, a journal and a --save-dir; a memdecay-loadgen engine attaches
under a budget and gets evictions; memdecayctl stats/metrics/set/save; a
Prometheus-style GET /metrics; SIGHUP; the engine detaches; SIGTERM.  Once on
each event-loop backend.  The calls strace saw are compared with the filter
expanded by `systemd-analyze syscall-filter`.  Exit 77 (skipped) without
strace or systemd-analyze."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import opslib

if not shutil.which("strace") or not shutil.which("systemd-analyze"):
    print("syscalls: strace or systemd-analyze missing: skipped")
    sys.exit(77)


def expand(token, seen):
    if not token.startswith("@"):
        return {token}
    if token in seen:
        return set()
    seen.add(token)
    out = subprocess.run(["systemd-analyze", "syscall-filter", token], capture_output=True,
                         text=True, check=True).stdout
    calls = set()
    for line in out.splitlines()[1:]:
        line = line.strip()
        if line and not line.startswith("#"):
            calls |= expand(line, seen)
    return calls


def unit_filter(unit):
    allowed, seen = set(), set()
    with open(unit) as f:
        for line in f:
            m = re.match(r"^SystemCallFilter=(.*)$", line.strip())
            if m:
                if m.group(1).startswith("~"):
                    raise SystemExit("syscalls: deny-list filters are not handled here")
                for tok in m.group(1).split():
                    allowed |= expand(tok, seen)
    if not allowed:
        raise SystemExit("syscalls: no SystemCallFilter= in %s" % unit)
    return allowed


def traced_calls(path):
    calls = set()
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)(?:\(| resumed>)", line)
            if m:
                calls.add(m.group(1))
    return calls


def scenario(run, backend):
    sock = run.path("md-%s.sock" % backend)
    conf = run.path("md.conf")
    with open(conf, "w") as f:
        f.write("policy = memdecay\n")
    savedir = run.path("save")
    os.makedirs(savedir, exist_ok=True)
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(run.path("notify-%s.sock" % backend))
    trace = run.path("strace-%s.txt" % backend)
    env = dict(os.environ, NOTIFY_SOCKET=run.path("notify-%s.sock" % backend),
               WATCHDOG_USEC="400000")
    # LeakSanitizer cannot run under ptrace; the sanitizer build's other
    # checks still do
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    d = run.spawn(["strace", "-f", "-qq", "-o", trace, os.path.join(run.bin, "memdecayd"),
                   "--foreground", "--socket", sock, "--config", conf, "--event-loop", backend,
                   "--journal", run.path("journal-%s" % backend), "--save-dir", savedir,
                   "--metrics-listen", "127.0.0.1:0"], log="daemon-%s.log" % backend, env=env)
    run.wait_ping(sock, d, secs=30)
    port = mdpid = None
    for _ in range(100):
        with open(run.path("daemon-%s.log" % backend), errors="replace") as f:
            log = f.read()
        m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", log)
        p = re.search(r" listening on .*, pid (\d+)\)", log)
        if m and p:
            port, mdpid = int(m.group(1)), int(p.group(1))
            break
        time.sleep(0.05)
    if not port:
        run.fail("%s: no metrics port or pid in the log" % backend)
    lg = run.spawn([os.path.join(run.bin, "memdecay-loadgen"), "--socket", sock,
                    "--seqs", "4", "--pages-per-seq", "32", "--steps", "800",
                    "--budget-pages", "48", "--hold-ms", "60000"], log="loadgen-%s.log" % backend)
    t_end = time.monotonic() + 60
    ev = 0
    while time.monotonic() < t_end and not ev:
        m = re.search(r"^memdecay_evictions_total\{[^}]*\} (\d+)",
                      run.ctl(sock, "metrics").stdout, re.M)
        ev = int(m.group(1)) if m else 0
        time.sleep(0.2)
    if not ev:
        run.fail("%s: no evictions" % backend)
    run.ctl(sock, "stats")
    run.ctl(sock, "--json", "engines")
    run.ctl(sock, "top", "5")
    run.ctl(sock, "set", "memdecay.region.scratchpad.lambda=0.3")
    run.ctl(sock, "save", "saved.conf")
    run.ctl(sock, "calibrate")
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        r.read()
    time.sleep(0.5)  # a few watchdog pings and ticks
    os.kill(mdpid, signal.SIGHUP)  # the traced daemon, not strace
    time.sleep(0.3)
    run.stop(lg)  # detach
    time.sleep(0.3)
    os.kill(mdpid, signal.SIGTERM)
    try:
        rc = d.wait(20)  # strace exits with the daemon's status
    except subprocess.TimeoutExpired:
        rc = None
        os.kill(mdpid, signal.SIGKILL)
    ns.close()
    if rc != 0:
        run.fail("%s: memdecayd under strace exited %s" % (backend, rc))
    return traced_calls(trace), ev


def body(run):
    allowed = unit_filter(sys.argv[2])
    used = set()
    for backend in ("uring", "epoll"):
        calls, ev = scenario(run, backend)
        print("syscalls (%s loop): %d distinct calls, %d evictions" % (backend, len(calls), ev))
        used |= calls
    missing = sorted(used - allowed)
    if missing:
        run.fail("memdecayd calls what SystemCallFilter= does not allow: %s" % " ".join(missing))
    print("syscalls: all %d calls memdecayd made are in the unit's filter (%d allowed): %s"
          % (len(used), len(allowed), " ".join(sorted(used))))


opslib.main("ops_syscall_filter", body)
