#!/bin/sh
# bench/fuzz.sh [MINUTES] — the long fuzzing run (default 10 minutes per
# harness), same harnesses and checks as CI's 30 s one (scripts/fuzz.sh).
# Corpora grow in build-fuzz/corpus/ and are reused by the next run.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
exec sh "$ROOT/scripts/fuzz.sh" "${1:-10}"
