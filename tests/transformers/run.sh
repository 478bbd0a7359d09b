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
# MEMDECAY_TEST_PIN=first|last (ctest sets it): torch on one core, the machine's
# first or last, with one thread: a model lane (docs/testing.md, "Two model
# lanes").  On a one-core machine, or without taskset, nothing is pinned.
case ${MEMDECAY_TEST_PIN:-} in
first | last)
	n=$(nproc 2>/dev/null || echo 1)
	if [ "$n" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
		core=0
		[ "$MEMDECAY_TEST_PIN" = last ] && core=$((n - 1))
		export MEMDECAY_TORCH_THREADS=1 OMP_NUM_THREADS=1
		exec taskset -c "$core" "$MEMDECAY_KV_PYTHON" "$@"
	fi
	;;
esac
exec "$MEMDECAY_KV_PYTHON" "$@"
