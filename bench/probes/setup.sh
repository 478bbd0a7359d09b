#!/bin/sh
# setup.sh — installs what the probe report's plots need (matplotlib, pinned) into .deps/venv.
# The benchmark itself is Python 3 standard library only; without matplotlib the report is still
# written, without its plots.  Idempotent: nothing is done when the pinned version is there.
set -eu
MATPLOTLIB_VERSION=3.9.2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEPS=${MEMDECAY_DEPS:-$ROOT/.deps}
VENV=$DEPS/venv
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if "$VENV/bin/python" -m pip show matplotlib 2>/dev/null | grep -qx "Version: $MATPLOTLIB_VERSION"; then
	echo "probes setup: matplotlib $MATPLOTLIB_VERSION already installed" >&2
	exit 0
fi
echo "probes setup: pip installing matplotlib==$MATPLOTLIB_VERSION into $VENV" >&2
"$VENV/bin/python" -m pip install --quiet "matplotlib==$MATPLOTLIB_VERSION" >>"$DEPS/pip-probes.log" 2>&1 ||
	{ echo "probes setup: pip install failed, see $DEPS/pip-probes.log" >&2; exit 1; }
