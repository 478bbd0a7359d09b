/*
 * contract.c — the engine's side of the contract that every adapter used to
 * keep on its own (docs/adapters.md): applying the daemon's commands through
 * an engine callback, the bounded wait for the daemon's decision when a
 * sequence is over its budget (md_settle), and staying attached across daemon
 * restarts (md_client_maintain).
 *
 * md_settle never blocks the engine for long and never waits for what cannot
 * come: the daemon decides once per step and evicts down to its watermark in
 * one go, so "it evicted, and nothing more came within a short quiet period"
 * means the sequence is as low as the daemon will bring it (unreachable:
 * pinned and protected pages, pages the engine kept).  A wait that timed out
 * is not repeated for that sequence until the daemon evicts from it again,
 * so a daemon that cannot help costs one timeout, not one per step.
 */
#include <errno.h>

#include "client_internal.h"
#include "memdecay_clock.h"

#define MD__EXPORT __attribute__((visibility("default")))
#define MD__QUIET_MS 5          /* "nothing more came" after a decision */
#define MD__WAIT_SLICE_MS 10    /* liveness is checked between slices */
#define MD__RETRY_DEFAULT_MS 1000u
#define MD__RETRY_MAX_NS 2000000000ull

/* ---- commands ---- */

/* Hands one command to the engine.  A page the engine says it freed but did
 * not report is reported here, so the mirror cannot keep a page the engine
 * dropped; a page it kept may be commanded again. */
static int apply_one(struct md_client *c, md_apply_fn apply, void *ctx,
		     const struct md_evict *ev)
{
	int rc = apply(ctx, ev);
	if (rc < 0)
		return rc;
	const struct md_page_entry *m = &c->mirror[ev->slot];
	int same = m->state == MD_PAGE_LIVE && m->generation == ev->gen;
	if (rc == 0) {
		if (same)
			c->pending[ev->slot] = 0;
		return 0;
	}
	if (same)
		(void)md_page_free(c, ev->slot, MD_FREE_EVICTED);
	return 1;
}

MD__EXPORT int md_apply_commands(md_client *c, md_apply_fn apply, void *ctx)
{
	struct md_evict ev;
	int applied = 0;
	if (!c || !apply)
		return -EINVAL;
	/* One command per poll: when apply fails, the commands after it are
	 * still in the ring for the next call.  Commands are rare (evictions),
	 * so the extra polls cost nothing that matters. */
	while (md_poll_commands(c, &ev, 1) == 1) {
		int rc = apply_one(c, apply, ctx, &ev);
		if (rc < 0) {
			c->pending[ev.slot] = 0;   /* not applied: it may come again */
			return rc;
		}
		applied += rc;
	}
	return applied;   /* detached or a bad ring: nothing more to apply */
}

/* ---- the over-budget wait ---- */

/* Whether seq must shed tokens before n_next more: over max(budget, floor) +
 * slack.  The floor walk is paid only when the budget alone is exceeded. */
static int seq_over(struct md_client *c, uint32_t seq, uint32_t n_next, uint32_t slack)
{
	uint64_t budget = md_seq_budget_tokens(c, seq);
	if (!budget)
		return 0;
	uint64_t want = c->seq_tokens[seq] + n_next;
	if (want <= budget + slack)
		return 0;
	uint64_t floor = md_seq_floor(c, seq);
	return want > (floor > budget ? floor : budget) + slack;
}

/* Sequences still over their limit, suppressed ones left out. */
static uint32_t count_over(struct md_client *c, const uint32_t *seqs, const uint32_t *n_next,
			   uint32_t n_seqs, uint32_t slack, const uint8_t *skip)
{
	uint32_t over = 0;
	for (uint32_t i = 0; i < n_seqs; i++)
		if (!skip[i] && seq_over(c, seqs[i], n_next ? n_next[i] : 0, slack))
			over++;
	return over;
}

struct settle {
	struct md_client *c;
	md_apply_fn apply;
	void *ctx;
	struct md_settle_result *res;
};

/* Applies what is pending; returns the pages freed or apply's error. */
static int settle_apply(struct settle *s)
{
	int n = md_apply_commands(s->c, s->apply, s->ctx);
	if (n > 0)
		s->res->applied += (uint32_t)n;
	return n;
}

/* One slice of waiting for commands, then the liveness check. */
static int settle_sleep(struct settle *s, int ms)
{
	(void)md_wait_commands(s->c, ms);
	return md_client_check(s->c, s->c->hb_timeout_ms);
}

MD__EXPORT int md_settle(md_client *c, const uint32_t *seqs, const uint32_t *n_next,
			 uint32_t n_seqs, uint32_t slack_tokens, int timeout_ms,
			 md_apply_fn apply, void *ctx, struct md_settle_result *res)
{
	struct md_settle_result local;
	if (!res)
		res = &local;
	*res = (struct md_settle_result){ .outcome = MD_SETTLE_OK };
	if (!c || !apply || (n_seqs && !seqs) || n_seqs > c->max_seqs)
		return -EINVAL;
	for (uint32_t i = 0; i < n_seqs; i++)
		if (seqs[i] >= c->max_seqs)
			return -EINVAL;
	if (!c->attached) {
		res->outcome = MD_SETTLE_DETACHED;
		return 0;
	}
	struct settle s = { c, apply, ctx, res };
	int rc = settle_apply(&s);
	if (rc < 0)
		return rc;

	/* A sequence whose last wait timed out waits again only once the daemon
	 * has evicted from it since. */
	uint8_t skip[MD_MAX_SEQS_MAX];
	uint32_t over = 0, suppressed = 0;
	for (uint32_t i = 0; i < n_seqs; i++) {
		uint32_t q = seqs[i];
		skip[i] = 0;
		if (!seq_over(c, q, n_next ? n_next[i] : 0, slack_tokens))
			continue;
		if (c->seq_suppress[q] && c->seq_suppress[q] == c->seq_evicted[q] + 1) {
			skip[i] = 1;
			suppressed++;
			continue;
		}
		c->seq_suppress[q] = 0;
		over++;
	}
	if (!over) {
		res->outcome = suppressed ? MD_SETTLE_SUPPRESSED : MD_SETTLE_OK;
		return 0;
	}

	res->waited = 1;
	uint64_t t0 = md_now_ns();
	uint64_t deadline = t0 + (timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000ull : 0);
	/* Pages freed at entry are a decision too: the daemon's answer to the
	 * pages published before this call. */
	uint32_t decided = 0;
	uint32_t outcome = MD_SETTLE_OK;
	while (over) {
		if (res->applied != decided) {
			/* The daemon decided and evicted what it could in one go; if
			 * nothing more comes at once, that is as low as it gets. */
			decided = res->applied;
			if (!settle_sleep(&s, MD__QUIET_MS)) {
				outcome = MD_SETTLE_DETACHED;
				break;
			}
			if ((rc = settle_apply(&s)) < 0)
				return rc;
			if (res->applied == decided) {
				over = count_over(c, seqs, n_next, n_seqs, slack_tokens, skip);
				outcome = over ? MD_SETTLE_UNREACHABLE : MD_SETTLE_OK;
				break;
			}
		} else {
			uint64_t now = md_now_ns();
			if (now >= deadline) {
				outcome = MD_SETTLE_TIMEOUT;
				break;
			}
			uint64_t left = (deadline - now + 999999) / 1000000;
			if (!settle_sleep(&s, left > MD__WAIT_SLICE_MS ? MD__WAIT_SLICE_MS : (int)left)) {
				outcome = MD_SETTLE_DETACHED;
				break;
			}
			if ((rc = settle_apply(&s)) < 0)
				return rc;
		}
		over = count_over(c, seqs, n_next, n_seqs, slack_tokens, skip);
	}
	if (outcome == MD_SETTLE_TIMEOUT) {
		for (uint32_t i = 0; i < n_seqs; i++) {
			uint32_t q = seqs[i];
			if (!skip[i] && seq_over(c, q, n_next ? n_next[i] : 0, slack_tokens))
				c->seq_suppress[q] = c->seq_evicted[q] + 1;
		}
	}
	res->outcome = outcome;
	res->wait_ns = md_now_ns() - t0;
	return 0;
}

/* ---- staying attached ---- */

static uint64_t retry_base_ns(uint32_t retry_ms)
{
	return (uint64_t)(retry_ms ? retry_ms : MD__RETRY_DEFAULT_MS) * 1000000ull;
}

MD__EXPORT int md_client_maintain(md_client *c, uint32_t heartbeat_timeout_ms, uint32_t retry_ms)
{
	if (!c)
		return 0;
	c->hb_timeout_ms = heartbeat_timeout_ms;
	uint64_t base = retry_base_ns(retry_ms);
	c->retry_base_ns = base;
	if (c->attached)   /* a loss arms the first try one period later */
		return md_client_check(c, heartbeat_timeout_ms);
	uint64_t now = md_now_ns();
	if (now < c->next_retry_ns)
		return 0;
	/* md_client_reattach republishes every live page and every
	 * sequence's options (seed_segment, md__seq_opts_seed). */
	if (md_client_reattach(c) == 0)
		return 1;
	/* Backoff: doubling from retry_ms up to 2 s (or retry_ms if longer). */
	uint64_t cap = base > MD__RETRY_MAX_NS ? base : MD__RETRY_MAX_NS;
	c->retry_ns = c->retry_ns ? c->retry_ns * 2 : base;
	if (c->retry_ns > cap)
		c->retry_ns = cap;
	c->next_retry_ns = now + c->retry_ns;
	return 0;
}
