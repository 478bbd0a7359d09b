#!/bin/sh
# run_llama.sh — MemDecay's llama.cpp rows of the kvpress comparison (docs/kvpress.md):
# memdecayd's policies through memdecay-agent (llama.cpp, the pinned GGUF of
# .deps/llama.env) on the same traces as run_full.sh (every *.jsonl in
# results/traces; run.py generates none when given --traces) at the same
# budgets, by bench/probes/run.py: one private memdecayd, one agent run at a
# time (one thread), full cache first per trace.  Then llama_rows.py scores
# them (results/llama.json, a markdown table on stdout).
# Resumable: rerun it after a stop and finished runs are kept.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TRACES=$ROOT/bench/kvpress/results/traces
OUT=$ROOT/bench/kvpress/results/llama-runs.jsonl
POLICIES=memdecay,memdecay-norm,memdecay-turn,h2o,recency,random
BUDGETS=0.25,0.5,0.75
PY=${PYTHON:-python3}

usage() {
	cat <<EOF
usage: sh bench/kvpress/run_llama.sh [--traces DIR] [--out RUNS.jsonl] [-- run.py options]

Runs bench/probes/run.py --traces DIR --policies $POLICIES
  --budgets $BUDGETS --out RUNS.jsonl   (about 19 agent runs per trace)
then bench/kvpress/llama_rows.py RUNS.jsonl --traces DIR, which writes llama.json next
to RUNS.jsonl and prints the table.  Resumable.

  --traces DIR      traces, every *.jsonl in DIR (default: bench/kvpress/results/traces)
  --out FILE        runs file (default: bench/kvpress/results/llama-runs.jsonl)
  -- ...            passed on to run.py, after the options above (later ones win),
                    e.g. -- --policies memdecay --budgets 0.5 --agent-arg=--threads=2
  -h, --help        this text

Needs build/bin/memdecay-agent and memdecayd (scripts/build.sh) and .deps/llama.env
(scripts/setup_llama.sh).  PYTHON=... picks the interpreter (default python3).
EOF
}

while [ $# -gt 0 ]; do
	case $1 in
	-h | --help) usage; exit 0 ;;
	--traces) [ $# -ge 2 ] || { usage >&2; exit 2; }; TRACES=$2; shift 2 ;;
	--traces=*) TRACES=${1#--traces=}; shift ;;
	--out) [ $# -ge 2 ] || { usage >&2; exit 2; }; OUT=$2; shift 2 ;;
	--out=*) OUT=${1#--out=}; shift ;;
	--) shift; break ;;
	*) echo "run_llama: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
	esac
done

ls "$TRACES"/*.jsonl >/dev/null 2>&1 || { echo "run_llama: no *.jsonl traces in $TRACES" >&2; exit 2; }
mkdir -p "$(dirname "$OUT")"
rc=0
"$PY" "$ROOT/bench/probes/run.py" --traces "$TRACES" --policies "$POLICIES" \
	--budgets "$BUDGETS" --out "$OUT" "$@" || rc=$?
case $rc in
0) ;;
1) echo "run_llama: some runs failed (run.py exit 1); scoring the finished ones" >&2 ;;
*) exit $rc ;; # 130: stopped (finished runs are kept); 2: no agent, daemon, model or traces
esac
"$PY" "$ROOT/bench/kvpress/llama_rows.py" "$OUT" --traces "$TRACES"
exit $rc
