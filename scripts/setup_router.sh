#!/usr/bin/env bash
# setup_router.sh — installs vllm-router, the router in front of vLLM replicas
# (docs/deploy.md), into its own venv, an entry of the per-user cache
# (scripts/cache.sh) linked as .deps/vllm-router (so
# .deps/vllm-router/bin/vllm-router runs it).  A prebuilt manylinux wheel for
# generic x86-64: nothing is compiled here.  Idempotent: skipped when the pinned
# version answers --help.
set -euo pipefail

ROUTER_VERSION=0.1.17

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOCAL=${MEMDECAY_DEPS:-$ROOT/.deps}
PY=${PYTHON:-python3}
mkdir -p "$LOCAL"
t0=$(date +%s)
# shellcheck source=scripts/cache.sh
. "$ROOT/scripts/cache.sh"
RECIPE=1 # raise it when this script installs differently
DEPS=$(md_cache_entry vllm-router "recipe $RECIPE" "$("$PY" -c 'import sys; print(sys.version, sys.executable)')" \
	"vllm-router $ROUTER_VERSION")
md_cache_lock "$DEPS"
STATE=$(md_cache_state "$DEPS")
VENV=$DEPS/venv
LOG=$DEPS/vllm-router-pip.log

log() { printf 'setup_router: %s\n' "$*" >&2; }

installed() {
	local info
	info=$("$VENV/bin/python" -m pip show vllm-router 2>/dev/null) || return 1
	grep -qx "Version: $ROUTER_VERSION" <<<"$info"
}
if ! { [ -x "$VENV/bin/vllm-router" ] && installed && "$VENV/bin/vllm-router" --help >/dev/null 2>&1; }; then
	log "installing vllm-router==$ROUTER_VERSION into $VENV"
	[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
	"$VENV/bin/python" -m pip install --no-cache-dir "vllm-router==$ROUTER_VERSION" >>"$LOG" 2>&1 ||
		{ log "pip install failed, see $LOG"; exit 1; }
	"$VENV/bin/vllm-router" --help >/dev/null 2>&1 ||
		{ log "vllm-router does not start, see $LOG"; exit 1; }
fi
touch "$DEPS/.complete"
md_link "$VENV" "$LOCAL/vllm-router"
md_setup_record "$LOCAL" router "$STATE" $(($(date +%s) - t0)) "$DEPS"
log "vllm-router $ROUTER_VERSION ready: $LOCAL/vllm-router/bin/vllm-router (cache $STATE)"
