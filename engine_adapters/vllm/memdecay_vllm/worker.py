"""Worker: vLLM's KV blocks as memdecayd pages, attention statistics, commands.

One `Engine` lives in each vLLM worker process.  Per scheduler step:

  1. after vLLM updates its batch (GPUModelRunner._update_states), the tokens
     scheduled this step are declared: each KV block of B tokens is B/16
     daemon pages, labelled with the tokens' regions (api.py, offline.py);
  2. the attention backend runs with holes compacted away (holes.py); after
     every `layer_stride`-th layer the decode query's attention over the
     request's kept tokens is added to the step's token mass (`on_forward`);
  3. after sampling, one md_publish_batch per attachment carries the step and
     every page's mass and refresh bits (reduce.py); memdecayd's evict
     commands are read, each commanded page's whole block is dropped (a
     block is the unit vLLM frees, so its sibling pages go with it), the
     worker's block table gets the null block there, and the pairs
     (request, block) ride back to the engine core on the step's output,
     where scheduler.py returns the blocks to vLLM's pool.

Requests that share a budget and policy share one attachment ("class"): the
daemon's budgets and policy are per engine, so a request's own budget
(memdecay_budget_tokens) is its class's per-sequence budget.  The default
class is attached at start-up under the engine name (MEMDECAY_VLLM_ENGINE).

Fail-open: with no daemon, or after it dies, the attachments are detached,
nothing is evicted and vLLM serves as it would without the plugin; one log
line says so, and the engine reattaches when a daemon answers again.  A
heartbeat thread keeps an idle server attached."""
import functools
import json
import os
import re
import threading
import time

import torch

import memdecay
from memdecay import Region

from . import reduce, regions, settings

PAGE_TOKENS = memdecay.PAGE_TOKENS_MAX

ENGINE = None
_lock = threading.Lock()


def _log():
    from vllm.logger import init_logger
    return init_logger("vllm.memdecay")


def _pinned(regions, mask):
    """Whether any of a page's token regions is pinned under the parameter block's mask."""
    return any((mask >> x) & 1 for x in set(regions))


class _Req:
    __slots__ = ("id", "klass", "seq", "prompt_regions", "n", "pages", "holes", "step_tokens",
                 "acc", "acc_layers", "kept")

    def __init__(self, req_id, klass, seq, prompt_regions):
        self.id = req_id
        self.klass = klass
        self.seq = seq
        self.prompt_regions = prompt_regions
        self.n = 0                 # tokens declared
        self.pages = {}            # page index -> [slot, gen, regions]
        self.holes = set()         # evicted block indices
        self.step_tokens = 0
        self.acc = None            # this step's token mass over the kept tokens
        self.acc_layers = 0
        self.kept = None           # original block indices the attention saw, in order

    def region_at(self, pos):
        r = self.prompt_regions
        return r[pos] if pos < len(r) else int(Region.ASSISTANT)


class _Class:
    """One attachment to memdecayd, for the requests of one (budget, policy)."""

    def __init__(self, eng, budget, policy, name):
        s = eng.s
        self.key = (budget, policy)
        self.name = name
        self.budget = budget
        self.client = memdecay.Client(
            socket_path=s.socket, engine_name=name, page_tokens=PAGE_TOKENS,
            page_capacity=eng.page_capacity, max_seqs=eng.max_seqs, policy=policy,
            budget_sequence_tokens=budget if budget and budget > 0 else -1,
            library=s.library)
        self.batch = self.client.batch()
        self.free_seqs = list(range(eng.max_seqs - 1, -1, -1))
        self.owner = {}            # slot -> (req, page index, gen)
        self.sibling_freed = set()  # (slot, gen) freed with a commanded page of their block
        self.was_attached = self.client.attached
        # whether the daemon may evict this class's pages (a budget of its own, the
        # daemon's per-sequence or engine budget), read every step: statistics are
        # computed only for requests it may evict
        self.may_evict = True
        self.next_reattach = 0.0


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
        self.classes = {}
        self.reqs = {}
        self.rows = []             # (req, seq_len, its queries' span in batch) per tracked row
        self.batch = None          # their gather indices, query rows and padding mask
        self.step_active = False
        self.last_step = time.monotonic()
        self.counters = {"evicted_blocks": 0, "sibling_pages": 0, "deferred": 0, "stale": 0,
                         "untracked": 0, "kept_for_pinned": 0,
                         "siblings_commanded": 0, "failed_open": 0, "sessions_adopted": 0,
                         "sessions_seeded": 0}
        self.retained = {}         # sessions.py: finished requests kept for their next turn
        self.adopting = {}         # a new request id -> (retained id, tokens adopted)
        self.failed = set()        # requests served without eviction after a fault here
        self.holes_only = {}       # such a request's holes, still compacted: req id -> set
        self.trace = open(self.s.trace, "a", buffering=1) if self.s.trace else None
        self.daemon_lost = False
        # seconds spent in the plugin's hooks, logged every cost_every steps
        self.cost = {"update": 0.0, "build": 0.0, "forward": 0.0, "step_end": 0.0}
        self.cost_steps = 0
        self.default = self._class(self.s.budget_tokens, self.s.policy)
        if not self.default.client.attached:
            self.daemon_lost = True
            _log().warning("memdecay_vllm: memdecayd is not reachable (%s): vLLM serves without "
                           "eviction until it is", self.default.client.last_error or "no daemon")
        else:
            _log().info("memdecay_vllm: attached to memdecayd at %s as engine %d (%s), "
                        "%d-token blocks = %d pages", self.default.client.socket_path,
                        self.default.client.engine_id, self.default.name, self.block_size, self.ppb)
        threading.Thread(target=self._heartbeat, name="memdecay-heartbeat", daemon=True).start()

    # ---- attachments ----
    def _class(self, budget, policy):
        key = (budget, policy)
        k = self.classes.get(key)
        if k is not None:
            return k
        if len(self.classes) >= self.s.max_classes:
            busy = {r.klass for r in self.reqs.values()}
            idle = [c for c in self.classes.values() if c not in busy and c is not self.default]
            if not idle:
                return None
            idle[0].client.close()          # its engine leaves memdecayd
            del self.classes[idle[0].key]
        name = self.s.engine_name
        if self.classes:
            name += "/b%d" % budget if budget and budget > 0 else ""
            name += "/%s" % policy if policy else ""
        k = _Class(self, budget, policy, name)
        self.classes[key] = k
        return k

    def _liveness(self, k, now):
        """True while attached; reattaches a detached class at most every
        reattach_ms.  The log says once that the daemon is gone (whichever
        attachment notices first) and once that it is back."""
        c = k.client
        if c.attached and c.check():
            k.was_attached = True
            self._daemon_state(True, k)
            return True
        if k.was_attached:
            k.was_attached = False
            self._daemon_state(False, k)
        if now >= k.next_reattach:
            k.next_reattach = now + self.s.reattach_ms / 1000.0
            if c.reattach() and c.check():
                k.was_attached = True
                self._daemon_state(True, k)
                return True
        return False

    def _daemon_state(self, up, k):
        if up == (not self.daemon_lost):
            return
        self.daemon_lost = not up
        if up:
            _log().warning("memdecay_vllm: reattached to memdecayd at %s (engine %d, %s)",
                           k.client.socket_path, k.client.engine_id, k.name)
        else:
            _log().warning("memdecay_vllm: lost memdecayd (%s): serving without eviction, "
                           "reattaching every %d ms", k.client.last_error or "detached",
                           self.s.reattach_ms)

    def _heartbeat(self):
        period = 0.5
        while True:
            time.sleep(period)
            if time.monotonic() - self.last_step < period:
                continue
            if not _lock.acquire(blocking=False):
                continue
            try:
                now = time.monotonic()
                for k in list(self.classes.values()):
                    self._liveness(k, now)
            except Exception as e:   # never take the worker down
                _log().warning("memdecay_vllm: heartbeat: %s", e)
            finally:
                _lock.release()

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
            self._drop(req_id)
        except Exception:               # the daemon side is best effort here
            self.reqs.pop(req_id, None)

    def fail_open_all(self, where, err):
        for req_id in list(self.reqs):
            self.fail_open(req_id, where, err)

    def _forget(self, req_id):
        self._drop(req_id)
        self.failed.discard(req_id)
        self.holes_only.pop(req_id, None)

    # ---- requests ----
    def _track(self, req_id, st):
        self.fault("track")
        args = (st.sampling_params.extra_args if st.sampling_params is not None else None) or {}
        budget = int(args.get(regions.BUDGET_KEY, self.s.budget_tokens))
        policy = args.get(regions.POLICY_KEY, self.s.policy)
        n_prompt = len(st.prompt_token_ids or ())
        runs = args.get(regions.REGIONS_KEY)
        reg = regions.unrle(runs, n_prompt) if runs else []
        reg += [int(Region.USER)] * (n_prompt - len(reg))
        try:
            k = self._class(budget, policy)
        except memdecay.MemDecayError as e:
            _log().warning("memdecay_vllm: request %s (budget %s, policy %s) is served without "
                           "eviction: %s", req_id, budget, policy, e)
            k = None
        adopted = self.adopting.pop(req_id, None)
        if k is not None and adopted is not None:
            r = self._adopt(req_id, st, k, reg, *adopted)
            if r is not None:
                return r
        if k is not None and not k.free_seqs:
            self._release_oldest(k)
        if k is None or not k.free_seqs:
            self.counters["untracked"] += 1
            return None
        r = _Req(req_id, k, k.free_seqs.pop(), reg)
        self.reqs[req_id] = r
        if adopted is not None:
            self._seed(r, st, adopted[1])
        return r

    # ---- sessions (sessions.py): a finished request's sequence goes on ----
    def _retain(self, req_id):
        r = self.reqs.pop(req_id, None)
        if r is not None:
            r.step_tokens = 0
            r.acc = r.kept = None
            self.retained[req_id] = r

    def _release(self, key):
        r = self.retained.pop(key, None)
        if r is not None:
            self.reqs[key] = r
            self._drop(key)

    def _release_oldest(self, k):
        for key, r in self.retained.items():
            if r.klass is k:
                self._release(key)
                return

    def _adopt(self, req_id, st, k, reg, key, n_tokens):
        """The retained sequence `key` goes on as request req_id: the same daemon
        sequence and pages up to the cut (n_tokens, block-aligned), the pages
        past it freed, the holes kept.  None when there is none to go on with
        (the caller then starts a sequence and seeds it from vLLM's blocks)."""
        r = self.retained.pop(key, None)
        if r is None:
            return None
        if r.klass is not k:                # another budget or policy this turn
            self.reqs[key] = r
            self._drop(key)
            return None
        cut_page = n_tokens // PAGE_TOKENS
        for pidx in [p for p in r.pages if p >= cut_page]:
            pg = r.pages.pop(pidx)
            k.owner.pop(pg[0], None)
            k.client.page_free(pg[0], memdecay.FINISHED)
        r.holes = {b for b in r.holes if b < n_tokens // self.block_size}
        r.id = req_id
        r.prompt_regions = reg
        r.n = n_tokens
        self.reqs[req_id] = r
        self.counters["sessions_adopted"] += 1
        return r

    def _seed(self, r, st, n_tokens):
        """A new sequence for a request that adopted n_tokens of blocks this worker
        holds no sequence for: pages for the kept blocks, holes where vLLM's
        block list has the null block."""
        ids = st.block_ids[0] if st.block_ids else []
        bs = self.block_size
        for b in range(n_tokens // bs):
            if b < len(ids) and ids[b] == 0:
                r.holes.add(b)
                continue
            r.n = b * bs
            self._declare(r, (b + 1) * bs)
        r.n = n_tokens
        self.counters["sessions_seeded"] += 1

    def _sessions_update(self, so):
        """The scheduler's session events for this step: retained requests keep
        their sequence, released ones end it, adopters are noted for _track."""
        from .sessions import EVENTS_ATTR
        ev = getattr(so, EVENTS_ATTR, None) or {}
        retained = set(ev.get("retained", ()))
        for req_id in so.finished_req_ids:
            if req_id in retained and req_id in self.reqs:
                self._retain(req_id)
            else:
                self._forget(req_id)
        for key in ev.get("released", ()):
            self._release(key)
        self.adopting.update(ev.get("adopted", {}))

    def _drop(self, req_id):
        r = self.reqs.pop(req_id, None)
        if r is None:
            return
        k = r.klass
        for pg in r.pages.values():
            k.owner.pop(pg[0], None)
        k.client.seq_end(r.seq)
        k.free_seqs.append(r.seq)

    def _declare(self, r, end):
        """Declares positions [r.n, end) in pages of 16, opening or growing each."""
        k = r.klass
        pos = r.n
        while pos < end:
            pidx = pos // PAGE_TOKENS
            stop = min(end, (pidx + 1) * PAGE_TOKENS)
            pg = r.pages.get(pidx)
            new = [r.region_at(p) for p in range(pos, stop)]
            if pg is None:
                slot, gen = k.client.page_open(r.seq, pos, len(new), memdecay.labels(new))
                r.pages[pidx] = [slot, gen, new]
                k.owner[slot] = (r, pidx, gen)
            else:
                pg[2].extend(new)
                k.client.page_grow(pg[0], len(pg[2]), memdecay.labels(pg[2]))
            pos = stop
        r.n = end

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
            self._declare(r, end)
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
            self.rows = []
            self.batch = None
            self.fail_open_all("planning the step's statistics", e)
            holes, _ = self._holes_by_row(cm)
            if not holes:
                return cm
            from .holes import compact
            return compact(cm, holes, self.block_size)[0]

    def _build(self, cm):
        holes, rows = self._holes_by_row(cm)
        rows = [(r, row) for r, row in rows if r.klass.may_evict]
        kept = {}
        if holes:
            from .holes import compact
            cm, kept = compact(cm, holes, self.block_size)
        qsl = cm.query_start_loc_cpu
        self.rows = []
        self.batch = None
        if not rows:
            return cm
        bs = self.block_size
        lens = [int(cm.seq_lens[row]) for _, row in rows]
        nblk = max((n + bs - 1) // bs for n in lens)
        table = cm.block_table_tensor[[row for _, row in rows], :nblk].to(torch.long)
        # the queries observed: a decode row's one; a prefill chunk's last and up to
        # prefill_queries-1 more, evenly spaced, each seeing the keys up to itself
        k = self.s.prefill_queries
        which, q_at, visible, spans = [], [], [], []
        for i, ((r, row), n) in enumerate(zip(rows, lens)):
            q0, q1 = int(qsl[row]), int(qsl[row + 1])
            picks = {q1 - 1}
            if q1 - q0 > 1 and k > 1:
                picks.update(q1 - 1 - (j * (q1 - q0 - 1)) // (k - 1) for j in range(k))
            first = len(which)
            for qi in sorted(picks):
                which.append(i)
                q_at.append(qi)
                visible.append(n - (q1 - 1 - qi))
            spans.append((first, len(which)))
        pos = torch.arange(nblk * bs)
        self.batch = {
            "idx": table[torch.tensor(which)].reshape(-1),   # each observed query's row blocks
            "q": torch.tensor(q_at),
            "pad": pos[None, :] >= torch.tensor(visible)[:, None],  # keys a query cannot see
            "nblk": nblk,
        }
        for (r, row), n, span in zip(rows, lens, spans):
            r.kept = kept.get(row)
            if r.kept is None:
                r.kept = torch.arange((n + bs - 1) // bs)
            self.rows.append((r, n, span))
        return cm

    def on_forward(self, impl, layer, query, kv_cache):
        if not self.rows:
            return
        try:
            self.fault("forward")
            self._forward(impl, layer, query, kv_cache)
        except Exception as e:
            rows, self.rows = self.rows, []
            for r, _, _ in rows:
                self.fail_open(r.id, "the attention statistics", e)

    def _forward(self, impl, layer, query, kv_cache):
        """Adds this layer's attention of each tracked row's observed queries over
        the row's kept keys to the step's token mass (mean over heads and the
        row's queries), all rows in one batch: one gather of the rows' blocks,
        one matmul, one softmax."""
        li = getattr(layer, "_memdecay_index", None)
        if li is None:
            m = re.search(r"\.(\d+)\.", getattr(layer, "layer_name", "") or "")
            li = int(m.group(1)) if m else 0
            layer._memdecay_index = li
        if li % self.s.layer_stride:
            return
        b = self.batch
        p = attention_mass(kv_cache, getattr(layer, "isa", "vec"), b["idx"], b["nblk"],
                           query.view(query.shape[0], impl.num_heads, impl.head_size)
                           .index_select(0, b["q"]), b["pad"], impl.scale)
        for r, seq_len, (q0, q1) in self.rows:
            m = p[q0:q1, :seq_len].mean(dim=0)     # over the row's observed queries
            if r.acc is None:
                r.acc = m
            else:
                r.acc += m
            r.acc_layers += 1

    def on_step_end(self, runner, output):
        """Publishes the step, applies the daemon's commands; returns the
        (request id, block index) pairs evicted this step.  On a fault the
        pairs already applied still go back, and the step's requests are
        served without eviction."""
        with _lock:
            self.step_active = False
            self.rows = []
            now = time.monotonic()
            self.last_step = now
            evicted = []
            try:
                self.fault("step_end")
                self._step_end(now, evicted)
            except Exception as e:
                self.fail_open_all("publishing the step", e)
            return evicted

    def _step_end(self, now, evicted):
        for k in list(self.classes.values()):
            scheduled = [r for r in self.reqs.values() if r.klass is k and r.step_tokens]
            if not self._liveness(k, now):
                k.may_evict = False
                for r in scheduled:     # the mirror's clocks still advance
                    k.client.seq_step(r.seq, r.step_tokens)
                    r.step_tokens = 0
                continue
            prm = k.client.params()     # one read of the parameter block a step
            k.may_evict = bool((k.budget and k.budget > 0) or prm["budget_sequence_tokens"]
                               or prm["budget_engine_pages"])
            if scheduled:
                self._publish(k, scheduled, prm)
            self._settle(k, evicted, prm)

    def _publish(self, k, reqs, prm):
        b = k.batch
        n = 0
        steps = []
        for r in reqs:
            steps.append((r.seq, r.step_tokens))
            r.step_tokens = 0
            if not k.may_evict:
                continue            # its clock only: the daemon evicts nothing of it
            live = len(r.pages) * PAGE_TOKENS
            norm = float(live) if prm["norm_mode"] == 1 else 1.0
            masses = {}
            if r.acc is not None and r.acc_layers:
                masses = reduce.block_pages(r.acc / r.acc_layers, r.kept, self.block_size,
                                            prm["tau"], norm)
            for pidx, pg in r.pages.items():
                if n >= b.capacity:
                    break
                m, bits = masses.get(pidx, (0.0, 0))
                b.slots[n] = pg[0]
                b.mass[n] = m
                b.refresh[n] = bits
                n += 1
            if len(steps) >= b.max_steps or n >= b.capacity:
                k.client.publish(b, n, steps=steps)
                steps, n = [], 0
        if steps or n:
            k.client.publish(b, n, steps=steps)

    def _writing(self, r):
        """Index of the block r's next token goes into: never freed here."""
        return (r.n - 1) // self.block_size

    def _over(self, k, prm):
        """Whether a request of class k holds more than a block beyond what the
        daemon can bring it to: max(budget, the tokens it never evicts here:
        pinned pages, protect_recent newest pages, the block being written)."""
        if not k.budget or k.budget <= 0:
            return False
        pinned, protect = prm["pinned_mask"], prm["protect_recent"]
        for r in self.reqs.values():
            if r.klass is not k or not r.pages:
                continue
            last = self._writing(r)
            order = sorted(r.pages)
            floor = 0
            for i, p in enumerate(order):
                if (p // self.ppb == last or len(order) - 1 - i <= protect
                        or _pinned(r.pages[p][2], pinned)):
                    floor += PAGE_TOKENS
            if len(order) * PAGE_TOKENS > max(k.budget, floor) + self.block_size:
                return True
        return False

    def _settle(self, k, evicted, prm):
        """Applies pending commands; while a request is over its budget by more
        than a block, waits (up to settle_ms) for the daemon's decision."""
        self._apply(k, evicted, prm)
        if not self._over(k, prm):
            return
        deadline = time.monotonic() + self.s.settle_ms / 1000.0
        while time.monotonic() < deadline and k.client.attached:
            k.client.wait_commands(5)
            if self._apply(k, evicted, prm) and not self._over(k, prm):
                return

    def _apply(self, k, evicted, prm):
        got = 0
        for ev in k.client.poll_commands():
            o = k.owner.get(ev.slot)
            if o is None or o[2] != ev.gen:
                self.counters["stale"] += 1
                if (ev.slot, ev.gen) in k.sibling_freed:
                    # the daemon wanted the sibling too: its block already went
                    k.sibling_freed.discard((ev.slot, ev.gen))
                    self.counters["siblings_commanded"] += 1
                    if self.trace:
                        self.trace.write(json.dumps({"pid": os.getpid(), "sibling_commanded":
                                                     1, "engine": k.name}) + "\n")
                continue
            r, pidx, _ = o
            b = pidx // self.ppb
            if b >= self._writing(r):
                self.counters["deferred"] += 1     # the block being written stays
                continue
            if self._pinned_sibling(r, b, prm["pinned_mask"]):
                # the block also holds pinned tokens: it stays, the page leaves the daemon
                r.pages.pop(pidx, None)
                k.owner.pop(ev.slot, None)
                k.client.page_free(ev.slot, memdecay.EVICTED)
                self.counters["kept_for_pinned"] += 1
                got += 1
                continue
            self._evict_block(k, r, b, ev.slot)
            evicted.append((r.id, b))
            got += 1
        return got

    def _pinned_sibling(self, r, b, pinned):
        return any(_pinned(r.pages[p][2], pinned)
                   for p in range(b * self.ppb, (b + 1) * self.ppb) if p in r.pages)

    def _evict_block(self, k, r, b, commanded_slot):
        regs = []
        siblings = 0
        for pidx in range(b * self.ppb, (b + 1) * self.ppb):
            pg = r.pages.pop(pidx, None)
            if pg is None:
                continue
            k.owner.pop(pg[0], None)
            regs.extend(pg[2])
            if pg[0] == commanded_slot:
                k.client.page_free(pg[0], memdecay.EVICTED)
            else:
                k.client.page_free(pg[0], memdecay.FINISHED)
                if len(k.sibling_freed) > 4096:     # commands come within a step or two
                    k.sibling_freed.clear()
                k.sibling_freed.add((pg[0], pg[1]))
                siblings += 1
        r.holes.add(b)
        self.counters["evicted_blocks"] += 1
        self.counters["sibling_pages"] += siblings
        rn = self.runner
        st = rn.requests.get(r.id)
        if st is not None:
            for g in st.block_ids:
                if b < len(g):
                    g[b] = 0
        row = rn.input_batch.req_id_to_index.get(r.id)
        if row is not None:
            for t in rn.input_batch.block_table.block_tables:
                t.block_table.np[row, b] = 0
        if self.trace:
            self.trace.write(json.dumps({"pid": os.getpid(), "evict": r.id, "block": b,
                                         "regions": sorted(set(regs)), "engine": k.name,
                                         "siblings": siblings,
                                         "t": time.time()}) + "\n")

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


_layouts = {}
TRANSPOSED = "transposed"


def key_layout(isa, block_size, head_size, dtype):
    """Where vLLM's CPU cache writer puts key (t, d) of a block: a permutation of
    the block's block_size*head_size key elements, learnt once per (isa, block
    size, head size, dtype) by writing probe keys with ops.cpu_attn_reshape_and_cache.
    The 'vec' kernels store a block's keys transposed; others pack differently,
    so nothing here assumes a layout.  Returns TRANSPOSED when a block stores
    its keys as [D][bs], else a LongTensor p with stored[p[t*D + d]] = key[t][d]."""
    key = (isa, block_size, head_size, dtype)
    p = _layouts.get(key)
    if p is not None:
        return p
    from vllm import _custom_ops as ops
    bs, D = block_size, head_size
    found = []
    for probe in ("t", "d"):
        kv = torch.zeros(1, 1, bs, 2 * D, dtype=dtype)
        kc, vc = kv.view(1, 1, 2 * bs, D).chunk(2, dim=2)
        t = torch.arange(bs).view(bs, 1, 1).expand(bs, 1, D)
        d = torch.arange(D).view(1, 1, D).expand(bs, 1, D)
        val = (t if probe == "t" else d).to(dtype) + 1      # small integers: exact in bf16
        ops.cpu_attn_reshape_and_cache(val.contiguous(), torch.zeros_like(val), kc, vc,
                                       torch.arange(bs, dtype=torch.int64), isa)
        found.append(kv.view(2 * bs * D)[:bs * D].to(torch.int64) - 1)
    tt, dd = found
    if (tt < 0).any() or (dd < 0).any():
        raise RuntimeError("memdecay_vllm: vLLM's %s key layout is not a permutation" % isa)
    p = torch.empty(bs * D, dtype=torch.long)
    p[tt * D + dd] = torch.arange(bs * D)
    if torch.equal(p.view(bs, D), torch.arange(bs * D).view(D, bs).t()):
        p = TRANSPOSED          # [D][bs]: the 'vec' kernels; read without a permutation
    _layouts[key] = p
    return p


def attention_mass(kv_cache, isa, idx, nblk, q, pad, scale):
    """Each row's attention over its blocks, averaged over heads: q [R, H, D] (one
    query a row), idx the rows' block ids [R*nblk] (padded), pad [R, nblk*bs] True
    past a row's length.  Returns [R, nblk*bs], each row summing to 1 over its
    unpadded tokens, in the order the blocks were given."""
    nb, kvh, bs, _ = kv_cache.shape
    R, H, D = q.shape
    layout = key_layout(isa, bs, D, kv_cache.dtype)
    keys = kv_cache.view(nb, kvh, 2 * bs * D)[:, :, :bs * D]
    kb = keys.index_select(0, idx)                                # [R*nblk, kvh, bs*D]
    if layout is TRANSPOSED:                                      # stored [D][bs]
        kb = kb.view(R, nblk, kvh, D, bs)
    else:
        kb = kb[:, :, layout].view(R, nblk, kvh, bs, D).transpose(-1, -2)
    # one batched matmul over (row, block, kv head), then the small scores in row order
    g = H // kvh
    sc = torch.matmul(q.view(R, 1, kvh, g, D).to(kb.dtype), kb)   # [R, nblk, kvh, g, bs]
    sc = sc.permute(0, 2, 3, 1, 4).reshape(R, kvh, g, nblk * bs).float() * scale
    sc.masked_fill_(pad[:, None, None, :], float("-inf"))
    return torch.softmax(sc, dim=-1).mean(dim=(1, 2))


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
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl
    from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from .scheduler import EVICTED_ATTR

    if getattr(GPUModelRunner._update_states, "_memdecay", False):
        return
    orig_update = GPUModelRunner._update_states
    orig_sample = GPUModelRunner.sample_tokens
    orig_forward = CPUAttentionBackendImpl.forward
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

    _update_states._memdecay = True
    GPUModelRunner._update_states = _update_states
    GPUModelRunner.sample_tokens = sample_tokens
    CPUAttentionBackendImpl.forward = forward
