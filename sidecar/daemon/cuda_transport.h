/*
 * cuda_transport.h — the optional CUDA IPC stats ring (HELLO
 * stats_transport=cuda, docs/abi.md §6): the engine publishes a
 * struct mdk_cuda_ring_export in its engine segment; memdecayd opens it with
 * kernels/include/md_cuda_ring.h and drains it into the same ingest path as
 * the host ring.  A memdecayd built without CUDA refuses such an engine.
 */
#ifndef MD_CUDA_TRANSPORT_H
#define MD_CUDA_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

struct md__daemon;
struct md__peer;

enum md__stats_transport {
	MD__STATS_HOST = 0,
	MD__STATS_CUDA = 1,
};

/* At HELLO: 0 if this daemon can serve a CUDA-ring engine now, else -ENOTSUP
 * (built without CUDA) or -ENODEV (no usable device) with the message. */
int md__cuda_transport_admit(char *err, size_t errlen);

/* Validates the export record in the engine segment (copied out first) and
 * opens it.  0; -EAGAIN while the engine has not published it yet; other
 * negative errno with the message. */
int md__cuda_transport_open(struct md__peer *e, char *err, size_t errlen);

/* Each service pass: open the ring once published, then drain a bounded
 * batch into e->cuda_buf.  Returns the records drained (0 while nothing is
 * published), the first one's ring index in *first; or a negative errno with
 * the message and the detach reason (enum md__detach_reason) the caller
 * detaches the engine for. */
int md__cuda_transport_drain(struct md__peer *e, uint64_t *first, int *reason, char *err,
			     size_t errlen);

void md__cuda_transport_close(struct md__peer *e);

#endif
