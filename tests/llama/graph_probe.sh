#!/usr/bin/env bash
# graph_probe.sh — checks the facts the adapter relies on (docs/design.md §6) on the
# pinned llama.cpp build, through md_llama_graph_probe:
#   the layer-0 K write is SET_ROWS 'cache_k_l0 (view)' with i64 cell indices
#   in src[1]; kq_soft_max-0 is f32 [n_kv, n_tokens, n_head, 1] over the mask,
#   rows sum to 1; seq_rm(16, 32) succeeds and the next token refills cell 16.
#   graph_probe.sh PROBE MODEL
set -euo pipefail
out=$("$1" "$2" 2>/dev/null)
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }
grep -q "SET_ROWS 'cache_k_l0 (view)' idx 'attn_inp_k_idxs' type i64 n 44 host 1: 0 1 2 " <<<"$out" || fail "K write of the prefill"
grep -q "kq_soft_max-0 ne=\[256,44,9,1\] type f32 src1 'attn_inp_kq_mask'" <<<"$out" || fail "kq_soft_max shape"
grep -q "seq_rm(0, 16, 32) -> 1" <<<"$out" || fail "seq_rm"
grep -q "SET_ROWS 'cache_k_l0 (view)' idx 'attn_inp_k_idxs' type i64 n 1 host 1: 16$" <<<"$out" || fail "hole refill at cell 16"
grep -q "pos_min 0 pos_max 64" <<<"$out" || fail "positions continue at pos_max + 1"
awk '/max\|rowsum-1\|=/ { split($0, a, "max\\|rowsum-1\\|="); split(a[2], b, " "); if (b[1] + 0 > 1e-3) bad = 1 } END { exit bad }' <<<"$out" || fail "row sums"
echo "graph_probe: ok"
