/*
 * check_kernels_cuda.c — md_kernels_cuda.h.  Without a device (the CI case) every
 * entry point must fail cleanly: -ENODEV and a message quoting what
 * cudaGetDeviceCount said, -EINVAL for bad geometry before the device is even
 * asked.  With a device (MEMDECAY_EXPECT_GPU=1 makes one mandatory) the kernels
 * are compared with the CPU implementations on random inputs.
 */
#include <check.h>
#include "test_util.h"
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "md_kernels_cuda.h"

static unsigned long long g_seed;

static double urand(void)
{
	return (double)rand() / ((double)RAND_MAX + 1.0);
}

static int have_device(void)
{
	int n = 0;
	int rc = mdk_cuda_probe(&n);
	const char *want = getenv("MEMDECAY_EXPECT_GPU");
	if (want && *want == '1')
		ck_assert_msg(rc == 0 && n > 0, "MEMDECAY_EXPECT_GPU=1 but: %s", mdk_cuda_last_error());
	return rc == 0;
}

START_TEST(test_probe_reports_cleanly)
{
	ck_assert(mdk_cuda_built());
	int n = -1;
	int rc = mdk_cuda_probe(&n);
	if (rc == 0) {
		ck_assert_int_gt(n, 0);
		return;
	}
	ck_assert_int_eq(rc, -ENODEV);
	ck_assert_int_eq(n, 0);
	ck_assert_ptr_nonnull(strstr(mdk_cuda_last_error(), "cudaGetDeviceCount"));
	fprintf(stderr, "check_kernels_cuda: no device (%s)\n", mdk_cuda_last_error());
}
END_TEST

START_TEST(test_no_device_entry_points)
{
	if (have_device())
		return;
	int32_t page[4] = {0, 0, 1, -1};
	uint8_t token[4] = {0, 1, 0, 0};
	float probs[4] = {0.25f, 0.25f, 0.25f, 0.25f}, tm[32], pm[2];
	uint16_t rf[2];
	struct mdk_cell_map m = {page, token, 4, 2, 16};
	struct mdk_probs p = {probs, 1, 1, 4, 4};
	struct mdk_page_out o = {tm, pm, rf};
	ck_assert_int_eq(mdk_cuda_page_mass(&p, &m, 0.1f, 1.0f, &o, NULL), -ENODEV);
	ck_assert_ptr_nonnull(strstr(mdk_cuda_last_error(), "no usable CUDA device"));
	ck_assert_int_eq(mdk_cuda_page_mass_zero(&m, &o, NULL), -ENODEV);
	ck_assert_int_eq(mdk_cuda_page_mass_accumulate(&p, &m, 1.0f, &o, NULL), -ENODEV);
	ck_assert_int_eq(mdk_cuda_page_refresh(&m, 0.1f, 1.0f, &o, NULL), -ENODEV);
	float q[8] = {0}, k[16 * 8] = {0}, lse[1] = {0};
	int32_t table[1] = {0};
	struct mdk_flash_in in = {q, k, table, lse, 1, 1, 8, 16, 1, 1, 16, 1, 0.0f};
	struct mdk_flash_out fo = {pm, NULL};
	ck_assert_int_eq(mdk_cuda_flash_page_mass(&in, &fo, NULL), -ENODEV);
	/* Still clean on the second ask (nothing cached as broken). */
	ck_assert_int_eq(mdk_cuda_probe(NULL), -ENODEV);
}
END_TEST

START_TEST(test_bad_geometry_first)
{
	struct mdk_cell_map m = {NULL, NULL, 4, 2, 17};
	struct mdk_probs p = {NULL, 1, 1, 4, 4};
	float tm[1];
	struct mdk_page_out o = {tm, NULL, NULL};
	ck_assert_int_eq(mdk_cuda_page_mass(&p, &m, 0.1f, 1.0f, &o, NULL), -EINVAL);
	m.page_tokens = 16;
	p.row_stride = 3;
	ck_assert_int_eq(mdk_cuda_page_mass_accumulate(&p, &m, 1.0f, &o, NULL), -EINVAL);
	struct mdk_flash_in in;
	memset(&in, 0, sizeof(in));
	in.n_head = 6;
	in.n_kv_head = 4;
	struct mdk_flash_out fo = {tm, NULL};
	ck_assert_int_eq(mdk_cuda_flash_page_mass(&in, &fo, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(mdk_cuda_last_error(), "bad geometry"));
}
END_TEST

/* ---- with a device: GPU against the CPU implementations ---- */

static void *dev_copy(const void *host, size_t bytes)
{
	void *d = NULL;
	ck_assert_int_eq(cudaMalloc(&d, bytes ? bytes : 1), cudaSuccess);
	if (host && bytes)
		ck_assert_int_eq(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
	return d;
}

START_TEST(test_gpu_page_mass)
{
	if (!have_device())
		return;
	const uint32_t nq = 4, nh = 12, nkv = 3001, P = 16, npg = (nkv + P - 1) / P, stride = 3008;
	float *probs = malloc((size_t)nq * nh * stride * sizeof(float));
	int32_t *page = malloc(nkv * sizeof(int32_t));
	uint8_t *token = malloc(nkv);
	for (uint32_t r = 0; r < nq * nh; r++) {
		double s = 0;
		for (uint32_t c = 0; c < nkv; c++)
			s += probs[(size_t)r * stride + c] = (float)urand();
		for (uint32_t c = 0; c < nkv; c++)
			probs[(size_t)r * stride + c] /= (float)s;
	}
	for (uint32_t c = 0; c < nkv; c++) {
		page[c] = c % 11 == 3 ? -1 : (int32_t)((nkv - 1 - c) / P);
		token[c] = (uint8_t)((nkv - 1 - c) % P);
	}
	float *tm = malloc(npg * P * sizeof(float)), *pm = malloc(npg * sizeof(float));
	uint16_t *rf = malloc(npg * sizeof(uint16_t));
	struct mdk_cell_map m = {page, token, nkv, npg, P};
	struct mdk_probs p = {probs, nq, nh, nkv, stride};
	struct mdk_page_out o = {tm, pm, rf};
	ck_assert_int_eq(mdk_page_mass(&p, &m, 1.5f, (float)nkv, &o, MDK_IMPL_SCALAR), 0);

	struct mdk_cell_map dm = {dev_copy(page, nkv * 4), dev_copy(token, nkv), nkv, npg, P};
	struct mdk_probs dp = {dev_copy(probs, (size_t)nq * nh * stride * 4), nq, nh, nkv, stride};
	struct mdk_page_out dout = {dev_copy(NULL, npg * P * 4), dev_copy(NULL, npg * 4),
				    dev_copy(NULL, npg * 2)};
	ck_assert_int_eq(cudaMemset(dout.token_mass, 0xff, npg * P * 4), cudaSuccess); /* NaN */
	ck_assert_int_eq(mdk_cuda_page_mass(&dp, &dm, 1.5f, (float)nkv, &dout, NULL), 0);
	ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
	float *gtm = malloc(npg * P * 4), *gpm = malloc(npg * 4);
	uint16_t *grf = malloc(npg * 2);
	cudaMemcpy(gtm, dout.token_mass, npg * P * 4, cudaMemcpyDeviceToHost);
	cudaMemcpy(gpm, dout.page_mass, npg * 4, cudaMemcpyDeviceToHost);
	cudaMemcpy(grf, dout.refresh, npg * 2, cudaMemcpyDeviceToHost);
	for (uint32_t i = 0; i < npg * P; i++)
		ck_assert_msg(fabsf(gtm[i] - tm[i]) <= 1e-5f * fabsf(tm[i]) + 1e-12f,
			      "token %u: gpu %.9g cpu %.9g (seed %llu)", i, gtm[i], tm[i], g_seed);
	for (uint32_t i = 0; i < npg; i++) {
		ck_assert_msg(fabsf(gpm[i] - pm[i]) <= 1e-5f * fabsf(pm[i]) + 1e-12f,
			      "page %u: gpu %.9g cpu %.9g", i, gpm[i], pm[i]);
		for (uint32_t k = 0; k < P; k++)
			if (fabsf(tm[i * P + k] * nkv - 1.5f) > 1e-4f)
				ck_assert_uint_eq((grf[i] >> k) & 1, (rf[i] >> k) & 1);
	}
	cudaFree((void *)dm.page);
	cudaFree((void *)dm.token);
	cudaFree((void *)dp.probs);
	cudaFree(dout.token_mass);
	cudaFree(dout.page_mass);
	cudaFree(dout.refresh);
	free(probs), free(page), free(token), free(tm), free(pm), free(rf), free(gtm), free(gpm),
		free(grf);
}
END_TEST

START_TEST(test_gpu_flash)
{
	if (!have_device())
		return;
	const uint32_t nh = 16, nkvh = 4, d = 128, P = 16, npg = 100, nblk = 130;
	float *q = malloc(nh * d * 4), *k = malloc((size_t)nblk * P * nkvh * d * 4);
	float *lse = malloc(nh * 4);
	int32_t *table = malloc(npg * 4);
	for (uint32_t i = 0; i < nh * d; i++)
		q[i] = (float)(urand() * 2 - 1);
	for (size_t i = 0; i < (size_t)nblk * P * nkvh * d; i++)
		k[i] = (float)(urand() * 2 - 1);
	for (uint32_t i = 0; i < npg; i++)
		table[i] = i % 17 == 5 ? -1 : (int32_t)((i * 37) % nblk);
	struct mdk_flash_in in = {q, k, table, lse, nh, nkvh, d, P, nblk, npg, npg * P - 5, 1, 0};
	/* lse from the CPU reference's own probabilities with lse = 0. */
	for (uint32_t h = 0; h < nh; h++)
		lse[h] = 0.0f;
	float *pm = malloc(npg * 4), *tm = malloc(npg * P * 4);
	struct mdk_flash_out o = {pm, tm};
	for (uint32_t h = 0; h < nh; h++) {
		struct mdk_flash_in one = in;
		one.q = q + h * d;
		one.n_head = 1;
		one.n_kv_head = 1;
		float *kh = malloc((size_t)nblk * P * d * 4);
		for (size_t t = 0; t < (size_t)nblk * P; t++)
			memcpy(kh + t * d, k + (t * nkvh + h / (nh / nkvh)) * d, d * 4);
		one.k_cache = kh;
		ck_assert_int_eq(mdk_flash_page_mass(&one, &o), 0);
		double z = 0;
		for (uint32_t i = 0; i < npg; i++)
			z += pm[i];
		lse[h] = (float)log(z);
		free(kh);
	}
	ck_assert_int_eq(mdk_flash_page_mass(&in, &o), 0);
	struct mdk_flash_in din = in;
	din.q = dev_copy(q, nh * d * 4);
	din.k_cache = dev_copy(k, (size_t)nblk * P * nkvh * d * 4);
	din.block_table = dev_copy(table, npg * 4);
	din.lse = dev_copy(lse, nh * 4);
	struct mdk_flash_out dout = {dev_copy(NULL, npg * 4), dev_copy(NULL, npg * P * 4)};
	ck_assert_int_eq(mdk_cuda_flash_page_mass(&din, &dout, NULL), 0);
	ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
	float *gpm = malloc(npg * 4);
	cudaMemcpy(gpm, dout.page_mass, npg * 4, cudaMemcpyDeviceToHost);
	float mx = 0;
	for (uint32_t i = 0; i < npg; i++)
		mx = fmaxf(mx, pm[i]);
	for (uint32_t i = 0; i < npg; i++)
		ck_assert_msg(fabsf(gpm[i] - pm[i]) <= 1e-5f * mx, "flash page %u: gpu %.9g cpu %.9g",
			      i, gpm[i], pm[i]);
	cudaFree((void *)din.q), cudaFree((void *)din.k_cache), cudaFree((void *)din.block_table),
		cudaFree((void *)din.lse), cudaFree(dout.page_mass), cudaFree(dout.token_mass);
	free(q), free(k), free(lse), free(table), free(pm), free(tm), free(gpm);
}
END_TEST

int main(void)
{
	g_seed = (unsigned long long)time(NULL);
	srand((unsigned)g_seed);
	Suite *s = suite_create("kernels_cuda");
	TCase *tc = tcase_create("cuda");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_probe_reports_cleanly);
	tcase_add_test(tc, test_no_device_entry_points);
	tcase_add_test(tc, test_bad_geometry_first);
	tcase_add_test(tc, test_gpu_page_mass);
	tcase_add_test(tc, test_gpu_flash);
	suite_add_tcase(s, tc);
	return md_test_main(s);
}
