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
#   .deps/kvpress.env        MEMDECAY_KV_PYTHON, MEMDECAY_HF_MODEL
# Needs scripts/setup_llama.sh first (the GGUF).  Idempotent: each step is
# skipped when its result is already there.  Nothing here is committed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=${MEMDECAY_DEPS:-$ROOT/.deps}
VENV=$DEPS/kvpress
REQ=$ROOT/engine_adapters/transformers/requirements.txt
MODEL_DIR=$DEPS/models/smollm2-hf
PY=${PYTHON:-python3}
log() { printf 'setup_kvpress: %s\n' "$*" >&2; }

[ -f "$DEPS/llama.env" ] || { log "$DEPS/llama.env missing: run scripts/setup_llama.sh first"; exit 1; }
# shellcheck disable=SC1091
. "$DEPS/llama.env"
[ -f "$MEMDECAY_LLAMA_MODEL" ] || { log "GGUF $MEMDECAY_LLAMA_MODEL missing: rerun scripts/setup_llama.sh"; exit 1; }

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

# The model: converted once, checked once.  The stamp names the GGUF it came from
# and the converter that made it, so a fixed converter converts again.
MSTAMP=$MODEL_DIR/.from-gguf
want_model="$MEMDECAY_LLAMA_MODEL_SHA256 $(sha256sum "$ROOT/scripts/convert_gguf_hf.py" | cut -d' ' -f1)"
if [ ! -f "$MSTAMP" ] || [ "$(cat "$MSTAMP")" != "$want_model" ]; then
	log "converting $MEMDECAY_LLAMA_MODEL to $MODEL_DIR (about 1 min)"
	rm -rf "$MODEL_DIR"
	HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error \
		"$VENV/bin/python" "$ROOT/scripts/convert_gguf_hf.py" --gguf "$MEMDECAY_LLAMA_MODEL" \
		--out "$MODEL_DIR" --check >"$DEPS/kvpress-convert.log" 2>&1 ||
		{ log "conversion failed; the end of $DEPS/kvpress-convert.log:"; tail -20 "$DEPS/kvpress-convert.log" >&2; exit 1; }
	tail -1 "$DEPS/kvpress-convert.log" >&2
	echo "$want_model" >"$MSTAMP"
fi

cat >"$DEPS/kvpress.env" <<ENV
MEMDECAY_KV_PYTHON=$VENV/bin/python
MEMDECAY_HF_MODEL=$MODEL_DIR
ENV
log "ready: $DEPS/kvpress.env"
