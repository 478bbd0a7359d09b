/*
 * policy_memdecay_turn.c — MemDecay with age counted in turns instead of
 * tokens (docs/policies.md, "memdecay-turn"):
 *   page score = mean over live tokens of b_r exp(-lambda_r s (T(t) - T(t_i))) + alpha A / n
 * T(c) is the number of turns of the sequence begun at or before clock c (a
 * turn begins where the appended region changes, pagestate.c), t_i the
 * token's birth or last refresh, s = memdecay-turn.lambda_scale.  A token of
 * the current turn has age 0, so a message (a scratchpad thought included)
 * starts decaying only once the next one begins.  A and the refresh rule are
 * memdecay's, in the engine's memdecay.norm.
 * Lower bound: T(t) - T(t_i) never falls while t_i stays (refreshes only raise
 * the score), so memdecay's bound (lambda_r == 0 terms plus the attention
 * term) holds at every later clock.  No decay-class heaps: their bound is in
 * clock units (evict_index.c), which turns do not follow.
 * Window: protection covers at least the newest memdecay-turn.recent_fraction
 * of the sequence's budget (in pages), as h2o's window does (default 0: only
 * the usual protected pages; docs/policies.md, "memdecay-turn with a window").
 */
#include <math.h>
#include "host_internal.h"

uint32_t md__turn_at(const uint64_t *turn_clk, uint32_t turn_n, uint64_t c)
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

static double score(const struct md__page *pg, const uint64_t *t_refresh,
		    const struct md__score_in *in, struct md__score_terms *terms)
{
	const struct md__params *p = in->p;
	unsigned n = pg->n_tokens;
	uint32_t now = md__turn_at(in->turn_clk, in->turn_n, in->clock);
	double scale = p->turn_lambda_scale, sum = 0.0;
	uint64_t last = 0;
	uint32_t age = 0;
	for (unsigned k = 0; k < n; k++) {
		if (k == 0 || t_refresh[k] != last) { /* a page's tokens mostly share t_i */
			last = t_refresh[k];
			uint32_t then = md__turn_at(in->turn_clk, in->turn_n, last);
			age = now > then ? now - then : 0;
		}
		unsigned r = md_label_get(pg->labels, k);
		sum += p->base[r] * exp(-p->lambda[r] * scale * (double)age);
	}
	double a = in->norm_mode == MD_NORM_RELATIVE ? pg->ewma_norm : pg->ewma_raw;
	double decay = sum / (double)n;
	double attn = p->alpha * a / (double)n;
	if (terms) {
		terms->decay = decay;
		terms->attn = attn;
	}
	return decay + attn;
}

static double lower_bound(const struct md__page *pg, const struct md__score_in *in)
{
	return md__memdecay_lower_bound(pg, in, in->norm_mode);
}

static uint32_t window_pages(const struct md__params *p, uint64_t budget_pages)
{
	double w = floor(p->turn_recent_fraction * (double)budget_pages);
	return w > (double)UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

const struct md__policy md__policy_memdecay_turn = {
	.name = "memdecay-turn",
	.score = score,
	.static_bound = md__memdecay_static_bound,
	.lower_bound = lower_bound,
	.is_sink = NULL,
	.window_pages = window_pages,
	.step_decay = 0,   /* ages count turns, not steps: no per-step decay bound */
	.attn_lowers = 1,
	.memdecay_bound = 1,
};
