#!/usr/bin/env bash
# bench/gpu/vllm_serve.sh — run.sh's vllm_serve step: `vllm serve` with the MemDecay
# plugin on this machine's GPU, and what happened, as one RESULT line.
#
# The lent GPU machines have no network, so this uses a vLLM with CUDA that is
# already installed: the python in MEMDECAY_VLLM_GPU_PYTHON, else python3.  The
# plugin and the binding are put in a venv of their own over that python's
# packages (--system-site-packages, pip -e --no-deps), and vLLM is started with
# MEMDECAY_VLLM=1 on MEMDECAY_VLLM_GPU_MODEL (default: a model directory in the
# tree's .deps, else a tiny random Llama written here: the plugin's start-up
# checks come before any weight is read).
#
# The plugin does not hook vLLM's GPU attention backends yet (docs/vllm.md, "A
# GPU worker"), so the expected outcome is a refusal that names the platform.
#   exit 0   refused at start-up, the refusal naming what stops it (outcome=refused)
#   exit 1   vLLM started with the plugin on (outcome=started: its hooks would not
#            fire), or exited without the plugin's refusal (outcome=failed)
#   exit 77  no vLLM with CUDA here (outcome=skipped)
set -uo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/memdecay-vllm-gpu.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
PY="${MEMDECAY_VLLM_GPU_PYTHON:-python3}"
PORT="${MEMDECAY_VLLM_GPU_PORT:-18931}"
WAIT_S="${MEMDECAY_VLLM_GPU_WAIT_S:-45}"

result() { # outcome, then k=v pairs
  printf 'RESULT kernel=vllm_serve outcome=%s' "$1"
  shift
  for kv in "$@"; do printf ' %s' "$kv"; done
  printf '\n'
}
quote() { printf '"%s"' "$(tr -d '"\n\\' <<<"$1" | cut -c1-300)"; }

VER="$("$PY" -c 'import vllm, torch; assert torch.cuda.is_available(); print(vllm.__version__)' 2>/dev/null)"
if [ -z "$VER" ]; then
  echo "vllm_serve: no vLLM with CUDA for $PY (set MEMDECAY_VLLM_GPU_PYTHON); skipped" >&2
  result skipped "reason=$(quote "no vLLM with a CUDA torch for $PY")"
  exit 77
fi

if ! { "$PY" -m venv --system-site-packages "$WORK/venv" >"$WORK/venv.txt" 2>&1 &&
  "$WORK/venv/bin/python" -m pip install -q --no-deps --no-build-isolation --no-index \
    -e "$SRC/engine_adapters/python" -e "$SRC/engine_adapters/vllm" >>"$WORK/venv.txt" 2>&1; }; then
  tail -5 "$WORK/venv.txt" >&2
  result failed "vllm=$VER" "reason=$(quote "installing the plugin failed: $(tail -1 "$WORK/venv.txt")")"
  exit 1
fi

MODEL="${MEMDECAY_VLLM_GPU_MODEL:-}"
if [ -z "$MODEL" ] && [ -f "$SRC/.deps/models/smollm2-hf/config.json" ]; then
  MODEL="$SRC/.deps/models/smollm2-hf"
fi
EXTRA=()
if [ -z "$MODEL" ]; then
  EXTRA=(--skip-tokenizer-init)       # no tokenizer in the tiny model's directory
  MODEL="$WORK/tiny-llama"
  mkdir -p "$MODEL"
  cat >"$MODEL/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 49152, "max_position_embeddings": 2048,
 "rms_norm_eps": 1e-5, "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": 2}
JSON
fi

echo "vllm_serve: vLLM $VER, MEMDECAY_VLLM=1 vllm serve $MODEL (up to ${WAIT_S}s)" >&2
t0=$(date +%s)
# vLLM's own command line (the `vllm` script's module), run by the venv's python
MEMDECAY_VLLM=1 "$WORK/venv/bin/python" -m vllm.entrypoints.cli.main serve "$MODEL" \
  --port "$PORT" --max-model-len 1024 --load-format dummy "${EXTRA[@]}" \
  >"$WORK/serve.txt" 2>&1 &
PID=$!
outcome=""
while [ $(($(date +%s) - t0)) -lt "$WAIT_S" ]; do
  if ! kill -0 "$PID" 2>/dev/null; then
    wait "$PID"
    rc=$?
    outcome=exited
    break
  fi
  if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
    outcome=started
    break
  fi
  sleep 1
done
secs=$(($(date +%s) - t0))
if [ -z "$outcome" ] || [ "$outcome" = started ]; then
  kill "$PID" 2>/dev/null
  wait "$PID" 2>/dev/null
fi
tail -20 "$WORK/serve.txt" >&2
line="$(grep -m1 -o 'memdecay_vllm: MEMDECAY_VLLM=1, but.*' "$WORK/serve.txt")"
case "$outcome" in
  exited)
    if [ -n "$line" ]; then
      result refused "vllm=$VER" "rc=$rc" "seconds=$secs" "reason=$(quote "$line")"
      exit 0
    fi
    result failed "vllm=$VER" "rc=$rc" "seconds=$secs" "reason=$(quote "$(tail -1 "$WORK/serve.txt")")"
    exit 1 ;;
  started)
    result started "vllm=$VER" "seconds=$secs" "reason=$(quote "vLLM answered /health with the plugin on")"
    exit 1 ;;
  *)
    result failed "vllm=$VER" "seconds=$secs" "reason=$(quote "neither refused nor up after ${WAIT_S}s: $(tail -1 "$WORK/serve.txt")")"
    exit 1 ;;
esac
