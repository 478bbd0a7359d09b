#!/usr/bin/env bash
# bench/scale/run.sh — memdecayd under many engines (memdecay-loadgen), one
# command.  For each event-loop backend: the target load (8 engines x 16k pages,
# attention for every live page every step, per-sequence budgets, 50 steps/s),
# then a ramp of the step rate until attention records drop.  Measures daemon
# CPU (/proc/PID/stat), records/s ingested, drops, evictions and the latency
# figures the daemon and loadgen expose.  Prints a table, or JSON with --json.
#
#   bench/scale/run.sh [--json] [--quick] [--bin DIR] [--engines N] [--backends "uring epoll"]
#                      [--step-hz HZ] [--ramp "10 25 50 100"] [--warm-s S] [--dur-s S]
#                      [--seqs N] [--pages-per-seq N] [--budget-seq-tokens N] [--engine-nice N]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=""
json=0
engines=8
seqs=1024            # 1024 x 16 pages = 16k page slots per engine
pages_per_seq=16
budget_seq_tokens=192  # 12 pages per sequence: ~12k live pages per engine
step_hz=50
ramp="10 15 20 25 35 50 75 100 150 200"
warm_s=6
dur_s=8
backends="uring epoll"
engine_nice=10       # engines yield to the daemon, as a daemon with its own core would see

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
	case "$1" in
	--json) json=1 ;;
	--quick) warm_s=3; dur_s=4; ramp="25 50 100 200" ;;
	--bin) bin=$2; shift ;;
	--engines) engines=$2; shift ;;
	--backends) backends=$2; shift ;;
	--step-hz) step_hz=$2; shift ;;
	--ramp) ramp=$2; shift ;;
	--warm-s) warm_s=$2; shift ;;
	--dur-s) dur_s=$2; shift ;;
	--seqs) seqs=$2; shift ;;
	--engine-nice) engine_nice=$2; shift ;;
	--pages-per-seq) pages_per_seq=$2; shift ;;
	--budget-seq-tokens) budget_seq_tokens=$2; shift ;;
	-h|--help) usage; exit 0 ;;
	*) echo "run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done

# Binaries: --bin, else the first build dir that has all three.
if [ -z "$bin" ]; then
	for d in "$root/build/bin" "$root"/build-*/bin; do
		if [ -x "$d/memdecayd" ] && [ -x "$d/memdecayctl" ] && [ -x "$d/memdecay-loadgen" ]; then
			bin=$d
			break
		fi
	done
fi
for b in memdecayd memdecayctl memdecay-loadgen; do
	if [ ! -x "$bin/$b" ]; then
		echo "run.sh: $b not found (build it, or pass --bin DIR)" >&2
		exit 1
	fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/memdecay-scale.XXXXXX")
daemon_pid=""
cleanup() {
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
clk_tck=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ctl_stats() { "$bin/memdecayctl" --socket "$sock" --json stats; }

# run_one BACKEND HZ PHASE: one daemon, $engines loadgens, one JSON line to stdout.
run_one() {
	local backend=$1 hz=$2 phase=$3
	sock="$work/d-$backend-$hz.sock"
	"$bin/memdecayd" --socket "$sock" --event-loop "$backend" --foreground --log-level warn \
		2>"$work/daemon-$backend-$hz.log" &
	daemon_pid=$!
	for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
	local pids=()
	for i in $(seq 0 $((engines - 1))); do
		nice -n "$engine_nice" "$bin/memdecay-loadgen" --socket "$sock" --engine-name "e$i" --seqs "$seqs" \
			--pages-per-seq "$pages_per_seq" --steps 0 --step-hz "$hz" \
			--budget-seq-tokens "$budget_seq_tokens" --pattern heavy --seed $((i + 1)) --stagger \
			--json >"$work/lg-$i.json" 2>"$work/lg-$i.err" &
		pids+=($!)
	done
	sleep "$warm_s"
	local t0 c0 t1 c1
	ctl_stats >"$work/s0.json"
	t0=$(date +%s.%N); c0=$(cpu_ticks "$daemon_pid")
	sleep "$dur_s"
	ctl_stats >"$work/s1.json"
	t1=$(date +%s.%N); c1=$(cpu_ticks "$daemon_pid")
	kill -TERM "${pids[@]}" 2>/dev/null || true
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	kill -TERM "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true
	daemon_pid=""
	cat "$work"/lg-*.json | jq -s -c \
		--arg backend "$backend" --arg phase "$phase" --argjson hz "$hz" \
		--argjson engines "$engines" --argjson t0 "$t0" --argjson t1 "$t1" \
		--argjson c0 "$c0" --argjson c1 "$c1" --argjson tck "$clk_tck" \
		--slurpfile s0 "$work/s0.json" --slurpfile s1 "$work/s1.json" '
		def sum(f): map(f) | add // 0;
		($s0[0].engines) as $e0 | ($s1[0].engines) as $e1 |
		($t1 - $t0) as $win |
		{
		  backend: $backend, phase: $phase, step_hz_requested: $hz, engines: $engines,
		  engines_attached_at_end: ($e1 | length),
		  window_s: ($win * 1000 | round / 1000),
		  step_hz_achieved_per_engine: (sum(.steps / .wall_s) / length * 10 | round / 10),
		  records_per_s: ((($e1 | sum(.records)) - ($e0 | sum(.records))) / $win | round),
		  daemon_cpu_pct: ((($c1 - $c0) / $tck) / $win * 1000 | round / 10),
		  attn_dropped: sum(.attn_dropped),
		  lifecycle_dropped: sum(.lifecycle_dropped),
		  attn_dropped_in_window: (($e1 | sum(.attn_dropped)) - ($e0 | sum(.attn_dropped))),
		  evictions_in_window: (($e1 | sum(.evictions)) - ($e0 | sum(.evictions))),
		  cmd_ring_full: ($e1 | sum(.cmd_ring_full)),
		  pages_live_per_engine: (($e1 | sum(.pages_live)) / (($e1 | length) | if . == 0 then 1 else . end) | round),
		  decisions_in_window: (($e1 | sum(.decisions)) - ($e0 | sum(.decisions))),
		  decision_ns_mean: (((($e1 | sum(.decision_ns_total)) - ($e0 | sum(.decision_ns_total))) /
		                     ((($e1 | sum(.decisions)) - ($e0 | sum(.decisions))) | if . == 0 then 1 else . end)) | round),
		  decision_ns_p50: ($s1[0].daemon.decision_latency_ns.p50 // null),
		  decision_ns_p99: ($s1[0].daemon.decision_latency_ns.p99 // null),
		  decision_passes: ($s1[0].daemon.decision_latency_ns.count // null),
		  cmd_latency_ns_p50: (map(.cmd_latency_ns.p50 // empty) | sort | if length == 0 then null else .[length / 2 | floor] end),
		  cmd_latency_ns_p99: (map(.cmd_latency_ns.p99 // empty) | max),
		  cmd_latency_count: sum(.cmd_latency_ns.count // 0),
		  step_us_mean: (sum(.step_us_mean) / length * 10 | round / 10),
		  slow_steps: sum(.slow_steps),
		  safety_violations: sum(.pinned_evicted + .stale_applied + .double_freed),
		  reattaches: sum(.reattaches)
		} | . + {sustained: (.attn_dropped == 0 and .lifecycle_dropped == 0 and
		                     .engines_attached_at_end == .engines and
		                     (.step_hz_requested == 0 or .step_hz_achieved_per_engine >= 0.95 * .step_hz_requested))}'
}

runs="$work/runs.jsonl"
: >"$runs"
for be in $backends; do
	run_one "$be" "$step_hz" target >>"$runs"
	for hz in $ramp; do
		run_one "$be" "$hz" ramp >>"$runs"
		if [ "$(tail -n 1 "$runs" | jq -r .sustained)" != true ]; then
			break
		fi
	done
done

model=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
jq -s \
	--arg model "$model" --argjson cpus "$(nproc)" --arg kernel "$(uname -sr)" \
	--arg date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --arg loadavg "$(cat /proc/loadavg)" \
	--argjson engines "$engines" --argjson seqs "$seqs" --argjson pps "$pages_per_seq" \
	--argjson bst "$budget_seq_tokens" --argjson warm "$warm_s" --argjson dur "$dur_s" --argjson nice "$engine_nice" '
	{
	  config: {engines: $engines, seqs_per_engine: $seqs, pages_per_seq: $pps,
	           page_slots_per_engine: ($seqs * $pps), budget_seq_tokens: $bst,
	           pattern: "heavy", warm_s: $warm, window_s: $dur, engine_nice: $nice,
	           attention: "one ATTN_PAGE record per live page per step"},
	  runs: .,
	  highest_sustained: (group_by(.backend) | map({key: .[0].backend, value:
	      (map(select(.phase == "ramp" and .sustained)) | max_by(.step_hz_requested) //
	       null | if . == null then null else {step_hz_per_engine: .step_hz_requested,
	       records_per_s: .records_per_s, daemon_cpu_pct: .daemon_cpu_pct} end)}) | from_entries),
	  latency_notes: ["decision_ns_p50/p99: memdecayd decision_latency_ns histogram (4 sub-buckets per power of 2, bucket upper bound), wall time of each md__host_decide call that returned evictions, whole run",
	                  "cmd_latency_ns_p50: median over engines of each loadgen p50; cmd_latency_ns_p99: worst engine p99; applied_ns - decided_ns per applied command, whole run (loadgen applies commands once per step)"],
	  machine: {cpu_model: $model, cpus: $cpus, kernel: $kernel, date_utc: $date, loadavg_end: $loadavg}
	}' "$runs" >"$work/result.json"

if [ "$json" = 1 ]; then
	cat "$work/result.json"
else
	jq -r '.runs[] | [.backend, .phase, .step_hz_requested, .step_hz_achieved_per_engine,
		.records_per_s, .daemon_cpu_pct, .attn_dropped, .decision_ns_mean, .sustained] | @tsv' \
		"$work/result.json" |
		awk 'BEGIN { printf "%-6s %-6s %6s %9s %12s %8s %10s %12s %s\n", "loop", "phase",
			"hz", "achieved", "records/s", "cpu%", "dropped", "decision_ns", "sustained" }
		     { printf "%-6s %-6s %6s %9s %12s %8s %10s %12s %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }'
	jq -r '"highest sustained: " + (.highest_sustained | tostring)' "$work/result.json"
fi
