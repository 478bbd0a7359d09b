/*
 * page_mass_avx2.c — the AVX2/FMA column sum behind mdk_page_mass.  Built with
 * -mavx2 -mfma; only called after __builtin_cpu_supports said so.  Four rows are
 * added per pass so the L1-resident column sums are loaded and stored once per
 * four rows of probabilities streamed from memory.
 */
#include <immintrin.h>

#include "md_kernels_internal.h"

void md__colsum_avx2(const float *rows, size_t stride, uint32_t n_rows, uint32_t n_cells,
		     float *colsum)
{
	uint32_t vec_cells = n_cells & ~7u;
	uint32_t r = 0;

	/* First pass writes colsum, so it needs no zeroing. */
	{
		uint32_t take = n_rows >= 4 ? 4 : n_rows;
		const float *r0 = rows;
		const float *r1 = take > 1 ? rows + stride : NULL;
		const float *r2 = take > 2 ? rows + 2 * stride : NULL;
		const float *r3 = take > 3 ? rows + 3 * stride : NULL;
		uint32_t c = 0;
		for (; c < vec_cells; c += 8) {
			__m256 a = _mm256_loadu_ps(r0 + c);
			if (r1)
				a = _mm256_add_ps(a, _mm256_loadu_ps(r1 + c));
			if (r2)
				a = _mm256_add_ps(a, _mm256_loadu_ps(r2 + c));
			if (r3)
				a = _mm256_add_ps(a, _mm256_loadu_ps(r3 + c));
			_mm256_storeu_ps(colsum + c, a);
		}
		for (; c < n_cells; c++) {
			float a = r0[c];
			if (r1)
				a += r1[c];
			if (r2)
				a += r2[c];
			if (r3)
				a += r3[c];
			colsum[c] = a;
		}
		r = take;
	}

	for (; r + 4 <= n_rows; r += 4) {
		const float *r0 = rows + (size_t)r * stride;
		const float *r1 = r0 + stride;
		const float *r2 = r1 + stride;
		const float *r3 = r2 + stride;
		uint32_t c = 0;
		for (; c + 16 <= vec_cells; c += 16) {
			__m256 a0 = _mm256_add_ps(_mm256_loadu_ps(r0 + c), _mm256_loadu_ps(r1 + c));
			__m256 b0 = _mm256_add_ps(_mm256_loadu_ps(r2 + c), _mm256_loadu_ps(r3 + c));
			__m256 a1 = _mm256_add_ps(_mm256_loadu_ps(r0 + c + 8),
						  _mm256_loadu_ps(r1 + c + 8));
			__m256 b1 = _mm256_add_ps(_mm256_loadu_ps(r2 + c + 8),
						  _mm256_loadu_ps(r3 + c + 8));
			__m256 s0 = _mm256_add_ps(_mm256_loadu_ps(colsum + c), _mm256_add_ps(a0, b0));
			__m256 s1 = _mm256_add_ps(_mm256_loadu_ps(colsum + c + 8),
						  _mm256_add_ps(a1, b1));
			_mm256_storeu_ps(colsum + c, s0);
			_mm256_storeu_ps(colsum + c + 8, s1);
		}
		for (; c < vec_cells; c += 8) {
			__m256 a = _mm256_add_ps(_mm256_loadu_ps(r0 + c), _mm256_loadu_ps(r1 + c));
			__m256 b = _mm256_add_ps(_mm256_loadu_ps(r2 + c), _mm256_loadu_ps(r3 + c));
			_mm256_storeu_ps(colsum + c,
					 _mm256_add_ps(_mm256_loadu_ps(colsum + c), _mm256_add_ps(a, b)));
		}
		for (; c < n_cells; c++)
			colsum[c] += (r0[c] + r1[c]) + (r2[c] + r3[c]);
	}

	for (; r < n_rows; r++) {
		const float *r0 = rows + (size_t)r * stride;
		uint32_t c = 0;
		for (; c < vec_cells; c += 8)
			_mm256_storeu_ps(colsum + c, _mm256_add_ps(_mm256_loadu_ps(colsum + c),
								   _mm256_loadu_ps(r0 + c)));
		for (; c < n_cells; c++)
			colsum[c] += r0[c];
	}
}
