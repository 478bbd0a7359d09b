#!/usr/bin/env python3
"""demo.py — vLLM serving the bundled agent trace through its OpenAI endpoint under a KV budget.

Starts a memdecayd and `vllm serve` with the MemDecay plugin (each in a
temporary directory, both stopped on exit), then asks every probe of the
trace (examples/agent_trace.jsonl: the conversation up to the probe, then its
question) with the full cache and under a budget with the memdecay and the
recency policies, through the openai client.  Prints one line per probe
(pass/FAIL: the answer in the greedy reply) and the evicted blocks by region.

  demo.py [--budget TOKENS] [--max-tokens N] [--trace FILE]"""
import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))
import harness  # noqa: E402

os.environ.setdefault("MEMDECAY_LIBRARY", str(harness.LIB))
import memdecay  # noqa: E402  (after MEMDECAY_LIBRARY: the region names come from the library)


def probes(trace):
    msgs, out = [], []
    for line in open(trace):
        d = json.loads(line)
        if "probe" in d:
            out.append((list(msgs), d["probe"]))
        else:
            msgs.append(d)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=int, default=640, help="KV budget in tokens (default 640)")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--trace", default=str(harness.TRACE))
    a = ap.parse_args()
    harness.exit_on_sigterm()
    import openai
    work = harness.tmpdir("md-vllm-demo-")
    trace_log = os.path.join(work, "trace.jsonl")
    daemon = harness.Daemon(work).start()
    server = None
    try:
        t0 = time.time()
        print("vllm demo: starting vllm serve with the MemDecay plugin ...", file=sys.stderr)
        server, url, _ = harness.start_server(work, daemon, trace_log)
        print("vllm demo: vllm serve answered in %.0f s" % (time.time() - t0), file=sys.stderr)
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=600)
        ps = probes(a.trace)
        rows = [("full", None, None), ("memdecay@%d" % a.budget, a.budget, "memdecay"),
                ("recency@%d" % a.budget, a.budget, "recency")]
        results = {}
        ids = {}
        for name, budget, policy in rows:
            print("vllm demo: %s, %d probes ..." % (name, len(ps)), file=sys.stderr)

            def ask(p, budget=budget, policy=policy):
                msgs, probe = p
                x = {}
                if budget:
                    x = {"memdecay_budget_tokens": budget, "memdecay_policy": policy}
                r = client.chat.completions.create(
                    model="smollm2", temperature=0.0, max_tokens=a.max_tokens,
                    messages=msgs + [{"role": "user", "content": probe["question"]}],
                    extra_body={"vllm_xargs": x} if x else None)
                return r.id, r.choices[0].message.content or "", r.usage.prompt_tokens
            with concurrent.futures.ThreadPoolExecutor(4) as ex:
                got = list(ex.map(ask, ps))
            results[name] = [(probe["answer"].lower() in text.lower(), text)
                             for (_, probe), (_, text, _) in zip(ps, got)]
            ids[name] = [g[0] for g in got]
            n_tok = max(g[2] for g in got)
        _, ev = harness.read_trace(trace_log)
        print("\nagent trace through vllm serve's OpenAI endpoint: up to %d prompt tokens a probe, "
              "budget %d tokens, 32-token blocks; SmolLM2-135M-Instruct fp32 on vLLM's CPU build\n"
              % (n_tok, a.budget))
        w = max(len(p["question"]) for _, p in ps)
        names = [r[0] for r in rows]
        print("%-*s  %-10s" % (w, "probe", "region") + "".join("%15s" % n for n in names))
        for i, (_, p) in enumerate(ps):
            print("%-*s  %-10s" % (w, p["question"], p["region"]) +
                  "".join("%15s" % ("pass" if results[n][i][0] else "FAIL") for n in names))
        print("%-*s  %-10s" % (w, "passed", "") +
              "".join("%15d" % sum(ok for ok, _ in results[n]) for n in names))
        print("\nevicted blocks by region (a block counts for each region among its tokens):")
        print("%-12s" % "region" + "".join("%15s" % n for n in names[1:]))
        for ri, reg in enumerate(memdecay.region_names()):
            cnt = []
            for n in names[1:]:
                mine = set(ids[n])
                cnt.append(sum(1 for e in ev if any(e["evict"].startswith(x) for x in mine)
                               and ri in e["regions"]))
            print("%-12s" % reg + "".join("%15d" % c for c in cnt))
        tot = [sum(1 for e in ev if any(e["evict"].startswith(x) for x in set(ids[n])))
               for n in names[1:]]
        print("%-12s" % "blocks" + "".join("%15d" % c for c in tot))
        print("\n" + daemon.ctl("engines").stdout)
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
