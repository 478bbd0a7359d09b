"""Feeding a transformers model chunk by chunk over one cache, positions kept.

`Feeder` appends a chunk (a message, a question, one decoded token) to a
DynamicCache with the true `position_ids` (never renumbered after evictions)
and the physical `cache_position` (what the causal mask needs), so a cache
that a press or the daemon has shrunk stays correct.

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


class Feeder:
    def __init__(self, model):
        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.next_pos = 0

    def phys_len(self):
        return self.cache.get_seq_length()

    @torch.no_grad()
    def forward(self, ids, output_attentions=False):
        n = len(ids)
        phys = self.phys_len()
        out = self.model(input_ids=torch.tensor([ids]), past_key_values=self.cache,
                         position_ids=torch.arange(self.next_pos, self.next_pos + n).unsqueeze(0),
                         cache_position=torch.arange(phys, phys + n), use_cache=True,
                         output_attentions=output_attentions)
        self.next_pos += n
        return out

    def crop(self, phys, next_pos):
        self.cache.crop(phys)
        self.next_pos = next_pos

    def keep(self, idx):
        """Keeps the cache entries idx (sorted physical indices) in every layer."""
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

    def forward(self, ids, regions):
        pos0 = self.f.next_pos
        with LayerHeartbeat(self.f.model, self.client):
            out = self.f.forward(ids, output_attentions=True)
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
