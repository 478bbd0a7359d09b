/*
 * engine.c — the daemon's side of the shared-memory transport, per engine:
 * copy records out of the stats ring and check their framing, hand the copies
 * to the policy host, rebuild from the page table on a resync request, push
 * decisions into the command ring, ring doorbells only for sleeping peers,
 * publish the parameter block under its seqlock, and watch heartbeats.
 *
 * Nothing read from the engine segment is trusted: ring indices are checked
 * against the daemon's own head and capacity, page entries are copied under
 * their version word and validated by the host like records.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_transport.h"
#include "daemon.h"
#include "log.h"
#include "memdecay_clock.h"

static void ring_bell(struct md__peer *e)
{
	uint64_t one = 1;
	if (write(e->bell_to_engine_fd, &one, sizeof(one)) == sizeof(one))
		e->doorbells++;
}

/* Counts a violation; returns 1 if the engine was detached for it. */
static int violation(struct md__daemon *d, struct md__peer *e, const char *what)
{
	e->violations++;
	md_store_relaxed(&e->dctrl->records_rejected, e->violations + e->torn);
	uint32_t limit = md__daemon_params(d)->violation_limit;
	if (limit && e->violations > limit) {
		char why[160];
		snprintf(why, sizeof(why), "%llu protocol violations (limit %u), last: %s",
			 (unsigned long long)e->violations, limit, what);
		md__peer_detach(d, e, MD__DETACH_VIOLATIONS, why);
		return 1;
	}
	return 0;
}

void md__peer_drop_pending(struct md__peer *e)
{
	e->pending_head = e->pending_len = 0;
}

static int pending_push(struct md__peer *e, const struct md__decision *dec, uint64_t decided_ns)
{
	if (e->pending_len == e->pending_cap) {
		size_t ncap = e->pending_cap ? e->pending_cap * 2 : 64;
		struct md__pending_cmd *np = malloc(ncap * sizeof(*np));
		if (!np)
			return -ENOMEM;
		for (size_t i = 0; i < e->pending_len; i++)
			np[i] = e->pending[(e->pending_head + i) % e->pending_cap];
		free(e->pending);
		e->pending = np;
		e->pending_cap = ncap;
		e->pending_head = 0;
	}
	struct md__pending_cmd *pc = &e->pending[(e->pending_head + e->pending_len) % e->pending_cap];
	pc->dec = *dec;
	pc->decided_ns = decided_ns;
	e->pending_len++;
	return 0;
}

/* Moves pending decisions into the command ring.  Returns how many. */
static size_t flush_commands(struct md__peer *e)
{
	size_t sent = 0;
	uint64_t now = e->pending_len ? md_now_ns() : 0;
	while (e->pending_len) {
		struct md_cmd *cmd = md_ring_reserve(&e->cmds);
		if (!cmd) {
			e->cmd_ring_full++;
			break;
		}
		const struct md__pending_cmd *pc = &e->pending[e->pending_head];
		const struct md__decision *dec = &pc->dec;
		cmd->type = (uint16_t)(dec->type ? dec->type : MD_CMD_EVICT);
		cmd->reason = (uint16_t)dec->reason;
		cmd->seq = dec->seq;
		cmd->slot = dec->slot;
		cmd->gen = dec->gen;
		cmd->resv0 = 0;
		cmd->decided_ns = pc->decided_ns; /* when it was decided, not sent */
		md_ring_publish(&e->cmds, cmd);
		md_lathist_record(&e->d->cmd_lat, now > pc->decided_ns ? now - pc->decided_ns : 0);
		e->pending_head = (e->pending_head + 1) % e->pending_cap;
		e->pending_len--;
		e->cmds_sent++;
		sent++;
	}
	if (sent) {
		md_fence_full(); /* publish the tail before reading the peer's sleep flag */
		if (md_load_relaxed(&e->ectrl->sleeping) == 1)
			ring_bell(e);
	}
	return sent;
}

/* Copies one engine-written entry consistently: a struct of 8-byte words
 * whose first 32 bits are its version word (odd while the engine writes it),
 * read until the version is even and unchanged.  Page-table entries and
 * sequence options are both such entries. */
static int copy_versioned(const void *src, void *dst, size_t size)
{
	const uint32_t *ver = src;
	const uint64_t *s64 = src;
	uint64_t *d64 = dst;
	for (int t = 0; t < MD__PAGE_READ_TRIES; t++) {
		uint32_t v0 = md_load_acquire(ver);
		if (v0 & 1)
			continue;
		for (size_t k = 0; k < size / 8; k++)
			d64[k] = md_load_relaxed(&s64[k]);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (md_load_relaxed(ver) == v0 && *(const uint32_t *)dst == v0)
			return 0;
	}
	return -EAGAIN;
}
_Static_assert(offsetof(struct md_page_entry, version) == 0 &&
	       sizeof(struct md_page_entry) % 8 == 0, "page entry: version word first");
_Static_assert(offsetof(struct md_seq_opts, version) == 0 &&
	       sizeof(struct md_seq_opts) % 8 == 0, "seq opts: version word first");

/* Feeds one snapshot of the page table to the host.  Returns how many live
 * entries the host refused because of their position (see resync()). */
static uint32_t resync_pass(struct md__daemon *d, struct md__peer *e, const uint64_t *clocks,
			    uint64_t *live_out, uint64_t *skipped_out, int log)
{
	uint32_t pos_refused = 0;
	uint64_t live = 0, skipped = 0;
	md__host_resync_begin(d->host, e->id);
	for (uint32_t s = 0; s < e->max_seqs; s++) {
		/* Every sequence, 0 included: a clock of 0 means the sequence ended
		 * (its SEQ_END record may be among the dropped ones). */
		if (md__host_resync_seq_clock(d->host, e->id, s, clocks[s]) == -MD__REJ_CLOCK) {
			/* The host keeps clocks monotonic; a table clock behind it means
			 * the sequence ended and restarted: end it, then take the clock. */
			struct md_stats_rec end;
			memset(&end, 0, sizeof(end));
			end.type = MD_REC_SEQ_END;
			end.seq = s;
			md__host_ingest(d->host, e->id, &end);
			md__host_resync_seq_clock(d->host, e->id, s, clocks[s]);
		}
	}
	md__host_resync_prune(d->host, e->id, e->resync_buf);
	for (uint32_t k = 0; k < e->resync_n; k++) {
		uint32_t slot = e->resync_order[k].slot;
		const struct md_page_entry *pe = &e->resync_buf[slot];
		int rc = md__host_resync_page(d->host, e->id, slot, pe);
		if (rc < 0) {
			skipped++;
			if (rc == -MD__REJ_POS)
				pos_refused++;
			if (log && -rc < MD__REJ_COUNT)
				e->rejected[-rc]++;
			if (log)
				md__debug("engine %u (%s): resync skipped slot %u seq %u: %s", e->id,
					  e->name, slot, pe->seq, md__reject_name(-rc));
		} else {
			live++;
		}
	}
	md__host_resync_end(d->host, e->id);
	*live_out = live;
	*skipped_out = skipped;
	return pos_refused;
}

/* ABI 1.2: every sequence's options from the engine's table, validated as
 * MD_REC_SEQ_OPTS records (a bad entry is counted and logged, not a
 * violation, as a bad page entry); an entry being written keeps the options
 * the daemon has and waits for its record or the next resync. */
static void resync_seq_opts(struct md__daemon *d, struct md__peer *e)
{
	if (!e->seq_opts)
		return;
	for (uint32_t q = 0; q < e->max_seqs; q++) {
		struct md_seq_opts so;
		if (copy_versioned(&e->seq_opts[q], &so, sizeof(so)) < 0) {
			e->seq_opts_torn++;
			continue;
		}
		int rc = md__host_resync_seq_opts(d->host, e->id, q, &so);
		if (rc < 0 && -rc < MD__REJ_COUNT) {
			e->rejected[-rc]++;
			md__debug("engine %u (%s): resync skipped options of seq %u: %s", e->id,
				  e->name, q, md__reject_name(-rc));
		}
	}
}

static int order_cmp(const void *a, const void *b)
{
	const struct md__resync_ord *x = a, *y = b;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	if (x->pos != y->pos)
		return x->pos < y->pos ? -1 : 1;
	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

static void resync(struct md__daemon *d, struct md__peer *e, uint64_t request)
{
	uint64_t t_start = md_now_ns();
	md__host_set_now(d->host, t_start);
	e->last_resync_request = request;
	e->resyncs++;
	if (d->calib)
		md__calib_live_resync(d->calib, &e->calib);
	/* Whatever the ring holds now is older than the page table we read next. */
	int64_t avail = md_ring_available(&e->stats);
	if (avail > 0)
		md_ring_skip_to(&e->stats, e->stats.next + (uint64_t)avail);
	md__peer_drop_pending(e);
	e->relabel_pending = 0; /* the table holds its labels, applied or not */
	if (!e->resync_buf) {
		e->resync_buf = calloc(e->page_capacity, sizeof(*e->resync_buf));
		e->resync_clocks = calloc(e->max_seqs, sizeof(*e->resync_clocks));
		e->resync_order = calloc(e->page_capacity, sizeof(*e->resync_order));
		if (!e->resync_buf || !e->resync_clocks || !e->resync_order) {
			md__err("engine %u (%s): out of memory for a resync", e->id, e->name);
			return;
		}
	}
	/* Snapshot first (copies, each entry under its version word), then feed. */
	for (uint32_t s = 0; s < e->max_seqs; s++)
		e->resync_clocks[s] = md_load_acquire(&e->seq_clock[s]);
	uint64_t torn = 0;
	for (uint32_t slot = 0; slot < e->page_capacity; slot++) {
		struct md_page_entry *pe = &e->resync_buf[slot];
		if (copy_versioned(&e->page_table[slot], pe, sizeof(*pe)) < 0) {
			torn++;
			pe->state = MD_PAGE_FREE; /* being written: the next resync gets it */
		}
	}
	/* The host inserts each page into its sequence's position order; fed in
	 * slot order, a table laid out in descending positions made every insert
	 * a memmove of the whole order (quadratic).  Fed sorted by (sequence,
	 * position), each insert is an append: O(n log n) in all (docs/reliability.md). */
	e->resync_n = 0;
	for (uint32_t slot = 0; slot < e->page_capacity; slot++) {
		const struct md_page_entry *pe = &e->resync_buf[slot];
		if (pe->state != MD_PAGE_LIVE)
			continue;
		struct md__resync_ord *o = &e->resync_order[e->resync_n++];
		o->seq = pe->seq;
		o->slot = slot;
		o->pos = pe->first_pos;
	}
	qsort(e->resync_order, e->resync_n, sizeof(*e->resync_order), order_cmp);
	uint64_t live, skipped;
	/* A reused slot can overlap a page the host has not dropped yet (it drops
	 * unseen pages at resync_end); a second pass over the same snapshot then
	 * opens it. */
	resync_pass(d, e, e->resync_clocks, &live, &skipped, 0);
	if (skipped)
		resync_pass(d, e, e->resync_clocks, &live, &skipped, 1);
	/* after the passes: a sequence the table shows ended and restarted was
	 * reset to the engine's options there */
	resync_seq_opts(d, e);
	skipped += torn;
	e->resync_pages += live;
	e->resync_pages_skipped += skipped;
	e->violation_grace = e->stats_capacity;
	d->dirty = 1;
	/* Rate limit: the next resync waits MD__RESYNC_GAP_FACTOR times this
	 * one's duration (at most MD__RESYNC_GAP_MAX_NS), so an engine asking
	 * for one every iteration gets at most ~1/(1+factor) of the daemon. */
	uint64_t t_end = md_now_ns(), took = t_end - t_start;
	e->resync_last_ns = took;
	e->resync_ns_total += took;
	uint64_t gap = took * MD__RESYNC_GAP_FACTOR;
	e->resync_not_before_ns = t_end + (gap < MD__RESYNC_GAP_MAX_NS ? gap : MD__RESYNC_GAP_MAX_NS);
	md__debug("engine %u (%s): resync #%llu from the page table: %llu live pages, %llu skipped",
		  e->id, e->name, (unsigned long long)e->resyncs, (unsigned long long)live,
		  (unsigned long long)skipped);
}

/* After a resync, records already in flight may describe changes the page
 * table showed (a reopened slot, a step that does not advance, a free of a
 * page already gone): those rejections are forgiven for a while.  A record no
 * correct engine ever writes (unknown type, slot past capacity, bad mass,
 * unknown region) is a violation even then, or an engine could buy unlimited
 * forgiveness by bumping resync_request. */
static int race_possible(int reason)
{
	return reason != MD__REJ_TYPE && reason != MD__REJ_SLOT && reason != MD__REJ_MASS &&
	       reason != MD__REJ_REGION && reason != MD__REJ_OPTIONS;
}

static int ingest_result(struct md__daemon *d, struct md__peer *e,
			 const struct md_stats_rec *rec, int rc, uint16_t refreshed);

/* A record whose stamp does not match the index it was taken at, on either
 * ring: counted, a violation.  0, or -1 if the engine was detached. */
static int peer_torn(struct md__daemon *d, struct md__peer *e, uint64_t index)
{
	e->torn++;
	md__debug("engine %u (%s): torn record at index %llu", e->id, e->name,
		  (unsigned long long)index);
	return violation(d, e, "torn record") ? -1 : 0;
}


/* Hands n copied records to the host at once, then settles each in order.
 * Returns 0, or -1 if the engine was detached (e is gone: stop at once). */
__attribute__((noinline)) static int ingest_chunk(struct md__daemon *d, struct md__peer *e,
			struct md_stats_rec *recs, size_t n, int *rcs)
{
	/* recs not const: GCC warns "maybe uninitialized" for a const pointer to
	 * the caller's partly filled array */
	if (!n)
		return 0;
	uint16_t refreshed[MD__HOST_CHUNK];
	md__host_ingest_batch(d->host, e->id, recs, n, rcs, refreshed);
	enum { CALIB_AHEAD = 8 };
	struct md__calib_tracker *ct = e->calib.tracker;
	for (size_t i = 0; ct && i < CALIB_AHEAD && i < n; i++)
		md__calib_prefetch(ct, recs[i].slot);
	for (size_t i = 0; i < n; i++) {
		if (ct && i + CALIB_AHEAD < n)
			md__calib_prefetch(ct, recs[i + CALIB_AHEAD].slot);
		e->records++;
		if (ingest_result(d, e, &recs[i], rcs[i], refreshed[i]) < 0)
			return -1;
	}
	return 0;
}

/* Applies e->relabel_rec in pieces until done or the batch's time budget
 * (from t0) is spent.  Returns 1 if it is still pending, 0 if done, -1 if the
 * engine was detached. */
static int relabel_continue(struct md__daemon *d, struct md__peer *e, uint64_t t0)
{
	for (;;) {
		int rc = md__host_relabel_step(d->host, e->id, &e->relabel_rec, &e->relabel_cursor,
					       MD__RELABEL_PIECE, &e->relabel_touched);
		if (rc != 1) {
			e->relabel_pending = 0;
			e->records++;
			return ingest_result(d, e, &e->relabel_rec, rc, 0) < 0 ? -1 : 0;
		}
		if (md_now_ns() - t0 >= MD__INGEST_BUDGET_NS) {
			e->relabel_pending = 1;
			return 1;
		}
	}
}

/* Ingests up to one batch.  Returns records consumed (1 while a RELABEL is
 * still being applied), or -1 if detached. */
static int64_t ingest(struct md__daemon *d, struct md__peer *e)
{
	uint64_t t0 = md_now_ns();
	md__host_set_now(d->host, t0);
	if (e->relabel_pending) {
		/* the engine's later records wait for the rest of this one */
		int rc = relabel_continue(d, e, t0);
		if (rc < 0)
			return -1;
		if (rc) {
			e->ingest_budget_cut++;
			return 1;
		}
	}
	int64_t avail = md_ring_available(&e->stats);
	if (avail < 0) {
		e->bad_tail++;
		uint64_t held;
		if (md__ratelimit_ok(&e->warn_rl, md_now_ns(), &held))
			md__warn("engine %u (%s): stats ring tail is invalid (head %llu, capacity %u); "
				 "%llu such lines suppressed before this one (%llu bad tails in all)",
				 e->id, e->name, (unsigned long long)e->stats.next, e->stats_capacity,
				 (unsigned long long)held, (unsigned long long)e->bad_tail);
		return violation(d, e, "stats ring tail") ? -1 : 0;
	}
	if (avail > MD__INGEST_BATCH)
		avail = MD__INGEST_BATCH;
	/* Copies go to the host in chunks: md__host_ingest_batch prefetches the
	 * page state a dozen records ahead, which hides most of the cache miss
	 * per attention record (docs/performance.md, "Where the time goes"). */
	struct md_stats_rec recs[MD__HOST_CHUNK];
	int rcs[MD__HOST_CHUNK];
	size_t nrec = 0;
	/* Bounded in time, not only in count: a valid record can cost far more
	 * than another (a RELABEL over a long sequence re-indexes every page it
	 * spans), so the batch also ends once MD__INGEST_BUDGET_NS are spent, and
	 * a RELABEL is applied in pieces of MD__RELABEL_PIECE pages with the
	 * clock read between them (continued next iteration if need be).  What
	 * is left stays in the ring for the next iteration. */
	int64_t i;
	for (i = 0; i < avail; i++) {
		if (md_ring_copy_next(&e->stats, &recs[nrec]) != MD_RING_OK) {
			/* the good records before it first, so side effects keep ring order */
			if (ingest_chunk(d, e, recs, nrec, rcs) < 0)
				return -1;
			nrec = 0;
			if (peer_torn(d, e, e->stats.next - 1) < 0)
				return -1;
			continue;
		}
		if (recs[nrec].type == MD_REC_RELABEL) {
			/* the records before it first, so side effects keep ring order */
			if (ingest_chunk(d, e, recs, nrec, rcs) < 0)
				return -1;
			e->relabel_rec = recs[nrec];
			nrec = 0;
			e->relabel_cursor = e->relabel_rec.u.relabel.pos0;
			e->relabel_touched = 0;
			int rc = relabel_continue(d, e, t0);
			if (rc < 0)
				return -1;
			if (rc) {
				i++;
				e->ingest_budget_cut++;
				break;
			}
			if (md_now_ns() - t0 >= MD__INGEST_BUDGET_NS) {
				i++;
				if (i < avail)
					e->ingest_budget_cut++;
				break;
			}
			continue;
		}
		if (++nrec == MD__HOST_CHUNK) {
			if (ingest_chunk(d, e, recs, nrec, rcs) < 0)
				return -1;
			nrec = 0;
			if (md_now_ns() - t0 >= MD__INGEST_BUDGET_NS) {
				i++;
				if (i < avail)
					e->ingest_budget_cut++;
				break;
			}
		}
	}
	if (ingest_chunk(d, e, recs, nrec, rcs) < 0)
		return -1;
	if (i)
		md_ring_release(&e->stats);
	return i ? i : e->relabel_pending;
}

int md__peer_ingest_rec(struct md__daemon *d, struct md__peer *e,
			const struct md_stats_rec *rec)
{
	e->records++;
	uint16_t refreshed;
	int rc = md__host_ingest_refreshed(d->host, e->id, rec, &refreshed);
	return ingest_result(d, e, rec, rc, refreshed);
}

/* What follows the host's verdict on one record: counting, violations, the
 * decision trigger, calibration (which gets the tokens the host refreshed).
 * Returns 0, or -1 if the engine was detached. */
static int ingest_result(struct md__daemon *d, struct md__peer *e,
			 const struct md_stats_rec *rec, int rc, uint16_t refreshed)
{
	if (rc < 0) {
		int reason = -rc < MD__REJ_COUNT ? -rc : 0;
		e->rejected[reason]++;
		md__debug("engine %u (%s): record type %u seq %u slot %u gen %u rejected: %s",
			  e->id, e->name, rec->type, rec->seq, rec->slot, rec->gen,
			  md__reject_name(reason));
		if (e->violation_grace && race_possible(reason)) {
			e->violation_grace--;
		} else if (violation(d, e, md__reject_name(reason))) {
			return -1;
		}
		return 0;
	}
	if (e->violation_grace)
		e->violation_grace--;
	/* Attention changes which page a decision picks, never whether a budget
	 * is exceeded: only the other records (and resyncs, parameter changes,
	 * the tick) make a decision pass worth running.  A pass costs a scan of
	 * every sequence of every engine, so running it after attention-only
	 * batches was the daemon's largest cost (docs/performance.md).  An
	 * estimate for a tier page (ABI 1.4) may call for a restore: it counts
	 * as a lifecycle record here (docs/tier.md). */
	if ((rec->type != MD_REC_ATTN_PAGE && rec->type != MD_REC_ATTN_TOKENS) ||
	    (rec->flags & MD_REC_F_ESTIMATE))
		d->dirty = 1;
	if (d->calib)
		md__calib_live_observe(d->calib, &e->calib, rec, refreshed);
	return 0;
}

static void decide(struct md__daemon *d)
{
	struct md__decision out[MD__DECIDE_BATCH];
	size_t n;
	do {
		uint64_t t0 = md_now_ns();
		n = md__host_decide(d->host, out, MD__DECIDE_BATCH);
		uint64_t decided = t0;
		if (n) {
			decided = md_now_ns();
			md_lathist_record(&d->decide_lat, decided - t0);
		}
		struct md__peer *e = NULL;
		for (size_t i = 0; i < n; i++) {
			if (!e || e->id != out[i].engine_id)
				e = md__peer_find(d, out[i].engine_id);
			if (!e)
				continue;
			if (pending_push(e, &out[i], decided) < 0)
				md__err("engine %u (%s): out of memory queueing a command for slot %u",
					e->id, e->name, out[i].slot);
		}
	} while (n == MD__DECIDE_BATCH);
}

/* seq_protect[seq] = k: the count the host applies (docs/abi.md) */
static void publish_protect(void *ctx, uint32_t seq, uint32_t k)
{
	struct md__peer *e = ctx;
	if (seq < e->max_seqs) {
		md_store_relaxed(&e->seq_protect[seq], k);
		e->seq_protect_writes++;
	}
}

/* After a decision pass: the protection counts that moved, into each
 * engine's daemon segment (the host hands out only those). */
static void publish_protect_all(struct md__daemon *d)
{
	for (struct md__peer *e = d->engines; e; e = e->next)
		if (e->seq_protect)
			md__host_protect_changes(d->host, e->id, publish_protect, e);
}

/* The CUDA stats ring (HELLO stats_transport=cuda): what cuda_transport.c
 * drained goes through the host ring's rules, the stamp first, then the
 * record's meaning.  Returns records ingested, or -1 if the engine was
 * detached (open or drain failed, or its records got it detached). */
static int cuda_service(struct md__daemon *d, struct md__peer *e)
{
	char err[256];
	uint64_t first = 0;
	int reason = MD__DETACH_ERROR;
	int n = md__cuda_transport_drain(e, &first, &reason, err, sizeof(err));
	if (n < 0) {
		md__peer_detach(d, e, reason, err);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		int rc = md_ring_stamp_ok(&e->cuda_buf[i], first + (uint64_t)i)
				 ? md__peer_ingest_rec(d, e, &e->cuda_buf[i])
				 : peer_torn(d, e, first + (uint64_t)i);
		if (rc < 0)
			return -1;
	}
	return n;
}

/* An engine's share of budget.global_pages follows what every engine holds
 * (an attach, a detach, pages opened or freed anywhere): after a decision
 * pass, republish each parameter block whose page budget moved. */
static void publish_moved_budgets(struct md__daemon *d)
{
	if (!md__daemon_params(d)->budget_global_pages)
		return;
	for (struct md__peer *e = d->engines; e; e = e->next) {
		struct md_param_block view;
		memset(&view, 0, sizeof(view));
		if (md__host_engine_param_view(d->host, e->id, &view) < 0)
			continue;
		if (view.budget_engine_pages != md_load_relaxed(&e->params->budget_engine_pages))
			md__peer_publish_params(d, e);
	}
}

int md__peers_service(struct md__daemon *d)
{
	int work = 0;
	struct md__peer *e = d->engines, *next;
	for (; e; e = next) {
		next = e->next;
		uint64_t req = md_load_acquire(&e->ectrl->resync_request);
		if (req != e->last_resync_request) {
			if (md_now_ns() < e->resync_not_before_ns) {
				/* rate-limited: what the ring holds is older than the
				 * table the resync will read, so it waits too */
				e->resyncs_deferred++;
				continue;
			}
			resync(d, e, req);
			work = 1;
		}
		int64_t n = ingest(d, e);
		if (n < 0)
			continue; /* detached */
		if (e->stats_transport == MD__STATS_CUDA) {
			int nc = cuda_service(d, e);
			if (nc < 0)
				continue; /* detached */
			n += nc;
		}
		if (n > 0)
			work = 1; /* d->dirty: set by md__peer_ingest_rec when it matters */
	}
	/* While records keep arriving, run the decision pass at most every
	 * MD__DECIDE_COALESCE_NS (each pass scans every sequence of every
	 * engine); once the rings are drained, run it at once. */
	if (d->dirty) {
		uint64_t now = md_now_ns();
		if (!work || now - d->last_decide_ns >= MD__DECIDE_COALESCE_NS) {
			d->dirty = 0;
			d->last_decide_ns = now;
			decide(d);
			publish_protect_all(d);
			publish_moved_budgets(d);
		}
	}
	for (e = d->engines; e; e = e->next)
		if (e->pending_len && flush_commands(e))
			work = 1;
	md__calib_live_flush(d->calib, 0);
	return work;
}

int md__peers_any_work(struct md__daemon *d)
{
	for (struct md__peer *e = d->engines; e; e = e->next) {
		if (md_load_acquire(&e->ectrl->resync_request) != e->last_resync_request) {
			if (md_now_ns() < e->resync_not_before_ns)
				continue; /* deferred: the tick retries it */
			return 1;
		}
		if (e->relabel_pending || md_ring_available(&e->stats) > 0)
			return 1;
	}
	return d->dirty;
}

void md__peers_set_sleeping(struct md__daemon *d, uint32_t v)
{
	for (struct md__peer *e = d->engines; e; e = e->next)
		md_store_relaxed(&e->dctrl->sleeping, v);
	md_fence_full();
}

void md__peers_tick(struct md__daemon *d, uint64_t now)
{
	struct md__peer *e = d->engines, *next;
	uint64_t timeout_ns = (uint64_t)md__daemon_params(d)->heartbeat_timeout_ms * 1000000ull;
	md__calib_live_flush(d->calib, 1);
	for (; e; e = next) {
		next = e->next;
		md_store_relaxed(&e->dctrl->heartbeat_ns, now);
		if (!timeout_ns)
			continue;
		uint64_t hb = md_load_relaxed(&e->ectrl->heartbeat_ns);
		if (hb < e->attach_ns)
			hb = e->attach_ns; /* not polled yet: count from attach */
		if (md_load_relaxed(&e->ectrl->sleeping) == 0 && now > hb && now - hb > timeout_ns) {
			char why[128];
			snprintf(why, sizeof(why), "no heartbeat for %llu ms (timeout %u ms)",
				 (unsigned long long)((now - hb) / 1000000ull),
				 md__daemon_params(d)->heartbeat_timeout_ms);
			md__peer_detach(d, e, MD__DETACH_HEARTBEAT, why);
		}
	}
}

void md__peer_publish_params(struct md__daemon *d, struct md__peer *e)
{
	struct md_param_block view;
	memset(&view, 0, sizeof(view));
	if (md__host_engine_param_view(d->host, e->id, &view) < 0)
		return;
	md_seqlock_write_begin(&e->params->seq);
	const uint64_t *s = (const uint64_t *)&view;
	uint64_t *dst = (uint64_t *)e->params;
	for (size_t k = 1; k < sizeof(view) / 8; k++) /* word 0 is seq */
		md_store_relaxed(&dst[k], s[k]);
	md_seqlock_write_end(&e->params->seq);
}

void md__peers_publish_params(struct md__daemon *d)
{
	for (struct md__peer *e = d->engines; e; e = e->next)
		md__peer_publish_params(d, e);
}
