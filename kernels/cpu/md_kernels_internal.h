/*
 * md_kernels_internal.h — what the CPU page-mass driver shares with its
 * per-ISA column-sum loops.  Not installed; names carry the md__ prefix.
 */
#ifndef MD_KERNELS_INTERNAL_H
#define MD_KERNELS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Cells are reduced in chunks small enough for the column sums to stay in L1. */
#define MD__CHUNK_CELLS 1024u

/* colsum[c] = sum over rows r < n_rows of rows[r * stride + c], c < n_cells.
 * n_rows >= 1. */
void md__colsum_scalar(const float *rows, size_t stride, uint32_t n_rows, uint32_t n_cells,
		       float *colsum);
void md__colsum_avx2(const float *rows, size_t stride, uint32_t n_rows, uint32_t n_cells,
		     float *colsum);

#endif
