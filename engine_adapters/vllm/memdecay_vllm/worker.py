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
import json
import os
import threading
import time

import memdecay
from memdecay import Region

from . import attach, log, pool, regions, settings, tier
from .log import logger as _log
from .attention import Stats
from .commands import Commands
from .holes import compact, null_blocks, zero_in_worker
from .mirror import PAGE_TOKENS, Mirror

ENGINE = None
_lock = threading.Lock()


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
        max_len = runner.max_model_len
        engine_pages = -1
        self.pool_pages = 0
        if self.s.pool:
            # every request and every retained session, and the reserve sequence
            self.max_seqs = self.s.max_seqs
            blocks = pool.budget_blocks(runner.kv_cache_config.num_blocks, self.s.pool_watermark)
            engine_pages = blocks * self.ppb
            self.pool_pages = runner.kv_cache_config.num_blocks * self.ppb
        else:
            self.max_seqs = min(self.s.max_seqs, runner.max_num_reqs)
        # the host tier (tier.py): blocks of the MiB asked, a tier page a block;
        # one KV cache group only (a hole's block index is the same in every layer)
        self.tier_blocks = 0
        self.block_bytes = tier.kv_block_bytes(runner.kv_caches) if runner.kv_caches else 0
        if self.s.tier_mb > 0:
            if len(runner.kv_cache_config.kv_cache_groups) != 1:
                _log().warning("memdecay_vllm: MEMDECAY_VLLM_TIER_MB ignored: %d KV cache "
                               "groups (the host tier needs one)",
                               len(runner.kv_cache_config.kv_cache_groups))
            else:
                self.tier_blocks = tier.tier_blocks(self.s.tier_mb, self.block_bytes)
        self.page_capacity = (self.max_seqs * ((max_len + PAGE_TOKENS - 1) // PAGE_TOKENS + 1)
                              + self.pool_pages + self.tier_blocks)
        self.step_active = False
        self.last_step = time.monotonic()
        self.pool_state = None      # pool mode: the last wait, for the engine core
        self.counters = {"evicted_blocks": 0, "sibling_pages": 0, "deferred": 0, "stale": 0,
                         "untracked": 0, "kept_for_pinned": 0,
                         "siblings_commanded": 0, "failed_open": 0, "sessions_adopted": 0,
                         "sessions_seeded": 0, "pool_waits": 0, "pool_reserved_pages": 0}
        self.att = attach.Attachment(self.s, self.page_capacity, self.max_seqs, engine_pages,
                                     self.tier_blocks, self.block_bytes if self.tier_blocks else 0)
        client = self.att.client
        if client.attached:
            _log().info("memdecay_vllm: %d-token blocks = %d pages", self.block_size, self.ppb)
        self.mirror = Mirror(client, self.max_seqs, self.block_size, self.counters)
        self.reserve = None
        if self.s.pool:
            seq = self.mirror.free_seqs.pop(0)          # the highest: never a request's
            self.reserve = pool.Reserve(client, seq, self.ppb,
                                        runner.kv_cache_config.num_blocks - 1,
                                        self.s.settle_ms, self.counters)
            _log().info("memdecay_vllm: pool mode: engine page budget %d (%.0f%% of %d blocks)",
                        engine_pages, 100 * self.s.pool_watermark,
                        runner.kv_cache_config.num_blocks)
        self.failed = set()        # requests served without eviction after a fault here
        self.trace = open(self.s.trace, "a", buffering=1) if self.s.trace else None
        self.tier = None
        if self.tier_blocks:
            self.tier = tier.Tier(runner, client, self.mirror, self.tier_blocks, self.counters)
            self.mirror.tier = self.tier
            _log().info("memdecay_vllm: host tier of %d blocks (%.1f MiB, %d bytes a block)",
                        self.tier_blocks, self.tier_blocks * self.block_bytes / (1 << 20),
                        self.block_bytes)
        self.stats = Stats(self.block_size, self.s.prefill_queries, self.s.layer_stride,
                           self.tier, self.s.recall_every)
        self.commands = Commands(client, self.att.batch, self.att.name, runner, self.mirror,
                                 self.block_size, self.s.settle_ms, self.counters, self.trace)
        self.commands.tier = self.tier
        # seconds spent in the plugin's hooks, logged every cost_every steps
        self.cost = {"update": 0.0, "build": 0.0, "forward": 0.0, "step_end": 0.0}
        self.cost_steps = 0
        self.att.start_heartbeat(_lock, lambda: self.last_step)

    @property
    def reqs(self):
        """The tracked requests: request id -> mirror.Req."""
        return self.mirror.reqs

    # ---- faults: a request's fault costs its eviction, never the server ----
    def fail_open(self, req_id, where, err):
        """Request req_id is served without eviction from now on: its pages leave
        the daemon, the blocks already evicted stay holes (null blocks in the
        block table, still compacted), and one log line says why."""
        if req_id in self.failed:
            return
        self.failed.add(req_id)
        self.counters["failed_open"] += 1
        _log().warning("memdecay_vllm: request %s is served without eviction: %s failed: %s: %s",
                       req_id, where, type(err).__name__, err)
        if req_id not in self.reqs:
            return
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

    # ---- requests ----
    def _track(self, req_id, st):
        """Starts tracking req_id: its regions, and its own budget and policy
        (the fields api.py and offline.py checked; None: the engine's) as its
        sequence's options."""
        settings.fault("track")
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
                    self._adopted(req_id, r)
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

    def _adopted(self, req_id, r):
        """An adopter's holes into the worker's block table: the ones vLLM's block
        list already shows and any the daemon evicted from the session since."""
        zero_in_worker(self.runner, req_id, sorted(r.holes))

    def _sessions_update(self, so):
        """The scheduler's session events for this step: retained requests keep
        their sequence, released ones end it, adopters are noted for _track.
        A fault here costs the sessions their daemon sequences (they are
        seeded again from vLLM's blocks), never a hole: holes are read from
        the block table."""
        from .sessions import EVENTS_ATTR
        ev = getattr(so, EVENTS_ATTR, None) or {}
        retained = set(ev.get("retained", ()))
        ids = ev.get("ids", {})
        for req_id in so.finished_req_ids:
            try:
                if req_id in retained and req_id in self.reqs:
                    self.mirror.retain(req_id, ids.get(req_id))
                else:
                    self._forget(req_id)
            except Exception as e:
                log.failed("ending request %s's sequence" % req_id, e)
                self.reqs.pop(req_id, None)
        for key in ev.get("released", ()):
            try:
                self.mirror.release(key)
            except Exception as e:
                log.failed("releasing session %s's sequence" % key, e)
        self.mirror.adopting.update(ev.get("adopted", {}))
        self.mirror.session_ids.update((k, v) for k, v in ids.items()
                                       if k in ev.get("adopted", {}))

    # ---- hooks ----
    def on_update(self, runner, so):
        with _lock:
            if self.reserve is not None:
                self.reserve.need += (getattr(so, pool.SHORT_ATTR, None) or {}).get("need", 0)
            if self.tier is not None:
                self.tier.spares.extend(getattr(so, tier.SPARES_ATTR, None) or ())
            try:
                settings.fault("sessions")
                self._sessions_update(so)
            except Exception as e:
                log.failed("the step's session events", e)
            for req_id in so.scheduled_cached_reqs.resumed_req_ids:
                self._forget(req_id)        # recomputed from its first token
            for req_id, n in so.num_scheduled_tokens.items():
                st = runner.requests.get(req_id)
                if st is None or req_id in self.failed:
                    continue
                try:
                    settings.fault("update")
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

    def _tracked_rows(self, cm):
        """[(req, row)] of this batch's rows the daemon may evict."""
        ids = self.runner.input_batch.req_ids
        rows = []
        for row in range(min(cm.num_reqs, len(ids))):
            r = self.reqs.get(ids[row])
            if r is not None and r.may_evict:
                rows.append((r, row))
        return rows

    def on_build(self, builder, cm, kept):
        """The step's statistics planned over the compacted metadata `cm`
        (kept: {row: original block indices kept} of the rows with holes); on
        a fault the step's requests are served without eviction."""
        if not self.step_active or not self.reqs:
            return
        try:
            settings.fault("build")
            self.stats.plan(cm, self._tracked_rows(cm), kept)
        except Exception as e:
            self.stats.clear()
            self.fail_open_all("planning the step's statistics", e)

    def on_forward(self, impl, layer, query, kv_cache):
        if not self.stats.rows:
            return
        try:
            settings.fault("forward")
            self.stats.layer(impl, layer, query, kv_cache)
        except Exception as e:
            rows, self.stats.rows = self.stats.rows, []
            for r, _, _ in rows:
                self.fail_open(r.id, "the attention statistics", e)

    def on_step_end(self, runner, reportable):
        """Publishes the step and, when the step's output can carry them back to
        the engine core (`reportable`), applies the daemon's commands; returns
        the (request id, block index) pairs evicted this step.  Commands wait
        for a step that reports: a pair applied here and reported later would
        reach the scheduler after it had cached blocks computed over the hole.
        On a fault the pairs already applied still go back, and the step's
        requests are served without eviction."""
        with _lock:
            self.step_active = False
            self.stats.rows = []
            now = time.monotonic()
            self.last_step = now
            evicted = []
            try:
                settings.fault("step_end")
                self._step_end(evicted, reportable)
            except Exception as e:
                self.fail_open_all("publishing the step", e)
            return evicted

    def _step_end(self, evicted, reportable):
        c = self.att.client
        reqs = list(self.reqs.values())
        scheduled = [r for r in reqs if r.step_tokens]
        if not self.att.live():
            if self.reserve is not None:
                self.reserve.need = 0
                self.pool_state = {"outcome": "DETACHED"}
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
        idle = self.mirror.idle_steps(self.s.pool_idle_tokens_s) if self.reserve else []
        if scheduled or idle:
            self.commands.publish(scheduled, prm, idle)
        recall = False
        if self.tier is not None and scheduled:
            recall = any(r.est_prefill for r in scheduled if r.est is not None)
            self.tier.publish_estimates(scheduled, self.att.batch, prm)
        if reportable:
            if recall:
                # estimates from a prefill chunk: the blocks they bring back should
                # be in place before the next tokens are computed
                self.commands.recall(evicted, prm, self.s.recall_wait_ms)
            self.commands.settle([r for r in reqs if r.pages], evicted, prm)
            if self.reserve is not None:
                self.commands.evicted = evicted
                try:
                    self.pool_state = self.reserve.settle(self.commands.apply, prm)
                finally:
                    self.commands.evicted = None

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


class Audit:
    """MEMDECAY_VLLM_TEST_AUDIT (tests only): every attention metadata this worker
    hands to vLLM's CPU builder is read once more, independently of the
    compaction, for null blocks within a row's seq_len, which the kernel would
    read as context.  Counts rows, rows that had holes compacted and such null
    reads; a JSON line whenever the counts of holes change, and every 64 steps."""

    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.n = {"pid": os.getpid(), "steps": 0, "rows": 0, "compacted_rows": 0,
                  "null_reads": 0}

    def observe(self, cm_in, cm_out, block_size):
        n = self.n
        n["steps"] += 1
        n["rows"] += cm_out.num_reqs
        before = (n["compacted_rows"], n["null_reads"])
        n["compacted_rows"] += len(null_blocks(cm_in, block_size))
        n["null_reads"] += sum(len(v) for v in null_blocks(cm_out, block_size).values())
        if before != (n["compacted_rows"], n["null_reads"]) or n["steps"] % 64 == 0:
            self.f.write(json.dumps(n) + "\n")


_audit = []


def _audit_of():
    if not _audit:
        path = settings.get().test_audit
        _audit.append(Audit(path) if path else None)
    return _audit[0]


# ---- the wrappers (hooks.py's table names the methods and their signatures) ----

def wrap_update_states(orig):
    def _update_states(self, scheduler_output):
        eng = ENGINE
        if eng is not None and eng.tier is not None:
            # a finished request's block ids, before vLLM forgets them: a retained
            # session's blocks may still go to the host tier (tier.py)
            try:
                fb = eng.mirror.finished_blocks
                fb.clear()
                for rid in scheduler_output.finished_req_ids:
                    st = self.requests.get(rid)
                    if st is not None and st.block_ids:
                        fb[rid] = list(st.block_ids[0])
            except Exception as e:
                log.failed("keeping finished requests' block ids", e)
        out = orig(self, scheduler_output)
        t = time.perf_counter()
        eng = _engine(self)
        if eng is not None:
            try:
                eng.on_update(self, scheduler_output)
            except Exception as e:
                _hook_failed("the step's update", e)
            eng.cost["update"] += time.perf_counter() - t
        return out
    return _update_states


def wrap_build(orig):
    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        """Every null block of every row compacted out, then the statistics'
        plan.  The compaction runs whether or not the worker's Engine exists or
        tracks the request: it is what keeps a hole from being read."""
        eng = ENGINE
        t = time.perf_counter()
        cm = common_attn_metadata
        if getattr(self.kv_cache_spec, "sliding_window", None) is None:
            holes = null_blocks(cm, self.kv_cache_spec.block_size)
            kept = {}
            if holes:
                cm, kept = compact(cm, holes, self.kv_cache_spec.block_size)
            if eng is not None:
                eng.on_build(self, cm, kept)             # never raises
                eng.cost["build"] += time.perf_counter() - t
            audit = _audit_of()
            if audit is not None:
                audit.observe(common_attn_metadata, cm, self.kv_cache_spec.block_size)
        return orig(self, common_prefix_len, cm, fast_build)
    return build


def wrap_sample_tokens(orig):
    from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT

    def sample_tokens(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        eng = ENGINE
        if eng is not None:
            t = time.perf_counter()
            reportable = out is not None and out is not EMPTY_MODEL_RUNNER_OUTPUT
            try:
                evicted = eng.on_step_end(self, reportable)
                if reportable:
                    _report(out, evicted, eng)
                eng.log_cost()
            except Exception as e:
                _hook_failed("the step's end", e)
            eng.cost["step_end"] += time.perf_counter() - t
        return out
    return sample_tokens


def _report(out, evicted, eng):
    """The step's evicted pairs, its restores (the host tier) and, in pool mode,
    the worker's last wait onto its ModelRunnerOutput, for the engine core."""
    from .scheduler import EVICTED_ATTR
    if evicted:
        setattr(out, EVICTED_ATTR, evicted)
    if eng.tier is not None:
        restored = eng.tier.take_restored()
        if restored:
            setattr(out, tier.RESTORED_ATTR, restored)
    if eng.pool_state is not None:
        setattr(out, pool.STATE_ATTR, eng.pool_state)


def wrap_execute_model(orig):
    """Pool mode: a step that schedules no token (everything waits for blocks)
    still ends with the daemon's commands applied and reported, on a copy of
    vLLM's shared empty output; otherwise the requests held for the daemon
    would wait for a step that never reports."""
    import copy

    from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        out = orig(self, scheduler_output, intermediate_tensors)
        eng = ENGINE
        if out is not EMPTY_MODEL_RUNNER_OUTPUT or eng is None or eng.reserve is None:
            return out
        try:
            evicted = eng.on_step_end(self, True)
            out = copy.copy(out)
            _report(out, evicted, eng)
        except Exception as e:
            _hook_failed("an empty step's end", e)
        return out
    return execute_model


def wrap_forward(orig):
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, *a, **kw):
        out = orig(self, layer, query, key, value, kv_cache, attn_metadata, output, *a, **kw)
        eng = ENGINE
        if eng is not None and attn_metadata is not None:
            t = time.perf_counter()
            try:
                eng.on_forward(self, layer, query, kv_cache)
            except Exception as e:
                _hook_failed("a layer's statistics", e)
            eng.cost["forward"] += time.perf_counter() - t
        return out
    return forward
