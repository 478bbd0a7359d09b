/*
 * loop_dispatch.c — what both loop backends do with a completion: run the
 * watch's callback, then apply the re-arm rules.  Below loop.c and the
 * backends alike, so the backends never call back into loop.c (loop.c picks
 * a backend; a backend only calls down to here).
 */
#include <errno.h>

#include "loop_backend.h"

static int should_rearm(struct md__watch *w, int res)
{
	if (w->kind == MD__WATCH_ACCEPT) {
		if (res >= 0 || res == -EAGAIN || res == -EINTR || res == -ECONNABORTED)
			return 1;
		if (res == -EMFILE || res == -ENFILE || res == -ENOBUFS || res == -ENOMEM)
			w->paused = 1; /* retry at the next tick instead of spinning */
		return 0;
	}
	return res > 0 || res == -EAGAIN || res == -EINTR;
}

int md__loop_dispatch(struct md__loop *l, struct md__watch *w, int res)
{
	w->fn(l, w, res, w->buf, w->ud);
	if (w->dead)
		return 0;
	return should_rearm(w, res);
}
