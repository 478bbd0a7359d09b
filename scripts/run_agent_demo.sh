#!/usr/bin/env bash
# run_agent_demo.sh — the main job's llama.cpp part: runs memdecay-agent on the
# bundled agent trace with a full cache, then under tight budgets with the
# memdecay and the recency policies, and prints the side-by-side table
# (probe, region, full, then memdecay and recency per budget) with evictions
# and occupancy.
#   scripts/run_agent_demo.sh [BUILD_DIR] [BUDGET_TOKENS ...]
# Default budgets: 256 and 640 tokens of the trace's 1,534 (docs/llama.md,
# "Results", says why: of 256/384/512/640/768 these two show the policies'
# difference; at 384, 512 and 768 both pass the same probes).  Needs
# scripts/setup_llama.sh to have run and BUILD_DIR configured with
# -DMEMDECAY_LLAMA=ON.  Each agent starts its own private memdecayd.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
if [ $# -gt 0 ]; then shift; fi
BUDGETS=("$@")
[ ${#BUDGETS[@]} -gt 0 ] || BUDGETS=(256 640)
TRACE=${MEMDECAY_TRACE:-$ROOT/examples/agent_trace.jsonl}
ENVF=${MEMDECAY_DEPS:-$ROOT/.deps}/llama.env
[ -f "$ENVF" ] || { echo "run_agent_demo: $ENVF missing; run scripts/setup_llama.sh" >&2; exit 1; }
# shellcheck disable=SC1090
. "$ENVF"
AGENT=$BUILD/bin/memdecay-agent
[ -x "$AGENT" ] || { echo "run_agent_demo: $AGENT missing; build with -DMEMDECAY_LLAMA=ON" >&2; exit 1; }
for b in "${BUDGETS[@]}"; do
	[[ "$b" =~ ^[1-9][0-9]*$ ]] || { echo "run_agent_demo: budget '$b' is not a positive token count" >&2; exit 2; }
done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

run() { # name policy budget
	echo "run_agent_demo: $1 (policy $2, budget $3 tokens)..." >&2
	"$AGENT" --model "$MEMDECAY_LLAMA_MODEL" --trace "$TRACE" --policy "$2" \
		--budget-tokens "$3" --json --quiet >"$OUT/$1.json"
}
run full full 0
for b in "${BUDGETS[@]}"; do
	run "memdecay@$b" memdecay "$b"
	run "recency@$b" recency "$b"
done

python3 - "$OUT" "${BUDGETS[@]}" <<'PY'
import json, sys, os
d, budgets = sys.argv[1], sys.argv[2:]
names = ["full"] + [f"{p}@{b}" for b in budgets for p in ("memdecay", "recency")]
runs = {n: json.load(open(os.path.join(d, n + ".json"))) for n in names}
full = runs["full"]
print(f"\nagent trace: {full['trace_tokens']} tokens; budgets {', '.join(budgets)} tokens "
      f"(page {full['page_tokens']}); model SmolLM2-135M-Instruct Q4_1 on llama.cpp\n")
def cell(p):
    return f"{'pass' if p['passed'] else 'FAIL'} {p['gold_logprob']:7.2f}"
w = max(len(p["question"]) for p in full["probes"])
cw = max(14, max(len(n) for n in names) + 1)
print(f"{'probe':<{w}}  {'region':<10}" + "".join(f"{n:>{cw}}" for n in names))
for i, p in enumerate(full["probes"]):
    print(f"{p['question']:<{w}}  {p['region']:<10}" +
          "".join(f"{cell(runs[n]['probes'][i]):>{cw}}" for n in names))
print(f"{'passed':<{w}}  {'':<10}" + "".join(f"{runs[n]['probes_passed']:>{cw}}" for n in names))
print("\n(cell: pass/FAIL of the greedy answer, then log p(gold answer); "
      "memdecay@B = policy memdecay under a budget of B tokens)")
for b in budgets:
    m, r = runs[f"memdecay@{b}"], runs[f"recency@{b}"]
    dl = [x["gold_logprob"] - y["gold_logprob"] for x, y in zip(m["probes"], r["probes"])]
    print(f"budget {b}: passed memdecay {m['probes_passed']}, recency {r['probes_passed']}; "
          f"log p(gold) more than 0.5 higher under memdecay on {sum(v > 0.5 for v in dl)} "
          f"probes, under recency on {sum(v < -0.5 for v in dl)}, within 0.5 on "
          f"{sum(abs(v) <= 0.5 for v in dl)}")
print()
regions = list(runs[names[0]]["evictions_by_region"])   # the agent's names, in region id order
print(f"{'':<18}" + "".join(f"{n:>{cw}}" for n in names))
print(f"{'evictions':<18}" + "".join(f"{runs[n]['evictions']:>{cw}}" for n in names))
for g in regions:
    print(f"{'  ' + g:<18}" + "".join(f"{runs[n]['evictions_by_region'][g]:>{cw}}" for n in names))
print(f"{'peak KV tokens':<18}" + "".join(f"{runs[n]['peak_occupancy_tokens']:>{cw}}" for n in names))
print(f"{'mean KV tokens':<18}" + "".join(f"{runs[n]['mean_occupancy_tokens']:>{cw}.1f}" for n in names))
print(f"{'tokens/s':<18}" + "".join(f"{runs[n]['tokens_per_s']:>{cw}.1f}" for n in names))
print(f"{'decode tokens/s':<18}" + "".join(f"{runs[n]['decode_tokens_per_s']:>{cw}.1f}" for n in names))
PY
