/*
 * settings.c — an engine's effective settings that no hot path asks: its page
 * budget (its own, or its share of the global one), how many newest
 * pages of a sequence its policy protects (the engine's, or a sequence's own
 * policy and budget), and a page's dominant region.  The
 * hot ones (policy, norm, sequence budget, score inputs) are inline in
 * host_internal.h.  A leaf of the host: it calls only the policy table.
 * Budgets: per sequence (tokens), per engine (pages); the global page budget
 * is split among engines by weighted max-min (md__global_split, below) and
 * binds an engine through its effective budget min(own, share).
 */
#include <math.h>
#include <stdlib.h>
#include "host_internal.h"

/* ---- the global split ----
 * Weighted max-min ("water-filling") over what each engine holds, in integer
 * pages.  Weights are taken in fixed point (units of 2^-32, at least one
 * unit) so every step is exact integer arithmetic: the same inputs give the
 * same shares on every machine, whatever the order of the engines.
 *
 * Engines are visited in increasing held/weight (ties: attach order).  With R
 * pages and weight Wr still to split, an engine whose holding fits its fair
 * part floor(R w / Wr) gets exactly its holding, and R and Wr lose it; the
 * first one that does not fit ends the walk, and it and every engine after it
 * (none of which fits either) gets floor(R w / Wr) of the same R and Wr.  If
 * every engine fits, the pages nobody holds (R) are split by weight over all
 * engines, floor(R w / W), on top of their holdings: room to grow that costs
 * no one a page.  Each floor loses less than a page, so the shares sum to at
 * most global.  When every engine holds more than floor(global w / W), the
 * walk stops at the first engine and the split is the plain weighted one. */

typedef unsigned __int128 md__u128;

struct md__split_ent {
	uint64_t held, wfix, share;
	size_t idx;
	uint32_t id; /* the engine's, for the host's cache */
};

static uint64_t weight_fix(double w)
{
	double s = ldexp(w, 32);
	if (!(s >= 1.0))
		return 1;
	if (s >= 0x1p63)
		return UINT64_C(1) << 63;
	return (uint64_t)s;
}

static uint64_t muldiv(uint64_t a, uint64_t b, md__u128 c)
{
	return (uint64_t)((md__u128)a * b / c); /* b <= c: fits */
}

static int split_cmp(const void *x, const void *y)
{
	const struct md__split_ent *a = x, *b = y;
	md__u128 l = (md__u128)a->held * b->wfix, r = (md__u128)b->held * a->wfix;
	if (l != r)
		return l < r ? -1 : 1;
	return (a->idx > b->idx) - (a->idx < b->idx);
}

/* t[0..n): held and wfix in, share out; sorts t */
static void split(uint64_t global, struct md__split_ent *t, size_t n)
{
	md__u128 w_all = 0;
	for (size_t i = 0; i < n; i++)
		w_all += t[i].wfix;
	if (!n)
		return;
	qsort(t, n, sizeof(*t), split_cmp);
	uint64_t r = global;
	md__u128 wr = w_all;
	size_t k = 0;
	for (; k < n; k++) {
		if (t[k].held > muldiv(r, t[k].wfix, wr))
			break;
		t[k].share = t[k].held;
		r -= t[k].held;
		wr -= t[k].wfix;
	}
	if (k < n) {
		for (size_t j = k; j < n; j++)
			t[j].share = muldiv(r, t[j].wfix, wr);
	} else {
		for (size_t j = 0; j < n; j++)
			t[j].share += muldiv(r, t[j].wfix, w_all);
	}
}

int md__global_split(uint64_t global, size_t n, const uint64_t *held, const double *weight,
		     uint64_t *share)
{
	struct md__split_ent *t = malloc((n ? n : 1) * sizeof(*t));
	if (!t)
		return -1;
	for (size_t i = 0; i < n; i++)
		t[i] = (struct md__split_ent){held[i], weight_fix(weight[i]), 0, i, 0};
	split(global, t, n);
	for (size_t i = 0; i < n; i++)
		share[t[i].idx] = t[i].share;
	free(t);
	return 0;
}

/* What an engine holds: its live pages and those being evicted (still in its
 * memory until it frees them).  A decision moves a page from one to the
 * other, so the shares stay the same through a decision pass. */
static uint64_t engine_held(const struct md__engine *e)
{
	return e->pages_live + e->pages_evicting;
}

void md__share_cache_free(struct md__share_cache *c)
{
	if (!c)
		return;
	free(c->ent);
	free(c->tmp);
	free(c);
}

/* e's share of the global budget (global != 0).  The host keeps the last split
 * with its inputs; checking them is O(engines), a new split O(engines log
 * engines).  Without memory for it: the plain weighted split. */
static uint64_t global_share(const struct md__host *h, const struct md__engine *e,
			     uint64_t global)
{
	struct md__share_cache *c = h->shares;
	size_t n = h->n_engines, at = 0;
	int valid = c && c->valid && c->global == global && c->n == n;
	for (size_t i = 0; i < n; i++) {
		const struct md__engine *x = h->engines[i];
		if (x == e)
			at = i;
		if (valid && (c->ent[i].id != x->id || c->ent[i].held != engine_held(x) ||
			      c->ent[i].wfix != weight_fix(x->opts.weight)))
			valid = 0;
	}
	if (valid)
		return c->ent[at].share;
	if (c && n > c->cap) {
		size_t cap = n * 2;
		struct md__split_ent *ent = realloc(c->ent, cap * sizeof(*ent));
		if (ent)
			c->ent = ent;
		struct md__split_ent *t = realloc(c->tmp, cap * sizeof(*t));
		if (t)
			c->tmp = t;
		if (ent && t)
			c->cap = cap;
	}
	if (!c || n > c->cap) {
		md__u128 w_all = 0;
		for (size_t i = 0; i < n; i++)
			w_all += weight_fix(h->engines[i]->opts.weight);
		return muldiv(global, weight_fix(e->opts.weight), w_all);
	}
	for (size_t i = 0; i < n; i++) {
		const struct md__engine *x = h->engines[i];
		c->ent[i] = (struct md__split_ent){engine_held(x), weight_fix(x->opts.weight), 0, i,
						   x->id};
		c->tmp[i] = c->ent[i];
	}
	split(global, c->tmp, n);
	for (size_t i = 0; i < n; i++)
		c->ent[c->tmp[i].idx].share = c->tmp[i].share;
	c->global = global;
	c->n = n;
	c->valid = 1;
	return c->ent[at].share;
}

uint64_t md__engine_page_budget(const struct md__host *h, const struct md__engine *e,
				uint32_t *reason)
{
	uint64_t own = e->opts.budget_engine_pages >= 0 ? (uint64_t)e->opts.budget_engine_pages
							: h->params.budget_engine_pages;
	uint64_t share = 0;
	if (h->params.budget_global_pages) {
		share = global_share(h, e, h->params.budget_global_pages);
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

uint64_t md__engine_tier_budget(const struct md__host *h, const struct md__engine *e)
{
	uint64_t t = h->params.tier_pages;
	return t && t < e->tier_capacity ? t : e->tier_capacity;
}

#define EBUDGET_NOW UINT64_MAX /* protect_count: ask md__engine_page_budget */

/* tail page and protect_recent, or the policy's window if larger, for a
 * sequence under policy with token budget bseq (0: its share of the engine's
 * page budget ebudget, EBUDGET_NOW: the budget now, asked only when needed) */
static uint32_t protect_count(const struct md__host *h, const struct md__engine *e,
			      uint32_t policy, uint64_t bseq, uint64_t seqs_live, uint64_t ebudget)
{
	uint64_t k = 1 + (uint64_t)h->params.protect_recent;
	const struct md__policy *pol = md__policy_get(policy);
	if (pol->window_pages) {
		uint64_t bp;
		if (bseq)
			bp = (bseq + e->page_tokens - 1) / e->page_tokens;
		else
			bp = (ebudget == EBUDGET_NOW ? md__engine_page_budget(h, e, NULL) : ebudget) /
			     (seqs_live ? seqs_live : 1);
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
			     seqs_live, EBUDGET_NOW);
}

uint32_t md__seq_protect_count_at(const struct md__host *h, const struct md__engine *e,
				  uint32_t q, uint64_t seqs_live, uint64_t engine_budget)
{
	const struct md__seq *s = &e->seqs[q];
	if (!s->own_pos)
		return protect_count(h, e, md__engine_policy(h, e),
				     md__engine_seq_budget_tokens(h, e), seqs_live, engine_budget);
	return protect_count(h, e, md__seq_policy(h, e, s), md__seq_budget_tokens(h, e, s),
			     seqs_live, engine_budget);
}

uint32_t md__seq_protect_count(const struct md__host *h, const struct md__engine *e, uint32_t q,
			       uint64_t seqs_live)
{
	return md__seq_protect_count_at(h, e, q, seqs_live, EBUDGET_NOW);
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
