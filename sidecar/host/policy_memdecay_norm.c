/*
 * policy_memdecay_norm.c — MemDecay with the attention term normalized to the
 * uniform level (docs/design.md §1, the paper's open item): m̂_i = m_i * n_live in
 * both the EWMA and the refresh test against tau.  Same score as memdecay;
 * its always_relative trait makes the host score it in relative mode
 * (in->norm_mode), whatever memdecay.norm says.
 */
#include "policy.h"

static double score(const struct md__page *pg, const uint64_t *t_refresh,
		    const struct md__score_in *in, struct md__score_terms *terms)
{
	return md__memdecay_score(pg, t_refresh, in, in->norm_mode, terms);
}

static double lower_bound(const struct md__page *pg, const struct md__score_in *in)
{
	return md__memdecay_lower_bound(pg, in);
}

const struct md__policy md__policy_memdecay_norm = {
	.name = md__policy_builtin_names[MD_POLICY_MEMDECAY_NORM],
	.score = score,
	.static_bound = md__memdecay_static_bound,
	.lower_bound = lower_bound,
	.is_sink = NULL,
	.window_pages = NULL,
	.step_decay = 1,
	.attn_lowers = 1,
	.memdecay_bound = 1,
	.always_relative = 1,
};
