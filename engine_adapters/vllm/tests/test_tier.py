#!/usr/bin/env python3
"""test_tier.py — the host tier and recall in vLLM (docs/tier.md, docs/vllm.md
"Host tier and recall"), against the real parts: vLLM's engine core and CPU
worker in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), the plugin, a
memdecayd of the test's own and SmolLM2-135M.

The bundled agent conversation (about 1,550 tokens, prefilled 64 tokens a
step) runs at a budget of 400 tokens with a 48 MiB tier (about 32 blocks), and
the tier is scored every 4 decoded tokens.  Evicted blocks go to the tier,
the observed queries' estimates come back to memdecayd, and it restores
some.  The test checks:

1. Every restored block holds, in every layer, exactly the keys and values
   the block held when it was evicted (the test's own copy, taken from vLLM's
   cache when the block left), and sits at its original index in the worker's
   block table.
2. At the first step after a restore, at the first layer, vLLM's own CPU
   attention kernel over the request's block table gives the output of the
   same kernel over a reference cache: the request's blocks gathered in
   order, the restored ones from the test's copies (never evicted), the holes
   left out.
3. The tier never holds more than its capacity (every step, worker side), and
   memdecayd's tier never more than its budget (after every turn).
4. Turn 2 adopts turn 1's session, tier included: its prefill's estimates get
   restores, and its reply comes.
5. memdecayd killed while turn 3's prefill waits for its recall decision:
   turn 3 is still served, exactly over its kept blocks.
6. Nothing leaks: once every session is released, vLLM's free blocks plus the
   spare blocks the engine core holds for restores are the whole pool.

  test_tier.py [--keep DIR]"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_adopt import kernel  # noqa: E402

check = harness.Checks()


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    work = harness.workdir("md-vllm-tier-")
    harness.exit_on_sigterm()
    daemon = harness.Daemon(work).start()
    try:
        os.environ.update(harness.plugin_env(daemon))
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ["MEMDECAY_VLLM_TIER_MB"] = "48"
        os.environ["MEMDECAY_VLLM_RECALL_EVERY"] = "4"
        os.environ["MEMDECAY_VLLM_RECALL_WAIT_MS"] = "200"
        run(daemon)
    except Exception as e:
        import traceback
        traceback.print_exc()
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        daemon.stop()
        if check.fails:
            print("---- memdecayd.log (tail)\n" + daemon.tail(2000))
    return check.verdict("test_tier")


def daemon_stats(daemon):
    import json
    js = json.loads(daemon.ctl("stats", "--json").stdout)
    return js["engines"][0]


def run(daemon):
    import torch
    from vllm import LLM, SamplingParams
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl

    from memdecay_vllm import tier, worker
    from memdecay_vllm.commands import Commands
    from memdecay_vllm.offline import chat

    llm = LLM(model=harness.MODEL, **harness.LLM_ARGS)
    copies = {}          # (request id, block index) -> per layer: the block as it left
    left = {}            # the tier page (slot, generation) -> the same, taken as it left
    restored = []        # (request id, block index, block id) in restore order
    pending = []         # restores not yet seen by the kernel check
    compared = []        # the kernel checks
    tier_peak = [0]
    eng_box = {}

    keep0, restore0 = tier.Tier.keep, tier.Tier.restore

    def keep(self, r, b, *a):
        st = self.runner.requests.get(r.id)
        ids = st.block_ids[0] if st is not None else r.block_ids
        bid = ids[b] if ids is not None and b < len(ids) else None
        snap = [t[bid].clone() for t in self.kv] if bid else None
        ok = keep0(self, r, b, *a)
        if ok and snap is not None:
            left[(a[0], a[1])] = snap     # a[0], a[1]: the tier page's slot and generation
        tier_peak[0] = max(tier_peak[0], len(self.blocks))
        check.quiet(len(self.blocks) <= self.capacity, "the worker's tier within its capacity")
        return ok

    def restore(self, ev, *a):
        tb = self.blocks.get(ev.slot)
        key = (tb.slot, tb.gen) if tb is not None else None
        ok = restore0(self, ev, *a)
        if ok:
            # taken once restored: a refused restore (no spare) leaves the
            # page in the tier, to be restored later
            snap = left.pop(key, None)
            rid, b, bid, _ = self.restored[-1]
            same = snap is not None and all(torch.equal(t[bid], s) for t, s in zip(self.kv, snap))
            check.quiet(same, "a restored block holds, in every layer, what it held when evicted")
            st = self.runner.requests.get(rid)
            if st is not None:
                check.quiet(st.block_ids[0][b] == bid,
                            "a restored block sits at its own index in the worker's block table")
            copies[(rid, b)] = snap
            restored.append((rid, b, bid))
            pending.append((rid, b, bid))
        return ok

    tier.Tier.keep, tier.Tier.restore = keep, restore
    evict0 = Commands._evict_block

    def evict_block(self, r, b, slot):
        # a restored block evicted again before its next forward is no longer
        # expected in the block table
        pending[:] = [p for p in pending if (p[0], p[1]) != (r.id, b)]
        return evict0(self, r, b, slot)
    Commands._evict_block = evict_block
    inner = CPUAttentionBackendImpl.forward

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, *a, **kw):
        out = inner(self, layer, query, key, value, kv_cache, attn_metadata, output, *a, **kw)
        eng = worker.ENGINE
        if (attn_metadata is None or not pending or eng is None
                or ".0." not in (getattr(layer, "layer_name", "") or "")):
            return out
        runner = eng.runner
        for row, rid in enumerate(runner.input_batch.req_ids):
            mine = [p for p in pending if p[0] == rid]
            st = runner.requests.get(rid)
            if not mine or st is None:
                continue
            qsl = attn_metadata.query_start_loc
            q0, q1 = int(qsl[row]), int(qsl[row + 1])
            bs = kv_cache.shape[2]
            seq_full = st.num_computed_tokens + (q1 - q0)
            ids = list(st.block_ids[0][:(seq_full + bs - 1) // bs])
            kept_idx = [i for i, b in enumerate(ids) if b != 0]
            H, D = self.num_heads, self.head_size
            q = query[q0:q1].view(q1 - q0, H, D)
            got = output[q0:q1].reshape(q1 - q0, H, D).clone()
            # the reference: the blocks in order, restored ones from the test's copies
            parts = [torch.zeros_like(kv_cache[:1])]
            for i in kept_idx:
                snap = copies.get((rid, i))
                restored_here = any(p[1] == i for p in mine)
                parts.append(snap[0][None] if restored_here and snap else kv_cache[ids[i]][None])
            g = torch.cat(parts)
            table = torch.arange(1, len(kept_idx) + 1, dtype=torch.int32).view(1, -1)
            ref = kernel(q, g, table, seq_full - bs * (len(ids) - len(kept_idx)), layer.isa,
                         self.scale)
            in_table = all(ids[p[1]] == p[2] for p in mine if p[1] < len(ids))
            compared.append(dict(err=(got - ref).abs().max().item(), blocks=len(mine),
                                 in_table=in_table))
            pending[:] = [p for p in pending if p[0] != rid]
        return out

    CPUAttentionBackendImpl.forward = forward

    orig_recall = Commands.recall
    kill_in_recall = {"on": False}

    def recall(self, evicted, prm, timeout_ms):
        if kill_in_recall["on"]:
            kill_in_recall["on"] = False
            daemon.kill()
            eng_box["killed"] = True
        return orig_recall(self, evicted, prm, timeout_ms)
    Commands.recall = recall

    msgs = harness.agent_messages() + [{"role": "user", "content": "What is the customer "
                                        "account code?"}]
    sp = SamplingParams(temperature=0.0, max_tokens=40)
    o1 = chat(llm, msgs, sp, budget_tokens=400)
    eng = worker.ENGINE
    check(eng is not None and eng.tier is not None, "the worker keeps a host tier (%s blocks)"
          % (eng.tier.capacity if eng and eng.tier else None))
    print("turn 1: %d prompt tokens, reply %r; counters %s" % (
        len(o1.prompt_token_ids), o1.outputs[0].text,
        {k: v for k, v in eng.counters.items() if v}), flush=True)
    st = daemon_stats(daemon)
    check(eng.counters["tier_in"] > 0 and st["tier_in"] == eng.counters["tier_in"],
          "turn 1: evicted blocks went to the tier (worker %d, memdecayd %d)"
          % (eng.counters["tier_in"], st["tier_in"]))
    check(st["tier_pages"] <= st["tier_budget_pages"],
          "turn 1: memdecayd's tier %d pages within its budget %d"
          % (st["tier_pages"], st["tier_budget_pages"]))
    check(eng.counters["estimates"] > 0 and st["estimates"] > 0,
          "estimates published (worker %d, memdecayd took %d)"
          % (eng.counters["estimates"], st["estimates"]))

    r2 = o1.outputs[0].text
    msgs2 = msgs + [{"role": "assistant", "content": r2},
                    {"role": "user", "content": "Remind me: which database did we migrate "
                     "first, and what was the customer account code?"}]
    before = eng.counters["restores"]
    o2 = chat(llm, msgs2, sp, budget_tokens=400)
    print("turn 2: %d prompt tokens, reply %r; restores %d -> %d, recall waits %d"
          % (len(o2.prompt_token_ids), o2.outputs[0].text, before, eng.counters["restores"],
             eng.counters["recall_waits"]), flush=True)
    check(eng.counters["sessions_adopted"] >= 1, "turn 2 adopted turn 1's session")
    check(eng.counters["recall_waits"] > 0, "prefills ended with a wait for recall decisions "
          "(%d)" % eng.counters["recall_waits"])
    st = daemon_stats(daemon)
    check(eng.counters["restores"] > 0 and st["recalls"] == eng.counters["restores"],
          "memdecayd restored blocks (%d decided, %d applied, worker %d; %d refused, %d without "
          "a spare)" % (st["restores"], st["recalls"], eng.counters["restores"],
                        eng.counters["restores_refused"], eng.counters["no_spare"]))
    check(st["tier_pages"] <= st["tier_budget_pages"],
          "turn 2: memdecayd's tier %d pages within its budget %d"
          % (st["tier_pages"], st["tier_budget_pages"]))
    check(compared and all(c["in_table"] for c in compared),
          "restored blocks in the block table at their own index (%d steps)" % len(compared))
    worst = max((c["err"] for c in compared), default=float("inf"))
    check(worst < 1e-4, "after a restore, the kernel over the request's blocks equals the "
          "kernel over never-evicted copies (%d steps, %d blocks): max |err| %.2e"
          % (len(compared), sum(c["blocks"] for c in compared), worst))
    check.done_quiet()
    print("tier: peak %d blocks of %d, %d restores, spares %s" % (
        tier_peak[0], eng.tier.capacity, len(restored),
        llm.llm_engine.engine_core.engine_core.scheduler.kv_cache_manager._memdecay_spares
        .counters), flush=True)

    # memdecayd dies while turn 3's prefill waits for its recall decision
    kill_in_recall["on"] = True
    msgs3 = msgs2 + [{"role": "assistant", "content": o2.outputs[0].text},
                     {"role": "user", "content": "Thanks. What did I ask first?"}]
    o3 = chat(llm, msgs3, sp, budget_tokens=400)
    check(eng_box.get("killed") and o3.outputs[0].text is not None and
          len(o3.outputs[0].token_ids) > 0,
          "memdecayd killed in turn 3's recall wait: turn 3 served (%r)" % o3.outputs[0].text)

    # nothing leaks: every session released, the pool whole but the spares
    sched = llm.llm_engine.engine_core.engine_core.scheduler
    llm.reset_prefix_cache()
    kvm = sched.kv_cache_manager
    pool = kvm.block_pool
    spares = len(kvm._memdecay_spares.out)
    total = pool.num_gpu_blocks - 1
    free = pool.get_num_free_blocks()
    check(free + spares == total, "no block leaked: %d free + %d spares = %d of %d"
          % (free, spares, free + spares, total))


if __name__ == "__main__":
    sys.exit(main())
