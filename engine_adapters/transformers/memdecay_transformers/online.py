"""Feeding a transformers model chunk by chunk over one cache, positions kept.

`Feeder` appends a chunk (a message, a question, one decoded token) to a
DynamicCache with the true `position_ids` (never renumbered after evictions)
and the physical `cache_position` (what the causal mask needs), so a cache
that a press or the daemon has shrunk stays correct.

Sliding-window models (Gemma 2/3: `config.layer_types` with
"sliding_attention"): `DynamicCache(config=...)` gives their window layers a
`DynamicSlidingWindowLayer`, which keeps only the last `sliding_window - 1`
entries, counts every token ever fed as its length and refuses `crop` once it
has seen a window's worth.  Dropping pages from it, or cropping a probe off it,
breaks.  `kv_cache(model)` is a cache whose every layer keeps every entry (all
entries of a layer, as llama.cpp's full-size window cache does), and `Feeder`
then passes the window itself: one additive mask per layer type, a key visible
to a query when its true position is not after the query's and, for the window
layers, less than `sliding_window` positions before it, as the model was
trained and as llama.cpp masks (by position, not by cache slot).  With no
eviction these masks equal the model's own.

`MemDecayOnline` is the online adapter: after every forward it declares the
chunk's tokens to memdecayd with their regions, publishes the step with each
page's attention mass (the forward's attention averaged over every layer, head
and query of the chunk), waits for the daemon's evict commands at its budget and
drops those pages from every layer of the cache.

With `tier_pages` > 0 (docs/tier.md) an evicted page's entries move to a host
tier (`Tier`: each layer's keys and values by position) instead of being
dropped.  After a prefill chunk (and every `recall_every` decoded tokens) the
chunk's queries score the tier: the chunk is run once more over the resident
entries before it and the tier's entries, in position order, and the
attention it gives each tier position is published as that page's estimate
(exact keys scored: the harness's tier is small).  That probe's output is
thrown away; only the estimate leaves it.  Then a bounded wait for the
daemon's decisions, and the entries it restored go back into every layer of
the cache in position order, so the next forward sees them where they were."""
import numpy as np
import torch
from transformers import DynamicCache

import memdecay
from memdecay import checks
from .pages import LayerHeartbeat, SeqPages


def sliding_window(config):
    """The window of a model whose layers mix "sliding_attention" and
    "full_attention" (layer_types), else None."""
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    types = getattr(cfg, "layer_types", None) or ()
    window = getattr(cfg, "sliding_window", None)
    return window if window and "sliding_attention" in types else None


def kv_cache(model):
    """A DynamicCache that keeps every entry of every layer: the model's own
    DynamicCache(config=...) unless the model has sliding-window layers, whose
    cache layers would drop what slid out of the window (see above)."""
    if sliding_window(model.config):
        return DynamicCache()
    return DynamicCache(config=model.config)


def window_masks(k_pos, q_pos, window, dtype):
    """Additive masks (1, 1, len(q_pos), len(k_pos)) by true positions, for the two
    layer types of a sliding-window model."""
    k = torch.as_tensor(k_pos, dtype=torch.long)[None, :]
    q = torch.as_tensor(q_pos, dtype=torch.long)[:, None]
    causal = k <= q
    low = torch.tensor(torch.finfo(dtype).min, dtype=dtype)
    zero = torch.tensor(0.0, dtype=dtype)
    full = torch.where(causal, zero, low)[None, None]
    local = torch.where(causal & (q - k < window), zero, low)[None, None]
    return {"full_attention": full, "sliding_attention": local}


class Feeder:
    def __init__(self, model):
        self.model = model
        self.cache = kv_cache(model)
        self.next_pos = 0
        self.window = sliding_window(model.config)
        self.pos = []   # true position of each cache entry (sliding-window models)

    def phys_len(self):
        return self.cache.get_seq_length()

    @torch.no_grad()
    def forward(self, ids, output_attentions=False, logits_to_keep=0):
        """logits_to_keep: transformers' own (0: every position's logits; 1: the last
        one's, which spares a large vocabulary's head, e.g. Gemma's 262,144)."""
        n = len(ids)
        phys = self.phys_len()
        new = list(range(self.next_pos, self.next_pos + n))
        kw = {"logits_to_keep": logits_to_keep} if logits_to_keep else {}
        if self.window:
            kw["attention_mask"] = window_masks(self.pos + new, new, self.window,
                                                self.model.dtype)
        out = self.model(input_ids=torch.tensor([ids]), past_key_values=self.cache,
                         position_ids=torch.tensor([new], dtype=torch.long),
                         cache_position=torch.arange(phys, phys + n), use_cache=True,
                         output_attentions=output_attentions, **kw)
        self.next_pos += n
        if self.window:
            self.pos += new
        return out

    def crop(self, phys, next_pos):
        self.cache.crop(phys)
        self.next_pos = next_pos
        del self.pos[phys:]

    def keep(self, idx):
        """Keeps the cache entries idx (sorted physical indices) in every layer."""
        if self.window:
            self.pos = [self.pos[i] for i in idx]
        idx = torch.as_tensor(idx, dtype=torch.long)
        for lay in self.cache.layers:
            lay.keys = lay.keys.index_select(2, idx).contiguous()
            lay.values = lay.values.index_select(2, idx).contiguous()

    def take(self, idx):
        """Copies of the entries idx (physical indices): per layer (keys, values)."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        return [(lay.keys.index_select(2, idx).clone(), lay.values.index_select(2, idx).clone())
                for lay in self.cache.layers]

    def merge(self, cache_pos, add_pos, add_kv):
        """Puts entries back: add_kv (per layer (keys, values), one entry per
        position of add_pos) joins every layer, all entries in true-position
        order.  cache_pos: the true position of each entry now.  Returns the
        new order's positions."""
        order = sorted(range(len(cache_pos) + len(add_pos)),
                       key=lambda i: cache_pos[i] if i < len(cache_pos)
                       else add_pos[i - len(cache_pos)])
        idx = torch.as_tensor(order, dtype=torch.long)
        for lay, (k, v) in zip(self.cache.layers, add_kv):
            lay.keys = torch.cat([lay.keys, k], 2).index_select(2, idx).contiguous()
            lay.values = torch.cat([lay.values, v], 2).index_select(2, idx).contiguous()
        allpos = list(cache_pos) + list(add_pos)
        new = [allpos[i] for i in order]
        if self.window:
            self.pos = new
        return new

    @torch.no_grad()
    def probe(self, ids, pos0, ctx_pos, ctx_kv):
        """The chunk ids (true positions from pos0) over a throwaway cache of
        the entries ctx_kv (per layer (keys, values), true positions ctx_pos,
        ascending); returns the model's attentions (per layer (1, H, q, k)).
        The feeder's own cache is not touched."""
        cache = DynamicCache()
        for i, (k, v) in enumerate(ctx_kv):
            cache.update(k, v, i)
        n = len(ids)
        new = list(range(pos0, pos0 + n))
        kw = {}
        if self.window:
            kw["attention_mask"] = window_masks(list(ctx_pos) + new, new, self.window,
                                                self.model.dtype)
        out = self.model(input_ids=torch.tensor([ids]), past_key_values=cache,
                         position_ids=torch.tensor([new], dtype=torch.long),
                         cache_position=torch.arange(len(ctx_pos), len(ctx_pos) + n),
                         use_cache=True, output_attentions=True, logits_to_keep=1, **kw)
        return out.attentions


class Tier:
    """The host tier's entries: position -> per layer (key, value), each of
    shape (1, kv_heads, 1, head_dim)."""

    def __init__(self):
        self.kv = {}

    def put(self, positions, kv):
        for j, p in enumerate(positions):
            self.kv[p] = [(k[:, :, j:j + 1], v[:, :, j:j + 1]) for k, v in kv]

    def gather(self, positions):
        """The entries of positions as per layer (keys, values); the tier keeps them."""
        ents = [self.kv[p] for p in positions]
        return [(torch.cat([e[li][0] for e in ents], 2), torch.cat([e[li][1] for e in ents], 2))
                for li in range(len(ents[0]))]

    def take(self, positions):
        """The same, removed from the tier."""
        out = self.gather(positions)
        self.drop(positions)
        return out

    def drop(self, positions):
        for p in positions:
            self.kv.pop(p, None)

    def nbytes(self):
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size()
                   for ent in self.kv.values() for k, v in ent)


def page_need(attentions, page_col, n_pages):
    """Each page's need: the most attention any one query of any head in any
    layer gives it (the page's tokens summed), as Quest and ArkVale rank pages
    by the heads that need them most.  page_col (k,): each key's page index,
    or n_pages for keys of no page.  Returns (n_pages,)."""
    best = torch.zeros(n_pages + 1)
    for a in attentions:
        x = a[0].float()                                           # (H, q, k)
        s = torch.zeros(x.shape[0], x.shape[1], n_pages + 1).index_add_(2, page_col, x)
        best = torch.maximum(best, s.amax(dim=(0, 1)))
    return best[:n_pages]


def mean_attention(attentions):
    """Model attentions (per layer (1, H, q, k)) -> (q, k) mean over layers and heads."""
    acc = None
    for a in attentions:
        m = a[0].float().mean(0)
        acc = m if acc is None else acc + m
    return (acc / len(attentions)).double().numpy()


class MemDecayOnline:
    """The daemon's evictions applied between forwards (turns, decode steps)."""

    def __init__(self, feeder, policy="memdecay", budget_tokens=0, socket=None,
                 page_tokens=16, page_capacity=4096, engine_name="transformers",
                 tier_pages=0, recall_every=16, recall_wait_s=1.0):
        self.f = feeder
        # refused here, naming the argument, before anything runs
        self.budget = checks.budget_tokens(budget_tokens, "budget_tokens", minimum=0)
        checks.policy(policy, "policy", checks.known_policies(socket))
        if not isinstance(tier_pages, int) or isinstance(tier_pages, bool) or \
                not 0 <= tier_pages < page_capacity:
            raise ValueError("tier_pages=%r: want an integer in 0..page_capacity-1 (%d)"
                             % (tier_pages, page_capacity - 1))
        if not isinstance(recall_every, int) or recall_every < 1:
            raise ValueError("recall_every=%r: want an integer >= 1" % (recall_every,))
        self.client = memdecay.Client(socket_path=socket, engine_name=engine_name,
                                      page_tokens=page_tokens, page_capacity=page_capacity,
                                      max_seqs=1, policy=policy,
                                      budget_sequence_tokens=self.budget,
                                      tier_pages=tier_pages,
                                      page_bytes=self._page_bytes(page_tokens),
                                      require_daemon=True)
        self.seq = SeqPages(self.client, 0, page_tokens)
        self.seq.tier_capacity = tier_pages
        self.tier = Tier()
        self.recall_every = recall_every
        self.recall_wait_s = recall_wait_s
        self.decoded = 0      # tokens decoded one by one since the last recall
        self.cache_pos = []   # true position of each cache entry, physical order

    def _page_bytes(self, page_tokens):
        """One page's K/V bytes over every layer (HELLO page_bytes)."""
        cfg = self.f.model.config
        cfg = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        elt = torch.finfo(self.f.model.dtype).bits // 8
        return int(2 * cfg.num_hidden_layers * heads * dim * elt * page_tokens)

    def close(self):
        self.client.close()

    def set_budget(self, budget_tokens):
        """The sequence's token budget from now on (0: none), sent to the daemon
        as the sequence's own option; the next forward settles to it."""
        self.budget = checks.budget_tokens(budget_tokens, "budget_tokens", minimum=0)
        self.client.seq_set_options(self.seq.seq, budget=self.budget)

    def forward(self, ids, regions, logits_to_keep=0):
        pos0 = self.f.next_pos
        with LayerHeartbeat(self.f.model, self.client):
            out = self.f.forward(ids, output_attentions=True, logits_to_keep=logits_to_keep)
        att = mean_attention(out.attentions)
        new = list(range(pos0, pos0 + len(ids)))
        k_pos = self.cache_pos + new
        self.seq.append(new, regions)
        m = att.mean(axis=0)
        self.seq.publish(len(ids), dict(zip(k_pos, m.tolist())))
        self.seq.settle(self.budget)
        self._sync(k_pos)
        if self.seq.tier:
            self.decoded = self.decoded + 1 if len(ids) == 1 else 0
            if len(ids) > 1 or self.decoded >= self.recall_every:
                self.decoded = 0
                self._recall(ids, pos0)
        out.attentions = None
        return out

    def _sync(self, k_pos):
        """The cache after the daemon's commands: entries of pages moved to
        the tier are copied there and leave the cache with the freed ones;
        restored entries come back from the tier; dropped ones are gone."""
        tiered, restored, dropped = self.seq.take_moves()
        live = self.seq.page_of
        if tiered:
            at = {p: i for i, p in enumerate(k_pos)}
            have = [p for p in tiered if p in at]
            if have:
                self.tier.put(have, self.f.take([at[p] for p in have]))
        self.tier.drop(dropped)
        keep = [i for i, p in enumerate(k_pos) if p in live]
        if len(keep) < len(k_pos):
            self.f.keep(keep)
        self.cache_pos = [k_pos[i] for i in keep]
        back = [p for p in restored if p in self.tier.kv]
        if back:
            self.cache_pos = self.f.merge(self.cache_pos, back, self.tier.take(back))

    def _recall(self, ids, pos0):
        """Scores the tier with this chunk's queries (see the module's note),
        publishes the estimates and applies what the daemon decides."""
        tpos = sorted(self.tier.kv)
        if not tpos:
            return
        before = [i for i, p in enumerate(self.cache_pos) if p < pos0]
        ctx_pos = [self.cache_pos[i] for i in before] + tpos
        order = sorted(range(len(ctx_pos)), key=ctx_pos.__getitem__)
        res = self.f.take(before)
        tkv = self.tier.gather(tpos)
        idx = torch.as_tensor(order, dtype=torch.long)
        ctx_kv = [(torch.cat([rk, tk], 2).index_select(2, idx),
                   torch.cat([rv, tv], 2).index_select(2, idx))
                  for (rk, rv), (tk, tv) in zip(res, tkv)]
        ctx_sorted = [ctx_pos[i] for i in order]
        with LayerHeartbeat(self.f.model, self.client):
            atts = self.f.probe(ids, pos0, ctx_sorted, ctx_kv)
        m = mean_attention(atts).mean(axis=0)
        tier_set = set(tpos)
        est = {p: v for p, v in zip(ctx_sorted, m[:len(ctx_sorted)].tolist()) if p in tier_set}
        # every page before the chunk, tier or resident, measured alike: the
        # daemon compares a candidate's need with its victim's (docs/tier.md)
        pages = [(s, pos) for s, (_, pos, _) in
                 list(self.seq.tier.items()) + list(self.seq.pages.items()) if pos[-1] < pos0]
        col_of = {p: i for i, (_, pos) in enumerate(pages) for p in pos}
        page_col = torch.tensor([col_of.get(p, len(pages)) for p in ctx_sorted]
                                + [len(pages)] * len(ids), dtype=torch.long)
        need = page_need(atts, page_col, len(pages)).tolist()
        slots = [s for s, _ in pages]
        if self.seq.publish_estimates(est, dict(zip(slots, need))):
            self.seq.settle_recall(self.recall_wait_s)
            self._sync(list(self.cache_pos))

    def tier_bytes(self):
        return self.tier.nbytes()

    def kept_positions(self):
        return list(self.cache_pos)
