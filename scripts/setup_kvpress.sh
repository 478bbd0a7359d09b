#!/usr/bin/env bash
# setup_kvpress.sh — installs what the transformers adapter and the kvpress
# comparison run on, into .deps/ (docs/transformers.md):
#   .deps/kvpress            a venv with the pinned set of
#                            engine_adapters/transformers/requirements.txt
#                            (torch 2.13.0, transformers 5.2.0, kvpress 0.5.5)
#   .deps/models/smollm2-hf  SmolLM2-135M-Instruct in Hugging Face format, made
#                            from the pinned GGUF that setup_llama.sh installed
#                            (scripts/convert_gguf_hf.py --check: it must answer
#                            "Paris")
#   .deps/models/gemma3-270m-hf  Gemma 3 270M (pretrained) the same way, from the
#                            pinned Q4_K_M GGUF; its check gets one answered
#                            example first (--check-shots 1: a pretrained model)
#   .deps/kvpress.env        MEMDECAY_KV_PYTHON, MEMDECAY_HF_MODEL, MEMDECAY_GEMMA_HF_MODEL
# Needs scripts/setup_llama.sh first (the GGUFs).  Idempotent: each step is
# skipped when its result is already there.  Nothing here is committed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=${MEMDECAY_DEPS:-$ROOT/.deps}
VENV=$DEPS/kvpress
REQ=$ROOT/engine_adapters/transformers/requirements.txt
MODEL_DIR=$DEPS/models/smollm2-hf
GEMMA_DIR=$DEPS/models/gemma3-270m-hf
PY=${PYTHON:-python3}
log() { printf 'setup_kvpress: %s\n' "$*" >&2; }

[ -f "$DEPS/llama.env" ] || { log "$DEPS/llama.env missing: run scripts/setup_llama.sh first"; exit 1; }
# shellcheck disable=SC1091
. "$DEPS/llama.env"
[ -f "$MEMDECAY_LLAMA_MODEL" ] || { log "GGUF $MEMDECAY_LLAMA_MODEL missing: rerun scripts/setup_llama.sh"; exit 1; }
[ -n "${MEMDECAY_GEMMA_GGUF:-}" ] && [ -f "$MEMDECAY_GEMMA_GGUF" ] ||
	{ log "the Gemma 3 GGUF is missing from $DEPS/llama.env: rerun scripts/setup_llama.sh"; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
	log "creating $VENV"
	"$PY" -m venv "$VENV"
fi
# The requirements file is the whole pinned set: the stamp holds its hash, so a
# changed pin reinstalls and an unchanged one costs nothing.
STAMP=$VENV/.requirements.sha256
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
	log "pip installing the pinned set of $REQ (torch, transformers, kvpress: about 2 GB, a few minutes; log in $DEPS/kvpress-pip.log)"
	"$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQ" \
		>"$DEPS/kvpress-pip.log" 2>&1 || { log "pip failed; the end of $DEPS/kvpress-pip.log:"; tail -20 "$DEPS/kvpress-pip.log" >&2; exit 1; }
	echo "$want" >"$STAMP"
fi

# A model: converted once, checked once.  The stamp names the GGUF it came from
# and the converter that made it, so a fixed converter converts again.  The
# converter writes a new directory beside the old one and swaps it in, so the
# old model stays readable until the new one is checked.
convert_model() { # gguf sha256 dir log minutes [converter args]
	local gguf=$1 sha=$2 dir=$3 clog=$4 minutes=$5
	shift 5
	local want
	want="$sha $(sha256sum "$ROOT/scripts/convert_gguf_hf.py" | cut -d' ' -f1)"
	if [ -f "$dir/.from-gguf" ] && [ "$(cat "$dir/.from-gguf")" = "$want" ]; then
		return 0
	fi
	log "converting $gguf to $dir (about $minutes min)"
	HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error \
		"$VENV/bin/python" "$ROOT/scripts/convert_gguf_hf.py" --gguf "$gguf" \
		--out "$dir" --check "$@" >"$clog" 2>&1 ||
		{ log "conversion failed; the end of $clog:"; tail -20 "$clog" >&2; exit 1; }
	tail -1 "$clog" >&2
	echo "$want" >"$dir/.from-gguf"
}
convert_model "$MEMDECAY_LLAMA_MODEL" "$MEMDECAY_LLAMA_MODEL_SHA256" "$MODEL_DIR" \
	"$DEPS/kvpress-convert.log" 1
# Gemma 3 270M: its own tokenizer build (convert_gguf_hf.py), about 1 GB of
# float32 weights; the pretrained model answers the check after one example.
convert_model "$MEMDECAY_GEMMA_GGUF" "$MEMDECAY_GEMMA_GGUF_SHA256" "$GEMMA_DIR" \
	"$DEPS/kvpress-convert-gemma.log" 2 --check-shots 1

cat >"$DEPS/kvpress.env" <<ENV
MEMDECAY_KV_PYTHON=$VENV/bin/python
MEMDECAY_HF_MODEL=$MODEL_DIR
MEMDECAY_GEMMA_HF_MODEL=$GEMMA_DIR
ENV
log "ready: $DEPS/kvpress.env"
