/*
 * md_llama_attn.c — the llama.cpp adapter's ggml eval callback: it takes the
 * layer-0 K write (for the cell map) and kq_soft_max-<il>, reduces attention
 * to page mass with md_kernels, and publishes the step's page records.
 */
#include "md_llama_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <ggml-backend.h>

#include "md_kernels.h"
#include "memdecay_clock.h"

/* ---- cb_eval: what the graph shows ---- */

static int md__name_is(const char *name, const char *prefix, size_t len)
{
	return strncmp(name, prefix, len) == 0;
}

const void *mdl_tensor_host(md_llama *a, const struct ggml_tensor *t, size_t nbytes)
{
	if (!t->buffer || ggml_backend_buffer_is_host(t->buffer))
		return t->data;
	size_t need = (nbytes + sizeof(float) - 1) / sizeof(float);
	if (need > a->scratch_floats) {
		float *n = realloc(a->scratch, need * sizeof(float));
		if (!n)
			return NULL;
		a->scratch = n;
		a->scratch_floats = need;
	}
	ggml_backend_tensor_get((struct ggml_tensor *)t, a->scratch, 0, nbytes);
	return a->scratch;
}

static void md__check_rows(md_llama *a, const float *probs, uint32_t n_kv, uint32_t rows,
			   uint32_t stride, size_t off)
{
	const int32_t *cell_seq = a->cell_seq + off, *cell_pos = a->cell_pos + off;
	for (uint32_t r = 0; r < rows; r++) {
		const float *row = probs + (size_t)r * stride;
		double live = 0, dead = 0;
		const struct mdl_seq *s = &a->seqs[a->cur_seq];
		for (uint32_t c = 0; c < n_kv; c++) {
			if (cell_seq[c] == a->cur_seq ||
			    (s->copy_src >= 0 && cell_seq[c] == s->copy_src &&
			     cell_pos[c] < s->copy_end))
				live += row[c];
			else
				dead += row[c];
		}
		double err = fabs(live - 1.0);
		if (err > a->st.row_sum_max_err)
			a->st.row_sum_max_err = err;
		if (dead > a->st.row_dead_mass_max)
			a->st.row_dead_mass_max = dead;
	}
}

static void md__observe_attention(md_llama *a, const struct ggml_tensor *t, long layer)
{
	/* the cells of this layer's KV cache (sliding-window models have two) */
	size_t off = a->n_maps > 1 && layer >= 0 && (uint32_t)layer < a->n_layer
			     ? (size_t)a->layer_map[layer] * a->n_ctx : 0;
	if (t->type != GGML_TYPE_F32 || t->ne[3] != 1)
		return;
	uint32_t n_kv = (uint32_t)t->ne[0];
	uint32_t n_q = (uint32_t)t->ne[1];
	uint32_t n_head = (uint32_t)t->ne[2];
	if (n_kv > a->n_ctx || t->nb[0] != sizeof(float) || t->nb[2] != t->nb[1] * t->ne[1])
		return;
	const float *data = mdl_tensor_host(a, t, ggml_nbytes(t));
	if (!data)
		return;
	uint32_t stride = (uint32_t)(t->nb[1] / sizeof(float));
	if (a->cfg.check_rows)
		md__check_rows(a, data, n_kv, n_q * n_head, stride, off);
	if (!a->cur_tracked)
		return;
	/* The tensor is [head][query][cell]; the reduction is a mean over all
	 * (query, head) rows, so handing it over as n_q*n_head rows is exact. */
	struct mdk_probs pr = {
		.probs = data, .n_query = n_q * n_head, .n_head = 1, .n_kv = n_kv,
		.row_stride = stride,
	};
	struct mdk_cell_map map = {
		.page = a->cell_page + off, .token = a->cell_tok + off, .n_kv = n_kv,
		.n_pages = a->page_cap, .page_tokens = a->P,
	};
	struct mdk_page_out out = {a->token_mass, a->page_mass, a->refresh};
	mdk_page_mass_accumulate(&pr, &map, 1.0f / (float)a->n_layer_observed, &out,
				 MDK_IMPL_AUTO);
	a->st.layers_observed++;
}

/* The layer of a K write named "cache_k_l<il>" or "cache_k_l<il> (view)"; -1. */
static long md__k_write_layer(const char *name)
{
	if (!md__name_is(name, "cache_k_l", 9) || name[9] < '0' || name[9] > '9')
		return -1;
	char *end;
	long il = strtol(name + 9, &end, 10);
	return *end == ' ' || *end == '\0' ? il : -1;
}

bool mdl_cb_eval(struct ggml_tensor *t, bool ask, void *user)
{
	md_llama *a = user;
	if (!a->in_decode)
		return false;
	if (ask) {
		/* layer 0's K write; with two KV caches (sliding-window layers) every
		 * layer's, to learn which cache each layer uses */
		if (t->op == GGML_OP_SET_ROWS) {
			long il = md__k_write_layer(t->name);
			return il == 0 || (il > 0 && a->n_maps > 1);
		}
		if (a->cfg.capture_attention && t->op == GGML_OP_SOFT_MAX &&
		    md__name_is(t->name, "kq_soft_max-", 12)) {
			long il = strtol(t->name + 12, NULL, 10);
			return il >= 0 && (uint32_t)il % a->cfg.layer_stride == 0;
		}
		return false;
	}
	uint64_t t0 = md_now_ns();
	if (t->op == GGML_OP_SET_ROWS)
		mdl_observe_kv_write(a, t, md__k_write_layer(t->name));
	else if (t->op == GGML_OP_SOFT_MAX)
		md__observe_attention(a, t, strtol(t->name + 12, NULL, 10));
	uint64_t t1 = md_now_ns();
	a->st.observe_ns += t1 - t0;
	mdl_keepalive(a, t1);
	return true;  /* false would abort the graph */
}

/* The step of seq (n tokens) and, when attention is observed, one record per
 * declared page: one md_publish_batch, so one tail store and at most one
 * doorbell a step, however many pages (docs/abi.md §8). */
void mdl_publish_step(md_llama *a, llama_seq_id seq, uint32_t n)
{
	struct mdl_seq *s = &a->seqs[seq];
	uint32_t q = (uint32_t)seq, k = 0;
	if (a->attached && a->cfg.capture_attention) {
		struct mdk_cell_map map = {
			.page = a->cell_page, .token = a->cell_tok, .n_kv = a->n_ctx,
			.n_pages = a->page_cap, .page_tokens = a->P,
		};
		struct mdk_page_out out = {a->token_mass, a->page_mass, a->refresh};
		float tau = (float)a->params.tau;
		float norm = a->params.norm_mode == MD_NORM_RELATIVE ? (float)s->live_tokens : 1.0f;
		mdk_page_refresh(&map, tau, norm, &out);
		for (uint32_t i = 0; i < s->page_of_cap && k < a->page_cap; i++) {
			int32_t p = s->page_of[i];
			if (p < 0 || !a->pages[p].registered)
				continue;
			a->batch_slot[k] = a->pages[p].slot;
			a->batch_mass[k] = a->page_mass[p];
			a->batch_refresh[k] = a->refresh[p];
			k++;
		}
	}
	struct md_batch_result res;
	int rc = md_publish_batch(a->client, &q, &n, 1, a->batch_slot, a->batch_mass,
				  a->batch_refresh, k, &res);
	if (rc == -EINVAL) {
		/* a mass the library refuses (not finite): the step still counts */
		md_seq_step(a->client, q, n);
		a->st.attn_dropped += k;
		return;
	}
	a->st.attn_records += res.published;
	a->st.attn_dropped += res.dropped + res.skipped;
}
