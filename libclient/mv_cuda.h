/* SPDX-License-Identifier: MIT */
/*
 * The CUDA driver API, loaded at run time (dlopen of libcuda.so.1) so that
 * nothing in the project needs CUDA to link or run: libclient, the mover and
 * the tests use it only when GPU memory is involved, and say plainly when
 * no driver or device is there. Built only with the toolkit's cuda.h
 * (MV_HAVE_CUDA); without it every call reports -ENOTSUP.
 *
 * Concurrency: mv_cuda_load() is safe to call from any thread (pthread_once).
 */
#ifndef MV_CUDA_H
#define MV_CUDA_H

#include <errno.h>
#include <stdio.h>

#ifdef MV_HAVE_CUDA
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

struct mv_cuda {
	int ok;        /* loaded and cuInit succeeded */
	char why[160]; /* otherwise, why not */
#define MV_CU_FNS(X)                                                                               \
	X(Init, cuInit, "cuInit")                                                                  \
	X(GetErrorString, cuGetErrorString, "cuGetErrorString")                                    \
	X(DeviceGet, cuDeviceGet, "cuDeviceGet")                                                   \
	X(DeviceGetCount, cuDeviceGetCount, "cuDeviceGetCount")                                    \
	X(DeviceGetPCIBusId, cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId")                           \
	X(DeviceGetByPCIBusId, cuDeviceGetByPCIBusId, "cuDeviceGetByPCIBusId")                     \
	X(DeviceGetAttribute, cuDeviceGetAttribute, "cuDeviceGetAttribute")                        \
	X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")            \
	X(CtxSetCurrent, cuCtxSetCurrent, "cuCtxSetCurrent")                                       \
	X(CtxSynchronize, cuCtxSynchronize, "cuCtxSynchronize")                                    \
	X(PointerGetAttribute, cuPointerGetAttribute, "cuPointerGetAttribute")                     \
	X(MemGetAddressRange, cuMemGetAddressRange, "cuMemGetAddressRange_v2")                     \
	X(MemAlloc, cuMemAlloc, "cuMemAlloc_v2")                                                   \
	X(MemFree, cuMemFree, "cuMemFree_v2")                                                      \
	X(MemAllocHost, cuMemAllocHost, "cuMemAllocHost_v2")                                       \
	X(MemFreeHost, cuMemFreeHost, "cuMemFreeHost")                                             \
	X(MemHostRegister, cuMemHostRegister, "cuMemHostRegister_v2")                              \
	X(MemHostUnregister, cuMemHostUnregister, "cuMemHostUnregister")                           \
	X(MemcpyHtoD, cuMemcpyHtoD, "cuMemcpyHtoD_v2")                                             \
	X(MemcpyDtoH, cuMemcpyDtoH, "cuMemcpyDtoH_v2")                                             \
	X(MemcpyDtoD, cuMemcpyDtoD, "cuMemcpyDtoD_v2")                                             \
	X(MemcpyHtoDAsync, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")                              \
	X(MemcpyDtoHAsync, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")                              \
	X(MemcpyDtoDAsync, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")                              \
	X(MemsetD8, cuMemsetD8, "cuMemsetD8_v2")                                                   \
	X(IpcGetMemHandle, cuIpcGetMemHandle, "cuIpcGetMemHandle")                                 \
	X(IpcOpenMemHandle, cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2")                           \
	X(IpcCloseMemHandle, cuIpcCloseMemHandle, "cuIpcCloseMemHandle")                           \
	X(MemCreate, cuMemCreate, "cuMemCreate")                                                   \
	X(MemRelease, cuMemRelease, "cuMemRelease")                                                \
	X(MemRetainAllocationHandle, cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle")   \
	X(MemExportToShareableHandle, cuMemExportToShareableHandle,                                \
	  "cuMemExportToShareableHandle")                                                          \
	X(MemImportFromShareableHandle, cuMemImportFromShareableHandle,                            \
	  "cuMemImportFromShareableHandle")                                                        \
	X(MemGetAllocationGranularity, cuMemGetAllocationGranularity,                              \
	  "cuMemGetAllocationGranularity")                                                         \
	X(MemAddressReserve, cuMemAddressReserve, "cuMemAddressReserve")                           \
	X(MemAddressFree, cuMemAddressFree, "cuMemAddressFree")                                    \
	X(MemMap, cuMemMap, "cuMemMap")                                                            \
	X(MemUnmap, cuMemUnmap, "cuMemUnmap")                                                      \
	X(MemSetAccess, cuMemSetAccess, "cuMemSetAccess")                                          \
	X(StreamCreate, cuStreamCreate, "cuStreamCreate")                                          \
	X(StreamSynchronize, cuStreamSynchronize, "cuStreamSynchronize")                           \
	X(EventCreate, cuEventCreate, "cuEventCreate")                                             \
	X(EventRecord, cuEventRecord, "cuEventRecord")                                             \
	X(EventQuery, cuEventQuery, "cuEventQuery")                                                \
	X(EventSynchronize, cuEventSynchronize, "cuEventSynchronize")                              \
	X(EventDestroy, cuEventDestroy, "cuEventDestroy_v2")                                       \
	X(EventElapsedTime, cuEventElapsedTime, "cuEventElapsedTime_v2")
#define MV_CU_FIELD(field, decl, sym) __typeof__(&decl) field;
	MV_CU_FNS(MV_CU_FIELD)
#undef MV_CU_FIELD
	/* Optional (CUDA 11.7 and later drivers): a dma-buf fd for a range of
	 * device memory, how current NIC stacks register GPU memory. NULL when
	 * the driver lacks it; callers fall back. */
	CUresult (*MemGetHandleForAddressRange)(void *handle, CUdeviceptr dptr, size_t size,
	                                        int type, unsigned long long flags);
};

static struct mv_cuda mv_cu;
static pthread_once_t mv_cu_once = PTHREAD_ONCE_INIT;

static void mv_cuda_load_once(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		snprintf(mv_cu.why, sizeof(mv_cu.why), "no CUDA driver (libcuda.so.1): %s",
		         dlerror());
		return;
	}
#define MV_CU_LOAD(field, decl, sym)                                                               \
	mv_cu.field = (__typeof__(&decl))dlsym(h, sym);                                            \
	if (!mv_cu.field) {                                                                        \
		snprintf(mv_cu.why, sizeof(mv_cu.why), "the CUDA driver lacks %s", sym);           \
		return;                                                                            \
	}
	MV_CU_FNS(MV_CU_LOAD)
#undef MV_CU_LOAD
	mv_cu.MemGetHandleForAddressRange = (__typeof__(mv_cu.MemGetHandleForAddressRange))dlsym(
	    h, "cuMemGetHandleForAddressRange");
	CUresult r = mv_cu.Init(0);
	int n = 0;
	if (r == CUDA_SUCCESS)
		r = mv_cu.DeviceGetCount(&n);
	if (r != CUDA_SUCCESS || n == 0) {
		const char *s = NULL;
		mv_cu.GetErrorString(r, &s);
		snprintf(mv_cu.why, sizeof(mv_cu.why), "no CUDA device: %s",
		         r != CUDA_SUCCESS ? (s ? s : "cuInit failed") : "the driver sees none");
		return;
	}
	mv_cu.ok = 1;
}

/* Returns the loaded API, or NULL with *why saying why not. */
static inline struct mv_cuda *mv_cuda_load(const char **why)
{
	pthread_once(&mv_cu_once, mv_cuda_load_once);
	if (!mv_cu.ok) {
		if (why)
			*why = mv_cu.why;
		return NULL;
	}
	return &mv_cu;
}

static inline const char *mv_cuda_err(CUresult r)
{
	const char *s = NULL;

	if (mv_cu.GetErrorString)
		mv_cu.GetErrorString(r, &s);
	return s ? s : "unknown CUDA error";
}
#endif /* MV_HAVE_CUDA */

#endif
