/*
 * settings.c — an engine's effective settings that no hot path asks: its page
 * budget (its own, or its weighted share of the global one), how many newest
 * pages of a sequence its policy protects (the engine's, or a sequence's own
 * policy and budget), and a page's dominant region.  The
 * hot ones (policy, norm, sequence budget, score inputs) are inline in
 * host_internal.h.  A leaf of the host: it calls only the policy table.
 * Budgets: per sequence (tokens), per engine (pages); the global page budget
 * is shared by engines in proportion to their weight (share = floor(G w / sum w))
 * and binds an engine through its effective budget min(own, share).
 */
#include <math.h>
#include "host_internal.h"

uint64_t md__engine_page_budget(const struct md__host *h, const struct md__engine *e,
				uint32_t *reason)
{
	uint64_t own = e->opts.budget_engine_pages >= 0 ? (uint64_t)e->opts.budget_engine_pages
							: h->params.budget_engine_pages;
	uint64_t share = 0;
	if (h->params.budget_global_pages) {
		double wsum = 0.0;
		for (size_t i = 0; i < h->n_engines; i++)
			wsum += h->engines[i]->opts.weight;
		double s = floor((double)h->params.budget_global_pages * e->opts.weight / wsum);
		share = s < 0 ? 0 : (uint64_t)s;
		if (share == 0)
			share = 1; /* a zero share would read as "no budget" */
	}
	uint32_t why = MD_EVICT_ENGINE_BUDGET;
	uint64_t b = own;
	if (share && (!own || share < own)) {
		b = share;
		why = MD_EVICT_GLOBAL_BUDGET;
	}
	if (reason)
		*reason = why;
	return b;
}

uint32_t md__engine_protect_count(const struct md__host *h, const struct md__engine *e)
{
	return md__protect_count_for(h, e, e->seqs_live);
}

/* tail page and protect_recent, or the policy's window if larger, for a
 * sequence under policy with token budget bseq (0: its share of the engine's
 * page budget) */
static uint32_t protect_count(const struct md__host *h, const struct md__engine *e,
			      uint32_t policy, uint64_t bseq, uint64_t seqs_live)
{
	uint64_t k = 1 + (uint64_t)h->params.protect_recent;
	const struct md__policy *pol = md__policy_get(policy);
	if (pol->window_pages) {
		uint64_t bp;
		if (bseq)
			bp = (bseq + e->page_tokens - 1) / e->page_tokens;
		else
			bp = md__engine_page_budget(h, e, NULL) / (seqs_live ? seqs_live : 1);
		uint64_t w = pol->window_pages(&h->params, bp);
		if (w > k)
			k = w;
	}
	return k > UINT32_MAX ? UINT32_MAX : (uint32_t)k;
}

uint32_t md__protect_count_for(const struct md__host *h, const struct md__engine *e,
			       uint64_t seqs_live)
{
	return protect_count(h, e, md__engine_policy(h, e), md__engine_seq_budget_tokens(h, e),
			     seqs_live);
}

uint32_t md__seq_protect_count(const struct md__host *h, const struct md__engine *e, uint32_t q,
			       uint64_t seqs_live)
{
	const struct md__seq *s = &e->seqs[q];
	if (!s->own_pos)
		return md__protect_count_for(h, e, seqs_live);
	return protect_count(h, e, md__seq_policy(h, e, s), md__seq_budget_tokens(h, e, s),
			     seqs_live);
}

uint32_t md__dominant_region(uint64_t labels, uint32_t n_tokens)
{
	unsigned cnt[MD_REGIONS_MAX] = {0};
	unsigned best = 0;
	for (unsigned k = 0; k < n_tokens; k++)
		cnt[md_label_get(labels, k)]++;
	for (unsigned r = 1; r < MD_REGIONS_MAX; r++)
		if (cnt[r] > cnt[best])
			best = r;
	return best;
}
