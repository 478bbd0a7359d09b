#!/bin/sh
# compare_builds.sh BEFORE_BIN AFTER_BIN [ROUNDS] [POLICIES] — the policy bench
# of two builds (e.g. the last release and the working tree), run alternately
# in one session so that machine noise falls on both.  Prints one JSON object:
# per policy and page count, the decision-time, full-sort-time and ingest-rate
# medians of each build, their spread over the rounds, how many times cheaper
# than the sort a decision was (per run), the after/before ratio of the
# medians, and the oracle mismatches of every run (which must be 0).
#   ROUNDS    default 3 (each run takes about 40 s on 2 cores)
#   POLICIES  comma list, default memdecay,random
#   PAGES     (environment) page counts, e.g. 1000,10000,100000; default the bench's
set -eu
if [ $# -lt 2 ] || [ "$1" = "--help" ] || [ "$1" = "-h" ]; then
	sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
	[ $# -ge 1 ] && exit 0 || exit 2
fi
BEFORE=$1 AFTER=$2 ROUNDS=${3:-3} POLICIES=${4:-memdecay,random}
PAGES_ARG=""
[ -n "${PAGES:-}" ] && PAGES_ARG="--pages $PAGES"
for b in "$BEFORE" "$AFTER"; do
	[ -x "$b" ] || { echo "compare_builds: $b is not an executable" >&2; exit 2; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
for pol in $(echo "$POLICIES" | tr ',' ' '); do
	r=1
	while [ "$r" -le "$ROUNDS" ]; do
		# alternate which build goes first
		if [ $((r % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
		for which in $order; do
			bin=$BEFORE
			[ "$which" = after ] && bin=$AFTER
			echo "compare_builds: $pol round $r/$ROUNDS: $which" >&2
			# the bench exits 1 on an oracle mismatch: keep its JSON, say so
			# shellcheck disable=SC2086
			"$bin" --json --policy "$pol" $PAGES_ARG >"$TMP/$pol.$which.$r.json" ||
				echo "compare_builds: $which ($bin) exited $? under $pol" >&2
		done
		r=$((r + 1))
	done
done
python3 - "$TMP" "$POLICIES" "$ROUNDS" <<'PY'
import glob, json, os, statistics, sys
tmp, policies, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
out = {"rounds": rounds, "policies": {}}
for pol in policies:
    runs = {w: [json.load(open(f))["results"]
                for f in sorted(glob.glob(os.path.join(tmp, "%s.%s.*.json" % (pol, w))))]
            for w in ("before", "after")}
    rows = []
    for i, first in enumerate(runs["before"][0]):
        row = {"pages": first["pages"]}
        for w in ("before", "after"):
            dec = [r[i]["decision_ns_median"] for r in runs[w]]
            ing = [r[i]["ingest_records_per_s"] for r in runs[w]]
            srt = [r[i]["sort_ns_median"] for r in runs[w]]
            # per run: the full sort's time over the index decision's
            spd = [r[i]["sort_ns_median"] / r[i]["decision_ns_median"] for r in runs[w]]
            row[w] = {"decision_ns_median": statistics.median(dec),
                      "decision_ns_range": [min(dec), max(dec)],
                      "sort_ns_median": statistics.median(srt),
                      "sort_ns_range": [min(srt), max(srt)],
                      "sort_over_decision_median": round(statistics.median(spd), 1),
                      "sort_over_decision_range": [round(min(spd), 1), round(max(spd), 1)],
                      "ingest_records_per_s_median": statistics.median(ing),
                      "ingest_range": [min(ing), max(ing)],
                      "oracle_mismatches": sum(r[i]["oracle_mismatches"] for r in runs[w])}
        row["decision_ratio_after_over_before"] = round(
            row["after"]["decision_ns_median"] / row["before"]["decision_ns_median"], 3)
        row["ingest_ratio_after_over_before"] = round(
            row["after"]["ingest_records_per_s_median"] /
            row["before"]["ingest_records_per_s_median"], 3)
        rows.append(row)
    out["policies"][pol] = rows
print(json.dumps(out, indent=1))
PY
