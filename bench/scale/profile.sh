#!/usr/bin/env bash
# bench/scale/profile.sh — where memdecayd's time goes under the scale load.
# Starts memdecayd and N memdecay-loadgen engines (the bench/scale/run.sh
# configuration at a rate the machine sustains), samples the daemon with
# `perf record -e cpu-clock` (software clock: works in VMs without PMU access)
# over a window, and prints the top self-time symbols plus the daemon's
# records/s and CPU over that window, so cost per record can be computed.
#
#   bench/scale/profile.sh [--bin DIR] [--engines N] [--step-hz HZ] [--warm-s S]
#                          [--dur-s S] [--top N] [--out FILE.data] [--backend uring|epoll]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="" engines=8 hz=15 warm_s=15 dur_s=8 top=25 out="" backend=uring
while [ $# -gt 0 ]; do
	case "$1" in
	--bin) bin=$2; shift ;;
	--engines) engines=$2; shift ;;
	--step-hz) hz=$2; shift ;;
	--warm-s) warm_s=$2; shift ;;
	--dur-s) dur_s=$2; shift ;;
	--top) top=$2; shift ;;
	--out) out=$2; shift ;;
	--backend) backend=$2; shift ;;
	-h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "profile.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
if [ -z "$bin" ]; then
	for d in "$root/build/bin" "$root"/build-*/bin; do
		[ -x "$d/memdecayd" ] && [ -x "$d/memdecay-loadgen" ] && { bin=$d; break; }
	done
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/memdecay-prof.XXXXXX")
[ -n "$out" ] || out="$work/perf.data"
daemon_pid=""
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
sock="$work/d.sock"
"$bin/memdecayd" --socket "$sock" --event-loop "$backend" --foreground --log-level warn 2>"$work/d.log" &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
for i in $(seq 0 $((engines - 1))); do
	nice -n 10 "$bin/memdecay-loadgen" --socket "$sock" --engine-name "e$i" --seqs 1024 \
		--pages-per-seq 16 --steps 0 --step-hz "$hz" --budget-seq-tokens 192 \
		--pattern heavy --seed $((i + 1)) --stagger --json >"$work/lg-$i.json" 2>/dev/null &
	pids+=($!)
done
sleep "$warm_s"
recs() { "$bin/memdecayctl" --socket "$sock" --json stats | jq '[.engines[].records] | add'; }
ticks() { awk '{print $14 + $15}' "/proc/$daemon_pid/stat"; }
r0=$(recs); c0=$(ticks); t0=$(date +%s.%N)
perf record -q -e cpu-clock -F 4999 -g -p "$daemon_pid" -o "$out" -- sleep "$dur_s" 2>/dev/null
r1=$(recs); c1=$(ticks); t1=$(date +%s.%N)
tck=$(getconf CLK_TCK)
awk -v r0="$r0" -v r1="$r1" -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v tck="$tck" 'BEGIN {
	w = t1 - t0; r = (r1 - r0) / w; cpu = (c1 - c0) / tck / w;
	printf "window %.2f s: %.0f records/s, daemon CPU %.1f%% of a core, %.0f ns CPU per record\n",
	       w, r, cpu * 100, (r > 0 ? cpu * 1e9 / r : 0) }'
perf report -i "$out" --stdio --no-children --sort symbol -g none --percent-limit 0.5 2>/dev/null |
	grep -v '^#' | grep -v '^$' | head -n "$top"
