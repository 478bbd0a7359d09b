"""Engine core: the session store, an agent's bounded KV cache kept between turns.

This module is the store alone: which finished request is retained, which new
request may adopt which session, and the block accounting of both.  It calls
nothing of vLLM but the block pool's free_blocks and the block lists it is
handed; the wrappers that call it from vLLM's scheduler are scheduler.py's.
docs/vllm.md "Sessions" is the contract; the rules in short:

  retained  a request under a MemDecay budget (in pool mode, any request)
            that finishes (stopped, length capped, or aborted: vLLM's front
            end ends a stop-string turn by aborting it) keeps its whole
            blocks, holes included;
  adopted   the next request of the session whose prompt starts with the
            retained tokens takes them: the common token prefix, rounded down
            to a block, at most its length - 1.  A request without a session
            id adopts only a match that covers the retained request's whole
            prompt (its full blocks): a shorter match, say a shared system
            prompt, is served by vLLM's prefix cache as any request's would be,
            and leaves the session alone;
  tenancy   the same session id (or none on both sides), cache_salt, LoRA
            adapter (vLLM's prefix hash keys it by name and path) and policy;
  replaced  a newer retention replaces an older session of the same tenancy
            only when its tokens cover the older one's prompt (it is the same
            conversation, one turn on); a same-id request with other tokens
            leaves the older session to its TTL;
  bounds    MEMDECAY_VLLM_SESSION_SHARE of the pool (least recently used
            first), MEMDECAY_VLLM_SESSION_TTL_S idle (a match refreshes it), and
            an adopter whose allocation fails gives its session back.

Blocks: a session holds one reference to each of its non-null blocks, taken
over from the finished request (its block lists, read before vLLM's
pop_blocks_for_free, so a hole keeps its place).  Every path that ends a
session frees exactly those references once (`_free`)."""
import collections
import itertools
import time

from . import fields, regions, settings

EVENTS_ATTR = "memdecay_sessions"       # on SchedulerOutput: this step's events
HIT_ATTR = "_memdecay_session"          # on a KVCacheBlocks hit: (session, tokens, how)
EVICTED_FLAG = "_memdecay_evicted"      # on a Request: its new blocks never enter the prefix cache

RETAINED_STATUSES = ("FINISHED_STOPPED", "FINISHED_LENGTH_CAPPED", "FINISHED_ABORTED")
RELEASE_REASONS = ("pressure", "cap", "expired", "reset", "stale", "adopt_failed", "replaced")
ADOPTED_MEMORY = 4096                   # adopted keys remembered for late eviction pairs


def request_budget(request, s):
    args = getattr(request.sampling_params, "extra_args", None) or {}
    b = args.get(regions.BUDGET_KEY, s.budget_tokens)
    return b if isinstance(b, int) and not isinstance(b, bool) and b > 0 else 0


def keeps(request, s):
    """Whether a request is one whose blocks become a session: under a budget
    of its own or the operator's, or any request in pool mode."""
    return s.pool or request_budget(request, s) > 0


def request_policy(request, s):
    args = getattr(request.sampling_params, "extra_args", None) or {}
    return args.get(regions.POLICY_KEY, s.policy)


def session_id(request):
    sid = getattr(request, "session_id", None)
    return sid if isinstance(sid, str) and 0 < len(sid) <= fields.ID_MAX else None


def lora_key(request):
    """The LoRA adapter as vLLM's prefix hash keys it (name and path)."""
    lr = getattr(request, "lora_request", None)
    if lr is None:
        return None
    return (getattr(lr, "lora_name", None), getattr(lr, "lora_path", None))


def tenancy(request, s):
    return (session_id(request), getattr(request, "cache_salt", None), lora_key(request),
            request_policy(request, s))


def plain(request):
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
    __slots__ = ("key", "tenancy", "tokens", "cover", "blocks", "evicted", "budget", "turns",
                 "last_used", "held")

    def __init__(self, key, tenancy, tokens, cover, blocks, evicted, budget, turns):
        self.key = key                    # the request id it was retained under
        self.tenancy = tenancy            # (session id, cache_salt, LoRA, policy)
        self.tokens = tokens              # the tokens the kept blocks hold, block-aligned
        self.cover = cover                # tokens an id-less adopter must match: the prompt's
        self.blocks = blocks              # per KV cache group: the kept blocks (nulls = holes)
        self.evicted = evicted
        self.budget = budget
        self.turns = turns
        self.last_used = time.monotonic()
        self.held = sum(1 for g in blocks for b in g if not b.is_null)

    @property
    def session_id(self):
        return self.tenancy[0]

    def holes(self):
        return [i for i, b in enumerate(self.blocks[0]) if b.is_null] if self.blocks else []


class Store:
    """The retained sessions of one KVCacheManager, least recently used first."""

    def __init__(self, manager, s=None):
        self.s = s or settings.get()
        self.manager = manager
        self.sessions = collections.OrderedDict()
        self.turns = {}                   # request id of an adopter -> its session's turns
        self.adopted = collections.OrderedDict()   # adopted session key -> adopter request id
        self.events = self._no_events()
        self.counters = {"retained": 0, "adopted": 0, "adopted_tokens": 0, "refused": 0,
                         "late_evictions": 0}
        self.counters.update(("released_" + r, 0) for r in RELEASE_REASONS)

    # ---- bookkeeping ----
    def _pool(self):
        return self.manager.block_pool

    def held_blocks(self):
        return sum(x.held for x in self.sessions.values())

    def cap_blocks(self):
        """Blocks the sessions may hold together: MEMDECAY_VLLM_SESSION_SHARE of
        the pool; in pool mode the whole pool (memdecayd evicts from them, and
        vLLM's allocations release them, pool.py)."""
        share = 1.0 if self.s.pool else self.s.session_share
        return int(share * (self._pool().num_gpu_blocks - 1))

    def _free(self, groups):
        pool = self._pool()
        for g in groups:
            if g:
                pool.free_blocks(reversed(g))

    def release(self, key, why):
        x = self.sessions.pop(key, None)
        if x is None:
            return False
        self._free(x.blocks)
        self.events["released"].append(key)
        self.counters["released_" + why] += 1
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

    @staticmethod
    def _no_events():
        # ids: the session id of each request retained or adopting (memdecayctl sessions)
        return {"retained": [], "adopted": {}, "released": [], "ids": {}}

    def take_events(self):
        ev = self.events
        if not (ev["retained"] or ev["adopted"] or ev["released"]):
            return None
        self.events = self._no_events()
        return ev

    # ---- a finished request becomes a session ----
    def retain(self, request, managers, bs, fault=None):
        """Moves a finished request's blocks into a session.  False: not one to
        keep, nothing taken (the caller frees it as vLLM would).  True: its
        blocks are the store's (kept, or freed here).  Whatever raises after
        the blocks were taken frees them before it propagates."""
        budget = request_budget(request, self.s)
        turns = self.turns.pop(request.request_id, 0) + 1
        if (not keeps(request, self.s) or request.status.name not in RETAINED_STATUSES
                or not plain(request)):
            return False
        ten = tenancy(request, self.s)
        if self.s.session_ids == "require" and ten[0] is None:
            return False
        n_keep = request.num_computed_tokens // bs
        if n_keep < 1:
            return False
        tokens = list(itertools.islice(request.all_token_ids, n_keep * bs))
        cover = min((max(request.num_prompt_tokens - 1, 0) // bs) * bs, n_keep * bs)
        evicted = bool(getattr(request, EVICTED_FLAG, False))
        # The request's block lists as they stand, holes in place, taken before
        # vLLM's pop_blocks_for_free: its returned list is not the block table on
        # every version (0.33 drops leading null blocks, which would shift every
        # kept block of a request whose first block was evicted).  The pop still
        # runs, for vLLM's own bookkeeping; the references move to this list.
        popped = []
        try:
            for mgr in managers:
                blocks = list(mgr.req_to_blocks.get(request.request_id, ()))
                mgr.pop_blocks_for_free(request.request_id)
                popped.append(blocks)
        except BaseException:
            self._free(popped)          # the groups already taken; vLLM frees the others
            raise
        owned = popped                  # what this call frees should anything below raise
        try:
            if fault:
                fault("retain")
            kept = [list(g[:n_keep]) for g in popped]
            owned = kept
            self._free([g[n_keep:] for g in popped])        # a partial last block is not kept
            if any(len(g) < n_keep for g in kept):
                owned = None
                self._free(kept)
                return True                                  # freed, nothing retained
            x = Session(request.request_id, ten, tokens, cover, kept,
                        evicted or any(b.is_null for g in kept for b in g), budget, turns)
            cap = self.cap_blocks()
            if x.held > cap:
                owned = None
                self._free(kept)
                self.counters["refused"] += 1
                return True
            while self.held_blocks() + x.held > cap and self.release_lru("cap"):
                pass
            for key in [k for k, o in self.sessions.items() if self._replaces(x, o)]:
                self.release(key, "stale")
            # the same request id retained twice: the older one goes
            self.release(x.key, "replaced")
            owned = None                                     # the session's from here
            self.sessions[x.key] = x
        finally:
            if owned is not None:
                self._free(owned)
        self.events["retained"].append(x.key)
        if x.session_id is not None:
            self.events["ids"][x.key] = x.session_id
        self.counters["retained"] += 1
        return True

    @staticmethod
    def _replaces(x, o):
        """A newer session x replaces o: the same tenancy, and x's tokens cover
        o's prompt (the same conversation, a turn on)."""
        return (o.tenancy == x.tenancy and o.cover > 0
                and common_prefix(o.tokens, x.tokens, 16) >= o.cover)

    # ---- a new request adopts one ----
    def match(self, request, bs):
        """(session, N) of the best session request may adopt, or (None, 0).  A
        match refreshes the session's TTL."""
        if not self.sessions or not plain(request) or not keeps(request, self.s):
            return None, 0          # a request without a budget is served as vLLM serves it
        ten = tenancy(request, self.s)
        if ten[0] is None and self.s.session_ids == "require":
            return None, 0
        prompt = None
        limit = request.num_tokens - 1
        best, best_n = None, 0
        for x in self.sessions.values():
            if x.tenancy != ten:
                continue
            if prompt is None:
                prompt = list(request.all_token_ids)
            if x.tokens[:bs] != prompt[:bs]:
                continue
            n = min(common_prefix(x.tokens, prompt, bs), limit) // bs * bs
            if ten[0] is None and n < x.cover:
                continue            # id-less: only the whole retained prompt adopts
            if n > best_n:
                best, best_n = x, n
        if best is not None:
            best.last_used = time.monotonic()
        return best, best_n

    def hit_blocks(self, x, n_tokens, bs):
        """The session's first n_tokens worth of blocks, per group: the hit that
        vLLM's own allocate_slots takes references to."""
        return tuple(g[:n_tokens // bs] for g in x.blocks)

    def install(self, request, x, n_tokens, managers, bs):
        """Without prefix caching (vLLM then refuses a hit of blocks): puts the
        session's first n_tokens worth of blocks into request's block lists
        (its references move with them: no touch)."""
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
        self.adopted[x.key] = request.request_id
        while len(self.adopted) > ADOPTED_MEMORY:
            self.adopted.popitem(last=False)
        self.events["adopted"][request.request_id] = (x.key, n_tokens)
        if x.session_id is not None:
            self.events["ids"][request.request_id] = x.session_id
        self.counters["adopted"] += 1
        self.counters["adopted_tokens"] += n_tokens

    def give_back(self, x):
        """An adopter could not be allocated even with every other session
        released: its session goes too, and it prefills in full next step."""
        return self.release(x.key, "adopt_failed")

    def apply_evicted(self, key, idx):
        """A block the daemon evicted from request `key`, which is no longer
        running.  Returns (blocks freed, adopter): adopter is the request id that
        adopted session `key` since (the pair arrived after the adoption: the
        caller frees the block from the adopter), else None."""
        x = self.sessions.get(key)
        if x is None:
            adopter = self.adopted.get(key)
            if adopter is not None:
                self.counters["late_evictions"] += 1
            return 0, adopter
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
        return freed, None

    def apply_restored(self, key, idx, block):
        """A block the worker restored from the host tier (tier.py) into request
        `key`, which is no longer running.  Returns (placed, adopter): placed
        when it went into the retained session's hole; adopter as apply_evicted's."""
        x = self.sessions.get(key)
        if x is None:
            return False, self.adopted.get(key)
        g = x.blocks[0] if x.blocks else None
        if g is None or not 0 <= idx < len(g) or not g[idx].is_null:
            return False, None
        g[idx] = block
        x.held += 1
        return True, None

    def snapshot(self):
        """The numbers the metrics export (metrics.py)."""
        return {"sessions": len(self.sessions), "blocks": self.held_blocks(),
                "counters": dict(self.counters)}

    def describe(self):
        now = time.monotonic()
        return [{"key": x.key, "session_id": x.session_id, "tokens": len(x.tokens),
                 "blocks": x.held, "holes": len(x.holes()), "turns": x.turns,
                 "idle_s": round(now - x.last_used, 3)}
                for x in self.sessions.values()]


def store_of(manager):
    st = getattr(manager, "_memdecay_store", None)
    if st is None:
        st = Store(manager)
        manager._memdecay_store = st
    return st
