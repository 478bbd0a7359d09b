#!/usr/bin/env python3
"""test_serve.py — `vllm serve` with the plugin, driven by the openai client.

  budget        the bundled agent conversation (system, user, tool calls and
                results, about 1,550 tokens) in two turns, each with a budget of
                40% of its tokens (vllm_xargs memdecay_budget_tokens): at every
                step the blocks the request holds in vLLM's own block lists stay
                at or under budget + 1 block, blocks are evicted, none holding
                system tokens, and both turns are answered;
  operations    `memdecayctl set memdecay.region.tool_out.lambda=…` between two
                identical budgeted requests: the faster decay evicts more
                tool_out blocks;
  fail-open     memdecayd is killed (SIGKILL) while a reply streams: the reply
                completes, vLLM logs the loss once, and when a new memdecayd
                listens on the socket vLLM reattaches and evicts again;
  many engines  vLLM, memdecay-agent (llama.cpp) and memdecay-loadgen on one
                memdecayd under budget.global_pages; SIGKILL of the vLLM server
                (its process group) releases its pages, and the other two run
                to their end.

Everything runs in a temporary directory: the daemon's socket, vLLM on a free
loopback port, the logs (printed on failure).  test_serve.py [--keep DIR]"""
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MODEL_NAME = "smollm2"
check = harness.Checks()
_ids = itertools.count()


def prompt_tokens(messages):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(harness.MODEL)
    return len(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                       return_dict=False))


def ask(client, messages, budget=None, max_tokens=32, **extra):
    """One request; each its own session (a fresh session_id), so that a request
    that repeats an earlier one's prompt is decided afresh, not adopted."""
    body = dict(extra)
    body.setdefault("session_id", "test-serve-%d" % next(_ids))
    if budget is not None:
        body["vllm_xargs"] = {"memdecay_budget_tokens": int(budget)}
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, temperature=0.0,
                                       max_tokens=max_tokens, extra_body=body)
    return r


def part_budget(client, trace):
    print("budget: two turns of the agent conversation at 40% of their tokens", flush=True)
    msgs = harness.agent_messages()
    turns = [msgs + [{"role": "user", "content": "What is the customer account code?"}]]
    ids = []
    budgets = []
    answers = []
    for t in range(2):
        conv = turns[t]
        n = prompt_tokens(conv)
        b = int(0.4 * n)
        r = ask(client, conv, budget=b)
        text = r.choices[0].message.content or ""
        print("  turn %d: %d prompt tokens (vLLM: %d), budget %d: %r"
              % (t + 1, n, r.usage.prompt_tokens, b, text), flush=True)
        ids.append(r.id)
        budgets.append(b)
        answers.append(text)
        turns.append(conv + [{"role": "assistant", "content": text},
                             {"role": "user", "content": "What is the name of my daughter?"}])
    time.sleep(0.5)
    held, evictions = harness.read_trace(trace)
    for t, (rid, b) in enumerate(zip(ids, budgets)):
        rows = [h for h in held if h["req"].startswith(rid)]
        ev = [e for e in evictions if e["evict"].startswith(rid)]
        limit = math.ceil(b / harness.BLOCK) + 1
        worst = max((h["held"] for h in rows), default=-1)
        check(rows and worst <= limit,
              "turn %d: at every one of %d steps the request held <= budget + 1 block "
              "(max %d blocks, limit %d)" % (t + 1, len(rows), worst, limit))
        check(len(ev) > 0, "turn %d: %d blocks evicted" % (t + 1, len(ev)))
        check(all(0 not in e["regions"] for e in ev), "turn %d: no evicted block held system "
              "tokens (regions evicted: %s)" % (t + 1, sorted({x for e in ev for x in e["regions"]})))
        check(bool(answers[t].strip()), "turn %d: answered" % (t + 1))


def part_lambda(client, daemon, trace):
    print("operations: memdecayctl set of a lambda changes vLLM's next decisions", flush=True)
    msgs = harness.agent_messages() + [{"role": "user", "content": "What is my husband's name?"}]
    got = {}
    for lam in ("0", "4"):
        daemon.ctl("set", "memdecay.region.tool_out.lambda=" + lam)
        r = ask(client, msgs, budget=500, max_tokens=8)
        time.sleep(0.5)
        _, ev = harness.read_trace(trace)
        ev = [e for e in ev if e["evict"].startswith(r.id)]
        got[lam] = sum(1 for e in ev if 5 in e["regions"])
        print("  tool_out lambda %s: %d of %d evicted blocks hold tool_out tokens"
              % (lam, got[lam], len(ev)), flush=True)
    check(got["4"] > got["0"], "a faster tool_out decay evicts more tool_out blocks (%d > %d)"
          % (got["4"], got["0"]))


def stream(client, out, max_tokens):
    try:
        s = client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Tell me a long story."}],
            temperature=0.0, max_tokens=max_tokens, stream=True,
            extra_body={"ignore_eos": True, "vllm_xargs": {"memdecay_budget_tokens": 64}})
        for ch in s:
            if ch.choices and ch.choices[0].delta.content:
                out["chunks"] += 1
            if ch.choices and ch.choices[0].finish_reason:
                out["finish"] = ch.choices[0].finish_reason
    except Exception as e:
        out["error"] = repr(e)


def part_fail_open(client, work, daemon, log, trace):
    print("fail-open: memdecayd killed mid-reply, then a new one", flush=True)
    out = {"chunks": 0, "finish": None}
    th = threading.Thread(target=stream, args=(client, out, 160))
    th.start()
    harness.wait_until(lambda: out["chunks"] >= 10 or not th.is_alive(), 120, "10 streamed tokens")
    daemon.kill()
    t_kill = time.time()
    th.join(300)
    check(out.get("finish") == "length" and "error" not in out,
          "the reply streamed on to its end after SIGKILL of memdecayd (%d chunks, %s)"
          % (out["chunks"], out.get("error") or out.get("finish")))
    r = ask(client, [{"role": "user", "content": "What is the capital of France?"}], max_tokens=12)
    check(bool(r.choices[0].message.content), "a new request is answered with no daemon")
    text = open(log).read()
    lost = text.count("lost memdecayd")
    check(lost == 1, "vLLM's log says once that it lost memdecayd (%d lines)" % lost)
    d2 = harness.Daemon(work, name="memdecayd-2").start()
    t0 = time.time()
    names = harness.wait_until(
        lambda: [e["name"] for e in d2.engines() if e["name"].startswith("vllm")], 60,
        "vLLM to reattach to the new memdecayd")
    check(True, "reattached to the new memdecayd in %.1f s: %s" % (time.time() - t0, names))
    back = harness.wait_until(lambda: open(log).read().count("reattached to memdecayd"), 30,
                              "vLLM's log to say it reattached")
    check(back == 1, "vLLM's log says once that it reattached (%d lines)" % back)
    msgs = harness.agent_messages() + [{"role": "user", "content": "Which hotel costs 95 euros?"}]
    r = ask(client, msgs, budget=500)
    time.sleep(0.5)
    _, ev = harness.read_trace(trace)
    n = len([e for e in ev if e["evict"].startswith(r.id) and e["t"] > t_kill])
    check(n > 0 and r.choices[0].message.content,
          "under the new memdecayd a budgeted request is evicted (%d blocks) and answered" % n)
    return d2


def part_many(client, server, daemon, work):
    print("many engines: vLLM, memdecay-agent and loadgen under budget.global_pages", flush=True)
    # tight enough that loadgen alone (up to 96 pages) is over its share, whichever
    # engines are still attached when it is stopped
    daemon.ctl("budget", "global_pages", "48")
    env_f = harness.ROOT / ".deps" / "llama.env"
    llama = dict(line.split("=", 1) for line in env_f.read_text().split() if "=" in line)
    agent = subprocess.Popen(
        [str(harness.BIN / "memdecay-agent"), "--model", llama["MEMDECAY_LLAMA_MODEL"],
         "--trace", str(harness.TRACE), "--policy", "memdecay", "--budget-tokens", "640",
         "--socket", daemon.sock, "--json", "--quiet"],
        stdout=open(os.path.join(work, "agent.json"), "w"),
        stderr=open(os.path.join(work, "agent.log"), "w"), preexec_fn=harness.die_with_parent)
    loadgen = subprocess.Popen(
        [str(harness.BIN / "memdecay-loadgen"), "--socket", daemon.sock, "--engine-name",
         "loadgen", "--seqs", "2", "--pages-per-seq", "48", "--steps", "0", "--step-hz", "100",
         "--json"], stdout=open(os.path.join(work, "loadgen.json"), "w"),
        stderr=open(os.path.join(work, "loadgen.log"), "w"), preexec_fn=harness.die_with_parent)
    out = {"chunks": 0, "finish": None}
    th = threading.Thread(target=stream, args=(client, out, 400))
    th.start()

    def all_three():
        e = daemon.engines()
        names = {x["name"] for x in e}
        vllm_pages = sum(x["pages"] for x in e if x["name"].startswith("vllm"))
        return e if vllm_pages > 0 and "loadgen" in names and "llama.cpp" in names else None
    eng = harness.wait_until(all_three, 240, "vLLM, the agent and loadgen attached with pages")
    check(True, "one memdecayd serves %s" % ", ".join("%s (%d pages)" % (x["name"], x["pages"])
                                                    for x in eng))
    os.killpg(server.pid, signal.SIGKILL)
    server.wait()
    t0 = time.time()
    harness.wait_until(lambda: not [x for x in daemon.engines() if x["name"].startswith("vllm")],
                       60, "memdecayd to release the killed vLLM's engines")
    check(True, "SIGKILL of the vLLM server: its engines and pages released in %.1f s"
          % (time.time() - t0))
    check(loadgen.poll() is None, "loadgen still served after the kill")
    rc = agent.wait(900)
    loadgen.send_signal(signal.SIGINT)
    lrc = loadgen.wait(60)
    try:
        a = json.load(open(os.path.join(work, "agent.json")))
        passed = "%s of %s probes passed" % (a.get("probes_passed"), len(a.get("probes", [])))
    except ValueError:
        passed = "no JSON"
    check(rc == 0, "memdecay-agent (llama.cpp) ran to its end: exit %d, %s" % (rc, passed))
    try:
        lg = json.load(open(os.path.join(work, "loadgen.json")))
        lg_s = "%d evictions, %d pinned evicted" % (lg["evictions"], lg["pinned_evicted"])
    except (ValueError, KeyError):
        lg, lg_s = {}, "no JSON"
    check(lrc == 0 and lg.get("pinned_evicted", 1) == 0 and lg.get("evictions", 0) > 0,
          "loadgen ran to its end under the global budget: exit %d, %s" % (lrc, lg_s))


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    work = harness.workdir("md-vllm-serve-")
    harness.exit_on_sigterm()
    import openai
    trace = os.path.join(work, "trace.jsonl")
    daemon = harness.Daemon(work).start()
    d2 = None
    server = None
    try:
        t0 = time.time()
        server, url, log = harness.start_server(work, daemon, trace, MODEL_NAME,
                                                {"MEMDECAY_VLLM_REATTACH_MS": "500"})
        print("vllm serve answered in %.0f s" % (time.time() - t0), flush=True)
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600)
        part_budget(client, trace)
        part_lambda(client, daemon, trace)
        d2 = part_fail_open(client, work, daemon, log, trace)
        part_many(client, server, d2, work)
    except Exception as e:
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        for d in (daemon, d2):
            if d is not None:
                d.stop()
    return check.verdict("test_serve", work, ("vllm.log", "memdecayd.log", "memdecayd-2.log",
                                              "agent.log", "loadgen.log"))


if __name__ == "__main__":
    sys.exit(main())
