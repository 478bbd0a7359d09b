/*
 * policy_test_lifo.c — a policy that exists only in test builds
 * (MEMDECAY_TEST_POLICY, tests/host.cmake): newest page first,
 *   score = 1 / (1 + first_pos).
 * It is added exactly as docs/policies.md "Adding a policy" says (this file
 * and one row in policy.c's table; its id, MD__POLICY_TEST_LIFO, is a
 * host-side one after the ABI's, policy.h), so the tests that run it show
 * that nothing else has to change.  A production build compiles this file to
 * nothing.
 */
#include "policy.h"

#ifdef MEMDECAY_TEST_POLICY

static double inverse_position(const struct md__page *pg)
{
	return 1.0 / (1.0 + (double)pg->first_pos);
}

MD__SELF_BOUNDED_POLICY(inverse_position, 0)

const struct md__policy md__policy_test_lifo = {
	.name = "test-lifo",
	.score = score,
	.static_bound = md__policy_no_static_bound,
	.lower_bound = lower_bound,
	.is_sink = NULL,
	.window_pages = NULL,
};

#endif
