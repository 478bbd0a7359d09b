/*
 * check_index.c — page state and the eviction index: decisions equal the
 * brute-force oracle on >= 10,000 random cases per policy (seeded; regions,
 * pinned, several sequences and engines, all three budget scopes, ties,
 * parameter changes between decisions, sequences with their own options),
 * pinned/protected pages never evicted,
 * bad records rejected with the right reason, budgets and the evicting state.
 * With the host tier (ABI 1.4, docs/tier.md): random tier events, estimates,
 * tier budgets, recall margins and per-pass caps, the host's drops and
 * restores equal to the oracle's too.
 */
#include <check.h>
#include "test_util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "host.h"
#include "oracle.h"
#include "policy.h"

/* ---- small deterministic rng ---- */
static uint64_t rng_state;
static uint64_t rnd(void)
{
	uint64_t x = (rng_state += 0x9e3779b97f4a7c15ULL);
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}
static uint32_t rn(uint32_t n) { return n ? (uint32_t)(rnd() % n) : 0; }

static struct md_stats_rec rec(uint16_t type)
{
	struct md_stats_rec r;
	memset(&r, 0, sizeof r);
	r.type = type;
	return r;
}

/* ---- the test's mirror of each engine ----
 * page states: 0 free, 1 live, 2 evicting, 3 tier, 4 restoring, 5 dropping */
#define MAXE 3
#define MAXSLOTS 48
#define MAXSEQ 4
struct mpage { int state; uint32_t gen, seq, n; uint64_t first_pos, labels; };
struct mengine {
	uint32_t id, P, cap, nseq;
	struct mpage pg[MAXSLOTS];
	uint64_t next_pos[MAXSEQ], clock[MAXSEQ];
};
struct world {
	struct md__host *h;
	struct md__params p;
	int policy;
	int ne;
	struct mengine e[MAXE];
	uint32_t nregions;
	int tier;             /* tier events, estimates and tier parameters */
	uint64_t restores, drops;
	struct md__oracle_recall recall; /* the oracle's recall outcomes */
};

static void random_params(struct world *w)
{
	struct md__params *p = &w->p;
	static const double lambdas[] = {0, 0, 0.01, 0.05, 0.2, 1.0};
	static const double bases[] = {0, 0.3, 0.5, 0.7, 1.0};
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++) {
		p->lambda[r] = lambdas[rn(6)];
		p->base[r] = bases[rn(5)];
	}
	p->pinned_mask = rn(2) ? 1u : 0u;
	if (rn(3) == 0)
		p->pinned_mask |= 1u << MD_REGION_PLAN;
	if (rn(4) == 0)
		p->pinned_mask |= 1u << rn(9);
	static const double alphas[] = {0, 0.5, 1, 3};
	p->alpha = alphas[rn(4)];
	static const double betas[] = {0, 0.5, 0.9};
	p->beta = betas[rn(3)];
	p->tau = rn(2) ? 0.1 : 1.0;
	p->norm = rn(2);
	p->policy = (uint32_t)w->policy;
	p->protect_recent = rn(3);
	p->sink_tokens = rn(9);
	static const double fr[] = {0, 0.25, 0.5, 1};
	p->h2o_recent_fraction = fr[rn(4)];
	p->random_seed = rnd();
	static const double tls[] = {0, 0.5, 1, 4};
	p->turn_lambda_scale = tls[rn(4)];
	p->turn_recent_fraction = fr[rn(4)];
	static const double lws[] = {1, 1, 0.75, 0.5};
	p->low_watermark = lws[rn(4)];
	p->budget_sequence_tokens = rn(2) ? 0 : 4 + rn(40);
	p->budget_engine_pages = rn(2) ? 0 : 2 + rn(20);
	p->budget_global_pages = rn(3) ? 0 : 3 + rn(40);
	if (rn(2))
		snprintf(p->region_name[8], MD__REGION_NAME_MAX, "code");
	else
		p->region_name[8][0] = '\0';
	w->nregions = p->region_name[8][0] ? 9 : 8;
}

static void world_new(struct world *w, int policy)
{
	memset(w, 0, sizeof *w);
	w->policy = policy;
	md__params_defaults(&w->p);
	random_params(w);
	w->h = md__host_new(&w->p);
	w->ne = 1 + (int)rn(MAXE);
	static const uint32_t Ps[] = {1, 2, 4, 16};
	for (int i = 0; i < w->ne; i++) {
		struct mengine *e = &w->e[i];
		e->id = 100 + (uint32_t)i * 7;
		e->P = Ps[rn(4)];
		e->cap = 8 + rn(MAXSLOTS - 7);
		e->nseq = 1 + rn(MAXSEQ);
		struct md__engine_opts o;
		md__engine_opts_defaults(&o);
		o.weight = 1.0 + rn(3);
		if (rn(4) == 0)
			o.budget_engine_pages = rn(12);
		if (rn(4) == 0)
			o.budget_sequence_tokens = rn(30);
		ck_assert_int_eq(md__host_engine_add(w->h, e->id, e->P, e->cap, e->nseq, &o), 0);
	}
}

static int mirror_pinned(const struct world *w, const struct mpage *m)
{
	for (unsigned k = 0; k < m->n; k++)
		if ((w->p.pinned_mask >> md_label_get(m->labels, k)) & 1u)
			return 1;
	return 0;
}

/* rank of a live page among its sequence's live pages, newest = 0 */
static uint32_t mirror_rank(const struct mengine *e, const struct mpage *m)
{
	uint32_t r = 0;
	for (uint32_t s = 0; s < e->cap; s++)
		if ((e->pg[s].state == 1 || e->pg[s].state == 4) && e->pg[s].seq == m->seq &&
		    e->pg[s].first_pos > m->first_pos)
			r++;
	return r;
}

static uint64_t labels_random(const struct world *w, uint32_t n)
{
	uint64_t l = 0;
	unsigned base = rn(w->nregions);
	for (unsigned k = 0; k < n; k++)
		l = md_label_set(l, k, rn(3) ? base : rn(w->nregions));
	return l;
}

static void tier_params(struct world *w)
{
	static const double margins[] = {0, 0.05, 0.5, 2};
	static const uint32_t per[] = {0, 1, 2, 4, 4096};
	w->p.tier_pages = rn(4) ? 0 : rn(6);
	w->p.recall_margin = margins[rn(4)];
	w->p.recall_max_per_pass = per[rn(5)];
}

static void world_new_tier(struct world *w, int policy)
{
	world_new(w, policy);
	w->tier = 1;
	tier_params(w);
	if (rn(2)) /* evictions feed the tier */
		w->p.budget_engine_pages = 2 + rn(12);
	md__host_set_params(w->h, &w->p);
	for (int i = 0; i < w->ne; i++)
		if (rn(6))
			ck_assert_int_eq(md__host_engine_set_tier(w->h, w->e[i].id,
								  rn(w->e[i].cap) + 1, 4096), 0);
}

/* the engine's side of the tier: evictions kept, restores applied or
 * refused, drops done, and records the host must refuse */
static void op_tier(struct world *w)
{
	struct mengine *e = &w->e[rn((uint32_t)w->ne)];
	uint32_t s = rn(e->cap);
	/* the pages the tier is about: evicting or past it, most of the time */
	for (uint32_t i = 0, s0 = s; i < e->cap && rn(8); i++) {
		s = (s0 + i) % e->cap;
		if (e->pg[s].state >= 2)
			break;
	}
	struct mpage *m = &e->pg[s];
	struct md_stats_rec r = rec(MD_REC_PAGE_TIER);
	r.slot = s;
	r.gen = m->gen;
	switch (m->state) {
	case 0:
		return;
	case 1:
		r.u.tier.event = 1 + rn(3);
		ck_assert_int_eq(md__host_ingest(w->h, e->id, &r), -MD__REJ_STATE);
		return;
	case 2:
		r.u.tier.event = rn(8) ? MD_TIER_IN : MD_TIER_RESTORED;
		ck_assert_int_eq(md__host_ingest(w->h, e->id, &r),
				 r.u.tier.event == MD_TIER_IN ? 0 : -MD__REJ_STATE);
		if (r.u.tier.event == MD_TIER_IN)
			m->state = 3;
		return;
	case 3:
		if (rn(4)) { /* the engine's estimate: the recall signal */
			r = rec(MD_REC_ATTN_PAGE);
			r.slot = s;
			r.gen = m->gen;
			r.flags = MD_REC_F_ESTIMATE;
			r.u.attn_page.mass = (float)rn(9) * 0.5f;
			r.u.attn_page.refresh = (uint16_t)(rn(2) ? 0 : rnd());
			ck_assert_int_eq(md__host_ingest(w->h, e->id, &r), 0);
			return;
		}
		/* unasked: a resync would do it */
		r.u.tier.event = rn(2) ? MD_TIER_RESTORED : rn(2) ? MD_TIER_REFUSED : MD_TIER_IN;
		ck_assert_int_eq(md__host_ingest(w->h, e->id, &r),
				 r.u.tier.event == MD_TIER_IN ? -MD__REJ_STATE : 0);
		if (r.u.tier.event == MD_TIER_RESTORED)
			m->state = 1;
		return;
	case 4:
		r.u.tier.event = rn(3) ? MD_TIER_RESTORED : MD_TIER_REFUSED;
		if (rn(16) == 0)
			r.u.tier.event = 9; /* unknown */
		ck_assert_int_eq(md__host_ingest(w->h, e->id, &r),
				 r.u.tier.event == 9 ? -MD__REJ_TYPE : 0);
		if (r.u.tier.event != 9)
			m->state = r.u.tier.event == MD_TIER_RESTORED ? 1 : 3;
		return;
	case 5:
		r = rec(MD_REC_PAGE_FREE);
		r.slot = s;
		r.gen = m->gen;
		r.u.free.reason = MD_FREE_DROPPED;
		ck_assert_int_eq(md__host_ingest(w->h, e->id, &r), 0);
		m->state = 0;
		return;
	}
}

static void op_random(struct world *w)
{
	struct mengine *e = &w->e[rn((uint32_t)w->ne)];
	uint32_t q = rn(e->nseq);
	uint32_t s = rn(e->cap);
	struct mpage *m = &e->pg[s];
	struct md_stats_rec r;
	int rc;
	switch (rn(w->tier ? 15 : 12)) {
	case 12:
	case 13:
	case 14:
		op_tier(w);
		return;
	case 0:
	case 1:
	case 2: { /* open */
		if (m->state != 0)
			return;
		r = rec(MD_REC_PAGE_OPEN);
		r.slot = s;
		r.gen = m->gen + 1;
		r.seq = q;
		r.clock = e->clock[q] + rn(3);
		r.u.page.first_pos = e->next_pos[q] + (rn(5) == 0 ? e->P : 0);
		r.u.page.n_tokens = (uint16_t)(1 + rn(e->P));
		r.u.page.labels = labels_random(w, r.u.page.n_tokens);
		rc = md__host_ingest(w->h, e->id, &r);
		ck_assert_int_eq(rc, 0);
		*m = (struct mpage){1, r.gen, q, r.u.page.n_tokens, r.u.page.first_pos, r.u.page.labels};
		e->next_pos[q] = r.u.page.first_pos + e->P;
		if (r.clock > e->clock[q])
			e->clock[q] = r.clock;
		return;
	}
	case 3: /* grow */
		if (m->state != 1 || m->n >= e->P)
			return;
		r = rec(MD_REC_PAGE_GROW);
		r.slot = s;
		r.gen = m->gen;
		r.clock = e->clock[m->seq] + rn(2);
		r.u.page.n_tokens = (uint16_t)(m->n + 1 + rn(e->P - m->n));
		r.u.page.labels = m->labels | (labels_random(w, 16) & ~((1ULL << (4 * m->n)) - 1));
		ck_assert_int_eq(md__host_ingest(w->h, e->id, &r), 0);
		m->labels = r.u.page.labels & (r.u.page.n_tokens >= 16 ? ~0ULL
					       : ((1ULL << (4 * r.u.page.n_tokens)) - 1));
		m->n = r.u.page.n_tokens;
		if (r.clock > e->clock[m->seq])
			e->clock[m->seq] = r.clock;
		return;
	case 4: /* step */
		r = rec(MD_REC_STEP);
		r.seq = q;
		r.clock = e->clock[q] + rn(6);
		ck_assert_int_eq(md__host_ingest(w->h, e->id, &r), 0);
		e->clock[q] = r.clock;
		return;
	case 5:
	case 6: { /* attention to a page, or an estimate */
		if (m->state == 0)
			return;
		static const float masses[] = {0, 0.25f, 0.5f, 1.0f, 2.0f};
		r = rec(MD_REC_ATTN_PAGE);
		r.slot = s;
		r.gen = m->gen;
		r.u.attn_page.mass = masses[rn(5)];
		r.u.attn_page.refresh = (uint16_t)(rn(2) ? 0 : rnd());
		int want = 0;
		if (w->tier && (m->state == 3 || m->state == 5 || rn(6) == 0)) {
			r.flags = MD_REC_F_ESTIMATE;
			/* a tier, restoring or resident page takes one (a
			 * resident page's sets only its recent attention) */
			want = m->state == 1 || m->state == 3 || m->state == 4 ? 0 : -MD__REJ_STATE;
		} else if (m->state == 3 || m->state == 5) {
			want = -MD__REJ_STATE;
		}
		ck_assert_int_eq(md__host_ingest(w->h, e->id, &r), want);
		return;
	}
	case 7: { /* attention per token */
		if (m->state == 0)
			return;
		r = rec(MD_REC_ATTN_TOKENS);
		r.slot = s;
		r.gen = m->gen;
		r.token0 = (uint8_t)rn(m->n);
		uint32_t maxc = m->n - r.token0;
		r.count = (uint8_t)(1 + rn(maxc < 8 ? maxc : 8));
		for (unsigned i = 0; i < r.count; i++)
			r.u.attn_tokens.mass[i] = (float)rn(5) * 0.0625f;
		ck_assert_int_eq(md__host_ingest(w->h, e->id, &r),
				 m->state == 3 || m->state == 5 ? -MD__REJ_STATE : 0);
		return;
	}
	case 8: { /* relabel a span */
		r = rec(MD_REC_RELABEL);
		r.seq = q;
		r.u.relabel.pos0 = rn((uint32_t)e->next_pos[q] + 1);
		r.u.relabel.pos1 = r.u.relabel.pos0 + 1 + rn(3 * e->P);
		r.u.relabel.region = rn(w->nregions);
		rc = md__host_ingest(w->h, e->id, &r);
		ck_assert(rc == 0 || rc == -MD__REJ_SPAN);
		int hit = 0;
		for (uint32_t t = 0; t < e->cap; t++) {
			struct mpage *x = &e->pg[t];
			if ((x->state != 1 && x->state != 4) || x->seq != q)
				continue;
			for (unsigned k = 0; k < x->n; k++) {
				uint64_t pos = x->first_pos + k;
				if (pos >= r.u.relabel.pos0 && pos < r.u.relabel.pos1) {
					x->labels = md_label_set(x->labels, k, r.u.relabel.region);
					hit = 1;
				}
			}
		}
		ck_assert_int_eq(rc, hit ? 0 : -MD__REJ_SPAN);
		return;
	}
	case 9: /* engine applies an eviction, or frees a page on its own */
		if (m->state == 0 || (m->state == 1 && rn(4)))
			return;
		r = rec(MD_REC_PAGE_FREE);
		r.slot = s;
		r.gen = m->gen;
		if (w->tier && rn(3) == 0) {
			/* DROPPED: only a page of the tier */
			r.u.free.reason = MD_FREE_DROPPED;
			int off = m->state == 3 || m->state == 5;
			ck_assert_int_eq(md__host_ingest(w->h, e->id, &r), off ? 0 : -MD__REJ_STATE);
			if (off)
				m->state = 0;
			return;
		}
		ck_assert_int_eq(md__host_ingest(w->h, e->id, &r), 0);
		m->state = 0;
		return;
	case 10: /* sequence end (rare) */
		if (rn(6))
			return;
		r = rec(MD_REC_SEQ_END);
		r.seq = q;
		ck_assert_int_eq(md__host_ingest(w->h, e->id, &r), 0);
		for (uint32_t t = 0; t < e->cap; t++)
			if (e->pg[t].state && e->pg[t].seq == q)
				e->pg[t].state = 0;
		e->clock[q] = 0;
		return;
	case 11: /* parameter change between decisions */
		if (rn(8))
			return;
		if (rn(2)) {
			random_params(w);
			/* keep labels known: never drop the extra name once used */
			snprintf(w->p.region_name[8], MD__REGION_NAME_MAX, "code");
			w->nregions = 9;
			if (w->tier && rn(2))
				tier_params(w);
			md__host_set_params(w->h, &w->p);
		} else {
			struct md__engine_opts o;
			md__engine_opts_defaults(&o);
			o.budget_engine_pages = rn(2) ? -1 : (int64_t)rn(15);
			o.weight = 1.0 + rn(4);
			ck_assert_int_eq(md__host_engine_set_opts(w->h, e->id, &o), 0);
		}
		return;
	}
}

/* one decision compared with the oracle; returns decisions made */
static size_t check_decision(struct world *w)
{
	struct md__decision want[256], got[256];
	size_t cap = rn(3) ? 256 : 1 + rn(4);
	size_t nw = md__oracle_decide_recall(w->h, want, cap, &w->recall);
	size_t ng = md__host_decide(w->h, got, cap);
	ck_assert_uint_eq(ng, nw);
	for (size_t i = 0; i < ng; i++) {
		ck_assert_msg(memcmp(&want[i], &got[i], sizeof got[i]) == 0,
			      "decision %zu: oracle (e%u s%u slot %u g%u r%u t%u) index (e%u s%u slot %u g%u r%u t%u)",
			      i, want[i].engine_id, want[i].seq, want[i].slot, want[i].gen, want[i].reason,
			      want[i].type, got[i].engine_id, got[i].seq, got[i].slot, got[i].gen,
			      got[i].reason, got[i].type);
	}
	for (size_t i = 0; i < ng; i++) {
		struct mengine *e = NULL;
		for (int j = 0; j < w->ne; j++)
			if (w->e[j].id == got[i].engine_id)
				e = &w->e[j];
		ck_assert_ptr_nonnull(e);
		struct mpage *m = &e->pg[got[i].slot];
		ck_assert_uint_eq(m->gen, got[i].gen);
		if (got[i].type != MD_CMD_EVICT) { /* drops and restores: tier pages */
			ck_assert_int_eq(m->state, 3);
			ck_assert_uint_eq(got[i].reason, got[i].type == MD_CMD_DROP ? MD_DROP_TIER_BUDGET
										 : MD_RESTORE_RECALL);
			continue;
		}
		ck_assert_int_eq(m->state, 1);
		ck_assert_msg(!mirror_pinned(w, m), "pinned page evicted");
		ck_assert_msg(mirror_rank(e, m) >= 1 + w->p.protect_recent, "protected page evicted");
	}
	for (size_t i = 0; i < ng; i++) /* after the checks: ranks use pre-decision state */
		for (int j = 0; j < w->ne; j++)
			if (w->e[j].id == got[i].engine_id) {
				int to = got[i].type == MD_CMD_DROP ? 5 : got[i].type == MD_CMD_RESTORE ? 4 : 2;
				w->e[j].pg[got[i].slot].state = to;
				w->drops += to == 5;
				w->restores += to == 4;
			}
	for (int j = 0; j < w->ne; j++) {
		struct md__engine_stats st;
		ck_assert_int_eq(md__host_engine_stats(w->h, w->e[j].id, &st), 0);
		uint64_t live = 0, ev = 0, tier = 0;
		for (uint32_t s = 0; s < w->e[j].cap; s++) {
			live += w->e[j].pg[s].state == 1 || w->e[j].pg[s].state == 4;
			ev += w->e[j].pg[s].state == 2;
			tier += w->e[j].pg[s].state == 3;
		}
		ck_assert_uint_eq(st.pages_live, live);
		ck_assert_uint_eq(st.pages_evicting, ev);
		ck_assert_uint_eq(st.tier_pages, tier);
		/* a pass that was not cut by cap leaves the tier within its budget */
		if (ng < cap)
			ck_assert_uint_le(st.tier_pages, st.tier_budget);
	}
	return ng;
}

static void fuzz_policy(int policy, uint64_t seed)
{
	rng_state = seed;
	unsigned cases = 0;
	uint64_t evictions = 0;
	while (cases < 10000) {
		struct world w;
		world_new(&w, policy);
		for (int it = 0; it < 400 && cases < 10000; it++) {
			op_random(&w);
			if (rn(5) == 0) {
				evictions += check_decision(&w);
				cases++;
			}
		}
		md__host_free(w.h);
	}
	/* the cases must actually evict */
	ck_assert_msg(evictions > 2000, "only %llu evictions", (unsigned long long)evictions);
}

/* The same with the host tier: its pages drift in from evictions, estimates
 * make candidates, budgets and caps move, half the worlds have sequences of
 * their own policy and budget, and every pass (evictions, drops, restores)
 * equals the oracle's. */
static int seq_opts(struct md__host *h, uint32_t engine, uint32_t seq, uint32_t policy,
		    uint64_t budget);

static void fuzz_tier(int policy, uint64_t seed, unsigned n_cases)
{
	rng_state = seed;
	unsigned cases = 0;
	uint64_t restores = 0, drops = 0, swapped = 0, refused = 0;
	while (cases < n_cases) {
		struct world w;
		world_new_tier(&w, policy);
		int own = rn(2); /* sequences with their own policy and budget */
		for (int it = 0; it < 400 && cases < n_cases; it++) {
			if (own && rn(10) == 0) {
				struct mengine *e = &w.e[rn((uint32_t)w.ne)];
				uint32_t pol = rn(3) == 0 ? MD_SEQ_ENGINE_U32 : rn(MD_POLICY_COUNT);
				uint64_t b = rn(3) == 0 ? MD_SEQ_ENGINE_U64 : rn(4) == 0 ? 0 : 4 + rn(40);
				ck_assert_int_eq(seq_opts(w.h, e->id, rn(e->nseq), pol, b), 0);
			} else {
				op_random(&w);
			}
			if (rn(5) == 0) {
				check_decision(&w);
				cases++;
			}
		}
		restores += w.restores;
		drops += w.drops;
		swapped += w.recall.swapped;
		refused += w.recall.refused;
		md__host_free(w.h);
	}
	if (getenv("TIER_DEBUG"))
		fprintf(stderr, "policy %d: %u cases, %llu restores (%llu against a victim), "
			"%llu refused by the margin, %llu drops\n", policy, cases,
			(unsigned long long)restores, (unsigned long long)swapped,
			(unsigned long long)refused, (unsigned long long)drops);
	/* the cases must actually restore and drop, and a candidate with a
	 * victim must both win (an evict and a restore) and lose by the margin */
	ck_assert_msg(restores > n_cases / 100 && drops > n_cases / 100,
		      "only %llu restores, %llu drops", (unsigned long long)restores,
		      (unsigned long long)drops);
	ck_assert_msg(swapped > n_cases / 400 && refused > n_cases / 2000,
		      "only %llu restores against a victim, %llu refused by the margin",
		      (unsigned long long)swapped, (unsigned long long)refused);
}

START_TEST(test_tier_oracle_policy)
{
	fuzz_tier(_i, 1000 + (uint64_t)_i, 20000);
}
END_TEST

/* many sequences and pages: the branch and bound across heaps */
static void large_case(int policy)
{
	rng_state = 99 + (uint64_t)policy;
	struct md__params p;
	md__params_defaults(&p);
	p.policy = (uint32_t)policy;
	struct md__host *h = md__host_new(&p);
	const uint32_t cap = 20000, nseq = 64, P = 16;
	ck_assert_int_eq(md__host_engine_add(h, 1, P, cap, nseq, NULL), 0);
	uint64_t pos[64] = {0};
	for (uint32_t s = 0; s < cap; s++) {
		struct md_stats_rec r = rec(MD_REC_PAGE_OPEN);
		r.slot = s;
		r.seq = rn(nseq);
		r.clock = pos[r.seq];
		r.u.page.first_pos = pos[r.seq];
		r.u.page.n_tokens = (uint16_t)P;
		unsigned reg = 1 + rn(7);
		for (unsigned k = 0; k < P; k++)
			r.u.page.labels = md_label_set(r.u.page.labels, k, reg);
		pos[r.seq] += P;
		ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	}
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 20000; i++) {
			struct md_stats_rec r = rec(MD_REC_ATTN_PAGE);
			r.slot = rn(cap);
			r.u.attn_page.mass = (float)rn(1000) / 500.0f;
			r.u.attn_page.refresh = (uint16_t)(rn(8) == 0 ? rnd() : 0);
			int rc = md__host_ingest(h, 1, &r);
			ck_assert(rc == 0 || rc == -MD__REJ_STATE); /* freed by an earlier round */
		}
		for (uint32_t q = 0; q < nseq; q++) {
			struct md_stats_rec r = rec(MD_REC_STEP);
			r.seq = q;
			r.clock = pos[q] + (uint64_t)round * 10;
			ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
		}
		struct md__params np = p;
		np.budget_engine_pages = cap - 50 * (uint64_t)(round + 1);
		md__host_set_params(h, &np);
		struct md__decision want[64], got[64];
		size_t nw = md__oracle_decide(h, want, 64);
		size_t ng = md__host_decide(h, got, 64);
		ck_assert_uint_eq(nw, 50);
		ck_assert_uint_eq(ng, nw);
		ck_assert_int_eq(memcmp(want, got, ng * sizeof got[0]), 0);
		for (size_t i = 0; i < ng; i++) {
			struct md_stats_rec r = rec(MD_REC_PAGE_FREE);
			r.slot = got[i].slot;
			r.gen = got[i].gen;
			ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
		}
	}
	md__host_free(h);
}

/* Every row of the policy table, one loop iteration each (_i = the policy
 * id, seed 1 + id): 10,000 random cases and the large case, every decision
 * equal to the oracle's.  A new row is covered with no edit here.  The ids
 * past the ABI's (test-lifo in test builds, policy.h) run as their own tcase,
 * so that check_index_test_policy runs only them. */
START_TEST(test_oracle_policy)
{
	fuzz_policy(_i, 1 + (uint64_t)_i);
	large_case(_i);
}
END_TEST

/* ---- deterministic behaviour ---- */

static struct md__host *small_host(struct md__params *p, uint32_t P, uint32_t cap, uint32_t seqs)
{
	struct md__host *h = md__host_new(p);
	ck_assert_int_eq(md__host_engine_add(h, 1, P, cap, seqs, NULL), 0);
	return h;
}

static int open_n(struct md__host *h, uint32_t slot, uint32_t gen, uint32_t seq, uint64_t fp,
		  uint32_t n, unsigned region, uint64_t clock)
{
	struct md_stats_rec r = rec(MD_REC_PAGE_OPEN);
	r.slot = slot;
	r.gen = gen;
	r.seq = seq;
	r.clock = clock;
	r.u.page.first_pos = fp;
	r.u.page.n_tokens = (uint16_t)n;
	for (unsigned k = 0; k < n; k++)
		r.u.page.labels = md_label_set(r.u.page.labels, k, region);
	return md__host_ingest(h, 1, &r);
}

START_TEST(test_reject_bad_records)
{
	struct md__params p;
	md__params_defaults(&p);
	struct md__host *h = small_host(&p, 4, 8, 2);
	ck_assert_int_eq(open_n(h, 0, 5, 0, 0, 4, MD_REGION_USER, 10), 0);
	ck_assert_int_eq(open_n(h, 0, 6, 0, 8, 4, MD_REGION_USER, 10), -MD__REJ_STATE);
	ck_assert_int_eq(open_n(h, 8, 1, 0, 8, 4, MD_REGION_USER, 10), -MD__REJ_SLOT);
	ck_assert_int_eq(open_n(h, 1, 1, 2, 8, 4, MD_REGION_USER, 10), -MD__REJ_SEQ);
	ck_assert_int_eq(open_n(h, 1, 1, 0, 8, 0, MD_REGION_USER, 10), -MD__REJ_TOKENS);
	ck_assert_int_eq(open_n(h, 1, 1, 0, 8, 5, MD_REGION_USER, 10), -MD__REJ_TOKENS);
	ck_assert_int_eq(open_n(h, 1, 1, 0, 8, 4, 9, 10), -MD__REJ_REGION);
	ck_assert_int_eq(open_n(h, 1, 1, 0, 2, 4, MD_REGION_USER, 10), -MD__REJ_POS);
	ck_assert_int_eq(open_n(h, 1, 1, 0, 4, 4, MD_REGION_USER, 10), 0);

	struct md_stats_rec r = rec(MD_REC_ATTN_PAGE);
	r.slot = 0;
	r.gen = 5;
	const float bad[] = {NAN, INFINITY, -INFINITY, -0.5f, 1e9f};
	for (int i = 0; i < 5; i++) {
		r.u.attn_page.mass = bad[i];
		ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_MASS);
	}
	r.u.attn_page.mass = 0.5f;
	r.gen = 4;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_GEN);
	r.gen = 5;
	r.slot = 100;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_SLOT);
	r.slot = 3;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_STATE);

	r = rec(MD_REC_ATTN_TOKENS);
	r.slot = 0;
	r.gen = 5;
	r.token0 = 2;
	r.count = 3; /* 2 + 3 > 4 tokens */
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_TOKENS);
	r.count = 0;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_TOKENS);
	r.count = 2;
	r.u.attn_tokens.mass[1] = NAN;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_MASS);

	r = rec(MD_REC_STEP);
	r.seq = 0;
	r.clock = 20;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	r.clock = 19;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_CLOCK);
	r.seq = 7;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_SEQ);

	r = rec(MD_REC_PAGE_GROW);
	r.slot = 1;
	r.gen = 1;
	r.u.page.n_tokens = 4; /* not an increase */
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_TOKENS);

	r = rec(MD_REC_RELABEL);
	r.seq = 0;
	r.u.relabel.pos0 = 5;
	r.u.relabel.pos1 = 5;
	r.u.relabel.region = MD_REGION_PLAN;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_SPAN);
	r.u.relabel.pos0 = 100;
	r.u.relabel.pos1 = 200;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_SPAN);
	r.u.relabel.pos0 = 0;
	r.u.relabel.region = 12;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_REGION);

	r = rec(MD_REC_PAGE_FREE);
	r.slot = 0;
	r.gen = 9;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_GEN);
	r = rec(77);
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_TYPE);
	ck_assert_int_lt(md__host_ingest(h, 999, &r), 0); /* unknown engine */

	struct md__engine_stats st;
	ck_assert_int_eq(md__host_engine_stats(h, 1, &st), 0);
	ck_assert_uint_eq(st.rejected[MD__REJ_MASS], 6);
	ck_assert_uint_eq(st.rejected[MD__REJ_GEN], 2);
	ck_assert_uint_eq(st.rejected[MD__REJ_CLOCK], 1);
	ck_assert_uint_eq(st.rejected[MD__REJ_TOKENS], 5);
	ck_assert_uint_eq(st.rejected[MD__REJ_SPAN], 2);
	ck_assert_uint_eq(st.pages_live, 2);
	ck_assert_uint_eq(st.tokens_live, 8);
	ck_assert_str_eq(md__reject_name(-MD__REJ_GEN), "generation");
	md__host_free(h);
}
END_TEST

START_TEST(test_never_pinned_or_protected)
{
	struct md__params p;
	md__params_defaults(&p);
	p.protect_recent = 2;
	p.budget_engine_pages = 1; /* far below what can be evicted */
	md__params_set(&p, "memdecay.region.plan.pinned", "true", NULL, 0);
	struct md__host *h = small_host(&p, 2, 16, 1);
	/* 0: system, 1: plan, 2,3: scratchpad, 4..6: newest (tail + 2) */
	unsigned regions[7] = {MD_REGION_SYSTEM, MD_REGION_PLAN, MD_REGION_SCRATCHPAD,
			       MD_REGION_SCRATCHPAD, MD_REGION_USER, MD_REGION_USER, MD_REGION_USER};
	for (uint32_t s = 0; s < 7; s++)
		ck_assert_int_eq(open_n(h, s, 0, 0, 2 * s, 2, regions[s], 0), 0);
	/* a single pinned token pins the whole page */
	struct md_stats_rec r = rec(MD_REC_RELABEL);
	r.seq = 0;
	r.u.relabel.pos0 = 5;
	r.u.relabel.pos1 = 6;
	r.u.relabel.region = MD_REGION_SYSTEM;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	struct md__decision d[16];
	size_t n = md__host_decide(h, d, 16);
	ck_assert_uint_eq(n, 1); /* only slot 3 is evictable; then stop, do not loop */
	ck_assert_uint_eq(d[0].slot, 3);
	ck_assert_uint_eq(md__host_decide(h, d, 16), 0);
	md__host_free(h);
}
END_TEST

START_TEST(test_budgets_and_watermark)
{
	struct md__params p;
	md__params_defaults(&p);
	p.protect_recent = 0;
	p.budget_sequence_tokens = 20;
	p.low_watermark = 0.5;
	struct md__host *h = small_host(&p, 4, 64, 2);
	for (uint32_t s = 0; s < 6; s++) /* seq 0: 24 tokens > 20 */
		ck_assert_int_eq(open_n(h, s, 0, 0, 4 * s, 4, MD_REGION_USER, 0), 0);
	for (uint32_t s = 0; s < 5; s++) /* seq 1: 20 tokens, at budget */
		ck_assert_int_eq(open_n(h, 10 + s, 0, 1, 4 * s, 4, MD_REGION_USER, 0), 0);
	struct md__decision d[16];
	size_t n = md__host_decide(h, d, 16);
	ck_assert_uint_eq(n, 4); /* down to floor(0.5*20) = 10 tokens: 24 -> 8 */
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(d[i].seq, 0);
		ck_assert_uint_eq(d[i].slot, i); /* equal scores: oldest first */
		ck_assert_uint_eq(d[i].reason, MD_EVICT_SEQUENCE_BUDGET);
	}
	/* global budget split by weighted max-min over what engines hold: engine 1
	 * (weight 2) holds 11 pages (7 live, 4 being evicted), under its weighted
	 * part floor(30 * 2/3) = 20; engine 2 gets the other 19 */
	p.budget_sequence_tokens = 0;
	p.low_watermark = 1.0;
	p.budget_global_pages = 30;
	md__host_set_params(h, &p);
	struct md__engine_opts o;
	md__engine_opts_defaults(&o);
	o.weight = 2.0;
	ck_assert_int_eq(md__host_engine_set_opts(h, 1, &o), 0);
	o.weight = 1.0;
	ck_assert_int_eq(md__host_engine_add(h, 2, 1, 32, 1, &o), 0);
	struct md_stats_rec r = rec(MD_REC_PAGE_OPEN);
	for (uint32_t s = 0; s < 28; s++) {
		r.slot = s;
		r.u.page.first_pos = s;
		r.u.page.n_tokens = 1;
		r.u.page.labels = MD_REGION_USER;
		ck_assert_int_eq(md__host_ingest(h, 2, &r), 0);
	}
	n = md__host_decide(h, d, 16);
	ck_assert_uint_eq(n, 9);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(d[i].engine_id, 2);
		ck_assert_uint_eq(d[i].reason, MD_EVICT_GLOBAL_BUDGET);
	}
	struct md__engine_stats st;
	md__host_engine_stats(h, 2, &st);
	ck_assert_uint_eq(st.budget_engine_pages, 19);
	md__host_engine_stats(h, 1, &st);
	ck_assert_uint_eq(st.budget_engine_pages, 11);
	md__host_free(h);
}
END_TEST

/* memdecayctl sessions: the live sequences with what they hold, what was
 * evicted from their span, and how long since each last stepped. */
START_TEST(test_seqs_listing)
{
	struct md__params p;
	md__params_defaults(&p);
	p.protect_recent = 0;
	struct md__host *h = small_host(&p, 4, 16, 4);
	md__host_set_now(h, 1000);
	for (uint32_t i = 0; i < 4; i++) /* seq 2: 16 tokens at positions 0..15 */
		ck_assert_int_eq(open_n(h, i, 1, 2, 4 * i, 4, MD_REGION_USER, 1), 0);
	md__host_set_now(h, 5000);
	ck_assert_int_eq(open_n(h, 8, 1, 0, 0, 3, MD_REGION_TOOL_OUT, 1), 0); /* seq 0 */
	struct md_stats_rec r = rec(MD_REC_PAGE_FREE); /* positions 4..7 of seq 2 go */
	r.slot = 1;
	r.gen = 1;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	md__host_set_now(h, 7000);
	r = rec(MD_REC_STEP);
	r.seq = 2;
	r.clock = 9;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	struct md__seq_info q[4];
	ck_assert_uint_eq(md__host_seqs(h, UINT32_MAX, 10000, q, 4), 2);
	ck_assert_uint_eq(q[0].seq, 0);
	ck_assert_uint_eq(q[0].tokens_live, 3);
	ck_assert_uint_eq(q[0].span_tokens, 3);
	ck_assert_uint_eq(q[0].idle_ns, 5000);
	ck_assert_uint_eq(q[1].seq, 2);
	ck_assert_uint_eq(q[1].pages, 3);
	ck_assert_uint_eq(q[1].tokens_live, 12);
	ck_assert_uint_eq(q[1].span_tokens, 16);
	ck_assert_uint_eq(q[1].clock, 9);
	ck_assert_uint_eq(q[1].idle_ns, 3000);
	/* a count past cap, an unknown engine, and an ended sequence */
	ck_assert_uint_eq(md__host_seqs(h, UINT32_MAX, 10000, q, 1), 2);
	ck_assert_uint_eq(q[0].seq, 0);
	ck_assert_uint_eq(md__host_seqs(h, 7, 10000, q, 4), 0);
	r = rec(MD_REC_SEQ_END);
	r.seq = 2;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	ck_assert_uint_eq(md__host_seqs(h, 1, 10000, q, 4), 1);
	md__host_free(h);
}
END_TEST

START_TEST(test_evicting_state_and_cap)
{
	struct md__params p;
	md__params_defaults(&p);
	p.protect_recent = 0;
	p.budget_engine_pages = 2;
	struct md__host *h = small_host(&p, 1, 16, 1);
	for (uint32_t s = 0; s < 8; s++)
		ck_assert_int_eq(open_n(h, s, 3, 0, s, 1, MD_REGION_USER, 0), 0);
	struct md__decision d[8];
	ck_assert_uint_eq(md__host_decide(h, d, 4), 4); /* cap reached: call again */
	ck_assert_uint_eq(md__host_decide(h, d + 4, 4), 2);
	for (uint32_t i = 0; i < 6; i++)
		ck_assert_uint_eq(d[i].slot, i);
	ck_assert_uint_eq(md__host_decide(h, d, 4), 0);
	/* evicting pages accept attention silently and are completed by PAGE_FREE */
	struct md_stats_rec r = rec(MD_REC_ATTN_PAGE);
	r.slot = 0;
	r.gen = 3;
	r.u.attn_page.mass = 1.0f;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	r = rec(MD_REC_PAGE_FREE);
	r.slot = 0;
	r.gen = 3;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	ck_assert_int_eq(md__host_ingest(h, 1, &r), -MD__REJ_STATE); /* no double free */
	struct md__engine_stats st;
	md__host_engine_stats(h, 1, &st);
	ck_assert_uint_eq(st.pages_evicting, 5);
	ck_assert_uint_eq(st.pages_live, 2);
	/* the slot can be reopened with a new generation */
	ck_assert_int_eq(open_n(h, 0, 4, 0, 100, 1, MD_REGION_USER, 0), 0);
	md__host_free(h);
}
END_TEST

START_TEST(test_resync_keeps_state)
{
	struct md__params p;
	md__params_defaults(&p);
	p.policy = MD_POLICY_H2O;
	p.protect_recent = 0;
	struct md__host *h = small_host(&p, 2, 8, 1);
	ck_assert_int_eq(open_n(h, 0, 1, 0, 0, 2, MD_REGION_USER, 0), 0);
	ck_assert_int_eq(open_n(h, 1, 1, 0, 2, 2, MD_REGION_USER, 0), 0);
	ck_assert_int_eq(open_n(h, 2, 1, 0, 4, 2, MD_REGION_USER, 0), 0);
	struct md_stats_rec r = rec(MD_REC_ATTN_PAGE);
	r.slot = 0;
	r.gen = 1;
	r.u.attn_page.mass = 1.5f;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	/* table: slot 0 unchanged, slot 1 reused (gen 2), slot 2 gone, slot 3 new */
	struct md_page_entry t[4];
	memset(t, 0, sizeof t);
	t[0] = (struct md_page_entry){.generation = 1, .seq = 0, .n_tokens = 2,
				      .state = MD_PAGE_LIVE, .first_pos = 0,
				      .labels = 0x22};
	t[1] = t[0];
	t[1].generation = 2;
	t[1].first_pos = 2;
	t[3] = t[0];
	t[3].first_pos = 6;
	t[3].generation = 7;
	md__host_resync_begin(h, 1);
	ck_assert_int_eq(md__host_resync_seq_clock(h, 1, 0, 5), 0);
	for (uint32_t s = 0; s < 4; s++)
		ck_assert_int_eq(md__host_resync_page(h, 1, s, &t[s]), 0);
	struct md_page_entry bad = t[0];
	bad.n_tokens = 9;
	ck_assert_int_eq(md__host_resync_page(h, 1, 4, &bad), -MD__REJ_TOKENS);
	md__host_resync_end(h, 1);
	struct md__top_entry top[4];
	size_t n = md__host_top(h, 1, top, 4);
	ck_assert_uint_eq(n, 2); /* slots 0 and 1; slot 3 is the tail */
	ck_assert_uint_eq(top[0].slot, 1);
	ck_assert_double_eq(top[0].score, 0.0);
	ck_assert_uint_eq(top[1].slot, 0);
	ck_assert_double_eq(top[1].score, 1.5); /* attention state survived */
	ck_assert_uint_eq(top[0].gen, 2);
	md__host_free(h);
}
END_TEST

START_TEST(test_policy_change_next_decision)
{
	struct md__params p;
	md__params_defaults(&p);
	p.protect_recent = 0;
	p.budget_engine_pages = 3;
	struct md__host *h = small_host(&p, 1, 8, 1);
	/* scratchpad oldest-position-last: memdecay evicts it, recency evicts pos 0.. */
	ck_assert_int_eq(open_n(h, 0, 0, 0, 10, 1, MD_REGION_USER, 0), 0);
	ck_assert_int_eq(open_n(h, 1, 0, 0, 11, 1, MD_REGION_SCRATCHPAD, 0), 0);
	ck_assert_int_eq(open_n(h, 2, 0, 0, 12, 1, MD_REGION_USER, 0), 0);
	ck_assert_int_eq(open_n(h, 3, 0, 0, 13, 1, MD_REGION_USER, 0), 0);
	struct md_stats_rec r = rec(MD_REC_STEP);
	r.clock = 10;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	p.policy = MD_POLICY_RECENCY;
	md__host_set_params(h, &p);
	struct md__decision d[2];
	ck_assert_uint_eq(md__host_decide(h, d, 2), 1);
	ck_assert_uint_eq(d[0].slot, 0);
	p.policy = MD_POLICY_MEMDECAY;
	p.budget_engine_pages = 2;
	md__host_set_params(h, &p);
	ck_assert_uint_eq(md__host_decide(h, d, 2), 1);
	ck_assert_uint_eq(d[0].slot, 1);
	md__host_free(h);
}
END_TEST

/* ---- per-sequence options (MD_REC_SEQ_OPTS, docs/policies.md) ---- */

static int seq_opts(struct md__host *h, uint32_t engine, uint32_t seq, uint32_t policy,
		    uint64_t budget)
{
	struct md_stats_rec r = rec(MD_REC_SEQ_OPTS);
	r.seq = seq;
	r.u.seq_opts.policy = policy;
	r.u.seq_opts.budget_sequence_tokens = budget;
	return md__host_ingest(h, engine, &r);
}

/* what md__host_protect_changes handed out, per engine and sequence */
static uint32_t published[MAXE][MAXSEQ];
static void on_protect(void *ctx, uint32_t seq, uint32_t k)
{
	uint32_t *row = ctx;
	ck_assert_uint_lt(seq, MAXSEQ);
	row[seq] = k;
}

static void check_published(struct world *w)
{
	for (int j = 0; j < w->ne; j++) {
		md__host_protect_changes(w->h, w->e[j].id, on_protect, published[j]);
		for (uint32_t q = 0; q < w->e[j].nseq; q++) {
			struct md__seq_opts_info si;
			ck_assert_int_eq(md__host_seq_opts_get(w->h, w->e[j].id, q, &si), 0);
			ck_assert_msg(published[j][q] == si.k_protect,
				      "engine %u seq %u: published %u, host applies %u", w->e[j].id,
				      q, published[j][q], si.k_protect);
		}
	}
}

/* The oracle fuzz with sequences taking and dropping their own policy and
 * budget: every scope, mixed or not, decides as the oracle does, and the
 * published protection counts follow the host's. */
static void fuzz_seq_opts(int policy, uint64_t seed, unsigned n_cases)
{
	rng_state = seed;
	unsigned cases = 0, mixed = 0;
	uint64_t evictions = 0;
	while (cases < n_cases) {
		struct world w;
		world_new(&w, policy);
		memset(published, 0, sizeof(published));
		for (int it = 0; it < 400 && cases < n_cases; it++) {
			if (rn(8) == 0) {
				struct mengine *e = &w.e[rn((uint32_t)w.ne)];
				uint32_t pol = rn(3) == 0 ? MD_SEQ_ENGINE_U32 : rn(MD_POLICY_COUNT);
				uint64_t b = rn(3) == 0 ? MD_SEQ_ENGINE_U64 : rn(4) == 0 ? 0 : 4 + rn(40);
				ck_assert_int_eq(seq_opts(w.h, e->id, rn(e->nseq), pol, b), 0);
				mixed += pol != MD_SEQ_ENGINE_U32 && pol != (uint32_t)policy;
			} else {
				op_random(&w);
			}
			if (rn(5) == 0) {
				evictions += check_decision(&w);
				check_published(&w);
				cases++;
			}
		}
		md__host_free(w.h);
	}
	ck_assert_msg(evictions > n_cases / 5, "only %llu evictions", (unsigned long long)evictions);
	ck_assert_msg(mixed > 0, "no sequence took another policy");
}

START_TEST(test_seq_opts_oracle)
{
	for (int pol = 0; pol < (int)MD_POLICY_COUNT; pol++)
		fuzz_seq_opts(pol, 1000 + (uint64_t)pol, 4000);
}
END_TEST

/* A sequence with its own smaller budget is evicted down to it; its
 * neighbour, under the engine's (none), keeps everything. */
START_TEST(test_seq_opts_budget)
{
	struct md__params p;
	md__params_defaults(&p);
	p.protect_recent = 0;
	p.low_watermark = 0.5;
	struct md__host *h = small_host(&p, 4, 64, 2);
	ck_assert_int_eq(seq_opts(h, 1, 0, MD_SEQ_ENGINE_U32, 16), 0);
	for (uint32_t s = 0; s < 6; s++) { /* 24 tokens in each sequence */
		ck_assert_int_eq(open_n(h, s, 0, 0, 4 * s, 4, MD_REGION_USER, 0), 0);
		ck_assert_int_eq(open_n(h, 10 + s, 0, 1, 4 * s, 4, MD_REGION_USER, 0), 0);
	}
	struct md__decision d[16];
	size_t n = md__host_decide(h, d, 16);
	ck_assert_uint_eq(n, 4); /* floor(0.5 * 16) = 8 tokens: 24 -> 8 */
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(d[i].seq, 0);
		ck_assert_uint_eq(d[i].slot, i);
		ck_assert_uint_eq(d[i].reason, MD_EVICT_SEQUENCE_BUDGET);
	}
	struct md__seq_opts_info si;
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 0, &si), 0);
	ck_assert_uint_eq(si.budget, 16);
	ck_assert_uint_eq(si.budget_effective, 16);
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 1, &si), 0);
	ck_assert_uint_eq(si.budget, MD_SEQ_ENGINE_U64);
	ck_assert_uint_eq(si.budget_effective, 0);
	/* its own "none" beats the engine's budget */
	p.budget_sequence_tokens = 12;
	md__host_set_params(h, &p);
	ck_assert_int_eq(seq_opts(h, 1, 0, MD_SEQ_ENGINE_U32, 0), 0);
	n = md__host_decide(h, d, 16);
	ck_assert_uint_eq(n, 5); /* seq 1 only: 24 -> 4, at most floor(0.5 * 12) = 6 */
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(d[i].seq, 1);
	struct md__engine_stats st;
	ck_assert_int_eq(md__host_engine_stats(h, 1, &st), 0);
	ck_assert_uint_eq(st.seqs_own_options, 1);
	ck_assert_uint_eq(st.seq_options_applied, 2);
	md__host_free(h);
}
END_TEST

/* A sequence with its own policy is scored by it: recency (oldest first)
 * in a memdecay engine whose own order here is by region, and the engine
 * scope over both sequences follows each page's own score. */
START_TEST(test_seq_opts_policy)
{
	struct md__params p;
	md__params_defaults(&p);
	p.protect_recent = 0;
	p.sink_tokens = 0;
	p.budget_sequence_tokens = 8;
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++)
		p.lambda[r] = 0.0;
	p.base[MD_REGION_USER] = 1.0;
	p.base[MD_REGION_TOOL_OUT] = 0.1;
	struct md__host *h = small_host(&p, 4, 64, 2);
	ck_assert_int_eq(seq_opts(h, 1, 0, MD_POLICY_RECENCY, MD_SEQ_ENGINE_U64), 0);
	/* both sequences: user pages first, then tool output (lower memdecay score) */
	for (uint32_t s = 0; s < 4; s++) {
		unsigned reg = s < 2 ? MD_REGION_USER : MD_REGION_TOOL_OUT;
		ck_assert_int_eq(open_n(h, s, 0, 0, 4 * s, 4, reg, 0), 0);
		ck_assert_int_eq(open_n(h, 10 + s, 0, 1, 4 * s, 4, reg, 0), 0);
	}
	struct md__decision want[16], d[16];
	size_t nw = md__oracle_decide(h, want, 16);
	size_t n = md__host_decide(h, d, 16);
	ck_assert_uint_eq(n, 4);
	ck_assert_uint_eq(nw, n);
	ck_assert_int_eq(memcmp(want, d, n * sizeof d[0]), 0);
	/* seq 0 (recency): its two oldest; seq 1 (memdecay): its tool pages */
	ck_assert_uint_eq(d[0].slot, 0);
	ck_assert_uint_eq(d[1].slot, 1);
	ck_assert_uint_eq(d[2].slot, 12);
	ck_assert_uint_eq(d[3].slot, 10); /* tail page 13 protected; user pages: older first */
	struct md__seq_opts_info si;
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 0, &si), 0);
	ck_assert_uint_eq(si.policy_effective, MD_POLICY_RECENCY);
	md__host_free(h);
}
END_TEST

/* SEQ_END gives the sequence the engine's options back. */
START_TEST(test_seq_opts_end_resets)
{
	struct md__params p;
	md__params_defaults(&p);
	struct md__host *h = small_host(&p, 4, 16, 2);
	ck_assert_int_eq(seq_opts(h, 1, 1, MD_POLICY_H2O, 40), 0);
	ck_assert_int_eq(open_n(h, 0, 0, 1, 0, 4, MD_REGION_USER, 0), 0);
	struct md__seq_opts_info si;
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 1, &si), 0);
	ck_assert_uint_eq(si.policy, MD_POLICY_H2O);
	struct md_stats_rec r = rec(MD_REC_SEQ_END);
	r.seq = 1;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 1, &si), 0);
	ck_assert_uint_eq(si.policy, MD_SEQ_ENGINE_U32);
	ck_assert_uint_eq(si.policy_effective, p.policy);
	ck_assert_uint_eq(si.budget, MD_SEQ_ENGINE_U64);
	struct md__engine_stats st;
	ck_assert_int_eq(md__host_engine_stats(h, 1, &st), 0);
	ck_assert_uint_eq(st.seqs_own_options, 0);
	/* a resync entry never written (version 0) is the engine's too */
	ck_assert_int_eq(seq_opts(h, 1, 0, MD_POLICY_RECENCY, 8), 0);
	struct md_seq_opts so = {0};
	so.policy = MD_POLICY_H2O;
	ck_assert_int_eq(md__host_resync_seq_opts(h, 1, 0, &so), 0);
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 0, &si), 0);
	ck_assert_uint_eq(si.policy, MD_SEQ_ENGINE_U32);
	so.version = 2;
	so.budget_sequence_tokens = 12;
	ck_assert_int_eq(md__host_resync_seq_opts(h, 1, 0, &so), 0);
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 0, &si), 0);
	ck_assert_uint_eq(si.policy, MD_POLICY_H2O);
	ck_assert_uint_eq(si.budget, 12);
	md__host_free(h);
}
END_TEST

/* Hostile options are refused with a reason and counted, and change nothing;
 * an engine that speaks ABI 1.1 may not send the record at all. */
START_TEST(test_seq_opts_rejects)
{
	struct md__params p;
	md__params_defaults(&p);
	struct md__host *h = small_host(&p, 4, 16, 2);
	ck_assert_int_eq(seq_opts(h, 1, 2, MD_SEQ_ENGINE_U32, 8), -MD__REJ_SEQ);
	ck_assert_int_eq(seq_opts(h, 1, UINT32_MAX, MD_POLICY_H2O, 8), -MD__REJ_SEQ);
	ck_assert_int_eq(seq_opts(h, 1, 0, MD_POLICY_COUNT, 8), -MD__REJ_OPTIONS);
	ck_assert_int_eq(seq_opts(h, 1, 0, 0x7fffffffu, 8), -MD__REJ_OPTIONS);
	ck_assert_int_eq(seq_opts(h, 1, 0, MD_SEQ_ENGINE_U32, MD__SEQ_BUDGET_MAX + 1),
			 -MD__REJ_OPTIONS);
	ck_assert_int_eq(seq_opts(h, 1, 0, MD_SEQ_ENGINE_U32, MD_SEQ_ENGINE_U64 - 1),
			 -MD__REJ_OPTIONS);
	struct md_seq_opts so = {.version = 2, .policy = 99, .budget_sequence_tokens = 8};
	ck_assert_int_eq(md__host_resync_seq_opts(h, 1, 0, &so), -MD__REJ_OPTIONS);
	struct md__seq_opts_info si;
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 0, &si), 0);
	ck_assert_uint_eq(si.policy, MD_SEQ_ENGINE_U32);
	ck_assert_uint_eq(si.budget, MD_SEQ_ENGINE_U64);
	ck_assert_int_eq(seq_opts(h, 1, 0, MD_SEQ_ENGINE_U32, MD__SEQ_BUDGET_MAX), 0);
	ck_assert_str_eq(md__reject_name(MD__REJ_OPTIONS), "options");
	struct md__engine_stats st;
	ck_assert_int_eq(md__host_engine_stats(h, 1, &st), 0);
	ck_assert_uint_eq(st.rejected[MD__REJ_SEQ], 2);
	ck_assert_uint_eq(st.rejected[MD__REJ_OPTIONS], 4); /* the resync entry: the caller's */
	ck_assert_uint_eq(st.seq_options_applied, 1);
	/* ABI 1.1: an unknown record type */
	ck_assert_int_eq(md__host_engine_set_abi_minor(h, 1, 1), 0);
	ck_assert_int_eq(seq_opts(h, 1, 1, MD_POLICY_H2O, 8), -MD__REJ_TYPE);
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 1, &si), 0);
	ck_assert_uint_eq(si.policy, MD_SEQ_ENGINE_U32);
	md__host_free(h);
}
END_TEST

/* an MD_REC_SEQ_OPTS record with a session (ABI 1.3): tag's 8 bytes */
static int seq_session(struct md__host *h, uint32_t seq, uint64_t budget, uint32_t state,
		       const char *tag)
{
	struct md_stats_rec r = rec(MD_REC_SEQ_OPTS);
	r.seq = seq;
	r.u.seq_opts.policy = MD_SEQ_ENGINE_U32;
	r.u.seq_opts.budget_sequence_tokens = budget;
	r.u.seq_opts.state = state;
	memcpy(r.u.seq_opts.session, tag, MD_SEQ_SESSION_LEN);
	return md__host_ingest(h, 1, &r);
}

/* ABI 1.3: a sequence's session state and tag are stored, counted (retained),
 * listed, checked whole with the record (a bad one changes nothing and is an
 * options rejection), reset by SEQ_END; a 1.2 engine's words are ignored. */
START_TEST(test_seq_session)
{
	struct md__params p;
	md__params_defaults(&p);
	struct md__host *h = small_host(&p, 4, 16, 3);
	ck_assert_int_eq(open_n(h, 0, 0, 0, 0, 4, MD_REGION_USER, 0), 0);
	ck_assert_int_eq(open_n(h, 1, 0, 1, 0, 4, MD_REGION_USER, 0), 0);
	ck_assert_int_eq(seq_session(h, 0, 40, MD_SEQ_RETAINED, "conv-7\0\0"), 0);
	ck_assert_int_eq(seq_session(h, 1, MD_SEQ_ENGINE_U64, MD_SEQ_RUNNING, "12345678"), 0);
	struct md__seq_opts_info si;
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 0, &si), 0);
	ck_assert_uint_eq(si.state, MD_SEQ_RETAINED);
	ck_assert_mem_eq(si.session, "conv-7\0\0", 8);
	ck_assert_uint_eq(si.budget, 40);
	struct md__seq_info q[3];
	ck_assert_uint_eq(md__host_seqs(h, 1, 0, q, 3), 2);
	ck_assert_uint_eq(q[0].state, MD_SEQ_RETAINED);
	ck_assert_mem_eq(q[0].session, "conv-7\0\0", 8);
	ck_assert_uint_eq(q[1].state, MD_SEQ_RUNNING);
	ck_assert_mem_eq(q[1].session, "12345678", 8);
	ck_assert_uint_eq(q[1].own_options, 0);   /* a tag alone is not a policy or budget */
	struct md__engine_stats st;
	ck_assert_int_eq(md__host_engine_stats(h, 1, &st), 0);
	ck_assert_uint_eq(st.seqs_retained, 1);
	ck_assert_uint_eq(st.seqs_own_options, 1);

	/* refused whole: the budget beside a bad state or tag is not taken */
	ck_assert_int_eq(seq_session(h, 0, 8, 2, "conv-7\0\0"), -MD__REJ_OPTIONS);
	ck_assert_int_eq(seq_session(h, 0, 8, MD_SEQ_RUNNING, "a b\0\0\0\0\0"), -MD__REJ_OPTIONS);
	ck_assert_int_eq(seq_session(h, 0, 8, MD_SEQ_RUNNING, "ab\0c\0\0\0\0"), -MD__REJ_OPTIONS);
	ck_assert_int_eq(seq_session(h, 0, 8, MD_SEQ_RUNNING, "\x7f\0\0\0\0\0\0\0"),
			 -MD__REJ_OPTIONS);
	struct md_seq_opts so = { .version = 2, .policy = MD_SEQ_ENGINE_U32,
				  .budget_sequence_tokens = 8, .state = MD_SEQ_RUNNING };
	memcpy(so.session, "tab\there", 8);
	ck_assert_int_eq(md__host_resync_seq_opts(h, 1, 0, &so), -MD__REJ_OPTIONS);
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 0, &si), 0);
	ck_assert_uint_eq(si.state, MD_SEQ_RETAINED);
	ck_assert_mem_eq(si.session, "conv-7\0\0", 8);
	ck_assert_uint_eq(si.budget, 40);
	ck_assert_int_eq(md__host_engine_stats(h, 1, &st), 0);
	ck_assert_uint_eq(st.rejected[MD__REJ_OPTIONS], 4); /* the resync entry: the caller's */
	ck_assert_uint_eq(st.seqs_retained, 1);

	/* a resync entry: retained moves to sequence 1 */
	memcpy(so.session, "resync!\0", 8);
	so.state = MD_SEQ_RETAINED;
	ck_assert_int_eq(md__host_resync_seq_opts(h, 1, 1, &so), 0);
	ck_assert_int_eq(seq_session(h, 0, 40, MD_SEQ_RUNNING, "conv-7\0\0"), 0);
	ck_assert_uint_eq(md__host_seqs(h, 1, 0, q, 3), 2);
	ck_assert_uint_eq(q[0].state, MD_SEQ_RUNNING);
	ck_assert_uint_eq(q[1].state, MD_SEQ_RETAINED);
	ck_assert_mem_eq(q[1].session, "resync!\0", 8);
	ck_assert_int_eq(md__host_engine_stats(h, 1, &st), 0);
	ck_assert_uint_eq(st.seqs_retained, 1);

	/* SEQ_END: running, no tag */
	struct md_stats_rec r = rec(MD_REC_SEQ_END);
	r.seq = 1;
	ck_assert_int_eq(md__host_ingest(h, 1, &r), 0);
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 1, &si), 0);
	ck_assert_uint_eq(si.state, MD_SEQ_RUNNING);
	ck_assert_mem_eq(si.session, "\0\0\0\0\0\0\0\0", 8);
	ck_assert_int_eq(md__host_engine_stats(h, 1, &st), 0);
	ck_assert_uint_eq(st.seqs_retained, 0);

	/* a 1.2 engine: those words were reserved, ignored as in 1.2 */
	ck_assert_int_eq(md__host_engine_set_abi_minor(h, 1, 2), 0);
	ck_assert_int_eq(seq_session(h, 2, 12, 7, "a b\0c\x01\0\0"), 0);
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 2, &si), 0);
	ck_assert_uint_eq(si.budget, 12);
	ck_assert_uint_eq(si.state, MD_SEQ_RUNNING);
	ck_assert_mem_eq(si.session, "\0\0\0\0\0\0\0\0", 8);
	so.state = 9;
	memcpy(so.session, "\x01\x02\0\0\0\0\0\x03", 8);
	ck_assert_int_eq(md__host_resync_seq_opts(h, 1, 2, &so), 0);
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 2, &si), 0);
	ck_assert_uint_eq(si.budget, 8);
	ck_assert_uint_eq(si.state, MD_SEQ_RUNNING);
	md__host_free(h);
}
END_TEST

/* The protection count handed out for publishing is the host's: its own
 * policy's window (h2o: floor(fraction x its budget in pages)) with its own
 * budget, the engine's count for the others; only changes are handed out. */
static uint32_t prot_seen[4], prot_calls;
static void on_prot(void *ctx, uint32_t seq, uint32_t k)
{
	(void)ctx;
	prot_seen[seq] = k;
	prot_calls++;
}

START_TEST(test_seq_protect_published)
{
	struct md__params p;
	md__params_defaults(&p);
	p.protect_recent = 1;
	p.h2o_recent_fraction = 0.5;
	struct md__host *h = small_host(&p, 4, 64, 4);
	ck_assert_int_eq(seq_opts(h, 1, 2, MD_POLICY_H2O, 64), 0); /* 16 pages: window 8 */
	for (uint32_t s = 0; s < 12; s++)
		ck_assert_int_eq(open_n(h, s, 0, 2, 4 * s, 4, MD_REGION_USER, 0), 0);
	struct md__decision d[16];
	md__host_decide(h, d, 16);
	prot_calls = 0;
	md__host_protect_changes(h, 1, on_prot, NULL);
	ck_assert_uint_eq(prot_calls, 4); /* after a rebuild: every sequence */
	ck_assert_uint_eq(prot_seen[0], 2);
	ck_assert_uint_eq(prot_seen[2], 8);
	struct md__seq_opts_info si;
	ck_assert_int_eq(md__host_seq_opts_get(h, 1, 2, &si), 0);
	ck_assert_uint_eq(si.k_protect, 8);
	prot_calls = 0;
	md__host_protect_changes(h, 1, on_prot, NULL);
	ck_assert_uint_eq(prot_calls, 0);
	/* its own budget moves its window only */
	ck_assert_int_eq(seq_opts(h, 1, 2, MD_POLICY_H2O, 32), 0); /* 8 pages: window 4 */
	md__host_decide(h, d, 16);
	md__host_protect_changes(h, 1, on_prot, NULL);
	ck_assert_uint_eq(prot_calls, 1);
	ck_assert_uint_eq(prot_seen[2], 4);
	/* and back to the engine's (memdecay: tail + protect_recent) */
	ck_assert_int_eq(seq_opts(h, 1, 2, MD_SEQ_ENGINE_U32, MD_SEQ_ENGINE_U64), 0);
	md__host_decide(h, d, 16);
	md__host_protect_changes(h, 1, on_prot, NULL);
	ck_assert_uint_eq(prot_seen[2], 2);
	md__host_free(h);
}
END_TEST


/* ---- the split of budget.global_pages: weighted max-min over holdings ---- */

/* engine id with weight w and `pages` one-token pages in sequence 0 */
static void engine_holding(struct md__host *h, uint32_t id, double w, uint32_t cap,
			   uint32_t pages)
{
	struct md__engine_opts o;
	md__engine_opts_defaults(&o);
	o.weight = w;
	ck_assert_int_eq(md__host_engine_add(h, id, 1, cap, 1, &o), 0);
	struct md_stats_rec r = rec(MD_REC_PAGE_OPEN);
	for (uint32_t s = 0; s < pages; s++) {
		r.slot = s;
		r.u.page.first_pos = s;
		r.u.page.n_tokens = 1;
		r.u.page.labels = MD_REGION_USER;
		ck_assert_int_eq(md__host_ingest(h, id, &r), 0);
	}
}

static uint64_t budget_of(const struct md__host *h, uint32_t id)
{
	struct md__engine_stats st;
	ck_assert_int_eq(md__host_engine_stats(h, id, &st), 0);
	return st.budget_engine_pages;
}

static uint64_t live_of(const struct md__host *h, uint32_t id)
{
	struct md__engine_stats st;
	ck_assert_int_eq(md__host_engine_stats(h, id, &st), 0);
	return st.pages_live;
}

static size_t evictions_of(const struct md__decision *d, size_t n, uint32_t id)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (d[i].engine_id == id) {
			ck_assert_uint_eq(d[i].reason, MD_EVICT_GLOBAL_BUDGET);
			k++;
		}
	return k;
}

static struct md__host *global_host(uint64_t global)
{
	struct md__params p;
	md__params_defaults(&p);
	p.protect_recent = 0;
	p.budget_global_pages = global;
	return md__host_new(&p);
}

/* An engine that attaches holding nothing takes no page from one that holds
 * 48 of 64: the pages nobody holds are split, what is held stays. */
START_TEST(test_global_idle_engine_costs_nothing)
{
	struct md__host *h = global_host(64);
	struct md__decision d[64];
	engine_holding(h, 1, 1.0, 96, 48);
	ck_assert_uint_eq(md__host_decide(h, d, 64), 0);
	ck_assert_uint_eq(budget_of(h, 1), 64);
	engine_holding(h, 2, 1.0, 96, 0); /* HELLO weight 10^6, clamped to 1 */
	ck_assert_uint_ge(budget_of(h, 1), 48);
	ck_assert_uint_eq(md__host_decide(h, d, 64), 0);
	ck_assert_uint_eq(live_of(h, 1), 48);
	/* the 16 free pages, by weight, on top of the holdings */
	ck_assert_uint_eq(budget_of(h, 1), 56);
	ck_assert_uint_eq(budget_of(h, 2), 8);
	struct md_param_block pb;
	memset(&pb, 0, sizeof(pb));
	ck_assert_int_eq(md__host_engine_param_view(h, 1, &pb), 0);
	ck_assert_uint_eq(pb.budget_engine_pages, 56);
	/* engine 2 grows to 20, within its half: engine 1 gives up 4 pages */
	struct md_stats_rec r = rec(MD_REC_PAGE_OPEN);
	for (uint32_t s = 0; s < 20; s++) {
		r.slot = s;
		r.u.page.first_pos = s;
		r.u.page.n_tokens = 1;
		r.u.page.labels = MD_REGION_USER;
		ck_assert_int_eq(md__host_ingest(h, 2, &r), 0);
	}
	size_t n = md__host_decide(h, d, 64);
	ck_assert_uint_eq(n, 4);
	ck_assert_uint_eq(evictions_of(d, n, 1), 4);
	ck_assert_uint_eq(budget_of(h, 1), 44);
	ck_assert_uint_eq(budget_of(h, 2), 20);
	ck_assert_uint_eq(md__host_decide(h, d, 64), 0);
	/* engine 2 detaches: engine 1 may grow back to the whole budget */
	md__host_engine_remove(h, 2);
	ck_assert_uint_eq(budget_of(h, 1), 64);
	md__host_free(h);
}
END_TEST

/* Both over their half: the plain weighted split, as before. */
START_TEST(test_global_both_over)
{
	struct md__host *h = global_host(64);
	struct md__decision d[64];
	engine_holding(h, 1, 1.0, 64, 60);
	engine_holding(h, 2, 1.0, 64, 60);
	ck_assert_uint_eq(budget_of(h, 1), 32);
	ck_assert_uint_eq(budget_of(h, 2), 32);
	size_t n = md__host_decide(h, d, 64);
	ck_assert_uint_eq(n, 56);
	ck_assert_uint_eq(evictions_of(d, n, 1), 28);
	ck_assert_uint_eq(evictions_of(d, n, 2), 28);
	ck_assert_uint_eq(live_of(h, 1), 32);
	ck_assert_uint_eq(live_of(h, 2), 32);
	md__host_free(h);
}
END_TEST

/* Weights 3:1, engine 2 holds 4 of its 16: engine 1 gets the other 60. */
START_TEST(test_global_weighted_unused)
{
	struct md__host *h = global_host(64);
	struct md__decision d[64];
	engine_holding(h, 1, 3.0, 96, 80);
	engine_holding(h, 2, 1.0, 96, 4);
	ck_assert_uint_eq(budget_of(h, 1), 60);
	ck_assert_uint_eq(budget_of(h, 2), 4);
	size_t n = md__host_decide(h, d, 64);
	ck_assert_uint_eq(n, 20);
	ck_assert_uint_eq(evictions_of(d, n, 1), 20);
	ck_assert_uint_eq(live_of(h, 1), 60);
	ck_assert_uint_eq(live_of(h, 2), 4);
	md__host_free(h);
}
END_TEST

/* Three engines: one under its third, two over it share the rest. */
START_TEST(test_global_three_mixed)
{
	struct md__host *h = global_host(90);
	struct md__decision d[64];
	engine_holding(h, 1, 1.0, 64, 10);
	engine_holding(h, 2, 1.0, 64, 50);
	engine_holding(h, 3, 1.0, 64, 50);
	ck_assert_uint_eq(budget_of(h, 1), 10);
	ck_assert_uint_eq(budget_of(h, 2), 40);
	ck_assert_uint_eq(budget_of(h, 3), 40);
	size_t n = md__host_decide(h, d, 64);
	ck_assert_uint_eq(n, 20);
	ck_assert_uint_eq(evictions_of(d, n, 1), 0);
	ck_assert_uint_eq(evictions_of(d, n, 2), 10);
	ck_assert_uint_eq(evictions_of(d, n, 3), 10);
	md__host_free(h);

	/* weights 1:2:1, all under: each keeps its holding, and the 5 pages
	 * nobody holds are split by weight (floor(5 w / 4): 1, 2, 1) */
	uint64_t held[3] = {5, 70, 20}, share[3];
	double w[3] = {1, 2, 1};
	ck_assert_int_eq(md__global_split(100, 3, held, w, share), 0);
	ck_assert_uint_eq(share[0], 6);
	ck_assert_uint_eq(share[1], 72);
	ck_assert_uint_eq(share[2], 21);
	/* weights 1:2:1, engine 2 over: engine 1 keeps 5, engine 3 its 20,
	 * engine 2 the other 75 */
	held[1] = 90;
	ck_assert_int_eq(md__global_split(100, 3, held, w, share), 0);
	ck_assert_uint_eq(share[0], 5);
	ck_assert_uint_eq(share[1], 75);
	ck_assert_uint_eq(share[2], 20);
	/* 1:2:1, engines 2 and 3 over: engine 1 keeps 5, 95 split 2:1 */
	held[2] = 60;
	ck_assert_int_eq(md__global_split(100, 3, held, w, share), 0);
	ck_assert_uint_eq(share[0], 5);
	ck_assert_uint_eq(share[1], 63);
	ck_assert_uint_eq(share[2], 31);
}
END_TEST

/* Seeded random splits: at most global in all; each engine gets at least
 * min(holding, floor(global w / W)); everything held fits when the holdings
 * do; otherwise no engine gets more than it holds, fewer than one page per
 * capped engine is lost to rounding, and no engine sits above a capped one's
 * level by more than rounding; all over: the plain weighted split. */
START_TEST(test_global_split_properties)
{
	static const uint64_t w2s[] = {1, 2, 4, 6, 20, 2000000}; /* twice the weight */
	rng_state = 0x5eed5eedu;
	for (int it = 0; it < 20000; it++) {
		size_t n = 1 + rn(8);
		uint64_t held[8], share[8], w2[8], sum_w2 = 0, sum_held = 0;
		double w[8];
		uint64_t global = 1 + rn(it % 3 ? 300 : 20);
		for (size_t i = 0; i < n; i++) {
			w2[i] = rn(3) ? w2s[rn(6)] : 2 * (1 + rn(100));
			w[i] = (double)w2[i] / 2.0;
			held[i] = rn(4) ? rn(200) : 0;
			sum_w2 += w2[i];
			sum_held += held[i];
		}
		ck_assert_int_eq(md__global_split(global, n, held, w, share), 0);
		uint64_t sum = 0, capped = 0;
		int all_over = 1;
		for (size_t i = 0; i < n; i++) {
			uint64_t part = global * w2[i] / sum_w2;
			sum += share[i];
			ck_assert_uint_ge(share[i], held[i] < part ? held[i] : part);
			if (held[i] <= part)
				all_over = 0;
			if (sum_held <= global)
				ck_assert_uint_ge(share[i], held[i]);
			else
				ck_assert_uint_le(share[i], held[i]);
			capped += share[i] < held[i];
		}
		ck_assert_uint_le(sum, global);
		if (sum_held > global)
			ck_assert_uint_gt(sum + capped, global);
		for (size_t i = 0; i < n; i++) {
			if (share[i] >= held[i])
				continue;
			for (size_t j = 0; j < n; j++) /* s_j / w_j < (s_i + 1) / w_i */
				ck_assert(share[j] * w2[i] < (share[i] + 1) * w2[j]);
		}
		if (all_over)
			for (size_t i = 0; i < n; i++)
				ck_assert_uint_eq(share[i], global * w2[i] / sum_w2);
	}
	/* the host splits over what its engines hold; the budget it publishes
	 * and decides with is that share (at least one page) */
	for (int it = 0; it < 200; it++) {
		uint64_t global = 1 + rn(120);
		struct md__host *h = global_host(global);
		size_t n = 1 + rn(4);
		uint64_t held[4], share[4];
		double w[4];
		for (size_t i = 0; i < n; i++) {
			w[i] = (double)(1 + rn(4));
			held[i] = rn(3) ? rn(60) : 0;
			engine_holding(h, (uint32_t)i + 1, w[i], 64, (uint32_t)held[i]);
		}
		ck_assert_int_eq(md__global_split(global, n, held, w, share), 0);
		uint64_t sum = 0;
		for (size_t i = 0; i < n; i++) {
			uint64_t b = budget_of(h, (uint32_t)i + 1);
			ck_assert_uint_eq(b, share[i] ? share[i] : 1);
			sum += share[i];
		}
		ck_assert_uint_le(sum, global);
		md__host_free(h);
	}
}
END_TEST

static Suite *index_suite(void)
{
	Suite *s = suite_create("index");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_reject_bad_records);
	tcase_add_test(tc, test_never_pinned_or_protected);
	tcase_add_test(tc, test_budgets_and_watermark);
	tcase_add_test(tc, test_evicting_state_and_cap);
	tcase_add_test(tc, test_seqs_listing);
	tcase_add_test(tc, test_resync_keeps_state);
	tcase_add_test(tc, test_policy_change_next_decision);
	tcase_add_loop_test(tc, test_oracle_policy, 0, MD_POLICY_COUNT);
	if (MD__POLICY_N > (uint32_t)MD_POLICY_COUNT) {
		TCase *tp = tcase_create("test_policy");
		tcase_set_timeout(tp, 240);
		tcase_add_loop_test(tp, test_oracle_policy, MD_POLICY_COUNT, (int)MD__POLICY_N);
		suite_add_tcase(s, tp);
	}
	TCase *to = tcase_create("seq_options");
	tcase_set_timeout(to, 240);
	tcase_add_test(to, test_seq_opts_budget);
	tcase_add_test(to, test_seq_opts_policy);
	tcase_add_test(to, test_seq_opts_end_resets);
	tcase_add_test(to, test_seq_opts_rejects);
	tcase_add_test(to, test_seq_session);
	tcase_add_test(to, test_seq_protect_published);
	tcase_add_test(to, test_seq_opts_oracle);
	suite_add_tcase(s, to);
	TCase *tt = tcase_create("tier");
	tcase_set_timeout(tt, 240);
	tcase_add_loop_test(tt, test_tier_oracle_policy, 0, MD_POLICY_COUNT);
	suite_add_tcase(s, tt);

	TCase *tg = tcase_create("global_share");
	tcase_set_timeout(tg, 240);
	tcase_add_test(tg, test_global_idle_engine_costs_nothing);
	tcase_add_test(tg, test_global_both_over);
	tcase_add_test(tg, test_global_weighted_unused);
	tcase_add_test(tg, test_global_three_mixed);
	tcase_add_test(tg, test_global_split_properties);
	suite_add_tcase(s, tg);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return md_test_main(index_suite());
}
