#!/usr/bin/env python3
"""test_requests.py — no request can take `vllm serve` down (docs/vllm.md "Bad requests").

A real `vllm serve` with the plugin and a live memdecayd, driven by the openai
client as a careless or hostile client would drive it:

  cases     each malformed MemDecay field (budget, policy, region list,
            message regions, a request that pins more than its budget, the
            completions endpoint, a streamed request) gets a 400 naming the
            field, never a 5xx; after each, /health and a normal request answer;
  fuzz      a seeded run of random malformed fields and messages (wrong types,
            NaN and infinities, huge and nested lists, empty and very long
            strings, unknown keys): every answer is a 200 or a 400 and the
            server stays up;
  faults    with MEMDECAY_VLLM_TEST_FAULT making the plugin's hooks raise inside
            the engine (worker and engine core), budgeted requests are answered,
            served without eviction, and the log names each request once; with
            every engine-core session wrapper raising, a session's turns are
            answered, the faults logged, no traceback.

test_requests.py [--quick] [--seed N] [--fuzz N] [--keep DIR]
  --quick   the cases, 120 fuzzed requests and two fault servers (CI)
  (default: 400 fuzzed requests and all three fault servers)"""
import argparse
import json
import os
import random
import signal
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MODEL = "smollm2"
check = harness.Checks()


def post(url, path, body, timeout=300):
    """(status, parsed JSON or text): the raw HTTP answer, whatever the client sent."""
    data = body if isinstance(body, bytes) else json.dumps(body, allow_nan=True).encode()
    req = urllib.request.Request(url + path, data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode(errors="replace")
            status = r.status
    except urllib.error.HTTPError as e:
        raw = e.read().decode(errors="replace")
        status = e.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def message_of(answer):
    if isinstance(answer, dict):
        err = answer.get("error")
        if isinstance(err, dict):
            return str(err.get("message", ""))
        return str(answer.get("message", answer))
    return str(answer)[:300]


def healthy(url):
    try:
        return urllib.request.urlopen(url + "/health", timeout=10).status == 200
    except OSError:
        return False


def still_serves(client, url):
    if not healthy(url):
        return False
    r = client.chat.completions.create(model=MODEL, max_tokens=4, temperature=0.0,
                                       messages=[{"role": "user", "content": "Say hi."}])
    return bool(r.choices) and r.choices[0].finish_reason in ("length", "stop")


SYSTEM = {"role": "system", "content": "You are a travel agent. Keep answers short."}
USER = {"role": "user", "content": "Which city is the capital of Portugal?"}


def chat_body(xargs=None, messages=None, stream=False, max_tokens=4):
    b = {"model": MODEL, "messages": messages or [SYSTEM, USER], "max_tokens": max_tokens,
         "temperature": 0.0, "stream": stream}
    if xargs is not None:
        b["vllm_xargs"] = xargs
    return b


def cases(url, client):
    print("cases: each bad field is a 400 naming it; the server answers after each", flush=True)
    long_sys = [dict(SYSTEM, content=SYSTEM["content"] * 12), USER]
    table = [
        ("budget 'abc'", "/v1/chat/completions",
         chat_body({"memdecay_budget_tokens": "abc"}), "memdecay_budget_tokens"),
        ("budget 64, regions [99, 5]", "/v1/chat/completions",
         chat_body({"memdecay_budget_tokens": 64, "memdecay_regions": [99, 5]}),
         "memdecay_regions"),
        ("regions ['x', 'y']", "/v1/chat/completions",
         chat_body({"memdecay_regions": ["x", "y"]}), "memdecay_regions"),
        ("regions [1] (odd length)", "/v1/chat/completions",
         chat_body({"memdecay_regions": [1]}), "memdecay_regions"),
        ("regions [1, 100000] (more tokens than the prompt)", "/v1/chat/completions",
         chat_body({"memdecay_regions": [1, 100000]}), "memdecay_regions"),
        ("policy ['memdecay'] (a list)", "/v1/chat/completions",
         chat_body({"memdecay_policy": ["memdecay"]}), "memdecay_policy"),
        ("policy 'nosuch'", "/v1/chat/completions",
         chat_body({"memdecay_policy": "nosuch"}), "memdecay_policy"),
        ("budget -5", "/v1/chat/completions",
         chat_body({"memdecay_budget_tokens": -5}), "memdecay_budget_tokens"),
        ("a message with region 'bogus'", "/v1/chat/completions",
         chat_body(messages=[SYSTEM, dict(USER, region="bogus")]), "bogus"),
        ("a message with region 3", "/v1/chat/completions",
         chat_body(messages=[SYSTEM, dict(USER, region=3)]), "region"),
        ("every message labelled system, budget 64", "/v1/chat/completions",
         chat_body({"memdecay_budget_tokens": 64},
                   [dict(m, region="system") for m in long_sys]), "pins"),
        ("memdecay_regions all system, budget 16", "/v1/completions",
         {"model": MODEL, "prompt": [1] * 40, "max_tokens": 2,
          "vllm_xargs": {"memdecay_budget_tokens": 16, "memdecay_regions": [0, 40]}}, "pins"),
        ("completions: budget 'abc'", "/v1/completions",
         {"model": MODEL, "prompt": "Hello", "max_tokens": 2,
          "vllm_xargs": {"memdecay_budget_tokens": "abc"}}, "memdecay_budget_tokens"),
        ("completions: regions that miss the prompt", "/v1/completions",
         {"model": MODEL, "prompt": [1] * 40, "max_tokens": 2,
          "vllm_xargs": {"memdecay_regions": [2, 39]}}, "memdecay_regions"),
        ("streamed: policy 'nosuch'", "/v1/chat/completions",
         chat_body({"memdecay_policy": "nosuch"}, stream=True), "memdecay_policy"),
        ("an unknown memdecay_ field", "/v1/chat/completions",
         chat_body({"memdecay_budget": 64}), "memdecay_budget"),
    ]
    for what, path, body, needle in table:
        status, ans = post(url, path, body)
        msg = message_of(ans)
        check(status == 400 and needle in msg, "%s: %d %s" % (what, status, msg[:150]))
        check(still_serves(client, url), "%s: /health and a normal request answer after it"
              % what)
    good = [
        ("budget 64 and policy recency", chat_body({"memdecay_budget_tokens": 64,
                                                    "memdecay_policy": "recency"})),
        ("completions with the client's own regions", {
            "model": MODEL, "prompt": [1] * 40, "max_tokens": 2,
            "vllm_xargs": {"memdecay_budget_tokens": 64, "memdecay_regions": [0, 8, 2, 32]}}),
    ]
    for what, body in good:
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        status, ans = post(url, path, body)
        check(status == 200, "%s: %d" % (what, status))


def _junk(rng, depth=0):
    kinds = ["int", "neg", "big", "float", "nan", "inf", "str", "empty", "long", "bool", "none",
             "list", "nested", "dict"]
    k = rng.choice(kinds if depth < 2 else kinds[:11])
    if k == "int":
        return rng.randint(0, 20)
    if k == "neg":
        return -rng.randint(1, 1 << 40)
    if k == "big":
        return rng.randint(1 << 31, 1 << 70)
    if k == "float":
        return rng.uniform(-1e6, 1e6)
    if k == "nan":
        return float("nan")
    if k == "inf":
        return rng.choice([float("inf"), float("-inf")])
    if k == "str":
        return rng.choice(["memdecay", "recency", "system", "abc", "0", "64", "-1", "\u00e9\u6f22"])
    if k == "empty":
        return ""
    if k == "long":
        return "x" * rng.choice([300, 5000, 100000])
    if k == "bool":
        return rng.random() < 0.5
    if k == "none":
        return None
    if k == "list":
        return [rng.randint(-3, 20) for _ in range(rng.choice([0, 1, 2, 3, 8, 5000]))]
    if k == "nested":
        return [[rng.randint(0, 9), rng.randint(0, 9)] for _ in range(rng.randint(1, 4))]
    return {"a": _junk(rng, depth + 1)}


def fuzz_body(rng):
    keys = ["memdecay_budget_tokens", "memdecay_policy", "memdecay_regions", "memdecay_bogus",
            "session_id"]
    xargs = {}
    if rng.random() < 0.3:          # well-formed fields, so that malformed messages reach the engine
        xargs = {"memdecay_budget_tokens": rng.choice([1, 16, 33, 64, 4096]),
                 "memdecay_policy": rng.choice(["memdecay", "memdecay-turn", "recency", "h2o"])}
    else:
        for key in rng.sample(keys, rng.randint(1, 3)):
            xargs[key] = _junk(rng)
    msgs = [dict(SYSTEM), dict(USER)]
    r = rng.random()
    if r < 0.25:
        rng.choice(msgs)["region"] = _junk(rng)
    elif r < 0.35:
        rng.choice(msgs)["role"] = rng.choice(["", "root", "tool", "function", "ipython"])
    elif r < 0.45:
        msgs[1]["content"] = _junk(rng)
    body = chat_body(xargs, msgs, stream=rng.random() < 0.2, max_tokens=2)
    if rng.random() < 0.15:
        body = {"model": MODEL, "prompt": rng.choice(["Hi", [1, 2, 3]]), "max_tokens": 2,
                "vllm_xargs": xargs}
    return body


def fuzz(url, client, n, seed):
    print("fuzz: %d random malformed requests (seed %d)" % (n, seed), flush=True)
    rng = random.Random(seed)
    seen = {}
    bad = []
    t0 = time.monotonic()
    for i in range(n):
        body = fuzz_body(rng)
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        try:
            status, ans = post(url, path, body, timeout=120)
        except OSError as e:
            status, ans = -1, repr(e)
        seen[status] = seen.get(status, 0) + 1
        if status not in (200, 400):
            bad.append((status, json.dumps(body, allow_nan=True)[:200], message_of(ans)[:200]))
        if i % 50 == 49 and not healthy(url):
            bad.append(("down", "after request %d" % i, ""))
            break
    check(not bad, "every answer was a 200 or a 400: %s in %.0f s%s"
          % (", ".join("%s: %d" % kv for kv in sorted(seen.items(), key=str)),
             time.monotonic() - t0, "; first bad: %s" % (bad[0],) if bad else ""))
    check(still_serves(client, url), "the server answers after the fuzz run")


def faults(work, daemon, points, client_msgs):
    print("faults: MEMDECAY_VLLM_TEST_FAULT=%s" % points, flush=True)
    sub = os.path.join(work, "fault-" + points.replace(",", "-"))
    os.makedirs(sub, exist_ok=True)
    trace = os.path.join(sub, "trace.jsonl")
    server, url, log = harness.start_server(sub, daemon, trace, MODEL,
                                            {"MEMDECAY_VLLM_TEST_FAULT": points})
    import openai
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600, max_retries=0)
    try:
        ids = []
        for k in range(2):
            r = client.chat.completions.create(
                model=MODEL, messages=client_msgs, max_tokens=8, temperature=0.0,
                extra_body={"vllm_xargs": {"memdecay_budget_tokens": 128}})
            ids.append(r.id)
            check(bool(r.choices[0].message.content), "budgeted request %d answered: %r"
                  % (k + 1, r.choices[0].message.content))
        check(still_serves(client, url), "/health and a normal request answer")
        time.sleep(0.5)
        _, ev = harness.read_trace(trace)
        n_ev = sum(1 for e in ev for rid in ids if e["evict"].startswith(rid))
        check(n_ev == 0, "served without eviction: %d blocks evicted" % n_ev)
        text = open(log).read()
        for rid in ids:
            lines = [x for x in text.splitlines()
                     if "served without eviction" in x and rid in x]
            check(len(lines) == 1, "the log names request %s once (%d lines)" % (rid[:24],
                                                                                 len(lines)))
        if "scheduler" in points:
            check("returning evicted blocks to vLLM's pool failed" in text,
                  "the engine core's hook failed, was logged, and the step went on")
        check(server.poll() is None, "vllm serve is still running")
    finally:
        stop(server, log)


def stop(server, log):
    """Kills a fault server's process group; its log's tail when a check failed."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    if check.fails:
        print("---- %s (tail)\n%s" % (log, open(log).read()[-3000:]))


def session_faults(work, daemon, client_msgs):
    """Every engine-core session wrapper raising at once: a session's turns are
    answered as plain vLLM would answer them, and the server stays up."""
    points = "cache,retain,match,adopt,expire,sessions"
    print("faults: MEMDECAY_VLLM_TEST_FAULT=%s" % points, flush=True)
    sub = os.path.join(work, "fault-sessions")
    os.makedirs(sub, exist_ok=True)
    server, url, log = harness.start_server(sub, daemon, None, MODEL,
                                            {"MEMDECAY_VLLM_TEST_FAULT": points})
    import openai
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600, max_retries=0)
    try:
        msgs = list(client_msgs)
        for k in range(3):
            r = client.chat.completions.create(
                model=MODEL, messages=msgs, max_tokens=8, temperature=0.0,
                extra_body={"vllm_xargs": {"memdecay_budget_tokens": 128},
                            "session_id": "faulty"})
            text = r.choices[0].message.content
            check(bool(text), "turn %d of a session answered: %r" % (k + 1, text))
            msgs = msgs + [{"role": "assistant", "content": text or "-"},
                           {"role": "user", "content": "And then?"}]
        check(still_serves(client, url), "/health and a normal request answer")
        text = open(log).read()
        for what in ("the prefix-cache guard failed", "retaining request",
                     "expiring sessions failed"):
            check(what in text, "logged: %r" % what)
        check("Traceback" not in text and server.poll() is None,
              "no traceback, vllm serve still running")
    finally:
        stop(server, log)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--fuzz", type=int, default=None)
    ap.add_argument("--keep", default=None)
    a = ap.parse_args()
    n_fuzz = a.fuzz if a.fuzz is not None else (120 if a.quick else 400)
    work = a.keep or harness.tmpdir("md-vllm-requests-")
    os.makedirs(work, exist_ok=True)
    harness.exit_on_sigterm()
    import openai
    daemon = harness.Daemon(work).start()
    server = None
    try:
        server, url, log = harness.start_server(work, daemon, os.path.join(work, "trace.jsonl"),
                                                MODEL)
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600, max_retries=0)
        cases(url, client)
        fuzz(url, client, n_fuzz, a.seed)
        check(server.poll() is None, "vllm serve is still running")
        text = open(log).read()
        check("EngineCore encountered" not in text and "Traceback" not in text,
              "vLLM's log holds no engine failure and no traceback")
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        server = None
        msgs = harness.agent_messages()[:6] + [{"role": "user", "content": "Summarise."}]
        faults(work, daemon, "track,scheduler", msgs)
        session_faults(work, daemon, msgs)
        if not a.quick:
            faults(work, daemon, "build,forward,step_end", msgs)
    except Exception as e:
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        daemon.stop()
    return check.verdict("test_requests", work, ("vllm.log", "memdecayd.log"))


if __name__ == "__main__":
    sys.exit(main())
