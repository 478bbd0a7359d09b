/*
 * policy_random.c — uniform random eviction among evictable pages, seeded:
 * score = hash(seed, engine, slot, generation) in [0, 1), fixed for the life
 * of a page, so decisions are reproducible and the index stays exact.
 */
#include "host_internal.h"

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

/* the slot is not in the page; the host stores the score in lb_static */
static double stored(const struct md__page *pg)
{
	return pg->lb_static;
}

MD__SELF_BOUNDED_POLICY(stored, 0)

const struct md__policy md__policy_random = {
	.name = "random",
	.score = score,
	.static_bound = md__policy_no_static_bound,
	.lower_bound = lower_bound,
	.is_sink = NULL,
	.window_pages = NULL,
};
