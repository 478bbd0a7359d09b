/*
 * md_kernels_cuda.h — the md_kernels.h and md_kernels_flash.h reductions on an
 * NVIDIA GPU.  Same structs; every pointer inside them is a device pointer,
 * every count a host value.  Work is queued on `stream` (a cudaStream_t, NULL
 * for the legacy default stream) and nothing synchronizes.  Functions return 0
 * or a negative errno; mdk_cuda_last_error() gives this thread's last message.
 *   -ENODEV   no usable device or driver (cudaGetDeviceCount failed or said 0)
 *   -EINVAL   bad geometry
 *   -EIO      the CUDA runtime refused a launch or copy
 *   -ENOTSUP  built without CUDA (MEMDECAY_CUDA off)
 * Unlike the CPU version the device kernels cannot validate the cell map or
 * block table before writing: out-of-range entries are skipped.
 */
#ifndef MD_KERNELS_CUDA_H
#define MD_KERNELS_CUDA_H

#include "md_kernels.h"
#include "md_kernels_flash.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this library was built with CUDA, 0 for the stub. */
int mdk_cuda_built(void);
/* 0 when a device is usable (and *n_devices, if given, is set), else < 0. */
int mdk_cuda_probe(int *n_devices);
/* This thread's last error message ("" when none). */
const char *mdk_cuda_last_error(void);

/* Device memory for callers that keep no CUDA runtime of their own
 * (libmemdecay's GPU publisher): bytes on the current device, or -ENODEV,
 * -ENOMEM, -ENOTSUP. */
int mdk_cuda_alloc(void **out, size_t bytes, int device);
void mdk_cuda_free(void *p);

int mdk_cuda_page_mass_zero(const struct mdk_cell_map *map, struct mdk_page_out *out,
			    void *stream);
int mdk_cuda_page_mass_accumulate(const struct mdk_probs *p, const struct mdk_cell_map *map,
				  float scale, struct mdk_page_out *out, void *stream);
int mdk_cuda_page_refresh(const struct mdk_cell_map *map, float tau, float norm_scale,
			  struct mdk_page_out *out, void *stream);
int mdk_cuda_page_mass(const struct mdk_probs *p, const struct mdk_cell_map *map, float tau,
		       float norm_scale, struct mdk_page_out *out, void *stream);

/* Block table entries are not range-checked on the host (they are on the
 * device: bad ones give mass 0). */
int mdk_cuda_flash_page_mass(const struct mdk_flash_in *in, struct mdk_flash_out *out,
			     void *stream);

#ifdef __cplusplus
}
#endif
#endif
