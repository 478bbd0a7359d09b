/*
 * names.c — the built-in region and policy names, exported for callers that
 * cannot include the ABI header (the Python binding reads them through
 * ctypes).  The lists themselves live once, in memdecay_abi.h.
 */
#include <errno.h>
#include <string.h>

#include "memdecay.h"

#define MD__EXPORT __attribute__((visibility("default")))

MD__EXPORT const char *md_region_name(uint32_t region)
{
	return md_region_builtin_name(region);
}

MD__EXPORT const char *md_policy_name(uint32_t policy)
{
	return md_policy_builtin_name(policy);
}

MD__EXPORT int md_policy_from_name(const char *name)
{
	const char *n;

	if (!name)
		return -EINVAL;
	for (uint32_t p = 0; (n = md_policy_builtin_name(p)) != NULL; p++)
		if (strcmp(n, name) == 0)
			return (int)p;
	return -EINVAL;
}
