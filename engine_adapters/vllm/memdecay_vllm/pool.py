"""Pool mode: memdecayd manages vLLM's whole KV pool (docs/vllm.md "Pool mode").

MEMDECAY_VLLM_POOL=on.  Where the pool has room nothing is evicted; where it is
short, memdecayd frees the lowest-scored pages of the whole engine, running
requests and retained sessions alike, before vLLM would preempt.

The worker (`Reserve`).  It attaches with an engine page budget of
floor(MEMDECAY_VLLM_POOL_WATERMARK x the pool's usable blocks) x pages per
block, and tracks every request and every retained session as a daemon
sequence, so the daemon's engine scope counts what the pool holds.  At the end
of every step that can report, it waits (at most MEMDECAY_VLLM_SETTLE_MS) while
the engine holds more than that budget, applying the daemon's commands as they
come.  When an allocation failed in the engine core (the blocks it
needed ride on the step's SchedulerOutput), the worker first opens pages for
what that need exceeds the pool's headroom above the budget by, pinned, in a
reserve sequence, so that the daemon sees the demand and frees room for it; the
reserve is freed once the wait ends.  An idle retained session's clock advances at
MEMDECAY_VLLM_POOL_IDLE_TOKENS_S tokens a second of wall time: its pages age
against the running requests' as if it decoded at that rate.

The engine core (`Pool`).  When vLLM's allocate_slots fails, the order is:
  1. memdecayd frees pages: the blocks the allocation needs go to the
     worker, and the request
     waits (a running one is held, not preempted) for at most
     MEMDECAY_VLLM_POOL_HOLD_STEPS steps, while the worker last reported the
     daemon attached and still able to free (its last wait neither timed out
     nor found nothing more to evict);
  2. retained sessions are released whole, least recently used first;
  3. vLLM preempts, as it would without the plugin.
Each step of that order is counted (`counters`, the metrics)."""
import collections

import memdecay

from . import log
from .log import logger as _log
from .mirror import PAGE_TOKENS

SHORT_ATTR = "memdecay_pool"            # on SchedulerOutput: {"need": blocks}
STATE_ATTR = "memdecay_pool_state"      # on ModelRunnerOutput: the worker's last wait
# the worker's last wait left nothing the daemon could still free
SPENT = ("UNREACHABLE", "TIMEOUT", "DETACHED")
COUNTERS = ("short_steps", "needed_blocks", "held", "held_out", "preempted")


def budget_blocks(num_blocks, watermark):
    """Blocks of a vLLM pool of num_blocks (block 0 is vLLM's null block) that
    the engine may hold before memdecayd evicts."""
    return max(1, int(watermark * max(num_blocks - 1, 1)))


# ---- worker ----

class Reserve:
    """The worker's side: the wait for the engine's page budget, with what the
    engine core could not allocate held by pinned pages of sequence `seq`."""

    def __init__(self, client, seq, ppb, usable_blocks, settle_ms, counters):
        self.client = client
        self.seq = seq
        self.ppb = ppb
        self.usable = usable_blocks
        self.settle_ms = settle_ms
        self.counters = counters
        self.need = 0               # blocks failed allocations needed this step
        self.state = None           # the last wait, for the engine core

    def reserve_pages(self, prm):
        """Pages to reserve for `need` blocks: the daemon holds the engine to its
        budget, which leaves usable - budget blocks free besides, so the reserve
        is what the need exceeds that by (at least one block)."""
        if not self.need:
            return 0
        budget_blocks = prm["budget_engine_pages"] // self.ppb
        headroom = max(0, self.usable - budget_blocks) if budget_blocks else 0
        return min(max(1, self.need - headroom), self.usable) * self.ppb

    def settle(self, apply, prm):
        """The step's wait: the need reserved, the daemon's commands applied while
        the engine is over its page budget, the reserve freed.  Returns the
        state the engine core reads."""
        c = self.client
        slots = []
        short = self.reserve_pages(prm)
        self.need = 0
        try:
            if short:
                labels = self._pinned(prm)
                try:
                    for k in range(short):
                        slot, _ = c.page_open(self.seq, k * PAGE_TOKENS, PAGE_TOKENS, labels)
                        slots.append(slot)
                except memdecay.MemDecayError as e:
                    # the page table is full: the wait asks for what was reserved
                    log.failed("reserving %d pages for the engine core" % short, e)
                self.counters["pool_reserved_pages"] += len(slots)
            r = c.settle_engine(0, 0, self.settle_ms, apply)
        finally:
            for slot in slots:
                c.page_free(slot, memdecay.FINISHED)
            if slots:
                c.seq_end(self.seq)
        if r.waited:
            self.counters["pool_waits"] += 1
        self.state = {"outcome": r.outcome.name, "applied": r.applied,
                      "live": c.live_pages(), "budget": prm["budget_engine_pages"]}
        return self.state

    def _pinned(self, prm):
        """Labels of a page of 16 tokens of the first pinned region."""
        mask = prm["pinned_mask"] or 1
        region = (mask & -mask).bit_length() - 1
        return memdecay.labels([region] * PAGE_TOKENS)


# ---- engine core ----

class Pool:
    """The engine core's side, one per KVCacheManager: what the step's failed
    allocations needed, the requests held for the daemon, the order before
    preemption."""

    def __init__(self, s):
        self.s = s
        self.need = 0                   # blocks failed allocations needed this step
        self.hold_now = False           # the next preemption check says no (held)
        self.held = collections.OrderedDict()   # request id -> steps held in a row
        self.state = None               # the worker's last wait
        self.counters = dict.fromkeys(COUNTERS, 0)

    def begin_step(self):
        self.hold_now = False
        self.need = 0

    def end_step(self, out):
        """The step's need onto its SchedulerOutput; its preemptions counted."""
        self.hold_now = False
        if self.need:
            self.counters["short_steps"] += 1
            setattr(out, SHORT_ATTR, {"need": self.need})
        pre = getattr(out, "preempted_req_ids", None)
        if pre:
            self.counters["preempted"] += len(pre)

    def daemon_can_free(self):
        st = self.state
        return st is None or st.get("outcome") not in SPENT

    def failed(self, request_id, need_blocks, running):
        """An allocation that needed need_blocks failed.  True: the request waits
        for the daemon (held this step; a running one is not preempted:
        `hold_now`); False: the daemon cannot help (or the wait is over),
        sessions go next, then vLLM's preemption."""
        self.need += need_blocks
        self.counters["needed_blocks"] += need_blocks
        n = self.held.get(request_id, 0)
        if n < self.s.pool_hold_steps and self.daemon_can_free():
            self.held[request_id] = n + 1
            self.held.move_to_end(request_id)
            while len(self.held) > 4096:
                self.held.popitem(last=False)
            self.counters["held"] += 1
            self.hold_now = running
            return True
        self.counters["held_out"] += 1
        return False

    def allocated(self, request_id):
        self.held.pop(request_id, None)

    def snapshot(self):
        return {"counters": dict(self.counters), "worker": self.state}


def pool_of(manager, s):
    p = getattr(manager, "_memdecay_pool", None)
    if p is None:
        p = Pool(s)
        manager._memdecay_pool = p
        _log().info("memdecay_vllm: pool mode: memdecayd evicts above %.0f%% of the %d-block "
                    "pool", 100 * s.pool_watermark, manager.block_pool.num_gpu_blocks)
    return p
