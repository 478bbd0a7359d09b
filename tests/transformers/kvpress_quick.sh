#!/bin/sh
# kvpress_quick.sh — the kvpress comparison's quick mode (bench/kvpress, docs/kvpress.md)
# on the real parts: batched probe scoring checked against one probe at a
# time, then every row of the fair set (7 kvpress presses plain, pinned, and
# pinned and paged; memdecayd's rows pinned and unpinned) in both modes on one
# trace at a 50% budget, and the fair report, which fails if a row, mode or
# budget has no scored result; then the recall rows (memdecayd's row with a host
# tier and the ArkVale-style row) at 50%, beside the fair rows, and their
# report, which fails the
# same way.  Output in a temporary directory, removed on
# exit; the daemons are the runner's own (private sockets, killed with it).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${MEMDECAY_SRC:?}
[ -f "${MEMDECAY_DEPS:?}/kvpress.env" ] || { echo "kvpress: no venv (scripts/setup_kvpress.sh); skipped" >&2; exit 77; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/kvpress-quick.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
sh "$HERE/run.sh" "$SRC/bench/kvpress/run.py" --quick --out "$OUT" --check-batch
sh "$HERE/run.sh" "$SRC/bench/kvpress/run.py" --quick --out "$OUT"
sh "$HERE/run.sh" "$SRC/bench/kvpress/fair_report.py" "$OUT" --expect-rows >"$OUT/report.md"
sh "$HERE/run.sh" "$SRC/bench/kvpress/fair_report.py" "$OUT" --mode oneshot --expect-rows >>"$OUT/report.md"
# the recall comparison's rows (host tier, questions through the engine) beside the press
sh "$HERE/run.sh" "$SRC/bench/kvpress/run.py" --quick --out "$OUT" --modes online --budgets 0.5 \
	--rows recall
sh "$HERE/run.sh" "$SRC/bench/kvpress/recall_report.py" "$OUT" --expect-rows >>"$OUT/report.md"
grep -c '^| ' "$OUT/report.md" | sed 's/^/kvpress quick: table rows /'
