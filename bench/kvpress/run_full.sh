#!/bin/sh
# run_full.sh — the committed kvpress comparison (docs/kvpress.md): traces made
# once, then run.py --full on two processes (one torch thread each: on two cores
# that is about 1.5x one process with two threads), then the report.
# Resumable: rerun it after a stop and finished runs are kept.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/bench/kvpress/results}
RUN="sh $ROOT/tests/transformers/run.sh"
: "${MEMDECAY_DEPS:=$ROOT/.deps}" "${MEMDECAY_SRC:=$ROOT}"
: "${MEMDECAY_BIN:=$ROOT/build/bin}" "${MEMDECAY_LIBRARY:=$ROOT/build/lib/libmemdecay.so}"
export MEMDECAY_DEPS MEMDECAY_SRC MEMDECAY_BIN MEMDECAY_LIBRARY
mkdir -p "$OUT"
# both processes read the same traces: write them before either starts
$RUN "$ROOT/bench/kvpress/run.py" --full --out "$OUT" --prepare
pids=
for k in 0 1; do
	$RUN "$ROOT/bench/kvpress/run.py" --full --shard $k/2 --out "$OUT" 2>"$OUT/shard$k.log" &
	pids="$pids $!"
done
trap 'kill $pids 2>/dev/null' INT TERM
rc=0
for p in $pids; do wait "$p" || rc=1; done
[ $rc = 0 ] || { echo "run_full: a shard failed; see $OUT/shard*.log" >&2; exit 1; }
$RUN "$ROOT/bench/kvpress/report.py" "$OUT" --docs
