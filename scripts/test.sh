#!/bin/sh
# test.sh — install what is needed, build, and run every test:
# the normal build, then the whole suite again under ASan+UBSan.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

sh scripts/deps.sh
if [ -f scripts/setup_llama.sh ]; then
	bash scripts/setup_llama.sh
	bash scripts/setup_kvpress.sh
	bash scripts/setup_vllm.sh
	bash scripts/setup_router.sh      # vllm-router, in front of vLLM replicas (docs/deploy.md)
fi

echo "== build (warnings are errors)"
sh scripts/build.sh "$ROOT/build"
echo "== tests"
(cd build && ctest --output-on-failure -j 2 --timeout 900)

echo "== build with ASan+UBSan"
sh scripts/build.sh "$ROOT/build-asan" -DCMAKE_BUILD_TYPE=Debug -DMEMDECAY_SANITIZE=ON -DMEMDECAY_CUDA=OFF
echo "== tests under ASan+UBSan"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j 2 --timeout 900 -LE no_asan)

if [ -f scripts/fuzz.sh ]; then
	echo "== fuzzing (30 s per harness)"
	sh scripts/fuzz.sh 0.5
fi
echo "== all tests passed"
