#!/usr/bin/env bash
# agent_fail_open.sh — memdecay-agent end to end: (1) with no daemon reachable
# and none startable it runs the whole trace fail-open; (2) with its own daemon
# killed mid-trace it finishes the run, says so once, and reports a detach.
#   agent_fail_open.sh AGENT MODEL TRACE
set -euo pipefail
AGENT=$1 MODEL=$2 TRACE=$3
T=$(mktemp -d)
DPID="" KPID=""
cleanup() {
	for p in $KPID $DPID; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# a short trace: the first messages and one probe
head -6 "$TRACE" >"$T/trace.jsonl"
echo '{"probe": {"question": "What is the customer account code?", "answer": "NW-4471", "region": "system"}}' >>"$T/trace.jsonl"

# 1. no daemon at the socket and no memdecayd to start
"$AGENT" --model "$MODEL" --trace "$T/trace.jsonl" --policy memdecay --budget-tokens 64 \
	--socket "$T/none.sock" --daemon /nonexistent/memdecayd --json >"$T/1.json" 2>"$T/1.err" ||
	fail "agent failed without a daemon: $(cat "$T/1.err")"
grep -q '"daemon_attached": false' "$T/1.json" || fail "attached without a daemon"
grep -q '"evictions": 0,' "$T/1.json" || fail "evictions without a daemon"
grep -q '"probes": \[{' "$T/1.json" || fail "no probe result"
[ "$(grep -c 'decoding continues without evictions' "$T/1.err")" = 1 ] || fail "fail-open notice not said exactly once"

# 2. a daemon that dies mid-trace
D=$(dirname "$AGENT")/memdecayd
if [ -x "$D" ]; then
	"$D" --socket "$T/d.sock" --foreground --log-level error &
	DPID=$!
	for _ in $(seq 100); do [ -S "$T/d.sock" ] && break; sleep 0.05; done
	( sleep 5; kill -9 "$DPID" ) &
	KPID=$!
	"$AGENT" --model "$MODEL" --trace "$TRACE" --policy recency --budget-tokens 128 \
		--socket "$T/d.sock" --json >"$T/2.json" 2>"$T/2.err" || fail "agent died with the daemon: $(tail -3 "$T/2.err")"
	wait "$KPID" || true
	wait "$DPID" 2>/dev/null || true
	grep -q '"detaches": 1,' "$T/2.json" || fail "no detach reported: $(head -c 600 "$T/2.json")"
	[ "$(grep -c 'decoding continues without evictions' "$T/2.err")" = 1 ] || fail "notice not once"
	grep -q '"evictions": [1-9]' "$T/2.json" || fail "no evictions before the daemon died"
fi
echo "agent_fail_open: ok"
