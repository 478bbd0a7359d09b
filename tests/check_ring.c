/*
 * check_ring.c — the SPSC ring of shm_layout/memdecay_ring.h: empty, full,
 * wraparound, multi-record publish, torn records and an untrusted tail/head.
 */
#include <check.h>
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
	prod = (struct md_ring_prod){ .data = data, .tail = &tail, .head = &head,
				      .capacity = CAP, .rec_size = sizeof(struct md_stats_rec) };
	cons = (struct md_ring_cons){ .data = data, .tail = &tail, .head = &head,
				      .capacity = CAP, .rec_size = sizeof(struct md_stats_rec) };
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
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ring_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
