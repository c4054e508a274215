/* SPDX-License-Identifier: MIT */
/*
 * libclient's memory: regions the mover can reach. mvc_alloc makes a new
 * sealed memfd and zeroes its pages on several threads, mvc_register_fd
 * registers a range of the caller's memfd or hugetlbfs file,
 * mvc_register_cuda CUDA device memory (an IPC handle or a VMM fd); each is
 * kept in rejoin.c's table, under the id the application holds, so that a
 * new mover can be given it again. mvc_free undoes any of them.
 */
#include "mvc_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mv_cuda.h"

/* Registers [off, off + len) of fd; *region: the mover's id. */
int mvc_reg_fd(struct mvc *c, int fd, uint64_t off, uint64_t len, uint32_t *region)
{
	struct mv_reg_req req = {.offset = off, .len = len};
	struct mv_reg_rep rep;
	int ret =
	    mvc_call(c, MV_MSG_REG, &req, sizeof(req), &fd, 1, &rep, sizeof(rep), NULL, 0, NULL);

	if (ret)
		return ret;
	*region = rep.region;
	return 0;
}

/* Registers a region and keeps what a new mover needs to register it
 * again; m->region is the application's id for it. */
static int reg(struct mvc *c, int fd, uint64_t off, uint64_t len, struct mvc_mem *m)
{
	uint32_t cur;
	int ret = mvc_reg_fd(c, fd, off, len, &cur);

	if (ret)
		return ret;
	struct mvc_obj o = {.kind = MVC_OBJ_REGION, .cur = cur, .fd = fd, .off = off, .len = len};
	ret = mvc_obj_add(c, &o, NULL, 0, &m->region);
	if (ret) {
		mvc_id_call(c, MV_MSG_DEREG, cur);
		return mvc_fail(c, ret, "no memory to keep the region for a reconnect");
	}
	return 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#define POPULATE_SLICE   (64ull << 20) /* at least this much per populating thread */
#define POPULATE_THREADS 16

struct populate_slice {
	pthread_t thread;
	uint8_t *addr;
	size_t len;
	int err;
};

static void *populate_one(void *arg)
{
	struct populate_slice *p = arg;

	p->err = madvise(p->addr, p->len, MADV_POPULATE_WRITE) ? errno : 0;
	return NULL;
}

/*
 * Allocates and zeroes the pages of a new region on up to one thread per
 * CPU, 64 MiB a thread at least: the kernel zeroes 4 KiB shmem pages at
 * about the speed of a memset into fresh memory, one core's worth, so a
 * large KV pool comes up that many times faster (1 GiB here: 2.7 GB/s on
 * one thread, 4.2 on two). 0, or -errno when the kernel has no
 * MADV_POPULATE_WRITE; the caller then maps with MAP_POPULATE instead.
 */
static int populate(uint8_t *addr, size_t len)
{
	struct populate_slice sl[POPULATE_THREADS];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t n = len / POPULATE_SLICE, page = (size_t)sysconf(_SC_PAGESIZE);
	int err = 0;

	if (n > (size_t)(cpus > 0 ? cpus : 1))
		n = (size_t)(cpus > 0 ? cpus : 1);
	if (n > POPULATE_THREADS)
		n = POPULATE_THREADS;
	if (n <= 1) {
		struct populate_slice one = {.addr = addr, .len = len};
		populate_one(&one);
		return -one.err;
	}
	size_t each = (len / n + page - 1) & ~(page - 1);
	size_t k = 0;
	for (; k < n && k * each < len; k++) {
		sl[k] = (struct populate_slice){
		    .addr = addr + k * each, .len = len - k * each < each ? len - k * each : each};
		if (pthread_create(&sl[k].thread, NULL, populate_one, &sl[k])) {
			populate_one(&sl[k]); /* no thread to spare: this one does it */
			sl[k].thread = 0;
		}
	}
	for (size_t i = 0; i < k; i++) {
		if (sl[i].thread)
			pthread_join(sl[i].thread, NULL);
		if (sl[i].err && !err)
			err = sl[i].err;
	}
	return -err;
}

int mvc_alloc(struct mvc *c, uint64_t len, struct mvc_mem *out)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t size = (len + (uint64_t)page - 1) & ~(uint64_t)(page - 1);
	int fd, ret;

	memset(out, 0, sizeof(*out));
	out->fd = -1;
	if (len == 0)
		return mvc_fail(c, -EINVAL, "cannot allocate an empty region");
	fd = memfd_create("mvc-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return mvc_fail(c, -errno, "memfd_create: %s", strerror(errno));
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		ret = mvc_fail(c, -errno, "sizing the region memfd to %llu bytes: %s",
		               (unsigned long long)size, strerror(errno));
		goto err_close;
	}
	out->addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (out->addr == MAP_FAILED) {
		ret = mvc_fail(c, -errno, "mapping %llu bytes: %s", (unsigned long long)size,
		               strerror(errno));
		goto err_close;
	}
	/* The pages exist before the mover maps them (it populates its own
	 * mapping of them, which is then only page tables). */
	ret = populate(out->addr, size);
	if (ret == -EINVAL) {
		/* An older kernel: one thread, as the mapping's MAP_POPULATE. */
		munmap(out->addr, size);
		out->addr =
		    mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
		ret = out->addr == MAP_FAILED ? -errno : 0;
	}
	if (ret) {
		ret = mvc_fail(c, ret, "allocating %llu bytes of region memory: %s",
		               (unsigned long long)size, strerror(-ret));
		if (out->addr != MAP_FAILED)
			goto err_unmap;
		goto err_close;
	}
	ret = reg(c, fd, 0, len, out);
	if (ret)
		goto err_unmap;
	out->len = len;
	out->fd = fd;
	return 0;

err_unmap:
	munmap(out->addr, size);
err_close:
	close(fd);
	out->addr = NULL;
	return ret;
}

int mvc_register_fd(struct mvc *c, int fd, uint64_t offset, uint64_t len, struct mvc_mem *out)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t moff = offset & ~(uint64_t)(page - 1);
	int ret, own;

	memset(out, 0, sizeof(*out));
	out->fd = -1;
	own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (own < 0)
		return mvc_fail(c, -errno, "dup of fd %d: %s", fd, strerror(errno));
	ret = reg(c, own, offset, len, out);
	if (ret)
		goto err_close;
	uint8_t *p =
	    mmap(NULL, len + (offset - moff), PROT_READ | PROT_WRITE, MAP_SHARED, own, (off_t)moff);
	if (p == MAP_FAILED) {
		ret = mvc_fail(c, -errno, "mapping the registered range: %s", strerror(errno));
		mvc_id_call(c, MV_MSG_DEREG, mvc_obj_del(c, MVC_OBJ_REGION, out->region));
		goto err_close;
	}
	out->addr = p + (offset - moff);
	out->len = len;
	out->fd = own;
	return 0;

err_close:
	close(own);
	return ret;
}

int mvc_free(struct mvc *c, struct mvc_mem *m)
{
	long page = sysconf(_SC_PAGESIZE);
	uint32_t cur = mvc_obj_del(c, MVC_OBJ_REGION, m->region);
	int ret = cur == MVC_ID_LOST ? 0 : mvc_id_call(c, MV_MSG_DEREG, cur);
	uintptr_t a = (uintptr_t)m->addr, base = a & ~(uintptr_t)(page - 1);

	for (uint32_t i = 0; i < c->nnear; i++)
		if (c->near[i].region == m->region)
			c->near[i] = c->near[--c->nnear];
	if (m->addr && !(m->flags & MVC_MEM_GPU))
		munmap((void *)base, m->len + (a - base));
	if (m->fd >= 0)
		close(m->fd);
	memset(m, 0, sizeof(*m));
	m->fd = -1;
	return ret;
}

#ifdef MV_HAVE_CUDA
/* Registers CUDA memory with the mover (the request, and the call). */
int mvc_cuda_reg(struct mvc *c, void *dptr, uint64_t len, struct mv_reg_rep *repp)
{
	const char *nocuda;
	struct mv_cuda *cu = mv_cuda_load(&nocuda);
	struct mv_reg_gpu_req req = {.len = len};
	CUdeviceptr base = 0, p = (CUdeviceptr)(uintptr_t)dptr;
	size_t size = 0;
	int dev = -1, fd = -1, ret;
	CUresult r;

	if (!cu)
		return mvc_fail(c, -ENOTSUP, "GPU memory needs CUDA: %s", nocuda);
	if (len == 0)
		return mvc_fail(c, -EINVAL, "cannot register an empty GPU region");
	r = cu->PointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
	if (r == CUDA_SUCCESS)
		r = cu->MemGetAddressRange(&base, &size, p);
	if (r != CUDA_SUCCESS)
		return mvc_fail(c, -EINVAL, "%p is not CUDA device memory: %s", dptr,
		                mv_cuda_err(r));
	if (p - base > size || size - (p - base) < len)
		return mvc_fail(c, -ERANGE, "%llu bytes at %p run past its %zu-byte allocation",
		                (unsigned long long)len, dptr, size);
	r = cu->DeviceGetPCIBusId(req.gpu.busid, sizeof(req.gpu.busid), dev);
	if (r != CUDA_SUCCESS)
		return mvc_fail(c, -EIO, "naming device %d: %s", dev, mv_cuda_err(r));
	req.gpu.alloc_size = size;
	req.gpu.alloc_off = p - base;

	/* A VMM allocation is shared by its fd; cudaMalloc memory by IPC handle. */
	CUmemGenericAllocationHandle h;
	if (cu->MemRetainAllocationHandle(&h, dptr) == CUDA_SUCCESS) {
		r = cu->MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		                                   0);
		cu->MemRelease(h);
		if (r != CUDA_SUCCESS)
			return mvc_fail(
			    c, -EINVAL,
			    "VMM memory at %p cannot be exported as an fd (%s): create it "
			    "with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR allowed",
			    dptr, mv_cuda_err(r));
		req.gpu.kind = MV_GPU_VMM;
	} else {
		CUipcMemHandle ih;
		r = cu->IpcGetMemHandle(&ih, base);
		if (r != CUDA_SUCCESS)
			return mvc_fail(c, -EINVAL, "no CUDA IPC handle for %p: %s", dptr,
			                mv_cuda_err(r));
		memcpy(req.gpu.ipc, &ih,
		       sizeof(ih) < sizeof(req.gpu.ipc) ? sizeof(ih) : sizeof(req.gpu.ipc));
		req.gpu.kind = MV_GPU_IPC;
	}
	ret = mvc_call(c, MV_MSG_REG_GPU, &req, sizeof(req), fd >= 0 ? &fd : NULL, fd >= 0, repp,
	               sizeof(*repp), NULL, 0, NULL);
	if (fd >= 0)
		close(fd); /* the mover holds its own copy */
	return ret;
}
#endif

int mvc_register_cuda(struct mvc *c, void *dptr, uint64_t len, struct mvc_mem *out)
{
	memset(out, 0, sizeof(*out));
	out->fd = -1;
#ifdef MV_HAVE_CUDA
	struct mv_reg_rep rep;
	int ret = mvc_cuda_reg(c, dptr, len, &rep);

	if (ret)
		return ret;
	struct mvc_obj o = {
	    .kind = MVC_OBJ_REGION, .cur = rep.region, .fd = -1, .len = len, .dptr = dptr};
	ret = mvc_obj_add(c, &o, NULL, 0, &out->region);
	if (ret) {
		mvc_id_call(c, MV_MSG_DEREG, rep.region);
		return mvc_fail(c, ret, "no memory to keep the region for a reconnect");
	}
	out->addr = dptr;
	out->len = len;
	out->flags = MVC_MEM_GPU;
	out->path = rep.path;
	if (rep.shard_mask && c->nnear < sizeof(c->near) / sizeof(c->near[0])) {
		c->near[c->nnear].region = out->region;
		c->near[c->nnear].mask = rep.shard_mask;
		c->nnear++;
	}
	return 0;
#else
	(void)dptr;
	(void)len;
	return mvc_fail(c, -ENOTSUP, "libmvc was built without CUDA");
#endif
}
