#!/bin/sh
# test.sh — install what is needed, build, and run every test: the normal build,
# then the whole suite again under ASan+UBSan, then the fuzzers.  Ends with the
# table of where the time went (scripts/test_table.py; docs/testing.md).
#
# Dependencies come from the per-user cache (MEMDECAY_CACHE, scripts/cache.sh):
# a warm cache sets up in seconds, an empty one installs everything.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

OUT=$ROOT/build-report
rm -rf "$OUT"
mkdir -p "$OUT"
STEPS=$OUT/steps.tsv
: >"$STEPS"
FAILED=""

# step NAME COMMAND... — runs COMMAND, records its seconds and exit status
step() {
	name=$1
	shift
	t=$(date +%s)
	rc=0
	"$@" || rc=$?
	printf '%s\t%s\t%s\n' "$name" $(($(date +%s) - t)) "$rc" >>"$STEPS"
	[ "$rc" -eq 0 ] || FAILED="$FAILED $name"
	return "$rc"
}
table() {
	python3 scripts/test_table.py --steps "$STEPS" --deps "$ROOT/.deps" \
		--junit "normal=$OUT/normal.xml" --junit "asan=$OUT/asan.xml" \
		--markdown "$OUT/table.md" || true
}

step apt sh scripts/deps.sh
if [ -f scripts/setup_llama.sh ]; then
	step setup_llama bash scripts/setup_llama.sh
	step setup_kvpress bash scripts/setup_kvpress.sh
	step setup_vllm bash scripts/setup_vllm.sh
	step setup_vllm033 bash scripts/setup_vllm033.sh # vLLM 0.33.0's engine core over the 0.32 stack (docs/vllm.md "Versions")
	step setup_router bash scripts/setup_router.sh # vllm-router, in front of vLLM replicas (docs/deploy.md)
fi

echo "== build (warnings are errors)"
step build sh scripts/build.sh "$ROOT/build"
echo "== tests"
# three at once on two cores: the two model lanes (docs/testing.md), each a core's
# worth of work, and a slot for the short suites in their idle moments
(cd build && step tests ctest --output-on-failure -j 3 --timeout 900 --output-junit "$OUT/normal.xml") || true

echo "== build with ASan+UBSan"
step build_asan sh scripts/build.sh "$ROOT/build-asan" -DCMAKE_BUILD_TYPE=Debug -DMEMDECAY_SANITIZE=ON -DMEMDECAY_CUDA=OFF
echo "== tests under ASan+UBSan"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && step tests_asan ctest --output-on-failure -j 2 --timeout 900 -LE no_asan --output-junit "$OUT/asan.xml") || true

if [ -f scripts/fuzz.sh ]; then
	echo "== fuzzing"
	step fuzz sh scripts/fuzz.sh 0.5 || true
fi
# the failures of the subshells above are read back from the steps file
FAILED=$(awk -F'\t' '$3 != 0 { printf " %s", $1 }' "$STEPS")
table
if [ -n "$FAILED" ]; then
	echo "== FAILED:$FAILED"
	exit 1
fi
echo "== all tests passed"
