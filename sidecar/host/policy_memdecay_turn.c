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
 * term) holds at every later clock.
 * Decay bound (turn_decay): a token's age grows by at most one per turn the
 * sequence begins, so the decaying part rolled forward at its largest rate,
 * exp(g - lambda_max s T), bounds it at every later turn count T: the host's
 * decay heaps run on the sequence's turn count instead of its clock
 * (evict_index.c), with every lambda_r times s (decay_scale).
 * Window: protection covers at least the newest memdecay-turn.recent_fraction
 * of the sequence's budget (in pages), as h2o's window does (default 0: only
 * the usual protected pages; docs/policies.md, "memdecay-turn with a window").
 */
#include <math.h>
#include "policy.h"

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
	return md__memdecay_lower_bound(pg, in);
}

static double decay_scale(const struct md__params *p)
{
	return p->turn_lambda_scale;
}

static uint32_t window_pages(const struct md__params *p, uint64_t budget_pages)
{
	double w = floor(p->turn_recent_fraction * (double)budget_pages);
	return w > (double)UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

static const struct md__param_key keys[] = {
	{.name = "memdecay-turn.lambda_scale", .kind = MD__KEY_DOUBLE,
	 .off = MD__PARAM_OFF(turn_lambda_scale), .lo = 0, .hi = 1e9, .dflt = 0.1},
	{.name = "memdecay-turn.recent_fraction", .kind = MD__KEY_DOUBLE,
	 .off = MD__PARAM_OFF(turn_recent_fraction), .lo = 0, .hi = 1, .dflt = 0},
};

const struct md__policy md__policy_memdecay_turn = {
	.name = md__policy_builtin_names[MD_POLICY_MEMDECAY_TURN],
	.score = score,
	.static_bound = md__memdecay_static_bound,
	.lower_bound = lower_bound,
	.is_sink = NULL,
	.window_pages = window_pages,
	.decay_scale = decay_scale,
	.keys = keys,
	.n_keys = sizeof(keys) / sizeof(keys[0]),
	.step_decay = 0,   /* ages count turns, not steps */
	.turn_decay = 1,
	.attn_lowers = 1,
	.memdecay_bound = 1,
};
