#!/bin/sh
# main_job.sh — install, build, and show MemDecay at work:
#  1. memdecayd serving four synthetic engines (memdecay-loadgen) under page
#     budgets, then what it evicted, by region;
#  2. a real model (SmolLM2-135M-Instruct on llama.cpp) replaying the bundled
#     agent trace under a small KV budget with memdecay and with recency,
#     side by side with the full cache;
#  3. the same model and trace served by vLLM (its CPU build, with the MemDecay
#     plugin) through `vllm serve`'s OpenAI endpoint under the same budget;
#  4. two agents talking to `vllm serve` for six turns on a KV pool too small
#     for their histories, plain and with MemDecay's pool mode: time to first
#     token per turn, KV blocks held, facts kept, turns per second.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

sh scripts/deps.sh
if [ -f scripts/setup_llama.sh ]; then
	bash scripts/setup_llama.sh
	bash scripts/setup_kvpress.sh     # the model in Hugging Face form, for vLLM
	bash scripts/setup_vllm.sh
	bash scripts/setup_router.sh      # vllm-router, in front of vLLM replicas (docs/deploy.md)
fi
sh scripts/build.sh "$ROOT/build"
BIN=$ROOT/build/bin

DIR=$(mktemp -d)
SOCK=$DIR/memdecayd.sock
cleanup() {
	[ -n "${DPID:-}" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

echo "== memdecayd with 4 engines under a budget of 96 pages each"
"$BIN/memdecayd" --socket "$SOCK" --foreground 2>"$DIR/daemon.log" &
DPID=$!
i=0
while [ ! -S "$SOCK" ]; do
	if ! kill -0 "$DPID" 2>/dev/null || [ $i -ge 200 ]; then
		echo "main_job: memdecayd did not come up on $SOCK within 10 s; its log:" >&2
		cat "$DIR/daemon.log" >&2
		exit 1
	fi
	sleep 0.05
	i=$((i + 1))
done

PIDS=""
for e in 1 2 3 4; do
	"$BIN/memdecay-loadgen" --socket "$SOCK" --engine-name "engine-$e" --seqs 4 \
		--pages-per-seq 48 --steps 3000 --policy memdecay --budget-pages 96 \
		--seed "$e" --step-hz 1000 --json >"$DIR/engine-$e.json" &
	PIDS="$PIDS $!"
done
i=0   # until the four have attached (each runs about 3 s)
while [ "$("$BIN/memdecayctl" --socket "$SOCK" engines | tail -n +2 | wc -l)" -lt 4 ] &&
	[ $i -lt 100 ]; do
	sleep 0.05
	i=$((i + 1))
done
echo "attached engines:"; "$BIN/memdecayctl" --socket "$SOCK" engines
for p in $PIDS; do wait "$p" || echo "loadgen $p failed" >&2; done
echo
echo "== what the daemon evicted, by region (4 engines, budget 96 pages each)"
python3 - "$DIR"/engine-*.json <<'PY'
import json, sys
runs = [json.load(open(f)) for f in sys.argv[1:]]
regions = list(runs[0]["evictions_by_region"])
print("%-12s" % "region" + "".join("%10s" % r["engine_name"] for r in runs) + "%10s" % "total")
for reg in regions:
    row = [r["evictions_by_region"][reg] for r in runs]
    print("%-12s" % reg + "".join("%10d" % v for v in row) + "%10d" % sum(row))
for key in ("evictions", "pinned_evicted", "stale_applied", "double_freed", "over_budget_max_pages"):
    row = [r[key] for r in runs]
    print("%-22s" % key + " ".join(str(v) for v in row))
PY
echo
"$BIN/memdecayctl" --socket "$SOCK" stats | head -3
kill "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=""

if [ -x "$BIN/memdecay-agent" ] && [ -f scripts/run_agent_demo.sh ]; then
	echo
	echo "== SmolLM2 on llama.cpp: the bundled agent trace under a KV budget"
	bash scripts/run_agent_demo.sh
fi

if [ -f .deps/vllm.env ]; then
	echo
	echo "== SmolLM2 on vLLM, served through its OpenAI endpoint with the MemDecay plugin"
	. .deps/vllm.env
	MEMDECAY_VLLM_MODEL=$MEMDECAY_VLLM_MODEL MEMDECAY_BUILD=$ROOT/build \
		"$MEMDECAY_VLLM_PYTHON" engine_adapters/vllm/demo.py --budget 640
	echo
	echo "== two agents on vllm serve with a KV pool too small for their histories (40 blocks"
	echo "   of 32 tokens): plain vLLM; MemDecay's pool mode (memdecayd evicts only above"
	echo "   90% of the pool, across every request and session); pool mode with the host"
	echo "   tier (evicted blocks kept in host memory, restored when the agents' queries"
	echo "   would attend them). Time to first token per turn (median over the agents)"
	echo "   with the prompt tokens computed that turn, KV blocks held, facts kept, turns"
	echo "   per second, preemptions and blocks evicted"
	MEMDECAY_VLLM_MODEL=$MEMDECAY_VLLM_MODEL MEMDECAY_BUILD=$ROOT/build \
		"$MEMDECAY_VLLM_PYTHON" bench/serving/run.py --quick --out "$DIR/serving.json" >/dev/null
	"$MEMDECAY_VLLM_PYTHON" bench/serving/report.py "$DIR/serving.json" --text
fi
