/*
 * policy_h2o.c — Heavy-Hitter Oracle (Zhang et al., "H2O", NeurIPS 2023):
 * score = cumulative attention mass of the page (no decay); a recent window of
 * h2o.recent_fraction of the sequence's budget (in pages) is kept besides the
 * usual protected pages.  The score only grows, so it is its own lower bound.
 */
#include <math.h>
#include "host_internal.h"

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

const struct md__policy md__policy_h2o = {
	.name = "h2o",
	.score = score,
	.static_bound = md__policy_no_static_bound,
	.lower_bound = lower_bound,
	.is_sink = NULL,
	.window_pages = window_pages,
};
