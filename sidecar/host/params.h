/*
 * params.h — the policy configuration shared by every engine: the key registry
 * (docs/design.md §4 names), validation, the config file format, and save.
 * A set of keys is applied all-or-nothing: a copy is modified and validated,
 * then swapped in by the caller.
 */
#ifndef MD_PARAMS_H
#define MD_PARAMS_H

#include <stddef.h>
#include <stdint.h>
#include "memdecay_abi.h"

#define MD__REGION_NAME_MAX 32

struct md__params {
	/* per region */
	double base[MD_REGIONS_MAX];
	double lambda[MD_REGIONS_MAX];
	uint32_t pinned_mask;                 /* bit r set: region r pinned */
	char region_name[MD_REGIONS_MAX][MD__REGION_NAME_MAX]; /* "" = unused id */
	/* score */
	double alpha;
	double tau;
	double beta;
	uint32_t norm;                        /* enum md_norm_mode (memdecay.norm) */
	/* policy defaults */
	uint32_t policy;                      /* enum md_policy_id (key "policy") */
	uint32_t protect_recent;              /* pages */
	/* the policies' own keys: declared, bounded and defaulted by each
	 * policy's file (struct md__policy.keys); only their values live here */
	uint32_t sink_tokens;                 /* recency.sink_tokens */
	double h2o_recent_fraction;           /* h2o.recent_fraction, 0..1 */
	uint64_t random_seed;                 /* random.seed */
	double turn_lambda_scale;             /* memdecay-turn.lambda_scale: lambda_r per turn */
	double turn_recent_fraction;          /* memdecay-turn.recent_fraction, 0..1 */
	/* budgets: 0 means none */
	uint64_t budget_sequence_tokens;
	uint64_t budget_engine_pages;
	uint64_t budget_global_pages;
	double low_watermark;                 /* budget.low_watermark, (0, 1] */
	/* the host tier and recall (ABI 1.4, docs/tier.md) */
	uint64_t tier_pages;                  /* tier.pages: 0 = each engine's HELLO tier_pages */
	double recall_margin;                 /* recall.margin, a share of the victim's
						 recent attention, >= 0 */
	uint32_t recall_max_per_pass;         /* recall.max_per_pass: 0 = recall off */
	/* daemon */
	uint32_t heartbeat_timeout_ms;        /* daemon.heartbeat_timeout_ms */
	uint32_t violation_limit;             /* daemon.violation_limit */
	uint32_t nap_ms;                      /* daemon.nap_ms: poll, flag down, this long after work */
	/* what one peer may take (docs/reliability.md, "Peers") */
	uint32_t max_engines;                 /* daemon.max_engines */
	uint32_t max_engines_per_uid;         /* daemon.max_engines_per_uid */
	uint64_t max_segment_bytes_per_uid;   /* daemon.max_segment_bytes_per_uid */
	double max_engine_weight;             /* budget.max_engine_weight (any HELLO weight) */
};

/* One key of the registry: its name, how its text reads, where its value
 * lives in struct md__params, its bounds and its default.  params.c holds the
 * host's own keys; each policy declares its own (struct md__policy.keys,
 * policy.h) and params.c serves them from the policy table. */
enum md__key_kind {
	MD__KEY_DOUBLE,
	MD__KEY_U32,
	MD__KEY_U64,
	MD__KEY_NORM,    /* raw|relative */
	MD__KEY_POLICY,  /* a policy name */
};

struct md__param_key {
	const char *name;
	enum md__key_kind kind;
	size_t off;            /* MD__PARAM_OFF(field) */
	double lo, hi;         /* doubles; integers use ilo/ihi */
	int lo_open, hi_open;
	uint64_t ilo, ihi;
	double dflt;           /* a policy key's default (doubles) */
	uint64_t idflt;        /* a policy key's default (integers) */
};
#define MD__PARAM_OFF(field) offsetof(struct md__params, field)

/* Starting values: docs/design.md §1 (system pinned, dialogue 0.7/0.05, scratchpad 0.3/0.2). */
void md__params_defaults(struct md__params *p);

/* Set one key from its text value.  Returns 0, or -EINVAL / -ENOENT with a
 * message naming the key and the value in err. */
int md__params_set(struct md__params *p, const char *key, const char *value,
		   char *err, size_t errlen);

/* "k=v" items applied all-or-nothing: on any error *p is unchanged. */
int md__params_set_many(struct md__params *p, const char *const *items, size_t n,
			char *err, size_t errlen);

/* Text value of one key into buf.  Returns the length, or -ENOENT. */
int md__params_get(const struct md__params *p, const char *key, char *buf, size_t len);

/* Calls fn for every key in a stable order (for `get` without a key and `save`). */
typedef void (*md__params_visit_fn)(const char *key, const char *value, void *ud);
void md__params_foreach(const struct md__params *p, md__params_visit_fn fn, void *ud);

/* Config file: one "key = value" per line, '#' comments, blank lines ignored.
 * Errors name the file and line.  All-or-nothing like set_many. */
int md__params_load_file(struct md__params *p, const char *path, char *err, size_t errlen);
int md__params_load_text(struct md__params *p, const char *text, const char *origin,
			 char *err, size_t errlen);
int md__params_save_file(const struct md__params *p, const char *path, char *err, size_t errlen);

/* Names (policy.c: from the policy table). */
const char *md__policy_name(uint32_t policy);
int md__policy_from_name(const char *name);        /* -1 if unknown */
/* every policy's name, "memdecay|memdecay-norm|…", for messages; returns the
 * length it needed */
size_t md__policy_names(char *buf, size_t len);
int md__region_from_name(const struct md__params *p, const char *name); /* -1 if unknown */

#endif
