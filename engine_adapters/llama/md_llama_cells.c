/*
 * md_llama_cells.c — the cell -> (sequence, position) map of the llama.cpp
 * adapter.  It is read from the layer-0 K write (SET_ROWS, src[1] holds one
 * KV cell per ubatch token in batch order), never predicted; docs/llama.md.
 * A model with sliding-window layers has a second KV cache with cells of its
 * own: its map is read from the first K write whose index tensor is not
 * layer 0's, and every layer is assigned the map of its K write.
 */
#include "md_llama_internal.h"

#include <errno.h>

/* ---- cell map ---- */

void mdl_observe_kv_write(md_llama *a, const struct ggml_tensor *t, long layer)
{
	const struct ggml_tensor *idx = t->src[1];
	if (!idx || (idx->type != GGML_TYPE_I64 && idx->type != GGML_TYPE_I32))
		return;
	/* Which cache: layer 0's, or (sliding-window models) the other one.  Layers
	 * of one cache share one index tensor in a graph. */
	uint32_t m = 0;
	if (a->n_maps > 1 && layer != 0)
		m = (a->cur_map_seen & 1u) && idx == a->cur_idx[0] ? 0 : 1;
	if (layer >= 0 && (uint32_t)layer < a->n_layer)
		a->layer_map[layer] = (uint8_t)m;
	if (a->cur_map_seen & (1u << m))
		return;  /* this cache's cells are already mapped for this ubatch */
	int64_t n = ggml_nelements(idx);
	if (n != (int64_t)a->cur_n)
		return;  /* not the ubatch we issued: leave the map alone (counted) */
	const void *data = mdl_tensor_host(a, idx, ggml_nbytes(idx));
	if (!data)
		return;
	size_t off = (size_t)m * a->n_ctx;
	int32_t *cseq = a->cell_seq + off, *cpos = a->cell_pos + off, *cpage = a->cell_page + off;
	uint8_t *ctok = a->cell_tok + off;
	for (int64_t j = 0; j < n; j++) {
		int64_t cell = idx->type == GGML_TYPE_I64 ? ((const int64_t *)data)[j]
							   : ((const int32_t *)data)[j];
		if (cell < 0 || cell >= (int64_t)a->n_ctx)
			continue;
		llama_pos pos = a->cur_pos0 + (llama_pos)j;
		cseq[cell] = a->cur_seq;
		cpos[cell] = pos;
		if (a->cur_tracked) {
			int32_t p = mdl_page_at(a, a->cur_seq, pos);
			cpage[cell] = p;
			ctok[cell] = p >= 0 ? (uint8_t)(pos - a->pages[p].first_pos) : 0;
		} else {
			cpage[cell] = -1;
		}
	}
	a->cur_idx[m] = idx;
	a->cur_map_seen |= 1u << m;
	if (m == 0) {
		/* llama.cpp's apply_ubatch moves its head past the slot's last cell */
		int64_t last = n <= 0 ? -1
			     : idx->type == GGML_TYPE_I64 ? ((const int64_t *)data)[n - 1]
							  : ((const int32_t *)data)[n - 1];
		if (last >= 0 && last < (int64_t)a->n_ctx)
			a->kv_head = (uint32_t)last + 1;
		a->st.map_writes += (uint64_t)n;
		a->cur_idx_seen = 1;
	}
}

void mdl_cells_clear(md_llama *a, llama_seq_id seq, llama_pos p0, int32_t page)
{
	size_t n = (size_t)a->n_maps * a->n_ctx;
	for (size_t c = 0; c < n; c++) {
		if (p0 >= 0 ? a->cell_seq[c] == seq && a->cell_pos[c] >= p0 : a->cell_page[c] == page) {
			a->cell_seq[c] = -1;
			a->cell_pos[c] = -1;
			a->cell_page[c] = -1;
			/* seq_rm moves llama.cpp's head back to the first cell it frees */
			if (c < a->n_ctx && c < a->kv_head)
				a->kv_head = (uint32_t)c;
		}
	}
}

int md_llama_cell(const md_llama *a, uint32_t cell, llama_seq_id *seq, llama_pos *pos)
{
	if (cell >= a->n_ctx)
		return -EINVAL;
	*seq = a->cell_seq[cell];
	*pos = a->cell_pos[cell];
	return 0;
}

int md_llama_cell_in(const md_llama *a, uint32_t map, uint32_t cell, llama_seq_id *seq,
		     llama_pos *pos)
{
	if (map >= a->n_maps || cell >= a->n_ctx)
		return -EINVAL;
	size_t c = (size_t)map * a->n_ctx + cell;
	*seq = a->cell_seq[c];
	*pos = a->cell_pos[c];
	return 0;
}

uint32_t md_llama_n_cells(const md_llama *a)
{
	return a->n_ctx;
}

uint32_t md_llama_n_maps(const md_llama *a)
{
	return a->n_maps;
}

int md_llama_layer_map(const md_llama *a, uint32_t layer)
{
	return layer < a->n_layer && a->layer_map ? a->layer_map[layer] : -1;
}
