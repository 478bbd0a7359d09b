#!/usr/bin/env python3
"""fake_agent.py — a stand-in for memdecay-agent that tests the probe pipeline without a model.

Same command line and --json shape as memdecay-agent.  It "evicts" whole messages by a crude
rule per policy and answers a probe correctly when the message holding the answer survived, so
the runner, the resume logic and the report can be tested in CI in seconds.  Not a benchmark.
"""
import argparse
import json
import random
import sys

sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from gen_traces import MESSAGE_OVERHEAD_TOKENS, estimate_tokens  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="")
    ap.add_argument("--trace", required=True)
    ap.add_argument("--policy", required=True)
    ap.add_argument("--budget-tokens", type=int, required=True)
    ap.add_argument("--socket")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    lines = [json.loads(l) for l in open(a.trace) if l.strip()]
    msgs = [l for l in lines if "probe" not in l]
    probes = [l["probe"] for l in lines if "probe" in l]
    sizes = [estimate_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in msgs]
    total = sum(sizes)
    keep = set(range(len(msgs)))
    evicted = {}
    if a.budget_tokens > 0:
        rng = random.Random(a.trace + a.policy)
        order = list(range(1, len(msgs)))  # message 0 (system) last, or never
        if a.policy == "random":
            rng.shuffle(order)
        elif a.policy == "recency":
            order = list(range(0, len(msgs) - 1))
        occ = total
        for i in order:
            if occ <= a.budget_tokens:
                break
            keep.discard(i)
            occ -= sizes[i]
            r = msgs[i].get("region") or {"tool": "tool_out"}.get(msgs[i]["role"], msgs[i]["role"])
            evicted[r] = evicted.get(r, 0) + (sizes[i] + 15) // 16
        peak = min(total, a.budget_tokens + 8)
    else:
        peak = total
    kept_text = " ".join(msgs[i]["content"] for i in sorted(keep))
    out = []
    for p in probes:
        ok = p["answer"] in kept_text
        out.append({"region": p["region"], "question": p["question"], "answer": p["answer"],
                    "output": p["answer"] if ok else "I do not know.", "passed": ok,
                    "gold_logprob": -0.5 if ok else -9.0})
    print(json.dumps({"trace_tokens": total, "budget_tokens": a.budget_tokens,
                      "peak_occupancy_tokens": peak, "evictions_by_region": evicted,
                      "tokens_per_s": 1000.0, "probes": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
