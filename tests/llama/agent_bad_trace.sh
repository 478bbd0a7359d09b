#!/bin/sh
# agent_bad_trace.sh AGENT MODEL — a malformed trace is refused before the model
# loads, with a message naming the file, the line and the column or key at fault.
set -u
AGENT=$1 MODEL=$2
DIR=$(mktemp -d "${TMPDIR:-/tmp}/md-bad-trace.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
fail() { echo "agent_bad_trace: $*" >&2; exit 1; }
check() { # FILE EXPECTED-SUBSTRING
	out=$("$AGENT" --model "$MODEL" --trace "$1" --policy memdecay --budget-tokens 0 --no-daemon 2>&1)
	rc=$?
	[ "$rc" -eq 1 ] || fail "$1: exit $rc, want 1 ($out)"
	case $out in *"$2"*) ;; *) fail "$1: '$out' lacks '$2'" ;; esac
	echo "ok: $out"
}
printf '{"role": "system", "content": "hi"}\n\n{"role": "user", "content": "a" "b"}\n' >"$DIR/syntax.jsonl"
check "$DIR/syntax.jsonl" "$DIR/syntax.jsonl:3: column "
printf '{"role": "user", "content": 7}\n' >"$DIR/type.jsonl"
check "$DIR/type.jsonl" "$DIR/type.jsonl:1: key \"content\" must be a string"
printf '{"role": "user", "content": "x"}\n{"probe": {"question": "q?"}}\n' >"$DIR/probe.jsonl"
check "$DIR/probe.jsonl" "$DIR/probe.jsonl:2: probe lacks key \"probe.answer\""
printf '{"content": "x"}\n' >"$DIR/role.jsonl"
check "$DIR/role.jsonl" "$DIR/role.jsonl:1: message lacks key \"role\""
