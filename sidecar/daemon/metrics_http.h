/*
 * metrics_http.h — memdecayd's Prometheus endpoint (--metrics-listen):
 * GET /metrics over HTTP, served by libmicrohttpd on its own thread.  That
 * thread never touches daemon state: it asks the event loop for a snapshot
 * (an eventfd the loop watches) and serves the text the loop rendered, so
 * a slow or hostile HTTP client costs the engines nothing
 * (docs/operations.md, "Prometheus endpoint").
 */
#ifndef MD_METRICS_HTTP_H
#define MD_METRICS_HTTP_H

#include <stddef.h>
#include <sys/socket.h>

struct md__daemon;
struct md__sbuf;
struct md__metrics_http;

/* Parses ADDR:PORT (IPv4 dotted quad, or [IPv6]; PORT 0..65535, 0 = any
 * free port).  Without allow_remote the address must be loopback.  Returns
 * 0, or -1 with err filled. */
int md__metrics_parse_listen(const char *arg, int allow_remote, struct sockaddr_storage *ss,
			     socklen_t *sslen, char *err, size_t errlen);

/* Starts the endpoint and registers its wake-up fd with d->loop.  Returns
 * NULL with err filled.  The bound address (with the real port) is written
 * to bound (at least 64 bytes). */
struct md__metrics_http *md__metrics_http_start(struct md__daemon *d,
						const struct sockaddr_storage *ss, socklen_t sslen,
						char *bound, size_t boundlen, char *err,
						size_t errlen);
/* Stops the HTTP thread (joins it), then unregisters from the loop. */
void md__metrics_http_stop(struct md__metrics_http *m);

/* The exposition the endpoint serves: memdecayctl metrics' series plus the
 * decision and command latency histograms.  Loop thread only. */
void md__metrics_render(struct md__daemon *d, struct md__sbuf *b);

#endif
