/*
 * oracle.h — the brute-force reference for md__host_decide: it recomputes
 * every page's flags, protection and score from the raw page state (not from
 * the index), sorts, and replays the decision without changing the host.
 * Tests and the bench compare the index against it; `top` uses its list.
 */
#ifndef MD_ORACLE_H
#define MD_ORACLE_H

#include <stddef.h>
#include <stdint.h>
#include "host.h"

struct md__engine;

struct md__oracle_cand {
	double score;
	double decay;
	double attn;
	uint64_t first_pos;
	uint32_t slot;
	uint32_t seq;
	uint32_t n_tokens;
	uint32_t pad;
};

/* Every evictable page of the engine with its score (malloc'ed into *out;
 * caller frees).  Returns the count. */
size_t md__oracle_candidates(const struct md__host *h, const struct md__engine *e,
			     struct md__oracle_cand **out);

/* What md__host_decide(h, out, cap) would return now, evictions and (ABI
 * 1.4) the host tier's drops and restores (oracle.c, oracle_tier); h is not
 * modified. */
size_t md__oracle_decide(const struct md__host *h, struct md__decision *out, size_t cap);

/* Same, counting into *rc (added to; NULL: not counted) what became of the
 * recall candidates it considered: restored against a victim, refused by
 * recall.margin, restored with room (tests: both outcomes must occur). */
struct md__oracle_recall {
	uint64_t swapped, refused, room;
};
size_t md__oracle_decide_recall(const struct md__host *h, struct md__decision *out, size_t cap,
				struct md__oracle_recall *rc);

/* Same, for the host's engine with id engine_id only (bench). */
size_t md__oracle_decide_engine(const struct md__host *h, uint32_t engine_id,
				struct md__decision *out, size_t cap);

#endif
