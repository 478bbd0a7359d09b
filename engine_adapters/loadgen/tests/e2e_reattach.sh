#!/bin/sh
# e2e_reattach.sh BIN_DIR — two loadgen engines against a real memdecayd under
# a budget; the daemon is killed with SIGKILL mid-run and restarted.  Both
# engines must keep stepping (fail-open), reattach, and finish with evictions,
# no pinned/stale/double-freed page and occupancy at most budget + 1 page.
set -eu
bin=$1
tmp=$(mktemp -d)
chmod 700 "$tmp"
sock="$tmp/d.sock"
dpid=
cleanup() { [ -n "$dpid" ] && kill "$dpid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
start_daemon() {
	"$bin/memdecayd" --socket "$sock" --foreground >>"$tmp/d.log" 2>&1 &
	dpid=$!
	i=0
	while [ ! -S "$sock" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
}
start_daemon
for e in 1 2; do
	"$bin/memdecay-loadgen" --socket "$sock" --engine-name "e$e" --seqs 4 --pages-per-seq 24 \
		--steps 2500 --step-hz 1000 --budget-pages 30 --pattern heavy --seed $e --json \
		--dump-pages "$tmp/pages$e.json" >"$tmp/e$e.json" &
	eval "lg$e=\$!"
done
sleep 0.8
kill -9 "$dpid"
wait "$dpid" 2>/dev/null || true
rm -f "$sock"
sleep 0.4
start_daemon
wait "$lg1"
wait "$lg2"
fail=0
for e in 1 2; do
	j=$(cat "$tmp/e$e.json")
	echo "$j"
	for want in '"pinned_evicted": 0,' '"stale_applied": 0,' '"double_freed": 0,' \
		'"steps": 2500,' '"attached": true'; do
		case "$j" in *"$want"*) ;; *) echo "e$e: missing $want"; fail=1 ;; esac
	done
	case "$j" in *'"over_budget_max_pages": 0,'* | *'"over_budget_max_pages": 1,'*) ;;
		*) echo "e$e: over budget"; fail=1 ;; esac
	case "$j" in *'"reattaches": 0,'*) echo "e$e: never reattached"; fail=1 ;; esac
	case "$j" in *'"evictions": 0,'*) echo "e$e: no evictions"; fail=1 ;; esac
	grep -q '"mirror_mismatches": 0' "$tmp/pages$e.json" || { echo "e$e: mirror mismatch"; fail=1; }
done
[ $fail -eq 0 ] || { cat "$tmp/d.log"; exit 1; }
echo "e2e_reattach: ok"
