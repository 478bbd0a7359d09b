#!/usr/bin/env python3
"""test_sessions.py — an agent's session keeps its bounded cache across turns
(docs/vllm.md "Sessions"): a real `vllm serve` with the plugin, a live
memdecayd, multi-turn conversations written back turn by turn through the
openai client (agents.py).

  transparency  a session whose budget never binds gives the same replies,
                turn by turn, as plain vLLM (no budget, prefix caching), and
                from turn 2 on its prompt is served from the session: the
                client's cached_tokens are the tokens the plugin adopted;
  accounting    a session under a budget of 256 tokens: at every step of every
                turn it holds <= budget + 1 block in vLLM's own block lists;
                from turn 2 on the prompt tokens computed (prompt tokens less
                cached_tokens) are the new suffix plus at most one block;
  isolation     another session id, another cache_salt, a request without an
                id: no adoption, and the reply equals a fresh request's; an
                edited earlier message: adopted up to the edit, no further;
  react         a ReAct client with X-Session-ID stopping every turn on
                "Observation:" (vLLM ends such a turn by aborting it): its
                later turns are adopted, cached_tokens >= half the prompt;
  tenants       two users without an id share a long system prompt: B's
                first turn does not take A's session, A's next turn adopts;
  n=2           a request with n=2 under an id: both choices answered, one
                session left for the id, the next turn adopts it;
  many          12 concurrent budgeted sessions with ids on vLLM's 8 sequences
                and the worker's 4 (MEMDECAY_VLLM_MAX_SEQS): every turn
                answered, later turns adopted, adopters left untracked, and no
                null block in any attention metadata (MEMDECAY_VLLM_TEST_AUDIT);
  metrics       the session series on vLLM's /metrics equal the plugin's own
                counters; memdecayctl sessions marks retained sessions and
                shows their ids;
  faults        memdecayd killed mid-session: the next turns are answered (the
                session keeps being served); a session left alone past the TTL
                is released at the next step;
  pressure      (second server) the operator's default budget, a KV pool of
                65 blocks for three concurrent sessions of an unmodified
                OpenAI client (no id, no MemDecay field): every turn answered
                and the client sees cached_tokens from turn 2 on; then a long
                request is admitted by releasing retained sessions, and vLLM
                preempts nothing throughout;
  restart       vLLM killed and restarted: the sessions are gone, the next
                turn is answered without adoption, and the turn after it is
                adopted again.

test_sessions.py [--quick] [--keep DIR]   (--quick: fewer turns; CI)"""
import argparse
import json
import math
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents  # noqa: E402
import harness  # noqa: E402

MODEL = "smollm2"
BLOCK = harness.BLOCK
check = harness.Checks()


def ask(client, messages, budget=None, session=None, salt=None, max_tokens=16, plain=False,
        header=None, stop=None, n=1, temperature=0.0):
    """One chat turn; session: the body's session_id, header: X-Session-ID."""
    body = {}
    xargs = {}
    if budget is not None:
        xargs["memdecay_budget_tokens"] = budget
    if xargs:
        body["vllm_xargs"] = xargs
    if session is not None:
        body["session_id"] = session
    if salt is not None:
        body["cache_salt"] = salt
    if plain:
        messages = [{k: v for k, v in m.items() if k != "region"} for m in messages]
    r = client.chat.completions.create(
        model=MODEL, messages=messages, temperature=temperature, max_tokens=max_tokens, n=n,
        stop=stop, extra_body=body or None,
        extra_headers={"X-Session-ID": header} if header is not None else None)
    u = r.usage
    cached = (u.prompt_tokens_details.cached_tokens
              if u.prompt_tokens_details is not None else 0) or 0
    return {"id": r.id, "text": r.choices[0].message.content or "",
            "texts": [c.message.content or "" for c in r.choices],
            "stop_reason": (r.choices[0].model_extra or {}).get("stop_reason"),
            "prompt": u.prompt_tokens, "completion": u.completion_tokens, "cached": cached}


def converse(client, sess, turns, **kw):
    msgs = agents.start_messages()
    out = []
    for k in range(turns):
        msgs += sess.turn(k)
        a = ask(client, msgs, **kw)
        out.append(a)
        msgs.append({"role": "assistant", "content": a["text"]})
    return out, msgs


def concurrently(n, fn):
    """fn(0) ... fn(n-1) on n threads; {i: result or the exception it raised}."""
    results = {}

    def run(i):
        try:
            results[i] = fn(i)
        except Exception as e:
            results[i] = e
    th = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join(1200)
    return results


def adopted_ids(trace):
    got = {}
    for row in harness.read_sessions(trace):
        got.update(row["sessions"].get("adopted", {}))
    return got


def adoption(trace, reply_id):
    """Tokens the plugin adopted for the request of chat completion reply_id (its
    engine request id starts with it), or None when it adopted nothing."""
    for k, v in adopted_ids(trace).items():
        if k.startswith(reply_id):
            return v[1]
    return None


def counters(trace):
    rows = harness.read_sessions(trace)
    return rows[-1]["counters"] if rows else {}


def part_transparency(client, trace, turns):
    print("transparency: a budget that never binds, against plain vLLM", flush=True)
    sess = agents.Session(101, turns)
    # the session first: plain vLLM's run then finds these turns in its prefix cache,
    # which does not change its replies (and the other order would give the session's
    # turns a prefix-cache hit longer than the session)
    mine, _ = converse(client, sess, turns, budget=100000, session="transparent")
    plain, _ = converse(client, sess, turns)
    same = [p["text"] == m["text"] for p, m in zip(plain, mine)]
    check(all(same), "the same replies turn by turn (%d of %d): %r"
          % (sum(same), len(same), [m["text"][:30] for m in mine]))
    got = [adoption(trace, m["id"]) for m in mine[1:]]
    check(all(g for g in got), "turns 2..%d adopted the session: %s" % (turns, got))
    check(all(g == m["cached"] for g, m in zip(got, mine[1:])),
          "the client's cached_tokens are the adopted tokens: %s against %s"
          % ([m["cached"] for m in mine[1:]], got))


def part_accounting(client, trace, turns, daemon):
    budget = 256
    print("accounting: a session under a budget of %d tokens, %d turns" % (budget, turns),
          flush=True)
    sess = agents.Session(202, turns)
    out, _ = converse(client, sess, turns, budget=budget, session="acct")
    time.sleep(0.5)
    held, ev = harness.read_trace(trace)
    limit = math.ceil(budget / BLOCK) + 1
    for k, a in enumerate(out):
        rows = [h for h in held if h["req"].startswith(a["id"])]
        worst = max((h["held"] for h in rows), default=-1)
        check(rows and worst <= limit, "turn %d: at every one of %d steps it held <= budget + 1 "
              "block (max %d, limit %d)" % (k + 1, len(rows), worst, limit))
    n_ev = sum(1 for e in ev for a in out if e["evict"].startswith(a["id"]))
    check(n_ev > 0, "the budget bound: %d blocks evicted over the session" % n_ev)
    for k in range(1, turns):
        prev, cur = out[k - 1], out[k]
        new = cur["prompt"] - (prev["prompt"] + prev["completion"])
        computed = cur["prompt"] - cur["cached"]
        got = adoption(trace, cur["id"])
        check(got is not None and got == cur["cached"] and computed <= max(new, 0) + BLOCK,
              "turn %d: adopted %s tokens; %d prompt tokens computed for a new suffix of %d "
              "(+ at most %d)" % (k + 1, got, computed, new, BLOCK))
    # the operator's view: memdecayctl lists the retained session with what it holds
    rows = [r for r in json.loads(daemon.ctl("--json", "sessions").stdout)["sessions"]
            if r["own_options"] and r["budget_tokens"] == budget]
    r = rows[0] if len(rows) == 1 else {}
    check(len(rows) == 1 and r["tokens"] <= budget + BLOCK and r["evicted_tokens"] > 0
          and r["span_tokens"] >= out[-1]["prompt"] and r["idle_s"] >= 0.4,
          "memdecayctl sessions: the session, idle %.1f s, holds %s tokens of a span of %s "
          "(%s evicted)" % (r.get("idle_s", -1), r.get("tokens"), r.get("span_tokens"),
                            r.get("evicted_tokens")))
    return out


def part_isolation(client, trace):
    print("isolation: other ids, salts, no id, an edited message", flush=True)
    sess = agents.Session(303, 3)
    _, msgs = converse(client, sess, 2, budget=100000, session="iso")
    msgs = msgs + sess.turn(2)
    fresh = ask(client, msgs)                       # no budget: plain vLLM
    cases = [("another session id", dict(session="iso-other")),
             ("the same id, another cache_salt", dict(session="iso", salt="tenant-b")),
             ("no id", dict())]
    ad_before = set(adopted_ids(trace))
    for what, kw in cases:
        a = ask(client, msgs, budget=100000, **kw)
        ad = set(adopted_ids(trace)) - ad_before
        check(not any(k.startswith(a["id"]) for k in ad) and a["text"] == fresh["text"],
              "%s: not adopted, the reply equals a fresh request's (%r)" % (what, a["text"][:30]))
    # the same id, the untouched history: adopted, and the reply is plain vLLM's
    a = ask(client, msgs, budget=100000, session="iso")
    ok = any(k.startswith(a["id"]) for k in adopted_ids(trace))
    check(ok and a["text"] == fresh["text"], "the session's own next turn is adopted (%s) and "
          "replies as plain vLLM" % ok)
    edited = [dict(m) for m in msgs]
    edited[1]["content"] = edited[1]["content"].replace("Next, check", "Then verify")
    check(edited[1] != msgs[1], "the edit changes the first user message")
    a = ask(client, edited, budget=100000, session="iso")
    b = ask(client, edited)
    check(a["text"] == b["text"], "an edited earlier message: the reply equals a fresh request's")
    # the session serves exactly up to the edit: the block-aligned tokens before it
    head = ask(client, msgs[:2], max_tokens=1)["prompt"]
    got = adoption(trace, a["id"])
    check(got is not None and head - 2 * BLOCK <= got <= head and a["cached"] == got,
          "an edited earlier message: %s tokens adopted (cached %d), the edit after token %d"
          % (got, a["cached"], head))


def part_faults(client, work, daemon, trace):
    print("faults: memdecayd killed mid-session", flush=True)
    sess = agents.Session(404, 4)
    msgs = agents.start_messages()
    got = []
    for k in range(4):
        if k == 2:
            daemon.kill()
        msgs += sess.turn(k)
        a = ask(client, msgs, budget=256, session="faults")
        got.append(a)
        msgs.append({"role": "assistant", "content": a["text"]})
    check(all(g["text"] for g in got), "every turn answered across the daemon's death: %r"
          % [g["text"][:20] for g in got])
    ad = [adoption(trace, g["id"]) for g in got[2:]]
    check(all(ad), "the session is still adopted without a daemon: %s tokens" % ad)
    return harness.Daemon(work, name="memdecayd-2").start()


def part_ttl(client, trace, ttl):
    print("ttl: an abandoned session is released", flush=True)
    sess = agents.Session(505, 1)
    msgs = agents.start_messages() + sess.turn(0)
    ask(client, msgs, budget=256, session="abandoned")
    before = counters(trace)["released_expired"]
    time.sleep(ttl + 1)
    ask(client, [{"role": "user", "content": "Hello."}], max_tokens=2)     # any next step
    after = counters(trace)["released_expired"]
    check(after > before, "released after its TTL of %.0f s (expired %d -> %d)"
          % (ttl, before, after))


def part_pressure(client, url, trace, turns):
    print("pressure: 3 unmodified clients, the operator's budget, a pool of 65 blocks",
          flush=True)
    results = concurrently(3, lambda i: converse(client, agents.Session(600 + i, turns), turns,
                                                 plain=True)[0])
    errs = [r for r in results.values() if isinstance(r, Exception)]
    check(not errs and len(results) == 3, "every turn of 3 sessions x %d turns answered%s"
          % (turns, " (%r)" % errs[0] if errs else ""))
    if errs:
        return
    cached = [[a["cached"] for a in r] for r in results.values()]
    adopted = [[adoption(trace, a["id"]) or 0 for a in r[1:]] for r in results.values()]
    check(all(sum(1 for x in ad if x) >= (turns - 1) // 2 for ad in adopted),
          "at least half the later turns of each client adopted its session: %s (cached %s)"
          % (adopted, cached))
    # four more agents leave their sessions retained (about 12 blocks each); then one
    # long request (the 1,550-token agent conversation, a budget of 2,000) needs 49
    # free blocks to be admitted: the retained sessions must give way, not a request
    for i in range(4):
        converse(client, agents.Session(700 + i, 2), 2, plain=True)
    time.sleep(0.5)
    before = counters(trace)
    big = ask(client, harness.agent_messages() + [{"role": "user", "content": "Summarise."}],
              budget=2000, max_tokens=8)
    ask(client, [{"role": "user", "content": "Hello."}], max_tokens=2)   # a step to trace
    time.sleep(0.5)
    c = counters(trace)
    check(bool(big["text"]) and c.get("released_pressure", 0) > before.get("released_pressure", 0),
          "a long request was admitted by releasing retained sessions (released under pressure "
          "%d -> %d, %d sessions retained before)" % (before.get("released_pressure", 0),
                                                      c.get("released_pressure", 0),
                                                      before.get("retained", 0)))
    pre = harness.metric(url, "vllm:num_preemptions_total")
    check(pre == 0, "no preemption (vllm:num_preemptions_total %d)" % pre)


def part_restart(work, daemon, sess_msgs, env, args):
    print("restart: vLLM killed and started again", flush=True)
    trace = os.path.join(work, "trace-restart.jsonl")
    server, url, log = harness.start_server(work, daemon, trace, MODEL, env, extra_args=args,
                                            log_name="vllm-restart.log")
    import openai
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600, max_retries=0)
    try:
        a = ask(client, sess_msgs, budget=256, session="acct")
        check(bool(a["text"]) and adoption(trace, a["id"]) is None,
              "the next turn is answered without a session to adopt (%d cached)" % a["cached"])
        b = ask(client, sess_msgs + [{"role": "assistant", "content": a["text"]},
                                     {"role": "user", "content": "Thanks. Anything else?"}],
                budget=256, session="acct")
        got = adoption(trace, b["id"])
        check(got is not None and got >= a["prompt"] // BLOCK * BLOCK - BLOCK,
              "the turn after it adopts the new session (%s tokens of %d)" % (got, b["prompt"]))
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()

REACT_SYSTEM = (
    "You answer questions with tools, in this format and no other:\n"
    "Thought: what to do next\nAction: tool[input]\nObservation: the tool's answer\n"
    "and so on, until Action: finish[answer].\n\n"
    "Example.\nQuestion: What is the status of booking 4411 in Porto?\n"
    "Thought: I need to look the booking up.\nAction: lookup[booking 4411 Porto]\n"
    "Observation: booking 4411 is confirmed.\nThought: I know the answer.\n"
    "Action: finish[confirmed]\n")


def part_react(client, trace, turns):
    print("react: X-Session-ID, every turn stopped on \"Observation:\"", flush=True)
    sess = agents.Session(808, turns)
    msgs = [{"role": "system", "content": REACT_SYSTEM}]
    out = []
    for k in range(turns):
        item, city, num = sess.items[k]
        if k == 0:
            msgs.append({"role": "user", "content": "Question: What is the status of %s %d in "
                         "%s?" % (item, num, city)})
        a = ask(client, msgs, budget=256, header="react-1", stop=["Observation:"],
                max_tokens=48)
        out.append(a)
        msgs.append({"role": "assistant", "content": a["text"]})
        msgs.append({"role": "user", "content": "Observation: %s %d in %s is confirmed. %s"
                     % (item, num, city, agents.FILLER)})
    # the model decides whether a turn ends on the stop string or on its own end token;
    # the stop string must have ended some, and the turn after each of those adopts
    stopped = [k for k, a in enumerate(out) if a["stop_reason"] == "Observation:"]
    check(len(stopped) >= 2, "the client's stop string ended %d of %d turns (stop reasons %s)"
          % (len(stopped), turns, [a["stop_reason"] for a in out]))
    later = [(adoption(trace, a["id"]), a["cached"], a["prompt"]) for a in out[1:]]
    after_stop = [later[k] for k in stopped if k + 1 < turns]
    check(after_stop and all(g is not None and c == g and c >= p / 2 for g, c, p in after_stop),
          "every turn after one the stop string ended adopted its session, cached_tokens >= "
          "half the prompt: (adopted, cached, prompt) %s" % after_stop)
    check(all(g is not None and c == g and c >= p / 2 for g, c, p in later),
          "every later turn adopted its session, cached_tokens >= half the prompt: "
          "(adopted, cached, prompt) %s" % later)


def part_tenants(client, trace):
    print("tenants: two users without an id, one long system prompt", flush=True)
    system = agents.SYSTEM + " " + agents.FILLER * 3
    a_sess, b_sess = agents.Session(901, 5), agents.Session(902, 1)
    msgs = [{"role": "system", "content": system}]
    a_out = []
    for k in range(4):
        msgs += a_sess.turn(k)
        a = ask(client, msgs, budget=512)
        a_out.append(a)
        msgs.append({"role": "assistant", "content": a["text"]})
    b = ask(client, [{"role": "system", "content": system}] + b_sess.turn(0), budget=512)
    check(adoption(trace, b["id"]) is None, "user B's first turn adopts nothing of A's (%d "
          "tokens cached, from vLLM's prefix cache)" % b["cached"])
    msgs += a_sess.turn(4)
    a = ask(client, msgs, budget=512)
    got = adoption(trace, a["id"])
    prev = a_out[-1]["prompt"]
    check(got is not None and got >= prev // BLOCK * BLOCK - BLOCK,
          "user A's next turn still adopts A's session: %s of %d prompt tokens (A's last "
          "prompt %d)" % (got, a["prompt"], prev))


def part_n2(client, trace):
    print("n=2: two choices under one id", flush=True)
    sess = agents.Session(1001, 2)
    msgs = agents.start_messages() + sess.turn(0)
    before = counters(trace)
    a = ask(client, msgs, budget=256, session="two", n=2, max_tokens=12, temperature=0.8)
    time.sleep(0.3)
    c = counters(trace)
    check(len(a["texts"]) == 2 and all(a["texts"]), "both choices answered: %r"
          % [t[:20] for t in a["texts"]])
    kept = c["retained"] - before["retained"]
    replaced = c["released_stale"] - before["released_stale"]
    check(kept == 2 and replaced == 1, "each child was retained and the later one replaced the "
          "earlier (retained +%d, replaced +%d): one session for the id" % (kept, replaced))
    msgs += [{"role": "assistant", "content": a["texts"][1]}] + sess.turn(1)
    b = ask(client, msgs, budget=256, session="two")
    got = adoption(trace, b["id"])
    check(got is not None and got >= a["prompt"] // BLOCK * BLOCK - BLOCK,
          "the next turn adopts it (%s tokens; the first prompt had %d)" % (got, a["prompt"]))


def part_many(client, trace, audit, log, turns):
    print("many: 12 concurrent budgeted sessions with ids, 8 vLLM sequences, 4 worker "
          "sequences", flush=True)
    results = concurrently(12, lambda i: converse(client, agents.Session(1100 + i, turns), turns,
                                                  budget=256, session="many-%d" % i)[0])
    errs = [r for r in results.values() if isinstance(r, Exception)]
    check(not errs and len(results) == 12 and all(a["text"] for r in results.values()
                                                   for a in r),
          "every turn of 12 sessions x %d turns answered%s" % (turns, " (%r)" % errs[0]
                                                               if errs else ""))
    if errs:
        return
    adopted = [sum(1 for a in r[1:] if adoption(trace, a["id"])) for r in results.values()]
    check(sum(adopted) >= 12 * (turns - 1) // 2, "later turns adopted: %s of %d each"
          % (adopted, turns - 1))
    time.sleep(0.5)
    untracked = [int(m) for m in re.findall(r"untracked (\d+)", open(log).read())]
    check(untracked and untracked[-1] > 0, "adopters the worker could not track: %s (the "
          "worker's counter)" % (untracked[-1] if untracked else None))
    au = harness.read_audit(audit)
    compacted = sum(r["compacted_rows"] for r in au.values())
    nulls = sum(r["null_reads"] for r in au.values())
    check(au and compacted > 0 and nulls == 0, "no null block in any attention metadata handed "
          "to vLLM's kernel (%d rows had holes compacted, %d null blocks left, %d steps)"
          % (compacted, nulls, sum(r["steps"] for r in au.values())))


def part_metrics(url, trace, daemon):
    print("metrics: /metrics and memdecayctl sessions", flush=True)
    c = counters(trace)
    m = {k: harness.metric(url, "memdecay_vllm_" + k) for k in
         ("sessions_adopted_total", "session_adopted_tokens_total", "session_retentions_total",
          "sessions_retained", "session_blocks_retained")}
    check(m["sessions_adopted_total"] == c["adopted"] > 0
          and m["session_adopted_tokens_total"] == c["adopted_tokens"]
          and m["session_retentions_total"] == c["retained"],
          "vLLM's /metrics: %d sessions adopted, %d tokens, %d retained, as the plugin counted"
          % (m["sessions_adopted_total"], m["session_adopted_tokens_total"],
             m["session_retentions_total"]))
    hits = harness.metric(url, "vllm:prefix_cache_hits_total")
    check(hits >= c["adopted_tokens"], "vLLM's own prefix-cache hits (%d tokens) count the "
          "adopted tokens (%d)" % (hits, c["adopted_tokens"]))
    rel = {r: harness.metric(url, "memdecay_vllm_session_releases_total", {"reason": r})
           for r in ("stale", "expired", "pressure")}
    check(rel["stale"] == c["released_stale"] and rel["expired"] == c["released_expired"],
          "releases by reason: %s" % rel)
    check(m["sessions_retained"] > 0 and m["session_blocks_retained"] > 0,
          "%d sessions retained now, holding %d blocks" % (m["sessions_retained"],
                                                            m["session_blocks_retained"]))
    rows = json.loads(daemon.ctl("--json", "sessions").stdout)["sessions"]
    retained = [r for r in rows if r.get("state") == "retained"]
    tags = {r.get("session") for r in retained}
    check(any(t and t.startswith("many-") for t in tags),
          "memdecayctl sessions marks %d sequences retained, with their ids (%s)"
          % (len(retained), sorted(t for t in tags if t)[:6]))



def first_server(work, daemon, turns, servers):
    """Everything on the first server, then the restart; returns the daemon that
    is left running (the first one is killed in part_faults)."""
    import openai
    ttl = 20.0
    trace = os.path.join(work, "trace.jsonl")
    audit = os.path.join(work, "audit.jsonl")
    # 4 worker sequences for up to 8 running requests (vLLM's max_num_seqs): with 12
    # sessions at once, some adopters go untracked
    env = {"MEMDECAY_VLLM_SESSION_TTL_S": str(ttl), "MEMDECAY_VLLM_TEST_AUDIT": audit,
           "MEMDECAY_VLLM_MAX_SEQS": "4", "MEMDECAY_VLLM_COST_EVERY": "20"}
    server, url, log = harness.start_server(work, daemon, trace, MODEL, env, extra_args=ARGS)
    servers.append(server)
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600, max_retries=0)
    part_transparency(client, trace, turns)
    acct = part_accounting(client, trace, turns, daemon)
    part_isolation(client, trace)
    part_react(client, trace, turns + 1)
    part_tenants(client, trace)
    part_n2(client, trace)
    part_ttl(client, trace, ttl)
    part_many(client, trace, audit, log, turns)
    part_metrics(url, trace, daemon)
    d2 = part_faults(client, work, daemon, trace)
    check(server.poll() is None and "Traceback" not in open(log).read(),
          "vllm serve ran through it all, no traceback in its log")
    os.killpg(server.pid, signal.SIGKILL)
    server.wait()
    sess = agents.Session(202, turns + 1)
    msgs = agents.start_messages()
    for k in range(turns):
        msgs += sess.turn(k) + [{"role": "assistant", "content": acct[k]["text"]}]
    msgs += sess.turn(turns)
    part_restart(work, d2, msgs, env, ARGS)
    return d2


def pressure_server(work, daemon, servers):
    import openai
    trace = os.path.join(work, "trace-pressure.jsonl")
    # 65 blocks hold one 2,048-token request and the null block (vLLM's own floor);
    # three sessions at 384 tokens run in at most 3 x 15 blocks, so only the
    # retained ones can crowd the pool, and they must give way
    env = {"MEMDECAY_VLLM_BUDGET_TOKENS": "384", "MEMDECAY_VLLM_SESSION_SHARE": "1.0"}
    server, url, log = harness.start_server(
        work, daemon, trace, MODEL, env, log_name="vllm-pressure.log",
        extra_args=ARGS + ["--num-gpu-blocks-override", "65"])
    servers.append(server)
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600, max_retries=0)
    part_pressure(client, url, trace, 6)


ARGS = ["--enable-prompt-tokens-details"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--keep", default=None)
    ap.add_argument("--pressure-only", action="store_true", help="the second server's part alone")
    a = ap.parse_args()
    turns = 3 if a.quick else 6
    work = a.keep or harness.tmpdir("md-vllm-sessions-")
    os.makedirs(work, exist_ok=True)
    harness.exit_on_sigterm()
    daemons = [harness.Daemon(work).start()]
    servers = []
    try:
        if not a.pressure_only:
            try:
                daemons.append(first_server(work, daemons[0], turns, servers))
            except Exception as e:
                check(False, "%s: %s" % (type(e).__name__, e))
        live = [d for d in daemons if d.alive()]
        if not live:
            live = [harness.Daemon(work, name="memdecayd-3").start()]
            daemons += live
        pressure_server(work, live[-1], servers)
    except Exception as e:
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        for s in servers:
            if s.poll() is None:
                os.killpg(s.pid, signal.SIGKILL)
        for d in daemons:
            d.stop()
    return check.verdict("test_sessions", work, ("vllm.log", "vllm-pressure.log",
                                                 "vllm-restart.log", "memdecayd.log"))


if __name__ == "__main__":
    sys.exit(main())
