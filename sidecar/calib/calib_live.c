/*
 * calib_live.c — calibration while memdecayd runs (calib_live.h): the
 * trackers, the per-region statistics and the optional journal.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib_live.h"
#include "log.h"

#define JOURNAL_FLUSH_BYTES (64u << 10)
#define JOURNAL_FLUSH_BUDGET (256u << 10)

int md__calib_live_open(struct md__calib_live **out, const char *path, uint64_t max_bytes,
			uint32_t grace, uint64_t instance_id, const md__calib_names names,
			char *err, size_t errlen)
{
	struct md__calib_live *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "calibration: out of memory");
		return -ENOMEM;
	}
	c->grace_steps = grace ? grace : MD__CALIB_GRACE_DEFAULT;
	if (path) {
		struct md__journal_header h;
		memset(&h, 0, sizeof(h));
		h.magic = MD__JOURNAL_MAGIC;
		h.version = MD__JOURNAL_VERSION;
		h.header_size = sizeof(h);
		h.rec_size = sizeof(struct md__jrec);
		h.grace_steps = c->grace_steps;
		h.instance_id = instance_id;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		h.start_unix_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		for (unsigned r = 0; r < MD_REGIONS_MAX; r++)
			snprintf(h.region_name[r], sizeof(h.region_name[r]), "%s", names[r]);
		int rc = md__journal_open(&c->journal, path, max_bytes, &h, err, errlen);
		if (rc < 0) {
			free(c);
			return rc;
		}
	}
	*out = c;
	return 0;
}

void md__calib_live_close(struct md__calib_live *c)
{
	if (!c)
		return;
	if (c->journal) {
		struct md__journal_stats js;
		md__journal_get_stats(c->journal, &js);
		md__journal_close(c->journal);
		md__info("journal closed: %llu entries, %llu bytes, %llu dropped (buffer full), "
			 "%llu dropped (size limit)",
			 (unsigned long long)js.records, (unsigned long long)js.bytes_written,
			 (unsigned long long)js.dropped_full, (unsigned long long)js.dropped_max);
	}
	free(c);
}

static void jput(struct md__calib_live *c, const struct md__calib_engine *e, uint8_t type,
		 uint8_t n, uint16_t refresh, uint32_t seq, uint32_t slot, uint32_t gen, float mass,
		 uint64_t clock, uint64_t labels)
{
	if (!c->journal)
		return;
	struct md__jrec j = { .type = type, .n = n, .refresh = refresh, .engine = e->id,
			      .seq = seq, .slot = slot, .gen = gen, .mass = mass, .clock = clock,
			      .labels = labels };
	md__journal_put(c->journal, &j);
}

void md__calib_live_attach(struct md__calib_live *c, struct md__calib_engine *e)
{
	e->tracker = md__calib_tracker_new(e->page_tokens, e->page_capacity, e->max_seqs,
					   c->grace_steps);
	jput(c, e, MD__J_ATTACH, (uint8_t)e->page_tokens, 0, 0, e->page_capacity, e->max_seqs, 0, 0,
	     0);
}

/* STEP records are not journaled (one per token); the clocks they leave are,
 * where they decide something: before live tokens end. */
static void journal_clocks(struct md__calib_live *c, const struct md__calib_engine *e)
{
	if (!c->journal)
		return;
	for (uint32_t s = 0; s < e->max_seqs; s++) {
		uint64_t clk = md__calib_seq_clock_of(e->tracker, s);
		if (clk)
			jput(c, e, MD__J_CLOCK, 0, 0, s, UINT32_MAX, 0, 0, clk, 0);
	}
}

void md__calib_live_detach(struct md__calib_live *c, struct md__calib_engine *e)
{
	if (!e->tracker)
		return;
	journal_clocks(c, e);
	md__calib_tracker_flush(e->tracker, &c->stats);
	md__calib_tracker_free(e->tracker);
	e->tracker = NULL;
	jput(c, e, MD__J_DETACH, 0, 0, 0, 0, 0, 0, 0, 0);
}

void md__calib_live_resync(struct md__calib_live *c, struct md__calib_engine *e)
{
	/* The tracker cannot know the births of pages it only sees in the
	 * table: what it followed ends here, pages opened later are followed. */
	if (!e->tracker)
		return;
	journal_clocks(c, e);
	md__calib_tracker_flush(e->tracker, &c->stats);
	jput(c, e, MD__J_RESYNC, 0, 0, 0, 0, 0, 0, 0, 0);
}

struct relabel_ctx {
	struct md__calib_live *c;
	const struct md__calib_engine *e;
	uint64_t clock;
};

static void relabel_cb(uint32_t slot, uint32_t gen, uint32_t seq, uint64_t labels, void *ud)
{
	struct relabel_ctx *x = ud;
	jput(x->c, x->e, MD__J_LABELS, 0, 0, seq, slot, gen, 0, x->clock, labels);
}

void md__calib_live_observe(struct md__calib_live *c, struct md__calib_engine *e,
			    const struct md_stats_rec *r, uint16_t refreshed)
{
	struct md__calib_tracker *t = e->tracker;
	if (!t)
		return;
	struct md__calib_stats *st = &c->stats;
	switch (r->type) {
	case MD_REC_PAGE_OPEN:
		if (md__calib_page_open(t, st, r->slot, r->gen, r->seq, r->u.page.first_pos,
					r->u.page.n_tokens, r->u.page.labels, r->clock) == 0)
			jput(c, e, MD__J_OPEN, (uint8_t)r->u.page.n_tokens, 0, r->seq, r->slot, r->gen,
			     0, r->clock, r->u.page.labels);
		break;
	case MD_REC_PAGE_GROW:
		if (md__calib_page_grow(t, r->slot, r->gen, r->u.page.n_tokens, r->u.page.labels,
					r->clock) == 0)
			jput(c, e, MD__J_GROW, (uint8_t)r->u.page.n_tokens, 0, r->seq, r->slot, r->gen,
			     0, r->clock, r->u.page.labels);
		break;
	case MD_REC_PAGE_FREE:
		if (md__calib_page_free(t, st, r->slot, r->gen, r->clock) == 0)
			jput(c, e, MD__J_FREE, (uint8_t)r->u.free.reason, 0, r->seq, r->slot, r->gen, 0,
			     r->clock, 0);
		break;
	case MD_REC_SEQ_END:
		if (md__calib_seq_end(t, st, r->seq, r->clock) == 0)
			jput(c, e, MD__J_SEQ_END, 0, 0, r->seq, UINT32_MAX, 0, 0, r->clock, 0);
		break;
	case MD_REC_STEP:
		md__calib_seq_clock(t, r->seq, r->clock);
		break;
	case MD_REC_ATTN_PAGE:
		if (md__calib_attn(t, r->slot, r->gen, refreshed, r->clock) == 0)
			jput(c, e, MD__J_ATTN, 0, refreshed, r->seq, r->slot, r->gen,
			     r->u.attn_page.mass, r->clock, 0);
		break;
	case MD_REC_ATTN_TOKENS: {
		double sum = 0;
		for (unsigned i = 0; i < r->count && i < MD_ATTN_TOKENS_PER_REC; i++)
			sum += (double)r->u.attn_tokens.mass[i];
		if (md__calib_attn(t, r->slot, r->gen, refreshed, r->clock) == 0)
			jput(c, e, MD__J_ATTN, 0, refreshed, r->seq, r->slot, r->gen, (float)sum,
			     r->clock, 0);
		break;
	}
	case MD_REC_RELABEL: {
		struct relabel_ctx x = { c, e, r->clock };
		md__calib_relabel(t, r->seq, r->u.relabel.pos0, r->u.relabel.pos1,
				  r->u.relabel.region, relabel_cb, &x);
		break;
	}
	default:
		break;
	}
}

void md__calib_live_flush(struct md__calib_live *c, int tick)
{
	if (!c || !c->journal)
		return;
	size_t have = md__journal_buffered(c->journal);
	if (have && (tick || have >= JOURNAL_FLUSH_BYTES)) {
		long rc = md__journal_flush(c->journal, JOURNAL_FLUSH_BUDGET);
		if (rc < 0 && !c->journal_error_logged) {
			c->journal_error_logged = 1;
			md__err("journal %s: write failed: %s (entries are dropped until it works)",
				md__journal_path(c->journal), strerror((int)-rc));
		}
	}
	if (tick && !c->journal_stop_logged) {
		struct md__journal_stats js;
		md__journal_get_stats(c->journal, &js);
		if (js.stopped) {
			c->journal_stop_logged = 1;
			md__warn("journal %s reached --journal-max-bytes (%llu bytes written): "
				 "recording stopped",
				 md__journal_path(c->journal), (unsigned long long)js.bytes_written);
		}
	}
}

int md__calib_live_report(const struct md__calib_live *c,
			  const struct md__calib_engine *const *engines, size_t n,
			  const md__calib_names names, int json, struct md__sbuf *b,
			  char (*items)[128], size_t max_items, char *err, size_t errlen)
{
	struct md__calib_stats *st = malloc(sizeof(*st));
	if (!st) {
		snprintf(err, errlen, "calibrate: out of memory");
		return -ENOMEM;
	}
	*st = c->stats;
	for (size_t i = 0; i < n; i++)
		if (engines[i]->tracker)
			md__calib_tracker_peek(engines[i]->tracker, st);
	char source[96];
	snprintf(source, sizeof(source), "live memdecayd (%zu engine%s attached)", n,
		 n == 1 ? "" : "s");
	int rc = md__calib_report(st, names, c->grace_steps, source, json, b, items, max_items);
	free(st);
	return rc;
}
