"""The host tier (docs/tier.md, docs/vllm.md "Host tier and recall").

With MEMDECAY_VLLM_TIER_MB > 0, a block memdecayd evicts keeps its keys and
values in host memory instead of being dropped, and memdecayd brings it back
to its own place when the queries the worker observes would attend it.

Worker (`Tier`).  Evicting a block copies it, every layer, out of vLLM's KV
cache before the block goes back to vLLM's pool (commands.py); the page the
daemon commanded becomes a tier page (libmemdecay publishes PAGE_TIER IN), and
its sibling pages in the block leave the daemon as before.  A tier page stands
for its whole block, so HELLO's page_bytes is a block's bytes.  At a prefill
chunk, and every MEMDECAY_VLLM_RECALL_EVERY decoded tokens, the observed
queries score the tier blocks' saved keys (exact keys: `estimate`), and the
attention they would get, normalised together with the attention over the
kept keys, is published as each tier page's estimate.  A restore command
copies the block back into a spare block the engine core granted, writes that
block into the worker's block table where the hole was and opens the sibling
pages again.  A drop command forgets the copy.

Engine core (`Spares`).  The engine core owns vLLM's block pool, the worker
does not, and a restore must be answered within the command's callback: so
the engine core keeps up to MEMDECAY_VLLM_TIER_SPARES free blocks allocated
ahead and hands their ids to the worker on the SchedulerOutput
(`memdecay_spares`).  The worker reports each restore as (request id, block
index, block id) on the step's ModelRunnerOutput (`memdecay_restored`), and
the engine core puts the block into the request's block list in place of the
null block (or into its retained session's, or its adopter's), or frees it
when neither is there any more.  Blocks restored into a request that had holes
are never prefix-cached: the request is flagged already (scheduler.py)."""
import torch

import memdecay

from .attention import block_keys, head_blocks
from .mirror import PAGE_TOKENS

SPARES_ATTR = "memdecay_spares"
RESTORED_ATTR = "memdecay_restored"


def tier_blocks(tier_mb, block_bytes):
    """Blocks the tier holds at tier_mb MiB of blocks of block_bytes."""
    if tier_mb <= 0 or block_bytes <= 0:
        return 0
    return int(tier_mb * (1 << 20)) // block_bytes


def kv_block_bytes(kv_caches):
    """One block's bytes over every layer's KV cache ([blocks, ...] each)."""
    return sum(t[0].numel() * t.element_size() for t in kv_caches)


class TierBlock:
    __slots__ = ("r", "b", "slot", "gen", "pidx", "regs", "siblings", "kv")

    def __init__(self, r, b, slot, gen, pidx, regs, siblings, kv):
        self.r, self.b, self.slot, self.gen = r, b, slot, gen
        self.pidx, self.regs = pidx, regs
        self.siblings = siblings   # [(page index, regions)] freed with the block
        self.kv = kv               # per layer: the block's KV copy


def place_in_worker(runner, req_id, b, block_id):
    """Writes block_id at block index b of request req_id in the worker's own
    records (its CachedRequestState and the input batch's block table), as
    holes.zero_in_worker writes the null block."""
    st = runner.requests.get(req_id)
    if st is not None:
        for g in st.block_ids:
            if b < len(g):
                g[b] = block_id
    row = runner.input_batch.req_id_to_index.get(req_id)
    if row is not None:
        for t in runner.input_batch.block_table.block_tables:
            t.block_table.np[row, b] = block_id


class Tier:
    """Worker: the host copies of evicted blocks, the spare blocks, and the
    step's restores for the engine core."""

    def __init__(self, runner, client, mirror, capacity, counters):
        self.runner = runner
        self.client = client
        self.mirror = mirror
        self.kv = list(runner.kv_caches)
        self.layer_of = {t.data_ptr(): i for i, t in enumerate(self.kv)}
        self.capacity = capacity         # blocks
        self.counters = counters
        self.blocks = {}                 # tier slot -> TierBlock
        self.spares = []                 # block ids the engine core granted
        self.restored = []               # (request id, block index, block id, at) this step
        for k in ("tier_in", "tier_full", "restores", "restores_refused", "no_spare",
                  "drops", "estimates", "recall_waits", "recall_timeouts"):
            counters.setdefault(k, 0)

    def room(self):
        return len(self.blocks) < self.capacity and self.client.tier_budget() > 0

    def bytes_held(self):
        return sum(t.numel() * t.element_size() for tb in self.blocks.values() for t in tb.kv)

    def block_id(self, r, b):
        """The block id at r's block index b in the worker (None: unknown)."""
        st = self.runner.requests.get(r.id)
        ids = st.block_ids[0] if st is not None and st.block_ids else getattr(r, "block_ids", None)
        if ids is None or b >= len(ids) or not ids[b]:
            return None
        return ids[b]

    def keep(self, r, b, slot, gen, pidx, regs, siblings):
        """Copies block b of r out of the KV cache into the tier; False when it
        cannot (no room, the block unknown)."""
        if not self.room():
            self.counters["tier_full"] += 1
            return False
        bid = self.block_id(r, b)
        if bid is None:
            return False
        kv = [t[bid].clone() for t in self.kv]
        self.blocks[slot] = TierBlock(r, b, slot, gen, pidx, regs, siblings, kv)
        r.tier[b] = slot
        self.counters["tier_in"] += 1
        return True

    def restore(self, ev, at=0):
        """A restore command: the block back into a spare block at its place.
        at: how many of the step's evicted pairs came before it (the engine
        core applies both in that order).  True: restored; False: refused (no
        such tier page, or no spare)."""
        tb = self.blocks.get(ev.slot)
        if tb is None or tb.gen != ev.gen:
            self.counters["restores_refused"] += 1
            return False
        if not self.spares:
            self.counters["no_spare"] += 1
            return False
        r = tb.r
        bid = self.spares.pop()
        for t, saved in zip(self.kv, tb.kv):
            t[bid].copy_(saved)
        place_in_worker(self.runner, r.id, tb.b, bid)
        ids = getattr(r, "block_ids", None)
        if ids is not None and tb.b < len(ids):
            ids[tb.b] = bid
        del self.blocks[ev.slot]
        r.tier.pop(tb.b, None)
        r.holes.discard(tb.b)
        m = self.mirror
        r.pages[tb.pidx] = [tb.slot, tb.gen, tb.regs]
        m.owner[tb.slot] = (r, tb.pidx, tb.gen)
        for pidx, regs in tb.siblings:
            slot, gen = self.client.page_open(r.seq, pidx * PAGE_TOKENS, len(regs),
                                              memdecay.labels(regs))
            r.pages[pidx] = [slot, gen, regs]
            m.owner[slot] = (r, pidx, gen)
        self.restored.append((r.id, tb.b, bid, at))
        self.counters["restores"] += 1
        return True

    def drop(self, ev):
        tb = self.blocks.get(ev.slot)
        if tb is None or tb.gen != ev.gen:
            return False
        del self.blocks[ev.slot]
        tb.r.tier.pop(tb.b, None)
        self.counters["drops"] += 1
        return True

    def forget(self, r):
        """r's sequence ended (libmemdecay freed its tier pages): its copies go."""
        for slot in r.tier.values():
            self.blocks.pop(slot, None)
        r.tier.clear()

    def cut(self, r, n_blocks):
        """r goes on with its first n_blocks blocks (an adoption's cut): the
        tier blocks past them leave the daemon and the tier."""
        for b in [b for b in r.tier if b >= n_blocks]:
            slot = r.tier.pop(b)
            if self.blocks.pop(slot, None) is not None:
                self.client.page_free(slot, memdecay.DROPPED)

    def take_restored(self):
        out, self.restored = self.restored, []
        return out

    # ---- the recall signal ----
    def estimate(self, r, kv_cache, isa, q, lse, scale):
        """Adds this layer's estimate for r's tier blocks: the attention r's
        observed queries q [n, H, D] would give each saved token, normalised
        with lse [n, kvh, g] (the log-sum-exp of their scores over the kept
        keys), mean over heads and queries, into r.est ([T, block_size] in
        r.est_order's block order), and each block's need (head_blocks) into
        r.est_need.  Returns the share [n, kvh, g] of each query's attention
        left to the kept keys once the tier's are counted (None: no tier)."""
        li = self.layer_of.get(kv_cache.data_ptr())
        if li is None or not r.tier:
            return None
        order = sorted(r.tier)
        saved = torch.stack([self.blocks[r.tier[b]].kv[li] for b in order])   # [T, kvh, bs, 2D]
        T, kvh, bs, _ = saved.shape
        n, H, D = q.shape
        kb = block_keys(saved, isa, D)                                        # [T, kvh, D, bs]
        g = H // kvh
        sc = torch.matmul(q.view(n, 1, kvh, g, D).to(kb.dtype), kb)          # [n, T, kvh, g, bs]
        sc = sc.permute(0, 2, 3, 1, 4).reshape(n, kvh, g, T * bs).float() * scale
        total = torch.logaddexp(lse, torch.logsumexp(sc, dim=-1))
        att = torch.exp(sc - total[..., None])                              # [n, kvh, g, T*bs]
        est = att.mean(dim=(0, 1, 2)).view(T, bs)
        need = head_blocks(att, T).amax(dim=(0, 1))                         # [T]
        if r.est is None or r.est_order != order:
            r.est = est
            r.est_need = need
            r.est_order = order
            r.est_layers = 1
        else:
            r.est += est
            r.est_need = torch.maximum(r.est_need, need)
            r.est_layers += 1
        return torch.exp(lse - total)

    def publish_estimates(self, reqs, batch, prm):
        """The estimates, flagged as such; returns how many.  Each tier page:
        its block's need (head_blocks: the most over the observed queries and
        layers) as its mass, refresh bits by tau over the block's mean-over-
        layers attention folded onto the page's 16 tokens.  Each resident page
        of a kept block: its block's need the same way, no refresh bits: what
        memdecayd compares a candidate with (docs/tier.md).  A page stands for
        its whole block either way, as an evicted page's block leaves whole."""
        n = 0
        tau = prm["tau"]
        for r in reqs:
            if r.est is None:
                r.need = None
                continue
            est = r.est / max(1, r.est_layers)
            ppb = est.shape[1] // PAGE_TOKENS
            norm = float(len(r.pages) * PAGE_TOKENS) if prm["norm_mode"] == 1 else 1.0
            for i, b in enumerate(r.est_order):
                slot = r.tier.get(b)
                if slot is None or n == batch.capacity:
                    continue
                tok = est[i]
                folded = tok.view(-1, PAGE_TOKENS).max(dim=0).values if \
                    tok.numel() % PAGE_TOKENS == 0 else tok[:PAGE_TOKENS]
                bits = 0
                for j, v in enumerate(folded.tolist()):
                    if v * norm > tau:
                        bits |= 1 << j
                batch.slots[n] = slot
                batch.mass[n] = float(r.est_need[i])
                batch.refresh[n] = bits
                n += 1
            if r.need is not None and r.kept is not None:
                for b, v in zip(r.kept.tolist(), r.need.tolist()):
                    for pidx in range(b * ppb, (b + 1) * ppb):
                        pg = r.pages.get(pidx)
                        if pg is None or n == batch.capacity:
                            continue
                        batch.slots[n], batch.mass[n], batch.refresh[n] = pg[0], v, 0
                        n += 1
            r.est = None
            r.est_need = None
            r.need = None
            r.est_order = None
            r.est_layers = 0
        if n:
            self.client.publish_estimates(batch, n)
            self.counters["estimates"] += n
        return n


class Spares:
    """Engine core: the blocks allocated ahead for the worker's restores."""

    def __init__(self, kv_cache_manager, n):
        self.kv = kv_cache_manager
        self.n = n
        self.out = {}                    # block id -> KVCacheBlock, granted to the worker
        self.counters = {"granted": 0, "installed": 0, "to_session": 0, "returned": 0}

    def top_up(self, out):
        """Grants the worker spare blocks on SchedulerOutput `out` until it
        holds n, while the pool has more than twice that free."""
        want = self.n - len(self.out)
        pool = self.kv.block_pool
        if want <= 0 or pool.get_num_free_blocks() <= 2 * self.n:
            return
        blocks = pool.get_new_blocks(want)
        for blk in blocks:
            self.out[blk.block_id] = blk
        self.counters["granted"] += len(blocks)
        setattr(out, SPARES_ATTR, [blk.block_id for blk in blocks])

    def install(self, scheduler, restored, store, managers):
        """The worker's restores: each block into its request's block list in
        place of the null block, else its retained session's or its adopter's,
        else back to the pool."""
        pool = self.kv.block_pool
        for req_id, idx, bid in restored:
            blk = self.out.pop(bid, None)
            if blk is None:
                continue
            req = scheduler.requests.get(req_id)
            if req is None or req.is_finished():
                placed, adopter = store.apply_restored(req_id, idx, blk) if store else (False, None)
                if placed:
                    self.counters["to_session"] += 1
                    continue
                req = scheduler.requests.get(adopter) if adopter is not None else None
                if req is None or req.is_finished():
                    pool.free_blocks([blk])
                    self.counters["returned"] += 1
                    continue
                req_id = adopter
            blocks = managers[0].req_to_blocks.get(req_id)
            if blocks is None or not 0 <= idx < len(blocks) or not blocks[idx].is_null:
                pool.free_blocks([blk])
                self.counters["returned"] += 1
                continue
            blocks[idx] = blk
            self.counters["installed"] += 1


def spares_of(kv_cache_manager, s):
    sp = getattr(kv_cache_manager, "_memdecay_spares", None)
    if sp is None:
        sp = Spares(kv_cache_manager, s.tier_spares)
        kv_cache_manager._memdecay_spares = sp
    return sp

