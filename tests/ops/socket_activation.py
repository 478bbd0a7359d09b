"""socket_activation.py BIN — memdecayd serving a listening socket handed over
by a service manager (LISTEN_FDS/LISTEN_PID, fd 3), as a systemd .socket unit
would: first through systemd-socket-activate when it is installed (the
daemon starts on the first connection), then through a tiny helper that binds,
listens, forks and execs the daemon with the descriptor at fd 3.  The daemon
must answer on the passed socket, leave the socket file to its owner at stop,
and refuse a passed descriptor that is not a listening stream socket."""
import os
import shutil
import socket
import time

import opslib


def helper_spawn(run, sock_path, label, make_sock, extra=()):
    """Binds/listens in this process, then the child execs memdecayd with it at fd 3."""
    lsock = make_sock(sock_path)
    md = os.path.join(run.bin, "memdecayd")
    log = open(run.path("daemon-%s.log" % label), "ab")
    run.logs.append(run.path("daemon-%s.log" % label))
    pid = os.fork()
    if pid == 0:  # child: become what the manager starts
        try:
            os.setsid()
            os.dup2(lsock.fileno(), 3)
            os.set_inheritable(3, True)
            os.dup2(log.fileno(), 2)
            env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
            os.execve(md, [md, "--foreground"] + list(extra), env)
        finally:
            os._exit(127)
    lsock.close()
    log.close()

    class P:  # enough of Popen for opslib's stop/cleanup
        def __init__(self, pid):
            self.pid, self.returncode = pid, None

        def poll(self):
            if self.returncode is None:
                r, st = os.waitpid(self.pid, os.WNOHANG)
                if r:
                    self.returncode = os.waitstatus_to_exitcode(st)
            return self.returncode

        def wait(self, timeout=None):
            t_end = time.monotonic() + (timeout or 1e9)
            while self.poll() is None:
                if time.monotonic() > t_end:
                    import subprocess
                    raise subprocess.TimeoutExpired("memdecayd", timeout)
                time.sleep(0.02)
            return self.returncode

        def send_signal(self, sig):
            os.kill(self.pid, sig)

        def kill(self):
            os.kill(self.pid, 9)
    p = P(pid)
    run.procs.append(p)
    return p


def unix_listener(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(16)
    return s


def check_served(run, p, sock_path, label):
    t0 = time.monotonic()
    r = run.ctl(sock_path, "--timeout-ms", "5000", "ping", check=False)
    if r.returncode != 0 or not r.stdout.startswith("pong"):
        run.fail("%s: ping on the passed socket: rc=%d %s" % (label, r.returncode, r.stderr))
    first_ms = (time.monotonic() - t0) * 1e3
    rc = run.stop(p)
    if rc != 0:
        run.fail("%s: memdecayd exited %s at SIGTERM" % (label, rc))
    if not os.path.exists(sock_path):
        run.fail("%s: memdecayd removed the socket file its manager owns" % label)
    with open(run.path("daemon-%s.log" % label), errors="replace") as f:
        if "serving the listening socket passed on fd 3" not in f.read():
            run.fail("%s: the daemon did not take the passed socket" % label)
    print("socket activation (%s): first ping answered in %.0f ms, socket file kept at stop"
          % (label, first_ms))


def body(run):
    if shutil.which("systemd-socket-activate"):
        sp = run.path("sa.sock")
        # non-accept mode: it execs memdecayd in place on the first connection
        p = run.spawn(["systemd-socket-activate", "-l", sp, os.path.join(run.bin, "memdecayd"),
                       "--foreground", "--socket", sp], log="daemon-systemd-socket-activate.log")
        for _ in range(200):
            if os.path.exists(sp):
                break
            time.sleep(0.02)
        check_served(run, p, sp, "systemd-socket-activate")
        with open(run.path("daemon-systemd-socket-activate.log"), errors="replace") as f:
            if "listening on %s" % sp not in f.read():
                run.fail("systemd-socket-activate: no 'listening on' line for the passed socket")
    else:
        print("socket activation: systemd-socket-activate not installed; helper only")

    sp = run.path("helper.sock")
    p = helper_spawn(run, sp, "helper", unix_listener)
    check_served(run, p, sp, "helper")

    # a datagram socket is not something memdecayd can serve: exit 1, named
    def dgram(path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(path)
        return s
    p = helper_spawn(run, run.path("bad.sock"), "bad", dgram)
    rc = p.wait(10)
    with open(run.path("daemon-bad.log"), errors="replace") as f:
        log = f.read()
    if rc != 1 or "not a listening AF_UNIX stream socket" not in log:
        run.fail("datagram socket passed: rc=%s, log %r" % (rc, log[-300:]))
    print("socket activation: a passed datagram socket is refused (exit 1)")


opslib.main("ops_socket_activation", body)
