/*
 * lathist.h — a fixed-size latency histogram, HDR style: 4 sub-buckets per
 * power of two (relative resolution 25%), 252 buckets cover 0 .. 2^64-1 ns.
 * Recording is a count-leading-zeros and an increment; no allocation, no
 * locking (one writer).  Percentiles report the bucket's upper bound, so a
 * reported p99 is never below the true one and at most 25% above it.
 * Header-only: memdecayd (decision latency) and memdecay-loadgen (command
 * latency) both use it.
 */
#ifndef MD_LATHIST_H
#define MD_LATHIST_H

#include <stdint.h>

#define MD_LATHIST_SUB_BITS 2u
#define MD_LATHIST_SUB (1u << MD_LATHIST_SUB_BITS)
#define MD_LATHIST_BUCKETS (MD_LATHIST_SUB + (64u - MD_LATHIST_SUB_BITS) * MD_LATHIST_SUB)

struct md_lathist {
	uint64_t count, sum, max;
	uint64_t b[MD_LATHIST_BUCKETS];
};

static inline unsigned md_lathist_index(uint64_t v)
{
	if (v < MD_LATHIST_SUB)
		return (unsigned)v;
	unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= SUB_BITS */
	unsigned sub = (unsigned)(v >> (e - MD_LATHIST_SUB_BITS)) & (MD_LATHIST_SUB - 1u);
	return MD_LATHIST_SUB + (e - MD_LATHIST_SUB_BITS) * MD_LATHIST_SUB + sub;
}

/* Largest value that falls in bucket i. */
static inline uint64_t md_lathist_upper(unsigned i)
{
	if (i < MD_LATHIST_SUB)
		return i;
	unsigned e = (i - MD_LATHIST_SUB) / MD_LATHIST_SUB + MD_LATHIST_SUB_BITS;
	uint64_t sub = (i - MD_LATHIST_SUB) % MD_LATHIST_SUB;
	uint64_t lo = (1ull << e) + (sub << (e - MD_LATHIST_SUB_BITS));
	return lo + (1ull << (e - MD_LATHIST_SUB_BITS)) - 1u;
}

static inline void md_lathist_record(struct md_lathist *h, uint64_t v)
{
	h->b[md_lathist_index(v)]++;
	h->count++;
	h->sum += v;
	if (v > h->max)
		h->max = v;
}

/* Value at quantile q (0 < q <= 1): upper bound of the bucket holding the
 * ceil(q * count)-th smallest sample, capped at the maximum seen; 0 if empty. */
static inline uint64_t md_lathist_quantile(const struct md_lathist *h, double q)
{
	if (!h->count)
		return 0;
	uint64_t rank = (uint64_t)(q * (double)h->count);
	if ((double)rank < q * (double)h->count)
		rank++;
	if (rank < 1)
		rank = 1;
	uint64_t seen = 0;
	for (unsigned i = 0; i < MD_LATHIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank) {
			uint64_t up = md_lathist_upper(i);
			return up < h->max ? up : h->max;
		}
	}
	return h->max;
}

#endif /* MD_LATHIST_H */
