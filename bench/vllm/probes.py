#!/usr/bin/env python3
"""probes.py — the probe benchmark's traces, probes and budgets through vLLM with the MemDecay plugin.

The same 14 traces (bench/kvpress/results/traces, the ones bench/kvpress/results/llama.json
scored), the same probes and the same budgets (25%, 50%, 75%) as the llama.cpp rows
(bench/kvpress/run_llama.sh → bench/probes/run.py → memdecay-agent), run through vLLM's offline
API (CPU build, .deps/vllm) with memdecay_vllm switched on, and scored the same way.

Rows:
  full      no budget (the ceiling: only probes that pass here are scored)
  memdecay  memdecayd's memdecay policy, per request (memdecay_policy extra arg)
  recency   memdecayd's recency policy, per request

Each probe is one request: the trace's messages (the model's chat template, each message's
tokens labelled with its region by memdecay_vllm.offline), then the probe's question as a user
message and the generation prompt; greedy, at most 24 new tokens, stopped at <|im_end|>.  A
probe passes when its gold answer is in the reply, case-insensitive (memdecay-agent's rule,
its default --max-new 24).  The 8 probes of a trace go into one generate call (8 requests in
flight, vLLM's max_num_seqs), one call per trace × row × budget.

Budget: fraction × the trace's tokens, round(f × trace tokens), the number run.py hands
memdecay-agent: the trace's chat-template tokens without any probe (the HF tokenizer renders
exactly the 459–491 tokens memdecay-agent counts on these traces).  It is the request's
per-sequence budget (memdecay_budget_tokens), so in vLLM it also covers the question (15–20
tokens) and the reply, which memdecay-agent asks on an untracked copy of its sequence.

vLLM settings: engine_adapters/vllm/tests/harness.py's LLM_ARGS (fp32, max_model_len 2048,
32-token blocks, chunked prefill of 64 tokens, 8 sequences) with prefix caching OFF by default
(--prefix-caching turns it on): with it, a request would find the trace's blocks that an earlier
request computed before its first eviction (and every block of the full row), declare them to
memdecayd in one step and be cut to the budget at once, instead of holding the budget through
the prefill like memdecay-agent holds it through the trace.

Evictions: the plugin's trace file (MEMDECAY_VLLM_TRACE) has one {"evict": req_id, "block", ...}
line per evicted 32-token block and one {"req", "held", "holes", ...} line per running request
and step; each probe records its evicted blocks (by region) and its peak held blocks.  A
budgeted run with a request whose prompt exceeds its budget and nothing evicted is an invariant
violation (exit 1).

Output: one JSON line per trace × row × budget (run.py's record shape, so bench/probes/probelib
reads it), appended as each finishes; a rerun skips finished keys (resumable).  At the end (and
with --score alone) the scorer writes bench/results/vllm_probes.json: per row and budget, and
pooled, probes scored, passed, retention with a 95% percentile bootstrap interval over scored
probes (bench/probes/stats.py: 10,000 resamples, seed 13; llama_rows.py's method), evicted
blocks, and llama.cpp's corresponding cells from bench/kvpress/results/llama.json beside them;
then it prints a markdown table.

    probes.py --quick            2 traces, budget 50%: 6 generate calls (a few minutes)
    probes.py                    the full run: 14 traces × (full + 2 policies × 3 budgets)
    probes.py --score            score the runs file again, without vLLM

The memdecayd is started by this script (build/bin/memdecayd, on a socket in a temporary
directory); vLLM runs in a child (this file with --engine) in a process group of its own, with
the plugin's environment (MEMDECAY_VLLM=1, MEMDECAY_SOCKET, MEMDECAY_LIBRARY,
MEMDECAY_VLLM_TRACE).  The daemon and the whole group are killed when the script ends, fails
or gets SIGTERM.  Run it with .deps/vllm/bin/python.
"""
import argparse
import collections
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "probes"))
sys.path.insert(0, os.path.join(ROOT, "engine_adapters", "vllm", "tests"))
import harness  # noqa: E402
import probelib  # noqa: E402
import stats  # noqa: E402

TRACES = os.path.join(ROOT, "bench", "kvpress", "results", "traces")
LLAMA_JSON = os.path.join(ROOT, "bench", "kvpress", "results", "llama.json")
LLAMA_RUNS = os.path.join(ROOT, "bench", "kvpress", "results", "llama-runs.jsonl")
OUT = os.path.join(HERE, "results", "probes-runs.jsonl")
OUT_QUICK = os.path.join(ROOT, "out", "vllm-probes", "quick", "runs.jsonl")
SCORE_JSON = os.path.join(ROOT, "bench", "results", "vllm_probes.json")
MODEL = harness.MODEL
FULL = probelib.FULL
POLICIES = ["memdecay", "recency"]
BUDGETS = [0.25, 0.5, 0.75]
LLAMA_ROW = {"memdecay": "memdecay", "recency": "md-recency"}
MAX_NEW = 24            # memdecay-agent's default --max-new
# vLLM as the tests run it (fp32, 32-token blocks, chunked prefill of 64, 8 sequences)
BLOCK = harness.BLOCK
LLM_ARGS = harness.LLM_ARGS


def log(msg):
    print("vllm-probes: " + msg, file=sys.stderr, flush=True)


def fmt_s(s):
    s = int(s)
    return "%dm%02ds" % (s // 60, s % 60) if s >= 60 else "%ds" % s


# ---- traces ----

def llama_traces():
    """The traces llama.json scored (llama_rows.py leaves out the ones the kvpress screen
    dropped), or None."""
    if os.path.exists(LLAMA_JSON):
        return json.load(open(LLAMA_JSON)).get("traces")
    return None


def load_trace(path):
    items = [json.loads(l) for l in open(path) if l.strip()]
    msgs, probes = [], []
    for i, it in enumerate(items):
        if "probe" in it:
            # probes of these traces all come after the last message; a probe in the middle
            # is asked on the messages before it
            p = dict(it["probe"])
            p["at"] = len(msgs)
            probes.append(p)
        else:
            msgs.append(it)
    return msgs, probes


def pick_traces(args):
    names = sorted(n for n in os.listdir(args.traces) if n.endswith(".jsonl"))
    if args.trace_names:
        want = args.trace_names.split(",")
    elif args.all_traces:
        want = names
    else:
        want = llama_traces() or names
    names = [n for n in names if n in set(want)]
    if args.quick:
        names = names[:2]
    if args.limit_traces:
        names = names[:args.limit_traces]
    out = []
    for n in names:
        p = os.path.join(args.traces, n)
        msgs, probes = load_trace(p)
        out.append({"name": n, "path": p, "sha": hashlib.sha256(open(p, "rb").read()).hexdigest(),
                    "messages": msgs, "probes": probes})
    return out


class TraceTail:
    """New lines of the plugin's trace file since the last read."""

    def __init__(self, path):
        self.path, self.off = path, 0

    def read(self):
        if not os.path.exists(self.path):
            return []
        with open(self.path, "rb") as f:
            f.seek(self.off)
            data = f.read()
        end = data.rfind(b"\n") + 1          # a line still being written waits for next time
        self.off += end
        out = []
        for line in data[:end].splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out


def region_name(r):
    from memdecay import Region
    try:
        return Region(int(r)).name.lower()
    except ValueError:
        return str(r)


def base_id(req_id):
    return str(req_id).split("-")[0]


# ---- the runs ----

def key_of(t, model_tag, row, frac):
    return "%s|%s|%s|%s|%s" % (t["name"], t["sha"][:12], model_tag, row,
                               "full" if frac is None else "%g" % frac)


def load_runs(path):
    return probelib.load_runs(path)


def run_one(llm, SamplingParams, chat_many, tail, t, row, frac, trace_tokens):
    """One generate call: the trace's probes as requests under one row and budget."""
    budget = None if frac is None else max(1, round(frac * trace_tokens))
    convs = [t["messages"][:p["at"]] + [{"role": "user", "content": p["question"]}]
             for p in t["probes"]]
    sp = SamplingParams(temperature=0.0, max_tokens=MAX_NEW)
    tail.read()                                 # skip lines of earlier calls
    t0 = time.time()
    outs = chat_many(llm, convs, sp, budgets=[budget] * len(convs),
                     policy=None if row == FULL else row)
    wall = time.time() - t0
    time.sleep(0.05)
    ev = collections.defaultdict(list)
    peak = collections.Counter()
    for line in tail.read():
        if "evict" in line:
            ev[base_id(line["evict"])].append(line)
        elif "held" in line:
            b = base_id(line["req"])
            peak[b] = max(peak[b], line["held"])
    probes = []
    for p, o in zip(t["probes"], outs):
        c = o.outputs[0]
        text = c.text
        rid = base_id(o.request_id)
        by_region = collections.Counter()
        for e in ev.get(rid, ()):
            by_region["+".join(region_name(x) for x in e["regions"])] += 1
        probes.append({
            "question": p["question"], "answer": p["answer"], "region": p["region"],
            "output": text, "passed": p["answer"].lower() in text.lower(),
            "prompt_tokens": len(o.prompt_token_ids), "output_tokens": len(c.token_ids),
            "finish_reason": c.finish_reason, "request_id": str(o.request_id),
            "evicted_blocks": len(ev.get(rid, ())),
            "evicted_block_regions": dict(by_region),
            "peak_held_blocks": peak.get(rid, 0)})
    res = {"trace_tokens": trace_tokens, "budget_tokens": budget or 0, "probes": probes,
           "probes_passed": sum(p["passed"] for p in probes),
           "evicted_blocks": sum(p["evicted_blocks"] for p in probes),
           "peak_held_blocks": max((p["peak_held_blocks"] for p in probes), default=0),
           "max_new": MAX_NEW}
    bad = []
    if budget:
        for p in probes:
            if p["prompt_tokens"] > budget and p["evicted_blocks"] == 0:
                bad.append("%r: prompt %d tokens > budget %d, nothing evicted"
                           % (p["question"], p["prompt_tokens"], budget))
    else:
        if res["evicted_blocks"]:
            bad.append("%d blocks evicted without a budget" % res["evicted_blocks"])
    return res, bad, wall


def prepare(args):
    """(traces with their token counts, budgets, policies, out, model tag, todo) or an exit code."""
    traces = pick_traces(args)
    if not traces:
        log("no traces in " + args.traces)
        return 2
    budgets = [0.5] if args.quick and not args.budgets else \
        [float(b) for b in (args.budgets or ",".join(map(str, BUDGETS))).split(",") if b]
    policies = [p for p in args.policies.split(",") if p]
    out = args.out or (OUT_QUICK if args.quick else OUT)
    import vllm
    model_tag = "%s|vllm-%s|fp32|pc%d" % (os.path.basename(MODEL.rstrip("/")), vllm.__version__,
                                          int(args.prefix_caching))
    done = load_runs(out)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(MODEL)
    for t in traces:
        ids = tok.apply_chat_template(t["messages"], tokenize=True, add_generation_prompt=False)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        t["tokens"] = len(ids)
    plan = []
    for t in traces:
        plan.append((t, FULL, None))
        plan += [(t, p, f) for f in budgets for p in policies]
    todo = [x for x in plan if not done.get(key_of(x[0], model_tag, x[1], x[2]), {}).get("ok")]
    return traces, budgets, policies, out, model_tag, plan, todo


def run(args):
    """The parent: memdecayd, then this file with --engine in a process group of its own
    (vLLM's engine core and worker are its children); whatever ends the wait kills the group
    and the daemon."""
    out = args.out or (OUT_QUICK if args.quick else OUT)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if args.fresh and os.path.exists(out):
        os.unlink(out)
    for p in (harness.BIN / "memdecayd", harness.LIB, MODEL):
        if not os.path.exists(p):
            log("missing %s (scripts/build.sh, scripts/setup_vllm.sh)" % p)
            return 2
    got = prepare(args)
    if isinstance(got, int):
        return got
    traces, budgets, policies, out, model_tag, plan, todo = got
    log("%d traces × (full + %d policies × %d budgets) = %d generate calls of %s probes; "
        "%d already in %s" % (len(traces), len(policies), len(budgets), len(plan),
                              "/".join(sorted({str(len(t["probes"])) for t in traces})),
                              len(plan) - len(todo), os.path.relpath(out)))
    if not todo:
        return 0
    work = harness.tmpdir("md-vllm-probes-")
    daemon = harness.Daemon(work)
    child = None
    try:
        daemon.start()
        env = dict(os.environ)
        env.update(harness.plugin_env(daemon, os.path.join(work, "plugin-trace.jsonl")))
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--engine"]
                                 + sys.argv[1:], env=env, preexec_fn=harness.die_with_parent)
        while True:
            try:
                rc = child.wait(1)
                break
            except subprocess.TimeoutExpired:
                if not daemon.alive():
                    log("memdecayd died: " + daemon.tail())
                    return 1
    except KeyboardInterrupt:
        log("interrupted; finished calls are kept, rerun the same command to resume")
        return 130
    finally:
        if child is not None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait()
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    return rc


def engine(args):
    """The child: vLLM with the plugin (switched on by the environment run() set)."""
    got = prepare(args)
    if isinstance(got, int):
        return got
    traces, budgets, policies, out, model_tag, plan, todo = got
    trace_file = os.environ["MEMDECAY_VLLM_TRACE"]
    failures = []
    t_start = time.time()
    try:
        import vllm
        from vllm import LLM, SamplingParams
        from memdecay_vllm.offline import chat_many
        t0 = time.time()
        llm = LLM(model=MODEL, enable_prefix_caching=args.prefix_caching, **LLM_ARGS)
        log("vLLM %s started in %.0f s (prefix caching %s)"
            % (vllm.__version__, time.time() - t0, "on" if args.prefix_caching else "off"))
        tail = TraceTail(trace_file)
        with open(out, "a") as f:
            if f.tell():
                with open(out, "rb") as g:
                    g.seek(-1, os.SEEK_END)
                    if g.read(1) != b"\n":
                        f.write("\n")
            for i, (t, row, frac) in enumerate(todo):
                label = "%s %s %s" % (t["name"], row, "full" if frac is None else "%g" % frac)
                k = key_of(t, model_tag, row, frac)
                try:
                    res, bad, wall = run_one(llm, SamplingParams, chat_many, tail, t, row, frac,
                                             t["tokens"])
                    err = None
                except Exception as e:       # noqa: BLE001 (recorded, the run goes on)
                    res, bad, wall, err = None, [], 0.0, "%s: %s" % (type(e).__name__, e)
                rec = {"key": k, "trace": t["name"], "trace_sha256": t["sha"], "model": model_tag,
                       "tier": probelib.tier_of(t["name"], t["tokens"]), "policy": row,
                       "budget_fraction": frac,
                       "budget_tokens": 0 if frac is None else max(1, round(frac * t["tokens"])),
                       "wall_s": round(wall, 2), "ok": err is None, "engine": "vllm",
                       "prefix_caching": args.prefix_caching,
                       "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
                if err is None:
                    rec["result"] = res
                    if bad:
                        rec["invariant_violations"] = bad
                        failures += ["%s: %s" % (label, b) for b in bad]
                else:
                    rec["error"] = err
                    failures.append("%s: %s" % (label, err))
                f.write(json.dumps(rec, sort_keys=True) + "\n")
                f.flush()
                el = time.time() - t_start
                eta = el / (i + 1) * (len(todo) - i - 1)
                log("[%d/%d] %s: %s in %.0f s, %s evicted blocks; elapsed %s, eta %s"
                    % (i + 1, len(todo), label,
                       "%d/%d passed" % (res["probes_passed"], len(res["probes"])) if res
                       else "FAILED (%s)" % err, wall, res["evicted_blocks"] if res else "-",
                       fmt_s(el), fmt_s(eta)))
    except KeyboardInterrupt:
        log("interrupted; finished calls are kept, rerun the same command to resume")
        return 130
    log("%d generate calls in %s" % (len(todo), fmt_s(time.time() - t_start)))
    for x in failures:
        log("FAIL " + x)
    return 1 if failures else 0


# ---- scoring ----

def llama_evictions(traces, budgets):
    """Mean pages (16 tokens) memdecay-agent evicted per run, per (row, budget)."""
    if not os.path.exists(LLAMA_RUNS):
        return {}
    acc = collections.defaultdict(list)
    for r in probelib.load_runs(LLAMA_RUNS).values():
        if not r.get("ok") or r["trace"] not in traces or r["policy"] not in LLAMA_ROW:
            continue
        acc[(r["policy"], r["budget_fraction"])].append(
            sum(r["result"]["evictions_by_region"].values()))
    out = {}
    for (pol, b), xs in acc.items():
        if b in budgets:
            out[(pol, b)] = xs
    for pol in POLICIES:
        xs = [x for (p, b), v in out.items() if p == pol for x in v]
        if xs:
            out[(pol, None)] = xs
    return out


def triple(mean, ci):
    return None if mean is None else [mean, ci[0], ci[1]]


def score(runs_path, json_out):
    runs = {k: r for k, r in probelib.load_runs(runs_path).items() if r.get("ok")}
    models = sorted({r["model"] for r in runs.values()})
    if len(models) > 1:
        model = max(runs.values(), key=lambda r: r.get("finished_at", ""))["model"]
        log("runs of %d settings (%s); scoring %s's" % (len(models), ", ".join(models), model))
        runs = {k: r for k, r in runs.items() if r["model"] == model}
    # traces as they are now: a rewritten trace leaves its runs out
    cur = {}
    for r in runs.values():
        p = os.path.join(TRACES, r["trace"])
        if r["trace"] not in cur:
            cur[r["trace"]] = hashlib.sha256(open(p, "rb").read()).hexdigest() \
                if os.path.exists(p) else None
    runs = {k: r for k, r in runs.items() if cur.get(r["trace"]) == r["trace_sha256"]}
    rows, ceilings = probelib.probe_rows(runs)
    if not rows:
        log("no scored probe in " + os.path.relpath(runs_path))
        return 1
    budgets = sorted({r["budget_fraction"] for r in runs.values() if r["budget_fraction"]})
    policies = [p for p in POLICIES if any(r["policy"] == p for r in runs.values())]
    rng = random.Random(stats.SEED)
    res = stats.summarise(rows, policies, budgets, [], rng)
    paired = stats.summarise(rows, ["memdecay"], budgets, ["recency"],
                             random.Random(stats.SEED))["paired"] \
        if {"memdecay", "recency"} <= set(policies) else []
    llama = json.load(open(LLAMA_JSON)) if os.path.exists(LLAMA_JSON) else None
    lcell = {(c["row"], c["budget"]): c for c in llama["cells"]} if llama else {}
    levict = llama_evictions(set(ceilings), budgets)
    cells = []
    for c in res["cells"]:
        pol, b = c["policy"], c["budget"]
        sel = [r for r in runs.values() if r["policy"] == pol and (b is None or
                                                                   r["budget_fraction"] == b)]
        reqs = [p for r in sel for p in r["result"]["probes"]]
        ev = [p["evicted_blocks"] for p in reqs]
        over = [p for r in sel for p in r["result"]["probes"]
                if p["prompt_tokens"] > r["budget_tokens"]]
        lc = lcell.get((LLAMA_ROW[pol], b))
        le = levict.get((pol, b))
        cells.append({
            "row": pol, "budget": b, "runs": len(sel), "requests": len(reqs),
            "scored": c["scored"], "passed": c["passed"],
            "retention": triple(c["retention"], c["retention_ci95"]),
            "evicted_blocks": sum(ev),
            "evicted_blocks_per_request": (sum(ev) / len(ev)) if ev else None,
            "requests_over_budget_with_no_eviction": sum(1 for p in over
                                                         if not p["evicted_blocks"]),
            "peak_held_blocks_max": max((p["peak_held_blocks"] for p in reqs), default=0),
            "llama": None if not lc else {
                "row": lc["row"], "scored": lc["scored"], "passed": lc["passed"],
                "retention": lc["retention"],
                "evicted_pages_per_run": (sum(le) / len(le)) if le else None}})
    full = [r for r in runs.values() if r["policy"] == FULL]
    S = {
        "engine": "vLLM %s CPU build, offline API, memdecay_vllm plugin (bench/vllm/probes.py)"
                  % (models[-1].split("|")[1][5:] if models else "?"),
        "settings": {"model": models[-1] if models else None, "llm_args": LLM_ARGS,
                     "prefix_caching": bool(full and full[0].get("prefix_caching")),
                     "max_new_tokens": MAX_NEW, "greedy": True,
                     "requests_per_generate_call": "the trace's probes (8)",
                     "budget": "round(fraction × the trace's tokens), as run.py gives "
                               "memdecay-agent; the request's per-sequence budget, so it also "
                               "covers the question and the reply",
                     "pass": "gold answer in the greedy reply, case-insensitive"},
        "runs_file": os.path.relpath(os.path.abspath(runs_path), ROOT),
        "traces": sorted(ceilings), "budgets": budgets, "rows": policies,
        "runs": len(runs),
        "runs_with_invariant_violations": sum(1 for r in runs.values()
                                              if r.get("invariant_violations")),
        "ceiling": [sum(1 for c in ceilings.values() for p in c.values() if p.get("passed")),
                    sum(len(c) for c in ceilings.values())],
        "scored_evaluations": len(rows),
        "bootstrap": {"resamples": stats.B, "seed": stats.SEED, "unit": "scored probe",
                      "interval": "95% percentile"},
        "cells": cells, "paired_memdecay_vs_recency": paired,
        "llama": None if not llama else {
            "file": os.path.relpath(LLAMA_JSON, ROOT), "model": llama["model"],
            "ceiling": llama["ceiling"], "traces": llama["traces"],
            "same_traces": sorted(llama["traces"]) == sorted(ceilings)}}
    # probes where the engines' ceilings differ (same weights, fp32 vs Q4_1 kernels)
    if os.path.exists(LLAMA_RUNS):
        lfull = {r["trace"]: {p["question"]: p["passed"] for p in r["result"]["probes"]}
                 for r in probelib.load_runs(LLAMA_RUNS).values()
                 if r.get("ok") and r["policy"] == FULL and r["trace"] in ceilings}
        both = only_v = only_l = 0
        for tr, c in ceilings.items():
            for q, p in c.items():
                lp = lfull.get(tr, {}).get(q)
                both += bool(p["passed"] and lp)
                only_v += bool(p["passed"] and lp is False)
                only_l += bool(not p["passed"] and lp)
        S["ceiling_agreement"] = {"both": both, "vllm_only": only_v, "llama_only": only_l}
    os.makedirs(os.path.dirname(json_out), exist_ok=True)
    with open(json_out + ".tmp", "w") as f:
        json.dump(S, f, indent=1)
        f.write("\n")
    os.replace(json_out + ".tmp", json_out)
    log("%d runs, ceiling %d/%d, %d scored evaluations → %s"
        % (S["runs"], S["ceiling"][0], S["ceiling"][1], len(rows),
           os.path.relpath(json_out, ROOT)))
    print(markdown(S), end="")
    return 0


def _pct(ci):
    return "—" if not ci else "%.0f%% [%.0f, %.0f]" % tuple(100 * x for x in ci)


def markdown(S):
    L = ["vLLM (plugin) next to llama.cpp (memdecay-agent), same traces and budgets. vLLM ceiling "
         "%d/%d probes pass at full cache; llama.cpp %s. Cells: retention [95%% interval] "
         "(passed/scored); evicted: vLLM blocks of 32 tokens per request, llama.cpp pages of 16 "
         "tokens per run." % (S["ceiling"][0], S["ceiling"][1],
                              "%d/%d" % tuple(S["llama"]["ceiling"]) if S["llama"] else "—"), "",
         "| row | budget | vLLM retention | vLLM evicted | llama.cpp retention | "
         "llama.cpp evicted |", "|---|---|---|---:|---|---:|"]
    for c in S["cells"]:
        b = "pooled" if c["budget"] is None else "%d%%" % round(100 * c["budget"])
        lc = c["llama"]
        L.append("| %s | %s | %s (%d/%d) | %s | %s | %s |" % (
            c["row"], b, _pct(c["retention"]), c["passed"], c["scored"],
            "%.1f blocks (%.0f tok)" % (c["evicted_blocks_per_request"],
                                        BLOCK * c["evicted_blocks_per_request"])
            if c["evicted_blocks_per_request"] is not None else "—",
            "%s (%d/%d)" % (_pct(lc["retention"]), lc["passed"], lc["scored"]) if lc else "—",
            "%.1f pages (%.0f tok)" % (lc["evicted_pages_per_run"],
                                       16 * lc["evicted_pages_per_run"])
            if lc and lc["evicted_pages_per_run"] is not None else "—"))
    ca = S.get("ceiling_agreement")
    if ca:
        L += ["", "Full-cache ceilings, probe by probe: %d pass on both engines, %d on vLLM only, "
              "%d on llama.cpp only." % (ca["both"], ca["vllm_only"], ca["llama_only"])]
    if S.get("paired_memdecay_vs_recency"):
        L += ["", "Paired on vLLM (same probe and budget), memdecay vs recency: " + "; ".join(
            "%s %d/%d, p = %.2f" % ("pooled" if p["budget"] is None else
                                    "%d%%" % round(100 * p["budget"]),
                                    p["pass_wins"], p["pass_losses"], p["pass_sign_p"])
            for p in S["paired_memdecay_vs_recency"]) + " (wins/losses, exact sign test)."]
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--quick", action="store_true",
                    help="2 traces, budget 0.5 (default output out/vllm-probes/quick/runs.jsonl)")
    ap.add_argument("--score", action="store_true", help="only score the runs file")
    ap.add_argument("--traces", default=TRACES, help="directory of *.jsonl traces")
    ap.add_argument("--trace-names", help="comma list of trace file names (default: the "
                    "traces bench/kvpress/results/llama.json scored)")
    ap.add_argument("--all-traces", action="store_true", help="every *.jsonl in --traces")
    ap.add_argument("--limit-traces", type=int, help="the first N traces only")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma list (memdecayd's)")
    ap.add_argument("--budgets", help="comma list of fractions of the trace's tokens "
                    "(default 0.25,0.5,0.75; --quick 0.5)")
    ap.add_argument("--out", help="runs file (default bench/vllm/results/probes-runs.jsonl)")
    ap.add_argument("--fresh", action="store_true", help="discard earlier runs in --out")
    ap.add_argument("--prefix-caching", action="store_true",
                    help="leave vLLM's prefix caching on (see above; off by default)")
    ap.add_argument("--engine", action="store_true", help=argparse.SUPPRESS)   # the child
    ap.add_argument("--json", help="scorer output (default bench/results/vllm_probes.json; "
                    "--quick: next to the runs file)")
    args = ap.parse_args()
    out = args.out or (OUT_QUICK if args.quick else OUT)
    js = args.json or (os.path.join(os.path.dirname(out), "vllm_probes.json")
                       if args.quick or args.out else SCORE_JSON)
    signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    if args.engine:
        return engine(args)
    rc = 0
    if not args.score:
        rc = run(args)
        if rc in (2, 130):
            return rc
    if not os.path.exists(out):
        log("%s missing: run without --score first" % out)
        return 2
    return score(out, js) or rc


if __name__ == "__main__":
    sys.exit(main())
