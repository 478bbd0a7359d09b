#!/bin/sh
# run.sh SCRIPT [ARGS] — runs a vLLM-plugin script in vLLM's venv (.deps/vllm.env,
# made by scripts/setup_vllm.sh), where the binding and the plugin are installed
# editable.  MEMDECAY_VLLM_SETUP=vllm033 picks vLLM 0.33's engine-core venv instead
# (.deps/vllm033.env, scripts/setup_vllm033.sh: 0.33.0's Python sources over the
# same CPU stack).  Exit 77 (skip), saying why, when that venv is not set up.
set -eu
SETUP=${MEMDECAY_VLLM_SETUP:-vllm}
ENV=${MEMDECAY_DEPS:?}/$SETUP.env
if [ ! -f "$ENV" ]; then
	how="scripts/setup_vllm.sh"
	[ "$SETUP" = vllm ] || how="$how, then scripts/setup_$SETUP.sh"
	echo "$SETUP: $ENV missing (run $how); skipped" >&2
	exit 77
fi
. "$ENV"
export MEMDECAY_VLLM_MODEL
# MEMDECAY_TEST_PIN=last (ctest sets it for a test in the last core's model lane,
# docs/testing.md): vLLM's CPU worker binds its threads to the machine's last core
# instead of core 0, where it binds by itself.
if [ "${MEMDECAY_TEST_PIN:-}" = last ]; then
	n=$(nproc 2>/dev/null || echo 1)
	[ "$n" -ge 2 ] && export VLLM_CPU_OMP_THREADS_BIND=$((n - 1))
fi
exec "$MEMDECAY_VLLM_PYTHON" "$@"
