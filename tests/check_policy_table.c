/*
 * check_policy_table.c — the policy table, run against a build that adds the
 * test-only policy test-lifo exactly as docs/policies.md "Adding a policy"
 * says (sidecar/host/policy_test_lifo.c, one table row, one enum value):
 * its name reaches the parameters and their messages, and the host scores and
 * evicts with it like any built-in policy.
 */
#include <check.h>
#include "test_util.h"
#include <string.h>
#include "host.h"
#include "host_internal.h"
#include "oracle.h"
#include "policy.h"

START_TEST(test_every_row_complete)
{
	for (uint32_t i = 0; i < MD_POLICY_COUNT; i++) {
		const struct md__policy *pol = md__policy_table[i];
		ck_assert_msg(pol != NULL, "policy %u has no table row", i);
		ck_assert_ptr_nonnull(pol->name);
		ck_assert_ptr_nonnull(pol->score);
		ck_assert_ptr_nonnull(pol->static_bound);
		ck_assert_ptr_nonnull(pol->lower_bound);
		ck_assert_ptr_eq(md__policy_get(i), pol);
		ck_assert_int_eq(md__policy_from_name(pol->name), (int)i);
		ck_assert_str_eq(md__policy_name(i), pol->name);
	}
	ck_assert_str_eq(md__policy_name(MD_POLICY_TEST_LIFO), "test-lifo");
	ck_assert_str_eq(md__policy_name(MD_POLICY_COUNT), "unknown");
}
END_TEST

/* A policy that sets memdecay_bound has its lower bound evaluated inline on
 * the attention path (pagestate.c, attn_rekey): the two must agree, and the
 * bound must be one attention can lower. */
START_TEST(test_memdecay_bound_trait)
{
	struct md__params p;
	md__params_defaults(&p);
	unsigned seed = 7, flagged = 0;
	for (uint32_t i = 0; i < MD_POLICY_COUNT; i++) {
		const struct md__policy *pol = md__policy_table[i];
		if (!pol->memdecay_bound)
			continue;
		flagged++;
		ck_assert_msg(pol->attn_lowers, "%s: memdecay_bound without attn_lowers", pol->name);
		for (int k = 0; k < 1000; k++) {
			struct md__page pg;
			memset(&pg, 0, sizeof(pg));
			pg.n_tokens = (uint16_t)(1 + rand_r(&seed) % 16);
			pg.lb_static = (double)rand_r(&seed) / RAND_MAX * pg.n_tokens;
			pg.ewma_raw = (double)rand_r(&seed) / RAND_MAX;
			pg.ewma_norm = (double)rand_r(&seed) / RAND_MAX * 50.0;
			struct md__score_in in = { .p = &p, .clock = 100, .engine_id = 1, .slot = 3,
						   .norm_mode = (uint32_t)(k & 1), .page_tokens = 16 };
			uint32_t norm = pol->always_relative ? MD_NORM_RELATIVE : in.norm_mode;
			ck_assert_double_eq(pol->lower_bound(&pg, &in),
					    md__memdecay_bound_at(&pg, p.alpha, norm));
		}
	}
	ck_assert_uint_eq(flagged, 3); /* memdecay, memdecay-norm, memdecay-turn */
}
END_TEST

START_TEST(test_name_reaches_params)
{
	struct md__params p;
	md__params_defaults(&p);
	char err[512], buf[64];
	ck_assert_int_eq(md__params_set(&p, "policy", "test-lifo", err, sizeof err), 0);
	ck_assert_uint_eq(p.policy, MD_POLICY_TEST_LIFO);
	ck_assert_int_gt(md__params_get(&p, "policy", buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "test-lifo");
	/* the refusal lists every policy, the new one included */
	ck_assert_int_lt(md__params_set(&p, "policy", "lru", err, sizeof err), 0);
	ck_assert_msg(strstr(err, "memdecay|memdecay-norm|h2o|recency|random|memdecay-turn|test-lifo"),
		      "message: %s", err);
}
END_TEST

static int open_page(struct md__host *h, uint32_t slot, uint64_t first_pos, unsigned region)
{
	struct md_stats_rec r;
	memset(&r, 0, sizeof r);
	r.type = MD_REC_PAGE_OPEN;
	r.slot = slot;
	r.clock = first_pos;
	r.u.page.first_pos = first_pos;
	r.u.page.n_tokens = 4;
	for (unsigned k = 0; k < 4; k++)
		r.u.page.labels = md_label_set(r.u.page.labels, k, region);
	return md__host_ingest(h, 1, &r);
}

START_TEST(test_host_evicts_newest_first)
{
	struct md__params p;
	md__params_defaults(&p);
	p.policy = MD_POLICY_TEST_LIFO;
	p.protect_recent = 1;
	struct md__host *h = md__host_new(&p);
	ck_assert_int_eq(md__host_engine_add(h, 1, 4, 16, 1, NULL), 0);
	/* page 0 is pinned (system); pages 1..9 are user turns */
	ck_assert_int_eq(open_page(h, 0, 0, MD_REGION_SYSTEM), 0);
	for (uint32_t s = 1; s < 10; s++)
		ck_assert_int_eq(open_page(h, s, 4 * s, MD_REGION_USER), 0);

	struct md__top_entry t[16];
	size_t n = md__host_top(h, 1, t, 16);
	ck_assert_uint_eq(n, 7); /* 10 pages - pinned - tail - protect_recent */
	for (size_t i = 0; i < n; i++) {
		uint64_t fp = 4 * (7 - i); /* newest evictable first: 28, 24, … 4 */
		ck_assert_uint_eq(t[i].first_pos, fp);
		ck_assert_double_eq_tol(t[i].score, 1.0 / (1.0 + (double)fp), 1e-15);
	}

	struct md__params np = p;
	np.budget_engine_pages = 6;
	md__host_set_params(h, &np);
	struct md__decision want[16], got[16];
	size_t nw = md__oracle_decide(h, want, 16);
	size_t ng = md__host_decide(h, got, 16);
	ck_assert_uint_eq(ng, 4);
	ck_assert_uint_eq(nw, ng);
	ck_assert_int_eq(memcmp(want, got, ng * sizeof got[0]), 0);
	for (size_t i = 0; i < ng; i++)
		ck_assert_uint_eq(got[i].slot, 7 - i); /* slots 7, 6, 5, 4: newest unprotected */
	md__host_free(h);
}
END_TEST

static Suite *table_suite(void)
{
	Suite *s = suite_create("policy_table");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_every_row_complete);
	tcase_add_test(tc, test_memdecay_bound_trait);
	tcase_add_test(tc, test_name_reaches_params);
	tcase_add_test(tc, test_host_evicts_newest_first);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(table_suite());
}
