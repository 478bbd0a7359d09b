/*
 * cuda_internal.h — what the CUDA translation units share: the thread-local
 * error message, the device probe every entry point runs first, and the
 * mapping from cudaError_t to negative errno.
 */
#ifndef MD_CUDA_INTERNAL_H
#define MD_CUDA_INTERNAL_H

#include <cuda_runtime.h>

/* printf-style; returns rc so callers can `return md__cuda_fail(-EINVAL, ...)`. */
int md__cuda_fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 0 when a device is usable, else -ENODEV with the message set. */
int md__cuda_ready(void);
/* 0 for cudaSuccess, else -EIO (-ENODEV for driver/device errors), message set. */
int md__cuda_check(cudaError_t e, const char *what);

#endif
