#!/usr/bin/env python3
"""test_pool.py — pool mode (docs/vllm.md "Pool mode"): memdecayd manages
vLLM's whole KV pool.  Real `vllm serve` processes with MEMDECAY_VLLM_POOL=on,
a live memdecayd, the openai client.

  room      a pool with room for everything: two agents' conversations give
            the same replies, turn by turn, as plain vLLM (the plugin off), and
            later turns are served from cache; no block is evicted but from a
            request with a budget of its own (memdecay_budget_tokens still caps
            a request in pool mode);
  pressure  a 60-block pool: two agents with ids leave their sessions
            retained, then a long request runs: memdecayd evicts blocks from
            both sessions and from the running request, vLLM preempts
            nothing, no session is released whole, and both agents' next
            turns still adopt their sessions;
  order     the counters of the order before preemption are on vLLM's
            /metrics and agree with the plugin's trace;
  fail-open memdecayd killed while two agents and a long request run: every
            request answered, no null block read by the attention kernel
            (MEMDECAY_VLLM_TEST_AUDIT), no traceback.

test_pool.py [--quick] [--keep DIR]   (--quick: fewer turns; CI)"""
import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents  # noqa: E402
import harness  # noqa: E402
from test_sessions import adoption, ask, concurrently, counters  # noqa: E402

MODEL = "smollm2"
ARGS = ["--enable-prompt-tokens-details"]
check = harness.Checks()


def converse(client, seed, turns, sid):
    sess = agents.Session(seed, turns)
    msgs = agents.start_messages()
    out = []
    for k in range(turns):
        msgs += sess.turn(k)
        a = ask(client, msgs, session=sid, plain=True)
        out.append(a)
        msgs.append({"role": "assistant", "content": a["text"]})
    return out, msgs


def evicted_ids(trace):
    return [r["evict"] for r in harness.read_trace(trace)[1]]


def from_request(ids, reply_id):
    return sum(1 for i in ids if i.startswith(reply_id))


def pool_counters(trace):
    rows = harness.read_sessions(trace)
    return (rows[-1].get("pool") or {}) if rows else {}


def part_room(work, daemon, turns, servers):
    import openai
    print("room: a pool with room, against plain vLLM", flush=True)
    got = {}
    for on in (True, False):
        trace = os.path.join(work, "trace-room.jsonl") if on else None
        server, url, log = harness.start_server(
            work, daemon, trace, MODEL, {"MEMDECAY_VLLM_POOL": "on"} if on else {}, on=on,
            extra_args=ARGS, log_name="vllm-room-%s.log" % ("pool" if on else "plain"))
        servers.append(server)
        try:
            client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600,
                                   max_retries=0)
            got[on] = [converse(client, 900 + i, turns, "room-%d" % i)[0] for i in range(2)]
            if on:
                capped = ask(client, harness.agent_messages(), budget=256, max_tokens=8)
        finally:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    pool, plain = got[True], got[False]
    same = [[a["text"] == b["text"] for a, b in zip(x, y)] for x, y in zip(pool, plain)]
    check(all(all(s) for s in same), "pool mode's replies equal plain vLLM's, turn by turn: %s"
          % same)
    trace = os.path.join(work, "trace-room.jsonl")
    ev = evicted_ids(trace)
    own = from_request(ev, capped["id"])
    check(own > 0 and own == len(ev),
          "nothing evicted where the pool has room but from the one request with a budget of "
          "its own (256 tokens): %d of %d blocks" % (own, len(ev)))
    cached = [[a["cached"] for a in x[1:]] for x in pool]
    check(all(all(c > 0 for c in x) for x in cached),
          "later turns served from cache: cached_tokens %s (plain vLLM: %s)"
          % (cached, [[a["cached"] for a in x[1:]] for x in plain]))


def part_pressure(client, url, trace, turns):
    print("pressure: two retained sessions and a long running request on 60 blocks",
          flush=True)
    first = concurrently(2, lambda i: converse(client, 910 + i, turns, "agent-%d" % i))
    errs = [r for r in first.values() if isinstance(r, Exception)]
    check(not errs, "both agents answered (%s)" % (errs[:1],))
    if errs:
        return
    last_ids = [first[i][0][-1]["id"] for i in range(2)]
    before = counters(trace)
    # the bundled 1,550-token agent conversation: about 49 of the pool's 59 usable blocks
    big = {}

    def run_big():
        big["r"] = ask(client, harness.agent_messages() + [{"role": "user",
                                                            "content": "Summarise."}],
                       max_tokens=48)
    run_big()
    ask(client, [{"role": "user", "content": "Hello."}], max_tokens=2)   # a step to trace
    time.sleep(0.5)
    ev = evicted_ids(trace)
    per = [from_request(ev, i) for i in last_ids]
    n_big = from_request(ev, big["r"]["id"])
    check(all(per) and n_big > 0,
          "memdecayd evicted from both sessions (%s blocks) and the running request (%d), "
          "%d blocks in all" % (per, n_big, len(ev)))
    check(bool(big["r"]["text"]), "the long request answered: %r" % big["r"]["text"][:40])
    pre = harness.metric(url, "vllm:num_preemptions_total")
    check(pre == 0, "vLLM preempted nothing (vllm:num_preemptions_total %d)" % pre)
    c = counters(trace)
    check(c.get("released_pressure", 0) == before.get("released_pressure", 0),
          "no session released whole under pressure (%d)" % c.get("released_pressure", 0))
    nxt = concurrently(2, lambda i: next_turn(client, first[i][1], 910 + i, turns,
                                              "agent-%d" % i))
    ad = [adoption(trace, nxt[i]["id"]) if isinstance(nxt[i], dict) else None
          for i in range(2)]
    check(all(ad), "both agents' next turns adopted their sessions: %s tokens" % ad)


def next_turn(client, msgs, seed, turns, sid):
    sess = agents.Session(seed, turns + 1)
    return ask(client, msgs + sess.turn(turns), session=sid, plain=True)


def part_order(url, trace):
    print("order: the counters on /metrics", flush=True)
    pc = pool_counters(trace)
    got = {}
    for k in ("short_steps", "held", "held_out", "preempted"):
        try:
            got[k] = harness.metric(url, "memdecay_vllm_pool_events_total", {"event": k})
        except KeyError:
            got[k] = None
    check(all(got[k] is not None and got[k] >= pc.get(k, 0) for k in got),
          "memdecay_vllm_pool_events_total on /metrics %s, the trace's last line %s"
          % (got, pc))
    check(got["preempted"] == 0, "no preemption counted by the plugin either")


def part_failopen(client, daemon, log, audit, turns):
    print("fail-open: memdecayd killed mid-run", flush=True)

    def work(i):
        if i == 2:
            return [ask(client, harness.agent_messages() + [{"role": "user",
                                                             "content": "Summarise."}],
                        max_tokens=32)]
        return converse(client, 930 + i, turns, "late-%d" % i)[0]
    killer_done = []

    def killer():
        time.sleep(3.0)
        daemon.kill()
        killer_done.append(time.monotonic())
    import threading
    th = threading.Thread(target=killer)
    th.start()
    res = concurrently(3, work)
    th.join()
    errs = [r for r in res.values() if isinstance(r, Exception)]
    check(not errs and all(a["text"] for r in res.values() for a in r),
          "every request answered across memdecayd's death (%s)" % (errs[:1],))
    aud = harness.read_audit(audit)
    nulls = sum(a["null_reads"] for a in aud.values())
    rows = sum(a["rows"] for a in aud.values())
    check(aud and nulls == 0, "no null block read by the kernel (%d rows audited)" % rows)
    check("Traceback" not in open(log).read(), "no traceback in vLLM's log")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--keep", default=None)
    a = ap.parse_args()
    turns = 2 if a.quick else 4
    work = a.keep or harness.tmpdir("md-vllm-pool-")
    os.makedirs(work, exist_ok=True)
    harness.exit_on_sigterm()
    daemon = harness.Daemon(work).start()
    servers = []
    import openai
    try:
        part_room(work, daemon, turns, servers)
        trace = os.path.join(work, "trace.jsonl")
        audit = os.path.join(work, "audit.jsonl")
        env = {"MEMDECAY_VLLM_POOL": "on", "MEMDECAY_VLLM_TEST_AUDIT": audit,
               "MEMDECAY_VLLM_POLICY": "memdecay"}
        # 60 blocks of 32 tokens: the long request alone takes 49 of the 59 usable ones
        server, url, log = harness.start_server(
            work, daemon, trace, MODEL, env, extra_args=ARGS + ["--num-gpu-blocks-override",
                                                                "60"],
            llm_args={"max_model_len": 1888})
        servers.append(server)
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600,
                               max_retries=0)
        part_pressure(client, url, trace, turns + 1)
        part_order(url, trace)
        part_failopen(client, daemon, log, audit, turns)
        check(server.poll() is None, "vllm serve ran through it all")
    except Exception as e:
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        for s in servers:
            if s.poll() is None:
                os.killpg(s.pid, signal.SIGKILL)
        daemon.stop()
    return check.verdict("test_pool", work, ("vllm.log", "vllm-room-pool.log",
                                             "memdecayd.log"))


if __name__ == "__main__":
    sys.exit(main())
