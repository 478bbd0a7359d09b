/*
 * bench_kernels.c — memdecay-bench-kernels [--json] [--quick]
 * Throughput of the CPU page-mass kernels (md_kernels.h: AVX2 and scalar) against
 * a plain scalar loop (one scatter per probability, what an adapter would write
 * first), at decode (n_query 1) and prefill-chunk (n_query 64) shapes; each
 * figure is the median over repetitions with quartiles and extremes.  Then the
 * error that head subsampling costs the flash-compatible page mass, on
 * synthetic attention with per-head temperature and shared heavy hitters.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "md_kernels.h"
#include "md_kernels_flash.h"
#include "memdecay_clock.h"

#define REPS 15

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static double urand(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (double)((rng * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand(void)
{
	double u = urand() + 1e-12, v = urand();
	return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

struct stats {
	double median, p25, p75, min, max;
};

static struct stats summarize(double *v, int n)
{
	qsort(v, n, sizeof(double), cmp_d);
	struct stats s = {v[n / 2], v[n / 4], v[(3 * n) / 4], v[0], v[n - 1]};
	return s;
}

/* The baseline: the loop one writes first — every probability scattered. */
static void baseline(const struct mdk_probs *p, const struct mdk_cell_map *m,
		     struct mdk_page_out *o)
{
	mdk_page_mass_zero(m, o);
	uint32_t n_rows = p->n_query * p->n_head;
	float inv = 1.0f / (float)n_rows;
	for (uint32_t r = 0; r < n_rows; r++) {
		const float *row = p->probs + (size_t)r * p->row_stride;
		for (uint32_t c = 0; c < p->n_kv; c++) {
			int32_t pg = m->page[c];
			if (pg < 0)
				continue;
			float v = row[c] * inv;
			o->token_mass[(size_t)pg * m->page_tokens + m->token[c]] += v;
			o->page_mass[pg] += v;
		}
	}
	mdk_page_refresh(m, 1.0f, (float)p->n_kv, o);
}

enum which { W_BASELINE, W_SCALAR, W_AVX2, W_COUNT };
static const char *which_name[W_COUNT] = {"baseline", "scalar", "avx2"};

static void run_one(enum which w, const struct mdk_probs *p, const struct mdk_cell_map *m,
		    struct mdk_page_out *o)
{
	if (w == W_BASELINE)
		baseline(p, m, o);
	else
		mdk_page_mass(p, m, 1.0f, (float)p->n_kv, o,
			      w == W_SCALAR ? MDK_IMPL_SCALAR : MDK_IMPL_AVX2);
}

struct shape {
	uint32_t n_kv, n_head, n_query;
};

static int json;
static int quick;

static void bench_shape(const struct shape *sh, int first)
{
	const uint32_t P = 16, n_rows = sh->n_head * sh->n_query, n_kv = sh->n_kv;
	const uint32_t n_pages = (n_kv + P - 1) / P;
	size_t n = (size_t)n_rows * n_kv;
	float *probs = malloc(n * sizeof(float));
	int32_t *page = malloc(n_kv * sizeof(int32_t));
	uint8_t *token = malloc(n_kv);
	float *tm[W_COUNT], *pm[W_COUNT];
	uint16_t *rf = malloc(n_pages * sizeof(uint16_t));
	for (size_t i = 0; i < n; i++)
		probs[i] = (float)(urand() * 2.0 / n_kv);
	/* Cells hold pages out of order after evictions and refills: shuffle
	 * whole pages, keep 1/16 of the cells untracked. */
	for (uint32_t c = 0; c < n_kv; c++) {
		uint32_t pg = c / P;
		page[c] = (c % 16 == 7) ? -1 : (int32_t)((pg * 2654435761u) % n_pages);
		token[c] = (uint8_t)(c % P);
	}
	for (int w = 0; w < W_COUNT; w++) {
		tm[w] = malloc((size_t)n_pages * P * sizeof(float));
		pm[w] = malloc(n_pages * sizeof(float));
	}
	struct mdk_probs p = {probs, sh->n_query, sh->n_head, n_kv, n_kv};
	struct mdk_cell_map m = {page, token, n_kv, n_pages, P};
	double bytes = (double)n * 4 + n_kv * 5.0 + n_pages * (P * 4.0 + 4 + 2);
	int have_avx2 = mdk_impl_best() == MDK_IMPL_AVX2;

	struct stats st[W_COUNT];
	double max_dev = 0.0;
	for (int w = 0; w < W_COUNT; w++) {
		if (w == W_AVX2 && !have_avx2)
			continue;
		struct mdk_page_out o = {tm[w], pm[w], rf};
		run_one((enum which)w, &p, &m, &o);
		/* Calls per repetition: about 20 ms worth (5 ms with --quick). */
		double t0 = (double)md_now_ns();
		run_one((enum which)w, &p, &m, &o);
		double one = (double)md_now_ns() - t0;
		double target = quick ? 5e6 : 2e7;
		int calls = one > 0 ? (int)(target / one) : 1000;
		if (calls < 1)
			calls = 1;
		double v[REPS];
		for (int r = 0; r < REPS; r++) {
			double a = (double)md_now_ns();
			for (int i = 0; i < calls; i++)
				run_one((enum which)w, &p, &m, &o);
			v[r] = ((double)md_now_ns() - a) / calls;
		}
		st[w] = summarize(v, REPS);
		if (w != W_BASELINE)
			for (uint32_t i = 0; i < n_pages; i++)
				max_dev = fmax(max_dev, fabs(pm[w][i] - pm[0][i]) /
								(fabs(pm[0][i]) + 1e-12));
	}

	if (json) {
		printf("%s\n    {\"n_kv\": %u, \"n_head\": %u, \"n_query\": %u, \"page_tokens\": %u, "
		       "\"bytes_per_call\": %.0f, \"max_rel_dev_vs_baseline\": %.3g, \"impls\": {",
		       first ? "" : ",", n_kv, sh->n_head, sh->n_query, P, bytes, max_dev);
		int f = 1;
		for (int w = 0; w < W_COUNT; w++) {
			if (w == W_AVX2 && !have_avx2)
				continue;
			printf("%s\n      \"%s\": {\"median_ns\": %.0f, \"p25_ns\": %.0f, \"p75_ns\": "
			       "%.0f, \"min_ns\": %.0f, \"max_ns\": %.0f, \"gbps\": %.2f, "
			       "\"speedup_vs_baseline\": %.2f}",
			       f ? "" : ",", which_name[w], st[w].median, st[w].p25, st[w].p75,
			       st[w].min, st[w].max, bytes / st[w].median,
			       st[W_BASELINE].median / st[w].median);
			f = 0;
		}
		printf("}}");
	} else {
		for (int w = 0; w < W_COUNT; w++) {
			if (w == W_AVX2 && !have_avx2)
				continue;
			printf("n_kv %6u n_head %2u n_query %2u  %-8s %12.0f ns  [%.0f..%.0f]  %6.2f GB/s"
			       "  x%.2f\n",
			       n_kv, sh->n_head, sh->n_query, which_name[w], st[w].median, st[w].p25,
			       st[w].p75, bytes / st[w].median, st[W_BASELINE].median / st[w].median);
		}
	}
	fflush(stdout);
	free(probs), free(page), free(token), free(rf);
	for (int w = 0; w < W_COUNT; w++)
		free(tm[w]), free(pm[w]);
}

/* Synthetic attention for one decode query: tokens carry a heavy-tailed weight
 * on a shared direction, heads differ in how strongly they look at it and in
 * temperature.  Returns the page masses for a given head step. */
struct flash_case {
	struct mdk_flash_in in;
	float *q, *k, *lse;
	int32_t *table;
};

static void flash_case_init(struct flash_case *f, uint32_t n_head, uint32_t n_kv_head,
			    uint32_t d, uint32_t n_tokens)
{
	const uint32_t P = 16, n_pages = (n_tokens + P - 1) / P;
	memset(f, 0, sizeof(*f));
	f->q = malloc((size_t)n_head * d * 4);
	f->k = malloc((size_t)n_pages * P * n_kv_head * d * 4);
	f->lse = malloc(n_head * 4);
	f->table = malloc(n_pages * 4);
	float *u = malloc(d * 4);
	double un = 0.0;
	for (uint32_t e = 0; e < d; e++) {
		u[e] = (float)nrand();
		un += (double)u[e] * u[e];
	}
	for (uint32_t e = 0; e < d; e++)
		u[e] = (float)(u[e] / sqrt(un)); /* unit vector */
	for (uint32_t t = 0; t < n_pages * P; t++) {
		double a = urand() < 0.05 ? 2.0 + 6.0 * urand() : 0.5 * nrand();
		for (uint32_t g = 0; g < n_kv_head; g++)
			for (uint32_t e = 0; e < d; e++)
				f->k[((size_t)t * n_kv_head + g) * d + e] =
					(float)(nrand() + 2.0 * a * u[e] * (1.0 + 0.3 * g));
	}
	for (uint32_t h = 0; h < n_head; h++) {
		double focus = 3.0 * urand(), temp = 0.3 + 0.7 * urand();
		for (uint32_t e = 0; e < d; e++)
			f->q[(size_t)h * d + e] = (float)(temp * (nrand() + 2.0 * focus * u[e]));
	}
	free(u);
	for (uint32_t i = 0; i < n_pages; i++)
		f->table[i] = (int32_t)i;
	struct mdk_flash_in in = {f->q, f->k, f->table, f->lse, n_head, n_kv_head, d, P,
				  n_pages, n_pages, n_tokens, 1, 0.0f};
	f->in = in;
	/* lse per head, in double, straight from the scores. */
	uint32_t group = n_head / n_kv_head;
	double scale = 1.0 / sqrt((double)d);
	double *sc = malloc(n_tokens * sizeof(double));
	for (uint32_t h = 0; h < n_head; h++) {
		double mx = -INFINITY, z = 0.0;
		for (uint32_t t = 0; t < n_tokens; t++) {
			const float *kt = f->k + ((size_t)t * n_kv_head + h / group) * d;
			double dot = 0.0;
			for (uint32_t e = 0; e < d; e++)
				dot += (double)f->q[(size_t)h * d + e] * kt[e];
			sc[t] = dot * scale;
			mx = fmax(mx, sc[t]);
		}
		for (uint32_t t = 0; t < n_tokens; t++)
			z += exp(sc[t] - mx);
		f->lse[h] = (float)(mx + log(z));
	}
	free(sc);
}

static void flash_subsample(void)
{
	struct flash_case f;
	const uint32_t n_head = 32, n_kv_head = 8, d = 128, n_tokens = quick ? 1024 : 4096;
	flash_case_init(&f, n_head, n_kv_head, d, n_tokens);
	uint32_t n_pages = f.in.n_pages;
	float *full = malloc(n_pages * 4), *sub = malloc(n_pages * 4);
	struct mdk_flash_out o = {full, NULL};
	double t0 = (double)md_now_ns();
	mdk_flash_page_mass(&f.in, &o);
	double full_ns = (double)md_now_ns() - t0;
	double sum = 0;
	for (uint32_t i = 0; i < n_pages; i++)
		sum += full[i];
	if (json)
		printf(",\n  \"flash_cpu_reference\": {\"n_head\": %u, \"n_kv_head\": %u, "
		       "\"head_dim\": %u, \"n_tokens\": %u, \"ns_per_call\": %.0f, "
		       "\"mass_sum\": %.6f},\n  \"flash_subsample\": [",
		       n_head, n_kv_head, d, n_tokens, full_ns, sum);
	else
		printf("flash CPU reference: h %u kvh %u d %u tokens %u: %.0f ns, mass sum %.6f\n",
		       n_head, n_kv_head, d, n_tokens, full_ns, sum);
	static const uint32_t steps[] = {2, 4, 8};
	uint32_t bottom = n_pages / 10;
	int *rank_full = malloc(n_pages * sizeof(int)), *rank_sub = malloc(n_pages * sizeof(int));
	for (int si = 0; si < 3; si++) {
		struct mdk_flash_in in = f.in;
		in.head_step = steps[si];
		struct mdk_flash_out os = {sub, NULL};
		mdk_flash_page_mass(&in, &os);
		double l1 = 0, l1ref = 0, maxrel = 0;
		for (uint32_t i = 0; i < n_pages; i++) {
			l1 += fabs(sub[i] - full[i]);
			l1ref += full[i];
			maxrel = fmax(maxrel, fabs(sub[i] - full[i]) / (full[i] + 1e-30));
		}
		/* Eviction sees the lowest pages: overlap of the bottom 10% sets. */
		for (uint32_t i = 0; i < n_pages; i++)
			rank_full[i] = rank_sub[i] = 0;
		for (uint32_t i = 0; i < n_pages; i++)
			for (uint32_t j = 0; j < n_pages; j++) {
				rank_full[i] += full[j] < full[i];
				rank_sub[i] += sub[j] < sub[i];
			}
		uint32_t both = 0;
		for (uint32_t i = 0; i < n_pages; i++)
			both += (uint32_t)rank_full[i] < bottom && (uint32_t)rank_sub[i] < bottom;
		double overlap = bottom ? (double)both / bottom : 1.0;
		if (json)
			printf("%s\n    {\"head_step\": %u, \"heads_used\": %u, \"l1_rel_err\": %.4f, "
			       "\"max_page_rel_err\": %.3f, \"bottom10_overlap\": %.3f}",
			       si ? "," : "", steps[si], mdk_flash_heads_used(n_head, steps[si]),
			       l1 / l1ref, maxrel, overlap);
		else
			printf("flash head_step %u (%u heads): L1 rel err %.4f, max page rel err %.3f, "
			       "bottom-10%% overlap %.3f\n",
			       steps[si], mdk_flash_heads_used(n_head, steps[si]), l1 / l1ref, maxrel,
			       overlap);
	}
	if (json)
		printf("\n  ]");
	free(rank_full), free(rank_sub), free(full), free(sub);
	free(f.q), free(f.k), free(f.lse), free(f.table);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else {
			fprintf(stderr, "usage: %s [--json] [--quick]\n", argv[0]);
			return 2;
		}
	}
	static const struct shape shapes[] = {
		{4096, 9, 1}, {4096, 32, 1}, {32768, 9, 1}, {32768, 32, 1},
		{4096, 9, 64}, {4096, 32, 64}, {32768, 16, 64},
	};
	size_t n_shapes = sizeof(shapes) / sizeof(shapes[0]);
	if (quick)
		n_shapes = 3;
	if (json)
		printf("{\n  \"bench\": \"kernels\",\n  \"best_impl\": \"%s\",\n  \"reps\": %d,\n"
		       "  \"units\": \"ns per call (median, p25, p75, min, max); gbps = bytes moved"
		       " / median\",\n  \"page_mass\": [",
		       mdk_impl_name(mdk_impl_best()), REPS);
	for (size_t i = 0; i < n_shapes; i++)
		bench_shape(&shapes[i], i == 0);
	if (json)
		printf("\n  ]");
	flash_subsample();
	if (json)
		printf("\n}\n");
	return 0;
}
