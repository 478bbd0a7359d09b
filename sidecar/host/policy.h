/*
 * policy.h — one eviction policy behind one interface: its score, and a lower
 * bound of the score that stays valid as the sequence clock advances (the
 * eviction index orders pages by it; see evict_index.c).  Lower score = evicted
 * first.  Protection rules (tail, protect_recent, pinned) live in the host; a
 * policy may add sink pages (recency) or a recent window (h2o).
 */
#ifndef MD_POLICY_H
#define MD_POLICY_H

#include <stddef.h>
#include <stdint.h>
#include "params.h"

struct md__page;

/* Who a page is, beyond its state: a score may depend on it (random). */
struct md__page_id {
	uint32_t engine_id, slot, gen;
};

struct md__score_in {
	const struct md__params *p;
	uint64_t clock;        /* the page's sequence clock */
	uint32_t engine_id;
	uint32_t slot;         /* the page's slot: its identity, with pg->gen */
	uint32_t norm_mode;    /* effective enum md_norm_mode: relative for an
				  always_relative policy (md__engine_norm) */
	uint32_t page_tokens;
	const uint64_t *turn_clk; /* the sequence's turn starts (memdecay-turn) */
	uint32_t turn_n;
};

struct md__score_terms {
	double decay;          /* mean b_r exp(-lambda_r dt) */
	double attn;           /* alpha * A / n, or the cumulative mass (h2o) */
};

struct md__policy {
	const char *name;
	/* t_refresh: the page's per-token refresh clocks */
	double (*score)(const struct md__page *pg, const uint64_t *t_refresh,
			const struct md__score_in *in, struct md__score_terms *terms);
	/* part of the bound that changes only with labels, params or identity;
	 * stored in pg->lb_static when the page is (re)indexed */
	double (*static_bound)(const struct md__page *pg, const struct md__params *p,
			       const struct md__page_id *id);
	/* <= score for this and every later clock; uses pg->lb_static */
	double (*lower_bound)(const struct md__page *pg, const struct md__score_in *in);
	/* page never evicted under this policy (recency sinks); NULL: none */
	int (*is_sink)(const struct md__page *pg, const struct md__params *p);
	/* extra protected newest pages of a sequence whose budget is budget_pages */
	uint32_t (*window_pages)(const struct md__params *p, uint64_t budget_pages);
	/* What the host may assume of the score; a new policy states each one
	 * (docs/policies.md "Adding a policy"). */
	unsigned step_decay : 1;      /* the static part decays per step at the regions' λ:
					 the decay heaps' bound (evict_index.c) holds */
	unsigned attn_lowers : 1;     /* an attention record can lower the score (EWMA):
					 heap keys are lowered on attention */
	unsigned always_relative : 1; /* attention relative to the uniform level, whatever
					 memdecay.norm says */
	unsigned memdecay_bound : 1;  /* lower_bound is md__memdecay_lower_bound at the
					 engine's norm: the attention path evaluates it
					 inline instead of calling it */
};

/* The policy table (policy.c), indexed by enum md_policy_id: the one place
 * that lists the policies. */
extern const struct md__policy *const md__policy_table[MD_POLICY_COUNT];

/* inline: asked once per attention-tokens record (md__engine_norm).  An id
 * out of range (never stored: params and engine options are validated) falls
 * back to memdecay. */
static inline const struct md__policy *md__policy_get(uint32_t id)
{
	return md__policy_table[id < MD_POLICY_COUNT ? id : MD_POLICY_MEMDECAY];
}


/* shared by memdecay and memdecay-norm */
double md__memdecay_score(const struct md__page *pg, const uint64_t *t_refresh,
			  const struct md__score_in *in, uint32_t norm_mode,
			  struct md__score_terms *terms);
double md__memdecay_static_bound(const struct md__page *pg, const struct md__params *p,
				 const struct md__page_id *id);
/* memdecay_lower_bound: host_internal.h (inline, it needs struct md__page) */
/*
 * Policies whose score is a function of the page alone that never falls as the
 * clock advances (h2o, recency, random) are their own lower bound, with no
 * static part: .static_bound = md__policy_no_static_bound, and
 * MD__SELF_BOUNDED_POLICY(value, with_attn) defines their static score() and
 * lower_bound() from `static double value(const struct md__page *pg)`.  The
 * terms report decay 0 and attn = the score (with_attn 1) or 0 (with_attn 0).
 * Inline, like every helper a policy file uses from here: policy.c lists the
 * policies, so a policy calling into policy.c would close a circle.
 */
static inline double md__policy_no_static_bound(const struct md__page *pg,
						const struct md__params *p,
						const struct md__page_id *id)
{
	(void)pg;
	(void)p;
	(void)id;
	return 0.0;
}

#define MD__SELF_BOUNDED_POLICY(value, with_attn)                                       \
	static double score(const struct md__page *pg, const uint64_t *t_refresh,      \
			    const struct md__score_in *in, struct md__score_terms *terms) \
	{                                                                               \
		double s = value(pg);                                                   \
		(void)t_refresh;                                                        \
		(void)in;                                                               \
		if (terms) {                                                            \
			terms->decay = 0.0;                                             \
			terms->attn = (with_attn) ? s : 0.0;                            \
		}                                                                       \
		return s;                                                               \
	}                                                                               \
	static double lower_bound(const struct md__page *pg, const struct md__score_in *in) \
	{                                                                               \
		(void)in;                                                               \
		return value(pg);                                                       \
	}

/* turns begun at or before clock c (memdecay-turn) */
uint32_t md__turn_at(const uint64_t *turn_clk, uint32_t turn_n, uint64_t c);

/* fixed per page pseudo-random score in [0, 1) */
double md__random_score(uint64_t seed, uint32_t engine_id, uint32_t slot, uint32_t gen);

#endif
