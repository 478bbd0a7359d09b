#!/usr/bin/env bash
# bench/gpu/run.sh — every GPU check of MemDecay in one prepared command, for a
# machine with an NVIDIA GPU and the CUDA toolkit (no network needed); prints
# one JSON document on stdout (progress on stderr).  docs/kernels.md §7.
#   1. build everything with CUDA for the local GPU (CMake; without the host
#      dependencies, a direct nvcc build of the kernels and their two programs)
#   2. the kernel and GPU test suites with a device required
#      (ctest -L 'kernels|gpu', MEMDECAY_EXPECT_GPU=1)
#   3. memdecay-gpu-check: kernels vs the CPU reference and their time vs the
#      floor set by the device's measured copy bandwidth; the goal is >= 80% of
#      that floor at 32k tokens x 32 heads (shape kv32768_h32_q1)
#   4. memdecay-ring-roundtrip (CUDA IPC ring, two processes) vs the host ring
#      (memdecay-bench-ipc ring_spin)
#   5. memdecay-gpu-e2e: engine with synthetic attention on the GPU, memdecayd
#      draining the CUDA IPC ring, evictions back, same as the host ring
#   6. memdecay-gpu-e2e --ingest: the daemon's ingest rate from the device ring
#   7. vllm_serve.sh: `vllm serve` with the MemDecay plugin on this GPU (a vLLM with
#      CUDA already installed; MEMDECAY_VLLM_GPU_PYTHON), and what happened: the
#      plugin does not hook the GPU attention backends yet, so it should refuse
#      to start, naming the platform (skipped without such a vLLM)
# Usage: bench/gpu/run.sh [--dry-run] [--quick] [--keep] [--build DIR]
#   --dry-run   build everything, then list what would run (no device needed)
#   --build DIR build in DIR (an existing CUDA build dir is reused as it is
#               configured) instead of a temporary directory
# Exit status 0 only if everything passed (--dry-run: if the build succeeded).
# MEMDECAY_GPU_DIRECT=1 skips CMake and uses the direct nvcc build.
set -uo pipefail

QUICK="" KEEP=0 DRY=0 BUILD=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK="--quick" ;;
    --keep) KEEP=1 ;;
    --dry-run) DRY=1 ;;
    --build) shift; BUILD="${1:-}"; [ -n "$BUILD" ] || { echo "run.sh: --build needs a directory" >&2; exit 2; } ;;
    *) echo "usage: $0 [--dry-run] [--quick] [--keep] [--build DIR]" >&2; exit 2 ;;
  esac
  shift
done

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/memdecay-gpu.XXXXXX")"
LOG="$WORK/log"
mkdir -p "$LOG"
cleanup() { if [ "$KEEP" = 0 ]; then rm -rf "$WORK"; else echo "kept $WORK" >&2; fi; }
trap cleanup EXIT
say() { printf '== %s\n' "$*" >&2; }
JOBS="$(nproc 2>/dev/null || echo 4)"
INGEST_RECORDS=2000000
[ -n "$QUICK" ] && INGEST_RECORDS=200000

# -- toolkit and device ----------------------------------------------------------
NVCC="$(command -v nvcc || true)"
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then echo "run.sh: nvcc not found (CUDA toolkit missing)" >&2; exit 2; fi
CUDA_HOME="$(cd "$(dirname "$NVCC")/.." && pwd)"
ARCH="" GPU_NAME=""
if command -v nvidia-smi >/dev/null 2>&1; then
  GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  CAP="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')"
  [[ "$CAP" =~ ^[0-9]+$ ]] && ARCH="$CAP"
fi
[ -z "$ARCH" ] && ARCH="90;80"
say "nvcc $("$NVCC" --version | tail -1), architectures $ARCH, GPU '${GPU_NAME:-none seen}', work dir $WORK"

# -- build -----------------------------------------------------------------------
[ -z "$BUILD" ] && BUILD="$WORK/build"
BIN="" CMAKE_BUILD=0
configure() {
  if [ -f "$BUILD/CMakeCache.txt" ]; then
    grep -q '^MEMDECAY_CUDA:BOOL=ON' "$BUILD/CMakeCache.txt" ||
      { echo "run.sh: $BUILD is configured without MEMDECAY_CUDA" >"$LOG/configure.txt"; return 1; }
    return 0
  fi
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMEMDECAY_CUDA=ON -DMEMDECAY_WERROR=ON \
        -DCMAKE_CUDA_COMPILER="$NVCC" -DMEMDECAY_CUDA_ARCHITECTURES="$ARCH" >"$LOG/configure.txt" 2>&1
}
if [ "${MEMDECAY_GPU_DIRECT:-0}" != 1 ] && command -v cmake >/dev/null 2>&1 && configure &&
   cmake --build "$BUILD" -j "$JOBS" >"$LOG/build.txt" 2>&1; then
  BIN="$BUILD/bin"
  CMAKE_BUILD=1
  say "CMake build of everything in $BUILD"
else
  say "CMake build failed or unavailable (see below); building the kernel programs with nvcc directly"
  tail -15 "$LOG/configure.txt" "$LOG/build.txt" >&2 2>/dev/null
  BIN="$WORK/direct"
  mkdir -p "$BIN"
  GENCODE=()
  IFS=';' read -ra ARCHS <<<"$ARCH"
  for a in "${ARCHS[@]}"; do GENCODE+=("-gencode=arch=compute_$a,code=[sm_$a,compute_$a]"); done
  INC=(-I"$SRC/kernels/include" -I"$SRC/shm_layout")
  # C and CUDA objects in separate folders: page_mass.c and page_mass.cu share a name.
  (cd "$BIN" && mkdir -p c cu &&
   (cd c && gcc -O2 -std=gnu11 -c "${INC[@]}" "$SRC/kernels/cpu/page_mass.c" "$SRC/kernels/cpu/flash_page_mass.c" &&
            gcc -O2 -std=gnu11 -mavx2 -mfma -c "${INC[@]}" "$SRC/kernels/cpu/page_mass_avx2.c" &&
            gcc -O2 -std=gnu11 -c "${INC[@]}" -I"$CUDA_HOME/include" "$SRC/bench/gpu/gpu_check.c" "$SRC/bench/gpu/ring_roundtrip.c") &&
   (cd cu && "$NVCC" -O2 -std=c++17 "${GENCODE[@]}" -c "${INC[@]}" "$SRC"/kernels/cuda/*.cu) &&
   "$NVCC" "${GENCODE[@]}" -o memdecay-gpu-check c/gpu_check.o c/page_mass.o c/flash_page_mass.o c/page_mass_avx2.o cu/*.o -lm &&
   "$NVCC" "${GENCODE[@]}" -o memdecay-ring-roundtrip c/ring_roundtrip.o c/page_mass.o c/flash_page_mass.o c/page_mass_avx2.o cu/*.o -lm) \
    >"$LOG/direct-build.txt" 2>&1 || { cat "$LOG/direct-build.txt" >&2; echo "run.sh: build failed" >&2; exit 1; }
fi

# -- what runs ---------------------------------------------------------------------
# The timeouts add up to 570 s, so that a run on a lent device (at most 10
# minutes a command) ends in time with the build carried over.
# name, command (run from the build dir), timeout in s, separated by US (0x1f:
# commands contain '|').  Steps whose programs the direct build lacks are not
# listed; their status reads "not built".
US=$'\x1f'
step() { STEPS+=("$1$US$2$US$3"); }
STEPS=()
if [ "$CMAKE_BUILD" = 1 ]; then
  step kernel_tests "MEMDECAY_EXPECT_GPU=1 ctest -L 'kernels|gpu' -E '^gpu_ipc_e2e\$' --output-on-failure -j4" 150
fi
step gpu_check "$BIN/memdecay-gpu-check $QUICK" 150
step ring_roundtrip "$BIN/memdecay-ring-roundtrip" 60
if [ "$CMAKE_BUILD" = 1 ]; then
  step host_ring "$BIN/memdecay-bench-ipc --json --quick --only ring_spin" 45
  step e2e "MEMDECAY_EXPECT_GPU=1 $BIN/memdecay-gpu-e2e --daemon $BIN/memdecayd --ctl $BIN/memdecayctl" 45
  step ingest "MEMDECAY_EXPECT_GPU=1 $BIN/memdecay-gpu-e2e --daemon $BIN/memdecayd --ctl $BIN/memdecayctl --ingest $INGEST_RECORDS" 60
fi
step vllm_serve "bash $SRC/bench/gpu/vllm_serve.sh" 60

missing() { # programs a step needs that the build did not produce
  local cmd="$1" m="" w
  for w in $cmd; do
    case "$w" in */bin/*|*/direct/*) [ -x "$w" ] || m="$m $w" ;; esac
  done
  printf '%s' "$m"
}

if [ "$DRY" = 1 ]; then
  say "dry run: build done; would run (in $BUILD):"
  ok=1
  {
    echo "{"
    echo "  \"dry_run\": true,"
    echo "  \"build\": {\"dir\": \"$BUILD\", \"cmake\": $([ "$CMAKE_BUILD" = 1 ] && echo true || echo false), \"architectures\": \"$ARCH\"},"
    echo "  \"steps\": ["
    n=${#STEPS[@]} i=0
    for s in "${STEPS[@]}"; do
      i=$((i + 1))
      IFS="$US" read -r name cmd tmo <<<"$s"
      m="$(missing "$cmd")"
      [ -n "$m" ] && ok=0
      printf '    {"name": "%s", "timeout_s": %s, "built": %s, "command": "%s"}%s\n' "$name" "$tmo" \
        "$([ -z "$m" ] && echo true || echo false)" "$(sed 's/\\/\\\\/g; s/"/\\"/g' <<<"$cmd")" \
        "$([ $i -lt $n ] && echo ,)"
      printf '   %-15s %s (timeout %ss)%s\n' "$name" "$cmd" "$tmo" "${m:+  MISSING:$m}" >&2
    done
    echo "  ],"
    if [ "$CMAKE_BUILD" = 1 ]; then
      tests="$(cd "$BUILD" && ctest -N -L 'kernels|gpu' -E '^gpu_ipc_e2e$' | sed -n 's/^ *Test *#[0-9]*: *//p' | tr '\n' ' ')"
      echo "  \"kernel_tests\": \"$tests\","
      say "kernel/gpu tests: $tests"
    fi
    echo "  \"ok\": $([ $ok = 1 ] && echo true || echo false)"
    echo "}"
  }
  [ $ok = 1 ] && exit 0 || exit 1
fi

# -- run ---------------------------------------------------------------------------
STATUS=0
declare -A RC
for s in "${STEPS[@]}"; do
  IFS="$US" read -r name cmd tmo <<<"$s"
  say "$name: $cmd"
  (cd "$BUILD" 2>/dev/null || cd "$WORK"; eval "timeout $tmo env $cmd") >"$LOG/$name.txt" 2>&1
  RC[$name]=$?
  [ "${RC[$name]}" -ne 0 ] && [ "${RC[$name]}" -ne 77 ] && STATUS=1   # 77: skipped
  tail -25 "$LOG/$name.txt" >&2
done

# -- JSON (last, on stdout) --------------------------------------------------------
# A RESULT line "RESULT k=v k=v ..." as a JSON object: numbers bare, the rest
# quoted.
result_json() {
  sed -e 's/^RESULT //' <<<"$1" | awk '{
    out = ""; line = $0
    while (match(line, /[A-Za-z_0-9]+=("[^"]*"|[^ ]*)/)) {
      kv = substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
      k = substr(kv, 1, index(kv, "=") - 1); v = substr(kv, index(kv, "=") + 1)
      gsub(/^"|"$/, "", v)
      if (v !~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) v = "\"" v "\""
      out = out (out == "" ? "" : ", ") "\"" k "\": " v
    }
    print "{" out "}" }'
}
results() { # all RESULT lines of a log matching a pattern, as a JSON array
  local first=1
  printf '['
  while read -r line; do
    [ -z "$line" ] && continue
    [ $first = 0 ] && printf ', '
    first=0
    result_json "$line"
  done < <(grep -E "^RESULT kernel=($2)( |$)" "$LOG/$1.txt" 2>/dev/null)
  printf ']'
}
step_status() { # pass / FAIL / skipped / not built
  if [ -z "${RC[$1]+x}" ]; then echo "not built"
  elif [ "${RC[$1]}" = 0 ]; then echo pass
  elif [ "${RC[$1]}" = 77 ]; then echo skipped
  else echo "FAIL (exit ${RC[$1]})"; fi
}
GOAL_LINE="$(grep -E '^RESULT kernel=page_mass shape=kv32768_h32_q1 ' "$LOG/gpu_check.txt" 2>/dev/null | head -1)"
GOAL_FRAC="$(sed -n 's/.* frac_of_floor=\([^ ]*\).*/\1/p' <<<"$GOAL_LINE")"
GOAL_MET=null
[ -n "$GOAL_FRAC" ] && GOAL_MET="$(awk -v f="$GOAL_FRAC" 'BEGIN { print (f >= 0.8) ? "true" : "false" }')"
# memdecay-bench-ipc's ring_spin object, which spans several lines
HOST_RING="$(awk '/"name": "ring_spin"/ { on = 1 } on { sub(/^ +/, ""); printf "%s ", $0 }
  on && /}[ ,]*$/ { exit }' "$LOG/host_ring.txt" 2>/dev/null | sed 's/[ ,]*$//')"
echo "{"
echo "  \"date_utc\": \"$(date -u +%Y-%m-%dT%H:%MZ)\","
echo "  \"gpu\": \"$GPU_NAME\","
echo "  \"device\": $(results gpu_check device),"
echo "  \"build\": {\"dir\": \"$BUILD\", \"cmake\": $([ "$CMAKE_BUILD" = 1 ] && echo true || echo false), \"architectures\": \"$ARCH\"},"
echo "  \"steps\": {"
first=1
for s in "${STEPS[@]}"; do
  IFS="$US" read -r name _ _ <<<"$s"
  [ $first = 0 ] && echo ","
  first=0
  printf '    "%s": "%s"' "$name" "$(step_status "$name")"
done
echo
echo "  },"
echo "  \"kernels\": $(results gpu_check 'page_mass|flash_page_mass'),"
echo "  \"goal_kv32768_h32\": {\"frac_of_floor\": ${GOAL_FRAC:-null}, \"goal\": 0.8, \"met\": $GOAL_MET},"
echo "  \"device_ring\": $(results ring_roundtrip 'ring_open|ring_roundtrip|ring_bulk|ring_integrity'),"
echo "  \"host_ring\": ${HOST_RING:-null},"
echo "  \"e2e\": $(results e2e gpu_e2e),"
echo "  \"ingest\": $(results ingest ingest),"
echo "  \"vllm_serve\": $(results vllm_serve vllm_serve),"
echo "  \"overall\": \"$([ $STATUS -eq 0 ] && echo PASS || echo FAIL)\""
echo "}"
exit $STATUS
