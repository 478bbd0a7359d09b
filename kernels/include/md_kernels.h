/*
 * md_kernels.h — reductions from attention to what memdecayd consumes:
 * per-token mass, per-page mass and the refresh bitmap against tau.
 * CPU implementations (AVX2 chosen at run time, scalar fallback) live in
 * kernels/cpu, CUDA ones in kernels/cuda.  Adapters (llama.cpp and later GPU
 * engines) call only this interface.
 */
#ifndef MD_KERNELS_H
#define MD_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where KV cell c lives: page index (dense, 0..n_pages-1, or -1 when the cell
 * holds no tracked token) and token slot in that page (0..P-1). */
struct mdk_cell_map {
	const int32_t *page;   /* [n_kv] */
	const uint8_t *token;  /* [n_kv] */
	uint32_t n_kv;
	uint32_t n_pages;
	uint32_t page_tokens;  /* P <= 16 */
};

/* Attention probabilities for one step: probs[q][h][c], row-major, each row
 * (q, h) summing to 1 over the n_kv cells.  row_stride >= n_kv floats. */
struct mdk_probs {
	const float *probs;
	uint32_t n_query;
	uint32_t n_head;
	uint32_t n_kv;
	uint32_t row_stride;
};

/* Outputs.  token_mass is [n_pages * P] (mean over heads and queries),
 * page_mass [n_pages] (sum of its token masses), refresh [n_pages] (bit k set
 * when token k's mass, times norm_scale, exceeds tau).  norm_scale is 1 for
 * raw and n_live for relative normalization. */
struct mdk_page_out {
	float *token_mass;
	float *page_mass;
	uint16_t *refresh;
};

enum mdk_impl { MDK_IMPL_AUTO = 0, MDK_IMPL_SCALAR = 1, MDK_IMPL_AVX2 = 2 };

/* Accumulate mode: the caller may call mdk_page_mass once per layer with
 * scale = 1/n_layers and finish with mdk_page_refresh. */
void mdk_page_mass_zero(const struct mdk_cell_map *map, struct mdk_page_out *out);
int mdk_page_mass_accumulate(const struct mdk_probs *p, const struct mdk_cell_map *map,
			     float scale, struct mdk_page_out *out, enum mdk_impl impl);
void mdk_page_refresh(const struct mdk_cell_map *map, float tau, float norm_scale,
		      struct mdk_page_out *out);
/* One-shot: zero, accumulate with scale 1, refresh. */
int mdk_page_mass(const struct mdk_probs *p, const struct mdk_cell_map *map, float tau,
		  float norm_scale, struct mdk_page_out *out, enum mdk_impl impl);

/* Which implementation AUTO resolves to on this CPU. */
enum mdk_impl mdk_impl_best(void);
const char *mdk_impl_name(enum mdk_impl impl);

#ifdef __cplusplus
}
#endif
#endif
