#!/bin/sh
# e2e_reattach.sh BIN_DIR — two loadgen engines against a real memdecayd under
# a budget; the daemon is killed with SIGKILL mid-run and restarted.  Both
# engines must keep stepping (fail-open), reattach, and finish with evictions,
# no pinned/stale/double-freed page and occupancy at most budget + 1 page.
#
# The run is paced by events, not by the clock: the daemon is killed once
# both engines have had evictions from it, and the engines are stopped once
# both have had evictions from the restarted one.  --wait-ms 20000: an engine
# at budget + 1 waits for a live daemon's evictions however loaded the
# machine is (a dead daemon is noticed by its closed socket, not by this
# wait).  With the default 200 ms, ctest -j2 beside CPU hogs saw engines go up
# to 10 pages over budget, one page per wait that ran out, and engines that
# finished their steps before the restarted daemon was up.
set -eu
bin=$1
tmp=$(mktemp -d)
chmod 700 "$tmp"
sock="$tmp/d.sock"
dpid=
lg1=
lg2=
cleanup() {
	for p in $dpid $lg1 $lg2; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
start_daemon() {
	"$bin/memdecayd" --socket "$sock" --foreground >>"$tmp/d.log" 2>&1 &
	dpid=$!
	i=0
	while [ ! -S "$sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
}
# served: both engines attached to the daemon now running, and each sent an
# eviction by it (its counters start at 0); 20 s at most
served() {
	i=0
	while [ $i -lt 400 ]; do
		if "$bin/memdecayctl" --socket "$sock" --json stats 2>/dev/null | python3 -c '
import json, sys
e = {x["name"]: x for x in json.load(sys.stdin)["engines"]}
sys.exit(0 if all(n in e and e[n]["cmds_sent"] > 0 for n in ("e1", "e2")) else 1)'; then
			return 0
		fi
		sleep 0.05
		i=$((i + 1))
	done
	echo "$1: the engines were not attached and sent evictions within 20 s"
	cat "$tmp/d.log"
	exit 1
}
start_daemon
for e in 1 2; do
	"$bin/memdecay-loadgen" --socket "$sock" --engine-name "e$e" --seqs 4 --pages-per-seq 24 \
		--steps 0 --step-hz 1000 --budget-pages 30 --pattern heavy --seed $e --json \
		--wait-ms 20000 --dump-pages "$tmp/pages$e.json" >"$tmp/e$e.json" &
	eval "lg$e=\$!"
done
served "first daemon"
kill -9 "$dpid"
wait "$dpid" 2>/dev/null || true
rm -f "$sock"
sleep 0.4   # the engines step on their own meanwhile
start_daemon
served "restarted daemon"
sleep 0.3
kill -TERM "$lg1" "$lg2"
wait "$lg1"
wait "$lg2"
lg1=
lg2=
fail=0
for e in 1 2; do
	j=$(cat "$tmp/e$e.json")
	echo "$j"
	for want in '"pinned_evicted": 0,' '"stale_applied": 0,' '"double_freed": 0,' \
		'"attached": true'; do
		case "$j" in *"$want"*) ;; *) echo "e$e: missing $want"; fail=1 ;; esac
	done
	case "$j" in *'"over_budget_max_pages": 0,'* | *'"over_budget_max_pages": 1,'*) ;;
		*) echo "e$e: over budget"; fail=1 ;; esac
	case "$j" in *'"reattaches": 0,'*) echo "e$e: never reattached"; fail=1 ;; esac
	case "$j" in *'"evictions": 0,'*) echo "e$e: no evictions"; fail=1 ;; esac
	case "$j" in *'"local_evictions": 0,'*) echo "e$e: no local eviction while the daemon was down"; fail=1 ;; esac
	grep -q '"mirror_mismatches": 0' "$tmp/pages$e.json" || { echo "e$e: mirror mismatch"; fail=1; }
done
[ $fail -eq 0 ] || { cat "$tmp/d.log"; exit 1; }
echo "e2e_reattach: ok"
