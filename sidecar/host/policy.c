/*
 * policy.c — the policy table: every eviction policy the host can run, by its
 * id (enum md_policy_id, then the host-side ids of test builds, policy.h).
 * Names come from each policy's .name (the ABI's MD_POLICY_NAMES for the
 * built-in ones); the host asks only this table (docs/policies.md "Adding a
 * policy").
 */
#include <stdio.h>
#include <string.h>

#include "policy.h"

extern const struct md__policy md__policy_memdecay;
extern const struct md__policy md__policy_memdecay_norm;
extern const struct md__policy md__policy_h2o;
extern const struct md__policy md__policy_recency;
extern const struct md__policy md__policy_random;
extern const struct md__policy md__policy_memdecay_turn;
#ifdef MEMDECAY_TEST_POLICY
extern const struct md__policy md__policy_test_lifo;
#endif

const struct md__policy *const md__policy_table[MD__POLICY_N] = {
	[MD_POLICY_MEMDECAY] = &md__policy_memdecay,
	[MD_POLICY_MEMDECAY_NORM] = &md__policy_memdecay_norm,
	[MD_POLICY_H2O] = &md__policy_h2o,
	[MD_POLICY_RECENCY] = &md__policy_recency,
	[MD_POLICY_RANDOM] = &md__policy_random,
	[MD_POLICY_MEMDECAY_TURN] = &md__policy_memdecay_turn,
#ifdef MEMDECAY_TEST_POLICY
	[MD__POLICY_TEST_LIFO] = &md__policy_test_lifo,
#endif
};

const char *md__policy_name(uint32_t policy)
{
	return policy < MD__POLICY_N ? md__policy_table[policy]->name : "unknown";
}

int md__policy_from_name(const char *name)
{
	for (int i = 0; i < (int)MD__POLICY_N; i++)
		if (strcmp(name, md__policy_table[i]->name) == 0)
			return i;
	return -1;
}

size_t md__policy_names(char *buf, size_t len)
{
	size_t at = 0;
	if (len)
		buf[0] = '\0';
	for (uint32_t i = 0; i < MD__POLICY_N; i++) {
		int n = snprintf(buf + at, at < len ? len - at : 0, "%s%s", i ? "|" : "",
				 md__policy_table[i]->name);
		if (n > 0)
			at += (size_t)n;
	}
	return at;
}
