#!/usr/bin/env python3
"""The transformers adapter on Gemma 3 270M (pretrained, HF format from the pinned
GGUF), a model whose layers mix a 512-token sliding window with full attention
(docs/transformers.md, "Sliding-window layers").

0. What transformers does on its own (printed, not asserted): the cache
   DynamicCache(config=...) keeps only the last 511 entries of each window
   layer and reports every token ever fed as its length, so dropping a page
   from it, or cropping a probe off it past the window, fails.
1. kv_cache + Feeder's position masks: fed in chunks, 700 tokens give the same
   logits as the model's own one-shot forward over its own cache (the window
   honoured past 512).
2. After evictions the window is by true position: a window layer puts no
   attention on a kept key 512 or more positions back, a full layer does.
3. The Gemma chat format: <bos> in the system span, every message a turn.
4. One-shot MemDecayPress on a 620-token prompt (over the window): every layer
   keeps the same tokens, whole pages, the system message.
5. Online (MemDecayOnline) past the window at a 400-token budget: never above
   budget + one page after a turn, positions the original ones, system kept,
   a probe cropped off the cache again, no stale heartbeat.
(Only the last position's logits are computed where only they are used:
Gemma's head over 262,144 tokens costs as much as the rest of the model.)

Environment: MEMDECAY_BIN, MEMDECAY_LIBRARY, MEMDECAY_GEMMA_HF_MODEL (exit 77 when
unset).  About 20 s on a quiet machine, one thread."""
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from kvpress.utils import compute_n_kept

from memdecay import Region
from memdecay_transformers import (Feeder, MemDecayOnline, MemDecayPress, chat_format,
                                   encode_messages, end_of_turn_id, kv_cache, question_ids,
                                   sliding_window)
from memdecay_transformers.daemon import Daemon
from chats import FILLER, chat  # noqa: E402  (tests/chats.py)
from memdecay_transformers.pages import LayerHeartbeat

P = 16
torch.manual_seed(0)
# one thread: on 2 shared cores a second one spins at torch's barriers while other
# jobs run (8x the CPU time was measured that way under load)
torch.set_num_threads(1)



T0 = time.monotonic()


def check(cond, what):
    if os.environ.get("MEMDECAY_TEST_TIMES"):
        what = "[%5.1f s] %s" % (time.monotonic() - T0, what)
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)


def default_cache_breaks(model, tok):
    ids = tok(FILLER * 30, add_special_tokens=False).input_ids[:600]
    c = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.tensor([ids[:100]]), past_key_values=c, use_cache=True)
    lens = sorted({lay.keys.shape[2] for lay in c.layers})
    print("   default cache after 100 tokens: entries per layer %s, get_seq_length %d"
          % (lens, c.get_seq_length()))
    keep = torch.tensor([i for i in range(100) if not 16 <= i < 32])
    for lay in c.layers:
        lay.keys, lay.values = lay.keys.index_select(2, keep), lay.values.index_select(2, keep)
    print("   after dropping one page: get_seq_length %d (entries %d)"
          % (c.get_seq_length(), c.layers[0].keys.shape[2]))
    try:
        with torch.no_grad():
            n = c.get_seq_length()
            model(input_ids=torch.tensor([[ids[100]]]), past_key_values=c, use_cache=True,
                  position_ids=torch.tensor([[100]]), cache_position=torch.tensor([n]))
        print("   the next decode ran (on a wrong cache position)")
    except Exception as e:  # noqa: BLE001 - what transformers raises is the finding
        print("   the next decode failed: %s: %s" % (type(e).__name__, str(e)[:160]))
    c = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]), past_key_values=c, use_cache=True, logits_to_keep=1)
    lens = sorted({lay.keys.shape[2] for lay in c.layers})
    print("   default cache after 600 tokens: entries per layer %s" % lens)
    try:
        c.crop(590)
        print("   crop(590) worked")
    except ValueError as e:
        print("   crop(590) refused: %s" % str(e)[:120])


def masks_match_model(model, tok):
    ids = tok(FILLER * 30, add_special_tokens=False).input_ids[:700]
    last = torch.arange(99, 700, 100)   # the last position of each chunk of 100
    with torch.no_grad():
        ref = model(input_ids=torch.tensor([ids]), use_cache=True, logits_to_keep=last,
                    past_key_values=DynamicCache(config=model.config)).logits[0]
    f = Feeder(model)
    check(all(type(lay).__name__ == "DynamicLayer" for lay in f.cache.layers) or
          not f.cache.layers, "kv_cache: full layers for a sliding-window model")
    got = []
    for a in range(0, len(ids), 100):
        got.append(f.forward(ids[a:a + 100], logits_to_keep=1).logits[0])
    got = torch.cat(got)
    err = float((got - ref).abs().max())
    check(f.phys_len() == 700 and all(lay.keys.shape[2] == 700 for lay in f.cache.layers),
          "kv_cache: all 700 entries in every layer")
    check(err < 2e-3, "700 tokens in chunks of 100 (past the 512 window): logits as the "
          "model's own forward, max |diff| %.2e" % err)


def window_by_position(model, tok):
    ids = tok(FILLER * 30, add_special_tokens=False).input_ids[:560]
    f = Feeder(model)
    f.forward(ids[:540], logits_to_keep=1)
    # drop positions 48..527 but for 64..79: 76 entries left, spanning 0..539
    keep = [i for i in range(540) if i < 48 or 64 <= i < 80 or i >= 528]
    f.keep(keep)
    out = f.forward(ids[540:541], output_attentions=True, logits_to_keep=1)
    q = 540
    old = [j for j, p in enumerate(f.pos[:-1]) if q - p >= sliding_window(model.config)]
    near = [j for j, p in enumerate(f.pos[:-1]) if q - p < sliding_window(model.config)]
    types = model.config.layer_types
    win = max(float(out.attentions[i][0, :, -1, old].sum(-1).max()) for i, t in enumerate(types)
              if t == "sliding_attention")
    full = min(float(out.attentions[i][0, :, -1, old].sum(-1).min()) for i, t in enumerate(types)
               if t == "full_attention")
    check(len(old) == 29 and len(near) == 47 and f.phys_len() == 77,
          "after evictions: 77 entries (all within 512 slots), 29 of them 512+ positions back")
    check(win == 0.0, "window layers: no attention 512+ positions back (max %.1e)" % win)
    check(full > 0.0, "full layers: attention there (min %.1e)" % full)


def labels(model, tok):
    check(chat_format(tok).name == "gemma", "chat format detected: gemma")
    check(end_of_turn_id(tok) == tok.convert_tokens_to_ids("<end_of_turn>") == 106,
          "end of turn: <end_of_turn> (106)")
    msgs = chat(1) + [{"role": "tool", "content": "ok"}]
    ids, regions, spans = encode_messages(tok, msgs)
    check(ids[0] == tok.bos_token_id and regions[0] == int(Region.SYSTEM),
          "<bos> first, in the system span")
    texts = [tok.decode(ids[a:b]) for a, b, _ in spans]
    check(texts[0].startswith("<bos><start_of_turn>user\n") and
          texts[2].startswith("<start_of_turn>model\n") and
          texts[3].startswith("<start_of_turn>user\n") and
          all(t.endswith("<end_of_turn>\n") for t in texts),
          "every message a turn: system and tool as user, assistant as model")
    full = tok.apply_chat_template(msgs, tokenize=True)
    full = full["input_ids"] if hasattr(full, "keys") else full
    check(list(full) == ids, "the saved chat template renders the same tokens")


def one_shot(model, tok, d):
    msgs = chat(7)
    ids, regions, spans = encode_messages(tok, msgs)
    sys_end = spans[0][1]
    press = MemDecayPress(compression_ratio=0.5, socket=d.sock,
                          memdecayctl=os.path.join(d.bindir, "memdecayctl"))
    press.feed(regions, [(a, b) for a, b, _ in spans])
    cache = kv_cache(model)
    with torch.no_grad(), press(model):
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True,
              logits_to_keep=1)
    n, budget = len(ids), compute_n_kept(len(ids), 0.5)
    lens = {lay.keys.shape[2] for lay in cache.layers}
    check(n > 512, "one-shot: the prompt (%d tokens) is over the window" % n)
    check(len(lens) == 1, "one-shot: every layer keeps the same number of tokens (%s)" % lens)
    kept = lens.pop()
    check(budget - P < kept <= budget, "one-shot: %d of %d kept, budget %d" % (kept, n, budget))
    check(all(p in press.cache_pos for p in range(sys_end)), "one-shot: system tokens kept")
    press.close()


def online(model, tok, d):
    budget = 400
    f = Feeder(model)
    on = MemDecayOnline(f, policy="memdecay", budget_tokens=budget, socket=d.sock)
    msgs = chat(8)
    ids, regions, spans = encode_messages(tok, msgs)
    sys_end = spans[0][1]
    for a, b, _ in spans:
        on.forward(ids[a:b], regions[a:b], logits_to_keep=1)
        check(f.phys_len() <= budget + P or f.phys_len() <= b,
              "online: after a turn the cache holds %d tokens (budget %d)" % (f.phys_len(), budget))
    check(len(ids) > 512 + 100, "online: the chat (%d tokens) is well past the window" % len(ids))
    pos = on.kept_positions()
    check(pos == f.pos and pos == sorted(set(pos)) and pos[-1] == f.next_pos - 1 and
          len(pos) == f.phys_len(), "online: the cache's positions are the original ones")
    check(all(p in pos for p in range(sys_end)), "online: all system tokens kept (<bos> too)")
    # a probe on the cache, then cropped off again (what the bench does)
    phys, nxt = f.phys_len(), f.next_pos
    q = question_ids(tok, "What is the secret code word?")
    with LayerHeartbeat(model, on.client):   # a forward outside the adapter still beats
        out = f.forward(q, logits_to_keep=1)
        t = int(out.logits[0, -1].argmax())
        f.forward([t], logits_to_keep=1)
    f.crop(phys, nxt)
    check(f.phys_len() == phys and f.pos == pos and
          all(lay.keys.shape[2] == phys for lay in f.cache.layers),
          "online: a probe cropped off the cache past the window")
    on.close()


def main():
    model_dir = os.environ.get("MEMDECAY_GEMMA_HF_MODEL")
    if not model_dir or not os.path.isdir(model_dir):
        print("MEMDECAY_GEMMA_HF_MODEL not set (scripts/setup_kvpress.sh); skipped")
        sys.exit(77)
    bindir = os.environ["MEMDECAY_BIN"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager",
                                                 dtype=torch.float32)
    model.eval()
    check(sliding_window(model.config) == 512, "Gemma 3: sliding window 512, layer types %s"
          % sorted(set(model.config.layer_types)))
    default_cache_breaks(model, tok)
    for section in (masks_match_model, window_by_position, labels):
        section(model, tok)
    for section in (one_shot, online):
        with Daemon(bindir) as d:
            try:
                section(model, tok, d)
                stats = d.ctl("stats").stdout
            except BaseException:
                print("--- memdecayd's log:\n" + d.tail(), file=sys.stderr)
                raise
            check("heartbeat=0" in stats, "%s: no engine was detached for a stale heartbeat"
                  % section.__name__)
    print("all Gemma checks passed")


if __name__ == "__main__":
    main()
