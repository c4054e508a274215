/* SPDX-License-Identifier: MIT */
/*
 * The same-host path, the copier's side: a write into a host region of a
 * peer mover on this host is a copy by the sending shard straight into the
 * region's memfd, at memory speed, instead of a fabric write (shm's
 * cross-memory attach moves 10-13 GB/s here; a copy between mappings 4x
 * that). At IMPORT this mover asks the region's mover for its memfd
 * (HOST_FD, showing the blob's secret; the owner's side is
 * samehost_owner.c) without waiting for the answer: the control loop goes
 * on serving (two movers importing each other at once each answer the
 * other), the client's IMPORT is answered when the fd came or after
 * MV_HOST_PARK_MS, and an import answered before its fd writes through the
 * fabric until the fd switches it to copies. The fd must be the region the
 * blob names (its size, its seals, the pid of the mover that sent it), else
 * one log line says why and the writes stay on the fabric. Immediates and
 * completions stay as they are: the immediate is a fabric write posted
 * after the copies are done.
 *
 * A freed region must take no byte after its free returns, as a fabric
 * write cannot once the owner overlays its mapping: the fence segment the
 * owner gave this mover (samehost_layout.h) says which regions may still be
 * copied into, and each copying shard says which one it is in. An import
 * dropped while copies are queued is overlaid with anonymous memory (the
 * overlay registry.c gives freed regions) and unmapped after the same
 * quarantine.
 */
#include "shard_int.h"

#include "mv_huge.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "mv_sock.h"
#include "samehost_layout.h"

/* ---- the copier's side: asking for the peer's memfd, without waiting ---- */

/* One import waiting for a HOST_FD answer, and its IMPORT reply if held. */
struct host_wait {
	struct mv_import *imp;
	uint32_t client, seq, handle;
	int parked; /* the client's IMPORT is answered when the fd comes */
};

/* A HOST_FD request in flight to the peer mover that owns region b. */
struct mv_host_fetch {
	struct mv_host_fetch *next;
	int sock;
	int sent; /* the request went; else connect again (its backlog was full) */
	struct mv_peer *p;
	struct mv_region_blob b;
	struct ucred cred; /* who answers: SO_PEERCRED */
	int64_t started;
	struct host_wait *w;
	uint32_t nw, cap;
};

/* The socket path a blob names, NUL-terminated. */
static void blob_sock(const struct mv_region_blob *b, char sock[sizeof(b->sock) + 1])
{
	memcpy(sock, b->sock, sizeof(b->sock));
	sock[sizeof(b->sock)] = 0;
}

/* Connects to the owner and sends HOST_FD, without blocking: 0 sent, 1 the
 * owner's backlog is full (try again), -errno with why. */
static int fetch_send(struct mover *mv, struct mv_host_fetch *hf, char *why, size_t whylen)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct mv_host_fd_req req = {.id = hf->b.region,
	                             .nshards = mv->nshards,
	                             .secret = hf->b.secret,
	                             .mover_id = mv->mover_id};
	struct mv_msg_hdr h = {.magic = MV_WIRE_MAGIC,
	                       .version = MV_WIRE_VERSION,
	                       .type = MV_MSG_HOST_FD,
	                       .len = sizeof(req),
	                       .seq = 1};
	struct iovec out[2] = {{&h, sizeof(h)}, {&req, sizeof(req)}};
	struct msghdr om = {.msg_iov = out, .msg_iovlen = 2};
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = MV_TAG_HOSTFD};
	socklen_t clen = sizeof(hf->cred);
	char path[sizeof(hf->b.sock) + 1];

	blob_sock(&hf->b, path);
	if (strlen(path) >= sizeof(a.sun_path)) {
		snprintf(why, whylen, "socket path of %zu bytes", strlen(path));
		return -ENAMETOOLONG;
	}
	strcpy(a.sun_path, path);
	if (hf->sock < 0)
		hf->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (hf->sock < 0) {
		snprintf(why, whylen, "a socket: %s", strerror(errno));
		return -errno;
	}
	/* A Unix connect completes at once or finds the backlog full. */
	if (connect(hf->sock, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (errno == EAGAIN)
			return 1;
		snprintf(why, whylen, "no mover at %s: %s", path, strerror(errno));
		return -errno;
	}
	if (getsockopt(hf->sock, SOL_SOCKET, SO_PEERCRED, &hf->cred, &clen) < 0 ||
	    sendmsg(hf->sock, &om, MSG_NOSIGNAL) != (ssize_t)(sizeof(h) + sizeof(req))) {
		snprintf(why, whylen, "sending HOST_FD to %s: %s", path, strerror(errno));
		return -errno;
	}
	if (epoll_ctl(mv->ep, EPOLL_CTL_ADD, hf->sock, &ev) < 0) {
		snprintf(why, whylen, "watching the HOST_FD answer: %s", strerror(errno));
		return -errno;
	}
	hf->sent = 1;
	return 0;
}

/* A memfd sealed against shrinking (or a hugetlbfs file, which cannot be
 * truncated under a mapping) at least need bytes long. */
static int check_file(int fd, uint64_t need, const char *what, char *why, size_t whylen)
{
	struct stat st;
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
	/* Sealed, as the owner demanded at registration (registry.c): a
	 * file that could shrink under our mapping would fault a shard. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals >= 0 && (seals & F_SEAL_SHRINK))
		return 0;
	snprintf(why, whylen, "%s is not sealed against shrinking (F_SEAL_SHRINK)", what);
	return -EPERM;
}

/* The fence of peer p, mapped once; fd is consumed. The owner gives each
 * copier one segment for its life (samehost_owner.c), so a mapping made
 * once stays the right one. */
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

/* Reads hf's answer if it came (1 if not yet), checks it against the blob
 * and the peer, and maps the region into hr; -errno with why. */
static int fetch_open(struct mover *mv, struct mv_host_fetch *hf, struct mv_host_remote *hr,
                      char *why, size_t whylen)
{
	struct {
		struct mv_msg_hdr h;
		struct mv_host_fd_rep r;
	} in = {0};
	union mv_cmsg u;
	struct iovec iv = {&in, sizeof(in)};
	struct msghdr im = {
	    .msg_iov = &iv, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	const struct mv_region_blob *b = &hf->b;
	struct mv_host_fd_rep rep;
	char path[sizeof(b->sock) + 1];
	int fds[2] = {-1, -1}, ret = 0;

	blob_sock(b, path);
	ssize_t n = recvmsg(hf->sock, &im, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 1; /* not yet */
	if (n > 0)
		mv_fds_take(&im, fds, 2);
	rep = in.r;
	if (n < (ssize_t)(sizeof(in.h) + sizeof(in.r.r))) {
		snprintf(why, whylen, "no answer to HOST_FD from %s (%s)", path,
		         n < 0 ? strerror(errno) : "it closed the connection");
		ret = -EPROTO;
	} else if (rep.r.status) {
		ret = rep.r.status < 0 ? rep.r.status : -EPROTO;
		snprintf(why, whylen, "the mover at %s: %.100s", path, rep.r.msg);
	} else if (n != (ssize_t)sizeof(in) || fds[1] < 0) {
		ret = -EPROTO;
		snprintf(why, whylen, "a HOST_FD reply of %zd bytes with %s", n,
		         fds[1] < 0 ? "fewer than two fds" : "two fds");
	} else if (rep.region != b->region || rep.len != b->len ||
	           rep.offset > UINT64_MAX - rep.len || rep.slot > MV_FENCE_SLOTS - mv->nshards) {
		/* The fd must be the region the blob names, from the mover
		 * that made the blob: its id and size, a file that holds them
		 * and cannot shrink under our mapping, sent by the peer's own
		 * process. */
		snprintf(why, whylen,
		         "the reply names region %u of %llu bytes at %llu (slot %u); the blob "
		         "region %u of %llu bytes",
		         rep.region, (unsigned long long)rep.len, (unsigned long long)rep.offset,
		         rep.slot, b->region, (unsigned long long)b->len);
		ret = -EPROTO;
	} else if ((ret = check_file(fds[0], rep.offset + rep.len, "the region's fd", why,
	                             whylen)) == 0 &&
	           (hf->cred.pid != hf->p->pid ||
	            (hf->cred.uid != geteuid() && hf->cred.uid != 0))) {
		snprintf(why, whylen,
		         "the fd came from pid %d uid %u; the peer mover is pid %d (uid %u or "
		         "root)",
		         (int)hf->cred.pid, (unsigned)hf->cred.uid, (int)hf->p->pid,
		         (unsigned)geteuid());
		ret = -EACCES;
	}
	if (!ret) {
		ret = fence_map(hf->p, fds[1], why, whylen);
		fds[1] = -1;
	}
	if (ret)
		goto err_close;
	/* Whole pages of a hugetlbfs file; a large shmem region 2 MiB-aligned
	 * with MADV_HUGEPAGE, so that huge pages its owner got map huge here
	 * too (on 4 KiB pages that costs nothing: they exist already). */
	hr->base = mv_huge_map(fds[0], rep.offset, rep.len, rep.len >= MV_HUGE_SIZE, 1, &hr->map,
	                       &hr->map_len);
	if (!hr->base) {
		snprintf(why, whylen, "mapping the region: %s", strerror(errno));
		ret = -ENOMEM;
		goto err_close;
	}
	close(fds[0]);
	hr->len = rep.len;
	hr->fence = hf->p->fence;
	hr->slot = rep.slot;
	hr->mover_id = b->mover_id;
	hr->region = b->region;
	hr->secret = b->secret;
	return 0;

err_close:
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return ret;
}

static struct mv_client *client_by_id(struct mover *mv, uint32_t id)
{
	struct mv_client *cl = mv->clients[id % MV_MAX_CLIENTS];

	return cl && cl->id == id && cl->state == MV_CL_READY ? cl : NULL;
}

/* Answers a held IMPORT: the import stands, by copies or by the fabric. */
static void unpark(struct mover *mv, struct host_wait *w)
{
	struct mv_msg_hdr h = {.type = MV_MSG_IMPORT, .seq = w->seq};
	struct mv_id_rep rep = {.id = w->handle};
	struct mv_client *cl = client_by_id(mv, w->client);

	if (w->parked && cl)
		mv_control_reply(cl->sock, &h, &rep, sizeof(rep), NULL, 0);
	w->parked = 0;
}

static void fetch_free(struct mover *mv, struct mv_host_fetch *hf)
{
	struct mv_host_fetch **pp = &mv->host_fetch;

	while (*pp && *pp != hf)
		pp = &(*pp)->next;
	if (*pp)
		*pp = hf->next;
	if (hf->sock >= 0) {
		if (hf->sent)
			epoll_ctl(mv->ep, EPOLL_CTL_DEL, hf->sock, NULL);
		close(hf->sock);
	}
	free(hf->w);
	free(hf);
}

/* The request ended: its imports switch to copies (hr) or stay on the
 * fabric (hr NULL, with the cause logged once); held replies go. */
static void fetch_end(struct mover *mv, struct mv_host_fetch *hf, struct mv_host_remote *hr,
                      const char *why)
{
	if (hr) {
		hr->refs = (int)hf->nw;
		hr->next = mv->host_remote;
		mv->host_remote = hr;
		for (uint32_t i = 0; i < hf->nw; i++)
			/* R9 pairs with A9 in take.c: a shard that sees hr sees it
			 * whole. */
			atomic_store_explicit(&hf->w[i].imp->host, hr, memory_order_release);
		mv_dbg("region %u of mover %016llx: same-host copies, %llu bytes mapped, after "
		       "%.1f ms",
		       hf->b.region, (unsigned long long)hf->b.mover_id,
		       (unsigned long long)hr->len, (double)(mv_now_ns() - hf->started) / 1e6);
	} else {
		mv_logl(MV_LOG_WARN,
		        "same-host copy into region %u of mover %016llx (pid %d) refused: %s; "
		        "writing through the fabric",
		        hf->b.region, (unsigned long long)hf->b.mover_id, (int)hf->p->pid, why);
	}
	for (uint32_t i = 0; i < hf->nw; i++)
		unpark(mv, &hf->w[i]);
	fetch_free(mv, hf);
}

static int wait_add(struct mv_host_fetch *hf, struct mv_import *imp)
{
	if (hf->nw == hf->cap) {
		uint32_t cap = hf->cap ? 2 * hf->cap : 4;
		struct host_wait *w = realloc(hf->w, cap * sizeof(*w));
		if (!w)
			return -ENOMEM;
		hf->w = w;
		hf->cap = cap;
	}
	hf->w[hf->nw++] = (struct host_wait){.imp = imp};
	return 0;
}

static void blob_mismatch(const struct mv_region_blob *b)
{
	mv_logl(MV_LOG_WARN,
	        "an import of region %u of mover %016llx shows another secret or length than "
	        "the blob its owner answered for: no same-host copies for it, writing through "
	        "the fabric",
	        b->region, (unsigned long long)b->mover_id);
}

void mv_host_import_open(struct mover *mv, struct mv_import *imp, struct mv_peer *p,
                         const struct mv_region_blob *b)
{
	char why[MV_ERRLEN];
	int ret;

	/* Host memory of another mover of this host, and not switched off. */
	if (mv->cfg.no_host_copy || (b->flags & MV_BLOB_GPU) || b->mover_id == mv->mover_id ||
	    memcmp(b->host, mv->host_id, sizeof(b->host)))
		return;
	/* Same host, yet no copies: said once per peer mover, never silent. */
	if (!p->pid || !(b->flags & MV_BLOB_HOST_FD)) {
		if (!p->host_told++)
			mv_log(
			    "peer mover %016llx is on this host, but %s: its regions are written "
			    "through the fabric",
			    (unsigned long long)b->mover_id,
			    !p->pid ? "not in this pid namespace (or its pidfd could not be "
			              "opened), and same-host copies need its process"
			            : "it hands out no memfd for its host regions (MV_BLOB_HOST_FD "
			              "unset)");
		return;
	}
	/* One mapping per peer region, shared by every import of it whose
	 * blob is the one its owner checked: the same secret and length. A
	 * blob naming the region with another secret or length (forged, or
	 * of a region since freed and its id reused) is not given the
	 * mapping: its writes go through the fabric, where the owner's key
	 * decides. */
	for (struct mv_host_remote *h = mv->host_remote; h; h = h->next)
		if (h->mover_id == b->mover_id && h->region == b->region) {
			if (h->secret != b->secret || h->len != b->len) {
				blob_mismatch(b);
				return;
			}
			h->refs++;
			atomic_store_explicit(&imp->host, h, memory_order_relaxed);
			return;
		}
	/* And one request for it in flight, on the same terms. */
	for (struct mv_host_fetch *hf = mv->host_fetch; hf; hf = hf->next)
		if (hf->b.mover_id == b->mover_id && hf->b.region == b->region) {
			if (hf->b.secret != b->secret || hf->b.len != b->len) {
				blob_mismatch(b);
				return;
			}
			if (wait_add(hf, imp))
				mv_logl(MV_LOG_WARN,
				        "same-host copy into region %u of mover %016llx: no "
				        "memory; writing through the fabric",
				        b->region, (unsigned long long)b->mover_id);
			return;
		}
	struct mv_host_fetch *hf = calloc(1, sizeof(*hf));
	if (!hf || wait_add(hf, imp)) {
		mv_logl(MV_LOG_WARN,
		        "same-host copy into region %u of mover %016llx: no memory; writing "
		        "through the fabric",
		        b->region, (unsigned long long)b->mover_id);
		free(hf);
		return;
	}
	hf->sock = -1;
	hf->p = p;
	hf->b = *b;
	hf->started = mv_now_ns();
	hf->next = mv->host_fetch;
	mv->host_fetch = hf;
	/* Its answer comes to the control loop (mv_host_fetch_events()): a
	 * peer that is asking us at this moment is served meanwhile. */
	ret = fetch_send(mv, hf, why, sizeof(why));
	if (ret < 0)
		fetch_end(mv, hf, NULL, why);
}

int mv_host_import_park(struct mover *mv, struct mv_client *cl, uint32_t seq, uint32_t handle)
{
	struct mv_import *imp =
	    handle < MV_CLIENT_MAX_IMPORTS ? atomic_load(&cl->imports[handle]) : NULL;

	for (struct mv_host_fetch *hf = mv->host_fetch; imp && hf; hf = hf->next)
		for (uint32_t i = 0; i < hf->nw; i++)
			if (hf->w[i].imp == imp) {
				hf->w[i] = (struct host_wait){.imp = imp,
				                              .client = cl->id,
				                              .seq = seq,
				                              .handle = handle,
				                              .parked = 1};
				return 1;
			}
	return 0;
}

void mv_host_fetch_events(struct mover *mv)
{
	char why[MV_ERRLEN];

	for (struct mv_host_fetch *hf = mv->host_fetch, *next; hf; hf = next) {
		struct mv_host_remote *hr;
		next = hf->next;
		if (!hf->sent || !(hr = calloc(1, sizeof(*hr))))
			continue;
		int ret = fetch_open(mv, hf, hr, why, sizeof(why));
		if (ret == 1) {
			free(hr);
			continue;
		}
		if (ret)
			free(hr);
		fetch_end(mv, hf, ret ? NULL : hr, why);
	}
}

void mv_host_fetch_tick(struct mover *mv)
{
	int64_t now = mv_now_ns();
	char why[MV_ERRLEN];

	for (struct mv_host_fetch *hf = mv->host_fetch, *next; hf; hf = next) {
		next = hf->next;
		int ret = hf->sent ? 0 : fetch_send(mv, hf, why, sizeof(why));
		if (ret < 0) {
			fetch_end(mv, hf, NULL, why);
			continue;
		}
		if (now - hf->started > MV_HOST_FETCH_MS * 1000000ll) {
			snprintf(why, sizeof(why),
			         "the mover at %.80s did not answer HOST_FD in %d s", hf->b.sock,
			         MV_HOST_FETCH_MS / 1000);
			fetch_end(mv, hf, NULL, why);
			continue;
		}
		if (now - hf->started <= MV_HOST_PARK_MS * 1000000ll)
			continue;
		/* Held long enough: the import stands on the fabric, and
		 * switches to copies if the answer still comes. */
		for (uint32_t i = 0; i < hf->nw; i++) {
			if (!hf->w[i].parked)
				continue;
			mv_log("region %u of mover %016llx: no HOST_FD answer in %d ms; writing "
			       "through the fabric until it comes",
			       hf->b.region, (unsigned long long)hf->b.mover_id, MV_HOST_PARK_MS);
			unpark(mv, &hf->w[i]);
		}
	}
}

void mv_host_import_close(struct mover *mv, struct mv_import *imp)
{
	struct mv_host_remote **pp = &mv->host_remote, *hr;
	struct timespec ts;

	/* Still waiting for its fd: it waits no more (the request goes with
	 * its last import). */
	for (struct mv_host_fetch *hf = mv->host_fetch; hf; hf = hf->next)
		for (uint32_t i = 0; i < hf->nw; i++)
			if (hf->w[i].imp == imp) {
				hf->w[i] = hf->w[--hf->nw];
				if (!hf->nw)
					fetch_free(mv, hf);
				goto waited;
			}
waited:
	hr = atomic_exchange_explicit(&imp->host, NULL, memory_order_relaxed);
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

void mv_host_close_all(struct mover *mv)
{
	while (mv->host_fetch)
		fetch_free(mv, mv->host_fetch);
	while (mv->host_remote) {
		struct mv_import imp = {0};
		atomic_store(&imp.host, mv->host_remote);
		mv->host_remote->refs = 1;
		mv_host_import_close(mv, &imp);
	}
	mv_host_reap(mv, 1);
	mv_host_fence_close_all(mv);
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
