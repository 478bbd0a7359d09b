/*
 * loop_epoll.c — epoll backend: a watch is a level-triggered EPOLLIN
 * registration; on readiness this file makes the accept4 / recv / read call
 * the io_uring backend would have submitted, so callers see the same
 * completions.  The timer is epoll_wait's timeout.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "loop_backend.h"

#define EPOLL_BATCH 64

struct epoll_impl {
	int epfd;
};

static int epoll_init(struct md__loop *l)
{
	struct epoll_impl *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (e->epfd < 0) {
		int err = errno;
		free(e);
		return -err;
	}
	l->impl = e;
	return 0;
}

static void epoll_fini(struct md__loop *l)
{
	struct epoll_impl *e = l->impl;
	close(e->epfd);
	free(e);
	l->impl = NULL;
}

static int epoll_arm(struct md__loop *l, struct md__watch *w)
{
	struct epoll_impl *e = l->impl;
	if (w->inflight)
		return 0; /* level-triggered: stays armed */
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = w };
	if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, w->fd, &ev) < 0)
		return -errno;
	w->inflight = 1;
	return 0;
}

static void epoll_disarm(struct md__loop *l, struct md__watch *w)
{
	struct epoll_impl *e = l->impl;
	if (!w->inflight)
		return;
	epoll_ctl(e->epfd, EPOLL_CTL_DEL, w->fd, NULL);
	w->inflight = 0;
}

static int do_op(struct md__watch *w)
{
	ssize_t r;
	switch (w->kind) {
	case MD__WATCH_ACCEPT:
		r = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		break;
	case MD__WATCH_RECV:
		r = recv(w->fd, w->buf, w->bufsize, MSG_DONTWAIT);
		break;
	default:
		r = read(w->fd, w->buf, w->bufsize);
		break;
	}
	return r < 0 ? -errno : (int)r;
}

static int epoll_poll(struct md__loop *l, int block, int64_t timeout_ns)
{
	struct epoll_impl *e = l->impl;
	struct epoll_event evs[EPOLL_BATCH];
	int timeout_ms = 0;
	if (block)
		timeout_ms = timeout_ns < 0 ? -1 : (int)((timeout_ns + 999999) / 1000000);
	int k = epoll_wait(e->epfd, evs, EPOLL_BATCH, timeout_ms);
	if (k < 0)
		return errno == EINTR ? 0 : -errno;
	int n = 0;
	for (int i = 0; i < k; i++) {
		struct md__watch *w = evs[i].data.ptr;
		if (w->dead || !w->inflight)
			continue; /* unwatched by an earlier callback of this batch */
		int res = do_op(w);
		if (res == -EAGAIN || res == -EINTR)
			continue;
		n++;
		if (!md__loop_dispatch(l, w, res))
			epoll_disarm(l, w);
	}
	return n;
}

const struct md__loop_ops md__loop_epoll_ops = {
	.name = "epoll",
	.init = epoll_init,
	.fini = epoll_fini,
	.arm = epoll_arm,
	.disarm = epoll_disarm,
	.poll = epoll_poll,
};
