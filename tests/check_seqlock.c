/*
 * check_seqlock.c — the parameter-block seqlock: a reader racing a writer
 * thread never sees a torn block, and a writer stuck mid-update makes the
 * reader give up instead of returning half-written values.
 */
#include <check.h>
#include "test_util.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memdecay_abi.h"
#include "memdecay_clock.h"
#include "memdecay_ring.h"

static struct md_param_block block;
static volatile int stop;

/* Every word of the block (after seq) holds the same value: a torn read
 * shows two different values. */
static void *writer(void *arg)
{
	uint64_t v = 1;
	uint64_t *w = (uint64_t *)&block;
	size_t n = sizeof(block) / 8;
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		md_seqlock_write_begin(&block.seq);
		for (size_t k = 1; k < n; k++)
			__atomic_store_n(&w[k], v, __ATOMIC_RELAXED);
		md_seqlock_write_end(&block.seq);
		v++;
		/* A short gap so that a reader on a busy machine sometimes wins. */
		for (int i = 0; i < 200; i++)
			(void)__atomic_load_n(&stop, __ATOMIC_RELAXED);
	}
	return arg;
}

START_TEST(test_no_torn_read)
{
	pthread_t th;
	stop = 0;
	memset(&block, 0, sizeof(block));
	ck_assert_int_eq(pthread_create(&th, NULL, writer, NULL), 0);
	uint64_t reads = 0, retries = 0, last = 0, changes = 0;
	uint64_t t0 = md_now_ns();
	do {
		struct md_param_block copy;
		uint64_t s = md_seqlock_read(&block.seq, &copy, &block, sizeof(copy), 100000);
		if (!s) {
			retries++;
		} else {
			const uint64_t *w = (const uint64_t *)&copy;
			for (size_t k = 2; k < sizeof(copy) / 8; k++)
				ck_assert_uint_eq(w[k], w[1]);
			ck_assert_uint_eq(s & 1, 0);
			if (w[1] != last)
				changes++;
			ck_assert_uint_ge(w[1], last);   /* never goes back */
			last = w[1];
			reads++;
		}
	} while (md_now_ns() - t0 < 300000000u);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	ck_assert_uint_gt(reads, 10);
	ck_assert_uint_gt(changes, 1);   /* the race really happened */
	(void)retries;
}
END_TEST

START_TEST(test_writer_stuck_odd)
{
	memset(&block, 0, sizeof(block));
	block.tau = 0.5;
	md_seqlock_write_begin(&block.seq);
	struct md_param_block copy;
	ck_assert_uint_eq(md_seqlock_read(&block.seq, &copy, &block, sizeof(copy), 50), 0);
	md_seqlock_write_end(&block.seq);
	uint64_t s = md_seqlock_read(&block.seq, &copy, &block, sizeof(copy), 50);
	ck_assert_uint_ne(s, 0);
	ck_assert_uint_eq(s & 1, 0);
	ck_assert(copy.tau == 0.5);
}
END_TEST

START_TEST(test_sequence_changes)
{
	memset(&block, 0, sizeof(block));
	struct md_param_block copy;
	uint64_t s0 = md_seqlock_read(&block.seq, &copy, &block, sizeof(copy), 4);
	ck_assert_uint_ne(s0, 0);   /* success is never reported as 0 */
	md_seqlock_write_begin(&block.seq);
	block.tau = 1.0;
	md_seqlock_write_end(&block.seq);
	uint64_t s1 = md_seqlock_read(&block.seq, &copy, &block, sizeof(copy), 4);
	ck_assert_uint_ne(s1, s0);
	ck_assert(copy.tau == 1.0);
}
END_TEST

static Suite *seqlock_suite(void)
{
	Suite *s = suite_create("seqlock");
	TCase *tc = tcase_create("param_block");
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, test_no_torn_read);
	tcase_add_test(tc, test_writer_stuck_odd);
	tcase_add_test(tc, test_sequence_changes);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(seqlock_suite());
}
