/* sbuf.h — a growable text buffer for control replies (allocation failures
 * are sticky: the reply becomes an error instead of a crash). */
#ifndef MD_SBUF_H
#define MD_SBUF_H

#include <stddef.h>

struct md__sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

void md__sbuf_printf(struct md__sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The daemon's one JSON string writer: S as a quoted JSON string.  Quotes,
 * backslashes and control characters (NUL and DEL included) are escaped;
 * well-formed UTF-8 is copied; every byte of malformed UTF-8 (stray
 * continuation, overlong, surrogate, past U+10FFFF, truncated) becomes
 * U+FFFD, so the reply is valid JSON whatever a peer sent. */
void md__sbuf_json_strn(struct md__sbuf *b, const char *s, size_t n);
void md__sbuf_json_str(struct md__sbuf *b, const char *s); /* NUL-terminated */
void md__sbuf_free(struct md__sbuf *b);

#endif
