/*
 * check_tier.c — the host tier and recall (ABI 1.4, docs/tier.md), case by
 * case: the tier budget holds after every pass, a restore needs an estimate
 * above the victim's latest attention + recall.margin x that attention (equal
 * is not enough), under every policy (recency too, where a tier page never
 * outscores a resident one), the victim is the evictable page with the
 * lowest latest attention (not the policy's lowest; never a pinned,
 * protected or restoring page; the eviction order breaks a tie), an
 * estimate for a resident page sets only its latest attention, candidates
 * go highest estimate first,
 * recall.max_per_pass and the output cap bound a pass and the candidates
 * they cut stay, records from a 1.3 engine and records in the wrong state are
 * refused with their reason, SEQ_END frees the tier, a resync rebuilds it
 * (attention kept), a recall hit counts once.
 * Every decision is also compared with the oracle's.  check_index runs the
 * random workloads.
 */
#include <check.h>
#include "test_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "host.h"
#include "oracle.h"

#define ENG 1u

static struct md_stats_rec rec(uint16_t type)
{
	struct md_stats_rec r;
	memset(&r, 0, sizeof r);
	r.type = type;
	return r;
}

/* h2o: a page's score is its cumulative mass, exact in binary fractions;
 * no window, only the tail page protected */
static void h2o_params(struct md__params *p)
{
	md__params_defaults(p);
	p->policy = MD_POLICY_H2O;
	p->h2o_recent_fraction = 0.0;
	p->protect_recent = 0;
	p->recall_margin = 0.25;
	p->recall_max_per_pass = 4;
}

static struct md__host *tier_host(const struct md__params *p, uint32_t cap, uint64_t tier)
{
	struct md__host *h = md__host_new(p);
	ck_assert_int_eq(md__host_engine_add(h, ENG, 4, cap, 4, NULL), 0);
	ck_assert_int_eq(md__host_engine_set_tier(h, ENG, tier, 1u << 16), 0);
	return h;
}

static int ingest(struct md__host *h, const struct md_stats_rec *r)
{
	return md__host_ingest(h, ENG, r);
}

/* page `slot` (gen 1) of seq at pos, 4 tokens of region */
static void open_page_region(struct md__host *h, uint32_t slot, uint32_t seq, uint64_t pos,
			     unsigned region)
{
	struct md_stats_rec r = rec(MD_REC_PAGE_OPEN);
	r.slot = slot;
	r.gen = 1;
	r.seq = seq;
	r.u.page.first_pos = pos;
	r.u.page.n_tokens = 4;
	for (unsigned k = 0; k < 4; k++)
		r.u.page.labels = md_label_set(r.u.page.labels, k, region);
	ck_assert_int_eq(ingest(h, &r), 0);
}

/* page `slot` (gen 1) of seq at pos, 4 user tokens */
static void open_page(struct md__host *h, uint32_t slot, uint32_t seq, uint64_t pos)
{
	open_page_region(h, slot, seq, pos, MD_REGION_USER);
}

static int attn(struct md__host *h, uint32_t slot, float mass, int est, uint16_t refresh)
{
	struct md_stats_rec r = rec(MD_REC_ATTN_PAGE);
	r.slot = slot;
	r.gen = 1;
	r.flags = est ? MD_REC_F_ESTIMATE : 0;
	r.u.attn_page.mass = mass;
	r.u.attn_page.refresh = refresh;
	return ingest(h, &r);
}

static int tier_event(struct md__host *h, uint32_t slot, uint32_t event)
{
	struct md_stats_rec r = rec(MD_REC_PAGE_TIER);
	r.slot = slot;
	r.gen = 1;
	r.u.tier.event = event;
	return ingest(h, &r);
}

static int page_free(struct md__host *h, uint32_t slot, uint32_t reason)
{
	struct md_stats_rec r = rec(MD_REC_PAGE_FREE);
	r.slot = slot;
	r.gen = 1;
	r.u.free.reason = reason;
	return ingest(h, &r);
}

/* one pass, equal to the oracle's (TIER_DEBUG=1 prints both lists) */
static size_t decide(struct md__host *h, struct md__decision *d, size_t cap)
{
	struct md__decision want[64];
	ck_assert_uint_le(cap, 64);
	size_t nw = md__oracle_decide(h, want, cap);
	size_t n = md__host_decide(h, d, cap);
	if (getenv("TIER_DEBUG"))
		for (size_t i = 0; i < (n > nw ? n : nw); i++)
			fprintf(stderr, "%zu: want slot %u t%u r%u  got slot %u t%u r%u\n", i,
				i < nw ? want[i].slot : 99, i < nw ? want[i].type : 99,
				i < nw ? want[i].reason : 99, i < n ? d[i].slot : 99,
				i < n ? d[i].type : 99, i < n ? d[i].reason : 99);
	ck_assert_uint_eq(n, nw);
	ck_assert_int_eq(memcmp(want, d, n * sizeof(*d)), 0);
	return n;
}

static struct md__engine_stats stats(struct md__host *h)
{
	struct md__engine_stats st;
	ck_assert_int_eq(md__host_engine_stats(h, ENG, &st), 0);
	return st;
}

static void set_params(struct md__host *h, const struct md__params *p)
{
	md__host_set_params(h, p);
}

/* evicts every page the budget asks for and lets each enter the tier */
static size_t evict_to_tier(struct md__host *h)
{
	struct md__decision d[64];
	size_t n = decide(h, d, 64);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(d[i].type, MD_CMD_EVICT);
		ck_assert_int_eq(tier_event(h, d[i].slot, MD_TIER_IN), 0);
	}
	return n;
}

START_TEST(test_tier_budget_drops)
{
	struct md__params p;
	h2o_params(&p);
	p.budget_engine_pages = 2;
	struct md__host *h = tier_host(&p, 16, 3);
	for (uint32_t i = 0; i < 8; i++) {
		open_page(h, i, 0, 4 * i);
		ck_assert_int_eq(attn(h, i, (float)(i + 1), 0, 0), 0);
	}
	/* 6 evicted (slots 0..5, lowest mass first), 6 into a tier of 3 */
	ck_assert_uint_eq(evict_to_tier(h), 6);
	ck_assert_uint_eq(stats(h).tier_pages, 6);
	struct md__decision d[8];
	size_t n = decide(h, d, 8);
	ck_assert_uint_eq(n, 3);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(d[i].type, MD_CMD_DROP);
		ck_assert_uint_eq(d[i].reason, MD_DROP_TIER_BUDGET);
		ck_assert_uint_eq(d[i].slot, i); /* the lowest scores */
	}
	struct md__engine_stats st = stats(h);
	ck_assert_uint_eq(st.tier_pages, 3);
	ck_assert_uint_eq(st.tier_budget, 3);
	ck_assert_uint_eq(st.drops, 3);
	/* tier.pages below the capacity: the smaller wins, one per pass with cap 1 */
	p.tier_pages = 1;
	set_params(h, &p);
	ck_assert_uint_eq(decide(h, d, 1), 1);
	ck_assert_uint_eq(d[0].slot, 3);
	ck_assert_uint_eq(decide(h, d, 8), 1);
	ck_assert_uint_eq(d[0].slot, 4);
	ck_assert_uint_eq(stats(h).tier_pages, 1);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	/* the engine confirms: DROPPED frees a page being dropped */
	for (uint32_t s = 0; s < 5; s++)
		ck_assert_int_eq(page_free(h, s, MD_FREE_DROPPED), 0);
	st = stats(h);
	ck_assert_uint_eq(st.tier_freed, 5);
	ck_assert_uint_eq(st.tier_pages, 1);
	/* a larger tier.pages than HELLO's is HELLO's */
	p.tier_pages = 100;
	set_params(h, &p);
	ck_assert_uint_eq(stats(h).tier_budget, 3);
	struct md_param_block pb;
	memset(&pb, 0, sizeof pb);
	ck_assert_int_eq(md__host_engine_param_view(h, ENG, &pb), 0);
	ck_assert_uint_eq(pb.budget_tier_pages, 3);
	md__host_free(h);
}
END_TEST

/* engine budget 3: slot 0 (mass 1) goes to the tier; resident 1 (score 4,
 * latest attention 4), 2 (score 1 + 2 = 3, latest attention 2), 3 (tail,
 * protected): the victim is slot 2, the evictable page with the lowest
 * latest attention, and a candidate's estimate must exceed 2 + 0.25 x 2 =
 * 2.5 (its score, the h2o sum, would need 3.75) */
static struct md__host *margin_host(struct md__params *p)
{
	h2o_params(p);
	p->budget_engine_pages = 3;
	struct md__host *h = tier_host(p, 8, 8);
	for (uint32_t i = 0; i < 4; i++)
		open_page(h, i, 0, 4 * i);
	ck_assert_int_eq(attn(h, 0, 1.0f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 1, 4.0f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 2, 1.0f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 2, 2.0f, 0, 0), 0);
	ck_assert_uint_eq(evict_to_tier(h), 1);
	ck_assert_uint_eq(stats(h).tier_pages, 1);
	return h;
}

START_TEST(test_recall_margin_boundary)
{
	struct md__params p;
	struct md__host *h = margin_host(&p);
	struct md__decision d[8];
	/* 1.5 < 2 + 0.25 * 2 (the victim's latest mass, not its sum 3) */
	ck_assert_int_eq(attn(h, 0, 1.5f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	/* 2.5 == 2 + 0.25 * 2: equal is not enough (the page's score, 1 + 1.5
	 * + 2.5 = 5, beats the victim's 3 by far: scores are not compared) */
	ck_assert_int_eq(attn(h, 0, 2.5f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	/* no new estimate: no longer a candidate, even with a lower margin */
	p.recall_margin = 0.125;
	set_params(h, &p);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	p.recall_margin = 0.25;
	set_params(h, &p);
	/* 2.75 > 2.5: the victim is evicted, then the page restored */
	ck_assert_int_eq(attn(h, 0, 2.75f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 2);
	ck_assert_uint_eq(d[0].type, MD_CMD_EVICT);
	ck_assert_uint_eq(d[0].slot, 2);
	ck_assert_uint_eq(d[0].reason, MD_EVICT_ENGINE_BUDGET);
	ck_assert_uint_eq(d[1].type, MD_CMD_RESTORE);
	ck_assert_uint_eq(d[1].slot, 0);
	ck_assert_uint_eq(d[1].reason, MD_RESTORE_RECALL);
	struct md__engine_stats st = stats(h);
	ck_assert_uint_eq(st.restores, 1);
	ck_assert_uint_eq(st.tier_pages, 0);
	ck_assert_uint_eq(st.pages_live, 3); /* restoring counts as resident */
	ck_assert_uint_eq(st.estimates, 3);
	/* the budget holds: nothing more to do, and a restoring page is never
	 * the victim of an eviction, even over budget */
	ck_assert_uint_eq(decide(h, d, 8), 0);
	p.budget_engine_pages = 1;
	set_params(h, &p);
	ck_assert_uint_eq(decide(h, d, 8), 1);
	ck_assert_uint_eq(d[0].slot, 1);
	ck_assert_int_eq(tier_event(h, 0, MD_TIER_RESTORED), 0);
	ck_assert_uint_eq(decide(h, d, 8), 1);
	ck_assert_uint_eq(d[0].slot, 0);
	md__host_free(h);
}
END_TEST

/* Recency (score = first_pos): a tier page, older than every resident one,
 * never outscores a resident one, yet an estimate above the victim's latest
 * attention by more than the margin brings it back.  The victim is the least
 * attended evictable page (slot 2), not the oldest (slot 1, the policy's
 * lowest), and a page's latest attention is its latest record's mass. */
START_TEST(test_recall_recency)
{
	struct md__params p;
	md__params_defaults(&p);
	p.policy = MD_POLICY_RECENCY;
	p.sink_tokens = 0;
	p.protect_recent = 0;
	p.recall_margin = 0.25;
	p.recall_max_per_pass = 4;
	p.budget_engine_pages = 3;
	struct md__host *h = tier_host(&p, 8, 8);
	for (uint32_t i = 0; i < 4; i++)
		open_page(h, i, 0, 4 * i);
	ck_assert_uint_eq(evict_to_tier(h), 1); /* slot 0, the oldest */
	ck_assert_uint_eq(stats(h).tier_pages, 1);
	/* slot 1 gets 2; slot 2's latest record is per token: 4 x 0.125, a
	 * mass of 0.5 (the 4 before it is not what counts, nor the sum) */
	ck_assert_int_eq(attn(h, 1, 2.0f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 2, 4.0f, 0, 0), 0);
	struct md_stats_rec r = rec(MD_REC_ATTN_TOKENS);
	r.slot = 2;
	r.gen = 1;
	r.count = 4;
	for (unsigned k = 0; k < 4; k++)
		r.u.attn_tokens.mass[k] = 0.125f;
	ck_assert_int_eq(ingest(h, &r), 0);
	struct md__decision d[8];
	/* 0.5 only equals slot 2's 0.5 */
	ck_assert_int_eq(attn(h, 0, 0.5f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	/* 0.625 == 0.5 + 0.25 * 0.5: equal is not enough */
	ck_assert_int_eq(attn(h, 0, 0.625f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	/* 1 > 0.625: slot 2 is evicted and slot 0 restored, though its score
	 * (0) is below every resident one, and 1 is below slot 1's 2 */
	ck_assert_int_eq(attn(h, 0, 1.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 2);
	ck_assert_uint_eq(d[0].type, MD_CMD_EVICT);
	ck_assert_uint_eq(d[0].slot, 2);
	ck_assert_uint_eq(d[0].reason, MD_EVICT_ENGINE_BUDGET);
	ck_assert_uint_eq(d[1].type, MD_CMD_RESTORE);
	ck_assert_uint_eq(d[1].slot, 0);
	struct md__engine_stats st = stats(h);
	ck_assert_uint_eq(st.restores, 1);
	ck_assert_uint_eq(st.estimates, 3);
	md__host_free(h);
}
END_TEST

/* The victim is the evictable page the current queries need least, not the
 * policy's lowest: h2o, engine budget 4; slot 3 has the lowest score (2) but
 * a latest attention of 2, slot 2 the lowest latest attention (0.5) but a
 * score of 4.5.  An estimate of 1 beats slot 2 (0.625 with the margin), not
 * slot 3 (2.5): slot 2 goes.  On a tie of latest attention the eviction
 * order decides (here the higher slot). */
START_TEST(test_recall_least_needed)
{
	struct md__params p;
	h2o_params(&p);
	p.budget_engine_pages = 4;
	struct md__host *h = tier_host(&p, 8, 8);
	for (uint32_t i = 0; i < 5; i++)
		open_page(h, i, 0, 4 * i);
	ck_assert_int_eq(attn(h, 1, 3.0f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 2, 4.0f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 2, 0.5f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 3, 2.0f, 0, 0), 0);
	ck_assert_uint_eq(evict_to_tier(h), 1); /* slot 0, score 0 */
	struct md__top_entry t[4];
	ck_assert_uint_eq(md__host_top(h, ENG, t, 4), 3);
	ck_assert_uint_eq(t[0].slot, 3); /* the policy's lowest */
	struct md__decision d[8];
	ck_assert_int_eq(attn(h, 0, 1.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 2);
	ck_assert_uint_eq(d[0].type, MD_CMD_EVICT);
	ck_assert_uint_eq(d[0].slot, 2);
	ck_assert_uint_eq(d[0].reason, MD_EVICT_ENGINE_BUDGET);
	ck_assert_uint_eq(d[1].type, MD_CMD_RESTORE);
	ck_assert_uint_eq(d[1].slot, 0);
	ck_assert_uint_eq(stats(h).restores, 1);
	/* slot 2 to the tier, slot 0 restored (score 1, latest attention 1);
	 * the same queries give slots 1 and 3 0.25 each and slot 0 0.5: slots
	 * 1 (score 3) and 3 (score 2) tie, and slot 3 comes first in the
	 * eviction order */
	ck_assert_int_eq(tier_event(h, 2, MD_TIER_IN), 0);
	ck_assert_int_eq(tier_event(h, 0, MD_TIER_RESTORED), 0);
	ck_assert_int_eq(attn(h, 0, 0.5f, 1, 0), 0);
	ck_assert_int_eq(attn(h, 1, 0.25f, 1, 0), 0);
	ck_assert_int_eq(attn(h, 3, 0.25f, 1, 0), 0);
	ck_assert_int_eq(attn(h, 2, 1.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 2);
	ck_assert_uint_eq(d[0].type, MD_CMD_EVICT);
	ck_assert_uint_eq(d[0].slot, 3);
	ck_assert_uint_eq(d[1].type, MD_CMD_RESTORE);
	ck_assert_uint_eq(d[1].slot, 2);
	ck_assert_uint_eq(stats(h).restores, 2);
	md__host_free(h);
}
END_TEST

/* A page that is not evictable is never the victim, however low its latest
 * attention: slot 0 is pinned (system), slot 4 protected (the tail), and a
 * page being restored waits for its RESTORED; each has 0.  h2o, engine
 * budget 4. */
START_TEST(test_recall_victim_evictable)
{
	struct md__params p;
	h2o_params(&p);
	p.budget_engine_pages = 4;
	struct md__host *h = tier_host(&p, 8, 8);
	open_page_region(h, 0, 0, 0, MD_REGION_SYSTEM);
	for (uint32_t i = 1; i < 5; i++)
		open_page(h, i, 0, 4 * i);
	ck_assert_int_eq(attn(h, 2, 2.0f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 3, 3.0f, 0, 0), 0);
	ck_assert_uint_eq(evict_to_tier(h), 1); /* slot 1, score 0 */
	struct md__decision d[8];
	/* 1 beats slots 0 and 4 (0), not slot 2 (2.5 with the margin) */
	ck_assert_int_eq(attn(h, 1, 1.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	ck_assert_int_eq(attn(h, 1, 3.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 2);
	ck_assert_uint_eq(d[0].slot, 2);
	ck_assert_uint_eq(d[1].slot, 1);
	ck_assert_uint_eq(d[1].type, MD_CMD_RESTORE);
	/* slot 1, restoring, now gets 0; slot 2 is in the tier: 1 beats
	 * slots 0, 1 and 4, not slot 3 (3.75) */
	ck_assert_int_eq(tier_event(h, 2, MD_TIER_IN), 0);
	ck_assert_int_eq(attn(h, 1, 0.0f, 1, 0), 0);
	ck_assert_int_eq(attn(h, 2, 1.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	ck_assert_int_eq(attn(h, 2, 4.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 2);
	ck_assert_uint_eq(d[0].slot, 3);
	ck_assert_uint_eq(d[1].slot, 2);
	ck_assert_uint_eq(d[1].type, MD_CMD_RESTORE);
	/* nothing evictable left: no victim, no restore */
	ck_assert_int_eq(tier_event(h, 3, MD_TIER_IN), 0);
	ck_assert_int_eq(attn(h, 3, 4.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	ck_assert_uint_eq(stats(h).restores, 2);
	md__host_free(h);
}
END_TEST

/* An estimate for a resident page sets only its recent attention: the
 * engine measures the pages a restore could displace with the same queries
 * as the candidate.  Its score (h2o: cumulative mass) stays with real
 * attention, and it is no candidate. */
START_TEST(test_recall_resident_estimate)
{
	struct md__params p;
	h2o_params(&p);
	p.protect_recent = 0;
	p.recall_margin = 0.25;
	p.recall_max_per_pass = 4;
	p.budget_engine_pages = 3;
	struct md__host *h = tier_host(&p, 8, 8);
	for (uint32_t i = 0; i < 4; i++)
		open_page(h, i, 0, 4 * i);
	for (uint32_t i = 1; i < 4; i++)
		ck_assert_int_eq(attn(h, i, 5.0f + (float)i, 0, 0), 0);
	ck_assert_uint_eq(evict_to_tier(h), 1); /* slot 0: no mass */
	struct md__decision d[8];
	/* the least attended, slot 1, got 6 of real attention: 3 is not
	 * enough */
	ck_assert_int_eq(attn(h, 0, 3.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	/* the same queries' estimates: 5 for slot 1, 2 for slot 2 */
	ck_assert_int_eq(attn(h, 1, 5.0f, 1, 0xf), 0);
	ck_assert_int_eq(attn(h, 2, 2.0f, 1, 0xf), 0);
	/* neither entered a score (6 and 7 still, not 11 and 9), and neither
	 * page is a candidate */
	struct md__top_entry t[4];
	ck_assert_uint_eq(md__host_top(h, ENG, t, 4), 2);
	ck_assert_uint_eq(t[0].slot, 1);
	ck_assert(t[0].score == 6.0);
	ck_assert_uint_eq(t[1].slot, 2);
	ck_assert(t[1].score == 7.0);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	/* 3 > 2 + 0.25 x 2: slot 2, now the least attended, is the victim */
	ck_assert_int_eq(attn(h, 0, 3.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 2);
	ck_assert_uint_eq(d[0].type, MD_CMD_EVICT);
	ck_assert_uint_eq(d[0].slot, 2);
	ck_assert_uint_eq(d[1].type, MD_CMD_RESTORE);
	ck_assert_uint_eq(d[1].slot, 0);
	struct md__engine_stats st = stats(h);
	ck_assert_uint_eq(st.restores, 1);
	ck_assert_uint_eq(st.estimates, 4);
	md__host_free(h);
}
END_TEST

/* a slot opened again starts with no recent attention: what its previous
 * page got is not the new page's */
START_TEST(test_recall_slot_reused)
{
	struct md__params p;
	md__params_defaults(&p);
	p.policy = MD_POLICY_RECENCY;
	p.sink_tokens = 0;
	p.protect_recent = 0;
	p.recall_margin = 0.25;
	p.budget_engine_pages = 2;
	struct md__host *h = tier_host(&p, 8, 8);
	for (uint32_t i = 0; i < 3; i++)
		open_page(h, i, 0, 4 * i);
	ck_assert_uint_eq(evict_to_tier(h), 1); /* slot 0 */
	ck_assert_int_eq(attn(h, 1, 4.0f, 0, 0), 0);
	ck_assert_int_eq(page_free(h, 1, MD_FREE_FINISHED), 0);
	open_page(h, 1, 0, 4);
	/* the victim, slot 1, has had no attention: 0.5 > 0 */
	ck_assert_int_eq(attn(h, 0, 0.5f, 1, 0), 0);
	struct md__decision d[8];
	ck_assert_uint_eq(decide(h, d, 8), 2);
	ck_assert_uint_eq(d[0].slot, 1);
	ck_assert_uint_eq(d[1].slot, 0);
	ck_assert_uint_eq(d[1].type, MD_CMD_RESTORE);
	md__host_free(h);
}
END_TEST

/* a token budget that binds: the victim is the sequence's least attended
 * evictable page (slot 1, latest 1), not its lowest score (slot 2, 2), and
 * never a page of another sequence (slot 4, no attention at all) */
START_TEST(test_recall_sequence_budget)
{
	struct md__params p;
	h2o_params(&p);
	p.budget_sequence_tokens = 12; /* 3 pages of 4 */
	struct md__host *h = tier_host(&p, 8, 8);
	for (uint32_t i = 0; i < 4; i++)
		open_page(h, i, 0, 4 * i);
	open_page(h, 4, 1, 0); /* another sequence: never its victim */
	open_page(h, 5, 1, 4);
	ck_assert_int_eq(attn(h, 1, 2.0f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 1, 1.0f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 2, 2.0f, 0, 0), 0);
	ck_assert_uint_eq(evict_to_tier(h), 1); /* slot 0, mass 0 */
	struct md__decision d[8];
	/* 2 beats slot 1 (1.25 with the margin), not slot 2 (2.5) */
	ck_assert_int_eq(attn(h, 0, 2.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 2);
	ck_assert_uint_eq(d[0].slot, 1);
	ck_assert_uint_eq(d[0].reason, MD_EVICT_SEQUENCE_BUDGET);
	ck_assert_uint_eq(d[1].slot, 0);
	ck_assert_uint_eq(d[1].type, MD_CMD_RESTORE);
	md__host_free(h);
}
END_TEST

/* no budgets: room for every candidate, so only the caps bound a pass; the
 * candidates go from the highest estimate down, the lower slot first on a
 * tie, whatever their scores */
START_TEST(test_recall_cap_per_pass)
{
	struct md__params p;
	h2o_params(&p);
	p.budget_engine_pages = 2;
	struct md__host *h = tier_host(&p, 8, 8);
	for (uint32_t i = 0; i < 5; i++)
		open_page(h, i, 0, 4 * i);
	static const float mass[5] = {0.5f, 2.0f, 0.25f, 8.0f, 8.0f};
	for (uint32_t s = 0; s < 5; s++)
		ck_assert_int_eq(attn(h, s, mass[s], 0, 0), 0);
	ck_assert_uint_eq(evict_to_tier(h), 3); /* slots 0, 1, 2 */
	p.budget_engine_pages = 0;
	p.recall_max_per_pass = 1;
	set_params(h, &p);
	/* estimates 1, 1, 2: scores (sums) 1.5, 3, 2.25 */
	static const float est[3] = {1.0f, 1.0f, 2.0f};
	for (uint32_t s = 0; s < 3; s++)
		ck_assert_int_eq(attn(h, s, est[s], 1, 0), 0);
	struct md__decision d[8];
	/* one output slot: no candidate is considered, all stay */
	ck_assert_uint_eq(decide(h, d, 1), 0);
	/* the highest estimate first, one per pass; the others stay
	 * candidates; then the tie, the lower slot first */
	ck_assert_uint_eq(decide(h, d, 8), 1);
	ck_assert_uint_eq(d[0].slot, 2);
	ck_assert_uint_eq(d[0].type, MD_CMD_RESTORE);
	ck_assert_uint_eq(decide(h, d, 8), 1);
	ck_assert_uint_eq(d[0].slot, 0);
	/* 0: recall off, the last candidate waits */
	p.recall_max_per_pass = 0;
	set_params(h, &p);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	p.recall_max_per_pass = 4;
	set_params(h, &p);
	ck_assert_uint_eq(decide(h, d, 8), 1);
	ck_assert_uint_eq(d[0].slot, 1);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	ck_assert_uint_eq(stats(h).restores, 3);
	md__host_free(h);
}
END_TEST

START_TEST(test_tier_old_engine)
{
	struct md__params p;
	h2o_params(&p);
	struct md__host *h = tier_host(&p, 8, 8);
	ck_assert_int_eq(md__host_engine_set_abi_minor(h, ENG, 3), 0);
	open_page(h, 0, 0, 0);
	open_page(h, 1, 0, 4);
	ck_assert_int_eq(tier_event(h, 0, MD_TIER_IN), -MD__REJ_TYPE);
	/* the flags word is ignored, as before 1.4: real attention */
	ck_assert_int_eq(attn(h, 0, 1.0f, 1, 0), 0);
	struct md_stats_rec r = rec(MD_REC_ATTN_PAGE);
	r.slot = 0;
	r.gen = 1;
	r.flags = 0x8000;
	ck_assert_int_eq(ingest(h, &r), 0);
	struct md__engine_stats st = stats(h);
	ck_assert_uint_eq(st.rejected[MD__REJ_TYPE], 1);
	ck_assert_uint_eq(st.estimates, 0);
	ck_assert_str_eq(md__reject_name(-MD__REJ_TYPE), "type");
	md__host_free(h);
}
END_TEST

START_TEST(test_tier_rejects)
{
	struct md__params p;
	h2o_params(&p);
	p.budget_engine_pages = 2;
	struct md__host *h = tier_host(&p, 8, 8);
	for (uint32_t i = 0; i < 3; i++)
		open_page(h, i, 0, 4 * i);
	struct md__decision d[4];
	ck_assert_uint_eq(decide(h, d, 4), 1); /* slot 0 evicting */
	/* live page 1: no tier event, not dropped (an estimate is taken:
	 * test_recall_resident_estimate) */
	ck_assert_int_eq(attn(h, 1, 1.0f, 1, 0), 0);
	ck_assert_int_eq(tier_event(h, 1, MD_TIER_IN), -MD__REJ_STATE);
	ck_assert_int_eq(tier_event(h, 1, MD_TIER_RESTORED), -MD__REJ_STATE);
	ck_assert_int_eq(tier_event(h, 1, MD_TIER_REFUSED), -MD__REJ_STATE);
	ck_assert_int_eq(page_free(h, 1, MD_FREE_DROPPED), -MD__REJ_STATE);
	/* evicting page 0: only IN (or a free) */
	ck_assert_int_eq(attn(h, 0, 1.0f, 1, 0), -MD__REJ_STATE);
	ck_assert_int_eq(tier_event(h, 0, MD_TIER_RESTORED), -MD__REJ_STATE);
	ck_assert_int_eq(tier_event(h, 0, 7), -MD__REJ_TYPE);
	ck_assert_int_eq(tier_event(h, 0, MD_TIER_IN), 0);
	/* tier page 0: no real attention, no grow, no second IN */
	ck_assert_int_eq(attn(h, 0, 1.0f, 0, 1), -MD__REJ_STATE);
	struct md_stats_rec r = rec(MD_REC_ATTN_TOKENS);
	r.slot = 0;
	r.gen = 1;
	r.count = 1;
	ck_assert_int_eq(ingest(h, &r), -MD__REJ_STATE);
	ck_assert_int_eq(tier_event(h, 0, MD_TIER_IN), -MD__REJ_STATE);
	/* unknown flag bits, or the estimate flag on another record */
	r = rec(MD_REC_ATTN_PAGE);
	r.slot = 0;
	r.gen = 1;
	r.flags = MD_REC_F_ESTIMATE | 2;
	ck_assert_int_eq(ingest(h, &r), -MD__REJ_TYPE);
	r = rec(MD_REC_ATTN_TOKENS);
	r.slot = 0;
	r.gen = 1;
	r.count = 1;
	r.flags = MD_REC_F_ESTIMATE;
	ck_assert_int_eq(ingest(h, &r), -MD__REJ_TYPE);
	r = rec(MD_REC_STEP);
	r.flags = 4;
	ck_assert_int_eq(ingest(h, &r), -MD__REJ_TYPE);
	/* an estimate is fine here; the wrong generation is not */
	ck_assert_int_eq(attn(h, 0, 1.0f, 1, 0), 0);
	r = rec(MD_REC_PAGE_TIER);
	r.slot = 0;
	r.gen = 2;
	r.u.tier.event = MD_TIER_RESTORED;
	ck_assert_int_eq(ingest(h, &r), -MD__REJ_GEN);
	struct md__engine_stats st = stats(h);
	ck_assert_uint_eq(st.rejected[MD__REJ_STATE], 9);
	ck_assert_uint_eq(st.rejected[MD__REJ_TYPE], 4);
	ck_assert_uint_eq(st.rejected[MD__REJ_GEN], 1);
	ck_assert_uint_eq(st.tier_in, 1);
	ck_assert_uint_eq(st.estimates, 2);
	md__host_free(h);
}
END_TEST

START_TEST(test_tier_seq_end_frees)
{
	struct md__params p;
	h2o_params(&p);
	p.budget_engine_pages = 1;
	p.recall_max_per_pass = 0;
	struct md__host *h = tier_host(&p, 8, 2);
	for (uint32_t i = 0; i < 5; i++)
		open_page(h, i, 2, 4 * i);
	ck_assert_uint_eq(evict_to_tier(h), 4); /* 4 into a tier of 2 */
	struct md__decision d[8];
	ck_assert_uint_eq(decide(h, d, 8), 2); /* 2 dropping */
	/* the tail page goes too: the sequence lives in the tier alone */
	ck_assert_int_eq(page_free(h, 4, MD_FREE_FINISHED), 0);
	struct md__seq_info si[4];
	ck_assert_uint_eq(md__host_seqs(h, ENG, 0, si, 4), 1);
	ck_assert_uint_eq(si[0].seq, 2);
	ck_assert_uint_eq(si[0].pages, 0);
	ck_assert_uint_eq(si[0].tier_pages, 2);
	struct md_stats_rec r = rec(MD_REC_SEQ_END);
	r.seq = 2;
	ck_assert_int_eq(ingest(h, &r), 0);
	ck_assert_uint_eq(md__host_seqs(h, ENG, 0, si, 4), 0);
	struct md__engine_stats st = stats(h);
	ck_assert_uint_eq(st.tier_pages, 0);
	ck_assert_uint_eq(st.tier_freed, 4);
	ck_assert_uint_eq(st.pages_live, 0);
	/* every slot is free again */
	for (uint32_t i = 0; i < 5; i++)
		open_page(h, i, 0, 4 * i);
	md__host_free(h);
}
END_TEST

START_TEST(test_tier_resync)
{
	struct md__params p;
	h2o_params(&p);
	p.budget_engine_pages = 3;
	struct md__host *h = tier_host(&p, 8, 8);
	for (uint32_t i = 0; i < 4; i++)
		open_page(h, i, 0, 4 * i);
	ck_assert_int_eq(attn(h, 0, 1.0f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 1, 3.0f, 0, 0), 0);
	ck_assert_int_eq(attn(h, 2, 2.0f, 0, 0), 0);
	ck_assert_uint_eq(evict_to_tier(h), 1); /* slot 0 */
	/* the engine's table: 0 restored (its record lost), 1 in the tier,
	 * 2 and 3 live, 5 a tier page the daemon never saw */
	struct md_page_entry table[8];
	memset(table, 0, sizeof table);
	for (uint32_t i = 0; i < 4; i++)
		table[i] = (struct md_page_entry){.generation = 1, .seq = 0, .n_tokens = 4,
						  .state = MD_PAGE_LIVE, .first_pos = 4 * i};
	table[1].state = MD_PAGE_TIER;
	table[5] = (struct md_page_entry){.generation = 3, .seq = 0, .n_tokens = 4,
					  .state = MD_PAGE_TIER, .first_pos = 40};
	for (uint32_t i = 0; i < 4; i++)
		for (unsigned k = 0; k < 4; k++)
			table[i].labels = md_label_set(table[i].labels, k, MD_REGION_USER);
	table[5].labels = table[0].labels;
	md__host_resync_begin(h, ENG);
	md__host_resync_prune(h, ENG, table);
	for (uint32_t i = 0; i < 8; i++)
		ck_assert_int_eq(md__host_resync_page(h, ENG, i, &table[i]), 0);
	md__host_resync_end(h, ENG);
	struct md__engine_stats st = stats(h);
	ck_assert_uint_eq(st.tier_pages, 2);
	ck_assert_uint_eq(st.pages_live, 3);
	/* slot 0 is live again with its mass (1): the lowest resident */
	struct md__top_entry t[4];
	ck_assert_uint_eq(md__host_top(h, ENG, t, 4), 2);
	ck_assert_uint_eq(t[0].slot, 0);
	ck_assert(t[0].score == 1.0);
	ck_assert_uint_eq(t[1].slot, 2);
	/* slot 0 kept its latest attention (1) too: an estimate of 1.25 for
	 * slot 1 only equals the victim's 1 + 0.25; 1.5 beats it */
	struct md__decision d[8];
	ck_assert_int_eq(attn(h, 1, 1.25f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 0);
	ck_assert_int_eq(attn(h, 1, 1.5f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 2);
	ck_assert_uint_eq(d[0].slot, 0);
	ck_assert_uint_eq(d[1].slot, 1);
	ck_assert_uint_eq(d[1].type, MD_CMD_RESTORE);
	/* slot 5 is in the tier under its own generation */
	struct md_stats_rec r = rec(MD_REC_PAGE_FREE);
	r.slot = 5;
	r.gen = 3;
	r.u.free.reason = MD_FREE_DROPPED;
	ck_assert_int_eq(ingest(h, &r), 0);
	ck_assert_uint_eq(stats(h).tier_pages, 0);
	/* a 1.3 engine's table has no tier state: such an entry is free */
	ck_assert_int_eq(md__host_engine_set_abi_minor(h, ENG, 3), 0);
	md__host_resync_begin(h, ENG);
	ck_assert_int_eq(md__host_resync_page(h, ENG, 5, &table[5]), 0);
	md__host_resync_end(h, ENG);
	ck_assert_uint_eq(stats(h).tier_pages, 0);
	md__host_free(h);
}
END_TEST

START_TEST(test_recall_hit_once)
{
	struct md__params p;
	struct md__host *h = margin_host(&p);
	struct md__decision d[8];
	ck_assert_int_eq(attn(h, 0, 4.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 2);
	/* an estimate on the restoring page is taken, and is no hit */
	ck_assert_int_eq(attn(h, 0, 0.5f, 1, 0xf), 0);
	ck_assert_int_eq(tier_event(h, 0, MD_TIER_RESTORED), 0);
	struct md__engine_stats st = stats(h);
	ck_assert_uint_eq(st.recalls, 1);
	ck_assert_uint_eq(st.recall_hits, 0);
	/* attention that refreshes nothing is no hit; the first refresh is,
	 * once */
	ck_assert_int_eq(attn(h, 0, 1.0f, 0, 0), 0);
	ck_assert_uint_eq(stats(h).recall_hits, 0);
	ck_assert_int_eq(attn(h, 0, 1.0f, 0, 1), 0);
	ck_assert_uint_eq(stats(h).recall_hits, 1);
	ck_assert_int_eq(attn(h, 0, 1.0f, 0, 1), 0);
	ck_assert_uint_eq(stats(h).recall_hits, 1);
	struct md__seq_info si[2];
	ck_assert_uint_eq(md__host_seqs(h, ENG, 0, si, 2), 1);
	ck_assert_uint_eq(si[0].recalls, 1);
	md__host_free(h);
}
END_TEST

/* a refused restore puts the page back in the tier, out of the count */
START_TEST(test_restore_refused)
{
	struct md__params p;
	struct md__host *h = margin_host(&p);
	struct md__decision d[8];
	ck_assert_int_eq(attn(h, 0, 4.0f, 1, 0), 0);
	ck_assert_uint_eq(decide(h, d, 8), 2);
	ck_assert_uint_eq(stats(h).pages_live, 3);
	ck_assert_int_eq(tier_event(h, 0, MD_TIER_REFUSED), 0);
	struct md__engine_stats st = stats(h);
	ck_assert_uint_eq(st.pages_live, 2);
	ck_assert_uint_eq(st.tier_pages, 1);
	ck_assert_uint_eq(st.restores_refused, 1);
	/* not a candidate until its next estimate */
	ck_assert_uint_eq(decide(h, d, 8), 0);
	md__host_free(h);
}
END_TEST

static Suite *tier_suite(void)
{
	Suite *s = suite_create("tier");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_tier_budget_drops);
	tcase_add_test(tc, test_recall_margin_boundary);
	tcase_add_test(tc, test_recall_recency);
	tcase_add_test(tc, test_recall_least_needed);
	tcase_add_test(tc, test_recall_victim_evictable);
	tcase_add_test(tc, test_recall_slot_reused);
	tcase_add_test(tc, test_recall_resident_estimate);
	tcase_add_test(tc, test_recall_sequence_budget);
	tcase_add_test(tc, test_recall_cap_per_pass);
	tcase_add_test(tc, test_tier_old_engine);
	tcase_add_test(tc, test_tier_rejects);
	tcase_add_test(tc, test_tier_seq_end_frees);
	tcase_add_test(tc, test_tier_resync);
	tcase_add_test(tc, test_recall_hit_once);
	tcase_add_test(tc, test_restore_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(tier_suite());
}
