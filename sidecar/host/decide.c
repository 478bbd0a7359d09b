/*
 * decide.c — one decision pass for an engine: rebuilds its eviction index when
 * the parameters moved on (a new epoch), applies its protection count, then
 * evicts per scope with evict_index.c's threshold algorithm: each sequence
 * over its token budget down to its low watermark, then the engine down to
 * its page budget's.  An eviction marks the page evicting (pagestate.c),
 * which may move protection and so the heaps.  Then, for an engine holding
 * tier pages (ABI 1.4, docs/tier.md), drops down to its tier budget and
 * recalls, each against the evictable page the current queries need least
 * (tier_pass, below).  Above pagestate.c and evict_index.c: neither calls
 * into it.
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
	e->kpub_all = 1;
	for (uint32_t q = 0; q < e->max_seqs; q++) {
		struct md__seq *s = &e->seqs[q];
		uint32_t kq = s->own_pos ? md__seq_protect_count(h, e, q, e->seqs_live) : k;
		s->keyheap_n = 0;
		s->nodecay = 0;
		for (unsigned c = 0; c < MD_REGIONS_MAX; c++)
			s->decayheap_n[c] = 0;
		s->k_protect = kq;
		for (uint32_t i = 0; i < s->n_pages; i++) {
			struct md__page *pg = &e->pages[s->pages[i].slot];
			e->keyheap_pos[s->pages[i].slot] = MD__NO_HEAP;
			e->dcls[s->pages[i].slot] = MD__NO_CLASS;
			if (s->n_pages - 1 - i < kq)
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
	out->type = MD_CMD_EVICT;
	e->evictions++;
	e->evictions_by_region[md__dominant_region(pg->labels, pg->n_tokens)]++;
	if (reason < MD_EVICT_REASON_COUNT)
		e->evictions_by_reason[reason]++;
	md__page_set_evicting(h, e, slot);
}

/* the over-budget set for the engine's budget b (0: only sequences with
 * their own): O(max_seqs), run only when the engine's sequence budget changes */
static void ob_rebuild(struct md__engine *e, uint64_t b)
{
	for (uint32_t i = 0; i < e->ob_n; i++)
		e->seqs[e->ob_seqs[i]].ob_pos = 0;
	e->ob_n = 0;
	e->ob_budget = b;
	if (b || e->own_n)
		for (uint32_t q = 0; q < e->max_seqs; q++)
			md__ob_note(e, q);
}

/* ---- scopes that mix policies: an exact sort ----
 * A sequence with its own policy keeps its pages in the index under the
 * engine's keys (bounds of the engine's policy's score, not of its own), so a
 * scope holding one is decided by scoring each of its evictable pages (the
 * pages in its sequences' key heaps) with its own sequence's policy and
 * sorting: the order the oracle states, at O(n log n) per pass. */
struct xcand {
	double score;
	uint64_t first_pos;
	uint32_t slot, pad;
};

static int xcand_cmp(const void *a, const void *b)
{
	const struct xcand *x = a, *y = b;
	return md__evict_order(x->score, x->first_pos, x->slot, y->score, y->first_pos, y->slot);
}

/* a sequence whose policy is not the index's (the engine's) */
static int seq_foreign(const struct md__host *h, const struct md__engine *e, uint32_t q)
{
	const struct md__seq *s = &e->seqs[q];
	return s->own_policy != MD_SEQ_ENGINE_U32 && md__seq_policy(h, e, s) != e->policy;
}

static int engine_mixed(const struct md__host *h, const struct md__engine *e)
{
	for (uint32_t i = 0; i < e->own_n; i++)
		if (e->seqs[e->own_seqs[i]].keyheap_n && seq_foreign(h, e, e->own_seqs[i]))
			return 1;
	return 0;
}

/* the evictable pages of seqs[0..ns) in eviction order (malloc'ed; NULL when
 * there are none or memory is short) */
static struct xcand *exact_order(struct md__host *h, struct md__engine *e, const uint32_t *seqs,
				 size_t ns, size_t *nc)
{
	size_t total = 0;
	for (size_t i = 0; i < ns; i++)
		total += e->seqs[seqs[i]].keyheap_n;
	*nc = 0;
	struct xcand *c = total ? malloc(total * sizeof(*c)) : NULL;
	if (!c)
		return NULL;
	for (size_t i = 0; i < ns; i++) {
		const struct md__seq *s = &e->seqs[seqs[i]];
		const struct md__policy *pol = md__policy_get(md__seq_policy(h, e, s));
		for (uint32_t j = 0; j < s->keyheap_n; j++) {
			uint32_t slot = s->keyheap[j].slot;
			struct md__score_in in;
			md__score_in_init(h, e, slot, &in);
			const struct md__page *pg = &e->pages[slot];
			c[*nc].score = pol->score(pg, &e->t_refresh[(size_t)slot * e->page_tokens],
						  &in, NULL);
			c[*nc].first_pos = pg->first_pos;
			c[*nc].slot = slot;
			c[*nc].pad = 0;
			(*nc)++;
		}
	}
	qsort(c, *nc, sizeof(*c), xcand_cmp);
	return c;
}

/* evicts from seqs in exact order until *live <= target (live: the scope's
 * token or page count, which each emit lowers); returns decisions made */
static size_t decide_exact(struct md__host *h, struct md__engine *e, const uint32_t *seqs,
			   size_t ns, const uint64_t *live, uint64_t target, uint32_t reason,
			   struct md__decision *out, size_t cap)
{
	size_t nc, n = 0;
	struct xcand *c = exact_order(h, e, seqs, ns, &nc);
	for (size_t i = 0; i < nc && n < cap && *live > target; i++)
		if (e->keyheap_pos[c[i].slot] != MD__NO_HEAP) /* still evictable */
			emit(h, e, c[i].slot, reason, &out[n++]);
	free(c);
	return n;
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static size_t evict_scopes(struct md__host *h, struct md__engine *e, struct md__decision *out,
			   size_t cap)
{
	if (!md__index_live(h, e))
		md__index_rebuild(h, e);
	/* protection: only when the count moved or a sequence took another one */
	uint32_t k = md__engine_protect_count(h, e);
	if (k != e->k_applied || e->k_dirty) {
		e->k_applied = k;
		e->k_dirty = 0;
		for (uint32_t q = 0; q < e->max_seqs; q++)
			if (e->seqs[q].k_protect != k && !e->seqs[q].own_pos)
				md__seq_set_protect(h, e, q, k);
	}
	/* sequences with own options: their count may move with seqs_live */
	for (uint32_t i = 0; i < e->own_n; i++) {
		uint32_t q = e->own_seqs[i];
		uint32_t kq = md__seq_protect_count(h, e, q, e->seqs_live);
		if (e->seqs[q].k_protect != kq)
			md__seq_set_protect(h, e, q, kq);
	}

	size_t n = 0;
	struct md__scope sc;
	uint64_t bseq = md__engine_seq_budget_tokens(h, e);
	double lw = h->params.low_watermark;
	if (bseq != e->ob_budget)
		ob_rebuild(e, bseq);
	if (e->ob_n) {
		/* the set in sequence order (emits shrink the set: work on a copy) */
		uint32_t *ids = e->ob_seqs + e->max_seqs, nids = e->ob_n;
		memcpy(ids, e->ob_seqs, (size_t)nids * sizeof(*ids));
		if (nids > 1)
			qsort(ids, nids, sizeof(*ids), u32_cmp);
		for (uint32_t i = 0; i < nids && n < cap; i++) {
			uint32_t q = ids[i];
			struct md__seq *s = &e->seqs[q];
			uint64_t b = md__seq_budget_tokens(h, e, s);
			if (!b || s->tokens_live <= b)
				continue;
			uint64_t target = (uint64_t)floor(lw * (double)b);
			if (seq_foreign(h, e, q)) {
				n += decide_exact(h, e, &q, 1, &s->tokens_live, target,
						  MD_EVICT_SEQUENCE_BUDGET, out + n, cap - n);
				continue;
			}
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
		if (engine_mixed(h, e)) {
			n += decide_exact(h, e, ids, ns, &e->pages_live, target, reason, out + n,
					  cap - n);
			free(ids);
			return n;
		}
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

/* ---- the host tier: drops and recalls (docs/tier.md, "The decision") ---- */

static void emit_cmd(struct md__engine *e, uint32_t slot, uint32_t type, uint32_t reason,
		     struct md__decision *out)
{
	const struct md__page *pg = &e->pages[slot];
	*out = (struct md__decision){.engine_id = e->id, .seq = pg->seq, .slot = slot,
				     .gen = pg->gen, .reason = reason, .type = type};
}

/* a tier page's score: its sequence's policy at its sequence's clock, as a
 * resident page's */
static double page_score(const struct md__host *h, const struct md__engine *e, uint32_t slot)
{
	struct md__score_in in;
	md__score_in_init(h, e, slot, &in);
	const struct md__policy *pol =
		md__policy_get(md__seq_policy(h, e, &e->seqs[e->pages[slot].seq]));
	return pol->score(&e->pages[slot], &e->t_refresh[(size_t)slot * e->page_tokens], &in, NULL);
}

/* recall candidates: a slot and its recent attention (e->att_recent), taken
 * from the highest attention (their estimate) down, the lower slot first on
 * a tie */
struct rcand {
	float att;
	uint32_t slot;
};

static int rcand_cmp(const void *a, const void *b)
{
	const struct rcand *x = a, *y = b;
	if (x->att != y->att)
		return x->att > y->att ? -1 : 1;
	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* tier slots with their scores (malloc'ed; NULL: none or no memory, which
 * leaves the pass to the next one) */
static struct xcand *score_slots(const struct md__host *h, const struct md__engine *e,
				 const uint32_t *slots, size_t n)
{
	struct xcand *c = n ? malloc(n * sizeof(*c)) : NULL;
	if (!c)
		return NULL;
	for (size_t i = 0; i < n; i++)
		c[i] = (struct xcand){.score = page_score(h, e, slots[i]),
				      .first_pos = e->pages[slots[i]].first_pos, .slot = slots[i]};
	return c;
}

/* The page a recall candidate would displace in seqs[0..ns) (docs/tier.md,
 * "Recalls"): the scope's evictable page the current queries need least,
 * i.e. the lowest recent attention (e->att_recent), the first in the
 * scope's eviction order on a tie: 1 with *slot, 0 when none is evictable.
 * The evictable pages are those in the sequences' key heaps: exactly the set
 * md__scope_next pops from and decide_exact sorts (pinned pages, protected
 * newest pages, sinks and restoring pages are in none).  Read in place, not
 * popped: the heaps stay as they are.  A tie is ordered as the scope orders
 * it: page_score is the sequence's policy, which is the index's in a scope
 * that does not mix policies, so one comparison serves both.
 * Cost: O(pages in the scope), a score only for a page that ties the lowest
 * attention so far; asked at most once per scope between two restores
 * (tier_pass skips a scope that refused), so per pass at most
 * (recall.max_per_pass + 1) times the scopes that have candidates. */
static int least_needed(const struct md__host *h, const struct md__engine *e,
			const uint32_t *seqs, size_t ns, uint32_t *slot)
{
	int found = 0, scored = 0;
	float low = 0.0f;
	struct xcand best = {0};
	for (size_t i = 0; i < ns; i++) {
		const struct md__seq *s = &e->seqs[seqs[i]];
		for (uint32_t j = 0; j < s->keyheap_n; j++) {
			uint32_t x = s->keyheap[j].slot;
			float a = e->att_recent[x];
			if (found && a > low)
				continue;
			if (!found || a < low) {
				found = 1;
				scored = 0;
				low = a;
				best.slot = x;
				continue;
			}
			/* a tie: the eviction order decides */
			if (!scored) {
				best = (struct xcand){.score = page_score(h, e, best.slot),
						      .first_pos = e->pages[best.slot].first_pos,
						      .slot = best.slot};
				scored = 1;
			}
			struct xcand c = {.score = page_score(h, e, x),
					  .first_pos = e->pages[x].first_pos, .slot = x};
			if (xcand_cmp(&c, &best) < 0)
				best = c;
		}
	}
	*slot = best.slot;
	return found;
}

/* Drops while the tier is over its budget, lowest score first; then the
 * candidates from the highest estimate down, at most recall.max_per_pass
 * restores, each against the page it would displace: in its scope, the
 * evictable page with the lowest recent attention (least_needed), which the
 * candidate's estimate must beat by the margin (md__recall_beats).  The
 * policy decides every eviction that new tokens force (evict_scopes); a
 * recall swaps by need only.  A restore with a victim takes two commands
 * (the evict first, so that the engine has the device block when the
 * restore comes): a candidate is considered only while two fit in out, and
 * the ones not reached stay candidates. */
static size_t tier_pass(struct md__host *h, struct md__engine *e, struct md__decision *out,
			size_t cap)
{
	size_t n = 0;
	uint64_t tb = md__engine_tier_budget(h, e);
	if (e->n_tier > tb && n < cap) {
		size_t nt = e->n_tier;
		struct xcand *c = score_slots(h, e, e->tier_slots, nt);
		if (!c)
			return n;
		/* the lowest n_tier - budget in the eviction order: sorted, at the
		 * tier's size (bounded by HELLO tier_pages plus what came in since
		 * the last pass) */
		qsort(c, nt, sizeof(*c), xcand_cmp);
		for (size_t i = 0; i < nt && n < cap && e->n_tier > tb; i++) {
			emit_cmd(e, c[i].slot, MD_CMD_DROP, MD_DROP_TIER_BUDGET, &out[n++]);
			md__page_set_dropping(h, e, c[i].slot);
			e->drops++;
		}
		free(c);
	}
	uint32_t per_pass = h->params.recall_max_per_pass;
	if (!per_pass || !e->n_cand || cap - n < 2)
		return n;
	size_t nc = e->n_cand;
	struct rcand *c = malloc(nc * sizeof(*c));
	uint32_t *ids = malloc((size_t)e->max_seqs * sizeof(*ids));
	/* scopes whose least-needed page refused a candidate since the last
	 * restore: a sequence's (seq_done[q]) or the engine's (eng_done) */
	uint8_t *seq_done = calloc(e->max_seqs, 1);
	int eng_done = 0;
	if (!c || !ids || !seq_done) {
		free(c);
		free(ids);
		free(seq_done);
		return n;
	}
	for (size_t i = 0; i < nc; i++)
		c[i] = (struct rcand){.att = e->att_recent[e->cand_slots[i]],
				      .slot = e->cand_slots[i]};
	qsort(c, nc, sizeof(*c), rcand_cmp);
	double margin = h->params.recall_margin;
	uint32_t restored = 0;
	for (size_t i = 0; i < nc && restored < per_pass && cap - n >= 2; i++) {
		uint32_t p = c[i].slot, q = e->pages[p].seq;
		struct md__seq *s = &e->seqs[q];
		md__cand_remove(e, p); /* considered: out until its next estimate */
		uint64_t bseq = md__seq_budget_tokens(h, e, s);
		uint32_t reason = 0, victim = 0;
		int has_victim = 0, blocked = 0;
		int seq_scope = bseq && s->tokens_live + e->pages[p].n_tokens > bseq;
		/* Candidates come in falling order, and nothing a refusal leaves
		 * behind changes a scope's evictable pages or their attention:
		 * after one refusal every later candidate of that scope is
		 * refused too, until a restore.  They skip the scan, and leave
		 * the set all the same, as the oracle states the rule. */
		if (seq_scope ? seq_done[q] : eng_done)
			continue;
		if (seq_scope) {
			reason = MD_EVICT_SEQUENCE_BUDGET;
			blocked = !least_needed(h, e, &q, 1, &victim);
			has_victim = !blocked;
		} else {
			uint64_t bp = md__engine_page_budget(h, e, &reason);
			if (bp && e->pages_live + 1 > bp) {
				size_t ns = 0;
				for (uint32_t x = 0; x < e->max_seqs; x++)
					if (e->seqs[x].keyheap_n)
						ids[ns++] = x;
				/* read afresh for each candidate: a restore raises
				 * the ranks of older pages, which may leave
				 * protection */
				blocked = !least_needed(h, e, ids, ns, &victim);
				has_victim = !blocked;
			}
		}
		/* need against need: the candidate's estimate against the
		 * least-needed page's latest mass */
		if (blocked || (has_victim && !md__recall_beats(c[i].att, e->att_recent[victim],
								 margin))) {
			if (seq_scope)
				seq_done[q] = 1;
			else
				eng_done = 1;
			continue;
		}
		/* the restore first, as it may fail (a page of its sequence took
		 * its positions, or no memory); the victim's evict still goes
		 * ahead of it in out.  The victim stays evictable: p only raises
		 * the ranks of the pages older than it. */
		if (md__page_restore(h, e, p))
			continue;
		if (has_victim)
			emit(h, e, victim, reason, &out[n++]);
		emit_cmd(e, p, MD_CMD_RESTORE, MD_RESTORE_RECALL, &out[n++]);
		e->restores++;
		restored++;
		memset(seq_done, 0, e->max_seqs);
		eng_done = 0;
	}
	free(c);
	free(ids);
	free(seq_done);
	return n;
}

size_t md__index_decide_engine(struct md__host *h, struct md__engine *e,
			       struct md__decision *out, size_t cap)
{
	size_t n = evict_scopes(h, e, out, cap);
	if (n < cap && (e->n_tier || e->n_cand))
		n += tier_pass(h, e, out + n, cap - n);
	return n;
}
