/*
 * page_mass.c — attention probabilities → per-token mass, per-page mass and the
 * refresh bitmap (md_kernels.h).  The work is a column sum over the step's
 * n_query × n_head rows, done in L1-sized chunks of cells by a per-ISA loop
 * (AVX2 picked at run time, scalar otherwise), then one scatter per cell through
 * the cell map.  The map is validated in full before any output is touched, so
 * a bad map leaves the outputs as they were.
 */
#include <errno.h>
#include <string.h>

#include "md_kernels.h"
#include "md_kernels_internal.h"

#define MD__PAGE_TOKENS_MAX 16u

void md__colsum_scalar(const float *rows, size_t stride, uint32_t n_rows, uint32_t n_cells,
		       float *colsum)
{
	memcpy(colsum, rows, (size_t)n_cells * sizeof(float));
	for (uint32_t r = 1; r < n_rows; r++) {
		const float *row = rows + (size_t)r * stride;
		for (uint32_t c = 0; c < n_cells; c++)
			colsum[c] += row[c];
	}
}

static int cpu_has_avx2(void)
{
#if defined(__x86_64__) || defined(__i386__)
	static int cached = -1;
	if (cached < 0) {
		__builtin_cpu_init();
		cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	}
	return cached;
#else
	return 0;
#endif
}

enum mdk_impl mdk_impl_best(void)
{
	return cpu_has_avx2() ? MDK_IMPL_AVX2 : MDK_IMPL_SCALAR;
}

const char *mdk_impl_name(enum mdk_impl impl)
{
	switch (impl) {
	case MDK_IMPL_AUTO:
		return "auto";
	case MDK_IMPL_SCALAR:
		return "scalar";
	case MDK_IMPL_AVX2:
		return "avx2";
	}
	return "unknown";
}

static int map_geometry_ok(const struct mdk_cell_map *map)
{
	if (!map || map->page_tokens == 0 || map->page_tokens > MD__PAGE_TOKENS_MAX)
		return 0;
	/* n_pages * P must index a float array without overflow. */
	if ((uint64_t)map->n_pages * map->page_tokens > (uint64_t)(SIZE_MAX / sizeof(float)))
		return 0;
	return 1;
}

void mdk_page_mass_zero(const struct mdk_cell_map *map, struct mdk_page_out *out)
{
	if (!out || !map_geometry_ok(map))
		return;
	size_t n_pages = map->n_pages;
	if (out->token_mass)
		memset(out->token_mass, 0, n_pages * map->page_tokens * sizeof(float));
	if (out->page_mass)
		memset(out->page_mass, 0, n_pages * sizeof(float));
	if (out->refresh)
		memset(out->refresh, 0, n_pages * sizeof(uint16_t));
}

static int validate(const struct mdk_probs *p, const struct mdk_cell_map *map,
		    const struct mdk_page_out *out)
{
	if (!p || !out || !map_geometry_ok(map))
		return -EINVAL;
	if (p->n_kv != map->n_kv || p->row_stride < p->n_kv)
		return -EINVAL;
	if (map->n_kv && (!map->page || !map->token))
		return -EINVAL;
	if (map->n_pages && !out->token_mass)
		return -EINVAL;
	if ((uint64_t)p->n_query * p->n_head > UINT32_MAX)
		return -EINVAL;
	if (p->n_query && p->n_head && p->n_kv && !p->probs)
		return -EINVAL;
	for (uint32_t c = 0; c < map->n_kv; c++) {
		int32_t pg = map->page[c];
		if (pg < -1 || (pg >= 0 && (uint32_t)pg >= map->n_pages))
			return -EINVAL;
		if (pg >= 0 && map->token[c] >= map->page_tokens)
			return -EINVAL;
	}
	return 0;
}

typedef void (*colsum_fn_t)(const float *, size_t, uint32_t, uint32_t, float *);

static int resolve_impl(enum mdk_impl impl, colsum_fn_t *fn)
{
	if (impl == MDK_IMPL_AUTO)
		impl = mdk_impl_best();
	switch (impl) {
	case MDK_IMPL_SCALAR:
		*fn = md__colsum_scalar;
		return 0;
	case MDK_IMPL_AVX2:
		if (!cpu_has_avx2())
			return -ENOTSUP;
		*fn = md__colsum_avx2;
		return 0;
	default:
		return -EINVAL;
	}
}

/* Inputs already validated. */
static void accumulate(const struct mdk_probs *p, const struct mdk_cell_map *map, float scale,
		       struct mdk_page_out *out, colsum_fn_t colsum_fn)
{
	uint32_t n_rows = p->n_query * p->n_head;
	if (n_rows == 0 || p->n_kv == 0)
		return;
	const float inv = scale / (float)n_rows;
	const uint32_t P = map->page_tokens;
	float colsum[MD__CHUNK_CELLS];

	for (uint32_t c0 = 0; c0 < p->n_kv; c0 += MD__CHUNK_CELLS) {
		uint32_t n = p->n_kv - c0 < MD__CHUNK_CELLS ? p->n_kv - c0 : MD__CHUNK_CELLS;
		colsum_fn(p->probs + c0, p->row_stride, n_rows, n, colsum);
		const int32_t *page = map->page + c0;
		const uint8_t *token = map->token + c0;
		for (uint32_t c = 0; c < n; c++) {
			int32_t pg = page[c];
			if (pg < 0)
				continue;
			float m = colsum[c] * inv;
			out->token_mass[(size_t)pg * P + token[c]] += m;
			if (out->page_mass)
				out->page_mass[pg] += m;
		}
	}
}

int mdk_page_mass_accumulate(const struct mdk_probs *p, const struct mdk_cell_map *map,
			     float scale, struct mdk_page_out *out, enum mdk_impl impl)
{
	colsum_fn_t fn;
	int rc = validate(p, map, out);
	if (!rc)
		rc = resolve_impl(impl, &fn);
	if (rc)
		return rc;
	accumulate(p, map, scale, out, fn);
	return 0;
}

void mdk_page_refresh(const struct mdk_cell_map *map, float tau, float norm_scale,
		      struct mdk_page_out *out)
{
	if (!out || !out->token_mass || !map_geometry_ok(map))
		return;
	const uint32_t P = map->page_tokens;
	for (uint32_t pg = 0; pg < map->n_pages; pg++) {
		const float *tm = out->token_mass + (size_t)pg * P;
		float sum = 0.0f;
		uint16_t bits = 0;
		for (uint32_t k = 0; k < P; k++) {
			sum += tm[k];
			if (tm[k] * norm_scale > tau)
				bits |= (uint16_t)(1u << k);
		}
		/* Recomputed so that page_mass is exactly the sum of its token masses. */
		if (out->page_mass)
			out->page_mass[pg] = sum;
		if (out->refresh)
			out->refresh[pg] = bits;
	}
}

int mdk_page_mass(const struct mdk_probs *p, const struct mdk_cell_map *map, float tau,
		  float norm_scale, struct mdk_page_out *out, enum mdk_impl impl)
{
	colsum_fn_t fn;
	int rc = validate(p, map, out);
	if (!rc)
		rc = resolve_impl(impl, &fn);
	if (rc)
		return rc;
	mdk_page_mass_zero(map, out);
	accumulate(p, map, 1.0f, out, fn);
	mdk_page_refresh(map, tau, norm_scale, out);
	return 0;
}
