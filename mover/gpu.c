/* SPDX-License-Identifier: MIT */
/*
 * GPU memory in the mover: importing a client's CUDA memory (an IPC handle
 * of cudaMalloc memory, or the exported fd of a VMM allocation), opening a
 * same-host peer's GPU region for direct CUDA copies (path 2), probing
 * whether the provider registers GPU memory itself (path 1, FI_HMEM), and
 * each shard's copy engine: a stream per device, events to learn when a
 * copy is done, and a pinned, fabric-registered bounce pool for writes
 * staged through host memory (path 3). The CUDA driver is loaded at run
 * time; without it (or without MV_HAVE_CUDA) GPU requests fail, saying so.
 */
#include "mover.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include "mv_cuda.h"
#include "mv_host.h"
#include "mv_sock.h"

#ifdef MV_HAVE_CUDA

static int cu_fail(char *why, size_t whylen, const char *what, CUresult r)
{
	snprintf(why, whylen, "%s: %s", what, mv_cuda_err(r));
	return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

/* The primary context of the device with this bus id, current on this thread. */
static int device_ctx(struct mover *mv, const char *busid, int *dev_out, char *why, size_t whylen)
{
	const char *nocuda;
	struct mv_cuda *cu = mv_cuda_load(&nocuda);
	CUdevice dev;
	CUresult r;

	if (!cu) {
		snprintf(why, whylen, "GPU memory needs CUDA in the mover: %s", nocuda);
		return -ENOTSUP;
	}
	r = cu->DeviceGetByPCIBusId(&dev, busid);
	if (r != CUDA_SUCCESS)
		return cu_fail(why, whylen, "no device of that PCI bus id in the mover", r);
	if (dev < 0 || dev >= MV_MAX_GPUS) {
		snprintf(why, whylen, "device %d is beyond the %d the mover handles", dev,
		         MV_MAX_GPUS);
		return -ENOTSUP;
	}
	if (!mv->gpu_ctx[dev]) {
		CUcontext ctx;
		r = cu->DevicePrimaryCtxRetain(&ctx, dev);
		if (r != CUDA_SUCCESS)
			return cu_fail(why, whylen, "cuDevicePrimaryCtxRetain", r);
		mv->gpu_ctx[dev] = ctx;
	}
	r = cu->CtxSetCurrent((CUcontext)mv->gpu_ctx[dev]);
	if (r != CUDA_SUCCESS)
		return cu_fail(why, whylen, "cuCtxSetCurrent", r);
	*dev_out = dev;
	return 0;
}

/* Maps a VMM allocation's fd into this process; returns the base address. */
static int import_vmm(int fd, int dev, uint64_t size, CUdeviceptr *base, char *why, size_t whylen)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = 0;
	CUresult r;

	r = cu->MemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
	                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (r != CUDA_SUCCESS)
		return cu_fail(why, whylen, "importing the VMM fd", r);
	r = cu->MemAddressReserve(&va, size, 0, 0, 0);
	if (r == CUDA_SUCCESS)
		r = cu->MemMap(va, size, 0, h, 0);
	if (r == CUDA_SUCCESS) {
		CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
		                     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
		r = cu->MemSetAccess(va, size, &a, 1);
	}
	/* The mapping holds the allocation from here on. */
	cu->MemRelease(h);
	if (r != CUDA_SUCCESS) {
		if (va)
			cu->MemAddressFree(va, size);
		return cu_fail(why, whylen, "mapping the VMM allocation", r);
	}
	*base = va;
	return 0;
}

static int open_desc(struct mover *mv, const struct mv_gpu_desc *g, int fd, struct mv_gpu_map *m,
                     char *why, size_t whylen)
{
	struct mv_cuda *cu;
	char busid[sizeof(g->busid) + 1];
	CUdeviceptr base = 0;
	CUresult r;
	int dev, ret;

	memcpy(busid, g->busid, sizeof(g->busid));
	busid[sizeof(g->busid)] = 0;
	ret = device_ctx(mv, busid, &dev, why, whylen);
	if (ret)
		return ret;
	cu = mv_cuda_load(NULL);
	if (g->alloc_size == 0 || g->alloc_off > g->alloc_size) {
		snprintf(why, whylen, "GPU allocation of %llu bytes, region at %llu",
		         (unsigned long long)g->alloc_size, (unsigned long long)g->alloc_off);
		return -EINVAL;
	}
	if (g->kind == MV_GPU_IPC) {
		CUipcMemHandle h;
		memcpy(&h, g->ipc, sizeof(h));
		r = cu->IpcOpenMemHandle(&base, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
		if (r != CUDA_SUCCESS)
			return cu_fail(why, whylen, "opening the CUDA IPC handle", r);
	} else if (g->kind == MV_GPU_VMM) {
		if (fd < 0) {
			snprintf(why, whylen, "a VMM region needs its exported fd");
			return -EBADF;
		}
		ret = import_vmm(fd, dev, g->alloc_size, &base, why, whylen);
		if (ret)
			return ret;
	} else {
		snprintf(why, whylen, "GPU memory kind %u is neither IPC (1) nor VMM (2)", g->kind);
		return -EINVAL;
	}
	m->kind = g->kind;
	m->dev = dev;
	m->base = (uint64_t)base;
	m->size = g->alloc_size;
	m->dptr = (uint64_t)base + g->alloc_off;
	return 0;
}

/*
 * A dma-buf fd of the region's pages, for the provider to register by fd.
 * The driver wants host-page-aligned ranges: the buffer starts at the page
 * holding dptr, and the offset says where dptr lies in it. Best effort: a
 * driver or a mapping that offers none leaves registration by address.
 */
static void map_dmabuf(struct mv_gpu_map *m, uint64_t len)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t start = m->dptr & ~(pg - 1), end = (m->dptr + len + pg - 1) & ~(pg - 1);
	int fd = -1;

	m->has_dmabuf = 0;
	if (!cu || !cu->MemGetHandleForAddressRange || !len)
		return;
	if (cu->MemGetHandleForAddressRange(&fd, (CUdeviceptr)start, end - start,
	                                    CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
	                                    0) != CUDA_SUCCESS ||
	    fd < 0)
		return;
	m->has_dmabuf = 1;
	m->dmabuf_fd = fd;
	m->dmabuf_off = m->dptr - start;
}

static void close_map(struct mv_gpu_map *m)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);

	if (m->has_dmabuf)
		close(m->dmabuf_fd);
	m->has_dmabuf = 0;
	if (!cu || !m->base)
		return;
	if (m->kind == MV_GPU_IPC) {
		cu->IpcCloseMemHandle((CUdeviceptr)m->base);
	} else {
		cu->MemUnmap((CUdeviceptr)m->base, m->size);
		cu->MemAddressFree((CUdeviceptr)m->base, m->size);
	}
	m->base = 0;
}

int mv_gpu_region_open(struct mover *mv, struct mv_region *r, const struct mv_gpu_desc *g, int fd,
                       char *why, size_t whylen)
{
	int ret;

	if (r->len > g->alloc_size - g->alloc_off) {
		snprintf(why, whylen,
		         "GPU region of %llu bytes at %llu exceeds its %llu-byte allocation",
		         (unsigned long long)r->len, (unsigned long long)g->alloc_off,
		         (unsigned long long)g->alloc_size);
		return -ERANGE;
	}
	ret = open_desc(mv, g, fd, &r->gpu, why, whylen);
	if (ret)
		return ret;
	if (mv->hmem)
		map_dmabuf(&r->gpu, r->len);
	r->gdesc = *g;
	r->is_gpu = 1;
	return 0;
}

void mv_gpu_region_close(struct mover *mv, struct mv_region *r)
{
	if (r->is_gpu)
		close_map(&r->gpu);
}

/* Asks the peer mover on this host for the fd behind one of its VMM regions. */
static int fetch_vmm_fd(const char *sock, uint32_t region, uint64_t secret, char *why,
                        size_t whylen)
{
	struct mv_gpu_fd_req req = {.id = region, .secret = secret};
	struct {
		struct mv_msg_hdr h;
		struct mv_gpu_fd_rep r;
	} rep;
	int fd, ret = mv_request(sock, MV_MSG_GPU_FD, &req, sizeof(req), &rep, sizeof(rep), &fd,
	                         why, whylen);

	if (ret)
		return ret;
	if (fd < 0) {
		snprintf(why, whylen, "the peer mover at %s sent no fd for GPU region %u", sock,
		         region);
		return -EPROTO;
	}
	return fd;
}

int mv_gpu_import_open(struct mover *mv, struct mv_import *imp, const struct mv_region_blob *b,
                       char *why, size_t whylen)
{
	int fd = -1, ret;

	/* One mapping per peer region, shared by every import of it. */
	for (struct mv_gpu_remote *g = mv->gpu_remote; g; g = g->next)
		if (g->mover_id == b->mover_id && g->region == b->region) {
			g->refs++;
			imp->remote = g;
			return 0;
		}
	struct mv_gpu_remote *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	if (b->gpu.kind == MV_GPU_VMM) {
		char sock[sizeof(b->sock) + 1];
		memcpy(sock, b->sock, sizeof(b->sock));
		sock[sizeof(b->sock)] = 0;
		fd = fetch_vmm_fd(sock, b->region, b->secret, why, whylen);
		if (fd < 0) {
			free(g);
			return fd;
		}
	}
	ret = open_desc(mv, &b->gpu, fd, &g->map, why, whylen);
	if (fd >= 0)
		close(fd);
	if (ret) {
		free(g);
		return ret;
	}
	g->mover_id = b->mover_id;
	g->region = b->region;
	g->refs = 1;
	g->next = mv->gpu_remote;
	mv->gpu_remote = g;
	imp->remote = g;
	return 0;
}

void mv_gpu_import_close(struct mover *mv, struct mv_import *imp)
{
	struct mv_gpu_remote **pp = &mv->gpu_remote, *g = imp->remote;

	if (!g || --g->refs)
		return;
	while (*pp && *pp != g)
		pp = &(*pp)->next;
	if (*pp)
		*pp = g->next;
	close_map(&g->map);
	free(g);
}

/* Shard side: a stream on each device, events, and the bounce pool. */
int mv_gpu_shard_ready(struct mv_shard *s, int dev, char *why, size_t whylen)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);
	struct mv_gpu_shard *g = &s->gpu;
	CUresult r;

	if (!cu || !s->mv->gpu_ctx[dev]) {
		snprintf(why, whylen, "no CUDA context for device %d", dev);
		return -ENOTSUP;
	}
	r = cu->CtxSetCurrent((CUcontext)s->mv->gpu_ctx[dev]);
	if (r != CUDA_SUCCESS)
		return cu_fail(why, whylen, "cuCtxSetCurrent", r);
	if (!g->stream[dev]) {
		CUstream st;
		r = cu->StreamCreate(&st, CU_STREAM_NON_BLOCKING);
		if (r != CUDA_SUCCESS)
			return cu_fail(why, whylen, "cuStreamCreate", r);
		g->stream[dev] = st;
	}
	if (!g->bounce) {
		/* Pinned once, in the first device's context: portable to all. */
		void *p;
		r = cu->MemAllocHost(&p, (size_t)MV_BOUNCE_CHUNKS * MV_CHUNK);
		if (r != CUDA_SUCCESS)
			return cu_fail(why, whylen, "pinning the bounce pool", r);
		uint64_t key = 0;
		int ret = mv_fabric_reg(&s->fab, p, (size_t)MV_BOUNCE_CHUNKS * MV_CHUNK,
		                        0xb0000000u + (uint32_t)s->id, &g->bounce_mr,
		                        &g->bounce_desc, &key, why, whylen);
		if (ret) {
			cu->MemFreeHost(p);
			return ret;
		}
		g->bounce = p;
		g->free_chunks = (1u << MV_BOUNCE_CHUNKS) - 1;
	}
	return 0;
}

/* Records an event after the copies queued so far; events are reused. */
int mv_gpu_event(struct mv_shard *s, int dev, void **ev, char *why, size_t whylen)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);
	struct mv_gpu_shard *g = &s->gpu;
	CUevent e;
	CUresult r;

	if (g->nev_free[dev]) {
		e = (CUevent)g->ev_free[dev][--g->nev_free[dev]];
	} else {
		r = cu->EventCreate(&e, CU_EVENT_DISABLE_TIMING);
		if (r != CUDA_SUCCESS)
			return cu_fail(why, whylen, "cuEventCreate", r);
	}
	r = cu->EventRecord(e, (CUstream)g->stream[dev]);
	if (r != CUDA_SUCCESS) {
		cu->EventDestroy(e);
		return cu_fail(why, whylen, "cuEventRecord", r);
	}
	*ev = e;
	return 0;
}

/* 1 done, 0 not yet, <0 failed (why says how). A done event is recycled. */
int mv_gpu_event_done(struct mv_shard *s, int dev, void *ev, char *why, size_t whylen)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);
	struct mv_gpu_shard *g = &s->gpu;

	if (ev == MV_GPU_EV_DONE)
		return 1; /* the stream was waited for instead */
	CUresult r = cu->EventQuery((CUevent)ev);

	if (r == CUDA_ERROR_NOT_READY)
		return 0;
	if (r == CUDA_SUCCESS && g->nev_free[dev] < sizeof(g->ev_free[0]) / sizeof(void *))
		g->ev_free[dev][g->nev_free[dev]++] = ev;
	else
		cu->EventDestroy((CUevent)ev);
	return r == CUDA_SUCCESS ? 1 : cu_fail(why, whylen, "CUDA copy", r);
}

int mv_gpu_copy(struct mv_shard *s, int dev, uint64_t dst, int dst_dev, uint64_t src, int src_dev,
                uint64_t len, char *why, size_t whylen)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);
	CUstream st = (CUstream)s->gpu.stream[dev];
	CUresult r;

	if (dst_dev >= 0 && src_dev >= 0)
		r = cu->MemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, len, st);
	else if (dst_dev >= 0)
		r = cu->MemcpyHtoDAsync((CUdeviceptr)dst, (const void *)(uintptr_t)src, len, st);
	else
		r = cu->MemcpyDtoHAsync((void *)(uintptr_t)dst, (CUdeviceptr)src, len, st);
	return r == CUDA_SUCCESS ? 0 : cu_fail(why, whylen, "cuMemcpyAsync", r);
}

/* Pinned host memory (page-locked for fast copies), in any device's context. */
void *mv_gpu_pinned(struct mv_shard *s, size_t len, char *why, size_t whylen)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);
	void *p = NULL;
	CUresult r = cu ? cu->MemAllocHost(&p, len) : CUDA_ERROR_NOT_INITIALIZED;

	if (r != CUDA_SUCCESS) {
		cu_fail(why, whylen, "pinning host memory", r);
		return NULL;
	}
	return p;
}

void mv_gpu_unpin(void *p)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);

	if (cu && p)
		cu->MemFreeHost(p);
}

/* Blocks until everything queued on the device's stream is done. */
int mv_gpu_sync(struct mv_shard *s, int dev, char *why, size_t whylen)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);
	CUresult r = cu->StreamSynchronize((CUstream)s->gpu.stream[dev]);

	return r == CUDA_SUCCESS ? 0 : cu_fail(why, whylen, "cuStreamSynchronize", r);
}

void mv_gpu_shard_close(struct mv_shard *s)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);

	if (!cu)
		return;
	for (int d = 0; d < MV_MAX_GPUS; d++)
		while (s->gpu.nev_free[d])
			cu->EventDestroy((CUevent)s->gpu.ev_free[d][--s->gpu.nev_free[d]]);
	if (s->gpu.bounce_mr)
		fi_close(&s->gpu.bounce_mr->fid);
	if (s->gpu.bounce)
		cu->MemFreeHost(s->gpu.bounce);
	s->gpu.bounce = NULL;
}

/* CUDA device 0, its primary context current on this thread (the start's
 * probes: FI_HMEM here, the paths' rates in gpu_calib.c). */
int mv_gpu_dev0(struct mover *mv, int *dev_out, char *why, size_t whylen)
{
	const char *nocuda;
	struct mv_cuda *cu = mv_cuda_load(&nocuda);
	char busid[32];
	CUdevice dev;

	if (!cu) {
		snprintf(why, whylen, "no GPU here (%s)", nocuda);
		return -ENOTSUP;
	}
	if (cu->DeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cu->DeviceGetPCIBusId(busid, sizeof(busid), dev) != CUDA_SUCCESS) {
		snprintf(why, whylen, "cannot name CUDA device 0");
		return -EIO;
	}
	return device_ctx(mv, busid, dev_out, why, whylen);
}

int mv_gpu_hmem_probe(struct mover *mv, char *why, size_t whylen)
{
	struct mv_cuda *cu;
	CUdeviceptr p = 0;
	CUresult r;
	int d, ret;

	ret = mv_gpu_dev0(mv, &d, why, whylen);
	if (ret)
		return ret;
	cu = mv_cuda_load(NULL);
	r = cu->MemAlloc(&p, 1 << 20);
	if (r != CUDA_SUCCESS)
		return cu_fail(why, whylen, "cuMemAlloc for the FI_HMEM probe", r);
	struct mv_gpu_map m = {.dev = d, .dptr = (uint64_t)p};
	map_dmabuf(&m, 1 << 20);
	ret = mv_fabric_hmem_probe(mv->prov, mv->shards[0].iface, &m, 1 << 20, &mv->hmem_dmabuf,
	                           why, whylen);
	if (m.has_dmabuf)
		close(m.dmabuf_fd);
	cu->MemFree(p);
	return ret;
}

#else /* !MV_HAVE_CUDA */

int mv_gpu_region_open(struct mover *mv, struct mv_region *r, const struct mv_gpu_desc *g, int fd,
                       char *why, size_t whylen)
{
	snprintf(why, whylen, "this mover was built without CUDA");
	return -ENOTSUP;
}
void mv_gpu_region_close(struct mover *mv, struct mv_region *r)
{
}
int mv_gpu_import_open(struct mover *mv, struct mv_import *imp, const struct mv_region_blob *b,
                       char *why, size_t whylen)
{
	snprintf(why, whylen, "this mover was built without CUDA");
	return -ENOTSUP;
}
void mv_gpu_import_close(struct mover *mv, struct mv_import *imp)
{
}
int mv_gpu_shard_ready(struct mv_shard *s, int dev, char *why, size_t whylen)
{
	snprintf(why, whylen, "this mover was built without CUDA");
	return -ENOTSUP;
}
int mv_gpu_event(struct mv_shard *s, int dev, void **ev, char *why, size_t whylen)
{
	return -ENOTSUP;
}
int mv_gpu_event_done(struct mv_shard *s, int dev, void *ev, char *why, size_t whylen)
{
	return -ENOTSUP;
}
int mv_gpu_copy(struct mv_shard *s, int dev, uint64_t dst, int dst_dev, uint64_t src, int src_dev,
                uint64_t len, char *why, size_t whylen)
{
	return -ENOTSUP;
}
int mv_gpu_sync(struct mv_shard *s, int dev, char *why, size_t whylen)
{
	return -ENOTSUP;
}
void *mv_gpu_pinned(struct mv_shard *s, size_t len, char *why, size_t whylen)
{
	snprintf(why, whylen, "this mover was built without CUDA");
	return NULL;
}
void mv_gpu_unpin(void *p)
{
}
void mv_gpu_shard_close(struct mv_shard *s)
{
}
int mv_gpu_dev0(struct mover *mv, int *dev_out, char *why, size_t whylen)
{
	snprintf(why, whylen, "this mover was built without CUDA");
	return -ENOTSUP;
}
int mv_gpu_hmem_probe(struct mover *mv, char *why, size_t whylen)
{
	snprintf(why, whylen, "this mover was built without CUDA");
	return -ENOTSUP;
}
#endif
