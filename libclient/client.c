/* SPDX-License-Identifier: MIT */
/*
 * libclient: connects to the local mover, creates one submission and one
 * completion ring per mover shard and the list arena, registers memory,
 * and manages peers and imports over the control socket. Batches are built
 * in batch.c, completions read in events.c. The only system calls on the
 * data path are the wake-ups shmring makes when the other side sleeps.
 */
#include "mvc_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mv_cuda.h"
#include "mv_host.h"
#include "mv_sock.h"

int mvc_fail(struct mvc *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return err;
}

const char *mvc_version(void)
{
	return MVC_VERSION;
}

const char *mvc_error(const struct mvc *c)
{
	return c->err;
}

int mvc_info(const struct mvc *c, struct mvc_info *info)
{
	*info = c->info;
	return 0;
}

uint64_t mvc_shard_bytes(const struct mvc *c, uint32_t shard)
{
	return shard < c->info.nshards ? c->sh[shard].bytes : 0;
}

uint64_t mvc_shard_descs(const struct mvc *c, uint32_t shard)
{
	return shard < c->info.nshards ? c->sh[shard].descs : 0;
}

uint32_t mvc_inflight(const struct mvc *c)
{
	return c->inflight;
}

/* One request, one reply: the control path is synchronous and rare. */
int mvc_call(struct mvc *c, uint16_t type, const void *payload, size_t len, const int *fds,
             int nfds, void *rep, size_t replen, int *rfds, int maxrfds, int *nrfds)
{
	struct mv_msg_hdr h = {.magic = MV_WIRE_MAGIC, .version = MV_WIRE_VERSION, .type = type};
	union mv_cmsg u;
	struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)payload, len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
	ssize_t n;

	if (c->cut[0])
		return mvc_fail(c, -EPROTO, "the mover cut this connection off: %s", c->cut);
	if (c->dead)
		return mvc_fail(c, -EPIPE, "the mover connection is gone");
	h.len = (uint32_t)len;
	h.seq = ++c->seq;
	mv_fds_put(&mh, &u, fds, nfds);
	/* A mover that refuses a connection says why (seq 0) and hangs up, so
	 * a failed send may still have that answer queued behind it. */
	int sent = sendmsg(c->sock, &mh, MSG_NOSIGNAL) < 0 ? -errno : 0;

	struct mv_msg_hdr rh;
	struct iovec riov[2] = {{&rh, sizeof(rh)}, {rep, replen}};
	struct msghdr rm = {.msg_iov = riov,
	                    .msg_iovlen = 2,
	                    .msg_control = u.buf,
	                    .msg_controllen = sizeof(u.buf)};
	/* ECONNRESET (the mover closed with our request unread) comes before
	 * what it had queued for us: read on past it once. */
	int resets = 0;
	do
		n = recvmsg(c->sock, &rm, MSG_CMSG_CLOEXEC | (sent ? MSG_DONTWAIT : 0));
	while (n < 0 && (errno == EINTR || (errno == ECONNRESET && !resets++)));
	if (n >= (ssize_t)(sizeof(rh) + sizeof(struct mv_reply_hdr)) && rh.magic == MV_WIRE_MAGIC &&
	    rh.seq == 0 && ((const struct mv_reply_hdr *)rep)->status) {
		const struct mv_reply_hdr *r = rep;
		c->dead = 1;
		return mvc_fail(c, r->status, "the mover refused this connection: %.124s", r->msg);
	}
	if (sent) {
		c->dead = 1;
		return mvc_fail(c, sent, "sending to the mover: %s", strerror(-sent));
	}
	if (n <= 0) {
		c->dead = 1;
		return mvc_fail(c, n ? -errno : -EPIPE, "the mover closed the connection");
	}
	int got = mv_fds_take(&rm, rfds, rfds && nrfds ? maxrfds : 0);
	if (nrfds)
		*nrfds = got;
	if ((size_t)n < sizeof(rh) + sizeof(struct mv_reply_hdr) || rh.magic != MV_WIRE_MAGIC ||
	    rh.seq != h.seq) {
		c->dead = 1;
		return mvc_fail(c, -EPROTO, "malformed reply from the mover");
	}
	const struct mv_reply_hdr *r = rep;
	if (r->status)
		return mvc_fail(c, r->status, "%.124s", r->msg);
	return 0;
}

static void close_rings(struct mvc *c)
{
	for (uint32_t s = 0; s < MV_MAX_SHARDS; s++) {
		shmring_close(&c->sh[s].sub);
		shmring_close(&c->sh[s].comp);
		if (c->sh[s].doorbell >= 0)
			close(c->sh[s].doorbell);
		c->sh[s].doorbell = -1;
	}
}

static __thread char connect_err[256];

const char *mvc_connect_error(void)
{
	return connect_err;
}

/* How long mvc_wait() polls before it sleeps: $MVC_WAIT_SPIN_US
 * (microseconds, 0 never), else MVC_WAIT_SPIN_DEFAULT_NS. */
#define MVC_WAIT_SPIN_DEFAULT_NS 20000
static int wait_spin(int64_t *out, char *why, size_t whylen)
{
	const char *env = getenv("MVC_WAIT_SPIN_US");
	char *end;

	*out = MVC_WAIT_SPIN_DEFAULT_NS;
	if (!env || !*env)
		return 0;
	errno = 0;
	unsigned long v = strtoul(env, &end, 10);
	if (errno || *end || v > 1000000) {
		snprintf(why, whylen, "MVC_WAIT_SPIN_US=%s: give microseconds, 0 to 1000000", env);
		return -EINVAL;
	}
	*out = (int64_t)v * 1000;
	return 0;
}

/* The arena size: opts, else $MVC_LIST_ARENA (bytes, with an optional K, M
 * or G), else the default. */
static int arena_size(const struct mvc_opts *o, uint64_t *out, char *why, size_t whylen)
{
	const char *env = getenv("MVC_LIST_ARENA");
	char *end;

	*out = MV_ARENA_DEFAULT;
	if (o && o->list_arena) {
		*out = o->list_arena;
		return 0;
	}
	if (!env || !*env)
		return 0;
	errno = 0;
	unsigned long long v = strtoull(env, &end, 0);
	int shift = *end == 'K' || *end == 'k'   ? 10
	            : *end == 'M' || *end == 'm' ? 20
	            : *end == 'G' || *end == 'g' ? 30
	                                         : 0;
	if (shift)
		end++;
	if (errno || end == env || *end || v > MV_ARENA_MAX >> shift) {
		snprintf(why, whylen, "MVC_LIST_ARENA='%s' is not a size such as 64M", env);
		return -EINVAL;
	}
	*out = (uint64_t)v << shift;
	return 0;
}

int mvc_connect(struct mvc **out, const char *path)
{
	return mvc_connect_opts(out, path, NULL);
}

int mvc_connect_opts(struct mvc **out, const char *path, const struct mvc_opts *opts)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct mv_hello_rep hello;
	int fds[2 * MV_MAX_SHARDS + 2], nfds = 0, ret;
	uint64_t arena;
	char buf[sizeof(a.sun_path)];
	struct mvc *c = calloc(1, sizeof(*c));

	*out = NULL;
	connect_err[0] = 0;
	if (!c)
		return -ENOMEM;
	for (uint32_t s = 0; s < MV_MAX_SHARDS; s++) {
		c->sh[s].doorbell = -1;
		c->sh[s].sub.fd = c->sh[s].comp.fd = c->sh[s].sub.pidfd = c->sh[s].comp.pidfd = -1;
	}
	c->efd = -1;
	c->arena.fd = -1;
	ret = arena_size(opts, &arena, c->err, sizeof(c->err));
	if (ret)
		goto err_free;
	ret = wait_spin(&c->wait_spin_ns, c->err, sizeof(c->err));
	if (ret)
		goto err_free;
	if (opts && opts->share_pct > MV_SHARE_FULL) {
		snprintf(c->err, sizeof(c->err),
		         "mvc_opts.share_pct %u: give a percent of the uid's weight, 1 to %u "
		         "(0: all of it)",
		         opts->share_pct, MV_SHARE_FULL);
		ret = -EINVAL;
		goto err_free;
	}
	if (!path)
		path = mv_default_socket(buf, sizeof(buf));
	if (strlen(path) >= sizeof(a.sun_path)) {
		ret = -ENAMETOOLONG;
		goto err_free;
	}
	strcpy(a.sun_path, path);
	c->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->sock < 0 || connect(c->sock, (struct sockaddr *)&a, sizeof(a)) < 0) {
		ret = -errno;
		snprintf(c->err, sizeof(c->err), "connecting to the mover at %s: %s", path,
		         strerror(errno));
		goto err_sock;
	}
	ret = mvc_call(c, MV_MSG_HELLO, NULL, 0, NULL, 0, &hello, sizeof(hello), fds, MV_MAX_SHARDS,
	               &nfds);
	if (ret == -EPROTONOSUPPORT) {
		/* The mover names its protocol; we name ours and our release. */
		char m[sizeof(c->err)];
		snprintf(m, sizeof(m), "%s", c->err);
		snprintf(c->err, sizeof(c->err), "%s (this is libmvc %s, protocol %u)", m,
		         MVC_VERSION, MV_WIRE_VERSION);
	}
	if (ret)
		goto err_sock;
	if (hello.nshards == 0 || hello.nshards > MV_MAX_SHARDS ||
	    (uint32_t)nfds != hello.nshards || hello.max_batches == 0 ||
	    hello.max_batches > 1u << 20) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		ret = mvc_fail(c, -EPROTO, "the mover's hello is malformed (%u shards, %d fds)",
		               hello.nshards, nfds);
		goto err_sock;
	}
	c->info.client_id = hello.client_id;
	c->info.nshards = hello.nshards;
	c->info.max_batches = hello.max_batches;
	c->info.mover_id = hello.mover_id;
	memcpy(c->info.provider, hello.provider, sizeof(c->info.provider));
	c->info.provider[sizeof(c->info.provider) - 1] = 0;
	c->flags = hello.flags;
	c->max_write = hello.max_write;

	for (uint32_t s = 0; s < hello.nshards; s++) {
		/* hdr.user: the share this connection asks for (mv_wire.h). */
		struct shmring_opts so = {.capacity = hello.sub_capacity,
		                          .slot_size = 64,
		                          .user = opts && opts->share_pct ? opts->share_pct
		                                                          : MV_SHARE_FULL,
		                          .name = "mvc-sub"};
		struct shmring_opts co = {
		    .capacity = hello.comp_capacity, .slot_size = 128, .name = "mvc-comp"};
		c->sh[s].doorbell = fds[s];
		ret = shmring_create(&c->sh[s].sub, &so, SHMRING_PRODUCER);
		if (!ret)
			ret = shmring_create(&c->sh[s].comp, &co, SHMRING_CONSUMER);
		if (ret) {
			mvc_fail(c, ret, "creating the rings of shard %u: %s", s,
			         shmring_error(&c->sh[s].sub));
			goto err_rings;
		}
		shmring_set_doorbell(&c->sh[s].sub, c->sh[s].doorbell);
	}
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0) {
		ret = -errno;
		goto err_rings;
	}
	struct mv_attach_req req = {.nshards = hello.nshards};
	struct mv_reply_hdr rep;
	for (uint32_t s = 0; s < hello.nshards; s++) {
		fds[s] = shmring_fd(&c->sh[s].sub);
		fds[hello.nshards + s] = shmring_fd(&c->sh[s].comp);
	}
	fds[2 * hello.nshards] = c->efd;
	ret = mvc_arena_open(&c->arena, arena, hello.max_batches, c->err, sizeof(c->err));
	if (ret)
		goto err_rings;
	fds[2 * hello.nshards + 1] = c->arena.fd;
	ret = mvc_call(c, MV_MSG_ATTACH, &req, sizeof(req), fds, (int)(2 * hello.nshards + 2), &rep,
	               sizeof(rep), NULL, 0, NULL);
	if (ret)
		goto err_rings;

	ret = mvc_batch_tables_alloc(c, hello.max_batches);
	if (ret)
		goto err_rings;
	mv_host_id(c->host);
	*out = c;
	return 0;

err_rings:
	close_rings(c);
	mvc_arena_close(&c->arena);
	if (c->efd >= 0)
		close(c->efd);
err_sock:
	if (c->sock >= 0)
		close(c->sock);
err_free:
	mvc_batch_tables_free(c);
	/* The reason outlives the handle. */
	snprintf(connect_err, sizeof(connect_err), "%s", c->err[0] ? c->err : strerror(-ret));
	free(c);
	return ret;
}

void mvc_disconnect(struct mvc *c)
{
	if (!c)
		return;
	close(c->sock);
	close_rings(c);
	mvc_arena_close(&c->arena);
	if (c->efd >= 0)
		close(c->efd);
	mvc_batch_tables_free(c);
	free(c->imm_tab);
	free(c->imm_due);
	free(c);
}

/* A request that names one id (region, peer, import) and wants no payload back. */
static int id_call(struct mvc *c, uint16_t type, uint32_t id)
{
	struct mv_id_req req = {.id = id};
	struct mv_reply_hdr rep;

	return mvc_call(c, type, &req, sizeof(req), NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);
}

static int reg(struct mvc *c, int fd, uint64_t off, uint64_t len, struct mvc_mem *m)
{
	struct mv_reg_req req = {.offset = off, .len = len};
	struct mv_reg_rep rep;
	int ret =
	    mvc_call(c, MV_MSG_REG, &req, sizeof(req), &fd, 1, &rep, sizeof(rep), NULL, 0, NULL);

	if (ret)
		return ret;
	m->region = rep.region;
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
		id_call(c, MV_MSG_DEREG, out->region);
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
	int ret = id_call(c, MV_MSG_DEREG, m->region);
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

int mvc_register_cuda(struct mvc *c, void *dptr, uint64_t len, struct mvc_mem *out)
{
	memset(out, 0, sizeof(*out));
	out->fd = -1;
#ifdef MV_HAVE_CUDA
	const char *nocuda;
	struct mv_cuda *cu = mv_cuda_load(&nocuda);
	struct mv_reg_gpu_req req = {.len = len};
	struct mv_reg_rep rep;
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
	ret = mvc_call(c, MV_MSG_REG_GPU, &req, sizeof(req), fd >= 0 ? &fd : NULL, fd >= 0, &rep,
	               sizeof(rep), NULL, 0, NULL);
	if (fd >= 0)
		close(fd); /* the mover holds its own copy */
	if (ret)
		return ret;
	out->region = rep.region;
	out->addr = dptr;
	out->len = len;
	out->flags = MVC_MEM_GPU;
	out->path = rep.path;
	if (rep.shard_mask && c->nnear < sizeof(c->near) / sizeof(c->near[0])) {
		c->near[c->nnear].region = rep.region;
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

int mvc_address(struct mvc *c, void *buf, size_t *len)
{
	struct mv_addr_rep rep;
	size_t need = offsetof(struct mv_addr_blob, addr) + c->info.nshards * MV_MAX_ADDRLEN;
	int ret = mvc_call(c, MV_MSG_ADDR, NULL, 0, NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);

	if (ret)
		return ret;
	if (*len < need)
		return mvc_fail(c, -ENOSPC, "address blob needs %zu bytes, buffer has %zu", need,
		                *len);
	memcpy(buf, &rep.blob, need);
	*len = need;
	return 0;
}

int mvc_region_blob(struct mvc *c, uint32_t region, void *buf, size_t *len)
{
	/* Asking again is cheap and keeps the client free of per-region state. */
	struct mv_id_req req = {.id = region};
	struct mv_reg_rep rep;
	int ret;

	memset(&rep, 0, sizeof(rep));
	ret =
	    mvc_call(c, MV_MSG_BLOB, &req, sizeof(req), NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);
	if (ret)
		return ret;
	/* The mover's word, checked before it sizes a copy out of rep. */
	if (rep.blob_len > sizeof(rep.blob))
		return mvc_fail(c, -EPROTO,
		                "the mover's reply claims a region blob of %u bytes; a blob is at "
		                "most %zu (mover and library from different builds?)",
		                rep.blob_len, sizeof(rep.blob));
	if (*len < rep.blob_len)
		return mvc_fail(c, -ENOSPC, "region blob needs %u bytes, buffer has %zu",
		                rep.blob_len, *len);
	memcpy(buf, &rep.blob, rep.blob_len);
	*len = rep.blob_len;
	return 0;
}

int mvc_peer_add(struct mvc *c, const void *addr, size_t len, uint32_t *peer)
{
	struct mv_id_rep rep;
	int ret;

	if (len > sizeof(struct mv_addr_blob))
		return mvc_fail(c, -EINVAL, "address blob of %zu bytes is larger than any mover's",
		                len);
	ret = mvc_call(c, MV_MSG_PEER_ADD, addr, len, NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);
	if (!ret)
		*peer = rep.id;
	return ret;
}

int mvc_peer_remove(struct mvc *c, uint32_t peer)
{
	return id_call(c, MV_MSG_PEER_DEL, peer);
}

int mvc_unimport(struct mvc *c, uint32_t handle)
{
	for (uint32_t i = 0; i < c->nlocal_gpu; i++)
		if (c->local_gpu[i] == handle)
			c->local_gpu[i] = c->local_gpu[--c->nlocal_gpu];
	return id_call(c, MV_MSG_UNIMPORT, handle);
}

int mvc_import(struct mvc *c, uint32_t peer, const void *blob, size_t len, uint32_t *handle)
{
	struct mv_import_req req = {.peer = peer, .blob_len = (uint32_t)len};
	struct mv_id_rep rep;
	int ret;

	if (len > sizeof(req.blob))
		return mvc_fail(c, -EINVAL, "region blob of %zu bytes is larger than any mover's",
		                len);
	memcpy(&req.blob, blob, len);
	ret = mvc_call(c, MV_MSG_IMPORT, &req, offsetof(struct mv_import_req, blob) + len, NULL, 0,
	               &rep, sizeof(rep), NULL, 0, NULL);
	if (ret)
		return ret;
	*handle = rep.id;
	/* A handle freed with its peer can come back for another region. */
	for (uint32_t i = 0; i < c->nlocal_gpu; i++)
		if (c->local_gpu[i] == rep.id)
			c->local_gpu[i] = c->local_gpu[--c->nlocal_gpu];
	if (len >= offsetof(struct mv_region_blob, shard) && (req.blob.flags & MV_BLOB_GPU) &&
	    !memcmp(req.blob.host, c->host, sizeof(c->host)) &&
	    c->nlocal_gpu < sizeof(c->local_gpu) / sizeof(c->local_gpu[0]))
		c->local_gpu[c->nlocal_gpu++] = rep.id;
	return 0;
}
