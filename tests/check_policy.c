/*
 * check_policy.c — every policy's score against a double-precision reference
 * computed here from the records the test sends (not from host state), plus
 * ties, the parameter-block view and eviction statistics.
 */
#include <check.h>
#include "test_util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "host.h"

static struct md_stats_rec rec(uint16_t type)
{
	struct md_stats_rec r;
	memset(&r, 0, sizeof r);
	r.type = type;
	return r;
}

static int open_page(struct md__host *h, uint32_t eng, uint32_t slot, uint32_t gen, uint32_t seq,
		     uint64_t first_pos, uint32_t n, const unsigned *regions, uint64_t clock)
{
	struct md_stats_rec r = rec(MD_REC_PAGE_OPEN);
	r.slot = slot;
	r.gen = gen;
	r.seq = seq;
	r.clock = clock;
	r.u.page.first_pos = first_pos;
	r.u.page.n_tokens = (uint16_t)n;
	for (unsigned k = 0; k < n; k++)
		r.u.page.labels = md_label_set(r.u.page.labels, k, regions[k]);
	return md__host_ingest(h, eng, &r);
}

static int step(struct md__host *h, uint32_t eng, uint32_t seq, uint64_t clock)
{
	struct md_stats_rec r = rec(MD_REC_STEP);
	r.seq = seq;
	r.clock = clock;
	return md__host_ingest(h, eng, &r);
}

static int attn_page(struct md__host *h, uint32_t eng, uint32_t slot, uint32_t gen, float mass,
		     uint16_t refresh)
{
	struct md_stats_rec r = rec(MD_REC_ATTN_PAGE);
	r.slot = slot;
	r.gen = gen;
	r.u.attn_page.mass = mass;
	r.u.attn_page.refresh = refresh;
	return md__host_ingest(h, eng, &r);
}

static int attn_tokens(struct md__host *h, uint32_t eng, uint32_t slot, uint32_t gen,
		       unsigned t0, unsigned count, const float *m)
{
	struct md_stats_rec r = rec(MD_REC_ATTN_TOKENS);
	r.slot = slot;
	r.gen = gen;
	r.token0 = (uint8_t)t0;
	r.count = (uint8_t)count;
	for (unsigned i = 0; i < count; i++)
		r.u.attn_tokens.mass[i] = m[i];
	return md__host_ingest(h, eng, &r);
}

static const struct md__top_entry *find_slot(const struct md__top_entry *t, size_t n,
					     uint32_t slot)
{
	for (size_t i = 0; i < n; i++)
		if (t[i].slot == slot)
			return &t[i];
	return NULL;
}

#define CLOSE(a, b) ck_assert_msg(fabs((a) - (b)) <= 1e-12 * (1.0 + fabs(b)), \
				  "%s = %.17g, reference %.17g", #a, (double)(a), (double)(b))

/* Reference: one page of the test's own model. */
struct ref_page {
	unsigned n;
	unsigned region[16];
	uint64_t t_refresh[16];
	double ewma;   /* in the policy's norm */
	double cum;
};

static double ref_memdecay(const struct md__params *p, const struct ref_page *rp, uint64_t clock,
			   double *decay, double *attn)
{
	double s = 0;
	for (unsigned k = 0; k < rp->n; k++) {
		unsigned r = rp->region[k];
		s += p->base[r] * exp(-p->lambda[r] * (double)(clock - rp->t_refresh[k]));
	}
	*decay = s / rp->n;
	*attn = p->alpha * rp->ewma / rp->n;
	return *decay + *attn;
}

static void memdecay_case(int norm)
{
	struct md__params p;
	md__params_defaults(&p);
	p.alpha = 0.5;
	p.beta = 0.8;
	p.tau = norm ? 1.0 : 0.1;
	p.policy = norm ? MD_POLICY_MEMDECAY_NORM : MD_POLICY_MEMDECAY;
	struct md__host *h = md__host_new(&p);
	ck_assert_int_eq(md__host_engine_add(h, 7, 4, 16, 2, NULL), 0);
	unsigned ra[4] = {MD_REGION_USER, MD_REGION_SCRATCHPAD, MD_REGION_RETRIEVAL, MD_REGION_PLAN};
	unsigned rb[4] = {MD_REGION_ASSISTANT, MD_REGION_ASSISTANT, MD_REGION_TOOL_OUT,
			  MD_REGION_TOOL_IN};
	unsigned ru[4] = {MD_REGION_USER, MD_REGION_USER, MD_REGION_USER, MD_REGION_USER};
	struct ref_page A = {.n = 4}, B = {.n = 4};
	memcpy(A.region, ra, sizeof ra);
	memcpy(B.region, rb, sizeof rb);
	ck_assert_int_eq(open_page(h, 7, 0, 1, 0, 0, 4, ra, 4), 0);
	ck_assert_int_eq(open_page(h, 7, 1, 1, 0, 4, 4, rb, 8), 0);
	ck_assert_int_eq(open_page(h, 7, 2, 1, 0, 8, 4, ru, 8), 0);
	ck_assert_int_eq(open_page(h, 7, 3, 1, 0, 12, 4, ru, 9), 0);
	for (int k = 0; k < 4; k++) {
		A.t_refresh[k] = 4;
		B.t_refresh[k] = 8;
	}
	double n_live = 16, beta = p.beta;
	ck_assert_int_eq(step(h, 7, 0, 10), 0);
	ck_assert_int_eq(attn_page(h, 7, 0, 1, 0.6f, 1u << 1), 0);
	A.t_refresh[1] = 10;
	A.ewma = (1 - beta) * (double)0.6f * (norm ? n_live : 1);
	ck_assert_int_eq(step(h, 7, 0, 15), 0);
	ck_assert_int_eq(attn_page(h, 7, 0, 1, 0.25f, 0), 0);
	A.ewma = beta * A.ewma + (1 - beta) * (double)0.25f * (norm ? n_live : 1);
	float mb[4] = {0.07f, 0.2f, 0.0f, 0.01f};
	ck_assert_int_eq(attn_tokens(h, 7, 1, 1, 0, 4, mb), 0);
	double sum = 0;
	for (int k = 0; k < 4; k++) {
		sum += (double)mb[k];
		double m = (double)mb[k] * (norm ? n_live : 1);
		if (m > p.tau)
			B.t_refresh[k] = 15;
	}
	/* raw tau 0.1 refreshes token 1 only; relative tau 1.0 refreshes tokens 0 and 1 */
	ck_assert_uint_eq(B.t_refresh[0], norm ? 15 : 8);
	ck_assert_uint_eq(B.t_refresh[1], 15);
	B.ewma = (1 - beta) * sum * (norm ? n_live : 1);
	ck_assert_int_eq(step(h, 7, 0, 30), 0);
	struct md__top_entry t[8];
	size_t n = md__host_top(h, UINT32_MAX, t, 8);
	ck_assert_uint_eq(n, 2); /* slot 3 is the tail, slot 2 protect_recent: not listed */
	ck_assert_uint_eq(md__host_top(h, 8, t, 8), 0);
	n = md__host_top(h, 7, t, 8);
	ck_assert_uint_eq(n, 2);
	double d, a;
	const struct md__top_entry *ta = find_slot(t, n, 0), *tb = find_slot(t, n, 1);
	ck_assert_ptr_nonnull(ta);
	ck_assert_ptr_nonnull(tb);
	double sa = ref_memdecay(&p, &A, 30, &d, &a);
	CLOSE(ta->score, sa);
	CLOSE(ta->decay_term, d);
	CLOSE(ta->attn_term, a);
	double sb = ref_memdecay(&p, &B, 30, &d, &a);
	CLOSE(tb->score, sb);
	CLOSE(tb->attn_term, a);
	ck_assert(t[0].score <= t[1].score);
	ck_assert_uint_eq(ta->dominant_region, MD_REGION_PLAN); /* 1 each: lowest id */
	ck_assert_uint_eq(tb->dominant_region, MD_REGION_ASSISTANT);
	md__host_free(h);
}

START_TEST(test_memdecay_score)
{
	memdecay_case(0);
}
END_TEST

START_TEST(test_memdecay_norm_score)
{
	memdecay_case(1);
}
END_TEST

/* memdecay-turn: age counts the turns begun since a token's birth or refresh
 * (a turn begins where the appended region changes), not clock steps */
START_TEST(test_memdecay_turn_score)
{
	struct md__params p;
	md__params_defaults(&p);
	p.policy = MD_POLICY_MEMDECAY_TURN;
	p.turn_lambda_scale = 2.0;
	struct md__host *h = md__host_new(&p);
	ck_assert_int_eq(md__host_engine_add(h, 3, 4, 8, 1, NULL), 0);
	unsigned ru[4] = {MD_REGION_USER, MD_REGION_USER, MD_REGION_USER, MD_REGION_USER};
	unsigned rus[4] = {MD_REGION_USER, MD_REGION_USER, MD_REGION_SCRATCHPAD,
			   MD_REGION_SCRATCHPAD};
	unsigned ra[4] = {MD_REGION_ASSISTANT, MD_REGION_ASSISTANT, MD_REGION_ASSISTANT,
			  MD_REGION_ASSISTANT};
	ck_assert_int_eq(open_page(h, 3, 0, 1, 0, 0, 4, ru, 4), 0);   /* turn 1 */
	ck_assert_int_eq(open_page(h, 3, 1, 1, 0, 4, 4, rus, 8), 0);  /* turn 1, then 2 */
	ck_assert_int_eq(step(h, 3, 0, 1000), 0);                     /* steps, no turn */
	ck_assert_int_eq(open_page(h, 3, 2, 1, 0, 8, 4, ra, 1000), 0); /* turn 3 */
	ck_assert_int_eq(open_page(h, 3, 3, 1, 0, 12, 4, ru, 1004), 0); /* turn 4: the tail */
	ck_assert_int_eq(step(h, 3, 0, 1010), 0);
	double lu = p.lambda[MD_REGION_USER] * 2.0, ls = p.lambda[MD_REGION_SCRATCHPAD] * 2.0;
	double bu = p.base[MD_REGION_USER], bs = p.base[MD_REGION_SCRATCHPAD];
	struct md__top_entry t[4];
	size_t n = md__host_top(h, 3, t, 4);
	ck_assert_uint_eq(n, 2); /* slot 3 is the tail, slot 2 protect_recent */
	const struct md__top_entry *t0 = find_slot(t, n, 0), *t1 = find_slot(t, n, 1);
	ck_assert_ptr_nonnull(t0);
	ck_assert_ptr_nonnull(t1);
	/* slot 0: born in turn 1, four turns begun by now: age 3 (memdecay's age: 1006 steps) */
	CLOSE(t0->score, bu * exp(-lu * 3));
	/* slot 1 was opened at clock 8, where turn 2 (its scratchpad) began: age 2 for all four */
	CLOSE(t1->score, (2 * bu * exp(-lu * 2) + 2 * bs * exp(-ls * 2)) / 4);
	/* a refresh moves a token into the current turn (age 0); the EWMA is memdecay's */
	ck_assert_int_eq(attn_page(h, 3, 0, 1, 0.5f, 1u << 0), 0);
	n = md__host_top(h, 3, t, 4);
	t0 = find_slot(t, n, 0);
	ck_assert_ptr_nonnull(t0);
	double ew = (1 - p.beta) * (double)0.5f;
	CLOSE(t0->decay_term, (bu + 3 * bu * exp(-lu * 3)) / 4);
	CLOSE(t0->attn_term, p.alpha * ew / 4);
	/* a sequence end forgets the turns: a new sequence starts at turn 1 */
	struct md_stats_rec r = rec(MD_REC_SEQ_END);
	r.seq = 0;
	ck_assert_int_eq(md__host_ingest(h, 3, &r), 0);
	ck_assert_int_eq(open_page(h, 3, 4, 2, 0, 0, 4, ra, 0), 0);
	ck_assert_int_eq(open_page(h, 3, 5, 2, 0, 4, 4, ru, 1), 0);
	ck_assert_int_eq(open_page(h, 3, 6, 2, 0, 8, 4, ru, 2), 0);
	ck_assert_int_eq(open_page(h, 3, 7, 2, 0, 12, 4, ru, 3), 0);
	n = md__host_top(h, 3, t, 4);
	ck_assert_uint_eq(n, 2);
	const struct md__top_entry *t4 = find_slot(t, n, 4), *t5 = find_slot(t, n, 5);
	ck_assert_ptr_nonnull(t4);
	ck_assert_ptr_nonnull(t5);
	CLOSE(t4->score, p.base[MD_REGION_ASSISTANT] * exp(-p.lambda[MD_REGION_ASSISTANT] * 2.0));
	CLOSE(t5->score, bu);
	md__host_free(h);
}
END_TEST

START_TEST(test_memdecay_norm_via_param)
{
	/* memdecay with memdecay.norm=relative uses the relative EWMA too */
	struct md__params p;
	md__params_defaults(&p);
	p.norm = MD_NORM_RELATIVE;
	struct md__host *h = md__host_new(&p);
	ck_assert_int_eq(md__host_engine_add(h, 1, 2, 8, 1, NULL), 0);
	unsigned ru[2] = {MD_REGION_USER, MD_REGION_USER};
	for (uint32_t s = 0; s < 4; s++)
		ck_assert_int_eq(open_page(h, 1, s, 0, 0, 2 * s, 2, ru, 0), 0);
	ck_assert_int_eq(attn_page(h, 1, 0, 0, 0.5f, 0), 0);
	struct md__top_entry t[4];
	size_t n = md__host_top(h, 1, t, 4);
	ck_assert_uint_eq(n, 2);
	const struct md__top_entry *e0 = find_slot(t, n, 0);
	ck_assert_ptr_nonnull(e0);
	CLOSE(e0->attn_term, p.alpha * (1 - p.beta) * 0.5 * 8 / 2);
	CLOSE(e0->decay_term, 0.7);
	md__host_free(h);
}
END_TEST

START_TEST(test_h2o_score)
{
	struct md__params p;
	md__params_defaults(&p);
	p.policy = MD_POLICY_H2O;
	struct md__host *h = md__host_new(&p);
	ck_assert_int_eq(md__host_engine_add(h, 1, 4, 16, 1, NULL), 0);
	unsigned ru[4] = {MD_REGION_USER, MD_REGION_SCRATCHPAD, MD_REGION_USER, MD_REGION_USER};
	for (uint32_t s = 0; s < 6; s++)
		ck_assert_int_eq(open_page(h, 1, s, 3, 0, 4 * s, 4, ru, 4 * s), 0);
	double cum[4] = {0, 0, 0, 0};
	unsigned seed = 7;
	for (int i = 0; i < 200; i++) {
		seed = seed * 1103515245u + 12345u;
		uint32_t s = (seed >> 16) % 4;
		float m = (float)((seed >> 8) % 100) / 37.0f;
		ck_assert_int_eq(attn_page(h, 1, s, 3, m, 0), 0);
		cum[s] += (double)m;
	}
	float mt[3] = {0.25f, 0.5f, 0.125f};
	ck_assert_int_eq(attn_tokens(h, 1, 2, 3, 1, 3, mt), 0);
	cum[2] += 0.875;
	struct md__top_entry t[8];
	size_t n = md__host_top(h, 1, t, 8);
	ck_assert_uint_eq(n, 4);
	for (uint32_t s = 0; s < 4; s++) {
		const struct md__top_entry *e = find_slot(t, n, s);
		ck_assert_ptr_nonnull(e);
		CLOSE(e->score, cum[s]);
	}
	for (size_t i = 1; i < n; i++)
		ck_assert(t[i - 1].score <= t[i].score);
	md__host_free(h);
}
END_TEST

START_TEST(test_recency_score_and_sinks)
{
	struct md__params p;
	md__params_defaults(&p);
	p.policy = MD_POLICY_RECENCY;
	p.sink_tokens = 6; /* pages at positions 0 and 4 hold sinks */
	struct md__host *h = md__host_new(&p);
	ck_assert_int_eq(md__host_engine_add(h, 1, 4, 16, 1, NULL), 0);
	unsigned ru[4] = {MD_REGION_USER, MD_REGION_USER, MD_REGION_USER, MD_REGION_USER};
	for (uint32_t s = 0; s < 7; s++)
		ck_assert_int_eq(open_page(h, 1, 6 - s, 0, 0, 4 * s, 4, ru, 4 * s), 0);
	struct md__top_entry t[8];
	size_t n = md__host_top(h, 1, t, 8);
	ck_assert_uint_eq(n, 3); /* 7 pages - 2 sinks - tail - protect_recent */
	for (size_t i = 0; i < n; i++) {
		CLOSE(t[i].score, (double)t[i].first_pos);
		ck_assert_uint_eq(t[i].first_pos, 8 + 4 * i);
	}
	md__host_free(h);
}
END_TEST

static size_t random_top(uint64_t seed, struct md__top_entry *t)
{
	struct md__params p;
	md__params_defaults(&p);
	p.policy = MD_POLICY_RANDOM;
	p.random_seed = seed;
	struct md__host *h = md__host_new(&p);
	md__host_engine_add(h, 1, 1, 64, 1, NULL);
	unsigned ru[1] = {MD_REGION_USER};
	for (uint32_t s = 0; s < 40; s++)
		open_page(h, 1, s, s * 3, 0, s, 1, ru, s);
	size_t n = md__host_top(h, 1, t, 64);
	md__host_free(h);
	return n;
}

START_TEST(test_random_score)
{
	struct md__top_entry a[64], b[64], c[64];
	size_t na = random_top(42, a), nb = random_top(42, b), nc = random_top(43, c);
	ck_assert_uint_eq(na, 38);
	ck_assert_uint_eq(nb, na);
	ck_assert_uint_eq(nc, na);
	int same_order = 1;
	double mean = 0;
	for (size_t i = 0; i < na; i++) {
		ck_assert(a[i].score >= 0.0 && a[i].score < 1.0);
		ck_assert_double_eq(a[i].score, b[i].score);
		ck_assert_uint_eq(a[i].slot, b[i].slot);
		if (a[i].slot != c[i].slot)
			same_order = 0;
		mean += a[i].score / (double)na;
	}
	ck_assert_msg(!same_order, "seed does not change the order");
	ck_assert(mean > 0.25 && mean < 0.75);
}
END_TEST

START_TEST(test_ties)
{
	/* equal scores: lower first_pos, then lower slot, then lower engine id */
	struct md__params p;
	md__params_defaults(&p);
	p.protect_recent = 0;
	struct md__host *h = md__host_new(&p);
	ck_assert_int_eq(md__host_engine_add(h, 9, 1, 16, 4, NULL), 0);
	ck_assert_int_eq(md__host_engine_add(h, 3, 1, 16, 4, NULL), 0);
	unsigned ru[1] = {MD_REGION_USER};
	for (uint32_t eng = 0; eng < 2; eng++) {
		uint32_t id = eng ? 3 : 9;
		for (uint32_t q = 0; q < 3; q++) {
			ck_assert_int_eq(open_page(h, id, 10 - q, 0, q, 5, 1, ru, 0), 0);
			ck_assert_int_eq(open_page(h, id, q, 0, q, 1, 1, ru, 0), 0);
			ck_assert_int_eq(open_page(h, id, 12 + q, 0, q, 9, 1, ru, 0), 0); /* tails */
		}
	}
	struct md__top_entry t[16];
	size_t n = md__host_top(h, UINT32_MAX, t, 16);
	ck_assert_uint_eq(n, 12);
	/* first_pos 1: slots 0,0,1,1,2,2 with engine 3 before 9 */
	for (size_t i = 0; i < 6; i++) {
		ck_assert_uint_eq(t[i].first_pos, 1);
		ck_assert_uint_eq(t[i].slot, i / 2);
		ck_assert_uint_eq(t[i].engine_id, i % 2 ? 9 : 3);
	}
	ck_assert_uint_eq(t[6].first_pos, 5);
	ck_assert_uint_eq(t[6].slot, 8);
	/* the decision follows the same order within an engine */
	struct md__engine_opts o;
	md__engine_opts_defaults(&o);
	o.budget_engine_pages = 7;
	ck_assert_int_eq(md__host_engine_set_opts(h, 9, &o), 0);
	struct md__decision d[4];
	ck_assert_uint_eq(md__host_decide(h, d, 4), 2);
	ck_assert_uint_eq(d[0].slot, 0);
	ck_assert_uint_eq(d[1].slot, 1);
	ck_assert_uint_eq(d[0].engine_id, 9);
	md__host_free(h);
}
END_TEST

START_TEST(test_param_view)
{
	struct md__params p;
	md__params_defaults(&p);
	p.budget_global_pages = 100;
	p.budget_engine_pages = 80;
	p.policy = MD_POLICY_MEMDECAY_NORM;
	struct md__host *h = md__host_new(&p);
	struct md__engine_opts o;
	md__engine_opts_defaults(&o);
	o.weight = 3.0;
	ck_assert_int_eq(md__host_engine_add(h, 1, 16, 64, 4, &o), 0);
	o.weight = 1.0;
	o.policy = MD_POLICY_H2O;
	ck_assert_int_eq(md__host_engine_add(h, 2, 16, 64, 4, &o), 0);
	struct md_param_block pb;
	pb.seq = 42;
	ck_assert_int_eq(md__host_engine_param_view(h, 1, &pb), 0);
	ck_assert_uint_eq(pb.seq, 42);
	ck_assert_uint_eq(pb.policy, MD_POLICY_MEMDECAY_NORM);
	ck_assert_uint_eq(pb.norm_mode, MD_NORM_RELATIVE);
	ck_assert_uint_eq(pb.budget_engine_pages, 75); /* share floor(100*3/4) < 80 */
	ck_assert_double_eq(pb.base[MD_REGION_SCRATCHPAD], 0.3);
	ck_assert_double_eq(pb.lambda[MD_REGION_SCRATCHPAD], 0.2);
	ck_assert_uint_eq(pb.pinned_mask, 1);
	ck_assert_double_eq(pb.tau, p.tau);
	ck_assert_int_eq(md__host_engine_param_view(h, 2, &pb), 0);
	ck_assert_uint_eq(pb.policy, MD_POLICY_H2O);
	ck_assert_uint_eq(pb.norm_mode, MD_NORM_RAW);
	ck_assert_uint_eq(pb.budget_engine_pages, 25);
	ck_assert_int_lt(md__host_engine_param_view(h, 5, &pb), 0);
	md__host_free(h);
}
END_TEST

START_TEST(test_eviction_stats)
{
	struct md__params p;
	md__params_defaults(&p);
	p.budget_engine_pages = 4;
	p.protect_recent = 0;
	struct md__host *h = md__host_new(&p);
	ck_assert_int_eq(md__host_engine_add(h, 1, 2, 16, 1, NULL), 0);
	unsigned rs[2] = {MD_REGION_SCRATCHPAD, MD_REGION_SCRATCHPAD};
	unsigned ru[2] = {MD_REGION_USER, MD_REGION_RETRIEVAL};
	for (uint32_t s = 0; s < 6; s++)
		ck_assert_int_eq(open_page(h, 1, s, 1, 0, 2 * s, 2, s < 2 ? rs : ru, 0), 0);
	ck_assert_int_eq(step(h, 1, 0, 20), 0);
	struct md__decision d[8];
	ck_assert_uint_eq(md__host_decide(h, d, 8), 2);
	/* scratchpad decays fastest */
	ck_assert_uint_eq(d[0].slot, 0);
	ck_assert_uint_eq(d[1].slot, 1);
	ck_assert_uint_eq(d[0].reason, MD_EVICT_ENGINE_BUDGET);
	struct md__engine_stats st;
	ck_assert_int_eq(md__host_engine_stats(h, 1, &st), 0);
	ck_assert_uint_eq(st.evictions, 2);
	ck_assert_uint_eq(st.evictions_by_region[MD_REGION_SCRATCHPAD], 2);
	ck_assert_uint_eq(st.evictions_by_reason[MD_EVICT_ENGINE_BUDGET], 2);
	ck_assert_uint_eq(st.pages_live, 4);
	ck_assert_uint_eq(st.pages_evicting, 2);
	ck_assert_uint_eq(st.tokens_live, 8);
	ck_assert_uint_eq(st.seqs_live, 1);
	ck_assert_uint_eq(st.records, 7);
	ck_assert_uint_eq(st.decisions, 1);
	ck_assert_uint_eq(md__host_decide(h, d, 8), 0);
	md__host_free(h);
}
END_TEST

static Suite *policy_suite(void)
{
	Suite *s = suite_create("policy");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_memdecay_score);
	tcase_add_test(tc, test_memdecay_norm_score);
	tcase_add_test(tc, test_memdecay_norm_via_param);
	tcase_add_test(tc, test_memdecay_turn_score);
	tcase_add_test(tc, test_h2o_score);
	tcase_add_test(tc, test_recency_score_and_sinks);
	tcase_add_test(tc, test_random_score);
	tcase_add_test(tc, test_ties);
	tcase_add_test(tc, test_param_view);
	tcase_add_test(tc, test_eviction_stats);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(policy_suite());
}
