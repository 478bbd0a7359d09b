/*
 * decide.c — one decision pass for an engine: rebuilds its eviction index when
 * the parameters moved on (a new epoch), applies its protection count, then
 * evicts per scope with evict_index.c's threshold algorithm: each sequence
 * over its token budget down to its low watermark, then the engine down to
 * its page budget's.  An eviction marks the page evicting (pagestate.c),
 * which may move protection and so the heaps.  Above pagestate.c and
 * evict_index.c: neither calls into it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "host_internal.h"

void md__index_rebuild(struct md__host *h, struct md__engine *e)
{
	e->index_epoch = h->params_epoch;
	e->policy = md__engine_policy(h, e);
	e->pol = md__policy_get(e->policy);
	e->key_in = (struct md__score_in){.p = &h->params, .engine_id = e->id,
					  .norm_mode = md__engine_norm(h, e),
					  .page_tokens = e->page_tokens};
	e->step_decay = e->pol->step_decay;
	e->turn_decay = e->pol->turn_decay;
	e->attn_lowers = e->pol->attn_lowers;
	e->memdecay_bound = e->pol->memdecay_bound;
	e->decay_scale = e->pol->decay_scale ? e->pol->decay_scale(&h->params) : 1.0;
	e->norm_mode = md__engine_norm(h, e);
	/* decay classes: the distinct rates lambda_r * decay_scale of the regions
	 * with lambda_r > 0 (computed as evict_index.c's decay_bound does) */
	e->n_cls = 0;
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++) {
		if (!(h->params.lambda[r] > 0.0))
			continue;
		double lam = h->params.lambda[r] * e->decay_scale;
		unsigned c = 0;
		while (c < e->n_cls && e->cls_lambda[c] != lam)
			c++;
		if (c == e->n_cls)
			e->cls_lambda[e->n_cls++] = lam;
	}
	uint32_t k = md__engine_protect_count(h, e);
	e->k_applied = k;
	e->k_dirty = 0;
	for (uint32_t q = 0; q < e->max_seqs; q++) {
		struct md__seq *s = &e->seqs[q];
		s->keyheap_n = 0;
		s->nodecay = 0;
		for (unsigned c = 0; c < MD_REGIONS_MAX; c++)
			s->decayheap_n[c] = 0;
		s->k_protect = k;
		for (uint32_t i = 0; i < s->n_pages; i++) {
			struct md__page *pg = &e->pages[s->pages[i].slot];
			e->keyheap_pos[s->pages[i].slot] = MD__NO_HEAP;
			e->dcls[s->pages[i].slot] = MD__NO_CLASS;
			if (s->n_pages - 1 - i < k)
				pg->flags |= MD__PF_PROT;
			else
				pg->flags &= (uint8_t)~MD__PF_PROT;
		}
	}
	for (uint32_t q = 0; q < e->max_seqs; q++) {
		struct md__seq *s = &e->seqs[q];
		for (uint32_t i = 0; i < s->n_pages; i++)
			md__page_reindex(h, e, s->pages[i].slot);
	}
}

static void emit(struct md__host *h, struct md__engine *e, uint32_t slot, uint32_t reason,
		 struct md__decision *out)
{
	struct md__page *pg = &e->pages[slot];
	out->engine_id = e->id;
	out->seq = pg->seq;
	out->slot = slot;
	out->gen = pg->gen;
	out->reason = reason;
	e->evictions++;
	e->evictions_by_region[md__dominant_region(pg->labels, pg->n_tokens)]++;
	if (reason < 4)
		e->evictions_by_reason[reason]++;
	md__page_set_evicting(h, e, slot);
}

/* the over-budget set for budget b (0: stop tracking): O(max_seqs), run only
 * when the effective sequence budget changes */
static void ob_rebuild(struct md__engine *e, uint64_t b)
{
	for (uint32_t i = 0; i < e->ob_n; i++)
		e->seqs[e->ob_seqs[i]].ob_pos = 0;
	e->ob_n = 0;
	e->ob_budget = b;
	if (b)
		for (uint32_t q = 0; q < e->max_seqs; q++)
			md__ob_note(e, q);
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

size_t md__index_decide_engine(struct md__host *h, struct md__engine *e,
			       struct md__decision *out, size_t cap)
{
	if (!md__index_live(h, e))
		md__index_rebuild(h, e);
	/* protection: only when the count moved or a sequence took another one */
	uint32_t k = md__engine_protect_count(h, e);
	if (k != e->k_applied || e->k_dirty) {
		e->k_applied = k;
		e->k_dirty = 0;
		for (uint32_t q = 0; q < e->max_seqs; q++)
			if (e->seqs[q].k_protect != k)
				md__seq_set_protect(h, e, q, k);
	}

	size_t n = 0;
	struct md__scope sc;
	uint64_t bseq = md__engine_seq_budget_tokens(h, e);
	double lw = h->params.low_watermark;
	if (bseq != e->ob_budget)
		ob_rebuild(e, bseq);
	if (bseq && e->ob_n) {
		uint64_t target = (uint64_t)floor(lw * (double)bseq);
		/* the set in sequence order (emits shrink the set: work on a copy) */
		uint32_t *ids = e->ob_seqs + e->max_seqs, nids = e->ob_n;
		memcpy(ids, e->ob_seqs, (size_t)nids * sizeof(*ids));
		if (nids > 1)
			qsort(ids, nids, sizeof(*ids), u32_cmp);
		for (uint32_t i = 0; i < nids && n < cap; i++) {
			uint32_t q = ids[i];
			struct md__seq *s = &e->seqs[q];
			if (s->tokens_live <= bseq)
				continue;
			if (md__scope_begin(&sc, h, e, &q, 1))
				return n;
			uint32_t slot;
			while (n < cap && s->tokens_live > target && md__scope_next(&sc, &slot))
				emit(h, e, slot, MD_EVICT_SEQUENCE_BUDGET, &out[n++]);
			md__scope_end(&sc);
		}
	}
	uint32_t reason;
	uint64_t bpages = md__engine_page_budget(h, e, &reason);
	if (bpages && e->pages_live > bpages && n < cap) {
		uint64_t target = (uint64_t)floor(lw * (double)bpages);
		/* every sequence with candidates */
		uint32_t *ids = malloc((size_t)e->max_seqs * sizeof(uint32_t));
		if (!ids)
			return n;
		size_t ns = 0;
		for (uint32_t q = 0; q < e->max_seqs; q++)
			if (e->seqs[q].keyheap_n)
				ids[ns++] = q;
		if (md__scope_begin(&sc, h, e, ids, ns)) {
			free(ids);
			return n;
		}
		uint32_t slot;
		while (n < cap && e->pages_live > target && md__scope_next(&sc, &slot))
			emit(h, e, slot, reason, &out[n++]);
		md__scope_end(&sc);
		free(ids);
	}
	return n;
}
