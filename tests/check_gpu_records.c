/*
 * check_gpu_records.c — the CUDA stats ring's records, checked on the CPU
 * (docs/kernels.md §4, docs/abi.md §7).  The device completes each ATTN_PAGE
 * record with mdk_attn_rec_finish (md_cuda_attn_rec.h), the function compiled
 * here for the host.  Checked: the completed record is byte for byte the one
 * libmemdecay's md_attn_page writes into the host ring for the same mass and
 * refresh (mass and refresh exactly mdk_page_refresh's); its stamp passes
 * md_ring_stamp_ok, the check both of the daemon's rings use, and a record the
 * kernel never reached is torn at every index (0 and 2^32 included); and the
 * host validation (md__host_ingest) gives the same verdicts and the same
 * decisions for device-laid-out records as for host-ring ones, hostile ones
 * (NaN mass, stale generation, freed slot, another sequence) included.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "host.h"
#include "md_cuda_attn_rec.h"
#include "md_kernels.h"
#include "memdecay_abi.h"
#include "memdecay_ring.h"
#include "params.h"

#define P 16u

static unsigned g_seed;

static unsigned seed_once(void)
{
	if (!g_seed) {
		const char *s = getenv("MEMDECAY_TEST_SEED");
		g_seed = s ? (unsigned)strtoul(s, NULL, 0)
			   : (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
		fprintf(stderr, "check_gpu_records: seed %u (MEMDECAY_TEST_SEED)\n", g_seed);
	}
	return g_seed;
}

static uint32_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*s >> 33);
}

/* What libmemdecay's md_attn_page writes into the host ring (client.c). */
static struct md_stats_rec host_rec(uint64_t index, uint32_t seq, uint32_t slot, uint32_t gen,
				    uint64_t clock, float mass, uint16_t refresh,
				    uint32_t n_tokens)
{
	struct md_stats_rec r;
	memset(&r, 0, sizeof(r));
	r.type = MD_REC_ATTN_PAGE;
	r.seq = seq;
	r.slot = slot;
	r.gen = gen;
	r.clock = clock;
	r.u.attn_page.mass = mass;
	r.u.attn_page.refresh = (uint16_t)(refresh & ((1u << n_tokens) - 1u));
	r.pos = (uint32_t)index;
	return r;
}

/* What libmemdecay's GPU publisher stages (gpu.c build_headers) and the ring
 * stamps (ipc_ring.cu stage_records) before the kernel runs. */
static struct md_stats_rec staged_rec(uint64_t index, uint32_t seq, uint32_t slot, uint32_t gen,
				      uint64_t clock, uint32_t page, float norm,
				      uint32_t n_tokens)
{
	struct md_stats_rec r;
	memset(&r, 0, sizeof(r));
	r.type = MD_REC_ATTN_PAGE;
	r.seq = seq;
	r.slot = slot;
	r.gen = gen;
	r.clock = clock;
	mdk_attn_rec_stage((uint8_t *)&r, page, norm, (uint16_t)((1u << n_tokens) - 1u));
	mdk_attn_rec_stage_pos((uint8_t *)&r, index);
	return r;
}

/* Device records equal host-ring records; mass and refresh are exactly
 * mdk_page_refresh's. */
START_TEST(test_layout_matches_host_ring)
{
	uint64_t s = seed_once();
	for (int iter = 0; iter < 200; iter++) {
		uint32_t n_pages = 1 + rnd(&s) % 64;
		float *tm = malloc((size_t)n_pages * P * sizeof(float));
		float *pm = malloc(n_pages * sizeof(float));
		uint16_t *rf = malloc(n_pages * sizeof(uint16_t));
		ck_assert_ptr_nonnull(tm);
		for (uint32_t i = 0; i < n_pages * P; i++)
			tm[i] = (rnd(&s) % 1000) * 1e-5f;
		float tau = (rnd(&s) % 100) * 1e-4f;
		float norm = rnd(&s) % 2 ? 1.0f : (float)(1 + rnd(&s) % 4096);
		struct mdk_cell_map map = { .n_pages = n_pages, .page_tokens = P };
		struct mdk_page_out out = { tm, pm, rf };
		mdk_page_refresh(&map, tau, norm, &out);
		for (uint32_t pg = 0; pg < n_pages; pg++) {
			uint64_t index = ((uint64_t)rnd(&s) << 20) ^ rnd(&s);
			uint32_t slot = rnd(&s) % 4096, gen = 1 + rnd(&s) % 1000, seq = rnd(&s) % 64;
			uint32_t nt = 1 + rnd(&s) % P;
			uint64_t clock = rnd(&s);
			struct md_stats_rec d = staged_rec(index, seq, slot, gen, clock, pg, norm, nt);
			ck_assert(!md_ring_stamp_ok(&d, index));
			mdk_attn_rec_finish((uint8_t *)&d, index, tm, n_pages, P, tau);
			struct md_stats_rec h = host_rec(index, seq, slot, gen, clock, pm[pg], rf[pg], nt);
			ck_assert_msg(!memcmp(&d, &h, sizeof(d)),
				      "page %u: device record differs from the host ring's (seed %u)",
				      pg, g_seed);
			ck_assert(md_ring_stamp_ok(&d, index));
			ck_assert(!md_ring_stamp_ok(&d, index + 1));
		}
		free(tm);
		free(pm);
		free(rf);
	}
}
END_TEST

/* A record the kernel never completed reads as torn wherever it sits,
 * including indices whose low 32 bits are 0. */
START_TEST(test_unfinished_is_torn)
{
	uint64_t idx[] = { 0, 1, 0xffffffffull, 1ull << 32, (1ull << 32) + 5, UINT64_MAX };
	for (size_t i = 0; i < sizeof(idx) / sizeof(idx[0]); i++) {
		struct md_stats_rec r = staged_rec(idx[i], 0, 3, 1, 10, 0, 1.0f, 16);
		ck_assert_msg(!md_ring_stamp_ok(&r, idx[i]), "index %llu",
			      (unsigned long long)idx[i]);
		float tm[P] = { 0 };
		mdk_attn_rec_finish((uint8_t *)&r, idx[i], tm, 1, P, 0.01f);
		ck_assert(md_ring_stamp_ok(&r, idx[i]));
	}
	/* The host ring's consumer applies the same check. */
	struct md_stats_rec ring[4];
	memset(ring, 0, sizeof(ring));
	ring[1] = staged_rec(1, 0, 3, 1, 10, 0, 1.0f, 16);
	uint64_t tail = 2, head = 1;
	struct md_ring_cons c;
	ck_assert_int_eq(md_ring_cons_init(&c, ring, 4, sizeof(struct md_stats_rec), &tail, &head,
					   1), 0);
	struct md_stats_rec out;
	ck_assert_int_eq(md_ring_copy_next(&c, &out), MD_RING_TORN);
}
END_TEST

/* Working fields never leak: a page index past n_pages gives mass 0, and
 * refresh is masked to the live tokens. */
START_TEST(test_bounds_and_mask)
{
	float tm[2 * P];
	for (unsigned i = 0; i < 2 * P; i++)
		tm[i] = 1.0f;
	struct md_stats_rec r = staged_rec(7, 0, 3, 1, 10, 5, 1.0f, 16);
	mdk_attn_rec_finish((uint8_t *)&r, 7, tm, 2, P, 0.5f);
	ck_assert(r.u.attn_page.mass == 0.0f);
	ck_assert_uint_eq(r.u.attn_page.refresh, 0);
	ck_assert_uint_eq(r.u.attn_page.resv1[0] | r.u.attn_page.resv1[1] | r.u.attn_page.resv1[2], 0);
	r = staged_rec(8, 0, 3, 1, 10, 1, 1.0f, 3);
	mdk_attn_rec_finish((uint8_t *)&r, 8, tm, 2, P, 0.5f);
	ck_assert(r.u.attn_page.mass == 16.0f);
	ck_assert_uint_eq(r.u.attn_page.refresh, 0x7);
	ck_assert_uint_eq(r.u.attn_page.resv, 0);
}
END_TEST

static struct md_stats_rec life(uint16_t type, uint32_t seq, uint32_t slot, uint32_t gen,
				uint64_t clock, uint64_t first_pos, uint32_t n)
{
	struct md_stats_rec r;
	memset(&r, 0, sizeof(r));
	r.type = type;
	r.seq = seq;
	r.slot = slot;
	r.gen = gen;
	r.clock = clock;
	if (type == MD_REC_PAGE_OPEN) {
		r.u.page.first_pos = first_pos;
		r.u.page.n_tokens = (uint16_t)n;
		for (unsigned k = 0; k < n; k++)
			r.u.page.labels = md_label_set(r.u.page.labels, k, MD_REGION_USER);
	}
	if (type == MD_REC_PAGE_FREE)
		r.u.free.reason = MD_FREE_FINISHED;
	return r;
}

static int cmp_dec(const void *a, const void *b)
{
	const struct md__decision *x = a, *y = b;
	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* The host validation treats device-laid-out records exactly like host-ring
 * ones: same verdict for every record, same decisions at the end. */
START_TEST(test_same_validation)
{
	uint64_t s = seed_once() ^ 0x9e3779b9u;
	struct md__params p;
	md__params_defaults(&p);
	struct md__host *hd = md__host_new(&p), *hh = md__host_new(&p);
	const uint32_t eng = 1, pages = 24, cap = 64;
	ck_assert_int_eq(md__host_engine_add(hd, eng, P, cap, 2, NULL), 0);
	ck_assert_int_eq(md__host_engine_add(hh, eng, P, cap, 2, NULL), 0);
	uint64_t clock = 0;
	for (uint32_t i = 0; i < pages; i++) {
		struct md_stats_rec o = life(MD_REC_PAGE_OPEN, 0, i, 1, clock, (uint64_t)i * P, P);
		ck_assert_int_eq(md__host_ingest(hd, eng, &o), 0);
		ck_assert_int_eq(md__host_ingest(hh, eng, &o), 0);
		clock += P;
		struct md_stats_rec st = life(MD_REC_STEP, 0, UINT32_MAX, 0, clock, 0, 0);
		ck_assert_int_eq(md__host_ingest(hd, eng, &st), 0);
		ck_assert_int_eq(md__host_ingest(hh, eng, &st), 0);
	}
	struct md_stats_rec fr = life(MD_REC_PAGE_FREE, 0, 5, 1, clock, 0, 0);
	ck_assert_int_eq(md__host_ingest(hd, eng, &fr), 0);
	ck_assert_int_eq(md__host_ingest(hh, eng, &fr), 0);

	float tm[pages * P], pm[pages];
	uint16_t rf[pages];
	int rejected = 0;
	uint64_t index = 1000;
	for (int step = 0; step < 8; step++) {
		for (uint32_t i = 0; i < pages * P; i++)
			tm[i] = (rnd(&s) % 1000) * 2e-5f;
		if (step == 3)
			tm[7 * P + 2] = NAN; /* a hostile engine: the daemon must refuse it */
		struct mdk_cell_map map = { .n_pages = pages, .page_tokens = P };
		struct mdk_page_out out = { tm, pm, rf };
		mdk_page_refresh(&map, 0.01f, 1.0f, &out);
		for (uint32_t pg = 0; pg < pages; pg++, index++) {
			/* slot 5 is free; some records name a stale generation or the
			 * wrong sequence */
			uint32_t gen = pg == 9 && step == 2 ? 7 : 1;
			uint32_t seq = pg == 11 && step == 4 ? 1 : 0;
			struct md_stats_rec d = staged_rec(index, seq, pg, gen, clock, pg, 1.0f, P);
			mdk_attn_rec_finish((uint8_t *)&d, index, tm, pages, P, 0.01f);
			struct md_stats_rec h = host_rec(index, seq, pg, gen, clock, pm[pg], rf[pg], P);
			ck_assert(md_ring_stamp_ok(&d, index) && md_ring_stamp_ok(&h, index));
			int rd = md__host_ingest(hd, eng, &d), rh = md__host_ingest(hh, eng, &h);
			ck_assert_msg(rd == rh, "step %d page %u: device %d, host ring %d", step, pg, rd,
				      rh);
			rejected += rd < 0;
		}
		clock += 1;
		struct md_stats_rec st = life(MD_REC_STEP, 0, UINT32_MAX, 0, clock, 0, 0);
		ck_assert_int_eq(md__host_ingest(hd, eng, &st), 0);
		ck_assert_int_eq(md__host_ingest(hh, eng, &st), 0);
	}
	/* free slot 5 ×8, stale generation, NaN; attention is tied to slot and
	 * generation, so the wrong sequence passes on both rings alike */
	ck_assert_int_eq(rejected, 8 + 1 + 1);

	struct md__engine_opts o;
	md__engine_opts_defaults(&o);
	o.budget_engine_pages = 12;
	ck_assert_int_eq(md__host_engine_set_opts(hd, eng, &o), 0);
	ck_assert_int_eq(md__host_engine_set_opts(hh, eng, &o), 0);
	struct md__decision a[64], b[64];
	size_t na = md__host_decide(hd, a, 64), nb = md__host_decide(hh, b, 64);
	ck_assert_uint_gt(na, 0);
	ck_assert_uint_eq(na, nb);
	qsort(a, na, sizeof(a[0]), cmp_dec);
	qsort(b, nb, sizeof(b[0]), cmp_dec);
	for (size_t i = 0; i < na; i++)
		ck_assert_msg(a[i].slot == b[i].slot && a[i].gen == b[i].gen,
			      "decision %zu: device slot %u, host ring slot %u", i, a[i].slot,
			      b[i].slot);
	md__host_free(hd);
	md__host_free(hh);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("gpu_records");
	TCase *tc = tcase_create("records");
	tcase_add_test(tc, test_layout_matches_host_ring);
	tcase_add_test(tc, test_unfinished_is_torn);
	tcase_add_test(tc, test_bounds_and_mask);
	tcase_add_test(tc, test_same_validation);
	suite_add_tcase(su, tc);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
