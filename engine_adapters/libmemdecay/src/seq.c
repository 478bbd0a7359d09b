/*
 * seq.c — what the library knows about one sequence beyond its pages: its own
 * options (policy, token budget; ABI 1.2), its pages in the daemon's order,
 * and the tokens the daemon never evicts from it (the evict floor).
 *
 * Options live in the private mirror first, like pages: while attached to a
 * 1.2 daemon every change is written to the engine segment's entry (version
 * word odd while writing) and announced with an MD_REC_SEQ_OPTS record; a
 * record that does not fit turns into a resync, which re-reads the entries.
 * Reattach copies the mirror into the new segment (md__seq_opts_seed).
 *
 * The floor counts the same pages the daemon protects: pages with a token of
 * a pinned region, and the newest seq_protect[seq] pages in first-position
 * order, the count a 1.2 daemon publishes (1 + protect_recent, or more for a
 * policy with a window such as h2o).  Without it: 1 + protect_recent.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "memdecay_clock.h"

#define MD__EXPORT __attribute__((visibility("default")))

static const struct md_seq_opts engine_opts = {
	.policy = MD_SEQ_ENGINE_U32,
	.budget_sequence_tokens = MD_SEQ_ENGINE_U64,
};

int md__seq_state_alloc(struct md_client *c)
{
	c->seq_opts = malloc((size_t)c->max_seqs * sizeof(*c->seq_opts));
	c->seq_evicted = calloc(c->max_seqs, sizeof(uint64_t));
	c->seq_suppress = calloc(c->max_seqs, sizeof(uint64_t));
	if (!c->seq_opts || !c->seq_evicted || !c->seq_suppress)
		return -ENOMEM;
	for (uint32_t q = 0; q < c->max_seqs; q++)
		c->seq_opts[q] = engine_opts;
	return 0;
}

void md__seq_state_free(struct md_client *c)
{
	free(c->seq_opts);
	free(c->seq_evicted);
	free(c->seq_suppress);
}

static int opts_default(const struct md_seq_opts *o)
{
	return o->policy == MD_SEQ_ENGINE_U32 && o->budget_sequence_tokens == MD_SEQ_ENGINE_U64;
}

/* The mirror's entry into the segment, under the entry's version word. */
static void opts_write(struct md_client *c, uint32_t seq)
{
	struct md_seq_opts *m = &c->seq_opts[seq];
	uint32_t v = m->version;
	m->version = v + 2;
	if (!c->attached || !c->a.seq_opts)
		return;
	struct md_seq_opts *e = &c->a.seq_opts[seq];
	md_store_relaxed(&e->version, v + 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	md_store_relaxed(&e->policy, m->policy);
	md_store_relaxed(&e->budget_sequence_tokens, m->budget_sequence_tokens);
	md_store_release(&e->version, v + 2);
}

/* After an attach: every sequence with options of its own goes into the new
 * segment.  Returns 1 when there was one (the daemon must resync to see it). */
int md__seq_opts_seed(struct md_client *c)
{
	int any = 0;
	if (!c->a.seq_opts)
		return 0;
	for (uint32_t q = 0; q < c->max_seqs; q++) {
		if (opts_default(&c->seq_opts[q]) && !c->seq_opts[q].version)
			continue;
		opts_write(c, q);
		any |= !opts_default(&c->seq_opts[q]);
	}
	return any;
}

/* md_seq_end: the sequence starts over with the engine's options and no
 * timeout suppression.  The daemon resets its copy on SEQ_END itself. */
void md__seq_opts_reset(struct md_client *c, uint32_t seq)
{
	c->seq_suppress[seq] = 0;
	if (opts_default(&c->seq_opts[seq]))
		return;
	c->seq_opts[seq].policy = engine_opts.policy;
	c->seq_opts[seq].budget_sequence_tokens = engine_opts.budget_sequence_tokens;
	opts_write(c, seq);
}

MD__EXPORT void md_seq_options_init(struct md_seq_options *o)
{
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->policy = MD_SEQ_ENGINE_U32;
	o->budget_sequence_tokens = -1;
}

MD__EXPORT int md_seq_set_options(md_client *c, uint32_t seq, const struct md_seq_options *o)
{
	if (!c || !o || o->size < sizeof(struct md_seq_options) || seq >= c->max_seqs ||
	    (o->policy != MD_SEQ_ENGINE_U32 && o->policy >= MD_POLICY_COUNT) ||
	    o->budget_sequence_tokens < -1)
		return -EINVAL;
	struct md_seq_opts *m = &c->seq_opts[seq];
	m->policy = o->policy;
	m->budget_sequence_tokens = o->budget_sequence_tokens < 0
				  ? MD_SEQ_ENGINE_U64 : (uint64_t)o->budget_sequence_tokens;
	opts_write(c, seq);
	if (!c->attached)
		return MD_EDETACHED;
	if (!c->a.seq_opts)
		return -ENOTSUP;
	struct md_stats_rec *r =
		md__lifecycle_rec(c, MD_REC_SEQ_OPTS, seq, UINT32_MAX, 0, c->clock[seq]);
	if (!r)
		return 0;   /* resync asked: the daemon re-reads the entry */
	r->u.seq_opts.policy = m->policy;
	r->u.seq_opts.budget_sequence_tokens = m->budget_sequence_tokens;
	md__rec_publish(c, r);
	return 0;
}

MD__EXPORT int md_seq_get_options(const md_client *c, uint32_t seq, struct md_seq_options *out)
{
	if (!c || !out || seq >= c->max_seqs)
		return -EINVAL;
	const struct md_seq_opts *m = &c->seq_opts[seq];
	md_seq_options_init(out);
	out->policy = m->policy;
	out->budget_sequence_tokens = m->budget_sequence_tokens == MD_SEQ_ENGINE_U64
				    ? -1 : (int64_t)m->budget_sequence_tokens;
	return 0;
}

MD__EXPORT uint64_t md_seq_budget_tokens(md_client *c, uint32_t seq)
{
	if (!c || seq >= c->max_seqs)
		return 0;
	uint64_t own = c->seq_opts[seq].budget_sequence_tokens;
	if (own != MD_SEQ_ENGINE_U64)
		return own;
	struct md_params_view v;
	(void)md_client_params(c, &v);   /* on failure: the last good copy */
	return v.budget_sequence_tokens;
}

/* ---- pages of a sequence ---- */

MD__EXPORT uint32_t md_seq_live_tokens(const md_client *c, uint32_t seq)
{
	if (!c || seq >= c->max_seqs)
		return 0;
	uint64_t n = c->seq_tokens[seq];
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

MD__EXPORT int md_seq_pages(const md_client *c, uint32_t seq, uint32_t *slots, uint32_t cap)
{
	if (!c || seq >= c->max_seqs || (cap && !slots))
		return -EINVAL;
	uint32_t n = 0;
	for (uint32_t s = c->seq_head[seq]; s != MD__NO_SLOT; s = c->slot_next[s]) {
		if (n < cap)
			slots[n] = s;
		n++;
	}
	return n > INT32_MAX ? INT32_MAX : (int)n;
}

/* ---- what the daemon never evicts ---- */

int md__page_pinned(const struct md_page_entry *m, uint32_t pinned_mask)
{
	for (uint32_t k = 0; k < m->n_tokens; k++)
		if (pinned_mask & (1u << md_label_get(m->labels, k)))
			return 1;
	return 0;
}

/* The newest pages of seq the daemon protects; v gets the parameters. */
static uint32_t protect_count(md_client *c, uint32_t seq, struct md_params_view *v)
{
	(void)md_client_params(c, v);   /* on failure: the last good copy */
	if (c->attached && c->a.seq_protect) {
		uint32_t k = md_load_acquire(&c->a.seq_protect[seq]);
		if (k)
			return k;   /* 0: the daemon has published none for seq yet */
	}
	return v->protect_recent == UINT32_MAX ? UINT32_MAX : 1 + v->protect_recent;
}

MD__EXPORT uint32_t md_seq_protected_pages(md_client *c, uint32_t seq)
{
	struct md_params_view v;
	if (!c || seq >= c->max_seqs)
		return 0;
	return protect_count(c, seq, &v);
}

MD__EXPORT uint64_t md_seq_floor(md_client *c, uint32_t seq)
{
	struct md_params_view v;
	if (!c || seq >= c->max_seqs)
		return 0;
	uint32_t recent = protect_count(c, seq, &v);
	uint64_t floor = 0;
	for (uint32_t s = c->seq_tail[seq]; s != MD__NO_SLOT; s = c->slot_prev[s]) {
		const struct md_page_entry *m = &c->mirror[s];
		if (recent) {
			recent--;
			floor += m->n_tokens;
		} else if (md__page_pinned(m, v.pinned_mask)) {
			floor += m->n_tokens;
		}
	}
	return floor;
}
