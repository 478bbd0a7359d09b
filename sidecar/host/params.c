/*
 * params.c — the key registry behind params.h: one table row per key (name,
 * parse, format), so `set`, `get`, `foreach` and `save` cannot disagree.
 * Region keys are generated from the region names (built-in and region.<id>.name).
 * Every setter validates before writing; set_many / load work on a copy, so a
 * bad item leaves the caller's struct untouched.
 */
#include "params.h"
#include "policy.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void policy_key_defaults(struct md__params *p);

void md__params_defaults(struct md__params *p)
{
	memset(p, 0, sizeof(*p));
	static const double base[MD_REGION_BUILTIN_COUNT] = {1.0, 0.9, 0.7, 0.7, 0.6, 0.6, 0.8, 0.3};
	static const double lambda[MD_REGION_BUILTIN_COUNT] = {0.0, 0.01, 0.05, 0.05,
							       0.05, 0.08, 0.02, 0.2};
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++) {
		if (r < MD_REGION_BUILTIN_COUNT) {
			p->base[r] = base[r];
			p->lambda[r] = lambda[r];
			snprintf(p->region_name[r], MD__REGION_NAME_MAX, "%s", md_region_builtin_name(r));
		} else {
			/* extra regions start like dialogue until configured */
			p->base[r] = 0.7;
			p->lambda[r] = 0.05;
		}
	}
	p->pinned_mask = 1u << MD_REGION_SYSTEM;
	p->alpha = 1.0;
	p->tau = 0.02;
	p->beta = 0.9;
	p->norm = MD_NORM_RAW;
	p->policy = MD_POLICY_MEMDECAY;
	p->protect_recent = 1;
	policy_key_defaults(p);
	p->low_watermark = 1.0;
	p->tier_pages = 0;
	p->recall_margin = 0.1;
	p->recall_max_per_pass = 4;
	p->heartbeat_timeout_ms = 3000;
	p->violation_limit = 1000;
	p->nap_ms = 50;
	p->max_engines = 256;
	p->max_engines_per_uid = 64;
	p->max_segment_bytes_per_uid = 4ull << 30;
	p->max_engine_weight = 1.0;
}

int md__region_from_name(const struct md__params *p, const char *name)
{
	if (!name || !*name)
		return -1;
	for (int r = 0; r < (int)MD_REGIONS_MAX; r++)
		if (p->region_name[r][0] && strcmp(p->region_name[r], name) == 0)
			return r;
	return -1;
}

/* ---- value parsers: 0 or -EINVAL with a message naming key and value ---- */

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static int parse_double(const char *key, const char *v, double lo, double hi, int lo_open,
			int hi_open, double *out, char *err, size_t errlen)
{
	char *end;
	errno = 0;
	while (isspace((unsigned char)*v))
		v++;
	double x = strtod(v, &end);
	if (end == v || *end != '\0')
		return fail(err, errlen, "%s: '%s' is not a number", key, v);
	if (!isfinite(x))
		return fail(err, errlen, "%s: '%s' is not finite", key, v);
	if ((lo_open ? x <= lo : x < lo) || (hi_open ? x >= hi : x > hi))
		return fail(err, errlen, "%s: '%s' is out of range %c%g, %g%c", key, v,
			    lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
	*out = x;
	return 0;
}

static int parse_u64(const char *key, const char *v, uint64_t lo, uint64_t hi, uint64_t *out,
		     char *err, size_t errlen)
{
	const char *s = v;
	while (isspace((unsigned char)*s))
		s++;
	if (!isdigit((unsigned char)*s))
		return fail(err, errlen, "%s: '%s' is not a non-negative integer", key, v);
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (*end != '\0')
		return fail(err, errlen, "%s: '%s' is not a non-negative integer", key, v);
	if (errno == ERANGE || x < lo || x > hi)
		return fail(err, errlen, "%s: '%s' is out of range [%llu, %llu]", key, v,
			    (unsigned long long)lo, (unsigned long long)hi);
	*out = x;
	return 0;
}

static int parse_bool(const char *key, const char *v, int *out, char *err, size_t errlen)
{
	if (!strcmp(v, "true") || !strcmp(v, "1")) {
		*out = 1;
		return 0;
	}
	if (!strcmp(v, "false") || !strcmp(v, "0")) {
		*out = 0;
		return 0;
	}
	return fail(err, errlen, "%s: '%s' is not a boolean (true|false|1|0)", key, v);
}

/* ---- the scalar key table ---- */

/* The host's own keys, in the order get and save list them; the policies'
 * keys (policy.h, each policy's .keys, in table order) come between the head
 * and the tail. */
#define OFF(f) MD__PARAM_OFF(f)
static const struct md__param_key head_keys[] = {
	{"memdecay.alpha", MD__KEY_DOUBLE, OFF(alpha), 0, 1e9, 0, 0, 0, 0, 0, 0},
	{"memdecay.tau", MD__KEY_DOUBLE, OFF(tau), 0, 1e9, 0, 0, 0, 0, 0, 0},
	{"memdecay.beta", MD__KEY_DOUBLE, OFF(beta), 0, 1, 0, 1, 0, 0, 0, 0},
	{"memdecay.norm", MD__KEY_NORM, OFF(norm), 0, 0, 0, 0, 0, 0, 0, 0},
	{"policy", MD__KEY_POLICY, OFF(policy), 0, 0, 0, 0, 0, 0, 0, 0},
	{"protect_recent", MD__KEY_U32, OFF(protect_recent), 0, 0, 0, 0, 0, 1u << 20, 0, 0},
};
static const struct md__param_key tail_keys[] = {
	{"budget.sequence_tokens", MD__KEY_U64, OFF(budget_sequence_tokens), 0, 0, 0, 0, 0, 1ull << 48, 0, 0},
	{"budget.engine_pages", MD__KEY_U64, OFF(budget_engine_pages), 0, 0, 0, 0, 0, 1ull << 48, 0, 0},
	{"budget.global_pages", MD__KEY_U64, OFF(budget_global_pages), 0, 0, 0, 0, 0, 1ull << 48, 0, 0},
	{"budget.low_watermark", MD__KEY_DOUBLE, OFF(low_watermark), 0, 1, 1, 0, 0, 0, 0, 0},
	/* the host tier (docs/tier.md): pages an engine may keep there (0: its
	 * HELLO tier_pages), the share of the displaced page's recent attention
	 * by which a tier page's estimate must exceed it, restores per engine and
	 * pass (0: recall off; bounded so that one pass stays short) */
	{"tier.pages", MD__KEY_U64, OFF(tier_pages), 0, 0, 0, 0, 0, 1ull << 48, 0, 0},
	{"recall.margin", MD__KEY_DOUBLE, OFF(recall_margin), 0, 1e9, 0, 0, 0, 0, 0, 0},
	{"recall.max_per_pass", MD__KEY_U32, OFF(recall_max_per_pass), 0, 0, 0, 0, 0, 4096, 0, 0},
	{"daemon.heartbeat_timeout_ms", MD__KEY_U32, OFF(heartbeat_timeout_ms), 0, 0, 0, 0, 1, UINT32_MAX, 0, 0},
	/* 0: never detach an engine for violations */
	{"daemon.violation_limit", MD__KEY_U32, OFF(violation_limit), 0, 0, 0, 0, 0, UINT32_MAX, 0, 0},
	/* 0: sleep on the doorbell as soon as the rings are drained */
	{"daemon.nap_ms", MD__KEY_U32, OFF(nap_ms), 0, 0, 0, 0, 0, 10000, 0, 0},
	{"daemon.max_engines", MD__KEY_U32, OFF(max_engines), 0, 0, 0, 0, 1, 65536, 0, 0},
	{"daemon.max_engines_per_uid", MD__KEY_U32, OFF(max_engines_per_uid), 0, 0, 0, 0, 1, 65536, 0, 0},
	{"daemon.max_segment_bytes_per_uid", MD__KEY_U64, OFF(max_segment_bytes_per_uid), 0, 0, 0, 0,
	 1ull << 20, 1ull << 48, 0, 0},
	/* HELLO weight=W of any engine, whatever its uid, is clamped to this */
	{"budget.max_engine_weight", MD__KEY_DOUBLE, OFF(max_engine_weight), 0, 1e6, 1, 0, 0, 0, 0, 0},
};
#define N_HEAD (sizeof(head_keys) / sizeof(head_keys[0]))
#define N_TAIL (sizeof(tail_keys) / sizeof(tail_keys[0]))

/* Every scalar key in listing order: fn(key, ud) until it returns nonzero,
 * which is returned. */
static int scalar_keys_each(int (*fn)(const struct md__param_key *k, void *ud), void *ud)
{
	int rc;
	for (size_t i = 0; i < N_HEAD; i++)
		if ((rc = fn(&head_keys[i], ud)))
			return rc;
	for (uint32_t id = 0; id < MD__POLICY_N; id++) {
		const struct md__policy *pol = md__policy_table[id];
		for (size_t i = 0; i < pol->n_keys; i++)
			if ((rc = fn(&pol->keys[i], ud)))
				return rc;
	}
	for (size_t i = 0; i < N_TAIL; i++)
		if ((rc = fn(&tail_keys[i], ud)))
			return rc;
	return 0;
}

struct key_find { const char *name; const struct md__param_key *found; };
static int key_match(const struct md__param_key *k, void *ud)
{
	struct key_find *f = ud;
	if (strcmp(k->name, f->name))
		return 0;
	f->found = k;
	return 1;
}

static const struct md__param_key *scalar_key(const char *name)
{
	struct key_find f = {name, NULL};
	scalar_keys_each(key_match, &f);
	return f.found;
}

/* the policies' keys start at their own defaults */
static int key_default(const struct md__param_key *k, void *ud)
{
	char *base = (char *)ud + k->off;
	if (k->kind == MD__KEY_DOUBLE) {
		memcpy(base, &k->dflt, sizeof(k->dflt));
	} else if (k->kind == MD__KEY_U32) {
		uint32_t y = (uint32_t)k->idflt;
		memcpy(base, &y, sizeof(y));
	} else if (k->kind == MD__KEY_U64) {
		memcpy(base, &k->idflt, sizeof(k->idflt));
	}
	return 0;
}

static void policy_key_defaults(struct md__params *p)
{
	for (uint32_t id = 0; id < MD__POLICY_N; id++) {
		const struct md__policy *pol = md__policy_table[id];
		for (size_t i = 0; i < pol->n_keys; i++)
			key_default(&pol->keys[i], p);
	}
}

static int set_scalar(struct md__params *p, const struct md__param_key *k, const char *v,
		      char *err, size_t errlen)
{
	char *base = (char *)p + k->off;
	switch (k->kind) {
	case MD__KEY_DOUBLE: {
		double x = 0;
		int rc = parse_double(k->name, v, k->lo, k->hi, k->lo_open, k->hi_open, &x, err, errlen);
		if (rc == 0)
			memcpy(base, &x, sizeof(x));
		return rc;
	}
	case MD__KEY_U32:
	case MD__KEY_U64: {
		uint64_t x = 0;
		int rc = parse_u64(k->name, v, k->ilo, k->ihi, &x, err, errlen);
		if (rc)
			return rc;
		if (k->kind == MD__KEY_U32) {
			uint32_t y = (uint32_t)x;
			memcpy(base, &y, sizeof(y));
		} else {
			memcpy(base, &x, sizeof(x));
		}
		return 0;
	}
	case MD__KEY_NORM: {
		uint32_t m;
		if (!strcmp(v, "raw"))
			m = MD_NORM_RAW;
		else if (!strcmp(v, "relative"))
			m = MD_NORM_RELATIVE;
		else
			return fail(err, errlen, "%s: '%s' is not raw|relative", k->name, v);
		memcpy(base, &m, sizeof(m));
		return 0;
	}
	case MD__KEY_POLICY: {
		int id = md__policy_from_name(v);
		if (id < 0) {
			char names[256];
			md__policy_names(names, sizeof(names));
			return fail(err, errlen, "%s: '%s' is not a policy (%s)", k->name, v, names);
		}
		uint32_t u = (uint32_t)id;
		memcpy(base, &u, sizeof(u));
		return 0;
	}
	}
	return -EINVAL;
}

static void fmt_double(char *buf, size_t len, double x)
{
	/* shortest text that reads back to the same double */
	for (int prec = 6; prec <= 17; prec++) {
		snprintf(buf, len, "%.*g", prec, x);
		if (strtod(buf, NULL) == x)
			return;
	}
}

static void get_scalar(const struct md__params *p, const struct md__param_key *k, char *buf,
		       size_t len)
{
	const char *base = (const char *)p + k->off;
	switch (k->kind) {
	case MD__KEY_DOUBLE: {
		double x;
		memcpy(&x, base, sizeof(x));
		fmt_double(buf, len, x);
		break;
	}
	case MD__KEY_U32: {
		uint32_t x;
		memcpy(&x, base, sizeof(x));
		snprintf(buf, len, "%u", x);
		break;
	}
	case MD__KEY_U64: {
		uint64_t x = 0;
		memcpy(&x, base, sizeof(x));
		snprintf(buf, len, "%llu", (unsigned long long)x);
		break;
	}
	case MD__KEY_NORM: {
		uint32_t x;
		memcpy(&x, base, sizeof(x));
		snprintf(buf, len, "%s", x == MD_NORM_RELATIVE ? "relative" : "raw");
		break;
	}
	case MD__KEY_POLICY: {
		uint32_t x;
		memcpy(&x, base, sizeof(x));
		snprintf(buf, len, "%s", md__policy_name(x));
		break;
	}
	}
}

/* ---- region keys ---- */

static int valid_region_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n >= MD__REGION_NAME_MAX || !islower((unsigned char)s[0]))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '_'))
			return 0;
	return 1;
}

/* "region.<id>.name" for ids 8..15; returns the id or -1. */
static int region_name_key(const char *key)
{
	if (strncmp(key, "region.", 7) != 0)
		return -1;
	char *end;
	long id = strtol(key + 7, &end, 10);
	if (end == key + 7 || strcmp(end, ".name") != 0)
		return -1;
	if (id < MD_REGION_BUILTIN_COUNT || id >= (long)MD_REGIONS_MAX)
		return -1;
	return (int)id;
}

enum rfield { RF_BASE, RF_LAMBDA, RF_PINNED };

/* "memdecay.region.<name>.<field>": region id or -1 (name unknown: -2). */
static int region_param_key(const struct md__params *p, const char *key, enum rfield *f)
{
	static const char pre[] = "memdecay.region.";
	if (strncmp(key, pre, sizeof(pre) - 1) != 0)
		return -1;
	const char *name = key + sizeof(pre) - 1;
	const char *dot = strrchr(name, '.');
	if (!dot || dot == name)
		return -1;
	if (!strcmp(dot, ".base"))
		*f = RF_BASE;
	else if (!strcmp(dot, ".lambda"))
		*f = RF_LAMBDA;
	else if (!strcmp(dot, ".pinned"))
		*f = RF_PINNED;
	else
		return -1;
	char nm[MD__REGION_NAME_MAX];
	size_t n = (size_t)(dot - name);
	if (n >= sizeof(nm))
		return -2;
	memcpy(nm, name, n);
	nm[n] = '\0';
	int r = md__region_from_name(p, nm);
	return r < 0 ? -2 : r;
}

int md__params_set(struct md__params *p, const char *key, const char *value, char *err,
		   size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	if (!key || !value)
		return fail(err, errlen, "missing key or value");
	const struct md__param_key *k = scalar_key(key);
	if (k)
		return set_scalar(p, k, value, err, errlen);

	int id = region_name_key(key);
	if (id >= 0) {
		if (value[0] == '\0') {
			p->region_name[id][0] = '\0';
			return 0;
		}
		if (!valid_region_name(value))
			return fail(err, errlen,
				    "%s: '%s' is not a region name ([a-z][a-z0-9_]*, < %d chars)",
				    key, value, MD__REGION_NAME_MAX);
		int other = md__region_from_name(p, value);
		if (other >= 0 && other != id)
			return fail(err, errlen, "%s: '%s' is already region %d", key, value, other);
		snprintf(p->region_name[id], MD__REGION_NAME_MAX, "%s", value);
		return 0;
	}

	enum rfield f;
	int r = region_param_key(p, key, &f);
	if (r == -2) {
		if (err && errlen)
			snprintf(err, errlen, "%s: unknown region", key);
		return -ENOENT;
	}
	if (r >= 0) {
		if (f == RF_PINNED) {
			int b = 0;
			int rc = parse_bool(key, value, &b, err, errlen);
			if (rc)
				return rc;
			if (b)
				p->pinned_mask |= 1u << r;
			else
				p->pinned_mask &= ~(1u << r);
			return 0;
		}
		double x = 0;
		int rc = parse_double(key, value, 0, 1e9, 0, 0, &x, err, errlen);
		if (rc)
			return rc;
		if (f == RF_BASE)
			p->base[r] = x;
		else
			p->lambda[r] = x;
		return 0;
	}
	if (err && errlen)
		snprintf(err, errlen, "%s: unknown key", key);
	return -ENOENT;
}

int md__params_get(const struct md__params *p, const char *key, char *buf, size_t len)
{
	char tmp[64];
	tmp[0] = '\0';
	int found = 0;
	const struct md__param_key *k = scalar_key(key);
	if (k) {
		get_scalar(p, k, tmp, sizeof(tmp));
		found = 1;
	}
	if (!found) {
		int id = region_name_key(key);
		if (id >= 0) {
			snprintf(tmp, sizeof(tmp), "%s", p->region_name[id]);
			found = 1;
		}
	}
	if (!found) {
		enum rfield f;
		int r = region_param_key(p, key, &f);
		if (r >= 0) {
			if (f == RF_PINNED)
				snprintf(tmp, sizeof(tmp), "%s",
					 (p->pinned_mask >> r) & 1u ? "true" : "false");
			else
				fmt_double(tmp, sizeof(tmp), f == RF_BASE ? p->base[r] : p->lambda[r]);
			found = 1;
		}
	}
	if (!found)
		return -ENOENT;
	if (buf && len)
		snprintf(buf, len, "%s", tmp);
	return (int)strlen(tmp);
}

struct key_visit { const struct md__params *p; md__params_visit_fn fn; void *ud; };
static int visit_scalar(const struct md__param_key *k, void *ud)
{
	struct key_visit *v = ud;
	char val[64];
	get_scalar(v->p, k, val, sizeof(val));
	v->fn(k->name, val, v->ud);
	return 0;
}

void md__params_foreach(const struct md__params *p, md__params_visit_fn fn, void *ud)
{
	char key[128], val[64];
	/* names first, so a saved file defines a region before using it */
	for (unsigned r = MD_REGION_BUILTIN_COUNT; r < MD_REGIONS_MAX; r++) {
		if (!p->region_name[r][0])
			continue;
		snprintf(key, sizeof(key), "region.%u.name", r);
		fn(key, p->region_name[r], ud);
	}
	static const char *const fields[3] = {"base", "lambda", "pinned"};
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++) {
		if (!p->region_name[r][0])
			continue;
		for (int f = 0; f < 3; f++) {
			snprintf(key, sizeof(key), "memdecay.region.%s.%s", p->region_name[r], fields[f]);
			md__params_get(p, key, val, sizeof(val));
			fn(key, val, ud);
		}
	}
	struct key_visit v = {p, fn, ud};
	scalar_keys_each(visit_scalar, &v);
}

/* ---- all-or-nothing sets and files ---- */

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

int md__params_set_many(struct md__params *p, const char *const *items, size_t n, char *err,
			size_t errlen)
{
	struct md__params tmp = *p;
	for (size_t i = 0; i < n; i++) {
		const char *eq = items[i] ? strchr(items[i], '=') : NULL;
		if (!eq)
			return fail(err, errlen, "'%s': expected KEY=VALUE", items[i] ? items[i] : "");
		char buf[512];
		snprintf(buf, sizeof(buf), "%s", items[i]);
		buf[eq - items[i]] = '\0';
		char *k = trim(buf), *v = trim(buf + (eq - items[i]) + 1);
		int rc = md__params_set(&tmp, k, v, err, errlen);
		if (rc)
			return rc;
	}
	*p = tmp;
	return 0;
}

int md__params_load_text(struct md__params *p, const char *text, const char *origin, char *err,
			 size_t errlen)
{
	struct md__params tmp = *p;
	const char *line = text;
	unsigned lineno = 0;
	if (!origin)
		origin = "<text>";
	while (line && *line) {
		lineno++;
		const char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);
		char buf[1024];
		if (n >= sizeof(buf))
			return fail(err, errlen, "%s:%u: line too long", origin, lineno);
		memcpy(buf, line, n);
		buf[n] = '\0';
		line = nl ? nl + 1 : NULL;
		char *hash = strchr(buf, '#');
		if (hash)
			*hash = '\0';
		char *s = trim(buf);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq)
			return fail(err, errlen, "%s:%u: expected 'key = value'", origin, lineno);
		*eq = '\0';
		char *k = trim(s), *v = trim(eq + 1);
		char msg[256];
		int rc = md__params_set(&tmp, k, v, msg, sizeof(msg));
		if (rc) {
			if (err && errlen)
				snprintf(err, errlen, "%s:%u: %s", origin, lineno, msg);
			return rc;
		}
	}
	*p = tmp;
	return 0;
}

int md__params_load_file(struct md__params *p, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		int e = errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	if (!buf) {
		fclose(f);
		return -ENOMEM;
	}
	size_t got;
	while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
		n += got;
		if (n + 1 >= cap) {
			if (cap >= (1u << 24)) {
				free(buf);
				fclose(f);
				return fail(err, errlen, "%s: file too large", path);
			}
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				fclose(f);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
	}
	fclose(f);
	buf[n] = '\0';
	if (memchr(buf, '\0', n)) {
		free(buf);
		return fail(err, errlen, "%s: contains a NUL byte", path);
	}
	int rc = md__params_load_text(p, buf, path, err, errlen);
	free(buf);
	return rc;
}

static void save_line(const char *key, const char *value, void *ud)
{
	fprintf((FILE *)ud, "%s = %s\n", key, value);
}

int md__params_save_file(const struct md__params *p, const char *path, char *err, size_t errlen)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return fail(err, errlen, "%s: path too long", path);
	FILE *f = fopen(tmp, "w");
	if (!f) {
		int e = errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: %s", tmp, strerror(e));
		return -e;
	}
	fprintf(f, "# memdecayd configuration (written by save; key = value)\n");
	md__params_foreach(p, save_line, f);
	int bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		remove(tmp);
		return fail(err, errlen, "%s: write failed", tmp);
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		remove(tmp);
		if (err && errlen)
			snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	return 0;
}
