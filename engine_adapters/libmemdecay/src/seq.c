/*
 * seq.c — what the library knows about one sequence beyond its pages: its own
 * options (policy, token budget; ABI 1.2; session state and tag, 1.3), its
 * pages in the daemon's order (resident ones, and those in the host tier,
 * ABI 1.4), and the tokens the daemon never evicts from it (the evict
 * floor).
 *
 * Options live in the private mirror first, like pages: while attached to a
 * 1.2 daemon every change is written to the engine segment's entry (version
 * word odd while writing) and announced with an MD_REC_SEQ_OPTS record; a
 * record that does not fit turns into a resync, which re-reads the entries.
 * Reattach copies the mirror into the new segment (md__seq_opts_seed).  The
 * session state and tag go out only to a 1.3 daemon: for a 1.2 one those
 * words are reserved, and the library leaves them zero (what 1.2 asks, and
 * what it ignores), so a 1.3 engine runs there as a 1.2 one.
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
	static const uint8_t none[MD_SEQ_SESSION_LEN];
	return o->policy == MD_SEQ_ENGINE_U32 && o->budget_sequence_tokens == MD_SEQ_ENGINE_U64 &&
	       o->state == MD_SEQ_RUNNING && !memcmp(o->session, none, sizeof(none));
}

/* 1: the attached daemon takes a session state and tag (ABI 1.3) */
static int daemon_has_session(const struct md_client *c)
{
	return c->attached && c->a.seq_opts && c->a.g.abi_minor >= 3;
}

/* The tag as one word: its bytes in memory order, so one relaxed store
 * writes them (the entry is read under its version word anyway). */
static uint64_t tag_word(const uint8_t tag[MD_SEQ_SESSION_LEN])
{
	uint64_t w;
	memcpy(&w, tag, sizeof(w));
	return w;
}
_Static_assert(MD_SEQ_SESSION_LEN == sizeof(uint64_t), "a session tag is one word");

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
	if (daemon_has_session(c)) {
		md_store_relaxed(&e->state, m->state);
		md_store_relaxed((uint64_t *)(void *)e->session, tag_word(m->session));
	}
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
	struct md_seq_opts *m = &c->seq_opts[seq];
	m->policy = engine_opts.policy;
	m->budget_sequence_tokens = engine_opts.budget_sequence_tokens;
	m->state = MD_SEQ_RUNNING;
	memset(m->session, 0, sizeof(m->session));
	opts_write(c, seq);
}

MD__EXPORT void md_seq_options_init(struct md_seq_options *o)
{
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->policy = MD_SEQ_ENGINE_U32;
	o->budget_sequence_tokens = -1;
	o->state = MD_SEQ_RUNNING;
}

MD__EXPORT void md_seq_session_tag(const char *id, size_t len, char tag[MD_SEQ_SESSION_LEN])
{
	memset(tag, 0, MD_SEQ_SESSION_LEN);
	for (size_t i = 0; id && i < len && i < MD_SEQ_SESSION_LEN; i++) {
		unsigned char b = (unsigned char)id[i];
		tag[i] = b >= 0x21 && b <= 0x7e ? (char)b : '?';
	}
}

MD__EXPORT int md_seq_set_options(md_client *c, uint32_t seq, const struct md_seq_options *o)
{
	if (!c || !o || o->size < sizeof(struct md_seq_options) || seq >= c->max_seqs ||
	    (o->policy != MD_SEQ_ENGINE_U32 && o->policy >= MD_POLICY_COUNT) ||
	    o->budget_sequence_tokens < -1 || o->state >= MD_SEQ_STATE_COUNT ||
	    !md_seq_session_ok((const uint8_t *)o->session))
		return -EINVAL;
	struct md_seq_opts *m = &c->seq_opts[seq];
	m->policy = o->policy;
	m->budget_sequence_tokens = o->budget_sequence_tokens < 0
				  ? MD_SEQ_ENGINE_U64 : (uint64_t)o->budget_sequence_tokens;
	m->state = o->state;
	memcpy(m->session, o->session, sizeof(m->session));
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
	if (daemon_has_session(c)) { /* a 1.2 daemon's reserved words stay zero */
		r->u.seq_opts.state = m->state;
		memcpy(r->u.seq_opts.session, m->session, sizeof(r->u.seq_opts.session));
	}
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
	out->state = m->state;
	memcpy(out->session, m->session, sizeof(out->session));
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

/* A sequence's pages in the host tier (1.4), in the same order. */
MD__EXPORT int md_seq_tier_pages(const md_client *c, uint32_t seq, uint32_t *slots, uint32_t cap)
{
	if (!c || seq >= c->max_seqs || (cap && !slots))
		return -EINVAL;
	uint32_t n = 0;
	for (uint32_t s = c->tier_head[seq]; s != MD__NO_SLOT; s = c->slot_next[s]) {
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
