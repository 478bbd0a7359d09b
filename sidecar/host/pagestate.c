/*
 * pagestate.c — the daemon's own view of every page, built from validated
 * records.  Each record is checked against that view (slot range, generation,
 * sequence, token counts, finite mass, clock order) before anything changes;
 * a failure returns -MD__REJ_x and leaves the state as it was.
 * Per sequence: pages sorted by first_pos (the newest k_protect are protected
 * and stay out of the eviction heap), live token count, clock.
 * Attention: one EWMA update per attention record (a <- beta a + (1-beta) m),
 * linear in m, so page-level mass (sum over tokens) needs no per-token state;
 * the latest record's m is kept apart (e->att_recent), for recall.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "host_internal.h"

#define MD__MASS_PER_TOKEN_MAX 16.0  /* generous: averaged masses are <= 1 */

static int grow_array(void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	uint32_t nc = *cap ? *cap : 4;
	while (nc < need)
		nc *= 2;
	void *na = realloc(*arr, (size_t)nc * elem);
	if (!na)
		return -1;
	*arr = na;
	*cap = nc;
	return 0;
}

/* tokens k0..k1 of labels were appended at the sequence's clock: a region
 * change starts a turn there.  Out of memory: the turn is merged into the
 * previous one (coarser, never wrong for the oracle, which reads the same). */
static void seq_note_turns(struct md__seq *s, uint64_t labels, unsigned k0, unsigned k1)
{
	for (unsigned k = k0; k < k1; k++) {
		uint32_t r = md_label_get(labels, k);
		if (s->turn_n && r == s->turn_region)
			continue;
		if (grow_array((void **)&s->turn_clk, &s->turn_cap, s->turn_n + 1,
			       sizeof(s->turn_clk[0])))
			return;
		s->turn_clk[s->turn_n++] = s->clock;
		s->turn_region = r;
	}
}

static int region_known(const struct md__params *p, unsigned r)
{
	return r < MD_REGION_BUILTIN_COUNT || p->region_name[r][0] != '\0';
}

static int labels_known(const struct md__params *p, uint64_t labels, unsigned k0, unsigned k1)
{
	for (unsigned k = k0; k < k1; k++)
		if (!region_known(p, md_label_get(labels, k)))
			return 0;
	return 1;
}

/* first index whose first_pos >= pos */
static uint32_t seq_lower_bound(const struct md__seq *s, uint64_t pos)
{
	uint32_t lo = 0, hi = s->n_pages;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (s->pages[mid].first_pos < pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int eligible(const struct md__page *pg)
{
	return pg->state == MD__SLOT_LIVE &&
	       !(pg->flags & (MD__PF_PINNED | MD__PF_SINK | MD__PF_PROT | MD__PF_RESTORING));
}

/* The heap key of a page while the engine's index is live: its policy's lower
 * bound, with the norm the index was built with (e->norm_mode, which equals
 * md__engine_norm until the next epoch).  Runs once per attention record:
 * only the page's own sequence is read. */
static inline double page_key(struct md__engine *e, uint32_t slot)
{
	const struct md__page *pg = &e->pages[slot];
	const struct md__seq *s = &e->seqs[pg->seq];
	struct md__score_in *in = &e->key_in;
	in->clock = s->clock;
	in->slot = slot;
	in->turn_clk = s->turn_clk;
	in->turn_n = s->turn_n;
	return e->pol->lower_bound(pg, in);
}

void md__page_reindex(struct md__host *h, struct md__engine *e, uint32_t slot)
{
	struct md__page *pg = &e->pages[slot];
	struct md__seq *s = &e->seqs[pg->seq];
	const struct md__params *p = &h->params;
	if (e->keyheap_pos[slot] != MD__NO_HEAP)
		md__heap_remove(e, s, slot);
	if (!md__index_live(h, e))
		return; /* rebuilt at the next decision */
	const struct md__policy *pol = e->pol;
	/* sinks are the sequence's policy's; keys stay the index policy's
	 * bounds (a sequence of another policy is decided by an exact sort) */
	const struct md__policy *spol = s->own_policy != MD_SEQ_ENGINE_U32
						? md__policy_get(s->own_policy) : pol;
	pg->flags &= (uint8_t)~(MD__PF_PINNED | MD__PF_SINK);
	if (md__page_is_pinned(p, pg->labels, pg->n_tokens))
		pg->flags |= MD__PF_PINNED;
	if (spol->is_sink && spol->is_sink(pg, p))
		pg->flags |= MD__PF_SINK;
	struct md__page_id id = {.engine_id = e->id, .slot = slot, .gen = pg->gen};
	pg->lb_static = pol->static_bound(pg, p, &id);
	if (eligible(pg))
		md__heap_insert(e, s, slot, page_key(e, slot));
}

static void set_prot(struct md__host *h, struct md__engine *e, uint32_t slot, int prot)
{
	struct md__page *pg = &e->pages[slot];
	if (prot) {
		pg->flags |= MD__PF_PROT;
		if (e->keyheap_pos[slot] != MD__NO_HEAP)
			md__heap_remove(e, &e->seqs[pg->seq], slot);
	} else if (pg->flags & MD__PF_PROT) {
		pg->flags &= (uint8_t)~MD__PF_PROT;
		if (md__index_live(h, e) && eligible(pg))
			md__heap_insert(e, &e->seqs[pg->seq], slot, page_key(e, slot));
	}
}

void md__seq_set_protect(struct md__host *h, struct md__engine *e, uint32_t seq, uint32_t k)
{
	struct md__seq *s = &e->seqs[seq];
	uint32_t n = s->n_pages;
	uint32_t old = s->k_protect;
	s->k_protect = k;
	if (k != e->k_applied && !s->own_pos)
		e->k_dirty = 1;
	if (k != old)
		md__kpub_note(e, seq);
	/* ranks [min(old,k), max(old,k)) change side; rank r is index n-1-r */
	uint32_t lo = old < k ? old : k, hi = old < k ? k : old;
	if (hi > n)
		hi = n;
	for (uint32_t r = lo; r < hi; r++)
		set_prot(h, e, s->pages[n - 1 - r].slot, k > old);
}

/* adds a page to its sequence's order at i (its lower bound, from
 * seq_overlaps); protection moves as ranks shift */
static void seq_insert(struct md__host *h, struct md__engine *e, uint32_t slot, uint32_t i)
{
	struct md__page *pg = &e->pages[slot];
	struct md__seq *s = &e->seqs[pg->seq];
	uint32_t n = s->n_pages;
	memmove(&s->pages[i + 1], &s->pages[i], (size_t)(n - i) * sizeof(s->pages[0]));
	s->pages[i].first_pos = pg->first_pos;
	s->pages[i].slot = slot;
	s->pages[i].n_tokens = pg->n_tokens;
	s->n_pages = n + 1;
	if (i == n)
		s->tail_slot = slot;
	uint32_t rank = n - i, k = s->k_protect;
	if (rank < k) {
		pg->flags |= MD__PF_PROT;
		if (n + 1 > k) /* the page pushed from rank k-1 to rank k */
			set_prot(h, e, s->pages[n - k].slot, 0);
	} else {
		pg->flags &= (uint8_t)~MD__PF_PROT;
	}
	if (n == 0)
		e->seqs_live++;
}

static void seq_erase(struct md__host *h, struct md__engine *e, uint32_t slot)
{
	struct md__page *pg = &e->pages[slot];
	struct md__seq *s = &e->seqs[pg->seq];
	uint32_t i = seq_lower_bound(s, pg->first_pos);
	if (i >= s->n_pages || s->pages[i].slot != slot)
		abort(); /* broken invariant: the order lost a page */
	uint32_t n = s->n_pages, rank = n - 1 - i, k = s->k_protect;
	if (rank < k && n > k) /* the page at rank k moves up into the protected set */
		set_prot(h, e, s->pages[n - 1 - k].slot, 1);
	memmove(&s->pages[i], &s->pages[i + 1], (size_t)(n - 1 - i) * sizeof(s->pages[0]));
	s->n_pages = n - 1;
	if (s->n_pages)
		s->tail_slot = s->pages[s->n_pages - 1].slot;
	if (e->keyheap_pos[slot] != MD__NO_HEAP)
		md__heap_remove(e, s, slot);
	pg->flags &= (uint8_t)~MD__PF_PROT;
	if (s->n_pages == 0)
		e->seqs_live--;
}

/* the page [first_pos, first_pos + n_tokens) would overlap a neighbour in its
 * sequence; *at = seq_lower_bound(s, first_pos).  Reads only the order array
 * (its entries carry n_tokens), never the neighbours' pages: those are cold.
 * Pages are appended or grown at the tail almost always: the tail entry
 * answers without the binary search. */
static int seq_overlaps(const struct md__seq *s, uint64_t first_pos, uint32_t n_tokens,
			uint32_t self, uint32_t *at)
{
	uint32_t n = s->n_pages, i;
	if (n == 0 || s->pages[n - 1].first_pos < first_pos)
		i = n;
	else if (s->pages[n - 1].first_pos == first_pos)
		i = n - 1;
	else
		i = seq_lower_bound(s, first_pos);
	*at = i;
	if (first_pos + n_tokens < first_pos)
		return 1;
	/* next page at or after first_pos */
	for (uint32_t j = i; j < n && j <= i + 1; j++) {
		if (s->pages[j].slot == self)
			continue;
		if (s->pages[j].first_pos < first_pos + n_tokens)
			return 1;
		break;
	}
	for (uint32_t j = i; j-- > 0;) {
		if (s->pages[j].slot == self)
			continue;
		if (s->pages[j].first_pos + s->pages[j].n_tokens > first_pos)
			return 1;
		break;
	}
	return 0;
}

/* the protection count of a sequence that is about to get its first page */
static void seq_first_protect(struct md__host *h, struct md__engine *e, uint32_t seq)
{
	struct md__seq *s = &e->seqs[seq];
	uint32_t k0 = s->k_protect;
	if (s->own_pos) {
		s->k_protect = md__seq_protect_count(h, e, seq, e->seqs_live);
	} else {
		s->k_protect = md__engine_protect_count(h, e);
		if (s->k_protect != e->k_applied)
			e->k_dirty = 1;
	}
	if (s->k_protect != k0)
		md__kpub_note(e, seq);
}

int md__page_open(struct md__host *h, struct md__engine *e, uint32_t slot, uint32_t gen,
		  uint32_t seq, uint64_t first_pos, uint64_t labels, uint32_t n_tokens,
		  uint64_t clock)
{
	if (slot >= e->page_capacity)
		return -MD__REJ_SLOT;
	if (seq >= e->max_seqs)
		return -MD__REJ_SEQ;
	if (e->pages[slot].state != MD__SLOT_FREE)
		return -MD__REJ_STATE;
	if (n_tokens < 1 || n_tokens > e->page_tokens)
		return -MD__REJ_TOKENS;
	if (!labels_known(&h->params, labels, 0, n_tokens))
		return -MD__REJ_REGION;
	struct md__seq *s = &e->seqs[seq];
	uint32_t at;
	if (seq_overlaps(s, first_pos, n_tokens, UINT32_MAX, &at))
		return -MD__REJ_POS;
	if (grow_array((void **)&s->pages, &s->cap_pages, s->n_pages + 1, sizeof(s->pages[0])) ||
	    grow_array((void **)&s->keyheap, &s->keyheap_cap, s->n_pages + 1,
		       sizeof(s->keyheap[0])))
		return -MD__REJ_STATE; /* out of memory: refuse the record, keep state */
	if (s->n_pages == 0)
		seq_first_protect(h, e, seq);
	if (clock > s->clock)
		s->clock = clock;
	s->active_ns = h->now_ns;
	struct md__page *pg = &e->pages[slot];
	uint64_t keep = n_tokens >= 16 ? ~0ULL : ((1ULL << (4 * n_tokens)) - 1);
	memset(pg, 0, sizeof(*pg));
	pg->gen = gen;
	pg->seq = seq;
	pg->state = MD__SLOT_LIVE;
	pg->n_tokens = (uint16_t)n_tokens;
	e->keyheap_pos[slot] = MD__NO_HEAP;
	pg->first_pos = first_pos;
	pg->labels = labels & keep;
	uint64_t *tr = &e->t_refresh[(size_t)slot * e->page_tokens];
	for (unsigned k = 0; k < e->page_tokens; k++)
		tr[k] = clock;
	e->att_recent[slot] = 0.0f;
	seq_note_turns(s, pg->labels, 0, n_tokens);
	s->tokens_live += n_tokens;
	e->tokens_live += n_tokens;
	e->pages_live++;
	md__ob_note(e, seq);
	seq_insert(h, e, slot, at);
	md__page_reindex(h, e, slot);
	return 0;
}

/* live or evicting page matching slot and generation */
static int page_lookup(struct md__engine *e, uint32_t slot, uint32_t gen, struct md__page **out)
{
	if (slot >= e->page_capacity)
		return -MD__REJ_SLOT;
	struct md__page *pg = &e->pages[slot];
	if (pg->state == MD__SLOT_FREE)
		return -MD__REJ_STATE;
	if (pg->gen != gen)
		return -MD__REJ_GEN;
	*out = pg;
	return 0;
}

/* a tier page, or one being dropped: in the engine's host memory, where no
 * kernel attends it */
static inline int off_device(const struct md__page *pg)
{
	return pg->state == MD__SLOT_TIER || pg->state == MD__SLOT_DROPPING;
}

/* ---- the host tier (ABI 1.4, docs/tier.md) ----
 * A tier page keeps its slot, generation, labels, attention state and
 * refresh clocks, and its sequence keeps its clock and turns, so that it is
 * scored by its policy's own function at its sequence's clock like any page.
 * It is in no order and no heap: the tier's list (for drops) and, once an
 * estimate came, the candidate set (for recalls) hold it, each with O(1)
 * removal by position. */

static int tier_arrays(struct md__engine *e)
{
	if (e->tier_slots)
		return 0;
	size_t n = e->page_capacity;
	e->tier_slots = malloc(n * sizeof(uint32_t));
	e->tier_pos = calloc(n, sizeof(uint32_t));
	e->cand_slots = malloc(n * sizeof(uint32_t));
	e->cand_pos = calloc(n, sizeof(uint32_t));
	if (e->tier_slots && e->tier_pos && e->cand_slots && e->cand_pos)
		return 0;
	free(e->tier_slots);
	free(e->tier_pos);
	free(e->cand_slots);
	free(e->cand_pos);
	e->tier_slots = e->tier_pos = e->cand_slots = e->cand_pos = NULL;
	return -1;
}

/* swap-remove of slot from list/pos of *n entries */
static void list_del(uint32_t *list, uint32_t *pos, uint32_t *n, uint32_t slot)
{
	uint32_t i = pos[slot] - 1, last = list[--*n];
	list[i] = last;
	pos[last] = i + 1;
	pos[slot] = 0;
}

static void cand_add(struct md__engine *e, uint32_t slot)
{
	if (e->cand_pos[slot])
		return;
	e->cand_slots[e->n_cand++] = slot;
	e->cand_pos[slot] = e->n_cand;
	e->pages[slot].flags |= MD__PF_CAND;
}

void md__cand_remove(struct md__engine *e, uint32_t slot)
{
	if (!e->cand_pos || !e->cand_pos[slot])
		return;
	list_del(e->cand_slots, e->cand_pos, &e->n_cand, slot);
	e->pages[slot].flags &= (uint8_t)~MD__PF_CAND;
}

/* the page leaves the tier's list and the candidate set (its state is the
 * caller's to set) */
static void tier_del(struct md__engine *e, uint32_t slot)
{
	md__cand_remove(e, slot);
	list_del(e->tier_slots, e->tier_pos, &e->n_tier, slot);
	e->seqs[e->pages[slot].seq].n_tier--;
}

int md__page_to_tier(struct md__host *h, struct md__engine *e, uint32_t slot)
{
	struct md__page *pg = &e->pages[slot];
	struct md__seq *s = &e->seqs[pg->seq];
	if (pg->state == MD__SLOT_TIER)
		return 0;
	if (tier_arrays(e))
		return -1;
	switch (pg->state) {
	case MD__SLOT_LIVE: /* refused restore, or a resync */
		seq_erase(h, e, slot);
		s->tokens_live -= pg->n_tokens;
		e->tokens_live -= pg->n_tokens;
		e->pages_live--;
		md__ob_note(e, pg->seq);
		break;
	case MD__SLOT_EVICTING:
		e->pages_evicting--;
		s->n_evicting--;
		break;
	case MD__SLOT_DROPPING:
		e->n_dropping--;
		s->n_dropping--;
		break;
	}
	pg->state = MD__SLOT_TIER;
	pg->flags &= (uint8_t)~(MD__PF_RESTORING | MD__PF_RECALLED | MD__PF_PROT | MD__PF_CAND);
	e->keyheap_pos[slot] = MD__NO_HEAP;
	e->tier_slots[e->n_tier++] = slot;
	e->tier_pos[slot] = e->n_tier;
	s->n_tier++;
	return 0;
}

/* a tier page back into its sequence's order, live (its flags decide
 * whether the index takes it: a restoring page it does not).  first: the
 * protection count of a sequence with no page is set as by a page open
 * (ingest); a decision pass keeps the one it applied.  0 or -reason, and
 * then nothing changed. */
static int tier_to_order(struct md__host *h, struct md__engine *e, uint32_t slot, int first)
{
	struct md__page *pg = &e->pages[slot];
	struct md__seq *s = &e->seqs[pg->seq];
	uint32_t at;
	if (seq_overlaps(s, pg->first_pos, pg->n_tokens, UINT32_MAX, &at))
		return -MD__REJ_POS; /* another page took its positions */
	if (grow_array((void **)&s->pages, &s->cap_pages, s->n_pages + 1, sizeof(s->pages[0])) ||
	    grow_array((void **)&s->keyheap, &s->keyheap_cap, s->n_pages + 1,
		       sizeof(s->keyheap[0])))
		return -MD__REJ_STATE;
	if (first && s->n_pages == 0)
		seq_first_protect(h, e, pg->seq);
	tier_del(e, slot);
	pg->state = MD__SLOT_LIVE;
	e->keyheap_pos[slot] = MD__NO_HEAP;
	s->tokens_live += pg->n_tokens;
	e->tokens_live += pg->n_tokens;
	e->pages_live++;
	md__ob_note(e, pg->seq);
	seq_insert(h, e, slot, at);
	md__page_reindex(h, e, slot);
	return 0;
}

int md__page_tier_to_live(struct md__host *h, struct md__engine *e, uint32_t slot)
{
	return tier_to_order(h, e, slot, 1);
}

/* A decided restore: the page counts as resident from now on, and is
 * refreshed as a page open would (every token's refresh clock = its
 * sequence's clock), but it stays out of the heaps until the engine reports
 * it restored: an evict sent after the restore could otherwise overtake it. */
int md__page_restore(struct md__host *h, struct md__engine *e, uint32_t slot)
{
	struct md__page *pg = &e->pages[slot];
	pg->flags |= MD__PF_RESTORING;
	if (tier_to_order(h, e, slot, 0)) {
		pg->flags &= (uint8_t)~MD__PF_RESTORING;
		return -1;
	}
	uint64_t *tr = &e->t_refresh[(size_t)slot * e->page_tokens];
	uint64_t clock = e->seqs[pg->seq].clock;
	for (unsigned k = 0; k < e->page_tokens; k++)
		tr[k] = clock;
	return 0;
}

void md__page_set_dropping(struct md__host *h, struct md__engine *e, uint32_t slot)
{
	(void)h;
	struct md__page *pg = &e->pages[slot];
	tier_del(e, slot);
	pg->state = MD__SLOT_DROPPING;
	e->n_dropping++;
	e->seqs[pg->seq].n_dropping++;
}

/* MD_REC_PAGE_TIER (1.4): the engine's side of a page's way between the
 * device and its tier.  IN only for a page being evicted; RESTORED and
 * REFUSED only for a tier or restoring page (a RESTORED tier page the daemon
 * did not ask for, e.g. after a resync, is taken: it is live again). */
static int page_tier(struct md__host *h, struct md__engine *e, const struct md_stats_rec *r)
{
	if (e->abi_minor < 4)
		return -MD__REJ_TYPE; /* not a record of the ABI it speaks */
	struct md__page *pg;
	int rc = page_lookup(e, r->slot, r->gen, &pg);
	if (rc)
		return rc;
	int restoring = pg->state == MD__SLOT_LIVE && (pg->flags & MD__PF_RESTORING);
	switch (r->u.tier.event) {
	case MD_TIER_IN:
		if (pg->state != MD__SLOT_EVICTING)
			return -MD__REJ_STATE;
		if (md__page_to_tier(h, e, r->slot))
			return -MD__REJ_STATE; /* no memory: refuse, keep state */
		e->tier_in++;
		return 0;
	case MD_TIER_RESTORED:
		if (restoring) {
			pg->flags &= (uint8_t)~MD__PF_RESTORING;
			md__page_reindex(h, e, r->slot); /* evictable from now on */
		} else if (pg->state == MD__SLOT_TIER) {
			rc = tier_to_order(h, e, r->slot, 1);
			if (rc)
				return rc;
			uint64_t *tr = &e->t_refresh[(size_t)r->slot * e->page_tokens];
			uint64_t clock = e->seqs[pg->seq].clock;
			for (unsigned k = 0; k < e->page_tokens; k++)
				tr[k] = clock;
		} else {
			return -MD__REJ_STATE;
		}
		pg->flags |= MD__PF_RECALLED;
		e->recalls++;
		e->seqs[pg->seq].recalls++;
		return 0;
	case MD_TIER_REFUSED:
		if (restoring) {
			if (md__page_to_tier(h, e, r->slot))
				return -MD__REJ_STATE;
		} else if (pg->state != MD__SLOT_TIER) {
			return -MD__REJ_STATE;
		}
		e->restores_refused++;
		return 0;
	default:
		return -MD__REJ_TYPE; /* an event this ABI does not know */
	}
}

void md__page_set_evicting(struct md__host *h, struct md__engine *e, uint32_t slot)
{
	struct md__page *pg = &e->pages[slot];
	struct md__seq *s = &e->seqs[pg->seq];
	seq_erase(h, e, slot);
	pg->state = MD__SLOT_EVICTING;
	pg->flags &= (uint8_t)~MD__PF_RECALLED;
	s->n_evicting++;
	s->tokens_live -= pg->n_tokens;
	e->tokens_live -= pg->n_tokens;
	e->pages_live--;
	e->pages_evicting++;
	md__ob_note(e, pg->seq);
}

void md__page_remove(struct md__host *h, struct md__engine *e, uint32_t slot)
{
	struct md__page *pg = &e->pages[slot];
	if (pg->state == MD__SLOT_LIVE) {
		struct md__seq *s = &e->seqs[pg->seq];
		seq_erase(h, e, slot);
		s->tokens_live -= pg->n_tokens;
		e->tokens_live -= pg->n_tokens;
		e->pages_live--;
		md__ob_note(e, pg->seq);
	} else if (pg->state == MD__SLOT_EVICTING) {
		e->pages_evicting--;
		e->seqs[pg->seq].n_evicting--;
	} else if (pg->state == MD__SLOT_TIER) {
		tier_del(e, slot);
		e->tier_freed++;
	} else if (pg->state == MD__SLOT_DROPPING) {
		e->n_dropping--;
		e->seqs[pg->seq].n_dropping--;
		e->tier_freed++;
	}
	pg->state = MD__SLOT_FREE;
	pg->flags = 0;
	e->keyheap_pos[slot] = MD__NO_HEAP;
}

/* Drops, in one pass over the sequence's order, every page for which
 * drop[slot] is set: counters and heaps as md__page_remove, then the order is
 * compacted and protection re-applied by rank.  Removing pages one by one
 * from the middle of the order costs a memmove each (quadratic for a whole
 * table); a resync prunes with this instead (docs/reliability.md). */
void md__seq_drop_marked(struct md__host *h, struct md__engine *e, uint32_t seq,
			 const uint8_t *drop)
{
	struct md__seq *s = &e->seqs[seq];
	uint32_t n = s->n_pages, w = 0, dropped = 0;
	for (uint32_t i = 0; i < n; i++)
		dropped += drop[s->pages[i].slot];
	if (dropped == n)
		md__heap_clear(e, s); /* every page goes: no heap removals one by one */
	for (uint32_t i = 0; i < n; i++) {
		uint32_t slot = s->pages[i].slot;
		if (!drop[slot]) {
			s->pages[w++] = s->pages[i];
			continue;
		}
		struct md__page *pg = &e->pages[slot];
		if (e->keyheap_pos[slot] != MD__NO_HEAP)
			md__heap_remove(e, s, slot);
		s->tokens_live -= pg->n_tokens;
		e->tokens_live -= pg->n_tokens;
		e->pages_live--;
		pg->state = MD__SLOT_FREE;
		pg->flags = 0;
		e->keyheap_pos[slot] = MD__NO_HEAP;
	}
	if (w == n)
		return;
	s->n_pages = w;
	if (w)
		s->tail_slot = s->pages[w - 1].slot;
	else
		e->seqs_live--;
	md__ob_note(e, seq);
	for (uint32_t i = 0; i < w; i++) {
		uint32_t rank = w - 1 - i;
		int want = rank < s->k_protect;
		int has = (e->pages[s->pages[i].slot].flags & MD__PF_PROT) != 0;
		if (want != has)
			set_prot(h, e, s->pages[i].slot, want);
	}
}

/* in or out of e->own_seqs as the sequence has own options or not */
static void own_note(struct md__engine *e, uint32_t q)
{
	struct md__seq *s = &e->seqs[q];
	int own = s->own_policy != MD_SEQ_ENGINE_U32 || s->own_budget != MD_SEQ_ENGINE_U64;
	if (own == (s->own_pos != 0))
		return;
	if (own) {
		e->own_seqs[e->own_n++] = q;
		s->own_pos = e->own_n;
	} else {
		uint32_t i = s->own_pos - 1, last = e->own_seqs[--e->own_n];
		e->own_seqs[i] = last;
		e->seqs[last].own_pos = i + 1;
		s->own_pos = 0;
	}
}

/* A sequence's own options.  What they change follows at once: its place in
 * the over-budget set (budget), its sink flags (policy) and its protection
 * count; when the index is not live, its rebuild does the last two.  Its
 * session state and tag change nothing the daemon decides: they are only
 * shown (memdecayctl sessions), so they are checked with the rest (a record
 * is taken whole or not at all) and stored. */
int md__seq_set_opts(struct md__host *h, struct md__engine *e, uint32_t seq,
		     const struct md__seq_own *o)
{
	if (seq >= e->max_seqs)
		return -MD__REJ_SEQ;
	uint32_t policy = o->policy;
	uint64_t budget = o->budget;
	if (policy != MD_SEQ_ENGINE_U32 && policy >= MD_POLICY_COUNT)
		return -MD__REJ_OPTIONS;
	if (budget != MD_SEQ_ENGINE_U64 && budget > MD__SEQ_BUDGET_MAX)
		return -MD__REJ_OPTIONS;
	if (o->state >= MD_SEQ_STATE_COUNT || !md_seq_session_ok(o->session))
		return -MD__REJ_OPTIONS;
	struct md__seq *s = &e->seqs[seq];
	uint8_t retained = o->state == MD_SEQ_RETAINED;
	if (retained != s->retained) {
		e->retained_n += retained ? 1u : (uint32_t)-1;
		s->retained = retained;
	}
	memcpy(s->session, o->session, sizeof(s->session));
	if (s->own_policy == policy && s->own_budget == budget)
		return 0;
	uint32_t old_pol = md__seq_policy(h, e, s);
	s->own_policy = policy;
	s->own_budget = budget;
	own_note(e, seq);
	md__ob_note(e, seq);
	if (!md__index_live(h, e))
		return 0;
	uint32_t k = s->own_pos ? md__seq_protect_count(h, e, seq, e->seqs_live)
				: md__engine_protect_count(h, e);
	if (k != s->k_protect)
		md__seq_set_protect(h, e, seq, k);
	if (md__seq_policy(h, e, s) != old_pol)
		for (uint32_t i = 0; i < s->n_pages; i++)
			md__page_reindex(h, e, s->pages[i].slot);
	return 0;
}

void md__seq_release_all(struct md__host *h, struct md__engine *e, uint32_t seq)
{
	/* evicting pages are not in the order: scan the slots once */
	struct md__seq *s = &e->seqs[seq];
	while (s->n_pages)
		md__page_remove(h, e, s->pages[s->n_pages - 1].slot);
	if (s->n_tier) { /* the tier's list holds them: its length, not the table's */
		for (uint32_t i = e->n_tier; i-- > 0 && s->n_tier;) {
			uint32_t slot = e->tier_slots[i];
			if (e->pages[slot].seq == seq)
				md__page_remove(h, e, slot); /* moves the last entry here */
		}
	}
	if (s->n_evicting || s->n_dropping) { /* rare: only pages this daemon chose */
		for (uint32_t i = 0; i < e->page_capacity && (s->n_evicting || s->n_dropping); i++)
			if ((e->pages[i].state == MD__SLOT_EVICTING ||
			     e->pages[i].state == MD__SLOT_DROPPING) && e->pages[i].seq == seq)
				md__page_remove(h, e, i);
	}
	s->recalls = 0;
	s->clock = 0;
	s->tokens_live = 0;
	s->turn_n = 0;
	s->active_ns = 0;
	md__ob_note(e, seq);
	static const struct md__seq_own engine_own = { .policy = MD_SEQ_ENGINE_U32,
						       .state = MD_SEQ_RUNNING,
						       .budget = MD_SEQ_ENGINE_U64 };
	md__seq_set_opts(h, e, seq, &engine_own); /* the engine's again, running, no tag */
}

static int page_grow(struct md__host *h, struct md__engine *e, const struct md_stats_rec *r)
{
	struct md__page *pg;
	int rc = page_lookup(e, r->slot, r->gen, &pg);
	if (rc)
		return rc;
	if (off_device(pg))
		return -MD__REJ_STATE; /* no kernel writes to it */
	uint32_t n = r->u.page.n_tokens, old = pg->n_tokens;
	if (n <= old || n > e->page_tokens)
		return -MD__REJ_TOKENS;
	if (!labels_known(&h->params, r->u.page.labels, old, n))
		return -MD__REJ_REGION;
	struct md__seq *s = &e->seqs[pg->seq];
	uint32_t at = 0;
	if (pg->state == MD__SLOT_LIVE) {
		if (s->n_pages && s->tail_slot == r->slot) {
			/* the tail page (the usual grow): no page after it, and the one
			 * before ends at or before its first_pos (every open and grow
			 * keeps that), so only a wrap past 2^64 can overlap: the answer
			 * of seq_overlaps without reading the order array */
			if (pg->first_pos + n < pg->first_pos)
				return -MD__REJ_POS;
			at = s->n_pages - 1;
		} else {
			if (seq_overlaps(s, pg->first_pos, n, r->slot, &at))
				return -MD__REJ_POS;
			if (at >= s->n_pages || s->pages[at].slot != r->slot)
				abort(); /* broken invariant: the order lost a page */
		}
	}
	if (r->clock > s->clock)
		s->clock = r->clock;
	uint64_t *tr = &e->t_refresh[(size_t)r->slot * e->page_tokens];
	for (unsigned k = old; k < n; k++) {
		pg->labels = md_label_set(pg->labels, k, md_label_get(r->u.page.labels, k));
		tr[k] = r->clock;
	}
	seq_note_turns(s, pg->labels, old, n);
	pg->n_tokens = (uint16_t)n;
	if (pg->state == MD__SLOT_LIVE) {
		s->pages[at].n_tokens = n;
		s->tokens_live += n - old;
		e->tokens_live += n - old;
		md__ob_note(e, pg->seq);
		md__page_reindex(h, e, r->slot);
	}
	return 0;
}

/* after an attention update: keep the stored key a lower bound.  Rises are
 * left lazy (the decision refreshes a key when it surfaces); a drop below the
 * key lowers it to half the bound, so the next few drops cost nothing. */
#define MD__REKEY_SLACK 0.9
static inline void attn_rekey(struct md__host *h, struct md__engine *e, uint32_t slot,
			      struct md__page *pg)
{
	double key;
	if (e->memdecay_bound) {
		/* the common case, inline (memdecay_bound implies attn_lowers);
		 * the traits and norm may be a stale epoch's: harmless, the index
		 * is checked before the key is used */
		key = md__memdecay_bound_at(pg, h->params.alpha, e->norm_mode);
	} else {
		if (!e->attn_lowers)
			return; /* h2o: only grows; recency, random: fixed */
		if (!md__index_live(h, e))
			return; /* rebuilt later; e->key_in may not be set yet */
		key = page_key(e, slot);
	}
	if (key >= (double)pg->key_hint)
		return; /* still above the stored key (or not in a heap: harmless) */
	if (e->keyheap_pos[slot] == MD__NO_HEAP || !md__index_live(h, e))
		return;
	struct md__seq *s = &e->seqs[pg->seq];
	if (key < s->keyheap[e->keyheap_pos[slot]].key)
		md__heap_lower_key(e, s, slot, key * MD__REKEY_SLACK);
}

/* real attention refreshed a page restored from the tier: a recall hit,
 * counted once per restore */
static inline void recall_hit(struct md__engine *e, struct md__page *pg, unsigned mask)
{
	if (mask && (pg->flags & MD__PF_RECALLED)) {
		pg->flags &= (uint8_t)~MD__PF_RECALLED;
		e->recall_hits++;
	}
}

/* Returns the refreshed tokens' mask (>= 0) or -reason.  est: the record is
 * an estimate (MD_REC_F_ESTIMATE, 1.4): for a tier or restoring page it is
 * applied exactly as attention, and a tier page becomes a recall candidate;
 * for a resident page it sets only the recent attention (the engine's
 * measure of what the same queries give the pages a restore could displace;
 * its score follows its real attention).  Real attention is invalid for a
 * page off the device.  Either way the mass becomes the page's recent
 * attention, which recall compares (a candidate's estimate against its
 * victim's latest mass, docs/tier.md). */
static int attn_page(struct md__host *h, struct md__engine *e, const struct md_stats_rec *r,
		     int est)
{
	struct md__page *pg;
	int rc = page_lookup(e, r->slot, r->gen, &pg);
	if (rc)
		return rc;
	float m = r->u.attn_page.mass;
	if (!(m >= 0.0f) || !(m <= MD__MASS_PER_TOKEN_MAX * (float)e->page_tokens))
		return -MD__REJ_MASS; /* also NaN and Inf */
	if (est) {
		if (pg->state == MD__SLOT_TIER) {
			if (tier_arrays(e)) /* held since the page entered the tier */
				return -MD__REJ_STATE;
			cand_add(e, r->slot);
		} else if (pg->state == MD__SLOT_LIVE && !(pg->flags & MD__PF_RESTORING)) {
			e->att_recent[r->slot] = m;
			e->estimates++;
			return 0;
		} else if (pg->state != MD__SLOT_LIVE) {
			return -MD__REJ_STATE;
		}
		e->estimates++;
	} else if (off_device(pg)) {
		return -MD__REJ_STATE;
	} else if (pg->state != MD__SLOT_LIVE) {
		return 0; /* eviction pending: nothing left to decide */
	}
	struct md__seq *s = &e->seqs[pg->seq];
	double beta = h->params.beta, mass = (double)m;
	pg->ewma_raw = beta * pg->ewma_raw + (1.0 - beta) * mass;
	pg->ewma_norm = beta * pg->ewma_norm + (1.0 - beta) * mass * (double)s->tokens_live;
	pg->cum_raw += mass;
	e->att_recent[r->slot] = m;
	unsigned mask = r->u.attn_page.refresh & ((1u << pg->n_tokens) - 1u);
	if (mask) {
		uint64_t *tr = &e->t_refresh[(size_t)r->slot * e->page_tokens];
		for (unsigned bits = mask; bits; bits &= bits - 1)
			tr[__builtin_ctz(bits)] = s->clock;
	}
	if (!est)
		recall_hit(e, pg, mask);
	attn_rekey(h, e, r->slot, pg);
	return (int)mask;
}

static int attn_tokens(struct md__host *h, struct md__engine *e, const struct md_stats_rec *r)
{
	struct md__page *pg;
	int rc = page_lookup(e, r->slot, r->gen, &pg);
	if (rc)
		return rc;
	if (off_device(pg))
		return -MD__REJ_STATE;
	unsigned t0 = r->token0, c = r->count;
	if (c < 1 || c > MD_ATTN_TOKENS_PER_REC || t0 + c > pg->n_tokens)
		return -MD__REJ_TOKENS;
	double sum = 0.0;
	for (unsigned i = 0; i < c; i++) {
		float m = r->u.attn_tokens.mass[i];
		if (!(m >= 0.0f) || !(m <= MD__MASS_PER_TOKEN_MAX))
			return -MD__REJ_MASS;
		sum += (double)m;
	}
	if (pg->state != MD__SLOT_LIVE)
		return 0;
	struct md__seq *s = &e->seqs[pg->seq];
	double beta = h->params.beta, nl = (double)s->tokens_live;
	pg->ewma_raw = beta * pg->ewma_raw + (1.0 - beta) * sum;
	pg->ewma_norm = beta * pg->ewma_norm + (1.0 - beta) * sum * nl;
	pg->cum_raw += sum;
	e->att_recent[r->slot] = (float)sum;
	int rel = md__seq_norm(h, e, s) == MD_NORM_RELATIVE;
	double tau = h->params.tau;
	uint64_t *tr = &e->t_refresh[(size_t)r->slot * e->page_tokens];
	unsigned bits = 0;
	for (unsigned i = 0; i < c; i++) {
		double m = (double)r->u.attn_tokens.mass[i];
		if ((rel ? m * nl : m) > tau) {
			tr[t0 + i] = s->clock;
			bits |= 1u << (t0 + i);
		}
	}
	recall_hit(e, pg, bits);
	attn_rekey(h, e, r->slot, pg);
	return (int)bits;
}

static int relabel_check(const struct md__host *h, const struct md__engine *e,
			 const struct md_stats_rec *r)
{
	if (r->seq >= e->max_seqs)
		return -MD__REJ_SEQ;
	if (r->u.relabel.pos0 >= r->u.relabel.pos1)
		return -MD__REJ_SPAN;
	if (r->u.relabel.region >= MD_REGIONS_MAX || !region_known(&h->params, r->u.relabel.region))
		return -MD__REJ_REGION;
	return 0;
}

/* Relabels the pages of [*from, pos1), visiting at most max_pages of them.
 * Returns 1 if a page was touched (| 2 if pages remain: *from is then the
 * first position left), 0 if none was. */
static int relabel_range(struct md__host *h, struct md__engine *e, const struct md_stats_rec *r,
			 uint64_t *from, uint32_t max_pages)
{
	struct md__seq *s = &e->seqs[r->seq];
	uint64_t p0 = *from, p1 = r->u.relabel.pos1;
	/* the page before lower_bound(p0) may reach into the span */
	uint32_t i = seq_lower_bound(s, p0);
	if (i > 0)
		i--;
	int touched = 0;
	uint32_t visited = 0;
	for (; i < s->n_pages && s->pages[i].first_pos < p1; i++) {
		if (visited++ == max_pages) {
			*from = s->pages[i].first_pos; /* pages never overlap: resumes here */
			return touched | 2;
		}
		uint32_t slot = s->pages[i].slot;
		struct md__page *pg = &e->pages[slot];
		uint64_t a = pg->first_pos, b = pg->first_pos + pg->n_tokens;
		uint64_t lo = a > p0 ? a : p0, hi = b < p1 ? b : p1;
		if (lo >= hi)
			continue;
		for (uint64_t q = lo; q < hi; q++)
			pg->labels = md_label_set(pg->labels, (unsigned)(q - a), r->u.relabel.region);
		touched = 1;
		md__page_reindex(h, e, slot);
	}
	*from = p1;
	return touched;
}

static int relabel(struct md__host *h, struct md__engine *e, const struct md_stats_rec *r)
{
	int rc = relabel_check(h, e, r);
	if (rc)
		return rc;
	uint64_t from = r->u.relabel.pos0;
	return relabel_range(h, e, r, &from, UINT32_MAX) ? 0 : -MD__REJ_SPAN;
}

int md__relabel_step(struct md__host *h, struct md__engine *e, const struct md_stats_rec *r,
		     uint64_t *cursor, uint32_t max_pages, int *touched)
{
	if (*cursor == r->u.relabel.pos0 && !*touched) {
		int rc = relabel_check(h, e, r);
		if (rc)
			return rc;
	}
	int t = relabel_range(h, e, r, cursor, max_pages);
	if (t & 1)
		*touched = 1;
	if (t & 2)
		return 1;
	return *touched ? 0 : -MD__REJ_SPAN;
}

int md__page_ingest(struct md__host *h, struct md__engine *e, const struct md_stats_rec *r)
{
	int est = 0;
	if (e->abi_minor >= 4 && r->flags) {
		/* 1.4 defines one flag, for attention records of a page; any
		 * other bit is a record this ABI does not know (before 1.4 the
		 * word is ignored, as it always was) */
		if (r->flags != MD_REC_F_ESTIMATE || r->type != MD_REC_ATTN_PAGE)
			return -MD__REJ_TYPE;
		est = 1;
	}
	switch (r->type) {
	case MD_REC_ATTN_PAGE:
		return attn_page(h, e, r, est);
	case MD_REC_PAGE_TIER:
		return page_tier(h, e, r);
	case MD_REC_ATTN_TOKENS:
		return attn_tokens(h, e, r);
	case MD_REC_STEP: {
		if (r->seq >= e->max_seqs)
			return -MD__REJ_SEQ;
		struct md__seq *s = &e->seqs[r->seq];
		if (r->clock < s->clock)
			return -MD__REJ_CLOCK;
		s->clock = r->clock;
		s->active_ns = h->now_ns;
		return 0;
	}
	case MD_REC_PAGE_OPEN:
		return md__page_open(h, e, r->slot, r->gen, r->seq, r->u.page.first_pos,
				     r->u.page.labels, r->u.page.n_tokens, r->clock);
	case MD_REC_PAGE_GROW:
		return page_grow(h, e, r);
	case MD_REC_PAGE_FREE: {
		struct md__page *pg;
		int rc = page_lookup(e, r->slot, r->gen, &pg);
		if (rc)
			return rc;
		/* any reason frees a page; DROPPED (1.4) says the page was in
		 * the tier, so it must have been */
		if (e->abi_minor >= 4 && r->u.free.reason == MD_FREE_DROPPED && !off_device(pg))
			return -MD__REJ_STATE;
		md__page_remove(h, e, r->slot);
		return 0;
	}
	case MD_REC_SEQ_END:
		if (r->seq >= e->max_seqs)
			return -MD__REJ_SEQ;
		md__seq_release_all(h, e, r->seq);
		return 0;
	case MD_REC_RELABEL:
		return relabel(h, e, r);
	case MD_REC_SEQ_OPTS: {
		if (e->abi_minor < 2)
			return -MD__REJ_TYPE; /* not a record of the ABI it speaks */
		struct md__seq_own o = { .policy = r->u.seq_opts.policy,
					 .budget = r->u.seq_opts.budget_sequence_tokens };
		if (e->abi_minor >= 3) { /* 1.2: reserved words, ignored as they were */
			o.state = r->u.seq_opts.state;
			memcpy(o.session, r->u.seq_opts.session, sizeof(o.session));
		}
		int rc = md__seq_set_opts(h, e, r->seq, &o);
		if (!rc)
			e->seq_opts_applied++;
		return rc;
	}
	default:
		return -MD__REJ_TYPE;
	}
}
