"""Engine core: an agent's session keeps its bounded KV cache across turns.

A request under a MemDecay budget that finishes keeps its KV blocks, holes
included (retained).  The next request of the same session whose prompt
starts with the retained tokens adopts them: its first N tokens count as
computed (N: the common token prefix, rounded down to a block, at most its
length - 1), the kept blocks go into its block list as they are (holes stay
the null block), and only the new suffix is prefilled.  The worker carries the
sequence on in memdecayd under the new request (worker.py): its pages, clock,
turn counter and refresh state go on.  docs/vllm.md "Sessions".

Who may adopt what: a session retained with an id (vLLM's session_id: the
request body's, X-Session-ID, or vllm_xargs.session_id) only by a request
with that id; one without, only by a request without one, unless the operator
requires ids (MEMDECAY_VLLM_SESSION_IDS=require).  Always the same cache_salt
and LoRA adapter, and the identical token prefix: nothing is shared that
vLLM's prefix cache would not share.

Bounds: retained blocks take at most MEMDECAY_VLLM_SESSION_SHARE of the pool
(the least recently used go first), a session idle past
MEMDECAY_VLLM_SESSION_TTL_S is released at the next scheduler step, and when
an allocation fails, retained sessions are released, least recently used
first, before vLLM preempts a running request or stops admitting.

vLLM 0.32.0 seams wrapped (install):
  Scheduler._free_blocks             a finished request's blocks -> a session
  KVCacheManager.get_computed_blocks a session hit beats a shorter prefix hit; a
                                     longer one holding the session's blocks
                                     carries the session on
  KVCacheManager.allocate_slots      adoption; releases under pressure
  KVCacheManager.reset_prefix_cache  releases every session first
  Scheduler.schedule                 TTL, and the step's session events for
                                     the worker (SchedulerOutput.memdecay_sessions)"""
import collections
import functools
import itertools
import json
import os
import time

from . import fields, regions, settings

EVENTS_ATTR = "memdecay_sessions"
HIT_ATTR = "_memdecay_session"
EVICTED_FLAG = "_memdecay_evicted"       # scheduler.py's: no prefix caching from then on


def _budget(request, s):
    args = getattr(request.sampling_params, "extra_args", None) or {}
    b = args.get(regions.BUDGET_KEY, s.budget_tokens)
    return b if isinstance(b, int) and not isinstance(b, bool) and b > 0 else 0


def _policy(request, s):
    args = getattr(request.sampling_params, "extra_args", None) or {}
    return args.get(regions.POLICY_KEY, s.policy)


def _session_id(request):
    sid = getattr(request, "session_id", None)
    return sid if isinstance(sid, str) and 0 < len(sid) <= fields.ID_MAX else None


def _lora(request):
    lr = getattr(request, "lora_request", None)
    return getattr(lr, "lora_int_id", None)


def _plain(request):
    """Token ids only: no prompt logprobs (they need every position computed), no
    multimodal inputs, no prompt embeddings."""
    return not (getattr(request, "skip_reading_prefix_cache", False)
                or getattr(request, "mm_features", None)
                or getattr(request, "prompt_embeds", None) is not None)


def common_prefix(a, b, step):
    """Length of the common prefix of token lists a and b, compared a block of
    `step` tokens at a time (list slices compare in C) and then token by token."""
    n = min(len(a), len(b))
    i = 0
    while i + step <= n and a[i:i + step] == b[i:i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def extends(x, hit, n_tokens, bs):
    """True when vLLM's prefix hit `hit` starts with session x's own first
    n_tokens worth of blocks (the same blocks, so no hole among them)."""
    n = n_tokens // bs
    if x.evicted or n < 1:
        return False
    return all(len(h) > n and all(a is b for a, b in zip(h[:n], g[:n]))
               for h, g in zip(hit.blocks, x.blocks))


class Session:
    __slots__ = ("key", "session_id", "salt", "lora", "policy", "tokens", "blocks", "evicted",
                 "budget", "turns", "last_used", "held")

    def __init__(self, key, request, tokens, blocks, evicted, budget, turns, policy):
        self.key = key                    # the request id it was retained under
        self.session_id = _session_id(request)
        self.policy = policy              # its holes are this policy's choice
        self.salt = getattr(request, "cache_salt", None)
        self.lora = _lora(request)
        self.tokens = tokens              # the tokens the kept blocks hold, block-aligned
        self.blocks = blocks              # per KV cache group: the kept blocks (nulls = holes)
        self.evicted = evicted
        self.budget = budget
        self.turns = turns
        self.last_used = time.monotonic()
        self.held = sum(1 for g in blocks for b in g if not b.is_null)


class Store:
    """The retained sessions of one KVCacheManager, least recently used first."""

    def __init__(self, manager, s=None):
        self.s = s or settings.get()
        self.manager = manager
        self.sessions = collections.OrderedDict()
        self.turns = {}                   # request id of an adopter -> its session's turns
        self.events = {"retained": [], "adopted": {}, "released": []}
        self.counters = {"retained": 0, "adopted": 0, "adopted_tokens": 0,
                         "released_pressure": 0, "expired": 0, "refused": 0,
                         "released_cap": 0, "released_reset": 0, "released_stale": 0}

    # ---- bookkeeping ----
    def _pool(self):
        return self.manager.block_pool

    def held_blocks(self):
        return sum(x.held for x in self.sessions.values())

    def cap_blocks(self):
        return int(self.s.session_share * (self._pool().num_gpu_blocks - 1))

    def _free(self, blocks):
        pool = self._pool()
        for g in blocks:
            if g:
                pool.free_blocks(reversed(g))

    def release(self, key, why):
        x = self.sessions.pop(key, None)
        if x is None:
            return False
        self._free(x.blocks)
        self.events["released"].append(key)
        self.counters["released_" + why if why != "expired" else "expired"] += 1
        return True

    def release_lru(self, why, keep=None):
        for key in self.sessions:
            if self.sessions[key] is not keep:
                return self.release(key, why)
        return False

    def expire(self):
        ttl = self.s.session_ttl_s
        if ttl <= 0 or not self.sessions:
            return
        now = time.monotonic()
        for key in [k for k, x in self.sessions.items() if now - x.last_used > ttl]:
            self.release(key, "expired")

    def take_events(self):
        ev = self.events
        if not (ev["retained"] or ev["adopted"] or ev["released"]):
            return None
        self.events = {"retained": [], "adopted": {}, "released": []}
        return ev

    # ---- a finished request becomes a session ----
    def retain(self, request, managers, bs):
        """Moves a finished request's blocks into a session; False when it is
        not one to keep (the caller then frees it as vLLM would)."""
        budget = _budget(request, self.s)
        turns = self.turns.pop(request.request_id, 0) + 1
        if (not budget or request.status.name not in ("FINISHED_STOPPED", "FINISHED_LENGTH_CAPPED")
                or not _plain(request)):
            return False
        if self.s.session_ids == "require" and _session_id(request) is None:
            return False
        n_keep = request.num_computed_tokens // bs
        if n_keep < 1:
            return False
        popped = [mgr.pop_blocks_for_free(request.request_id) for mgr in managers]
        kept = [list(g[:n_keep]) for g in popped]
        self._free([g[n_keep:] for g in popped])          # a partial last block is not kept
        if any(len(g) < n_keep for g in kept):
            self._free(kept)
            return True                                     # freed, nothing retained
        x = Session(request.request_id, request,
                    list(itertools.islice(request.all_token_ids, n_keep * bs)), kept,
                    getattr(request, EVICTED_FLAG, False) or any(b.is_null for g in kept for b in g),
                    budget, turns, _policy(request, self.s))
        cap = self.cap_blocks()
        if x.held > cap:
            self._free(kept)
            self.counters["refused"] += 1
            return True
        while self.held_blocks() + x.held > cap and self.release_lru("cap"):
            pass
        # one session per id (and tenant): a newer turn's retention replaces an unadopted
        # older one
        if x.session_id is not None:
            for key in [k for k, o in self.sessions.items()
                        if (o.session_id, o.salt, o.lora) == (x.session_id, x.salt, x.lora)]:
                self.release(key, "stale")
        self.sessions[x.key] = x
        self.events["retained"].append(x.key)
        self.counters["retained"] += 1
        return True

    # ---- a new request adopts one ----
    def match(self, request, bs):
        """(session, N) of the best session request may adopt, or (None, 0)."""
        if not self.sessions or not _plain(request) or not _budget(request, self.s):
            return None, 0          # a request without a budget is served as vLLM serves it
        sid = _session_id(request)
        if sid is None and self.s.session_ids == "require":
            return None, 0
        salt, lora = getattr(request, "cache_salt", None), _lora(request)
        policy = _policy(request, self.s)
        prompt = request.all_token_ids
        limit = request.num_tokens - 1
        best, best_n = None, 0
        for x in self.sessions.values():
            if x.session_id != sid or x.salt != salt or x.lora != lora or x.policy != policy:
                continue
            if x.tokens[:bs] != list(itertools.islice(prompt, bs)):
                continue
            n = min(common_prefix(x.tokens, list(prompt), bs), limit) // bs * bs
            if n > best_n:
                best, best_n = x, n
        return best, best_n

    def install(self, request, x, n_tokens, managers, bs):
        """Puts the session's first n_tokens worth of blocks into request's block
        lists (its references move with them: no touch)."""
        n = n_tokens // bs
        for mgr, g in zip(managers, x.blocks):
            mgr.req_to_blocks[request.request_id] = list(g[:n])
            mgr.num_cached_block[request.request_id] = n

    def rollback(self, request, managers):
        for mgr in managers:
            mgr.req_to_blocks.pop(request.request_id, None)
            mgr.num_cached_block.pop(request.request_id, None)

    def consume(self, request, x, n_tokens, bs, moved=True):
        """The adoption went through: the blocks past the cut go back to the pool,
        and the ones before it too unless their references moved to the request
        (install; with vLLM's own hit the request took references of its own)."""
        n = n_tokens // bs
        self.sessions.pop(x.key, None)
        self._free([g[n:] for g in x.blocks] if moved else x.blocks)
        if x.evicted or any(b.is_null for g in x.blocks for b in g[:n]):
            setattr(request, EVICTED_FLAG, True)
        self.turns[request.request_id] = x.turns
        self.events["adopted"][request.request_id] = (x.key, n_tokens)
        self.counters["adopted"] += 1
        self.counters["adopted_tokens"] += n_tokens

    def apply_evicted(self, key, idx):
        """A block the daemon evicted from a retained session: a hole now."""
        x = self.sessions.get(key)
        if x is None:
            return 0
        freed = 0
        for g in x.blocks:
            if 0 <= idx < len(g) and not g[idx].is_null:
                b = g[idx]
                g[idx] = self._pool().null_block
                self._pool().free_blocks([b])
                freed += 1
        if freed:
            x.evicted = True
            x.held -= freed
        return freed

    def trace(self, ev):
        """With MEMDECAY_VLLM_TRACE: one JSON line per step with session events,
        and every 64 such steps a log line of the counters."""
        self.n_traced = getattr(self, "n_traced", 0) + 1
        if self.s.trace:
            if getattr(self, "_trace", None) is None:
                self._trace = open(self.s.trace, "a", buffering=1)
            self._trace.write(json.dumps({"pid": os.getpid(), "t": time.time(), "sessions": ev,
                                          "retained_blocks": self.held_blocks(),
                                          "counters": self.counters}) + "\n")
        if self.n_traced % 64 == 1:
            from vllm.logger import init_logger
            init_logger("vllm.memdecay").info(
                "memdecay_vllm: sessions: %d retained (%d blocks, cap %d); %s", len(self.sessions),
                self.held_blocks(), self.cap_blocks(),
                ", ".join("%s %d" % kv for kv in self.counters.items()))

    def describe(self):
        now = time.monotonic()
        return [{"key": x.key, "session_id": x.session_id, "tokens": len(x.tokens),
                 "blocks": x.held, "holes": sum(1 for g in x.blocks[:1] for b in g if b.is_null),
                 "turns": x.turns, "idle_s": round(now - x.last_used, 3)}
                for x in self.sessions.values()]


def store_of(manager):
    st = getattr(manager, "_memdecay_store", None)
    if st is None:
        st = Store(manager)
        manager._memdecay_store = st
    return st


def _managers(manager):
    return manager.coordinator.single_type_managers


def install():
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
    from vllm.v1.core.sched.scheduler import Scheduler

    s = settings.get()
    if not s.sessions or getattr(KVCacheManager.allocate_slots, "_memdecay", False):
        return
    orig_free = Scheduler._free_blocks
    orig_schedule = Scheduler.schedule
    orig_computed = KVCacheManager.get_computed_blocks
    orig_alloc = KVCacheManager.allocate_slots
    orig_reset = KVCacheManager.reset_prefix_cache

    @functools.wraps(orig_free)
    def _free_blocks(self, request):
        mgr = self.kv_cache_manager
        try:
            store_of(mgr).retain(request, _managers(mgr), self.block_size)
        except Exception as e:            # never the engine: the blocks are freed as usual
            _warn("retaining request %s" % request.request_id, e)
        return orig_free(self, request)

    @functools.wraps(orig_schedule)
    def schedule(self, *args, **kwargs):
        st = store_of(self.kv_cache_manager)
        try:
            st.expire()
        except Exception as e:
            _warn("expiring sessions", e)
        out = orig_schedule(self, *args, **kwargs)
        ev = st.take_events()
        if ev is not None:
            setattr(out, EVENTS_ATTR, ev)
            st.trace(ev)
        return out

    @functools.wraps(orig_computed)
    def get_computed_blocks(self, request):
        blocks, n_hit, boundary = orig_computed(self, request)
        try:
            bs = _block_size(self)
            x, n = store_of(self).match(request, bs)
            if x is not None and n >= n_hit:
                hit = KVCacheBlocks(tuple(() for _ in range(self.num_kv_cache_groups)))
                setattr(hit, HIT_ATTR, (x, n, True))
                return hit, n, 0
            if x is not None and extends(x, blocks, n, bs):
                # vLLM's prefix cache holds the session's own blocks and more (another
                # request computed the same history since): the request takes vLLM's
                # longer hit and still goes on with the session's daemon sequence
                setattr(blocks, HIT_ATTR, (x, n, False))
        except Exception as e:
            _warn("matching request %s" % request.request_id, e)
        return blocks, n_hit, boundary

    @functools.wraps(orig_alloc)
    def allocate_slots(self, request, num_new_tokens, num_new_computed_tokens=0,
                       new_computed_blocks=None, *args, **kwargs):
        st = store_of(self)
        hit = getattr(new_computed_blocks, HIT_ATTR, None) if new_computed_blocks else None
        mgrs = _managers(self)
        bs = _block_size(self)
        x = None
        if hit is not None:
            x, n, own = hit
            if st.sessions.get(x.key) is not x:
                if not own:                 # vLLM's hit stands without the session
                    x = None
                else:
                    # released since the match, with n tokens already counted as computed:
                    # the request waits a step, and its next lookup finds no session
                    return None
            elif own:
                st.install(request, x, n, mgrs, bs)
                new_computed_blocks = self.empty_kv_cache_blocks
        out = orig_alloc(self, request, num_new_tokens, num_new_computed_tokens,
                         new_computed_blocks, *args, **kwargs)
        while out is None and st.release_lru("pressure", keep=x):
            out = orig_alloc(self, request, num_new_tokens, num_new_computed_tokens,
                             new_computed_blocks, *args, **kwargs)
        if x is not None:
            if out is None:
                st.rollback(request, mgrs)
            else:
                st.consume(request, x, hit[1], bs, moved=hit[2])
        return out

    @functools.wraps(orig_reset)
    def reset_prefix_cache(self, *args, **kwargs):
        st = store_of(self)
        for key in list(st.sessions):
            st.release(key, "reset")
        return orig_reset(self, *args, **kwargs)

    for f in (_free_blocks, schedule, get_computed_blocks, allocate_slots, reset_prefix_cache):
        f._memdecay = True
    Scheduler._free_blocks = _free_blocks
    Scheduler.schedule = schedule
    KVCacheManager.get_computed_blocks = get_computed_blocks
    KVCacheManager.allocate_slots = allocate_slots
    KVCacheManager.reset_prefix_cache = reset_prefix_cache


def _block_size(manager):
    return _managers(manager)[0].block_size


_warned = {"n": 0}


def _warn(what, err):
    _warned["n"] += 1
    n = _warned["n"]
    if n & (n - 1) == 0:
        from vllm.logger import init_logger
        init_logger("vllm.memdecay").warning("memdecay_vllm: sessions: %s failed (%d so far): "
                                             "%s: %s", what, n, type(err).__name__, err)
