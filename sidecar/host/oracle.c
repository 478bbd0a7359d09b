/*
 * oracle.c — brute force, on purpose: every live page of an engine gets its
 * pinned flag, sink flag and protection rank recomputed from the raw state and
 * its score in double by its sequence's policy's own score function (the
 * sequence's own options over the engine's, docs/policies.md); candidates are
 * sorted by (score, first_pos, slot) and taken in order until each scope is
 * back under its low watermark, exactly as docs/design.md §1 states the rule.
 * The operator's `top` (md__host_top) is the same candidate list, sorted.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "host_internal.h"
#include "oracle.h"

struct live_ent {
	uint32_t seq;
	uint32_t slot;
	uint64_t first_pos;
};

static int live_cmp(const void *a, const void *b)
{
	const struct live_ent *x = a, *y = b;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	if (x->first_pos != y->first_pos)
		return x->first_pos > y->first_pos ? -1 : 1; /* newest first */
	return 0;
}

static int cand_cmp(const void *a, const void *b)
{
	const struct md__oracle_cand *x = a, *y = b;
	return md__evict_order(x->score, x->first_pos, x->slot, y->score, y->first_pos, y->slot);
}

static int cand_seq_cmp(const void *a, const void *b)
{
	const struct md__oracle_cand *x = a, *y = b;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return cand_cmp(a, b);
}

size_t md__oracle_candidates(const struct md__host *h, const struct md__engine *e,
			     struct md__oracle_cand **out)
{
	*out = NULL;
	const struct md__params *p = &h->params;
	size_t nl = 0;
	for (uint32_t i = 0; i < e->page_capacity; i++)
		nl += e->pages[i].state == MD__SLOT_LIVE;
	if (!nl)
		return 0;
	struct live_ent *live = malloc(nl * sizeof(*live));
	struct md__oracle_cand *c = malloc(nl * sizeof(*c));
	if (!live || !c) {
		free(live);
		free(c);
		return 0;
	}
	size_t j = 0;
	for (uint32_t i = 0; i < e->page_capacity; i++)
		if (e->pages[i].state == MD__SLOT_LIVE)
			live[j++] = (struct live_ent){e->pages[i].seq, i, e->pages[i].first_pos};
	qsort(live, nl, sizeof(*live), live_cmp);
	uint64_t seqs_live = 0;
	for (size_t i = 0; i < nl; i++)
		seqs_live += i == 0 || live[i].seq != live[i - 1].seq;
	struct md__score_in in;
	size_t nc = 0;
	uint32_t rank = 0, k = 0;
	const struct md__policy *pol = NULL;
	for (size_t i = 0; i < nl; i++) {
		if (i == 0 || live[i].seq != live[i - 1].seq) {
			/* each sequence's own policy and protection (its options) */
			const struct md__seq *s = &e->seqs[live[i].seq];
			k = md__seq_protect_count(h, e, live[i].seq, seqs_live);
			pol = md__policy_get(md__seq_policy(h, e, s));
			rank = 0;
		} else {
			rank++;
		}
		if (rank < k)
			continue;
		const struct md__page *pg = &e->pages[live[i].slot];
		if (md__page_is_pinned(p, pg->labels, pg->n_tokens))
			continue;
		if (pol->is_sink && pol->is_sink(pg, p))
			continue;
		md__score_in_init(h, e, live[i].slot, &in);
		struct md__score_terms t = {0, 0};
		double s = pol->score(pg, &e->t_refresh[(size_t)live[i].slot * e->page_tokens], &in, &t);
		c[nc++] = (struct md__oracle_cand){.score = s, .decay = t.decay, .attn = t.attn,
						  .first_pos = pg->first_pos, .slot = live[i].slot,
						  .seq = pg->seq, .n_tokens = pg->n_tokens};
	}
	free(live);
	*out = c;
	return nc;
}

static size_t decide_engine(const struct md__host *h, const struct md__engine *e,
			    struct md__decision *out, size_t cap)
{
	size_t n = 0;
	struct md__oracle_cand *c;
	size_t nc = md__oracle_candidates(h, e, &c);
	uint64_t *tokens = calloc(e->max_seqs, sizeof(uint64_t));
	char *taken = calloc(nc ? nc : 1, 1);
	if (!tokens || !taken) {
		free(tokens);
		free(taken);
		free(c);
		return 0;
	}
	uint64_t pages = 0;
	for (uint32_t i = 0; i < e->page_capacity; i++)
		if (e->pages[i].state == MD__SLOT_LIVE) {
			pages++;
			tokens[e->pages[i].seq] += e->pages[i].n_tokens;
		}
	double lw = h->params.low_watermark;
	if (nc)
		qsort(c, nc, sizeof(*c), cand_seq_cmp);
	{
		size_t g = 0;
		for (uint32_t q = 0; q < e->max_seqs && n < cap; q++) {
			while (g < nc && c[g].seq < q)
				g++;
			/* the sequence's own budget, else the engine's */
			uint64_t bseq = md__seq_budget_tokens(h, e, &e->seqs[q]);
			if (!bseq || tokens[q] <= bseq)
				continue;
			uint64_t target = (uint64_t)floor(lw * (double)bseq);
			for (size_t i = g; i < nc && c[i].seq == q; i++) {
				if (n >= cap || tokens[q] <= target)
					break;
				const struct md__page *pg = &e->pages[c[i].slot];
				out[n++] = (struct md__decision){e->id, pg->seq, c[i].slot, pg->gen,
								 MD_EVICT_SEQUENCE_BUDGET};
				tokens[q] -= pg->n_tokens;
				pages--;
				taken[i] = 1;
			}
		}
	}
	uint32_t reason;
	uint64_t bp = md__engine_page_budget(h, e, &reason);
	if (bp && pages > bp && n < cap) {
		uint64_t target = (uint64_t)floor(lw * (double)bp);
		size_t m = 0;
		for (size_t i = 0; i < nc; i++)
			if (!taken[i])
				c[m++] = c[i];
		qsort(c, m, sizeof(*c), cand_cmp);
		for (size_t i = 0; i < m && n < cap && pages > target; i++) {
			const struct md__page *pg = &e->pages[c[i].slot];
			out[n++] = (struct md__decision){e->id, pg->seq, c[i].slot, pg->gen, reason};
			pages--;
		}
	}
	free(tokens);
	free(taken);
	free(c);
	return n;
}

size_t md__oracle_decide(const struct md__host *h, struct md__decision *out, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < h->n_engines && n < cap; i++)
		n += decide_engine(h, h->engines[i], out + n, cap - n);
	return n;
}

size_t md__oracle_decide_engine(const struct md__host *h, uint32_t engine_id,
				struct md__decision *out, size_t cap)
{
	const struct md__engine *e = md__host_find(h, engine_id);
	return e ? decide_engine(h, e, out, cap) : 0;
}

/* ---- top ---- */

static int top_cmp(const void *a, const void *b)
{
	const struct md__top_entry *x = a, *y = b;
	int c = md__evict_order(x->score, x->first_pos, x->slot, y->score, y->first_pos, y->slot);
	if (c)
		return c;
	return x->engine_id < y->engine_id ? -1 : x->engine_id > y->engine_id;
}

size_t md__host_top(const struct md__host *h, uint32_t engine_id, struct md__top_entry *out,
		    size_t n)
{
	/* an operator command: brute force through the candidate list */
	size_t total = 0, cap = 0;
	struct md__top_entry *all = NULL;
	for (size_t i = 0; i < h->n_engines; i++) {
		const struct md__engine *e = h->engines[i];
		if (engine_id != UINT32_MAX && e->id != engine_id)
			continue;
		struct md__oracle_cand *c = NULL;
		size_t nc = md__oracle_candidates(h, e, &c);
		if (total + nc > cap) {
			size_t ncap = (total + nc) * 2 + 16;
			struct md__top_entry *na = realloc(all, ncap * sizeof(*na));
			if (!na) {
				free(c);
				break;
			}
			all = na;
			cap = ncap;
		}
		for (size_t j = 0; j < nc; j++) {
			const struct md__page *pg = &e->pages[c[j].slot];
			struct md__top_entry *t = &all[total++];
			t->engine_id = e->id;
			t->seq = pg->seq;
			t->slot = c[j].slot;
			t->gen = pg->gen;
			t->first_pos = pg->first_pos;
			t->n_tokens = pg->n_tokens;
			t->dominant_region = md__dominant_region(pg->labels, pg->n_tokens);
			t->score = c[j].score;
			t->decay_term = c[j].decay;
			t->attn_term = c[j].attn;
		}
		free(c);
	}
	if (total)
		qsort(all, total, sizeof(*all), top_cmp);
	size_t k = total < n ? total : n;
	if (k)
		memcpy(out, all, k * sizeof(*out));
	free(all);
	return k;
}
