/*
 * calib_report.c — the calibrate table and the journal replay (calib_report.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib_report.h"

static void name_of(const md__calib_names names, unsigned r, char *buf, size_t len)
{
	if (names[r][0])
		snprintf(buf, len, "%s", names[r]);
	else
		snprintf(buf, len, "region%u", r);
}

static void json_num(struct md__sbuf *b, double v)
{
	if (isfinite(v))
		md__sbuf_printf(b, "%.6g", v);
	else
		md__sbuf_printf(b, "null");
}

int md__calib_report(const struct md__calib_stats *st, const md__calib_names names,
		     uint32_t grace, const char *source, int json, struct md__sbuf *b,
		     char (*items)[128], size_t max_items)
{
	int n_items = 0, first = 1;
	if (json) {
		md__sbuf_printf(b, "{\"source\":");
		md__sbuf_json_str(b, source);
		md__sbuf_printf(b, ",\"grace_steps\":%u,\"min_events\":%u,\"confidence\":%.2f,"
				   "\"regions\":[",
				grace, MD__CALIB_MIN_EVENTS, MD__CALIB_CONF);
	} else {
		md__sbuf_printf(b, "calibration from %s (grace %u steps, %.0f%% intervals, min %u events)\n",
				source, grace, MD__CALIB_CONF * 100, MD__CALIB_MIN_EVENTS);
		md__sbuf_printf(b, "%-12s %9s %9s %9s %10s %21s %8s %10s  %s\n", "REGION", "SAMPLES",
				"EVENTS", "CENSORED", "HALF_LIFE", "CI", "KM", "LAMBDA", "STATUS");
	}
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++) {
		const struct md__calib_region *reg = &st->r[r];
		if (!names[r][0] && !reg->events && !reg->censored)
			continue;
		struct md__calib_estimate e;
		md__calib_estimate(reg, MD__CALIB_CONF, MD__CALIB_MIN_EVENTS, &e);
		char rn[64];
		name_of(names, r, rn, sizeof(rn));
		int apply = e.status == MD__CALIB_OK && items && (size_t)n_items < max_items;
		if (apply)
			snprintf(items[n_items++], 128, "memdecay.region.%s.lambda=%.6g", rn, e.lambda);
		const char *status = e.status == MD__CALIB_OK ? (items ? "applied" : "ok")
							      : md__calib_status_name(e.status);
		if (json) {
			md__sbuf_printf(b, "%s{\"region\":", first ? "" : ",");
			md__sbuf_json_str(b, rn);
			md__sbuf_printf(b, ",\"samples\":%llu,\"events\":%llu,\"censored\":%llu,"
					   "\"half_life\":",
					(unsigned long long)e.samples, (unsigned long long)e.events,
					(unsigned long long)e.censored);
			json_num(b, e.half_life);
			md__sbuf_printf(b, ",\"ci_low\":");
			json_num(b, e.half_life_lo);
			md__sbuf_printf(b, ",\"ci_high\":");
			json_num(b, e.half_life_hi);
			md__sbuf_printf(b, ",\"km_half_life\":");
			json_num(b, e.km_half_life >= 0 ? e.km_half_life : NAN);
			md__sbuf_printf(b, ",\"lambda\":");
			json_num(b, e.lambda);
			md__sbuf_printf(b, ",\"status\":\"%s\",\"applied\":%s}", status,
					apply ? "true" : "false");
		} else {
			char hl[32], ci[48], km[16], lam[16];
			if (e.status == MD__CALIB_NONE) {
				snprintf(hl, sizeof(hl), "-");
				snprintf(ci, sizeof(ci), "-");
				snprintf(lam, sizeof(lam), "-");
			} else {
				snprintf(hl, sizeof(hl), "%.2f", e.half_life);
				snprintf(ci, sizeof(ci), "[%.2f, %.2f]", e.half_life_lo, e.half_life_hi);
				snprintf(lam, sizeof(lam), "%.4g", e.lambda);
			}
			if (e.km_half_life >= 0)
				snprintf(km, sizeof(km), "%.0f", e.km_half_life);
			else
				snprintf(km, sizeof(km), "-");
			md__sbuf_printf(b, "%-12s %9llu %9llu %9llu %10s %21s %8s %10s  %s%s\n", rn,
					(unsigned long long)e.samples, (unsigned long long)e.events,
					(unsigned long long)e.censored, hl, ci, km, lam,
					items && e.status != MD__CALIB_OK ? "skipped: " : "", status);
		}
		first = 0;
	}
	if (json)
		md__sbuf_printf(b, "],\"applied\":%d}\n", n_items);
	else if (items)
		md__sbuf_printf(b, "applied %d lambda value%s\n", n_items, n_items == 1 ? "" : "s");
	return n_items;
}

/* ---- journal replay ---- */

struct replay {
	struct md__calib_stats *st;
	uint32_t grace;
	struct eng {
		uint32_t id;
		struct md__calib_tracker *t;
	} *eng;
	size_t n_eng, cap_eng;
	uint64_t bad;
};

static struct md__calib_tracker *find(struct replay *rp, uint32_t id)
{
	for (size_t i = 0; i < rp->n_eng; i++)
		if (rp->eng[i].id == id)
			return rp->eng[i].t;
	return NULL;
}

static void drop(struct replay *rp, uint32_t id)
{
	for (size_t i = 0; i < rp->n_eng; i++)
		if (rp->eng[i].id == id) {
			md__calib_tracker_flush(rp->eng[i].t, rp->st);
			md__calib_tracker_free(rp->eng[i].t);
			rp->eng[i] = rp->eng[--rp->n_eng];
			return;
		}
}

static int replay_one(const struct md__jrec *r, void *ud)
{
	struct replay *rp = ud;
	if (r->type == MD__J_ATTACH) {
		drop(rp, r->engine); /* an id is unique while attached */
		struct md__calib_tracker *t = md__calib_tracker_new(r->n, r->slot, r->gen, rp->grace);
		if (!t) {
			rp->bad++;
			return 0;
		}
		if (rp->n_eng == rp->cap_eng) {
			size_t nc = rp->cap_eng ? rp->cap_eng * 2 : 8;
			struct eng *ne = realloc(rp->eng, nc * sizeof(*ne));
			if (!ne) {
				md__calib_tracker_free(t);
				return 1;
			}
			rp->eng = ne;
			rp->cap_eng = nc;
		}
		rp->eng[rp->n_eng].id = r->engine;
		rp->eng[rp->n_eng++].t = t;
		return 0;
	}
	if (r->type == MD__J_DETACH) {
		drop(rp, r->engine);
		return 0;
	}
	struct md__calib_tracker *t = find(rp, r->engine);
	if (!t) {
		rp->bad++;
		return 0;
	}
	int rc = 0;
	switch (r->type) {
	case MD__J_RESYNC: md__calib_tracker_flush(t, rp->st); break;
	case MD__J_OPEN:
		rc = md__calib_page_open(t, rp->st, r->slot, r->gen, r->seq, 0, r->n, r->labels,
					 r->clock);
		break;
	case MD__J_GROW: rc = md__calib_page_grow(t, r->slot, r->gen, r->n, r->labels, r->clock); break;
	case MD__J_LABELS: rc = md__calib_page_labels(t, r->slot, r->gen, r->labels); break;
	case MD__J_ATTN: rc = md__calib_attn(t, r->slot, r->gen, r->refresh, r->clock); break;
	case MD__J_FREE: rc = md__calib_page_free(t, rp->st, r->slot, r->gen, r->clock); break;
	case MD__J_SEQ_END: rc = md__calib_seq_end(t, rp->st, r->seq, r->clock); break;
	case MD__J_CLOCK: rc = md__calib_seq_clock(t, r->seq, r->clock); break;
	default: rc = -EINVAL; break;
	}
	if (rc < 0)
		rp->bad++;
	return 0;
}

long md__calib_from_journal(const char *path, uint32_t grace, struct md__calib_stats *st,
			    md__calib_names names, uint32_t *grace_used, char *err, size_t errlen)
{
	struct md__journal_header h;
	memset(st, 0, sizeof(*st));
	/* the header first: its grace is the default */
	long n = md__journal_replay(path, &h, NULL, NULL, err, errlen);
	if (n < 0)
		return n;
	struct replay rp = { .st = st, .grace = grace ? grace : h.grace_steps };
	if (!rp.grace)
		rp.grace = MD__CALIB_GRACE_DEFAULT;
	n = md__journal_replay(path, &h, replay_one, &rp, err, errlen);
	while (rp.n_eng)
		drop(&rp, rp.eng[0].id);
	free(rp.eng);
	if (n < 0)
		return n;
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++)
		memcpy(names[r], h.region_name[r], MD__JOURNAL_NAME_LEN);
	if (grace_used)
		*grace_used = rp.grace;
	return n;
}
