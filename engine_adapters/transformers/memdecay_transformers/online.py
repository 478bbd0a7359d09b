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
drops those pages from every layer of the cache."""
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
                 page_tokens=16, page_capacity=4096, engine_name="transformers"):
        self.f = feeder
        # refused here, naming the argument, before anything runs
        self.budget = checks.budget_tokens(budget_tokens, "budget_tokens", minimum=0)
        checks.policy(policy, "policy", checks.known_policies(socket))
        self.client = memdecay.Client(socket_path=socket, engine_name=engine_name,
                                      page_tokens=page_tokens, page_capacity=page_capacity,
                                      max_seqs=1, policy=policy,
                                      budget_sequence_tokens=self.budget,
                                      require_daemon=True)
        self.seq = SeqPages(self.client, 0, page_tokens)
        self.cache_pos = []   # true position of each cache entry, physical order

    def close(self):
        self.client.close()

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
        live = self.seq.page_of
        keep = [i for i, p in enumerate(k_pos) if p in live]
        if len(keep) < len(k_pos):
            self.f.keep(keep)
        self.cache_pos = [k_pos[i] for i in keep]
        out.attentions = None
        return out

    def kept_positions(self):
        return list(self.cache_pos)
