#!/bin/sh
# run.sh SCRIPT [ARGS] — runs a vLLM-plugin script in vLLM's venv (.deps/vllm.env,
# made by scripts/setup_vllm.sh), where the binding and the plugin are installed
# editable.  Exit 77 (skip) when that venv is not set up.
set -eu
ENV=${MEMDECAY_DEPS:?}/vllm.env
if [ ! -f "$ENV" ]; then
	echo "vllm: $ENV missing (run scripts/setup_vllm.sh); skipped" >&2
	exit 77
fi
. "$ENV"
export MEMDECAY_VLLM_MODEL
exec "$MEMDECAY_VLLM_PYTHON" "$@"
