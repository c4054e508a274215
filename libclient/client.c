/* SPDX-License-Identifier: MIT */
/*
 * libclient: connects to the local mover, creates one submission and one
 * completion ring per mover shard, registers memory, and builds batches of
 * WRITE descriptors directly in the rings' reserved slots. A batch is split
 * over shards (large writes striped evenly, pages and segments spread in
 * contiguous runs), each shard's part closed by an END descriptor that says
 * how many parts the batch has; the mover reports the batch once every part
 * is done. The only system calls on the data path are the wake-ups shmring
 * makes when the other side sleeps.
 */
#include "mvc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mv_cuda.h"
#include "mv_host.h"
#include "mv_sock.h"
#include "mv_wire.h"
#include "shmring.h"
#include "trace_format.h"

#define LOCAL_GPU_STRIPE_MIN (64ull << 20) /* CUDA copies: split only large ones */

struct mvc_shard {
	struct shmring sub;
	struct shmring comp;
	int doorbell;          /* the mover shard's eventfd */
	uint32_t ndesc;        /* WRITEs of the open batch on this shard */
	uint64_t nbytes;       /* bytes of the open batch on this shard */
	uint64_t bytes, descs; /* submitted, all time */
	uint64_t load;         /* bytes in flight here: each batch's spread over its parts */
};

struct imm_ent {
	uint32_t value;
	uint32_t count; /* arrived, not yet handed to an expectation */
	uint32_t want;  /* > 0 while an expectation is open */
	uint32_t used;
	uint64_t cookie;
};

struct mvc {
	int sock;
	uint32_t seq;
	int efd; /* the mover wakes us here */
	int dead;
	struct mvc_info info;
	uint32_t flags; /* MV_HELLO_* */
	uint64_t max_write;
	struct mvc_shard sh[MV_MAX_SHARDS];

	/* the open batch */
	int open;
	uint32_t batch;
	uint32_t home; /* shard for small writes: the least loaded, per batch */
	uint32_t turn; /* where the search for the next home starts */
	int has_imm;
	uint32_t imm_dst, imm;
	uint32_t kind;      /* MV_TK_* bits of the open batch, for the trace */
	uint64_t nops;      /* writes, segments or pages asked for */
	uint64_t page_size; /* of its paged writes */

	uint32_t *free_ids;
	uint32_t nfree;
	uint64_t *cookies;
	uint8_t *busy;
	uint64_t *parts_of; /* per batch id in flight: its shards, a bit each */
	uint64_t *share;    /* per batch id in flight: its load on each of them */
	uint32_t inflight;

	struct imm_ent *imm_tab;
	uint32_t imm_cap, imm_used;
	/* Values whose expectation was met when it was made: mvc_poll reports
	 * them before reading the rings. */
	uint32_t *imm_due;
	uint32_t ndue, due_cap;

	/* GPU regions and the shards near them (hwloc, via the mover). */
	struct {
		uint32_t region;
		uint64_t mask;
	} near[64];
	uint32_t nnear;

	/* Imports of GPU regions on this host: the mover copies with CUDA, and
	 * splitting a copy over shards only doubles its launch costs. */
	uint32_t local_gpu[64];
	uint32_t nlocal_gpu;
	uint8_t host[16];

	char err[256];
};

static int fail(struct mvc *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return err;
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
static int call(struct mvc *c, uint16_t type, const void *payload, size_t len, const int *fds,
                int nfds, void *rep, size_t replen, int *rfds, int maxrfds, int *nrfds)
{
	struct mv_msg_hdr h = {.magic = MV_WIRE_MAGIC, .version = MV_WIRE_VERSION, .type = type};
	union mv_cmsg u;
	struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)payload, len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
	ssize_t n;

	if (c->dead)
		return fail(c, -EPIPE, "the mover connection is gone");
	h.len = (uint32_t)len;
	h.seq = ++c->seq;
	mv_fds_put(&mh, &u, fds, nfds);
	if (sendmsg(c->sock, &mh, MSG_NOSIGNAL) < 0) {
		c->dead = 1;
		return fail(c, -errno, "sending to the mover: %s", strerror(errno));
	}

	struct mv_msg_hdr rh;
	struct iovec riov[2] = {{&rh, sizeof(rh)}, {rep, replen}};
	struct msghdr rm = {.msg_iov = riov,
	                    .msg_iovlen = 2,
	                    .msg_control = u.buf,
	                    .msg_controllen = sizeof(u.buf)};
	do
		n = recvmsg(c->sock, &rm, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		c->dead = 1;
		return fail(c, n ? -errno : -EPIPE, "the mover closed the connection");
	}
	int got = mv_fds_take(&rm, rfds, rfds && nrfds ? maxrfds : 0);
	if (nrfds)
		*nrfds = got;
	if ((size_t)n < sizeof(rh) + sizeof(struct mv_reply_hdr) || rh.magic != MV_WIRE_MAGIC ||
	    rh.seq != h.seq) {
		c->dead = 1;
		return fail(c, -EPROTO, "malformed reply from the mover");
	}
	const struct mv_reply_hdr *r = rep;
	if (r->status)
		return fail(c, r->status, "%.124s", r->msg);
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

/* The per-batch tables for nb batch ids, all ids free. 0 or -ENOMEM; on
 * failure batch_tables_free() undoes what was made. */
static int batch_tables_alloc(struct mvc *c, uint32_t nb)
{
	c->free_ids = malloc(sizeof(*c->free_ids) * nb);
	c->cookies = calloc(nb, sizeof(*c->cookies));
	c->busy = calloc(nb, 1);
	c->parts_of = calloc(nb, sizeof(*c->parts_of));
	c->share = calloc(nb, sizeof(*c->share));
	if (!c->free_ids || !c->cookies || !c->busy || !c->parts_of || !c->share)
		return -ENOMEM;
	for (uint32_t i = 0; i < nb; i++)
		c->free_ids[i] = nb - 1 - i;
	c->nfree = nb;
	return 0;
}

static void batch_tables_free(struct mvc *c)
{
	free(c->free_ids);
	free(c->cookies);
	free(c->busy);
	free(c->parts_of);
	free(c->share);
}

static __thread char connect_err[256];

const char *mvc_connect_error(void)
{
	return connect_err;
}

int mvc_connect(struct mvc **out, const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct mv_hello_rep hello;
	int fds[2 * MV_MAX_SHARDS + 1], nfds = 0, ret;
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
	ret = call(c, MV_MSG_HELLO, NULL, 0, NULL, 0, &hello, sizeof(hello), fds, MV_MAX_SHARDS,
	           &nfds);
	if (ret)
		goto err_sock;
	if (hello.nshards == 0 || hello.nshards > MV_MAX_SHARDS ||
	    (uint32_t)nfds != hello.nshards || hello.max_batches == 0 ||
	    hello.max_batches > 1u << 20) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		ret = fail(c, -EPROTO, "the mover's hello is malformed (%u shards, %d fds)",
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
		struct shmring_opts so = {
		    .capacity = hello.sub_capacity, .slot_size = 64, .name = "mvc-sub"};
		struct shmring_opts co = {
		    .capacity = hello.comp_capacity, .slot_size = 128, .name = "mvc-comp"};
		c->sh[s].doorbell = fds[s];
		ret = shmring_create(&c->sh[s].sub, &so, SHMRING_PRODUCER);
		if (!ret)
			ret = shmring_create(&c->sh[s].comp, &co, SHMRING_CONSUMER);
		if (ret) {
			fail(c, ret, "creating the rings of shard %u: %s", s,
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
	ret = call(c, MV_MSG_ATTACH, &req, sizeof(req), fds, (int)(2 * hello.nshards + 1), &rep,
	           sizeof(rep), NULL, 0, NULL);
	if (ret)
		goto err_rings;

	ret = batch_tables_alloc(c, hello.max_batches);
	if (ret)
		goto err_rings;
	mv_host_id(c->host);
	*out = c;
	return 0;

err_rings:
	close_rings(c);
	if (c->efd >= 0)
		close(c->efd);
err_sock:
	if (c->sock >= 0)
		close(c->sock);
err_free:
	batch_tables_free(c);
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
	if (c->efd >= 0)
		close(c->efd);
	batch_tables_free(c);
	free(c->imm_tab);
	free(c->imm_due);
	free(c);
}

/*
 * The shard for the k-th part of a write from src. A stripe (fixed) goes to
 * the same shard every time: stripe k of a buffer is copied by one shard,
 * whose caches and TLB keep its pages and page tables from the last time,
 * rather than by another shard each batch. A source with shards near its
 * GPU keeps to them: stripes in order over them; other parts from the least
 * loaded of them (the first from home among equals) on. Any other source's
 * parts start at home. Loads change only at submit, so every write of a
 * batch gets the same answer.
 */
static uint32_t pick(const struct mvc *c, uint32_t src, uint32_t k, int fixed)
{
	uint32_t n = c->info.nshards, base = fixed ? 0 : c->home;

	for (uint32_t i = 0; i < c->nnear; i++) {
		uint64_t m = c->near[i].mask;
		uint32_t near[MV_MAX_SHARDS], cnt = 0, best = 0;
		if (c->near[i].region != src || !m)
			continue;
		for (uint32_t j = 0; j < n; j++) {
			uint32_t sh = (base + j) % n;
			if (m >> sh & 1)
				near[cnt++] = sh;
		}
		if (!cnt)
			continue; /* a mask beyond this mover's shards */
		for (uint32_t j = 1; j < cnt && !fixed; j++)
			if (c->sh[near[j]].load < c->sh[near[best]].load)
				best = j;
		return near[(best + k) % cnt];
	}
	return (base + k) % n;
}

/* A request that names one id (region, peer, import) and wants no payload back. */
static int id_call(struct mvc *c, uint16_t type, uint32_t id)
{
	struct mv_id_req req = {.id = id};
	struct mv_reply_hdr rep;

	return call(c, type, &req, sizeof(req), NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);
}

static int reg(struct mvc *c, int fd, uint64_t off, uint64_t len, struct mvc_mem *m)
{
	struct mv_reg_req req = {.offset = off, .len = len};
	struct mv_reg_rep rep;
	int ret = call(c, MV_MSG_REG, &req, sizeof(req), &fd, 1, &rep, sizeof(rep), NULL, 0, NULL);

	if (ret)
		return ret;
	m->region = rep.region;
	return 0;
}

int mvc_alloc(struct mvc *c, uint64_t len, struct mvc_mem *out)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t size = (len + (uint64_t)page - 1) & ~(uint64_t)(page - 1);
	int fd, ret;

	memset(out, 0, sizeof(*out));
	out->fd = -1;
	if (len == 0)
		return fail(c, -EINVAL, "cannot allocate an empty region");
	fd = memfd_create("mvc-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return fail(c, -errno, "memfd_create: %s", strerror(errno));
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		ret = fail(c, -errno, "sizing the region memfd to %llu bytes: %s",
		           (unsigned long long)size, strerror(errno));
		goto err_close;
	}
	out->addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (out->addr == MAP_FAILED) {
		ret = fail(c, -errno, "mapping %llu bytes: %s", (unsigned long long)size,
		           strerror(errno));
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
		return fail(c, -errno, "dup of fd %d: %s", fd, strerror(errno));
	ret = reg(c, own, offset, len, out);
	if (ret)
		goto err_close;
	uint8_t *p =
	    mmap(NULL, len + (offset - moff), PROT_READ | PROT_WRITE, MAP_SHARED, own, (off_t)moff);
	if (p == MAP_FAILED) {
		ret = fail(c, -errno, "mapping the registered range: %s", strerror(errno));
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
		return fail(c, -ENOTSUP, "GPU memory needs CUDA: %s", nocuda);
	if (len == 0)
		return fail(c, -EINVAL, "cannot register an empty GPU region");
	r = cu->PointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
	if (r == CUDA_SUCCESS)
		r = cu->MemGetAddressRange(&base, &size, p);
	if (r != CUDA_SUCCESS)
		return fail(c, -EINVAL, "%p is not CUDA device memory: %s", dptr, mv_cuda_err(r));
	if (p - base > size || size - (p - base) < len)
		return fail(c, -ERANGE, "%llu bytes at %p run past its %zu-byte allocation",
		            (unsigned long long)len, dptr, size);
	r = cu->DeviceGetPCIBusId(req.gpu.busid, sizeof(req.gpu.busid), dev);
	if (r != CUDA_SUCCESS)
		return fail(c, -EIO, "naming device %d: %s", dev, mv_cuda_err(r));
	req.gpu.alloc_size = size;
	req.gpu.alloc_off = p - base;

	/* A VMM allocation is shared by its fd; cudaMalloc memory by IPC handle. */
	CUmemGenericAllocationHandle h;
	if (cu->MemRetainAllocationHandle(&h, dptr) == CUDA_SUCCESS) {
		r = cu->MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		                                   0);
		cu->MemRelease(h);
		if (r != CUDA_SUCCESS)
			return fail(c, -EINVAL,
			            "VMM memory at %p cannot be exported as an fd (%s): create it "
			            "with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR allowed",
			            dptr, mv_cuda_err(r));
		req.gpu.kind = MV_GPU_VMM;
	} else {
		CUipcMemHandle ih;
		r = cu->IpcGetMemHandle(&ih, base);
		if (r != CUDA_SUCCESS)
			return fail(c, -EINVAL, "no CUDA IPC handle for %p: %s", dptr,
			            mv_cuda_err(r));
		memcpy(req.gpu.ipc, &ih,
		       sizeof(ih) < sizeof(req.gpu.ipc) ? sizeof(ih) : sizeof(req.gpu.ipc));
		req.gpu.kind = MV_GPU_IPC;
	}
	ret = call(c, MV_MSG_REG_GPU, &req, sizeof(req), fd >= 0 ? &fd : NULL, fd >= 0, &rep,
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
	return fail(c, -ENOTSUP, "libmvc was built without CUDA");
#endif
}

int mvc_address(struct mvc *c, void *buf, size_t *len)
{
	struct mv_addr_rep rep;
	size_t need = offsetof(struct mv_addr_blob, addr) + c->info.nshards * MV_MAX_ADDRLEN;
	int ret = call(c, MV_MSG_ADDR, NULL, 0, NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);

	if (ret)
		return ret;
	if (*len < need)
		return fail(c, -ENOSPC, "address blob needs %zu bytes, buffer has %zu", need, *len);
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
	ret = call(c, MV_MSG_BLOB, &req, sizeof(req), NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);
	if (ret)
		return ret;
	if (*len < rep.blob_len)
		return fail(c, -ENOSPC, "region blob needs %u bytes, buffer has %zu", rep.blob_len,
		            *len);
	memcpy(buf, &rep.blob, rep.blob_len);
	*len = rep.blob_len;
	return 0;
}

int mvc_peer_add(struct mvc *c, const void *addr, size_t len, uint32_t *peer)
{
	struct mv_id_rep rep;
	int ret;

	if (len > sizeof(struct mv_addr_blob))
		return fail(c, -EINVAL, "address blob of %zu bytes is larger than any mover's",
		            len);
	ret = call(c, MV_MSG_PEER_ADD, addr, len, NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);
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
		return fail(c, -EINVAL, "region blob of %zu bytes is larger than any mover's", len);
	memcpy(&req.blob, blob, len);
	ret = call(c, MV_MSG_IMPORT, &req, offsetof(struct mv_import_req, blob) + len, NULL, 0,
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

/* ---- batches ---- */

/*
 * The shard for a new batch's small writes (and the first stripe of its
 * large ones): the one with the fewest bytes in flight, the next in turn
 * among equals. A shard that fell behind gets less new work, so the others
 * are not left idle while the client's window fills with its batches.
 */
static uint32_t least_loaded(struct mvc *c)
{
	uint32_t n = c->info.nshards, best = c->turn % n;

	for (uint32_t i = 1; i < n; i++) {
		uint32_t s = (c->turn + i) % n;
		if (c->sh[s].load < c->sh[best].load)
			best = s;
	}
	c->turn = best + 1;
	return best;
}

static int batch_open(struct mvc *c)
{
	if (c->open)
		return 0;
	if (c->dead)
		return fail(c, -EPIPE, "the mover is gone");
	if (!c->nfree)
		return fail(c, -EAGAIN, "all %u batch ids are in flight; reap completions",
		            c->info.max_batches);
	c->batch = c->free_ids[--c->nfree];
	c->home = least_loaded(c);
	c->open = 1;
	c->has_imm = 0;
	c->kind = 0;
	c->nops = 0;
	c->page_size = 0;
	for (uint32_t s = 0; s < c->info.nshards; s++)
		c->sh[s].ndesc = 0, c->sh[s].nbytes = 0;
	return 0;
}

/* Saved ring positions, so a call that runs out of room leaves no trace. */
struct mark {
	uint32_t reserved[MV_MAX_SHARDS];
	uint32_t ndesc[MV_MAX_SHARDS];
	uint64_t nbytes[MV_MAX_SHARDS];
};

static void mark_take(struct mvc *c, struct mark *m)
{
	for (uint32_t s = 0; s < c->info.nshards; s++) {
		m->reserved[s] = shmring_reserved(&c->sh[s].sub);
		m->ndesc[s] = c->sh[s].ndesc;
		m->nbytes[s] = c->sh[s].nbytes;
	}
}

static int mark_undo(struct mvc *c, const struct mark *m, int err)
{
	for (uint32_t s = 0; s < c->info.nshards; s++) {
		shmring_unreserve(&c->sh[s].sub, shmring_reserved(&c->sh[s].sub) - m->reserved[s]);
		c->sh[s].ndesc = m->ndesc[s];
		c->sh[s].nbytes = m->nbytes[s];
	}
	return err;
}

/* One WRITE descriptor on shard s; always leaves room for that shard's END. */
static int put_write(struct mvc *c, uint32_t s, uint32_t src, uint64_t src_off, uint32_t dst,
                     uint64_t dst_off, uint64_t len)
{
	struct mvc_shard *sh = &c->sh[s];
	uint32_t pos;
	int n = shmring_reserve(&sh->sub, 2, &pos);

	if (n < 0)
		return fail(c, n, "submission ring of shard %u: %s", s, shmring_error(&sh->sub));
	if (n < 2) {
		shmring_unreserve(&sh->sub, (uint32_t)n);
		if (shmring_reserved(&sh->sub) + 2 > sh->sub.capacity)
			return fail(c, -E2BIG,
			            "batch needs more than %u descriptors on shard %u; split it",
			            sh->sub.capacity - 1, s);
		return fail(c, -EAGAIN, "submission ring of shard %u is full", s);
	}
	shmring_unreserve(&sh->sub, 1);
	struct mv_desc *d = shmring_slot(&sh->sub, pos);
	*d = (struct mv_desc){.op = MV_OP_WRITE,
	                      .batch = c->batch,
	                      .src = src,
	                      .dst = dst,
	                      .src_off = src_off,
	                      .dst_off = dst_off,
	                      .len = len};
	sh->ndesc++;
	sh->nbytes += len;
	return 0;
}

/* A contiguous write on one shard, cut to the mover's largest descriptor. */
static int put_span(struct mvc *c, uint32_t s, uint32_t src, uint64_t so, uint32_t dst,
                    uint64_t doff, uint64_t len)
{
	while (len) {
		uint64_t n = len < c->max_write ? len : c->max_write;
		int ret = put_write(c, s, src, so, dst, doff, n);
		if (ret)
			return ret;
		so += n;
		doff += n;
		len -= n;
	}
	return 0;
}

int mvc_write(struct mvc *c, uint32_t src, uint64_t src_off, uint32_t dst, uint64_t dst_off,
              uint64_t len)
{
	struct mark m;
	uint32_t n = c->info.nshards;
	int ret = batch_open(c);

	if (ret)
		return ret;
	if (len == 0)
		return fail(c, -EINVAL, "write of 0 bytes");
	mark_take(c, &m);
	int local_gpu = 0;
	for (uint32_t i = 0; i < c->nlocal_gpu; i++)
		local_gpu |= c->local_gpu[i] == dst;
	if (len < (local_gpu ? LOCAL_GPU_STRIPE_MIN : MV_STRIPE_MIN) || n == 1) {
		ret = put_span(c, pick(c, src, 0, 0), src, src_off, dst, dst_off, len);
		if (ret)
			return mark_undo(c, &m, ret);
		c->kind |= MV_TK_WRITE;
		c->nops++;
		return 0;
	}
	/* Striped: equal, aligned parts, one per shard. */
	uint64_t part = mv_stripe_part(len, n);
	for (uint32_t k = 0; k < n && (uint64_t)k * part < len; k++) {
		uint64_t o = (uint64_t)k * part, l = len - o < part ? len - o : part;
		ret = put_span(c, pick(c, src, k, 1), src, src_off + o, dst, dst_off + o, l);
		if (ret)
			return mark_undo(c, &m, ret);
	}
	c->kind |= MV_TK_WRITE;
	c->nops++;
	return 0;
}

int mvc_writev(struct mvc *c, uint32_t src, uint32_t dst, const struct mvc_seg *segs, uint32_t n)
{
	struct mark m;
	uint32_t ns = c->info.nshards;
	uint32_t per = (n + ns - 1) / ns; /* neighbours stay together: the mover merges them */
	int ret = batch_open(c);

	if (ret)
		return ret;
	mark_take(c, &m);
	for (uint32_t i = 0; i < n; i++) {
		if (segs[i].len == 0)
			return mark_undo(c, &m, fail(c, -EINVAL, "segment %u has length 0", i));
		ret = put_span(c, pick(c, src, i / per, 0), src, segs[i].src_off, dst,
		               segs[i].dst_off, segs[i].len);
		if (ret)
			return mark_undo(c, &m, ret);
	}
	c->kind |= MV_TK_WRITEV;
	c->nops += n;
	return 0;
}

int mvc_write_paged(struct mvc *c, const struct mvc_pages *p)
{
	struct mark m;
	uint32_t ns = c->info.nshards, runs = 0, i, k;
	int ret = batch_open(c);

	if (ret)
		return ret;
	if (p->page_size == 0 || p->npages == 0)
		return fail(c, -EINVAL, "paged write of %u pages of %llu bytes", p->npages,
		            (unsigned long long)p->page_size);
	/* Runs of pages adjacent on both sides become one descriptor. */
	int contig_src = p->src_stride == p->page_size, contig_dst = p->dst_stride == p->page_size;
	for (i = 0; i < p->npages; i = k) {
		for (k = i + 1; k < p->npages && contig_src && contig_dst &&
		                p->src_pages[k] == p->src_pages[k - 1] + 1 &&
		                p->dst_pages[k] == p->dst_pages[k - 1] + 1;
		     k++)
			;
		runs++;
	}
	uint32_t per = (runs + ns - 1) / ns, run = 0;
	mark_take(c, &m);
	for (i = 0; i < p->npages; i = k, run++) {
		for (k = i + 1; k < p->npages && contig_src && contig_dst &&
		                p->src_pages[k] == p->src_pages[k - 1] + 1 &&
		                p->dst_pages[k] == p->dst_pages[k - 1] + 1;
		     k++)
			;
		uint64_t so = p->src_base + (uint64_t)p->src_pages[i] * p->src_stride;
		uint64_t doff = p->dst_base + (uint64_t)p->dst_pages[i] * p->dst_stride;
		ret = put_span(c, pick(c, p->src, run / per, 0), p->src, so, p->dst, doff,
		               (uint64_t)(k - i) * p->page_size);
		if (ret)
			return mark_undo(c, &m, ret);
	}
	/* A batch of pages of more than one size records page size 0. */
	c->page_size = (c->kind & MV_TK_PAGED) && c->page_size != p->page_size ? 0 : p->page_size;
	c->kind |= MV_TK_PAGED;
	c->nops += p->npages;
	return 0;
}

int mvc_write_imm(struct mvc *c, uint32_t dst, uint32_t imm)
{
	int ret = batch_open(c);

	if (ret)
		return ret;
	if (c->has_imm)
		return fail(c, -EBUSY, "this batch already carries an immediate");
	c->has_imm = 1;
	c->imm_dst = dst;
	c->imm = imm;
	c->kind |= MV_TK_IMM;
	return 0;
}

void mvc_abort(struct mvc *c)
{
	if (!c->open)
		return;
	for (uint32_t s = 0; s < c->info.nshards; s++) {
		shmring_cancel(&c->sh[s].sub);
		c->sh[s].ndesc = 0;
	}
	c->free_ids[c->nfree++] = c->batch;
	c->open = 0;
}

/* Moves every reserved WRITE of the open batch onto the home shard. */
static int gather_home(struct mvc *c)
{
	struct mvc_shard *h = &c->sh[c->home];
	uint32_t need = 0, pos;

	for (uint32_t s = 0; s < c->info.nshards; s++)
		if (s != c->home)
			need += c->sh[s].ndesc;
	if (!need)
		return 0;
	/* Room for them and the END the home shard still owes. */
	int n = shmring_reserve(&h->sub, need + 1, &pos);
	if (n < 0)
		return fail(c, n, "submission ring of shard %u: %s", c->home,
		            shmring_error(&h->sub));
	if ((uint32_t)n < need + 1) {
		shmring_unreserve(&h->sub, (uint32_t)n);
		if (shmring_reserved(&h->sub) + need + 2 > h->sub.capacity)
			return fail(c, -E2BIG,
			            "a batch with an immediate must fit one shard's ring "
			            "(%u descriptors) on this provider",
			            h->sub.capacity - 1);
		return fail(c, -EAGAIN, "submission ring of shard %u is full", c->home);
	}
	shmring_unreserve(&h->sub, 1);
	for (uint32_t s = 0; s < c->info.nshards; s++) {
		struct mvc_shard *sh = &c->sh[s];
		uint32_t k = shmring_reserved(&sh->sub);
		if (s == c->home || !k)
			continue;
		uint32_t first = sh->sub.local - k;
		for (uint32_t i = 0; i < k; i++)
			memcpy(shmring_slot(&h->sub, pos++), shmring_slot(&sh->sub, first + i),
			       sizeof(struct mv_desc));
		shmring_unreserve(&sh->sub, k);
		h->ndesc += sh->ndesc;
		h->nbytes += sh->nbytes;
		sh->ndesc = 0;
		sh->nbytes = 0;
	}
	return 0;
}

int mvc_submit(struct mvc *c, uint64_t cookie)
{
	uint32_t parts = 0, s, pos;
	int ret;

	if (!c->open)
		return fail(c, -EINVAL, "no open batch: add a write or an immediate first");
	if (c->has_imm && (c->flags & MV_HELLO_IMM_ONE_SHARD) && (ret = gather_home(c)))
		return ret;
	for (s = 0; s < c->info.nshards; s++)
		parts += c->sh[s].ndesc > 0;
	/* A batch with no writes (a lone immediate) is one part, on home. */
	uint32_t lone = parts == 0;
	if (lone)
		parts = 1;
	uint64_t total = 0;
	for (s = 0; s < c->info.nshards; s++)
		total += c->sh[s].nbytes;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	uint64_t stamp = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
	for (s = 0; s < c->info.nshards; s++) {
		struct mvc_shard *sh = &c->sh[s];
		/* Shards with writes end their parts; a lone immediate uses home.
		 * (Not home whenever there is one part: writes kept near a GPU
		 * may all sit on another shard, and two ENDs of one part each
		 * would complete the batch twice.) */
		if (!sh->ndesc && !(lone && s == c->home))
			continue;
		/* put_write kept a slot free for this END. */
		if (shmring_reserve(&sh->sub, 1, &pos) != 1)
			return fail(c, -EAGAIN, "submission ring of shard %u is full", s);
		struct mv_desc *d = shmring_slot(&sh->sub, pos);
		*d = (struct mv_desc){.op = MV_OP_END,
		                      .batch = c->batch,
		                      .nparts = (uint16_t)parts,
		                      .cookie = cookie,
		                      .ndesc = sh->ndesc,
		                      .src = c->kind,
		                      .src_off = c->nops,
		                      .dst_off = c->page_size,
		                      .len = total,
		                      .stamp = stamp};
		if (c->has_imm) {
			d->flags = MV_END_IMM;
			d->dst = c->imm_dst;
			d->imm = c->imm;
		}
	}
	/* One commit per shard publishes the whole part at once. */
	uint64_t mask = 0, share = total / parts + 1;
	for (s = 0; s < c->info.nshards; s++) {
		struct mvc_shard *sh = &c->sh[s];
		if (!shmring_reserved(&sh->sub))
			continue;
		shmring_commit(&sh->sub);
		sh->bytes += sh->nbytes;
		sh->descs += sh->ndesc;
		sh->load += share;
		mask |= 1ull << s;
	}
	c->cookies[c->batch] = cookie;
	c->busy[c->batch] = 1;
	c->parts_of[c->batch] = mask;
	c->share[c->batch] = share;
	c->inflight++;
	c->open = 0;
	return 0;
}

/* ---- completions ---- */

static struct imm_ent *imm_find(struct mvc *c, uint32_t value, int add)
{
	if (add && (c->imm_used + 1) * 2 > c->imm_cap) {
		uint32_t cap = c->imm_cap ? c->imm_cap * 2 : 256;
		struct imm_ent *t = calloc(cap, sizeof(*t)), *old = c->imm_tab;
		if (!t)
			return NULL;
		for (uint32_t i = 0; i < c->imm_cap; i++) {
			if (!old[i].used)
				continue;
			uint32_t h = old[i].value * 2654435761u & (cap - 1);
			while (t[h].used)
				h = (h + 1) & (cap - 1);
			t[h] = old[i];
		}
		free(old);
		c->imm_tab = t;
		c->imm_cap = cap;
	}
	if (!c->imm_cap)
		return NULL;
	uint32_t h = value * 2654435761u & (c->imm_cap - 1);
	while (c->imm_tab[h].used) {
		if (c->imm_tab[h].value == value)
			return &c->imm_tab[h];
		h = (h + 1) & (c->imm_cap - 1);
	}
	if (!add)
		return NULL;
	c->imm_tab[h] = (struct imm_ent){.value = value, .used = 1};
	c->imm_used++;
	return &c->imm_tab[h];
}

static int imm_ready(struct imm_ent *e, struct mvc_event *ev)
{
	if (!e->want || e->count < e->want)
		return 0;
	*ev = (struct mvc_event){
	    .type = MVC_EV_IMM_COUNT, .cookie = e->cookie, .imm = e->value, .count = e->want};
	e->count -= e->want;
	e->want = 0;
	return 1;
}

int mvc_imm_expect(struct mvc *c, uint32_t imm, uint32_t count, uint64_t cookie)
{
	struct imm_ent *e = imm_find(c, imm, 1);

	if (!e)
		return fail(c, -ENOMEM, "no memory to count immediates");
	if (count == 0)
		return fail(c, -EINVAL, "expecting 0 immediates of %u", imm);
	if (e->want)
		return fail(c, -EBUSY, "immediates of value %u are already being counted", imm);
	if (e->count >= count && c->ndue == c->due_cap) {
		uint32_t cap = c->due_cap ? c->due_cap * 2 : 16;
		uint32_t *due = realloc(c->imm_due, cap * sizeof(*due));
		if (!due)
			return fail(c, -ENOMEM, "no memory to count immediates");
		c->imm_due = due;
		c->due_cap = cap;
	}
	e->want = count;
	e->cookie = cookie;
	/* Enough already arrived: no later immediate may come to report it. */
	if (e->count >= count)
		c->imm_due[c->ndue++] = imm;
	return 0;
}

/* One completion entry to at most one event; 1 if ev was filled. */
static int translate(struct mvc *c, const struct mv_cqe *q, struct mvc_event *ev)
{
	struct mv_cqe e;

	memcpy(&e, q, sizeof(e)); /* the slot is shared memory: read it once */
	if (e.type == MV_CQE_IMM) {
		struct imm_ent *t = imm_find(c, e.imm, 1);
		if (t) {
			t->count++;
			if (t->want)
				return imm_ready(t, ev);
		}
		*ev = (struct mvc_event){.type = MVC_EV_IMM, .imm = e.imm, .region = e.region};
		return 1;
	}
	*ev = (struct mvc_event){.type = MVC_EV_BATCH,
	                         .status = e.status,
	                         .bytes = e.bytes,
	                         .region = e.region,
	                         .cause = e.cause};
	memcpy(ev->msg, e.msg, sizeof(ev->msg));
	ev->msg[sizeof(ev->msg) - 1] = 0;
	if (e.batch < c->info.max_batches && c->busy[e.batch]) {
		ev->cookie = c->cookies[e.batch];
		c->busy[e.batch] = 0;
		for (uint64_t m = c->parts_of[e.batch]; m; m &= m - 1)
			c->sh[__builtin_ctzll(m)].load -= c->share[e.batch];
		c->free_ids[c->nfree++] = e.batch;
		c->inflight--;
	}
	return 1;
}

static int mover_gone(struct mvc *c, struct mvc_event *ev, int max)
{
	int n = 0;

	c->dead = 1;
	for (uint32_t b = 0; b < c->info.max_batches && n < max; b++) {
		if (!c->busy[b])
			continue;
		ev[n++] = (struct mvc_event){.type = MVC_EV_BATCH,
		                             .status = -EPIPE,
		                             .cookie = c->cookies[b],
		                             .cause = MVC_CAUSE_MOVER_GONE};
		snprintf(ev[n - 1].msg, sizeof(ev[n - 1].msg),
		         "the mover exited before the batch completed");
		c->busy[b] = 0;
		c->inflight--;
	}
	return n ? n : fail(c, -EPIPE, "the mover is gone");
}

int mvc_poll(struct mvc *c, struct mvc_event *ev, int max)
{
	int n = 0;

	while (c->ndue && n < max) {
		struct imm_ent *t = imm_find(c, c->imm_due[--c->ndue], 0);
		if (t)
			n += imm_ready(t, &ev[n]);
	}
	for (uint32_t s = 0; s < c->info.nshards && n < max; s++) {
		struct shmring *r = &c->sh[s].comp;
		uint32_t pos, used = 0;
		int got = shmring_peek(r, (uint32_t)(max - n), &pos);

		if (got < 0)
			return fail(c, got, "completion ring of shard %u: %s", s, shmring_error(r));
		for (; used < (uint32_t)got && n < max; used++)
			n += translate(c, shmring_slot(r, pos + used), &ev[n]);
		if (used)
			shmring_release(r, used);
	}
	return n;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int mvc_wait(struct mvc *c, struct mvc_event *ev, int max, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : now_ms() + timeout_ms;

	for (;;) {
		int n = mvc_poll(c, ev, max);
		if (n)
			return n;
		if (c->dead)
			return mover_gone(c, ev, max);

		uint32_t armed = 0, ready = 0;
		for (; armed < c->info.nshards; armed++)
			if (shmring_arm_doorbell(&c->sh[armed].comp)) {
				ready = 1;
				break;
			}
		if (!ready) {
			int64_t left = deadline - now_ms();
			if (left <= 0) {
				for (uint32_t s = 0; s < armed; s++)
					shmring_disarm(&c->sh[s].comp);
				return 0;
			}
			struct pollfd pf[2] = {{.fd = c->efd, .events = POLLIN},
			                       {.fd = c->sock, .events = POLLRDHUP}};
			int p = poll(pf, 2, left > 1000000 ? 1000000 : (int)left);
			if (p > 0 && (pf[0].revents & POLLIN)) {
				uint64_t v;
				if (read(c->efd, &v, sizeof(v)) < 0) {
					/* drained by an earlier wake-up */
				}
			}
			if (p > 0 && (pf[1].revents & (POLLHUP | POLLRDHUP | POLLERR))) {
				/* Completions already in the rings still count. */
				for (uint32_t s = 0; s < armed; s++)
					shmring_disarm(&c->sh[s].comp);
				n = mvc_poll(c, ev, max);
				return n ? n : mover_gone(c, ev, max);
			}
		}
		for (uint32_t s = 0; s < armed; s++)
			shmring_disarm(&c->sh[s].comp);
	}
}
