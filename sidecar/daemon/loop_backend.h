/*
 * loop_backend.h — what loop.c shares with its backends (loop_uring.c,
 * loop_epoll.c).  Not a public interface: only the loop files include it.
 */
#ifndef MD_LOOP_BACKEND_H
#define MD_LOOP_BACKEND_H

#include "loop.h"

struct md__watch {
	struct md__loop *loop;
	struct md__watch *next;    /* every watch of the loop, for the sweep */
	int fd;
	enum md__watch_kind kind;
	md__watch_fn *fn;
	void *ud;
	size_t bufsize;
	char *buf;
	int dead;                  /* unwatched: no more callbacks */
	int inflight;              /* the kernel holds a reference (uring op / epoll registration) */
	int paused;                /* not re-armed (EMFILE ...); the timer re-arms it */
};

struct md__loop_ops {
	const char *name;
	int (*init)(struct md__loop *l);         /* 0 or -errno */
	void (*fini)(struct md__loop *l);
	int (*arm)(struct md__loop *l, struct md__watch *w);
	void (*disarm)(struct md__loop *l, struct md__watch *w);
	int (*poll)(struct md__loop *l, int block, int64_t timeout_ns);
};

struct md__loop {
	enum md__loop_backend backend;
	const struct md__loop_ops *ops;
	void *impl;
	struct md__watch *watches;
	int dead_count;
	md__timer_fn *timer_fn;
	void *timer_ud;
	uint64_t timer_interval_ns;
	uint64_t timer_deadline_ns;
};

extern const struct md__loop_ops md__loop_uring_ops;
extern const struct md__loop_ops md__loop_epoll_ops;

/* Backends call this for every completion of a live watch; it runs the
 * callback and decides whether the watch stays armed (returns 1). */
int md__loop_dispatch(struct md__loop *l, struct md__watch *w, int res);

#endif
