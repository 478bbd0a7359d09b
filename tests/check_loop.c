/*
 * check_loop.c — both event-loop backends against the same expectations:
 * the periodic timer fires on time, eventfd reads complete and re-arm,
 * accept and recv deliver EOF, unwatching inside a callback is safe, a
 * blocking poll with nothing to do sleeps instead of spinning, and a nap
 * (md__loop_poll_max) returns after its own short wait whatever the timer's.
 */
#include <check.h>
#include "test_util.h"
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "loop.h"
#include "memdecay_clock.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static enum md__loop_backend backends[] = { MD__LOOP_URING, MD__LOOP_EPOLL };

static struct md__loop *new_loop(int i)
{
	struct md__loop *l = md__loop_new(backends[i], NULL);
	if (!l && backends[i] == MD__LOOP_URING)
		l = md__loop_new(MD__LOOP_AUTO, NULL); /* io_uring refused here: epoll */
	ck_assert_ptr_nonnull(l);
	return l;
}

static int ticks;
static void tick(struct md__loop *l, void *ud)
{
	ticks++;
}

START_TEST(timer_fires)
{
	struct md__loop *l = new_loop(_i);
	ticks = 0;
	md__loop_set_timer(l, 20, tick, NULL);
	uint64_t t0 = md_now_ns();
	while (ticks < 5)
		ck_assert_int_ge(md__loop_poll(l, 1), 0);
	uint64_t ms = (md_now_ns() - t0) / 1000000;
	ck_assert_uint_ge(ms, 90);   /* 5 ticks of 20 ms, not a spin */
	ck_assert_uint_le(ms, 1000);
	md__loop_free(l);
}
END_TEST

struct efd_state {
	int calls;
	uint64_t sum;
	int unwatch_at;
	struct md__watch *w;
};

static void efd_cb(struct md__loop *l, struct md__watch *w, int res, const void *buf, void *ud)
{
	struct efd_state *s = ud;
	ck_assert_int_eq(res, 8);
	uint64_t v;
	memcpy(&v, buf, 8);
	s->sum += v;
	s->calls++;
	if (s->calls == s->unwatch_at)
		md__loop_unwatch(l, w);
}

START_TEST(eventfd_reads_rearm)
{
	struct md__loop *l = new_loop(_i);
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct efd_state s = { 0 };
	s.w = md__loop_watch(l, fd, MD__WATCH_READ, 8, efd_cb, &s);
	ck_assert_ptr_nonnull(s.w);
	for (int k = 1; k <= 3; k++) {
		uint64_t v = (uint64_t)k;
		ck_assert_int_eq(write(fd, &v, 8), 8);
		while (s.calls < k)
			ck_assert_int_ge(md__loop_poll(l, 1), 0);
	}
	ck_assert_int_eq(s.calls, 3);
	ck_assert_uint_eq(s.sum, 6);
	md__loop_unwatch(l, s.w);
	close(fd);
	md__loop_free(l);
}
END_TEST

START_TEST(unwatch_inside_callback)
{
	struct md__loop *l = new_loop(_i);
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct efd_state s = { .unwatch_at = 1 };
	s.w = md__loop_watch(l, fd, MD__WATCH_READ, 8, efd_cb, &s);
	uint64_t v = 7;
	ck_assert_int_eq(write(fd, &v, 8), 8);
	while (s.calls < 1)
		ck_assert_int_ge(md__loop_poll(l, 1), 0);
	/* after unwatching, further writes deliver nothing */
	ck_assert_int_eq(write(fd, &v, 8), 8);
	md__loop_set_timer(l, 10, tick, NULL);
	ticks = 0;
	while (ticks < 3)
		md__loop_poll(l, 1);
	ck_assert_int_eq(s.calls, 1);
	close(fd);
	md__loop_free(l);
}
END_TEST

/* An eventfd watched into *s, and a fresh 100 ms timer counting ticks. */
static int watched_eventfd(struct md__loop *l, struct efd_state *s)
{
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	*s = (struct efd_state){ 0 };
	s->w = md__loop_watch(l, fd, MD__WATCH_READ, 8, efd_cb, s);
	ck_assert_ptr_nonnull(s->w);
	ticks = 0;
	md__loop_set_timer(l, 100, tick, NULL);
	return fd;
}

START_TEST(idle_poll_sleeps)
{
	struct md__loop *l = new_loop(_i);
	struct efd_state s;
	int fd = watched_eventfd(l, &s);
	int polls = 0;
	uint64_t t0 = md_now_ns();
	while (ticks < 2) {
		md__loop_poll(l, 1);
		polls++;
	}
	ck_assert_uint_ge((md_now_ns() - t0) / 1000000, 190);
	ck_assert_int_le(polls, 6); /* woke for the ticks, not in a spin */
	ck_assert_int_eq(s.calls, 0);
	/* non-blocking poll returns at once with nothing to do */
	ck_assert_int_eq(md__loop_poll(l, 0) >= 0, 1);
	md__loop_unwatch(l, s.w);
	close(fd);
	md__loop_free(l);
}
END_TEST

/* The daemon's nap: 1 ms waits under a 100 ms timer.  Each returns after
 * about 1 ms with nothing done (not at the timer, not at once), an eventfd
 * write still ends one early, and the timer still fires on time. */
START_TEST(nap_waits_its_own_deadline)
{
	struct md__loop *l = new_loop(_i);
	struct efd_state s;
	int fd = watched_eventfd(l, &s);
	uint64_t t0 = md_now_ns();
	int naps = 0;
	uint64_t took[64];
	while (md_now_ns() - t0 < 50000000ull) { /* 50 ms of 1 ms naps */
		uint64_t t = md_now_ns();
		ck_assert_int_ge(md__loop_poll_max(l, 1000000ull), 0);
		ck_assert_int_lt(naps, 64);  /* far more than 50: it did not wait at all */
		took[naps++] = md_now_ns() - t;
	}
	/* ~50 naps of ~1 ms.  A nap that slept to the 100 ms timer would be the
	 * only one in the 50 ms; the median nap (not the count, which a loaded
	 * machine's wake-up delays shrink) tells a 1 ms wait from it. */
	ck_assert_int_ge(naps, 3);
	qsort(took, (size_t)naps, sizeof(took[0]), cmp_u64);
	ck_assert_uint_lt(took[naps / 2], 20000000ull);
	ck_assert_int_eq(ticks, 0);
	ck_assert_int_eq(s.calls, 0);
	/* a doorbell ends a nap early */
	uint64_t one = 1;
	ck_assert_int_eq(write(fd, &one, 8), 8);
	uint64_t t1 = md_now_ns();
	while (s.calls == 0)
		ck_assert_int_ge(md__loop_poll_max(l, 500000000ull), 0);
	ck_assert_uint_lt(md_now_ns() - t1, 100000000ull);
	/* the timer still fires, within the nap's cap */
	while (ticks == 0)
		ck_assert_int_ge(md__loop_poll_max(l, 10000000000ull), 0);
	uint64_t ms = (md_now_ns() - t0) / 1000000;
	ck_assert_uint_ge(ms, 95);
	ck_assert_uint_le(ms, 1000);
	md__loop_unwatch(l, s.w);
	close(fd);
	md__loop_free(l);
}
END_TEST

struct sock_state {
	int accepted_fd;
	int recv_bytes;
	int eof;
	char data[64];
};

static void recv_cb(struct md__loop *l, struct md__watch *w, int res, const void *buf, void *ud)
{
	struct sock_state *s = ud;
	if (res > 0) {
		memcpy(s->data + s->recv_bytes, buf, (size_t)res);
		s->recv_bytes += res;
	} else if (res == 0) {
		s->eof = 1;
		md__loop_unwatch(l, w);
	}
}

static void accept_cb(struct md__loop *l, struct md__watch *w, int res, const void *buf, void *ud)
{
	struct sock_state *s = ud;
	ck_assert_int_ge(res, 0);
	s->accepted_fd = res;
	ck_assert_ptr_nonnull(md__loop_watch(l, res, MD__WATCH_RECV, 16, recv_cb, s));
}

START_TEST(accept_recv_eof)
{
	struct md__loop *l = new_loop(_i);
	char dir[] = "/tmp/md-loop-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s", dir);
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 8), 0);
	struct sock_state s = { .accepted_fd = -1 };
	struct md__watch *lw = md__loop_watch(l, lfd, MD__WATCH_ACCEPT, 0, accept_cb, &s);
	ck_assert_ptr_nonnull(lw);
	int cfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(connect(cfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(write(cfd, "hello, loop", 11), 11);
	while (s.recv_bytes < 11)
		ck_assert_int_ge(md__loop_poll(l, 1), 0);
	ck_assert(memcmp(s.data, "hello, loop", 11) == 0);
	close(cfd);
	while (!s.eof)
		ck_assert_int_ge(md__loop_poll(l, 1), 0);
	md__loop_unwatch(l, lw);
	close(s.accepted_fd);
	close(lfd);
	unlink(sa.sun_path);
	rmdir(dir);
	md__loop_free(l);
}
END_TEST

START_TEST(auto_backend_named)
{
	int why = 0;
	struct md__loop *l = md__loop_new(MD__LOOP_AUTO, &why);
	ck_assert_ptr_nonnull(l);
	const char *name = md__loop_backend_name(l);
	ck_assert(!strcmp(name, "uring") || !strcmp(name, "epoll"));
	if (!strcmp(name, "epoll"))
		ck_assert_int_lt(why, 0); /* fell back: says why */
	md__loop_free(l);
}
END_TEST

static Suite *loop_suite(void)
{
	Suite *s = suite_create("loop");
	TCase *tc = tcase_create("backends");
	tcase_set_timeout(tc, 20);
	tcase_add_loop_test(tc, timer_fires, 0, 2);
	tcase_add_loop_test(tc, eventfd_reads_rearm, 0, 2);
	tcase_add_loop_test(tc, unwatch_inside_callback, 0, 2);
	tcase_add_loop_test(tc, idle_poll_sleeps, 0, 2);
	tcase_add_loop_test(tc, nap_waits_its_own_deadline, 0, 2);
	tcase_add_loop_test(tc, accept_recv_eof, 0, 2);
	tcase_add_test(tc, auto_backend_named);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(loop_suite());
}
