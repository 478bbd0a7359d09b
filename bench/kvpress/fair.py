"""fair.py — kvpress's presses run the way the comparison needs them (docs/kvpress.md, "A fair
fight"): kept entries in position order, Random drawing afresh on every call, and the two
protections MemDecay has, given to every press:

  - `pinned`: the system message's tokens and the newest pages (as many as memdecayd protects
    by default: the page being filled plus `protect_recent` = 1 more) get the maximal score,
    the way kvpress keeps its sinks;
  - `paged`: the press's per-token scores pooled into one score per 16-token page (over every
    layer and head), and whole pages evicted lowest first until the budget holds, so that every
    layer and head keeps the same set, as memdecayd's pages do.

Nothing here changes kvpress: `ordered()` replaces one press object's compress (run.py's KeptMap
raises the protected entries' scores with `pin_scores`), and `PagedRunner` registers a BasePress
of its own (`PoolScores`) that only reads the wrapped press's scores."""
import torch

from kvpress import BasePress, RandomPress

from memdecay import Region

PAGE = 16
RECENT_PAGES = 2      # memdecayd's default: the tail page plus protect_recent (1)


class Protect:
    """Which true positions a pinned row keeps by maximal score: the pinned regions' tokens and
    the newest RECENT_PAGES pages of what has been fed so far."""

    def __init__(self, regions, pinned=(int(Region.SYSTEM),), recent_pages=RECENT_PAGES):
        self.pinned_pos = {p for p, r in enumerate(regions) if int(r) in pinned}
        self.recent_pages = recent_pages

    def positions(self, positions, n_fed):
        """A bool tensor over `positions`: protected or not, n_fed tokens fed so far."""
        first = (n_fed - 1) // PAGE - (self.recent_pages - 1)
        return torch.tensor([p in self.pinned_pos or p // PAGE >= first for p in positions],
                            dtype=torch.bool)


def ordered(press):
    """After each compression the kept entries stay in cache order (ascending slot, hence
    ascending position): kvpress's ScorerPress.compress gathers them in top-k order, which
    scrambles the cache for every later compression that scores by slot (StreamingLLM)."""
    def compress(module, hidden_states, keys, values, attentions, kwargs):
        if press.compression_ratio == 0:
            return keys, values
        scores = press.score(module, hidden_states, keys, values, attentions, kwargs)
        n_kept = int(keys.shape[2] * (1 - press.compression_ratio))
        idx = scores.topk(n_kept, dim=-1).indices.sort(dim=-1).values
        idx = idx.unsqueeze(-1).expand(-1, -1, -1, keys.shape[-1])
        return keys.gather(2, idx).contiguous(), values.gather(2, idx).contiguous()
    press.compress = compress
    return press


class FreshRandomPress(RandomPress):
    """kvpress's RandomPress reseeds its generator on every call when given a seed, so every
    layer and every compression draws the same scores.  This one seeds once and draws afresh on
    each call: reproducible per run, independent per layer and step."""

    def __post_init__(self):
        super().__post_init__()
        self._gen = torch.Generator()
        self._gen.manual_seed(self.seed or 0)

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        return torch.rand(*keys.shape[:-1], generator=self._gen, dtype=torch.float32).to(
            keys.dtype)


def pin_scores(scores, protected):
    """scores (1, KV, k) with every protected entry raised to the maximal score (the row's
    maximum plus one, so ties among protected entries stay ties)."""
    if protected.any():
        scores = scores.clone()
        top = scores.amax(dim=-1, keepdim=True) + 1
        scores[..., protected] = top.expand_as(scores)[..., protected]
    return scores


class PoolScores(BasePress):
    """Registered like any press, it compresses nothing: after each attention layer it asks the
    wrapped press for that layer's scores of the whole cache (the same arguments kvpress's own
    hook passes) and keeps them for PagedRunner."""

    def __init__(self, press, want):
        self.press = press
        self.want = want          # a callable: should this forward be scored?
        self.scores = {}

    def post_init_from_model(self, model):
        self.press.post_init_from_model(model)

    def forward_hook(self, module, input, kwargs, output):
        if not self.want():
            return output
        cache = kwargs["past_key_values"]
        layer = cache.layers[module.layer_idx]
        s = self.press.score(module, kwargs["hidden_states"], layer.keys, layer.values,
                             output[1], kwargs)
        self.scores[module.layer_idx] = s.detach().float()
        return output


class PagedRunner:
    """A press deciding between forwards, by page, for every layer and head at once.

    Each layer's scores are averaged over heads and standardised (zero mean, unit spread:
    layers' scales differ), then averaged over layers; a page's score is the mean of its
    tokens'.  Pages are evicted lowest score first, protected ones never, until the cache
    holds at most `budget` tokens: memdecayd's rule."""

    def __init__(self, model, feeder, press, budget, protect=None):
        self.model, self.f, self.press = model, feeder, press
        self.budget, self.protect = budget, protect
        self.pos = []             # true position of each cache entry, physical order
        self._score_now = False
        self.pool = PoolScores(press, lambda: self._score_now)

    def forward(self, ids, output_attentions=False, logits_to_keep=0):
        new = list(range(self.f.next_pos, self.f.next_pos + len(ids)))
        k_pos = self.pos + new
        self._score_now = len(k_pos) > self.budget
        if self._score_now and hasattr(self.press, "compression_ratio"):
            # presses that read their ratio (StreamingLLM's window) see the one this step needs
            self.press.compression_ratio = 1.0 - self.budget / len(k_pos)
        with torch.no_grad(), self.pool(self.model):
            out = self.f.forward(ids, output_attentions=output_attentions,
                                 logits_to_keep=logits_to_keep)
        if self._score_now:
            keep = self.decide(k_pos, new[-1] + 1)
            self.f.keep(keep)
            k_pos = [k_pos[i] for i in keep]
        self.pool.scores.clear()
        self.pos = k_pos
        return out

    def decide(self, k_pos, n_fed):
        per_layer = []
        for s in self.pool.scores.values():
            x = s[0].mean(0)                                   # (k,)
            sd = x.std()
            per_layer.append((x - x.mean()) / sd if sd > 0 else torch.zeros_like(x))
        tok = torch.stack(per_layer).mean(0)
        prot = (self.protect.positions(k_pos, n_fed) if self.protect is not None
                else torch.zeros(len(k_pos), dtype=torch.bool))
        pages = {}
        for i, p in enumerate(k_pos):
            pages.setdefault(p // PAGE, []).append(i)
        cand = sorted((float(tok[ix].mean()), pg) for pg, ix in pages.items()
                      if not bool(prot[ix].any()))
        live = len(k_pos)
        dropped = set()
        for _, pg in cand:
            if live <= self.budget:
                break
            dropped.add(pg)
            live -= len(pages[pg])
        return [i for i, p in enumerate(k_pos) if p // PAGE not in dropped]
