/*
 * md_llama_cells.c — the cell -> (sequence, position) map of the llama.cpp
 * adapter.  It is read from the layer-0 K write (SET_ROWS, src[1] holds one
 * KV cell per ubatch token in batch order), never predicted; docs/llama.md.
 */
#include "md_llama_internal.h"

#include <errno.h>

/* ---- cell map ---- */

void mdl_observe_kv_write(md_llama *a, const struct ggml_tensor *t)
{
	const struct ggml_tensor *idx = t->src[1];
	if (!idx || (idx->type != GGML_TYPE_I64 && idx->type != GGML_TYPE_I32))
		return;
	int64_t n = ggml_nelements(idx);
	if (n != (int64_t)a->cur_n)
		return;  /* not the ubatch we issued: leave the map alone (counted) */
	const void *data = mdl_tensor_host(a, idx, ggml_nbytes(idx));
	if (!data)
		return;
	for (int64_t j = 0; j < n; j++) {
		int64_t cell = idx->type == GGML_TYPE_I64 ? ((const int64_t *)data)[j]
							   : ((const int32_t *)data)[j];
		if (cell < 0 || cell >= (int64_t)a->n_ctx)
			continue;
		llama_pos pos = a->cur_pos0 + (llama_pos)j;
		a->cell_seq[cell] = a->cur_seq;
		a->cell_pos[cell] = pos;
		if (a->cur_tracked) {
			int32_t p = mdl_page_at(a, a->cur_seq, pos);
			a->cell_page[cell] = p;
			a->cell_tok[cell] = p >= 0 ? (uint8_t)(pos - a->pages[p].first_pos) : 0;
		} else {
			a->cell_page[cell] = -1;
		}
	}
	a->st.map_writes += (uint64_t)n;
	a->cur_idx_seen = 1;
}

int md_llama_cell(const md_llama *a, uint32_t cell, llama_seq_id *seq, llama_pos *pos)
{
	if (cell >= a->n_ctx)
		return -EINVAL;
	*seq = a->cell_seq[cell];
	*pos = a->cell_pos[cell];
	return 0;
}

uint32_t md_llama_n_cells(const md_llama *a)
{
	return a->n_ctx;
}
