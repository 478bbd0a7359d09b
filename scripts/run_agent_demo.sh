#!/usr/bin/env bash
# run_agent_demo.sh — the main job's llama.cpp part: runs memdecay-agent on the
# bundled agent trace with a full cache, then under a tight budget with the
# memdecay and the recency policies, and prints the side-by-side table
# (probe, region, full, memdecay, recency) with evictions and occupancy.
#   scripts/run_agent_demo.sh [BUILD_DIR] [BUDGET_TOKENS]
# Needs scripts/setup_llama.sh to have run and BUILD_DIR configured with
# -DMEMDECAY_LLAMA=ON.  Each agent starts its own private memdecayd.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
BUDGET=${2:-384}
TRACE=${MEMDECAY_TRACE:-$ROOT/examples/agent_trace.jsonl}
ENVF=${MEMDECAY_DEPS:-$ROOT/.deps}/llama.env
[ -f "$ENVF" ] || { echo "run_agent_demo: $ENVF missing; run scripts/setup_llama.sh" >&2; exit 1; }
# shellcheck disable=SC1090
. "$ENVF"
AGENT=$BUILD/bin/memdecay-agent
[ -x "$AGENT" ] || { echo "run_agent_demo: $AGENT missing; build with -DMEMDECAY_LLAMA=ON" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

run() { # name policy budget
	echo "run_agent_demo: $1 (policy $2, budget $3 tokens)..." >&2
	"$AGENT" --model "$MEMDECAY_LLAMA_MODEL" --trace "$TRACE" --policy "$2" \
		--budget-tokens "$3" --json --quiet >"$OUT/$1.json"
}
run full full 0
run memdecay memdecay "$BUDGET"
run recency recency "$BUDGET"

python3 - "$OUT" <<'PY'
import json, sys, os
d = sys.argv[1]
runs = {n: json.load(open(os.path.join(d, n + ".json"))) for n in ("full", "memdecay", "recency")}
full = runs["full"]
print(f"\nagent trace: {full['trace_tokens']} tokens; budget {runs['memdecay']['budget_tokens']} tokens "
      f"(page {full['page_tokens']}); model SmolLM2-135M-Instruct Q4_1 on llama.cpp\n")
def cell(p):
    return f"{'pass' if p['passed'] else 'FAIL'} {p['gold_logprob']:7.2f}"
w = max(len(p["question"]) for p in full["probes"])
print(f"{'probe':<{w}}  {'region':<10} {'full':>12} {'memdecay':>12} {'recency':>12}")
for i, p in enumerate(full["probes"]):
    row = [cell(runs[n]["probes"][i]) for n in ("full", "memdecay", "recency")]
    print(f"{p['question']:<{w}}  {p['region']:<10} {row[0]:>12} {row[1]:>12} {row[2]:>12}")
print(f"{'passed':<{w}}  {'':<10} " + " ".join(f"{r['probes_passed']:>12}" for r in runs.values()))
print("\n(cell: pass/FAIL of the greedy answer, then log p(gold answer))\n")
regions = ["system", "plan", "user", "assistant", "tool_in", "tool_out", "retrieval", "scratchpad"]
print(f"{'':<18}" + "".join(f"{n:>12}" for n in runs))
print(f"{'evictions':<18}" + "".join(f"{r['evictions']:>12}" for r in runs.values()))
for g in regions:
    print(f"{'  ' + g:<18}" + "".join(f"{r['evictions_by_region'][g]:>12}" for r in runs.values()))
print(f"{'peak KV tokens':<18}" + "".join(f"{r['peak_occupancy_tokens']:>12}" for r in runs.values()))
print(f"{'mean KV tokens':<18}" + "".join(f"{r['mean_occupancy_tokens']:>12.1f}" for r in runs.values()))
print(f"{'tokens/s':<18}" + "".join(f"{r['tokens_per_s']:>12.1f}" for r in runs.values()))
print(f"{'decode tokens/s':<18}" + "".join(f"{r['decode_tokens_per_s']:>12.1f}" for r in runs.values()))
PY
