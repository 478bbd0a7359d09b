/*
 * cuda_transport.c — memdecayd's side of the CUDA IPC stats ring
 * (cuda_transport.h).  The export record lives in the engine segment at
 * off.engine.cuda_ring_export; like everything there it is copied out before
 * it is looked at, and md_cuda_ring.h validates the copy again (magic,
 * version, record size, capacity) before it opens any handle.  This file
 * only opens and drains the device ring; engine.c puts what it drained
 * through the host ring's checks (the stamp, then the same accounting and
 * host validation), so it calls no other daemon file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_transport.h"
#include "daemon.h"
#include "log.h"
#include "md_cuda_ring.h"

_Static_assert(sizeof(struct mdk_cuda_ring_export) == MD_CUDA_RING_EXPORT_SIZE,
	       "the ABI reserves the export record's size");

int md__cuda_transport_admit(char *err, size_t errlen)
{
	if (!mdk_cuda_built()) {
		snprintf(err, errlen,
			 "memdecayd was built without CUDA; stats_transport=cuda needs MEMDECAY_CUDA=ON");
		return -ENOTSUP;
	}
	int n = 0;
	int rc = mdk_cuda_probe(&n);
	if (rc < 0) {
		snprintf(err, errlen, "stats_transport=cuda: %s", mdk_cuda_last_error());
		return rc;
	}
	return 0;
}

int md__cuda_transport_open(struct md__peer *e, char *err, size_t errlen)
{
	if (!e->cuda_export_off) {
		snprintf(err, errlen, "no CUDA export record in this engine's segment");
		return -EINVAL;
	}
	const char *src = (const char *)e->eseg + e->cuda_export_off;
	if (md_load_acquire((const uint64_t *)src) != MDK_CUDA_RING_EXPORT_MAGIC)
		return -EAGAIN; /* magic is written last: not published yet */
	struct mdk_cuda_ring_export ex;
	const uint64_t *s64 = (const uint64_t *)src;
	uint64_t *d64 = (uint64_t *)&ex;
	for (size_t k = 0; k < sizeof(ex) / 8; k++)
		d64[k] = md_load_relaxed(&s64[k]);
	int rc = mdk_cuda_ring_open(&e->cuda_rd, &ex, 0);
	if (rc < 0) {
		e->cuda_rd = NULL;
		snprintf(err, errlen, "cannot open the engine's CUDA stats ring: %s",
			 mdk_cuda_last_error());
		return rc;
	}
	return 0;
}

int md__cuda_transport_drain(struct md__peer *e, uint64_t *first, int *reason, char *err,
			     size_t errlen)
{
	if (!e->cuda_rd) {
		int rc = md__cuda_transport_open(e, err, errlen);
		if (rc == -EAGAIN)
			return 0;
		if (rc < 0) {
			*reason = MD__DETACH_ERROR;
			return rc;
		}
		md__info("engine %u (%s): CUDA stats ring opened", e->id, e->name);
	}
	if (!e->cuda_buf && !(e->cuda_buf = malloc(MD__INGEST_BATCH * sizeof(struct md_stats_rec))))
		return 0;
	*first = mdk_cuda_ring_reader_head(e->cuda_rd);
	int n = mdk_cuda_ring_drain(e->cuda_rd, e->cuda_buf, MD__INGEST_BATCH);
	if (n < 0) {
		snprintf(err, errlen, "CUDA stats ring: %s", mdk_cuda_last_error());
		*reason = MD__DETACH_VIOLATIONS;
		return n;
	}
	return n;
}

void md__cuda_transport_close(struct md__peer *e)
{
	if (e->cuda_rd)
		mdk_cuda_ring_close(e->cuda_rd);
	e->cuda_rd = NULL;
	free(e->cuda_buf);
	e->cuda_buf = NULL;
}
