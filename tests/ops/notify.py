"""notify.py BIN — memdecayd started the way systemd starts a Type=notify
service: READY=1 (with MAINPID) only once the control socket answers, then
WATCHDOG=1 from the event loop at half of WATCHDOG_USEC, STOPPING=1 at
SIGTERM.  Under `systemd-run --user --wait` when this machine has a user
manager; otherwise NOTIFY_SOCKET points at a datagram socket this test reads
(a path, then an abstract @name), exactly what systemd's manager side does.
A WATCHDOG_PID naming another process must get no pings.  SIGHUP (the unit's
ExecReload=) is framed by RELOADING=1 (with MONOTONIC_USEC) and READY=1."""
import os
import signal
import socket
import subprocess
import time

import opslib

WD_USEC = 400000  # pings due every 200 ms


def have_user_manager():
    try:
        r = subprocess.run(["systemctl", "--user", "is-system-running"], capture_output=True,
                           text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.stdout.strip() in ("running", "degraded")


def read_notes(sock, until, want):
    """Datagrams until `until` (monotonic) or until want(notes) holds."""
    notes = []
    while time.monotonic() < until and not want(notes):
        sock.settimeout(max(0.01, until - time.monotonic()))
        try:
            data = sock.recv(4096)
        except socket.timeout:
            break
        notes.append((time.monotonic(), dict(
            kv.split("=", 1) for kv in data.decode().split("\n") if "=" in kv)))
    return notes


def with_socket(run, addr, label, wd_pid_other=False):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if addr.startswith("@"):
        s.bind("\0" + addr[1:])
    else:
        s.bind(addr)
    md_sock = run.path("md-%s.sock" % label)
    env = dict(os.environ, NOTIFY_SOCKET=addr, WATCHDOG_USEC=str(WD_USEC))
    # WATCHDOG_PID is the service's pid: the shell's, which exec makes memdecayd's
    wd_pid = "1" if wd_pid_other else "$$"
    conf = run.path("md-%s.conf" % label)
    with open(conf, "w") as f:
        f.write("policy = memdecay\n")
    cmd = 'WATCHDOG_PID=%s exec "$0" --socket "$1" --foreground --config "$2"' % wd_pid
    t0 = time.monotonic()
    p = run.spawn(["sh", "-c", cmd, os.path.join(run.bin, "memdecayd"), md_sock, conf],
                  log="daemon-%s.log" % label, env=env)
    notes = read_notes(s, t0 + 10, lambda n: any(d.get("READY") == "1" for _, d in n))
    ready = [(t, d) for t, d in notes if d.get("READY") == "1"]
    if not ready:
        run.fail("%s: no READY=1 within 10 s (got %r)" % (label, notes))
    t_ready, d = ready[0]
    if d.get("MAINPID") != str(p.pid):
        run.fail("%s: READY=1 with MAINPID=%s, daemon pid %d" % (label, d.get("MAINPID"), p.pid))
    # READY=1 promises a listening socket: the first ping must succeed
    r = run.ctl(md_sock, "--timeout-ms", "2000", "ping", check=False)
    if r.returncode != 0:
        run.fail("%s: READY=1 sent but ping failed: %s" % (label, r.stderr))
    notes = read_notes(s, time.monotonic() + 1.5, lambda n: False)
    pings = [t for t, d in notes if d.get("WATCHDOG") == "1"]
    if wd_pid_other:
        if pings:
            run.fail("%s: %d WATCHDOG=1 although WATCHDOG_PID names another process"
                     % (label, len(pings)))
    else:
        if len(pings) < 4:
            run.fail("%s: %d WATCHDOG=1 in 1.5 s, want >= 4 (every %d ms)"
                     % (label, len(pings), WD_USEC // 2000))
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        if max(gaps) > WD_USEC / 1e6:
            run.fail("%s: WATCHDOG=1 gap %.0f ms exceeds WATCHDOG_USEC" % (label, max(gaps) * 1e3))
    reload_note = ""
    if label == "path":
        with open(conf, "w") as f:
            f.write("policy = recency\n")
        p.send_signal(signal.SIGHUP)
        notes = read_notes(s, time.monotonic() + 5,
                           lambda n: any(d.get("READY") == "1" for _, d in n))
        seq = [k for _, d in notes for k in ("RELOADING", "READY") if d.get(k) == "1"]
        rl = [d for _, d in notes if d.get("RELOADING") == "1"]
        if seq[:1] != ["RELOADING"] or "READY" not in seq or not rl[0].get("MONOTONIC_USEC"):
            run.fail("%s: SIGHUP sent %r, want RELOADING=1 (MONOTONIC_USEC) then READY=1"
                     % (label, [d for _, d in notes if "WATCHDOG" not in d]))
        if run.ctl(md_sock, "get", "policy").stdout.strip() != "recency":
            run.fail("%s: READY=1 after SIGHUP but the config was not reloaded" % label)
        reload_note = ", SIGHUP: RELOADING=1 then READY=1"
    rc = run.stop(p)
    notes = read_notes(s, time.monotonic() + 2, lambda n: any("STOPPING" in d for _, d in n))
    if rc != 0:
        run.fail("%s: memdecayd exited %s at SIGTERM" % (label, rc))
    if not any(d.get("STOPPING") == "1" for _, d in notes):
        run.fail("%s: no STOPPING=1 at SIGTERM" % label)
    s.close()
    print("notify %s: READY=1 after %.0f ms, %d WATCHDOG=1 in 1.5 s%s%s, STOPPING=1" % (
        label, (t_ready - t0) * 1e3, len(pings),
        (", max gap %.0f ms" % (max(gaps) * 1e3)) if not wd_pid_other else " (WATCHDOG_PID other)",
        reload_note))


def with_user_manager(run):
    unit = "memdecayd-test-%d" % os.getpid()
    md_sock = run.path("md.sock")
    p = run.spawn(["systemd-run", "--user", "--wait", "--collect", "--unit", unit,
                   "-p", "Type=notify", "-p", "WatchdogSec=1", "-p", "NotifyAccess=main",
                   os.path.join(run.bin, "memdecayd"), "--socket", md_sock, "--foreground"],
                  log="systemd-run.log")
    try:
        t0 = time.monotonic()
        state = ""
        while time.monotonic() < t0 + 20:
            state = subprocess.run(["systemctl", "--user", "show", "-P", "ActiveState", unit],
                                   capture_output=True, text=True).stdout.strip()
            if state == "active":
                break
            time.sleep(0.05)
        if state != "active":
            run.fail("unit %s did not become active (READY=1): %s" % (unit, state))
        print("systemd-run: active (READY=1) after %.0f ms" % ((time.monotonic() - t0) * 1e3))
        run.ctl(md_sock, "ping")

        def wd_ts():
            return subprocess.run(["systemctl", "--user", "show", "-P",
                                   "WatchdogTimestampMonotonic", unit],
                                  capture_output=True, text=True).stdout.strip()
        first = wd_ts()
        time.sleep(1.5)
        later = wd_ts()
        # the watchdog timestamp moves with every WATCHDOG=1; the unit would
        # have failed after 1 s without them
        if not later or later == first:
            run.fail("WatchdogTimestamp did not move (%s -> %s): no WATCHDOG=1" % (first, later))
        print("systemd-run: WATCHDOG=1 seen (watchdog timestamp %s -> %s)" % (first, later))
    finally:
        subprocess.run(["systemctl", "--user", "stop", unit], capture_output=True, timeout=20)
    rc = p.wait(20)
    if rc != 0:
        run.fail("systemd-run --wait: rc=%d" % rc)


def body(run):
    if have_user_manager():
        with_user_manager(run)
        return
    print("notify: no systemd user manager here; NOTIFY_SOCKET at a test socket")
    with_socket(run, run.path("notify.sock"), "path")
    with_socket(run, "@md-notify-test-%d" % os.getpid(), "abstract")
    with_socket(run, run.path("notify2.sock"), "wdpid", wd_pid_other=True)


opslib.main("ops_systemd_notify", body)
