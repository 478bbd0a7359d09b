/*
 * log.h — memdecayd's log: one line per event on stderr, with a monotonic
 * timestamp and the level; callers put the context (engine id and name,
 * sequence, slot) into the message.
 */
#ifndef MD_LOG_H
#define MD_LOG_H

enum md__log_level { MD__LOG_ERROR = 0, MD__LOG_WARN, MD__LOG_INFO, MD__LOG_DEBUG };

extern int md__log_threshold;
int md__log_level_from_name(const char *name); /* -1 if unknown */
void md__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define md__err(...) md__log(MD__LOG_ERROR, __VA_ARGS__)
#define md__warn(...) md__log(MD__LOG_WARN, __VA_ARGS__)
#define md__info(...) md__log(MD__LOG_INFO, __VA_ARGS__)
#define md__debug(...) do { if (md__log_threshold >= MD__LOG_DEBUG) md__log(MD__LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
