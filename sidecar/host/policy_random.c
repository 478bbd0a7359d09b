/*
 * policy_random.c — uniform random eviction among evictable pages, seeded:
 * score = hash(seed, engine, slot, generation) in [0, 1), fixed for the life
 * of a page, so decisions are reproducible and the index stays exact.
 */
#include "policy.h"

static uint64_t mix64(uint64_t x)
{
	/* splitmix64 finalizer */
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

double md__random_score(uint64_t seed, uint32_t engine_id, uint32_t slot, uint32_t gen)
{
	uint64_t x = mix64(seed);
	x = mix64(x ^ engine_id);
	x = mix64(x ^ (((uint64_t)slot << 32) | gen));
	return (double)(x >> 11) * 0x1.0p-53;
}

/* The score is the page's identity hashed; the bound (fixed for the page's
 * life) is the same value, stored once in pg->lb_static. */
static double static_bound(const struct md__page *pg, const struct md__params *p,
			   const struct md__page_id *id)
{
	(void)pg;
	return md__random_score(p->random_seed, id->engine_id, id->slot, id->gen);
}

static double score(const struct md__page *pg, const uint64_t *t_refresh,
		    const struct md__score_in *in, struct md__score_terms *terms)
{
	(void)t_refresh;
	if (terms)
		terms->decay = terms->attn = 0.0;
	return md__random_score(in->p->random_seed, in->engine_id, in->slot, pg->gen);
}

static double lower_bound(const struct md__page *pg, const struct md__score_in *in)
{
	(void)in;
	return pg->lb_static;
}

static const struct md__param_key keys[] = {
	{.name = "random.seed", .kind = MD__KEY_U64, .off = MD__PARAM_OFF(random_seed),
	 .ilo = 0, .ihi = UINT64_MAX, .idflt = 1},
};

const struct md__policy md__policy_random = {
	.name = md__policy_builtin_names[MD_POLICY_RANDOM],
	.score = score,
	.static_bound = static_bound,
	.lower_bound = lower_bound,
	.is_sink = NULL,
	.window_pages = NULL,
	.keys = keys,
	.n_keys = sizeof(keys) / sizeof(keys[0]),
};
