/*
 * md_llama_tier.c — the llama.cpp adapter's host tier (ABI 1.4, docs/tier.md):
 * an evicted page's cells kept in host memory and written back at their own
 * positions, through llama.cpp's public API only (docs/llama.md, "Host tier").
 *
 * Save: llama_memory_seq_cp shares the page's cells with a reserved scratch
 * sequence, llama_state_seq_get_data serialises the scratch sequence (each
 * cell's position, then its K and V rows of every layer), and the scratch
 * sequence is removed again; the eviction itself is the usual seq_rm.
 * Restore: llama_state_seq_set_data writes the blob into the (empty) scratch
 * sequence, cells found by llama.cpp's own slot search and positions as
 * saved; llama_memory_seq_cp gives those cells to the page's sequence and the
 * scratch sequence is removed.  The K rows were rotated at their positions
 * and go back to the same positions, so nothing is recomputed.
 */
#include "md_llama_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "memdecay_clock.h"

/* Refuses the models and contexts where the scratch-sequence route is not
 * known to give the page back exactly; the reason is logged by the caller. */
const char *mdl_tier_setup(md_llama *a)
{
	if (!a->cfg.tier_mb)
		return NULL;
	if (llama_model_is_recurrent(a->model) || llama_model_is_hybrid(a->model))
		return "a recurrent or hybrid model has no per-position cells to restore";
	/* Two caches whose window one purges and reuses cells on its own: the
	 * saved window cells may be gone before the evict, and the adapter cannot
	 * place a restore in the second cell map (docs/llama.md). */
	if (llama_model_n_swa(a->model) > 0)
		return "sliding-window layers (two KV caches) are not supported";
	if (a->n_seq_all <= a->max_seqs)
		return "no scratch sequence id (n_seq_max must exceed max_seqs; "
		       "md_llama_context_params reserves one)";
	a->tier_seq = (llama_seq_id)a->n_seq_all - 1;
	int32_t n_head = llama_model_n_head(a->model), n_kv = llama_model_n_head_kv(a->model);
	int32_t n_embd = llama_model_n_embd(a->model);
	if (n_head <= 0 || n_kv <= 0 || n_embd <= 0)
		return "the model does not state its head counts";
	/* An estimate for HELLO and the page count; the byte cap is kept on the
	 * blobs' measured sizes.  12 bytes of metadata a cell (position, count,
	 * sequence id), 16 of header. */
	int64_t kv = (int64_t)n_embd / n_head * n_kv;
	uint64_t row = ggml_row_size(a->type_k, kv) + ggml_row_size(a->type_v, kv);
	uint64_t page = (uint64_t)a->P * (a->n_layer * row + 12) + 16;
	a->tier_cap_bytes = (uint64_t)a->cfg.tier_mb << 20;
	a->tier_cap_pages = a->tier_cap_bytes / page;
	if (!a->tier_cap_pages)
		return "tier_mb holds less than one page";
	a->st.tier_page_bytes = page;
	a->tier_on = 1;
	return NULL;
}

/* Saves page p's cells into its blob (the page is still resident).  0, or
 * -ENOSPC when the tier has no room for it, -EIO when llama.cpp refused. */
int mdl_tier_save(md_llama *a, uint32_t p)
{
	struct mdl_page *pg = &a->pages[p];
	llama_pos p0 = (llama_pos)pg->first_pos, p1 = p0 + (llama_pos)a->P;
	uint64_t t0 = md_now_ns();
	if (a->tier_n >= a->tier_cap_pages)
		return -ENOSPC;
	llama_memory_seq_cp(a->mem, pg->seq, a->tier_seq, p0, p1);
	size_t n = llama_state_seq_get_size(a->ctx, a->tier_seq);
	uint8_t *b = NULL;
	size_t got = 0;
	int rc = -EIO;
	if (n && a->tier_bytes + n > a->tier_cap_bytes)
		rc = -ENOSPC;
	else if (n && (b = malloc(n)) != NULL)
		got = llama_state_seq_get_data(a->ctx, b, n, a->tier_seq);
	llama_memory_seq_rm(a->mem, a->tier_seq, -1, -1);
	if (!got || got != n) {
		free(b);
		return rc;
	}
	/* The blob lists the cells in index order: remember whose token each is,
	 * so a restore can map the cells it gets (map 0; one cache). */
	uint32_t k = 0;
	for (uint32_t c = 0; c < a->n_ctx; c++) {
		if (a->cell_page[c] != (int32_t)p)
			continue;
		if (k < MD_PAGE_TOKENS_MAX)
			pg->order[k] = a->cell_tok[c];
		k++;
	}
	pg->order_ok = k == pg->n_tokens;
	pg->blob = b;
	pg->blob_len = n;
	a->st.tier_page_bytes = n;
	a->st.tier_save_ns += md_now_ns() - t0;
	return 0;
}

/* After the seq_rm of a saved page: it leaves its sequence and the cell map
 * but keeps its record, slot and generation for the restore or the drop. */
void mdl_tier_stash(md_llama *a, uint32_t p)
{
	struct mdl_page *pg = &a->pages[p];
	struct mdl_seq *s = &a->seqs[pg->seq];
	mdl_cells_clear(a, pg->seq, -1, (int32_t)p);
	s->page_of[(uint64_t)pg->first_pos / a->P] = -1;
	s->live_tokens -= pg->n_tokens;
	pg->live = 0;
	pg->tier = 1;
	a->tier_n++;
	a->tier_bytes += pg->blob_len;
	a->st.tier_kept++;
	if (a->tier_n > a->st.tier_peak_pages)
		a->st.tier_peak_pages = a->tier_n;
	if (a->tier_bytes > a->st.tier_peak_bytes)
		a->st.tier_peak_bytes = a->tier_bytes;
}

static void md__tier_free(md_llama *a, struct mdl_page *pg)
{
	a->tier_n--;
	a->tier_bytes -= pg->blob_len;
	free(pg->blob);
	pg->blob = NULL;
	pg->blob_len = 0;
	pg->tier = 0;
}

/* The cells llama.cpp's find_slot (non-contiguous, as state_read_meta asks)
 * will give n tokens: free cells from its head, wrapping, or from 0 when
 * enough cells before the head are unused.  Read from map 0 and kv_head,
 * which mirror llama.cpp's cells and head (test: llama_tier, against the
 * cell dump). */
static uint32_t md__predict_cells(const md_llama *a, uint32_t n, uint32_t *out)
{
	uint32_t used = 0, h = a->kv_head, k = 0;
	for (uint32_t c = 0; c < a->n_ctx; c++)
		used += a->cell_seq[c] >= 0;
	if (h > used + 2 * n)
		h = 0;
	for (uint32_t t = 0; t < a->n_ctx && k < n; t++) {
		uint32_t c = (h + t) % a->n_ctx;
		if (a->cell_seq[c] < 0)
			out[k++] = c;
	}
	return k;
}

/* Writes tier page p back at its positions.  0, -EEXIST (a resident page
 * holds its positions), -ENOSPC (no free cells: llama.cpp refused). */
int mdl_tier_restore(md_llama *a, uint32_t p)
{
	struct mdl_page *pg = &a->pages[p];
	struct mdl_seq *s = &a->seqs[pg->seq];
	uint64_t idx = (uint64_t)pg->first_pos / a->P;
	llama_pos p0 = (llama_pos)pg->first_pos, p1 = p0 + (llama_pos)a->P;
	uint32_t cells[MD_PAGE_TOKENS_MAX];
	uint64_t t0 = md_now_ns();
	if (!pg->tier || (idx < s->page_of_cap && s->page_of[idx] >= 0))
		return -EEXIST;
	uint32_t placed = md__predict_cells(a, pg->n_tokens, cells);
	if (!llama_state_seq_set_data(a->ctx, pg->blob, pg->blob_len, a->tier_seq)) {
		llama_memory_seq_rm(a->mem, a->tier_seq, -1, -1);
		a->st.tier_restore_refused++;
		return -ENOSPC;
	}
	llama_memory_seq_cp(a->mem, a->tier_seq, pg->seq, p0, p1);
	llama_memory_seq_rm(a->mem, a->tier_seq, -1, -1);
	s->page_of[idx] = (int32_t)p;
	s->live_tokens += pg->n_tokens;
	pg->live = 1;
	if (placed == pg->n_tokens && pg->order_ok) {
		for (uint32_t i = 0; i < placed; i++) {
			uint32_t c = cells[i];
			a->cell_seq[c] = pg->seq;
			a->cell_pos[c] = p0 + pg->order[i];
			a->cell_page[c] = (int32_t)p;
			a->cell_tok[c] = pg->order[i];
		}
		a->kv_head = cells[placed - 1] + 1;
	} else {
		/* attention to these cells is not credited until they are evicted */
		a->st.tier_unmapped++;
	}
	md__tier_free(a, pg);
	a->st.tier_restored++;
	a->st.tier_restore_ns += md_now_ns() - t0;
	return 0;
}

/* Releases tier page p's host copy and its record. */
void mdl_tier_drop(md_llama *a, uint32_t p)
{
	struct mdl_page *pg = &a->pages[p];
	md__tier_free(a, pg);
	if (pg->registered && a->slot_to_page[pg->slot] == (int32_t)p)
		a->slot_to_page[pg->slot] = -1;
	pg->registered = 0;
	a->free_pages[a->n_free_pages++] = p;
	a->st.tier_dropped++;
}

/* A sequence ends: its tier pages go (md_seq_end frees their slots). */
void mdl_tier_seq_end(md_llama *a, llama_seq_id seq)
{
	for (uint32_t p = 0; p < a->page_cap; p++)
		if (a->pages[p].tier && a->pages[p].seq == seq)
			mdl_tier_drop(a, p);
}

int md_llama_restore_page(md_llama *a, llama_seq_id seq, llama_pos pos)
{
	if (a->client)
		return -EPERM;
	if (seq < 0 || (uint32_t)seq >= a->max_seqs || pos < 0)
		return -ENOENT;
	for (uint32_t p = 0; p < a->page_cap; p++) {
		struct mdl_page *pg = &a->pages[p];
		if (pg->tier && pg->seq == seq && pos >= pg->first_pos &&
		    pos < pg->first_pos + (llama_pos)a->P)
			return mdl_tier_restore(a, p);
	}
	return -ENOENT;
}

llama_seq_id md_llama_tier_seq(const md_llama *a)
{
	return a->tier_on ? a->tier_seq : -1;
}
