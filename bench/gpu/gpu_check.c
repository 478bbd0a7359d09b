/*
 * gpu_check.c — memdecay-gpu-check: the CUDA page-mass kernels against the CPU
 * implementations (relative error, fp32, limit 1e-5) and their time against
 * the memory-bandwidth floor: bytes the kernel must move divided by the
 * device-to-device copy bandwidth measured in the same run.  Prints one
 * "RESULT key=value …" line per measurement for bench/gpu/run.sh; exit 1 when
 * a check fails, 2 when there is no device.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md_kernels_cuda.h"

#define CK(x)                                                                              \
	do {                                                                               \
		cudaError_t e_ = (x);                                                      \
		if (e_ != cudaSuccess) {                                                   \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,         \
				cudaGetErrorString(e_));                                   \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

static const double REL_ERR_MAX = 1e-5;
static int failures;
static uint64_t rng = 0x243F6A8885A308D3ULL;

static double urand(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (double)((rng * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0);
}

static int cmp_f(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

static void *dmalloc(size_t n)
{
	void *p = NULL;
	CK(cudaMalloc(&p, n ? n : 1));
	return p;
}

static void *dcopy(const void *h, size_t n)
{
	void *d = dmalloc(n);
	CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
	return d;
}

/* Device copy bandwidth: a copy reads and writes each byte, so 2·bytes/time. */
static double measure_bandwidth_gbps(void)
{
	size_t bytes = (size_t)1 << 30;
	void *a = dmalloc(bytes), *b = dmalloc(bytes);
	CK(cudaMemset(a, 1, bytes));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	float best = 1e30f;
	for (int i = 0; i < 10; i++) {
		CK(cudaEventRecord(e0, 0));
		CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (i > 0 && ms < best)
			best = ms;
	}
	cudaFree(a);
	cudaFree(b);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return 2.0 * bytes / (best * 1e-3) / 1e9;
}

typedef int (*launch_fn)(void *ctx);

/* Median kernel time in microseconds over reps launches. */
static double time_us(launch_fn fn, void *ctx, int reps)
{
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	float *v = malloc(reps * sizeof(float));
	for (int i = 0; i < 3; i++)
		fn(ctx);
	for (int i = 0; i < reps; i++) {
		CK(cudaEventRecord(e0, 0));
		if (fn(ctx) != 0) {
			fprintf(stderr, "launch failed: %s\n", mdk_cuda_last_error());
			exit(1);
		}
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&v[i], e0, e1));
	}
	qsort(v, reps, sizeof(float), cmp_f);
	double med = v[reps / 2] * 1e3;
	free(v);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return med;
}

/* max |gpu − cpu| / max |cpu|: per-element relative error is meaningless for
 * pages with next to no mass. */
static double rel_err(const float *g, const float *c, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(g[i]))
			return INFINITY;
		num = fmax(num, fabs((double)g[i] - c[i]));
		den = fmax(den, fabs((double)c[i]));
	}
	return den > 0 ? num / den : num;
}

struct pm_ctx {
	struct mdk_probs p;
	struct mdk_cell_map m;
	struct mdk_page_out o;
};

static int pm_launch(void *v)
{
	struct pm_ctx *c = v;
	return mdk_cuda_page_mass(&c->p, &c->m, 1.0f, (float)c->m.n_kv, &c->o, NULL);
}

static void check_page_mass(uint32_t n_kv, uint32_t n_head, uint32_t n_query, double bw)
{
	const uint32_t P = 16, n_pages = (n_kv + P - 1) / P, n_rows = n_head * n_query;
	size_t n = (size_t)n_rows * n_kv;
	float *probs = malloc(n * 4);
	int32_t *page = malloc(n_kv * 4);
	uint8_t *token = malloc(n_kv);
	for (size_t i = 0; i < n; i++)
		probs[i] = (float)(urand() * 2.0 / n_kv);
	for (uint32_t c = 0; c < n_kv; c++) {
		page[c] = c % 16 == 7 ? -1 : (int32_t)(((c / P) * 2654435761u) % n_pages);
		token[c] = (uint8_t)(c % P);
	}
	float *tm = malloc((size_t)n_pages * P * 4), *pm = malloc(n_pages * 4);
	uint16_t *rf = malloc(n_pages * 2);
	struct mdk_probs hp = {probs, n_query, n_head, n_kv, n_kv};
	struct mdk_cell_map hm = {page, token, n_kv, n_pages, P};
	struct mdk_page_out ho = {tm, pm, rf};
	(void)ho;
	/* The reference: a naive double loop (the CPU kernel's own float error
	 * would otherwise count against the GPU). */
	{
		double *acc = calloc((size_t)n_pages * P, sizeof(double));
		for (uint32_t r = 0; r < n_rows; r++)
			for (uint32_t c2 = 0; c2 < n_kv; c2++)
				if (page[c2] >= 0)
					acc[(size_t)page[c2] * P + token[c2]] += probs[(size_t)r * n_kv + c2];
		for (uint32_t i = 0; i < n_pages; i++) {
			double s = 0;
			rf[i] = 0;
			for (uint32_t k2 = 0; k2 < P; k2++) {
				double v = acc[(size_t)i * P + k2] / n_rows;
				tm[(size_t)i * P + k2] = (float)v;
				s += v;
				if ((float)v * (float)n_kv > 1.0f)
					rf[i] |= (uint16_t)(1u << k2);
			}
			pm[i] = (float)s;
		}
		free(acc);
	}

	struct pm_ctx c;
	c.p = hp;
	c.p.probs = dcopy(probs, n * 4);
	c.m = hm;
	c.m.page = dcopy(page, n_kv * 4);
	c.m.token = dcopy(token, n_kv);
	c.o.token_mass = dmalloc((size_t)n_pages * P * 4);
	c.o.page_mass = dmalloc(n_pages * 4);
	c.o.refresh = dmalloc(n_pages * 2);
	CK(cudaMemset(c.o.token_mass, 0xff, (size_t)n_pages * P * 4));
	CK(cudaMemset(c.o.page_mass, 0xff, n_pages * 4));
	if (pm_launch(&c) != 0) {
		fprintf(stderr, "mdk_cuda_page_mass: %s\n", mdk_cuda_last_error());
		exit(1);
	}
	CK(cudaDeviceSynchronize());
	float *gtm = malloc((size_t)n_pages * P * 4), *gpm = malloc(n_pages * 4);
	uint16_t *grf = malloc(n_pages * 2);
	CK(cudaMemcpy(gtm, c.o.token_mass, (size_t)n_pages * P * 4, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(gpm, c.o.page_mass, n_pages * 4, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(grf, c.o.refresh, n_pages * 2, cudaMemcpyDeviceToHost));
	double err = fmax(rel_err(gtm, tm, (size_t)n_pages * P), rel_err(gpm, pm, n_pages));
	uint32_t bit_diff = 0;
	for (uint32_t i = 0; i < n_pages; i++)
		for (uint32_t k = 0; k < P; k++)
			if (((grf[i] ^ rf[i]) >> k & 1) && fabsf(tm[i * P + k] * n_kv - 1.0f) > 1e-4f)
				bit_diff++;
	int ok = err <= REL_ERR_MAX && bit_diff == 0;
	failures += !ok;
	double us = time_us(pm_launch, &c, 50);
	/* Tracked cells only are read (1/16 are untracked), plus map and outputs. */
	double bytes = (double)n * 4 * 15 / 16 + n_kv * 5.0 + n_pages * (P * 4.0 * 2 + 4 + 2);
	double floor_us = bytes / (bw * 1e9) * 1e6;
	printf("RESULT kernel=page_mass shape=kv%u_h%u_q%u rel_err=%.2e ok=%d median_us=%.2f "
	       "floor_us=%.2f frac_of_floor=%.2f gbps=%.1f\n",
	       n_kv, n_head, n_query, err, ok, us, floor_us, floor_us / us, bytes / (us * 1e3));
	fflush(stdout);
	cudaFree((void *)c.p.probs), cudaFree((void *)c.m.page), cudaFree((void *)c.m.token);
	cudaFree(c.o.token_mass), cudaFree(c.o.page_mass), cudaFree(c.o.refresh);
	free(probs), free(page), free(token), free(tm), free(pm), free(rf), free(gtm), free(gpm),
		free(grf);
}

struct fl_ctx {
	struct mdk_flash_in in;
	struct mdk_flash_out out;
};

static int fl_launch(void *v)
{
	struct fl_ctx *c = v;
	return mdk_cuda_flash_page_mass(&c->in, &c->out, NULL);
}

static void check_flash(uint32_t n_head, uint32_t n_kv_head, uint32_t d, uint32_t n_tokens,
			uint32_t step, double bw)
{
	const uint32_t P = 16, n_pages = (n_tokens + P - 1) / P, n_blocks = n_pages + 7;
	size_t nk = (size_t)n_blocks * P * n_kv_head * d;
	float *q = malloc((size_t)n_head * d * 4), *k = malloc(nk * 4), *lse = malloc(n_head * 4);
	int32_t *table = malloc(n_pages * 4);
	for (size_t i = 0; i < (size_t)n_head * d; i++)
		q[i] = (float)(urand() * 2 - 1);
	for (size_t i = 0; i < nk; i++)
		k[i] = (float)(urand() * 2 - 1);
	for (uint32_t i = 0; i < n_pages; i++)
		table[i] = (int32_t)((i * 40503u) % n_blocks);
	/* lse in double from the scores themselves. */
	const uint32_t group = n_head / n_kv_head;
	const double scale = 1.0 / sqrt((double)d);
	double *sc = malloc(n_tokens * sizeof(double));
	for (uint32_t h = 0; h < n_head; h++) {
		double mx = -INFINITY, z = 0;
		for (uint32_t t = 0; t < n_tokens; t++) {
			const float *kt = k + (((size_t)table[t / P] * P + t % P) * n_kv_head + h / group) * d;
			double dot = 0;
			for (uint32_t e = 0; e < d; e++)
				dot += (double)q[(size_t)h * d + e] * kt[e];
			sc[t] = dot * scale;
			mx = fmax(mx, sc[t]);
		}
		for (uint32_t t = 0; t < n_tokens; t++)
			z += exp(sc[t] - mx);
		lse[h] = (float)(mx + log(z));
	}
	free(sc);
	struct mdk_flash_in in = {q, k, table, lse, n_head, n_kv_head, d, P, n_blocks, n_pages,
				  n_tokens, step, 0.0f};
	float *pm = malloc(n_pages * 4), *tm = malloc((size_t)n_pages * P * 4);
	struct mdk_flash_out ho = {pm, tm};
	mdk_flash_page_mass(&in, &ho);

	struct fl_ctx c;
	c.in = in;
	c.in.q = dcopy(q, (size_t)n_head * d * 4);
	c.in.k_cache = dcopy(k, nk * 4);
	c.in.block_table = dcopy(table, n_pages * 4);
	c.in.lse = dcopy(lse, n_head * 4);
	c.out.page_mass = dmalloc(n_pages * 4);
	c.out.token_mass = dmalloc((size_t)n_pages * P * 4);
	CK(cudaMemset(c.out.page_mass, 0xff, n_pages * 4));
	CK(cudaMemset(c.out.token_mass, 0xff, (size_t)n_pages * P * 4));
	if (fl_launch(&c) != 0) {
		fprintf(stderr, "mdk_cuda_flash_page_mass: %s\n", mdk_cuda_last_error());
		exit(1);
	}
	CK(cudaDeviceSynchronize());
	float *gpm = malloc(n_pages * 4), *gtm = malloc((size_t)n_pages * P * 4);
	CK(cudaMemcpy(gpm, c.out.page_mass, n_pages * 4, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(gtm, c.out.token_mass, (size_t)n_pages * P * 4, cudaMemcpyDeviceToHost));
	double err = fmax(rel_err(gpm, pm, n_pages), rel_err(gtm, tm, (size_t)n_pages * P));
	int ok = err <= REL_ERR_MAX;
	failures += !ok;
	double us = time_us(fl_launch, &c, 30);
	/* Floor: every live token's K row for every kv head, read once. */
	double bytes = (double)n_tokens * n_kv_head * d * 4 + n_pages * (4.0 + 4 + P * 4.0);
	double floor_us = bytes / (bw * 1e9) * 1e6;
	printf("RESULT kernel=flash_page_mass shape=h%u_kvh%u_d%u_t%u_s%u rel_err=%.2e ok=%d "
	       "median_us=%.2f floor_us=%.2f frac_of_floor=%.2f gbps=%.1f\n",
	       n_head, n_kv_head, d, n_tokens, step, err, ok, us, floor_us, floor_us / us,
	       bytes / (us * 1e3));
	fflush(stdout);
	cudaFree((void *)c.in.q), cudaFree((void *)c.in.k_cache), cudaFree((void *)c.in.block_table);
	cudaFree((void *)c.in.lse), cudaFree(c.out.page_mass), cudaFree(c.out.token_mass);
	free(q), free(k), free(lse), free(table), free(pm), free(tm), free(gpm), free(gtm);
}

int main(int argc, char **argv)
{
	int quick = argc > 1 && !strcmp(argv[1], "--quick");
	int n = 0;
	if (mdk_cuda_probe(&n) != 0) {
		fprintf(stderr, "memdecay-gpu-check: %s\n", mdk_cuda_last_error());
		return 2;
	}
	struct cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	double bw = measure_bandwidth_gbps();
	printf("RESULT kernel=device name=\"%s\" sm=%d.%d copy_gbps=%.1f\n", prop.name, prop.major,
	       prop.minor, bw);
	fflush(stdout);
	check_page_mass(4096, 32, 1, bw);
	check_page_mass(32768, 32, 1, bw);
	check_page_mass(32768, 32, 64, bw);
	if (!quick)
		check_page_mass(131072, 64, 16, bw);
	check_flash(32, 8, 128, 4096, 1, bw);
	check_flash(32, 8, 128, 32768, 1, bw);
	check_flash(32, 8, 128, 32768, 4, bw);
	if (!quick)
		check_flash(64, 8, 128, 131072, 1, bw);
	printf("RESULT kernel=summary failures=%d\n", failures);
	return failures ? 1 : 0;
}
