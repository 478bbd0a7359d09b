/*
 * trace.h — agent traces (docs/design.md §5): JSON Lines, one chat message or one
 * probe per line.  Only the fields the runner needs are kept.
 */
#ifndef MD_LLAMA_TRACE_H
#define MD_LLAMA_TRACE_H

#include <stddef.h>

struct md_trace_item {
	int is_probe;
	char *role;       /* message: system user assistant tool ... */
	char *content;
	char *region;     /* explicit region name or NULL */
	char *question;   /* probe */
	char *answer;     /* probe */
	char *probe_region;
};

struct md_trace {
	struct md_trace_item *items;
	size_t n;
};

/* Returns 0, or -errno / -EINVAL with *line set to the offending line. */
int md_trace_load(const char *path, struct md_trace *out, size_t *line);
/* After a failed md_trace_load: "FILE:LINE: column C: ..." or the key at fault. */
const char *md_trace_error(void);
void md_trace_free(struct md_trace *t);

#endif
