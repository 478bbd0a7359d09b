"""opslib.py — what the operations tests (tests/ops/*.py) share: a private
temp directory, processes that are always stopped (also when a check fails),
a free loopback port, and memdecayctl.  Loopback and temp dirs only."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


class Run:
    def __init__(self, tag, bindir):
        self.tag = tag
        self.bin = bindir
        self.dir = tempfile.mkdtemp(prefix="md-%s." % tag)
        self.procs = []
        self.logs = []

    def path(self, name):
        return os.path.join(self.dir, name)

    def spawn(self, argv, log=None, **kw):
        out = open(self.path(log), "ab") if log else subprocess.DEVNULL
        if log:
            self.logs.append(self.path(log))
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT if log else None,
                             start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=10):
        """Signals p and waits; returns its exit status (None if it had to be killed)."""
        if p.poll() is None:
            try:
                p.send_signal(sig)
                return p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                return None
        return p.returncode

    def ctl(self, sock, *args, check=True):
        r = subprocess.run([os.path.join(self.bin, "memdecayctl"), "--socket", sock] + list(args),
                           capture_output=True, text=True, timeout=20)
        if check and r.returncode != 0:
            self.fail("memdecayctl %s: rc=%d %s" % (" ".join(args), r.returncode, r.stderr))
        return r

    def wait_ping(self, sock, proc, secs=10):
        t_end = time.monotonic() + secs
        while time.monotonic() < t_end:
            if self.ctl(sock, "ping", check=False).returncode == 0:
                return
            if proc.poll() is not None:
                self.fail("memdecayd exited at start (rc=%s)" % proc.returncode)
            time.sleep(0.05)
        self.fail("memdecayd did not answer on %s" % sock)

    def fail(self, msg):
        print("FAIL [%s]: %s" % (self.tag, msg), file=sys.stderr)
        for log in self.logs:
            try:
                with open(log, errors="replace") as f:
                    tail = f.readlines()[-30:]
                print("--- %s (tail) ---\n%s" % (os.path.basename(log), "".join(tail)),
                      file=sys.stderr)
            except OSError:
                pass
        raise SystemExit(1)

    def cleanup(self):
        # Each process leads its own group (start_new_session): the whole
        # group goes, also when the leader is already gone (strace's tracee,
        # a shell's child).
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            if p.poll() is None:
                p.wait()
        if not os.environ.get("MD_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main(tag, body):
    """Runs body(run) with argv[1] the bin directory; cleanup always."""
    run = Run(tag, sys.argv[1])
    try:
        body(run)
    finally:
        run.cleanup()
    print("%s: ok" % tag)
