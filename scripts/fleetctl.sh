#!/usr/bin/env bash
# fleetctl.sh FLEET_FILE COMMAND [ARGS…] — one memdecayctl command on every
# memdecayd of a fleet (docs/deploy.md, "Tuning every node at once").
#
# FLEET_FILE lists one node a line: NAME SOCKET [SSH_TARGET]
#   NAME        a label for the output
#   SOCKET      the daemon's control socket on that node
#   SSH_TARGET  where to run memdecayctl (user@host); none: on this machine
# Blank lines and lines starting with # are skipped.  Each node's answer is
# printed under its name; the exit status is 0 when every node accepted the
# command, 1 when any refused or could not be reached (each named on stderr),
# 2 for a bad fleet file.  MEMDECAYCTL names the program (default: memdecayctl
# on PATH).
set -u
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
case ${1:-} in -h | --help) usage; exit 0 ;; esac
if [ $# -lt 2 ]; then
	usage >&2
	exit 2
fi
fleet=$1
shift
cmd=("$@")
ctl=${MEMDECAYCTL:-memdecayctl}
[ -r "$fleet" ] || { echo "fleetctl: cannot read fleet file $fleet" >&2; exit 2; }

failed=0 nodes=0 lineno=0
while IFS= read -r line || [ -n "$line" ]; do
	lineno=$((lineno + 1))
	read -r -a f <<<"$line"
	[ ${#f[@]} -eq 0 ] && continue
	case ${f[0]} in '#'*) continue ;; esac
	if [ ${#f[@]} -lt 2 ] || [ ${#f[@]} -gt 3 ]; then
		echo "fleetctl: $fleet:$lineno: want NAME SOCKET [SSH_TARGET], got: $line" >&2
		exit 2
	fi
	name=${f[0]} sock=${f[1]} target=${f[2]:-}
	nodes=$((nodes + 1))
	echo "== $name"
	if [ -n "$target" ]; then
		ssh -o BatchMode=yes "$target" "$ctl" --socket "$sock" "${cmd[@]}" </dev/null
	else
		"$ctl" --socket "$sock" "${cmd[@]}" </dev/null
	fi
	rc=$?
	if [ $rc -ne 0 ]; then
		echo "fleetctl: $name ($sock${target:+ on $target}): memdecayctl exited $rc" >&2
		failed=$((failed + 1))
	fi
done <"$fleet"
[ $nodes -gt 0 ] || { echo "fleetctl: $fleet lists no node" >&2; exit 2; }
[ $failed -eq 0 ]
