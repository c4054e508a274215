/* SPDX-License-Identifier: MIT */
/*
 * The same-host path, the copier's side at import: asking the owner of a
 * peer region on this host (HOST_FD on its control socket, showing the
 * blob's secret; the owner's side is samehost_owner.c) for the region's
 * memfd, to copy into it (samehost.c), and for its word on the blob: the
 * answer says what the owner's own blobs say, and the blob and the peer's
 * address the client showed must be those. A fabric that does not check
 * keys (shm) writes where a blob says, so there an import of another
 * mover's region is given to no shard before that word, and is refused
 * without it; elsewhere the owner's provider checks every write's key and
 * range, and a refusal only keeps the writes on the fabric.
 *
 * Nothing here waits: the request goes out on a non-blocking socket, the
 * control loop goes on serving (two movers importing each other at once
 * each answer the other), and the client's IMPORT (or LOOKUP) is answered
 * when the answer came, after MV_HOST_PARK_MS for a copy (the import then
 * writes through the fabric until the fd switches it to copies), or at
 * MV_HOST_FETCH_MS with an error for an import that waits for the owner's
 * word. The fd must be the region the blob names (its size, its seals, the
 * pid of the mover that sent it), else one log line says why. Main thread.
 */
#include "shard_int.h"

#include "mv_huge.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mv_sock.h"
#include "samehost_layout.h"

/* One import waiting for a HOST_FD answer, and its reply (to IMPORT, or to
 * a LOOKUP that imported) if held. */
struct host_wait {
	struct mv_import *imp;
	uint32_t client, handle;
	int parked; /* the client's reply goes when the answer comes */
	struct mv_msg_hdr h;
	uint32_t replen;
	uint8_t rep[sizeof(struct mv_lookup_rep)];
};
static_assert(sizeof(struct mv_id_rep) <= sizeof(struct mv_lookup_rep), "an IMPORT reply fits");

/* A HOST_FD request in flight to the peer mover that owns region b. */
struct mv_host_fetch {
	struct mv_host_fetch *next;
	int sock;
	int sent; /* the request went; else connect again (its backlog was full) */
	struct mv_peer *p;
	struct mv_region_blob b;
	uint32_t want;     /* MV_HOST_WANT_*: the memfd too, or the owner's word only */
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
	                             .mover_id = mv->mover_id,
	                             .want = hf->want};
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

/* Whether two blobs of one region are the same blob: what a write goes by
 * (length, each shard's address and key) and where its owner is. */
static int blob_same(const struct mv_region_blob *a, const struct mv_region_blob *b)
{
	return a->mover_id == b->mover_id && a->region == b->region && a->secret == b->secret &&
	       a->len == b->len && a->nshards == b->nshards &&
	       !((a->flags ^ b->flags) & ~(uint32_t)(MV_BLOB_NO_FABRIC | MV_BLOB_LANDING)) &&
	       a->nshards <= MV_MAX_SHARDS && !memcmp(a->host, b->host, sizeof(a->host)) &&
	       !memcmp(a->sock, b->sock, sizeof(a->sock)) &&
	       !memcmp(a->shard, b->shard, a->nshards * sizeof(a->shard[0]));
}

/*
 * The owner's word on what the client showed: the peer's address blob (its
 * fabric addresses and doorbells: the endpoints writes go to) must be the
 * answering mover's own, and the region blob what the owner's says (the
 * length, and each shard's address and key). A fabric that does not check
 * keys (shm) writes where a blob says; this is what makes that the owner's
 * region and nothing else.
 */
/* Whether two address blobs give the same endpoints and doorbells. */
static int addr_same(const struct mv_addr_blob *a, const struct mv_addr_blob *b)
{
	if (a->mover_id != b->mover_id || a->nshards != b->nshards || a->addrlen != b->addrlen ||
	    a->nshards > MV_MAX_SHARDS || a->addrlen > MV_MAX_ADDRLEN)
		return 0;
	for (uint32_t s = 0; s < a->nshards; s++)
		if (memcmp(a->addr[s], b->addr[s], a->addrlen) ||
		    a->bell[s].addr != b->bell[s].addr || a->bell[s].key != b->bell[s].key)
			return 0;
	return 1;
}

static int owner_word(const struct mv_host_fetch *hf, const struct mv_host_fd_rep *rep, char *why,
                      size_t whylen)
{
	const struct mv_addr_blob *a = &hf->p->blob, *oa = &rep->addr;
	const struct mv_region_blob *b = &hf->b, *ob = &rep->blob;

	if (!addr_same(a, oa)) {
		snprintf(why, whylen,
		         "the peer's address blob (mover %016llx, %u shards) gives an endpoint or "
		         "doorbell that is not its mover's (a forged address)",
		         (unsigned long long)a->mover_id, a->nshards);
		return -EACCES;
	}
	if (!blob_same(b, ob)) {
		uint32_t s = 0;
		while (s < b->nshards && s < ob->nshards && s < MV_MAX_SHARDS &&
		       !memcmp(&b->shard[s], &ob->shard[s], sizeof(b->shard[s])))
			s++;
		snprintf(why, whylen,
		         "the blob is not the one its owner made for region %u (%llu bytes "
		         "against %llu; %s)",
		         b->region, (unsigned long long)b->len, (unsigned long long)ob->len,
		         s < b->nshards ? "a shard's address or key differs"
		                        : "its flags or owner "
		                          "differ");
		return -EACCES;
	}
	return 0;
}

/* Reads hf's answer if it came (1 if not yet) and holds the blob against
 * the owner's word (0, or -errno with why). With the memfd asked for and
 * given, checks it against the blob and the peer and maps the region into
 * hr (*mapped); given no fd, why says why not. */
static int fetch_open(struct mover *mv, struct mv_host_fetch *hf, struct mv_host_remote *hr,
                      int *mapped, char *why, size_t whylen)
{
	struct {
		struct mv_msg_hdr h;
		struct mv_host_fd_rep r;
	} *in = calloc(1, sizeof(*in));
	union mv_cmsg u;
	struct iovec iv = {in, sizeof(*in)};
	struct msghdr im = {
	    .msg_iov = &iv, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	const struct mv_region_blob *b = &hf->b;
	const struct mv_host_fd_rep *rep = &in->r;
	char path[sizeof(b->sock) + 1];
	int fds[2] = {-1, -1}, ret = 0;

	*mapped = 0;
	if (!in) {
		snprintf(why, whylen, "no memory for the HOST_FD answer");
		return -ENOMEM;
	}
	blob_sock(b, path);
	ssize_t n = recvmsg(hf->sock, &im, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		free(in);
		return 1; /* not yet */
	}
	if (n > 0)
		mv_fds_take(&im, fds, 2);
	if (n < (ssize_t)(sizeof(in->h) + sizeof(in->r.r))) {
		snprintf(why, whylen, "no answer to HOST_FD from %s (%s)", path,
		         n < 0 ? strerror(errno) : "it closed the connection");
		ret = -EPROTO;
	} else if (rep->r.status) {
		ret = rep->r.status < 0 ? rep->r.status : -EPROTO;
		snprintf(why, whylen, "the mover at %s: %.100s", path, rep->r.msg);
	} else if (n != (ssize_t)sizeof(*in) || rep->nfds > 2 ||
	           (rep->nfds == 2) != (fds[1] >= 0)) {
		ret = -EPROTO;
		snprintf(why, whylen, "a HOST_FD reply of %zd bytes that says %u fds; %s came", n,
		         rep->nfds, fds[1] >= 0 ? "two" : "fewer");
	} else if (rep->nfds == 2 && (rep->region != b->region || rep->len != b->len ||
	                              rep->offset > UINT64_MAX - rep->len ||
	                              rep->slot > MV_FENCE_SLOTS - mv->nshards)) {
		/* The fd must be the region the blob names: its id and size, a
		 * file that holds them and cannot shrink under our mapping. */
		snprintf(why, whylen,
		         "the reply names region %u of %llu bytes at %llu (slot %u); the blob "
		         "region %u of %llu bytes",
		         rep->region, (unsigned long long)rep->len, (unsigned long long)rep->offset,
		         rep->slot, b->region, (unsigned long long)b->len);
		ret = -EPROTO;
	} else if (rep->nfds == 2 && (ret = check_file(fds[0], rep->offset + rep->len,
	                                               "the region's fd", why, whylen))) {
		/* why says it */
	} else if (hf->cred.pid != hf->p->pid || (hf->cred.uid != geteuid() && hf->cred.uid != 0)) {
		/* The word, and the fd, count only from the peer's own
		 * process, run by the mover's uid or root. */
		snprintf(why, whylen,
		         "the answer came from pid %d uid %u; the peer mover is pid %d (uid %u or "
		         "root)",
		         (int)hf->cred.pid, (unsigned)hf->cred.uid, (int)hf->p->pid,
		         (unsigned)geteuid());
		ret = -EACCES;
	} else {
		ret = owner_word(hf, rep, why, whylen);
	}
	if (ret || !(hf->want & MV_HOST_WANT_FD))
		goto err_close;
	if (rep->nfds != 2) {
		snprintf(why, whylen, "the mover at %s copies refused: %.100s", path, rep->r.msg);
		goto err_close; /* its word stands; the writes take the fabric */
	}
	ret = fence_map(hf->p, fds[1], why, whylen);
	fds[1] = -1;
	if (ret)
		goto err_close;
	/* Whole pages of a hugetlbfs file; a large shmem region 2 MiB-aligned
	 * with MADV_HUGEPAGE, so that huge pages its owner got map huge here
	 * too (on 4 KiB pages that costs nothing: they exist already). */
	hr->base = mv_huge_map(fds[0], rep->offset, rep->len, rep->len >= MV_HUGE_SIZE, 1, &hr->map,
	                       &hr->map_len);
	if (!hr->base) {
		snprintf(why, whylen, "mapping the region: %s", strerror(errno));
		ret = -ENOMEM;
		goto err_close;
	}
	close(fds[0]);
	hr->len = rep->len;
	hr->fence = hf->p->fence;
	hr->slot = rep->slot;
	hr->mover_id = b->mover_id;
	hr->region = b->region;
	hr->blob = *b;
	hr->addr = hf->p->blob;
	*mapped = 1;
	free(in);
	return 0;

err_close:
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(in);
	return ret;
}

static struct mv_client *client_by_id(struct mover *mv, uint32_t id)
{
	struct mv_client *cl = mv->clients[id % MV_MAX_CLIENTS];

	return cl && cl->id == id && cl->state == MV_CL_READY ? cl : NULL;
}

/* A held reply (IMPORT's or LOOKUP's) says the import is copied into. */
static void reply_path(struct host_wait *w)
{
	uint32_t path = MV_PATH_SAMEHOST;
	size_t at = w->h.type == MV_MSG_LOOKUP ? offsetof(struct mv_lookup_rep, path)
	                                       : offsetof(struct mv_id_rep, path);

	if (w->replen >= at + sizeof(path))
		memcpy(w->rep + at, &path, sizeof(path));
}

uint32_t mv_host_import_path(struct mv_client *cl, uint32_t handle)
{
	struct mv_import *imp =
	    handle < MV_CLIENT_MAX_IMPORTS ? atomic_load(&cl->imports[handle]) : NULL;

	/* Pairs with R9 in fetch_end(), as A9 in take.c does: an import
	 * copied into already (another import of its region mapped it). */
	return imp && atomic_load_explicit(&imp->host, memory_order_acquire) ? MV_PATH_SAMEHOST : 0;
}

/* Answers a held reply: the import stands, by copies or by the fabric. */
static void unpark(struct mover *mv, struct host_wait *w)
{
	struct mv_client *cl = client_by_id(mv, w->client);

	if (w->parked && cl)
		mv_control_reply(cl->sock, &w->h, w->rep, w->replen, NULL, 0);
	w->parked = 0;
}

/* An import that waited for its owner's word and did not get it: its
 * client hears why, and the import goes (its handle was never usable). */
static void refuse(struct mover *mv, struct host_wait *w, int status, const char *why)
{
	struct mv_client *cl = client_by_id(mv, w->client);
	struct mv_reply_hdr r = {.status = status};
	char tmp[MV_ERRLEN];

	atomic_store_explicit(&w->imp->held, MV_IMPORT_REFUSED, memory_order_relaxed);
	if (!w->parked || !cl)
		return; /* it goes with its client, or at its UNIMPORT */
	uint32_t region = w->imp->region;
	unsigned long long mover_id = (unsigned long long)w->imp->peer->mover_id;
	/* Logged, and the import gone, before the client hears of it. */
	mv_log_client(MV_LOG_WARN, (uint64_t)cl->pid,
	              "refused IMPORT of region %u of mover %016llx for pid %d uid %u: %s", region,
	              mover_id, (int)cl->pid, (unsigned)cl->uid, why);
	if (atomic_load(&cl->imports[w->handle % MV_CLIENT_MAX_IMPORTS]) == w->imp)
		mv_import_del(mv, cl, w->handle, tmp, sizeof(tmp));
	snprintf(r.msg, sizeof(r.msg), "region %u of mover %016llx: %s", region, mover_id, why);
	mv_control_reply(cl->sock, &w->h, &r, sizeof(r), NULL, 0);
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

/*
 * The request ended. status 0: the owner's word is given, and its imports
 * switch to copies (hr), or stay on the fabric (hr NULL; a refusal of the
 * copies is logged once with why). Otherwise imports that wait for the
 * owner's word are refused, and the others stay on the fabric, where the
 * owner's provider checks keys. Held replies go.
 */
static void fetch_end(struct mover *mv, struct mv_host_fetch *hf, struct mv_host_remote *hr,
                      int status, const char *why)
{
	/* The waits leave hf first: refusing one drops its import, which
	 * looks for it in the requests. */
	struct host_wait *w = hf->w;
	uint32_t nw = hf->nw;
	struct mv_region_blob b = hf->b;
	pid_t pid = hf->p->pid;
	int want = !!(hf->want & MV_HOST_WANT_FD);
	int64_t started = hf->started;

	hf->w = NULL;
	hf->nw = 0;
	fetch_free(mv, hf);
	if (hr) {
		hr->refs = (int)nw;
		hr->next = mv->host_remote;
		mv->host_remote = hr;
		for (uint32_t i = 0; i < nw; i++)
			/* R9 pairs with A9 in take.c: a shard that sees hr sees it
			 * whole. */
			atomic_store_explicit(&w[i].imp->host, hr, memory_order_release);
		mv_dbg("region %u of mover %016llx: same-host copies, %llu bytes mapped, after "
		       "%.1f ms",
		       b.region, (unsigned long long)b.mover_id, (unsigned long long)hr->len,
		       (double)(mv_now_ns() - started) / 1e6);
	} else if (want) {
		mv_logl(MV_LOG_WARN,
		        "same-host copy into region %u of mover %016llx (pid %d) refused: %s; %s",
		        b.region, (unsigned long long)b.mover_id, (int)pid, why,
		        status && mv_fabric_unchecked(mv) ? "the import is refused"
		                                          : "writing through the fabric");
	}
	for (uint32_t i = 0; i < nw; i++) {
		if (status && atomic_load(&w[i].imp->held)) {
			refuse(mv, &w[i], status, why);
			continue;
		}
		/* R10 pairs with A10 in mv_import_get(): the owner's word is in. */
		atomic_store_explicit(&w[i].imp->held, 0, memory_order_release);
		if (hr)
			reply_path(&w[i]);
		unpark(mv, &w[i]);
	}
	free(w);
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

static void blob_mismatch(const struct mv_region_blob *b, int addr)
{
	mv_logl(MV_LOG_WARN,
	        "an import of region %u of mover %016llx shows another %s than the one its "
	        "owner answered for: no same-host copies for it, writing through the fabric",
	        b->region, (unsigned long long)b->mover_id,
	        addr ? "peer address (a forged address?)" : "blob");
}

/* Why an import that needs its owner's word is refused at once. */
static int no_word(const struct mv_region_blob *b, const char *cause, char *why, size_t whylen)
{
	snprintf(why, whylen,
	         "region %u of mover %016llx: %s; this mover's fabric (shm) does not check "
	         "keys, so it writes into a peer's region only on its owner's word",
	         b->region, (unsigned long long)b->mover_id, cause);
	return -EACCES;
}

int mv_host_import_open(struct mover *mv, struct mv_import *imp, struct mv_peer *p,
                        const struct mv_region_blob *b, char *why, size_t whylen)
{
	int other = b->mover_id != mv->mover_id;
	/* A fabric that writes where a blob says (shm) needs the owner's
	 * word on every blob of another mover before the first write. */
	int word = other && mv_fabric_unchecked(mv);
	/* Host memory of another mover of this host, and not switched off. */
	int copy = other && !mv->cfg.no_host_copy && !(b->flags & MV_BLOB_GPU) &&
	           !memcmp(b->host, mv->host_id, sizeof(b->host));
	int ret;

	if (word && (!p->pid || !b->sock[0]))
		return no_word(b,
		               !p->pid ? "its mover's process is not seen from here (another "
		                         "pid namespace?)"
		                       : "the blob names no socket to ask its owner at",
		               why, whylen);
	/* Same host, yet no copies: said once per peer mover, never silent. */
	if (copy && (!p->pid || !(b->flags & MV_BLOB_HOST_FD))) {
		if (!p->host_told++)
			mv_log(
			    "peer mover %016llx is on this host, but %s: its regions are written "
			    "through the fabric",
			    (unsigned long long)b->mover_id,
			    !p->pid ? "not in this pid namespace (or its pidfd could not be "
			              "opened), and same-host copies need its process"
			            : "it hands out no memfd for its host regions (MV_BLOB_HOST_FD "
			              "unset)");
		copy = 0;
	}
	if (!word && !copy)
		return 0;
	/* One mapping per peer region, shared by every import of it whose
	 * blob is the one its owner checked. A blob naming the region with
	 * another secret, length, address or key (forged, or of a region since
	 * freed and its id reused) is not given the mapping: its writes go
	 * through the fabric, where the owner's key decides; or, where the
	 * fabric does not check keys, it is refused. */
	for (struct mv_host_remote *h = mv->host_remote; h; h = h->next)
		if (h->mover_id == b->mover_id && h->region == b->region) {
			int bad_addr = !addr_same(&h->addr, &p->blob);
			if (bad_addr || !blob_same(&h->blob, b)) {
				if (word)
					return no_word(
					    b,
					    bad_addr
					        ? "the peer's address is not the one its owner "
					          "confirmed (a forged address?)"
					        : "the blob is not the one its owner confirmed",
					    why, whylen);
				blob_mismatch(b, bad_addr);
				return 0;
			}
			h->refs++;
			atomic_store_explicit(&imp->host, h, memory_order_relaxed);
			return 0;
		}
	/* And one request for it in flight, on the same terms. */
	for (struct mv_host_fetch *hf = mv->host_fetch; hf; hf = hf->next)
		if (hf->b.mover_id == b->mover_id && hf->b.region == b->region) {
			int bad_addr = !addr_same(&hf->p->blob, &p->blob);
			if (bad_addr || !blob_same(&hf->b, b)) {
				if (word)
					return no_word(
					    b,
					    bad_addr ? "the peer's address is not the one its "
					               "owner is asked through (a forged address?)"
					             : "the blob is not the one its owner is asked "
					               "about",
					    why, whylen);
				blob_mismatch(b, bad_addr);
				return 0;
			}
			if (!wait_add(hf, imp)) {
				atomic_store_explicit(&imp->held, word, memory_order_relaxed);
				return 0;
			}
			goto err_nomem;
		}
	struct mv_host_fetch *hf = calloc(1, sizeof(*hf));
	if (!hf || wait_add(hf, imp)) {
		free(hf);
		goto err_nomem;
	}
	hf->sock = -1;
	hf->p = p;
	hf->b = *b;
	hf->want = copy ? MV_HOST_WANT_FD : 0;
	hf->started = mv_now_ns();
	hf->next = mv->host_fetch;
	mv->host_fetch = hf;
	atomic_store_explicit(&imp->held, word, memory_order_relaxed);
	/* Its answer comes to the control loop (mv_host_fetch_events()): a
	 * peer that is asking us at this moment is served meanwhile. */
	ret = fetch_send(mv, hf, why, whylen);
	if (ret >= 0)
		return 0;
	if (word) {
		char cause[MV_ERRLEN];
		snprintf(cause, sizeof(cause), "its owner cannot be asked: %s", why);
		fetch_free(mv, hf);
		return no_word(b, cause, why, whylen);
	}
	fetch_end(mv, hf, NULL, ret, why);
	return 0;

err_nomem:
	if (word) {
		snprintf(why, whylen, "no memory to ask region %u's owner", b->region);
		return -ENOMEM;
	}
	mv_logl(MV_LOG_WARN,
	        "same-host copy into region %u of mover %016llx: no memory; writing through "
	        "the fabric",
	        b->region, (unsigned long long)b->mover_id);
	return 0;
}

int mv_host_import_park(struct mover *mv, struct mv_client *cl, const struct mv_msg_hdr *h,
                        const void *rep, size_t len, uint32_t handle)
{
	struct mv_import *imp =
	    handle < MV_CLIENT_MAX_IMPORTS ? atomic_load(&cl->imports[handle]) : NULL;

	if (len > sizeof(((struct host_wait *)0)->rep))
		return 0;
	for (struct mv_host_fetch *hf = mv->host_fetch; imp && hf; hf = hf->next)
		for (uint32_t i = 0; i < hf->nw; i++)
			if (hf->w[i].imp == imp) {
				struct host_wait *w = &hf->w[i];
				w->client = cl->id;
				w->handle = handle;
				w->parked = 1;
				w->h = *h;
				w->replen = (uint32_t)len;
				memcpy(w->rep, rep, len);
				return 1;
			}
	return 0;
}

void mv_host_fetch_events(struct mover *mv)
{
	char why[MV_ERRLEN];

	for (struct mv_host_fetch *hf = mv->host_fetch, *next; hf; hf = next) {
		struct mv_host_remote *hr;
		int mapped;
		next = hf->next;
		if (!hf->sent || !(hr = calloc(1, sizeof(*hr))))
			continue;
		why[0] = 0;
		int ret = fetch_open(mv, hf, hr, &mapped, why, sizeof(why));
		if (ret == 1) {
			free(hr);
			continue;
		}
		if (!mapped) {
			free(hr);
			hr = NULL;
		}
		/* fetch_end() may drop imports, and with them requests: the
		 * list is read again from its head. */
		fetch_end(mv, hf, hr, ret, why);
		next = mv->host_fetch;
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
			fetch_end(mv, hf, NULL, ret, why);
			next = mv->host_fetch;
			continue;
		}
		if (now - hf->started > MV_HOST_FETCH_MS * 1000000ll) {
			snprintf(why, sizeof(why),
			         "the mover at %.80s did not answer HOST_FD in %d s", hf->b.sock,
			         MV_HOST_FETCH_MS / 1000);
			fetch_end(mv, hf, NULL, -ETIMEDOUT, why);
			next = mv->host_fetch;
			continue;
		}
		if (now - hf->started <= MV_HOST_PARK_MS * 1000000ll)
			continue;
		/* Held long enough: the import stands on the fabric, and
		 * switches to copies if the answer still comes; unless it
		 * waits for its owner's word, which nothing replaces. */
		for (uint32_t i = 0; i < hf->nw; i++) {
			if (!hf->w[i].parked || atomic_load(&hf->w[i].imp->held))
				continue;
			mv_log("region %u of mover %016llx: no HOST_FD answer in %d ms; writing "
			       "through the fabric until it comes",
			       hf->b.region, (unsigned long long)hf->b.mover_id, MV_HOST_PARK_MS);
			unpark(mv, &hf->w[i]);
		}
	}
}

void mv_host_fetch_forget(struct mover *mv, struct mv_import *imp)
{
	/* The request goes with its last import. A reply still held (the
	 * import dropped by a PEER_DEL or UNIMPORT sent before its IMPORT was
	 * answered) is answered now, not lost. */
	for (struct mv_host_fetch *hf = mv->host_fetch; hf; hf = hf->next)
		for (uint32_t i = 0; i < hf->nw; i++)
			if (hf->w[i].imp == imp) {
				struct mv_client *cl = client_by_id(mv, hf->w[i].client);
				struct mv_reply_hdr r = {.status = -ECANCELED};
				if (hf->w[i].parked && cl) {
					snprintf(r.msg, sizeof(r.msg),
					         "import %u was dropped before its owner answered",
					         hf->w[i].handle);
					mv_control_reply(cl->sock, &hf->w[i].h, &r, sizeof(r), NULL,
					                 0);
				}
				hf->w[i] = hf->w[--hf->nw];
				if (!hf->nw)
					fetch_free(mv, hf);
				return;
			}
}

void mv_host_fetch_close_all(struct mover *mv)
{
	while (mv->host_fetch)
		fetch_free(mv, mv->host_fetch);
}
