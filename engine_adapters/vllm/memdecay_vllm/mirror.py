"""Worker: the page mirror, vLLM's KV blocks as memdecayd pages.

Each tracked request (`Req`) is one daemon sequence of the worker's
attachment, and the request's own budget and policy (memdecay_budget_tokens,
memdecay_policy) are that sequence's options: the one path a request's fields
take to the daemon.  Each KV block of B tokens is B/16 daemon pages, declared
as vLLM schedules its tokens and labelled with the tokens' regions (api.py,
offline.py); the blocks evicted so far are its holes.  `Mirror` holds the
running requests, the finished ones retained for their session's next turn
(sessions.py), and what a new request adopts from them."""
import time

import memdecay
from memdecay import Region

from . import log

PAGE_TOKENS = memdecay.PAGE_TOKENS_MAX


def pinned(regions, mask):
    """Whether any of a page's token regions is pinned under the parameter block's mask."""
    return any((mask >> x) & 1 for x in set(regions))


class Req:
    __slots__ = ("id", "seq", "prompt_regions", "n", "pages", "holes", "step_tokens",
                 "acc", "acc_layers", "kept", "may_evict", "idle_t", "idle_acc",
                 "tier", "block_ids", "est", "est_order", "est_layers", "est_need", "need",
                 "since_est", "est_now", "est_prefill")

    def __init__(self, req_id, seq, prompt_regions):
        self.id = req_id
        self.seq = seq
        self.prompt_regions = prompt_regions
        self.n = 0                 # tokens declared
        self.pages = {}            # page index -> [slot, gen, regions]
        self.holes = set()         # evicted block indices
        self.step_tokens = 0
        self.acc = None            # this step's token mass over the kept tokens
        self.acc_layers = 0
        self.kept = None           # original block indices the attention saw, in order
        # whether the daemon may evict its pages (a budget of its own or the engine's),
        # read every step: statistics are computed only for requests it may evict
        self.may_evict = True
        self.idle_t = 0.0          # retained (pool mode): when its clock last advanced
        self.idle_acc = 0.0        # and the fraction of a token it is owed
        # the host tier (tier.py): block index -> its tier page's slot; the block
        # ids vLLM gave it when it finished (a retained session's); the step's
        # estimate for its tier blocks and when the tier was last scored
        self.tier = {}
        self.block_ids = None
        self.est = None
        self.est_order = None
        self.est_layers = 0
        self.est_need = None       # each tier block's need (head_blocks), over layers
        self.need = None           # each kept block's need, in r.kept's order
        self.since_est = 0
        self.est_now = False
        self.est_prefill = False

    def region_at(self, pos):
        r = self.prompt_regions
        return r[pos] if pos < len(r) else int(Region.ASSISTANT)


class Mirror:
    """The tracked requests' sequences and pages in `client` (a memdecay.Client
    of max_seqs sequences); counters: the worker's."""

    def __init__(self, client, max_seqs, block_size, counters):
        self.client = client
        self.tier = None           # tier.Tier when the worker keeps a host tier
        self.finished_blocks = {}  # request id -> its block ids as it finished (this step)
        self.block_size = block_size
        self.counters = counters
        self.free_seqs = list(range(max_seqs - 1, -1, -1))
        self.owner = {}            # slot -> (req, page index, gen)
        self.sibling_freed = set()  # (slot, gen) freed with a commanded page of their block
        self.reqs = {}
        self.retained = {}         # sessions.py: finished requests kept for their next turn
        self.adopting = {}         # a new request id -> (retained id, tokens adopted)
        self.session_ids = {}      # an adopting request id -> its session id


    def start(self, req_id, reg, budget, policy):
        """A new sequence for req_id with its options (budget, policy: None for
        the engine's), or None when every sequence is taken.  Raises
        memdecay.MemDecayError or ValueError when the options are refused."""
        if not self.free_seqs:
            self.release_oldest()
        if not self.free_seqs:
            return None
        seq = self.free_seqs.pop()
        try:
            self.client.seq_set_options(seq, policy=policy, budget=budget)
        except Exception:
            self.free_seqs.append(seq)
            raise
        r = Req(req_id, seq, reg)
        self.reqs[req_id] = r
        return r

    def declare(self, r, end):
        """Declares positions [r.n, end) in pages of 16, opening or growing each."""
        c = self.client
        pos = r.n
        while pos < end:
            pidx = pos // PAGE_TOKENS
            stop = min(end, (pidx + 1) * PAGE_TOKENS)
            pg = r.pages.get(pidx)
            new = [r.region_at(p) for p in range(pos, stop)]
            if pg is None:
                slot, gen = c.page_open(r.seq, pos, len(new), memdecay.labels(new))
                r.pages[pidx] = [slot, gen, new]
                self.owner[slot] = (r, pidx, gen)
            else:
                pg[2].extend(new)
                c.page_grow(pg[0], len(pg[2]), memdecay.labels(pg[2]))
            pos = stop
        r.n = end

    def drop(self, req_id):
        """Ends req_id's sequence: its pages leave the daemon, its options reset."""
        r = self.reqs.pop(req_id, None)
        if r is None:
            return
        for pg in r.pages.values():
            self.owner.pop(pg[0], None)
        if self.tier is not None:
            self.tier.forget(r)     # seq_end frees its tier pages in the daemon
        self.client.seq_end(r.seq)
        self.free_seqs.append(r.seq)

    # ---- sessions (sessions.py): a finished request's sequence goes on ----
    def retain(self, req_id, session_id=None):
        """req_id finished and is retained: its sequence goes on, marked retained
        (with its session id's first bytes) for memdecayctl sessions."""
        r = self.reqs.pop(req_id, None)
        if r is not None:
            r.step_tokens = 0
            r.acc = r.kept = None
            r.idle_t = time.monotonic()
            r.idle_acc = 0.0
            r.block_ids = self.finished_blocks.get(req_id)
            self.retained[req_id] = r
            self._mark(r, True, session_id)

    def _mark(self, r, retained, session_id):
        try:
            self.client.seq_set_session(r.seq, retained, session_id)
        except Exception as e:          # the operator's view only: never the request
            log.failed("marking sequence %d %s" % (r.seq, "retained" if retained else "running"),
                       e)

    def idle_steps(self, rate):
        """Pool mode: [(seq, tokens)] that advance each retained session's clock
        by `rate` tokens a second of wall time since the last call (whole
        tokens; the fraction carries over)."""
        if rate <= 0 or not self.retained:
            return []
        now = time.monotonic()
        out = []
        for r in self.retained.values():
            r.idle_acc += rate * (now - r.idle_t)
            r.idle_t = now
            n = int(r.idle_acc)
            if n > 0:
                r.idle_acc -= n
                out.append((r.seq, n))
        return out

    def release(self, key):
        r = self.retained.pop(key, None)
        if r is not None:
            self.reqs[key] = r
            self.drop(key)

    def release_oldest(self):
        key = next(iter(self.retained), None)
        if key is not None:
            self.release(key)

    def adopt(self, req_id, reg, budget, policy, key, n_tokens):
        """The retained sequence `key` goes on as request req_id, with req_id's
        options (budget, policy): the same daemon sequence and pages up to the
        cut (n_tokens, block-aligned), the pages past it freed, the holes kept.
        None when there is none to go on with (the caller then starts a
        sequence and seeds it from vLLM's blocks).  Raises as `start` when the
        options are refused (the retained sequence ends then)."""
        r = self.retained.pop(key, None)
        if r is None:
            return None
        try:
            self.client.seq_set_options(r.seq, policy=policy, budget=budget)
        except Exception:
            self.reqs[key] = r
            self.drop(key)
            raise
        cut_page = n_tokens // PAGE_TOKENS
        for pidx in [p for p in r.pages if p >= cut_page]:
            pg = r.pages.pop(pidx)
            self.owner.pop(pg[0], None)
            self.client.page_free(pg[0], memdecay.FINISHED)
        r.holes = {b for b in r.holes if b < n_tokens // self.block_size}
        if self.tier is not None:
            self.tier.cut(r, n_tokens // self.block_size)
        r.block_ids = None          # the adopter's are vLLM's (its CachedRequestState)
        r.id = req_id
        r.prompt_regions = reg
        r.n = n_tokens
        self.reqs[req_id] = r
        self._mark(r, False, self.session_ids.pop(req_id, None))
        self.counters["sessions_adopted"] += 1
        return r

    def seed(self, r, st, n_tokens):
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
            self.declare(r, (b + 1) * bs)
        r.n = n_tokens
        self.counters["sessions_seeded"] += 1
