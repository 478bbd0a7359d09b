#!/usr/bin/env python3
"""The host tier and recall (docs/tier.md) in the transformers adapter,
against the real parts: a private memdecayd, the Python binding over
libmemdecay and SmolLM2-135M in HF format.

1. Recall: a chat at a 128-token budget with a 24-page tier.  After every
   forward:
   - every cache entry is, bit for bit, the entry the model wrote for that
     position when it was fed (a restored entry is the one that left);
   - the entries are in position order;
   - the daemon's tier holds at most its budget;
   - the adapter's tier holds what the daemon counts.
   Questions about the early turns make the daemon restore pages, and then a
   forward over the cache gives the same logits as one over a cache built
   from those entries' copies (the never-evicted reference).
2. Tier budget live: `memdecayctl set tier.pages=4` shrinks the tier at the
   next pass (drop commands), and it stays within 4 pages at every step.
3. memdecayd killed mid-recall: the chunk that was waiting for the daemon's
   decision still returns, the next turns are served from the resident
   entries, and the cache stays exact.

Environment: MEMDECAY_BIN (memdecayd, memdecayctl), MEMDECAY_LIBRARY
(libmemdecay), MEMDECAY_HF_MODEL (the model directory).  Exit 0 = pass."""
import json
import os
import signal
import sys
import threading

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from memdecay import Region
from memdecay_transformers import Feeder, MemDecayOnline, encode_messages, question_ids
from memdecay_transformers.daemon import Daemon
from memdecay_transformers.pages import LayerHeartbeat
from chats import chat  # noqa: E402  (tests/chats.py)
from test_adapter import check  # noqa: E402  (one way to report a check)

P = 16
BUDGET = 128
TIER = 24
torch.manual_seed(0)
torch.set_num_threads(int(os.environ.get("MEMDECAY_TORCH_THREADS", "2")))


class Watch:
    """The online adapter with a copy of every entry as the model wrote it."""

    def __init__(self, on, d):
        self.on, self.d = on, d
        self.f = on.f
        self.first = {}   # position -> per layer (key, value) when fed
        self.steps = 0
        self.tier_peak = 0

    def feed(self, ids, regions):
        pos0 = self.f.next_pos
        new = list(range(pos0, pos0 + len(ids)))
        grab = {}
        orig = self.f.forward

        def forward(ids_, **kw):     # copies the chunk's entries right after its forward
            out = orig(ids_, **kw)
            grab.update(zip(new, self._entries(new)))
            return out
        self.f.forward = forward
        try:
            out = self.on.forward(ids, regions)
        finally:
            self.f.forward = orig
        self.first.update(grab)
        self.steps += 1
        self.verify()
        return out

    def _entries(self, positions):
        at = {p: i for i, p in enumerate(self._phys_positions(positions))}
        return [[(lay.keys[:, :, at[p]].clone(), lay.values[:, :, at[p]].clone())
                 for lay in self.f.cache.layers] for p in positions]

    def _phys_positions(self, new):
        # right after the forward the cache is the entries before it, then the chunk
        return list(self.on.cache_pos) + list(new)

    def verify(self):
        pos = self.on.kept_positions()
        check_quiet(pos == sorted(set(pos)), "entries in position order")
        check_quiet(len(pos) == self.f.phys_len(), "one position per entry")
        for i, p in enumerate(pos):
            for li, lay in enumerate(self.f.cache.layers):
                k0, v0 = self.first[p][li]
                if not (torch.equal(lay.keys[:, :, i], k0) and torch.equal(lay.values[:, :, i], v0)):
                    check(False, "entry of position %d (layer %d) is the one written for it" % (p, li))
        seq = self.on.seq
        check_quiet(len(seq.tier) <= seq.tier_capacity, "adapter tier within its capacity")
        check_quiet(sorted(self.on.tier.kv) == seq.tier_positions(),
                    "tier entries = the tier pages' positions")
        if self.d is not None:
            st = engine_stats(self.d)
            if st["tier_pages"] > st["tier_budget_pages"]:
                check(False, "daemon tier %d pages within budget %d"
                      % (st["tier_pages"], st["tier_budget_pages"]))
            check_quiet(True, "daemon tier within its budget")
            self.tier_peak = max(self.tier_peak, st["tier_pages"])

    def reference_logits(self, ids):
        """The chunk's last logits over a cache built from the first copies of
        the entries now resident: what a cache that never evicted them gives."""
        pos = self.on.kept_positions()
        cache = DynamicCache()
        for li in range(len(self.f.cache.layers)):
            k = torch.stack([self.first[p][li][0] for p in pos], 2)
            v = torch.stack([self.first[p][li][1] for p in pos], 2)
            cache.update(k, v, li)
        n = len(ids)
        new = list(range(self.f.next_pos, self.f.next_pos + n))
        # the engine stays attached through this forward too (heartbeat per layer)
        with torch.no_grad(), LayerHeartbeat(self.f.model, self.on.client):
            out = self.f.model(input_ids=torch.tensor([ids]), past_key_values=cache,
                               position_ids=torch.tensor([new]),
                               cache_position=torch.arange(len(pos), len(pos) + n),
                               use_cache=True, logits_to_keep=1)
        return out.logits[0, -1]


_quiet = {}


def check_quiet(cond, what):
    """check(), printed once per kind of check."""
    if not cond:
        check(False, what)
    if what not in _quiet:
        _quiet[what] = 1
        print("ok:", what, "(every step)")


def engine_stats(d):
    js = json.loads(d.ctl("stats", "--json").stdout)
    return js["engines"][0]


FACT = {"role": "user", "content": "Write this down: the vault code is 4417 and the courier "
        "is named Ostrava."}
NOTED = {"role": "assistant", "content": "Noted: vault code 4417, courier Ostrava."}


def feed_chat(w, tok, turns, fact=False):
    msgs = chat(turns)
    if fact:        # a fact planted right after the system message, then the filler
        msgs = msgs[:1] + [FACT, NOTED] + msgs[1:]
    ids, regions, spans = encode_messages(tok, msgs)
    for a, b, _ in spans:
        w.feed(ids[a:b], regions[a:b])


def recall(model, tok, d):
    # a 135M model's attention is spread thin over a short chat: a tier page the
    # question attends scores within a few percent of its victim, so the margin is
    # 0 here (a restore still has to beat its victim) and tau low enough that the
    # question's estimates refresh the tokens it attends most
    d.ctl("set", "recall.max_per_pass=8", "recall.margin=0", "memdecay.tau=0.01")
    f = Feeder(model)
    on = MemDecayOnline(f, policy="memdecay", budget_tokens=BUDGET, socket=d.sock,
                        tier_pages=TIER)
    w = Watch(on, d)
    feed_chat(w, tok, 6, fact=True)
    st = engine_stats(d)
    check(st["tier_in"] > 0 and on.seq.tier, "evicted pages went to the tier (%d entered, %d held)"
          % (st["tier_in"], len(on.seq.tier)))
    for q in ("What is the vault code?", "What is the courier's name?",
              "Repeat the vault code and the courier's name."):
        ids = question_ids(tok, q)
        w.feed(ids, [int(Region.USER)] * len(ids))
    st = engine_stats(d)
    check(st["estimates"] > 0, "estimates published (%d records)" % st["estimates"])
    check(on.seq.stats["restores"] > 0 and st["recalls"] == on.seq.stats["restores"],
          "the daemon restored pages (%d restores applied, daemon counts %d recalls, "
          "%d decided)" % (on.seq.stats["restores"], st["recalls"], st["restores"]))
    nxt = question_ids(tok, "And part 2?")
    ref = w.reference_logits(nxt)
    out = w.feed(nxt, [int(Region.USER)] * len(nxt))
    diff = float((out.logits[0, -1] - ref).abs().max())
    check(diff <= 1e-4, "after recall, logits equal the never-evicted reference's "
          "(max |diff| %.2e)" % diff)
    check(w.tier_peak <= TIER, "daemon tier peaked at %d of %d pages" % (w.tier_peak, TIER))
    print("recall: steps %d, tier in %d, restores %d, drops %d, hits %d, tier bytes %d"
          % (w.steps, st["tier_in"], st["recalls"], st["tier_drops"], st["recall_hits"],
             st["tier_bytes"]))
    on.close()


def budget_live(model, tok, d):
    f = Feeder(model)
    on = MemDecayOnline(f, policy="memdecay", budget_tokens=BUDGET, socket=d.sock,
                        tier_pages=TIER)
    w = Watch(on, d)
    feed_chat(w, tok, 4)
    before = len(on.seq.tier)
    check(before > 4, "tier holds %d pages before the change" % before)
    r = d.ctl("set", "tier.pages=4")
    check(r.returncode == 0, "memdecayctl set tier.pages=4: %s" % (r.stdout + r.stderr).strip())
    ids = question_ids(tok, "What was in part 3 of the log?")
    w.feed(ids, [int(Region.USER)] * len(ids))
    feed_chat_more = encode_messages(tok, chat(2))
    a, b, _ = feed_chat_more[2][1]
    w.feed(feed_chat_more[0][a:b], feed_chat_more[1][a:b])
    st = engine_stats(d)
    check(st["tier_budget_pages"] == 4 and st["tier_pages"] <= 4 and len(on.seq.tier) <= 4,
          "tier shrunk to its new budget: daemon %d, adapter %d pages (budget %d, %d drops)"
          % (st["tier_pages"], len(on.seq.tier), st["tier_budget_pages"], st["tier_drops"]))
    check(st["tier_drops"] >= before - 4, "drop commands for the excess (%d)" % st["tier_drops"])
    on.close()


def killed(model, tok, bindir):
    d = Daemon(bindir)
    try:
        f = Feeder(model)
        on = MemDecayOnline(f, policy="memdecay", budget_tokens=BUDGET, socket=d.sock,
                            tier_pages=TIER, recall_wait_s=3.0)
        w = Watch(on, d)
        feed_chat(w, tok, 4)
        check(on.seq.tier, "tier holds %d pages" % len(on.seq.tier))
        w.d = None
        # the daemon dies while the question's recall waits for its decision
        orig = on.client.settle_recall

        def settle_recall(timeout_ms, apply=None):
            os.kill(d.p.pid, signal.SIGKILL)
            d.p.wait()
            return orig(timeout_ms, apply=apply)
        on.client.settle_recall = settle_recall
        ids = question_ids(tok, "What did part 0 of the log list?")
        t = threading.Timer(60, lambda: os._exit(3))
        t.start()
        w.feed(ids, [int(Region.USER)] * len(ids))
        t.cancel()
        on.client.settle_recall = orig
        check(d.p.poll() is not None, "the recall wait returned with the daemon dead")
        got = []
        ids = question_ids(tok, "Say the code word.")
        out = w.feed(ids, [int(Region.USER)] * len(ids))
        for _ in range(4):
            t_ = int(out.logits[0, -1].argmax())
            got.append(t_)
            out = w.feed([t_], [int(Region.ASSISTANT)])
        check(len(got) == 4, "served on after the daemon died: %r" % tok.decode(got))
        on.close()
    finally:
        d.stop()


def main():
    bindir = os.environ["MEMDECAY_BIN"]
    model_dir = os.environ["MEMDECAY_HF_MODEL"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager",
                                                 dtype=torch.float32)
    model.eval()
    for section in (recall, budget_live):
        with Daemon(bindir) as d:
            try:
                section(model, tok, d)
            except BaseException:
                print("--- memdecayd's log:\n" + d.tail(), file=sys.stderr)
                raise
    killed(model, tok, bindir)
    print("all tier checks passed")


if __name__ == "__main__":
    main()
