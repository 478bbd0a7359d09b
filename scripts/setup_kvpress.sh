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
# All of it lives in one entry of the per-user cache (scripts/cache.sh).
# Needs scripts/setup_llama.sh first (the GGUFs).  Idempotent: each step is
# skipped when its result is already there.  Nothing here is committed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOCAL=${MEMDECAY_DEPS:-$ROOT/.deps}
REQ=$ROOT/engine_adapters/transformers/requirements.txt
CONVERTER=$ROOT/scripts/convert_gguf_hf.py
PY=${PYTHON:-python3}
log() { printf 'setup_kvpress: %s\n' "$*" >&2; }
t0=$(date +%s)

[ -f "$LOCAL/llama.env" ] || { log "$LOCAL/llama.env missing: run scripts/setup_llama.sh first"; exit 1; }
# shellcheck disable=SC1091
. "$LOCAL/llama.env"

# One entry of the per-user cache (scripts/cache.sh), keyed by the pinned set, the
# converter and the GGUFs it converts; .deps/ gets kvpress.env and links.
# shellcheck source=scripts/cache.sh
. "$ROOT/scripts/cache.sh"
RECIPE=1 # raise it when this script installs differently
DEPS=$(md_cache_entry kvpress "recipe $RECIPE" "$("$PY" -c 'import sys; print(sys.version, sys.executable)')" \
	"file:$REQ" "file:$CONVERTER" "gguf $MEMDECAY_LLAMA_MODEL_SHA256" "gemma ${MEMDECAY_GEMMA_GGUF_SHA256:-}")
md_cache_lock "$DEPS"
STATE=$(md_cache_state "$DEPS")
VENV=$DEPS/kvpress
MODEL_DIR=$DEPS/models/smollm2-hf
GEMMA_DIR=$DEPS/models/gemma3-270m-hf
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
	want="$sha $(sha256sum "$CONVERTER" | cut -d' ' -f1)"
	if [ -f "$dir/.from-gguf" ] && [ "$(cat "$dir/.from-gguf")" = "$want" ]; then
		return 0
	fi
	log "converting $gguf to $dir (about $minutes min)"
	HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error \
		"$VENV/bin/python" "$CONVERTER" --gguf "$gguf" \
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
touch "$DEPS/.complete"

# the clone's view: its own kvpress.env, and links for the paths the docs name
cp "$DEPS/kvpress.env" "$LOCAL/kvpress.env.tmp"
mv "$LOCAL/kvpress.env.tmp" "$LOCAL/kvpress.env"
md_link "$VENV" "$LOCAL/kvpress"
md_link "$MODEL_DIR" "$LOCAL/models/smollm2-hf"
md_link "$GEMMA_DIR" "$LOCAL/models/gemma3-270m-hf"
md_setup_record "$LOCAL" kvpress "$STATE" $(($(date +%s) - t0)) "$DEPS"
log "ready: $LOCAL/kvpress.env (cache $STATE: $DEPS)"
