"""Engine core: the wrappers around vLLM's scheduler and KV cache manager.

Evicted blocks.  The worker decides nothing: it relays memdecayd's commands as
(request id, block index) pairs on the step's ModelRunnerOutput
(`memdecay_evicted`).  Before vLLM's own update_from_output runs, each such
block is replaced by vLLM's null block in the request's block list and freed
to the pool, through vLLM's own SingleTypeKVCacheManager._remove_blocks_in_range
(the way vLLM drops the middle of a sliding window).  A pair whose request has
finished goes to its retained session (sessions.py); one whose session was
adopted since goes to the adopter.

Prefix caching.  A block computed over a hole holds keys and values of a
context with holes, so it must never be hashed.  cache_blocks reads the
request's own block list: a request with a null block in it (or flagged by an
adoption of a session that had holes) caches nothing from then on.  The
decision is made where the hole is, in the same step.

Sessions.  The wrappers here call sessions.Store; adoption goes through vLLM's
own path: the session's blocks are returned by get_computed_blocks as an
ordinary hit, and vLLM's allocate_slots takes its references (only without
prefix caching, when vLLM refuses a hit of blocks, are they moved into the
request's block list by hand).

Fail-open.  Each wrapper's own work runs under a guard: a fault is counted
and logged (log.failed) and vLLM's method runs as it would without the
plugin, with what it was given.  hooks.py installs these wrappers."""
import json
import os
import time

from . import log, metrics, settings, tier
from .pool import STATE_ATTR, pool_of
from .settings import fault
from .sessions import EVENTS_ATTR, EVICTED_FLAG, HIT_ATTR, extends, store_of

EVICTED_ATTR = "memdecay_evicted"


def _managers(kv_cache_manager):
    return kv_cache_manager.coordinator.single_type_managers


def _block_size(kv_cache_manager):
    return _managers(kv_cache_manager)[0].block_size


def has_hole(blocks):
    return any(b.is_null for b in blocks)


def free_evicted(scheduler, evicted):
    """Frees the (request id, block index) pairs; returns how many blocks went back."""
    by_id = scheduler.requests
    store = getattr(scheduler.kv_cache_manager, "_memdecay_store", None)
    n = 0
    for req_id, idx in evicted:
        req = by_id.get(req_id)
        if req is None or req.is_finished():
            if store is None:
                continue
            freed, adopter = store.apply_evicted(req_id, idx)     # a retained session's
            n += freed
            req = by_id.get(adopter) if adopter is not None else None
            if req is None or req.is_finished():
                continue
            req_id = adopter            # the pair came after the adoption: the adopter's block
        setattr(req, EVICTED_FLAG, True)
        for mgr in _managers(scheduler.kv_cache_manager):
            blocks = mgr.req_to_blocks.get(req_id)
            if blocks is None or not 0 <= idx < len(blocks) - 1:
                continue            # the block being written is never freed
            if blocks[idx].is_null:
                continue
            mgr._remove_blocks_in_range(req_id, idx, idx + 1)   # null block in, block freed
            n += 1
    return n


def held_blocks(scheduler, req_id):
    """(blocks held, holes) of a request in vLLM's own block lists."""
    held = holes = 0
    for mgr in _managers(scheduler.kv_cache_manager):
        for b in mgr.req_to_blocks.get(req_id, ()):
            if b.is_null:
                holes += 1
            else:
                held += 1
    return held, holes


class Trace:
    """MEMDECAY_VLLM_TRACE: JSON lines of vLLM's block accounting (one per running
    request and step) and of the session events.  The path was checked at start-up
    (settings.py)."""

    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.step = 0

    def write(self, scheduler, freed):
        self.step += 1
        pool = scheduler.kv_cache_manager.block_pool
        for req in scheduler.running:
            held, holes = held_blocks(scheduler, req.request_id)
            self.f.write(json.dumps({"pid": os.getpid(), "step": self.step, "t": time.time(),
                                     "req": req.request_id, "held": held, "holes": holes,
                                     "tokens": req.num_computed_tokens, "freed": freed,
                                     "pool_free": pool.get_num_free_blocks()}) + "\n")

    def sessions(self, st, ev, pool=None):
        row = {"pid": os.getpid(), "t": time.time(), "sessions": ev,
               "retained_blocks": st.held_blocks(), "counters": st.counters}
        if pool is not None:
            row["pool"] = pool.counters
        self.f.write(json.dumps(row) + "\n")


_trace = {}


def trace_of():
    """The process's trace (None without MEMDECAY_VLLM_TRACE)."""
    path = settings.get().trace
    if not path:
        return None
    if path not in _trace:
        _trace[path] = Trace(path)
    return _trace[path]


# ---- the wrappers (hooks.py's table names the methods and their signatures) ----

def wrap_update_from_output(orig):
    def update_from_output(self, scheduler_output, model_runner_output):
        try:
            fault("scheduler")
            evicted = getattr(model_runner_output, EVICTED_ATTR, None) or []
            restored = getattr(model_runner_output, tier.RESTORED_ATTR, None) or []
            # in the worker's order: a block may leave and come back in one step,
            # or come back and leave again (each restore says how many evicted
            # pairs came before it)
            freed, done = 0, 0
            if restored:
                spares = tier.spares_of(self.kv_cache_manager, settings.get())
                store = getattr(self.kv_cache_manager, "_memdecay_store", None)
                managers = _managers(self.kv_cache_manager)
            for req_id, idx, bid, at in restored:
                if at > done:
                    freed += free_evicted(self, evicted[done:at])
                    done = at
                spares.install(self, [(req_id, idx, bid)], store, managers)
            if done < len(evicted):
                freed += free_evicted(self, evicted[done:])
            state = getattr(model_runner_output, STATE_ATTR, None)
            if state is not None:
                pool_of(self.kv_cache_manager, settings.get()).state = state
            tr = trace_of()
            if tr is not None:
                tr.write(self, freed)
        except Exception as e:
            # the worker already reads these blocks as holes; vLLM frees them with
            # their request
            log.failed("returning evicted blocks to vLLM's pool", e)
        return orig(self, scheduler_output, model_runner_output)
    return update_from_output


def wrap_cache_blocks(orig):
    def cache_blocks(self, request, *args, **kwargs):
        try:
            fault("cache")
            if getattr(request, EVICTED_FLAG, False):
                return None
            blocks = self.req_to_blocks.get(request.request_id)
            if blocks and has_hole(blocks):
                setattr(request, EVICTED_FLAG, True)
                return None
        except Exception as e:
            # not caching is always correct; caching a block over a hole never is
            log.failed("the prefix-cache guard", e)
            return None
        return orig(self, request, *args, **kwargs)
    return cache_blocks


def wrap_free_blocks(orig):
    def _free_blocks(self, request):
        mgr = self.kv_cache_manager
        try:
            if settings.get().sessions:
                store_of(mgr).retain(request, _managers(mgr), self.block_size, fault)
        except Exception as e:
            # retain freed whatever it had taken; vLLM frees the rest as usual
            log.failed("retaining request %s" % request.request_id, e)
        return orig(self, request)
    return _free_blocks


def wrap_schedule(orig):
    def schedule(self, *args, **kwargs):
        st = store_of(self.kv_cache_manager)
        s = settings.get()
        p = None
        try:
            fault("expire")
            st.expire()
            if s.pool:
                p = pool_of(self.kv_cache_manager, s)
                p.begin_step()
        except Exception as e:
            log.failed("expiring sessions", e)
        out = orig(self, *args, **kwargs)
        try:
            if s.tier_mb > 0:
                tier.spares_of(self.kv_cache_manager, s).top_up(out)
        except Exception as e:
            log.failed("granting spare blocks for restores", e)
        try:
            if p is not None:
                p.end_step(out)
            ev = st.take_events()
            if ev is not None:
                setattr(out, EVENTS_ATTR, ev)
                tr = trace_of()
                if tr is not None:
                    tr.sessions(st, ev, p)
            metrics.publish(st, p)
        except Exception as e:
            log.failed("the step's session events", e)
        return out
    return schedule


def wrap_request_blocks_can_be_freed(orig):
    """Pool mode: vLLM asks this before it preempts a request to make room; a
    request held for the daemon (pool.Pool.failed) answers no, once, and vLLM
    then leaves the request for the next step instead of preempting."""
    def _request_blocks_can_be_freed(self, request):
        p = getattr(self.kv_cache_manager, "_memdecay_pool", None)
        if p is not None and p.hold_now:
            p.hold_now = False
            return False
        return orig(self, request)
    return _request_blocks_can_be_freed


def wrap_get_computed_blocks(orig):
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks

    # vLLM 0.33 added max_cache_hit_length (its scheduler passes it positionally);
    # 0.32's scheduler passes nothing more than the request
    def get_computed_blocks(self, request, *args, **kwargs):
        found = orig(self, request, *args, **kwargs)
        try:
            fault("match")
            if not settings.get().sessions:
                return found
            limit = args[0] if args else kwargs.get("max_cache_hit_length")
            blocks, n_hit, boundary = found
            bs = _block_size(self)
            st = store_of(self)
            x, n = st.match(request, bs)
            if x is not None and limit is not None and n > limit:
                # vLLM asks for at most `limit` cached tokens (the tokens past it must
                # be computed): the session is not adopted, and stays for a later turn
                x, n = None, 0
            if x is not None and n >= n_hit:
                # a KVCacheBlocks of its own: vLLM shares one empty instance
                if self.enable_caching:
                    hit = KVCacheBlocks(st.hit_blocks(x, n, bs))
                    setattr(hit, HIT_ATTR, (x, n, "hit"))
                else:
                    hit = KVCacheBlocks(tuple(() for _ in range(self.num_kv_cache_groups)))
                    setattr(hit, HIT_ATTR, (x, n, "install"))
                return hit, n, 0
            if x is not None and extends(x, blocks, n, bs):
                # vLLM's prefix cache holds the session's own blocks and more (another
                # request computed the same history since): the request takes vLLM's
                # longer hit and still goes on with the session's daemon sequence
                setattr(blocks, HIT_ATTR, (x, n, "extend"))
        except Exception as e:
            log.failed("matching request %s to a session" % request.request_id, e)
        return found
    return get_computed_blocks


def wrap_allocate_slots(orig):
    def allocate_slots(self, request, num_new_tokens, num_new_computed_tokens=0,
                       new_computed_blocks=None, *args, **kwargs):
        hit = getattr(new_computed_blocks, HIT_ATTR, None) if new_computed_blocks else None
        rest = (num_new_tokens, num_new_computed_tokens, new_computed_blocks, args, kwargs)
        if hit is None:
            out = orig(self, request, num_new_tokens, num_new_computed_tokens,
                       new_computed_blocks, *args, **kwargs)
            if out is None:
                out, _ = _short(self, orig, None, request, *rest)
            else:
                _allocated(self, request)
            return out
        x, n, how = hit
        st = store_of(self)
        mgrs = None
        try:
            fault("adopt")
            mgrs = _managers(self)
            bs = _block_size(self)
            if st.sessions.get(x.key) is not x:
                if how == "extend":         # vLLM's hit stands without the session
                    x = None
                else:
                    # released since the match with n tokens counted as computed: the
                    # request waits a step, and its next lookup finds no session
                    return None
            elif how == "install":
                st.install(request, x, n, mgrs, bs)
                new_computed_blocks = self.empty_kv_cache_blocks
            if x is not None and how != "extend" and (x.evicted or x.holes()):
                setattr(request, EVICTED_FLAG, True)    # before vLLM caches anything of it
        except Exception as e:
            log.failed("adopting a session for request %s" % request.request_id, e)
            return _adopt_failed(st, x, request, mgrs, how)
        out = orig(self, request, num_new_tokens, num_new_computed_tokens, new_computed_blocks,
                   *args, **kwargs)
        held = False
        if out is None:
            rest = (num_new_tokens, num_new_computed_tokens, new_computed_blocks, args, kwargs)
            out, held = _short(self, orig, x, request, *rest)
        else:
            _allocated(self, request)
        if x is None:
            return out
        try:
            if out is None:
                if held and how == "hit":
                    # the session stays: the request waits for the daemon, and its
                    # next lookup flags it again
                    if not request.num_computed_tokens:
                        setattr(request, EVICTED_FLAG, False)
                    return None
                return _adopt_failed(st, x, request, mgrs, how)
            st.consume(request, x, n, bs, moved=(how == "install"))
        except Exception as e:
            log.failed("adopting a session for request %s" % request.request_id, e)
        return out
    return allocate_slots


def _short(kv, orig, keep, request, *rest):
    """allocate_slots failed.  Pool mode first asks memdecayd for room
    (pool.py): the request is held and (None, True) returned while the daemon
    can still free.  Then retained sessions are released, least recently used
    first, and vLLM's own path (preemption) follows: (blocks or None, False)."""
    s = settings.get()
    if s.pool:
        try:
            p = pool_of(kv, s)
            if p.failed(request.request_id, needed(kv, request, *rest),
                        request.status.name == "RUNNING"):
                return None, True
        except Exception as e:
            log.failed("asking memdecayd for room", e)
    return _retry_releasing(kv, orig, keep, request, *rest), False


def _allocated(kv, request):
    p = getattr(kv, "_memdecay_pool", None)
    if p is not None and p.held:
        p.allocated(request.request_id)


def needed(kv, request, num_new_tokens, num_new_computed_tokens, new_computed_blocks, args,
           kwargs):
    """Blocks a failed allocation needed (at least 1): those its tokens need past
    what the request holds and what its hit brings, counting what vLLM asks of
    a waiting request (the whole prompt when it must fit at admission, the
    watermark, reserved blocks)."""
    bs = _block_size(kv)
    have = len(_managers(kv)[0].req_to_blocks.get(request.request_id, ()))
    hit = len(new_computed_blocks.blocks[0]) if new_computed_blocks is not None and \
        new_computed_blocks.blocks else 0
    total = (request.num_computed_tokens + num_new_computed_tokens + num_new_tokens
             + (kwargs.get("num_lookahead_tokens") or 0))
    extra = kwargs.get("reserved_blocks") or 0
    if kwargs.get("full_sequence_must_fit"):
        total = max(total, min(request.num_tokens, kv.max_model_len))
    if kwargs.get("has_scheduled_reqs") and request.status.name in ("WAITING", "PREEMPTED"):
        extra += getattr(kv, "watermark_blocks", 0) or 0
    return max(1, -(-total // bs) - have - hit + extra)


def _retry_releasing(kv, orig, keep, request, *rest):
    """An allocation failed: retained sessions (but `keep`) are released, least
    recently used first, and it is tried again, before vLLM preempts or stops
    admitting.  None when nothing was left to release."""
    num_new_tokens, num_new_computed_tokens, new_computed_blocks, args, kwargs = rest
    try:
        st = store_of(kv)
    except Exception as e:
        log.failed("releasing sessions under pressure", e)
        return None
    out = None
    while out is None:
        try:
            if not st.release_lru("pressure", keep=keep):
                return None
        except Exception as e:
            log.failed("releasing sessions under pressure", e)
            return None
        out = orig(kv, request, num_new_tokens, num_new_computed_tokens, new_computed_blocks,
                   *args, **kwargs)
    return out


def _adopt_failed(st, x, request, mgrs, how):
    """The adopter was not allocated: its session is given back (released) so
    that its next lookup prefills in full; nothing is left installed."""
    try:
        if how == "install" and mgrs is not None:
            st.rollback(request, mgrs)
        if getattr(request, EVICTED_FLAG, False) and not request.num_computed_tokens:
            setattr(request, EVICTED_FLAG, False)
        if x is not None and how != "extend":
            st.give_back(x)
    except Exception as e:
        log.failed("giving a session back", e)
    return None


def wrap_reset_prefix_cache(orig):
    def reset_prefix_cache(self, *args, **kwargs):
        try:
            st = store_of(self)
            for key in list(st.sessions):
                st.release(key, "reset")
        except Exception as e:
            log.failed("releasing sessions for a prefix-cache reset", e)
        return orig(self, *args, **kwargs)
    return reset_prefix_cache
