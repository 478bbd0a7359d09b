#!/bin/sh
# run_fair.sh [MODEL_DIR] — the fair comparison (docs/kvpress.md, "A fair fight").
#   1. tuning: traces of seed 13, MemDecay's candidate rows and the pinned, paged
#      StreamingLLM, online; the MemDecay row with the best unpinned retention
#      there is the headline's row (written to OUT/tune/chosen_row);
#   2. report: fresh traces of seed 14, never used for tuning, every row of the
#      fair set (run.py --rows fair), online (MEMDECAY_KV_MODES=online,oneshot adds one-shot);
#   3. fair_report.py on the report traces, with the row chosen in 1;
#   4. the recall comparison (docs/kvpress.md, "Recall"): the tier rows (the chosen row
#      with a host tier, ROW+tier, and the ArkVale-style row) at 25% and 50% on
#      RECALL_TRACES report traces (the first TRACES and more of the same seed), beside the
#      chosen row, the strongest fair press of 3, plain StreamingLLM and md-recency+nopin
#      (on the report traces those runs are 2's), then recall_report.py.
# Traces run only if at least MIN_PASS of their 8 probes pass at full cache.
# Two processes, one torch thread each.  Resumable: finished runs are kept.
# MEMDECAY_KV_STAGE=tune stops after the tuning, =report after 3, =recall runs 4 alone (on
# a report that 3 wrote); MEMDECAY_KV_ROW=ROW skips the tuning and
# takes ROW (a row chosen on another model's tuning traces).
# MODEL_DIR defaults to MEMDECAY_HF_MODEL (SmolLM2); OUT is
# bench/kvpress/results-fair/<model directory name>.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUN="sh $ROOT/tests/transformers/run.sh"
: "${MEMDECAY_DEPS:=$ROOT/.deps}" "${MEMDECAY_SRC:=$ROOT}"
: "${MEMDECAY_BIN:=$ROOT/build/bin}" "${MEMDECAY_LIBRARY:=$ROOT/build/lib/libmemdecay.so}"
export MEMDECAY_DEPS MEMDECAY_SRC MEMDECAY_BIN MEMDECAY_LIBRARY
# shellcheck disable=SC1091
[ -n "${1:-}" ] || { . "$MEMDECAY_DEPS/kvpress.env"; set -- "$MEMDECAY_HF_MODEL"; }
MODEL=$1
[ -d "$MODEL" ] || { echo "run_fair: no model directory $MODEL" >&2; exit 2; }
OUT=${MEMDECAY_KV_OUT:-$ROOT/bench/kvpress/results-fair/$(basename "$MODEL")}
TUNE_TRACES=${MEMDECAY_KV_TUNE_TRACES:-8}
TRACES=${MEMDECAY_KV_TRACES:-12}
RECALL_TRACES=${MEMDECAY_KV_RECALL_TRACES:-$TRACES}
STAGE=${MEMDECAY_KV_STAGE:-all}
MIN_PASS=${MEMDECAY_KV_MIN_PASS:-5}   # Gemma 3 270M (pretrained): 3
MODES=${MEMDECAY_KV_MODES:-online}
TUNE_ROWS=memdecay-turn,memdecay-turn+w25,memdecay-turn+w50,memdecay-turn+dens,memdecay-turn+s1,memdecay,md-recency,kv:streaming_llm+pin+page,kv:snapkv+pin+page
mkdir -p "$OUT/tune" "$OUT/report"

shards() { # OUT ARGS...: run.py on two processes over the same traces
	o=$1
	shift
	$RUN "$ROOT/bench/kvpress/run.py" --model "$MODEL" --out "$o" --prepare "$@"
	pids=
	for k in 0 1; do
		MEMDECAY_TORCH_THREADS=1 $RUN "$ROOT/bench/kvpress/run.py" --model "$MODEL" --out "$o" \
			--min-pass "$MIN_PASS" --shard $k/2 "$@" 2>>"$o/shard$k.log" &
		pids="$pids $!"
	done
	trap 'kill $pids 2>/dev/null' INT TERM
	rc=0
	for p in $pids; do wait "$p" || rc=1; done
	trap - INT TERM
	[ $rc = 0 ] || { echo "run_fair: a shard failed; see $o/shard*.log" >&2; exit 1; }
}

recall() { # the recall comparison on the report traces (step 4)
	press=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["baseline"])' \
		"$OUT/report/summary-online.json")
	echo "run_fair: recall rows on seed 14 ($RECALL_TRACES traces) beside $ROW and $press" >&2
	shards "$OUT/report" --seed 14 --traces "$RECALL_TRACES" --budgets 0.25,0.5 --modes online \
		--rows "$ROW+tier,arkvale-style,$ROW,$press,kv:streaming_llm,md-recency+nopin"
	$RUN "$ROOT/bench/kvpress/recall_report.py" "$OUT/report" --md-row "$ROW+tier" --press "$press" \
		--json "$OUT/report/recall.json" >"$OUT/report/recall.md"
	echo "run_fair: $OUT/report/recall.md" >&2
}

if [ "$STAGE" = recall ]; then
	ROW=${MEMDECAY_KV_ROW:-$(cat "$OUT/tune/chosen_row")}
	recall
	exit 0
fi
if [ -n "${MEMDECAY_KV_ROW:-}" ]; then
	ROW=$MEMDECAY_KV_ROW
	NOTE="given (MEMDECAY_KV_ROW): chosen on another model's tuning traces"
	echo "run_fair: headline row $ROW given (MEMDECAY_KV_ROW): no tuning" >&2
else
	echo "run_fair: tuning on seed 13 ($TUNE_TRACES traces) into $OUT/tune" >&2
	shards "$OUT/tune" --seed 13 --traces "$TUNE_TRACES" --budgets 0.25,0.5,0.75 --modes online --rows "$TUNE_ROWS"
	$RUN "$ROOT/bench/kvpress/fair_report.py" "$OUT/tune" --best-md >"$OUT/tune/chosen_row"
	ROW=$(cat "$OUT/tune/chosen_row")
	NOTE="chosen beforehand on the tuning traces"
	echo "run_fair: chosen on the tuning traces: $ROW" >&2
fi
[ "$STAGE" != tune ] || exit 0
# the chosen row runs, pinned and unpinned (memdecay-cal has no unpinned daemon)
case $ROW in memdecay-cal | *+nopin) ROWS="fair,$ROW" ;; *) ROWS="fair,$ROW,$ROW+nopin" ;; esac
echo "run_fair: report on seed 14 ($TRACES traces, modes $MODES) into $OUT/report" >&2
for mode in $(echo "$MODES" | tr , ' '); do
	shards "$OUT/report" --seed 14 --traces "$TRACES" --budgets 0.25,0.5,0.75 --modes "$mode" --rows "$ROWS"
done
for mode in $(echo "$MODES" | tr , ' '); do
	$RUN "$ROOT/bench/kvpress/fair_report.py" "$OUT/report" --mode "$mode" --md-row "$ROW" --md-row-note "$NOTE" \
		--json "$OUT/report/summary-$mode.json" >"$OUT/report/report-$mode.md"
	echo "run_fair: $OUT/report/report-$mode.md" >&2
done
[ "$STAGE" != report ] || exit 0
recall
