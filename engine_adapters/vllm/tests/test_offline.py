#!/usr/bin/env python3
"""test_offline.py — the plugin in vLLM's offline LLM API against plain vLLM.

  transparency  with the plugin loaded and no budget, greedy outputs are the
                same token ids as plain vLLM's, on short chats and on the
                bundled agent conversation (about 1,550 tokens);
  prefix cache  after a request of the agent conversation was evicted down to
                a 400-token budget, a new request that shares its prefix (the
                same conversation, another question) gets plain vLLM's output;
  batching      4 concurrent requests: three with budgets of 300, 500 and 700
                tokens evict, and the fourth, without a budget, gets plain
                vLLM's output.

Plain and plugin runs are two child processes of this script (vLLM starts once
in each), with the same vLLM settings (harness.LLM_ARGS).  The plugin run gets
a memdecayd of its own, on a socket in a temporary directory.
  test_offline.py [--keep DIR]"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

QUESTIONS = ["What is the customer account code?", "What is the name of my daughter?",
             "Which hotel costs 95 euros per night?"]
SHORT = [[{"role": "user", "content": "What is the capital of France?"}],
         [{"role": "system", "content": "You answer in one short sentence."},
          {"role": "user", "content": "Name a primary colour."}],
         [{"role": "user", "content": "Count from one to five."}]]


def conversations():
    msgs = harness.agent_messages()
    agent = [msgs + [{"role": "user", "content": q}] for q in QUESTIONS]
    # the same agent, its first user turn left out: a prefix of its own after the system block
    alt = [msgs[0]] + msgs[2:] + [{"role": "user", "content": QUESTIONS[0]}]
    return {"short": SHORT, "agent": agent, "alt": alt}


def phase(which, out_path):
    from vllm import LLM, SamplingParams
    from memdecay_vllm.offline import chat, chat_many
    conv = conversations()
    llm = LLM(model=harness.MODEL, **harness.LLM_ARGS)
    sp = SamplingParams(temperature=0.0, max_tokens=24)
    res = {}

    def ids(o):
        return list(o.outputs[0].token_ids)

    if which == "plain":
        outs = chat_many(llm, conv["short"] + conv["agent"] + [conv["alt"]], sp)
        res["short"] = [ids(o) for o in outs[:3]]
        res["agent"] = [ids(o) for o in outs[3:6]]
        res["alt"] = ids(outs[6])
        res["agent_prompt_tokens"] = len(outs[3].prompt_token_ids)
    else:
        # prefix cache: evict one request, then ask the shared prefix something else
        o = chat(llm, conv["agent"][0], sp, budget_tokens=400)
        res["evicted_req"] = o.request_id
        res["evicted_text"] = o.outputs[0].text
        res["after_evict"] = ids(chat(llm, conv["agent"][1], sp))
        # transparency
        outs = chat_many(llm, conv["short"] + [conv["agent"][2]], sp)
        res["short"] = [ids(o) for o in outs[:3]]
        res["agent2"] = ids(outs[3])
        # batching: three budgets and one request without
        t0 = time.time()
        outs = chat_many(llm, [conv["agent"][0]] * 3 + [conv["alt"]], sp,
                         budgets=[300, 500, 700, None])
        res["batch_reqs"] = [o.request_id for o in outs]
        res["batch_texts"] = [o.outputs[0].text for o in outs]
        res["alt"] = ids(outs[3])
        res["batch_s"] = time.time() - t0
    json.dump(res, open(out_path, "w"))
    return 0


def base_id(req_id):
    return str(req_id).split("-")[0]


def main():
    if len(sys.argv) >= 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(sys.argv) == 4 and sys.argv[1] == "--phase":
        return phase(sys.argv[2], sys.argv[3])
    harness.exit_on_sigterm()
    work = harness.workdir("md-vllm-offline-")
    daemon = harness.Daemon(work).start()
    trace = os.path.join(work, "trace.jsonl")
    fails = []
    try:
        outs = {}
        for which in ("plain", "plugin"):
            env = dict(os.environ)
            env.update(harness.plugin_env(daemon, trace, on=(which == "plugin")))
            path = os.path.join(work, which + ".json")
            t0 = time.time()
            rc = harness.run_group([sys.executable, os.path.abspath(__file__), "--phase", which,
                                    path], env, os.path.join(work, which + ".log"), 900)
            if rc:
                log = open(os.path.join(work, which + ".log")).read()
                print(log[-6000:])
                print("test_offline: FAIL: the %s run exited %d" % (which, rc))
                return 1
            outs[which] = json.load(open(path))
            print("test_offline: %s run done in %.0f s" % (which, time.time() - t0))
        plain, plug = outs["plain"], outs["plugin"]
        held, evictions = harness.read_trace(trace)

        def check(ok, what):
            print("  %-4s %s" % ("ok" if ok else "FAIL", what))
            if not ok:
                fails.append(what)

        by_req = {}
        for e in evictions:
            by_req.setdefault(base_id(e["evict"]), []).append(e)
        print("agent conversation: %d prompt tokens; %d blocks evicted in all"
              % (plain["agent_prompt_tokens"], len(evictions)))
        check(plain["short"] == plug["short"], "transparency: 3 short chats, same token ids")
        check(plain["agent"][2] == plug["agent2"],
              "transparency: the agent conversation, same token ids")
        n_ev = len(by_req.get(base_id(plug["evicted_req"]), []))
        check(n_ev > 0, "prefix cache: the 400-token request was evicted (%d blocks)" % n_ev)
        check(plain["agent"][1] == plug["after_evict"],
              "prefix cache: the request sharing its prefix gets plain vLLM's output")
        reqs = [base_id(r) for r in plug["batch_reqs"]]
        counts = [len(by_req.get(r, [])) for r in reqs]
        check(all(c > 0 for c in counts[:3]),
              "batching: the budgeted requests evicted %s blocks" % counts[:3])
        check(counts[3] == 0, "batching: nothing evicted from the request without a budget")
        check(plain["alt"] == plug["alt"],
              "batching: the request without a budget gets plain vLLM's output")
        check(all(plug["batch_texts"]), "batching: every request answered")
        check(all(0 not in e["regions"] for e in evictions), "no evicted block held system tokens")
        print("answers under budget: %r" % plug["batch_texts"][:3])
    finally:
        daemon.stop()
    print("test_offline:", "PASS" if not fails else "FAIL (%d)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
