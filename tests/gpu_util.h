/* SPDX-License-Identifier: MIT */
/*
 * What the GPU suites share (test_gpu.c, test_gpu_guard.c,
 * test_gpu_chunks.c): CUDA started in
 * the check child after the movers (a process forked after CUDA starts
 * cannot use it), device memory of both kinds (cudaMalloc-style, shared by
 * IPC handle; VMM, exported as a POSIX fd), copies to and from it, a pair
 * of clients on movers A and B with B's regions imported by A, and whether
 * a GPU is usable at all (asked in a child, so the check parent never
 * touches CUDA). Include after mvtest.h, under MV_HAVE_CUDA.
 */
#ifndef MV_TEST_GPU_UTIL_H
#define MV_TEST_GPU_UTIL_H

#include <check.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mv_cuda.h"
#include "mvtest.h"

static struct mv_cuda *cu;

static inline void gpu_setup_on(void (*movers)(void))
{
	const char *why;
	CUcontext ctx;
	CUdevice dev;

	movers(); /* movers first: fork+exec before this process starts CUDA */
	cu = mv_cuda_load(&why);
	ck_assert_msg(cu, "%s", why);
	ck_assert_int_eq(cu->DeviceGet(&dev, 0), CUDA_SUCCESS);
	ck_assert_int_eq(cu->DevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
	ck_assert_int_eq(cu->CtxSetCurrent(ctx), CUDA_SUCCESS);
}

static inline void gpu_setup(void)
{
	gpu_setup_on(setup_tcp);
}

/* cudaMalloc-style memory: shared through an IPC handle. */
static inline CUdeviceptr dev_alloc(size_t n)
{
	CUdeviceptr p;

	ck_assert_int_eq(cu->MemAlloc(&p, n), CUDA_SUCCESS);
	return p;
}

/* A VMM allocation that may be exported as a POSIX fd. */
static inline CUdeviceptr vmm_alloc(size_t n, size_t *size)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
	                            .requestedHandleTypes =
	                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	size_t gran;
	CUmemGenericAllocationHandle h;
	CUdeviceptr p;

	ck_assert_int_eq(
	    cu->MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
	    CUDA_SUCCESS);
	*size = (n + gran - 1) / gran * gran;
	ck_assert_int_eq(cu->MemCreate(&h, *size, &prop, 0), CUDA_SUCCESS);
	ck_assert_int_eq(cu->MemAddressReserve(&p, *size, 0, 0, 0), CUDA_SUCCESS);
	ck_assert_int_eq(cu->MemMap(p, *size, 0, h, 0), CUDA_SUCCESS);
	CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
	                     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	ck_assert_int_eq(cu->MemSetAccess(p, *size, &a, 1), CUDA_SUCCESS);
	cu->MemRelease(h);
	return p;
}

static inline void to_dev(CUdeviceptr d, const void *h, size_t n)
{
	ck_assert_int_eq(cu->MemcpyHtoD(d, h, n), CUDA_SUCCESS);
}

static inline void from_dev(void *h, CUdeviceptr d, size_t n)
{
	ck_assert_int_eq(cu->MemcpyDtoH(h, d, n), CUDA_SUCCESS);
}

/* A sender on A, a receiver on B, B's region imported by A. */
struct gpair {
	struct mvc *a, *b;
	uint32_t peer, imp;
};

static inline void gpair_open(struct gpair *p)
{
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);

	ck_assert_int_eq(mvc_connect(&p->a, A.sock), 0);
	ck_assert_int_eq(mvc_connect(&p->b, B.sock), 0);
	ck_assert_int_eq(mvc_address(p->b, blob, &len), 0);
	ck_assert_msg(mvc_peer_add(p->a, blob, len, &p->peer) == 0, "%s", mvc_error(p->a));
}

static inline uint32_t gpair_import(struct gpair *p, uint32_t region)
{
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	uint32_t h;

	ck_assert_int_eq(mvc_region_blob(p->b, region, blob, &len), 0);
	ck_assert_msg(mvc_import(p->a, p->peer, blob, len, &h) == 0, "%s", mvc_error(p->a));
	return h;
}

/* n bytes of device memory on each side of a pair: the source holds want
 * (filled from seed), the target is zeroed; both registered, the target
 * imported by the sender. */
struct gbufs {
	CUdeviceptr s, d;
	struct mvc_mem src, dst;
	uint32_t imp;
};

static inline void gbufs_open(struct gpair *p, struct gbufs *g, uint8_t *want, size_t n,
                              uint64_t seed)
{
	g->s = dev_alloc(n);
	g->d = dev_alloc(n);
	fill(want, n, seed);
	to_dev(g->s, want, n);
	ck_assert_int_eq(cu->MemsetD8(g->d, 0, n), CUDA_SUCCESS);
	ck_assert_int_eq(mvc_register_cuda(p->a, (void *)g->s, n, &g->src), 0);
	ck_assert_int_eq(mvc_register_cuda(p->b, (void *)g->d, n, &g->dst), 0);
	g->imp = gpair_import(p, g->dst.region);
}

/* Two movers of one host taken as two hosts, GPU writes staged. */
static inline void landing_setup(void)
{
	mover_extra = "--no-gpu-copy"; /* one host, taken as two */
	mover_extra2 = "--gpu-path=staged";
	gpu_setup();
}

/* In a child, so the parent stays free of CUDA: "" if usable, else why not. */
static inline int gpu_usable(char *why, size_t len)
{
	int fds[2];

	if (pipe(fds))
		return 0;
	pid_t pid = fork();
	if (pid == 0) {
		const char *w = NULL;
		struct mv_cuda *c = mv_cuda_load(&w);
		if (!c && write(fds[1], w, strlen(w)) < 0)
			_exit(2);
		_exit(c ? 0 : 1);
	}
	close(fds[1]);
	ssize_t n = read(fds[0], why, len - 1);
	why[n > 0 ? n : 0] = 0;
	close(fds[0]);
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

#endif
