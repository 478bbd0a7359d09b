/*
 * policy_recency.c — StreamingLLM-style recency (Xiao et al., "Efficient
 * Streaming Language Models with Attention Sinks", 2023): keep the sink pages
 * (any page holding one of positions 0 .. sink_tokens-1) and the newest pages;
 * evict the oldest other page.  score = first_pos.
 */
#include "policy.h"

static double first_pos(const struct md__page *pg)
{
	return (double)pg->first_pos;
}

MD__SELF_BOUNDED_POLICY(first_pos, 0)

static int is_sink(const struct md__page *pg, const struct md__params *p)
{
	return pg->first_pos < p->sink_tokens;
}

static const struct md__param_key keys[] = {
	{.name = "recency.sink_tokens", .kind = MD__KEY_U32, .off = MD__PARAM_OFF(sink_tokens),
	 .ilo = 0, .ihi = 1u << 30, .idflt = 4},
};

const struct md__policy md__policy_recency = {
	.name = md__policy_builtin_names[MD_POLICY_RECENCY],
	.score = score,
	.static_bound = md__policy_no_static_bound,
	.lower_bound = lower_bound,
	.is_sink = is_sink,
	.window_pages = NULL,
	.keys = keys,
	.n_keys = sizeof(keys) / sizeof(keys[0]),
};
