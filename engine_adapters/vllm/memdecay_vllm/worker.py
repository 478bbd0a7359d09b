"""Worker: the vLLM hooks, and the per-worker Engine that joins the parts.

One `Engine` lives in each vLLM worker process.  Per scheduler step:

  1. after vLLM updates its batch (GPUModelRunner._update_states), the tokens
     scheduled this step are declared to memdecayd (mirror.py);
  2. before the attention metadata is built (CPUAttentionMetadataBuilder.build),
     holes are compacted away (holes.py) and the step's statistics planned;
     after every `layer_stride`-th layer the observed queries' attention over
     the request's kept tokens is added to its token mass (attention.py);
  3. after sampling (GPUModelRunner.sample_tokens), the step is published and
     memdecayd's commands applied (commands.py); the (request, block) pairs
     evicted ride back to the engine core on the step's output, where
     scheduler.py returns the blocks to vLLM's pool.

The worker's one attachment to memdecayd is attach.py's; a request's budget
and policy are its sequence's options (mirror.py).  Fail-open: with no
daemon, or after it dies, nothing is evicted and vLLM serves as it would
without the plugin; a fault in a hook costs the step's requests their
eviction, never the step."""
import functools
import threading
import time

import memdecay
from memdecay import Region

from . import attach, regions, settings
from .attention import Stats
from .commands import Commands
from .holes import compact
from .mirror import PAGE_TOKENS, Mirror

ENGINE = None
_lock = threading.Lock()


def _log():
    from vllm.logger import init_logger
    return init_logger("vllm.memdecay")


class Engine:
    def __init__(self, runner):
        self.s = settings.get()
        self.runner = runner
        bt = runner.input_batch.block_table
        self.block_size = bt[0].block_size
        if self.block_size % PAGE_TOKENS:
            raise ValueError("memdecay_vllm: vLLM block size %d is not a multiple of the "
                             "daemon's %d-token page" % (self.block_size, PAGE_TOKENS))
        self.ppb = self.block_size // PAGE_TOKENS
        self.max_seqs = min(self.s.max_seqs, runner.max_num_reqs)
        max_len = runner.max_model_len
        self.page_capacity = self.max_seqs * ((max_len + PAGE_TOKENS - 1) // PAGE_TOKENS + 1)
        self.step_active = False
        self.last_step = time.monotonic()
        self.counters = {"evicted_blocks": 0, "sibling_pages": 0, "deferred": 0, "stale": 0,
                         "untracked": 0, "kept_for_pinned": 0,
                         "siblings_commanded": 0, "failed_open": 0, "sessions_adopted": 0,
                         "sessions_seeded": 0}
        self.att = attach.Attachment(self.s, self.page_capacity, self.max_seqs)
        client = self.att.client
        if client.attached:
            _log().info("memdecay_vllm: %d-token blocks = %d pages", self.block_size, self.ppb)
        self.mirror = Mirror(client, self.max_seqs, self.block_size, self.counters)
        self.failed = set()        # requests served without eviction after a fault here
        self.holes_only = {}       # such a request's holes, still compacted: req id -> set
        self.trace = open(self.s.trace, "a", buffering=1) if self.s.trace else None
        self.stats = Stats(self.block_size, self.s.prefill_queries, self.s.layer_stride)
        self.commands = Commands(client, self.att.batch, self.att.name, runner, self.mirror,
                                 self.block_size, self.s.settle_ms, self.counters, self.trace)
        # seconds spent in the plugin's hooks, logged every cost_every steps
        self.cost = {"update": 0.0, "build": 0.0, "forward": 0.0, "step_end": 0.0}
        self.cost_steps = 0
        self.att.start_heartbeat(_lock, lambda: self.last_step)

    @property
    def reqs(self):
        """The tracked requests: request id -> mirror.Req."""
        return self.mirror.reqs

    # ---- faults: a request's fault costs its eviction, never the server ----
    def fault(self, point):
        """Raises where a test asked for it (MEMDECAY_VLLM_TEST_FAULT)."""
        if point in self.s.test_faults:
            raise RuntimeError("memdecay_vllm: injected fault in %s (MEMDECAY_VLLM_TEST_FAULT)"
                               % point)

    def fail_open(self, req_id, where, err):
        """Request req_id is served without eviction from now on: its pages leave
        the daemon, the blocks already evicted stay holes (still compacted), and
        one log line says why."""
        if req_id in self.failed:
            return
        self.failed.add(req_id)
        self.counters["failed_open"] += 1
        _log().warning("memdecay_vllm: request %s is served without eviction: %s failed: %s: %s",
                       req_id, where, type(err).__name__, err)
        r = self.reqs.get(req_id)
        if r is None:
            return
        if r.holes:
            self.holes_only[req_id] = set(r.holes)
        try:
            self.mirror.drop(req_id)
        except Exception:               # the daemon side is best effort here
            self.reqs.pop(req_id, None)

    def fail_open_all(self, where, err):
        for req_id in list(self.reqs):
            self.fail_open(req_id, where, err)

    def _forget(self, req_id):
        self.mirror.drop(req_id)
        self.failed.discard(req_id)
        self.holes_only.pop(req_id, None)

    # ---- requests ----
    def _track(self, req_id, st):
        """Starts tracking req_id: its regions, and its own budget and policy
        (the fields api.py and offline.py checked; None: the engine's) as its
        sequence's options."""
        self.fault("track")
        args = (st.sampling_params.extra_args if st.sampling_params is not None else None) or {}
        budget = args.get(regions.BUDGET_KEY)
        budget = int(budget) if budget is not None else None
        policy = args.get(regions.POLICY_KEY)
        n_prompt = len(st.prompt_token_ids or ())
        runs = args.get(regions.REGIONS_KEY)
        reg = regions.unrle(runs, n_prompt) if runs else []
        reg += [int(Region.USER)] * (n_prompt - len(reg))
        adopted = self.mirror.adopting.pop(req_id, None)
        try:
            r = None
            if adopted is not None:
                r = self.mirror.adopt(req_id, reg, budget, policy, *adopted)
                if r is not None:
                    return r
            r = self.mirror.start(req_id, reg, budget, policy)
        except (memdecay.MemDecayError, ValueError) as e:
            _log().warning("memdecay_vllm: request %s (budget %s, policy %s) is served without "
                           "eviction: %s", req_id, budget, policy, e)
            r = None
        if r is None:
            self.counters["untracked"] += 1
            return None
        if adopted is not None:
            self.mirror.seed(r, st, adopted[1])
        return r

    def _sessions_update(self, so):
        """The scheduler's session events for this step: retained requests keep
        their sequence, released ones end it, adopters are noted for _track."""
        from .sessions import EVENTS_ATTR
        ev = getattr(so, EVENTS_ATTR, None) or {}
        retained = set(ev.get("retained", ()))
        for req_id in so.finished_req_ids:
            if req_id in retained and req_id in self.reqs:
                self.mirror.retain(req_id)
            else:
                self._forget(req_id)
        for key in ev.get("released", ()):
            self.mirror.release(key)
        self.mirror.adopting.update(ev.get("adopted", {}))

    # ---- hooks ----
    def on_update(self, runner, so):
        with _lock:
            self._sessions_update(so)
            for req_id in so.scheduled_cached_reqs.resumed_req_ids:
                self._forget(req_id)        # recomputed from its first token
            for req_id, n in so.num_scheduled_tokens.items():
                st = runner.requests.get(req_id)
                if st is None or req_id in self.failed:
                    continue
                try:
                    self.fault("update")
                    self._schedule(req_id, st, n)
                except Exception as e:
                    self.fail_open(req_id, "declaring its tokens", e)
            self.step_active = True

    def _schedule(self, req_id, st, n):
        r = self.reqs.get(req_id) or self._track(req_id, st)
        if r is None:
            return
        end = st.num_computed_tokens + n
        if end > r.n:
            self.mirror.declare(r, end)
        r.step_tokens = n
        r.acc = None
        r.acc_layers = 0
        r.kept = None

    def _holes_by_row(self, cm):
        """({row: sorted holes}, [(req, row)] of the tracked rows) for this batch."""
        ids = self.runner.input_batch.req_ids
        rows = []
        holes = {}
        for row in range(min(cm.num_reqs, len(ids))):
            r = self.reqs.get(ids[row])
            if r is not None:
                rows.append((r, row))
                if r.holes:
                    holes[row] = sorted(r.holes)
            elif ids[row] in self.holes_only:
                holes[row] = sorted(self.holes_only[ids[row]])
        return holes, rows

    def on_build(self, builder, cm):
        """The attention metadata with holes compacted, and the statistics' plan;
        on a fault, the compaction alone (the kept blocks must still be read
        right) and the step's requests are served without eviction."""
        if not self.step_active or not (self.reqs or self.holes_only):
            return cm
        try:
            self.fault("build")
            return self._build(cm)
        except Exception as e:
            self.stats.clear()
            self.fail_open_all("planning the step's statistics", e)
            holes, _ = self._holes_by_row(cm)
            if not holes:
                return cm
            return compact(cm, holes, self.block_size)[0]

    def _build(self, cm):
        holes, rows = self._holes_by_row(cm)
        rows = [(r, row) for r, row in rows if r.may_evict]
        kept = {}
        if holes:
            cm, kept = compact(cm, holes, self.block_size)
        self.stats.plan(cm, rows, kept)
        return cm

    def on_forward(self, impl, layer, query, kv_cache):
        if not self.stats.rows:
            return
        try:
            self.fault("forward")
            self.stats.layer(impl, layer, query, kv_cache)
        except Exception as e:
            rows, self.stats.rows = self.stats.rows, []
            for r, _, _ in rows:
                self.fail_open(r.id, "the attention statistics", e)

    def on_step_end(self, runner, output):
        """Publishes the step, applies the daemon's commands; returns the
        (request id, block index) pairs evicted this step.  On a fault the
        pairs already applied still go back, and the step's requests are
        served without eviction."""
        with _lock:
            self.step_active = False
            self.stats.rows = []
            now = time.monotonic()
            self.last_step = now
            evicted = []
            try:
                self.fault("step_end")
                self._step_end(evicted)
            except Exception as e:
                self.fail_open_all("publishing the step", e)
            return evicted

    def _step_end(self, evicted):
        c = self.att.client
        reqs = list(self.reqs.values())
        scheduled = [r for r in reqs if r.step_tokens]
        if not self.att.live():
            for r in reqs:
                r.may_evict = False
            for r in scheduled:         # the mirror's clocks still advance
                c.seq_step(r.seq, r.step_tokens)
                r.step_tokens = 0
            return
        prm = c.params()                # one read of the parameter block a step
        engine_pages = prm["budget_engine_pages"]
        for r in reqs:
            r.may_evict = bool(engine_pages or c.seq_budget_tokens(r.seq))
        if scheduled:
            self.commands.publish(scheduled, prm)
        self.commands.settle([r for r in reqs if r.pages], evicted, prm)

    def log_cost(self):
        """Every MEMDECAY_VLLM_COST_EVERY steps, one log line: the hooks' time a step and
        the counters."""
        every = self.s.cost_every
        self.cost_steps += 1
        if self.cost_steps % every:
            return
        per = {k: 1e3 * v / every for k, v in self.cost.items()}
        _log().info("memdecay_vllm: %d steps, the plugin's hooks took %.2f ms a step (declare "
                    "%.2f, holes %.2f, statistics %.2f, publish and commands %.2f); %s",
                    self.cost_steps, sum(per.values()), per["update"], per["build"],
                    per["forward"], per["step_end"],
                    ", ".join("%s %d" % kv for kv in self.counters.items()))
        for k in self.cost:
            self.cost[k] = 0.0


_engine_failed = False


def _engine(runner):
    """The worker's Engine, made at the first step; None when it cannot be made
    (vLLM then serves without the plugin, and one log line says why)."""
    global ENGINE, _engine_failed
    if ENGINE is None and not _engine_failed:
        try:
            ENGINE = Engine(runner)
        except Exception as e:
            _engine_failed = True
            _log().error("memdecay_vllm: the plugin is off in this worker: %s: %s",
                         type(e).__name__, e)
    return ENGINE


def _hook_failed(where, err):
    """The last guard around a hook: whatever escaped it costs the step's
    requests their eviction, never the step."""
    try:
        if ENGINE is not None:
            ENGINE.fail_open_all(where, err)
    except Exception:
        pass


def install():
    from vllm.v1.attention.backends.cpu_attn import (CPUAttentionBackendImpl,
                                                     CPUAttentionMetadataBuilder)
    from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from .scheduler import EVICTED_ATTR

    if getattr(GPUModelRunner._update_states, "_memdecay", False):
        return
    orig_update = GPUModelRunner._update_states
    orig_sample = GPUModelRunner.sample_tokens
    orig_forward = CPUAttentionBackendImpl.forward
    orig_build = CPUAttentionMetadataBuilder.build
    pending = []

    @functools.wraps(orig_update)
    def _update_states(self, scheduler_output):
        out = orig_update(self, scheduler_output)
        t = time.perf_counter()
        eng = _engine(self)
        if eng is not None:
            try:
                eng.on_update(self, scheduler_output)
            except Exception as e:
                _hook_failed("the step's update", e)
            eng.cost["update"] += time.perf_counter() - t
        return out

    @functools.wraps(orig_build)
    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        eng = ENGINE
        if eng is not None:
            t = time.perf_counter()
            common_attn_metadata = eng.on_build(self, common_attn_metadata)   # never raises
            eng.cost["build"] += time.perf_counter() - t
        return orig_build(self, common_prefix_len, common_attn_metadata, fast_build)

    @functools.wraps(orig_sample)
    def sample_tokens(self, *args, **kwargs):
        out = orig_sample(self, *args, **kwargs)
        if ENGINE is not None:
            t = time.perf_counter()
            try:
                pending.extend(ENGINE.on_step_end(self, out))
                ENGINE.log_cost()
            except Exception as e:
                _hook_failed("the step's end", e)
            ENGINE.cost["step_end"] += time.perf_counter() - t
            if pending and out is not None and out is not EMPTY_MODEL_RUNNER_OUTPUT:
                setattr(out, EVICTED_ATTR, list(pending))
                pending.clear()
        return out

    @functools.wraps(orig_forward)
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, *a, **kw):
        out = orig_forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                           *a, **kw)
        if ENGINE is not None and attn_metadata is not None:
            t = time.perf_counter()
            try:
                ENGINE.on_forward(self, layer, query, kv_cache)
            except Exception as e:
                _hook_failed("a layer's statistics", e)
            ENGINE.cost["forward"] += time.perf_counter() - t
        return out

    for f in (_update_states, build):
        f._memdecay = True
    GPUModelRunner._update_states = _update_states
    GPUModelRunner.sample_tokens = sample_tokens
    CPUAttentionBackendImpl.forward = forward
    CPUAttentionMetadataBuilder.build = build
