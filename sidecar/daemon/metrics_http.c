/*
 * metrics_http.c — GET /metrics for Prometheus (metrics_http.h).
 *
 * Two threads, one rule: only the event loop reads daemon state.
 *
 *   HTTP thread (libmicrohttpd)           event loop (server.c's thread)
 *   request: want = ++asked               wake_cb: renders md__metrics_render,
 *            write(eventfd)  ───────────▶          swaps it in under mu,
 *            wait on cv (≤ 1 s)  ◀──────────────── have = asked, broadcast
 *            copy the snapshot, respond
 *
 * The loop never waits on the HTTP side for longer than one copy of the
 * text (mu guards the snapshot pointer and is held by the HTTP thread only
 * while it copies the snapshot into a response); libmicrohttpd sends responses with non-blocking I/O, bounds the
 * number of connections and drops idle ones, so a client that reads slowly,
 * or not at all, holds a connection slot and nothing else.  Requests that
 * arrive while a render is pending share it, and a snapshot younger than
 * MD__METRICS_FRESH_NS is served as is, so a flood of requests costs the
 * loop at most one render per that interval.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include <microhttpd.h>

#include "daemon.h"
#include "log.h"
#include "metrics_http.h"
#include "memdecay_clock.h"

#define MD__METRICS_CONN_MAX 16u
#define MD__METRICS_CONN_TIMEOUT_S 10u
#define MD__METRICS_WAIT_NS 1000000000ull  /* longest wait for the loop's render */
#define MD__METRICS_FRESH_NS 100000000ull  /* a snapshot this young is served as is */

struct md__metrics_http {
	struct md__daemon *d;            /* loop thread only */
	struct MHD_Daemon *mhd;
	int efd;
	struct md__watch *w;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* under mu */
	uint64_t asked, have;            /* render requests made / satisfied */
	int stopping;                    /* no render will come: stop waiting */
	char *snap;
	size_t snap_len;
	uint64_t snap_ns;
	uint64_t renders, served, timeouts;
};

/* Histogram bucket bounds: le = 2^k - 1 ns, k = 10..34 (about 1 us .. 17 s).
 * Each is the upper end of a lathist bucket, so the cumulative counts are
 * exact, not interpolated. */
#define MD__HIST_K0 10u
#define MD__HIST_K1 34u

static void prom_histogram(struct md__sbuf *b, const char *name, const char *help,
			   const struct md_lathist *h)
{
	md__sbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	uint64_t cum = 0;
	unsigned i = 0;
	for (unsigned k = MD__HIST_K0; k <= MD__HIST_K1; k++) {
		uint64_t bound = (1ull << k) - 1u;
		for (; i < MD_LATHIST_BUCKETS && md_lathist_upper(i) <= bound; i++)
			cum += h->b[i];
		md__sbuf_printf(b, "%s_bucket{le=\"%.9f\"} %llu\n", name, (double)bound / 1e9,
				(unsigned long long)cum);
	}
	md__sbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
	md__sbuf_printf(b, "%s_sum %.9f\n", name, (double)h->sum / 1e9);
	md__sbuf_printf(b, "%s_count %llu\n", name, (unsigned long long)h->count);
}

void md__metrics_render(struct md__daemon *d, struct md__sbuf *b)
{
	md__control_metrics(d, b);
	prom_histogram(b, "memdecay_decision_duration_seconds",
		       "Wall time of one decision pass that produced evictions (all engines).",
		       &d->decide_lat);
	prom_histogram(b, "memdecay_command_latency_seconds",
		       "From an eviction decision to its command in the engine's command ring.",
		       &d->cmd_lat);
}

/* Loop thread: somebody asked for a snapshot. */
static void wake_cb(struct md__loop *l, struct md__watch *w, int res, const void *buf, void *ud)
{
	struct md__metrics_http *m = ud;
	(void)l;
	(void)w;
	(void)buf;
	if (res < 0)
		return;
	pthread_mutex_lock(&m->mu);
	uint64_t asked = m->asked;
	pthread_mutex_unlock(&m->mu);

	struct md__sbuf b = { 0 };
	md__metrics_render(m->d, &b);
	char *old = NULL;
	pthread_mutex_lock(&m->mu);
	if (!b.oom && b.len) {
		old = m->snap;
		m->snap = b.p;
		m->snap_len = b.len;
		m->snap_ns = md_now_ns();
		b.p = NULL;
	}
	m->have = asked;
	m->renders++;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	free(old);
	md__sbuf_free(&b);
}

static enum MHD_Result respond_text(struct MHD_Connection *conn, unsigned status,
				    const char *type, const char *text, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)text,
								 MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	enum MHD_Result ok = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ok;
}

static enum MHD_Result respond_plain(struct MHD_Connection *conn, unsigned status,
				     const char *msg)
{
	return respond_text(conn, status, "text/plain; charset=utf-8", msg, strlen(msg));
}

/* HTTP thread. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_len, void **req_state)
{
	struct md__metrics_http *m = cls;
	static int first_call_marker;
	(void)version;
	(void)upload;
	if (!*req_state) { /* headers only so far: answer once the request is complete */
		*req_state = &first_call_marker;
		return MHD_YES;
	}
	if (*upload_len) { /* a body on GET: ignore it */
		*upload_len = 0;
		return MHD_YES;
	}
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return respond_plain(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n");
	if (!strcmp(url, "/"))
		return respond_plain(conn, MHD_HTTP_OK, "memdecayd: metrics at /metrics\n");
	if (strcmp(url, "/metrics"))
		return respond_plain(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n");

	pthread_mutex_lock(&m->mu);
	uint64_t t0 = md_now_ns();
	if (!m->snap || t0 - m->snap_ns >= MD__METRICS_FRESH_NS) {
		uint64_t want = ++m->asked;
		uint64_t one = 1;
		ssize_t ignored = write(m->efd, &one, sizeof(one));
		(void)ignored;
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl); /* the condvar's default clock */
		dl.tv_sec += (time_t)(MD__METRICS_WAIT_NS / 1000000000ull);
		while (m->have < want && !m->stopping) {
			if (pthread_cond_timedwait(&m->cv, &m->mu, &dl) == ETIMEDOUT) {
				m->timeouts++;
				break;
			}
		}
	}
	if (!m->snap) {
		pthread_mutex_unlock(&m->mu);
		return respond_plain(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
				     "memdecayd: no metrics snapshot yet\n");
	}
	struct MHD_Response *r = MHD_create_response_from_buffer(m->snap_len, m->snap,
								 MHD_RESPMEM_MUST_COPY);
	m->served++;
	pthread_mutex_unlock(&m->mu);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	enum MHD_Result ok = MHD_queue_response(conn, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ok;
}

static int is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
	}
	const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;
	return IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
}

int md__metrics_parse_listen(const char *arg, int allow_remote, struct sockaddr_storage *ss,
			     socklen_t *sslen, char *err, size_t errlen)
{
	char host[64];
	const char *port_s;
	memset(ss, 0, sizeof(*ss));
	if (arg[0] == '[') {
		const char *close = strchr(arg, ']');
		if (!close || close[1] != ':' || (size_t)(close - arg - 1) >= sizeof(host))
			goto bad;
		memcpy(host, arg + 1, (size_t)(close - arg - 1));
		host[close - arg - 1] = 0;
		port_s = close + 2;
	} else {
		const char *colon = strrchr(arg, ':');
		if (!colon || (size_t)(colon - arg) >= sizeof(host) || colon == arg)
			goto bad;
		memcpy(host, arg, (size_t)(colon - arg));
		host[colon - arg] = 0;
		port_s = colon + 1;
	}
	char *end;
	errno = 0;
	unsigned long port = strtoul(port_s, &end, 10);
	if (!*port_s || *end || errno || port > 65535)
		goto bad;
	if (!strcmp(host, "localhost"))
		snprintf(host, sizeof(host), "127.0.0.1");
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (arg[0] != '[' && inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)port);
		*sslen = sizeof(*a4);
	} else if (arg[0] == '[' && inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		*sslen = sizeof(*a6);
	} else {
		goto bad;
	}
	if (!allow_remote && !is_loopback(ss)) {
		snprintf(err, errlen, "--metrics-listen %s: not a loopback address "
			 "(add --metrics-allow-remote to serve other hosts)", arg);
		return -1;
	}
	return 0;
bad:
	snprintf(err, errlen, "--metrics-listen '%s': want ADDR:PORT, ADDR an IPv4 address, "
		 "[IPv6] or localhost, PORT 0..65535", arg);
	return -1;
}

struct md__metrics_http *md__metrics_http_start(struct md__daemon *d,
						const struct sockaddr_storage *ss, socklen_t sslen,
						char *bound, size_t boundlen, char *err,
						size_t errlen)
{
	(void)sslen;
	struct md__metrics_http *m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "metrics endpoint: out of memory");
		return NULL;
	}
	m->d = d;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	m->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (m->efd < 0) {
		snprintf(err, errlen, "metrics endpoint: eventfd: %s", strerror(errno));
		goto fail;
	}
	m->w = md__loop_watch(d->loop, m->efd, MD__WATCH_READ, sizeof(uint64_t), wake_cb, m);
	if (!m->w) {
		snprintf(err, errlen, "metrics endpoint: event loop: %s", strerror(errno));
		goto fail;
	}
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
	if (ss->ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	m->mhd = MHD_start_daemon(flags, 0, NULL, NULL, handle, m,
				  MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)ss,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned int)MD__METRICS_CONN_MAX,
				  MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)8,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)MD__METRICS_CONN_TIMEOUT_S,
				  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768,
				  MHD_OPTION_END);
	if (!m->mhd) {
		char a[64] = "?";
		if (ss->ss_family == AF_INET)
			inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, a, sizeof(a));
		else
			inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, a, sizeof(a));
		snprintf(err, errlen, "metrics endpoint: cannot listen on %s port %u (in use?)", a,
			 (unsigned)ntohs(((const struct sockaddr_in *)ss)->sin_port));
		goto fail;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_LISTEN_FD);
	struct sockaddr_storage got = { 0 };
	socklen_t gl = sizeof(got);
	char a[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	if (info && getsockname(info->listen_fd, (struct sockaddr *)&got, &gl) == 0) {
		if (got.ss_family == AF_INET) {
			inet_ntop(AF_INET, &((struct sockaddr_in *)&got)->sin_addr, a, sizeof(a));
			port = ntohs(((struct sockaddr_in *)&got)->sin_port);
		} else {
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&got)->sin6_addr, a, sizeof(a));
			port = ntohs(((struct sockaddr_in6 *)&got)->sin6_port);
		}
	}
	snprintf(bound, boundlen, got.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", a, port);
	return m;
fail:
	md__metrics_http_stop(m);
	return NULL;
}

void md__metrics_http_stop(struct md__metrics_http *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->stopping = 1; /* the loop renders no more: release a waiting request */
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	if (m->mhd)
		MHD_stop_daemon(m->mhd); /* joins the HTTP thread: nobody waits on cv now */
	if (m->w)
		md__loop_unwatch(m->d->loop, m->w);
	if (m->efd >= 0)
		close(m->efd);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	md__debug("metrics endpoint: %llu responses, %llu renders, %llu render waits timed out",
		  (unsigned long long)m->served, (unsigned long long)m->renders,
		  (unsigned long long)m->timeouts);
	free(m->snap);
	free(m);
}
