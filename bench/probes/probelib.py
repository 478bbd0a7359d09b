"""probelib.py — scoring shared by the probe runner and the report.

A run is one line of runs.jsonl: one trace fed through memdecay-agent under one policy and one
budget.  A probe is *scored* where it passes at full cache (the ceiling run of its trace);
retention = passes under eviction / scored probes.  Log-prob deltas compare the gold answer's
log-probability under eviction with the same probe at full cache.
"""
import json
import math
import os
import re



def abi_region_names():
    """The built-in region names in id order, read from the ABI header's one
    list (MD_REGION_BUILTIN_NAMES), so that the benchmarks need no build."""
    hdr = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shm_layout",
                       "memdecay_abi.h")
    with open(hdr) as f:
        text = f.read()
    m = re.search(r"#define MD_REGION_BUILTIN_NAMES\s*\\\s*\n(.*?)\n", text)
    if not m:
        raise RuntimeError("%s: no MD_REGION_BUILTIN_NAMES" % hdr)
    return re.findall(r'"([a-z_]+)"', m.group(1))


REGIONS = abi_region_names()
POLICIES = ["random", "recency", "h2o", "memdecay", "memdecay-norm"]
# Report order; "+nopin" rows ran with nothing pinned (the paper's baselines).
REPORT_POLICIES = POLICIES + ["recency+nopin", "h2o+nopin", "random+nopin"]
FULL = "full"  # the policy label of the full-cache (ceiling) run
PINNED_DEFAULT = ("system",)


def load_runs(path):
    """Last record per key wins (a rerun replaces a failed run)."""
    runs = {}
    if not os.path.exists(path):
        return runs
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill: that run is simply redone
            runs[r["key"]] = r
    return runs


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def probe_rows(runs, manifest=None):
    """One row per (eviction run, probe scored at full cache) plus the ceiling rows.

    Returns (rows, ceilings): rows have tier, trace, policy, budget_fraction, region, question,
    passed, delta_logprob, age_fraction (when the manifest knows the fact); ceilings maps
    trace → {question: passed at full cache}.
    """
    ok = [r for r in runs.values() if r.get("ok")]
    full = {r["trace"]: r for r in ok if r["policy"] == FULL}
    ceilings = {}
    for trace, r in full.items():
        ceilings[trace] = {p["question"]: p for p in r["result"]["probes"]}
    facts = {}
    if manifest:
        for trace, meta in manifest.get("traces", {}).items():
            for f in meta.get("facts", []):
                facts[(trace, f["question"])] = f
    rows = []
    for r in ok:
        if r["policy"] == FULL or r["trace"] not in ceilings:
            continue
        ceil = ceilings[r["trace"]]
        for p in r["result"]["probes"]:
            c = ceil.get(p["question"])
            if not c or not c.get("passed"):
                continue
            delta = None
            if finite(p.get("gold_logprob")) and finite(c.get("gold_logprob")):
                delta = p["gold_logprob"] - c["gold_logprob"]
            f = facts.get((r["trace"], p["question"]), {})
            rows.append({"tier": r["tier"], "trace": r["trace"], "policy": r["policy"],
                         "budget_fraction": r["budget_fraction"], "region": p["region"],
                         "question": p["question"], "passed": bool(p.get("passed")),
                         "delta_logprob": delta, "age_fraction": f.get("age_fraction"),
                         "output": p.get("output", "")})
    return rows, ceilings


def retention(rows):
    """(passes, scored) over rows."""
    return sum(1 for r in rows if r["passed"]), len(rows)


def fmt_ret(passes, n):
    return "—" if n == 0 else f"{100.0 * passes / n:.0f}% ({passes}/{n})"


def tier_of(name, trace_tokens):
    """Generated traces carry their tier in the name; others are binned by real length."""
    base = os.path.basename(name)
    for t in ("short", "long"):
        if base.startswith(t + "-"):
            return t
    return "short" if trace_tokens < 1000 else "long"
