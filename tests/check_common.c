/*
 * check_common.c — md_common's JSON string writer (sbuf.h): whatever bytes a
 * peer sends (engine names, keys, file names), the reply stays valid JSON
 * that decodes to the text, with malformed UTF-8 replaced by U+FFFD.  The
 * output is read back with jansson, a strict parser independent of ours.
 */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"

/* Writes S[0..N) through the writer and decodes it again; returns the
 * decoded bytes (malloc'd, *out_n long) or fails the test. */
static char *roundtrip(const char *s, size_t n, size_t *out_n, struct md__sbuf *b)
{
	memset(b, 0, sizeof(*b));
	md__sbuf_printf(b, "[");
	md__sbuf_json_strn(b, s, n);
	md__sbuf_printf(b, "]");
	ck_assert(!b->oom);
	json_error_t err;
	json_t *v = json_loadb(b->p, b->len, JSON_ALLOW_NUL, &err);
	ck_assert_msg(v != NULL, "not JSON: %s (%.*s)", err.text, (int)b->len, b->p);
	json_t *str = json_array_get(v, 0);
	ck_assert(json_is_string(str));
	*out_n = json_string_length(str);
	char *r = malloc(*out_n + 1);
	memcpy(r, json_string_value(str), *out_n + 1);
	json_decref(v);
	return r;
}

static void expect(const char *in, size_t in_n, const char *want, size_t want_n)
{
	struct md__sbuf b;
	size_t n;
	char *got = roundtrip(in, in_n, &n, &b);
	ck_assert_msg(n == want_n && !memcmp(got, want, n), "decoded %zu bytes, want %zu (%.*s)",
		      n, want_n, (int)b.len, b.p);
	free(got);
	md__sbuf_free(&b);
}
#define SAME(lit) expect(lit, sizeof(lit) - 1, lit, sizeof(lit) - 1)
#define BAD(lit, want) expect(lit, sizeof(lit) - 1, want, sizeof(want) - 1)

START_TEST(test_quotes_and_backslashes)
{
	SAME("say \"hi\" \\ bye \\\" \"\"");
	struct md__sbuf b = { 0 };
	md__sbuf_json_str(&b, "a\"b\\c");
	ck_assert_str_eq(b.p, "\"a\\\"b\\\\c\"");
	md__sbuf_free(&b);
}
END_TEST

START_TEST(test_control_characters)
{
	char all[33];
	for (int i = 0; i < 32; i++)
		all[i] = (char)i; /* NUL included: written as \u0000 */
	all[32] = 0x7f;
	expect(all, sizeof(all), all, sizeof(all));
	struct md__sbuf b = { 0 };
	md__sbuf_json_strn(&b, "\n\t\r\x01\x7f", 5);
	ck_assert_str_eq(b.p, "\"\\n\\t\\r\\u0001\\u007f\"");
	for (size_t i = 0; i < b.len; i++) /* nothing raw below 0x20 reaches the wire */
		ck_assert_uint_ge((unsigned char)b.p[i], 0x20);
	md__sbuf_free(&b);
}
END_TEST

START_TEST(test_utf8_kept)
{
	SAME("caf\xc3\xa9 \xe5\xbc\x95\xe6\x93\x8e \xf0\x9f\x98\x80 \xef\xbf\xbf \xf4\x8f\xbf\xbf");
	struct md__sbuf b = { 0 };
	md__sbuf_json_str(&b, "\xc3\xa9");
	ck_assert_str_eq(b.p, "\"\xc3\xa9\""); /* copied, not escaped byte by byte */
	md__sbuf_free(&b);
}
END_TEST

#define FFFD "\xef\xbf\xbd"
START_TEST(test_invalid_utf8_replaced)
{
	BAD("a\x80z", "a" FFFD "z");                       /* stray continuation */
	BAD("\xc0\x80", FFFD FFFD);                         /* overlong NUL */
	BAD("\xc1\xbf", FFFD FFFD);                         /* overlong */
	BAD("\xe0\x80\xaf", FFFD FFFD FFFD);                /* overlong 3-byte */
	BAD("\xf0\x80\x80\xaf", FFFD FFFD FFFD FFFD);       /* overlong 4-byte */
	BAD("\xed\xa0\x80", FFFD FFFD FFFD);                /* surrogate U+D800 */
	BAD("\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD);       /* past U+10FFFF */
	BAD("\xf5\x80\x80\x80", FFFD FFFD FFFD FFFD);
	BAD("\xff\xfe", FFFD FFFD);
	BAD("x\xe4\xb8", "x" FFFD FFFD);                    /* truncated at the end */
	BAD("\xe4\xb8z", FFFD FFFD "z");                    /* truncated mid-string */
	BAD("\xc3\xa9\x80\xc3\xa9", "\xc3\xa9" FFFD "\xc3\xa9");
}
END_TEST

START_TEST(test_random_bytes_stay_json)
{
	unsigned seed = 12345;
	char s[64];
	for (int iter = 0; iter < 20000; iter++) {
		size_t n = (size_t)(rand_r(&seed) % sizeof(s));
		for (size_t i = 0; i < n; i++)
			s[i] = (char)(rand_r(&seed) & 0xff);
		struct md__sbuf b;
		size_t got_n;
		char *got = roundtrip(s, n, &got_n, &b); /* fails the test unless JSON */
		free(got);
		md__sbuf_free(&b);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("common");
	TCase *tc = tcase_create("json_str");
	tcase_add_test(tc, test_quotes_and_backslashes);
	tcase_add_test(tc, test_control_characters);
	tcase_add_test(tc, test_utf8_kept);
	tcase_add_test(tc, test_invalid_utf8_replaced);
	tcase_add_test(tc, test_random_bytes_stay_json);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
