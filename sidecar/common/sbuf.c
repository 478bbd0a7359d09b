/* sbuf.c — see sbuf.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "sbuf.h"

void md__sbuf_printf(struct md__sbuf *b, const char *fmt, ...)
{
	if (b->oom)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		size_t room = b->cap - b->len;
		int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		size_t ncap = b->cap ? b->cap * 2 : 1024;
		while (ncap < b->len + (size_t)n + 1)
			ncap *= 2;
		char *np = realloc(b->p, ncap);
		if (!np) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = ncap;
	}
}

void md__sbuf_json_str(struct md__sbuf *b, const char *s)
{
	md__sbuf_printf(b, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			md__sbuf_printf(b, "\\%c", c);
		else if (c < 0x20 || c > 0x7e)
			md__sbuf_printf(b, "\\u%04x", c);
		else
			md__sbuf_printf(b, "%c", c);
	}
	md__sbuf_printf(b, "\"");
}

void md__sbuf_free(struct md__sbuf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
}
