/*
 * policy.h — what a policy sees and what it provides.  A policy file includes
 * this header only (and params.h, which it pulls in), never the host's
 * private one: it sees a page (struct md__page), the inputs of its score
 * (struct md__score_in), and fills one struct md__policy: its score, a lower
 * bound of the score that stays valid as the sequence clock advances (the
 * eviction index orders pages by it; see evict_index.c), its traits and its
 * own tunable keys.  Lower score = evicted first.  Protection rules (tail,
 * protect_recent, pinned) live in the host; a policy may add sink pages
 * (recency) or a recent window (h2o).
 */
#ifndef MD_POLICY_H
#define MD_POLICY_H

#include <stddef.h>
#include <stdint.h>
#include "params.h"

/* Policy ids: the ABI's (enum md_policy_id), then host-side ones that only
 * test builds have (MEMDECAY_TEST_POLICY, tests/host.cmake).  MD__POLICY_N
 * rows in the policy table. */
#ifdef MEMDECAY_TEST_POLICY
#define MD__POLICY_TEST_LIFO ((uint32_t)MD_POLICY_COUNT)
#define MD__POLICY_N ((uint32_t)MD_POLICY_COUNT + 1u)
#else
#define MD__POLICY_N ((uint32_t)MD_POLICY_COUNT)
#endif

/* The built-in policies' names, from the ABI's one list (MD_POLICY_NAMES),
 * by enum md_policy_id: a row's .name = md__policy_builtin_names[id].  An
 * array of arrays, so that an element is an address constant a static
 * initializer may use; static, so that no file of the host depends on
 * another for it.  A name too long for a row fails the build. */
#define MD__POLICY_NAME_MAX 24
static const char md__policy_builtin_names[MD_POLICY_COUNT][MD__POLICY_NAME_MAX] = {
	MD_POLICY_NAMES};

/* A page as the host keeps it.  Its hot fields (ingest touches them on every
 * attention record) fit one cache line; per-token refresh clocks live in a
 * separate array (the t_refresh argument of score). */
struct md__page {
	uint32_t gen;
	uint32_t seq;
	uint8_t state;        /* the host's (host_internal.h) */
	uint8_t flags;        /* the host's (host_internal.h) */
	uint16_t n_tokens;
	float key_hint;       /* >= its heap key: most rekeys stop here */
	uint64_t first_pos;
	uint64_t labels;
	double ewma_raw;      /* EWMA of the page's raw mass (sum over tokens) */
	double ewma_norm;     /* EWMA of mass * n_live of the sequence */
	double cum_raw;       /* cumulative raw mass (h2o) */
	double lb_static;     /* policy's time-invariant part of the lower bound */
};
_Static_assert(sizeof(struct md__page) == 64, "page is one cache line");

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
	/* factor on every lambda_r in the decaying part (turn_decay); NULL: 1 */
	double (*decay_scale)(const struct md__params *p);
	/* its own tunable keys ("<name>.<key>", struct md__param_key): params.c
	 * serves them like its own; NULL / 0: none */
	const struct md__param_key *keys;
	size_t n_keys;
	/* What the host may assume of the score; a new policy states each one
	 * (docs/policies.md "Adding a policy"). */
	unsigned step_decay : 1;      /* score >= lower bound + mean over tokens with
					 lambda_r > 0 of b_r exp(-lambda_r dt), dt in steps:
					 the decay heaps' bound (evict_index.c) holds */
	unsigned turn_decay : 1;      /* the same with dt counted in turns (turns begun
					 after the token's refresh) and lambda_r times
					 decay_scale: the decay heaps run on turn counts */
	unsigned attn_lowers : 1;     /* an attention record can lower the score (EWMA):
					 heap keys are lowered on attention */
	unsigned always_relative : 1; /* attention relative to the uniform level, whatever
					 memdecay.norm says */
	unsigned memdecay_bound : 1;  /* lower_bound is md__memdecay_lower_bound at the
					 engine's norm: the attention path evaluates it
					 inline instead of calling it */
};

/* The policy table (policy.c), indexed by policy id: the one place that
 * lists the policies. */
extern const struct md__policy *const md__policy_table[MD__POLICY_N];

/* inline: asked once per attention-tokens record (md__engine_norm).  An id
 * out of range (never stored: params and engine options are validated) falls
 * back to memdecay. */
static inline const struct md__policy *md__policy_get(uint32_t id)
{
	return md__policy_table[id < MD__POLICY_N ? id : MD_POLICY_MEMDECAY];
}

/* ---- memdecay's formulas (policy_memdecay.c), shared by memdecay,
 * memdecay-norm and memdecay-turn ---- */
double md__memdecay_score(const struct md__page *pg, const uint64_t *t_refresh,
			  const struct md__score_in *in, uint32_t norm_mode,
			  struct md__score_terms *terms);
double md__memdecay_static_bound(const struct md__page *pg, const struct md__params *p,
				 const struct md__page_id *id);

/* memdecay's lower bound: the lambda_r == 0 terms (lb_static) plus the
 * attention term, shaved by 1e-9 relative so that summation order never puts
 * it above the score.  Inline: every attention record asks it (the host's
 * fast path for the memdecay_bound trait, pagestate.c). */
#define MD__MEMDECAY_LB_SHAVE (1.0 - 1e-9)
static inline double md__memdecay_bound_at(const struct md__page *pg, double alpha,
					   uint32_t norm_mode)
{
	double a = norm_mode == MD_NORM_RELATIVE ? pg->ewma_norm : pg->ewma_raw;
	return (pg->lb_static + alpha * a) / (double)pg->n_tokens * MD__MEMDECAY_LB_SHAVE;
}

static inline double md__memdecay_lower_bound(const struct md__page *pg,
					      const struct md__score_in *in)
{
	return md__memdecay_bound_at(pg, in->p->alpha, in->norm_mode);
}

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

/* Turns begun at or before clock c (memdecay-turn: a sequence's turn starts,
 * ascending).  Inline: the host's decay heaps count ages in turns with it too
 * (turn_decay, evict_index.c). */
static inline uint32_t md__turn_at(const uint64_t *turn_clk, uint32_t turn_n, uint64_t c)
{
	uint32_t lo = 0, hi = turn_n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (turn_clk[mid] <= c)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* fixed per page pseudo-random score in [0, 1) */
double md__random_score(uint64_t seed, uint32_t engine_id, uint32_t slot, uint32_t gen);

#endif
