/* SPDX-License-Identifier: MIT */
/*
 * libfabric 1.17's shm guards each endpoint's command queue with a pthread
 * spinlock inside the endpoint's shared region. A sender takes its
 * receiver's lock to post, and holds it through the whole copy of a
 * one-segment write (process_vm_writev); the receiver takes its own to
 * read the queue. A sender killed inside that copy leaves the receiver's
 * lock held for good: every later write to that receiver spins in
 * fi_writemsg, and so does the receiver's own progress (fi_cq_read), with
 * its shard. Under a stream of 1 MiB writes a kill -9 of the sending mover
 * did so in 15 of 30 kills, and in 6 of 30 in another run
 * (tests/test_shm_restart.c).
 *
 * The receiver is the one that can repair it, since only it knows its
 * region is stuck, but a spinlock records no owner, and releasing a lock
 * a live writer holds corrupts the queue; a "held for longer than T" rule
 * cannot tell a dead holder from a live one descheduled for T on a busy
 * host. So every mover makes the lock record its holder: this file
 * defines pthread_spin_lock and pthread_spin_trylock, which take glibc's
 * place for the libfabric in this process, and write the holder's pid into
 * the lock word (shm_lock.h: the word stays "held" to glibc's own code, and
 * unlocking is glibc's, which writes "free"). The main thread then looks at
 * its shards' own regions every 100 ms, also while it waits for the shards
 * to answer a command (one may be stuck on this very lock), and at once
 * when a same-host peer it watches exits (mv_shm_locks_check): a word that
 * names another process that has exited (no such pid, or a zombie) is a
 * lock nobody will release. While that holder is dead and everyone else
 * spins on the word, the queue cannot change, so it is repaired first:
 * the dead sender may have published a write's first command slot and not
 * its second (the remote iovs), and the receiver would read the unfilled
 * slot as that write's target, then run past the queue's end; such a half
 * posted command is taken back. A slot claimed and not published is not
 * in the queue (publishing is the single increment of wcnt). Then the word
 * is set free, with a log line; the spinning writers and the shard go on.
 *
 * Left as they are: a command slot the dead sender published and had not
 * yet counted (cmd_cnt one too high until the queue is full), an inject
 * buffer it took from our pool and never returned, and the slots of
 * commands it had posted whose responses it will never read (1.17 counts
 * such a slot free only when the sender reads the response; this happens
 * at any sender's death, lock or not: 1 slot of 1024 over 30 kills under
 * a stream of multi-segment writes). The region stays usable.
 *
 * A word that names no process (a writer without the override) or a live
 * one is left alone; after 5 s it is logged once, naming what holds it.
 * Only regions of version 4 that name our pid are touched, and only with
 * libfabric 1.17. The holder's pid is looked up in our pid namespace: a
 * writer in another one (possible where /dev/shm is shared across pid
 * namespaces; shm 1.17 then cannot copy by pid and falls back to its
 * bounce buffers) could be taken for dead while it holds the lock. Movers
 * that talk shm to each other are expected in one pid namespace.
 */
#include "mover.h"
#include "shm_lock.h"

#include <pthread.h>
#include <rdma/fabric.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The override is left out of ThreadSanitizer builds, whose runtime
 * intercepts these calls itself; they do without the repair. */
#if defined(__SANITIZE_THREAD__)
#define MV_SHM_OVERRIDE 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MV_SHM_OVERRIDE 0
#endif
#endif
#ifndef MV_SHM_OVERRIDE
#define MV_SHM_OVERRIDE 1
#endif

static int lock_free = 1; /* what pthread_spin_init writes: glibc's "free" */
static int lock_mine;     /* mv_shm_lock_word(getpid()); 0 until set */

static void owner_init(void)
{
	pthread_spinlock_t l;

	pthread_spin_init(&l, PTHREAD_PROCESS_SHARED); /* glibc's: not overridden */
	lock_free = (int)l;
	pthread_spin_destroy(&l);
	lock_mine = mv_shm_lock_word(getpid());
}

__attribute__((constructor)) static void owner_start(void)
{
	owner_init();
	pthread_atfork(NULL, NULL, owner_init); /* a child records its own pid */
}

#if MV_SHM_OVERRIDE
int pthread_spin_trylock(pthread_spinlock_t *lock)
{
	if (__builtin_expect(!lock_mine, 0))
		owner_init(); /* called before our constructor ran */
	int want = lock_free;

	return __atomic_compare_exchange_n((int *)lock, &want, lock_mine, 0, __ATOMIC_ACQUIRE,
	                                   __ATOMIC_RELAXED)
	           ? 0
	           : EBUSY;
}

int pthread_spin_lock(pthread_spinlock_t *lock)
{
	if (__builtin_expect(!lock_mine, 0))
		owner_init();
	for (;;) {
		int want = lock_free;
		if (__atomic_compare_exchange_n((int *)lock, &want, lock_mine, 0, __ATOMIC_ACQUIRE,
		                                __ATOMIC_RELAXED))
			return 0;
		while (__atomic_load_n((int *)lock, __ATOMIC_RELAXED) != lock_free) {
#if defined(__x86_64__) || defined(__i386__)
			__builtin_ia32_pause();
#elif defined(__aarch64__)
			__asm__ volatile("yield");
#endif
		}
	}
}
#endif

/* Our shards' own regions, found once each (main thread). */
static struct {
	uint8_t *region;
	int tried;
	int word;       /* the held word last seen, or lock_free */
	uint64_t moved; /* the queue's rcnt + wcnt when last seen */
	double since;   /* since when the same word held a queue that did not move */
	int reported;   /* the long hold was logged */
} own[MV_MAX_SHARDS];

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 1 if pid has exited (no such process, or a zombie not yet reaped). Its
 * parent may reap it while we look: a stat that cannot be read is asked
 * again of kill(). */
static int pid_exited(pid_t pid)
{
	char path[64], buf[512];

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 1;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')'); /* the name may hold anything */
	if (!p || p[1] != ' ')
		return kill(pid, 0) < 0 && errno == ESRCH;
	return p[2] == 'Z' || p[2] == 'X';
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static void wr64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, sizeof(v));
}

/*
 * With the lock held by a dead process: takes back a command whose first
 * slot was published without its second. Returns 1 if it did, 0 if the
 * queue was whole, -1 if it does not look like 1.17's queue (then nothing
 * is touched and the lock is left held).
 */
static int queue_repair(uint8_t *r, char *what, size_t whatlen)
{
	uint64_t total = rd64(r + MV_SHM_OFF_TOTAL), cq = rd64(r + MV_SHM_OFF_CMDQ);
	uint64_t rq = rd64(r + MV_SHM_OFF_RESPQ);

	if (cq < 128 || cq + MV_SHM_CMDQ_HDR > total || rq <= cq || rq > total)
		return -1;
	uint8_t *q = r + cq;
	uint64_t size = rd64(q), mask = rd64(q + 8), rcnt = rd64(q + 16), wcnt = rd64(q + 24);
	if (!size || (size & (size - 1)) || mask != size - 1 ||
	    rq - cq - MV_SHM_CMDQ_HDR != size * MV_SHM_CMD_SIZE || wcnt - rcnt > size)
		return -1;
	uint64_t i = rcnt;
	while (i < wcnt) {
		uint32_t op;
		memcpy(&op, q + MV_SHM_CMDQ_HDR + (i & mask) * MV_SHM_CMD_SIZE + MV_SHM_CMD_OFF_OP,
		       sizeof(op));
		i += op < 32 && (MV_SHM_TWO_SLOT_OPS & (1u << op)) ? 2 : 1;
	}
	if (i == wcnt) {
		snprintf(what, whatlen, "its queue was whole (%llu commands waiting)",
		         (unsigned long long)(wcnt - rcnt));
		return 0;
	}
	/* i == wcnt + 1: the last published slot is a first without its second. */
	wr64(q + 24, wcnt - 1);
	uint64_t cnt = rd64(r + MV_SHM_OFF_CMD_CNT);
	if (cnt < size)
		wr64(r + MV_SHM_OFF_CMD_CNT, cnt + 1);
	snprintf(what, whatlen,
	         "took back a write it had half posted (command %llu without its remote iovs)",
	         (unsigned long long)(wcnt - 1));
	return 1;
}

static void check_one(struct mover *mv, uint32_t s, double now)
{
	char what[160];

	if (!own[s].region) {
		if (own[s].tried++)
			return;
		const struct mv_fabric *f = &mv->shards[s].fab;
		uint8_t *r = mv_fabric_shm_mapping(f->addr, f->addrlen);
		int pid = 0;
		if (r)
			memcpy(&pid, r + MV_SHM_OFF_PID, sizeof(pid));
		if (!r || r[0] != MV_SHM_VERSION || pid != getpid()) {
			mv_log("shard %u: its shm region is not one of libfabric 1.17 naming us: a "
			       "sender that dies holding its queue lock may leave the shard stuck",
			       s);
			return;
		}
		own[s].region = r;
		own[s].word = lock_free;
	}
	int *lock = (int *)(own[s].region + MV_SHM_OFF_LOCK);
	int word = __atomic_load_n(lock, __ATOMIC_ACQUIRE);
	if (word == lock_free) {
		own[s].word = lock_free;
		return;
	}
	/* A live holder takes and lets go all the time (a stream's sender
	 * holds the lock through most of each copy): the same word seen held
	 * again is a stuck lock only if the queue did not move meanwhile. */
	const uint8_t *q = own[s].region + rd64(own[s].region + MV_SHM_OFF_CMDQ);
	uint64_t moved = __atomic_load_n((const uint64_t *)(q + 16), __ATOMIC_RELAXED) +
	                 __atomic_load_n((const uint64_t *)(q + 24), __ATOMIC_RELAXED);
	if (word != own[s].word || moved != own[s].moved) {
		own[s].word = word;
		own[s].moved = moved;
		own[s].since = now;
		own[s].reported = 0;
	}
	pid_t holder = mv_shm_lock_holder(word);
	if (holder > 0 && holder != getpid() && pid_exited(holder)) {
		/* Take the lock from the dead holder before touching the queue:
		 * had it let go before it died and a live sender taken the lock
		 * since, the word differs and the queue is that sender's. Only
		 * with the word ours is the queue still. */
		int want = word;
		if (!__atomic_compare_exchange_n(lock, &want, lock_mine, 0, __ATOMIC_ACQUIRE,
		                                 __ATOMIC_RELAXED))
			return;
		if (queue_repair(own[s].region, what, sizeof(what)) < 0) {
			__atomic_store_n(lock, word, __ATOMIC_RELEASE); /* left as it was */
			if (!own[s].reported++)
				mv_warn(
				    "shard %u: our shm queue lock is held by pid %d, which exited, "
				    "but the queue is not laid out as libfabric 1.17's: left held "
				    "(the shard and its senders stay stuck; restart this mover)",
				    s, (int)holder);
			return;
		}
		__atomic_store_n(lock, lock_free, __ATOMIC_RELEASE);
		mv_log("shard %u: pid %d exited holding our shm queue lock: %s; released it", s,
		       (int)holder, what);
		own[s].word = lock_free;
		return;
	}
	if (now - own[s].since < 5 || own[s].reported)
		return;
	own[s].reported = 1;
	if (holder == getpid())
		mv_warn("shard %u: our shm queue lock has been held by this mover for %.0f s, its "
		        "queue still",
		        s, now - own[s].since);
	else if (holder > 0)
		mv_warn("shard %u: our shm queue lock has been held for %.0f s by pid %d, which is "
		        "running (stopped or traced?), its queue still: writes to this shard wait",
		        s, now - own[s].since, (int)holder);
	else
		mv_warn(
		    "shard %u: our shm queue lock has been held for %.0f s, its queue still, by "
		    "a process that does not record itself (not a mover of this version): "
		    "writes to this shard wait; if it died, restart this mover",
		    s, now - own[s].since);
}

void mv_shm_locks_check(struct mover *mv, int at_once)
{
	static double last;
	double now = mono_s();

	if (strncmp(mv->prov, "shm", 3) || fi_version() != FI_VERSION(1, 17) ||
	    (!at_once && now - last < 0.1))
		return;
	last = now;
	for (uint32_t s = 0; s < mv->nshards && s < MV_MAX_SHARDS; s++)
		check_one(mv, s, now);
}
