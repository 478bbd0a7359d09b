/*
 * ipc_ring.cu — the device-resident stats ring shared through CUDA IPC
 * (md_cuda_ring.h).  Single producer (the engine), single consumer (memdecayd).
 *
 * Push: records go to a pinned host mirror of the ring at their final slots,
 * one or two async copies move them to the device, a one-thread kernel stores
 * the new tail, the IPC event is recorded, and an async copy brings the
 * daemon's head back into pinned memory for the next push.  A mirror slot is
 * reused only after the daemon has consumed it, which it cannot do before the
 * copy that filled it completed, so the mirror needs no further fencing.
 * Drain: wait on the IPC event, read tail, validate it against our own head
 * (the engine is untrusted), copy the records out, store the new head.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "md_cuda_attn_rec.h"
#include "md_cuda_ring.h"

struct mdk_cuda_ring {
	int device;
	uint32_t capacity;
	char *dev;                 /* ctrl + data, device */
	uint8_t *mirror;           /* pinned host mirror of the data */
	volatile uint64_t *head_seen; /* pinned, written by an async D2H copy */
	uint64_t tail;
	uint64_t dropped;
	cudaEvent_t event;         /* interprocess */
	cudaEvent_t head_event;    /* completes when head_seen is fresh */
	cudaIpcMemHandle_t mem_handle;
	cudaIpcEventHandle_t event_handle;
};

struct mdk_cuda_ring_reader {
	int device;
	uint32_t capacity;
	char *dev;                 /* opened IPC mapping */
	cudaEvent_t event;         /* opened IPC event */
	cudaStream_t stream;
	uint64_t *pinned_idx;      /* [0] tail read, [1] head to write */
	uint8_t *pinned_recs;      /* capacity records */
	uint64_t head;
};

static_assert(sizeof(cudaIpcMemHandle_t) == 64, "IPC memory handle is 64 bytes");
static_assert(sizeof(cudaIpcEventHandle_t) == 64, "IPC event handle is 64 bytes");
static_assert(sizeof(struct mdk_cuda_ring_export) == 192, "export record");

static bool pow2(uint32_t x)
{
	return x && !(x & (x - 1));
}

__global__ void md__ring_store_u64(uint64_t *dst, uint64_t v)
{
	*(volatile uint64_t *)dst = v;
}

/* One thread per staged record: complete it from the token masses and stamp
 * it (md_cuda_attn_rec.h).  Records are 64-byte slots in the ring. */
__global__ void md__ring_finish_attn(char *data, uint64_t first, uint32_t n, uint32_t mask,
				     const float *__restrict__ token_mass, uint32_t n_pages,
				     uint32_t P, float tau)
{
	uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	uint64_t index = first + i;
	uint8_t *rec = (uint8_t *)data + (size_t)(index & mask) * MDK_CUDA_RING_REC_SIZE;
	mdk_attn_rec_finish(rec, index, token_mass, n_pages, P, tau);
}

static int set_device(int device)
{
	int rc = md__cuda_ready();
	if (rc)
		return rc;
	return md__cuda_check(cudaSetDevice(device), "cudaSetDevice");
}

extern "C" int mdk_cuda_ring_create(struct mdk_cuda_ring **out, uint32_t capacity, int device)
{
	if (!out)
		return md__cuda_fail(-EINVAL, "mdk_cuda_ring_create: NULL out");
	*out = NULL;
	if (!pow2(capacity) || capacity > (1u << 24))
		return md__cuda_fail(-EINVAL, "mdk_cuda_ring_create: capacity %u is not a power "
				     "of two <= 2^24", capacity);
	int rc = set_device(device);
	if (rc)
		return rc;
	struct mdk_cuda_ring *r = (struct mdk_cuda_ring *)calloc(1, sizeof(*r));
	if (!r)
		return md__cuda_fail(-ENOMEM, "mdk_cuda_ring_create: out of memory");
	r->device = device;
	r->capacity = capacity;
	size_t bytes = MDK_CUDA_RING_DATA_OFFSET + (size_t)capacity * MDK_CUDA_RING_REC_SIZE;
	void *hs = NULL;
	if ((rc = md__cuda_check(cudaMalloc((void **)&r->dev, bytes), "cudaMalloc ring")) ||
	    (rc = md__cuda_check(cudaMemset(r->dev, 0, MDK_CUDA_RING_DATA_OFFSET), "cudaMemset")) ||
	    (rc = md__cuda_check(cudaMallocHost((void **)&r->mirror,
						(size_t)capacity * MDK_CUDA_RING_REC_SIZE),
				 "cudaMallocHost mirror")) ||
	    (rc = md__cuda_check(cudaMallocHost(&hs, sizeof(uint64_t)), "cudaMallocHost head")))
		goto fail;
	r->head_seen = (volatile uint64_t *)hs;
	*r->head_seen = 0;
	if ((rc = md__cuda_check(cudaEventCreateWithFlags(&r->event, cudaEventDisableTiming |
							  cudaEventInterprocess),
				 "cudaEventCreate interprocess")) ||
	    (rc = md__cuda_check(cudaEventCreateWithFlags(&r->head_event, cudaEventDisableTiming),
				 "cudaEventCreate")) ||
	    (rc = md__cuda_check(cudaEventRecord(r->head_event, 0), "cudaEventRecord")) ||
	    (rc = md__cuda_check(cudaIpcGetMemHandle(&r->mem_handle, r->dev),
				 "cudaIpcGetMemHandle")) ||
	    (rc = md__cuda_check(cudaIpcGetEventHandle(&r->event_handle, r->event),
				 "cudaIpcGetEventHandle")) ||
	    (rc = md__cuda_check(cudaEventRecord(r->event, 0), "cudaEventRecord")) ||
	    (rc = md__cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize")))
		goto fail;
	*out = r;
	return 0;
fail:
	mdk_cuda_ring_destroy(r);
	return rc;
}

extern "C" int mdk_cuda_ring_get_export(const struct mdk_cuda_ring *r, struct mdk_cuda_ring_export *ex)
{
	if (!r || !ex)
		return md__cuda_fail(-EINVAL, "mdk_cuda_ring_get_export: NULL argument");
	memset(ex, 0, sizeof(*ex));
	ex->version = MDK_CUDA_RING_VERSION;
	ex->capacity = r->capacity;
	ex->rec_size = MDK_CUDA_RING_REC_SIZE;
	ex->device = r->device;
	ex->bytes = MDK_CUDA_RING_DATA_OFFSET + (uint64_t)r->capacity * MDK_CUDA_RING_REC_SIZE;
	memcpy(ex->mem_handle, &r->mem_handle, sizeof(ex->mem_handle));
	memcpy(ex->event_handle, &r->event_handle, sizeof(ex->event_handle));
	__atomic_store_n(&ex->magic, MDK_CUDA_RING_EXPORT_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

/* Refresh our view of the head, at most one fetch in flight; a full ring
 * must keep fetching or it would stay full forever. */
static int refresh_head(struct mdk_cuda_ring *r, cudaStream_t st)
{
	int rc = 0;
	cudaError_t q = cudaEventQuery(r->head_event);
	if (q == cudaErrorNotReady) {
		/* Not an error, but the runtime may keep it as the thread's last
		 * error, where the next launch check (ours, the page-mass
		 * kernels') would take it for a failed launch: clear it here. */
		cudaError_t le = cudaGetLastError();
		if (le != cudaSuccess && le != cudaErrorNotReady)
			return md__cuda_check(le, "ring head query");
		return 0;
	}
	if ((rc = md__cuda_check(q, "ring head query")) ||
	    (rc = md__cuda_check(cudaMemcpyAsync((void *)r->head_seen,
						 r->dev + MDK_CUDA_RING_HEAD_OFFSET, sizeof(uint64_t),
						 cudaMemcpyDeviceToHost, st),
				 "ring head fetch")) ||
	    (rc = md__cuda_check(cudaEventRecord(r->head_event, st), "ring head event")))
		return rc;
	return 0;
}

/* Slots free for records, or -EPROTO when the head is not ours to trust. */
static int64_t ring_space(struct mdk_cuda_ring *r)
{
	uint64_t head = *r->head_seen;
	uint64_t used = r->tail - head;
	if (used > r->capacity)
		return md__cuda_fail(-EPROTO, "mdk_cuda_ring_push: head %llu inconsistent with "
				     "tail %llu", (unsigned long long)head,
				     (unsigned long long)r->tail);
	return (int64_t)(r->capacity - used);
}

/* Copy `take` records into the mirror at their final slots, stamp them (pos
 * = index; records the device completes: its complement until the kernel
 * stamps them) and queue their copy to the device. */
static int stage_records(struct mdk_cuda_ring *r, const void *recs, uint32_t take, bool finish,
			 cudaStream_t st)
{
	const uint32_t mask = r->capacity - 1, rs = MDK_CUDA_RING_REC_SIZE;
	uint32_t at = (uint32_t)(r->tail & mask);
	uint32_t first = take < r->capacity - at ? take : r->capacity - at;
	memcpy(r->mirror + (size_t)at * rs, recs, (size_t)first * rs);
	memcpy(r->mirror, (const uint8_t *)recs + (size_t)first * rs, (size_t)(take - first) * rs);
	for (uint32_t i = 0; i < take; i++) {
		uint64_t index = r->tail + i;
		uint8_t *m = r->mirror + (size_t)(index & mask) * rs;
		if (finish)
			mdk_attn_rec_stage_pos(m, index);
		else {
			uint32_t pos = (uint32_t)index;
			memcpy(m + MDK_REC_OFF_POS, &pos, sizeof(pos));
		}
	}
	char *data = r->dev + MDK_CUDA_RING_DATA_OFFSET;
	int rc;
	if ((rc = md__cuda_check(cudaMemcpyAsync(data + (size_t)at * rs, r->mirror + (size_t)at * rs,
						 (size_t)first * rs, cudaMemcpyHostToDevice, st),
				 "ring push copy")))
		return rc;
	if (take > first &&
	    (rc = md__cuda_check(cudaMemcpyAsync(data, r->mirror, (size_t)(take - first) * rs,
						 cudaMemcpyHostToDevice, st),
				 "ring push copy (wrap)")))
		return rc;
	return 0;
}

/* Store the new tail after everything queued before it, then record the IPC
 * event the daemon waits on. */
static int publish_tail(struct mdk_cuda_ring *r, uint32_t take, cudaStream_t st)
{
	r->tail += take;
	md__ring_store_u64<<<1, 1, 0, st>>>((uint64_t *)(r->dev + MDK_CUDA_RING_TAIL_OFFSET),
					     r->tail);
	cudaError_t e = cudaGetLastError();
	if (e == cudaErrorNotReady) /* left by an earlier cudaEventQuery */
		e = cudaSuccess;
	int rc;
	if ((rc = md__cuda_check(e, "ring tail store")) ||
	    (rc = md__cuda_check(cudaEventRecord(r->event, st), "ring event record")))
		return rc;
	return 0;
}

extern "C" int mdk_cuda_ring_push(struct mdk_cuda_ring *r, const void *recs, uint32_t n,
				  void *stream)
{
	if (!r || (n && !recs))
		return md__cuda_fail(-EINVAL, "mdk_cuda_ring_push: NULL argument");
	cudaStream_t st = (cudaStream_t)stream;
	int64_t space = ring_space(r);
	if (space < 0)
		return (int)space;
	uint32_t take = (uint64_t)n < (uint64_t)space ? n : (uint32_t)space;
	r->dropped += n - take;
	int rc = 0;
	if (take > 0 && ((rc = stage_records(r, recs, take, false, st)) ||
			 (rc = publish_tail(r, take, st))))
		return rc;
	if ((rc = refresh_head(r, st)))
		return rc;
	return (int)take;
}

extern "C" int mdk_cuda_ring_push_attn(struct mdk_cuda_ring *r, const void *recs, uint32_t n,
				       const float *token_mass, uint32_t n_pages,
				       uint32_t page_tokens, float tau, uint32_t limit,
				       void *stream)
{
	if (!r || (n && (!recs || !token_mass)))
		return md__cuda_fail(-EINVAL, "mdk_cuda_ring_push_attn: NULL argument");
	if (page_tokens < 1 || page_tokens > 16)
		return md__cuda_fail(-EINVAL, "mdk_cuda_ring_push_attn: page_tokens %u outside 1..16",
				     page_tokens);
	for (uint32_t i = 0; i < n; i++)
		if (mdk_attn_rec_page((const uint8_t *)recs + (size_t)i * MDK_CUDA_RING_REC_SIZE) >=
		    n_pages)
			return md__cuda_fail(-EINVAL, "mdk_cuda_ring_push_attn: record %u names a page "
					     "past n_pages %u", i, n_pages);
	cudaStream_t st = (cudaStream_t)stream;
	int64_t space = ring_space(r);
	if (space < 0)
		return (int)space;
	if (limit == 0 || limit > r->capacity)
		limit = r->capacity;
	uint64_t used = r->capacity - (uint64_t)space;
	int rc;
	if (used + n > limit) {
		r->dropped += n;
		if ((rc = refresh_head(r, st)))
			return rc;
		return 0;
	}
	if (n == 0)
		return 0;
	if ((rc = stage_records(r, recs, n, true, st)))
		return rc;
	const uint32_t threads = 128;
	md__ring_finish_attn<<<(n + threads - 1) / threads, threads, 0, st>>>(
		r->dev + MDK_CUDA_RING_DATA_OFFSET, r->tail, n, r->capacity - 1, token_mass, n_pages,
		page_tokens, tau);
	if ((rc = md__cuda_check(cudaGetLastError(), "md__ring_finish_attn launch")) ||
	    (rc = publish_tail(r, n, st)) || (rc = refresh_head(r, st)))
		return rc;
	return (int)n;
}

extern "C" int64_t mdk_cuda_ring_pending(struct mdk_cuda_ring *r, void *stream)
{
	if (!r)
		return md__cuda_fail(-EINVAL, "mdk_cuda_ring_pending: NULL ring");
	int64_t space = ring_space(r);
	if (space < 0)
		return space;
	int rc = refresh_head(r, (cudaStream_t)stream);
	if (rc)
		return rc;
	return (int64_t)r->capacity - space;
}

extern "C" uint64_t mdk_cuda_ring_tail(const struct mdk_cuda_ring *r)
{
	return r ? r->tail : 0;
}

extern "C" uint64_t mdk_cuda_ring_dropped(const struct mdk_cuda_ring *r)
{
	return r ? r->dropped : 0;
}

extern "C" void mdk_cuda_ring_destroy(struct mdk_cuda_ring *r)
{
	if (!r)
		return;
	cudaDeviceSynchronize();
	if (r->event)
		cudaEventDestroy(r->event);
	if (r->head_event)
		cudaEventDestroy(r->head_event);
	if (r->head_seen)
		cudaFreeHost((void *)r->head_seen);
	if (r->mirror)
		cudaFreeHost(r->mirror);
	if (r->dev)
		cudaFree(r->dev);
	free(r);
}

extern "C" int mdk_cuda_ring_open(struct mdk_cuda_ring_reader **out,
				  const struct mdk_cuda_ring_export *ex, int device)
{
	if (!out)
		return md__cuda_fail(-EINVAL, "mdk_cuda_ring_open: NULL out");
	*out = NULL;
	if (!ex)
		return md__cuda_fail(-EINVAL, "mdk_cuda_ring_open: NULL export");
	/* Copy out before validating: the export lives in memory the engine writes. */
	struct mdk_cuda_ring_export x;
	memcpy(&x, ex, sizeof(x));
	if (x.magic != MDK_CUDA_RING_EXPORT_MAGIC || x.version != MDK_CUDA_RING_VERSION ||
	    x.rec_size != MDK_CUDA_RING_REC_SIZE || !pow2(x.capacity) || x.capacity > (1u << 24) ||
	    x.bytes != MDK_CUDA_RING_DATA_OFFSET + (uint64_t)x.capacity * MDK_CUDA_RING_REC_SIZE)
		return md__cuda_fail(-EINVAL, "mdk_cuda_ring_open: export record invalid (magic, "
				     "version, record size or capacity)");
	int rc = set_device(device);
	if (rc)
		return rc;
	struct mdk_cuda_ring_reader *rd = (struct mdk_cuda_ring_reader *)calloc(1, sizeof(*rd));
	if (!rd)
		return md__cuda_fail(-ENOMEM, "mdk_cuda_ring_open: out of memory");
	rd->device = device;
	rd->capacity = x.capacity;
	cudaIpcMemHandle_t mh;
	cudaIpcEventHandle_t eh;
	memcpy(&mh, x.mem_handle, sizeof(mh));
	memcpy(&eh, x.event_handle, sizeof(eh));
	if ((rc = md__cuda_check(cudaIpcOpenMemHandle((void **)&rd->dev, mh,
						      cudaIpcMemLazyEnablePeerAccess),
				 "cudaIpcOpenMemHandle")))
		goto fail;
	if ((rc = md__cuda_check(cudaIpcOpenEventHandle(&rd->event, eh), "cudaIpcOpenEventHandle")) ||
	    (rc = md__cuda_check(cudaStreamCreateWithFlags(&rd->stream, cudaStreamNonBlocking),
				 "cudaStreamCreate")) ||
	    (rc = md__cuda_check(cudaMallocHost((void **)&rd->pinned_idx, 2 * sizeof(uint64_t)),
				 "cudaMallocHost")) ||
	    (rc = md__cuda_check(cudaMallocHost((void **)&rd->pinned_recs,
						(size_t)x.capacity * MDK_CUDA_RING_REC_SIZE),
				 "cudaMallocHost")))
		goto fail;
	/* Start from the engine's current head (0 for a fresh ring, more when a new
	 * daemon reattaches to a running engine). */
	if ((rc = md__cuda_check(cudaMemcpy(&rd->head, rd->dev + MDK_CUDA_RING_HEAD_OFFSET,
					    sizeof(uint64_t), cudaMemcpyDeviceToHost),
				 "read ring head")))
		goto fail;
	*out = rd;
	return 0;
fail:
	mdk_cuda_ring_close(rd);
	return rc;
}

extern "C" int mdk_cuda_ring_drain(struct mdk_cuda_ring_reader *rd, void *out, uint32_t max)
{
	if (!rd || (max && !out))
		return md__cuda_fail(-EINVAL, "mdk_cuda_ring_drain: NULL argument");
	int rc;
	cudaStream_t st = rd->stream;
	if ((rc = md__cuda_check(cudaStreamWaitEvent(st, rd->event, 0), "ring event wait")) ||
	    (rc = md__cuda_check(cudaMemcpyAsync(&rd->pinned_idx[0],
						 rd->dev + MDK_CUDA_RING_TAIL_OFFSET,
						 sizeof(uint64_t), cudaMemcpyDeviceToHost, st),
				 "ring tail read")) ||
	    (rc = md__cuda_check(cudaStreamSynchronize(st), "ring tail sync")))
		return rc;
	uint64_t tail = rd->pinned_idx[0];
	uint64_t avail = tail - rd->head;
	if (tail < rd->head || avail > rd->capacity)
		return md__cuda_fail(-EPROTO, "mdk_cuda_ring_drain: tail %llu inconsistent with "
				     "head %llu (capacity %u)", (unsigned long long)tail,
				     (unsigned long long)rd->head, rd->capacity);
	uint32_t n = avail < max ? (uint32_t)avail : max;
	if (n == 0)
		return 0;
	const uint32_t mask = rd->capacity - 1, rs = MDK_CUDA_RING_REC_SIZE;
	uint32_t at = (uint32_t)(rd->head & mask);
	uint32_t first = n < rd->capacity - at ? n : rd->capacity - at;
	const char *data = rd->dev + MDK_CUDA_RING_DATA_OFFSET;
	if ((rc = md__cuda_check(cudaMemcpyAsync(rd->pinned_recs, data + (size_t)at * rs,
						 (size_t)first * rs, cudaMemcpyDeviceToHost, st),
				 "ring drain copy")))
		return rc;
	if (n > first &&
	    (rc = md__cuda_check(cudaMemcpyAsync(rd->pinned_recs + (size_t)first * rs, data,
						 (size_t)(n - first) * rs, cudaMemcpyDeviceToHost,
						 st),
				 "ring drain copy (wrap)")))
		return rc;
	if ((rc = md__cuda_check(cudaStreamSynchronize(st), "ring drain sync")))
		return rc;
	memcpy(out, rd->pinned_recs, (size_t)n * rs);
	rd->head += n;
	/* The previous head store finished at the sync above, so its pinned
	 * source may be rewritten now. */
	rd->pinned_idx[1] = rd->head;
	if ((rc = md__cuda_check(cudaMemcpyAsync(rd->dev + MDK_CUDA_RING_HEAD_OFFSET,
						 &rd->pinned_idx[1], sizeof(uint64_t),
						 cudaMemcpyHostToDevice, st),
				 "ring head store")))
		return rc;
	return (int)n;
}

extern "C" uint64_t mdk_cuda_ring_reader_head(const struct mdk_cuda_ring_reader *rd)
{
	return rd ? rd->head : 0;
}

extern "C" void mdk_cuda_ring_close(struct mdk_cuda_ring_reader *rd)
{
	if (!rd)
		return;
	if (rd->stream) {
		cudaStreamSynchronize(rd->stream);
		cudaStreamDestroy(rd->stream);
	}
	if (rd->event)
		cudaEventDestroy(rd->event);
	if (rd->pinned_idx)
		cudaFreeHost(rd->pinned_idx);
	if (rd->pinned_recs)
		cudaFreeHost(rd->pinned_recs);
	if (rd->dev)
		cudaIpcCloseMemHandle(rd->dev);
	free(rd);
}
