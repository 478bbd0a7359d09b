/*
 * md_kernels_flash.h — per-page attention mass for engines running a fused
 * (flash) attention kernel, which never materializes probabilities.  From the
 * decode query q, the paged K cache, the block table and the per-head
 * log-sum-exp the attention kernel already returns, each token's probability
 * is exp(scale·q·k − lse) and is summed straight into its page.  The CPU version
 * here is the reference the CUDA one (md_kernels_cuda.h) is checked against.
 */
#ifndef MD_KERNELS_FLASH_H
#define MD_KERNELS_FLASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One decode query of one layer.  Page i of the sequence holds positions
 * [i·P, min((i+1)·P, n_tokens)) and lives in block block_table[i] of the cache
 * (-1: no block, the page's mass is 0).  Head h reads kv head
 * h / (n_head / n_kv_head) (grouped-query attention; n_head % n_kv_head == 0).
 * lse[h] = ln Σ_j exp(scale · q_h·k_j) over the same tokens, as flash-attention
 * kernels return it (natural log, scale applied).  head_step s > 1 uses only
 * heads 0, s, 2s, … (docs/kernels.md gives the error this costs). */
struct mdk_flash_in {
	const float *q;            /* [n_head][head_dim] */
	const float *k_cache;      /* [n_blocks][page_tokens][n_kv_head][head_dim] */
	const int32_t *block_table;/* [n_pages] */
	const float *lse;          /* [n_head] */
	uint32_t n_head;
	uint32_t n_kv_head;
	uint32_t head_dim;
	uint32_t page_tokens;      /* P, any size >= 1 (vLLM blocks are 16) */
	uint32_t n_blocks;
	uint32_t n_pages;
	uint32_t n_tokens;         /* <= n_pages · P */
	uint32_t head_step;        /* 0 or 1: every head */
	float scale;               /* 0: 1/sqrt(head_dim) */
};

/* page_mass[n_pages]: Σ over the page's tokens of the probability, averaged
 * over the heads used.  token_mass[n_pages·P] (optional, may be NULL): the
 * same per token, 0 for positions past n_tokens. */
struct mdk_flash_out {
	float *page_mass;
	float *token_mass;
};

/* Returns 0 or -EINVAL (bad geometry, block index out of range). */
int mdk_flash_page_mass(const struct mdk_flash_in *in, struct mdk_flash_out *out);

/* Heads actually used for a given n_head and head_step. */
uint32_t mdk_flash_heads_used(uint32_t n_head, uint32_t head_step);

#ifdef __cplusplus
}
#endif
#endif
