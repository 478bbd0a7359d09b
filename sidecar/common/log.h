/*
 * log.h — memdecayd's log: one line per event on stderr, with a monotonic
 * timestamp and the level; callers put the context (engine id and name,
 * sequence, slot) into the message.
 */
#ifndef MD_LOG_H
#define MD_LOG_H

#include <stdint.h>

enum md__log_level { MD__LOG_ERROR = 0, MD__LOG_WARN, MD__LOG_INFO, MD__LOG_DEBUG };

extern int md__log_threshold;
int md__log_level_from_name(const char *name); /* -1 if unknown */
void md__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define md__err(...) md__log(MD__LOG_ERROR, __VA_ARGS__)
#define md__warn(...) md__log(MD__LOG_WARN, __VA_ARGS__)
#define md__info(...) md__log(MD__LOG_INFO, __VA_ARGS__)
#define md__debug(...) do { if (md__log_threshold >= MD__LOG_DEBUG) md__log(MD__LOG_DEBUG, __VA_ARGS__); } while (0)

/* At most MD__LOG_BURST lines a second per source; the rest are counted and
 * the count is logged with the next line let through (docs/reliability.md). */
#define MD__LOG_BURST 5u
struct md__ratelimit {
	uint64_t window_ns;
	uint32_t lines;
	uint64_t suppressed;
};
/* 1: log now (*suppressed gets the count held back so far and is reset). */
int md__ratelimit_ok(struct md__ratelimit *r, uint64_t now_ns, uint64_t *suppressed);

#endif
