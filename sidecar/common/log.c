/* log.c — stderr logging for memdecayd (see log.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"

int md__log_threshold = MD__LOG_INFO;

static const char *names[] = { "error", "warn", "info", "debug" };

int md__log_level_from_name(const char *name)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(name, names[i]))
			return i;
	return -1;
}

void md__log(int level, const char *fmt, ...)
{
	if (level > md__log_threshold)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char line[1024];
	int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ memdecayd %s: ",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec, ts.tv_nsec / 1000000, names[level]);
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}

int md__ratelimit_ok(struct md__ratelimit *r, uint64_t now_ns, uint64_t *suppressed)
{
	*suppressed = 0;
	if (now_ns - r->window_ns >= 1000000000ull || !r->window_ns) {
		r->window_ns = now_ns ? now_ns : 1;
		r->lines = 0;
	}
	if (r->lines >= MD__LOG_BURST) {
		r->suppressed++;
		return 0;
	}
	r->lines++;
	*suppressed = r->suppressed;
	r->suppressed = 0;
	return 1;
}
