/*
 * trace.c — a small JSON reader for agent traces: one object per line, string
 * values (with escapes and \u sequences), a nested "probe" object; numbers,
 * booleans, null and arrays are parsed and ignored.
 */
#include "trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jp {
	const char *s;
	int err;
};

static void ws(struct jp *p)
{
	while (*p->s == ' ' || *p->s == '\t' || *p->s == '\r' || *p->s == '\n')
		p->s++;
}

static int hex4(const char *s, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

static void put_utf8(char **o, unsigned cp)
{
	char *d = *o;
	if (cp < 0x80) {
		*d++ = (char)cp;
	} else if (cp < 0x800) {
		*d++ = (char)(0xc0 | (cp >> 6));
		*d++ = (char)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		*d++ = (char)(0xe0 | (cp >> 12));
		*d++ = (char)(0x80 | ((cp >> 6) & 0x3f));
		*d++ = (char)(0x80 | (cp & 0x3f));
	} else {
		*d++ = (char)(0xf0 | (cp >> 18));
		*d++ = (char)(0x80 | ((cp >> 12) & 0x3f));
		*d++ = (char)(0x80 | ((cp >> 6) & 0x3f));
		*d++ = (char)(0x80 | (cp & 0x3f));
	}
	*o = d;
}

/* Parses a string at p->s (which is at the opening quote); returns a malloc'd copy. */
static char *jstring(struct jp *p)
{
	if (*p->s != '"') {
		p->err = 1;
		return NULL;
	}
	const char *s = ++p->s;
	size_t cap = 0;
	while (s[cap] && s[cap] != '"') {
		if (s[cap] == '\\' && s[cap + 1])
			cap++;
		cap++;
	}
	char *out = malloc(cap * 2 + 8), *o = out;
	if (!out) {
		p->err = 1;
		return NULL;
	}
	while (*s && *s != '"') {
		if (*s != '\\') {
			*o++ = *s++;
			continue;
		}
		s++;
		switch (*s) {
		case 'n': *o++ = '\n'; s++; break;
		case 't': *o++ = '\t'; s++; break;
		case 'r': *o++ = '\r'; s++; break;
		case 'b': *o++ = '\b'; s++; break;
		case 'f': *o++ = '\f'; s++; break;
		case 'u': {
			unsigned cp, lo;
			if (hex4(s + 1, &cp)) {
				p->err = 1;
				free(out);
				return NULL;
			}
			s += 5;
			if (cp >= 0xd800 && cp < 0xdc00 && s[0] == '\\' && s[1] == 'u' &&
			    !hex4(s + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				s += 6;
			}
			put_utf8(&o, cp);
			break;
		}
		case '\0':
			break;
		default: *o++ = *s++; break;
		}
	}
	if (*s != '"') {
		p->err = 1;
		free(out);
		return NULL;
	}
	*o = '\0';
	p->s = s + 1;
	return out;
}

static void jskip(struct jp *p, int depth);

static void jskip_container(struct jp *p, char close, int depth)
{
	p->s++;
	ws(p);
	if (*p->s == close) {
		p->s++;
		return;
	}
	for (;;) {
		ws(p);
		if (close == '}') {
			free(jstring(p));
			ws(p);
			if (*p->s != ':') {
				p->err = 1;
				return;
			}
			p->s++;
		}
		jskip(p, depth + 1);
		if (p->err)
			return;
		ws(p);
		if (*p->s == ',') {
			p->s++;
			continue;
		}
		if (*p->s == close) {
			p->s++;
			return;
		}
		p->err = 1;
		return;
	}
}

static void jskip(struct jp *p, int depth)
{
	ws(p);
	if (depth > 32) {
		p->err = 1;
		return;
	}
	if (*p->s == '"')
		free(jstring(p));
	else if (*p->s == '{')
		jskip_container(p, '}', depth);
	else if (*p->s == '[')
		jskip_container(p, ']', depth);
	else if (strchr("-0123456789tfn", *p->s) && *p->s)
		while (*p->s && !strchr(",}] \t\r\n", *p->s))
			p->s++;
	else
		p->err = 1;
}

/* Reads an object of string fields; "probe" recurses once. */
static void jobject(struct jp *p, struct md_trace_item *it, int in_probe)
{
	ws(p);
	if (*p->s != '{') {
		p->err = 1;
		return;
	}
	p->s++;
	ws(p);
	if (*p->s == '}') {
		p->s++;
		return;
	}
	for (;;) {
		ws(p);
		char *key = jstring(p);
		if (!key)
			return;
		ws(p);
		if (*p->s != ':') {
			free(key);
			p->err = 1;
			return;
		}
		p->s++;
		ws(p);
		char **dst = NULL;
		if (!in_probe && !strcmp(key, "probe") && *p->s == '{') {
			it->is_probe = 1;
			jobject(p, it, 1);
		} else if (*p->s == '"') {
			if (!in_probe && !strcmp(key, "role"))
				dst = &it->role;
			else if (!in_probe && !strcmp(key, "content"))
				dst = &it->content;
			else if (!in_probe && !strcmp(key, "region"))
				dst = &it->region;
			else if (in_probe && !strcmp(key, "question"))
				dst = &it->question;
			else if (in_probe && !strcmp(key, "answer"))
				dst = &it->answer;
			else if (in_probe && !strcmp(key, "region"))
				dst = &it->probe_region;
			char *v = jstring(p);
			if (dst) {
				free(*dst);
				*dst = v;
			} else {
				free(v);
			}
		} else {
			jskip(p, 1);
		}
		free(key);
		if (p->err)
			return;
		ws(p);
		if (*p->s == ',') {
			p->s++;
			continue;
		}
		if (*p->s == '}') {
			p->s++;
			return;
		}
		p->err = 1;
		return;
	}
}

static void item_free(struct md_trace_item *it)
{
	free(it->role);
	free(it->content);
	free(it->region);
	free(it->question);
	free(it->answer);
	free(it->probe_region);
}

int md_trace_load(const char *path, struct md_trace *out, size_t *line)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -errno;
	memset(out, 0, sizeof(*out));
	size_t cap = 0, lineno = 0;
	char *buf = NULL;
	size_t bufcap = 0;
	ssize_t len;
	int rc = 0;
	while ((len = getline(&buf, &bufcap, f)) >= 0) {
		lineno++;
		struct jp p = {buf, 0};
		ws(&p);
		if (!*p.s)
			continue;
		struct md_trace_item it;
		memset(&it, 0, sizeof(it));
		jobject(&p, &it, 0);
		ws(&p);
		int bad = p.err || *p.s;
		if (!bad && it.is_probe)
			bad = !it.question || !it.answer;
		else if (!bad)
			bad = !it.role || !it.content;
		if (bad) {
			item_free(&it);
			rc = -EINVAL;
			if (line)
				*line = lineno;
			break;
		}
		if (out->n == cap) {
			cap = cap ? cap * 2 : 64;
			struct md_trace_item *n = realloc(out->items, cap * sizeof(*n));
			if (!n) {
				item_free(&it);
				rc = -ENOMEM;
				break;
			}
			out->items = n;
		}
		out->items[out->n++] = it;
	}
	free(buf);
	fclose(f);
	if (rc)
		md_trace_free(out);
	return rc;
}

void md_trace_free(struct md_trace *t)
{
	for (size_t i = 0; i < t->n; i++)
		item_free(&t->items[i]);
	free(t->items);
	t->items = NULL;
	t->n = 0;
}
