/* SPDX-License-Identifier: MIT */
/*
 * Peer liveness: a peer mover on this host (same boot id, same pid
 * namespace) is watched through a pidfd on the main thread's epoll. When
 * its process exits, the peer is marked exited: shards fail the writes
 * they hold for it at once, with the cause, instead of at their deadline,
 * and refuse new ones. On shm the exited peer may have left its command
 * queue locked (see mv_fabric_shm_release), which is released here so no
 * shard stays stuck posting to it. Peers on other hosts fail through their
 * provider's errors and the write deadline, or, in an etcd cluster, as
 * soon as their member key goes (names.c calls mv_peer_departed()). Main
 * thread only.
 */
#include "mover.h"

#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

int mv_peer_watch(struct mover *mv, struct mv_peer *p, char *why, size_t whylen)
{
	const struct mv_addr_blob *b = &p->blob;

	p->pid = 0;
	p->pidfd = -1;
	p->wake = NULL;
	for (uint32_t s = 0; s < MV_MAX_SHARDS; s++)
		p->wake_fd[s] = -1;
	if (b->pid <= 0 || !mv->pidns || b->pidns != mv->pidns ||
	    memcmp(b->host, mv->host_id, sizeof(b->host)))
		return 0; /* another host or namespace: its pid means nothing here */
	int fd = (int)syscall(SYS_pidfd_open, (pid_t)b->pid, 0);
	if (fd < 0 && errno == ESRCH) {
		snprintf(why, whylen, "peer mover %016llx (pid %d on this host) is not running",
		         (unsigned long long)b->mover_id, b->pid);
		return -EHOSTUNREACH;
	}
	if (fd < 0)
		return 0; /* no pidfd here (old kernel): the deadline still holds */
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = MV_TAG_PEER | p->index};
	if (epoll_ctl(mv->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		close(fd);
		return 0;
	}
	p->pid = b->pid;
	p->pidfd = fd;
	mv_wake_peer_open(mv, p);
	return 0;
}

void mv_peer_unwatch(struct mover *mv, struct mv_peer *p)
{
	if (p->pidfd < 0)
		return;
	epoll_ctl(mv->ep, EPOLL_CTL_DEL, p->pidfd, NULL);
	close(p->pidfd);
	p->pidfd = -1;
}

static void shm_release(struct mover *mv, struct mv_peer *p);

/* Tells every shard to look at its posted writes again (mv_expire()). */
static void deaths_bump(struct mover *mv)
{
	/* R1 pairs with A1 in the shards' mv_expire(): the state is visible to a
	 * shard that sees the new count. */
	atomic_fetch_add_explicit(&mv->peer_deaths, 1, memory_order_release);
	for (uint32_t s = 0; s < mv->nshards; s++) {
		uint64_t one = 1;
		if (write(mv->shards[s].efd, &one, sizeof(one)) < 0) {
			/* saturated: that shard is due to wake anyway */
		}
	}
}

void mv_peer_exited(struct mover *mv, struct mv_peer *p)
{
	char why[MV_ERRLEN];

	if (p->pidfd < 0)
		return;
	mv_peer_unwatch(mv, p);
	atomic_store_explicit(&p->gone, MV_PEER_EXITED, memory_order_relaxed);
	deaths_bump(mv);
	mv_log("peer mover %016llx (pid %d) exited: failing the writes to it", //
	       (unsigned long long)p->mover_id, (int)p->pid);
	if (strncmp(mv->prov, "shm", 3))
		return;
	shm_release(mv, p);
	/* It may have died posting to us, holding our own queue's lock. */
	mv_shm_locks_check(mv, 1);
	/* Its wake files went with it, and the peer stays (its AV entries may
	 * still be named): close them, or a peer restarted N times leaves
	 * N x shards fds here. Once every shard has passed a turn none is in a
	 * burst that may ring it, and none adds it again: it is exited. */
	if (p->wake) {
		mv_call_all(mv, MV_CMD_SYNC, NULL, why, sizeof(why));
		mv_wake_peer_close(p);
	}
}

/* On shm the exited peer may have left its command queue locked. */
static void shm_release(struct mover *mv, struct mv_peer *p)
{
	char why[MV_ERRLEN];

	for (uint32_t s = 0; s < p->nshards; s++) {
		int ret = mv_fabric_shm_release(p->blob.addr[s], p->blob.addrlen, p->pid, why,
		                                sizeof(why));
		if (ret == 1)
			mv_log("peer mover %016llx shard %u died holding its shm queue lock: "
			       "released it",
			       (unsigned long long)p->mover_id, s);
		else if (ret < 0)
			mv_log("peer mover %016llx shard %u: cannot check its shm queue lock: %s "
			       "(a shard posting to it may stay stuck)",
			       (unsigned long long)p->mover_id, s, why);
	}
}

void mv_peer_departed(struct mover *mv, struct mv_peer *p, const char *why)
{
	int st = atomic_load(&p->gone);

	if (st == MV_PEER_EXITED || st == MV_PEER_CUT || st == MV_PEER_DEPARTED)
		return;
	snprintf(p->gone_why, sizeof(p->gone_why), "%s", why);
	/* R2 pairs with A2 in mv_peer_why(): gone_why is whole once gone says
	 * DEPARTED. */
	atomic_store_explicit(&p->gone, MV_PEER_DEPARTED, memory_order_release);
	/* R3 pairs with A3 in mv_hb_tick(): a departure is counted, not only
	 * a state, so shard 0 fails the expectations naming the peer even if
	 * it is back (mv_peer_rejoined) before it looks. */
	atomic_fetch_add_explicit(&p->departures, 1, memory_order_release);
	deaths_bump(mv);
	mv_log("%s: failing the writes to it", why);
}

void mv_peer_rejoined(struct mover *mv, struct mv_peer *p)
{
	if (atomic_load(&p->gone) != MV_PEER_DEPARTED)
		return;
	/* Back under a new lease (it lost etcd a while): its AV entries were
	 * kept, so it is fit for work again; clients that removed it meanwhile
	 * find it REMOVED as before. */
	atomic_store(&p->gone, p->refs ? MV_PEER_LIVE : MV_PEER_REMOVED);
	mv_log("peer mover %016llx is back in the cluster", (unsigned long long)p->mover_id);
}

void mv_peer_why(const struct mv_peer *p, char *why, size_t whylen)
{
	int st = atomic_load_explicit(&p->gone, memory_order_acquire); /* A2 */

	if (st == MV_PEER_DEPARTED)
		snprintf(why, whylen, "%s", p->gone_why);
	else if (st == MV_PEER_EXITED)
		snprintf(why, whylen, "peer mover %016llx (pid %d) exited",
		         (unsigned long long)p->mover_id, (int)p->pid);
	else if (st == MV_PEER_CUT)
		snprintf(why, whylen, "peer mover %016llx was cut off: %s",
		         (unsigned long long)p->mover_id, p->cut_why);
	else
		snprintf(why, whylen, "peer mover %016llx was removed",
		         (unsigned long long)p->mover_id);
}
