#!/usr/bin/env bash
# bench/llama_overhead/compare_builds.sh — decode tokens/s of two or more builds of
# llama.cpp's libraries on the overhead bench, in one run:
#   compare_builds.sh [--build DIR] [--passes N] NAME=LIBDIR NAME=LIBDIR ... [-- bench options]
# Each pass runs bench/llama_overhead/run.sh once per build, the order rotating
# pass by pass so that load on a shared machine hits every build alike; a build
# is chosen by putting its LIBDIR first on LD_LIBRARY_PATH (the bench's RUNPATH
# yields to it).  Prints JSON (per build: plain and adapter tokens/s, median and
# min/max over passes; per pass: each build's plain tokens/s over the first's)
# and writes it to bench/results/llama_builds.json (MEMDECAY_BENCH_OUT=FILE
# writes elsewhere).  Default bench options: --steps 64 --rounds 2.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/build PASSES=5
NAMES=() DIRS=()
while [ $# -gt 0 ]; do
	case $1 in
	--build) BUILD=$2; shift 2 ;;
	--passes) PASSES=$2; shift 2 ;;
	--help | -h) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	--) shift; break ;;
	*=*) NAMES+=("${1%%=*}"); DIRS+=("${1#*=}"); shift ;;
	*) echo "compare_builds: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
[ ${#NAMES[@]} -ge 2 ] || { echo "compare_builds: give at least two NAME=LIBDIR builds" >&2; exit 2; }
for d in "${DIRS[@]}"; do
	[ -f "$d/libllama.so" ] || { echo "compare_builds: no libllama.so in $d" >&2; exit 1; }
done
OPTS=("$@")
[ ${#OPTS[@]} -gt 0 ] || OPTS=(--steps 64 --rounds 2)
OUTF=${MEMDECAY_BENCH_OUT:-$ROOT/bench/results/llama_builds.json}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

n=${#NAMES[@]}
for ((p = 0; p < PASSES; p++)); do
	for ((k = 0; k < n; k++)); do
		i=$(((p + k) % n))
		echo "compare_builds: pass $((p + 1))/$PASSES, ${NAMES[$i]}" >&2
		LD_LIBRARY_PATH="${DIRS[$i]}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
			MEMDECAY_BENCH_OUT="$TMP/$p.${NAMES[$i]}.json" \
			bash "$ROOT/bench/llama_overhead/run.sh" "$BUILD" -- "${OPTS[@]}" >/dev/null 2>"$TMP/log" ||
			{ cat "$TMP/log" >&2; echo "compare_builds: ${NAMES[$i]} failed" >&2; exit 1; }
	done
done

mkdir -p "$(dirname "$OUTF")"
python3 - "$TMP" "$OUTF" "$PASSES" "${NAMES[@]}" <<'PY'
import json, statistics, sys
tmp, out, passes, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
runs = {nm: [json.load(open(f"{tmp}/{p}.{nm}.json")) for p in range(passes)] for nm in names}
def spread(xs):
    return {"median": round(statistics.median(xs), 2), "min": round(min(xs), 2), "max": round(max(xs), 2)}
res = {"bench": "llama_builds", "date_utc": runs[names[0]][0]["date_utc"],
       "machine": runs[names[0]][0]["machine"], "passes": passes,
       "options": {k: runs[names[0]][0][k] for k in ("prefill_tokens", "steps", "rounds", "threads")},
       "builds": {}, "plain_ratio_vs_" + names[0]: {}}
for nm in names:
    rs = runs[nm]
    res["builds"][nm] = {
        "llama_cpp_system_info": rs[0]["llama_cpp_system_info"],
        "plain_tokens_per_s": spread([r["tokens_per_s"]["plain_same_config"]["median"] for r in rs]),
        "adapter_tokens_per_s": spread([r["tokens_per_s"]["adapter"]["median"] for r in rs]),
        "adapter_vs_plain": spread([r["ratio"]["adapter_vs_same_config"]["median"] for r in rs]),
    }
base = [r["tokens_per_s"]["plain_same_config"]["median"] for r in runs[names[0]]]
for nm in names[1:]:
    xs = [r["tokens_per_s"]["plain_same_config"]["median"] / b for r, b in zip(runs[nm], base)]
    res["plain_ratio_vs_" + names[0]][nm] = {k: round(v, 3) for k, v in spread(xs).items()}
with open(out, "w") as f:
    json.dump(res, f, indent=2); f.write("\n")
print(json.dumps(res, indent=2))
print(f"written {out}", file=sys.stderr)
PY
