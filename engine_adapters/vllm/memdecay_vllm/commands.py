"""Worker: a step published to memdecayd, and its commands applied.

One md_publish_batch per attachment carries the step and every page's mass and
refresh bits (reduce.py).  memdecayd's evict commands are read; each commanded
page's whole block is dropped (a block is the unit vLLM frees, so its sibling
pages go with it), the worker's block table gets the null block there, and the
pairs (request, block) go back to the caller, which sends them to the engine
core on the step's output (scheduler.py returns the blocks to vLLM's pool).
While a request is over its budget by more than a block, the worker waits for
the daemon's decision, up to settle_ms."""
import json
import os
import time

import memdecay

from . import reduce
from .mirror import PAGE_TOKENS, pinned


class Commands:
    """Publish and command application for the requests of `mirror`, in the
    worker whose model runner is `runner`; counts into `counters` and writes
    every evicted block to `trace` (a file, or None)."""

    def __init__(self, runner, mirror, block_size, settle_ms, counters, trace):
        self.runner = runner
        self.mirror = mirror
        self.block_size = block_size
        self.ppb = block_size // PAGE_TOKENS
        self.settle_ms = settle_ms
        self.counters = counters
        self.trace = trace

    def publish(self, k, reqs, prm):
        """One step of attachment k: each request's clock, and the page masses
        of those the daemon may evict."""
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

    def writing(self, r):
        """Index of the block r's next token goes into: never freed here."""
        return (r.n - 1) // self.block_size

    def over(self, k, prm):
        """Whether a request of class k holds more than a block beyond what the
        daemon can bring it to: max(budget, the tokens it never evicts here:
        pinned pages, protect_recent newest pages, the block being written)."""
        if not k.budget or k.budget <= 0:
            return False
        mask, protect = prm["pinned_mask"], prm["protect_recent"]
        for r in self.mirror.reqs.values():
            if r.klass is not k or not r.pages:
                continue
            last = self.writing(r)
            order = sorted(r.pages)
            floor = 0
            for i, p in enumerate(order):
                if (p // self.ppb == last or len(order) - 1 - i <= protect
                        or pinned(r.pages[p][2], mask)):
                    floor += PAGE_TOKENS
            if len(order) * PAGE_TOKENS > max(k.budget, floor) + self.block_size:
                return True
        return False

    def settle(self, k, evicted, prm):
        """Applies pending commands; while a request is over its budget by more
        than a block, waits (up to settle_ms) for the daemon's decision."""
        self.apply(k, evicted, prm)
        if not self.over(k, prm):
            return
        deadline = time.monotonic() + self.settle_ms / 1000.0
        while time.monotonic() < deadline and k.client.attached:
            k.client.wait_commands(5)
            if self.apply(k, evicted, prm) and not self.over(k, prm):
                return

    def apply(self, k, evicted, prm):
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
            if b >= self.writing(r):
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

    def _pinned_sibling(self, r, b, mask):
        return any(pinned(r.pages[p][2], mask)
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
