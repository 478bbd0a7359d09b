/*
 * check_control.c — control-socket parsing with hostile input: HELLO field
 * validation (every limit, duplicates, ABI major) and operator requests
 * (unknown commands, argument counts, numbers, options, binary bytes).
 */
#include <check.h>
#include "test_util.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_parse.h"
#include "memdecay_abi.h"

static const char *good_hello = "HELLO abi=1.0 name=eng-a page_tokens=16 page_capacity=1024 max_seqs=8";

static int hello(const char *line, struct md__hello *h, char *err)
{
	return md__hello_parse(line, h, err, 256);
}

START_TEST(hello_good)
{
	struct md__hello h;
	char err[256];
	ck_assert_int_eq(hello(good_hello, &h, err), 0);
	ck_assert_str_eq(h.name, "eng-a");
	ck_assert_uint_eq(h.page_tokens, 16);
	ck_assert_uint_eq(h.page_capacity, 1024);
	ck_assert_uint_eq(h.max_seqs, 8);
	ck_assert_int_eq(h.budget_pages, -1);
	ck_assert_uint_eq(h.tp_size, 1);
	ck_assert_int_eq(hello("HELLO abi=1.0 name=x page_tokens=1 page_capacity=1 max_seqs=1 "
			       "tp_rank=1 tp_size=2 policy=h2o budget_pages=64 "
			       "budget_sequence_tokens=0 weight=2.5", &h, err), 0);
	ck_assert_str_eq(h.policy, "h2o");
	ck_assert_int_eq(h.budget_pages, 64);
	ck_assert_int_eq(h.budget_sequence_tokens, 0);
	ck_assert(h.weight == 2.5);
}
END_TEST

START_TEST(hello_limits)
{
	struct md__hello h;
	char err[256], line[512];
	/* page_tokens 1..16 */
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a page_tokens=0 page_capacity=8 max_seqs=1", &h, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "page_tokens"));
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a page_tokens=17 page_capacity=8 max_seqs=1", &h, err), -EINVAL);
	/* capacities against the header's limits */
	snprintf(line, sizeof(line), "HELLO abi=1.0 name=a page_tokens=16 page_capacity=%u max_seqs=1",
		 MD_PAGE_CAPACITY_MAX + 1);
	ck_assert_int_eq(hello(line, &h, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "page_capacity"));
	snprintf(line, sizeof(line), "HELLO abi=1.0 name=a page_tokens=16 page_capacity=8 max_seqs=%u",
		 MD_MAX_SEQS_MAX + 1);
	ck_assert_int_eq(hello(line, &h, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "max_seqs"));
	/* numbers: sign, overflow, garbage */
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a page_tokens=-4 page_capacity=8 max_seqs=1", &h, err), -EINVAL);
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a page_tokens=16 page_capacity=99999999999999999999999 max_seqs=1", &h, err), -EINVAL);
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a page_tokens=16x page_capacity=8 max_seqs=1", &h, err), -EINVAL);
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a page_tokens=16 page_capacity=8 max_seqs=1 weight=nan", &h, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "weight"));
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a page_tokens=16 page_capacity=8 max_seqs=1 tp_rank=2 tp_size=2", &h, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "tp_rank"));
}
END_TEST

START_TEST(hello_names_and_shape)
{
	struct md__hello h;
	char err[256], line[512];
	char name[80];
	memset(name, 'n', 64);
	name[64] = 0;
	snprintf(line, sizeof(line), "HELLO abi=1.0 name=%s page_tokens=16 page_capacity=8 max_seqs=1", name);
	ck_assert_int_eq(hello(line, &h, err), -EINVAL); /* 64 chars: too long */
	ck_assert_ptr_nonnull(strstr(err, "name"));
	name[63] = 0;
	snprintf(line, sizeof(line), "HELLO abi=1.0 name=%s page_tokens=16 page_capacity=8 max_seqs=1", name);
	ck_assert_int_eq(hello(line, &h, err), 0);
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a\x01 page_tokens=16 page_capacity=8 max_seqs=1", &h, err), -EINVAL);
	ck_assert_int_eq(hello("HELLO abi=1.0 name= page_tokens=16 page_capacity=8 max_seqs=1", &h, err), -EINVAL);
	/* missing, duplicate, unknown, not key=value */
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a page_tokens=16 page_capacity=8", &h, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "max_seqs"));
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a name=b page_tokens=16 page_capacity=8 max_seqs=1", &h, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "twice"));
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a page_tokens=16 page_capacity=8 max_seqs=1 colour=red", &h, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "colour"));
	ck_assert_int_eq(hello("HELLO abi=1.0 name=a page_tokens=16 page_capacity=8 max_seqs=1 junk", &h, err), -EINVAL);
	ck_assert_int_eq(hello("HELO abi=1.0", &h, err), -EINVAL);
	/* a newer minor version may add fields */
	ck_assert_int_eq(hello("HELLO abi=1.9 name=a page_tokens=16 page_capacity=8 max_seqs=1 colour=red", &h, err), 0);
}
END_TEST

START_TEST(hello_abi_major)
{
	struct md__hello h;
	char err[256];
	ck_assert_int_eq(hello("HELLO abi=2.0 name=a page_tokens=16 page_capacity=8 max_seqs=1", &h, err), -EPROTO);
	ck_assert_ptr_nonnull(strstr(err, "major"));
	ck_assert_int_eq(hello("HELLO abi=x.0 name=a page_tokens=16 page_capacity=8 max_seqs=1", &h, err), -EINVAL);
	ck_assert_int_eq(hello("HELLO abi= name=a page_tokens=16 page_capacity=8 max_seqs=1", &h, err), -EINVAL);
}
END_TEST

static int req(const char *text, struct md__ctl_req *r, char *err)
{
	static char buf[8192];
	snprintf(buf, sizeof(buf), "%s", text);
	return md__ctl_parse(buf, r, err, 256);
}

START_TEST(ctl_good)
{
	struct md__ctl_req r;
	char err[256];
	ck_assert_int_eq(req("get", &r, err), 0);
	ck_assert_int_eq(r.cmd, MD__CTL_GET);
	ck_assert_int_eq(req("get memdecay.alpha --json", &r, err), 0);
	ck_assert_int_eq(r.json, 1);
	ck_assert_int_eq(r.argc, 1);
	ck_assert_str_eq(r.argv[0], "memdecay.alpha");
	ck_assert_int_eq(req("set memdecay.alpha=0.5 memdecay.tau=0.1", &r, err), 0);
	ck_assert_int_eq(r.argc, 2);
	ck_assert_int_eq(req("policy h2o --engine 3", &r, err), 0);
	ck_assert_str_eq(r.engine, "3");
	ck_assert_int_eq(req("budget engine_pages 128 --engine=eng-a", &r, err), 0);
	ck_assert_str_eq(r.scope, "engine_pages");
	ck_assert_uint_eq(r.number, 128);
	ck_assert_str_eq(r.engine, "eng-a");
	ck_assert_int_eq(req("top 10\r", &r, err), 0);
	ck_assert_uint_eq(r.number, 10);
	ck_assert_int_eq(req("  metrics  ", &r, err), 0);
	ck_assert_int_eq(req("save /tmp/x.conf", &r, err), 0);
	ck_assert_int_eq(req("sessions --json --engine vllm", &r, err), 0);
	ck_assert_int_eq(r.cmd, MD__CTL_SESSIONS);
	ck_assert_str_eq(r.engine, "vllm");
}
END_TEST

START_TEST(ctl_bad_commands)
{
	struct md__ctl_req r;
	char err[256];
	ck_assert_int_eq(req("", &r, err), -EINVAL);
	ck_assert_int_eq(req("frobnicate now", &r, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "frobnicate"));
	ck_assert_int_eq(req("GET", &r, err), -EINVAL); /* case matters */
	ck_assert_int_eq(req("engines extra", &r, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "usage"));
	ck_assert_int_eq(req("get a b", &r, err), -EINVAL);
	ck_assert_int_eq(req("policy h2o random", &r, err), -EINVAL);
	ck_assert_int_eq(req("metrics --engine 1", &r, err), -EINVAL);
	ck_assert_int_eq(req("stats --verbose", &r, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--verbose"));
	ck_assert_int_eq(req("sessions 5", &r, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "sessions [--engine E]"));
	ck_assert_int_eq(req("policy h2o --engine", &r, err), -EINVAL);
	ck_assert_int_eq(req("policy h2o --engine 1 --engine 2", &r, err), -EINVAL);
}
END_TEST

START_TEST(ctl_bad_values)
{
	struct md__ctl_req r;
	char err[256];
	ck_assert_int_eq(req("set memdecay.alpha", &r, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "memdecay.alpha"));
	ck_assert_int_eq(req("set =5", &r, err), -EINVAL);
	ck_assert_int_eq(req("set", &r, err), -EINVAL);
	ck_assert_int_eq(req("top 0", &r, err), -EINVAL);
	ck_assert_int_eq(req("top -3", &r, err), -EINVAL);
	ck_assert_int_eq(req("top 1001", &r, err), -EINVAL);
	ck_assert_int_eq(req("top ten", &r, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "ten"));
	ck_assert_int_eq(req("budget pages 10", &r, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "pages"));
	ck_assert_int_eq(req("budget engine_pages -1", &r, err), -EINVAL);
	ck_assert_int_eq(req("budget engine_pages 18446744073709551616", &r, err), -EINVAL);
	ck_assert_int_eq(req("budget global_pages 10 --engine 1", &r, err), -EINVAL);
}
END_TEST

START_TEST(ctl_hostile_bytes)
{
	struct md__ctl_req r;
	char err[256];
	ck_assert_int_eq(req("get \x7f\x80\xff", &r, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "non-printable"));
	ck_assert_int_eq(req("get\x1b[2J", &r, err), -EINVAL);
	/* over-long request */
	char *big = malloc(MD_CTL_LINE_MAX + 16);
	memset(big, 'a', MD_CTL_LINE_MAX + 8);
	memcpy(big, "get ", 4);
	big[MD_CTL_LINE_MAX + 8] = 0;
	ck_assert_int_eq(md__ctl_parse(big, &r, err, sizeof(err)), -EINVAL);
	free(big);
	/* more arguments than fit */
	char many[4096] = "set";
	for (int i = 0; i < 100; i++)
		strcat(many, " a=1");
	ck_assert_int_eq(req(many, &r, err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "too many"));
	ck_assert(md__ctl_text_ok("ok\tfine", 7));
	ck_assert(!md__ctl_text_ok("a\0b", 3));
}
END_TEST

START_TEST(numbers_and_json)
{
	uint64_t v;
	ck_assert_int_eq(md__parse_u64("18446744073709551615", &v), 0);
	ck_assert(v == UINT64_MAX);
	ck_assert_int_eq(md__parse_u64("18446744073709551616", &v), -EINVAL);
	ck_assert_int_eq(md__parse_u64("", &v), -EINVAL);
	ck_assert_int_eq(md__parse_u64(" 1", &v), -EINVAL);
	ck_assert_int_eq(md__parse_u64("+1", &v), -EINVAL);
	char out[64];
	md__json_escape("a\"b\\c\n", out, sizeof(out));
	ck_assert_str_eq(out, "a\\\"b\\\\c\\u000a");
}
END_TEST

START_TEST(socket_default_rule)
{
	char buf[108];
	setenv("MEMDECAY_SOCKET", "/tmp/explicit.sock", 1);
	ck_assert_int_eq(md__socket_default(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/tmp/explicit.sock");
	unsetenv("MEMDECAY_SOCKET");
	setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
	ck_assert_int_eq(md__socket_default(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/run/user/1000/memdecay/memdecayd.sock");
	unsetenv("XDG_RUNTIME_DIR");
	ck_assert_int_eq(md__socket_default(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/run/memdecay/memdecayd.sock");
}
END_TEST

/* The HELLO writer (md__hello_format, libmemdecay's) and the daemon's parser
 * read one field table: what one writes the other reads back, field by field. */
START_TEST(hello_table_round_trip)
{
	struct md__hello w, r;
	char line[MD_CTL_LINE_MAX], err[256];
	memset(&w, 0, sizeof(w));   /* padding too: the parser's result is compared whole */
	w.abi_major = MD_ABI_MAJOR;
	w.abi_minor = MD_ABI_MINOR;
	snprintf(w.name, sizeof(w.name), "eng-a");
	w.page_tokens = 16;
	w.page_capacity = 1024;
	w.max_seqs = 8;
	w.tp_rank = 1;
	w.tp_size = 2;
	snprintf(w.policy, sizeof(w.policy), "h2o");
	w.budget_pages = 0;
	w.budget_sequence_tokens = 4096;
	w.weight = 2.5;
	w.stats_transport = 1;
	w.tier_pages = 32;
	w.page_bytes = 1474560;
	w.given = (1u << MD__HF_COUNT) - 1;
	int n = md__hello_format(&w, line, sizeof(line));
	ck_assert_int_gt(n, 0);
	ck_assert_str_eq(line, "HELLO abi=1.4 name=eng-a page_tokens=16 page_capacity=1024 "
			       "max_seqs=8 tp_rank=1 tp_size=2 policy=h2o budget_pages=0 "
			       "budget_sequence_tokens=4096 weight=2.5 stats_transport=cuda "
			       "tier_pages=32 page_bytes=1474560\n");
	line[n - 1] = 0;
	ck_assert_int_eq(hello(line, &r, err), 0);
	ck_assert_uint_eq(r.given, w.given);
	ck_assert_mem_eq(&r, &w, sizeof(r));

	/* only the required fields: the rest keep the parser's defaults */
	w.given = 1u << MD__HF_ABI | 1u << MD__HF_NAME | 1u << MD__HF_PAGE_TOKENS |
		  1u << MD__HF_PAGE_CAPACITY | 1u << MD__HF_MAX_SEQS;
	n = md__hello_format(&w, line, sizeof(line));
	ck_assert_str_eq(line, "HELLO abi=1.4 name=eng-a page_tokens=16 page_capacity=1024 max_seqs=8\n");
	line[n - 1] = 0;
	ck_assert_int_eq(hello(line, &r, err), 0);
	ck_assert_uint_eq(r.given, w.given);
	ck_assert_int_eq(r.budget_pages, -1);
	ck_assert_uint_eq(r.tp_size, 1);
	ck_assert(r.weight == 1.0);
	ck_assert_int_eq(md__hello_format(&w, line, 20), -1);   /* does not fit */
}
END_TEST

/* Every row of the table is parsed, and a bad value is refused naming it. */
START_TEST(hello_table_every_field)
{
	static const char *const bad[MD__HF_COUNT] = {
		[MD__HF_ABI] = "x", [MD__HF_NAME] = "", [MD__HF_PAGE_TOKENS] = "0",
		[MD__HF_PAGE_CAPACITY] = "0", [MD__HF_MAX_SEQS] = "0", [MD__HF_TP_RANK] = "64",
		[MD__HF_TP_SIZE] = "0", [MD__HF_POLICY] = "", [MD__HF_BUDGET_PAGES] = "-2",
		[MD__HF_BUDGET_SEQUENCE_TOKENS] = "-2", [MD__HF_WEIGHT] = "0",
		[MD__HF_STATS_TRANSPORT] = "rdma", [MD__HF_TIER_PAGES] = "4194305",
		[MD__HF_PAGE_BYTES] = "-1",
	};
	for (unsigned id = 0; id < MD__HF_COUNT; id++) {
		const char *key = md__hello_fields[id].key;
		char line[512], err[256], want[64];
		struct md__hello h;
		ck_assert_ptr_nonnull(bad[id]);
		snprintf(line, sizeof(line), "%s %s=%s", good_hello, key, bad[id]);
		ck_assert_int_eq(hello(line, &h, err), -EINVAL);
		snprintf(want, sizeof(want), "HELLO field %s", key);
		ck_assert_msg(!strncmp(err, want, strlen(want)), "%s: %s", key, err);
	}
}
END_TEST

static Suite *control_suite(void)
{
	Suite *s = suite_create("control");
	TCase *tc = tcase_create("parse");
	tcase_add_test(tc, hello_good);
	tcase_add_test(tc, hello_limits);
	tcase_add_test(tc, hello_names_and_shape);
	tcase_add_test(tc, hello_abi_major);
	tcase_add_test(tc, hello_table_round_trip);
	tcase_add_test(tc, hello_table_every_field);
	tcase_add_test(tc, ctl_good);
	tcase_add_test(tc, ctl_bad_commands);
	tcase_add_test(tc, ctl_bad_values);
	tcase_add_test(tc, ctl_hostile_bytes);
	tcase_add_test(tc, numbers_and_json);
	tcase_add_test(tc, socket_default_rule);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(control_suite());
}
