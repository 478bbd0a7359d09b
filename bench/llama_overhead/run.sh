#!/usr/bin/env bash
# bench/llama_overhead/run.sh — the llama.cpp adapter's decode overhead, one command:
#   bench/llama_overhead/run.sh [BUILD_DIR] [-- extra memdecay-bench-llama-overhead options]
# Finds BUILD_DIR/bin/memdecay-bench-llama-overhead (default BUILD_DIR: build/,
# configured with -DMEMDECAY_LLAMA=ON, as scripts/build.sh does), the model from
# .deps/llama.env (scripts/setup_llama.sh), starts a private memdecayd on a
# temporary socket, and times single-token decode steps of plain llama.cpp
# (flash attention off, unified KV), the same plus a do-nothing observer
# ("capture only"), the adapter attached to that memdecayd (every layer
# observed, page records every step, no budget) and llama.cpp's default
# context configuration, alternating step by step in one process.
# Writes bench/results/llama_overhead.json (the program's JSON plus date,
# machine and load) and prints it.  Defaults: 512 tokens of context, 256 steps
# in 8 rounds, 1 thread; override after "--", e.g. -- --steps 128 --threads 2.
# MEMDECAY_BENCH_OUT=FILE writes elsewhere.  Exit status 0 when the run
# completed (target_met in the JSON says whether adapter >= 90 % of plain).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/build
if [ $# -gt 0 ] && [ "$1" != "--" ]; then BUILD=$1; shift; fi
[ "${1:-}" = "--" ] && shift
ENVF=${MEMDECAY_DEPS:-$ROOT/.deps}/llama.env
OUTF=${MEMDECAY_BENCH_OUT:-$ROOT/bench/results/llama_overhead.json}
[ -f "$ENVF" ] || { echo "llama_overhead: $ENVF missing; run scripts/setup_llama.sh" >&2; exit 1; }
# shellcheck disable=SC1090
. "$ENVF"
BENCH=$BUILD/bin/memdecay-bench-llama-overhead
DAEMON=$BUILD/bin/memdecayd
for x in "$BENCH" "$DAEMON"; do
	[ -x "$x" ] || { echo "llama_overhead: $x missing; build with -DMEMDECAY_LLAMA=ON (scripts/build.sh)" >&2; exit 1; }
done
[ -f "${MEMDECAY_LLAMA_MODEL:-}" ] || { echo "llama_overhead: model ${MEMDECAY_LLAMA_MODEL:-?} missing" >&2; exit 1; }

DIR=$(mktemp -d "${TMPDIR:-/tmp}/memdecay-llama-overhead.XXXXXX")
SOCK=$DIR/memdecayd.sock
DPID=""
cleanup() {
	if [ -n "$DPID" ]; then kill "$DPID" 2>/dev/null || true; wait "$DPID" 2>/dev/null || true; fi
	rm -rf "$DIR"
}
trap cleanup EXIT INT TERM
"$DAEMON" --socket "$SOCK" --foreground --log-level warn 2>"$DIR/daemon.log" &
DPID=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.05; done
[ -S "$SOCK" ] || { echo "llama_overhead: memdecayd did not start:" >&2; cat "$DIR/daemon.log" >&2; exit 1; }

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
echo "llama_overhead: running (memdecayd at $SOCK) ..." >&2
"$BENCH" "$MEMDECAY_LLAMA_MODEL" --socket "$SOCK" "$@" >"$DIR/bench.json"
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p "$(dirname "$OUTF")"
python3 - "$DIR/bench.json" "$OUTF" "$START" "$LOAD0" "$LOAD1" "${LLAMA_CPP_PYTHON_VERSION:-?}" \
	"$(basename "$MEMDECAY_LLAMA_MODEL")" <<'PY'
import json, os, platform, sys
src, out, start, l0, l1, lcp, model = sys.argv[1:]
r = json.load(open(src))
cpu = "?"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip(); break
except OSError:
    pass
meta = {"date_utc": start, "machine": {"cpu": cpu, "cores": os.cpu_count(),
        "kernel": platform.release(), "loadavg_before": l0, "loadavg_after": l1},
        "llama_cpp_python": lcp, "model": model}
res = {**{"bench": r.pop("bench")}, **meta, **r}
with open(out, "w") as f:
    json.dump(res, f, indent=2); f.write("\n")
print(json.dumps(res, indent=2))
t, q, b = res["tokens_per_s"], res["ratio"], res["breakdown_ms_per_step"]
print(f"\nadapter + memdecayd: {t['adapter']['median']:.2f} tok/s, "
      f"{100*q['adapter_vs_same_config']['median']:.1f} % of plain same-config "
      f"({t['plain_same_config']['median']:.2f}; rounds {100*q['adapter_vs_same_config']['min']:.1f}"
      f"-{100*q['adapter_vs_same_config']['max']:.1f} %), "
      f"{100*q['adapter_vs_default_config']['median']:.1f} % of default-config "
      f"({t['plain_default_config']['median']:.2f}); target >= 90 %: "
      f"{'met' if res['target_met'] else 'NOT met'}", file=sys.stderr)
for name, b in (("medians", res["breakdown_ms_per_step"]), ("means", res["breakdown_ms_per_step_mean"])):
    print(f"per step ({name}): +{b['overhead']:.3f} ms over plain; capture {b['capture']:.3f}, "
          f"reduction {b['reduction']:.3f}, records {b['records']:.3f}, other {b['other']:.3f} ms",
          file=sys.stderr)
print(f"written {out}", file=sys.stderr)
PY
