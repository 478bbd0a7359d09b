#!/bin/sh
# run033.sh SCRIPT [ARGS] — runs a vLLM-plugin test in the venv of vLLM 0.33's
# engine core (.deps/vllm033.env, made by scripts/setup_vllm033.sh: 0.33.0's
# Python sources over the CPU stack of scripts/setup_vllm.sh).  Exit 77 (skip),
# saying why, when that venv is not set up.
set -eu
ENV=${MEMDECAY_DEPS:?}/vllm033.env
if [ ! -f "$ENV" ]; then
	echo "vllm033: $ENV missing (run scripts/setup_vllm033.sh after scripts/setup_vllm.sh); skipped" >&2
	exit 77
fi
. "$ENV"
export MEMDECAY_VLLM_MODEL
exec "$MEMDECAY_VLLM_PYTHON" "$@"
