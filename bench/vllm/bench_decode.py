#!/usr/bin/env python3
"""bench_decode.py — vLLM's decode speed with the MemDecay plugin against plain vLLM.

One run on one machine: rounds alternate a plain vLLM and a vLLM with the
plugin switched on (each a child process that starts vLLM once, with the
tests' settings, engine_adapters/vllm/tests/harness.py).  In each, a batch of
B requests of the bundled agent conversation (about 1,550 tokens, four
questions) decodes N tokens (ignore_eos); its decode time is the batch's time
for N tokens minus its time for 1 token, so the prefill drops out.  The plugin
run measures the batch without a budget and at a budget of 40% of the prompt,
alternating.  Prints one JSON object (medians, spread, ratios) and writes it
to --out.

  bench_decode.py [--rounds R] [--reps K] [--batch B] [--tokens N] [--out FILE]"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "engine_adapters", "vllm", "tests"))
import harness  # noqa: E402

QUESTIONS = ["What is the customer account code?", "What is the name of my daughter?",
             "Which hotel costs 95 euros per night?", "What is my husband's name?"]


def phase(which, args, out_path):
    from vllm import LLM, SamplingParams
    from memdecay_vllm.offline import chat_many
    msgs = harness.agent_messages()
    conv = [msgs + [{"role": "user", "content": QUESTIONS[i % 4]}] for i in range(args.batch)]
    llm = LLM(model=harness.MODEL, **harness.LLM_ARGS)
    tok = llm.get_tokenizer()
    n_prompt = len(tok.apply_chat_template(conv[0], add_generation_prompt=True, tokenize=True,
                                           return_dict=False))
    budget = int(0.4 * n_prompt)
    modes = {"plain": [None]} if which == "plain" else {"plugin": [None], "plugin_40": [budget]}

    def timed(n, budgets):
        sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        t0 = time.perf_counter()
        chat_many(llm, conv, sp, budgets=budgets * args.batch)
        return time.perf_counter() - t0

    for b in modes.values():                      # warm-up
        timed(4, b)
    res = {m: [] for m in modes}
    for _ in range(args.reps):
        for m, b in modes.items():
            t1 = timed(1, b)
            tn = timed(args.tokens, b)
            res[m].append(args.batch * (args.tokens - 1) / max(tn - t1, 1e-9))
    json.dump({"tok_s": res, "prompt_tokens": n_prompt, "budget": budget}, open(out_path, "w"))
    return 0


def spread(xs):
    xs = sorted(xs)
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "n": len(xs)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--out", default=None)
    ap.add_argument("--phase", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        return phase(args.phase[0], args, args.phase[1])
    harness.exit_on_sigterm()
    work = tempfile.mkdtemp(prefix="md-vllm-bench-")
    daemon = harness.Daemon(work).start()
    rows = {"plain": [], "plugin": [], "plugin_40": []}
    per_round = []
    meta = {}
    try:
        for rnd in range(args.rounds):
            got = {}
            for which in ("plain", "plugin"):
                env = dict(os.environ)
                env.update(harness.plugin_env(daemon, on=(which == "plugin")))
                out = os.path.join(work, "%s-%d.json" % (which, rnd))
                log = os.path.join(work, "%s-%d.log" % (which, rnd))
                print("bench_decode: round %d/%d, %s vLLM ..." % (rnd + 1, args.rounds, which),
                      file=sys.stderr, flush=True)
                rc = harness.run_group([sys.executable, os.path.abspath(__file__), "--phase",
                                        which, out, "--reps", str(args.reps), "--batch",
                                        str(args.batch), "--tokens", str(args.tokens)],
                                       env, log, 1800)
                if rc:
                    print(open(log).read()[-4000:], file=sys.stderr)
                    return 1
                d = json.load(open(out))
                meta = {"prompt_tokens": d["prompt_tokens"], "budget_tokens": d["budget"]}
                for m, v in d["tok_s"].items():
                    rows[m].extend(v)
                    got[m] = statistics.median(v)
            per_round.append({"plugin/plain": got["plugin"] / got["plain"],
                              "plugin_40/plain": got["plugin_40"] / got["plain"]})
    finally:
        daemon.stop()
    s = {m: spread(v) for m, v in rows.items()}
    result = {
        "bench": "vllm_decode", "date": time.strftime("%Y-%m-%d"),
        "machine": "%d CPUs, %s" % (os.cpu_count(), os.uname().machine),
        "settings": dict(harness.LLM_ARGS, batch=args.batch, new_tokens=args.tokens,
                         rounds=args.rounds, reps=args.reps, **meta),
        "decode_tok_s": s,
        "ratio_plugin_no_budget": s["plugin"]["median"] / s["plain"]["median"],
        "ratio_plugin_40pct": s["plugin_40"]["median"] / s["plain"]["median"],
        "per_round": per_round,
        "target": "plugin without a budget >= 0.90 of plain",
    }
    result["verdict"] = "met" if result["ratio_plugin_no_budget"] >= 0.9 else "missed"
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        open(args.out, "w").write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
