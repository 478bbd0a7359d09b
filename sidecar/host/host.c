/*
 * host.c — the policy host's front: engines (attach, options, removal),
 * record ingest with per-engine counters, decisions over all engines, the
 * parameter-block view, stats and page-table resync.  What an engine runs
 * with (policy, norm, budgets) is settings.c's (and host_internal.h's);
 * `top` lists the oracle's candidates (oracle.c).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "host_internal.h"
#include "memdecay_clock.h"

static const char *const reject_names[MD__REJ_COUNT] = {
	"ok", "type", "slot", "generation", "sequence", "state", "tokens",
	"mass", "clock", "region", "span", "position", "options",
};

const char *md__reject_name(int reason)
{
	if (reason < 0)
		reason = -reason;
	return reason < MD__REJ_COUNT ? reject_names[reason] : "unknown";
}

void md__engine_opts_defaults(struct md__engine_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->policy = -1;
	o->budget_engine_pages = -1;
	o->budget_sequence_tokens = -1;
	o->weight = 1.0;
}

struct md__host *md__host_new(const struct md__params *p)
{
	struct md__host *h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	if (p)
		h->params = *p;
	else
		md__params_defaults(&h->params);
	h->params_epoch = 1;
	h->shares = calloc(1, sizeof(*h->shares)); /* none: the plain weighted split */
	return h;
}

/* zeroed; large arrays on 2 MiB boundaries with transparent huge pages asked
 * for: ingest touches pages at random, and TLB misses dominate at 10^6 pages */
static void *big_calloc(size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size)
		return NULL;
	size_t bytes = n * size;
	if (bytes < (4u << 20))
		return calloc(n ? n : 1, size ? size : 1);
	size_t huge = 2u << 20;
	size_t rounded = (bytes + huge - 1) & ~(huge - 1);
	void *p = NULL;
	if (posix_memalign(&p, huge, rounded))
		return NULL;
	madvise(p, rounded, MADV_HUGEPAGE); /* advice only: fine if refused */
	memset(p, 0, rounded);
	return p;
}

static void engine_free(struct md__engine *e)
{
	if (!e)
		return;
	for (uint32_t q = 0; q < e->max_seqs; q++) {
		free(e->seqs[q].pages);
		free(e->seqs[q].keyheap);
		free(e->seqs[q].turn_clk);
		for (unsigned c = 0; c < MD_REGIONS_MAX; c++)
			free(e->seqs[q].decayheap[c]);
	}
	free(e->tier_slots);
	free(e->tier_pos);
	free(e->cand_slots);
	free(e->cand_pos);
	free(e->ob_seqs);
	free(e->own_seqs);
	free(e->kpub_seqs);
	free(e->decayheap_pos);
	free(e->keyheap_pos);
	free(e->dcls);
	free(e->dg);
	free(e->seqs);
	free(e->pages);
	free(e->t_refresh);
	free(e->att_recent);
	free(e);
}

void md__host_free(struct md__host *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->n_engines; i++)
		engine_free(h->engines[i]);
	free(h->engines);
	free(h->scratch_a);
	free(h->scratch_b);
	md__share_cache_free(h->shares);
	free(h);
}

void md__host_set_params(struct md__host *h, const struct md__params *p)
{
	h->params = *p;
	h->params_epoch++;
}

const struct md__params *md__host_params(const struct md__host *h)
{
	return &h->params;
}

static int opts_valid(const struct md__engine_opts *o)
{
	if (o->policy < -1 || o->policy >= (int)MD__POLICY_N)
		return 0;
	if (o->budget_engine_pages < -1 || o->budget_sequence_tokens < -1)
		return 0;
	if (!isfinite(o->weight) || !(o->weight > 0.0) || o->weight > 1e9)
		return 0;
	return 1;
}

int md__host_engine_add(struct md__host *h, uint32_t engine_id, uint32_t page_tokens,
			uint32_t page_capacity, uint32_t max_seqs,
			const struct md__engine_opts *opts)
{
	if (page_tokens < 1 || page_tokens > MD_PAGE_TOKENS_MAX || page_capacity < 1 ||
	    page_capacity > MD_PAGE_CAPACITY_MAX || max_seqs < 1 || max_seqs > MD_MAX_SEQS_MAX)
		return -EINVAL;
	if (opts && !opts_valid(opts))
		return -EINVAL;
	if (md__host_find(h, engine_id))
		return -EEXIST;
	if (h->n_engines == h->cap_engines) {
		size_t nc = h->cap_engines ? h->cap_engines * 2 : 4;
		struct md__engine **ne = realloc(h->engines, nc * sizeof(*ne));
		if (!ne)
			return -ENOMEM;
		h->engines = ne;
		h->cap_engines = nc;
	}
	struct md__engine *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->id = engine_id;
	e->page_tokens = page_tokens;
	e->page_capacity = page_capacity;
	e->max_seqs = max_seqs;
	if (opts)
		e->opts = *opts;
	else
		md__engine_opts_defaults(&e->opts);
	e->pages = big_calloc(page_capacity, sizeof(*e->pages));
	e->t_refresh = big_calloc((size_t)page_capacity * page_tokens, sizeof(uint64_t));
	e->att_recent = big_calloc(page_capacity, sizeof(*e->att_recent));
	e->seqs = calloc(max_seqs, sizeof(*e->seqs));
	e->decayheap_pos = big_calloc(page_capacity, sizeof(*e->decayheap_pos));
	e->keyheap_pos = big_calloc(page_capacity, sizeof(*e->keyheap_pos));
	e->dcls = malloc(page_capacity);
	e->dg = big_calloc(page_capacity, sizeof(*e->dg));
	e->ob_seqs = malloc((size_t)max_seqs * 2 * sizeof(*e->ob_seqs));
	e->own_seqs = malloc((size_t)max_seqs * sizeof(*e->own_seqs));
	e->kpub_seqs = malloc((size_t)max_seqs * sizeof(*e->kpub_seqs));
	e->params = &h->params;
	e->abi_minor = MD_ABI_MINOR;
	if (!e->pages || !e->t_refresh || !e->att_recent || !e->seqs || !e->decayheap_pos ||
	    !e->dcls || !e->dg || !e->keyheap_pos || !e->ob_seqs || !e->own_seqs || !e->kpub_seqs) {
		engine_free(e);
		return -ENOMEM;
	}
	for (uint32_t q = 0; q < max_seqs; q++) {
		e->seqs[q].own_policy = MD_SEQ_ENGINE_U32;
		e->seqs[q].own_budget = MD_SEQ_ENGINE_U64;
	}
	e->kpub_all = 1; /* nothing published yet */
	for (uint32_t i = 0; i < page_capacity; i++)
		e->keyheap_pos[i] = MD__NO_HEAP;
	memset(e->dcls, MD__NO_CLASS, page_capacity);
	e->index_epoch = 0; /* built at the first decision */
	h->engines[h->n_engines++] = e;
	return 0;
}

void md__host_engine_remove(struct md__host *h, uint32_t engine_id)
{
	for (size_t i = 0; i < h->n_engines; i++) {
		if (h->engines[i]->id != engine_id)
			continue;
		engine_free(h->engines[i]);
		memmove(&h->engines[i], &h->engines[i + 1],
			(h->n_engines - i - 1) * sizeof(h->engines[0]));
		h->n_engines--;
		return;
	}
}

int md__host_engine_set_opts(struct md__host *h, uint32_t engine_id,
			     const struct md__engine_opts *opts)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return -ENOENT;
	if (!opts_valid(opts))
		return -EINVAL;
	e->opts = *opts;
	e->index_epoch = 0; /* policy or budgets may have changed */
	return 0;
}

int md__host_engine_set_abi_minor(struct md__host *h, uint32_t engine_id, uint32_t minor)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return -ENOENT;
	e->abi_minor = minor;
	return 0;
}

int md__host_engine_set_tier(struct md__host *h, uint32_t engine_id, uint64_t tier_pages,
			     uint64_t page_bytes)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return -ENOENT;
	e->tier_capacity = tier_pages;
	e->page_bytes = page_bytes;
	return 0;
}

int md__host_engine_get_opts(const struct md__host *h, uint32_t engine_id,
			     struct md__engine_opts *opts)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return -ENOENT;
	*opts = e->opts;
	return 0;
}

/* ---- ingest and decisions ---- */

/* Inline into both entry points: md__host_ingest is the per-record path. */
static inline int ingest_one(struct md__host *h, uint32_t engine_id,
			     const struct md_stats_rec *rec, uint16_t *refreshed)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (refreshed)
		*refreshed = 0;
	if (!e)
		return -MD__REJ_STATE;
	e->records++;
	int rc = md__page_ingest(h, e, rec);
	if (rc >= 0) {
		if (refreshed)
			*refreshed = (uint16_t)rc;
		return 0;
	}
	if (-rc < MD__REJ_COUNT)
		e->rejected[-rc]++;
	return rc;
}

int md__host_ingest(struct md__host *h, uint32_t engine_id, const struct md_stats_rec *rec)
{
	return ingest_one(h, engine_id, rec, NULL);
}

int md__host_ingest_refreshed(struct md__host *h, uint32_t engine_id,
			      const struct md_stats_rec *rec, uint16_t *refreshed)
{
	return ingest_one(h, engine_id, rec, refreshed);
}

int md__host_relabel_step(struct md__host *h, uint32_t engine_id, const struct md_stats_rec *rec,
			  uint64_t *cursor, uint32_t max_pages, int *touched)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return -MD__REJ_STATE;
	if (rec->type != MD_REC_RELABEL)
		return -MD__REJ_TYPE;
	int rc = md__relabel_step(h, e, rec, cursor, max_pages, touched);
	if (rc == 1)
		return 1;
	e->records++;
	if (rc < 0 && -rc < MD__REJ_COUNT)
		e->rejected[-rc]++;
	return rc;
}

/* warm the lines an attention record will touch: its page, its recent
 * attention, and its refresh clocks when it refreshes tokens (the heap is
 * rarely touched: key_hint) */
static inline void prefetch_rec(const struct md__engine *e, const struct md_stats_rec *r)
{
	if ((r->type == MD_REC_ATTN_PAGE || r->type == MD_REC_ATTN_TOKENS) &&
	    r->slot < e->page_capacity) {
		__builtin_prefetch(&e->pages[r->slot], 1);
		__builtin_prefetch(&e->att_recent[r->slot], 1);
		if (r->type == MD_REC_ATTN_TOKENS || r->u.attn_page.refresh)
			__builtin_prefetch(&e->t_refresh[(size_t)r->slot * e->page_tokens], 1);
	}
}

size_t md__host_ingest_batch(struct md__host *h, uint32_t engine_id,
			     const struct md_stats_rec *recs, size_t n, int *rcs,
			     uint16_t *refreshed)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e) {
		for (size_t i = 0; rcs && i < n; i++)
			rcs[i] = -MD__REJ_STATE;
		if (refreshed)
			memset(refreshed, 0, n * sizeof(*refreshed));
		return 0;
	}
	enum { AHEAD = 12 };
	size_t ok = 0;
	for (size_t i = 0; i < n; i++) {
		if (i + AHEAD < n)
			prefetch_rec(e, &recs[i + AHEAD]);
		e->records++;
		int rc = md__page_ingest(h, e, &recs[i]);
		if (refreshed)
			refreshed[i] = rc > 0 ? (uint16_t)rc : 0;
		if (rc >= 0) {
			rc = 0;
			ok++;
		} else if (-rc < MD__REJ_COUNT) {
			e->rejected[-rc]++;
		}
		if (rcs)
			rcs[i] = rc;
	}
	return ok;
}

size_t md__host_decide(struct md__host *h, struct md__decision *out, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < h->n_engines && n < cap; i++) {
		struct md__engine *e = h->engines[i];
		uint64_t t0 = md_now_ns();
		size_t got = md__index_decide_engine(h, e, out + n, cap - n);
		if (got) {
			e->decisions++;
			e->decision_ns_total += md_now_ns() - t0;
		}
		n += got;
	}
	return n;
}

int md__host_engine_param_view(const struct md__host *h, uint32_t engine_id,
			       struct md_param_block *out)
{
	const struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return -ENOENT;
	const struct md__params *p = &h->params;
	uint64_t seq = out->seq;
	memset(out, 0, sizeof(*out));
	out->seq = seq;
	out->policy = md__engine_policy(h, e);
	out->norm_mode = md__engine_norm(h, e);
	out->tau = p->tau;
	out->alpha = p->alpha;
	out->beta = p->beta;
	out->pinned_mask = p->pinned_mask;
	out->protect_recent = p->protect_recent;
	out->budget_sequence_tokens = md__engine_seq_budget_tokens(h, e);
	out->budget_engine_pages = md__engine_page_budget(h, e, NULL);
	out->low_watermark = p->low_watermark;
	out->budget_tier_pages = md__engine_tier_budget(h, e);
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++) {
		out->base[r] = p->base[r];
		out->lambda[r] = p->lambda[r];
	}
	return 0;
}

void md__host_set_now(struct md__host *h, uint64_t now_ns)
{
	h->now_ns = now_ns;
}

size_t md__host_seqs(const struct md__host *h, uint32_t engine_id, uint64_t now_ns,
		     struct md__seq_info *out, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < h->n_engines; i++) {
		const struct md__engine *e = h->engines[i];
		if (engine_id != UINT32_MAX && e->id != engine_id)
			continue;
		for (uint32_t q = 0; q < e->max_seqs; q++) {
			const struct md__seq *s = &e->seqs[q];
			if (!s->n_pages && !s->n_tier) /* a session may live in the tier alone */
				continue;
			if (n < cap) {
				struct md__seq_info *o = &out[n];
				o->engine_id = e->id;
				o->seq = q;
				o->pages = s->n_pages;
				o->turns = s->turn_n;
				o->tokens_live = s->tokens_live;
				/* resident pages only (the tier's are in no order) */
				o->span_tokens = 0;
				if (s->n_pages) {
					const struct md__pos_ent *last = &s->pages[s->n_pages - 1];
					o->span_tokens = last->first_pos + last->n_tokens;
				}
				o->clock = s->clock;
				o->idle_ns = s->active_ns && now_ns >= s->active_ns
						     ? now_ns - s->active_ns
						     : UINT64_MAX;
				o->budget_tokens = md__seq_budget_tokens(h, e, s);
				o->policy = md__seq_policy(h, e, s);
				o->own_options = s->own_policy != MD_SEQ_ENGINE_U32 ||
						 s->own_budget != MD_SEQ_ENGINE_U64;
				o->state = s->retained ? MD_SEQ_RETAINED : MD_SEQ_RUNNING;
				memcpy(o->session, s->session, sizeof(o->session));
				o->tier_pages = s->n_tier;
				o->recalls = s->recalls;
			}
			n++;
		}
	}
	return n;
}

int md__host_engine_stats(const struct md__host *h, uint32_t engine_id,
			  struct md__engine_stats *out)
{
	const struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	out->engine_id = e->id;
	out->policy = md__engine_policy(h, e);
	out->pages_live = e->pages_live;
	out->pages_evicting = e->pages_evicting;
	out->tokens_live = e->tokens_live;
	out->seqs_live = e->seqs_live;
	out->records = e->records;
	memcpy(out->rejected, e->rejected, sizeof(out->rejected));
	out->evictions = e->evictions;
	memcpy(out->evictions_by_region, e->evictions_by_region, sizeof(out->evictions_by_region));
	memcpy(out->evictions_by_reason, e->evictions_by_reason, sizeof(out->evictions_by_reason));
	out->budget_engine_pages = md__engine_page_budget(h, e, NULL);
	out->decisions = e->decisions;
	out->decision_ns_total = e->decision_ns_total;
	out->seqs_own_options = e->own_n;
	out->seqs_retained = e->retained_n;
	out->seq_options_applied = e->seq_opts_applied;
	out->page_bytes = e->page_bytes;
	out->tier_capacity = e->tier_capacity;
	out->tier_budget = md__engine_tier_budget(h, e);
	out->tier_pages = e->n_tier;
	out->tier_in = e->tier_in;
	out->estimates = e->estimates;
	out->restores = e->restores;
	out->recalls = e->recalls;
	out->restores_refused = e->restores_refused;
	out->recall_hits = e->recall_hits;
	out->drops = e->drops;
	out->tier_freed = e->tier_freed;
	return 0;
}

size_t md__host_engine_ids(const struct md__host *h, uint32_t *ids, size_t cap)
{
	size_t n = h->n_engines < cap ? h->n_engines : cap;
	for (size_t i = 0; i < n; i++)
		ids[i] = h->engines[i]->id;
	return h->n_engines;
}

/* ---- resync from the page table ---- */

void md__host_resync_begin(struct md__host *h, uint32_t engine_id)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return;
	e->in_resync = 1;
	for (uint32_t i = 0; i < e->page_capacity; i++)
		e->pages[i].flags &= (uint8_t)~MD__PF_SEEN;
}

/* The pages md__host_resync_page would not keep as they are (not live in the
 * table, invalid there, or another page now), dropped per sequence in one
 * pass each, so that neither the reopening nor resync_end removes them one
 * by one from the middle of a sequence's order. */
void md__host_resync_prune(struct md__host *h, uint32_t engine_id,
			   const struct md_page_entry *table)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e || !e->in_resync)
		return;
	uint8_t *drop = calloc(e->page_capacity, 1);
	if (!drop)
		return; /* correct without it, only slower */
	uint32_t *marked = calloc(e->max_seqs, sizeof(*marked));
	if (!marked) {
		free(drop);
		return;
	}
	for (uint32_t slot = 0; slot < e->page_capacity; slot++) {
		const struct md__page *pg = &e->pages[slot];
		if (pg->state != MD__SLOT_LIVE)
			continue;
		const struct md_page_entry *pe = &table[slot];
		/* a tier entry of the same page is kept too: resync_page moves it
		 * to the tier with its attention state */
		int kept = pe->state == MD_PAGE_LIVE ||
			   (pe->state == MD_PAGE_TIER && e->abi_minor >= 4);
		int same = kept && pe->seq < e->max_seqs && pe->n_tokens >= 1 &&
			   pe->n_tokens <= e->page_tokens && pg->gen == pe->generation &&
			   pg->seq == pe->seq && pg->first_pos == pe->first_pos;
		if (!same) {
			drop[slot] = 1;
			marked[pg->seq]++;
		}
	}
	for (uint32_t q = 0; q < e->max_seqs; q++)
		if (marked[q])
			md__seq_drop_marked(h, e, q, drop);
	free(marked);
	free(drop);
}

int md__host_resync_seq_clock(struct md__host *h, uint32_t engine_id, uint32_t seq,
			      uint64_t clock)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return -MD__REJ_STATE;
	if (seq >= e->max_seqs)
		return -MD__REJ_SEQ;
	if (clock < e->seqs[seq].clock)
		return -MD__REJ_CLOCK;
	e->seqs[seq].clock = clock;
	return 0;
}

int md__host_resync_page(struct md__host *h, uint32_t engine_id, uint32_t slot,
			 const struct md_page_entry *pe)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return -MD__REJ_STATE;
	if (slot >= e->page_capacity)
		return -MD__REJ_SLOT;
	/* 1.4: a page in the engine's host tier (docs/tier.md); an older
	 * engine has no such state: its entry reads as free, as before */
	int tier = pe->state == MD_PAGE_TIER && e->abi_minor >= 4;
	if (pe->state != MD_PAGE_LIVE && !tier)
		return 0; /* free in the table: dropped at resync_end */
	if (pe->seq >= e->max_seqs)
		return -MD__REJ_SEQ;
	if (pe->n_tokens < 1 || pe->n_tokens > e->page_tokens)
		return -MD__REJ_TOKENS;
	struct md__page *pg = &e->pages[slot];
	if (pg->state != MD__SLOT_FREE && pg->gen == pe->generation && pg->seq == pe->seq &&
	    pg->first_pos == pe->first_pos) {
		int off = pg->state == MD__SLOT_TIER || pg->state == MD__SLOT_DROPPING;
		if (!tier && off) {
			/* restored while its record was lost: live again */
			if (md__page_to_tier(h, e, slot))
				return -MD__REJ_STATE;
			int rc = md__page_tier_to_live(h, e, slot);
			if (rc)
				return rc;
		}
		if (pe->n_tokens > pg->n_tokens && pg->state != MD__SLOT_TIER &&
		    pg->state != MD__SLOT_DROPPING) {
			struct md_stats_rec r;
			memset(&r, 0, sizeof(r));
			r.type = MD_REC_PAGE_GROW;
			r.slot = slot;
			r.gen = pg->gen;
			r.clock = e->seqs[pg->seq].clock;
			r.u.page.n_tokens = pe->n_tokens;
			r.u.page.labels = pe->labels;
			int rc = md__page_ingest(h, e, &r);
			if (rc < 0)
				return rc;
		}
		/* in the tier now (evicted or a restore refused while its record
		 * was lost); a page being dropped stays so: its drop is on the way */
		if (tier && pg->state != MD__SLOT_TIER && pg->state != MD__SLOT_DROPPING &&
		    md__page_to_tier(h, e, slot))
			return -MD__REJ_STATE;
		e->pages[slot].flags |= MD__PF_SEEN;
		return 0; /* same page: keeps its attention state */
	}
	if (pg->state != MD__SLOT_FREE)
		md__page_remove(h, e, slot);
	uint64_t clock = e->seqs[pe->seq].clock;
	int rc = md__page_open(h, e, slot, pe->generation, pe->seq, pe->first_pos, pe->labels,
			       pe->n_tokens, clock);
	if (rc)
		return rc;
	if (tier && md__page_to_tier(h, e, slot)) {
		md__page_remove(h, e, slot);
		return -MD__REJ_STATE;
	}
	e->pages[slot].flags |= MD__PF_SEEN;
	return 0;
}

void md__host_resync_end(struct md__host *h, uint32_t engine_id)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e || !e->in_resync)
		return;
	for (uint32_t i = 0; i < e->page_capacity; i++) {
		struct md__page *pg = &e->pages[i];
		if (pg->state != MD__SLOT_FREE && !(pg->flags & MD__PF_SEEN))
			md__page_remove(h, e, i);
		pg->flags &= (uint8_t)~MD__PF_SEEN;
	}
	e->in_resync = 0;
}

int md__host_resync_seq_opts(struct md__host *h, uint32_t engine_id, uint32_t seq,
			     const struct md_seq_opts *o)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return -MD__REJ_STATE;
	/* version 0: never written, the engine's options */
	struct md__seq_own own = { .policy = MD_SEQ_ENGINE_U32, .budget = MD_SEQ_ENGINE_U64 };
	if (o->version != 0) {
		own.policy = o->policy;
		own.budget = o->budget_sequence_tokens;
		if (e->abi_minor >= 3) { /* 1.2: reserved words, ignored as they were */
			own.state = o->state;
			memcpy(own.session, o->session, sizeof(own.session));
		}
	}
	return md__seq_set_opts(h, e, seq, &own);
}

/* ---- what the transport publishes: protection counts, sequence options ---- */

void md__host_protect_changes(struct md__host *h, uint32_t engine_id,
			      void (*fn)(void *ctx, uint32_t seq, uint32_t k), void *ctx)
{
	struct md__engine *e = md__host_find(h, engine_id);
	if (!e)
		return;
	if (e->kpub_all) {
		for (uint32_t q = 0; q < e->max_seqs; q++) {
			struct md__seq *s = &e->seqs[q];
			s->k_published = s->k_protect;
			s->kpub_queued = 0;
			fn(ctx, q, s->k_protect);
		}
		e->kpub_all = 0;
		e->kpub_n = 0;
		return;
	}
	for (uint32_t i = 0; i < e->kpub_n; i++) {
		uint32_t q = e->kpub_seqs[i];
		struct md__seq *s = &e->seqs[q];
		s->kpub_queued = 0;
		if (s->k_published == s->k_protect)
			continue;
		s->k_published = s->k_protect;
		fn(ctx, q, s->k_protect);
	}
	e->kpub_n = 0;
}

int md__host_seq_opts_get(const struct md__host *h, uint32_t engine_id, uint32_t seq,
			  struct md__seq_opts_info *out)
{
	const struct md__engine *e = md__host_find(h, engine_id);
	if (!e || seq >= e->max_seqs)
		return -ENOENT;
	const struct md__seq *s = &e->seqs[seq];
	out->policy = s->own_policy;
	out->policy_effective = md__seq_policy(h, e, s);
	out->budget = s->own_budget;
	out->budget_effective = md__seq_budget_tokens(h, e, s);
	out->k_protect = s->k_protect;
	out->state = s->retained ? MD_SEQ_RETAINED : MD_SEQ_RUNNING;
	memcpy(out->session, s->session, sizeof(out->session));
	return 0;
}
