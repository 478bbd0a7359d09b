#!/bin/sh
# fuzz.sh MINUTES — build the libFuzzer harnesses (clang, ASan+UBSan) into
# build-fuzz and run each for MINUTES (fractions allowed: 0.5 = 30 s), seeded
# from fuzz/corpus/<harness>/ (new inputs go to build-fuzz/corpus/<harness>/,
# the committed seeds are not touched).  Fails on any crash, leak, timeout or
# sanitizer report; the reproducer is left in build-fuzz/artifacts/.
# Prints one line per harness with its execution count.  MEMDECAY_FUZZ_HARNESSES
# ("fuzz_ingest fuzz_ctl") runs only those.  Harnesses run side by side, one a
# core (MEMDECAY_FUZZ_JOBS sets how many at once).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MINUTES=${1:-0.5}
BUILD=${MEMDECAY_FUZZ_BUILD:-$ROOT/build-fuzz}
CC=${CC_FUZZ:-clang}
SECS=$(awk -v m="$MINUTES" 'BEGIN { s = int(m * 60 + 0.5); if (s < 1) s = 1; print s }')
HARNESSES=${MEMDECAY_FUZZ_HARNESSES:-"fuzz_ingest fuzz_client_cmds fuzz_ctl fuzz_config"}

if ! command -v "$CC" >/dev/null 2>&1; then
	echo "fuzz.sh: $CC not found (apt-get install clang)" >&2
	exit 1
fi
mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Debug \
	-DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" \
	-DMEMDECAY_FUZZ=ON -DMEMDECAY_SANITIZE=ON -DMEMDECAY_CUDA=OFF -DMEMDECAY_LLAMA=OFF \
	-DMEMDECAY_WERROR=ON >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log" >&2; exit 1; }
# shellcheck disable=SC2086
cmake --build "$BUILD" -j "$(nproc 2>/dev/null || echo 2)" --target $HARNESSES

mkdir -p "$BUILD/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# one harness a core at once: the same executions per harness, less wall time
JOBS=${MEMDECAY_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
run_one() { # harness: runs it, prints its line, leaves its exit status in $BUILD/$1.rc
	h=$1
	mkdir -p "$BUILD/corpus/$h"
	seeds="$ROOT/fuzz/corpus/${h#fuzz_}"
	log="$BUILD/$h.log"
	rc=0
	"$BUILD/fuzz/$h" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$h-" \
		"$BUILD/corpus/$h" "$seeds" >"$log" 2>&1 || rc=$?
	echo "$rc" >"$BUILD/$h.rc"
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
	if [ "$rc" -ne 0 ]; then
		echo "fuzz $h: FAILED (exit $rc) after ${execs:-?} executions; log $log" >&2
		tail -n 40 "$log" >&2
	else
		echo "fuzz $h: ok, ${execs:-?} executions in ${SECS} s, coverage ${cov:-?}"
	fi
}
running=0
for h in $HARNESSES; do
	rm -f "$BUILD/$h.rc"
	run_one "$h" &
	running=$((running + 1))
	if [ "$running" -ge "$JOBS" ]; then
		wait
		running=0
	fi
done
wait
fail=0
for h in $HARNESSES; do
	[ "$(cat "$BUILD/$h.rc" 2>/dev/null || echo 1)" = 0 ] || fail=1
done
exit $fail
