#!/usr/bin/env python3
"""half_lives.py — region attention half-lives on the real model, written to results/half_lives.json.

For each refresh setting (τ, norm), one memdecayd with `--journal` on a private socket; each trace
goes through `memdecay-agent` at full cache (budget 0, nothing evicted: no eviction censoring);
then `memdecayctl calibrate --from JOURNAL --json` per setting (docs/calibration.md), and
journal_lifetimes.py on the same journal (lifetime quantiles, the estimate without the attention
sinks).  One model process at a time.

    half_lives.py                       # 3 settings on results/traces/long-s100{0,1}.jsonl
                                        # (a setting with a stored journal is not rerun)
    half_lives.py --rebuild             # no model: recompute from results/journals/*.journal.gz
    half_lives.py --remeasure           # run the model for every setting
    half_lives.py --settings raw:0.02,relative:1 --traces a.jsonl,b.jsonl

The journals are kept gzipped in results/journals/ (about 0.6 MB each), so the table can be
recomputed, or replayed with another --grace-steps, without the model.
"""
import argparse
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import journal_lifetimes  # noqa: E402
import run as probes_run  # noqa: E402

PAPER = "Qwen2.5-1.5B/3B (MemDecay paper): system 148–189 decode steps, scratchpad 14–16, " \
        "retrieval the longest-lived movable region"


def setting_name(norm, tau):
    return f"{norm}-tau{tau:g}"


def calibrate(ctl, journal):
    p = subprocess.run([ctl, "--json", "calibrate", "--from", journal], capture_output=True,
                       text=True, check=True)
    return json.loads(p.stdout)


def measure(args, norm, tau, traces, jdir, tmp):
    """One daemon session; returns the journal path."""
    name = setting_name(norm, tau)
    sock = os.path.join(tmp, name + ".sock")
    journal = os.path.join(tmp, name + ".journal")
    d = subprocess.Popen([args.daemon, "--foreground", "--socket", sock, "--journal", journal,
                          "--log-level", "warn"], preexec_fn=probes_run.die_with_parent)
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        subprocess.run([args.ctl, "--socket", sock, "set", f"memdecay.norm={norm}",
                        f"memdecay.tau={tau:g}"], check=True, capture_output=True)
        for t in traces:
            t0 = time.time()
            p = subprocess.run(["nice", "-n", "5", args.agent, "--model", args.model, "--trace", t,
                                "--policy", "memdecay", "--budget-tokens", "0", "--socket", sock,
                                "--json", "--quiet"], capture_output=True, text=True)
            if p.returncode:
                raise SystemExit(f"memdecay-agent failed on {t}: {p.stderr[-500:]}")
            r = probes_run.parse_agent_json(p.stdout)
            print(f"half_lives: {name} {os.path.basename(t)}: {r['trace_tokens']} tokens, "
                  f"{r['attn_records']} attention records, {time.time() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    finally:
        d.terminate()
        d.wait()
    os.makedirs(jdir, exist_ok=True)
    with open(journal, "rb") as f, gzip.open(os.path.join(jdir, name + ".journal.gz"), "wb") as g:
        shutil.copyfileobj(f, g)
    return journal


def summarize(journal, ctl):
    cal = calibrate(ctl, journal)
    grace, names, recs = journal_lifetimes.read(journal)
    toks = journal_lifetimes.lifetimes(recs, names)
    regions = {}
    for e in cal["regions"]:
        r = e["region"]
        Ls = sorted(L for reg, pos, L, q in toks if reg == r)
        nosink = [(L, q) for reg, pos, L, q in toks if reg == r and pos >= 4]
        regions[r] = {
            "half_life_steps": e["half_life"], "ci95": [e["ci_low"], e["ci_high"]],
            "km_half_life_steps": e["km_half_life"], "lambda": e["lambda"],
            "samples": e["samples"], "events": e["events"], "censored": e["censored"],
            "status": e["status"],
            "share_never_refreshed": round(sum(1 for L in Ls if L == 0) / len(Ls), 3) if Ls else None,
            "lifetime_median": journal_lifetimes.quantile(Ls, 0.5),
            "lifetime_p90": journal_lifetimes.quantile(Ls, 0.9),
            "half_life_without_first_4_tokens": journal_lifetimes.mle(nosink, grace),
        }
    return cal, regions, max((rec[8] for rec in recs), default=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", help="comma list (default: results/traces/long-*.jsonl)")
    ap.add_argument("--settings", default="raw:0.02,relative:4,relative:1",
                    help="comma list of norm:tau; the first is the main one (default: the "
                         "daemon's default raw:0.02, then relative:4 and relative:1 = 4x and 1x "
                         "the uniform level)")
    ap.add_argument("--agent", default=os.path.join(ROOT, "build", "bin", "memdecay-agent"))
    ap.add_argument("--model")
    ap.add_argument("--rebuild", action="store_true", help="no model: use the stored journals")
    ap.add_argument("--remeasure", action="store_true",
                    help="run the model even for settings with a stored journal")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "half_lives.json"))
    args = ap.parse_args()
    bindir = os.path.dirname(args.agent)
    args.daemon = os.path.join(bindir, "memdecayd")
    args.ctl = os.path.join(bindir, "memdecayctl")
    args.model = probes_run.find_model(args.model)
    traces = (args.traces.split(",") if args.traces else
              sorted(glob.glob(os.path.join(HERE, "results", "traces", "long-*.jsonl")))[:2])
    settings = []
    for s in args.settings.split(","):
        norm, tau = s.split(":")
        settings.append((norm, float(tau)))
    jdir = os.path.join(HERE, "results", "journals")
    tmp = tempfile.mkdtemp(prefix="memdecay-hl-")
    os.chmod(tmp, 0o700)
    out = {"source": "memdecayctl calibrate --from JOURNAL (bench/probes/half_lives.py)",
           "model": os.path.basename(args.model or "SmolLM2-135M-Instruct.Q4_1.gguf"),
           "traces": [os.path.relpath(t, ROOT) for t in traces],
           "clock": "sequence clock: one step per token appended (prefill and decode)",
           "policy": "memdecay at full cache (budget 0, no evictions)",
           "paper": PAPER, "settings": []}
    try:
        for norm, tau in settings:
            name = setting_name(norm, tau)
            stored = os.path.join(jdir, name + ".journal.gz")
            if args.rebuild or (os.path.exists(stored) and not args.remeasure):
                journal = os.path.join(tmp, name + ".journal")
                with gzip.open(os.path.join(jdir, name + ".journal.gz"), "rb") as g, \
                        open(journal, "wb") as f:
                    shutil.copyfileobj(g, f)
            else:
                journal = measure(args, norm, tau, traces, jdir, tmp)
            cal, regions, last_clock = summarize(journal, args.ctl)
            out["trace_tokens_max"] = max(out.get("trace_tokens_max", 0), last_clock)
            out["settings"].append({"name": name, "norm": norm, "tau": tau,
                                    "grace_steps": cal["grace_steps"],
                                    "journal": os.path.relpath(
                                        os.path.join(jdir, name + ".journal.gz"), ROOT),
                                    "calibrate_source": cal["source"], "regions": regions})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # The main setting at the top level (report.py's table), the others as alternatives.
    main_s = out["settings"][0]
    out["regions"] = main_s["regions"]
    out["main_setting"] = main_s["name"]
    out["main_label"] = f"τ = {main_s['tau']:g} {main_s['norm']}"
    out["alternatives"] = [{"label": f"τ = {s['tau']:g} {s['norm']}", "regions": s["regions"]}
                           for s in out["settings"][1:]]
    old = json.load(open(args.out)) if os.path.exists(args.out) else {}
    for k in ("notes", "setup", "plot"):  # hand-written parts survive a rebuild
        if k in old:
            out[k] = old[k]
    with open(args.out + ".tmp", "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(args.out + ".tmp", args.out)
    print(args.out)


if __name__ == "__main__":
    main()
