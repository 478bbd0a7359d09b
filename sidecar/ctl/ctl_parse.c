/*
 * ctl_parse.c — HELLO and operator request parsing (see ctl_parse.h).
 * Everything here treats its input as hostile: lengths are bounded, numbers
 * are parsed strictly, and every error message names the offending field.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_parse.h"
#include "memdecay_abi.h"

int md__parse_u64(const char *s, uint64_t *out)
{
	if (!s || !*s)
		return -EINVAL;
	uint64_t v = 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int parse_i64_or_minus1(const char *s, int64_t *out)
{
	if (strcmp(s, "-1") == 0) {
		*out = -1;
		return 0;
	}
	uint64_t v;
	if (md__parse_u64(s, &v) < 0 || v > (uint64_t)INT64_MAX)
		return -EINVAL;
	*out = (int64_t)v;
	return 0;
}

int md__ctl_text_ok(const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (c == '\t')
			continue;
		if (c < 0x20 || c > 0x7e)
			return 0;
	}
	return 1;
}

size_t md__json_escape(const char *s, char *dst, size_t cap)
{
	size_t n = 0;
	if (!cap)
		return 0;
	for (; *s && n + 7 < cap; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			dst[n++] = '\\';
			dst[n++] = (char)c;
		} else if (c < 0x20 || c > 0x7e) {
			n += (size_t)snprintf(dst + n, cap - n, "\\u%04x", c);
		} else {
			dst[n++] = (char)c;
		}
	}
	dst[n] = 0;
	return n;
}

/* lo..hi characters, each printable and not a blank */
static int name_ok(const char *s, uint32_t lo, uint32_t hi)
{
	size_t n = strlen(s);
	if (n < lo || n > hi)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

static int u32_field(const char *key, const char *val, uint32_t lo, uint32_t hi,
		     uint32_t *out, char *err, size_t errlen)
{
	uint64_t v;
	if (md__parse_u64(val, &v) < 0 || v < lo || v > hi) {
		snprintf(err, errlen, "HELLO field %s=%.32s: want an integer in %u..%u", key, val,
			 lo, hi);
		return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

static int abi_field(const char *key, const char *v, struct md__hello *out, char *err,
		     size_t errlen)
{
	const char *dot = strchr(v, '.');
	uint64_t ma, mi = 0;
	char mj[16];
	size_t ml = dot ? (size_t)(dot - v) : strlen(v);
	if (ml == 0 || ml >= sizeof(mj))
		goto bad;
	memcpy(mj, v, ml);
	mj[ml] = 0;
	if (md__parse_u64(mj, &ma) < 0 || ma > UINT32_MAX ||
	    (dot && (md__parse_u64(dot + 1, &mi) < 0 || mi > UINT32_MAX)))
		goto bad;
	out->abi_major = (uint32_t)ma;
	out->abi_minor = (uint32_t)mi;
	return 0;
bad:
	snprintf(err, errlen, "HELLO field %s=%.32s: want MAJOR.MINOR", key, v);
	return -EINVAL;
}

/* One field's value, checked as its row of md__hello_fields says, into out. */
static int hello_value(unsigned id, const char *v, struct md__hello *out, char *err,
		       size_t errlen)
{
	const struct md__hello_field *f = &md__hello_fields[id];
	void *at = md__hello_at(out, id);
	char *end = NULL;
	double w;
	switch (f->type) {
	case MD__HELLO_ABI:
		return abi_field(f->key, v, out, err, errlen);
	case MD__HELLO_NAME:
		if (!name_ok(v, f->lo, f->hi)) {
			snprintf(err, errlen, "HELLO field %s: want %u..%u printable characters",
				 f->key, f->lo, f->hi);
			return -EINVAL;
		}
		snprintf(at, (size_t)f->hi + 1, "%s", v);
		return 0;
	case MD__HELLO_U32:
		return u32_field(f->key, v, f->lo, f->hi, at, err, errlen);
	case MD__HELLO_WORD:
		if (strlen(v) < f->lo || strlen(v) > f->hi) {
			snprintf(err, errlen, "HELLO field %s=%.32s: unknown %s", f->key, v, f->key);
			return -EINVAL;
		}
		snprintf(at, (size_t)f->hi + 1, "%s", v);
		return 0;
	case MD__HELLO_I64_OR_NONE:
		if (parse_i64_or_minus1(v, at) < 0) {
			snprintf(err, errlen, "HELLO field %s=%.32s: want -1 or an integer >= 0",
				 f->key, v);
			return -EINVAL;
		}
		return 0;
	case MD__HELLO_WEIGHT:
		w = strtod(v, &end);
		if (!*v || *end || !isfinite(w) || w <= 0 || w > 1e6) {
			snprintf(err, errlen, "HELLO field %s=%.32s: want a number in (0, 1e6]",
				 f->key, v);
			return -EINVAL;
		}
		*(double *)at = w;
		return 0;
	case MD__HELLO_TRANSPORT:
		if (strcmp(v, "host") && strcmp(v, "cuda")) {
			snprintf(err, errlen, "HELLO field %s=%.32s: want host or cuda", f->key, v);
			return -EINVAL;
		}
		*(int *)at = !strcmp(v, "cuda");
		return 0;
	}
	return -EINVAL;
}

static int hello_field_id(const char *key)
{
	for (unsigned id = 0; id < MD__HF_COUNT; id++)
		if (!strcmp(key, md__hello_fields[id].key))
			return (int)id;
	return -1;
}

int md__hello_parse(const char *line, struct md__hello *out, char *err, size_t errlen)
{
	char buf[MD_CTL_LINE_MAX + 1];
	size_t len = strlen(line);
	if (len > MD_CTL_LINE_MAX) {
		snprintf(err, errlen, "HELLO line longer than %u bytes", MD_CTL_LINE_MAX);
		return -EINVAL;
	}
	if (!md__ctl_text_ok(line, len)) {
		snprintf(err, errlen, "HELLO line holds non-printable bytes");
		return -EINVAL;
	}
	memcpy(buf, line, len + 1);
	memset(out, 0, sizeof(*out));
	out->budget_pages = -1;
	out->budget_sequence_tokens = -1;
	out->weight = 1.0;
	out->tp_size = 1;

	char *save = NULL;
	char *tok = strtok_r(buf, " \t", &save);
	if (!tok || strcmp(tok, "HELLO") != 0) {
		snprintf(err, errlen, "expected HELLO");
		return -EINVAL;
	}
	while ((tok = strtok_r(NULL, " \t", &save))) {
		char *eq = strchr(tok, '=');
		if (!eq || eq == tok) {
			snprintf(err, errlen, "HELLO field '%.40s' is not key=value", tok);
			return -EINVAL;
		}
		*eq = 0;
		const char *k = tok, *v = eq + 1;
		int id = hello_field_id(k);
		if (id < 0) {
			/* A newer minor version may add fields; this one may not invent them. */
			if ((out->given & (1u << MD__HF_ABI)) && out->abi_minor > MD_ABI_MINOR)
				continue;
			snprintf(err, errlen, "HELLO field '%.40s' is unknown", k);
			return -EINVAL;
		}
		int rc = hello_value((unsigned)id, v, out, err, errlen);
		if (rc < 0)
			return rc;
		if (out->given & (1u << id)) {
			snprintf(err, errlen, "HELLO field %s given twice", k);
			return -EINVAL;
		}
		out->given |= 1u << id;
	}
	for (unsigned id = 0; id < MD__HF_COUNT; id++) {
		if (md__hello_fields[id].required && !(out->given & (1u << id))) {
			snprintf(err, errlen, "HELLO field %s is missing", md__hello_fields[id].key);
			return -EINVAL;
		}
	}
	if (out->abi_major != MD_ABI_MAJOR) {
		snprintf(err, errlen, "ABI major version %u not supported (daemon speaks %u.%u)",
			 out->abi_major, MD_ABI_MAJOR, MD_ABI_MINOR);
		return -EPROTO;
	}
	if (out->tp_rank >= out->tp_size) {
		snprintf(err, errlen, "HELLO field tp_rank=%u: must be below tp_size=%u",
			 out->tp_rank, out->tp_size);
		return -EINVAL;
	}
	return 0;
}

static const struct {
	const char *name;
	enum md__ctl_cmd cmd;
	int min_args, max_args; /* positional */
	int engine_ok;
} cmds[] = {
	{ "get", MD__CTL_GET, 0, 1, 0 },
	{ "set", MD__CTL_SET, 1, MD__CTL_ARGS_MAX, 0 },
	{ "policy", MD__CTL_POLICY, 0, 1, 1 },
	{ "budget", MD__CTL_BUDGET, 2, 2, 1 },
	{ "engines", MD__CTL_ENGINES, 0, 0, 0 },
	{ "stats", MD__CTL_STATS, 0, 0, 1 },
	{ "top", MD__CTL_TOP, 1, 1, 1 },
	{ "metrics", MD__CTL_METRICS, 0, 0, 0 },
	{ "save", MD__CTL_SAVE, 0, 1, 0 },
	{ "calibrate", MD__CTL_CALIBRATE, 0, 0, 0 },
	{ "ping", MD__CTL_PING, 0, 0, 0 },
	{ "weight", MD__CTL_WEIGHT, 1, 1, 1 },
	{ "sessions", MD__CTL_SESSIONS, 0, 0, 1 },
};

int md__ctl_parse(char *line, struct md__ctl_req *req, char *err, size_t errlen)
{
	memset(req, 0, sizeof(*req));
	size_t len = strlen(line);
	while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
		line[--len] = 0;
	if (len > MD_CTL_LINE_MAX) {
		snprintf(err, errlen, "request longer than %u bytes", MD_CTL_LINE_MAX);
		return -EINVAL;
	}
	if (!md__ctl_text_ok(line, len)) {
		snprintf(err, errlen, "request holds non-printable bytes");
		return -EINVAL;
	}
	char *save = NULL, *tok;
	char *words[MD__CTL_ARGS_MAX + 8];
	int nw = 0;
	for (tok = strtok_r(line, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		if (nw == (int)(sizeof(words) / sizeof(words[0]))) {
			snprintf(err, errlen, "too many arguments (max %d)", MD__CTL_ARGS_MAX);
			return -EINVAL;
		}
		words[nw++] = tok;
	}
	if (nw == 0) {
		snprintf(err, errlen, "empty request");
		return -EINVAL;
	}
	int ci = -1;
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(words[0], cmds[i].name))
			ci = (int)i;
	if (ci < 0) {
		snprintf(err, errlen, "unknown command '%.40s' (try: get set policy budget weight engines stats top metrics save)",
			 words[0]);
		return -EINVAL;
	}
	req->cmd = cmds[ci].cmd;
	req->cmd_name = cmds[ci].name;
	for (int i = 1; i < nw; i++) {
		char *w = words[i];
		if (!strcmp(w, "--json")) {
			req->json = 1;
		} else if (!strcmp(w, "--engine")) {
			if (!cmds[ci].engine_ok) {
				snprintf(err, errlen, "%s does not take --engine", req->cmd_name);
				return -EINVAL;
			}
			if (i + 1 >= nw || words[i + 1][0] == '-') {
				snprintf(err, errlen, "--engine needs an engine id or name");
				return -EINVAL;
			}
			if (req->engine) {
				snprintf(err, errlen, "--engine given twice");
				return -EINVAL;
			}
			req->engine = words[++i];
		} else if (!strncmp(w, "--engine=", 9)) {
			if (!cmds[ci].engine_ok || !w[9] || req->engine) {
				snprintf(err, errlen, "bad option '%.40s' for %s", w, req->cmd_name);
				return -EINVAL;
			}
			req->engine = w + 9;
		} else if (!strcmp(w, "--apply") && req->cmd == MD__CTL_CALIBRATE) {
			req->apply = 1;
		} else if (w[0] == '-' && w[1] == '-') {
			snprintf(err, errlen, "unknown option '%.40s' for %s", w, req->cmd_name);
			return -EINVAL;
		} else {
			if (req->argc == MD__CTL_ARGS_MAX) {
				snprintf(err, errlen, "too many arguments (max %d)", MD__CTL_ARGS_MAX);
				return -EINVAL;
			}
			req->argv[req->argc++] = w;
		}
	}
	if (req->argc < cmds[ci].min_args || req->argc > cmds[ci].max_args) {
		static const char *usage[] = {
			[MD__CTL_GET] = "get [KEY]",
			[MD__CTL_SET] = "set KEY=VALUE...",
			[MD__CTL_POLICY] = "policy NAME [--engine E]",
			[MD__CTL_BUDGET] = "budget {sequence_tokens|engine_pages|global_pages} N [--engine E]",
			[MD__CTL_ENGINES] = "engines",
			[MD__CTL_STATS] = "stats [--engine E]",
			[MD__CTL_TOP] = "top N [--engine E]",
			[MD__CTL_METRICS] = "metrics",
			[MD__CTL_SAVE] = "save [FILE]",
			[MD__CTL_CALIBRATE] = "calibrate [--apply]",
			[MD__CTL_PING] = "ping",
			[MD__CTL_WEIGHT] = "weight W --engine E",
			[MD__CTL_SESSIONS] = "sessions [--engine E]",
		};
		snprintf(err, errlen, "wrong number of arguments for %s; usage: %s", req->cmd_name,
			 usage[req->cmd]);
		return -EINVAL;
	}
	switch (req->cmd) {
	case MD__CTL_SET:
		for (int i = 0; i < req->argc; i++) {
			char *eq = strchr(req->argv[i], '=');
			if (!eq || eq == req->argv[i]) {
				snprintf(err, errlen, "set: '%.60s' is not KEY=VALUE", req->argv[i]);
				return -EINVAL;
			}
		}
		break;
	case MD__CTL_TOP:
		if (md__parse_u64(req->argv[0], &req->number) < 0 || req->number == 0 ||
		    req->number > MD__TOP_MAX) {
			snprintf(err, errlen, "top: N='%.32s' must be an integer in 1..%u",
				 req->argv[0], MD__TOP_MAX);
			return -EINVAL;
		}
		break;
	case MD__CTL_BUDGET:
		req->scope = req->argv[0];
		if (strcmp(req->scope, "sequence_tokens") && strcmp(req->scope, "engine_pages") &&
		    strcmp(req->scope, "global_pages")) {
			snprintf(err, errlen,
				 "budget: unknown scope '%.32s' (sequence_tokens, engine_pages, global_pages)",
				 req->scope);
			return -EINVAL;
		}
		if (md__parse_u64(req->argv[1], &req->number) < 0) {
			snprintf(err, errlen, "budget %s: N='%.32s' must be an integer >= 0 (0: none)",
				 req->scope, req->argv[1]);
			return -EINVAL;
		}
		if (req->engine && !strcmp(req->scope, "global_pages")) {
			snprintf(err, errlen, "budget global_pages is node-wide: no --engine");
			return -EINVAL;
		}
		break;
	case MD__CTL_WEIGHT: {
		char *end = NULL;
		double w = strtod(req->argv[0], &end);
		if (!req->argv[0][0] || *end || !isfinite(w) || !(w > 0) || w > 1e6) {
			snprintf(err, errlen, "weight: W='%.32s' must be a number in (0, 1e6]",
				 req->argv[0]);
			return -EINVAL;
		}
		if (!req->engine) {
			snprintf(err, errlen, "weight needs --engine E");
			return -EINVAL;
		}
		req->weight = w;
		break;
	}
	default:
		break;
	}
	return 0;
}

/* The socket path rule of docs/design.md §2 (shared by memdecayd and memdecayctl). */
int md__socket_default(char *buf, size_t len)
{
	const char *env = getenv("MEMDECAY_SOCKET");
	if (env && *env)
		return snprintf(buf, len, "%s", env) < (int)len ? 0 : -ENAMETOOLONG;
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (xdg && *xdg)
		return snprintf(buf, len, "%s/memdecay/memdecayd.sock", xdg) < (int)len ? 0 : -ENAMETOOLONG;
	return snprintf(buf, len, "/run/memdecay/memdecayd.sock") < (int)len ? 0 : -ENAMETOOLONG;
}

