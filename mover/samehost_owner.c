/* SPDX-License-Identifier: MIT */
/*
 * The same-host path, the owner's side: what this mover does for the peer
 * movers of its host that copy straight into its clients' host regions
 * (samehost.c is the copier's side). Each such peer mover gets a fence
 * segment of its own (samehost_layout.h), made at its first HOST_FD and
 * handed with every reply to it: its shards say there which region they
 * copy into, and this mover says which regions it may still copy into. A
 * segment is never shared and never given to another peer, so reclaiming
 * one lets no late copy land in someone else's slot: a peer whose process
 * exited (its pidfd; a restart is an exit) has its segment unmapped at
 * once, as a dead process copies nothing; a peer cut off while it still
 * runs has every region revoked in its segment first, and is forgotten
 * once each of its shards has been seen out of any copy (until then a
 * free waits for it as for any copier). Main thread only.
 */
#include "mover.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "samehost_layout.h"

static_assert(MV_FENCE_REGIONS == MV_MAX_REGIONS, "one live word per region slot");
static_assert(MV_FENCE_SLOTS == MV_MAX_SHARDS, "one busy word per copier shard");

static void fence_free(struct mover *mv, struct mv_fence_peer *fp)
{
	if (fp->pidfd >= 0) {
		epoll_ctl(mv->ep, EPOLL_CTL_DEL, fp->pidfd, NULL);
		close(fp->pidfd);
	}
	munmap(fp->f, sizeof(*fp->f));
	close(fp->fd);
	mv->fence_peers[fp->index] = NULL;
	free(fp);
}

/* Whether fp's process has exited (its pidfd is readable, or, without
 * one, its pid is gone): it copies nothing any more. */
static int fence_dead(const struct mv_fence_peer *fp)
{
	struct pollfd pf = {.fd = fp->pidfd, .events = POLLIN};

	if (fp->pidfd >= 0)
		return poll(&pf, 1, 0) == 1;
	return kill(fp->pid, 0) < 0 && errno == ESRCH;
}

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* A pidfd of the process at the other end of cl's connection, or -1. */
static int peer_pidfd(const struct mv_client *cl)
{
	int fd = -1;
	socklen_t len = sizeof(fd);

	if (getsockopt(cl->sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0 && fd >= 0)
		return fd;
	if (cl->pidfd >= 0)
		return fcntl(cl->pidfd, F_DUPFD_CLOEXEC, 3);
	return (int)syscall(SYS_pidfd_open, cl->pid, 0);
}

/* A new segment for the peer mover that sent req over cl. */
static int fence_new(struct mover *mv, struct mv_client *cl, const struct mv_host_fd_req *req,
                     uint32_t index, struct mv_fence_peer **out, char *why, size_t whylen)
{
	struct mv_fence_peer *fp = calloc(1, sizeof(*fp));
	struct mv_fence *f;
	int ret = -ENOMEM;

	if (!fp) {
		snprintf(why, whylen, "no memory for a fence segment");
		return -ENOMEM;
	}
	fp->fd = memfd_create("mv-fence", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fp->fd < 0 || ftruncate(fp->fd, sizeof(*f)) < 0) {
		snprintf(why, whylen, "the fence segment: %s", strerror(errno));
		goto err_close;
	}
	f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED, fp->fd, 0);
	if (f == MAP_FAILED) {
		snprintf(why, whylen, "mapping the fence segment: %s", strerror(errno));
		goto err_close;
	}
	f->magic = MV_FENCE_MAGIC;
	f->abi = MV_FENCE_ABI;
	f->nslots = MV_FENCE_SLOTS;
	f->nregions = MV_FENCE_REGIONS;
	fcntl(fp->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	/* Its exit frees the segment. The process is the connection's own:
	 * the kernel's pidfd of the peer (SO_PEERPIDFD, Linux 6.5), else the
	 * one opened when the connection was accepted; a pid looked up now
	 * could be another process's if the asker died and its pid was reused. */
	fp->pidfd = peer_pidfd(cl);
	if (fp->pidfd < 0 && errno == ESRCH) {
		snprintf(why, whylen, "pid %d left before its HOST_FD was answered", (int)cl->pid);
		ret = -ESRCH;
		goto err_unmap;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = MV_TAG_FENCE | index};
	if (fp->pidfd >= 0 && epoll_ctl(mv->ep, EPOLL_CTL_ADD, fp->pidfd, &ev) < 0) {
		close(fp->pidfd);
		fp->pidfd = -1; /* no pidfd: mv_host_fence_tick() looks at the pid */
	}
	fp->f = f;
	fp->mover_id = req->mover_id;
	fp->pid = cl->pid;
	fp->nshards = req->nshards;
	fp->index = index;
	mv->fence_peers[index] = fp;
	mv_dbg("same-host peer mover %016llx (pid %d, %u shards) copies into our regions: "
	       "fence segment %u",
	       (unsigned long long)fp->mover_id, (int)fp->pid, fp->nshards, index);
	*out = fp;
	return 0;

err_unmap:
	munmap(f, sizeof(*f));
err_close:
	if (fp->fd >= 0)
		close(fp->fd);
	free(fp);
	return ret;
}

/* The fence peer of the mover that sent req over cl, made if new. */
static int fence_peer(struct mover *mv, struct mv_client *cl, const struct mv_host_fd_req *req,
                      struct mv_fence_peer **out, char *why, size_t whylen)
{
	uint32_t free_i = MV_FENCE_PEERS;

	for (uint32_t i = 0; i < MV_FENCE_PEERS; i++) {
		struct mv_fence_peer *fp = mv->fence_peers[i];
		if (fp && fp->pid == cl->pid && fp->mover_id != req->mover_id && fence_dead(fp))
			fence_free(mv, fp); /* its pid went to someone else: long gone */
		else if (fp && fp->mover_id == req->mover_id) {
			if (fp->draining) {
				snprintf(why, whylen,
				         "peer mover %016llx is cut off: it copies into this "
				         "mover's regions no more",
				         (unsigned long long)req->mover_id);
				return -EPERM;
			}
			if (fp->pid != cl->pid || fp->nshards != req->nshards) {
				snprintf(why, whylen,
				         "peer mover %016llx is pid %d with %u shards here; this "
				         "request comes from pid %d and says %u",
				         (unsigned long long)req->mover_id, (int)fp->pid,
				         fp->nshards, (int)cl->pid, req->nshards);
				return -EACCES;
			}
			*out = fp;
			return 0;
		}
		if (!mv->fence_peers[i] && free_i == MV_FENCE_PEERS)
			free_i = i;
	}
	for (uint32_t i = 0; i < MV_MAX_PEERS; i++) {
		struct mv_peer *p = atomic_load_explicit(&mv->peers[i], memory_order_relaxed);
		if (p && p->mover_id == req->mover_id && atomic_load(&p->gone) == MV_PEER_CUT) {
			snprintf(why, whylen, "peer mover %016llx is cut off: %.80s",
			         (unsigned long long)req->mover_id, p->cut_why);
			return -EPERM;
		}
	}
	if (req->nshards == 0 || req->nshards > MV_FENCE_SLOTS) {
		snprintf(why, whylen, "a HOST_FD request for %u shards (1 to %u)", req->nshards,
		         MV_FENCE_SLOTS);
		return -EINVAL;
	}
	if (free_i == MV_FENCE_PEERS) {
		snprintf(why, whylen,
		         "%u peer movers of this host copy into this mover's regions already, the "
		         "most it serves",
		         MV_FENCE_PEERS);
		mv_warn("same-host copies refused to peer mover %016llx (pid %d): %s; it writes "
		        "through the fabric",
		        (unsigned long long)req->mover_id, (int)cl->pid, why);
		return -ENOSPC;
	}
	return fence_new(mv, cl, req, free_i, out, why, whylen);
}

int mv_host_fd_serve(struct mover *mv, struct mv_client *cl, const struct mv_host_fd_req *req,
                     struct mv_host_fd_rep *rep, int fds[2], char *why, size_t whylen)
{
	struct mv_region *r = mv_region_get(mv, req->id);
	struct mv_fence_peer *fp;
	char nofd[MV_ERRLEN];

	if (!r) {
		snprintf(why, whylen, "region %u is not one of this mover's regions (freed?)",
		         req->id);
		return -ENOENT;
	}
	if (r->secret != req->secret) {
		snprintf(why, whylen, "region %u: the request's secret is not its blob's", req->id);
		mv_log_client(MV_LOG_WARN, (uint64_t)cl->pid,
		              "refused HOST_FD for region %u from pid %d uid %u: wrong secret",
		              req->id, cl->pid, (unsigned)cl->uid);
		return -EACCES;
	}
	/* The owner's word: what its own blobs say, for the asker to hold the
	 * blob its client showed against (samehost.c). */
	mv_addr_blob(mv, &rep->addr);
	mv_region_blob(mv, r, &rep->blob);
	rep->region = r->id;
	rep->len = r->len;
	rep->nfds = 0;
	if (!(req->want & MV_HOST_WANT_FD))
		return 0;
	if (r->is_gpu || r->host_fd < 0) {
		snprintf(rep->r.msg, sizeof(rep->r.msg),
		         "region %u is not a host region this mover shares", req->id);
		return 0;
	}
	if (fence_peer(mv, cl, req, &fp, nofd, sizeof(nofd))) {
		snprintf(rep->r.msg, sizeof(rep->r.msg), "%s", nofd);
		return 0;
	}
	/* R7 pairs with F1 in mv_host_copy(): a copier that sees the id sees
	 * a region that is still ours. */
	atomic_store_explicit(&fp->f->live[r->id % MV_MAX_REGIONS], r->id, memory_order_release);
	r->handed = 1;
	rep->slot = 0; /* the segment is the asker's alone: its shard k has word k */
	rep->offset = r->fd_off;
	rep->nfds = 2;
	fds[0] = r->host_fd;
	fds[1] = fp->fd;
	return 0;
}

/* Waits at most this long for a peer shard to leave a freed region. */
#define REVOKE_WAIT_NS 2000000000ll

void mv_host_revoke(struct mover *mv, struct mv_region *r)
{
	uint32_t idx = r->id % MV_MAX_REGIONS;

	if (!r->handed)
		return;
	/* F2 pairs with F1 in mv_host_copy(): clear in every segment that
	 * names it, then look at every copier. */
	for (uint32_t i = 0; i < MV_FENCE_PEERS; i++) {
		struct mv_fence_peer *fp = mv->fence_peers[i];
		if (fp && atomic_load_explicit(&fp->f->live[idx], memory_order_seq_cst) == r->id)
			atomic_store_explicit(&fp->f->live[idx], 0, memory_order_seq_cst);
	}
	int64_t start = mv_now_ns();
	for (uint32_t i = 0; i < MV_FENCE_PEERS; i++) {
		struct mv_fence_peer *fp = mv->fence_peers[i];
		for (uint32_t k = 0; fp && k < fp->nshards; k++) {
			struct timespec nap = {0, 20000};
			while (atomic_load_explicit(&fp->f->busy[k].region, memory_order_seq_cst) ==
			       r->id) {
				if (fence_dead(fp))
					break; /* died mid-copy: it copies nothing more */
				if (mv_now_ns() - start > REVOKE_WAIT_NS) {
					mv_warn("region %u freed while shard %u of peer mover "
					        "%016llx (pid %d) still copies into it after "
					        "%.1f s; going on",
					        r->id, k, (unsigned long long)fp->mover_id,
					        (int)fp->pid, REVOKE_WAIT_NS / 1e9);
					return;
				}
				nanosleep(&nap, NULL);
			}
		}
	}
}

void mv_host_fence_exited(struct mover *mv, uint32_t index)
{
	struct mv_fence_peer *fp = index < MV_FENCE_PEERS ? mv->fence_peers[index] : NULL;

	/* An event of this index's previous holder, freed and the index
	 * given again within one epoll batch, must not end a live peer. */
	if (!fp || !fence_dead(fp))
		return;
	mv_log("same-host peer mover %016llx (pid %d) exited: its fence segment is reclaimed",
	       (unsigned long long)fp->mover_id, (int)fp->pid);
	fence_free(mv, fp);
}

/* A draining peer: each shard seen out of any copy since the revocation
 * stays so (its next copy reads live after our clearing: F1/F2), and once
 * all were, the segment goes. Returns 1 if it went. */
static int drain_check(struct mover *mv, struct mv_fence_peer *fp)
{
	for (uint32_t k = 0; k < fp->nshards; k++)
		if (!atomic_load_explicit(&fp->f->busy[k].region, memory_order_seq_cst))
			fp->idle_seen |= 1ull << k;
	if (fp->idle_seen != (fp->nshards == 64 ? ~0ull : (1ull << fp->nshards) - 1) &&
	    !fence_dead(fp))
		return 0;
	mv_log("cut-off peer mover %016llx (pid %d) is out of every copy: its fence segment is "
	       "reclaimed",
	       (unsigned long long)fp->mover_id, (int)fp->pid);
	fence_free(mv, fp);
	return 1;
}

void mv_host_fence_cut(struct mover *mv, uint64_t mover_id, const char *why)
{
	for (uint32_t i = 0; i < MV_FENCE_PEERS; i++) {
		struct mv_fence_peer *fp = mv->fence_peers[i];
		uint32_t n = 0;
		if (!fp || fp->mover_id != mover_id || fp->draining)
			continue;
		/* F2 again, for every region at once: revoked, then watched. */
		for (uint32_t r = 0; r < MV_FENCE_REGIONS; r++)
			if (atomic_load_explicit(&fp->f->live[r], memory_order_relaxed)) {
				atomic_store_explicit(&fp->f->live[r], 0, memory_order_seq_cst);
				n++;
			}
		atomic_thread_fence(memory_order_seq_cst);
		fp->draining = 1;
		fp->idle_seen = 0;
		mv_log("cut-off peer mover %016llx (pid %d) may copy into none of our regions: "
		       "%u revoked (%s)",
		       (unsigned long long)mover_id, (int)fp->pid, n, why);
		drain_check(mv, fp);
	}
}

void mv_host_fence_tick(struct mover *mv)
{
	for (uint32_t i = 0; i < MV_FENCE_PEERS; i++) {
		struct mv_fence_peer *fp = mv->fence_peers[i];
		if (!fp)
			continue;
		if (fp->draining)
			drain_check(mv, fp);
		else if (fp->pidfd < 0 && fence_dead(fp))
			mv_host_fence_exited(mv, i);
	}
}

void mv_host_fence_close_all(struct mover *mv)
{
	for (uint32_t i = 0; i < MV_FENCE_PEERS; i++)
		if (mv->fence_peers[i])
			fence_free(mv, mv->fence_peers[i]);
}
