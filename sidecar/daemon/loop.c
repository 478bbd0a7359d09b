/*
 * loop.c — the backend-independent half of the event loop: watch lifetime
 * (deferred free once the kernel lets go), re-arm rules, the periodic timer,
 * and the automatic choice io_uring → epoll.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "loop_backend.h"
#include "memdecay_clock.h"

static int loop_try(struct md__loop *l, enum md__loop_backend b)
{
	l->backend = b;
	l->ops = b == MD__LOOP_URING ? &md__loop_uring_ops : &md__loop_epoll_ops;
	return l->ops->init(l);
}

struct md__loop *md__loop_new(enum md__loop_backend want, int *why_fallback)
{
	struct md__loop *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	if (why_fallback)
		*why_fallback = 0;
	int rc;
	if (want == MD__LOOP_EPOLL) {
		rc = loop_try(l, MD__LOOP_EPOLL);
	} else {
		rc = loop_try(l, MD__LOOP_URING);
		if (rc < 0 && want == MD__LOOP_AUTO) {
			if (why_fallback)
				*why_fallback = rc;
			rc = loop_try(l, MD__LOOP_EPOLL);
		}
	}
	if (rc < 0) {
		free(l);
		errno = -rc;
		return NULL;
	}
	return l;
}

enum md__loop_backend md__loop_backend(const struct md__loop *l)
{
	return l->backend;
}

const char *md__loop_backend_name(const struct md__loop *l)
{
	return l->ops->name;
}

void md__loop_free(struct md__loop *l)
{
	if (!l)
		return;
	l->ops->fini(l); /* the kernel lets go of every buffer here */
	struct md__watch *w = l->watches;
	while (w) {
		struct md__watch *n = w->next;
		free(w->buf);
		free(w);
		w = n;
	}
	free(l);
}

int md__watch_fd(const struct md__watch *w)
{
	return w->fd;
}

struct md__watch *md__loop_watch(struct md__loop *l, int fd, enum md__watch_kind kind,
				 size_t bufsize, md__watch_fn *fn, void *ud)
{
	struct md__watch *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->loop = l;
	w->fd = fd;
	w->kind = kind;
	w->fn = fn;
	w->ud = ud;
	w->bufsize = kind == MD__WATCH_ACCEPT ? 0 : (bufsize ? bufsize : 1);
	if (w->bufsize && !(w->buf = malloc(w->bufsize))) {
		free(w);
		return NULL;
	}
	int rc = l->ops->arm(l, w);
	if (rc < 0) {
		free(w->buf);
		free(w);
		errno = -rc;
		return NULL;
	}
	w->next = l->watches;
	l->watches = w;
	return w;
}

void md__loop_unwatch(struct md__loop *l, struct md__watch *w)
{
	if (!w || w->dead)
		return;
	w->dead = 1;
	l->dead_count++;
	l->ops->disarm(l, w);
}

int md__loop_set_timer(struct md__loop *l, uint32_t interval_ms, md__timer_fn *fn, void *ud)
{
	l->timer_fn = interval_ms ? fn : NULL;
	l->timer_ud = ud;
	l->timer_interval_ns = (uint64_t)interval_ms * 1000000ull;
	l->timer_deadline_ns = md_now_ns() + l->timer_interval_ns;
	return 0;
}

static void sweep(struct md__loop *l)
{
	struct md__watch **pp = &l->watches;
	while (*pp) {
		struct md__watch *w = *pp;
		if (w->dead && !w->inflight) {
			*pp = w->next;
			free(w->buf);
			free(w);
			l->dead_count--;
		} else {
			pp = &w->next;
		}
	}
}

static int run_timer_if_due(struct md__loop *l)
{
	if (!l->timer_fn)
		return 0;
	uint64_t now = md_now_ns();
	if (now < l->timer_deadline_ns)
		return 0;
	l->timer_deadline_ns += l->timer_interval_ns;
	if (l->timer_deadline_ns <= now) /* fell behind: do not fire in a burst */
		l->timer_deadline_ns = now + l->timer_interval_ns;
	for (struct md__watch *w = l->watches; w; w = w->next) {
		if (w->paused && !w->dead) {
			w->paused = 0;
			if (l->ops->arm(l, w) < 0)
				w->paused = 1;
		}
	}
	l->timer_fn(l, l->timer_ud);
	return 1;
}

static int loop_poll(struct md__loop *l, int block, int64_t max_wait_ns)
{
	int64_t timeout_ns = max_wait_ns;
	if (l->timer_fn) {
		uint64_t now = md_now_ns();
		int64_t t = now >= l->timer_deadline_ns ? 0 : (int64_t)(l->timer_deadline_ns - now);
		if (timeout_ns < 0 || t < timeout_ns)
			timeout_ns = t;
	}
	if (!block)
		timeout_ns = 0;
	int n = l->ops->poll(l, block, timeout_ns);
	if (n >= 0)
		n += run_timer_if_due(l);
	if (l->dead_count)
		sweep(l);
	return n;
}

int md__loop_poll(struct md__loop *l, int block)
{
	return loop_poll(l, block, -1);
}

int md__loop_poll_max(struct md__loop *l, uint64_t max_wait_ns)
{
	if (max_wait_ns > (uint64_t)INT64_MAX)
		max_wait_ns = (uint64_t)INT64_MAX;
	return loop_poll(l, 1, (int64_t)max_wait_ns);
}
