/*
 * metrics.c — the daemon's statistics as one table (metrics.h) and the three
 * renderings of it: `stats` text, `stats --json` and the Prometheus `metrics`
 * body.  A value is named once, in its row; the renderers walk the rows, so
 * a row added here appears wherever it says, and check_metrics proves every
 * row appears in each rendering it names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "memdecay_clock.h"
#include "metrics.h"

/* ---- names ---- */

static const char *const evict_reason_names[] = { "none", "sequence_budget", "engine_budget",
						  "global_budget" };
_Static_assert(sizeof(evict_reason_names) / sizeof(evict_reason_names[0]) == MD_EVICT_REASON_COUNT,
	       "one name per enum md_evict_reason value");

const char *md__evict_reason_name(unsigned reason)
{
	return reason < MD_EVICT_REASON_COUNT ? evict_reason_names[reason] : "?";
}

void md__metrics_region_name(const struct md__daemon *d, unsigned r, char *buf, size_t len)
{
	if (md__daemon_params(d)->region_name[r][0])
		snprintf(buf, len, "%s", md__daemon_params(d)->region_name[r]);
	else
		snprintf(buf, len, "region%u", r);
}

/* ---- getters ---- */

#define DAEMON_U64(f)                                                  \
	static uint64_t d_##f(const struct md__metric_ctx *c)          \
	{                                                              \
		return (uint64_t)c->d->f;                              \
	}
#define PEER_U64(f)                                                    \
	static uint64_t e_##f(const struct md__metric_ctx *c)          \
	{                                                              \
		return (uint64_t)c->e->f;                              \
	}
#define STATS_U64(f)                                                   \
	static uint64_t s_##f(const struct md__metric_ctx *c)          \
	{                                                              \
		return (uint64_t)c->st->f;                             \
	}
/* counters the engine keeps in its own segment */
#define ECTRL_U64(f)                                                   \
	static uint64_t x_##f(const struct md__metric_ctx *c)          \
	{                                                              \
		return md_load_relaxed(&c->e->ectrl->f);               \
	}

DAEMON_U64(n_engines)
DAEMON_U64(attaches)
DAEMON_U64(attach_refused)
DAEMON_U64(weights_clamped)
DAEMON_U64(n_conns)
DAEMON_U64(conns_refused)
DAEMON_U64(conns_evicted)
DAEMON_U64(iterations)
DAEMON_U64(sleeps)
DAEMON_U64(naps)
DAEMON_U64(reloads)
DAEMON_U64(reload_failures)
DAEMON_U64(ctl_requests)
DAEMON_U64(ctl_errors)

PEER_U64(records)
PEER_U64(torn)
PEER_U64(bad_tail)
PEER_U64(violations)
PEER_U64(cmds_sent)
PEER_U64(pending_len)
PEER_U64(cmd_ring_full)
PEER_U64(doorbells)
PEER_U64(doorbells_in)
PEER_U64(resyncs)
PEER_U64(resync_pages)
PEER_U64(resync_pages_skipped)
PEER_U64(resync_last_ns)
PEER_U64(resync_ns_total)
PEER_U64(resyncs_deferred)
PEER_U64(ingest_budget_cut)
PEER_U64(abi_minor)
PEER_U64(seq_opts_torn)
PEER_U64(seq_protect_writes)

STATS_U64(evictions)
STATS_U64(pages_live)
STATS_U64(pages_evicting)
STATS_U64(tokens_live)
STATS_U64(seqs_live)
STATS_U64(budget_engine_pages)
STATS_U64(decisions)
STATS_U64(decision_ns_total)
STATS_U64(seqs_own_options)
STATS_U64(seqs_retained)
STATS_U64(seq_options_applied)
STATS_U64(tier_budget)
STATS_U64(tier_pages)
STATS_U64(tier_in)
STATS_U64(estimates)
STATS_U64(restores)
STATS_U64(recalls)
STATS_U64(restores_refused)
STATS_U64(recall_hits)
STATS_U64(drops)
STATS_U64(tier_freed)

/* the tier's bytes from the engine's HELLO page_bytes (docs/tier.md) */
static uint64_t s_tier_bytes(const struct md__metric_ctx *c)
{
	return c->st->tier_pages * c->st->page_bytes;
}

/* K/V bytes moved between device and host: pages that entered the tier and
 * pages restored from it */
static uint64_t s_tier_bytes_moved(const struct md__metric_ctx *c)
{
	return (c->st->tier_in + c->st->recalls) * c->st->page_bytes;
}

ECTRL_U64(attn_dropped)
ECTRL_U64(lifecycle_dropped)
ECTRL_U64(cmds_applied)
ECTRL_U64(cmds_stale)

static uint64_t d_uptime(const struct md__metric_ctx *c)
{
	return md_now_ns() - c->d->start_ns;
}

static const struct md_lathist *d_decide_lat(const struct md__metric_ctx *c)
{
	return &c->d->decide_lat;
}

/* ---- groups ---- */

static void detach_name(const struct md__metric_ctx *c, int k, char *buf, size_t len)
{
	(void)c;
	snprintf(buf, len, "%s", md__detach_reason_name(k));
}

static uint64_t detach_value(const struct md__metric_ctx *c, int k)
{
	return c->d->detaches[k];
}

static void reject_name(const struct md__metric_ctx *c, int k, char *buf, size_t len)
{
	(void)c;
	snprintf(buf, len, "%s", md__reject_name(k));
}

static uint64_t reject_value(const struct md__metric_ctx *c, int k)
{
	return c->e->rejected[k];
}

static void region_name(const struct md__metric_ctx *c, int k, char *buf, size_t len)
{
	md__metrics_region_name(c->d, (unsigned)k, buf, len);
}

static uint64_t region_value(const struct md__metric_ctx *c, int k)
{
	return c->st->evictions_by_region[k];
}

/* JSON and Prometheus list every named region and any other that evicted;
 * the text only those that evicted. */
static int region_shown(const struct md__metric_ctx *c, int k, int text)
{
	if (c->st->evictions_by_region[k])
		return 1;
	return !text && md__daemon_params(c->d)->region_name[k][0];
}

static void reason_name(const struct md__metric_ctx *c, int k, char *buf, size_t len)
{
	(void)c;
	snprintf(buf, len, "%s", md__evict_reason_name((unsigned)k));
}

static uint64_t reason_value(const struct md__metric_ctx *c, int k)
{
	return c->st->evictions_by_reason[k];
}

static const struct md__metric_group detaches = {
	0, MD__DETACH_COUNT, "reason", detach_name, detach_value, NULL, 0,
};
static const struct md__metric_group rejected = {
	1, MD__REJ_COUNT, "reason", reject_name, reject_value, NULL, 0,
};
static const struct md__metric_group by_region = {
	0, MD_REGIONS_MAX, "region", region_name, region_value, region_shown, 1,
};
static const struct md__metric_group by_reason = {
	1, MD_EVICT_REASON_COUNT, "reason", reason_name, reason_value, NULL, 0,
};

/* ---- the table ----
 * In `stats --json` order.  text_at orders the text within its scope (the
 * daemon's lines, then each engine's); prom_at orders the metrics body. */
#define D(kind) MD__M_DAEMON, MD__M_##kind
#define E(kind) MD__M_ENGINE, MD__M_##kind
#define GAUGE "gauge"
#define COUNTER "counter"

const struct md__metric md__metrics[] = {
	/* the daemon */
	{ D(UPTIME), "uptime_s", ", up %.1f s", 1,
	  "memdecay_up_seconds", GAUGE, "Seconds since memdecayd started.", 1, .get = d_uptime },
	{ D(COUNT), "engines", ", %llu engines", 2,
	  "memdecay_engines_attached", GAUGE, "Engines attached now.", 2, .get = d_n_engines },
	{ D(COUNT), "attaches", "  attaches %llu", 4,
	  "memdecay_attaches_total", COUNTER, "Engines attached since start.", 3, .get = d_attaches },
	{ D(COUNT), "attach_refused", " (refused %llu", 5,
	  "memdecay_attach_refused_total", COUNTER, "HELLOs refused.", 4, .get = d_attach_refused },
	{ D(COUNT), "weights_clamped", ", weight clamped %llu)", 6,
	  "memdecay_weights_clamped_total", COUNTER,
	  "HELLO weights cut to budget.max_engine_weight.", 5, .get = d_weights_clamped },
	{ D(COUNT), "connections", ", %llu connections\n", 3, NULL, NULL, NULL, 0, .get = d_n_conns },
	{ D(COUNT), "connections_refused", NULL, 0, NULL, NULL, NULL, 0, .get = d_conns_refused },
	{ D(COUNT), "connections_evicted", NULL, 0, NULL, NULL, NULL, 0, .get = d_conns_evicted },
	{ D(COUNT), "iterations", NULL, 0, NULL, NULL, NULL, 0, .get = d_iterations },
	{ D(COUNT), "sleeps", NULL, 0,
	  "memdecay_loop_sleeps_total", COUNTER, "Times the daemon went idle.", 9, .get = d_sleeps },
	{ D(COUNT), "naps", NULL, 0,
	  "memdecay_loop_naps_total", COUNTER,
	  "Short waits (daemon.nap_ms) with the sleeping flag down.", 10, .get = d_naps },
	{ D(COUNT), "reloads", NULL, 0, NULL, NULL, NULL, 0, .get = d_reloads },
	{ D(COUNT), "reload_failures", NULL, 0, NULL, NULL, NULL, 0, .get = d_reload_failures },
	{ D(GROUP), "detaches", ", detaches:", 7,
	  "memdecay_detaches_total", COUNTER, "Engines detached, by reason.", 6,
	  .group = &detaches },
	{ D(LATENCY), "decision_latency_ns",
	  "\n  decision passes %llu with evictions, latency p50 %.1f us, p99 %.1f us, max %.1f us\n", 8,
	  "memdecay_decision_latency_seconds", "summary",
	  "Wall time of one decision pass that produced evictions (all engines).", 26,
	  .hist = d_decide_lat },
	{ D(COUNT), NULL, NULL, 0,
	  "memdecay_control_requests_total", COUNTER, "Operator requests served.", 7,
	  .get = d_ctl_requests },
	{ D(COUNT), NULL, NULL, 0,
	  "memdecay_control_errors_total", COUNTER, "Operator requests answered ERR.", 8,
	  .get = d_ctl_errors },

	/* each engine */
	{ E(COUNT), "records", "  records         %llu ingested", 6,
	  "memdecay_records_total", COUNTER, "Stats records ingested.", 15, .get = e_records },
	{ E(GROUP), "rejected", "  rejected       ", 10,
	  "memdecay_records_rejected_total", COUNTER, "Records rejected, by reason.", 27,
	  .group = &rejected },
	{ E(COUNT), "torn", ", %llu torn", 7,
	  "memdecay_torn_records_total", COUNTER, "Records with a bad ring position.", 16, .get = e_torn },
	{ E(COUNT), "bad_tail", ", %llu bad ring tail", 8, NULL, NULL, NULL, 0, .get = e_bad_tail },
	{ E(COUNT), "violations", ", %llu violations\n", 9,
	  "memdecay_violations_total", COUNTER, "Protocol violations counted toward detaching.", 17,
	  .get = e_violations },
	{ E(COUNT), "evictions", "\n  evictions       %llu (", 11,
	  "memdecay_evictions_total", COUNTER, "Pages evicted.", 18, .get = s_evictions },
	{ E(GROUP), "evictions_by_region", "", 12,
	  "memdecay_evictions_by_region_total", COUNTER, "Pages evicted, by dominant region.", 28,
	  .group = &by_region },
	{ E(GROUP), "evictions_by_reason", ")\n  by reason      ", 13,
	  "memdecay_evictions_by_reason_total", COUNTER, "Pages evicted, by budget scope.", 29,
	  .group = &by_reason },
	{ E(COUNT), "pages_live", "  occupancy       %llu pages live", 1,
	  "memdecay_pages_live", GAUGE, "Live pages.", 11, .get = s_pages_live },
	{ E(COUNT), "pages_evicting", " (%llu evicting)", 2,
	  "memdecay_pages_evicting", GAUGE, "Pages with an eviction in flight.", 12,
	  .get = s_pages_evicting },
	{ E(COUNT), "tokens_live", ", %llu tokens", 3,
	  "memdecay_tokens_live", GAUGE, "Live tokens.", 13, .get = s_tokens_live },
	{ E(COUNT), "seqs_live", ", %llu sequences", 4, NULL, NULL, NULL, 0, .get = s_seqs_live },
	{ E(COUNT), "budget_engine_pages", ", budget %llu pages\n", 5,
	  "memdecay_budget_engine_pages", GAUGE, "Effective engine page budget (0: none).", 14,
	  .get = s_budget_engine_pages },
	{ E(COUNT), "decisions", "  decisions       %llu", 25,
	  "memdecay_decisions_total", COUNTER, "Eviction decisions run.", 22, .get = s_decisions },
	{ E(NS), "decision_ns_total", ", %.3f ms total\n", 26,
	  "memdecay_decision_seconds_total", COUNTER, "Time spent deciding.", 25,
	  .get = s_decision_ns_total },
	{ E(COUNT), "cmds_sent", "\n  commands        %llu sent", 14,
	  "memdecay_commands_sent_total", COUNTER, "Evict commands written to the ring.", 19,
	  .get = e_cmds_sent },
	{ E(COUNT), "cmds_pending", ", %llu pending", 15,
	  "memdecay_commands_pending", GAUGE, "Decisions waiting for command-ring room.", 20,
	  .get = e_pending_len },
	{ E(COUNT), "cmd_ring_full", ", ring full %llu times", 16, NULL, NULL, NULL, 0,
	  .get = e_cmd_ring_full },
	{ E(COUNT), "doorbells", ", %llu doorbells", 17, NULL, NULL, NULL, 0, .get = e_doorbells },
	{ E(COUNT), "doorbells_in", NULL, 0, NULL, NULL, NULL, 0, .get = e_doorbells_in },
	{ E(COUNT), "resyncs", "; resyncs %llu", 22,
	  "memdecay_resyncs_total", COUNTER, "Rebuilds from the page table.", 21, .get = e_resyncs },
	{ E(COUNT), "resync_pages", " (%llu pages", 23, NULL, NULL, NULL, 0, .get = e_resync_pages },
	{ E(COUNT), "resync_pages_skipped", ", %llu skipped)\n", 24, NULL, NULL, NULL, 0,
	  .get = e_resync_pages_skipped },
	{ E(COUNT), "resync_last_ns", NULL, 0, NULL, NULL, NULL, 0, .get = e_resync_last_ns },
	{ E(COUNT), "resync_ns_total", NULL, 0, NULL, NULL, NULL, 0, .get = e_resync_ns_total },
	{ E(COUNT), "resyncs_deferred", NULL, 0, NULL, NULL, NULL, 0, .get = e_resyncs_deferred },
	{ E(COUNT), "ingest_budget_cut", NULL, 0, NULL, NULL, NULL, 0, .get = e_ingest_budget_cut },
	{ E(COUNT), "attn_dropped", "  engine drops    attention %llu", 20,
	  "memdecay_attn_dropped_total", COUNTER,
	  "Attention records the engine dropped (ring full).", 23, .get = x_attn_dropped },
	{ E(COUNT), "lifecycle_dropped", ", lifecycle %llu", 21, NULL, NULL, NULL, 0,
	  .get = x_lifecycle_dropped },
	{ E(COUNT), "cmds_applied", "; engine applied %llu", 18, NULL, NULL, NULL, 0,
	  .get = x_cmds_applied },
	{ E(COUNT), "cmds_stale", ", stale %llu\n", 19,
	  "memdecay_cmds_stale_total", COUNTER,
	  "Commands the engine ignored (generation changed).", 24, .get = x_cmds_stale },
	/* ABI 1.2: sequences with their own options (docs/operations.md) */
	{ E(COUNT), "abi_minor", " (ABI 1.%llu engine)", 29, NULL, NULL, NULL, 0,
	  .get = e_abi_minor },
	{ E(COUNT), "seqs_own_options", "  sequences       %llu with own options", 27,
	  "memdecay_seqs_own_options", GAUGE, "Sequences with options of their own (ABI 1.2).", 30,
	  .get = s_seqs_own_options },
	/* ABI 1.3: sequences kept for their session's next turn ("Sessions") */
	{ E(COUNT), "seqs_retained", ", %llu retained", 28,
	  "memdecay_seqs_retained", GAUGE,
	  "Sequences the engine retains for a session's next turn (ABI 1.3).", 31,
	  .get = s_seqs_retained },
	{ E(COUNT), "seq_options", "; %llu option records", 30, NULL, NULL, NULL, 0,
	  .get = s_seq_options_applied },
	{ E(COUNT), "seq_options_torn", ", %llu entries torn at resync\n", 31, NULL, NULL, NULL, 0,
	  .get = e_seq_opts_torn },
	{ E(COUNT), "seq_protect_writes", NULL, 0, NULL, NULL, NULL, 0,
	  .get = e_seq_protect_writes },
	/* ABI 1.4: the host tier and recall (docs/tier.md) */
	{ E(COUNT), "tier_pages", "  tier            %llu pages", 32,
	  "memdecay_tier_pages", GAUGE, "Pages in the engine's host tier (ABI 1.4).", 32,
	  .get = s_tier_pages },
	{ E(COUNT), "tier_bytes", " (%llu bytes)", 33,
	  "memdecay_tier_bytes", GAUGE, "Host tier bytes (tier pages x HELLO page_bytes).", 33,
	  .get = s_tier_bytes },
	{ E(COUNT), "tier_budget_pages", ", budget %llu pages", 34,
	  "memdecay_tier_budget_pages", GAUGE, "Effective host tier budget (0: no tier).", 34,
	  .get = s_tier_budget },
	{ E(COUNT), "tier_in", ", %llu entered", 35,
	  "memdecay_tier_in_total", COUNTER, "Evicted pages the engine kept in its tier.", 35,
	  .get = s_tier_in },
	{ E(COUNT), "tier_drops", ", %llu dropped", 36,
	  "memdecay_tier_drops_total", COUNTER, "Tier pages dropped for the tier budget.", 36,
	  .get = s_drops },
	{ E(COUNT), "tier_freed", ", %llu freed\n", 37,
	  "memdecay_tier_freed_total", COUNTER, "Tier pages freed by the engine.", 37,
	  .get = s_tier_freed },
	{ E(COUNT), "estimates", "  recall          %llu estimates", 38,
	  "memdecay_estimates_total", COUNTER, "Estimated-attention records taken.", 38,
	  .get = s_estimates },
	{ E(COUNT), "restores", ", %llu restores decided", 39,
	  "memdecay_restores_total", COUNTER, "Restore commands decided.", 39,
	  .get = s_restores },
	{ E(COUNT), "recalls", ", %llu applied", 40,
	  "memdecay_recalls_total", COUNTER, "Restores the engine applied.", 40,
	  .get = s_recalls },
	{ E(COUNT), "restores_refused", ", %llu refused", 41,
	  "memdecay_restores_refused_total", COUNTER, "Restores the engine refused.", 41,
	  .get = s_restores_refused },
	{ E(COUNT), "recall_hits", ", %llu hits", 42,
	  "memdecay_recall_hits_total", COUNTER,
	  "Recalled pages attended after their restore (once each).", 42,
	  .get = s_recall_hits },
	{ E(COUNT), "tier_bytes_moved", ", %llu bytes moved\n", 43,
	  "memdecay_tier_bytes_moved_total", COUNTER,
	  "K/V bytes moved between device and host tier (in + restored).", 43,
	  .get = s_tier_bytes_moved },
};
const size_t md__metrics_n = sizeof(md__metrics) / sizeof(md__metrics[0]);

#undef D
#undef E

/* ---- stats --json ---- */

static void json_group(const struct md__metric *m, const struct md__metric_ctx *c,
		       struct md__sbuf *b)
{
	const struct md__metric_group *g = m->group;
	char name[64];
	int first = 1;
	md__sbuf_printf(b, "{");
	for (int k = g->first; k < g->end; k++) {
		if (g->shown && !g->shown(c, k, 0))
			continue;
		g->name(c, k, name, sizeof(name));
		md__sbuf_printf(b, "%s", first ? "" : ",");
		md__sbuf_json_str(b, name);
		md__sbuf_printf(b, ":%llu", (unsigned long long)g->value(c, k));
		first = 0;
	}
	md__sbuf_printf(b, "}");
}

static void json_value(const struct md__metric *m, const struct md__metric_ctx *c,
		       struct md__sbuf *b)
{
	const struct md_lathist *h;
	switch (m->kind) {
	case MD__M_UPTIME:
		md__sbuf_printf(b, "%.3f", (double)m->get(c) / 1e9);
		break;
	case MD__M_LATENCY:
		h = m->hist(c);
		md__sbuf_printf(b, "{\"count\":%llu,\"mean\":%llu,\"p50\":%llu,\"p99\":%llu,\"max\":%llu}",
				(unsigned long long)h->count,
				(unsigned long long)(h->count ? h->sum / h->count : 0),
				(unsigned long long)md_lathist_quantile(h, 0.50),
				(unsigned long long)md_lathist_quantile(h, 0.99),
				(unsigned long long)h->max);
		break;
	case MD__M_GROUP:
		json_group(m, c, b);
		break;
	default: /* counts, and ns as integers */
		md__sbuf_printf(b, "%llu", (unsigned long long)m->get(c));
	}
}

static void json_rows(int scope, const struct md__metric_ctx *c, struct md__sbuf *b)
{
	for (size_t i = 0; i < md__metrics_n; i++) {
		const struct md__metric *m = &md__metrics[i];
		if (m->scope != scope || !m->json)
			continue;
		md__sbuf_printf(b, ",\"%s\":", m->json);
		json_value(m, c, b);
	}
}

void md__metrics_json(const struct md__metrics_view *v, struct md__sbuf *b)
{
	struct md__metric_ctx c = { v->d, NULL, NULL };
	md__sbuf_printf(b, "{\"daemon\":{\"instance\":%llu,\"backend\":\"%s\"",
			(unsigned long long)v->d->instance_id, md__loop_backend_name(v->d->loop));
	json_rows(MD__M_DAEMON, &c, b);
	md__sbuf_printf(b, "},\"engines\":[");
	for (size_t i = 0; i < v->n; i++) {
		c.e = v->peers[i];
		c.st = &v->st[i];
		md__sbuf_printf(b, "%s{\"id\":%u,\"name\":", i ? "," : "", c.e->id);
		md__sbuf_json_str(b, c.e->name);
		md__sbuf_printf(b, ",\"policy\":\"%s\"", md__policy_name(c.st->policy));
		json_rows(MD__M_ENGINE, &c, b);
		md__sbuf_printf(b, "}");
	}
	md__sbuf_printf(b, "]}\n");
}

/* ---- stats (text) ---- */

static void text_group(const struct md__metric *m, const struct md__metric_ctx *c,
		       struct md__sbuf *b)
{
	const struct md__metric_group *g = m->group;
	char name[64];
	int first = 1;
	md__sbuf_printf(b, "%s", m->text);
	for (int k = g->first; k < g->end; k++) {
		if (g->shown && !g->shown(c, k, 1))
			continue;
		g->name(c, k, name, sizeof(name));
		md__sbuf_printf(b, "%s%s=%llu", g->text_between && first ? "" : " ", name,
				(unsigned long long)g->value(c, k));
		first = 0;
	}
}

static void text_value(const struct md__metric *m, const struct md__metric_ctx *c,
		       struct md__sbuf *b)
{
	const struct md_lathist *h;
	switch (m->kind) {
	case MD__M_UPTIME:
		md__sbuf_printf(b, m->text, (double)m->get(c) / 1e9);
		break;
	case MD__M_NS:
		md__sbuf_printf(b, m->text, (double)m->get(c) / 1e6);
		break;
	case MD__M_LATENCY:
		h = m->hist(c);
		md__sbuf_printf(b, m->text, (unsigned long long)h->count,
				(double)md_lathist_quantile(h, 0.50) / 1e3,
				(double)md_lathist_quantile(h, 0.99) / 1e3, (double)h->max / 1e3);
		break;
	case MD__M_GROUP:
		text_group(m, c, b);
		break;
	default:
		md__sbuf_printf(b, m->text, (unsigned long long)m->get(c));
	}
}

/* The rows of one scope in text order (a handful of rows: a scan per place). */
static void text_rows(int scope, const struct md__metric_ctx *c, struct md__sbuf *b)
{
	for (unsigned at = 1; at <= md__metrics_n; at++)
		for (size_t i = 0; i < md__metrics_n; i++) {
			const struct md__metric *m = &md__metrics[i];
			if (m->scope == scope && m->text && m->text_at == at)
				text_value(m, c, b);
		}
}

void md__metrics_text(const struct md__metrics_view *v, struct md__sbuf *b)
{
	struct md__metric_ctx c = { v->d, NULL, NULL };
	md__sbuf_printf(b, "memdecayd instance %llu, %s loop",
			(unsigned long long)v->d->instance_id, md__loop_backend_name(v->d->loop));
	text_rows(MD__M_DAEMON, &c, b);
	for (size_t i = 0; i < v->n; i++) {
		c.e = v->peers[i];
		c.st = &v->st[i];
		md__sbuf_printf(b, "engine %u (%s) policy %s\n", c.e->id, c.e->name,
				md__policy_name(c.st->policy));
		text_rows(MD__M_ENGINE, &c, b);
	}
}

/* ---- metrics (Prometheus text) ---- */

/* Engine names are printable without blanks; escape what Prometheus requires. */
static void prom_escape(struct md__sbuf *b, const char *s)
{
	for (; *s; s++)
		md__sbuf_printf(b, (*s == '\\' || *s == '"') ? "\\%c" : "%c", *s);
}

/* "family{" and, for an engine row, its labels */
static void prom_open(const struct md__metric *m, const struct md__metric_ctx *c,
		      struct md__sbuf *b)
{
	md__sbuf_printf(b, "%s{", m->prom);
	if (m->scope != MD__M_ENGINE)
		return;
	md__sbuf_printf(b, "engine=\"%u\",name=\"", c->e->id);
	prom_escape(b, c->e->name);
	md__sbuf_printf(b, "\"");
}

static void prom_group(const struct md__metric *m, const struct md__metric_ctx *c,
		       struct md__sbuf *b)
{
	const struct md__metric_group *g = m->group;
	char name[64];
	for (int k = g->first; k < g->end; k++) {
		if (g->shown && !g->shown(c, k, 0))
			continue;
		g->name(c, k, name, sizeof(name));
		prom_open(m, c, b);
		md__sbuf_printf(b, "%s%s=\"%s\"} %llu\n", m->scope == MD__M_ENGINE ? "," : "",
				g->label, name, (unsigned long long)g->value(c, k));
	}
}

static void prom_summary(const struct md__metric *m, const struct md__metric_ctx *c,
			 struct md__sbuf *b)
{
	const struct md_lathist *h = m->hist(c);
	md__sbuf_printf(b, "%s{quantile=\"0.5\"} %.9f\n", m->prom,
			(double)md_lathist_quantile(h, 0.50) / 1e9);
	md__sbuf_printf(b, "%s{quantile=\"0.99\"} %.9f\n", m->prom,
			(double)md_lathist_quantile(h, 0.99) / 1e9);
	md__sbuf_printf(b, "%s_sum %.9f\n", m->prom, (double)h->sum / 1e9);
	md__sbuf_printf(b, "%s_count %llu\n", m->prom, (unsigned long long)h->count);
}

static void prom_sample(const struct md__metric *m, const struct md__metric_ctx *c,
			struct md__sbuf *b)
{
	switch (m->kind) {
	case MD__M_GROUP:
		prom_group(m, c, b);
		return;
	case MD__M_LATENCY:
		prom_summary(m, c, b);
		return;
	default:
		break;
	}
	if (m->scope == MD__M_ENGINE) {
		prom_open(m, c, b);
		md__sbuf_printf(b, "} ");
	} else {
		md__sbuf_printf(b, "%s ", m->prom);
	}
	if (m->kind == MD__M_UPTIME)
		md__sbuf_printf(b, "%.3f\n", (double)m->get(c) / 1e9);
	else if (m->kind == MD__M_NS)
		md__sbuf_printf(b, "%.9f\n", (double)m->get(c) / 1e9);
	else
		md__sbuf_printf(b, "%llu\n", (unsigned long long)m->get(c));
}

static void prom_family(const struct md__metric *m, const struct md__metrics_view *v,
			struct md__sbuf *b)
{
	struct md__metric_ctx c = { v->d, NULL, NULL };
	md__sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", m->prom, m->help, m->prom,
			m->prom_type);
	if (m->scope == MD__M_DAEMON) {
		prom_sample(m, &c, b);
		return;
	}
	for (size_t i = 0; i < v->n; i++) {
		c.e = v->peers[i];
		c.st = &v->st[i];
		prom_sample(m, &c, b);
	}
}

void md__metrics_prom(const struct md__metrics_view *v, struct md__sbuf *b)
{
	for (unsigned at = 1; at <= md__metrics_n; at++)
		for (size_t i = 0; i < md__metrics_n; i++)
			if (md__metrics[i].prom && md__metrics[i].prom_at == at)
				prom_family(&md__metrics[i], v, b);
}
