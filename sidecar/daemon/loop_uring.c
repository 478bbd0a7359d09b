/*
 * loop_uring.c — io_uring backend: every watch is one outstanding SQE
 * (accept, recv or read) whose user_data is the watch.  A blocking wait with
 * a deadline (the tick, or a nap's 1 ms) passes it to io_uring_enter itself
 * (io_uring_submit_and_wait_timeout: IORING_ENTER_EXT_ARG, or on kernels
 * before 5.11 liburing's own timeout SQE), so every wait gets exactly its
 * own deadline and no timeout request outlives it.  A deleted watch gets a
 * cancel and is freed by loop.c once its last CQE (usually -ECANCELED) came
 * back.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <liburing.h>

#include "loop_backend.h"

#define URING_ENTRIES 1024u
#define UD_IGNORE 0ull   /* cancel requests; watch pointers are never 0 */

struct uring_impl {
	struct io_uring ring;
};

static struct io_uring_sqe *get_sqe(struct uring_impl *u)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
	if (!sqe) {
		io_uring_submit(&u->ring);
		sqe = io_uring_get_sqe(&u->ring);
	}
	return sqe;
}

static int uring_init(struct md__loop *l)
{
	struct uring_impl *u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	int rc = io_uring_queue_init(URING_ENTRIES, &u->ring, 0);
	if (rc < 0) {
		free(u);
		return rc;
	}
	l->impl = u;
	return 0;
}

static void uring_fini(struct md__loop *l)
{
	struct uring_impl *u = l->impl;
	io_uring_queue_exit(&u->ring);
	free(u);
	l->impl = NULL;
}

static int uring_arm(struct md__loop *l, struct md__watch *w)
{
	struct uring_impl *u = l->impl;
	struct io_uring_sqe *sqe = get_sqe(u);
	if (!sqe)
		return -EBUSY;
	switch (w->kind) {
	case MD__WATCH_ACCEPT:
		io_uring_prep_accept(sqe, w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		break;
	case MD__WATCH_RECV:
		io_uring_prep_recv(sqe, w->fd, w->buf, w->bufsize, 0);
		break;
	case MD__WATCH_READ:
		io_uring_prep_read(sqe, w->fd, w->buf, (unsigned)w->bufsize, 0);
		break;
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)w);
	w->inflight = 1;
	return 0;
}

static void uring_disarm(struct md__loop *l, struct md__watch *w)
{
	struct uring_impl *u = l->impl;
	if (!w->inflight)
		return;
	struct io_uring_sqe *sqe = get_sqe(u);
	if (!sqe)
		return; /* the op completes on its own when the fd goes away */
	io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)w, 0);
	io_uring_sqe_set_data64(sqe, UD_IGNORE);
	io_uring_submit(&u->ring); /* before the caller closes the fd */
}

static int uring_poll(struct md__loop *l, int block, int64_t timeout_ns)
{
	struct uring_impl *u = l->impl;
	int rc;
	if (block && timeout_ns >= 0) {
		struct __kernel_timespec ts = { .tv_sec = timeout_ns / 1000000000ll,
						.tv_nsec = timeout_ns % 1000000000ll };
		struct io_uring_cqe *first;
		rc = io_uring_submit_and_wait_timeout(&u->ring, &first, 1, &ts, NULL);
	} else if (block) {
		rc = io_uring_submit_and_wait(&u->ring, 1);
	} else {
		rc = io_uring_sq_ready(&u->ring) ? io_uring_submit(&u->ring) : 0;
	}
	if (rc < 0 && rc != -EINTR && rc != -ETIME && rc != -EBUSY)
		return rc;

	int n = 0;
	struct io_uring_cqe *cqe;
	while (io_uring_peek_cqe(&u->ring, &cqe) == 0) {
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&u->ring, cqe);
		if (ud == UD_IGNORE)
			continue;
		struct md__watch *w = (struct md__watch *)(uintptr_t)ud;
		w->inflight = 0;
		if (w->dead)
			continue;
		n++;
		if (md__loop_dispatch(l, w, res))
			uring_arm(l, w);
	}
	return n;
}

const struct md__loop_ops md__loop_uring_ops = {
	.name = "uring",
	.init = uring_init,
	.fini = uring_fini,
	.arm = uring_arm,
	.disarm = uring_disarm,
	.poll = uring_poll,
};
