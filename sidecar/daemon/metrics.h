/*
 * metrics.h — the daemon's one table of statistics (metrics.c) and its three
 * renderings: `memdecayctl stats` (text), `stats --json` and `metrics`
 * (Prometheus text, also served by metrics_http.c).  Each row names the
 * value once and says where it appears in each rendering; a rendering that
 * does not show a row leaves its field empty.
 */
#ifndef MD_METRICS_H
#define MD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon.h"

enum md__metric_scope {
	MD__M_DAEMON,   /* one value for the daemon */
	MD__M_ENGINE,   /* one value per attached engine */
};

enum md__metric_kind {
	MD__M_COUNT,    /* an integer, printed as is */
	MD__M_UPTIME,   /* ns; JSON and Prometheus in seconds (%.3f), text in seconds */
	MD__M_NS,       /* ns; JSON in ns, text in ms, Prometheus in seconds (%.9f) */
	MD__M_LATENCY,  /* a latency histogram: JSON object, text p50/p99/max, summary */
	MD__M_GROUP,    /* counters by reason or region: JSON object, name=v, a label */
};

/* What a getter reads: the daemon, and for an engine row its peer and the
 * host's statistics of it. */
struct md__metric_ctx {
	const struct md__daemon *d;
	const struct md__peer *e;
	const struct md__engine_stats *st;
};

struct md__metric_group {
	int first, end;          /* items first .. end-1 */
	const char *label;       /* the Prometheus label naming an item */
	void (*name)(const struct md__metric_ctx *c, int k, char *buf, size_t len);
	uint64_t (*value)(const struct md__metric_ctx *c, int k);
	/* NULL: every item is shown; else whether item k is, in text or not */
	int (*shown)(const struct md__metric_ctx *c, int k, int text);
	int text_between;        /* text items separated by a blank, not each led by one */
};

struct md__metric {
	uint8_t scope, kind;
	const char *json;        /* key in stats --json; NULL: not there */
	/* stats text: a printf fragment with the row's value (%llu for a count,
	 * %f forms for times), the text before a group's items, or the latency
	 * line; NULL: not there */
	const char *text;
	uint8_t text_at;         /* position in the text (from 1, per scope) */
	const char *prom;        /* Prometheus family; NULL: not there */
	const char *prom_type, *help;
	uint8_t prom_at;         /* position in the metrics body (from 1) */
	uint64_t (*get)(const struct md__metric_ctx *c);                  /* scalars */
	const struct md_lathist *(*hist)(const struct md__metric_ctx *c); /* latency */
	const struct md__metric_group *group;                             /* groups */
};

extern const struct md__metric md__metrics[];
extern const size_t md__metrics_n;

/* What a rendering shows: the engines in order and the host's statistics of
 * each (st[i] belongs to peers[i]). */
struct md__metrics_view {
	const struct md__daemon *d;
	struct md__peer *const *peers;
	const struct md__engine_stats *st;
	size_t n;
};

void md__metrics_json(const struct md__metrics_view *v, struct md__sbuf *b);
void md__metrics_text(const struct md__metrics_view *v, struct md__sbuf *b);
void md__metrics_prom(const struct md__metrics_view *v, struct md__sbuf *b);

/* A region's configured name, else "region<r>". */
void md__metrics_region_name(const struct md__daemon *d, unsigned r, char *buf, size_t len);
const char *md__evict_reason_name(unsigned reason);

#endif
