"""Worker: a step published to memdecayd, and its commands applied.

One md_publish_batch a step carries each scheduled request's clock and the
mass and refresh bits of every page the daemon may evict (reduce.py).  The
daemon's evict commands reach vLLM through libmemdecay's settle, which applies
what is pending through `apply` and, while a request holds more than
max(budget, floor) + one block (the floor: what the daemon never evicts, from
the library; the block: the one being written, which vLLM cannot free), waits
up to settle_ms for the daemon's decision.  `apply` drops a commanded page's
whole block (a block is the unit vLLM frees, so its sibling pages go with it),
writes the null block into the worker's block table there and collects the
pair (request, block); the caller sends the pairs to the engine core on the
step's output, where scheduler.py returns the blocks to vLLM's pool."""
import json
import os
import time

import memdecay

from . import reduce
from .holes import zero_in_worker
from .mirror import PAGE_TOKENS, pinned


class Commands:
    """Publish and command application for the requests of `mirror` through
    client, in the worker whose model runner is `runner`; counts into
    `counters` and writes every evicted block to `trace` (a file, or None)."""

    def __init__(self, client, batch, name, runner, mirror, block_size, settle_ms, counters,
                 trace):
        self.client = client
        self.batch = batch
        self.name = name
        self.runner = runner
        self.mirror = mirror
        self.block_size = block_size
        self.ppb = block_size // PAGE_TOKENS
        self.settle_ms = settle_ms
        self.counters = counters
        self.trace = trace
        self.evicted = None        # the step's (request id, block) pairs, while settling
        self.pinned_mask = 0       # the parameter block's, read at the step's end
        self.tier = None           # tier.Tier: evicted blocks kept in host memory

    def publish(self, reqs, prm, idle=()):
        """One step: each request's clock, and the page masses of those the
        daemon may evict; idle: [(seq, tokens)] clock advances of idle sessions
        (pool mode)."""
        b = self.batch
        c = self.client
        n = 0
        steps = list(idle)
        while len(steps) >= b.max_steps:
            c.publish(b, 0, steps=steps[:b.max_steps])
            steps = steps[b.max_steps:]
        for r in reqs:
            steps.append((r.seq, r.step_tokens))
            r.step_tokens = 0
            if not r.may_evict:
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
                c.publish(b, n, steps=steps)
                steps, n = [], 0
        if steps or n:
            c.publish(b, n, steps=steps)

    def writing(self, r):
        """Index of the block r's next token goes into: never freed here."""
        return (r.n - 1) // self.block_size

    def settle(self, reqs, evicted, prm):
        """Applies pending commands and, while a request of reqs is over its
        budget by more than a block, waits (up to settle_ms) for the daemon's
        decision; appends the (request id, block) pairs evicted to `evicted`."""
        self.evicted = evicted
        self.pinned_mask = prm["pinned_mask"]
        try:
            return self.client.settle([r.seq for r in reqs], None, self.block_size,
                                      self.settle_ms, self.apply)
        finally:
            self.evicted = None

    def recall(self, evicted, prm, timeout_ms):
        """The bounded wait for memdecayd's decision on the estimates just
        published (a prefill's end): commands applied through apply meanwhile,
        evicted pairs appended to `evicted`.  Fail-open: a timeout goes on."""
        self.evicted = evicted
        self.pinned_mask = prm["pinned_mask"]
        try:
            r = self.client.settle_recall(timeout_ms, apply=self.apply)
        finally:
            self.evicted = None
        self.counters["recall_waits"] += 1
        if r.outcome == memdecay.Settle.TIMEOUT:
            self.counters["recall_timeouts"] += 1
        return r

    def apply(self, ev):
        """One command.  Evict: True when its page left the daemon's view of
        vLLM's cache (its block evicted, or the page alone where the block holds
        pinned tokens), KEPT_IN_TIER when its block went to the host tier,
        False when vLLM keeps it (the block being written).  Restore and drop:
        the tier's (tier.py)."""
        if ev.type == memdecay.CMD_RESTORE:
            # stamped with the evictions reported before it: the engine core
            # replays them in this order (a block may come back and leave again)
            return self.tier is not None and self.tier.restore(
                ev, len(self.evicted) if self.evicted is not None else 0)
        if ev.type == memdecay.CMD_DROP:
            return self.tier is not None and self.tier.drop(ev)
        o = self.mirror.owner.get(ev.slot)
        if o is None or o[2] != ev.gen:
            self.counters["stale"] += 1
            sf = self.mirror.sibling_freed
            if (ev.slot, ev.gen) in sf:
                # the daemon wanted the sibling too: its block already went
                sf.discard((ev.slot, ev.gen))
                self.counters["siblings_commanded"] += 1
                if self.trace:
                    self.trace.write(json.dumps({"pid": os.getpid(), "sibling_commanded": 1,
                                                 "engine": self.name}) + "\n")
            return False
        r, pidx, _ = o
        b = pidx // self.ppb
        if b >= self.writing(r):
            self.counters["deferred"] += 1     # the block being written stays
            return False
        if self._pinned_sibling(r, b):
            # the block also holds pinned tokens: it stays, the page leaves the daemon
            r.pages.pop(pidx, None)
            self.mirror.owner.pop(ev.slot, None)
            self.client.page_free(ev.slot, memdecay.EVICTED)
            self.counters["kept_for_pinned"] += 1
            return True
        kept = self._evict_block(r, b, ev.slot)
        self.evicted.append((r.id, b))
        return memdecay.KEPT_IN_TIER if kept else True

    def _pinned_sibling(self, r, b):
        return any(pinned(r.pages[p][2], self.pinned_mask)
                   for p in range(b * self.ppb, (b + 1) * self.ppb) if p in r.pages)

    def _to_tier(self, r, b, commanded_slot):
        """Block b of r into the host tier, before it leaves vLLM's cache: the
        commanded page becomes its tier page, the siblings' regions are kept to
        open them again at a restore.  False: no tier, or no room."""
        if self.tier is None:
            return False
        span = [(p, r.pages[p]) for p in range(b * self.ppb, (b + 1) * self.ppb) if p in r.pages]
        cmd = [(p, pg) for p, pg in span if pg[0] == commanded_slot]
        if not cmd:
            return False
        pidx, pg = cmd[0]
        sibs = [(p, list(q[2])) for p, q in span if q[0] != commanded_slot]
        return self.tier.keep(r, b, pg[0], pg[1], pidx, list(pg[2]), sibs)

    def _evict_block(self, r, b, commanded_slot):
        """Block b of r leaves vLLM's cache; True when it went to the host tier
        (libmemdecay then says so for the commanded page)."""
        kept = self._to_tier(r, b, commanded_slot)
        regs = []
        siblings = 0
        m = self.mirror
        for pidx in range(b * self.ppb, (b + 1) * self.ppb):
            pg = r.pages.pop(pidx, None)
            if pg is None:
                continue
            m.owner.pop(pg[0], None)
            regs.extend(pg[2])
            if pg[0] == commanded_slot:
                if not kept:
                    self.client.page_free(pg[0], memdecay.EVICTED)
            else:
                self.client.page_free(pg[0], memdecay.FINISHED)
                if len(m.sibling_freed) > 4096:     # commands come within a step or two
                    m.sibling_freed.clear()
                m.sibling_freed.add((pg[0], pg[1]))
                siblings += 1
        r.holes.add(b)
        self.counters["evicted_blocks"] += 1
        self.counters["sibling_pages"] += siblings
        zero_in_worker(self.runner, r.id, (b,))
        if self.trace:
            self.trace.write(json.dumps({"pid": os.getpid(), "evict": r.id, "block": b,
                                         "regions": sorted(set(regs)), "engine": self.name,
                                         "siblings": siblings, "tier": kept,
                                         "t": time.time()}) + "\n")
        return kept
