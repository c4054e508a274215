/* SPDX-License-Identifier: MIT */
/*
 * libclient's memory: regions the mover can reach. mvc_alloc makes a new
 * sealed memfd and zeroes its pages on several threads, mvc_register_fd
 * registers a range of the caller's sealed memfd (hugetlb ones too),
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
#include <time.h>
#include <unistd.h>

#include "mv_cuda.h"
#include "mv_huge.h"

/* Registers [off, off + len) of fd; *region: the mover's id; *rep (may be
 * NULL): the mover's whole reply. */
int mvc_reg_fd(struct mvc *c, int fd, uint64_t off, uint64_t len, uint32_t flags, uint32_t why,
               uint32_t *region, struct mv_reg_rep *rep)
{
	struct mv_reg_req req = {.offset = off, .len = len, .flags = flags, .why = why};
	struct mv_reg_rep *r = calloc(1, sizeof(*r)); /* large: the blob of 256 shards */
	int ret;

	if (!r)
		return mvc_fail(c, -ENOMEM, "no memory for the mover's reply");
	ret = mvc_call(c, MV_MSG_REG, &req, sizeof(req), &fd, 1, r, sizeof(*r), NULL, 0, NULL);
	if (!ret) {
		*region = r->region;
		if (rep)
			*rep = *r;
	}
	free(r);
	return ret;
}

/* Registers a host region and keeps what a new mover needs to register it
 * again, and what mvc_mem_info() tells; m->region is the application's id. */
static int reg(struct mvc *c, int fd, uint64_t off, uint64_t len, uint32_t flags, uint32_t why,
               const struct mvc_mem_info *info, struct mvc_mem *m)
{
	struct mv_reg_rep *rep = calloc(1, sizeof(*rep));
	uint32_t cur;
	int ret;

	if (!rep)
		return mvc_fail(c, -ENOMEM, "no memory for the mover's reply");
	ret = mvc_reg_fd(c, fd, off, len, flags, why, &cur, rep);
	if (ret)
		goto out;
	struct mvc_obj o = {.kind = MVC_OBJ_REGION,
	                    .cur = cur,
	                    .fd = fd,
	                    .off = off,
	                    .len = len,
	                    .reg_flags = flags,
	                    .reg_why = why,
	                    .info = *info};
	o.info.map_ns = rep->map_ns;
	o.info.mr_ns = rep->mr_ns;
	/* What the mover found the fd to be (a hugetlbfs file given to
	 * mvc_register_fd is hugetlb whatever was asked). */
	if (rep->backing == MVC_BACKING_HUGETLB) {
		o.info.backing = MVC_BACKING_HUGETLB;
		o.info.page_size = (uint32_t)mv_huge_fd_page(fd);
		o.info.why[0] = 0;
	}
	ret = mvc_obj_add(c, &o, NULL, 0, &m->region);
	if (ret) {
		mvc_id_call(c, MV_MSG_DEREG, cur);
		ret = mvc_fail(c, ret, "no memory to keep the region for a reconnect");
		goto out;
	}
	m->flags |= o.info.backing == MVC_BACKING_HUGETLB ? MVC_MEM_HUGETLB
	            : o.info.backing == MVC_BACKING_THP   ? MVC_MEM_THP
	                                                  : 0;
out:
	free(rep);
	return ret;
}

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
 * CPU, 64 MiB a thread at least, each slice a whole number of pages of
 * size page: the kernel zeroes shmem pages at about the speed of a memset
 * into fresh memory, one core's worth, so a large KV pool comes up that
 * many times faster (1 GiB of 4 KiB pages here: 2.7 GB/s on one thread,
 * 4.2 on two). 0, or -errno (-EINVAL: the kernel has no
 * MADV_POPULATE_WRITE; -EFAULT or -ENOMEM: a hugetlb page could not be
 * had, where a touch would have raised SIGBUS).
 */
static int populate(uint8_t *addr, size_t len, size_t page)
{
	struct populate_slice sl[POPULATE_THREADS];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t n = len / POPULATE_SLICE;
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

/* A new region's memory: its memfd, sealed, and this process's mapping. */
struct fresh {
	int fd;
	uint8_t *addr, *map;
	size_t map_len;
	uint64_t size; /* of the memfd */
};

static void fresh_drop(struct fresh *f)
{
	if (f->map)
		munmap(f->map, f->map_len);
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	f->map = f->addr = NULL;
}

/*
 * Makes len bytes of memfd: hugetlb 2 MiB pages (backing HUGETLB), shmem
 * asking for THP (THP) or shmem on 4 KiB pages (4K), mapped and its pages
 * allocated and zeroed. The hugetlb pool is taken at mmap (a shared
 * mapping reserves its pages: -ENOMEM when the pool has too few) and
 * populated with MADV_POPULATE_WRITE, which fails where a touch would
 * SIGBUS. 0, or -errno with nothing left behind; *what: the step.
 */
static int fresh_make(uint64_t len, uint32_t backing, struct fresh *f, const char **what)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t unit = backing == MVC_BACKING_4K ? page : MV_HUGE_SIZE;
	unsigned int mfd = MFD_CLOEXEC | MFD_ALLOW_SEALING;
	int ret;

	memset(f, 0, sizeof(*f));
	f->size = (len + unit - 1) & ~(unit - 1);
	if (backing == MVC_BACKING_HUGETLB)
		/* 2 MiB pages, whatever the host's default size (a 1 GiB
		 * default would refuse sizes rounded to 2 MiB). */
		mfd |= MFD_HUGETLB | MFD_HUGE_2MB;
	*what = "memfd_create";
	f->fd = memfd_create("mvc-region", mfd);
	if (f->fd < 0)
		return -errno;
	*what = "sizing and sealing the memfd";
	if (ftruncate(f->fd, (off_t)f->size) < 0 ||
	    fcntl(f->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		goto err;
	*what = "mapping it";
	f->addr =
	    mv_huge_map(f->fd, 0, f->size, backing == MVC_BACKING_THP, 0, &f->map, &f->map_len);
	if (!f->addr)
		goto err;
	*what = "allocating and zeroing its pages";
	ret = populate(f->addr, f->map_len, unit);
	if (ret == -EINVAL && backing == MVC_BACKING_4K) {
		/* An older kernel: one thread, as the mapping's MAP_POPULATE. */
		munmap(f->map, f->map_len);
		f->map = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
		              f->fd, 0);
		if (f->map == MAP_FAILED) {
			f->map = NULL;
			goto err;
		}
		f->addr = f->map;
		f->map_len = f->size;
		ret = 0;
	}
	if (ret) {
		errno = -ret;
		goto err;
	}
	return 0;
err:
	ret = -errno;
	fresh_drop(f);
	return ret;
}

int mvc_huge_default(const struct mvc_opts *o, uint32_t *out, char *why, size_t whylen)
{
	static const char *const names[] = {"", "auto", "never", "require", "hugetlb", "thp"};
	const char *env = getenv("MVC_HUGEPAGES");

	*out = MVC_HUGE_AUTO;
	if (o && o->hugepages) {
		if (o->hugepages > MVC_HUGE_THP) {
			snprintf(why, whylen,
			         "mvc_opts.hugepages %u is no enum mvc_huge: give MVC_HUGE_AUTO, "
			         "_NEVER, _REQUIRE, _HUGETLB or _THP (0: $MVC_HUGEPAGES)",
			         o->hugepages);
			return -EINVAL;
		}
		*out = o->hugepages;
		return 0;
	}
	if (!env || !*env)
		return 0;
	for (uint32_t i = 1; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(env, names[i])) {
			*out = i;
			return 0;
		}
	snprintf(why, whylen,
	         "MVC_HUGEPAGES='%s': give auto, never, require, hugetlb or thp (see mvc_alloc(3))",
	         env);
	return -EINVAL;
}

static int64_t alloc_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int mvc_alloc(struct mvc *c, uint64_t len, struct mvc_mem *out)
{
	return mvc_alloc_huge(c, len, MVC_HUGE_DEFAULT, out);
}

int mvc_alloc_huge(struct mvc *c, uint64_t len, enum mvc_huge huge, struct mvc_mem *out)
{
	uint32_t mode = huge == MVC_HUGE_DEFAULT ? c->huge : (uint32_t)huge;
	struct mvc_mem_info info = {.backing = MVC_BACKING_4K};
	struct mv_huge_state hs;
	struct fresh f = {.fd = -1};
	const char *what = "";
	uint32_t why = MV_HUGE_WHY_NONE;
	int64_t t0 = alloc_clock_ns();
	int ret = -ENOMEM;

	memset(out, 0, sizeof(*out));
	out->fd = -1;
	if (len == 0)
		return mvc_fail(c, -EINVAL, "cannot allocate an empty region");
	if (mode < MVC_HUGE_AUTO || mode > MVC_HUGE_THP)
		return mvc_fail(c, -EINVAL,
		                "hugepages mode %u is no enum mvc_huge: give MVC_HUGE_DEFAULT, "
		                "_AUTO, _NEVER, _REQUIRE, _HUGETLB or _THP",
		                mode);
	mv_huge_read(&hs);
	if (mode == MVC_HUGE_NEVER)
		why = MV_HUGE_WHY_NEVER;
	else if (mode == MVC_HUGE_AUTO && len < MV_HUGE_SIZE)
		why = MV_HUGE_WHY_SMALL;
	else {
		/* Huge pages, best first: the pool, then THP where allowed. */
		if (mode != MVC_HUGE_THP) {
			ret = fresh_make(len, MVC_BACKING_HUGETLB, &f, &what);
			if (!ret)
				info.backing = MVC_BACKING_HUGETLB;
		}
		if (ret && mode != MVC_HUGE_HUGETLB && hs.thp_ok) {
			ret = fresh_make(len, MVC_BACKING_THP, &f, &what);
			if (!ret)
				info.backing = MVC_BACKING_THP;
			else if (mode != MVC_HUGE_AUTO)
				return mvc_fail(c, ret,
				                "allocating %llu bytes of shmem with THP: %s: %s",
				                (unsigned long long)len, what, strerror(-ret));
		}
		if (ret && mode != MVC_HUGE_AUTO) {
			char t[192];
			mv_huge_why_text(t, sizeof(t), MV_HUGE_WHY_NONE_FREE, len, &hs);
			return mvc_fail(c, -ENOMEM, "no huge pages for %llu bytes (%s): %s",
			                (unsigned long long)len,
			                mode == MVC_HUGE_REQUIRE ? "require"
			                : mode == MVC_HUGE_THP   ? "thp"
			                                         : "hugetlb",
			                t);
		}
		if (ret)
			why = MV_HUGE_WHY_NONE_FREE;
	}
	if (info.backing == MVC_BACKING_4K) {
		ret = fresh_make(len, MVC_BACKING_4K, &f, &what);
		if (ret)
			return mvc_fail(c, ret, "allocating %llu bytes of region memory: %s: %s",
			                (unsigned long long)len, what, strerror(-ret));
		mv_huge_why_text(info.why, sizeof(info.why), why, len, &hs);
	}
	info.page_size = info.backing == MVC_BACKING_4K ? (uint32_t)sysconf(_SC_PAGESIZE)
	                                                : (uint32_t)MV_HUGE_SIZE;
	info.alloc_ns = (uint64_t)(alloc_clock_ns() - t0);
	out->addr = f.addr;
	ret =
	    reg(c, f.fd, 0, len, info.backing == MVC_BACKING_THP ? MV_REG_THP : 0, why, &info, out);
	if (ret) {
		fresh_drop(&f);
		out->addr = NULL;
		out->flags = 0;
		return ret;
	}
	out->len = len;
	out->fd = f.fd;
	return 0;
}

int mvc_mem_info(struct mvc *c, const struct mvc_mem *m, struct mvc_mem_info *info)
{
	const struct mvc_obj *o = mvc_obj_find(c, MVC_OBJ_REGION, m->region);

	memset(info, 0, sizeof(*info));
	if (!o)
		return mvc_fail(c, -ENOENT, "region %u is not one of this connection's regions",
		                m->region);
	*info = o->info;
	if (o->fd < 0)
		info->backing = MVC_BACKING_GPU;
	return 0;
}

int mvc_register_fd(struct mvc *c, int fd, uint64_t offset, uint64_t len, struct mvc_mem *out)
{
	struct mvc_mem_info info = {.backing = MVC_BACKING_4K};
	uint8_t *map;
	size_t map_len;
	int ret, own;

	memset(out, 0, sizeof(*out));
	out->fd = -1;
	own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (own < 0)
		return mvc_fail(c, -errno, "dup of fd %d: %s", fd, strerror(errno));
	info.page_size = (uint32_t)mv_huge_fd_page(own);
	ret = reg(c, own, offset, len, 0, MV_HUGE_WHY_NONE, &info, out);
	if (ret)
		goto err_close;
	/* A hugetlbfs file maps from a huge page boundary, whole pages. */
	uint8_t *p = mv_huge_map(own, offset, len, 0, 0, &map, &map_len);
	if (!p) {
		ret = mvc_fail(c, -errno, "mapping the registered range: %s", strerror(errno));
		mvc_id_call(c, MV_MSG_DEREG, mvc_obj_del(c, MVC_OBJ_REGION, out->region));
		goto err_close;
	}
	out->addr = p;
	out->len = len;
	out->fd = own;
	return 0;

err_close:
	close(own);
	out->flags = 0;
	return ret;
}

int mvc_free(struct mvc *c, struct mvc_mem *m)
{
	uint32_t cur = mvc_obj_del(c, MVC_OBJ_REGION, m->region);
	int ret = cur == MVC_ID_LOST ? 0 : mvc_id_call(c, MV_MSG_DEREG, cur);
	/* What was mapped: whole pages of the fd's file system (hugetlbfs:
	 * 2 MiB), a THP region's whole 2 MiB memfd. */
	uint64_t pg = m->fd >= 0 && !(m->flags & MVC_MEM_GPU) ? mv_huge_fd_page(m->fd)
	                                                      : (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t unit = m->flags & MVC_MEM_THP ? MV_HUGE_SIZE : pg;
	uintptr_t a = (uintptr_t)m->addr, base = a & ~(uintptr_t)(pg - 1);

	for (uint32_t i = 0; i < c->nnear; i++)
		if (c->near[i].region == m->region)
			c->near[i] = c->near[--c->nnear];
	if (m->addr && !(m->flags & MVC_MEM_GPU))
		munmap((void *)base, (size_t)((m->len + (a - base) + unit - 1) & ~(unit - 1)));
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
