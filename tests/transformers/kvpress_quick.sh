#!/bin/sh
# kvpress_quick.sh — the kvpress comparison's quick mode (bench/kvpress, docs/kvpress.md)
# on the real parts: batched probe scoring checked against one probe at a
# time, then every row (7 kvpress presses, 7 memdecayd rows) in both modes on
# one trace at a 50% budget, and the report, which fails if a row, mode or
# budget has no scored result.  Output in a temporary directory, removed on
# exit; the daemons are the runner's own (private sockets, killed with it).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${MEMDECAY_SRC:?}
[ -f "${MEMDECAY_DEPS:?}/kvpress.env" ] || { echo "kvpress: no venv (scripts/setup_kvpress.sh); skipped" >&2; exit 77; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/kvpress-quick.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
sh "$HERE/run.sh" "$SRC/bench/kvpress/run.py" --quick --out "$OUT" --check-batch
sh "$HERE/run.sh" "$SRC/bench/kvpress/run.py" --quick --out "$OUT"
sh "$HERE/run.sh" "$SRC/bench/kvpress/report.py" "$OUT" --expect-rows >"$OUT/report.md"
grep -c '^| ' "$OUT/report.md" | sed 's/^/kvpress quick: table rows /'
