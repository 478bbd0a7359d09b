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
void md__sbuf_json_str(struct md__sbuf *b, const char *s); /* "escaped" */
void md__sbuf_free(struct md__sbuf *b);

#endif
