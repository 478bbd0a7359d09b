/*
 * policy_memdecay.c — MemDecay (region-aware decay, docs/design.md §1):
 *   page score = mean over live tokens of b_r exp(-lambda_r (t - t_refresh_i)) + alpha A / n
 * where A is the EWMA of the page's attention mass (sum over its tokens, so
 * alpha A / n is alpha times the mean a_i), updated once per attention record.
 * With norm "raw" A is the EWMA of m_i; "relative" uses m_i * n_live.
 * Lower bound: exp terms only decay, so the lambda_r == 0 terms plus the
 * attention term bound the score for every later clock; shaved by 1e-9
 * relative so that summation order can never put it above the computed score.
 */
#include <math.h>
#include "policy.h"

double md__memdecay_score(const struct md__page *pg, const uint64_t *t_refresh,
			  const struct md__score_in *in, uint32_t norm_mode,
			  struct md__score_terms *terms)
{
	const struct md__params *p = in->p;
	unsigned n = pg->n_tokens;
	double sum = 0.0;
	for (unsigned k = 0; k < n; k++) {
		unsigned r = md_label_get(pg->labels, k);
		double dt = (double)(in->clock - t_refresh[k]);
		sum += p->base[r] * exp(-p->lambda[r] * dt);
	}
	double a = norm_mode == MD_NORM_RELATIVE ? pg->ewma_norm : pg->ewma_raw;
	double decay = sum / (double)n;
	double attn = p->alpha * a / (double)n;
	if (terms) {
		terms->decay = decay;
		terms->attn = attn;
	}
	return decay + attn;
}

double md__memdecay_static_bound(const struct md__page *pg, const struct md__params *p,
				 const struct md__page_id *id)
{
	(void)id;
	double s = 0.0;
	for (unsigned k = 0; k < pg->n_tokens; k++) {
		unsigned r = md_label_get(pg->labels, k);
		if (p->lambda[r] == 0.0)
			s += p->base[r];
	}
	return s;
}

static double score(const struct md__page *pg, const uint64_t *t_refresh,
		    const struct md__score_in *in, struct md__score_terms *terms)
{
	return md__memdecay_score(pg, t_refresh, in, in->norm_mode, terms);
}

static double lower_bound(const struct md__page *pg, const struct md__score_in *in)
{
	return md__memdecay_lower_bound(pg, in);
}

const struct md__policy md__policy_memdecay = {
	.name = md__policy_builtin_names[MD_POLICY_MEMDECAY],
	.score = score,
	.static_bound = md__memdecay_static_bound,
	.lower_bound = lower_bound,
	.is_sink = NULL,
	.window_pages = NULL,
	.step_decay = 1,
	.attn_lowers = 1,
	.memdecay_bound = 1,
};
