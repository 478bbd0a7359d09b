/*
 * check_policy_table.c — the policy table, run against a build that adds the
 * test-only policy test-lifo exactly as docs/policies.md "Adding a policy"
 * says (sidecar/host/policy_test_lifo.c, one table row, a host-side id):
 * its name reaches the parameters and their messages, and the host scores and
 * evicts with it like any built-in policy.
 */
#include <check.h>
#include "test_util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "host.h"
#include "host_internal.h"
#include "oracle.h"
#include "policy.h"

START_TEST(test_every_row_complete)
{
	for (uint32_t i = 0; i < MD__POLICY_N; i++) {
		const struct md__policy *pol = md__policy_table[i];
		ck_assert_msg(pol != NULL, "policy %u has no table row", i);
		ck_assert_ptr_nonnull(pol->name);
		ck_assert_ptr_nonnull(pol->score);
		ck_assert_ptr_nonnull(pol->static_bound);
		ck_assert_ptr_nonnull(pol->lower_bound);
		ck_assert_ptr_eq(md__policy_get(i), pol);
		/* a duplicate name resolves to the first row */
		ck_assert_int_eq(md__policy_from_name(pol->name), (int)i);
		ck_assert_str_eq(md__policy_name(i), pol->name);
		ck_assert_msg(pol->name[0] && !strpbrk(pol->name, "| \t\n="),
			      "policy %u: name '%s' is not a key value", i, pol->name);
	}
	ck_assert_str_eq(md__policy_name(MD__POLICY_TEST_LIFO), "test-lifo");
	ck_assert_str_eq(md__policy_name(MD__POLICY_N), "unknown");
}
END_TEST

/* "a|b|…": every row's name, in table order, each once */
static void table_names(char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = '\0';
	for (uint32_t i = 0; i < MD__POLICY_N; i++) {
		int n = snprintf(buf + at, len - at, "%s%s", i ? "|" : "", md__policy_table[i]->name);
		ck_assert(n > 0 && (size_t)n < len - at);
		at += (size_t)n;
	}
}

START_TEST(test_names_string)
{
	char want[512], got[512];
	table_names(want, sizeof want);
	ck_assert_uint_eq(md__policy_names(got, sizeof got), strlen(want));
	ck_assert_str_eq(got, want);
	/* a short buffer: truncated, terminated, the length still the whole */
	char small[8];
	ck_assert_uint_eq(md__policy_names(small, sizeof small), strlen(want));
	ck_assert_uint_eq(strlen(small), sizeof small - 1);
	ck_assert_int_eq(strncmp(small, want, sizeof small - 1), 0);
}
END_TEST

/* pages of every shape the host makes, for the trait checks below */
static void random_page(unsigned *seed, const struct md__policy *pol,
			const struct md__params *p, uint32_t slot, struct md__page *pg,
			uint64_t *tr, uint64_t clock)
{
	memset(pg, 0, sizeof(*pg));
	pg->gen = 1 + (uint32_t)(rand_r(seed) % 5);
	pg->state = MD__SLOT_LIVE;
	pg->n_tokens = (uint16_t)(1 + rand_r(seed) % 16);
	pg->first_pos = (uint64_t)(rand_r(seed) % 1000);
	for (unsigned k = 0; k < pg->n_tokens; k++) {
		pg->labels = md_label_set(pg->labels, k, (unsigned)rand_r(seed) % MD_REGION_BUILTIN_COUNT);
		tr[k] = clock - (uint64_t)(rand_r(seed) % (clock + 1));
	}
	pg->ewma_raw = (double)rand_r(seed) / RAND_MAX * pg->n_tokens;
	pg->ewma_norm = (double)rand_r(seed) / RAND_MAX * 50.0;
	pg->cum_raw = (double)rand_r(seed) / RAND_MAX * 100.0;
	struct md__page_id id = {.engine_id = 1, .slot = slot, .gen = pg->gen};
	pg->lb_static = pol->static_bound(pg, p, &id);
}

static struct md__score_in score_in(const struct md__params *p, const struct md__policy *pol,
				    uint32_t slot, uint64_t clock, uint32_t norm,
				    const uint64_t *turns, uint32_t turn_n)
{
	return (struct md__score_in){.p = p, .clock = clock, .engine_id = 1, .slot = slot,
				     .norm_mode = pol->always_relative ? MD_NORM_RELATIVE : norm,
				     .page_tokens = 16, .turn_clk = turns, .turn_n = turn_n};
}

/* What the traits promise the host, checked against each row's own score:
 *  - lower_bound: <= the score now and at every later clock;
 *  - memdecay_bound: lower_bound is md__memdecay_bound_at at the effective
 *    norm (the attention path evaluates it inline), and implies attn_lowers;
 *  - attn_lowers unset: an attention record never lowers the score;
 *  - step_decay: the score is at least the lower bound plus the decaying
 *    part the decay heaps bound, mean b_r exp(-lambda_r dt) over tokens with
 *    lambda_r > 0 (evict_index.c). */
START_TEST(test_traits_match_scores)
{
	struct md__params p;
	md__params_defaults(&p);
	unsigned seed = 7, flagged = 0;
	uint64_t turns[4] = {0, 30, 60, 90};
	for (uint32_t i = 0; i < MD__POLICY_N; i++) {
		const struct md__policy *pol = md__policy_table[i];
		flagged += pol->memdecay_bound;
		if (pol->memdecay_bound)
			ck_assert_msg(pol->attn_lowers, "%s: memdecay_bound without attn_lowers",
				      pol->name);
		for (int k = 0; k < 1000; k++) {
			struct md__page pg;
			uint64_t tr[16], clock = 100 + (uint64_t)(rand_r(&seed) % 50);
			uint32_t slot = (uint32_t)(rand_r(&seed) % 64);
			random_page(&seed, pol, &p, slot, &pg, tr, clock);
			struct md__score_in in = score_in(&p, pol, slot, clock, (uint32_t)(k & 1),
							  turns, 4);
			double s = pol->score(&pg, tr, &in, NULL), lb = pol->lower_bound(&pg, &in);
			ck_assert_msg(lb <= s, "%s: bound %.17g above score %.17g", pol->name, lb, s);
			struct md__score_in later = in;
			later.clock += 1 + (uint64_t)(rand_r(&seed) % 1000);
			double sl = pol->score(&pg, tr, &later, NULL);
			ck_assert_msg(lb <= sl, "%s: bound %.17g above a later score %.17g",
				      pol->name, lb, sl);
			if (pol->memdecay_bound)
				ck_assert_double_eq(lb, md__memdecay_bound_at(&pg, p.alpha, in.norm_mode));
			if (!pol->attn_lowers) {
				/* a record of mass 0: the EWMAs fall, the sum stays */
				struct md__page after = pg;
				after.ewma_raw *= p.beta;
				after.ewma_norm *= p.beta;
				ck_assert_msg(pol->score(&after, tr, &in, NULL) >= s,
					      "%s: attention lowers the score, attn_lowers unset",
					      pol->name);
			}
			if (pol->step_decay) {
				double d = 0.0;
				for (unsigned t = 0; t < pg.n_tokens; t++) {
					unsigned r = md_label_get(pg.labels, t);
					if (p.lambda[r] > 0.0)
						d += p.base[r] * exp(-p.lambda[r] * (double)(clock - tr[t]));
				}
				d /= pg.n_tokens;
				ck_assert_msg(lb + d <= s * (1.0 + 1e-12) + 1e-300,
					      "%s: bound %.17g + decay %.17g above score %.17g",
					      pol->name, lb, d, s);
			}
		}
	}
	ck_assert_uint_gt(flagged, 0); /* the inline path has a policy to agree with */
}
END_TEST

/* turn_decay: the score is at least the lower bound plus the decaying part in
 * turn units, mean b_r exp(-lambda_r s age) over tokens with lambda_r > 0
 * (s = decay_scale, age = turns begun after the token's refresh), and that
 * part, rolled forward at its largest rate, bounds it after more turns begin
 * (the decay heaps' bound, evict_index.c).  Each row that sets it is checked
 * at several scales. */
static uint32_t turns_at(const uint64_t *tc, uint32_t n, uint64_t c)
{
	uint32_t i = 0;
	while (i < n && tc[i] <= c)
		i++;
	return i;
}

START_TEST(test_turn_decay_bound)
{
	struct md__params p;
	md__params_defaults(&p);
	unsigned seed = 11, flagged = 0;
	static const double scales[] = {0, 0.1, 1, 4};
	for (uint32_t i = 0; i < MD__POLICY_N; i++) {
		const struct md__policy *pol = md__policy_table[i];
		if (!pol->turn_decay)
			continue;
		flagged++;
		for (int k = 0; k < 4000; k++) {
			p.turn_lambda_scale = scales[k % 4];
			double sc = pol->decay_scale ? pol->decay_scale(&p) : 1.0;
			/* turns: ascending starts at or before the clock, then more later */
			uint64_t tc[64], clock = 100 + (uint64_t)(rand_r(&seed) % 50);
			uint32_t n0 = 1 + (uint32_t)(rand_r(&seed) % 20), n1;
			for (uint32_t t = 0; t < n0; t++)
				tc[t] = (uint64_t)t * clock / n0;
			uint64_t later = clock + (uint64_t)(rand_r(&seed) % 100);
			n1 = n0 + (uint32_t)(rand_r(&seed) % 30);
			for (uint32_t t = n0; t < n1; t++)
				tc[t] = clock + (uint64_t)(t - n0) * (later - clock) / (n1 - n0);
			struct md__page pg;
			uint64_t tr[16];
			uint32_t slot = (uint32_t)(rand_r(&seed) % 64);
			random_page(&seed, pol, &p, slot, &pg, tr, clock);
			struct md__score_in in = score_in(&p, pol, slot, clock, (uint32_t)(k & 1), tc, n0);
			struct md__score_in in1 = score_in(&p, pol, slot, later, (uint32_t)(k & 1), tc, n1);
			double lb = pol->lower_bound(&pg, &in), s0 = pol->score(&pg, tr, &in, NULL);
			double s1 = pol->score(&pg, tr, &in1, NULL), d = 0.0, lmax = 0.0;
			uint32_t now = turns_at(tc, n0, clock);
			for (unsigned t = 0; t < pg.n_tokens; t++) {
				unsigned r = md_label_get(pg.labels, t);
				if (!(p.lambda[r] > 0.0))
					continue;
				double lam = p.lambda[r] * sc;
				lmax = lam > lmax ? lam : lmax;
				d += p.base[r] * exp(-lam * (double)(now - turns_at(tc, n0, tr[t])));
			}
			d /= pg.n_tokens;
			ck_assert_msg(lb + d <= s0 * (1.0 + 1e-12) + 1e-300,
				      "%s: bound %.17g + decay %.17g above score %.17g", pol->name, lb,
				      d, s0);
			double rolled = d * exp(-lmax * (double)(n1 - n0));
			ck_assert_msg(lb + rolled <= s1 * (1.0 + 1e-12) + 1e-300,
				      "%s: %u turns later, bound %.17g + decay %.17g above score %.17g",
				      pol->name, n1 - n0, lb, rolled, s1);
		}
	}
	ck_assert_uint_gt(flagged, 0); /* memdecay-turn sets it */
}
END_TEST

START_TEST(test_name_reaches_params)
{
	struct md__params p;
	md__params_defaults(&p);
	char err[512], buf[64], names[512];
	ck_assert_int_eq(md__params_set(&p, "policy", "test-lifo", err, sizeof err), 0);
	ck_assert_uint_eq(p.policy, MD__POLICY_TEST_LIFO);
	ck_assert_int_gt(md__params_get(&p, "policy", buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "test-lifo");
	/* the refusal lists every policy, the new one included */
	ck_assert_int_lt(md__params_set(&p, "policy", "lru", err, sizeof err), 0);
	table_names(names, sizeof names);
	ck_assert_msg(strstr(err, names), "message: %s", err);
	ck_assert_ptr_nonnull(strstr(names, "|test-lifo"));
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
	p.policy = MD__POLICY_TEST_LIFO;
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
	tcase_add_test(tc, test_names_string);
	tcase_add_test(tc, test_traits_match_scores);
	tcase_add_test(tc, test_turn_decay_bound);
	tcase_add_test(tc, test_name_reaches_params);
	tcase_add_test(tc, test_host_evicts_newest_first);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(table_suite());
}
