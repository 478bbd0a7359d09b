/*
 * md_cuda_attn_rec.h — how an ATTN_PAGE stats record is completed on the GPU
 * (docs/kernels.md §4, docs/abi.md §6).  The host stages each record in the
 * device ring with its header (type, seq, slot, gen, clock) and three working
 * fields in the payload; the publish kernel turns the staged record into the
 * final one from the step's token masses and stamps `pos` last.  The same
 * function is compiled for the host, so tests on a machine without a GPU
 * build records exactly as the device writes them.
 *
 * Byte offsets follow struct md_stats_rec (shm_layout/memdecay_abi.h, checked
 * there by _Static_assert; this header is also compiled by nvcc, which cannot
 * read that one):
 *   0 pos u32 · 4 type u16 · 8 seq · 12 slot · 16 gen · 24 clock u64
 *   32 attn_page.mass f32 · 36 refresh u16 · 38 resv u16 · 40..63 resv1
 * Staged working fields: 40 dense page index u32, 44 norm_scale f32,
 * 36 mask of the page's live tokens.  All are overwritten (resv1 zeroed).
 */
#ifndef MD_CUDA_ATTN_REC_H
#define MD_CUDA_ATTN_REC_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MDK_HD __host__ __device__ __forceinline__
#else
#define MDK_HD static inline
#endif

#define MDK_REC_OFF_POS 0u
#define MDK_REC_OFF_MASS 32u
#define MDK_REC_OFF_REFRESH 36u
#define MDK_REC_OFF_RESV 38u
#define MDK_REC_OFF_PAGE 40u
#define MDK_REC_OFF_NORM 44u
#define MDK_REC_OFF_END 64u

MDK_HD uint32_t mdk__ld32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

MDK_HD void mdk__st32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, sizeof(v));
}

/* Fill the working fields of a staged record (host).  The ring stamps pos
 * as the complement of the record's index when it stages it
 * (mdk_attn_rec_stage_pos), so a record the kernel never reached reads as
 * torn, never as published. */
MDK_HD void mdk_attn_rec_stage(uint8_t *rec, uint32_t page, float norm_scale, uint16_t live_mask)
{
	uint16_t m = live_mask;
	mdk__st32(rec + MDK_REC_OFF_PAGE, page);
	memcpy(rec + MDK_REC_OFF_NORM, &norm_scale, sizeof(norm_scale));
	memcpy(rec + MDK_REC_OFF_REFRESH, &m, sizeof(m));
}

MDK_HD void mdk_attn_rec_stage_pos(uint8_t *rec, uint64_t index)
{
	mdk__st32(rec + MDK_REC_OFF_POS, ~(uint32_t)index);
}

/* Dense page index of a staged record. */
MDK_HD uint32_t mdk_attn_rec_page(const uint8_t *rec)
{
	return mdk__ld32(rec + MDK_REC_OFF_PAGE);
}

/* Complete a staged record at ring index `index` from token_mass[page·P ..
 * page·P + P): mass = Σ of the P token masses (mdk_page_refresh's rule), refresh
 * bit k when token k's mass · norm_scale > tau, masked to the live tokens.
 * A page index at or past n_pages (the host never stages one) gives mass 0. */
MDK_HD void mdk_attn_rec_finish(uint8_t *rec, uint64_t index, const float *token_mass,
				uint32_t n_pages, uint32_t page_tokens, float tau)
{
	uint32_t page = mdk__ld32(rec + MDK_REC_OFF_PAGE);
	float norm;
	uint16_t mask;
	memcpy(&norm, rec + MDK_REC_OFF_NORM, sizeof(norm));
	memcpy(&mask, rec + MDK_REC_OFF_REFRESH, sizeof(mask));
	float sum = 0.0f;
	uint32_t bits = 0;
	if (page < n_pages) {
		const float *tm = token_mass + (uint64_t)page * page_tokens;
		for (uint32_t k = 0; k < page_tokens; k++) {
			float v = tm[k];
			sum += v;
			if (v * norm > tau)
				bits |= 1u << k;
		}
	}
	uint16_t refresh = (uint16_t)(bits & mask);
	memcpy(rec + MDK_REC_OFF_MASS, &sum, sizeof(sum));
	memcpy(rec + MDK_REC_OFF_REFRESH, &refresh, sizeof(refresh));
	memset(rec + MDK_REC_OFF_RESV, 0, MDK_REC_OFF_END - MDK_REC_OFF_RESV);
	mdk__st32(rec + MDK_REC_OFF_POS, (uint32_t)index); /* last */
}

#endif
