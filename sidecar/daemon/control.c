/*
 * control.c — operator commands on the control socket (memdecayctl's other
 * half).  Each command validates everything before changing anything, so a
 * refused request leaves the daemon exactly as it was.  Bodies are
 * human-readable text, or JSON with --json; framing is in ctl_parse.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl_parse.h"
#include "daemon.h"
#include "log.h"
#include "memdecay_clock.h"
#include "metrics.h"

/* The connection whose request runs now (one thread), NULL for in-process
 * callers (tests, fuzzers), which count as operators.  A peer that is not an
 * operator (daemon uid or --operator-group) sees and tunes only engines of its
 * own uid: docs/reliability.md, "Peers". */
static const struct md__conn *cur_conn;

static int is_admin(void)
{
	return !cur_conn || cur_conn->admin;
}

static int visible(const struct md__peer *e)
{
	return is_admin() || e->uid == cur_conn->uid;
}

int md__daemon_apply_params(struct md__daemon *d, const struct md__params *p)
{
	md__host_set_params(d->host, p);
	md__peers_publish_params(d);
	d->dirty = 1;
	return 0;
}

static void frame_ok(struct md__sbuf *reply, const struct md__sbuf *body)
{
	md__sbuf_printf(reply, "OK %zu\n", body->len);
	if (body->len)
		md__sbuf_printf(reply, "%.*s", (int)body->len, body->p);
	if (body->oom)
		reply->oom = 1;
}

static void frame_err(struct md__sbuf *reply, const char *msg)
{
	/* one line, always */
	md__sbuf_printf(reply, "ERR ");
	for (const char *s = msg; *s; s++)
		md__sbuf_printf(reply, "%c", (*s == '\n' || *s == '\r') ? ' ' : *s);
	md__sbuf_printf(reply, "\n");
}

/* A value that reads as a finite number goes to JSON bare, else quoted. */
static void json_value(struct md__sbuf *b, const char *v)
{
	char *end = NULL;
	double x = strtod(v, &end);
	if (*v && end && !*end && isfinite(x) && v[0] != '+' && v[0] != '.' &&
	    strspn(v, "0123456789.-eE") == strlen(v))
		md__sbuf_printf(b, "%s", v);
	else if (!strcmp(v, "true") || !strcmp(v, "false"))
		md__sbuf_printf(b, "%s", v);
	else
		md__sbuf_json_str(b, v);
}

struct visit_ctx {
	struct md__sbuf *b;
	int json;
	int first;
};

static void visit_key(const char *key, const char *value, void *ud)
{
	struct visit_ctx *v = ud;
	if (v->json) {
		md__sbuf_printf(v->b, "%s", v->first ? "" : ",");
		md__sbuf_json_str(v->b, key);
		md__sbuf_printf(v->b, ":");
		json_value(v->b, value);
	} else {
		md__sbuf_printf(v->b, "%s = %s\n", key, value);
	}
	v->first = 0;
}

static int cmd_get(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b, char *err,
		   size_t errlen)
{
	if (r->argc == 0) {
		struct visit_ctx v = { b, r->json, 1 };
		if (r->json)
			md__sbuf_printf(b, "{");
		md__params_foreach(md__daemon_params(d), visit_key, &v);
		if (r->json)
			md__sbuf_printf(b, "}\n");
		return 0;
	}
	char val[512];
	if (md__params_get(md__daemon_params(d), r->argv[0], val, sizeof(val)) < 0) {
		snprintf(err, errlen, "unknown key '%.100s'", r->argv[0]);
		return -ENOENT;
	}
	if (r->json) {
		md__sbuf_printf(b, "{");
		md__sbuf_json_str(b, r->argv[0]);
		md__sbuf_printf(b, ":");
		json_value(b, val);
		md__sbuf_printf(b, "}\n");
	} else {
		md__sbuf_printf(b, "%s\n", val);
	}
	return 0;
}

static int set_items(struct md__daemon *d, const char *const *items, size_t n, char *err,
		     size_t errlen)
{
	struct md__params p = *md__daemon_params(d);
	int rc = md__params_set_many(&p, items, n, err, errlen);
	if (rc < 0)
		return rc;
	md__daemon_apply_params(d, &p);
	for (size_t i = 0; i < n; i++)
		md__info("control: set %s", items[i]);
	return 0;
}

static int cmd_set(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b, char *err,
		   size_t errlen)
{
	int rc = set_items(d, (const char *const *)r->argv, (size_t)r->argc, err, errlen);
	if (rc < 0)
		return rc;
	if (r->json)
		md__sbuf_printf(b, "{\"applied\":%d}\n", r->argc);
	else
		md__sbuf_printf(b, "applied %d key%s\n", r->argc, r->argc == 1 ? "" : "s");
	return 0;
}

static struct md__peer *need_engine(struct md__daemon *d, const char *s, char *err,
				      size_t errlen)
{
	struct md__peer *e = NULL;
	if (is_admin()) {
		e = md__peer_lookup(d, s);
	} else {
		/* the same rule among this peer's own engines only: another uid's
		 * engine reads as absent */
		uint64_t id;
		if (md__parse_u64(s, &id) == 0 && id <= UINT32_MAX &&
		    (e = md__peer_find(d, (uint32_t)id)) && !visible(e))
			e = NULL;
		if (!e) {
			for (struct md__peer *k = d->engines; k; k = k->next) {
				if (!visible(k) || strcmp(k->name, s))
					continue;
				if (e) {
					e = NULL;
					break;
				}
				e = k;
			}
		}
	}
	if (!e)
		snprintf(err, errlen, "no attached engine '%.64s' (or the name is ambiguous: use the id)",
			 s);
	return e;
}

static int engine_opts_apply(struct md__daemon *d, struct md__peer *e,
			     const struct md__engine_opts *o, char *err, size_t errlen)
{
	int rc = md__host_engine_set_opts(d->host, e->id, o);
	if (rc < 0) {
		snprintf(err, errlen, "engine %u: options refused: %s", e->id, strerror(-rc));
		return rc;
	}
	md__peer_publish_params(d, e);
	d->dirty = 1;
	return 0;
}

/* "policy" with no name: the default policy and every name the policy table
 * knows, for clients that check a name before they send it (the vLLM plugin's
 * API server does, docs/vllm.md "Bad requests"). */
static int policy_list(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b,
		       char *err, size_t errlen)
{
	if (r->engine) {
		snprintf(err, errlen, "policy --engine E needs a policy NAME");
		return -EINVAL;
	}
	const char *dflt = md__policy_name(md__daemon_params(d)->policy);
	md__sbuf_printf(b, r->json ? "{\"policy\":\"%s\",\"policies\":[" : "default %s\npolicies", dflt);
	for (uint32_t i = 0; i < MD_POLICY_COUNT; i++)
		md__sbuf_printf(b, r->json ? "%s\"%s\"" : "%s%s", r->json && i ? "," : " ",
				md__policy_name(i));
	md__sbuf_printf(b, r->json ? "]}\n" : "\n");
	return 0;
}

static int cmd_policy(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b,
		      char *err, size_t errlen)
{
	if (r->argc == 0)
		return policy_list(d, r, b, err, errlen);
	const char *name = r->argv[0];
	int pol = md__policy_from_name(name);
	if (pol < 0) {
		char names[256];
		md__policy_names(names, sizeof(names));
		snprintf(err, errlen, "unknown policy '%.40s' (%s)", name, names);
		return -EINVAL;
	}
	if (r->engine) {
		struct md__peer *e = need_engine(d, r->engine, err, errlen);
		if (!e)
			return -ENOENT;
		struct md__engine_opts o;
		md__host_engine_get_opts(d->host, e->id, &o);
		o.policy = pol;
		int rc = engine_opts_apply(d, e, &o, err, errlen);
		if (rc < 0)
			return rc;
		md__info("control: engine %u (%s) policy %s", e->id, e->name, name);
		md__sbuf_printf(b, r->json ? "{\"engine\":%u,\"policy\":\"%s\"}\n"
					   : "engine %u policy %s\n", e->id, name);
		return 0;
	}
	char item[64];
	snprintf(item, sizeof(item), "policy=%s", name);
	const char *items[] = { item };
	int rc = set_items(d, items, 1, err, errlen);
	if (rc < 0)
		return rc;
	md__sbuf_printf(b, r->json ? "{\"policy\":\"%s\"}\n" : "default policy %s\n", name);
	return 0;
}

static int cmd_budget(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b,
		      char *err, size_t errlen)
{
	if (r->engine) {
		struct md__peer *e = need_engine(d, r->engine, err, errlen);
		if (!e)
			return -ENOENT;
		if (r->number > INT64_MAX) {
			snprintf(err, errlen, "budget %s: N is too large", r->scope);
			return -EINVAL;
		}
		struct md__engine_opts o;
		md__host_engine_get_opts(d->host, e->id, &o);
		if (!strcmp(r->scope, "engine_pages"))
			o.budget_engine_pages = (int64_t)r->number;
		else
			o.budget_sequence_tokens = (int64_t)r->number;
		int rc = engine_opts_apply(d, e, &o, err, errlen);
		if (rc < 0)
			return rc;
		md__info("control: engine %u (%s) budget %s %llu", e->id, e->name, r->scope,
			 (unsigned long long)r->number);
		md__sbuf_printf(b, r->json ? "{\"engine\":%u,\"%s\":%llu}\n" : "engine %u budget %s %llu\n",
				e->id, r->scope, (unsigned long long)r->number);
		return 0;
	}
	char item[96];
	snprintf(item, sizeof(item), "budget.%s=%llu", r->scope, (unsigned long long)r->number);
	const char *items[] = { item };
	int rc = set_items(d, items, 1, err, errlen);
	if (rc < 0)
		return rc;
	md__sbuf_printf(b, r->json ? "{\"%s\":%llu}\n" : "budget %s %llu\n", r->scope,
			(unsigned long long)r->number);
	return 0;
}

/* Engines in attach order (the list is newest first). */
static size_t engines_in_order(struct md__daemon *d, struct md__peer **out, size_t cap)
{
	size_t n = 0;
	(void)d;
	for (struct md__peer *e = d->engines; e && n < cap; e = e->next)
		if (visible(e))
			out[n++] = e;
	for (size_t i = 0; i < n / 2; i++) {
		struct md__peer *t = out[i];
		out[i] = out[n - 1 - i];
		out[n - 1 - i] = t;
	}
	return n;
}

#define ENGINES_MAX 1024

static double engine_weight(struct md__daemon *d, const struct md__peer *e)
{
	struct md__engine_opts o;
	if (md__host_engine_get_opts(d->host, e->id, &o) < 0)
		return 0;
	return o.weight;
}

static int cmd_weight(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b,
		      char *err, size_t errlen)
{
	struct md__peer *e = need_engine(d, r->engine, err, errlen);
	if (!e)
		return -ENOENT;
	struct md__engine_opts o;
	md__host_engine_get_opts(d->host, e->id, &o);
	o.weight = r->weight;
	int rc = engine_opts_apply(d, e, &o, err, errlen);
	if (rc < 0)
		return rc;
	md__peers_publish_params(d); /* every engine's global share moved */
	md__info("control: engine %u (%s) weight %g", e->id, e->name, r->weight);
	md__sbuf_printf(b, r->json ? "{\"engine\":%u,\"weight\":%.9g}\n" : "engine %u weight %g\n",
			e->id, r->weight);
	return 0;
}

static int cmd_engines(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b)
{
	struct md__peer *list[ENGINES_MAX];
	size_t n = engines_in_order(d, list, ENGINES_MAX);
	uint64_t now = md_now_ns();
	if (r->json)
		md__sbuf_printf(b, "{\"engines\":[");
	else
		md__sbuf_printf(b, "%-4s %-20s %-8s %-14s %10s %10s %10s %3s %8s %9s\n", "ID", "NAME",
				"PID", "POLICY", "PAGES", "BUDGET", "CAPACITY", "P", "MAX_SEQS",
				"ATTACHED");
	for (size_t i = 0; i < n; i++) {
		struct md__peer *e = list[i];
		struct md__engine_stats st;
		memset(&st, 0, sizeof(st));
		md__host_engine_stats(d->host, e->id, &st);
		double up = (double)(now - e->attach_ns) / 1e9;
		if (r->json) {
			md__sbuf_printf(b, "%s{\"id\":%u,\"name\":", i ? "," : "", e->id);
			md__sbuf_json_str(b, e->name);
			md__sbuf_printf(b,
					",\"pid\":%d,\"uid\":%u,\"policy\":\"%s\",\"pages_live\":%llu,"
					"\"budget_engine_pages\":%llu,\"page_capacity\":%u,\"page_tokens\":%u,"
					"\"max_seqs\":%u,\"tp_rank\":%u,\"tp_size\":%u,\"weight\":%.9g,"
					"\"attached_s\":%.3f}",
					(int)e->pid, (unsigned)e->uid, md__policy_name(st.policy),
					(unsigned long long)st.pages_live,
					(unsigned long long)st.budget_engine_pages, e->page_capacity,
					e->page_tokens, e->max_seqs, e->tp_rank, e->tp_size,
					engine_weight(d, e), up);
		} else {
			md__sbuf_printf(b, "%-4u %-20s %-8d %-14s %10llu %10llu %10u %3u %8u %8.1fs\n",
					e->id, e->name, (int)e->pid, md__policy_name(st.policy),
					(unsigned long long)st.pages_live,
					(unsigned long long)st.budget_engine_pages, e->page_capacity,
					e->page_tokens, e->max_seqs, up);
		}
	}
	if (r->json)
		md__sbuf_printf(b, "]}\n");
	else if (!n)
		md__sbuf_printf(b, "(no engines attached)\n");
	return 0;
}

/* The engines a view shows, with the host's statistics of each. */
static int metrics_view(struct md__daemon *d, struct md__peer *only, struct md__peer **list,
			struct md__metrics_view *v)
{
	size_t n = engines_in_order(d, list, ENGINES_MAX);
	if (only) {
		list[0] = only;
		n = 1;
	}
	struct md__engine_stats *st = calloc(n ? n : 1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		md__host_engine_stats(d->host, list[i]->id, &st[i]);
	*v = (struct md__metrics_view){ d, list, st, n };
	return 0;
}

static int cmd_stats(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b, char *err,
		     size_t errlen)
{
	struct md__peer *only = NULL;
	if (r->engine && !(only = need_engine(d, r->engine, err, errlen)))
		return -ENOENT;
	struct md__peer *list[ENGINES_MAX];
	struct md__metrics_view v;
	if (metrics_view(d, only, list, &v) < 0) {
		b->oom = 1;
		return -ENOMEM;
	}
	if (r->json)
		md__metrics_json(&v, b);
	else
		md__metrics_text(&v, b);
	free((void *)v.st);
	return 0;
}

static int cmd_top(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b, char *err,
		   size_t errlen)
{
	uint32_t id = UINT32_MAX;
	if (r->engine) {
		struct md__peer *e = need_engine(d, r->engine, err, errlen);
		if (!e)
			return -ENOENT;
		id = e->id;
	}
	struct md__top_entry *t = calloc(r->number, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	size_t n = md__host_top(d->host, id, t, r->number);
	if (r->json)
		md__sbuf_printf(b, "{\"pages\":[");
	else
		md__sbuf_printf(b, "%-6s %-6s %-8s %-6s %-10s %-4s %-12s %12s %12s %12s\n", "ENGINE",
				"SEQ", "SLOT", "GEN", "FIRST_POS", "TOK", "REGION", "SCORE", "DECAY",
				"ATTN");
	for (size_t i = 0; i < n; i++) {
		char rn[64];
		md__metrics_region_name(d, t[i].dominant_region & 0xf, rn, sizeof(rn));
		if (r->json) {
			md__sbuf_printf(b, "%s{\"engine\":%u,\"seq\":%u,\"slot\":%u,\"gen\":%u,"
					   "\"first_pos\":%llu,\"n_tokens\":%u,\"region\":",
					i ? "," : "", t[i].engine_id, t[i].seq, t[i].slot, t[i].gen,
					(unsigned long long)t[i].first_pos, t[i].n_tokens);
			md__sbuf_json_str(b, rn);
			md__sbuf_printf(b, ",\"score\":%.9g,\"decay_term\":%.9g,\"attn_term\":%.9g}",
					t[i].score, t[i].decay_term, t[i].attn_term);
		} else {
			md__sbuf_printf(b, "%-6u %-6u %-8u %-6u %-10llu %-4u %-12s %12.6g %12.6g %12.6g\n",
					t[i].engine_id, t[i].seq, t[i].slot, t[i].gen,
					(unsigned long long)t[i].first_pos, t[i].n_tokens, rn,
					t[i].score, t[i].decay_term, t[i].attn_term);
		}
	}
	if (r->json)
		md__sbuf_printf(b, "]}\n");
	free(t);
	return 0;
}

/* Every live sequence of the engines this peer may see: an engine that keeps a
 * conversation's cache between requests keeps its sequence, so these are its
 * sessions (docs/operations.md, "Sessions").  A 1.3 engine says which are
 * retained between turns and tags each with its session id's first bytes. */
static int cmd_sessions(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b,
			char *err, size_t errlen)
{
	struct md__peer *only = NULL;
	if (r->engine && !(only = need_engine(d, r->engine, err, errlen)))
		return -ENOENT;
	struct md__seq_info *s = malloc(MD__SESSIONS_MAX * sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	uint64_t now = md_now_ns();
	size_t shown = 0, total = 0;
	if (r->json)
		md__sbuf_printf(b, "{\"sessions\":[");
	else
		md__sbuf_printf(b, "%-6s %-16s %-6s %-8s %-8s %10s %10s %10s %6s %6s %6s %7s %10s %9s\n",
				"ENGINE", "NAME", "SEQ", "STATE", "SESSION", "TOKENS", "EVICTED",
				"SPAN", "PAGES", "TIER", "TURNS", "RECALLS", "CLOCK", "IDLE_S");
	for (struct md__peer *e = d->engines; e; e = e->next) {
		if (!visible(e) || (only && e != only))
			continue;
		size_t room = MD__SESSIONS_MAX - shown;
		size_t n = md__host_seqs(d->host, e->id, now, s, room);
		total += n;
		if (n > room)
			n = room;
		for (size_t i = 0; i < n; i++, shown++) {
			const struct md__seq_info *q = &s[i];
			uint64_t evicted = q->span_tokens - q->tokens_live;
			double idle = q->idle_ns == UINT64_MAX ? -1.0 : (double)q->idle_ns / 1e9;
			const char *state = q->state == MD_SEQ_RETAINED ? "retained" : "running";
			char tag[MD_SEQ_SESSION_LEN + 1]; /* the host checked: printable, NULs */
			memcpy(tag, q->session, MD_SEQ_SESSION_LEN);
			tag[MD_SEQ_SESSION_LEN] = 0;
			if (r->json) {
				md__sbuf_printf(b, "%s{\"engine\":%u,\"name\":", shown ? "," : "",
						e->id);
				md__sbuf_json_str(b, e->name);
				md__sbuf_printf(b, ",\"seq\":%u,\"tokens\":%llu,\"evicted_tokens\":%llu,"
						   "\"span_tokens\":%llu,\"pages\":%u,\"turns\":%u,"
						   "\"clock\":%llu,\"idle_s\":%.3f,\"budget_tokens\":%llu,"
						   "\"own_options\":%s,\"policy\":",
						q->seq, (unsigned long long)q->tokens_live,
						(unsigned long long)evicted,
						(unsigned long long)q->span_tokens, q->pages, q->turns,
						(unsigned long long)q->clock, idle,
						(unsigned long long)q->budget_tokens,
						q->own_options ? "true" : "false");
				md__sbuf_json_str(b, md__policy_name(q->policy));
				md__sbuf_printf(b, ",\"state\":\"%s\",\"session\":", state);
				if (tag[0])
					md__sbuf_json_str(b, tag);
				else
					md__sbuf_printf(b, "null");
				md__sbuf_printf(b, ",\"tier_pages\":%u,\"recalls\":%u}", q->tier_pages,
						q->recalls);
			} else {
				md__sbuf_printf(b, "%-6u %-16.16s %-6u %-8s %-8s %10llu %10llu %10llu %6u %6u "
						   "%6u %7u %10llu %9.1f\n",
						e->id, e->name, q->seq, state, tag[0] ? tag : "-",
						(unsigned long long)q->tokens_live,
						(unsigned long long)evicted,
						(unsigned long long)q->span_tokens, q->pages, q->tier_pages,
						q->turns, q->recalls, (unsigned long long)q->clock, idle);
			}
		}
	}
	free(s);
	if (r->json)
		md__sbuf_printf(b, "],\"total\":%zu,\"shown\":%zu}\n", total, shown);
	else if (total > shown)
		md__sbuf_printf(b, "(%zu more not shown: at most %u rows)\n", total - shown,
				MD__SESSIONS_MAX);
	return 0;
}

static int cmd_metrics(struct md__daemon *d, struct md__sbuf *b)
{
	struct md__peer *list[ENGINES_MAX];
	struct md__metrics_view v;
	if (metrics_view(d, NULL, list, &v) < 0) {
		b->oom = 1;
		return -ENOMEM;
	}
	md__metrics_prom(&v, b);
	free((void *)v.st);
	return 0;
}

int md__control_metrics(struct md__daemon *d, struct md__sbuf *b)
{
	const struct md__conn *saved = cur_conn;
	cur_conn = NULL; /* no peer: every engine is visible */
	int rc = cmd_metrics(d, b);
	cur_conn = saved;
	return rc;
}

static void save_line(const char *key, const char *value, void *ud)
{
	fprintf((FILE *)ud, "%s = %s\n", key, value);
}

/* Writes the configuration as NAME inside the directory dirfd: a new file
 * (O_EXCL, O_NOFOLLOW, 0600) under a temporary name, then renameat over
 * NAME, which replaces a symlink there instead of following it. */
static int save_into(const struct md__params *p, int dirfd, const char *name, char *err,
		     size_t errlen)
{
	static unsigned counter;
	char tmp[96];
	snprintf(tmp, sizeof(tmp), ".memdecayd-save.%d.%u", (int)getpid(), ++counter);
	int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "save: cannot create a file next to %.200s: %s", name,
			 strerror(e));
		return -e;
	}
	FILE *f = fdopen(fd, "w");
	if (!f) {
		int e = errno;
		close(fd);
		unlinkat(dirfd, tmp, 0);
		snprintf(err, errlen, "save: %s", strerror(e));
		return -e;
	}
	fprintf(f, "# memdecayd configuration (written by save; key = value)\n");
	md__params_foreach(p, save_line, f);
	int bad = fflush(f) != 0 || ferror(f) || fsync(fd) != 0;
	if (fclose(f) != 0 || bad) {
		unlinkat(dirfd, tmp, 0);
		snprintf(err, errlen, "save: writing %.200s failed", name);
		return -EIO;
	}
	if (renameat(dirfd, tmp, dirfd, name) != 0) {
		int e = errno;
		unlinkat(dirfd, tmp, 0);
		snprintf(err, errlen, "save: %.200s: %s", name, strerror(e));
		return -e;
	}
	return 0;
}

/* `save` writes only the --config file, or FILE inside --save-dir (FILE is a
 * plain name, or a path whose directory is that one), so no peer can have the
 * daemon write where it could not (docs/reliability.md, "Peers"). */
static int cmd_save(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b, char *err,
		    size_t errlen)
{
	char dir[PATH_MAX], name[PATH_MAX];
	const char *shown;
	if (cur_conn && cur_conn->uid != geteuid()) {
		/* not even --operator-group: the file is written with the daemon's uid */
		snprintf(err, errlen, "save needs the daemon's uid");
		return -EPERM;
	}
	if (!r->argc) {
		if (!d->have_config) {
			snprintf(err, errlen,
				 "save: no FILE given and memdecayd was started without --config");
			return -EINVAL;
		}
		const char *slash = strrchr(d->config_path, '/');
		if (!slash) {
			snprintf(dir, sizeof(dir), ".");
			snprintf(name, sizeof(name), "%s", d->config_path);
		} else {
			snprintf(dir, sizeof(dir), "%.*s", (int)(slash - d->config_path) + (slash == d->config_path),
				 d->config_path);
			snprintf(name, sizeof(name), "%s", slash + 1);
		}
		shown = d->config_path;
	} else {
		const char *arg = r->argv[0];
		if (!d->save_dir[0]) {
			snprintf(err, errlen, "save FILE: memdecayd was started without --save-dir "
					      "(only the --config file can be saved)");
			return -EPERM;
		}
		const char *slash = strrchr(arg, '/');
		const char *base = slash ? slash + 1 : arg;
		if (slash) {
			char parent[PATH_MAX], real[PATH_MAX];
			snprintf(parent, sizeof(parent), "%.*s", (int)(slash - arg) + (slash == arg), arg);
			if (!realpath(parent, real) || strcmp(real, d->save_dir)) {
				snprintf(err, errlen, "save: %.200s is not inside --save-dir %.200s", arg,
					 d->save_dir);
				return -EPERM;
			}
		}
		if (!*base || base[0] == '.' || strlen(base) >= sizeof(name)) {
			snprintf(err, errlen, "save: '%.100s' is not a plain file name", base);
			return -EINVAL;
		}
		snprintf(dir, sizeof(dir), "%s", d->save_dir);
		snprintf(name, sizeof(name), "%s", base);
		shown = arg;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		int e = errno;
		snprintf(err, errlen, "save: %.200s: %s", dir, strerror(e));
		return -e;
	}
	int rc = save_into(md__daemon_params(d), dfd, name, err, errlen);
	close(dfd);
	if (rc < 0)
		return rc;
	md__info("control: configuration saved to %s/%s", dir, name);
	if (r->json) {
		md__sbuf_printf(b, "{\"saved\":");
		md__sbuf_json_str(b, shown);
		md__sbuf_printf(b, "}\n");
	} else {
		md__sbuf_printf(b, "saved %s\n", shown);
	}
	return 0;
}

/* `calibrate [--json] [--apply]`: the estimate over every engine's live and
 * finished tokens; --apply goes through the same all-or-nothing path as
 * `set` (docs/calibration.md). */
static int calibrate(struct md__daemon *d, struct md__ctl_req *r, struct md__sbuf *b, char *err,
		     size_t errlen)
{
	if (!d->calib) {
		snprintf(err, errlen, "calibrate: calibration is not running in this memdecayd");
		return -ENOSYS;
	}
	const struct md__calib_engine **engines = calloc(d->n_engines ? d->n_engines : 1,
							 sizeof(*engines));
	if (!engines) {
		snprintf(err, errlen, "calibrate: out of memory");
		return -ENOMEM;
	}
	size_t n = 0;
	for (struct md__peer *e = d->engines; e && n < d->n_engines; e = e->next)
		engines[n++] = &e->calib;
	md__calib_names names;
	for (unsigned k = 0; k < MD_REGIONS_MAX; k++)
		snprintf(names[k], sizeof(names[k]), "%s", md__daemon_params(d)->region_name[k]);
	char items[MD_REGIONS_MAX][128];
	int rc = md__calib_live_report(d->calib, engines, n, (const char(*)[MD__JOURNAL_NAME_LEN])names,
				       r->json, b, r->apply ? items : NULL, MD_REGIONS_MAX, err,
				       errlen);
	free(engines);
	if (rc < 0)
		return rc;
	if (!r->apply || rc == 0)
		return 0;
	const char *list[MD_REGIONS_MAX];
	for (int i = 0; i < rc; i++)
		list[i] = items[i];
	struct md__params p = *md__daemon_params(d);
	int src = md__params_set_many(&p, list, (size_t)rc, err, errlen);
	if (src < 0)
		return src; /* nothing applied */
	md__daemon_apply_params(d, &p);
	for (int i = 0; i < rc; i++)
		md__info("control: calibrate set %s", items[i]);
	return 0;
}

/* Which requests a peer that is not an operator may make: 0, or -EPERM. */
static int peer_may(const struct md__ctl_req *r, char *err, size_t errlen)
{
	if (is_admin())
		return 0;
	switch (r->cmd) {
	case MD__CTL_GET:
	case MD__CTL_PING:
	case MD__CTL_ENGINES:
	case MD__CTL_STATS:
	case MD__CTL_SESSIONS:
	case MD__CTL_METRICS:
		return 0; /* engine lists are cut to the peer's own */
	case MD__CTL_TOP:
	case MD__CTL_POLICY:
	case MD__CTL_BUDGET:
		if (r->engine)
			return 0; /* need_engine finds only the peer's own */
		snprintf(err, errlen, "%s without --engine concerns every uid's engines: it needs the "
			 "daemon's uid or --operator-group (name one of your engines with --engine)",
			 r->cmd_name);
		return -EPERM;
	case MD__CTL_SAVE:
		snprintf(err, errlen, "save needs the daemon's uid");
		return -EPERM;
	default:
		snprintf(err, errlen, "%s needs the daemon's uid or --operator-group", r->cmd_name);
		return -EPERM;
	}
}

void md__control_exec(struct md__daemon *d, struct md__conn *c, char *line, struct md__sbuf *reply)
{
	struct md__ctl_req r;
	char err[512] = "";
	struct md__sbuf body = { 0 };
	int rc;
	d->ctl_requests++;
	cur_conn = c;
	rc = md__ctl_parse(line, &r, err, sizeof(err));
	if (rc == 0)
		rc = peer_may(&r, err, sizeof(err));
	if (rc == 0) {
		switch (r.cmd) {
		case MD__CTL_GET: rc = cmd_get(d, &r, &body, err, sizeof(err)); break;
		case MD__CTL_SET: rc = cmd_set(d, &r, &body, err, sizeof(err)); break;
		case MD__CTL_POLICY: rc = cmd_policy(d, &r, &body, err, sizeof(err)); break;
		case MD__CTL_BUDGET: rc = cmd_budget(d, &r, &body, err, sizeof(err)); break;
		case MD__CTL_ENGINES: rc = cmd_engines(d, &r, &body); break;
		case MD__CTL_STATS: rc = cmd_stats(d, &r, &body, err, sizeof(err)); break;
		case MD__CTL_TOP: rc = cmd_top(d, &r, &body, err, sizeof(err)); break;
		case MD__CTL_SESSIONS: rc = cmd_sessions(d, &r, &body, err, sizeof(err)); break;
		case MD__CTL_METRICS: rc = cmd_metrics(d, &body); break;
		case MD__CTL_SAVE: rc = cmd_save(d, &r, &body, err, sizeof(err)); break;
		case MD__CTL_CALIBRATE: rc = calibrate(d, &r, &body, err, sizeof(err)); break;
		case MD__CTL_WEIGHT: rc = cmd_weight(d, &r, &body, err, sizeof(err)); break;
		case MD__CTL_PING:
			md__sbuf_printf(&body, r.json ? "{\"instance\":%llu,\"backend\":\"%s\"}\n"
						       : "pong instance=%llu backend=%s\n",
					(unsigned long long)d->instance_id, md__loop_backend_name(d->loop));
			rc = 0;
			break;
		}
	}
	if (rc < 0) {
		d->ctl_errors++;
		if (!err[0])
			snprintf(err, sizeof(err), "%s", strerror(-rc));
		frame_err(reply, err);
		uint64_t held;
		if (rc == -EPERM && md__ratelimit_ok(&d->refuse_rl, md_now_ns(), &held))
			md__info("control request from pid %d uid %u refused: %s (%llu refusal lines "
				 "suppressed before this one)", c ? (int)c->pid : -1,
				 c ? (unsigned)c->uid : 0, err, (unsigned long long)held);
		else if (rc != -EPERM)
			md__debug("control request from pid %d refused: %s", c ? (int)c->pid : -1, err);
	} else {
		frame_ok(reply, &body);
	}
	md__sbuf_free(&body);
	cur_conn = NULL;
}
