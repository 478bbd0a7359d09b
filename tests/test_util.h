/*
 * test_util.h — what the Check suites share: running a suite to a result.
 */
#ifndef MD_TEST_UTIL_H
#define MD_TEST_UTIL_H

#include <check.h>
#include <stdlib.h>

/* runs s (CK_NORMAL output), frees the runner; the number of failed tests */
static inline int md_test_failures(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed;
}

/* a suite's main(): EXIT_SUCCESS when every test of s passed */
static inline int md_test_main(Suite *s)
{
	return md_test_failures(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
