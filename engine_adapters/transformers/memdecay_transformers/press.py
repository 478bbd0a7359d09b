"""MemDecayPress: a kvpress ScorerPress whose decisions are memdecayd's.

kvpress calls a press once per attention layer.  MemDecay decides per page for
the whole sequence (every layer drops the same pages, as the llama.cpp adapter
does), so the press gathers each layer's attention as the forward passes through
it, and at the last layer: declares the new tokens to the daemon with their
regions, publishes one step per chunk (a message, or a decode step) with each
page's attention mass averaged over layers, heads and the chunk's queries, sets
the budget, waits for the daemon's evictions, and drops the evicted pages from
every layer's cache.  `score()` turns the daemon's decision into kvpress scores:
kept tokens above evicted ones, evicted ones in the daemon's eviction order.

One-shot (kvpress's own mode): `with press(model): model(ids)` compresses the
prefill once, to `compression_ratio`.  Give the regions and the message spans
first with `press.feed(regions, chunks)`; the prefill is then replayed into the
daemon message by message (the clock advancing by each message's tokens) before
the one decision.  Without `feed` every token is `user` and the prefill is one
step.

Online: `DecodingPress(base_press=MemDecayPress(...), compression_interval=1,
target_size=B)`.  Call `press.feed(regions)` before each forward with that
forward's tokens' regions; the daemon sees every forward as one step and keeps
the sequence at B tokens.  Positions are never renumbered: pass the true
`position_ids` and the physical `cache_position` (see online.py)."""
import logging
import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch

from kvpress import ScorerPress
from kvpress.utils import compute_n_kept

import memdecay
from memdecay import Region, checks
from .pages import SeqPages, beat, set_budget

log = logging.getLogger("memdecay_transformers")

try:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
except ImportError:  # pragma: no cover
    apply_rotary_pos_emb = None


def window_attention(module, hidden, keys, q_pos, k_pos):
    """Mean-over-heads attention of `hidden`'s queries (true positions q_pos) to
    the cached keys (true positions k_pos), recomputed the way the layer does:
    (n_q, n_k) float64 numpy."""
    b, n, _ = hidden.shape
    hd = module.head_dim
    q = module.q_proj(hidden).view(b, n, -1, hd).transpose(1, 2)
    pos = torch.as_tensor(q_pos, dtype=torch.long).unsqueeze(0)
    cos, sin = module.rotary_emb(hidden, pos)
    q, _ = apply_rotary_pos_emb(q, q, cos, sin)
    rep = q.shape[1] // keys.shape[1]
    k = keys.repeat_interleave(rep, dim=1)
    att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd)
    kp = torch.as_tensor(k_pos)
    qp = torch.as_tensor(q_pos)
    att = att.masked_fill(kp[None, :] > qp[:, None], float("-inf"))
    att = torch.softmax(att.float(), dim=-1)
    return att[0].mean(0).double().numpy()


@dataclass
class MemDecayPress(ScorerPress):
    """compression_ratio: kvpress's (fraction removed).  policy: a memdecayd
    policy (memdecay, memdecay-norm, memdecay-turn, h2o, recency, random, ...).
    socket: memdecayd's control socket (default $MEMDECAY_SOCKET).
    memdecayctl: the memdecayctl program that sets the budget (default
    $MEMDECAY_BIN/memdecayctl, else memdecayctl on PATH)."""
    compression_ratio: float = 0.0
    policy: str = "memdecay"
    socket: str = None
    memdecayctl: str = None
    page_tokens: int = 16
    page_capacity: int = 4096
    engine_name: str = "kvpress"

    def __post_init__(self):
        r = self.compression_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r < 1:
            raise ValueError("compression_ratio=%s: want a fraction of the cache to remove, "
                             "from 0 up to (not including) 1" % checks.show(r))
        checks.policy(self.policy, "policy", checks.known_policies(self.socket))
        super().__post_init__()
        self.client = None
        self.seq = None
        self._budget = None
        self.reset_sequence()

    # ---- context ----
    def reset_sequence(self):
        """Forgets the sequence (a new prompt); the daemon frees its pages."""
        if self.client is not None and self.seq is not None:
            self.client.seq_end(0)
        self.seq = None
        self.fed_regions = []
        self.fed_chunks = []      # (start, end) into the fed tokens, one per step
        self.accounted = 0        # fed tokens the daemon has been told about
        self.cache_pos = []       # true position of each cache entry, in cache order
        self.kept = None          # last decision: bool mask over cache_pos
        self._att = None
        self.order = {}           # position -> rank in the daemon's eviction order
        self.stats = {"decisions": 0, "evicted_tokens": 0, "detached": 0}

    def feed(self, regions, chunks=None):
        """Tokens about to be appended (one forward): their region ids, and
        optionally how they split into steps ((start, end) within this feed)."""
        base = len(self.fed_regions)
        self.fed_regions.extend(int(r) for r in regions)
        if chunks is None:
            chunks = [(0, len(regions))]
        self.fed_chunks.extend((base + a, base + b) for a, b in chunks)

    def _connect(self):
        if self.client is None:
            self.client = memdecay.Client(socket_path=self.socket, engine_name=self.engine_name,
                                          page_tokens=self.page_tokens,
                                          page_capacity=self.page_capacity, max_seqs=1,
                                          policy=self.policy, require_daemon=True)
        if self.seq is None:
            self.seq = SeqPages(self.client, 0, self.page_tokens)

    def close(self):
        if self.client is not None:
            self.client.close()
            self.client = None
            self.seq = None

    # ---- the kvpress hooks ----
    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        k_len = keys.shape[2]
        s = torch.zeros(keys.shape[0], keys.shape[1], k_len)
        if self.kept is None or len(self.kept) != k_len:
            return s + 1.0
        n = len(self.order) + 1
        for i, p in enumerate(self.cache_pos):
            s[..., i] = 2.0 if self.kept[i] else 1.0 - (self.order.get(p, 0) + 1) / n
        return s

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        layer = module.layer_idx
        n_layers = module.config.num_hidden_layers
        k_len = keys.shape[2]
        if layer == 0:
            self._begin(k_len)
        # a heartbeat per layer: a long forward is not a hung engine (pages.LayerHeartbeat)
        beat(self.client)
        q_pos = self._q_positions(hidden_states.shape[1])
        if (attentions is not None and attentions.shape[-2] == len(q_pos)
                and attentions.shape[-1] == k_len):
            att = attentions[0].float().mean(0).double().numpy()
        else:
            att = window_attention(module, hidden_states, keys, q_pos, self._k_pos)
        self._att = att if self._att is None else self._att + att
        if layer != n_layers - 1:
            return keys, values
        # last layer: one decision for every layer
        att = self._att / n_layers
        self._att = None
        budget = compute_n_kept(k_len, self.compression_ratio) if self.compression_ratio else 0
        keep = self._decide(att, q_pos, budget)
        if keep is None:
            return keys, values
        idx = torch.as_tensor(np.flatnonzero(keep))
        cache = kwargs["past_key_values"]
        for i in range(n_layers - 1):
            lay = cache.layers[i]
            lay.keys = lay.keys.index_select(2, idx).contiguous()
            lay.values = lay.values.index_select(2, idx).contiguous()
        self.cache_pos = [p for p, k in zip(self._k_pos, keep) if k]
        return keys.index_select(2, idx).contiguous(), values.index_select(2, idx).contiguous()

    # ---- helpers ----
    def _begin(self, k_len):
        self._connect()
        n_new = k_len - len(self.cache_pos)
        if n_new > len(self.fed_regions) - self.accounted:
            # tokens nobody described (kvpress's pipeline, a prompt without feed)
            missing = n_new - (len(self.fed_regions) - self.accounted)
            self.feed([int(Region.USER)] * missing)
        start = self._next_pos()
        self._new_pos = list(range(start, start + n_new))
        self._k_pos = self.cache_pos + self._new_pos

    def _next_pos(self):
        # positions are the fed token indices: never renumbered after an eviction
        return self.accounted

    def _q_positions(self, n_q):
        end = self.accounted + len(self._new_pos)
        return list(range(end - n_q, end))

    def _decide(self, att, q_pos, budget):
        seq = self.seq
        k_index = {p: j for j, p in enumerate(self._k_pos)}
        q_index = {p: i for i, p in enumerate(q_pos)}
        end = self.accounted + len(self._new_pos)
        chunks = [(a, b) for a, b in self.fed_chunks if b > self.accounted and a < end]
        for a, b in chunks:
            a = max(a, self.accounted)
            seq.append(range(a, b), self.fed_regions[a:b])
            rows = [q_index[p] for p in range(a, b) if p in q_index]
            if rows:
                m = att[rows].mean(axis=0)
                mass = {p: m[j] for p, j in k_index.items() if p < b and p in seq.page_of}
            else:
                mass = {}
            seq.publish(b - a, mass)
            self.accounted = b
        if not self.client.attached:
            # fail open: without the daemon nothing is evicted (and nothing is decided here)
            if not self.stats["detached"]:
                log.warning("memdecay press: detached from memdecayd (%s); keeping every token",
                            self.client.last_error or "no reason given")
            self.stats["detached"] += 1
            self.kept = np.ones(len(self._k_pos), dtype=bool)
            self.cache_pos = list(self._k_pos)
            return None
        if budget and budget != self._budget:
            set_budget(self._ctl(), self.client.socket_path, self.client.engine_id, budget)
            self._budget = budget
        evicted = seq.settle(self._budget or 0)
        self.stats["decisions"] += 1
        self.stats["evicted_tokens"] += len(evicted)
        for p in evicted:
            self.order[p] = len(self.order)
        live = seq.page_of
        keep = np.array([p in live for p in self._k_pos], dtype=bool)
        self.kept = keep
        if keep.all():
            self.cache_pos = list(self._k_pos)
            return None
        return keep

    def _ctl(self):
        if self.memdecayctl:
            return self.memdecayctl
        b = os.environ.get("MEMDECAY_BIN")
        return os.path.join(b, "memdecayctl") if b else "memdecayctl"
