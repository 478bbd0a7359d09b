#!/bin/sh
# run.sh SCRIPT [ARGS] — runs a transformers-adapter script in the kvpress venv
# (.deps/kvpress.env, made by scripts/setup_kvpress.sh) with the Python binding
# and the adapter on PYTHONPATH.  Exit 77 (skip) when the venv is not set up.
set -eu
ENV=${MEMDECAY_DEPS:?}/kvpress.env
if [ ! -f "$ENV" ]; then
	echo "transformers: $ENV missing (run scripts/setup_kvpress.sh); skipped" >&2
	exit 77
fi
. "$ENV"
export MEMDECAY_HF_MODEL
# the Gemma 3 model, when setup_kvpress.sh made it (tests that need it skip without)
if [ -n "${MEMDECAY_GEMMA_HF_MODEL:-}" ]; then
	export MEMDECAY_GEMMA_HF_MODEL
fi
SRC=${MEMDECAY_SRC:?}
PYTHONPATH=$SRC/engine_adapters/python:$SRC/engine_adapters/transformers${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH
exec "$MEMDECAY_KV_PYTHON" "$@"
