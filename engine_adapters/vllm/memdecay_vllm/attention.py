"""Worker: the attention statistics of a step.

Which queries are observed (`Stats.plan`: a decode row's one query, a prefill
chunk's last and a few evenly spaced others, each over the keys it can see),
their attention over a row's kept keys read from vLLM's KV cache (`key_layout`,
`attention_mass`: one gather, one batched matmul, one softmax for all rows),
and its sum over the observed layers into each request's token mass
(`Stats.layer`).  reduce.py turns a token mass into page masses."""
import re

import torch

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


def block_keys(blocks, isa, head_size, idx=None):
    """The keys of KV blocks [nb, kvh, bs, 2D] (vLLM's CPU cache layout), or of
    those idx names, as [n, kvh, D, bs] whatever the kernel's layout; only the
    keys are gathered."""
    nb, kvh, bs, _ = blocks.shape
    D = head_size
    layout = key_layout(isa, bs, D, blocks.dtype)
    kb = blocks.view(nb, kvh, 2 * bs * D)[:, :, :bs * D]
    if idx is not None:
        kb = kb.index_select(0, idx)
    n = kb.shape[0]
    if layout is TRANSPOSED:                                      # stored [D][bs]
        return kb.reshape(n, kvh, D, bs)
    return kb[:, :, layout].view(n, kvh, bs, D).transpose(-1, -2)


def attention_mass(kv_cache, isa, idx, nblk, q, pad, scale, lse=False):
    """Each row's attention over its blocks, averaged over heads: q [R, H, D] (one
    query a row), idx the rows' block ids [R*nblk] (padded), pad [R, nblk*bs] True
    past a row's length.  Returns [R, nblk*bs], each row summing to 1 over its
    unpadded tokens, in the order the blocks were given; with lse, also the
    scores' log-sum-exp [R, kvh, g] (what the host tier's estimate is
    normalised with, tier.py) and each head's attention to each block
    [R, H, nblk] (head_blocks: what a block's need is taken from)."""
    R, H, D = q.shape
    kb = block_keys(kv_cache, isa, D, idx)                        # [R*nblk, kvh, D, bs]
    kvh, bs = kb.shape[1], kb.shape[3]
    kb = kb.view(R, nblk, kvh, D, bs)
    # one batched matmul over (row, block, kv head), then the small scores in row order
    g = H // kvh
    sc = torch.matmul(q.view(R, 1, kvh, g, D).to(kb.dtype), kb)   # [R, nblk, kvh, g, bs]
    sc = sc.permute(0, 2, 3, 1, 4).reshape(R, kvh, g, nblk * bs).float() * scale
    sc.masked_fill_(pad[:, None, None, :], float("-inf"))
    s = torch.softmax(sc, dim=-1)
    p = s.mean(dim=(1, 2))
    if not lse:
        return p
    return p, torch.logsumexp(sc, dim=-1), head_blocks(s, nblk)


def head_blocks(att, nblk):
    """att [R, kvh, g, nblk*bs] (per head) -> [R, H, nblk]: each head's
    attention to each block's tokens, summed.  A block's need is the most of
    it over heads, observed queries and layers: the heads that look for a fact
    concentrate on it while the mean over heads spreads it thin, so the tier
    and the pages a restore would displace are ranked by their needs
    (docs/tier.md; Quest and ArkVale rank pages per head likewise)."""
    R, kvh, g, n = att.shape
    return att.reshape(R, kvh * g, nblk, n // nblk).sum(-1)


def layer_index(layer):
    """A layer's index in the model, from its name (model.layers.N.self_attn...)."""
    li = getattr(layer, "_memdecay_index", None)
    if li is None:
        m = re.search(r"\.(\d+)\.", getattr(layer, "layer_name", "") or "")
        li = int(m.group(1)) if m else 0
        layer._memdecay_index = li
    return li


class Stats:
    """The step's plan (which rows, which of their queries, which keys) and the
    per-request token mass the observed layers add up.  A request `r` carries
    r.acc (its token mass so far), r.acc_layers and r.kept (the original block
    indices the attention saw, in order)."""

    def __init__(self, block_size, prefill_queries, layer_stride, tier=None, recall_every=16):
        self.block_size = block_size
        self.prefill_queries = prefill_queries
        self.layer_stride = layer_stride
        self.tier = tier               # the host tier (tier.py), None without one
        self.recall_every = recall_every
        self.rows = []             # (req, seq_len, its queries' span in batch) per tracked row
        self.batch = None          # their gather indices, query rows and padding mask

    def clear(self):
        self.rows = []
        self.batch = None

    def plan(self, cm, rows, kept):
        """Plans the statistics of `rows` ([(req, batch row)]) on the (compacted)
        attention metadata cm; kept: {row: original block indices kept}."""
        self.clear()
        if not rows:
            return
        bs = self.block_size
        qsl = cm.query_start_loc_cpu
        lens = [int(cm.seq_lens[row]) for _, row in rows]
        nblk = max((n + bs - 1) // bs for n in lens)
        table = cm.block_table_tensor[[row for _, row in rows], :nblk].to(torch.long)
        # the queries observed: a decode row's one; a prefill chunk's last and up to
        # prefill_queries-1 more, evenly spaced, each seeing the keys up to itself
        k = self.prefill_queries
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
            # the tier is scored at a prefill chunk and every recall_every decoded tokens
            prefill = int(qsl[row + 1]) - int(qsl[row]) > 1
            r.since_est = 0 if prefill else r.since_est + 1
            r.est_now = bool(r.tier) and (prefill or r.since_est >= self.recall_every)
            r.est_prefill = r.est_now and prefill
            if r.est_now:
                r.since_est = 0
                r.need = None

    def layer(self, impl, layer, query, kv_cache):
        """Adds this layer's attention of each planned row's observed queries over
        the row's kept keys to the step's token mass (mean over heads and the
        row's queries), all rows in one batch: one gather of the rows' blocks,
        one matmul, one softmax.  Every layer_stride-th layer only."""
        if layer_index(layer) % self.layer_stride:
            return
        b = self.batch
        isa = getattr(layer, "isa", "vec")
        q = query.view(query.shape[0], impl.num_heads, impl.head_size).index_select(0, b["q"])
        recall = self.tier is not None and any(r.est_now for r, _, _ in self.rows)
        p = attention_mass(kv_cache, isa, b["idx"], b["nblk"], q, b["pad"], impl.scale,
                           lse=recall)
        if recall:
            p, lse, need = p
        for r, seq_len, (q0, q1) in self.rows:
            m = p[q0:q1, :seq_len].mean(dim=0)     # over the row's observed queries
            if r.acc is None:
                r.acc = m
            else:
                r.acc += m
            r.acc_layers += 1
            if recall and r.est_now:
                # the kept blocks' needs, normalised over the kept and the tier's
                # keys together as the tier's are, the most over heads, queries
                # and layers
                share = self.tier.estimate(r, kv_cache, isa, q[q0:q1], lse[q0:q1], impl.scale)
                hb = need[q0:q1, :, :len(r.kept)]
                if share is not None:
                    hb = hb * share.reshape(hb.shape[0], -1, 1)
                nk = hb.amax(dim=(0, 1))
                r.need = nk if r.need is None else torch.maximum(r.need, nk)
