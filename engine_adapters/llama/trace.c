/*
 * trace.c — reads agent traces (docs/design.md §5) with jansson: one JSON
 * object per line, a message (role, content, optional region) or a probe
 * ({"probe": {question, answer, optional region}}).  Other keys are ignored.
 */
#include "trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static char trace_err[512];

static void set_err(const char *path, size_t line, const char *fmt, ...)
{
	int n = snprintf(trace_err, sizeof(trace_err), "%s:%zu: ", path, line);
	if (n < 0 || (size_t)n >= sizeof(trace_err))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(trace_err + n, sizeof(trace_err) - (size_t)n, fmt, ap);
	va_end(ap);
}

const char *md_trace_error(void) { return trace_err; }

/* Copies obj[key] into *dst when it is a string; a key of another type is an error. */
static int take_string(json_t *obj, const char *key, const char *where, char **dst,
		       const char *path, size_t line)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return 0;
	if (!json_is_string(v)) {
		set_err(path, line, "key \"%s%s\" must be a string", where, key);
		return -EINVAL;
	}
	*dst = strdup(json_string_value(v));
	return *dst ? 0 : -ENOMEM;
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

static int parse_item(json_t *obj, struct md_trace_item *it, const char *path, size_t line)
{
	int rc;
	if (!json_is_object(obj)) {
		set_err(path, line, "column 1: a trace line must be a JSON object");
		return -EINVAL;
	}
	json_t *probe = json_object_get(obj, "probe");
	if (probe && json_is_object(probe)) {
		it->is_probe = 1;
		if ((rc = take_string(probe, "question", "probe.", &it->question, path, line)) ||
		    (rc = take_string(probe, "answer", "probe.", &it->answer, path, line)) ||
		    (rc = take_string(probe, "region", "probe.", &it->probe_region, path, line)))
			return rc;
		if (!it->question || !it->answer) {
			set_err(path, line, "probe lacks key \"probe.%s\"", it->question ? "answer" : "question");
			return -EINVAL;
		}
		return 0;
	}
	if ((rc = take_string(obj, "role", "", &it->role, path, line)) ||
	    (rc = take_string(obj, "content", "", &it->content, path, line)) ||
	    (rc = take_string(obj, "region", "", &it->region, path, line)))
		return rc;
	if (!it->role || !it->content) {
		set_err(path, line, "message lacks key \"%s\"", it->role ? "content" : "role");
		return -EINVAL;
	}
	return 0;
}

static int blank(const char *s)
{
	return s[strspn(s, " \t\r\n")] == '\0';
}

int md_trace_load(const char *path, struct md_trace *out, size_t *line)
{
	trace_err[0] = '\0';
	FILE *f = fopen(path, "r");
	if (!f) {
		int e = errno;
		snprintf(trace_err, sizeof(trace_err), "%s: %s", path, strerror(e));
		return -e;
	}
	memset(out, 0, sizeof(*out));
	size_t cap = 0, lineno = 0, bufcap = 0;
	char *buf = NULL;
	int rc = 0;
	while (getline(&buf, &bufcap, f) >= 0) {
		lineno++;
		if (blank(buf))
			continue;
		json_error_t jerr;
		json_t *obj = json_loads(buf, 0, &jerr);
		if (!obj) {
			set_err(path, lineno, "column %d: %s", jerr.column, jerr.text);
			rc = -EINVAL;
		}
		struct md_trace_item it;
		memset(&it, 0, sizeof(it));
		if (!rc)
			rc = parse_item(obj, &it, path, lineno);
		json_decref(obj);
		if (!rc && out->n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct md_trace_item *n = realloc(out->items, ncap * sizeof(*n));
			if (n) {
				out->items = n;
				cap = ncap;
			} else {
				rc = -ENOMEM;
			}
		}
		if (rc) {
			item_free(&it);
			if (line)
				*line = lineno;
			break;
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
