/* SPDX-License-Identifier: MIT */
/*
 * The same-host path: a write into a host region of a peer mover on this
 * host is a copy by the sending shard straight into the region's memfd, at
 * memory speed, instead of a fabric write (shm's cross-memory attach moves
 * 10-13 GB/s here; a copy between mappings 4x that). The receiving mover
 * hands the region's memfd once, at IMPORT, to a peer mover that shows the
 * blob's secret (HOST_FD; the peer's role is access.c's); the sender checks
 * that the fd is the region the blob names (its size, its seals, the pid of
 * the mover that sent it) and maps it, else it logs one line and writes
 * through the fabric as before. Immediates and completions stay as they
 * are: the immediate is a fabric write posted after the copies are done.
 *
 * A freed region must take no byte after its free returns, as a fabric
 * write cannot once the owner overlays its mapping: the owner's fence
 * segment (samehost_layout.h) says which regions may still be copied into,
 * and each copying shard says which one it is in. An import dropped while
 * copies are queued is overlaid with anonymous memory (the overlay
 * registry.c gives freed regions) and unmapped after the same quarantine.
 */
#include "shard_int.h"

#include "mv_huge.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "mv_sock.h"
#include "samehost_layout.h"

static_assert(MV_FENCE_REGIONS == MV_MAX_REGIONS, "one live word per region slot");

/* ---- the owner's side: the fence, the fd handed out, the revocation ---- */

static int fence_open(struct mover *mv, char *why, size_t whylen)
{
	int fd = memfd_create("mv-fence", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	struct mv_fence *f;

	if (fd < 0 || ftruncate(fd, sizeof(*f)) < 0) {
		snprintf(why, whylen, "the fence segment: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (f == MAP_FAILED) {
		snprintf(why, whylen, "mapping the fence segment: %s", strerror(errno));
		close(fd);
		return -ENOMEM;
	}
	f->magic = MV_FENCE_MAGIC;
	f->abi = MV_FENCE_ABI;
	f->nslots = MV_FENCE_SLOTS;
	f->nregions = MV_FENCE_REGIONS;
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	mv->fence = f;
	mv->fence_fd = fd;
	return 0;
}

/* The first fence slot of the peer mover id, nshards of them from there. */
static int fence_slots(struct mover *mv, uint64_t id, uint32_t nshards, char *why, size_t whylen)
{
	for (uint32_t i = 0; i < mv->nfence_peers; i++)
		if (mv->fence_peers[i].mover_id == id && mv->fence_peers[i].n == nshards)
			return (int)mv->fence_peers[i].slot;
	if (nshards == 0 || nshards > MV_MAX_SHARDS ||
	    mv->nfence_peers == sizeof(mv->fence_peers) / sizeof(mv->fence_peers[0]) ||
	    MV_FENCE_SLOTS - mv->fence_next < nshards) {
		snprintf(why, whylen, "no fence slots left for %u more peer shards", nshards);
		return -ENOSPC;
	}
	mv->fence_peers[mv->nfence_peers++] =
	    (struct mv_fence_peer){.mover_id = id, .slot = mv->fence_next, .n = nshards};
	mv->fence_next += nshards;
	return (int)(mv->fence_next - nshards);
}

int mv_host_fd_serve(struct mover *mv, struct mv_client *cl, const struct mv_host_fd_req *req,
                     struct mv_host_fd_rep *rep, int fds[2], char *why, size_t whylen)
{
	struct mv_region *r = mv_region_get(mv, req->id);
	int slot, ret;

	if (r && r->secret != req->secret) {
		snprintf(why, whylen, "region %u: the request's secret is not its blob's", req->id);
		mv_log_client(MV_LOG_WARN, (uint64_t)cl->pid,
		              "refused HOST_FD for region %u from pid %d uid %u: wrong secret",
		              req->id, cl->pid, (unsigned)cl->uid);
		return -EACCES;
	}
	if (!r || r->is_gpu || r->host_fd < 0) {
		snprintf(why, whylen, "region %u is not a host region this mover shares", req->id);
		return -ENOENT;
	}
	if (!mv->fence && (ret = fence_open(mv, why, whylen)))
		return ret;
	slot = fence_slots(mv, req->mover_id, req->nshards, why, whylen);
	if (slot < 0)
		return slot;
	/* R7 pairs with F1 in mv_host_copy(): a copier that sees the id sees
	 * a region that is still ours. */
	atomic_store_explicit(&mv->fence->live[r->id % MV_MAX_REGIONS], r->id,
	                      memory_order_release);
	r->handed = 1;
	rep->region = r->id;
	rep->slot = (uint32_t)slot;
	rep->offset = r->fd_off;
	rep->len = r->len;
	fds[0] = r->host_fd;
	fds[1] = mv->fence_fd;
	return 0;
}

/* Waits at most this long for a peer shard to leave a freed region. */
#define REVOKE_WAIT_NS 2000000000ll

void mv_host_revoke(struct mover *mv, struct mv_region *r)
{
	if (!r->handed || !mv->fence)
		return;
	/* F2 pairs with F1 in mv_host_copy(): clear, then look. */
	atomic_store_explicit(&mv->fence->live[r->id % MV_MAX_REGIONS], 0, memory_order_seq_cst);
	int64_t start = mv_now_ns();
	for (uint32_t k = 0; k < mv->fence_next; k++) {
		struct timespec nap = {0, 20000};
		while (atomic_load_explicit(&mv->fence->busy[k].region, memory_order_seq_cst) ==
		       r->id) {
			if (mv_now_ns() - start > REVOKE_WAIT_NS) {
				mv_log("region %u freed while fence slot %u still copies into it "
				       "after %.1f s; going on",
				       r->id, k, REVOKE_WAIT_NS / 1e9);
				return;
			}
			nanosleep(&nap, NULL);
		}
	}
}

/* ---- the sender's side: fetching, checking and mapping the peer's memfd ---- */

/* HOST_FD to the mover at path: the reply and its two fds, the pid and uid
 * of whoever answered (SO_PEERCRED). */
static int fetch(const char *path, const struct mv_host_fd_req *req, struct mv_host_fd_rep *rep,
                 int fds[2], struct ucred *cred, char *why, size_t whylen)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct mv_msg_hdr h = {.magic = MV_WIRE_MAGIC,
	                       .version = MV_WIRE_VERSION,
	                       .type = MV_MSG_HOST_FD,
	                       .len = sizeof(*req),
	                       .seq = 1};
	struct iovec out[2] = {{&h, sizeof(h)}, {(void *)req, sizeof(*req)}};
	struct msghdr om = {.msg_iov = out, .msg_iovlen = 2};
	struct {
		struct mv_msg_hdr h;
		struct mv_host_fd_rep r;
	} in = {0};
	union mv_cmsg u;
	struct iovec iv = {&in, sizeof(in)};
	struct msghdr im = {
	    .msg_iov = &iv, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	struct timeval tv = {.tv_sec = 5};
	socklen_t clen = sizeof(*cred);
	int s, ret = 0;

	fds[0] = fds[1] = -1;
	if (strlen(path) >= sizeof(a.sun_path)) {
		snprintf(why, whylen, "socket path of %zu bytes", strlen(path));
		return -ENAMETOOLONG;
	}
	strcpy(a.sun_path, path);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockopt(s, SOL_SOCKET, SO_PEERCRED, cred, &clen) < 0) {
		ret = -errno;
		snprintf(why, whylen, "no mover at %s: %s", path, strerror(errno));
		goto out;
	}
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (sendmsg(s, &om, MSG_NOSIGNAL) != (ssize_t)(sizeof(h) + sizeof(*req))) {
		ret = -errno;
		snprintf(why, whylen, "sending HOST_FD to %s: %s", path, strerror(errno));
		goto out;
	}
	ssize_t n = recvmsg(s, &im, MSG_CMSG_CLOEXEC);
	if (n > 0)
		mv_fds_take(&im, fds, 2);
	if (n < (ssize_t)(sizeof(in.h) + sizeof(in.r.r))) {
		ret = -EPROTO;
		snprintf(why, whylen, "no reply to HOST_FD from %s", path);
	} else if (in.r.r.status) {
		ret = in.r.r.status < 0 ? in.r.r.status : -EPROTO;
		snprintf(why, whylen, "the mover at %s: %.100s", path, in.r.r.msg);
	} else if (n != (ssize_t)sizeof(in) || fds[1] < 0) {
		ret = -EPROTO;
		snprintf(why, whylen, "a HOST_FD reply of %zd bytes with %s", n,
		         fds[1] < 0 ? "fewer than two fds" : "two fds");
	}
	*rep = in.r;
out:
	if (ret) {
		for (int i = 0; i < 2; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		fds[0] = fds[1] = -1;
	}
	if (s >= 0)
		close(s);
	return ret;
}

/* A memfd sealed against shrinking (or a hugetlbfs file, which cannot be
 * truncated under a mapping) at least need bytes long. */
static int check_file(int fd, uint64_t need, const char *what, char *why, size_t whylen)
{
	struct stat st;
	struct statfs sf;
	int seals;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s is not a memfd or hugetlbfs file", what);
		return -EBADF;
	}
	if ((uint64_t)st.st_size < need) {
		snprintf(why, whylen, "%s is %lld bytes; the blob needs %llu", what,
		         (long long)st.st_size, (unsigned long long)need);
		return -ERANGE;
	}
	seals = fcntl(fd, F_GET_SEALS);
	if (seals >= 0 && (seals & F_SEAL_SHRINK))
		return 0;
	if (seals < 0 && fstatfs(fd, &sf) == 0 && sf.f_type == HUGETLBFS_MAGIC)
		return 0;
	snprintf(why, whylen, "%s is not sealed against shrinking (F_SEAL_SHRINK)", what);
	return -EPERM;
}

/* The fence of peer p, mapped once; fd is consumed. */
static int fence_map(struct mv_peer *p, int fd, char *why, size_t whylen)
{
	struct mv_fence *f;
	int ret = 0;

	if (p->fence) {
		close(fd);
		return 0;
	}
	ret = check_file(fd, sizeof(*f), "the fence segment", why, whylen);
	if (ret) {
		close(fd);
		return ret;
	}
	f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (f == MAP_FAILED) {
		snprintf(why, whylen, "mapping the fence segment: %s", strerror(errno));
		return -ENOMEM;
	}
	if (f->magic != MV_FENCE_MAGIC || f->abi != MV_FENCE_ABI || f->nslots != MV_FENCE_SLOTS ||
	    f->nregions != MV_FENCE_REGIONS) {
		snprintf(why, whylen, "the fence segment is not ABI %u", MV_FENCE_ABI);
		munmap(f, sizeof(*f));
		return -EPROTO;
	}
	p->fence = f;
	return 0;
}

/* Checks the reply and fds against the blob b and the peer p, and maps. */
static int host_open(struct mover *mv, struct mv_host_remote *hr, struct mv_peer *p,
                     const struct mv_region_blob *b, char *why, size_t whylen)
{
	struct mv_host_fd_req req = {
	    .id = b->region, .nshards = mv->nshards, .secret = b->secret, .mover_id = mv->mover_id};
	struct mv_host_fd_rep rep = {0};
	struct ucred cred = {0};
	char sock[sizeof(b->sock) + 1];
	int fds[2], ret;

	memcpy(sock, b->sock, sizeof(b->sock));
	sock[sizeof(b->sock)] = 0;
	ret = fetch(sock, &req, &rep, fds, &cred, why, whylen);
	if (ret)
		return ret;
	/* The fd must be the region the blob names, from the mover that
	 * made the blob: its id and size, a file that holds them and cannot
	 * shrink under our mapping, sent by the peer's own process. */
	if (rep.region != b->region || rep.len != b->len || rep.offset > UINT64_MAX - rep.len ||
	    rep.slot > MV_FENCE_SLOTS - mv->nshards) {
		snprintf(why, whylen,
		         "the reply names region %u of %llu bytes at %llu (slot %u); the blob "
		         "region %u of %llu bytes",
		         rep.region, (unsigned long long)rep.len, (unsigned long long)rep.offset,
		         rep.slot, b->region, (unsigned long long)b->len);
		ret = -EPROTO;
	} else if ((ret = check_file(fds[0], rep.offset + rep.len, "the region's fd", why,
	                             whylen)) == 0 &&
	           (cred.pid != p->pid || (cred.uid != geteuid() && cred.uid != 0))) {
		snprintf(why, whylen,
		         "the fd came from pid %d uid %u; the peer mover is pid %d (uid %u or "
		         "root)",
		         (int)cred.pid, (unsigned)cred.uid, (int)p->pid, (unsigned)geteuid());
		ret = -EACCES;
	}
	if (!ret)
		ret = fence_map(p, fds[1], why, whylen);
	else
		close(fds[1]);
	if (ret) {
		close(fds[0]);
		return ret;
	}
	/* Whole pages of a hugetlbfs file; a large shmem region 2 MiB-aligned
	 * with MADV_HUGEPAGE, so that huge pages its owner got map huge here
	 * too (on 4 KiB pages that costs nothing: they exist already). */
	hr->base = mv_huge_map(fds[0], rep.offset, rep.len, rep.len >= MV_HUGE_SIZE, 1, &hr->map,
	                       &hr->map_len);
	close(fds[0]);
	if (!hr->base) {
		snprintf(why, whylen, "mapping the region: %s", strerror(errno));
		return -ENOMEM;
	}
	hr->len = rep.len;
	hr->fence = p->fence;
	hr->slot = rep.slot;
	return 0;
}

void mv_host_import_open(struct mover *mv, struct mv_import *imp, struct mv_peer *p,
                         const struct mv_region_blob *b)
{
	char why[MV_ERRLEN];
	int ret;

	/* Same host and pid namespace only (p->pid), host memory its mover
	 * shares, and not switched off. */
	if (mv->cfg.no_host_copy || !p->pid || !(b->flags & MV_BLOB_HOST_FD) ||
	    (b->flags & MV_BLOB_GPU) || b->mover_id == mv->mover_id)
		return;
	/* One mapping per peer region, shared by every import of it. */
	for (struct mv_host_remote *h = mv->host_remote; h; h = h->next)
		if (h->mover_id == b->mover_id && h->region == b->region) {
			h->refs++;
			imp->host = h;
			return;
		}
	struct mv_host_remote *hr = calloc(1, sizeof(*hr));
	if (!hr)
		return;
	ret = host_open(mv, hr, p, b, why, sizeof(why));
	if (ret) {
		/* One line per refused import: writes go through the fabric. */
		mv_logl(MV_LOG_WARN,
		        "same-host copy into region %u of mover %016llx (pid %d) refused: %s; "
		        "writing through the fabric",
		        b->region, (unsigned long long)b->mover_id, (int)p->pid, why);
		free(hr);
		return;
	}
	hr->mover_id = b->mover_id;
	hr->region = b->region;
	hr->refs = 1;
	hr->next = mv->host_remote;
	mv->host_remote = hr;
	imp->host = hr;
	mv_dbg("region %u of mover %016llx: same-host copies, %llu bytes mapped", b->region,
	       (unsigned long long)b->mover_id, (unsigned long long)hr->len);
}

void mv_host_import_close(struct mover *mv, struct mv_import *imp)
{
	struct mv_host_remote **pp = &mv->host_remote, *hr = imp->host;
	struct timespec ts;

	imp->host = NULL;
	if (!hr || --hr->refs)
		return;
	while (*pp && *pp != hr)
		pp = &(*pp)->next;
	if (*pp)
		*pp = hr->next;
	/* Copies may still be queued on a shard (an unimport with writes in
	 * flight): they land in anonymous memory from here, as late writes
	 * into a freed region do (registry.c), and the range is unmapped after
	 * the same quarantine. */
	if (mmap(hr->map, hr->map_len, PROT_READ | PROT_WRITE,
	         MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
		munmap(hr->map, hr->map_len);
		free(hr);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	hr->expires = (int64_t)ts.tv_sec + 3 * mv->cfg.op_timeout_ms / 1000 + 30;
	hr->next = mv->host_dead;
	mv->host_dead = hr;
}

void mv_host_reap(struct mover *mv, int all)
{
	struct mv_host_remote **pp = &mv->host_dead;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	while (*pp) {
		struct mv_host_remote *hr = *pp;
		if (all || hr->expires <= (int64_t)ts.tv_sec) {
			*pp = hr->next;
			munmap(hr->map, hr->map_len);
			free(hr);
			continue;
		}
		pp = &hr->next;
	}
}

/* ---- the shard's side: the copy ---- */

/*
 * Bytes from which a copy streams past the caches (non-temporal stores):
 * a copy larger than half the last-level cache would only push out what
 * the receiver and the next copies need; smaller ones go by memcpy, whose
 * stores stay in the caches where the receiver finds them (and which
 * streams itself above glibc's own threshold). An op is at most MV_CHUNK,
 * so on a host whose L3 holds 8 MiB or more every copy is a memcpy: on the
 * machines measured, streaming stores cost a third of the rate of buffers
 * that stay in their large L3 (README, same-host path). $MV_NT_MIN sets the
 * size (0: never). Read once; shards only read it after.
 */
static uint64_t nt_min(void)
{
	static _Atomic uint64_t v;
	uint64_t n = atomic_load_explicit(&v, memory_order_relaxed);

	if (!n) {
		const char *e = getenv("MV_NT_MIN");
		long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
		n = e && *e  ? strtoull(e, NULL, 0)
		    : l3 > 0 ? (uint64_t)l3 / 2
		             : (uint64_t)MV_NT_MIN;
		if (n == 0)
			n = UINT64_MAX;
		atomic_store_explicit(&v, n, memory_order_relaxed);
	}
	return n;
}

static void copy_nt(uint8_t *d, const uint8_t *s, size_t n)
{
#ifdef __SSE2__
	size_t head = (16 - ((uintptr_t)d & 15)) & 15;

	if (head > n)
		head = n;
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
	/* Streaming stores are weakly ordered: all of them are visible before
	 * anything this shard does next (the immediate's post). */
	_mm_sfence();
#else
	memcpy(d, s, n);
#endif
}

int mv_host_copy(struct mv_shard *s, struct mv_wr *op, char *why, size_t whylen)
{
	struct mv_host_remote *hr = op->hr;
	_Atomic uint32_t *busy = &hr->fence->busy[hr->slot + (uint32_t)s->id].region;
	int nt = op->bytes >= nt_min();

	/* F1 pairs with F2 in mv_host_revoke(): say where we copy, then look
	 * whether the region is still there. */
	atomic_store_explicit(busy, hr->region, memory_order_seq_cst);
	if (atomic_load_explicit(&hr->fence->live[hr->region % MV_MAX_REGIONS],
	                         memory_order_seq_cst) != hr->region) {
		atomic_store_explicit(busy, 0, memory_order_release);
		snprintf(why, whylen, "peer region %u was freed by its owner", hr->region);
		return -ENOENT;
	}
	for (uint32_t i = 0; i < op->niov; i++) {
		uint8_t *d = (uint8_t *)(uintptr_t)op->riov[i].addr;
		if (nt)
			copy_nt(d, op->iov[i].iov_base, op->iov[i].iov_len);
		else
			memcpy(d, op->iov[i].iov_base, op->iov[i].iov_len);
	}
	/* R8: the copy is done before the owner may see the slot free. */
	atomic_store_explicit(busy, 0, memory_order_release);
	return 0;
}
