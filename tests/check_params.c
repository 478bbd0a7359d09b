/*
 * check_params.c — the key registry: defaults, parsing of good and bad values,
 * error messages naming key and value, all-or-nothing sets, config files with
 * file:line errors, and save/load round trips.
 */
#include <check.h>
#include "test_util.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "params.h"
#include "policy.h"

static struct md__params P;
static char err[256];

static void setup(void)
{
	md__params_defaults(&P);
	err[0] = '\0';
}

START_TEST(test_defaults)
{
	ck_assert_double_eq(P.base[MD_REGION_SYSTEM], 1.0);
	ck_assert_double_eq(P.lambda[MD_REGION_SYSTEM], 0.0);
	ck_assert_uint_eq(P.pinned_mask, 1u << MD_REGION_SYSTEM);
	ck_assert_double_eq(P.base[MD_REGION_USER], 0.7);
	ck_assert_double_eq(P.lambda[MD_REGION_ASSISTANT], 0.05);
	ck_assert_double_eq(P.base[MD_REGION_SCRATCHPAD], 0.3);
	ck_assert_double_eq(P.lambda[MD_REGION_SCRATCHPAD], 0.2);
	ck_assert_double_eq(P.base[MD_REGION_PLAN], 0.9);
	ck_assert_double_eq(P.lambda[MD_REGION_PLAN], 0.01);
	ck_assert_double_eq(P.lambda[MD_REGION_TOOL_OUT], 0.08);
	ck_assert_double_eq(P.base[MD_REGION_RETRIEVAL], 0.8);
	ck_assert_double_eq(P.beta, 0.9);
	ck_assert_double_eq(P.alpha, 1.0);
	ck_assert_uint_eq(P.protect_recent, 1);
	ck_assert_uint_eq(P.sink_tokens, 4);
	ck_assert_double_eq(P.h2o_recent_fraction, 0.5);
	ck_assert_double_eq(P.turn_recent_fraction, 0);
	ck_assert_double_eq(P.low_watermark, 1.0);
	ck_assert_uint_eq(P.heartbeat_timeout_ms, 3000);
	ck_assert_uint_eq(P.violation_limit, 1000);
	ck_assert_uint_eq(P.nap_ms, 50);
	ck_assert_uint_eq(P.tier_pages, 0);
	ck_assert_double_eq(P.recall_margin, 0.1);
	ck_assert_uint_eq(P.recall_max_per_pass, 4);
	ck_assert_uint_eq(P.policy, MD_POLICY_MEMDECAY);
	ck_assert_uint_eq(P.norm, MD_NORM_RAW);
}
END_TEST

START_TEST(test_set_good)
{
	ck_assert_int_eq(md__params_set(&P, "memdecay.region.user.base", "0.5", err, sizeof err), 0);
	ck_assert_double_eq(P.base[MD_REGION_USER], 0.5);
	ck_assert_int_eq(md__params_set(&P, "memdecay.region.plan.pinned", "true", err, sizeof err), 0);
	ck_assert_uint_eq(P.pinned_mask & (1u << MD_REGION_PLAN), 1u << MD_REGION_PLAN);
	ck_assert_int_eq(md__params_set(&P, "memdecay.region.system.pinned", "0", err, sizeof err), 0);
	ck_assert_uint_eq(P.pinned_mask & 1u, 0);
	ck_assert_int_eq(md__params_set(&P, "memdecay.norm", "relative", err, sizeof err), 0);
	ck_assert_uint_eq(P.norm, MD_NORM_RELATIVE);
	ck_assert_int_eq(md__params_set(&P, "policy", "h2o", err, sizeof err), 0);
	ck_assert_uint_eq(P.policy, MD_POLICY_H2O);
	ck_assert_int_eq(md__params_set(&P, "budget.engine_pages", "1000", err, sizeof err), 0);
	ck_assert_uint_eq(P.budget_engine_pages, 1000);
	ck_assert_int_eq(md__params_set(&P, "budget.low_watermark", "1", err, sizeof err), 0);
	ck_assert_int_eq(md__params_set(&P, "random.seed", "18446744073709551615", err, sizeof err), 0);
	ck_assert_uint_eq(P.random_seed, UINT64_MAX);
	ck_assert_int_eq(md__params_set(&P, "h2o.recent_fraction", "0", err, sizeof err), 0);
	ck_assert_int_eq(md__params_set(&P, "memdecay-turn.recent_fraction", "0.25", err, sizeof err), 0);
	ck_assert_double_eq(P.turn_recent_fraction, 0.25);
	ck_assert_int_eq(md__params_set(&P, "memdecay.beta", "0", err, sizeof err), 0);
	ck_assert_int_eq(md__params_set(&P, "daemon.nap_ms", "0", err, sizeof err), 0);
	ck_assert_uint_eq(P.nap_ms, 0);
	ck_assert_int_eq(md__params_set(&P, "tier.pages", "4096", err, sizeof err), 0);
	ck_assert_uint_eq(P.tier_pages, 4096);
	ck_assert_int_eq(md__params_set(&P, "recall.margin", "0", err, sizeof err), 0);
	ck_assert_double_eq(P.recall_margin, 0);
	ck_assert_int_eq(md__params_set(&P, "recall.margin", "0.125", err, sizeof err), 0);
	ck_assert_double_eq(P.recall_margin, 0.125);
	ck_assert_int_eq(md__params_set(&P, "recall.max_per_pass", "0", err, sizeof err), 0);
	ck_assert_uint_eq(P.recall_max_per_pass, 0);
	ck_assert_int_eq(md__params_set(&P, "recall.max_per_pass", "4096", err, sizeof err), 0);
	ck_assert_uint_eq(P.recall_max_per_pass, 4096);
	char buf[32];
	ck_assert_int_gt(md__params_get(&P, "recall.margin", buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "0.125");
}
END_TEST

static void expect_bad(const char *key, const char *value, int rc_expected)
{
	char e[256] = "";
	struct md__params before = P;
	int rc = md__params_set(&P, key, value, e, sizeof e);
	ck_assert_msg(rc == rc_expected, "%s=%s: rc %d", key, value, rc);
	ck_assert_msg(strstr(e, key) != NULL, "message '%s' does not name %s", e, key);
	if (rc_expected == -EINVAL)
		ck_assert_msg(strstr(e, value) != NULL, "message '%s' does not name '%s'", e, value);
	ck_assert_int_eq(memcmp(&before, &P, sizeof P), 0);
}

START_TEST(test_set_bad_values)
{
	expect_bad("memdecay.tau", "abc", -EINVAL);
	ck_assert_str_eq(err, "");
	char e[128];
	md__params_set(&P, "memdecay.tau", "abc", e, sizeof e);
	ck_assert_str_eq(e, "memdecay.tau: 'abc' is not a number");
	expect_bad("memdecay.alpha", "nan", -EINVAL);
	expect_bad("memdecay.alpha", "inf", -EINVAL);
	expect_bad("memdecay.alpha", "1.0x", -EINVAL);
	expect_bad("memdecay.region.user.lambda", "-0.1", -EINVAL);
	expect_bad("memdecay.region.user.base", "-1", -EINVAL);
	expect_bad("memdecay.beta", "1", -EINVAL);
	expect_bad("memdecay.beta", "-0.5", -EINVAL);
	expect_bad("h2o.recent_fraction", "1.5", -EINVAL);
	expect_bad("memdecay-turn.recent_fraction", "-0.1", -EINVAL);
	expect_bad("budget.low_watermark", "0", -EINVAL);
	expect_bad("budget.low_watermark", "1.01", -EINVAL);
	expect_bad("memdecay.region.plan.pinned", "yes", -EINVAL);
	expect_bad("memdecay.norm", "sqrt", -EINVAL);
	expect_bad("policy", "lru", -EINVAL);
	expect_bad("budget.global_pages", "-5", -EINVAL);
	expect_bad("protect_recent", "1.5", -EINVAL);
	expect_bad("protect_recent", "", -EINVAL);
	expect_bad("daemon.heartbeat_timeout_ms", "0", -EINVAL);
	expect_bad("daemon.nap_ms", "10001", -EINVAL);
	expect_bad("daemon.nap_ms", "-1", -EINVAL);
	expect_bad("random.seed", "99999999999999999999999", -EINVAL);
	expect_bad("tier.pages", "-1", -EINVAL);
	expect_bad("tier.pages", "281474976710657", -EINVAL); /* 2^48 + 1 */
	expect_bad("recall.margin", "-0.01", -EINVAL);
	expect_bad("recall.margin", "nan", -EINVAL);
	expect_bad("recall.margin", "inf", -EINVAL);
	expect_bad("recall.max_per_pass", "4097", -EINVAL);
	expect_bad("recall.max_per_pass", "1.5", -EINVAL);
}
END_TEST

START_TEST(test_unknown_keys)
{
	expect_bad("memdecay.gamma", "1", -ENOENT);
	expect_bad("memdecay.region.code.base", "1", -ENOENT);
	expect_bad("memdecay.region.user.height", "1", -ENOENT);
	expect_bad("region.3.name", "code", -ENOENT); /* built-in ids are not renamed */
	char buf[64];
	ck_assert_int_eq(md__params_get(&P, "nope", buf, sizeof buf), -ENOENT);
}
END_TEST

START_TEST(test_extra_regions)
{
	ck_assert_int_eq(md__params_set(&P, "region.9.name", "code", err, sizeof err), 0);
	ck_assert_int_eq(md__region_from_name(&P, "code"), 9);
	ck_assert_int_eq(md__params_set(&P, "memdecay.region.code.lambda", "0.3", err, sizeof err), 0);
	ck_assert_double_eq(P.lambda[9], 0.3);
	/* duplicates and bad names are refused */
	ck_assert_int_eq(md__params_set(&P, "region.10.name", "code", err, sizeof err), -EINVAL);
	ck_assert_int_eq(md__params_set(&P, "region.10.name", "user", err, sizeof err), -EINVAL);
	ck_assert_int_eq(md__params_set(&P, "region.10.name", "Bad-Name", err, sizeof err), -EINVAL);
	ck_assert_int_eq(md__params_set(&P, "region.16.name", "x", err, sizeof err), -ENOENT);
	ck_assert_int_eq(md__region_from_name(&P, "scratchpad"), MD_REGION_SCRATCHPAD);
	ck_assert_int_eq(md__region_from_name(&P, "missing"), -1);
}
END_TEST

START_TEST(test_set_many_atomic)
{
	const char *good[] = {"memdecay.alpha=2", "region.8.name = docs",
			      "memdecay.region.docs.base = 0.25"};
	ck_assert_int_eq(md__params_set_many(&P, good, 3, err, sizeof err), 0);
	ck_assert_double_eq(P.alpha, 2.0);
	ck_assert_double_eq(P.base[8], 0.25);
	struct md__params before = P;
	const char *bad[] = {"memdecay.alpha=3", "protect_recent=4", "memdecay.beta=7"};
	ck_assert_int_eq(md__params_set_many(&P, bad, 3, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "memdecay.beta"));
	ck_assert_int_eq(memcmp(&before, &P, sizeof P), 0);
	const char *noeq[] = {"memdecay.alpha"};
	ck_assert_int_eq(md__params_set_many(&P, noeq, 1, err, sizeof err), -EINVAL);
}
END_TEST

START_TEST(test_load_text_errors)
{
	const char *txt = "# comment\n\nmemdecay.alpha = 0.5\nmemdecay.tau = abc\n";
	struct md__params before = P;
	ck_assert_int_eq(md__params_load_text(&P, txt, "cfg.conf", err, sizeof err), -EINVAL);
	ck_assert_str_eq(err, "cfg.conf:4: memdecay.tau: 'abc' is not a number");
	ck_assert_int_eq(memcmp(&before, &P, sizeof P), 0);
	ck_assert_int_eq(md__params_load_text(&P, "a\n", "x.conf", err, sizeof err), -EINVAL);
	ck_assert_str_eq(err, "x.conf:1: expected 'key = value'");
	ck_assert_int_eq(md__params_load_text(&P, "\n\nfoo.bar = 1\n", "y", err, sizeof err),
			 -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "y:3: foo.bar"));
	ck_assert_int_eq(md__params_load_text(&P, "memdecay.alpha = 0.5 # half\npolicy=h2o", "z",
					      err, sizeof err), 0);
	ck_assert_double_eq(P.alpha, 0.5);
	ck_assert_uint_eq(P.policy, MD_POLICY_H2O);
}
END_TEST

START_TEST(test_save_load_roundtrip)
{
	char path[] = "/tmp/check_params_XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	close(fd);
	const char *items[] = {"region.12.name=code", "memdecay.region.code.base=0.123456789012345",
			       "memdecay.region.code.pinned=true", "memdecay.tau=0.1", "policy=random",
			       "budget.global_pages=77", "random.seed=12345678901234",
			       "memdecay.norm=relative", "budget.low_watermark=0.875"};
	ck_assert_int_eq(md__params_set_many(&P, items, 9, err, sizeof err), 0);
	ck_assert_int_eq(md__params_save_file(&P, path, err, sizeof err), 0);
	struct md__params q;
	md__params_defaults(&q);
	ck_assert_int_eq(md__params_load_file(&q, path, err, sizeof err), 0);
	ck_assert_int_eq(memcmp(&q, &P, sizeof P), 0);
	/* a file error names the path and line */
	FILE *f = fopen(path, "a");
	fprintf(f, "memdecay.beta = 2\n");
	fclose(f);
	struct md__params r = q;
	ck_assert_int_eq(md__params_load_file(&q, path, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, path));
	ck_assert_ptr_nonnull(strstr(err, "memdecay.beta"));
	ck_assert_int_eq(memcmp(&q, &r, sizeof r), 0);
	unlink(path);
	ck_assert_int_lt(md__params_load_file(&q, "/nonexistent/x.conf", err, sizeof err), 0);
}
END_TEST

struct visit { int n; int saw_alpha; int saw_code; };
static void visit_fn(const char *key, const char *value, void *ud)
{
	struct visit *v = ud;
	v->n++;
	if (!strcmp(key, "memdecay.alpha") && !strcmp(value, "1"))
		v->saw_alpha = 1;
	if (!strcmp(key, "memdecay.region.code.base"))
		v->saw_code = 1;
}

START_TEST(test_get_foreach)
{
	char buf[64];
	ck_assert_int_gt(md__params_get(&P, "memdecay.region.system.pinned", buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "true");
	md__params_get(&P, "memdecay.region.scratchpad.lambda", buf, sizeof buf);
	ck_assert_str_eq(buf, "0.2");
	md__params_get(&P, "policy", buf, sizeof buf);
	ck_assert_str_eq(buf, "memdecay");
	struct visit v = {0, 0, 0};
	md__params_foreach(&P, visit_fn, &v);
	ck_assert_int_eq(v.n, 8 * 3 + 25); /* 25 scalar keys (params.c) */
	ck_assert_int_eq(v.saw_alpha, 1);
	ck_assert_int_eq(v.saw_code, 0);
	md__params_set(&P, "region.8.name", "code", err, sizeof err);
	memset(&v, 0, sizeof v);
	md__params_foreach(&P, visit_fn, &v);
	ck_assert_int_eq(v.n, 9 * 3 + 25 + 1);
	ck_assert_int_eq(v.saw_code, 1);
	ck_assert_str_eq(md__policy_name(MD_POLICY_MEMDECAY_NORM), "memdecay-norm");
	ck_assert_str_eq(md__policy_name(MD_POLICY_MEMDECAY_TURN), "memdecay-turn");
	ck_assert_int_eq(md__policy_from_name("memdecay-turn"), MD_POLICY_MEMDECAY_TURN);
	ck_assert_int_eq(md__params_set(&P, "memdecay-turn.lambda_scale", "0.25", err, sizeof err), 0);
	ck_assert(P.turn_lambda_scale == 0.25);
	ck_assert_int_eq(md__params_set(&P, "memdecay-turn.lambda_scale", "-1", err, sizeof err),
			 -EINVAL);
	ck_assert(P.turn_lambda_scale == 0.25);
	ck_assert_int_eq(md__policy_from_name("recency"), MD_POLICY_RECENCY);
	ck_assert_int_eq(md__policy_from_name("lru"), -1);
}
END_TEST

/* the policies' own keys come from the policy table: each row's keys are
 * listed by foreach, read back at their declared default, and refused past
 * their declared bounds with the key named */
struct key_seen { const char *name; int seen; };
static void key_seen_fn(const char *key, const char *value, void *ud)
{
	(void)value;
	struct key_seen *k = ud;
	if (!strcmp(key, k->name))
		k->seen++;
}

START_TEST(test_policy_keys_from_table)
{
	char buf[64], want[64];
	unsigned n = 0;
	for (uint32_t id = 0; id < MD__POLICY_N; id++) {
		const struct md__policy *pol = md__policy_table[id];
		for (size_t i = 0; i < pol->n_keys; i++) {
			const struct md__param_key *k = &pol->keys[i];
			n++;
			struct key_seen ks = {k->name, 0};
			md__params_foreach(&P, key_seen_fn, &ks);
			ck_assert_int_eq(ks.seen, 1);
			ck_assert_int_gt(md__params_get(&P, k->name, buf, sizeof buf), 0);
			if (k->kind == MD__KEY_DOUBLE) {
				snprintf(want, sizeof want, "%g", k->dflt);
				ck_assert_str_eq(buf, want);
				ck_assert_int_eq(md__params_set(&P, k->name, "-1", err, sizeof err),
						 -EINVAL);
			} else {
				snprintf(want, sizeof want, "%llu", (unsigned long long)k->idflt);
				ck_assert_str_eq(buf, want);
				ck_assert_int_eq(md__params_set(&P, k->name, "x", err, sizeof err),
						 -EINVAL);
			}
			ck_assert_ptr_nonnull(strstr(err, k->name));
		}
	}
	ck_assert_uint_eq(n, 5); /* recency, h2o, random, memdecay-turn (2) */
}
END_TEST

static Suite *params_suite(void)
{
	Suite *s = suite_create("params");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_policy_keys_from_table);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_set_good);
	tcase_add_test(tc, test_set_bad_values);
	tcase_add_test(tc, test_unknown_keys);
	tcase_add_test(tc, test_extra_regions);
	tcase_add_test(tc, test_set_many_atomic);
	tcase_add_test(tc, test_load_text_errors);
	tcase_add_test(tc, test_save_load_roundtrip);
	tcase_add_test(tc, test_get_foreach);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(params_suite());
}
