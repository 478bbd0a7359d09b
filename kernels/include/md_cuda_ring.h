/*
 * md_cuda_ring.h — a stats ring (struct md_stats_rec, 64 bytes each) in GPU
 * memory, shared between an engine and memdecayd through CUDA IPC handles.
 *
 * The engine allocates the ring and fills a struct mdk_cuda_ring_export, which
 * is pointer-free and fixed-size so it can be published in the engine's
 * shared-memory segment.  memdecayd opens it and drains with asynchronous copies
 * after waiting on the exported IPC event (recorded after every push).  Device
 * layout: tail (u64, engine-written) at 0, head (u64, daemon-written) at 128,
 * records from 256.  The engine learns the head through an asynchronous copy
 * into pinned memory queued by each push, so a push never blocks: when the
 * ring looks full the records are dropped and counted, as on the host ring.
 * Errors: negative errno, message in mdk_cuda_last_error(); -ENOTSUP with
 * "built without CUDA" from the stub, -ENODEV without a device, -EPROTO when
 * the shared indices are inconsistent (tail − head > capacity).
 */
#ifndef MD_CUDA_RING_H
#define MD_CUDA_RING_H

#include <stdint.h>

#include "md_kernels_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MDK_CUDA_RING_EXPORT_MAGIC 0x474e52414455434dULL /* "MCUDARNG" */
#define MDK_CUDA_RING_VERSION 1u
#define MDK_CUDA_RING_REC_SIZE 64u
#define MDK_CUDA_RING_TAIL_OFFSET 0u
#define MDK_CUDA_RING_HEAD_OFFSET 128u
#define MDK_CUDA_RING_DATA_OFFSET 256u

struct mdk_cuda_ring_export {
	uint64_t magic;           /* MDK_CUDA_RING_EXPORT_MAGIC, written last */
	uint32_t version;         /* MDK_CUDA_RING_VERSION */
	uint32_t capacity;        /* records, power of two */
	uint32_t rec_size;        /* MDK_CUDA_RING_REC_SIZE */
	int32_t device;           /* device ordinal in the engine (informational) */
	uint64_t bytes;           /* size of the allocation */
	uint64_t resv[4];
	uint8_t mem_handle[64];   /* cudaIpcMemHandle_t */
	uint8_t event_handle[64]; /* cudaIpcEventHandle_t */
};

struct mdk_cuda_ring;         /* engine side */
struct mdk_cuda_ring_reader;  /* daemon side */

/* Engine side. */
int mdk_cuda_ring_create(struct mdk_cuda_ring **out, uint32_t capacity, int device);
int mdk_cuda_ring_get_export(const struct mdk_cuda_ring *r, struct mdk_cuda_ring_export *ex);
/* Queue n host records (struct md_stats_rec[n]) on stream; each is stamped
 * with pos = low 32 bits of its ring index (docs/abi.md §3).  Returns how many
 * were queued (the rest were dropped: ring full) or < 0. */
int mdk_cuda_ring_push(struct mdk_cuda_ring *r, const void *recs, uint32_t n, void *stream);
/* Queue n ATTN_PAGE records completed on the device (md_cuda_attn_rec.h):
 * recs (host) hold each record's header and working fields (dense page index
 * into token_mass, norm scale, live-token mask, from mdk_attn_rec_stage);
 * token_mass (device, [n_pages · page_tokens]) is what the page-mass kernels
 * wrote on the same stream.  One kernel completes the records in the ring and
 * stamps them; then the tail is stored.  All or none: when more than `limit`
 * records (0: capacity) would be in the ring, the n records are dropped and
 * counted and 0 is returned.  Returns n, 0 or < 0 (-EINVAL: a page index
 * past n_pages, P outside 1..16). */
int mdk_cuda_ring_push_attn(struct mdk_cuda_ring *r, const void *recs, uint32_t n,
			    const float *token_mass, uint32_t n_pages, uint32_t page_tokens,
			    float tau, uint32_t limit, void *stream);
/* Records queued and not yet known consumed (the engine's view of the head is
 * refreshed by an async copy: this queues one on stream if none is in
 * flight). */
int64_t mdk_cuda_ring_pending(struct mdk_cuda_ring *r, void *stream);
uint64_t mdk_cuda_ring_tail(const struct mdk_cuda_ring *r);
uint64_t mdk_cuda_ring_dropped(const struct mdk_cuda_ring *r);
void mdk_cuda_ring_destroy(struct mdk_cuda_ring *r);

/* Daemon side (another process: CUDA refuses to open a handle in the process
 * that exported it). */
int mdk_cuda_ring_open(struct mdk_cuda_ring_reader **out, const struct mdk_cuda_ring_export *ex,
		       int device);
/* Copy up to max records into out (host, struct md_stats_rec[max]); returns
 * the count, 0 when empty, or < 0. */
int mdk_cuda_ring_drain(struct mdk_cuda_ring_reader *rd, void *out, uint32_t max);
uint64_t mdk_cuda_ring_reader_head(const struct mdk_cuda_ring_reader *rd);
void mdk_cuda_ring_close(struct mdk_cuda_ring_reader *rd);

#ifdef __cplusplus
}
#endif
#endif
