/*
 * cuda_stub.c — md_kernels_cuda.h and md_cuda_ring.h for builds without CUDA
 * (MEMDECAY_CUDA off): every call fails with -ENOTSUP and says why, so a daemon
 * built this way refuses a CUDA-ring engine with a clear message.
 */
#include <errno.h>

#include "md_cuda_ring.h"

static const char md__no_cuda_msg[] =
	"memdecay was built without CUDA (configure with -DMEMDECAY_CUDA=ON)";

int mdk_cuda_built(void)
{
	return 0;
}

int mdk_cuda_probe(int *n_devices)
{
	if (n_devices)
		*n_devices = 0;
	return -ENOTSUP;
}

const char *mdk_cuda_last_error(void)
{
	return md__no_cuda_msg;
}

int mdk_cuda_alloc(void **out, size_t bytes, int device)
{
	if (out)
		*out = NULL;
	return -ENOTSUP;
}

void mdk_cuda_free(void *p)
{
}

int mdk_cuda_page_mass_zero(const struct mdk_cell_map *map, struct mdk_page_out *out,
			    void *stream)
{
	return -ENOTSUP;
}

int mdk_cuda_page_mass_accumulate(const struct mdk_probs *p, const struct mdk_cell_map *map,
				  float scale, struct mdk_page_out *out, void *stream)
{
	return -ENOTSUP;
}

int mdk_cuda_page_refresh(const struct mdk_cell_map *map, float tau, float norm_scale,
			  struct mdk_page_out *out, void *stream)
{
	return -ENOTSUP;
}

int mdk_cuda_page_mass(const struct mdk_probs *p, const struct mdk_cell_map *map, float tau,
		       float norm_scale, struct mdk_page_out *out, void *stream)
{
	return -ENOTSUP;
}

int mdk_cuda_flash_page_mass(const struct mdk_flash_in *in, struct mdk_flash_out *out,
			     void *stream)
{
	return -ENOTSUP;
}

int mdk_cuda_ring_create(struct mdk_cuda_ring **out, uint32_t capacity, int device)
{
	if (out)
		*out = NULL;
	return -ENOTSUP;
}

int mdk_cuda_ring_get_export(const struct mdk_cuda_ring *r, struct mdk_cuda_ring_export *ex)
{
	return -ENOTSUP;
}

int mdk_cuda_ring_push(struct mdk_cuda_ring *r, const void *recs, uint32_t n, void *stream)
{
	return -ENOTSUP;
}

int mdk_cuda_ring_push_attn(struct mdk_cuda_ring *r, const void *recs, uint32_t n,
			    const float *token_mass, uint32_t n_pages, uint32_t page_tokens,
			    float tau, uint32_t limit, void *stream)
{
	return -ENOTSUP;
}

int64_t mdk_cuda_ring_pending(struct mdk_cuda_ring *r, void *stream)
{
	return -ENOTSUP;
}

uint64_t mdk_cuda_ring_tail(const struct mdk_cuda_ring *r)
{
	return 0;
}

uint64_t mdk_cuda_ring_dropped(const struct mdk_cuda_ring *r)
{
	return 0;
}

void mdk_cuda_ring_destroy(struct mdk_cuda_ring *r)
{
}

int mdk_cuda_ring_open(struct mdk_cuda_ring_reader **out, const struct mdk_cuda_ring_export *ex,
		       int device)
{
	if (out)
		*out = NULL;
	return -ENOTSUP;
}

int mdk_cuda_ring_drain(struct mdk_cuda_ring_reader *rd, void *out, uint32_t max)
{
	return -ENOTSUP;
}

uint64_t mdk_cuda_ring_reader_head(const struct mdk_cuda_ring_reader *rd)
{
	return 0;
}

void mdk_cuda_ring_close(struct mdk_cuda_ring_reader *rd)
{
}
