/*
 * page_mass.cu — md_kernels.h's page mass on the GPU.  One thread per KV cell
 * sums its column over a slice of the step's rows (the rows are split across
 * gridDim.y so that short contexts still fill the device), then adds the slice
 * into the cell's token and page with atomics.  Cells the map does not track
 * are never read, so their probabilities cost no bandwidth.
 */
#include <errno.h>
#include <stdint.h>

#include "cuda_internal.h"
#include "md_kernels_cuda.h"

#define MD__THREADS 256

__global__ void md__page_mass_kernel(const float *__restrict__ probs, size_t stride,
				     uint32_t n_rows, uint32_t rows_per_split, uint32_t n_kv,
				     const int32_t *__restrict__ page,
				     const uint8_t *__restrict__ token, uint32_t n_pages,
				     uint32_t P, float inv, float *token_mass, float *page_mass)
{
	uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= n_kv)
		return;
	int32_t pg = page[c];
	uint32_t tk = token[c];
	if (pg < 0 || (uint32_t)pg >= n_pages || tk >= P)
		return;
	uint32_t r0 = blockIdx.y * rows_per_split;
	uint32_t r1 = min(r0 + rows_per_split, n_rows);
	const float *col = probs + c;
	float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
	uint32_t r = r0;
	for (; r + 4 <= r1; r += 4) {
		s0 += __ldg(col + (size_t)r * stride);
		s1 += __ldg(col + (size_t)(r + 1) * stride);
		s2 += __ldg(col + (size_t)(r + 2) * stride);
		s3 += __ldg(col + (size_t)(r + 3) * stride);
	}
	for (; r < r1; r++)
		s0 += __ldg(col + (size_t)r * stride);
	float m = ((s0 + s1) + (s2 + s3)) * inv;
	if (r0 >= r1)
		return;
	atomicAdd(token_mass + (size_t)pg * P + tk, m);
	if (page_mass)
		atomicAdd(page_mass + pg, m);
}

__global__ void md__page_refresh_kernel(const float *__restrict__ token_mass, float *page_mass,
					uint16_t *refresh, uint32_t n_pages, uint32_t P, float tau,
					float norm_scale)
{
	uint32_t pg = blockIdx.x * blockDim.x + threadIdx.x;
	if (pg >= n_pages)
		return;
	const float *tm = token_mass + (size_t)pg * P;
	float sum = 0.f;
	uint32_t bits = 0;
	for (uint32_t k = 0; k < P; k++) {
		float v = tm[k];
		sum += v;
		if (v * norm_scale > tau)
			bits |= 1u << k;
	}
	if (page_mass)
		page_mass[pg] = sum;
	if (refresh)
		refresh[pg] = (uint16_t)bits;
}

static int geometry_ok(const struct mdk_cell_map *map)
{
	return map && map->page_tokens >= 1 && map->page_tokens <= 16;
}

static int sm_count(void)
{
	static int cached[64];
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
		return 80;
	if (!cached[dev]) {
		int n = 0;
		if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
		    n <= 0)
			n = 80;
		cached[dev] = n;
	}
	return cached[dev];
}

extern "C" int mdk_cuda_page_mass_zero(const struct mdk_cell_map *map, struct mdk_page_out *out,
				       void *stream)
{
	if (!geometry_ok(map) || !out)
		return md__cuda_fail(-EINVAL, "mdk_cuda_page_mass_zero: bad geometry");
	int rc = md__cuda_ready();
	if (rc)
		return rc;
	cudaStream_t st = (cudaStream_t)stream;
	size_t n = map->n_pages;
	if (out->token_mass && (rc = md__cuda_check(cudaMemsetAsync(out->token_mass, 0,
				  n * map->page_tokens * sizeof(float), st), "zero token_mass")))
		return rc;
	if (out->page_mass && (rc = md__cuda_check(cudaMemsetAsync(out->page_mass, 0,
				  n * sizeof(float), st), "zero page_mass")))
		return rc;
	if (out->refresh && (rc = md__cuda_check(cudaMemsetAsync(out->refresh, 0,
				  n * sizeof(uint16_t), st), "zero refresh")))
		return rc;
	return 0;
}

extern "C" int mdk_cuda_page_mass_accumulate(const struct mdk_probs *p,
					     const struct mdk_cell_map *map, float scale,
					     struct mdk_page_out *out, void *stream)
{
	if (!p || !out || !geometry_ok(map) || p->n_kv != map->n_kv || p->row_stride < p->n_kv ||
	    (map->n_pages && !out->token_mass) ||
	    (uint64_t)p->n_query * p->n_head > UINT32_MAX)
		return md__cuda_fail(-EINVAL, "mdk_cuda_page_mass_accumulate: bad geometry");
	uint32_t n_rows = p->n_query * p->n_head;
	if (n_rows && p->n_kv && (!p->probs || !map->page || !map->token))
		return md__cuda_fail(-EINVAL, "mdk_cuda_page_mass_accumulate: NULL input");
	int rc = md__cuda_ready();
	if (rc)
		return rc;
	if (n_rows == 0 || p->n_kv == 0 || map->n_pages == 0)
		return 0;

	uint32_t bx = (p->n_kv + MD__THREADS - 1) / MD__THREADS;
	/* Enough blocks for ~4 waves, but at least 8 rows per slice so that the
	 * atomics stay a small fraction of the loads. */
	uint64_t want = (uint64_t)sm_count() * 8 * 4;
	uint32_t splits = (uint32_t)((want + bx - 1) / bx);
	uint32_t max_splits = (n_rows + 7) / 8;
	if (splits > max_splits)
		splits = max_splits;
	if (splits > 65535)
		splits = 65535;
	if (splits < 1)
		splits = 1;
	uint32_t rows_per = (n_rows + splits - 1) / splits;
	splits = (n_rows + rows_per - 1) / rows_per;

	dim3 grid(bx, splits);
	md__page_mass_kernel<<<grid, MD__THREADS, 0, (cudaStream_t)stream>>>(
		p->probs, p->row_stride, n_rows, rows_per, p->n_kv, map->page, map->token,
		map->n_pages, map->page_tokens, scale / (float)n_rows, out->token_mass,
		out->page_mass);
	return md__cuda_check(cudaGetLastError(), "md__page_mass_kernel launch");
}

extern "C" int mdk_cuda_page_refresh(const struct mdk_cell_map *map, float tau, float norm_scale,
				     struct mdk_page_out *out, void *stream)
{
	if (!geometry_ok(map) || !out || (map->n_pages && !out->token_mass))
		return md__cuda_fail(-EINVAL, "mdk_cuda_page_refresh: bad geometry");
	int rc = md__cuda_ready();
	if (rc)
		return rc;
	if (map->n_pages == 0)
		return 0;
	uint32_t blocks = (map->n_pages + MD__THREADS - 1) / MD__THREADS;
	md__page_refresh_kernel<<<blocks, MD__THREADS, 0, (cudaStream_t)stream>>>(
		out->token_mass, out->page_mass, out->refresh, map->n_pages, map->page_tokens, tau,
		norm_scale);
	return md__cuda_check(cudaGetLastError(), "md__page_refresh_kernel launch");
}

extern "C" int mdk_cuda_page_mass(const struct mdk_probs *p, const struct mdk_cell_map *map,
				  float tau, float norm_scale, struct mdk_page_out *out,
				  void *stream)
{
	int rc = mdk_cuda_page_mass_zero(map, out, stream);
	if (!rc)
		rc = mdk_cuda_page_mass_accumulate(p, map, 1.0f, out, stream);
	if (!rc)
		rc = mdk_cuda_page_refresh(map, tau, norm_scale, out, stream);
	return rc;
}
