#!/usr/bin/env python3
"""test_options.py — requests with different budgets and policies in one batch
share the worker's one attachment, and each is held to its own budget and
scored by its own policy (docs/vllm.md "Attachment and per-request options").

vLLM runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), the plugin on, a
memdecayd of the test's own.  Three copies of the bundled agent conversation
(about 1,550 tokens) run in one batch: budget 320 with policy recency, budget
640 with the engine's policy, and no budget.  It checks that

  - memdecayd lists one vLLM engine, named MEMDECAY_VLLM_ENGINE (no engine per
    budget or policy), and its stats count sequences with their own options;
  - at every step each budgeted request held at most its budget + 1 block, and
    blocks were evicted from each; nothing from the request without a budget;
  - the recency request lost its oldest blocks: every evicted block is older
    than every block it kept that holds no pinned (system) token;
  - the retained sessions' sequences carry their requests' options in the
    library's mirror (budget 320 and recency; budget 640 and the engine's
    policy).

  test_options.py [--keep DIR]"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

check = harness.Checks()
BUDGETS = (320, 640, None)
POLICIES = ("recency", None, None)


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    work = harness.workdir("md-vllm-options-")
    harness.exit_on_sigterm()
    daemon = harness.Daemon(work).start()
    trace = os.path.join(work, "trace.jsonl")
    try:
        os.environ.update(harness.plugin_env(daemon, trace))
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        run(daemon, trace)
    except Exception as e:
        import traceback
        traceback.print_exc()
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        daemon.stop()
        if check.fails:
            print("---- memdecayd.log (tail)\n" + daemon.tail(2000))
    return check.verdict("test_options")


def retained(eng, rid):
    """The worker's retained sequence of request rid (vLLM may suffix the id)."""
    for key, r in eng.mirror.retained.items():
        if key.startswith(rid):
            return r
    return None


def run(daemon, trace):
    import memdecay
    from vllm import LLM, SamplingParams

    from memdecay_vllm import worker
    from memdecay_vllm.offline import prepare

    llm = LLM(model=harness.MODEL, **harness.LLM_ARGS)
    tok = llm.get_tokenizer()
    msgs = harness.agent_messages() + [{"role": "user", "content": "What is the customer "
                                        "account code?"}]
    sp = SamplingParams(temperature=0.0, max_tokens=24)
    prompts, params = [], []
    for b, pol in zip(BUDGETS, POLICIES):
        pr, p = prepare(tok, msgs, sp, budget_tokens=b, policy=pol)
        prompts.append(pr)
        params.append(p)
    outs = llm.generate(prompts, params, use_tqdm=False)
    ids = [o.request_id for o in outs]
    n_prompt = len(outs[0].prompt_token_ids)
    print("3 requests of %d prompt tokens: %s" % (n_prompt, ", ".join(
        "budget %s policy %s: %r" % (b, p or "(engine's)", o.outputs[0].text)
        for b, p, o in zip(BUDGETS, POLICIES, outs))), flush=True)

    names = [e["name"] for e in daemon.engines()]
    vllm_names = [n for n in names if n.startswith("vllm")]
    check(vllm_names == ["vllm"], "memdecayd lists one vLLM engine: %s" % vllm_names)
    stats = json.loads(daemon.ctl("stats", "--json").stdout)
    engines = stats.get("engines") or []
    own = [e.get("seqs_own_options", 0) for e in engines if str(e.get("name", "")) == "vllm"]
    check(own and own[0] >= 2, "its stats count sequences with their own options: %s" % own)

    held, evictions = harness.read_trace(trace)
    kept_blocks = None
    for rid, b, pol in zip(ids, BUDGETS, POLICIES):
        rows = [h for h in held if h["req"].startswith(rid)]
        ev = [e for e in evictions if e["evict"].startswith(rid)]
        what = "budget %s, policy %s" % (b, pol or "(engine's)")
        if b is None:
            check(rows and not ev, "%s: nothing evicted (%d steps)" % (what, len(rows)))
            continue
        limit = math.ceil(b / harness.BLOCK) + 1
        worst = max((h["held"] for h in rows), default=-1)
        check(rows and worst <= limit, "%s: at every one of %d steps it held <= budget + 1 "
              "block (max %d blocks, limit %d)" % (what, len(rows), worst, limit))
        check(len(ev) > 0, "%s: %d blocks evicted" % (what, len(ev)))
        if pol == "recency":
            out = sorted(e["block"] for e in ev)
            eng = worker.ENGINE
            r = retained(eng, rid) if eng is not None else None
            if r is not None:
                kept_blocks = sorted({p // eng.ppb for p, pg in r.pages.items()
                                      if 0 not in pg[2]})
            oldest = out and kept_blocks is not None and max(out) < min(kept_blocks)
            check(oldest, "%s: the oldest blocks went: evicted %s, kept without pinned tokens "
                  "from block %s" % (what, out, kept_blocks[0] if kept_blocks else None))

    eng = worker.ENGINE
    check(eng is not None, "the worker's engine is up")
    if eng is None:
        return
    c = eng.att.client
    recency = memdecay.load_library().md_policy_from_name(b"recency")
    want = {ids[0]: {"policy": recency, "budget": 320, "retained": True, "session": None},
            ids[1]: {"policy": None, "budget": 640, "retained": True, "session": None}}
    for rid, w in want.items():
        r = retained(eng, rid)
        got = c.seq_options(r.seq) if r is not None else None
        check(got == w, "request %s's retained sequence carries its options: %s (want %s)"
              % (rid, got, w))


if __name__ == "__main__":
    sys.exit(main())
