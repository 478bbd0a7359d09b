#!/usr/bin/env bash
# calib_suite.sh SCENARIO CUDA BINDIR — calibration against a real memdecayd.
#   apply      live statistics: `calibrate --apply` changes λ (seen in `get`)
#   from       the journal replayed offline equals the live estimate; --from
#              --apply sets λ on another daemon
#   cuda_hello HELLO stats_transport=cuda: refused without CUDA (CUDA=nocuda),
#              a clean no-device error from a CUDA build without a GPU
# Each run: its own daemon on a socket in a fresh mktemp -d directory
# (MD_KEEP=1 keeps the directory for a post-mortem).
set -u
SCENARIO=$1
CUDA=$2
BIN=$3
MD_TAG="calib/$SCENARIO"
MD_LOG_TAIL=30
MD_DAEMON_ARGS=()
MD_REAP=1
MD_KEEP_OK=1
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
md_setup /tmp/md-calib-XXXXXX

stop_daemon() {
	kill -TERM "$DPID"
	wait "$DPID" || fail "memdecayd did not stop cleanly"
	DPID=
}

loadgen() { # runs in the foreground to completion
	"$BIN/memdecay-loadgen" --socket "$SOCK" --json --seqs 4 --pages-per-seq 12 \
		--pattern heavy "$@" >"$D/lg.json" 2>"$D/lg.err" || fail "loadgen failed: $(cat "$D/lg.err")"
}

# lambdas FILE: "region=value" lines from `get --json`
lambdas() {
	python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))
for k in sorted(o):
    if k.endswith(".lambda"): print(k, o[k])' "$1"
}

case $SCENARIO in
apply)
	start_daemon --calib-grace-steps 16
	"$BIN/memdecay-loadgen" --socket "$SOCK" --json --seqs 4 --pages-per-seq 12 --pattern heavy \
		--steps 3000 --step-hz 3000 --hold-ms 20000 >"$D/lg.json" 2>"$D/lg.err" &
	PIDS+=($!)
	# live: the engine is still attached; wait until a region can be applied
	ok=
	for _ in $(seq 200); do
		ctl --json calibrate >"$D/cal.json" 2>/dev/null &&
			python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); sys.exit(0 if any(r["status"]=="ok" for r in o["regions"]) else 1)' "$D/cal.json" &&
			{ ok=1; break; }
		sleep 0.1
	done
	[ -n "$ok" ] || fail "no region reached enough events: $(cat "$D/cal.json")"
	ctl --json engines | grep -q '"name"' || fail "the engine is not attached any more"
	ctl calibrate >"$D/cal.txt" || fail "calibrate (text) failed"
	grep -q "^REGION" "$D/cal.txt" || fail "no table header: $(cat "$D/cal.txt")"
	grep -q "live memdecayd (1 engine attached)" "$D/cal.txt" || fail "source line: $(head -1 "$D/cal.txt")"
	ctl --json get >"$D/before.json" || fail "get"
	ctl --json calibrate --apply >"$D/applied.json" || fail "calibrate --apply failed"
	ctl --json get >"$D/after.json" || fail "get"
	python3 - "$D/before.json" "$D/after.json" "$D/applied.json" <<'PYEOF' || fail "lambda check"
import json, sys
before, after, rep = (json.load(open(p)) for p in sys.argv[1:])
applied = [r for r in rep["regions"] if r["applied"]]
assert applied and rep["applied"] == len(applied), rep
changed = 0
for r in rep["regions"]:
    key = "memdecay.region.%s.lambda" % r["region"]
    if r["applied"]:
        assert r["status"] == "applied", r
        # the value set is the estimate the report printed
        assert abs(after[key] - r["lambda"]) <= 1e-5 * max(1, r["lambda"]), (key, after[key], r)
        assert r["ci_low"] <= r["half_life"] <= r["ci_high"], r
        changed += after[key] != before[key]
    elif key in before:
        assert after[key] == before[key], (key, "changed without being applied")
        assert r["status"] != "applied"
assert changed >= 1, "no lambda changed"
print("applied", [(r["region"], r["half_life"], r["lambda"]) for r in applied])
PYEOF
	grep -q "control: calibrate set memdecay.region" "$D/daemon.log" || fail "no log line for the applied values"
	;;
from)
	start_daemon --journal "$D/stats.jrnl" --calib-grace-steps 16
	loadgen --steps 2500 --step-hz 2500  # paced: an unpaced loadgen overruns the ring and drops attention
	ctl --json calibrate >"$D/live.json" || fail "live calibrate"
	stop_daemon
	grep -q "journal closed" "$D/daemon.log" || fail "no journal close line"
	[ -s "$D/stats.jrnl" ] || fail "empty journal"
	# offline: no daemon is running now
	"$BIN/memdecayctl" --socket "$SOCK" calibrate --from "$D/stats.jrnl" --json >"$D/off.json" ||
		fail "calibrate --from failed"
	python3 - "$D/live.json" "$D/off.json" <<'PYEOF' 2>"$D/py.err" || fail "live and offline disagree: $(tail -1 "$D/py.err")"
import json, sys
live, off = (json.load(open(p)) for p in sys.argv[1:])
L = {r["region"]: r for r in live["regions"]}
O = {r["region"]: r for r in off["regions"]}
assert off["grace_steps"] == 16, off
assert any(r["events"] > 0 for r in O.values()), off
for k, r in L.items():
    for f in ("samples", "events", "censored"):
        assert O[k][f] == r[f], (k, f, O[k][f], r[f])
PYEOF
	"$BIN/memdecayctl" calibrate --from "$D/stats.jrnl" --grace-steps 4 >"$D/off4.txt" ||
		fail "calibrate --from --grace-steps"
	grep -q "grace 4 steps" "$D/off4.txt" || fail "grace not used: $(head -1 "$D/off4.txt")"
	"$BIN/memdecayctl" calibrate --from "$D/nonexistent" 2>"$D/err.txt"
	[ $? = 1 ] || fail "a missing journal must exit 1"
	grep -q "nonexistent" "$D/err.txt" || fail "error does not name the file"
	# --from --apply: the offline estimate set on a (new) live daemon
	start_daemon
	ctl --json get >"$D/before.json"
	ctl calibrate --from "$D/stats.jrnl" --apply >"$D/offapply.txt" || fail "--from --apply"
	grep -q "applied [1-9]" "$D/offapply.txt" || fail "nothing applied: $(cat "$D/offapply.txt")"
	ctl --json get >"$D/after.json"
	[ "$(lambdas "$D/before.json")" != "$(lambdas "$D/after.json")" ] || fail "λ unchanged after --from --apply"
	;;
cuda_hello)
	start_daemon
	python3 - "$SOCK" "$CUDA" <<'PYEOF' || fail "HELLO stats_transport checks"
import socket, subprocess, sys
path, cuda = sys.argv[1], sys.argv[2]
def hello(extra):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(("HELLO abi=1.1 name=cu page_tokens=16 page_capacity=64 max_seqs=2 %s\n" % extra).encode())
    s.settimeout(5)
    line = s.recv(4096).decode()
    s.close()
    return line.strip()
r = hello("stats_transport=gpu")
assert r.startswith("ERR") and "want host or cuda" in r, r
r = hello("stats_transport=host")
assert r.startswith("OK engine_id="), r
r = hello("stats_transport=cuda")
if cuda == "nocuda":
    want = "ERR memdecayd was built without CUDA; stats_transport=cuda needs MEMDECAY_CUDA=ON"
    assert r == want, r
else:
    try:
        gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    except OSError:
        gpu = False
    if gpu:
        assert r.startswith("OK engine_id="), r
    else:
        assert r.startswith("ERR stats_transport=cuda: no usable CUDA device: cudaGetDeviceCount"), r
print(r)
PYEOF
	grep -q "attach refused.*stats_transport=cuda" "$D/daemon.log" || [ "$CUDA" = cuda ] ||
		fail "the refusal is not logged"
	ctl ping >/dev/null || fail "daemon not answering after the refusals"
	;;
*) fail "unknown scenario" ;;
esac
echo "PASS [calib/$SCENARIO]"
