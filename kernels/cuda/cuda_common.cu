/*
 * cuda_common.cu — device probing and error reporting for md_kernels_cuda.
 * Every entry point first checks that a device is usable, so on a machine with
 * the toolkit but no GPU (or no driver) callers get -ENODEV and a message saying
 * what cudaGetDeviceCount answered, never a crash or an abort.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "cuda_internal.h"
#include "md_kernels_cuda.h"

static thread_local char md__cuda_msg[256];

int md__cuda_fail(int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(md__cuda_msg, sizeof(md__cuda_msg), fmt, ap);
	va_end(ap);
	return rc;
}

static bool is_device_error(cudaError_t e)
{
	return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
	       e == cudaErrorInitializationError || e == cudaErrorDevicesUnavailable ||
	       e == cudaErrorInvalidDevice || e == cudaErrorSystemDriverMismatch ||
	       e == cudaErrorCompatNotSupportedOnDevice || e == cudaErrorStubLibrary ||
	       e == cudaErrorNoKernelImageForDevice || e == cudaErrorUnsupportedPtxVersion;
}

int md__cuda_check(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	return md__cuda_fail(is_device_error(e) ? -ENODEV : -EIO, "%s: %s (%s)", what,
			     cudaGetErrorString(e), cudaGetErrorName(e));
}

extern "C" int mdk_cuda_built(void)
{
	return 1;
}

extern "C" int mdk_cuda_probe(int *n_devices)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (n_devices)
		*n_devices = e == cudaSuccess ? n : 0;
	if (e != cudaSuccess) {
		/* Clear the sticky-free error so later calls start clean. */
		(void)cudaGetLastError();
		return md__cuda_fail(-ENODEV, "no usable CUDA device: cudaGetDeviceCount: %s (%s)",
				     cudaGetErrorString(e), cudaGetErrorName(e));
	}
	if (n == 0)
		return md__cuda_fail(-ENODEV, "no usable CUDA device: cudaGetDeviceCount found 0");
	return 0;
}

int md__cuda_ready(void)
{
	/* Only success is cached: a process that found no device keeps saying so
	 * with a fresh message, one that found one does not pay the query again. */
	static bool ready;
	if (ready)
		return 0;
	int rc = mdk_cuda_probe(NULL);
	if (rc == 0)
		ready = true;
	return rc;
}

extern "C" int mdk_cuda_alloc(void **out, size_t bytes, int device)
{
	if (!out)
		return md__cuda_fail(-EINVAL, "mdk_cuda_alloc: NULL out");
	*out = NULL;
	int rc = md__cuda_ready();
	if (rc)
		return rc;
	if ((rc = md__cuda_check(cudaSetDevice(device), "cudaSetDevice")))
		return rc;
	cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
	if (e == cudaErrorMemoryAllocation) {
		*out = NULL;
		return md__cuda_fail(-ENOMEM, "cudaMalloc %zu bytes: out of device memory", bytes);
	}
	if ((rc = md__cuda_check(e, "cudaMalloc"))) {
		*out = NULL;
		return rc;
	}
	return 0;
}

extern "C" void mdk_cuda_free(void *p)
{
	if (p)
		cudaFree(p);
}

extern "C" const char *mdk_cuda_last_error(void)
{
	return md__cuda_msg;
}
