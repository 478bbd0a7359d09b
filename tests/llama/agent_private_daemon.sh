#!/usr/bin/env bash
# agent_private_daemon.sh — the private memdecayd that memdecay-agent starts
# never outlives it: the agent killed with SIGKILL mid-trace, or dying of a
# fatal signal (SIGSEGV), takes its daemon along within 2 s.
#   agent_private_daemon.sh AGENT MODEL TRACE
set -euo pipefail
AGENT=$1 MODEL=$2 TRACE=$3
T=$(mktemp -d)
APID="" DPID=""
cleanup() {
	for p in $APID $DPID; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

now_ms() { date +%s%3N; }

# kill_mid_trace SIGNAL: start the agent with no daemon at --socket (so it
# starts its own), wait until that daemon answers and the trace is being fed,
# send SIGNAL to the agent, and time how long the daemon lives on.
kill_mid_trace() {
	local sig=$1
	XDG_RUNTIME_DIR=$T "$AGENT" --model "$MODEL" --trace "$TRACE" --policy memdecay \
		--budget-tokens 256 --socket "$T/none.sock" --quiet --json >"$T/out.json" 2>"$T/err.txt" &
	APID=$!
	DPID=""
	for _ in $(seq 600); do
		DPID=$(pgrep -P "$APID" -x memdecayd || true)
		[ -n "$DPID" ] && compgen -G "$T/memdecay-agent-*/memdecayd.sock" >/dev/null && break
		kill -0 "$APID" 2>/dev/null || fail "agent exited before its daemon started: $(tail -3 "$T/err.txt")"
		sleep 0.05
	done
	[ -n "$DPID" ] || fail "no private memdecayd under agent $APID"
	sleep 1 # mid-trace: the daemon is serving the agent
	kill -0 "$APID" 2>/dev/null || fail "agent finished before it could be killed; use a longer trace"
	local t0 t1
	t0=$(now_ms)
	kill "-$sig" "$APID"
	wait "$APID" 2>/dev/null || true
	APID=""
	while kill -0 "$DPID" 2>/dev/null && [ $(($(now_ms) - t0)) -lt 5000 ]; do
		# a zombie whose parent is gone is reaped by init; count it as gone
		[ "$(ps -o stat= -p "$DPID" 2>/dev/null | cut -c1)" = Z ] && break
		sleep 0.02
	done
	t1=$(now_ms)
	if kill -0 "$DPID" 2>/dev/null && [ "$(ps -o stat= -p "$DPID" | cut -c1)" != Z ]; then
		fail "private memdecayd $DPID still alive $((t1 - t0)) ms after SIG$sig to the agent"
	fi
	echo "agent SIG$sig: private memdecayd gone after $((t1 - t0)) ms (bound 2000 ms)"
	[ $((t1 - t0)) -le 2000 ] || fail "private memdecayd lived $((t1 - t0)) ms after SIG$sig (bound 2000 ms)"
	DPID=""
}

kill_mid_trace KILL
kill_mid_trace SEGV
echo "agent_private_daemon: ok"
