#!/bin/bash
# man.sh MAN_DIR BIN_DIR OPERATIONS_MD — every page renders with `man -l`
# and `groff -ww` stays silent (no warnings of any kind); every option
# `memdecayd --help` and `memdecayctl --help` list appears in its man page
# and in docs/operations.md, so the three cannot drift apart.
set -u
dir=$1 bin=$2 ops=$3
fail() { echo "FAIL [ops_man]: $*" >&2; exit 1; }
n=0
for page in "$dir"/*.[1-8]; do
	w=$(groff -man -ww -z "$page" 2>&1) || fail "groff $page"
	[ -z "$w" ] || fail "groff -ww $page: $w"
	if command -v man >/dev/null; then
		out=$(MANROFFOPT=-ww MANWIDTH=80 man -l "$page" 2>&1 >/dev/null)
		[ -z "$out" ] || fail "man -l $page: $out"
		MANWIDTH=80 man -l "$page" 2>/dev/null | grep -q '^NAME' ||
			fail "man -l $page rendered no NAME section"
	fi
	n=$((n + 1))
done
[ $n = 3 ] || fail "$n pages in $dir, want 3"
for prog in memdecayd:memdecayd.8 memdecayctl:memdecayctl.1; do
	exe=${prog%%:*} page=$dir/${prog#*:}
	for opt in $("$bin/$exe" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
		grep -qF -- "$(sed 's/-/\\-/g' <<<"$opt")" "$page" || fail "$exe $opt not in $page"
		grep -qE -- "(^|[^a-z-])$opt([^a-z-]|\$)" "$ops" || fail "$exe $opt not in $ops"
	done
done
echo "ops_man: ok: $n pages, no warnings under groff -ww, every --help option in the pages and $ops"
