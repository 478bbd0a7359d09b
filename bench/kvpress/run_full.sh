#!/bin/sh
# run_full.sh — the first kvpress comparison (docs/kvpress.md; superseded by
# run_fair.sh, kept as history and reproducible): traces made
# once, then run.py --full on two processes (one torch thread each: on two cores
# that is about 1.5x one process with two threads), then the report.
# Then the llama.cpp rows (run_llama.sh), explain.py (docs/kvpress.md) and the
# report again.
# Traces: the first TRACES of seed 11; a trace runs only if at least MIN_PASS of
# its probes pass at full cache (run.py --min-pass).
# Resumable: rerun it after a stop and finished runs are kept.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/bench/kvpress/results}
RUN="sh $ROOT/tests/transformers/run.sh"
: "${MEMDECAY_DEPS:=$ROOT/.deps}" "${MEMDECAY_SRC:=$ROOT}"
: "${MEMDECAY_BIN:=$ROOT/build/bin}" "${MEMDECAY_LIBRARY:=$ROOT/build/lib/libmemdecay.so}"
export MEMDECAY_DEPS MEMDECAY_SRC MEMDECAY_BIN MEMDECAY_LIBRARY
TRACES=${MEMDECAY_KV_TRACES:-19}
MIN_PASS=${MEMDECAY_KV_MIN_PASS:-5}
mkdir -p "$OUT"
# both processes read the same traces: write them before either starts
$RUN "$ROOT/bench/kvpress/run.py" --full --traces "$TRACES" --out "$OUT" --prepare
pids=
for k in 0 1; do
	$RUN "$ROOT/bench/kvpress/run.py" --full --rows old --traces "$TRACES" --min-pass "$MIN_PASS" --shard $k/2 --out "$OUT" 2>"$OUT/shard$k.log" &
	pids="$pids $!"
done
trap 'kill $pids 2>/dev/null' INT TERM
rc=0
for p in $pids; do wait "$p" || rc=1; done
[ $rc = 0 ] || { echo "run_full: a shard failed; see $OUT/shard*.log" >&2; exit 1; }
# MemDecay's rows on llama.cpp, on the same traces (results/llama.json)
sh "$ROOT/bench/kvpress/run_llama.sh" >/dev/null
# summary.json first: explain.py replays the losses of the best rows it names
$RUN "$ROOT/bench/kvpress/report.py" "$OUT" >/dev/null
MEMDECAY_TORCH_THREADS=2 $RUN "$ROOT/bench/kvpress/explain.py" "$OUT"
$RUN "$ROOT/bench/kvpress/report.py" "$OUT" --docs
