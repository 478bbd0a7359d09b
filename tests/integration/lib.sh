# lib.sh — the preamble the integration suites share (sourced, not run): a
# fresh mktemp -d run directory holding the daemon's socket, an EXIT trap that
# kills what the run started, fail (with the daemon log's tail), ctl and
# start_daemon.  The suite sets BIN and these, then calls md_setup TEMPLATE:
#   MD_TAG          the label of FAIL lines
#   MD_LOG_TAIL     how many daemon log lines fail prints
#   MD_DAEMON_ARGS  (array) memdecayd arguments of every start_daemon, before
#                   the call's own
#   MD_REAP         non-empty: cleanup waits for the processes it killed
#   MD_KEEP_OK      non-empty: MD_KEEP=1 in the environment keeps the directory
# After md_setup: D (the directory), SOCK, DPID (the daemon, empty when none)
# and PIDS (other background processes, killed by cleanup).
MD_TAG=${MD_TAG:-integration}
MD_LOG_TAIL=${MD_LOG_TAIL:-40}
MD_REAP=${MD_REAP:-}
MD_KEEP_OK=${MD_KEEP_OK:-}
[ -n "${MD_DAEMON_ARGS+set}" ] || MD_DAEMON_ARGS=()

md_setup() { # TEMPLATE: mktemp -d template of the run directory
	D=$(mktemp -d "$1")
	SOCK=$D/memdecayd.sock
	DPID=
	PIDS=()
	trap cleanup EXIT
}

cleanup() {
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	[ -n "$DPID" ] && kill -9 "$DPID" 2>/dev/null
	[ -z "$MD_REAP" ] || wait 2>/dev/null
	[ -n "$MD_KEEP_OK" ] && [ -n "${MD_KEEP:-}" ] || rm -rf "$D"
}

fail() {
	echo "FAIL [$MD_TAG]: $*" >&2
	if [ -f "$D/daemon.log" ]; then
		echo "--- daemon log (tail) ---" >&2
		tail -n "$MD_LOG_TAIL" "$D/daemon.log" >&2
	fi
	exit 1
}

ctl() { "$BIN/memdecayctl" --socket "$SOCK" "$@"; }

start_daemon() {
	"$BIN/memdecayd" --socket "$SOCK" --foreground "${MD_DAEMON_ARGS[@]}" --log-level info "$@" \
		2>>"$D/daemon.log" &
	DPID=$!
	for _ in $(seq 100); do
		ctl ping >/dev/null 2>&1 && return 0
		kill -0 "$DPID" 2>/dev/null || fail "memdecayd exited at start"
		sleep 0.05
	done
	fail "memdecayd did not answer on $SOCK"
}
