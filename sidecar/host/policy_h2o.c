/*
 * policy_h2o.c — Heavy-Hitter Oracle (Zhang et al., "H2O", NeurIPS 2023):
 * score = cumulative attention mass of the page (no decay); a recent window of
 * h2o.recent_fraction of the sequence's budget (in pages) is kept besides the
 * usual protected pages.  The score only grows, so it is its own lower bound.
 */
#include <math.h>
#include "policy.h"

static double mass(const struct md__page *pg)
{
	return pg->cum_raw;
}

MD__SELF_BOUNDED_POLICY(mass, 1)

static uint32_t window_pages(const struct md__params *p, uint64_t budget_pages)
{
	double w = floor(p->h2o_recent_fraction * (double)budget_pages);
	return w > (double)UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

static const struct md__param_key keys[] = {
	{.name = "h2o.recent_fraction", .kind = MD__KEY_DOUBLE,
	 .off = MD__PARAM_OFF(h2o_recent_fraction), .lo = 0, .hi = 1, .dflt = 0.5},
};

const struct md__policy md__policy_h2o = {
	.name = md__policy_builtin_names[MD_POLICY_H2O],
	.score = score,
	.static_bound = md__policy_no_static_bound,
	.lower_bound = lower_bound,
	.is_sink = NULL,
	.window_pages = window_pages,
	.keys = keys,
	.n_keys = sizeof(keys) / sizeof(keys[0]),
};
