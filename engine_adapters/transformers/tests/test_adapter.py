#!/usr/bin/env python3
"""The transformers adapter against the real parts: a private memdecayd, the
Python binding over libmemdecay, kvpress 0.5.5 and SmolLM2-135M in HF format.

1. One-shot (kvpress's own mode): MemDecayPress compresses a chat prefill to
   half; every layer keeps the same tokens, whole pages go, the system message
   stays, and the cache the model continues from is the kept tokens.
2. Inside DecodingPress: the cache is held at target_size while decoding, and
   the system message stays.
3. Online (MemDecayOnline): a multi-turn chat at a token budget; the cache is
   never above budget plus one page after a turn, positions are never
   renumbered, the system message stays, and the model still answers from it.

Environment: MEMDECAY_BIN (memdecayd, memdecayctl), MEMDECAY_LIBRARY
(libmemdecay), MEMDECAY_HF_MODEL (the model directory).  Exit 0 = pass."""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from kvpress import DecodingPress
from kvpress.utils import compute_n_kept

from memdecay import Region
from memdecay_transformers import (Feeder, MemDecayOnline, MemDecayPress, assistant_header_ids,
                                   encode_messages, question_ids)
from memdecay_transformers.daemon import Daemon
from chats import chat  # noqa: E402  (tests/chats.py)

P = 16
torch.manual_seed(0)
torch.set_num_threads(int(os.environ.get("MEMDECAY_TORCH_THREADS", "2")))



def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)


def greedy(feeder, online, ids, regions, n):
    """Feeds ids, then decodes n tokens greedily; returns the text ids."""
    out = online.forward(ids, regions) if online else feeder.forward(ids)
    got = []
    for _ in range(n):
        t = int(out.logits[0, -1].argmax())
        got.append(t)
        out = (online.forward([t], [int(Region.ASSISTANT)]) if online else feeder.forward([t]))
    return got


def one_shot(model, tok, d):
    msgs = chat(3)
    ids, regions, spans = encode_messages(tok, msgs)
    sys_end = spans[0][1]
    press = MemDecayPress(compression_ratio=0.5, socket=d.sock,
                          memdecayctl=os.path.join(d.bindir, "memdecayctl"))
    press.feed(regions, [(a, b) for a, b, _ in spans])
    cache = DynamicCache(config=model.config)
    with torch.no_grad(), press(model):
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    n, budget = len(ids), compute_n_kept(len(ids), 0.5)
    lens = {lay.keys.shape[2] for lay in cache.layers}
    check(len(lens) == 1, "one-shot: every layer keeps the same number of tokens (%s)" % lens)
    kept = lens.pop()
    check(budget - P < kept <= budget,
          "one-shot: %d of %d tokens kept, budget %d (whole pages)" % (kept, n, budget))
    check(press.cache_pos == sorted(press.cache_pos) and len(press.cache_pos) == kept,
          "one-shot: the kept positions are the cache, in order")
    check(all(p in press.cache_pos for p in range(sys_end)),
          "one-shot: all %d system tokens kept" % sys_end)
    gone = sorted(set(range(n)) - set(press.cache_pos))
    by_page = {}
    for p in gone:
        by_page.setdefault(press.seq.page_of.get(p, -1), []).append(p)
    check(press.stats["evicted_tokens"] == n - kept, "one-shot: evictions reported by the press")
    print("   daemon stats:", d.ctl("stats").stdout.strip()[:400])
    press.close()


def decoding(model, tok, d):
    msgs = chat(2) + [{"role": "user", "content": "What is the secret code word?"}]
    ids, regions, spans = encode_messages(tok, msgs)
    ids += assistant_header_ids(tok)
    regions += [int(Region.ASSISTANT)] * (len(ids) - len(regions))
    target = 128
    base = MemDecayPress(socket=d.sock, memdecayctl=os.path.join(d.bindir, "memdecayctl"))
    dp = DecodingPress(base_press=base, compression_interval=1, target_size=target,
                       hidden_states_buffer_size=0)
    f = Feeder(model)
    base.feed(regions, [(a, b) for a, b, _ in spans] + [(spans[-1][1], len(ids))])
    sizes = []
    with dp(model):
        out = f.forward(ids)
        for _ in range(12):
            t = int(out.logits[0, -1].argmax())
            base.feed([int(Region.ASSISTANT)])
            out = f.forward([t])
            sizes.append(f.phys_len())
    check(len(ids) > target, "decoding: the prompt (%d tokens) is over target %d" % (len(ids), target))
    check(max(sizes[1:]) <= target + 1,
          "decoding: cache held at target %d (+1 new token) while decoding: %s" % (target, sizes))
    sys_end = spans[0][1]
    check(all(p in base.cache_pos for p in range(sys_end)), "decoding: system tokens kept")
    base.close()


def online(model, tok, d):
    budget = 160
    f = Feeder(model)
    on = MemDecayOnline(f, policy="memdecay", budget_tokens=budget, socket=d.sock)
    msgs = chat(4)
    ids, regions, spans = encode_messages(tok, msgs)
    sys_end = spans[0][1]
    peak = 0
    for a, b, _ in spans:
        on.forward(ids[a:b], regions[a:b])
        peak = max(peak, f.phys_len())
        check(f.phys_len() <= budget + P or f.phys_len() <= b,
              "online: after a turn the cache holds %d tokens (budget %d)" % (f.phys_len(), budget))
    q = question_ids(tok, "What is the secret code word?")
    got = greedy(f, on, q, [int(Region.USER)] * len(q), 12)
    text = tok.decode(got)
    pos = on.kept_positions()
    check(pos == sorted(set(pos)) and pos[-1] == f.next_pos - 1 and len(pos) == f.phys_len(),
          "online: the cache's positions are the original ones, in order (last %d)" % pos[-1])
    check(all(p in pos for p in range(sys_end)), "online: all system tokens kept")
    check(len(ids) + len(q) > budget * 1.5, "online: the chat (%d tokens) is well over budget" % len(ids))
    check("PELICAN" in text.upper(), "online: the model still answers from the system message: %r" % text)
    on.close()


def refusals(model, tok, d):
    """A bad argument is refused before anything runs, naming it; the policy names
    are the daemon's."""
    for kw, name in (({"compression_ratio": 1.5}, "compression_ratio"),
                     ({"compression_ratio": "half"}, "compression_ratio"),
                     ({"policy": "nosuch"}, "policy"), ({"policy": ["memdecay"]}, "policy")):
        try:
            MemDecayPress(socket=d.sock, **kw)
            check(False, "MemDecayPress refuses %s" % kw)
        except ValueError as e:
            check(name in str(e) and ("memdecay-turn" in str(e) or name != "policy"),
                  "MemDecayPress refuses %s: %s" % (kw, e))
    f = Feeder(model)
    for kw, name in (({"budget_tokens": -5}, "budget_tokens"),
                     ({"budget_tokens": "abc"}, "budget_tokens"), ({"policy": "x y"}, "policy")):
        try:
            MemDecayOnline(f, socket=d.sock, **kw)
            check(False, "MemDecayOnline refuses %s" % kw)
        except ValueError as e:
            check(name in str(e), "MemDecayOnline refuses %s: %s" % (kw, e))


def main():
    bindir = os.environ["MEMDECAY_BIN"]
    model_dir = os.environ["MEMDECAY_HF_MODEL"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager",
                                                 dtype=torch.float32)
    model.eval()
    for section in (refusals, one_shot, decoding, online):
        with Daemon(bindir) as d:
            try:
                section(model, tok, d)
                stats = d.ctl("stats").stdout
            except BaseException:
                print("--- memdecayd's log:\n" + d.tail(), file=sys.stderr)
                raise
            # a forward on a loaded machine can take seconds: the adapter beats per layer
            check("heartbeat=0" in stats, "%s: no engine was detached for a stale heartbeat"
                  % section.__name__)
    print("all transformers adapter checks passed")


if __name__ == "__main__":
    main()
