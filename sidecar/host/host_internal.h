/*
 * host_internal.h — the policy host's private state, shared by its files
 * (docs/architecture.md, "Inside the host": which calls which).  Not for the transport: it uses host.h.
 * Not for policies either: they see a page through policy.h (struct md__page,
 * whose state and flags fields are defined here).
 */
#ifndef MD_HOST_INTERNAL_H
#define MD_HOST_INTERNAL_H

#include <math.h>

#include "host.h"
#include "policy.h"

enum md__slot_state {
	MD__SLOT_FREE = 0,
	MD__SLOT_LIVE = 1,
	MD__SLOT_EVICTING = 2, /* evict command sent, engine has not freed it yet */
	/* ABI 1.4, the host tier (docs/tier.md).  A page being restored is
	 * MD__SLOT_LIVE with MD__PF_RESTORING: resident in every count. */
	MD__SLOT_TIER = 3,     /* its K/V in the engine's host tier: out of the order
				  and the heaps, its attention state and refresh
				  clocks kept, scored at its sequence's clock */
	MD__SLOT_DROPPING = 4, /* drop command sent, engine has not freed it yet */
};

#define MD__PF_PINNED 1u   /* a token is in a pinned region */
#define MD__PF_SINK 2u     /* recency sink page */
#define MD__PF_PROT 4u     /* tail page or protect_recent / h2o window */
#define MD__PF_SEEN 8u     /* resync bookkeeping */
#define MD__PF_RESTORING 16u /* live, a restore command sent and not yet applied:
				counted resident, never evicted (no evict may
				overtake its restore, docs/tier.md) */
#define MD__PF_RECALLED 32u  /* restored: its first real refresh is a recall hit */
#define MD__PF_CAND 64u      /* tier page in the recall candidate set */

#define MD__NO_HEAP UINT32_MAX

struct md__pos_ent {      /* a sequence's pages in first_pos order */
	uint64_t first_pos;
	uint32_t slot;
	uint32_t n_tokens;        /* == pages[slot].n_tokens: overlap checks stay in this array */
};

struct md__heap_ent {     /* min-heap by key: a lower bound of the score */
	double key;
	uint32_t slot;
	uint32_t pad;
};

struct md__seq {
	uint64_t clock;
	uint64_t tokens_live;     /* live (not evicting) tokens */
	uint32_t k_protect;       /* newest pages kept out of the heap */
	uint32_t n_pages, cap_pages;
	uint32_t keyheap_n, keyheap_cap;
	uint32_t nodecay;         /* pages in keyheap but in no decayheap */
	uint32_t n_evicting;      /* its pages waiting for the engine's free */
	uint32_t ob_pos;          /* 1 + its index in the engine's over-budget set, 0: not in it */
	uint32_t tail_slot;       /* pages[n_pages - 1].slot when n_pages: grows hit it */
	struct md__pos_ent *pages;
	struct md__heap_ent *keyheap;   /* by (key, first_pos, slot) */
	/* decay heaps, one per lambda class: key g, bound exp(g - lambda_c t) of
	 * the decaying part (turn_decay: key G, the same of the whole score) */
	struct md__heap_ent *decayheap[MD_REGIONS_MAX];
	uint32_t decayheap_n[MD_REGIONS_MAX], decayheap_cap[MD_REGIONS_MAX];
	/* turns (memdecay-turn, docs/policies.md): the clock at which each turn
	 * began, ascending; a turn begins when an appended token's region differs
	 * from the previous appended token's.  Kept for every policy, so a switch
	 * to memdecay-turn sees the sequence's whole history. */
	uint64_t *turn_clk;
	uint32_t turn_n, turn_cap;
	uint32_t turn_region;     /* region of the last appended token */
	uint64_t active_ns;       /* host clock at its last step or page open (0: none) */
	/* its own options (MD_REC_SEQ_OPTS, ABI 1.2): MD_SEQ_ENGINE_U32/_U64 is
	 * the engine's setting; own_pos: 1 + its index in e->own_seqs, 0 when both
	 * fields are the engine's */
	uint32_t own_policy;
	uint32_t own_pos;
	uint64_t own_budget;
	/* its session (ABI 1.3, operators only: no decision reads them): the
	 * engine's state and session tag; zero from an older engine */
	uint8_t session[MD_SEQ_SESSION_LEN];
	uint8_t retained;         /* MD_SEQ_RETAINED */
	uint32_t k_published;     /* k_protect as last handed to md__host_protect_changes */
	uint8_t kpub_queued;      /* in e->kpub_seqs */
	/* the host tier (ABI 1.4): its pages there and being dropped (neither in
	 * the order), its restores applied */
	uint32_t n_tier, n_dropping;
	uint32_t recalls;
};

#define MD__NO_CLASS 0xffu

struct md__engine {
	uint32_t id;
	uint32_t page_tokens, page_capacity, max_seqs;
	struct md__engine_opts opts;
	struct md__page *pages;
	uint64_t *t_refresh;      /* [page_capacity * page_tokens] */
	float *att_recent;        /* [page_capacity] the mass of the page's latest
				     attention record, real or estimated: what
				     recall compares (docs/tier.md) */
	struct md__seq *seqs;
	uint32_t *keyheap_pos;    /* [page_capacity] position in its keyheap, or MD__NO_HEAP */
	uint32_t *decayheap_pos;  /* [page_capacity] position in its decayheap */
	uint8_t *dcls;            /* [page_capacity] decay class or MD__NO_CLASS */
	double *dg;               /* [page_capacity] turn_decay: the decay bound g under
				     its decayheap key, which also holds the attention
				     part (evict_index.c) */
	const struct md__params *params; /* the host's, for index upkeep */
	double cls_lambda[MD_REGIONS_MAX];
	uint32_t n_cls;
	/* sequences with tokens_live > ob_budget (0: not tracked), kept at ingest so a
	 * decision pass visits only those; [max_seqs .. 2 max_seqs) is sort scratch */
	uint32_t *ob_seqs;
	uint32_t ob_n;
	uint64_t ob_budget;
	/* every sequence has k_protect == k_applied unless k_dirty */
	uint32_t k_applied;
	int k_dirty;
	uint64_t index_epoch;     /* params epoch the index was built for */
	uint32_t policy;          /* effective policy of index_epoch */
	const struct md__policy *pol;    /* its table entry, set with it */
	struct md__score_in key_in;      /* score inputs for heap keys: the engine's part set
					    with it, the page's part by page_key (pagestate.c) */
	uint8_t step_decay, turn_decay, attn_lowers, memdecay_bound; /* its traits (struct
									 md__policy), set with it */
	double decay_scale;       /* its decay_scale (1 without one), set with it */
	uint32_t norm_mode;
	uint64_t pages_live, pages_evicting, tokens_live, seqs_live;
	uint64_t records;
	uint64_t rejected[MD__REJ_COUNT];
	uint64_t evictions;
	uint64_t evictions_by_region[MD_REGIONS_MAX];
	uint64_t evictions_by_reason[MD_EVICT_REASON_COUNT];
	uint64_t decisions, decision_ns_total;
	int in_resync;
	uint32_t abi_minor;       /* the engine's: MD_REC_SEQ_OPTS from 1.2 on */
	/* sequences with own options (docs/policies.md, "Per-sequence options") */
	uint32_t *own_seqs;       /* [max_seqs] */
	uint32_t own_n;
	uint32_t retained_n;      /* sequences in state MD_SEQ_RETAINED (1.3) */
	uint64_t seq_opts_applied; /* MD_REC_SEQ_OPTS records taken */
	/* protection counts to publish: sequences whose k_protect may have moved
	 * since md__host_protect_changes last ran, or all of them (kpub_all) */
	uint32_t *kpub_seqs;      /* [max_seqs] */
	uint32_t kpub_n;
	int kpub_all;
	/* the host tier (ABI 1.4, docs/tier.md): HELLO's capacity and page
	 * bytes; its pages (tier_slots, tier_pos[slot]: 1 + index, 0: not
	 * there) and the recall candidates among them (cand_slots, cand_pos),
	 * both allocated with the first tier page: [page_capacity] each */
	uint64_t tier_capacity, page_bytes;
	uint32_t *tier_slots, *tier_pos;
	uint32_t *cand_slots, *cand_pos;
	uint32_t n_tier, n_cand, n_dropping;
	uint64_t tier_in, estimates, restores, recalls, restores_refused, recall_hits, drops,
		tier_freed;
};

/* the last split of budget.global_pages (settings.c) with what it was made
 * from, per engine in attach order: reused while nothing of it moved */
struct md__split_ent;
struct md__share_cache {
	uint64_t global;
	size_t n, cap;
	int valid;
	struct md__split_ent *ent; /* per engine in attach order: inputs and share */
	struct md__split_ent *tmp; /* the same, sorted by the split */
};

struct md__host {
	struct md__params params;
	uint64_t params_epoch;
	struct md__engine **engines;  /* attach order */
	size_t n_engines, cap_engines;
	/* scratch for decisions, grown as needed */
	void *scratch_a, *scratch_b;
	size_t scratch_a_cap, scratch_b_cap;
	uint64_t now_ns;              /* md__host_set_now */
	struct md__share_cache *shares; /* written through a const host: a memo only */
};

/* ---- effective settings: what an engine runs with (its options over the
 * host's parameters).  The hot ones are inline here (ingest and decisions ask
 * them per record or per popped page); the rest are in settings.c.  Below
 * every other file of the host: they call nothing of it but the policy table. */

static inline struct md__engine *md__host_find(const struct md__host *h, uint32_t engine_id)
{
	for (size_t i = 0; i < h->n_engines; i++)
		if (h->engines[i]->id == engine_id)
			return h->engines[i];
	return NULL;
}

static inline uint32_t md__engine_policy(const struct md__host *h, const struct md__engine *e)
{
	return e->opts.policy >= 0 ? (uint32_t)e->opts.policy : h->params.policy;
}

static inline uint32_t md__engine_norm(const struct md__host *h, const struct md__engine *e)
{
	return md__policy_get(md__engine_policy(h, e))->always_relative ? MD_NORM_RELATIVE
									 : h->params.norm;
}

static inline uint64_t md__engine_seq_budget_tokens(const struct md__host *h,
						    const struct md__engine *e)
{
	return e->opts.budget_sequence_tokens >= 0 ? (uint64_t)e->opts.budget_sequence_tokens
						   : h->params.budget_sequence_tokens;
}

/* A sequence's effective policy, norm and token budget: its own options over
 * the engine's (docs/policies.md, "Per-sequence options"). */
static inline uint32_t md__seq_policy(const struct md__host *h, const struct md__engine *e,
				      const struct md__seq *s)
{
	return s->own_policy != MD_SEQ_ENGINE_U32 ? s->own_policy : md__engine_policy(h, e);
}

static inline uint32_t md__seq_norm(const struct md__host *h, const struct md__engine *e,
				    const struct md__seq *s)
{
	if (s->own_policy == MD_SEQ_ENGINE_U32)
		return md__engine_norm(h, e);
	return md__policy_get(s->own_policy)->always_relative ? MD_NORM_RELATIVE : h->params.norm;
}

static inline uint64_t md__seq_budget_tokens(const struct md__host *h, const struct md__engine *e,
					     const struct md__seq *s)
{
	return s->own_budget != MD_SEQ_ENGINE_U64 ? s->own_budget
						  : md__engine_seq_budget_tokens(h, e);
}

/* What a policy needs to score the page in slot (its sequence's clock and
 * turns, its sequence's norm, the page's identity). */
static inline void md__score_in_init(const struct md__host *h, const struct md__engine *e,
				     uint32_t slot, struct md__score_in *in)
{
	uint32_t seq = e->pages[slot].seq;
	in->p = &h->params;
	in->slot = slot;
	in->clock = e->seqs[seq].clock;
	in->engine_id = e->id;
	in->norm_mode = md__seq_norm(h, e, &e->seqs[seq]);
	in->page_tokens = e->page_tokens;
	in->turn_clk = e->seqs[seq].turn_clk;
	in->turn_n = e->seqs[seq].turn_n;
}

static inline int md__page_is_pinned(const struct md__params *p, uint64_t labels,
				     uint32_t n_tokens)
{
	for (unsigned k = 0; k < n_tokens; k++)
		if ((p->pinned_mask >> md_label_get(labels, k)) & 1u)
			return 1;
	return 0;
}

/* settings.c */
/* effective page budget (0 none) and the reason it evicts with: the smaller
 * of the engine's own budget and its share of budget.global_pages */
uint64_t md__engine_page_budget(const struct md__host *h, const struct md__engine *e,
				uint32_t *reason);
/* the engine's tier budget in pages: HELLO tier_pages, or the parameter
 * tier.pages when that is set and smaller (0: no tier) */
uint64_t md__engine_tier_budget(const struct md__host *h, const struct md__engine *e);
/* newest pages of a sequence that are protected under the engine's policy */
uint32_t md__engine_protect_count(const struct md__host *h, const struct md__engine *e);
uint32_t md__protect_count_for(const struct md__host *h, const struct md__engine *e,
			       uint64_t seqs_live);
/* the same for sequence q: its own policy and budget when it has them */
uint32_t md__seq_protect_count(const struct md__host *h, const struct md__engine *e, uint32_t q,
			       uint64_t seqs_live);
/* the same with the engine's page budget given (the oracle replays a pass in
 * which holdings, and so global shares, move; UINT64_MAX: the budget now) */
uint32_t md__seq_protect_count_at(const struct md__host *h, const struct md__engine *e,
				  uint32_t q, uint64_t seqs_live, uint64_t engine_budget);
uint32_t md__dominant_region(uint64_t labels, uint32_t n_tokens);
void md__share_cache_free(struct md__share_cache *c);

/* pagestate.c */
/* Applies one record.  Returns -reason when it is rejected, else the mask of
 * the page's tokens whose refresh clock it set (0 for all but attention). */
int md__page_ingest(struct md__host *h, struct md__engine *e, const struct md_stats_rec *r);
void md__page_set_evicting(struct md__host *h, struct md__engine *e, uint32_t slot);
void md__page_remove(struct md__host *h, struct md__engine *e, uint32_t slot);
void md__seq_release_all(struct md__host *h, struct md__engine *e, uint32_t seq);
int md__relabel_step(struct md__host *h, struct md__engine *e, const struct md_stats_rec *r,
		     uint64_t *cursor, uint32_t max_pages, int *touched);
void md__seq_drop_marked(struct md__host *h, struct md__engine *e, uint32_t seq,
			 const uint8_t *drop);
/* (re)computes a page's flags, static bound and heap membership */
void md__page_reindex(struct md__host *h, struct md__engine *e, uint32_t slot);
int md__page_open(struct md__host *h, struct md__engine *e, uint32_t slot, uint32_t gen,
		  uint32_t seq, uint64_t first_pos, uint64_t labels, uint32_t n_tokens,
		  uint64_t clock);
void md__seq_set_protect(struct md__host *h, struct md__engine *e, uint32_t seq, uint32_t k);
/* the host tier (docs/tier.md): a tier page back into its sequence's order,
 * refreshed, as "restoring" (0; -1: its positions are taken or no memory,
 * nothing changed); a tier page to "dropping" */
int md__page_restore(struct md__host *h, struct md__engine *e, uint32_t slot);
void md__page_set_dropping(struct md__host *h, struct md__engine *e, uint32_t slot);
/* a page (any state but free) to the tier, keeping its attention state;
 * 0 or -1 without memory for the tier's lists */
int md__page_to_tier(struct md__host *h, struct md__engine *e, uint32_t slot);
/* a tier page back to live (RESTORED unasked, a resync); 0 or -reason */
int md__page_tier_to_live(struct md__host *h, struct md__engine *e, uint32_t slot);
void md__cand_remove(struct md__engine *e, uint32_t slot);
/* A sequence's own options (policy, budget_sequence_tokens; MD_SEQ_ENGINE_x:
 * the engine's) and, ABI 1.3, its session state and tag (an older engine's
 * are taken as running, no tag), validated as an MD_REC_SEQ_OPTS record:
 * 0, or -reason and nothing changed. */
struct md__seq_own {
	uint32_t policy;
	uint32_t state;           /* enum md_seq_state */
	uint64_t budget;
	uint8_t session[MD_SEQ_SESSION_LEN];
};
int md__seq_set_opts(struct md__host *h, struct md__engine *e, uint32_t seq,
		     const struct md__seq_own *o);
/* queues sequence q for md__host_protect_changes */
static inline void md__kpub_note(struct md__engine *e, uint32_t q)
{
	struct md__seq *s = &e->seqs[q];
	if (s->kpub_queued || e->kpub_all)
		return;
	s->kpub_queued = 1;
	e->kpub_seqs[e->kpub_n++] = q;
}
static inline int md__index_live(const struct md__host *h, const struct md__engine *e)
{
	return e->index_epoch == h->params_epoch;
}

/* docs/design.md's eviction order: lower score first, then the older page (lower
 * first position), then the lower slot.  Returns <0, 0, >0 like strcmp. */
static inline int md__evict_order(double sa, uint64_t pa, uint32_t la, double sb, uint64_t pb,
				  uint32_t lb)
{
	if (sa != sb)
		return sa < sb ? -1 : 1;
	if (pa != pb)
		return pa < pb ? -1 : 1;
	return la < lb ? -1 : la > lb;
}

/* Recall compares attention, not scores (docs/tier.md, "The decision"): a
 * candidate's estimate against the latest attention mass of the page it would
 * displace, the evictable page of its scope with the lowest such mass (at a
 * prefill chunk both come from the same observed queries).  One rule for
 * every eviction policy (under recency a tier page, older, never outscores a
 * resident one).  recall.margin is relative: cand must exceed victim by
 * margin times the victim's mass (masses are >= 0; equal is not enough). */
static inline int md__recall_beats(double cand, double victim, double margin)
{
	return cand > victim + margin * fabs(victim);
}

/* keeps sequence q's membership of the over-budget set after its tokens_live
 * (or its own budget) changed: over its own budget when it has one, else
 * over the engine's (ob_budget) */
static inline void md__ob_note(struct md__engine *e, uint32_t q)
{
	struct md__seq *s = &e->seqs[q];
	uint64_t b = s->own_budget != MD_SEQ_ENGINE_U64 ? s->own_budget : e->ob_budget;
	int over = b && s->tokens_live > b;
	if (over == (s->ob_pos != 0))
		return;
	if (over) {
		e->ob_seqs[e->ob_n++] = q;
		s->ob_pos = e->ob_n;
	} else {
		uint32_t i = s->ob_pos - 1, last = e->ob_seqs[--e->ob_n];
		e->ob_seqs[i] = last;
		e->seqs[last].ob_pos = i + 1;
		s->ob_pos = 0;
	}
}

/* evict_index.c */
void md__heap_insert(struct md__engine *e, struct md__seq *s, uint32_t slot, double key);
void md__heap_remove(struct md__engine *e, struct md__seq *s, uint32_t slot);
void md__heap_lower_key(struct md__engine *e, struct md__seq *s, uint32_t slot, double key);
void md__heap_clear(struct md__engine *e, struct md__seq *s);
/* A decision scope: one sequence, or all sequences of an engine, whose pages
 * come out in eviction order.  Its buffers are the host's scratch. */
struct md__scope {
	struct md__host *h;
	struct md__engine *e;
	const struct md__policy *pol;
	/* the scope's sequences' key-heap heads, ordered by (key, first_pos, slot) */
	struct md__key_head *key_heads;
	size_t n_key_heads;
	/* their decay-heap heads, ordered by the decay bound v (step_decay,
	 * turn_decay) */
	struct md__decay_head *decay_heads;
	size_t n_decay_heads;
	uint64_t nodecay;     /* unseen pages with no decay bound */
	int turn;
	int decay_heads_built; /* gathered only when key pops do not settle */
	size_t pops;
	const uint32_t *seqs;
	size_t nseqs;
	/* popped pages, ordered by exact score (the eviction order) */
	struct md__cand *cands;
	size_t n_cands, cap_cands;
};
/* Gathers the heads of seqs[0..nseqs) (nonzero: out of memory, nothing held) */
int md__scope_begin(struct md__scope *sc, struct md__host *h, struct md__engine *e,
		    const uint32_t *seqs, size_t nseqs);
/* The scope's next eviction, its slot into *out (the caller evicts it before
 * asking again); 0 when nothing is evictable. */
int md__scope_next(struct md__scope *sc, uint32_t *out);
/* Puts back the pages seen but not evicted; gives the buffers back. */
void md__scope_end(struct md__scope *sc);

/* decide.c */
void md__index_rebuild(struct md__host *h, struct md__engine *e);
size_t md__index_decide_engine(struct md__host *h, struct md__engine *e,
			       struct md__decision *out, size_t cap);

#endif
