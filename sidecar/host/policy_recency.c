/*
 * policy_recency.c — StreamingLLM-style recency (Xiao et al., "Efficient
 * Streaming Language Models with Attention Sinks", 2023): keep the sink pages
 * (any page holding one of positions 0 .. sink_tokens-1) and the newest pages;
 * evict the oldest other page.  score = first_pos.
 */
#include "host_internal.h"

static double score(const struct md__page *pg, const uint64_t *t_refresh,
		    const struct md__score_in *in, struct md__score_terms *terms)
{
	(void)t_refresh;
	(void)in;
	if (terms) {
		terms->decay = 0.0;
		terms->attn = 0.0;
	}
	return (double)pg->first_pos;
}

static double static_bound(const struct md__page *pg, const struct md__params *p)
{
	(void)pg;
	(void)p;
	return 0.0;
}

static double lower_bound(const struct md__page *pg, const struct md__score_in *in)
{
	(void)in;
	return (double)pg->first_pos;
}

static int is_sink(const struct md__page *pg, const struct md__params *p)
{
	return pg->first_pos < p->sink_tokens;
}

const struct md__policy md__policy_recency = {
	.name = "recency",
	.score = score,
	.static_bound = static_bound,
	.lower_bound = lower_bound,
	.is_sink = is_sink,
	.window_pages = NULL,
};
