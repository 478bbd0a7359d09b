#!/usr/bin/env python3
"""test_adopt.py — a turn that adopts a session with holes attends exactly over
the retained blocks (docs/vllm.md "Sessions"), whether or not the worker
tracks it.

vLLM runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0: engine core and
worker here), the plugin on, a memdecayd of the test's own.  Turn 1 is the
bundled agent conversation (about 1,550 tokens) at a budget of 400 tokens, so
blocks are evicted; it finishes and is retained.  Turn 2 re-sends it with the
reply and a new question at the same budget, and adopts it.  At the first
layer of turn 2's first step, the output of vLLM's own CPU attention kernel
for the adopting request is compared with the same kernel run over a cache
gathered by hand: the retained blocks the request's block list names (not the
null block), copied in order into a fresh cache, with a block table without
holes.  It also checks that the request's positions continue where the
retained tokens end (num_computed_tokens = the tokens adopted), that the holes
are the retained session's, and that reading the block table uncompacted (the
null block's contents counted) would be measurably wrong.

The worker has one memdecayd sequence (MEMDECAY_VLLM_MAX_SEQS=1), and two more
turns adopt without one:
  - turn 3 with the worker's `track` hook failing (injected): the worker
    serves it without eviction and tracks nothing of it;
  - turn 4 batched behind another long request that holds the worker's one
    sequence: untracked, counted.
Each untracked adopter's first step is checked as turn 2's: the kernel's
output equals the reference over its kept blocks.

  test_adopt.py [--keep DIR]"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

check = harness.Checks()


def kernel(q, kv, table, seq_len, isa, scale):
    """vLLM's CPU attention for one request: q [n, H, D] over cache kv
    [blocks, KVH, bs, 2D] through block table `table` (1 x k) and seq_len."""
    import torch
    from vllm import _custom_ops as ops
    n, H, D = q.shape
    nb, kvh, bs, _ = kv.shape
    key_cache, value_cache = kv.view(nb, kvh, 2 * bs, D).chunk(2, dim=2)
    qsl = torch.tensor([0, n], dtype=torch.int32)
    seq = torch.tensor([seq_len], dtype=torch.int32)
    meta = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=1, num_heads=H, num_kv_heads=kvh, head_dim=D, seq_lens=seq, dtype=q.dtype,
        query_start_loc=qsl, causal=True, sliding_window_size=-1, isa=isa, enable_kv_split=False)
    out = torch.zeros(n, H, D, dtype=q.dtype)
    ops.cpu_attention_with_kv_cache(
        query=q.contiguous(), key_cache=key_cache, value_cache=value_cache, output=out,
        query_start_loc=qsl, seq_lens=seq, scale=scale, causal=True, alibi_slopes=None,
        sliding_window=-1, block_table=table, softcap=0, scheduler_metadata=meta, s_aux=None,
        dynamic_causal=None, k_scale=1.0, v_scale=1.0, kv_cache_dtype="auto")
    return out


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    work = harness.workdir("md-vllm-adopt-")
    harness.exit_on_sigterm()
    daemon = harness.Daemon(work).start()
    try:
        os.environ.update(harness.plugin_env(daemon))
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ["MEMDECAY_VLLM_MAX_SEQS"] = "1"
        run()
    except Exception as e:
        import traceback
        traceback.print_exc()
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        daemon.stop()
        if check.fails:
            print("---- memdecayd.log (tail)\n" + daemon.tail(2000))
    return check.verdict("test_adopt")


def adopted_tokens(llm):
    """The tokens adopted so far, from the session store of the engine core (here, in
    this process)."""
    sched = llm.llm_engine.engine_core.engine_core.scheduler
    return sched.kv_cache_manager._memdecay_store.counters["adopted_tokens"]


def run():
    import torch
    from vllm import LLM, SamplingParams
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl

    from memdecay_vllm import settings, worker
    from memdecay_vllm.offline import chat, chat_many

    llm = LLM(model=harness.MODEL, **harness.LLM_ARGS)
    seen = {}                   # request id -> its first step's comparison
    want = {"on": False}        # compare the next adopter seen
    inner = CPUAttentionBackendImpl.forward      # the plugin's wrapper, installed by now

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, *a, **kw):
        out = inner(self, layer, query, key, value, kv_cache, attn_metadata, output, *a, **kw)
        eng = worker.ENGINE
        if (attn_metadata is None or not want["on"] or eng is None
                or ".0." not in (getattr(layer, "layer_name", "") or "")):
            return out
        runner = eng.runner
        for row, rid in enumerate(runner.input_batch.req_ids):
            st = runner.requests.get(rid)
            if rid in seen or st is None or not st.num_computed_tokens:
                continue
            qsl = attn_metadata.query_start_loc
            q0, q1 = int(qsl[row]), int(qsl[row + 1])
            bs = kv_cache.shape[2]
            seq_full = st.num_computed_tokens + (q1 - q0)
            ids = list(st.block_ids[0][:(seq_full + bs - 1) // bs])
            holes = [i for i, b in enumerate(ids) if b == 0]
            if not holes:
                continue            # not an adopter with holes (the other request)
            kept = [b for b in ids if b != 0]
            H, D = self.num_heads, self.head_size
            q = query[q0:q1].view(q1 - q0, H, D)
            got = output[q0:q1].reshape(q1 - q0, H, D).clone()
            # the reference: the kept blocks copied in order into a fresh cache
            g = torch.cat([torch.zeros_like(kv_cache[:1]), kv_cache[torch.tensor(kept)]])
            table = torch.arange(1, len(kept) + 1, dtype=torch.int32).view(1, -1)
            ref = kernel(q, g, table, seq_full - bs * len(holes), layer.isa, self.scale)
            raw_table = torch.tensor(ids, dtype=torch.int32).view(1, -1)
            raw = kernel(q, kv_cache, raw_table, seq_full, layer.isa, self.scale)
            r = eng.reqs.get(rid)
            seen[rid] = dict(err=(got - ref).abs().max().item(),
                             err_raw=(got - raw).abs().max().item(), holes=holes,
                             computed=st.num_computed_tokens, queries=q1 - q0, kept=len(kept),
                             tracked=r is not None,
                             worker_holes=sorted(r.holes) if r is not None else None)
            want["on"] = False
            break
        return out

    CPUAttentionBackendImpl.forward = forward
    msgs = harness.agent_messages() + [{"role": "user", "content": "What is the customer "
                                        "account code?"}]
    sp = SamplingParams(temperature=0.0, max_tokens=12)
    o1 = chat(llm, msgs, sp, budget_tokens=400)
    reply = o1.outputs[0].text
    print("turn 1: %d prompt tokens, reply %r" % (len(o1.prompt_token_ids), reply), flush=True)
    eng = worker.ENGINE

    def next_turn(msgs, reply, question):
        return msgs + [{"role": "assistant", "content": reply},
                       {"role": "user", "content": question}]

    def adoption(what, got, tracked):
        check(len(got) == 1, "%s: the adopting request's first step was seen with holes" % what)
        if len(got) != 1:
            return
        seen_row = next(iter(got.values()))
        adopted = adopted_tokens(llm) - adopted_before[0]
        check(seen_row["tracked"] == tracked, "%s: the worker %s it" % (
            what, "tracks" if tracked else "does not track"))
        check(seen_row["computed"] == adopted and adopted >= 32 and adopted % 32 == 0,
              "%s: positions continue: the first step starts at token %d, the %d tokens adopted"
              % (what, seen_row["computed"], adopted))
        if tracked:
            check(seen_row["holes"] == seen_row["worker_holes"] and seen_row["holes"],
                  "%s: the holes are the retained session's: blocks %s"
                  % (what, seen_row["holes"]))
        check(seen_row["err"] < 1e-4, "%s: the kernel over the adopted blocks equals the kernel "
              "over the kept blocks gathered by hand (%d kept, %d holes, %d queries): max |err| "
              "%.2e" % (what, seen_row["kept"], len(seen_row["holes"]), seen_row["queries"],
                        seen_row["err"]))
        check(seen_row["err_raw"] > 1e-3, "%s: read uncompacted, the null block's contents "
              "would change it (max |err| %.2e)" % (what, seen_row["err_raw"]))

    def turn(what, msgs, tracked, extra=None):
        seen.clear()
        adopted_before[0] = adopted_tokens(llm)
        want["on"] = True
        if extra is None:
            o = chat(llm, msgs, sp, budget_tokens=400)
        else:
            o = chat_many(llm, [extra, msgs], sp, budgets=[None, 400])[1]
        print("%s: %d prompt tokens, %d adopted, reply %r"
              % (what, len(o.prompt_token_ids), adopted_tokens(llm) - adopted_before[0],
                 o.outputs[0].text), flush=True)
        adoption(what, dict(seen), tracked)
        return o.outputs[0].text

    adopted_before = [0]
    msgs2 = next_turn(msgs, reply, "And the name of my daughter?")
    reply2 = turn("turn 2 (tracked)", msgs2, True)
    check(eng is not None and eng.counters["sessions_adopted"] >= 1,
          "turn 2 adopted turn 1's sequence in the worker (%s)"
          % (eng.counters if eng is not None else None))
    # turn 3: the worker's track hook fails for it
    settings.get().test_faults.add("track")
    failed0 = eng.counters["failed_open"]
    msgs3 = next_turn(msgs2, reply2, "Which city was the meeting in?")
    try:
        reply3 = turn("turn 3 (track fails)", msgs3, False)
    finally:
        settings.get().test_faults.discard("track")
    check(eng.counters["failed_open"] > failed0, "turn 3: the injected track fault served it "
          "without eviction (failed_open %d -> %d)" % (failed0, eng.counters["failed_open"]))
    # turn 4: another long request holds the worker's one sequence
    untracked0 = eng.counters["untracked"]
    other = [{"role": "user", "content": "Summarise this for me: " +
              " ".join(m["content"] for m in harness.agent_messages()[1:6])}]
    msgs4 = next_turn(msgs3, reply3, "What did I ask first?")
    turn("turn 4 (no free sequence)", msgs4, False, extra=other)
    check(eng.counters["untracked"] > untracked0, "turn 4: no worker sequence was free "
          "(untracked %d -> %d)" % (untracked0, eng.counters["untracked"]))


if __name__ == "__main__":
    sys.exit(main())
