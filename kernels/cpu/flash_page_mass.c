/*
 * flash_page_mass.c — CPU reference of the flash-compatible page mass
 * (md_kernels_flash.h).  Dot products and exponentials in double: this is the
 * yardstick for the CUDA kernel and for CPU engines using fused attention.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "md_kernels_flash.h"

uint32_t mdk_flash_heads_used(uint32_t n_head, uint32_t head_step)
{
	if (head_step <= 1)
		return n_head;
	return (n_head + head_step - 1) / head_step;
}

int mdk_flash_page_mass(const struct mdk_flash_in *in, struct mdk_flash_out *out)
{
	if (!in || !out || !out->page_mass)
		return -EINVAL;
	if (in->n_head == 0 || in->n_kv_head == 0 || in->n_head % in->n_kv_head != 0 ||
	    in->head_dim == 0 || in->page_tokens == 0 ||
	    (uint64_t)in->n_tokens > (uint64_t)in->n_pages * in->page_tokens)
		return -EINVAL;
	if (in->n_pages && (!in->q || !in->k_cache || !in->block_table || !in->lse))
		return -EINVAL;
	for (uint32_t i = 0; i < in->n_pages; i++) {
		int32_t b = in->block_table[i];
		if (b < -1 || (b >= 0 && (uint32_t)b >= in->n_blocks))
			return -EINVAL;
	}

	const uint32_t P = in->page_tokens, d = in->head_dim;
	const uint32_t group = in->n_head / in->n_kv_head;
	const uint32_t step = in->head_step <= 1 ? 1 : in->head_step;
	const double scale = in->scale > 0.0f ? (double)in->scale : 1.0 / sqrt((double)d);
	const double inv_heads = 1.0 / (double)mdk_flash_heads_used(in->n_head, step);

	for (uint32_t i = 0; i < in->n_pages; i++) {
		int32_t b = in->block_table[i];
		uint64_t first = (uint64_t)i * P;
		uint32_t live = 0;
		if (b >= 0 && first < in->n_tokens)
			live = in->n_tokens - first < P ? (uint32_t)(in->n_tokens - first) : P;
		double page = 0.0;
		for (uint32_t j = 0; j < P; j++) {
			double tok = 0.0;
			if (j < live) {
				for (uint32_t h = 0; h < in->n_head; h += step) {
					const float *q = in->q + (size_t)h * d;
					const float *k = in->k_cache +
							 (((size_t)b * P + j) * in->n_kv_head + h / group) * d;
					double dot = 0.0;
					for (uint32_t e = 0; e < d; e++)
						dot += (double)q[e] * (double)k[e];
					tok += exp(scale * dot - (double)in->lse[h]);
				}
				tok *= inv_heads;
			}
			if (out->token_mass)
				out->token_mass[(size_t)i * P + j] = (float)tok;
			page += tok;
		}
		out->page_mass[i] = (float)page;
	}
	return 0;
}
