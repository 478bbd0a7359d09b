#!/usr/bin/env bash
# portable_build.sh — the installed llama.cpp runs on every x86-64 machine of
# our kind: its libraries hold no AMX instruction (a guest kernel may not grant
# the tile state) and nothing above the instruction set it was built for
# (no AVX-512 in the avx2 build, no AVX in the x86-64 one).
#   portable_build.sh LIBDIR LLAMA_ENV
set -euo pipefail
LIBDIR=$1 ENVF=$2
ISA=avx2
if [ -f "$ENVF" ]; then
	ISA=$(sed -n 's/^MEMDECAY_LLAMA_ISA=//p' "$ENVF")
	ISA=${ISA:-avx2}
fi
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v objdump >/dev/null || fail "objdump not found (binutils)"
AMX='\b(ldtilecfg|sttilecfg|tileloadd|tileloaddt1|tilestored|tilerelease|tilezero|tdpb[su][su]d|tdpbf16ps|tdpfp16ps)\b'
case $ISA in
avx2) ABOVE='%zmm|%k[0-7]\b' ; ABOVE_NAME="AVX-512" ;;
x86-64) ABOVE='%ymm|%zmm' ; ABOVE_NAME="AVX/AVX-512" ;;
*) fail "unknown MEMDECAY_LLAMA_ISA=$ISA in $ENVF" ;;
esac
n=0
for lib in "$LIBDIR"/libggml*.so "$LIBDIR"/libllama.so; do
	[ -f "$lib" ] || continue
	n=$((n + 1))
	dis=$(objdump -d --no-show-raw-insn "$lib")
	amx=$(grep -cE "$AMX" <<<"$dis" || true)
	above=$(grep -cE "$ABOVE" <<<"$dis" || true)
	echo "$(basename "$lib"): $amx AMX instructions, $above $ABOVE_NAME instructions ($ISA build)"
	[ "$amx" -eq 0 ] || fail "$lib holds AMX instructions"
	[ "$above" -eq 0 ] || fail "$lib holds $ABOVE_NAME instructions above its $ISA baseline"
done
[ "$n" -gt 0 ] || fail "no libggml*/libllama in $LIBDIR"
echo "portable_build: ok ($n libraries)"
