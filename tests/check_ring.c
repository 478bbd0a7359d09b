/*
 * check_ring.c — the SPSC ring of shm_layout/memdecay_ring.h: empty, full,
 * wraparound, multi-record publish, torn records and an untrusted tail/head;
 * the stamp-poll consumer (md_ring_poll_stamped, md_ring_check_tail); the
 * view constructors md_ring_prod_init/md_ring_cons_init.
 */
#include <check.h>
#include "test_util.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memdecay_abi.h"
#include "memdecay_ring.h"

#define CAP 8u

static struct md_stats_rec data[CAP];
static uint64_t tail, head;
static struct md_ring_prod prod;
static struct md_ring_cons cons;

static void setup(void)
{
	memset(data, 0, sizeof(data));
	tail = head = 0;
	ck_assert_int_eq(md_ring_prod_init(&prod, data, CAP, sizeof(struct md_stats_rec), &tail,
					   &head, 0), 0);
	ck_assert_int_eq(md_ring_cons_init(&cons, data, CAP, sizeof(struct md_stats_rec), &tail,
					   &head, 0), 0);
}

static int push(uint32_t seq)
{
	struct md_stats_rec *r = md_ring_reserve(&prod);
	if (!r)
		return 0;
	memset(r, 0, sizeof(*r));
	r->type = MD_REC_STEP;
	r->seq = seq;
	md_ring_publish(&prod, r);
	return 1;
}

START_TEST(test_empty)
{
	ck_assert_int_eq(md_ring_available(&cons), 0);
	ck_assert_ptr_nonnull(md_ring_reserve(&prod));
	ck_assert_uint_eq(tail, 0);   /* reserve alone publishes nothing */
}
END_TEST

START_TEST(test_full_then_room)
{
	for (uint32_t i = 0; i < CAP; i++)
		ck_assert_int_eq(push(i), 1);
	ck_assert_int_eq(push(99), 0);
	ck_assert_int_eq(md_ring_available(&cons), CAP);
	struct md_stats_rec r;
	ck_assert_int_eq(md_ring_copy_next(&cons, &r), MD_RING_OK);
	ck_assert_uint_eq(r.seq, 0);
	ck_assert_int_eq(push(100), 0);   /* head not released yet */
	md_ring_release(&cons);
	ck_assert_int_eq(push(100), 1);
	ck_assert_int_eq(push(101), 0);
}
END_TEST

START_TEST(test_wraparound)
{
	uint32_t produced = 0, consumed = 0;
	for (int round = 0; round < 1000; round++) {
		int burst = 1 + round % (int)CAP;
		for (int i = 0; i < burst; i++)
			if (push(produced))
				produced++;
		int64_t n = md_ring_available(&cons);
		ck_assert_int_ge(n, 0);
		ck_assert_int_le(n, CAP);
		int64_t take = n > 3 ? n - 2 : n;
		for (int64_t i = 0; i < take; i++) {
			struct md_stats_rec r;
			ck_assert_int_eq(md_ring_copy_next(&cons, &r), MD_RING_OK);
			ck_assert_uint_eq(r.seq, consumed);
			ck_assert_uint_eq(r.pos, consumed);
			consumed++;
		}
		md_ring_release(&cons);
	}
	ck_assert_uint_gt(produced, 10 * CAP);
	ck_assert_uint_eq(head, consumed);
}
END_TEST

START_TEST(test_publish_n)
{
	for (uint32_t k = 0; k < 3; k++) {
		struct md_stats_rec *r = md_ring_reserve_at(&prod, k);
		ck_assert_ptr_nonnull(r);
		r->seq = 10 + k;
	}
	ck_assert_int_eq(md_ring_available(&cons), 0);
	md_ring_publish_n(&prod, 3);
	ck_assert_int_eq(md_ring_available(&cons), 3);
	for (uint32_t k = 0; k < 3; k++) {
		struct md_stats_rec r;
		ck_assert_int_eq(md_ring_copy_next(&cons, &r), MD_RING_OK);
		ck_assert_uint_eq(r.seq, 10 + k);
	}
	ck_assert_ptr_null(md_ring_reserve_at(&prod, CAP));
}
END_TEST

START_TEST(test_torn_record)
{
	push(1);
	push(2);
	data[0].pos = 77;   /* a record whose stamp does not match its index */
	struct md_stats_rec r;
	ck_assert_int_eq(md_ring_copy_next(&cons, &r), MD_RING_TORN);
	ck_assert_int_eq(md_ring_copy_next(&cons, &r), MD_RING_OK);
	ck_assert_uint_eq(r.seq, 2);
	/* A stale record from the previous lap is torn too. */
	setup();
	for (uint32_t i = 0; i < CAP; i++)
		push(i);
	struct md_stats_rec tmp;
	for (uint32_t i = 0; i < CAP; i++)
		md_ring_copy_next(&cons, &tmp);
	md_ring_release(&cons);
	tail = CAP + 1;    /* producer claims a record it never wrote */
	ck_assert_int_eq(md_ring_available(&cons), 1);
	ck_assert_int_eq(md_ring_copy_next(&cons, &r), MD_RING_TORN);
}
END_TEST

START_TEST(test_bad_tail)
{
	push(1);
	struct md_stats_rec r;
	md_ring_copy_next(&cons, &r);
	md_ring_release(&cons);
	tail = 0;                       /* went backwards */
	ck_assert_int_eq(md_ring_available(&cons), -MD_RING_BAD_TAIL);
	tail = 1 + CAP + 1;             /* more than capacity ahead */
	ck_assert_int_eq(md_ring_available(&cons), -MD_RING_BAD_TAIL);
	tail = 1 + CAP;                 /* exactly full is fine */
	ck_assert_int_eq(md_ring_available(&cons), CAP);
	md_ring_skip_to(&cons, tail);
	ck_assert_uint_eq(head, 1 + CAP);
	ck_assert_int_eq(md_ring_available(&cons), 0);
}
END_TEST

START_TEST(test_bad_head)
{
	push(1);
	head = 100;   /* a consumer claiming records never produced */
	int pushed = 1;
	for (int i = 0; i < 3 * (int)CAP; i++)
		pushed += push(3);
	/* Treated as full: nothing unread is ever overwritten. */
	ck_assert_int_eq(pushed, CAP);
	ck_assert_ptr_null(md_ring_reserve(&prod));
	ck_assert_uint_eq(prod.next, CAP);
}
END_TEST

/* ---- stamp polling ---- */

START_TEST(test_stamp_empty_ok)
{
	struct md_stats_rec r;
	/* A fresh zero slot matches index 0: only the tail vouches for it. */
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_EMPTY);
	struct md_stats_rec *w = md_ring_reserve(&prod);
	memset(w, 0, sizeof(*w));
	w->seq = 41;
	w->pos = 0;   /* stamped but not yet published by the tail */
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_EMPTY);
	md_ring_publish(&prod, w);
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_OK);
	ck_assert_uint_eq(r.seq, 41);
	ck_assert_uint_eq(cons.next, 1);
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_EMPTY);
	/* Index 1: the stamp alone publishes it, before the tail moves. */
	w = md_ring_reserve(&prod);
	memset(w, 0, sizeof(*w));
	w->seq = 42;
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_EMPTY);   /* pos 0, want 1 */
	*(uint32_t *)w = 1;   /* the stamp md_ring_publish stores, tail not yet */
	ck_assert_uint_eq(tail, 1);
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_OK);
	ck_assert_uint_eq(r.seq, 42);
	md_ring_release(&cons);
	/* Head is now ahead of the tail, never ahead of the producer's next. */
	ck_assert_uint_eq(head, 2);
	ck_assert_int_eq(md_ring_check_tail(&cons), 0);   /* the lag is allowed */
	ck_assert_int_eq(md_ring_available(&cons), -MD_RING_BAD_TAIL);   /* by-tail view */
	md_ring_publish(&prod, w);   /* the producer finishes: next 2, tail 2 */
	ck_assert_uint_eq(tail, 2);
	ck_assert_ptr_nonnull(md_ring_reserve(&prod));
	ck_assert_int_eq(md_ring_available(&cons), 0);
}
END_TEST

START_TEST(test_stamp_wraparound)
{
	uint32_t produced = 0, consumed = 0;
	for (int round = 0; round < 1000; round++) {
		int burst = 1 + round % (int)CAP;
		for (int i = 0; i < burst; i++)
			if (push(produced))
				produced++;
		/* now and then a batch through reserve_at/publish_n */
		if (round % 7 == 3) {
			uint32_t k = 0;
			struct md_stats_rec *w;
			while (k < 3 && (w = md_ring_reserve_at(&prod, k))) {
				memset(w, 0, sizeof(*w));
				w->seq = produced + k;
				k++;
			}
			md_ring_publish_n(&prod, k);
			produced += k;
		}
		int take = round % 3 == 0 ? (int)CAP : 2;
		struct md_stats_rec r;
		int st;
		while (take-- > 0 && (st = md_ring_poll_stamped(&cons, &r)) != MD_RING_EMPTY) {
			ck_assert_int_eq(st, MD_RING_OK);
			ck_assert_uint_eq(r.seq, consumed);
			ck_assert_uint_eq(r.pos, consumed);
			consumed++;
		}
		md_ring_release(&cons);
		ck_assert_int_ge(md_ring_check_tail(&cons), 0);
	}
	ck_assert_uint_gt(produced, 10 * CAP);
	ck_assert_uint_eq(head, consumed);
	ck_assert_uint_le(consumed, produced);
}
END_TEST

START_TEST(test_stamp_batch_first_last)
{
	/* publish_n stamps last to first: seeing the first means the batch. */
	push(0);
	struct md_stats_rec r;
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_OK);
	for (uint32_t k = 0; k < 3; k++) {
		struct md_stats_rec *w = md_ring_reserve_at(&prod, k);
		ck_assert_ptr_nonnull(w);
		memset(w, 0, sizeof(*w));
		w->seq = 20 + k;
	}
	/* reserve_at stamps nothing: not visible yet by stamp or tail */
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_EMPTY);
	ck_assert_uint_eq(data[1].pos, 0);
	md_ring_publish_n(&prod, 3);
	for (uint32_t k = 0; k < 3; k++) {
		ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_OK);
		ck_assert_uint_eq(r.seq, 20 + k);
	}
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_EMPTY);
}
END_TEST

/* A wrong stamp: not taken by stamp; the tail exposes it as torn. */
START_TEST(test_stamp_torn)
{
	push(0);
	push(1);
	push(2);
	struct md_stats_rec r;
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_OK);
	/* record 1 stamped wrong: not published by stamp */
	data[1].pos = 77;
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_EMPTY);
	ck_assert_uint_eq(cons.next, 1);
	/* the tail publishes it: a by-tail copy reports it torn */
	ck_assert_int_eq(md_ring_check_tail(&cons), 2);
	ck_assert_int_eq(md_ring_copy_next(&cons, &r), MD_RING_TORN);
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_OK);
	ck_assert_uint_eq(r.pos, 2);
	/* A stale record from the previous lap never matches its index. */
	setup();
	for (uint32_t i = 0; i < CAP; i++)
		push(i);
	for (uint32_t i = 0; i < CAP; i++)
		ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_OK);
	md_ring_release(&cons);
	tail = CAP + 1;    /* a tail claiming a record never stamped */
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_EMPTY);
	ck_assert_uint_eq(cons.next, CAP);
}
END_TEST

/* A hostile producer rewriting the stamp while the consumer copies: the
 * re-check after the copy (and the copy's own pos) catch it. */
#include <pthread.h>

static volatile int scribble_stop;
static void *scribbler(void *arg)
{
	uint32_t *pos = arg;
	uint32_t v = 0;
	while (!__atomic_load_n(&scribble_stop, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(pos, (v++ & 1) ? 1u : 0x10001u, __ATOMIC_RELAXED);
	}
	return NULL;
}

START_TEST(test_stamp_torn_concurrent)
{
	/* Index 1 with a hostile producer flipping its stamp between the
	 * wanted value (1) and another: every take is OK or TORN, never a
	 * record whose copy or stamp differs from the index. */
	push(0);
	struct md_stats_rec r;
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_OK);
	tail = 2;
	ck_assert_int_eq(md_ring_check_tail(&cons), 1);
	data[1].pos = 1;
	pthread_t t;
	scribble_stop = 0;
	ck_assert_int_eq(pthread_create(&t, NULL, scribbler, &data[1].pos), 0);
	int ok = 0, torn = 0;
	for (int i = 0; i < 200000 && (ok == 0 || torn == 0); i++) {
		cons.next = 1;
		int st = md_ring_poll_stamped(&cons, &r);
		if (st == MD_RING_OK) {
			ck_assert_uint_eq(r.pos, 1);
			ok++;
		} else if (st == MD_RING_TORN) {
			ck_assert_uint_eq(cons.next, 2);   /* advanced past it */
			torn++;
		} else {
			ck_assert_int_eq(st, MD_RING_EMPTY);
			ck_assert_uint_eq(cons.next, 1);
		}
	}
	__atomic_store_n(&scribble_stop, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	ck_assert_int_gt(ok + torn, 0);
}
END_TEST

START_TEST(test_stamp_hostile_ahead)
{
	/* A producer that stamps records far ahead of its tail (tail stays 0):
	 * index 0 needs the tail, so nothing is taken at all. */
	for (uint32_t i = 0; i < CAP; i++)
		data[i].pos = i;
	struct md_stats_rec r;
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_EMPTY);
	/* From index 1 with tail 1: the consumer takes stamped records, but at
	 * most one capacity past the tail it validated, then waits for it. */
	setup();
	push(0);
	uint32_t taken = 0;
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_OK);   /* index 0, tail 1 */
	taken++;
	for (uint64_t idx = 1; idx < 4 * CAP; idx++) {
		/* the hostile producer stamps the slot at idx once it is free */
		if (idx - cons.next < CAP)
			data[idx & (CAP - 1)].pos = (uint32_t)idx;
		int st = md_ring_poll_stamped(&cons, &r);
		if (st != MD_RING_OK) {
			ck_assert_int_eq(st, MD_RING_EMPTY);
			break;
		}
		taken++;
		md_ring_release(&cons);
	}
	ck_assert_uint_eq(tail, 1);
	ck_assert_uint_eq(cons.tail_seen, 1);
	ck_assert_uint_eq(taken, 1 + CAP);   /* tail_seen + capacity, no further */
	ck_assert_uint_eq(cons.next, 1 + CAP);
	ck_assert_int_eq(md_ring_check_tail(&cons), 0);   /* lag == capacity: allowed */
	/* The tail catching up releases the consumer again. */
	data[(1 + CAP) & (CAP - 1)].pos = 1 + CAP;
	tail = 1 + CAP;
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_OK);
	/* A tail that then goes backwards, or runs away, is a violation. */
	tail = 1;
	ck_assert_int_eq(md_ring_check_tail(&cons), -MD_RING_BAD_TAIL);
	tail = cons.next + CAP + 1;
	ck_assert_int_eq(md_ring_check_tail(&cons), -MD_RING_BAD_TAIL);
	tail = cons.next + CAP;
	ck_assert_int_eq(md_ring_check_tail(&cons), CAP);
}
END_TEST

START_TEST(test_stamp_bad_tail_on_reload)
{
	/* A tail far beyond capacity is caught when the poll needs the tail. */
	tail = 10 * CAP;
	struct md_stats_rec r;
	ck_assert_int_eq(md_ring_poll_stamped(&cons, &r), MD_RING_BAD_TAIL);
	ck_assert_uint_eq(cons.next, 0);
	md_ring_skip_to(&cons, tail);
	ck_assert_uint_eq(cons.tail_seen, 10 * CAP);
	ck_assert_int_eq(md_ring_check_tail(&cons), 0);
}
END_TEST

/* The views refuse geometry that would index outside the ring, and say so by
 * a zeroed view, never a half-set one. */
START_TEST(test_init_refuses_bad_geometry)
{
	struct md_ring_prod p;
	struct md_ring_cons c;
	const uint32_t rs = sizeof(struct md_stats_rec);
	const uint32_t bad_caps[] = { 0, 3, 6, 12, 0x80000001u };
	for (size_t i = 0; i < sizeof(bad_caps) / sizeof(bad_caps[0]); i++) {
		memset(&p, 0xab, sizeof(p));
		ck_assert_int_eq(md_ring_prod_init(&p, data, bad_caps[i], rs, &tail, &head, 0), -1);
		ck_assert_ptr_null(p.data);
		ck_assert_uint_eq(p.capacity, 0);
		memset(&c, 0xab, sizeof(c));
		ck_assert_int_eq(md_ring_cons_init(&c, data, bad_caps[i], rs, &tail, &head, 0), -1);
		ck_assert_ptr_null(c.data);
		ck_assert_uint_eq(c.capacity, 0);
	}
	ck_assert_int_eq(md_ring_prod_init(&p, data, CAP, 2, &tail, &head, 0), -1); /* no stamp */
	ck_assert_int_eq(md_ring_prod_init(&p, NULL, CAP, rs, &tail, &head, 0), -1);
	ck_assert_int_eq(md_ring_prod_init(&p, data, CAP, rs, NULL, &head, 0), -1);
	ck_assert_int_eq(md_ring_cons_init(&c, data, CAP, rs, &tail, NULL, 0), -1);
	ck_assert_int_eq(md_ring_prod_init(&p, data, 1, rs, &tail, &head, 0), 0); /* 1 = 2^0 */
}
END_TEST

/* A view re-made over a used ring starts where its side left off: the
 * producer never overwrites records the consumer has not released, and a
 * consumer head ahead of what was produced reads as a full ring. */
START_TEST(test_init_over_used_ring)
{
	for (uint32_t i = 0; i < CAP + 3; i++) {
		ck_assert_int_eq(push(i), 1);
		if (i >= 3) {
			struct md_stats_rec r;
			ck_assert_int_eq(md_ring_copy_next(&cons, &r), MD_RING_OK);
			md_ring_release(&cons);
		}
	}
	uint64_t t = tail, h = head; /* 3 records unread */
	ck_assert_uint_eq(t - h, 3);
	struct md_ring_prod p;
	ck_assert_int_eq(md_ring_prod_init(&p, data, CAP, sizeof(struct md_stats_rec), &tail, &head,
					   t), 0);
	uint32_t room = 0;
	while (md_ring_reserve(&p)) {
		md_ring_publish(&p, md_ring_reserve(&p));
		room++;
	}
	ck_assert_uint_eq(room, CAP - 3);
	struct md_ring_cons c;
	ck_assert_int_eq(md_ring_cons_init(&c, data, CAP, sizeof(struct md_stats_rec), &tail, &head,
					   h), 0);
	ck_assert_uint_eq(c.tail_seen, h);
	ck_assert_int_eq(md_ring_available(&c), CAP);
	struct md_stats_rec r;
	ck_assert_int_eq(md_ring_copy_next(&c, &r), MD_RING_OK);
	ck_assert_uint_eq(r.pos, (uint32_t)h);

	head = t + 5; /* hostile: the consumer claims records never produced */
	ck_assert_int_eq(md_ring_prod_init(&p, data, CAP, sizeof(struct md_stats_rec), &tail, &head,
					   t), 0);
	ck_assert_ptr_null(md_ring_reserve(&p));
	ck_assert_ptr_null(md_ring_reserve_at(&p, 0));
}
END_TEST

static Suite *ring_suite(void)
{
	Suite *s = suite_create("ring");
	TCase *tc = tcase_create("spsc");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_full_then_room);
	tcase_add_test(tc, test_wraparound);
	tcase_add_test(tc, test_publish_n);
	tcase_add_test(tc, test_torn_record);
	tcase_add_test(tc, test_bad_tail);
	tcase_add_test(tc, test_bad_head);
	tcase_add_test(tc, test_stamp_empty_ok);
	tcase_add_test(tc, test_stamp_wraparound);
	tcase_add_test(tc, test_stamp_batch_first_last);
	tcase_add_test(tc, test_stamp_torn);
	tcase_add_test(tc, test_stamp_torn_concurrent);
	tcase_add_test(tc, test_stamp_hostile_ahead);
	tcase_add_test(tc, test_stamp_bad_tail_on_reload);
	tcase_add_test(tc, test_init_refuses_bad_geometry);
	tcase_add_test(tc, test_init_over_used_ring);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(ring_suite());
}
