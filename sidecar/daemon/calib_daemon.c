/*
 * calib_daemon.c — calibration inside memdecayd (calib_daemon.h): per engine a
 * lifetime tracker follows the records the host accepted, finished samples
 * accumulate per region, `calibrate` adds the still-live tokens (censored)
 * and estimates; --apply goes through the same all-or-nothing set path as
 * `memdecayctl set`.  With --journal the same facts are appended to the
 * journal, so the estimate can be recomputed offline (`calibrate --from`).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib_daemon.h"
#include "calib_report.h"
#include "ctl_parse.h"
#include "daemon.h"
#include "log.h"

#define JOURNAL_FLUSH_BYTES (64u << 10)
#define JOURNAL_FLUSH_BUDGET (256u << 10)

int md__calib_daemon_init(struct md__daemon *d, const char *path, uint64_t max_bytes,
			  uint32_t grace, char *err, size_t errlen)
{
	struct md__calib_daemon *c = calloc(1, sizeof(*c));
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
		h.instance_id = d->instance_id;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		h.start_unix_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		for (unsigned r = 0; r < MD_REGIONS_MAX; r++)
			snprintf(h.region_name[r], sizeof(h.region_name[r]), "%s",
				 d->params.region_name[r]);
		int rc = md__journal_open(&c->journal, path, max_bytes, &h, err, errlen);
		if (rc < 0) {
			free(c);
			return rc;
		}
	}
	d->calib = c;
	return 0;
}

void md__calib_daemon_free(struct md__daemon *d)
{
	struct md__calib_daemon *c = d->calib;
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
	d->calib = NULL;
}

static void jput(struct md__daemon *d, const struct md__peer *e, uint8_t type, uint8_t n,
		 uint16_t refresh, uint32_t seq, uint32_t slot, uint32_t gen, float mass,
		 uint64_t clock, uint64_t labels)
{
	if (!d->calib || !d->calib->journal)
		return;
	struct md__jrec j = { .type = type, .n = n, .refresh = refresh, .engine = e->id,
			      .seq = seq, .slot = slot, .gen = gen, .mass = mass, .clock = clock,
			      .labels = labels };
	md__journal_put(d->calib->journal, &j);
}

void md__calib_engine_attached(struct md__daemon *d, struct md__peer *e)
{
	if (!d->calib)
		return;
	e->calib = md__calib_tracker_new(e->page_tokens, e->page_capacity, e->max_seqs,
					 d->calib->grace_steps);
	if (!e->calib)
		md__warn("engine %u (%s): no memory for calibration: its attention is not measured",
			 e->id, e->name);
	jput(d, e, MD__J_ATTACH, (uint8_t)e->page_tokens, 0, 0, e->page_capacity, e->max_seqs, 0, 0,
	     0);
}

/* STEP records are not journaled (one per token); the clocks they leave are,
 * where they decide something: before live tokens end. */
static void journal_clocks(struct md__daemon *d, struct md__peer *e)
{
	if (!d->calib->journal)
		return;
	for (uint32_t s = 0; s < e->max_seqs; s++) {
		uint64_t c = md__calib_seq_clock_of(e->calib, s);
		if (c)
			jput(d, e, MD__J_CLOCK, 0, 0, s, UINT32_MAX, 0, 0, c, 0);
	}
}

void md__calib_engine_detached(struct md__daemon *d, struct md__peer *e)
{
	if (!e->calib)
		return;
	journal_clocks(d, e);
	md__calib_tracker_flush(e->calib, &d->calib->stats);
	md__calib_tracker_free(e->calib);
	e->calib = NULL;
	jput(d, e, MD__J_DETACH, 0, 0, 0, 0, 0, 0, 0, 0);
}

void md__calib_engine_resync(struct md__daemon *d, struct md__peer *e)
{
	/* The tracker cannot know the births of pages it only sees in the
	 * table: what it followed ends here, pages opened later are followed. */
	if (!e->calib)
		return;
	journal_clocks(d, e);
	md__calib_tracker_flush(e->calib, &d->calib->stats);
	jput(d, e, MD__J_RESYNC, 0, 0, 0, 0, 0, 0, 0, 0);
}

struct relabel_ctx {
	struct md__daemon *d;
	struct md__peer *e;
	uint64_t clock;
};

static void relabel_cb(uint32_t slot, uint32_t gen, uint32_t seq, uint64_t labels, void *ud)
{
	struct relabel_ctx *x = ud;
	jput(x->d, x->e, MD__J_LABELS, 0, 0, seq, slot, gen, 0, x->clock, labels);
}

/* The refresh rule of the host for ATTN_TOKENS (mass, normalized if the
 * engine's policy is, against τ). */
static uint32_t tokens_refresh(struct md__daemon *d, struct md__peer *e,
			       const struct md_stats_rec *r, float *sum)
{
	uint32_t seq = md__calib_page_seq(e->calib, r->slot, r->gen);
	double nl = seq == UINT32_MAX ? 0 : (double)md__calib_seq_tokens(e->calib, seq);
	struct md__engine_opts o;
	int pol = d->params.policy;
	if (md__host_engine_get_opts(d->host, e->id, &o) == 0 && o.policy >= 0)
		pol = o.policy;
	int rel = md__policy_always_relative((uint32_t)pol) || d->params.norm == MD_NORM_RELATIVE;
	uint32_t bits = 0;
	double s = 0;
	for (unsigned i = 0; i < r->count && i < MD_ATTN_TOKENS_PER_REC; i++) {
		double m = (double)r->u.attn_tokens.mass[i];
		s += m;
		if ((rel ? m * nl : m) > d->params.tau && r->token0 + i < MD_PAGE_TOKENS_MAX)
			bits |= 1u << (r->token0 + i);
	}
	*sum = (float)s;
	return bits;
}

void md__calib_observe(struct md__daemon *d, struct md__peer *e, const struct md_stats_rec *r)
{
	struct md__calib_tracker *t = e->calib;
	if (!t)
		return;
	struct md__calib_stats *st = &d->calib->stats;
	switch (r->type) {
	case MD_REC_PAGE_OPEN:
		if (md__calib_page_open(t, st, r->slot, r->gen, r->seq, r->u.page.first_pos,
					r->u.page.n_tokens, r->u.page.labels, r->clock) == 0)
			jput(d, e, MD__J_OPEN, (uint8_t)r->u.page.n_tokens, 0, r->seq, r->slot, r->gen,
			     0, r->clock, r->u.page.labels);
		break;
	case MD_REC_PAGE_GROW:
		if (md__calib_page_grow(t, r->slot, r->gen, r->u.page.n_tokens, r->u.page.labels,
					r->clock) == 0)
			jput(d, e, MD__J_GROW, (uint8_t)r->u.page.n_tokens, 0, r->seq, r->slot, r->gen,
			     0, r->clock, r->u.page.labels);
		break;
	case MD_REC_PAGE_FREE:
		if (md__calib_page_free(t, st, r->slot, r->gen, r->clock) == 0)
			jput(d, e, MD__J_FREE, (uint8_t)r->u.free.reason, 0, r->seq, r->slot, r->gen, 0,
			     r->clock, 0);
		break;
	case MD_REC_SEQ_END:
		if (md__calib_seq_end(t, st, r->seq, r->clock) == 0)
			jput(d, e, MD__J_SEQ_END, 0, 0, r->seq, UINT32_MAX, 0, 0, r->clock, 0);
		break;
	case MD_REC_STEP:
		md__calib_seq_clock(t, r->seq, r->clock);
		break;
	case MD_REC_ATTN_PAGE:
		if (md__calib_attn(t, r->slot, r->gen, r->u.attn_page.refresh, r->clock) == 0)
			jput(d, e, MD__J_ATTN, 0, r->u.attn_page.refresh, r->seq, r->slot, r->gen,
			     r->u.attn_page.mass, r->clock, 0);
		break;
	case MD_REC_ATTN_TOKENS: {
		float sum;
		uint32_t bits = tokens_refresh(d, e, r, &sum);
		if (md__calib_attn(t, r->slot, r->gen, bits, r->clock) == 0)
			jput(d, e, MD__J_ATTN, 0, (uint16_t)bits, r->seq, r->slot, r->gen, sum,
			     r->clock, 0);
		break;
	}
	case MD_REC_RELABEL: {
		struct relabel_ctx x = { d, e, r->clock };
		md__calib_relabel(t, r->seq, r->u.relabel.pos0, r->u.relabel.pos1,
				  r->u.relabel.region, relabel_cb, &x);
		break;
	}
	default:
		break;
	}
}

void md__calib_flush(struct md__daemon *d, int tick)
{
	struct md__calib_daemon *c = d->calib;
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

int md__calib_control(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b, char *err,
		      size_t errlen)
{
	struct md__calib_daemon *c = d->calib;
	if (!c) {
		snprintf(err, errlen, "calibrate: calibration is not running in this memdecayd");
		return -ENOSYS;
	}
	struct md__calib_stats *st = malloc(sizeof(*st));
	if (!st) {
		snprintf(err, errlen, "calibrate: out of memory");
		return -ENOMEM;
	}
	*st = c->stats;
	unsigned n_eng = 0;
	for (struct md__peer *e = d->engines; e; e = e->next, n_eng++)
		if (e->calib)
			md__calib_tracker_peek(e->calib, st);
	md__calib_names names;
	for (unsigned k = 0; k < MD_REGIONS_MAX; k++)
		snprintf(names[k], sizeof(names[k]), "%s", d->params.region_name[k]);
	char source[96];
	snprintf(source, sizeof(source), "live memdecayd (%u engine%s attached)", n_eng,
		 n_eng == 1 ? "" : "s");
	char items[MD_REGIONS_MAX][128];
	int n = md__calib_report(st, (const char(*)[MD__JOURNAL_NAME_LEN])names, c->grace_steps,
				 source, r->json, b, r->apply ? items : NULL, MD_REGIONS_MAX);
	free(st);
	if (!r->apply || n <= 0)
		return 0;
	const char *list[MD_REGIONS_MAX];
	for (int i = 0; i < n; i++)
		list[i] = items[i];
	struct md__params p = d->params;
	int rc = md__params_set_many(&p, list, (size_t)n, err, errlen);
	if (rc < 0)
		return rc; /* nothing applied */
	md__daemon_apply_params(d, &p);
	for (int i = 0; i < n; i++)
		md__info("control: calibrate set %s", items[i]);
	return 0;
}
