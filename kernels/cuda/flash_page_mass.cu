/*
 * flash_page_mass.cu — md_kernels_flash.h on the GPU.  One block per page;
 * each warp takes (token, head) pairs, computes q·k with its lanes across the
 * head dimension, and lane 0 adds exp(scale·q·k − lse) into the page's token
 * slot in shared memory.  Nothing of size n_head × n_kv is ever written.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "cuda_internal.h"
#include "md_kernels_cuda.h"

#define MD__FLASH_THREADS 128

__global__ void md__flash_page_mass_kernel(const float *__restrict__ q,
					   const float *__restrict__ k_cache,
					   const int32_t *__restrict__ block_table,
					   const float *__restrict__ lse, uint32_t n_head,
					   uint32_t n_kv_head, uint32_t d, uint32_t P,
					   uint32_t n_blocks, uint32_t n_tokens, uint32_t step,
					   uint32_t n_used, float scale, float *page_mass,
					   float *token_mass)
{
	extern __shared__ float tok[];
	const uint32_t page = blockIdx.x;
	for (uint32_t j = threadIdx.x; j < P; j += blockDim.x)
		tok[j] = 0.f;
	__syncthreads();

	int32_t b = block_table[page];
	uint64_t first = (uint64_t)page * P;
	uint32_t live = 0;
	if (b >= 0 && (uint32_t)b < n_blocks && first < n_tokens)
		live = n_tokens - first < P ? (uint32_t)(n_tokens - first) : P;

	const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
	const uint32_t n_warps = blockDim.x >> 5, group = n_head / n_kv_head;
	const uint32_t items = live * n_used;
	for (uint32_t it = warp; it < items; it += n_warps) {
		uint32_t j = it / n_used, h = (it % n_used) * step;
		const float *qh = q + (size_t)h * d;
		const float *kj = k_cache + (((size_t)b * P + j) * n_kv_head + h / group) * d;
		float dot = 0.f;
		for (uint32_t e = lane; e < d; e += 32)
			dot = fmaf(__ldg(qh + e), __ldg(kj + e), dot);
		for (int off = 16; off > 0; off >>= 1)
			dot += __shfl_xor_sync(0xffffffffu, dot, off);
		if (lane == 0)
			atomicAdd(&tok[j], expf(dot * scale - __ldg(lse + h)));
	}
	__syncthreads();

	const float inv = 1.0f / (float)n_used;
	if (token_mass)
		for (uint32_t j = threadIdx.x; j < P; j += blockDim.x)
			token_mass[first + j] = tok[j] * inv;
	if (threadIdx.x == 0) {
		float s = 0.f;
		for (uint32_t j = 0; j < live; j++)
			s += tok[j];
		page_mass[page] = s * inv;
	}
}

extern "C" int mdk_cuda_flash_page_mass(const struct mdk_flash_in *in, struct mdk_flash_out *out,
					void *stream)
{
	if (!in || !out || !out->page_mass || in->n_head == 0 || in->n_kv_head == 0 ||
	    in->n_head % in->n_kv_head != 0 || in->head_dim == 0 || in->page_tokens == 0 ||
	    (uint64_t)in->n_tokens > (uint64_t)in->n_pages * in->page_tokens ||
	    (uint64_t)in->page_tokens * sizeof(float) > 48 * 1024)
		return md__cuda_fail(-EINVAL, "mdk_cuda_flash_page_mass: bad geometry");
	if (in->n_pages && (!in->q || !in->k_cache || !in->block_table || !in->lse))
		return md__cuda_fail(-EINVAL, "mdk_cuda_flash_page_mass: NULL input");
	int rc = md__cuda_ready();
	if (rc)
		return rc;
	if (in->n_pages == 0)
		return 0;
	if (in->n_pages > 0x7fffffffu)
		return md__cuda_fail(-EINVAL, "mdk_cuda_flash_page_mass: too many pages");
	uint32_t step = in->head_step <= 1 ? 1 : in->head_step;
	uint32_t n_used = mdk_flash_heads_used(in->n_head, step);
	float scale = in->scale > 0.0f ? in->scale : 1.0f / sqrtf((float)in->head_dim);
	md__flash_page_mass_kernel<<<in->n_pages, MD__FLASH_THREADS,
				     in->page_tokens * sizeof(float), (cudaStream_t)stream>>>(
		in->q, in->k_cache, in->block_table, in->lse, in->n_head, in->n_kv_head,
		in->head_dim, in->page_tokens, in->n_blocks, in->n_tokens, step, n_used, scale,
		out->page_mass, out->token_mass);
	return md__cuda_check(cudaGetLastError(), "md__flash_page_mass_kernel launch");
}
