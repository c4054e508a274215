/* SPDX-License-Identifier: MIT */
/*
 * shmring: a lock-free single-producer single-consumer ring of fixed-size
 * slots in a sealed memfd that two processes share. The producer reserves
 * slots, fills them in place and commits them with one store; the consumer
 * peeks, processes in place and releases with one store. Each side caches the
 * other's index and re-reads it only when its cache says full (producer) or
 * empty (consumer), so a steady stream touches the other side's cache line
 * once per batch. A consumer may sleep; the producer makes a wake-up system
 * call only when the consumer said it sleeps. The layout is in
 * shmring_layout.h.
 *
 * Concurrency rule for every call: one thread at a time per struct shmring.
 * One process (or thread) produces into a ring, one consumes from it.
 */
#ifndef SHMRING_H
#define SHMRING_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "shmring_layout.h"

enum shmring_role {
	SHMRING_PRODUCER = 1,
	SHMRING_CONSUMER = 2,
};

struct shmring_opts {
	uint32_t capacity;  /* slots, power of two, default 1024 */
	uint32_t slot_size; /* bytes, power of two in [16, 4096], default 64 */
	uint32_t start;     /* first index; tests start near 2^32 to cross the wrap */
	uint64_t user;      /* copied into hdr.user */
	const char *name;   /* memfd name, for /proc/PID/fd; default "shmring" */
};

/* A process-local handle. Nothing in it is shared; all shared state is in *lay. */
struct shmring {
	struct shmring_layout *lay;
	uint8_t *slots;
	uint32_t capacity;
	uint32_t mask;
	uint32_t slot_size;
	uint32_t local;  /* producer: tail incl. reserved-uncommitted; consumer: head */
	uint32_t cached; /* producer: cons head + capacity as last read; consumer: prod tail */
	int role;
	int fd;
	int doorbell; /* eventfd the producer writes to wake a consumer, or -1 */
	int pidfd;    /* the other side's process, once watched, or -1 */
	int corrupt;  /* the other side's index was impossible; sticky: -EPROTO ever after */
	size_t map_size;
	char err[160];
};

/*
 * shmring_create - make a new ring in a fresh sealed memfd and take one role.
 * Returns 0, or -EINVAL (bad opts; see r->err), or -errno from memfd/mmap.
 */
int shmring_create(struct shmring *r, const struct shmring_opts *o, enum shmring_role role);

/*
 * shmring_attach - map a ring passed as fd and take the role not yet taken.
 * The segment is untrusted: magic, ABI, sizes, offsets and seals are checked
 * against the real segment size. Takes ownership of fd on success only.
 * Returns 0, or -EINVAL/-EPROTO/-ENOEXEC/-EBADF with a reason in r->err.
 */
int shmring_attach(struct shmring *r, int fd, enum shmring_role role);

/* shmring_close - unmap and close everything the handle holds. Safe on a zeroed handle. */
void shmring_close(struct shmring *r);

/* The reason for the last failure on this handle, or "". */
static inline const char *shmring_error(const struct shmring *r)
{
	return r->err;
}

static inline void *shmring_slot(const struct shmring *r, uint32_t pos)
{
	return r->slots + (size_t)(pos & r->mask) * r->slot_size;
}

int shmring_corrupt(struct shmring *r, const char *what, uint32_t seen);
void shmring_wake(struct shmring *r);

/*
 * shmring_reserve - producer: reserve up to n slots after the ones already
 * reserved. *pos receives the index of the first; fill them with
 * shmring_slot(r, *pos + i). Returns how many were reserved (0 when full),
 * or -EPROTO if the consumer's index is impossible (a corrupt peer).
 */
static inline int shmring_reserve(struct shmring *r, uint32_t n, uint32_t *pos)
{
	uint32_t room = r->cached - r->local;

	*pos = r->local;
	if (r->corrupt)
		return -EPROTO; /* sticky: a peer that lied once is not believed again */
	if (room < n) {
		/* A1 pairs with R2 in shmring_release(): the consumer is done with
		 * every slot before the head it published. */
		uint32_t head = atomic_load_explicit(&r->lay->cons.idx, memory_order_acquire);

		if ((uint32_t)(r->local - head) > r->capacity)
			return shmring_corrupt(r, "consumer head", head);
		r->cached = head + r->capacity;
		room = r->cached - r->local;
	}
	if (n > room)
		n = room;
	r->local += n;
	return (int)n;
}

/*
 * shmring_commit - producer: publish every reserved slot. One release store;
 * then, if the consumer said it sleeps, one wake-up.
 */
static inline void shmring_commit(struct shmring *r)
{
	/* R1 pairs with A2 in shmring_peek(): slot contents before the tail.
	 * seq_cst also orders the store before the flags load below (F1), the
	 * producer half of the NEED_WAKEUP handshake; F2 in shmring_arm() is
	 * the consumer half. On x86 this is one xchg, no separate fence. */
	atomic_store_explicit(&r->lay->prod.idx, r->local, memory_order_seq_cst);
	if (atomic_load_explicit(&r->lay->sleep.flags, memory_order_seq_cst) & SHMRING_NEED_WAKEUP)
		shmring_wake(r);
}

/* shmring_consumer_sleeps - producer: whether the consumer asked to be
 * woken, so that the next commit wakes it. A hint, read relaxed. */
static inline int shmring_consumer_sleeps(const struct shmring *r)
{
	return !!(atomic_load_explicit(&r->lay->sleep.flags, memory_order_relaxed) &
	          SHMRING_NEED_WAKEUP);
}

/* shmring_cancel - producer: drop every reserved, uncommitted slot. */
static inline void shmring_cancel(struct shmring *r)
{
	r->local = atomic_load_explicit(&r->lay->prod.idx, memory_order_relaxed);
}

/* shmring_unreserve - producer: drop the last n reserved, uncommitted slots. */
static inline void shmring_unreserve(struct shmring *r, uint32_t n)
{
	r->local -= n;
}

/* Slots reserved and not yet committed. */
static inline uint32_t shmring_reserved(const struct shmring *r)
{
	return r->local - atomic_load_explicit(&r->lay->prod.idx, memory_order_relaxed);
}

/*
 * shmring_peek - consumer: find up to n committed slots starting at *pos.
 * Reads the producer's tail at most once and only when the cached tail
 * holds fewer than n. Returns the count (0 when empty), or -EPROTO when the
 * tail is more than capacity ahead (a corrupt peer); nothing outside the ring
 * is ever read.
 */
static inline int shmring_peek(struct shmring *r, uint32_t n, uint32_t *pos)
{
	uint32_t avail = r->cached - r->local;

	*pos = r->local;
	if (r->corrupt)
		return -EPROTO; /* sticky: a peer that lied once is not believed again */
	if (avail < n) {
		/* A2 pairs with R1 in shmring_commit() */
		uint32_t tail = atomic_load_explicit(&r->lay->prod.idx, memory_order_acquire);

		if ((uint32_t)(tail - r->local) > r->capacity)
			return shmring_corrupt(r, "producer tail", tail);
		r->cached = tail;
		avail = tail - r->local;
	}
	if (n > avail)
		n = avail;
	return (int)n;
}

/* shmring_release - consumer: give back the first n peeked slots. */
static inline void shmring_release(struct shmring *r, uint32_t n)
{
	r->local += n;
	/* R2 pairs with A1 in shmring_reserve(): done reading before reuse */
	atomic_store_explicit(&r->lay->cons.idx, r->local, memory_order_release);
}

/* Committed slots not yet released, as seen from this side (may be stale). */
static inline uint32_t shmring_count(const struct shmring *r)
{
	uint32_t tail = atomic_load_explicit(&r->lay->prod.idx, memory_order_acquire);
	uint32_t head = atomic_load_explicit(&r->lay->cons.idx, memory_order_acquire);
	uint32_t n = tail - head;

	return n > r->capacity ? r->capacity : n;
}

/*
 * Sleeping. A consumer that found the ring empty for a while arms the ring;
 * if that returns 0 the ring is still empty and the producer will wake it on
 * its next commit, so the consumer may block: shmring_arm() for a sleep on
 * the futex (shmring_wait() does this), shmring_arm_doorbell() for a sleep
 * on the eventfd the producer was given (shmring_set_doorbell), the way to
 * sleep on many rings at once. After waking it calls shmring_disarm().
 * Both return 1, not arming, if the ring has entries.
 */
int shmring_arm(struct shmring *r);
int shmring_arm_doorbell(struct shmring *r);
void shmring_disarm(struct shmring *r);

/*
 * shmring_wait - consumer: block until the ring has entries, the timeout
 * (ms, -1 forever) passes, or the watched peer dies. Makes no system call if
 * entries are already there. Returns 1 (entries), 0 (timeout), -EPIPE (the
 * producer process exited), -EPROTO (corrupt peer).
 */
int shmring_wait(struct shmring *r, int timeout_ms);

/* shmring_set_doorbell - producer: wake the consumer by writing this eventfd
 * instead of the futex. The ring does not own efd. */
static inline void shmring_set_doorbell(struct shmring *r, int efd)
{
	r->doorbell = efd;
}

/*
 * shmring_watch_peer - start watching the other side's process through a
 * pidfd. pid 0 takes the pid the other side recorded in the ring (untrusted;
 * prefer a pid from SO_PEERCRED). Returns 0, -ENOTCONN (no pid recorded),
 * -ESRCH (already gone), or -errno from pidfd_open.
 */
int shmring_watch_peer(struct shmring *r, int pid);

/* shmring_peer_alive - 1 if the watched peer runs, 0 if it exited, -ENOTCONN if unwatched. */
int shmring_peer_alive(struct shmring *r);

/* The pidfd of the watched peer (readable once it exits), or -1. */
static inline int shmring_peer_pidfd(const struct shmring *r)
{
	return r->pidfd;
}

/* The memfd of the ring, to pass to the other side (SCM_RIGHTS or fork+exec). */
static inline int shmring_fd(const struct shmring *r)
{
	return r->fd;
}

#endif
