#!/usr/bin/env bash
# bench/gpu/run.sh — MemDecay's GPU checks in one command, for a machine with an
# NVIDIA GPU and the CUDA toolkit (no network needed).
#   1. configure + build with CUDA into a temporary build directory (CMake; if the
#      project's host dependencies are missing, a direct nvcc build of the kernels
#      and the two GPU programs instead)
#   2. the kernel test suites with a device required (MEMDECAY_EXPECT_GPU=1)
#   3. memdecay-gpu-check: GPU kernels vs CPU reference (rel err <= 1e-5, fp32),
#      time vs the memory-bandwidth floor (bytes / measured device copy bandwidth)
#   4. memdecay-ring-roundtrip: CUDA IPC stats ring between two processes
#   5. a short table, last.
# Usage: bench/gpu/run.sh [--quick] [--keep]     Exit status 0 only if all passed.
# MEMDECAY_GPU_DIRECT=1 skips CMake and uses the direct nvcc build.
set -uo pipefail

QUICK=""
KEEP=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK="--quick" ;;
    --keep) KEEP=1 ;;
    *) echo "usage: $0 [--quick] [--keep]" >&2; exit 2 ;;
  esac
done

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/memdecay-gpu.XXXXXX")"
LOG="$WORK/log"
mkdir -p "$LOG"
cleanup() { if [ "$KEEP" = 0 ]; then rm -rf "$WORK"; else echo "kept $WORK" >&2; fi; }
trap cleanup EXIT
say() { printf '== %s\n' "$*" >&2; }
JOBS="$(nproc 2>/dev/null || echo 4)"

# -- toolkit and device ----------------------------------------------------------
NVCC="$(command -v nvcc || true)"
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then echo "run.sh: nvcc not found (CUDA toolkit missing)" >&2; exit 2; fi
CUDA_HOME="$(cd "$(dirname "$NVCC")/.." && pwd)"
ARCH=""
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L >&2 || true
  CAP="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')"
  [[ "$CAP" =~ ^[0-9]+$ ]] && ARCH="$CAP"
fi
[ -z "$ARCH" ] && ARCH="90;80"
say "nvcc $("$NVCC" --version | tail -1), architectures $ARCH, work dir $WORK"

# -- build -----------------------------------------------------------------------
BUILD="$WORK/build"
BIN=""
HAVE_TESTS=0
if [ "${MEMDECAY_GPU_DIRECT:-0}" != 1 ] && command -v cmake >/dev/null 2>&1 &&
   cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMEMDECAY_CUDA=ON \
         -DCMAKE_CUDA_COMPILER="$NVCC" -DMEMDECAY_CUDA_ARCHITECTURES="$ARCH" \
         >"$LOG/configure.txt" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" --target memdecay-gpu-check memdecay-ring-roundtrip \
         >"$LOG/build.txt" 2>&1; then
  BIN="$BUILD/bin"
  if cmake --build "$BUILD" -j "$JOBS" --target check_kernels check_kernels_cuda check_kernels_ring \
       >"$LOG/build-tests.txt" 2>&1; then HAVE_TESTS=1; fi
  say "CMake build in $BUILD"
else
  say "CMake build failed or unavailable (see below); building the GPU programs with nvcc directly"
  tail -15 "$LOG/configure.txt" "$LOG/build.txt" 2>/dev/null >&2
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

# -- run ---------------------------------------------------------------------------
STATUS=0
TESTS="not built"
if [ "$HAVE_TESTS" = 1 ]; then
  say "kernel test suites (device required)"
  if (cd "$BUILD" && MEMDECAY_EXPECT_GPU=1 timeout 600 ctest -L kernels --output-on-failure) >"$LOG/ctest.txt" 2>&1; then
    TESTS="pass"
  else
    TESTS="FAIL"; STATUS=1
  fi
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$LOG/ctest.txt" >&2 || true
fi

say "memdecay-gpu-check $QUICK"
timeout 900 "$BIN/memdecay-gpu-check" $QUICK >"$LOG/gpu_check.txt" 2>&1
RC=$?; [ $RC -ne 0 ] && STATUS=1
cat "$LOG/gpu_check.txt" >&2

say "memdecay-ring-roundtrip"
timeout 600 "$BIN/memdecay-ring-roundtrip" >"$LOG/ring.txt" 2>&1
RR=$?; [ $RR -ne 0 ] && STATUS=1
cat "$LOG/ring.txt" >&2

# -- table (last) ------------------------------------------------------------------
kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
echo
echo "MemDecay GPU results  $(date -u +%Y-%m-%dT%H:%MZ)  $(grep -o 'name="[^"]*"' "$LOG/gpu_check.txt" | head -1)"
echo "device copy bandwidth: $(kv copy_gbps "$(grep 'kernel=device' "$LOG/gpu_check.txt")") GB/s   kernel tests: $TESTS"
printf '%-16s %-24s %10s %4s %11s %11s %8s\n' kernel shape rel_err ok median_us floor_us floor/t
grep -E '^RESULT kernel=(page_mass|flash_page_mass) ' "$LOG/gpu_check.txt" | while read -r line; do
  printf '%-16s %-24s %10s %4s %11s %11s %8s\n' "$(kv kernel "$line")" "$(kv shape "$line")" \
    "$(kv rel_err "$line")" "$(kv ok "$line")" "$(kv median_us "$line")" "$(kv floor_us "$line")" \
    "$(kv frac_of_floor "$line")"
done
RT="$(grep 'kernel=ring_roundtrip' "$LOG/ring.txt")"
BK="$(grep 'kernel=ring_bulk' "$LOG/ring.txt")"
IN="$(grep 'kernel=ring_integrity' "$LOG/ring.txt")"
echo "ipc ring round trip (2 processes): median $(kv median_us "$RT") us, p99 $(kv p99_us "$RT") us; bulk $(kv recs_per_s "$BK") rec/s; integrity ok=$(kv ok "$IN")"
[ $RC -eq 2 ] && echo "gpu-check: no usable device (exit 2)"
echo "overall: $([ $STATUS -eq 0 ] && echo PASS || echo FAIL)"
exit $STATUS
