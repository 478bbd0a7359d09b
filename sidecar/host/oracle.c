/*
 * oracle.c — brute force, on purpose: every live page of an engine gets its
 * pinned flag, sink flag and protection rank recomputed from the raw state and
 * its score in double by its sequence's policy's own score function (the
 * sequence's own options over the engine's, docs/policies.md); candidates are
 * sorted by (score, first_pos, slot) and taken in order until each scope is
 * back under its low watermark, exactly as docs/design.md §1 states the rule.
 * Then the host tier's drops and recalls (docs/tier.md), replayed on a copy of
 * the page states with every victim, budget and global share recomputed.
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

/* A page's state in a replayed pass: the host's, with "restoring" apart (it
 * counts as resident and takes a protection rank, but is never evicted). */
enum { S_FREE, S_LIVE, S_RESTORING, S_EVICTING, S_TIER, S_DROPPING };

static uint8_t *sim_states(const struct md__engine *e)
{
	uint8_t *st = malloc(e->page_capacity);
	if (!st)
		return NULL;
	for (uint32_t i = 0; i < e->page_capacity; i++) {
		const struct md__page *pg = &e->pages[i];
		switch (pg->state) {
		case MD__SLOT_LIVE:
			st[i] = (pg->flags & MD__PF_RESTORING) ? S_RESTORING : S_LIVE;
			break;
		case MD__SLOT_EVICTING: st[i] = S_EVICTING; break;
		case MD__SLOT_TIER: st[i] = S_TIER; break;
		case MD__SLOT_DROPPING: st[i] = S_DROPPING; break;
		default: st[i] = S_FREE; break;
		}
	}
	return st;
}

static inline int resident(uint8_t st)
{
	return st == S_LIVE || st == S_RESTORING;
}

static uint64_t sim_seqs_live(const struct md__engine *e, const uint8_t *st)
{
	uint8_t *seen = calloc(e->max_seqs, 1);
	uint64_t n = 0;
	if (!seen)
		return 0;
	for (uint32_t i = 0; i < e->page_capacity; i++)
		if (resident(st[i]) && !seen[e->pages[i].seq]) {
			seen[e->pages[i].seq] = 1;
			n++;
		}
	free(seen);
	return n;
}

static double page_score(const struct md__host *h, const struct md__engine *e, uint32_t slot,
			 struct md__score_terms *t)
{
	struct md__score_in in;
	md__score_in_init(h, e, slot, &in);
	const struct md__policy *pol =
		md__policy_get(md__seq_policy(h, e, &e->seqs[e->pages[slot].seq]));
	return pol->score(&e->pages[slot], &e->t_refresh[(size_t)slot * e->page_tokens], &in, t);
}

/* The evictable pages of sequence `only` (UINT32_MAX: all), states st,
 * protection counts k[seq]: live (not restoring), rank among its sequence's
 * resident pages (newest 0) at least k, not pinned, not a sink of its
 * sequence's policy; each scored by its sequence's policy. */
static size_t sim_candidates(const struct md__host *h, const struct md__engine *e,
			     const uint8_t *st, const uint32_t *k, uint32_t only,
			     struct md__oracle_cand **out)
{
	*out = NULL;
	const struct md__params *p = &h->params;
	size_t nl = 0;
	for (uint32_t i = 0; i < e->page_capacity; i++)
		nl += resident(st[i]) && (only == UINT32_MAX || e->pages[i].seq == only);
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
		if (resident(st[i]) && (only == UINT32_MAX || e->pages[i].seq == only))
			live[j++] = (struct live_ent){e->pages[i].seq, i, e->pages[i].first_pos};
	qsort(live, nl, sizeof(*live), live_cmp);
	size_t nc = 0;
	uint32_t rank = 0;
	const struct md__policy *pol = NULL;
	for (size_t i = 0; i < nl; i++) {
		if (i == 0 || live[i].seq != live[i - 1].seq) {
			pol = md__policy_get(md__seq_policy(h, e, &e->seqs[live[i].seq]));
			rank = 0;
		} else {
			rank++;
		}
		if (rank < k[live[i].seq] || st[live[i].slot] != S_LIVE)
			continue;
		const struct md__page *pg = &e->pages[live[i].slot];
		if (md__page_is_pinned(p, pg->labels, pg->n_tokens))
			continue;
		if (pol->is_sink && pol->is_sink(pg, p))
			continue;
		struct md__score_terms t = {0, 0};
		double s = page_score(h, e, live[i].slot, &t);
		c[nc++] = (struct md__oracle_cand){.score = s, .decay = t.decay, .attn = t.attn,
						  .first_pos = pg->first_pos, .slot = live[i].slot,
						  .seq = pg->seq, .n_tokens = pg->n_tokens};
	}
	free(live);
	*out = c;
	return nc;
}

/* each sequence's protection count with the engine's page budget eb
 * (UINT64_MAX: the host's now); NULL without memory */
static uint32_t *sim_protect(const struct md__host *h, const struct md__engine *e,
			     const uint8_t *st, uint64_t eb)
{
	uint32_t *k = malloc((size_t)e->max_seqs * sizeof(*k));
	if (!k)
		return NULL;
	uint64_t seqs_live = sim_seqs_live(e, st);
	for (uint32_t q = 0; q < e->max_seqs; q++)
		k[q] = md__seq_protect_count_at(h, e, q, seqs_live, eb);
	return k;
}

size_t md__oracle_candidates(const struct md__host *h, const struct md__engine *e,
			     struct md__oracle_cand **out)
{
	*out = NULL;
	uint8_t *st = sim_states(e);
	uint32_t *k = st ? sim_protect(h, e, st, UINT64_MAX) : NULL;
	size_t nc = k ? sim_candidates(h, e, st, k, UINT32_MAX, out) : 0;
	free(k);
	free(st);
	return nc;
}

/* The engine's page budget (0: none) and its reason, recomputed from what
 * every engine holds in the replay (held[], attach order): its own, or its
 * share of budget.global_pages when smaller (settings.c's rule). */
static uint64_t sim_page_budget(const struct md__host *h, size_t idx, const uint64_t *held,
				uint32_t *reason)
{
	const struct md__engine *e = h->engines[idx];
	uint64_t own = e->opts.budget_engine_pages >= 0 ? (uint64_t)e->opts.budget_engine_pages
							: h->params.budget_engine_pages;
	uint64_t share = 0;
	*reason = MD_EVICT_ENGINE_BUDGET;
	if (h->params.budget_global_pages) {
		size_t n = h->n_engines;
		double *w = malloc(n * sizeof(*w));
		uint64_t *sh = malloc(n * sizeof(*sh));
		if (w && sh) {
			for (size_t i = 0; i < n; i++)
				w[i] = h->engines[i]->opts.weight;
			if (md__global_split(h->params.budget_global_pages, n, held, w, sh) == 0)
				share = sh[idx];
		}
		free(w);
		free(sh);
		if (share == 0)
			share = 1;
	}
	if (share && (!own || share < own)) {
		*reason = MD_EVICT_GLOBAL_BUDGET;
		return share;
	}
	return own;
}

/* recall candidates by their recent attention (the estimate), highest first;
 * the slot breaks ties.  The attention rides in the cand's score field. */
static int cand_recall_cmp(const void *a, const void *b)
{
	const struct md__oracle_cand *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return (x->slot > y->slot) - (x->slot < y->slot);
}

/* the page a recall candidate would displace in the scope now (0: none
 * evictable): its evictable pages in the eviction order, the first with the
 * lowest recent attention */
static int sim_least_needed(const struct md__host *h, const struct md__engine *e,
			    const uint8_t *st, const uint32_t *k, uint32_t only,
			    struct md__oracle_cand *v)
{
	struct md__oracle_cand *c;
	size_t nc = sim_candidates(h, e, st, k, only, &c);
	if (nc)
		qsort(c, nc, sizeof(*c), cand_cmp);
	for (size_t i = 0; i < nc; i++)
		if (i == 0 || e->att_recent[c[i].slot] < e->att_recent[v->slot])
			*v = c[i];
	free(c);
	return nc != 0;
}

/* [first_pos, + n_tokens) of slot p meets a resident page of its sequence */
static int sim_overlaps(const struct md__engine *e, const uint8_t *st, uint32_t p)
{
	const struct md__page *a = &e->pages[p];
	if (a->first_pos + a->n_tokens < a->first_pos)
		return 1;
	for (uint32_t i = 0; i < e->page_capacity; i++) {
		const struct md__page *b = &e->pages[i];
		if (i == p || !resident(st[i]) || b->seq != a->seq)
			continue;
		if (b->first_pos < a->first_pos + a->n_tokens &&
		    a->first_pos < b->first_pos + b->n_tokens)
			return 1;
	}
	return 0;
}

static struct md__decision cmd(const struct md__engine *e, uint32_t slot, uint32_t type,
			       uint32_t reason)
{
	const struct md__page *pg = &e->pages[slot];
	return (struct md__decision){.engine_id = e->id, .seq = pg->seq, .slot = slot,
				     .gen = pg->gen, .reason = reason, .type = type};
}

/* The host tier's part of engine idx's pass (docs/tier.md, "The decision"),
 * on the replay's states: drops down to the tier budget, then the recall
 * candidates from the highest estimate down against the page each would
 * displace, as the rule states it, every victim and budget recomputed: the
 * victim is the scope's evictable page with the lowest recent attention (the
 * first in the eviction order on a tie), the swap by recent attention. */
static size_t oracle_tier(const struct md__host *h, size_t idx, uint64_t *held, uint8_t *st,
			  const uint32_t *k, struct md__decision *out, size_t cap,
			  struct md__oracle_recall *rc)
{
	const struct md__engine *e = h->engines[idx];
	size_t n = 0, nt = 0;
	for (uint32_t i = 0; i < e->page_capacity; i++)
		nt += st[i] == S_TIER;
	if (!nt)
		return 0;
	struct md__oracle_cand *c = malloc(nt * sizeof(*c));
	if (!c)
		return 0;
	uint64_t tb = md__engine_tier_budget(h, e);
	if (nt > tb) {
		size_t m = 0;
		for (uint32_t i = 0; i < e->page_capacity; i++)
			if (st[i] == S_TIER)
				c[m++] = (struct md__oracle_cand){.score = page_score(h, e, i, NULL),
								  .first_pos = e->pages[i].first_pos,
								  .slot = i};
		qsort(c, m, sizeof(*c), cand_cmp);
		for (size_t i = 0; i < m && n < cap && nt > tb; i++, nt--) {
			out[n++] = cmd(e, c[i].slot, MD_CMD_DROP, MD_DROP_TIER_BUDGET);
			st[c[i].slot] = S_DROPPING;
		}
	}
	uint32_t per = h->params.recall_max_per_pass, restored = 0;
	size_t m = 0;
	for (uint32_t i = 0; i < e->page_capacity; i++)
		if (st[i] == S_TIER && (e->pages[i].flags & MD__PF_CAND))
			c[m++] = (struct md__oracle_cand){.score = e->att_recent[i],
							  .first_pos = e->pages[i].first_pos,
							  .slot = i};
	if (per && m)
		qsort(c, m, sizeof(*c), cand_recall_cmp);
	for (size_t i = 0; per && i < m && restored < per && cap - n >= 2; i++) {
		uint32_t p = c[i].slot, q = e->pages[p].seq;
		uint64_t tokens = 0, pages = 0;
		for (uint32_t x = 0; x < e->page_capacity; x++)
			if (resident(st[x])) {
				pages++;
				if (e->pages[x].seq == q)
					tokens += e->pages[x].n_tokens;
			}
		uint64_t bseq = md__seq_budget_tokens(h, e, &e->seqs[q]);
		struct md__oracle_cand v = {0};
		uint32_t reason = 0;
		int has_victim = 0;
		if (bseq && tokens + e->pages[p].n_tokens > bseq) {
			reason = MD_EVICT_SEQUENCE_BUDGET;
			if (!sim_least_needed(h, e, st, k, q, &v))
				continue;
			has_victim = 1;
		} else {
			uint64_t bp = sim_page_budget(h, idx, held, &reason);
			if (bp && pages + 1 > bp) {
				if (!sim_least_needed(h, e, st, k, UINT32_MAX, &v))
					continue;
				has_victim = 1;
			}
		}
		if (has_victim && !md__recall_beats(c[i].score, e->att_recent[v.slot],
						    h->params.recall_margin)) {
			if (rc)
				rc->refused++;
			continue;
		}
		if (sim_overlaps(e, st, p))
			continue;
		if (has_victim) {
			out[n++] = cmd(e, v.slot, MD_CMD_EVICT, reason);
			st[v.slot] = S_EVICTING;
		}
		out[n++] = cmd(e, p, MD_CMD_RESTORE, MD_RESTORE_RECALL);
		if (rc && has_victim)
			rc->swapped++;
		else if (rc)
			rc->room++;
		st[p] = S_RESTORING;
		held[idx]++;
		restored++;
	}
	free(c);
	return n;
}

static size_t decide_engine(const struct md__host *h, size_t idx, uint64_t *held,
			    struct md__decision *out, size_t cap, struct md__oracle_recall *rc)
{
	const struct md__engine *e = h->engines[idx];
	size_t n = 0;
	uint32_t reason;
	uint64_t bp = sim_page_budget(h, idx, held, &reason);
	uint8_t *st = sim_states(e);
	uint32_t *k = st ? sim_protect(h, e, st, bp) : NULL;
	struct md__oracle_cand *c = NULL;
	size_t nc = k ? sim_candidates(h, e, st, k, UINT32_MAX, &c) : 0;
	uint64_t *tokens = calloc(e->max_seqs, sizeof(uint64_t));
	char *taken = calloc(nc ? nc : 1, 1);
	if (!k || !tokens || !taken) {
		free(tokens);
		free(taken);
		free(c);
		free(k);
		free(st);
		return 0;
	}
	uint64_t pages = 0;
	for (uint32_t i = 0; i < e->page_capacity; i++)
		if (resident(st[i])) {
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
				out[n++] = cmd(e, c[i].slot, MD_CMD_EVICT, MD_EVICT_SEQUENCE_BUDGET);
				st[c[i].slot] = S_EVICTING;
				tokens[q] -= c[i].n_tokens;
				pages--;
				taken[i] = 1;
			}
		}
	}
	if (bp && pages > bp && n < cap) {
		uint64_t target = (uint64_t)floor(lw * (double)bp);
		size_t m = 0;
		for (size_t i = 0; i < nc; i++)
			if (!taken[i])
				c[m++] = c[i];
		qsort(c, m, sizeof(*c), cand_cmp);
		for (size_t i = 0; i < m && n < cap && pages > target; i++) {
			out[n++] = cmd(e, c[i].slot, MD_CMD_EVICT, reason);
			st[c[i].slot] = S_EVICTING;
			pages--;
		}
	}
	if (n < cap)
		n += oracle_tier(h, idx, held, st, k, out + n, cap - n, rc);
	free(tokens);
	free(taken);
	free(c);
	free(k);
	free(st);
	return n;
}

/* what each engine holds (live and evicting pages), attach order: the
 * global split's input, moved by the replay's restores */
static uint64_t *sim_held(const struct md__host *h)
{
	uint64_t *held = calloc(h->n_engines ? h->n_engines : 1, sizeof(*held));
	for (size_t i = 0; held && i < h->n_engines; i++) {
		const struct md__engine *e = h->engines[i];
		for (uint32_t j = 0; j < e->page_capacity; j++)
			held[i] += e->pages[j].state == MD__SLOT_LIVE ||
				   e->pages[j].state == MD__SLOT_EVICTING;
	}
	return held;
}

size_t md__oracle_decide_recall(const struct md__host *h, struct md__decision *out, size_t cap,
				struct md__oracle_recall *rc)
{
	size_t n = 0;
	uint64_t *held = sim_held(h);
	if (!held)
		return 0;
	for (size_t i = 0; i < h->n_engines && n < cap; i++)
		n += decide_engine(h, i, held, out + n, cap - n, rc);
	free(held);
	return n;
}

size_t md__oracle_decide(const struct md__host *h, struct md__decision *out, size_t cap)
{
	return md__oracle_decide_recall(h, out, cap, NULL);
}

size_t md__oracle_decide_engine(const struct md__host *h, uint32_t engine_id,
				struct md__decision *out, size_t cap)
{
	uint64_t *held = sim_held(h);
	size_t n = 0;
	for (size_t i = 0; held && i < h->n_engines; i++)
		if (h->engines[i]->id == engine_id)
			n = decide_engine(h, i, held, out, cap, NULL);
	free(held);
	return n;
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
