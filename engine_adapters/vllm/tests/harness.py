"""Shared pieces of the vLLM plugin's tests and benchmarks: the build's binaries,
the model, a memdecayd on a socket in a temporary directory (killed with its
parent, and by `stop`), vLLM started the way the tests need it, the bundled
agent conversation, and the plugin's trace file (MEMDECAY_VLLM_TRACE)."""
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("MEMDECAY_BUILD") or ROOT / "build")
BIN = BUILD / "bin"
LIB = BUILD / "lib" / "libmemdecay.so"
MODEL = os.environ.get("MEMDECAY_VLLM_MODEL") or str(ROOT / ".deps" / "models" / "smollm2-hf")
TRACE = ROOT / "examples" / "agent_trace.jsonl"

# vLLM as every test runs it: fp32, 2,048 tokens, 32-token blocks (the CPU
# backend's smallest), prefill in chunks of 64 so a budget binds during prefill
LLM_ARGS = dict(dtype="float32", max_model_len=2048, enforce_eager=True,
                gpu_memory_utilization=0.15, block_size=32, max_num_batched_tokens=64,
                max_num_seqs=8)
BLOCK = 32


def die_with_parent():
    """preexec_fn: SIGKILL when this process dies, in a process group of its own."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)      # PR_SET_PDEATHSIG
    os.setpgrp()


class Daemon:
    def __init__(self, workdir, config=(), name="memdecayd"):
        self.dir = Path(workdir)
        self.sock = str(self.dir / "memdecayd.sock")
        self.log = self.dir / ("%s.log" % name)
        self.conf = self.dir / ("%s.conf" % name)
        self.conf.write_text("".join("%s\n" % line for line in config))
        self.p = None

    def start(self):
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.p = subprocess.Popen([str(BIN / "memdecayd"), "--socket", self.sock, "--foreground",
                                   "--config", str(self.conf)],
                                  stdout=subprocess.DEVNULL, stderr=open(self.log, "a"),
                                  preexec_fn=die_with_parent)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError("memdecayd exited: %s" % self.log.read_text()[-2000:])
            if os.path.exists(self.sock) and self.ctl("ping", check=False).returncode == 0:
                return self
            time.sleep(0.05)
        raise RuntimeError("memdecayd did not answer on %s within 10 s" % self.sock)

    def ctl(self, *args, check=True):
        r = subprocess.run([str(BIN / "memdecayctl"), "--socket", self.sock] + list(args),
                           capture_output=True, text=True, timeout=20)
        if check and r.returncode:
            raise RuntimeError("memdecayctl %s: %s" % (" ".join(args), r.stderr.strip()))
        return r

    def engines(self):
        r = self.ctl("engines")
        rows = []
        for line in r.stdout.splitlines()[1:]:
            f = line.split()
            if len(f) >= 5:
                rows.append({"id": int(f[0]), "name": f[1], "pid": int(f[2]), "pages": int(f[4])})
        return rows

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def tail(self, n=800):
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def kill(self):
        if self.p and self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()

    def stop(self):
        if self.p and self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def exit_on_sigterm():
    """SIGTERM (ctest's timeout, a stopped CI job) unwinds like an exception, so the
    finally blocks kill vLLM's process group and the daemons."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def run_group(cmd, env, log_path, timeout):
    """Runs cmd in a process group of its own (killed with this process); whatever
    ends the wait (timeout, SIGTERM, an error) kills the whole group, vLLM's
    engine core and workers included.  Returns the exit status."""
    p = subprocess.Popen(cmd, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                         preexec_fn=die_with_parent)
    try:
        return p.wait(timeout)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def plugin_env(daemon, trace=None, on=True):
    """The environment that switches the plugin on (or off) for vLLM's processes."""
    env = {"MEMDECAY_VLLM": "1" if on else "0", "MEMDECAY_LIBRARY": str(LIB)}
    if daemon is not None:
        env["MEMDECAY_SOCKET"] = daemon.sock
    if trace:
        env["MEMDECAY_VLLM_TRACE"] = str(trace)
    return env


def agent_messages():
    """The bundled agent conversation (examples/agent_trace.jsonl), messages only."""
    out = []
    for line in TRACE.read_text().splitlines():
        m = json.loads(line)
        if "role" in m:
            out.append(m)
    return out


class Checks:
    """A test's checks: `check(ok, what)` prints one line and remembers a failure;
    `verdict(name, work, logs)` prints the logs' tails when something failed and
    the closing line, and returns the exit status."""

    def __init__(self):
        self.fails = []
        self.counts = {}        # quiet checks: what -> [passed, failed]

    def __call__(self, ok, what):
        print("  %-4s %s" % ("ok" if ok else "FAIL", what), flush=True)
        if not ok:
            self.fails.append(what)
        return ok

    def quiet(self, ok, what):
        """A check made many times (every step): counted, a failure printed at
        once, the counts by `done_quiet`."""
        c = self.counts.setdefault(what, [0, 0])
        c[0 if ok else 1] += 1
        if not ok and c[1] == 1:
            self(False, what + " (first failure)")
        return ok

    def done_quiet(self):
        for what, (good, bad) in self.counts.items():
            self(bad == 0 and good > 0, "%s: %d of %d times" % (what, good, good + bad))
        self.counts = {}

    def verdict(self, name, work=None, logs=()):
        if self.fails and work:
            for f in logs:
                p = os.path.join(work, f)
                if os.path.exists(p):
                    print("---- %s (tail)\n%s" % (f, open(p, errors="replace").read()[-3000:]))
        print("%s:" % name, "PASS" if not self.fails else "FAIL (%d)" % len(self.fails))
        return 1 if self.fails else 0


def metric(url, name, labels=None):
    """The sum of a Prometheus series from vLLM's /metrics over the samples whose
    labels include `labels` ({name: value}); raises KeyError when no sample of
    the series is there (a missing series is a failure, never a 0)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    total, found = 0.0, False
    want = ['%s="%s"' % kv for kv in (labels or {}).items()]
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(w in line for w in want):
                total += float(line.rsplit(" ", 1)[1])
                found = True
    if not found:
        raise KeyError("%s%s: no such series on %s/metrics" % (name, labels or "", url))
    return total


def read_audit(path):
    """{pid: the last counts} of MEMDECAY_VLLM_TEST_AUDIT (worker.py's Audit)."""
    last = {}
    if os.path.exists(path):
        for line in open(path):
            if line.strip():
                r = json.loads(line)
                last[r["pid"]] = r
    return last


def read_sessions(path):
    """The session lines of the plugin's trace (sessions.py): events and counters."""
    if not os.path.exists(path):
        return []
    return [r for r in (json.loads(line) for line in open(path) if line.strip())
            if "sessions" in r]


def read_trace(path):
    if not os.path.exists(path):
        return [], []
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return [r for r in rows if "held" in r], [r for r in rows if "evict" in r]


def tmpdir(prefix):
    return tempfile.mkdtemp(prefix=prefix)


def workdir(prefix):
    """The test's working folder: DIR after `--keep DIR` (made if missing, kept
    afterwards), else a new temporary one named prefix..."""
    if len(sys.argv) == 3 and sys.argv[1] == "--keep":
        os.makedirs(sys.argv[2], exist_ok=True)
        return sys.argv[2]
    return tmpdir(prefix)


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_server(work, daemon, trace=None, name="smollm2", extra_env=None, on=True,
                 extra_args=(), llm_args=None, log_name="vllm.log"):
    """`vllm serve` with LLM_ARGS (updated by llm_args) on a free loopback port, the
    plugin switched on, extra_args appended to its command line; its own process
    group (killpg ends it all), killed with its parent.  Returns (process, base
    url, log path) once /health answers."""
    port = free_port()
    a = dict(LLM_ARGS, **(llm_args or {}))
    cmd = [os.path.join(os.path.dirname(sys.executable), "vllm"), "serve", MODEL,
           "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port),
           "--dtype", a["dtype"], "--max-model-len", str(a["max_model_len"]), "--enforce-eager",
           "--gpu-memory-utilization", str(a["gpu_memory_utilization"]),
           "--block-size", str(a["block_size"]),
           "--max-num-batched-tokens", str(a["max_num_batched_tokens"]),
           "--max-num-seqs", str(a["max_num_seqs"])] + list(extra_args)
    env = dict(os.environ)
    env.update(plugin_env(daemon, trace, on))
    env.update(extra_env or {})
    log = os.path.join(work, log_name)
    p = subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                         preexec_fn=die_with_parent)
    url = "http://127.0.0.1:%d" % port

    def healthy():
        if p.poll() is not None:
            raise RuntimeError("vllm serve exited %d:\n%s" % (p.returncode, open(log).read()[-4000:]))
        try:
            return urllib.request.urlopen(url + "/health", timeout=2).status == 200
        except OSError:
            return False
    try:
        wait_until(healthy, 600, "vllm serve to answer /health")
    except BaseException:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        raise
    return p, url, log
