"""faultlib.py — shared helpers for the fault suite (tests/fault/*.py).

Each scenario runs its own memdecayd on a socket in a fresh private directory,
drives it with real memdecay-loadgen / memdecay-hostile processes, and talks to
it over the control socket (the same framing memdecayctl uses: one request
line, reply "OK <n>\\n<body>" or "ERR <msg>\\n").  On failure the daemon log
tail is printed.  No third-party modules.
"""
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


class Fail(Exception):
    pass


def now():
    return time.monotonic()


def die_with_parent():
    """preexec_fn: the kernel sends the child SIGKILL when this suite's process
    dies (a ctest time-out, a crash), so no daemon or engine outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


class Env:
    def __init__(self, name, bindir):
        self.name = name
        self.bin = bindir
        self.dir = tempfile.mkdtemp(prefix="md-fault-%s-" % name)
        os.chmod(self.dir, 0o700)
        self.sock = os.path.join(self.dir, "run", "memdecayd.sock")
        self.daemon = None
        self.dlog = os.path.join(self.dir, "daemon.log")
        self.procs = []
        self.t0 = now()
        self.daemon_wrap = []    # e.g. valgrind and its options
        self.loadgen_wrap = []

    # ---- processes ----
    def exe(self, name):
        return os.path.join(self.bin, name)

    def start_daemon(self, *extra, sock=None, log=None, wait=True, retry_busy=0.0):
        """Starts memdecayd and waits for it to answer ping.  retry_busy: for
        how many seconds a start refused with "another memdecayd is already
        answering" is retried (a supervisor's restart loop); self.busy_retries
        counts them."""
        sock = sock or self.sock
        t_first = now()
        while True:
            logf = open(log or self.dlog, "ab")
            p = subprocess.Popen([*self.daemon_wrap, self.exe("memdecayd"), "--socket", sock,
                                  "--foreground",
                                  "--log-level", "info", *extra],
                                 stdout=logf, stderr=logf, preexec_fn=die_with_parent)
            logf.close()
            self.procs.append(p)
            if not wait:
                break
            deadline = now() + (60 if self.daemon_wrap else 10)
            ok = False
            while now() < deadline:
                if p.poll() is not None:
                    break
                try:
                    ctl(sock, "ping", timeout=1)
                    ok = True
                    break
                except (OSError, Fail):
                    time.sleep(0.02)
            if ok:
                break
            if p.poll() is None:
                raise Fail("memdecayd did not answer on %s" % sock)
            if p.returncode == 1 and now() - t_first < retry_busy and \
                    "another memdecayd" in self.log_tail(1):
                self.busy_retries = getattr(self, "busy_retries", 0) + 1
                time.sleep(0.05)
                continue
            raise Fail("memdecayd exited at start (rc %s)" % p.returncode)
        if sock == self.sock:
            self.daemon = p
        return p

    def loadgen(self, name, *args, out=None, wrap=False):
        out = out or os.path.join(self.dir, name + ".json")
        f = open(out, "wb")
        e = open(os.path.join(self.dir, name + ".err"), "ab")
        p = subprocess.Popen([*(self.loadgen_wrap if wrap else []),
                              self.exe("memdecay-loadgen"), "--socket", self.sock,
                              "--engine-name", name, "--json", *[str(a) for a in args]],
                             stdout=f, stderr=e, preexec_fn=die_with_parent)
        f.close()
        e.close()
        p.md_out = out
        p.md_name = name
        self.procs.append(p)
        return p

    def hostile(self, *args, out=None, sock=None):
        out = out or os.path.join(self.dir, "hostile-%d.json" % len(self.procs))
        f = open(out, "wb")
        p = subprocess.Popen([self.exe("memdecay-hostile"), "--socket", sock or self.sock,
                              *[str(a) for a in args]], stdout=f,
                             stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
        f.close()
        p.md_out = out
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, n=40):
        try:
            with open(self.dlog, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return "(no daemon log)"

    def elapsed(self):
        return now() - self.t0


def ctl(sock, line, timeout=2.0):
    """One request on the control socket; returns the body.  Raises Fail on ERR."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    t_end = now() + timeout
    try:
        while True:
            try:
                s.connect(sock)
                break
            except BlockingIOError:   # listen backlog full: a blocking client waits
                if now() > t_end:
                    raise Fail("connect to %s: backlog full for %.1f s" % (sock, timeout))
                time.sleep(0.001)
        s.sendall(line.encode() + b"\n")
        data = b""
        while b"\n" not in data:
            c = s.recv(65536)
            if not c:
                raise Fail("connection closed before a reply to %r" % line)
            data += c
        head, _, rest = data.partition(b"\n")
        if head.startswith(b"ERR"):
            raise Fail("daemon refused %r: %s" % (line, head.decode(errors="replace")))
        if not head.startswith(b"OK "):
            raise Fail("malformed reply to %r: %r" % (line, head))
        n = int(head[3:])
        while len(rest) < n:
            c = s.recv(65536)
            if not c:
                raise Fail("short reply to %r" % line)
            rest += c
        return rest[:n].decode()
    finally:
        s.close()


def ctl_json(sock, line, timeout=2.0, retry_s=3.0):
    """JSON request; a refusal for too many connections is retried (the test's
    own bookkeeping must not depend on the daemon's fairness, the probers do)."""
    t = now()
    while True:
        try:
            return json.loads(ctl(sock, line + " --json", timeout))
        except Fail as e:
            if "too many connections" not in str(e) or now() - t > retry_s:
                raise
            time.sleep(0.02)


def memdecayctl(env, *args, sock=None, timeout=5):
    """Runs the real memdecayctl binary; returns (rc, stdout, stderr, seconds)."""
    t = now()
    r = subprocess.run([env.exe("memdecayctl"), "--socket", sock or env.sock, *args],
                       capture_output=True, timeout=timeout)
    return r.returncode, r.stdout.decode(), r.stderr.decode(), now() - t


def engines(sock):
    return ctl_json(sock, "engines")["engines"]


_slow = {}


def slow_factor(bindir):
    """1 for a normal build; 5 when memdecayd carries ASan/UBSan (the
    instrumented binaries start and run several times slower, and only
    timing limits are scaled: every functional check stays as is)."""
    if bindir not in _slow:
        with open(os.path.join(bindir, "memdecayd"), "rb") as f:
            _slow[bindir] = 5 if b"__asan_init" in f.read() else 1
    return _slow[bindir]


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def memfd_maps(pid):
    """Mappings of daemon-created segments (engine and daemon memfds)."""
    n = 0
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            if "memfd:memdecay-" in line:
                n += 1
    return n


def read_json(path):
    with open(path) as f:
        txt = f.read().strip()
    if not txt:
        raise Fail("%s is empty" % path)
    return json.loads(txt.splitlines()[-1])


# WAIT_MS_NOTE: loadgen opens a page over budget + 1 only after --wait-ms
# without the daemon's evictions (default 200 ms).  A live daemon on a loaded
# machine can take longer than 200 ms to be scheduled: ctest -j2 beside CPU
# hogs (and a model server) saw engines 3 to 10 pages over budget,
# one page per wait that ran out.  Scenarios that hold a live daemon to
# budget + 1 pass --wait-ms 2000, so the bound is the daemon's, not the clock's.
def check_invariants(result, name, need_evictions=True, budget_slack=1):
    errs = []
    for k in ("pinned_evicted", "stale_applied", "double_freed", "protected_evicted"):
        if result.get(k, 0) != 0:
            errs.append("%s=%s" % (k, result[k]))
    if budget_slack is not None and result.get("over_budget_max_pages", 0) > budget_slack:
        errs.append("over_budget_max_pages=%s" % result["over_budget_max_pages"])
    if need_evictions and result.get("evictions", 0) <= 0:
        errs.append("no evictions")
    if errs:
        raise Fail("%s: %s (%s)" % (name, " ".join(errs), json.dumps(result)))


def stop(p, sig=signal.SIGTERM, timeout=20):
    if p.poll() is None:
        p.send_signal(sig)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)
        raise Fail("process %d did not stop within %d s" % (p.pid, timeout))
    return p.returncode


def main(name, body):
    """Runs body(env) with BINDIR from argv[1]; exit 0 on success."""
    bindir = sys.argv[1]
    env = Env(name, bindir)
    seed = int(os.environ.get("MD_FAULT_SEED", "0") or 0) or int(time.time())
    random.seed(seed)
    print("[%s] seed %d, dir %s" % (name, seed, env.dir))
    rc = 0
    try:
        body(env)
        print("[%s] PASS in %.1f s" % (name, env.elapsed()))
    except Fail as e:
        print("[%s] FAIL: %s" % (name, e))
        print("--- daemon log (tail) ---")
        print(env.log_tail())
        rc = 1
    finally:
        env.cleanup()
    sys.exit(rc)
