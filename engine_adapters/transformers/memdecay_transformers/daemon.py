"""A private memdecayd for tests and benchmarks: a Unix socket in a fresh 0700
temporary directory, `--foreground`, killed with its parent (PR_SET_PDEATHSIG)
and always stopped by `stop()` / the context manager."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time


def _die_with_parent():
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)


class Daemon:
    def __init__(self, bindir, args=(), journal=None):
        self.bindir = bindir
        self.dir = tempfile.mkdtemp(prefix="md-kv-")
        os.chmod(self.dir, 0o700)
        self.sock = os.path.join(self.dir, "memdecayd.sock")
        self.logpath = os.path.join(self.dir, "memdecayd.log")
        self.log = open(self.logpath, "ab")
        exe = os.path.join(bindir, "memdecayd")
        if not os.access(exe, os.X_OK):
            raise FileNotFoundError("memdecayd not found at %s (set MEMDECAY_BIN)" % exe)
        cmd = [exe, "--socket", self.sock, "--foreground", "--log-level", "warn", *args]
        if journal:
            cmd += ["--journal", journal]
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=self.log,
                                  preexec_fn=_die_with_parent)
        t = time.monotonic() + 10
        while time.monotonic() < t:
            if self.ctl("ping", check=False).returncode == 0:
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.02)
        err = self.tail()
        self.stop()
        raise RuntimeError("memdecayd did not answer on %s: %s" % (self.sock, err))

    def ctl(self, *args, check=True):
        r = subprocess.run([os.path.join(self.bindir, "memdecayctl"), "--socket", self.sock,
                            *args], capture_output=True, text=True, timeout=30)
        if check and r.returncode:
            raise RuntimeError("memdecayctl %s: %s" % (" ".join(args), r.stderr.strip()))
        return r

    def json(self, *args):
        return json.loads(self.ctl("--json", *args).stdout)

    def alive(self):
        return self.p.poll() is None

    def tail(self, n=2000):
        try:
            with open(self.logpath, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        if not self.log.closed:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
