/* sbuf.c — see sbuf.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Appends N raw bytes. */
static void sbuf_put(struct md__sbuf *b, const char *s, size_t n)
{
	md__sbuf_printf(b, "%.*s", (int)n, s);
}

/* Length of the well-formed UTF-8 sequence at S (at most N bytes), or 0 when
 * it is not one: a stray continuation byte, an overlong form, a surrogate
 * (U+D800..U+DFFF), a code point past U+10FFFF or a truncated sequence. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf; /* bounds of the second byte */
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0; /* overlong below U+0800 */
		else if (c == 0xed)
			hi = 0x9f; /* surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90; /* overlong below U+10000 */
		else if (c == 0xf4)
			hi = 0x8f; /* past U+10FFFF */
	} else
		return 0;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

void md__sbuf_json_strn(struct md__sbuf *b, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	sbuf_put(b, "\"", 1);
	size_t i = 0;
	while (i < n && !b->oom) {
		unsigned char c = u[i];
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
			size_t j = i + 1; /* copy a run of plain ASCII at once */
			while (j < n && u[j] >= 0x20 && u[j] < 0x7f && u[j] != '"' && u[j] != '\\')
				j++;
			sbuf_put(b, s + i, j - i);
			i = j;
			continue;
		}
		size_t l;
		switch (c) {
		case '"': sbuf_put(b, "\\\"", 2); break;
		case '\\': sbuf_put(b, "\\\\", 2); break;
		case '\n': sbuf_put(b, "\\n", 2); break;
		case '\r': sbuf_put(b, "\\r", 2); break;
		case '\t': sbuf_put(b, "\\t", 2); break;
		case '\b': sbuf_put(b, "\\b", 2); break;
		case '\f': sbuf_put(b, "\\f", 2); break;
		default:
			if (c < 0x80) { /* other control characters, NUL and DEL */
				md__sbuf_printf(b, "\\u%04x", c);
			} else if ((l = utf8_len(u + i, n - i)) != 0) {
				sbuf_put(b, s + i, l);
				i += l;
				continue;
			} else {
				sbuf_put(b, "\\ufffd", 6); /* one per bad byte */
			}
		}
		i++;
	}
	sbuf_put(b, "\"", 1);
}

void md__sbuf_json_str(struct md__sbuf *b, const char *s)
{
	md__sbuf_json_strn(b, s, strlen(s));
}

void md__sbuf_free(struct md__sbuf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
}
