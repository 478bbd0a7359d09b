#!/bin/sh
# build.sh [BUILD_DIR] [cmake args…] — configure and build with warnings as errors.
# Builds the llama.cpp adapter when scripts/setup_llama.sh has prepared .deps/llama.env.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
[ $# -gt 0 ] && shift

LLAMA_ARGS=""
if [ -f "$ROOT/.deps/llama.env" ]; then
	. "$ROOT/.deps/llama.env"
	LLAMA_ARGS="-DMEMDECAY_LLAMA=ON -DMEMDECAY_LLAMA_PREFIX=$MEMDECAY_LLAMA_PREFIX"
fi
JOBS=$(nproc 2>/dev/null || echo 2)
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD" -DMEMDECAY_WERROR=ON $LLAMA_ARGS "$@"
cmake --build "$BUILD" -j "$JOBS"
