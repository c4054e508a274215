/* SPDX-License-Identifier: MIT */
/*
 * Waking a same-host peer's sleeping shard. On shm the receiver copies
 * every write made to it, in its own progress call, and shm has no wait
 * object: a receiving shard asleep in its idle backoff (up to 50 ms) stalls
 * the first writes of the next stream for that long. So each shm mover
 * publishes, per shard, a "sleeping" word in a small shared page and a FIFO
 * the shard polls while it sleeps; a sender that posted to a shard whose
 * word is up clears it and writes a byte to its FIFO.
 *
 *   /dev/shm/mv.PID.wake      struct mv_wake_page (one 4 KiB page)
 *   +0     magic, version     written once by the owner before any FIFO
 *   +64    sleeping[0]        one cache line per shard: set by the owner
 *   +128   sleeping[1]        shard before it sleeps, cleared by whoever
 *   ...                       wakes it
 *   /dev/shm/mv.PID.N.wake    FIFO of shard N, opened O_RDWR by the owner
 *
 * No wake is lost: the owner sets its word, then runs progress once more
 * (which reads its command queue); a sender writes into that queue, then
 * reads the word; with a full fence on both sides one of them sees the
 * other (W1 pairs with W2). A wake that does not come costs only the
 * backoff's sleep, never data: this is an optimisation the idle backoff
 * still backs up. Files are named by pid, like shm's own, so a mover
 * removes those an earlier process of its pid left behind.
 */
#include "mover.h"

#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAKE_MAGIC   0x454b4157u /* "WAKE" */
#define WAKE_VERSION 1u

struct mv_wake_page {
	uint32_t magic;
	uint32_t version;
	uint32_t nshards;
	alignas(64) struct {
		_Atomic uint32_t sleeping;
		uint8_t pad[60];
	} shard[MV_MAX_SHARDS - 1];
};
static_assert(offsetof(struct mv_wake_page, shard) == 64, "shard words start on line 1");
static_assert(sizeof(struct mv_wake_page) <= 4096, "the wake page is one page");

static void wake_name(char *buf, size_t len, pid_t pid, int shard)
{
	if (shard < 0)
		snprintf(buf, len, "/dev/shm/mv.%d.wake", (int)pid);
	else
		snprintf(buf, len, "/dev/shm/mv.%d.%d.wake", (int)pid, shard);
}

static void unlink_ours(void)
{
	char pat[64];
	glob_t g;

	snprintf(pat, sizeof(pat), "/dev/shm/mv.%d.*wake", (int)getpid());
	if (glob(pat, 0, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++)
			unlink(g.gl_pathv[i]);
		globfree(&g);
	}
}

int mv_wake_open(struct mover *mv, char *why, size_t whylen)
{
	char path[64];
	int fd;

	if (strncmp(mv->prov, "shm", 3) || mv->nshards > MV_MAX_SHARDS - 1)
		return 0;
	unlink_ours(); /* left by an earlier process of our pid */
	for (uint32_t s = 0; s < mv->nshards; s++) {
		wake_name(path, sizeof(path), getpid(), (int)s);
		if (mkfifo(path, 0600) < 0 ||
		    (mv->shards[s].wake_fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)) < 0) {
			snprintf(why, whylen, "%s: %s", path, strerror(errno));
			goto err;
		}
	}
	wake_name(path, sizeof(path), getpid(), -1);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, 4096) < 0) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		goto err;
	}
	struct mv_wake_page *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (w == MAP_FAILED) {
		snprintf(why, whylen, "mapping %s: %s", path, strerror(errno));
		goto err;
	}
	w->nshards = mv->nshards;
	w->version = WAKE_VERSION;
	/* The magic last: a peer that sees it sees the rest. */
	atomic_store_explicit((_Atomic uint32_t *)&w->magic, WAKE_MAGIC, memory_order_release);
	mv->wake = w;
	return 0;

err:
	mv_wake_close(mv);
	return -EIO;
}

void mv_wake_close(struct mover *mv)
{
	for (uint32_t s = 0; s < mv->nshards; s++) {
		if (mv->shards[s].wake_fd >= 0)
			close(mv->shards[s].wake_fd);
		mv->shards[s].wake_fd = -1;
	}
	if (mv->wake)
		munmap(mv->wake, 4096);
	mv->wake = NULL;
	unlink_ours();
}

void mv_wake_peer_open(struct mover *mv, struct mv_peer *p)
{
	char path[64];
	struct mv_wake_page *w;
	int fd;

	if (!mv->wake || p->pid <= 0 || p->nshards > MV_MAX_SHARDS - 1)
		return;
	wake_name(path, sizeof(path), p->pid, -1);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return; /* a mover without wake files: the backoff alone */
	w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (w == MAP_FAILED)
		return;
	if (atomic_load_explicit((_Atomic uint32_t *)&w->magic, memory_order_acquire) !=
	        WAKE_MAGIC ||
	    w->version != WAKE_VERSION || w->nshards != p->nshards) {
		munmap(w, 4096);
		return;
	}
	for (uint32_t s = 0; s < p->nshards; s++) {
		wake_name(path, sizeof(path), p->pid, (int)s);
		p->wake_fd[s] = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
		if (p->wake_fd[s] < 0) {
			mv_wake_peer_close(p);
			munmap(w, 4096);
			return;
		}
	}
	p->wake = w;
}

void mv_wake_peer_close(struct mv_peer *p)
{
	for (uint32_t s = 0; s < MV_MAX_SHARDS; s++) {
		if (p->wake_fd[s] >= 0)
			close(p->wake_fd[s]);
		p->wake_fd[s] = -1;
	}
	if (p->wake)
		munmap(p->wake, 4096);
	p->wake = NULL;
}

int mv_wake_arm(struct mv_shard *s)
{
	struct mv_wake_page *w = s->mv->wake;

	if (!w || s->wake_fd < 0 || !s->fab.rx_cntr)
		return 0;
	/* W1 pairs with W2 in mv_wake_ring(). */
	atomic_store_explicit(&w->shard[s->id].sleeping, 1, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	/* A write queued before the word went up: progress takes it now, and
	 * the counter says so. The shard loop reads the counter again and
	 * judges what came (a peer's heartbeat is no work). */
	uint64_t v = fi_cntr_read(s->fab.rx_cntr);
	if (v != s->rx_seen) {
		atomic_store_explicit(&w->shard[s->id].sleeping, 0, memory_order_relaxed);
		return -1;
	}
	return 1;
}

void mv_wake_disarm(struct mv_shard *s, int woke)
{
	char buf[64];

	atomic_store_explicit(&s->mv->wake->shard[s->id].sleeping, 0, memory_order_relaxed);
	if (woke)
		while (read(s->wake_fd, buf, sizeof(buf)) > 0) {
		}
}

void mv_wake_ring(struct mv_shard *s, struct mv_peer *p)
{
	uint32_t t = (uint32_t)s->id % p->nshards;

	/* W2 pairs with W1 in mv_wake_arm(): our writes are in its queue. */
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&p->wake->shard[t].sleeping, memory_order_relaxed) ||
	    !atomic_exchange_explicit(&p->wake->shard[t].sleeping, 0, memory_order_relaxed))
		return;
	s->st.wakes++;
	s->woke_at = s->now;
	if (write(p->wake_fd[t], "w", 1) < 0) {
		/* full (it is awake already) or the peer is gone */
	}
}
