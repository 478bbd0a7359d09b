#!/usr/bin/env bash
# setup_router.sh — installs vllm-router, the router in front of vLLM replicas
# (docs/deploy.md), into its own venv: .deps/vllm-router (so
# .deps/vllm-router/bin/vllm-router runs it).  A prebuilt manylinux wheel for
# generic x86-64: nothing is compiled here.  Idempotent: skipped when the pinned
# version answers --help.
set -euo pipefail

ROUTER_VERSION=0.1.17

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=${MEMDECAY_DEPS:-$ROOT/.deps}
VENV=$DEPS/vllm-router
PY=${PYTHON:-python3}
LOG=$DEPS/vllm-router-pip.log
mkdir -p "$DEPS"

log() { printf 'setup_router: %s\n' "$*" >&2; }

installed() {
	local info
	info=$("$VENV/bin/python" -m pip show vllm-router 2>/dev/null) || return 1
	grep -qx "Version: $ROUTER_VERSION" <<<"$info"
}
if [ -x "$VENV/bin/vllm-router" ] && installed && "$VENV/bin/vllm-router" --help >/dev/null 2>&1; then
	exit 0
fi
log "installing vllm-router==$ROUTER_VERSION into $VENV"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --no-cache-dir "vllm-router==$ROUTER_VERSION" >>"$LOG" 2>&1 ||
	{ log "pip install failed, see $LOG"; exit 1; }
"$VENV/bin/vllm-router" --help >/dev/null 2>&1 ||
	{ log "vllm-router does not start, see $LOG"; exit 1; }
log "vllm-router $ROUTER_VERSION ready: $VENV/bin/vllm-router"
