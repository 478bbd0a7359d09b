#!/usr/bin/env python3
"""run.py — the eviction-probe benchmark: every trace × policy × budget through memdecay-agent.

One real memdecayd is started on a private socket and shared by all runs; each run is one
memdecay-agent process (`--json`).  Every finished run is appended as one JSON line to the output
file, so a killed benchmark resumes where it stopped.  Budgets are fractions of each trace's real
token count, which the full-cache run (budget 0, the ceiling) reports first.

    run.py --quick        pipeline smoke test (< 5 min on 2 cores); asserts invariants, exit 1 on failure
    run.py --full         the full benchmark (>= 1,000 scored probes)
    run.py --traces DIR   bring your own traces (docs/design.md §5), any number of *.jsonl
"""
import argparse
import ctypes
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gen_traces  # noqa: E402
import probelib  # noqa: E402
from probelib import FULL  # noqa: E402

PAGE_TOKENS = 16  # occupancy may exceed the budget by at most one page (docs/design.md §7)

# A policy entry "P+nopin" runs policy P with nothing pinned (memdecay.region.<r>.pinned=false for
# the run, restored after): the paper's baselines pinned nothing, while our daemon pins system for
# every policy.
NOPIN = "+nopin"

PRESETS = {
    # policies, budget fractions, short traces, long traces
    "quick": (["recency", "memdecay"], [0.5], 1, 0),
    "full": (probelib.POLICIES + ["recency" + NOPIN], [0.25, 0.5, 0.75], 8, 4),
}


def die_with_parent():
    """preexec_fn for the daemons a run starts: the kernel sends the child SIGTERM
    when this process dies, so no memdecayd outlives a killed or crashed run."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def log(msg):
    print(f"probes: {msg}", file=sys.stderr, flush=True)


def find_agent(explicit):
    if explicit:
        return explicit
    # build/ first, then the newest other build*/ (sanitizer builds last: they are slow).
    found = [p for p in glob.glob(os.path.join(ROOT, "build*", "bin", "memdecay-agent"))
             if os.access(p, os.X_OK)]
    found.sort(key=lambda p: (os.path.basename(os.path.dirname(os.path.dirname(p))) != "build",
                              "asan" in p, -os.path.getmtime(p)))
    return found[0] if found else shutil.which("memdecay-agent")


def read_env_file(path):
    env = {}
    if os.path.exists(path):
        for line in open(path):
            if "=" in line and not line.lstrip().startswith("#"):
                k, v = line.strip().split("=", 1)
                env[k] = v.strip().strip('"')
    return env


def find_model(explicit):
    if explicit:
        return explicit
    deps = os.environ.get("MEMDECAY_DEPS", os.path.join(ROOT, ".deps"))
    for src in (os.environ, read_env_file(os.path.join(deps, "llama.env"))):
        for k in ("MEMDECAY_LLAMA_MODEL", "MEMDECAY_MODEL"):
            if src.get(k):
                return src[k]
    return None


class Daemon:
    """One memdecayd on a private socket; restarted if it dies between runs."""

    def __init__(self, binary, extra_args):
        self.binary = binary
        self.extra = extra_args
        self.dir = tempfile.mkdtemp(prefix="memdecay-probes-")
        os.chmod(self.dir, 0o700)
        self.socket = os.path.join(self.dir, "memdecayd.sock")
        self.log_path = os.path.join(self.dir, "memdecayd.log")
        self.proc = None
        self.restarts = 0

    def start(self):
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, "--socket", self.socket, "--foreground",
                                      "--log-level", "warn"] + self.extra,
                                     stdout=logf, stderr=logf, stdin=subprocess.DEVNULL,
                                     preexec_fn=die_with_parent)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"memdecayd exited with {self.proc.returncode}: "
                                   + self.tail_log())
            if os.path.exists(self.socket):
                return
            time.sleep(0.05)
        raise RuntimeError("memdecayd did not create its socket within 15 s: " + self.tail_log())

    def ensure(self):
        if self.proc is None:
            self.start()
        elif self.proc.poll() is not None:
            self.restarts += 1
            log(f"memdecayd died (rc {self.proc.returncode}); restarting: {self.tail_log()}")
            self.start()

    def set_keys(self, pairs):
        """memdecayctl set on this daemon; returns the previous values of the keys."""
        ctl = os.path.join(os.path.dirname(self.binary), "memdecayctl")
        before = {}
        for k in pairs:
            p = subprocess.run([ctl, "--socket", self.socket, "get", k], capture_output=True,
                               text=True, timeout=10)
            if p.returncode != 0:
                raise RuntimeError(f"memdecayctl get {k}: {p.stderr.strip()}")
            before[k] = p.stdout.strip().split("=", 1)[-1].strip()
        p = subprocess.run([ctl, "--socket", self.socket, "set"] +
                           [f"{k}={v}" for k, v in pairs.items()],
                           capture_output=True, text=True, timeout=10)
        if p.returncode != 0:
            raise RuntimeError(f"memdecayctl set: {p.stderr.strip()}")
        return before

    def tail_log(self, n=600):
        try:
            return open(self.log_path, errors="replace").read()[-n:]
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Progress:
    def __init__(self, total, done):
        self.total, self.done, self.t0, self.fresh = total, done, time.time(), 0
        self.tty = sys.stderr.isatty()

    def show(self, label):
        width = 30
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(width * frac) + "." * (width - int(width * frac))
        eta = ""
        if self.fresh:
            per = (time.time() - self.t0) / self.fresh
            eta = f" eta {fmt_s(per * (self.total - self.done))}"
        line = f"[{bar}] {self.done}/{self.total} runs{eta}  {label}"
        if self.tty:
            print("\r" + line.ljust(100)[:120], end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def step(self):
        self.done += 1
        self.fresh += 1

    def end(self):
        if self.tty:
            print(file=sys.stderr)


def fmt_s(s):
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def parse_agent_json(stdout):
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        pass
    # Tolerate log lines before the object: take the last line that parses.
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    start = stdout.find("{")
    if start >= 0:
        return json.loads(stdout[start:])
    raise ValueError("no JSON object in memdecay-agent's output")


def run_agent(args, trace_path, policy, budget_tokens, socket):
    policy = policy[:-len(NOPIN)] if policy.endswith(NOPIN) else policy
    cmd = list(args.agent_cmd) + ["--model", args.model, "--trace", trace_path,
                                  "--policy", policy if policy != FULL else args.full_policy,
                                  "--budget-tokens", str(budget_tokens), "--json", "--quiet"]
    cmd += args.agent_arg
    if socket:
        cmd += ["--socket", socket]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {args.run_timeout} s", time.time() - t0
    wall = time.time() - t0
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {p.stderr.strip()[-800:]}", wall
    try:
        return parse_agent_json(p.stdout), None, wall
    except (ValueError, json.JSONDecodeError) as e:
        return None, f"{e}; stdout tail: {p.stdout[-400:]!r}; stderr: {p.stderr[-400:]!r}", wall


def check_run(rec, n_probes):
    """Pipeline invariants of one finished run; returns a list of violations."""
    bad = []
    res = rec["result"]
    for k in ("trace_tokens", "budget_tokens", "peak_occupancy_tokens", "evictions_by_region",
              "probes"):
        if k not in res:
            bad.append(f"missing '{k}' in agent output")
    if bad:
        return bad
    if len(res["probes"]) != n_probes:
        bad.append(f"{len(res['probes'])} probes answered, trace has {n_probes}")
    for p in res["probes"]:
        if not isinstance(p.get("passed"), bool):
            bad.append(f"probe {p.get('question')!r}: 'passed' is not a boolean")
        if p.get("region") not in probelib.REGIONS:
            bad.append(f"probe {p.get('question')!r}: unknown region {p.get('region')!r}")
    b = rec["budget_tokens"]
    if b > 0:
        if res["peak_occupancy_tokens"] > b + PAGE_TOKENS:
            bad.append(f"peak occupancy {res['peak_occupancy_tokens']} > budget {b} + "
                       f"{PAGE_TOKENS}")
        evicted = sum(res["evictions_by_region"].values())
        if b < res["trace_tokens"] and evicted == 0:
            bad.append(f"budget {b} < {res['trace_tokens']} trace tokens but nothing evicted")
    return bad


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (and SIGINT, ignored in background jobs) stop cleanly


def main():
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smoke test of the whole pipeline")
    mode.add_argument("--full", action="store_true", help="the full benchmark (default)")
    ap.add_argument("--traces", help="directory of *.jsonl traces (default: generate them)")
    ap.add_argument("--agent", help="memdecay-agent binary (default: build*/bin/memdecay-agent); "
                    "may be a command line, e.g. 'python3 fake_agent.py'")
    ap.add_argument("--model", help="GGUF model (default: MEMDECAY_LLAMA_MODEL from .deps/llama.env)")
    ap.add_argument("--daemon", help="memdecayd binary (default: next to the agent)")
    ap.add_argument("--daemon-arg", action="append", default=[],
                    help="extra memdecayd argument (repeatable), e.g. --daemon-arg=--config=FILE")
    ap.add_argument("--agent-arg", action="append", default=[],
                    help="extra memdecay-agent argument (repeatable), e.g. --agent-arg=--threads=2")
    ap.add_argument("--no-daemon", action="store_true",
                    help="start no memdecayd and pass no --socket (the agent starts its own)")
    ap.add_argument("--policies", help="comma list (default: preset)")
    ap.add_argument("--budgets", help="comma list of fractions of the trace's tokens (default: preset)")
    ap.add_argument("--short", type=int, help="generated ~450-token traces (default: preset)")
    ap.add_argument("--long", type=int, help="generated ~1,700-token traces (default: preset)")
    ap.add_argument("--seed", type=int, default=1, help="trace generator seed")
    ap.add_argument("--out", help="runs file (default: out/probes/runs.jsonl, quick: "
                    "out/probes/quick/runs.jsonl)")
    ap.add_argument("--fresh", action="store_true", help="discard earlier runs in --out")
    ap.add_argument("--run-timeout", type=int, default=900, help="seconds per agent run")
    ap.add_argument("--full-policy", default="memdecay",
                    help="policy named to the agent for the budget-0 ceiling run")
    ap.add_argument("--report", action="store_true", help="write docs/results.md afterwards")
    ap.add_argument("--skip-missing", action="store_true",
                    help="exit 77 (ctest: skipped) when the agent or the model is not there")
    args = ap.parse_args()

    preset = "quick" if args.quick else "full"
    policies, budgets, n_short, n_long = PRESETS[preset]
    if args.policies:
        policies = [p for p in args.policies.split(",") if p]
    if args.budgets:
        budgets = [float(b) for b in args.budgets.split(",") if b]
    n_short = args.short if args.short is not None else n_short
    n_long = args.long if args.long is not None else n_long
    out = args.out or os.path.join(ROOT, "out", "probes", "quick" if args.quick else "",
                                   "runs.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if args.fresh and os.path.exists(out):
        os.unlink(out)

    missing = 77 if args.skip_missing else 2
    agent = find_agent(args.agent)
    args.agent_cmd = (agent.split() if " " in agent else [agent]) if agent else []
    if not agent or not (os.access(args.agent_cmd[0], os.X_OK) or shutil.which(args.agent_cmd[0])):
        log(f"no memdecay-agent ({agent or 'none found'}): build it, or pass --agent")
        return missing
    args.model = find_model(args.model) or ""
    if args.model and not os.path.exists(args.model):
        log(f"model {args.model} not found")
        return missing
    if not args.model and not args.agent:
        log("no model: pass --model or run scripts/setup_llama.sh (.deps/llama.env)")
        return missing

    # Traces: given, or generated next to the output (deterministic by seed).
    if args.traces:
        tdir = args.traces
    else:
        tdir = os.path.join(os.path.dirname(os.path.abspath(out)), "traces")
        gen_traces.write_traces(tdir, args.seed, n_short, n_long)
    names = sorted(n for n in os.listdir(tdir) if n.endswith(".jsonl"))
    if not args.traces:
        wanted = {f"{t}-s{args.seed * 1000 + i}.jsonl" for t, c in (("short", n_short),
                                                                     ("long", n_long))
                  for i in range(c)}
        names = [n for n in names if n in wanted]
    if not names:
        log(f"no traces in {tdir}")
        return 2
    manifest_path = os.path.join(tdir, "manifest.json")
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else {}

    traces = []
    for n in names:
        path = os.path.join(tdir, n)
        text = open(path, "rb").read()
        n_probes = sum(1 for l in text.decode().splitlines() if l.strip() and
                       "probe" in json.loads(l))
        traces.append({"name": n, "path": path, "sha": hashlib.sha256(text).hexdigest(),
                       "n_probes": n_probes})

    model_tag = os.path.basename(args.model) if args.model else "none"
    done = probelib.load_runs(out)

    def key(t, policy, frac):
        b = "full" if frac is None else f"{frac:g}"
        return f"{t['name']}|{t['sha'][:12]}|{model_tag}|{policy}|{b}"

    plan = []
    for t in traces:
        plan.append((t, FULL, None))
        plan += [(t, p, f) for f in budgets for p in policies]
    n_done = sum(1 for t, p, f in plan if done.get(key(t, p, f), {}).get("ok"))
    log(f"{len(traces)} traces × ({len(policies)} policies × {len(budgets)} budgets + full cache)"
        f" = {len(plan)} runs; {n_done} already in {out}")

    daemon = None
    if not args.no_daemon:
        dbin = args.daemon or os.path.join(os.path.dirname(args.agent_cmd[-1] if args.agent
                                                           else agent), "memdecayd")
        if not os.access(dbin, os.X_OK):
            log(f"no memdecayd at {dbin} (pass --daemon, or --no-daemon)")
            return 2
        daemon = Daemon(dbin, args.daemon_arg)

    failures = []
    t_start = time.time()
    prog = Progress(len(plan), n_done)
    try:
        # A run killed mid-write leaves a line without its newline: end it, so the next record
        # starts on its own line (load_runs skips the broken one and the run is redone).
        if os.path.exists(out) and os.path.getsize(out):
            with open(out, "rb") as f:
                f.seek(-1, os.SEEK_END)
                needs_nl = f.read(1) != b"\n"
            if needs_nl:
                open(out, "a").write("\n")
        outf = open(out, "a")
        for t, policy, frac in plan:
            k = key(t, policy, frac)
            if done.get(k, {}).get("ok"):
                continue
            label = f"{t['name']} {policy} {'full' if frac is None else f'{frac:.0%}'}"
            prog.show(label)
            if frac is None:
                budget = 0
            else:
                ceil = done.get(key(t, FULL, None))
                if not ceil or not ceil.get("ok"):
                    failures.append(f"{label}: skipped, the full-cache run failed")
                    prog.step()
                    continue
                budget = max(1, round(frac * ceil["result"]["trace_tokens"]))
            socket = None
            if daemon:
                daemon.ensure()
                socket = daemon.socket
            restore = None
            if policy.endswith(NOPIN):
                if not daemon:
                    failures.append(f"{label}: {NOPIN} needs the runner's own daemon")
                    prog.step()
                    continue
                restore = daemon.set_keys({f"memdecay.region.{r}.pinned": "false"
                                           for r in probelib.REGIONS})
            try:
                res, err, wall = run_agent(args, t["path"], policy, budget, socket)
            finally:
                if restore:
                    daemon.set_keys(restore)
            tier = probelib.tier_of(t["name"], res["trace_tokens"] if res else 0)
            rec = {"key": k, "trace": t["name"], "trace_sha256": t["sha"], "model": model_tag,
                   "tier": tier, "policy": policy, "budget_fraction": frac,
                   "budget_tokens": budget, "wall_s": round(wall, 2), "ok": err is None,
                   "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
            if err is None:
                rec["result"] = res
                bad = check_run(rec, t["n_probes"])
                if bad:
                    rec["invariant_violations"] = bad
                    failures += [f"{label}: {b}" for b in bad]
            else:
                rec["error"] = err
                failures.append(f"{label}: {err}")
            outf.write(json.dumps(rec, sort_keys=True) + "\n")
            outf.flush()
            done[k] = rec
            prog.step()
        prog.show("done")
        prog.end()
    except KeyboardInterrupt:
        prog.end()
        log("interrupted; finished runs are kept, rerun the same command to resume")
        return 130
    finally:
        if daemon:
            daemon.stop()
    elapsed = time.time() - t_start

    wanted_keys = {key(t, p, f) for t, p, f in plan}
    runs = {k: r for k, r in done.items() if k in wanted_keys}
    summarize(runs, manifest, elapsed, preset)
    unfinished = [k for k in wanted_keys if not runs.get(k, {}).get("ok")]
    for f in failures:
        log("FAIL " + f)
    if args.report:
        import report
        report.write_report(out, manifest_path, os.path.join(ROOT, "docs", "results.md"))
    if unfinished:
        log(f"{len(unfinished)} of {len(wanted_keys)} runs did not finish")
    if failures or unfinished:
        return 1
    return 0


def summarize(runs, manifest, elapsed, preset):
    rows, ceilings = probelib.probe_rows(runs, manifest)
    n_all = sum(len(c) for c in ceilings.values())
    n_ceil = sum(sum(1 for p in c.values() if p.get("passed")) for c in ceilings.values())
    log(f"{len(runs)} runs in {fmt_s(elapsed)} this session; ceiling {n_ceil}/{n_all} probes "
        f"pass at full cache; {len(rows)} scored probe evaluations under eviction")
    by = {}
    for r in rows:
        by.setdefault((r["tier"], r["budget_fraction"], r["policy"]), []).append(r)
    for (tier, frac, pol), rs in sorted(by.items()):
        sys_rows = [r for r in rs if r["region"] in probelib.PINNED_DEFAULT]
        other = [r for r in rs if r["region"] not in probelib.PINNED_DEFAULT]
        log(f"  {tier:5s} {frac:4.0%} {pol:13s} all {probelib.fmt_ret(*probelib.retention(rs)):>14s}"
            f"  system {probelib.fmt_ret(*probelib.retention(sys_rows)):>12s}"
            f"  unpinned {probelib.fmt_ret(*probelib.retention(other)):>14s}")


if __name__ == "__main__":
    sys.exit(main())
