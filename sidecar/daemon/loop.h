/*
 * loop.h — memdecayd's single-threaded event loop, with two backends behind
 * one small interface (the Redis ae.h / ae_epoll.c split): loop_uring.c submits
 * real accept / recv / read operations to io_uring, loop_epoll.c waits for
 * readiness and performs the same calls itself.  Callers see completions only:
 * "this accept returned fd N", "this recv returned N bytes into buf".
 *
 * A watch is persistent: after its callback returns it is re-armed with the
 * same buffer, unless the callback (or anyone) deleted it, or the result was
 * EOF / a hard error.  Deleting is always safe, also from inside a callback:
 * the backend frees the watch (and its buffer) only once the kernel holds no
 * reference to it.  One periodic timer per loop.
 */
#ifndef MD_LOOP_H
#define MD_LOOP_H

#include <stddef.h>
#include <stdint.h>
#include "memdecay_clock.h"

struct md__loop;
struct md__watch;

enum md__loop_backend {
	MD__LOOP_AUTO = 0,
	MD__LOOP_URING = 1,
	MD__LOOP_EPOLL = 2,
};

enum md__watch_kind {
	MD__WATCH_ACCEPT = 1, /* res: new fd (SOCK_NONBLOCK|SOCK_CLOEXEC) or -errno */
	MD__WATCH_RECV = 2,   /* res: bytes received into buf, 0 on EOF, or -errno */
	MD__WATCH_READ = 3,   /* res: bytes read into buf (eventfd, signalfd) or -errno */
};

/* buf is the watch's own buffer (valid during the call); res as above. */
typedef void md__watch_fn(struct md__loop *l, struct md__watch *w, int res,
			  const void *buf, void *ud);
typedef void md__timer_fn(struct md__loop *l, void *ud);

/* Creates a loop.  AUTO tries io_uring and falls back to epoll when the
 * kernel refuses it (EPERM, ENOSYS, seccomp, kernel.io_uring_disabled);
 * *why_fallback (if not NULL) receives the io_uring error (negative errno) or 0.
 * Returns NULL with errno set on failure. */
struct md__loop *md__loop_new(enum md__loop_backend want, int *why_fallback);
void md__loop_free(struct md__loop *l);
enum md__loop_backend md__loop_backend(const struct md__loop *l);
const char *md__loop_backend_name(const struct md__loop *l);

/* bufsize: bytes per recv/read (ignored for ACCEPT).  Returns NULL on error. */
struct md__watch *md__loop_watch(struct md__loop *l, int fd, enum md__watch_kind kind,
				 size_t bufsize, md__watch_fn *fn, void *ud);
/* Stops delivering completions for w; the caller may close the fd right after. */
void md__loop_unwatch(struct md__loop *l, struct md__watch *w);
int md__watch_fd(const struct md__watch *w);

/* Periodic timer: fn runs every interval_ms (from now).  0 disables. */
int md__loop_set_timer(struct md__loop *l, uint32_t interval_ms, md__timer_fn *fn, void *ud);

/* Processes completions.  block=0: only what is already there; block=1: waits
 * until at least one completion or the timer fires.  Returns the number of
 * callbacks run, or -errno. */
int md__loop_poll(struct md__loop *l, int block);
/* md__loop_poll(l, 1) that also returns once max_wait_ns have passed with
 * nothing to do (returns 0 then): the daemon's nap between engine steps. */
int md__loop_poll_max(struct md__loop *l, uint64_t max_wait_ns);

#endif
