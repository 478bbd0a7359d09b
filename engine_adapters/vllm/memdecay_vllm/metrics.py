"""The sessions' numbers on vLLM's own /metrics.

The session store lives in the engine core process and /metrics is served by
the API server process.  The engine core writes a small JSON snapshot of its
store whenever it changes (`publish`), into a directory that the first
process to load the plugin makes and hands down through the environment
(MEMDECAY_VLLM_METRICS_DIR); the API server's collector reads every snapshot
there at scrape time.  One snapshot per engine core process, labelled by its
pid.  docs/vllm.md "Operations" lists the series."""
import atexit
import json
import os
import shutil
import tempfile

from .sessions import RELEASE_REASONS

DIR_ENV = "MEMDECAY_VLLM_METRICS_DIR"
PREFIX = "memdecay_vllm_"

_last = {"snap": None}


def setup_dir():
    """Makes the snapshot directory unless a parent process did (its children
    inherit the variable); removed when the process that made it exits."""
    if os.environ.get(DIR_ENV):
        return os.environ[DIR_ENV]
    d = tempfile.mkdtemp(prefix="memdecay-vllm-metrics-")
    os.environ[DIR_ENV] = d
    pid = os.getpid()
    atexit.register(lambda: os.getpid() == pid and shutil.rmtree(d, ignore_errors=True))
    return d


def publish(store, pool=None):
    """Engine core, every step: writes the store's snapshot (and pool mode's
    counters) when it changed."""
    d = os.environ.get(DIR_ENV)
    if not d:
        return
    snap = store.snapshot()
    if pool is not None:
        snap["pool"] = pool.snapshot()
    if snap == _last["snap"]:
        return
    path = os.path.join(d, "engine-%d.json" % os.getpid())
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(snap, f)
    os.replace(tmp, path)
    _last["snap"] = snap


def read_all(d=None):
    """{engine pid: snapshot} of every engine core that published."""
    d = d or os.environ.get(DIR_ENV)
    out = {}
    if not d or not os.path.isdir(d):
        return out
    for name in os.listdir(d):
        if name.startswith("engine-") and name.endswith(".json"):
            try:
                with open(os.path.join(d, name)) as f:
                    out[name[7:-5]] = json.load(f)
            except (OSError, ValueError):
                continue            # being replaced: the next scrape reads it
    return out


class Collector:
    """A prometheus_client collector over the snapshots."""

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        snaps = read_all()
        g_sess = GaugeMetricFamily(PREFIX + "sessions_retained",
                                   "Sessions retained for their next turn", labels=["engine"])
        g_blocks = GaugeMetricFamily(PREFIX + "session_blocks_retained",
                                     "KV blocks held by retained sessions (vLLM's KV usage "
                                     "counts them as in use)", labels=["engine"])
        counters = {
            "retained": CounterMetricFamily(PREFIX + "session_retentions",
                                            "Finished requests retained as sessions",
                                            labels=["engine"]),
            "adopted": CounterMetricFamily(PREFIX + "sessions_adopted",
                                           "Sessions adopted by a next turn", labels=["engine"]),
            "adopted_tokens": CounterMetricFamily(PREFIX + "session_adopted_tokens",
                                                  "Prompt tokens served from adopted sessions",
                                                  labels=["engine"]),
            "refused": CounterMetricFamily(PREFIX + "sessions_refused",
                                           "Sessions larger than their share, not retained",
                                           labels=["engine"]),
            "late_evictions": CounterMetricFamily(PREFIX + "session_late_evictions",
                                                  "Evicted blocks that reached a session after "
                                                  "its adoption (freed from the adopter)",
                                                  labels=["engine"]),
        }
        releases = CounterMetricFamily(PREFIX + "session_releases",
                                       "Sessions released, by reason", labels=["engine", "reason"])
        pool_steps = CounterMetricFamily(
            PREFIX + "pool_events",
            "Pool mode, the order before preemption: short_steps (steps with an allocation "
            "that failed), needed_blocks (blocks those allocations needed), held (a request waited a step "
            "for memdecayd), held_out (the wait ended without room: sessions, then vLLM's "
            "preemption, follow), preempted (vLLM's preemptions)", labels=["engine", "event"])
        for pid, s in sorted(snaps.items()):
            c = s.get("counters", {})
            g_sess.add_metric([pid], s.get("sessions", 0))
            g_blocks.add_metric([pid], s.get("blocks", 0))
            for k, fam in counters.items():
                fam.add_metric([pid], c.get(k, 0))
            for r in RELEASE_REASONS:
                releases.add_metric([pid, r], c.get("released_" + r, 0))
            for k, v in sorted((s.get("pool") or {}).get("counters", {}).items()):
                pool_steps.add_metric([pid, k], v)
        yield g_sess
        yield g_blocks
        yield from counters.values()
        yield releases
        yield pool_steps


_registered = {"done": False}


def register_collector():
    """API server: adds the collector to prometheus_client's default registry,
    the one vLLM's /metrics serves (with a single API server)."""
    if _registered["done"]:
        return
    from prometheus_client import REGISTRY
    REGISTRY.register(Collector())
    _registered["done"] = True
