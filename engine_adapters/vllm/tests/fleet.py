"""A fleet on one machine (docs/deploy.md): N `vllm serve` replicas on loopback
ports, each with the MemDecay plugin and a memdecayd of its own (as on separate
nodes), behind vllm-router.  Used by scripts/replicas.py, test_replicas.py and
bench/serving/replicas.py.

Each replica i runs in work/replica-i: its daemon's socket and log, vLLM's log
and the plugin's trace (trace.jsonl).  On a machine with fewer cores than
replicas they share; otherwise replica i's CPU worker is bound to core i
(VLLM_CPU_OMP_THREADS_BIND), since vLLM's CPU worker binds to core 0 by default
and two replicas would run on one core."""
import os
import signal
import subprocess
import time
import urllib.request

import harness

ROUTER = os.path.join(os.environ.get("MEMDECAY_DEPS") or str(harness.ROOT / ".deps"),
                      "vllm-router", "bin", "vllm-router")
POLICIES = ("round_robin", "cache_aware", "consistent_hash")


class Replica:
    def __init__(self, i, work):
        self.i = i
        self.dir = os.path.join(work, "replica-%d" % i)
        os.makedirs(self.dir, exist_ok=True)
        self.trace = os.path.join(self.dir, "trace.jsonl")
        self.daemon = None
        self.server = self.url = self.log = None

    def alive(self):
        return self.server is not None and self.server.poll() is None

    def kill(self):
        """The replica dies: vLLM killed (SIGKILL to its process group)."""
        if self.alive():
            os.killpg(self.server.pid, signal.SIGKILL)
            self.server.wait()


class Fleet:
    """start(): the daemons, the replicas (in parallel) and the router; stop()
    ends them all, whatever state they are in."""

    def __init__(self, work, n=2, policy="consistent_hash", env=None, pool_blocks=None,
                 llm_args=None, model="smollm2"):
        if policy not in POLICIES:
            raise ValueError("router policy %r: want one of %s" % (policy, ", ".join(POLICIES)))
        self.work = work
        self.policy = policy
        self.env = dict(env or {})
        self.pool_blocks = pool_blocks
        self.llm_args = llm_args
        self.model = model
        self.replicas = [Replica(i, work) for i in range(n)]
        self.router = None
        self.url = None
        self.router_log = os.path.join(work, "router.log")

    def start(self):
        if not os.access(ROUTER, os.X_OK):
            raise RuntimeError("no vllm-router at %s (scripts/setup_router.sh installs it)"
                               % ROUTER)
        try:
            for r in self.replicas:
                r.daemon = harness.Daemon(r.dir).start()
            self._start_replicas()
            self._start_router()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_replicas(self):
        """One after the other, from this thread: each vLLM dies with the thread
        that started it (harness.die_with_parent: PR_SET_PDEATHSIG follows the
        parent thread), so a helper thread would take its replica with it."""
        ncpu = os.cpu_count() or 1
        for r in self.replicas:
            env = dict(self.env, MEMDECAY_VLLM_ENGINE="replica-%d" % r.i)
            if ncpu >= len(self.replicas):
                env["VLLM_CPU_OMP_THREADS_BIND"] = str(r.i)
            extra = ["--enable-prompt-tokens-details"]
            if self.pool_blocks:
                extra += ["--num-gpu-blocks-override", str(self.pool_blocks)]
            r.server, r.url, r.log = harness.start_server(
                r.dir, r.daemon, r.trace, self.model, env, extra_args=extra,
                llm_args=self.llm_args)

    def _start_router(self):
        port = harness.free_port()
        cmd = [ROUTER, "--host", "127.0.0.1", "--port", str(port), "--policy", self.policy,
               "--worker-urls"] + [r.url for r in self.replicas] + [
               "--log-level", "warning", "--health-check-interval-secs", "1",
               "--prometheus-host", "127.0.0.1", "--prometheus-port", str(harness.free_port()),
               "--request-timeout-secs", "1800"]
        self.router = subprocess.Popen(cmd, stdout=open(self.router_log, "w"),
                                       stderr=subprocess.STDOUT,
                                       preexec_fn=harness.die_with_parent)
        self.url = "http://127.0.0.1:%d" % port

        def ready():
            if self.router.poll() is not None:
                raise RuntimeError("vllm-router exited %d:\n%s" % (
                    self.router.returncode, open(self.router_log).read()[-3000:]))
            try:
                return urllib.request.urlopen(self.url + "/v1/models", timeout=2).status == 200
            except OSError:
                return False
        harness.wait_until(ready, 120, "vllm-router to answer /v1/models")

    def stop(self):
        if self.router is not None and self.router.poll() is None:
            os.killpg(self.router.pid, signal.SIGKILL)
            self.router.wait()
        for r in self.replicas:
            r.kill()
            if r.daemon is not None:
                r.daemon.stop()

    def served_by(self):
        """{engine request id: replica index} of every request a replica's plugin
        ran (its trace's per-step rows).  A chat completion's id is the start of
        its engine request id."""
        out = {}
        for r in self.replicas:
            held, _ = harness.read_trace(r.trace)
            for row in held:
                out[row["req"]] = r.i
        return out

    def wait(self):
        """Blocks until SIGINT or SIGTERM (scripts/replicas.py)."""
        stop = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        try:
            while not stop:
                time.sleep(0.5)
                dead = [r.i for r in self.replicas if not r.alive()]
                if dead:
                    print("replicas: replica %s exited (see %s)" % (dead, self.work), flush=True)
                    return 1
        except KeyboardInterrupt:
            pass
        return 0
