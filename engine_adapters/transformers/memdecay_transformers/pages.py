"""The engine side of one memdecayd sequence: the page mirror of a token list.

`SeqPages` declares tokens to the daemon in pages of P tokens (PAGE_OPEN /
PAGE_GROW with each token's region), publishes one step per appended chunk with
each live page's attention mass and refresh bitmap (md_publish_batch through the
binding), and frees the pages the daemon evicts, through libmemdecay's engine
contract (docs/adapters.md: apply_commands, and settle's bounded wait when a
budget is set).  What to drop is always the daemon's decision; this file only
keeps positions, pages and slots in step.

With a host tier (docs/tier.md, `tier_pages` > 0 and a daemon that grants
one), an evicted page moves to `tier` instead of being freed, a restore
command moves it back, a drop command frees it; the caller moves the K/V
entries of `tiered`, `restored` and `dropped` positions accordingly."""
import subprocess

import numpy as np

import memdecay
from memdecay import EVICTED


class SeqPages:
    def __init__(self, client, seq=0, page_tokens=16):
        self.c = client
        self.seq = seq
        self.P = page_tokens
        self.pages = {}          # slot -> [gen, positions(list), regions(list)]
        self.page_of = {}        # position -> slot
        self.tail = None         # slot of the page being filled
        self.batch = client.batch()
        self.evicted_order = []  # positions, in the order the daemon evicted them
        self._evicted = []       # positions freed by the current apply or settle
        self.tier = {}           # slot -> [gen, positions, regions]: in the host tier
        self.tier_capacity = 0   # pages this side can hold in its tier (0: none)
        self.tiered, self.restored, self.dropped = [], [], []  # positions, since take_moves
        self.pinned_mask = 1     # system, until the parameter block says otherwise
        self.stats = {"steps": 0, "evictions": 0, "settle_timeouts": 0, "unreachable": 0,
                      "tier_in": 0, "restores": 0, "restores_refused": 0, "drops": 0,
                      "estimates": 0, "recall_timeouts": 0}

    # ---- declaring tokens ----
    def append(self, positions, regions):
        """Declares new tokens (positions increasing) with their region ids."""
        touched = {}
        for p, r in zip(positions, regions):
            p, r = int(p), int(r)
            t = self.pages.get(self.tail) if self.tail is not None else None
            if t is not None and len(t[1]) < self.P and t[1][-1] == p - 1:
                t[1].append(p)
                t[2].append(r)
                touched[self.tail] = False
            else:
                slot, gen = self.c.page_open(self.seq, p, 1, memdecay.labels([r]))
                self.pages[slot] = [gen, [p], [r]]
                self.tail = slot
                touched[slot] = True
            self.page_of[p] = self.tail
        for slot, opened in touched.items():
            g = self.pages[slot]
            if len(g[1]) > 1 or not opened:
                self.c.page_grow(slot, len(g[1]), memdecay.labels(g[2]))

    def live_tokens(self):
        return sum(len(g[1]) for g in self.pages.values())

    def live_positions(self):
        return sorted(self.page_of)

    # ---- one step ----
    def publish(self, n_tokens, mass_of):
        """Advances the clock by n_tokens and publishes every live page's mass.

        mass_of: dict-like position -> this step's attention mass (averaged over
        the observed layers, heads and the step's queries); missing = 0."""
        prm = self.c.params()
        self.pinned_mask = prm["pinned_mask"]
        tau = prm["tau"]
        norm = float(self.live_tokens()) if prm["norm_mode"] == 1 else 1.0
        b = self.batch
        k = 0
        for slot, (gen, pos, _) in self.pages.items():
            m = [float(mass_of.get(p, 0.0)) for p in pos]
            bits = 0
            for j, v in enumerate(m):
                if v * norm > tau:
                    bits |= 1 << j
            b.slots[k] = slot
            b.mass[k] = sum(m)
            b.refresh[k] = bits
            k += 1
        self.c.publish(b, k, steps=[(self.seq, int(n_tokens))])
        self.c.check()
        self.stats["steps"] += 1

    def _apply(self, ev):
        """One command (libmemdecay hands it over).  Evict: the page leaves the
        mirror and is reported freed (1), or moves to the tier (2) when there
        is one with room.  Restore: back from the tier (1), or refused (0) for
        a page this side no longer holds there.  Drop: released from the tier
        (1).  0: a page this mirror no longer has."""
        if ev.type == memdecay.CMD_RESTORE:
            return self._restore(ev)
        if ev.type == memdecay.CMD_DROP:
            return self._drop(ev)
        g = self.pages.get(ev.slot)
        if g is None or g[0] != ev.gen:
            return 0
        for r in g[2]:
            if (self.pinned_mask >> r) & 1:
                raise AssertionError("memdecayd evicted a pinned page (slot %d, region %d)"
                                     % (ev.slot, r))
        del self.pages[ev.slot]
        for p in g[1]:
            del self.page_of[p]
        if self.tail == ev.slot:
            self.tail = None
        self._evicted.extend(g[1])
        self.evicted_order.extend(g[1])
        self.stats["evictions"] += 1
        if len(self.tier) < self.tier_capacity and self.c.tier_budget() > 0:
            self.tier[ev.slot] = g
            self.tiered.extend(g[1])
            self.stats["tier_in"] += 1
            return memdecay.KEPT_IN_TIER   # libmemdecay publishes PAGE_TIER IN
        self.c.page_free(ev.slot, EVICTED)
        return 1

    def _restore(self, ev):
        g = self.tier.get(ev.slot)
        if g is None or g[0] != ev.gen:
            self.stats["restores_refused"] += 1
            return 0
        del self.tier[ev.slot]
        self.pages[ev.slot] = g
        for p in g[1]:
            self.page_of[p] = ev.slot
        self.restored.extend(g[1])
        self.stats["restores"] += 1
        return 1

    def _drop(self, ev):
        g = self.tier.get(ev.slot)
        if g is None or g[0] != ev.gen:
            return 0
        del self.tier[ev.slot]
        self.dropped.extend(g[1])
        self.stats["drops"] += 1
        return 1

    def tier_positions(self):
        return sorted(p for g in self.tier.values() for p in g[1])

    def take_moves(self):
        """(tiered, restored, dropped) positions since the last call."""
        m = (self.tiered, self.restored, self.dropped)
        self.tiered, self.restored, self.dropped = [], [], []
        return m

    def publish_estimates(self, mass_of, need_of=None):
        """Estimates, flagged as such (docs/tier.md).  Each tier page's
        refresh bits by the same tau rule as publish, from mass_of (position
        -> estimated attention); its mass is need_of[slot] where given, else
        the sum of mass_of over its tokens.  need_of may also name resident
        pages: their estimate, measured like the tier's, is what the daemon
        compares a candidate with (their scores follow real attention)."""
        if not self.tier:
            return 0
        prm = self.c.params()
        tau = prm["tau"]
        norm = float(self.live_tokens()) if prm["norm_mode"] == 1 else 1.0
        b = self.batch
        k = 0
        for slot, (gen, pos, _) in self.tier.items():
            if k == b.capacity:
                break
            m = [float(mass_of.get(p, 0.0)) for p in pos]
            b.slots[k] = slot
            b.mass[k] = float(need_of[slot]) if need_of and slot in need_of else sum(m)
            b.refresh[k] = sum(1 << j for j, v in enumerate(m) if v * norm > tau)
            k += 1
        for slot, need in (need_of or {}).items():
            if k == b.capacity:
                break
            if slot in self.pages:
                b.slots[k], b.mass[k], b.refresh[k] = slot, float(need), 0
                k += 1
        self.c.publish_estimates(b, k)
        self.stats["estimates"] += k
        return k

    def settle_recall(self, timeout_s=1.0):
        """The bounded wait for the daemon's recall decisions after estimates
        (fail-open: a timeout is counted and serving goes on)."""
        r = self.c.settle_recall(int(timeout_s * 1000), apply=self._apply)
        if r.outcome == memdecay.Settle.TIMEOUT:
            self.stats["recall_timeouts"] += 1
        return r

    def apply_commands(self):
        """Frees the pages the daemon evicted; returns their positions."""
        self._evicted = []
        self.c.apply_commands(self._apply)
        return self._evicted

    def settle(self, budget, timeout_s=2.0):
        """Waits until the daemon has brought the sequence to its budget (or to
        what pinned and protected pages allow: libmemdecay's floor); returns the
        evicted positions.  The wait is libmemdecay's (Client.settle)."""
        if not budget:
            return self.apply_commands()
        self._evicted = []
        r = self.c.settle([self.seq], None, 0, int(timeout_s * 1000), apply=self._apply)
        if r.outcome == memdecay.Settle.UNREACHABLE:
            self.stats["unreachable"] += 1
        elif r.outcome == memdecay.Settle.TIMEOUT:
            self.stats["settle_timeouts"] += 1
        return self._evicted


class LayerHeartbeat:
    """Beats the engine's heartbeat before every decoder layer while a forward
    runs, so that a long forward (a prefill on a loaded CPU) is not taken for a
    hung engine: memdecayd detaches an engine whose heartbeat is older than
    daemon.heartbeat_timeout_ms (3 s by default; docs/operations.md).  It beats
    only while layers make progress, so a truly stuck engine is still detached.

        with LayerHeartbeat(model, client):
            model(...)"""

    def __init__(self, model, client):
        self.client = client
        self.layers = _decoder_layers(model)
        self.handles = []

    def _beat(self, *_):
        beat(self.client)

    def __enter__(self):
        self.handles = [m.register_forward_pre_hook(self._beat) for m in self.layers]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []


def beat(client):
    """One heartbeat (and the liveness check that comes with it) while attached."""
    if client is not None and client.attached:
        client.check()


def _decoder_layers(model):
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise TypeError("%s has no decoder layers at .model.layers" % type(model).__name__)
    return list(layers)


def set_budget(memdecayctl, socket, engine_id, tokens):
    """The engine's per-sequence token budget, through memdecayctl."""
    r = subprocess.run([memdecayctl, "--socket", socket, "budget", "sequence_tokens",
                        str(int(tokens)), "--engine", str(engine_id)],
                       capture_output=True, text=True, timeout=10)
    if r.returncode:
        raise RuntimeError("memdecayctl budget sequence_tokens %d --engine %d: %s"
                           % (tokens, engine_id, r.stderr.strip()))


def token_mass(attn, q_rows, k_positions):
    """attn: (n_q, n_k) mean attention; returns {position: mean over q_rows}."""
    m = attn[q_rows].mean(axis=0) if len(q_rows) else np.zeros(attn.shape[1])
    return dict(zip(k_positions, m.tolist()))
