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
 *
 * The host tier (ABI 1.4) goes through the same callback: an evict the engine
 * kept in its tier, a restore and a drop (apply_one), and md_settle_recall,
 * the wait for the daemon's recall decision at the end of a prefill.
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

/* Hands one command to the engine and keeps the mirror's side of what it
 * did.  A page the engine says it freed but did not report is reported here,
 * so the mirror cannot keep a page the engine dropped; a page it kept may be
 * commanded again.  The tier's transitions (docs/tier.md) are the library's
 * alone: the engine only says what happened, and the library moves the slot
 * between its live and tier lists, writes the page table and publishes the
 * PAGE_TIER event, so no adapter can get the order wrong. */
static int apply_one(struct md_client *c, md_apply_fn apply, void *ctx,
		     const struct md_evict *ev)
{
	int rc = apply(ctx, ev);
	if (rc < 0)
		return rc;
	/* The engine may have freed the slot from the callback (md_page_free):
	 * then there is nothing left to do for it. */
	const struct md_page_entry *m = &c->mirror[ev->slot];
	uint8_t was = ev->type == MD_CMD_EVICT ? MD_PAGE_LIVE : MD_PAGE_TIER;
	int same = m->state == was && m->generation == ev->gen;
	if (rc == 0) {
		if (same) {
			c->pending[ev->slot] = 0;
			/* a refused restore is an answer the daemon waits for (the
			 * page goes back to its tier); a kept evict or drop is not */
			if (ev->type == MD_CMD_RESTORE)
				md__tier_event(c, ev->slot, MD_TIER_REFUSED);
		}
		return 0;
	}
	switch (ev->type) {
	case MD_CMD_EVICT:
		if (rc == 2) {
			/* Kept in a tier the daemon did not grant: the library
			 * cannot say so (a 1.3 daemon has no word for it), so the
			 * page stays live here and the engine hears of it. */
			if (!md_client_tier_budget(c))
				return -ENOTSUP;
			if (same)
				md__page_tier_in(c, ev->slot);
			return 1;
		}
		if (same)
			(void)md_page_free(c, ev->slot, MD_FREE_EVICTED);
		return 1;
	case MD_CMD_RESTORE:
		if (same)
			md__page_restored(c, ev->slot);
		return 1;
	default:   /* MD_CMD_DROP: md_poll_commands lets no other type through */
		if (same)
			(void)md_page_free(c, ev->slot, MD_FREE_DROPPED);
		return 1;
	}
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

/* One wait: what it applies through, and which limit it waits for (a set of
 * sequences, or the engine's page budget). */
struct settle {
	struct md_client *c;
	md_apply_fn apply;
	void *ctx;
	struct md_settle_result *res;
	/* sequences */
	const uint32_t *seqs, *n_next;
	uint32_t n_seqs, slack;
	const uint8_t *skip;
	/* the engine: pages after the step, its limit */
	uint32_t n_next_pages;
	uint64_t page_limit;
	uint32_t (*over)(const struct settle *s);
};

static uint32_t seqs_over(const struct settle *s)
{
	return count_over(s->c, s->seqs, s->n_next, s->n_seqs, s->slack, s->skip);
}

static uint32_t engine_over(const struct settle *s)
{
	return (uint64_t)s->c->live_pages + s->n_next_pages > s->page_limit;
}

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

/* Waits while s->over() says something is over its limit; returns the
 * outcome, or apply's negative error. */
static int settle_loop(struct settle *s, int timeout_ms)
{
	struct md_settle_result *res = s->res;
	int rc;
	res->waited = 1;
	uint64_t t0 = md_now_ns();
	uint64_t deadline = t0 + (timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000ull : 0);
	/* Pages freed at entry are a decision too: the daemon's answer to the
	 * pages published before this call. */
	uint32_t decided = 0;
	int outcome = MD_SETTLE_OK;
	uint32_t over = s->over(s);
	while (over) {
		if (res->applied != decided) {
			/* The daemon decided and evicted what it could in one go; if
			 * nothing more comes at once, that is as low as it gets. */
			decided = res->applied;
			if (!settle_sleep(s, MD__QUIET_MS)) {
				outcome = MD_SETTLE_DETACHED;
				break;
			}
			if ((rc = settle_apply(s)) < 0)
				return rc;
			if (res->applied == decided) {
				outcome = s->over(s) ? MD_SETTLE_UNREACHABLE : MD_SETTLE_OK;
				break;
			}
		} else {
			uint64_t now = md_now_ns();
			if (now >= deadline) {
				outcome = MD_SETTLE_TIMEOUT;
				break;
			}
			uint64_t left = (deadline - now + 999999) / 1000000;
			if (!settle_sleep(s, left > MD__WAIT_SLICE_MS ? MD__WAIT_SLICE_MS : (int)left)) {
				outcome = MD_SETTLE_DETACHED;
				break;
			}
			if ((rc = settle_apply(s)) < 0)
				return rc;
		}
		over = s->over(s);
	}
	res->wait_ns = md_now_ns() - t0;
	return outcome;
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
	uint8_t skip[MD_MAX_SEQS_MAX];
	struct settle s = { .c = c, .apply = apply, .ctx = ctx, .res = res, .seqs = seqs,
			    .n_next = n_next, .n_seqs = n_seqs, .slack = slack_tokens,
			    .skip = skip, .over = seqs_over };
	int rc = settle_apply(&s);
	if (rc < 0)
		return rc;

	/* A sequence whose last wait timed out waits again only once the daemon
	 * has evicted from it since. */
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
	int outcome = settle_loop(&s, timeout_ms);
	if (outcome < 0)
		return outcome;
	if (outcome == MD_SETTLE_TIMEOUT) {
		for (uint32_t i = 0; i < n_seqs; i++) {
			uint32_t q = seqs[i];
			if (!skip[i] && seq_over(c, q, n_next ? n_next[i] : 0, slack_tokens))
				c->seq_suppress[q] = c->seq_evicted[q] + 1;
		}
	}
	res->outcome = (uint32_t)outcome;
	return 0;
}

/* The waits' common start: res (or a local one) reset to OK; -EINVAL without
 * a client or an apply callback; 0 with DETACHED when there is no daemon to
 * wait for (fail-open); 1 to go on. */
static int settle_start(md_client *c, md_apply_fn apply, struct md_settle_result **res,
			struct md_settle_result *local)
{
	if (!*res)
		*res = local;
	**res = (struct md_settle_result){ .outcome = MD_SETTLE_OK };
	if (!c || !apply)
		return -EINVAL;
	if (!c->attached) {
		(*res)->outcome = MD_SETTLE_DETACHED;
		return 0;
	}
	return 1;
}

MD__EXPORT int md_settle_engine(md_client *c, uint32_t n_next_pages, uint32_t slack_pages,
				int timeout_ms, md_apply_fn apply, void *ctx,
				struct md_settle_result *res)
{
	struct md_settle_result local;
	int rc = settle_start(c, apply, &res, &local);
	if (rc <= 0)
		return rc;
	struct md_params_view pv;
	(void)md_client_params(c, &pv);   /* a refused block: the last good copy */
	if (!pv.budget_engine_pages)
		return 0;
	struct settle s = { .c = c, .apply = apply, .ctx = ctx, .res = res,
			    .n_next_pages = n_next_pages,
			    .page_limit = pv.budget_engine_pages + slack_pages,
			    .over = engine_over };
	rc = settle_apply(&s);
	if (rc < 0)
		return rc;
	if (!engine_over(&s))
		return 0;
	int outcome = settle_loop(&s, timeout_ms);
	if (outcome < 0)
		return outcome;
	res->outcome = (uint32_t)outcome;
	return 0;
}

/* ---- the recall wait (ABI 1.4) ----
 * At the end of a turn's prefill the engine has published its estimates for
 * its tier pages; the pages the daemon restores should be back before decode
 * reads the cache.  The daemon has decided on those records once its stats
 * head has passed them and either it sleeps (it sleeps only with no work
 * left, after flushing its commands) or a quiet period has passed since then
 * and since the last command: the daemon runs its decision pass in the
 * iteration that drains the ring, or within MD__DECIDE_COALESCE_NS while
 * other records keep it busy, far inside MD__QUIET_MS.  Waiting for the sleep
 * flag alone would cost the daemon's whole nap (daemon.nap_ms, 50 ms by
 * default) on every turn that recalls nothing. */

#define MD__RECALL_SLICE_MS 1   /* short: a turn waits on this */

MD__EXPORT int md_settle_recall(md_client *c, int timeout_ms, md_apply_fn apply, void *ctx,
				struct md_settle_result *res)
{
	struct md_settle_result local;
	int rc = settle_start(c, apply, &res, &local);
	if (rc <= 0)
		return rc;
	if (c->stats_cuda)
		return -ENOTSUP;   /* the records' head is the device ring's (gpu.c) */
	struct settle s = { .c = c, .apply = apply, .ctx = ctx, .res = res };
	uint64_t target = c->a.stats.next;   /* every record published before the call */
	uint64_t t0 = md_now_ns();
	uint64_t deadline = t0 + (timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000ull : 0);
	uint64_t quiet_from = 0;
	uint32_t quiet_applied = 0;
	int at_target = 0, outcome;
	for (;;) {
		if ((rc = settle_apply(&s)) < 0)
			return rc;
		if (!c->attached) {   /* a broken command ring detaches */
			outcome = MD_SETTLE_DETACHED;
			break;
		}
		uint64_t now = md_now_ns();
		if (md_load_acquire(c->a.stats.head) >= target) {
			/* the quiet period restarts after each command applied */
			if (!at_target || res->applied != quiet_applied) {
				at_target = 1;
				quiet_from = now;
				quiet_applied = res->applied;
			}
			if (md_load_acquire(&c->a.dctrl->sleeping)) {
				/* its commands were flushed before it slept */
				if ((rc = settle_apply(&s)) < 0)
					return rc;
				outcome = c->attached ? MD_SETTLE_OK : MD_SETTLE_DETACHED;
				break;
			}
			if (now - quiet_from >= (uint64_t)MD__QUIET_MS * 1000000ull) {
				outcome = MD_SETTLE_OK;
				break;
			}
		}
		if (now >= deadline) {
			outcome = MD_SETTLE_TIMEOUT;
			break;
		}
		uint64_t left = (deadline - now + 999999) / 1000000;
		res->waited = 1;
		if (!settle_sleep(&s, left > MD__RECALL_SLICE_MS ? MD__RECALL_SLICE_MS : (int)left)) {
			outcome = MD_SETTLE_DETACHED;
			break;
		}
	}
	res->wait_ns = md_now_ns() - t0;
	res->outcome = (uint32_t)outcome;
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
