/*
 * check_kernels.c — the CPU page-mass kernels (md_kernels.h) and the flash
 * reference (md_kernels_flash.h) against naive double-precision references, on
 * random inputs drawn fresh every run (the seed is printed on failure and can be
 * replayed with MEMDECAY_TEST_SEED).  Outputs are poisoned with NaN before each
 * run so an element the kernel forgets to write fails the comparison.
 */
#include <check.h>
#include "test_util.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "md_kernels.h"
#include "md_kernels_flash.h"

static uint64_t g_seed;
static uint64_t g_rng;

static void rng_seed(void)
{
	const char *env = getenv("MEMDECAY_TEST_SEED");
	if (env && *env) {
		g_seed = strtoull(env, NULL, 0);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		g_seed = ((uint64_t)ts.tv_sec * 1000000007ULL) ^ (uint64_t)ts.tv_nsec ^
			 ((uint64_t)getpid() << 32);
	}
	g_rng = g_seed ? g_seed : 1;
}

static uint64_t rng_next(void)
{
	/* xorshift64* */
	g_rng ^= g_rng >> 12;
	g_rng ^= g_rng << 25;
	g_rng ^= g_rng >> 27;
	return g_rng * 0x2545F4914F6CDD1DULL;
}

static uint32_t rng_below(uint32_t n)
{
	return (uint32_t)(rng_next() % n);
}

static double rng_unit(void)
{
	return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

#define SEEDFMT " (seed %llu: rerun with MEMDECAY_TEST_SEED=%llu)"
#define SEEDARG (unsigned long long)g_seed, (unsigned long long)g_seed

static void poison_f(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = NAN;
}

/* ---- a random step: probabilities, a cell map with holes, outputs ---- */

struct problem {
	uint32_t n_query, n_head, n_kv, stride, P, n_pages;
	float *probs;
	int32_t *page;
	uint8_t *token;
	double *ref_token; /* [n_pages*P] */
	double *ref_page;  /* [n_pages] */
	float *token_mass;
	float *page_mass;
	uint16_t *refresh;
};

/* Rows are normalized over the n_kv cells, with a few spikes so that some
 * tokens cross tau.  Padding past n_kv is NaN: reading it is a bug. */
static void fill_probs(struct problem *pb, float *probs)
{
	uint32_t n_rows = pb->n_query * pb->n_head;
	for (uint32_t r = 0; r < n_rows; r++) {
		float *row = probs + (size_t)r * pb->stride;
		double sum = 0.0;
		for (uint32_t c = 0; c < pb->n_kv; c++) {
			double v = rng_unit();
			if (rng_below(50) == 0)
				v *= 200.0;
			row[c] = (float)v;
			sum += v;
		}
		for (uint32_t c = 0; c < pb->n_kv; c++)
			row[c] = (float)(row[c] / sum);
		for (uint32_t c = pb->n_kv; c < pb->stride; c++)
			row[c] = NAN;
	}
}

static void problem_init(struct problem *pb, uint32_t n_query, uint32_t n_head, uint32_t n_kv,
			 uint32_t P)
{
	memset(pb, 0, sizeof(*pb));
	pb->n_query = n_query;
	pb->n_head = n_head;
	pb->n_kv = n_kv;
	pb->stride = n_kv + rng_below(9);
	pb->P = P;
	/* More slots than cells sometimes, fewer never: pages are partly filled. */
	pb->n_pages = (n_kv + P - 1) / P + rng_below(3);
	size_t n_rows = (size_t)n_query * n_head;
	pb->probs = malloc(n_rows * pb->stride * sizeof(float) + sizeof(float));
	pb->page = malloc((n_kv + 1) * sizeof(int32_t));
	pb->token = malloc(n_kv + 1);
	pb->ref_token = calloc((size_t)pb->n_pages * P, sizeof(double));
	pb->ref_page = calloc(pb->n_pages + 1, sizeof(double));
	pb->token_mass = malloc(((size_t)pb->n_pages * P + 1) * sizeof(float));
	pb->page_mass = malloc((pb->n_pages + 1) * sizeof(float));
	pb->refresh = malloc((pb->n_pages + 1) * sizeof(uint16_t));
	ck_assert(pb->probs && pb->page && pb->token && pb->ref_token && pb->ref_page &&
		  pb->token_mass && pb->page_mass && pb->refresh);
	fill_probs(pb, pb->probs);

	/* Cells take distinct (page, slot) pairs in random order; ~1/8 are untracked. */
	uint32_t n_slots = pb->n_pages * P;
	uint32_t *slots = malloc(n_slots * sizeof(uint32_t));
	ck_assert(slots);
	for (uint32_t i = 0; i < n_slots; i++)
		slots[i] = i;
	for (uint32_t i = n_slots - 1; i > 0; i--) {
		uint32_t j = rng_below(i + 1), t = slots[i];
		slots[i] = slots[j];
		slots[j] = t;
	}
	for (uint32_t c = 0; c < n_kv; c++) {
		if (rng_below(8) == 0) {
			pb->page[c] = -1;
			pb->token[c] = (uint8_t)rng_below(256); /* ignored with page -1 */
		} else {
			pb->page[c] = (int32_t)(slots[c] / P);
			pb->token[c] = (uint8_t)(slots[c] % P);
		}
	}
	free(slots);
}

static void problem_free(struct problem *pb)
{
	free(pb->probs);
	free(pb->page);
	free(pb->token);
	free(pb->ref_token);
	free(pb->ref_page);
	free(pb->token_mass);
	free(pb->page_mass);
	free(pb->refresh);
}

/* Naive double reference: mean over rows, scattered, times scale. */
static void reference_add(const struct problem *pb, const float *probs, double scale,
			  double *ref_token, double *ref_page)
{
	uint32_t n_rows = pb->n_query * pb->n_head;
	for (uint32_t c = 0; c < pb->n_kv; c++) {
		if (pb->page[c] < 0)
			continue;
		double s = 0.0;
		for (uint32_t r = 0; r < n_rows; r++)
			s += probs[(size_t)r * pb->stride + c];
		s = s * scale / n_rows;
		ref_token[(size_t)pb->page[c] * pb->P + pb->token[c]] += s;
		ref_page[pb->page[c]] += s;
	}
}

static void poison_outputs(struct problem *pb)
{
	poison_f(pb->token_mass, (size_t)pb->n_pages * pb->P);
	poison_f(pb->page_mass, pb->n_pages);
	for (uint32_t i = 0; i < pb->n_pages; i++)
		pb->refresh[i] = 0xa5a5;
}

static struct mdk_cell_map map_of(const struct problem *pb)
{
	struct mdk_cell_map m = {pb->page, pb->token, pb->n_kv, pb->n_pages, pb->P};
	return m;
}

static struct mdk_probs probs_of(const struct problem *pb, const float *probs)
{
	struct mdk_probs p = {probs, pb->n_query, pb->n_head, pb->n_kv, pb->stride};
	return p;
}

static struct mdk_page_out out_of(struct problem *pb)
{
	struct mdk_page_out o = {pb->token_mass, pb->page_mass, pb->refresh};
	return o;
}

/* Float sums of n positive terms: relative error well under n·2^-24. */
static double tol_for(const struct problem *pb, double ref)
{
	double n = (double)pb->n_query * pb->n_head + 16.0;
	return ref * n * 1.2e-7 + 1e-12;
}

static void compare(const struct problem *pb, float tau, float norm_scale, const char *what)
{
	for (uint32_t i = 0; i < pb->n_pages * pb->P; i++) {
		double r = pb->ref_token[i], g = pb->token_mass[i];
		ck_assert_msg(fabs(g - r) <= tol_for(pb, r),
			      "%s: token_mass[%u] = %.9g, reference %.9g (q=%u h=%u kv=%u P=%u)" SEEDFMT,
			      what, i, g, r, pb->n_query, pb->n_head, pb->n_kv, pb->P, SEEDARG);
	}
	for (uint32_t pg = 0; pg < pb->n_pages; pg++) {
		double r = pb->ref_page[pg], g = pb->page_mass[pg];
		ck_assert_msg(fabs(g - r) <= tol_for(pb, r),
			      "%s: page_mass[%u] = %.9g, reference %.9g" SEEDFMT, what, pg, g, r,
			      SEEDARG);
		for (uint32_t k = 0; k < pb->P; k++) {
			double v = pb->ref_token[(size_t)pg * pb->P + k] * norm_scale;
			int want = v > tau, got = (pb->refresh[pg] >> k) & 1;
			if (fabs(v - tau) <= tol_for(pb, fabs(v)) + 1e-9)
				continue; /* too close to tau to call in float */
			ck_assert_msg(want == got, "%s: refresh[%u] bit %u = %d, want %d (m*s=%.9g tau=%g)"
				      SEEDFMT, what, pg, k, got, want, v, tau, SEEDARG);
		}
		ck_assert_msg((pb->refresh[pg] >> pb->P) == 0 || pb->P == 16,
			      "%s: refresh[%u] has bits past P" SEEDFMT, what, pg, SEEDARG);
	}
}

static uint32_t n_live(const struct problem *pb)
{
	uint32_t n = 0;
	for (uint32_t c = 0; c < pb->n_kv; c++)
		n += pb->page[c] >= 0;
	return n;
}

static void run_random(enum mdk_impl impl, int iters)
{
	static const uint32_t Ps[] = {16, 16, 16, 8, 4, 1, 13};
	for (int it = 0; it < iters; it++) {
		struct problem pb;
		uint32_t n_kv = 1 + rng_below(it % 3 == 0 ? 5000 : 300); /* > chunk sometimes */
		problem_init(&pb, 1 + rng_below(it % 4 == 0 ? 70 : 3), 1 + rng_below(33), n_kv,
			     Ps[rng_below(sizeof(Ps) / sizeof(Ps[0]))]);
		struct mdk_cell_map m = map_of(&pb);
		struct mdk_probs p = probs_of(&pb, pb.probs);
		struct mdk_page_out o = out_of(&pb);
		int relative = it & 1;
		float norm_scale = relative ? (float)n_live(&pb) : 1.0f;
		float tau = relative ? 1.5f : (float)(2.0 / n_kv);
		reference_add(&pb, pb.probs, 1.0, pb.ref_token, pb.ref_page);
		poison_outputs(&pb);
		int rc = mdk_page_mass(&p, &m, tau, norm_scale, &o, impl);
		ck_assert_msg(rc == 0, "mdk_page_mass(%s) = %d" SEEDFMT, mdk_impl_name(impl), rc,
			      SEEDARG);
		compare(&pb, tau, norm_scale, mdk_impl_name(impl));
		problem_free(&pb);
	}
}

START_TEST(test_scalar_random)
{
	run_random(MDK_IMPL_SCALAR, 60);
}
END_TEST

START_TEST(test_avx2_random)
{
	if (mdk_impl_best() != MDK_IMPL_AVX2) {
		fprintf(stderr, "check_kernels: CPU lacks AVX2+FMA, AVX2 case not run\n");
		struct problem pb;
		problem_init(&pb, 1, 1, 8, 16);
		struct mdk_cell_map m = map_of(&pb);
		struct mdk_probs p = probs_of(&pb, pb.probs);
		struct mdk_page_out o = out_of(&pb);
		ck_assert_int_eq(mdk_page_mass(&p, &m, 0.1f, 1.0f, &o, MDK_IMPL_AVX2), -ENOTSUP);
		problem_free(&pb);
		return;
	}
	run_random(MDK_IMPL_AVX2, 60);
}
END_TEST

START_TEST(test_auto_random)
{
	ck_assert(mdk_impl_best() == MDK_IMPL_SCALAR || mdk_impl_best() == MDK_IMPL_AVX2);
	run_random(MDK_IMPL_AUTO, 20);
}
END_TEST

/* Rows summing to 1, every cell tracked: the page masses sum to 1. */
START_TEST(test_mass_conserved)
{
	struct problem pb;
	problem_init(&pb, 3, 7, 777, 16);
	for (uint32_t c = 0; c < pb.n_kv; c++) {
		pb.page[c] = (int32_t)(c / 16);
		pb.token[c] = (uint8_t)(c % 16);
	}
	struct mdk_cell_map m = map_of(&pb);
	struct mdk_probs p = probs_of(&pb, pb.probs);
	struct mdk_page_out o = out_of(&pb);
	poison_outputs(&pb);
	ck_assert_int_eq(mdk_page_mass(&p, &m, 1.0f, 1.0f, &o, MDK_IMPL_AUTO), 0);
	double sum = 0.0;
	for (uint32_t pg = 0; pg < pb.n_pages; pg++)
		sum += pb.page_mass[pg];
	ck_assert_msg(fabs(sum - 1.0) < 1e-4, "page masses sum to %.9g" SEEDFMT, sum, SEEDARG);
	problem_free(&pb);
}
END_TEST

/* Cells with page -1 contribute nothing, however much attention they get. */
START_TEST(test_untracked_ignored)
{
	struct problem pb;
	problem_init(&pb, 2, 4, 64, 16);
	for (uint32_t c = 0; c < pb.n_kv; c++) {
		pb.page[c] = c % 2 ? -1 : (int32_t)((c / 2) / 16);
		pb.token[c] = c % 2 ? 200 : (uint8_t)((c / 2) % 16);
	}
	for (uint32_t r = 0; r < 8; r++)
		for (uint32_t c = 1; c < pb.n_kv; c += 2)
			pb.probs[(size_t)r * pb.stride + c] = 1000.0f;
	memset(pb.ref_token, 0, (size_t)pb.n_pages * pb.P * sizeof(double));
	memset(pb.ref_page, 0, pb.n_pages * sizeof(double));
	reference_add(&pb, pb.probs, 1.0, pb.ref_token, pb.ref_page);
	for (int impl = MDK_IMPL_SCALAR; impl <= (int)mdk_impl_best(); impl++) {
		struct mdk_cell_map m = map_of(&pb);
		struct mdk_probs p = probs_of(&pb, pb.probs);
		struct mdk_page_out o = out_of(&pb);
		poison_outputs(&pb);
		ck_assert_int_eq(mdk_page_mass(&p, &m, 0.01f, 1.0f, &o, (enum mdk_impl)impl), 0);
		compare(&pb, 0.01f, 1.0f, "untracked");
		for (uint32_t pg = 0; pg < pb.n_pages; pg++)
			ck_assert(pb.page_mass[pg] < 1.0f);
	}
	problem_free(&pb);
}
END_TEST

/* Per-layer accumulation with scale 1/L equals the mean over layers. */
START_TEST(test_accumulate_layers)
{
	for (int impl = MDK_IMPL_SCALAR; impl <= (int)mdk_impl_best(); impl++) {
		struct problem pb;
		problem_init(&pb, 1 + rng_below(4), 1 + rng_below(16), 1 + rng_below(2000), 16);
		const uint32_t L = 2 + rng_below(4);
		size_t n = (size_t)pb.n_query * pb.n_head * pb.stride;
		float *layer = malloc(n * sizeof(float) + sizeof(float));
		ck_assert(layer);
		struct mdk_cell_map m = map_of(&pb);
		struct mdk_page_out o = out_of(&pb);
		poison_outputs(&pb);
		mdk_page_mass_zero(&m, &o);
		for (uint32_t l = 0; l < L; l++) {
			fill_probs(&pb, layer);
			reference_add(&pb, layer, 1.0 / L, pb.ref_token, pb.ref_page);
			struct mdk_probs p = probs_of(&pb, layer);
			ck_assert_int_eq(mdk_page_mass_accumulate(&p, &m, 1.0f / (float)L, &o,
								  (enum mdk_impl)impl), 0);
		}
		float ns = (float)n_live(&pb);
		mdk_page_refresh(&m, 1.2f, ns, &o);
		compare(&pb, 1.2f, ns, "accumulate");
		free(layer);
		problem_free(&pb);
	}
}
END_TEST

/* Refresh: bit k iff token_mass * norm_scale > tau (strictly), nothing past P. */
START_TEST(test_refresh_exact)
{
	float tm[2 * 4] = {0.1f, 0.2f, 0.3f, 0.0f, 0.25f, 0.25f, 0.5f, 0.0f};
	float pm[2] = {NAN, NAN};
	uint16_t rf[2] = {0xffff, 0xffff};
	struct mdk_cell_map m = {NULL, NULL, 0, 2, 4};
	struct mdk_page_out o = {tm, pm, rf};
	mdk_page_refresh(&m, 0.5f, 2.0f, &o); /* threshold on raw mass: > 0.25 */
	ck_assert_uint_eq(rf[0], 0x4);
	ck_assert_uint_eq(rf[1], 0x4);
	ck_assert_float_eq_tol(pm[0], 0.6f, 1e-6f);
	ck_assert_float_eq_tol(pm[1], 1.0f, 1e-6f);
	mdk_page_refresh(&m, 0.5f, 1.0f, &o);
	ck_assert_uint_eq(rf[0], 0x0);
	ck_assert_uint_eq(rf[1], 0x0);
	mdk_page_refresh(&m, 0.0f, 1.0f, &o);
	ck_assert_uint_eq(rf[0], 0x7);
	ck_assert_uint_eq(rf[1], 0x7);
}
END_TEST

/* A bad map is refused before any output is written. */
START_TEST(test_invalid_map)
{
	struct problem pb;
	problem_init(&pb, 1, 2, 40, 16);
	struct mdk_probs p = probs_of(&pb, pb.probs);
	struct mdk_page_out o = out_of(&pb);
	struct mdk_cell_map m = map_of(&pb);
	int32_t saved_page = pb.page[7];
	uint8_t saved_tok = pb.token[7];

	pb.page[7] = (int32_t)pb.n_pages;
	poison_outputs(&pb);
	ck_assert_int_eq(mdk_page_mass(&p, &m, 0.1f, 1.0f, &o, MDK_IMPL_AUTO), -EINVAL);
	ck_assert(isnan(pb.token_mass[0]) && isnan(pb.page_mass[0]));
	pb.page[7] = -2;
	ck_assert_int_eq(mdk_page_mass(&p, &m, 0.1f, 1.0f, &o, MDK_IMPL_SCALAR), -EINVAL);
	pb.page[7] = 0;
	pb.token[7] = 16;
	ck_assert_int_eq(mdk_page_mass_accumulate(&p, &m, 1.0f, &o, MDK_IMPL_AUTO), -EINVAL);
	ck_assert(isnan(pb.token_mass[0]));
	pb.page[7] = saved_page;
	pb.token[7] = saved_tok;

	struct mdk_cell_map bad = m;
	bad.page_tokens = 17;
	ck_assert_int_eq(mdk_page_mass(&p, &bad, 0.1f, 1.0f, &o, MDK_IMPL_AUTO), -EINVAL);
	bad = m;
	bad.page_tokens = 0;
	ck_assert_int_eq(mdk_page_mass(&p, &bad, 0.1f, 1.0f, &o, MDK_IMPL_AUTO), -EINVAL);
	struct mdk_probs bp = p;
	bp.n_kv = p.n_kv + 1;
	ck_assert_int_eq(mdk_page_mass(&bp, &m, 0.1f, 1.0f, &o, MDK_IMPL_AUTO), -EINVAL);
	bp = p;
	bp.row_stride = p.n_kv - 1;
	ck_assert_int_eq(mdk_page_mass(&bp, &m, 0.1f, 1.0f, &o, MDK_IMPL_AUTO), -EINVAL);
	ck_assert_int_eq(mdk_page_mass(&p, &m, 0.1f, 1.0f, &o, (enum mdk_impl)9), -EINVAL);
	ck_assert_int_eq(mdk_page_mass(NULL, &m, 0.1f, 1.0f, &o, MDK_IMPL_AUTO), -EINVAL);
	ck_assert(isnan(pb.token_mass[0]));
	ck_assert_int_eq(mdk_page_mass(&p, &m, 0.1f, 1.0f, &o, MDK_IMPL_AUTO), 0);
	problem_free(&pb);
}
END_TEST

START_TEST(test_impl_names)
{
	ck_assert_str_eq(mdk_impl_name(MDK_IMPL_AUTO), "auto");
	ck_assert_str_eq(mdk_impl_name(MDK_IMPL_SCALAR), "scalar");
	ck_assert_str_eq(mdk_impl_name(MDK_IMPL_AVX2), "avx2");
	ck_assert_str_eq(mdk_impl_name((enum mdk_impl)42), "unknown");
}
END_TEST

/* ---- flash-compatible page mass ---- */

struct flash_problem {
	struct mdk_flash_in in;
	float *q, *k, *lse;
	int32_t *table;
	double *ref_page, *ref_token;
	float *page_mass, *token_mass;
};

static double flash_score(const struct flash_problem *f, uint32_t h, uint32_t page, uint32_t j)
{
	const struct mdk_flash_in *in = &f->in;
	uint32_t kvh = h / (in->n_head / in->n_kv_head);
	const float *k = f->k + (((size_t)f->table[page] * in->page_tokens + j) * in->n_kv_head + kvh) *
					 in->head_dim;
	double dot = 0.0;
	for (uint32_t e = 0; e < in->head_dim; e++)
		dot += (double)f->q[(size_t)h * in->head_dim + e] * k[e];
	return dot / sqrt((double)in->head_dim);
}

static uint32_t flash_live(const struct flash_problem *f, uint32_t page)
{
	const struct mdk_flash_in *in = &f->in;
	if (f->table[page] < 0 || (uint64_t)page * in->page_tokens >= in->n_tokens)
		return 0;
	uint32_t rest = in->n_tokens - page * in->page_tokens;
	return rest < in->page_tokens ? rest : in->page_tokens;
}

/* The reference builds the full softmax per head from scratch in double. */
static void flash_init(struct flash_problem *f, uint32_t n_head, uint32_t n_kv_head, uint32_t d,
		       uint32_t P, uint32_t n_pages, uint32_t head_step, int holes)
{
	memset(f, 0, sizeof(*f));
	struct mdk_flash_in *in = &f->in;
	in->n_head = n_head;
	in->n_kv_head = n_kv_head;
	in->head_dim = d;
	in->page_tokens = P;
	in->n_pages = n_pages;
	in->n_blocks = n_pages + 3;
	in->n_tokens = n_pages * P - rng_below(P);
	in->head_step = head_step;
	f->q = malloc((size_t)n_head * d * sizeof(float));
	f->k = malloc((size_t)in->n_blocks * P * n_kv_head * d * sizeof(float));
	f->lse = malloc(n_head * sizeof(float));
	f->table = malloc(n_pages * sizeof(int32_t));
	f->ref_page = calloc(n_pages, sizeof(double));
	f->ref_token = calloc((size_t)n_pages * P, sizeof(double));
	f->page_mass = malloc(n_pages * sizeof(float));
	f->token_mass = malloc((size_t)n_pages * P * sizeof(float));
	ck_assert(f->q && f->k && f->lse && f->table && f->ref_page && f->ref_token &&
		  f->page_mass && f->token_mass);
	/* Per-head temperature so heads differ in how peaked they are. */
	for (uint32_t h = 0; h < n_head; h++) {
		double temp = 0.5 + 3.0 * rng_unit();
		for (uint32_t e = 0; e < d; e++)
			f->q[(size_t)h * d + e] = (float)((rng_unit() * 2 - 1) * temp);
	}
	for (size_t i = 0; i < (size_t)in->n_blocks * P * n_kv_head * d; i++)
		f->k[i] = (float)(rng_unit() * 2 - 1);
	/* Pages live in shuffled blocks. */
	uint32_t *perm = malloc(in->n_blocks * sizeof(uint32_t));
	ck_assert(perm);
	for (uint32_t i = 0; i < in->n_blocks; i++)
		perm[i] = i;
	for (uint32_t i = in->n_blocks - 1; i > 0; i--) {
		uint32_t j = rng_below(i + 1), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	for (uint32_t i = 0; i < n_pages; i++)
		f->table[i] = holes && n_pages > 1 && rng_below(6) == 0 ? -1 : (int32_t)perm[i];
	free(perm);

	uint32_t step = head_step <= 1 ? 1 : head_step, used = 0;
	for (uint32_t h = 0; h < n_head; h++) {
		double mx = -INFINITY, z = 0.0;
		for (uint32_t i = 0; i < n_pages; i++)
			for (uint32_t j = 0; j < flash_live(f, i); j++)
				mx = fmax(mx, flash_score(f, h, i, j));
		for (uint32_t i = 0; i < n_pages; i++)
			for (uint32_t j = 0; j < flash_live(f, i); j++)
				z += exp(flash_score(f, h, i, j) - mx);
		f->lse[h] = (float)(mx + log(z));
		if (h % step)
			continue;
		used++;
		for (uint32_t i = 0; i < n_pages; i++)
			for (uint32_t j = 0; j < flash_live(f, i); j++) {
				double pr = exp(flash_score(f, h, i, j) - mx) / z;
				f->ref_token[(size_t)i * P + j] += pr;
				f->ref_page[i] += pr;
			}
	}
	for (uint32_t i = 0; i < n_pages; i++) {
		f->ref_page[i] /= used;
		for (uint32_t j = 0; j < P; j++)
			f->ref_token[(size_t)i * P + j] /= used;
	}
	in->q = f->q;
	in->k_cache = f->k;
	in->block_table = f->table;
	in->lse = f->lse;
}

static void flash_free(struct flash_problem *f)
{
	free(f->q);
	free(f->k);
	free(f->lse);
	free(f->table);
	free(f->ref_page);
	free(f->ref_token);
	free(f->page_mass);
	free(f->token_mass);
}

/* lse is handed over in float: ~6e-8 relative on values of a few units gives
 * ~1e-6 relative on each probability. */
static void flash_compare(const struct flash_problem *f)
{
	const struct mdk_flash_in *in = &f->in;
	double max_ref = 0.0;
	for (uint32_t i = 0; i < in->n_pages; i++)
		max_ref = fmax(max_ref, f->ref_page[i]);
	for (uint32_t i = 0; i < in->n_pages; i++) {
		double r = f->ref_page[i], g = f->page_mass[i];
		ck_assert_msg(fabs(g - r) <= 1e-5 * r + 1e-7 * max_ref,
			      "flash page_mass[%u] = %.9g, reference %.9g (h=%u kvh=%u d=%u P=%u s=%u)"
			      SEEDFMT, i, g, r, in->n_head, in->n_kv_head, in->head_dim,
			      in->page_tokens, in->head_step, SEEDARG);
		for (uint32_t j = 0; j < in->page_tokens; j++) {
			double rt = f->ref_token[(size_t)i * in->page_tokens + j];
			double gt = f->token_mass[(size_t)i * in->page_tokens + j];
			ck_assert_msg(fabs(gt - rt) <= 1e-5 * rt + 1e-7 * max_ref,
				      "flash token_mass[%u][%u] = %.9g, reference %.9g" SEEDFMT, i, j,
				      gt, rt, SEEDARG);
		}
	}
}

START_TEST(test_flash_random)
{
	static const uint32_t shapes[][3] = {{8, 8, 1}, {8, 2, 1}, {9, 3, 1}, {16, 4, 2},
					     {32, 8, 4}, {4, 1, 3}, {12, 12, 1}};
	for (int it = 0; it < 14; it++) {
		const uint32_t *s = shapes[it % 7];
		struct flash_problem f;
		uint32_t P = it % 3 == 0 ? 16 : 1 + rng_below(32);
		flash_init(&f, s[0], s[1], 8 + rng_below(64), P, 1 + rng_below(24), s[2], it & 1);
		poison_f(f.page_mass, f.in.n_pages);
		poison_f(f.token_mass, (size_t)f.in.n_pages * P);
		struct mdk_flash_out o = {f.page_mass, f.token_mass};
		ck_assert_int_eq(mdk_flash_page_mass(&f.in, &o), 0);
		flash_compare(&f);
		flash_free(&f);
	}
}
END_TEST

/* All heads, no holes: the page masses of one query sum to 1. */
START_TEST(test_flash_sums_to_one)
{
	struct flash_problem f;
	flash_init(&f, 8, 2, 64, 16, 20, 1, 0);
	struct mdk_flash_out o = {f.page_mass, NULL};
	poison_f(f.page_mass, f.in.n_pages);
	ck_assert_int_eq(mdk_flash_page_mass(&f.in, &o), 0);
	double sum = 0.0;
	for (uint32_t i = 0; i < f.in.n_pages; i++)
		sum += f.page_mass[i];
	ck_assert_msg(fabs(sum - 1.0) < 1e-5, "flash masses sum to %.9g" SEEDFMT, sum, SEEDARG);
	ck_assert_uint_eq(mdk_flash_heads_used(32, 4), 8);
	ck_assert_uint_eq(mdk_flash_heads_used(9, 4), 3);
	ck_assert_uint_eq(mdk_flash_heads_used(9, 0), 9);
	flash_free(&f);
}
END_TEST

START_TEST(test_flash_invalid)
{
	struct flash_problem f;
	flash_init(&f, 8, 2, 16, 16, 4, 1, 0);
	struct mdk_flash_out o = {f.page_mass, f.token_mass};
	struct mdk_flash_in bad = f.in;
	bad.n_kv_head = 3;
	ck_assert_int_eq(mdk_flash_page_mass(&bad, &o), -EINVAL);
	bad = f.in;
	bad.n_tokens = bad.n_pages * bad.page_tokens + 1;
	ck_assert_int_eq(mdk_flash_page_mass(&bad, &o), -EINVAL);
	f.table[2] = (int32_t)f.in.n_blocks;
	ck_assert_int_eq(mdk_flash_page_mass(&f.in, &o), -EINVAL);
	f.table[2] = -3;
	ck_assert_int_eq(mdk_flash_page_mass(&f.in, &o), -EINVAL);
	struct mdk_flash_out no = {NULL, NULL};
	f.table[2] = 0;
	ck_assert_int_eq(mdk_flash_page_mass(&f.in, &no), -EINVAL);
	ck_assert_int_eq(mdk_flash_page_mass(&f.in, &o), 0);
	flash_free(&f);
}
END_TEST

static Suite *kernels_suite(void)
{
	Suite *s = suite_create("kernels");
	TCase *tc = tcase_create("page_mass");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_scalar_random);
	tcase_add_test(tc, test_avx2_random);
	tcase_add_test(tc, test_auto_random);
	tcase_add_test(tc, test_mass_conserved);
	tcase_add_test(tc, test_untracked_ignored);
	tcase_add_test(tc, test_accumulate_layers);
	tcase_add_test(tc, test_refresh_exact);
	tcase_add_test(tc, test_invalid_map);
	tcase_add_test(tc, test_impl_names);
	suite_add_tcase(s, tc);
	TCase *tf = tcase_create("flash");
	tcase_set_timeout(tf, 120);
	tcase_add_test(tf, test_flash_random);
	tcase_add_test(tf, test_flash_sums_to_one);
	tcase_add_test(tf, test_flash_invalid);
	suite_add_tcase(s, tf);
	return s;
}

int main(void)
{
	rng_seed();
	int failed = md_test_failures(kernels_suite());
	if (failed)
		fprintf(stderr, "check_kernels: seed %llu\n", (unsigned long long)g_seed);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
