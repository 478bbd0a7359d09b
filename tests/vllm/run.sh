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
# MEMDECAY_TEST_PIN=last (ctest sets it for a test in the last core's model lane,
# docs/testing.md): vLLM's CPU worker binds its threads to the machine's last core
# instead of core 0, where it binds by itself.
if [ "${MEMDECAY_TEST_PIN:-}" = last ]; then
	n=$(nproc 2>/dev/null || echo 1)
	[ "$n" -ge 2 ] && export VLLM_CPU_OMP_THREADS_BIND=$((n - 1))
fi
exec "$MEMDECAY_VLLM_PYTHON" "$@"
