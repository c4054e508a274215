/* SPDX-License-Identifier: MIT */
/*
 * The check suites of the shmring library with producer and consumer apart.
 * Suite "procs": two processes (multiproc, sleep_wake, dead_peer), with
 * tests/shmring_peer as the other one, exec'd with the ring's memfd
 * inherited. Suite "threads": both sides as two threads of one process, the
 * one `make check-tsan` selects with CK_RUN_SUITE=threads. Stream payloads
 * carry sequence numbers and checksums (tests/shmring_desc.h, shared with
 * shmring_peer) and are verified on arrival. MV_BUILD names the build tree
 * holding tests/shmring_peer (default "build").
 */
#include "shmring.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmring_desc.h"
#include "shmring_util.h"

#define MULTIPROC_COUNT  10000000ull
#define PING_PONG_ROUNDS 20000
#define DOORBELL_ROUNDS  5000
/* The same counts under ThreadSanitizer: the threads suite still takes seconds there. */
#define THREADS_STREAM_COUNT     4000000ull
#define THREADS_PING_PONG_ROUNDS 10000

/* A round or a death notice slower than these is a lost wake-up, not noise. */
#define ROUND_LIMIT_NS (2 * NSEC_PER_SEC)
#define EPIPE_LIMIT_NS (1 * NSEC_PER_SEC)

/* ============================== multiproc ============================== */

START_TEST(test_multiproc_peer_consumer_verifies_10m)
{
	struct shmring r;
	char fdbuf[16], countbuf[24];
	uint64_t state = 0x1234567ull, seq = 0;
	unsigned spins = 0, checks = 0;

	ck_assert_int_eq(shmring_create(&r, NULL, SHMRING_PRODUCER), 0);
	snprintf(countbuf, sizeof(countbuf), "%llu", MULTIPROC_COUNT);
	const char *args[] = {"consume", fd_arg(fdbuf, shmring_fd(&r)), countbuf, NULL};
	int keep = shmring_fd(&r);
	pid_t pid = spawn_peer(args, &keep, 1);
	int watched = pidfd_supported(&r) && shmring_watch_peer(&r, pid) == 0;

	while (seq < MULTIPROC_COUNT) {
		uint32_t want = next_batch(&state, 0), pos = 0;

		if (want > MULTIPROC_COUNT - seq)
			want = (uint32_t)(MULTIPROC_COUNT - seq);
		int n = shmring_reserve(&r, want, &pos);
		require(n >= 0, "reserve: %s", shmring_error(&r));
		if (n == 0) {
			/* Full: a consumer that died leaves it full forever. */
			if (watched && ++checks % 4096 == 0 && shmring_peer_alive(&r) == 0)
				break;
			backoff(&spins);
			continue;
		}
		for (int i = 0; i < n; i++)
			desc_fill(shmring_slot(&r, pos + (uint32_t)i), seq + (uint64_t)i);
		shmring_commit(&r);
		seq += (uint64_t)n;
	}
	assert_peer_exited_ok(pid, "consumer");
	ck_assert_uint_eq(seq, MULTIPROC_COUNT);
	shmring_close(&r);
}
END_TEST

START_TEST(test_multiproc_peer_producer_verified_here_10m)
{
	struct shmring r;
	char fdbuf[16], countbuf[24];
	uint64_t state = 0x7654321ull, seq = 0;
	unsigned spins = 0;

	ck_assert_int_eq(shmring_create(&r, NULL, SHMRING_CONSUMER), 0);
	snprintf(countbuf, sizeof(countbuf), "%llu", MULTIPROC_COUNT);
	const char *args[] = {"produce", fd_arg(fdbuf, shmring_fd(&r)), countbuf, NULL};
	int keep = shmring_fd(&r);
	pid_t pid = spawn_peer(args, &keep, 1);
	if (pidfd_supported(&r))
		ck_assert_int_eq(shmring_watch_peer(&r, pid), 0);

	while (seq < MULTIPROC_COUNT) {
		uint32_t pos = 0;
		int n = shmring_peek(&r, next_batch(&state, 0), &pos);

		require(n >= 0, "peek: %s", shmring_error(&r));
		if (n == 0) {
			if (++spins < SPINS) {
				cpu_relax();
				continue;
			}
			spins = 0;
			n = shmring_wait(&r, SLEEP_MS);
			require(n > 0, "after %" PRIu64 " descriptors: wait %d (%s)", seq, n,
			        shmring_error(&r));
			continue;
		}
		for (int i = 0; i < n; i++) {
			const struct test_desc *d = shmring_slot(&r, pos + (uint32_t)i);

			if (!desc_ok(d, seq + (uint64_t)i))
				ck_abort_msg("descriptor %" PRIu64 " carries seq %" PRIu64
				             " and %s checksum",
				             seq + (uint64_t)i, d->seq,
				             d->sum == desc_checksum(d) ? "a good" : "a bad");
		}
		shmring_release(&r, (uint32_t)n);
		seq += (uint64_t)n;
	}
	assert_peer_exited_ok(pid, "producer");
	shmring_close(&r);
}
END_TEST

/* ============================== sleep_wake ============================== */

struct late_commit {
	struct shmring *prod;
	int delay_ms;
};

static void *commit_later(void *arg)
{
	struct late_commit *lc = arg;
	uint32_t pos;

	usleep((useconds_t)lc->delay_ms * 1000);
	if (shmring_reserve(lc->prod, 1, &pos) == 1) {
		memset(shmring_slot(lc->prod, pos), 0x5a, lc->prod->slot_size);
		shmring_commit(lc->prod);
	}
	return NULL;
}

START_TEST(test_futex_sleeper_woken_by_producer_with_doorbell)
{
	struct ring_pair p;
	struct late_commit lc;
	pthread_t t;
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	/* The producer was given an eventfd, but this consumer sleeps on the
	 * futex: it said so when it armed, so the wake-up must reach it. */
	pair_open(&p, NULL);
	shmring_set_doorbell(&p.prod, efd);
	lc.prod = &p.prod;
	lc.delay_ms = 100;
	ck_assert_int_eq(pthread_create(&t, NULL, commit_later, &lc), 0);
	int64_t t0 = now_ns();
	ck_assert_int_eq(shmring_wait(&p.cons, 10000), 1);
	int64_t dt = now_ns() - t0;
	pthread_join(t, NULL);
	ck_assert_msg(dt < 2000000000ll, "futex sleeper woke after %lld ms",
	              (long long)(dt / 1000000));
	uint64_t v;
	ck_assert_int_lt(read(efd, &v, sizeof(v)), 0); /* the eventfd was not used */
	close(efd);
	pair_close(&p);
}
END_TEST

START_TEST(test_wait_times_out_on_empty_ring)
{
	struct ring_pair p;
	int64_t t0 = now_ns();

	pair_open(&p, NULL);
	ck_assert_int_eq(shmring_wait(&p.cons, 50), 0);
	ck_assert_int_ge(now_ns() - t0, 45 * 1000000ll);
	ck_assert_uint_eq(atomic_load(&p.cons.lay->sleep.flags) & SHMRING_NEED_WAKEUP, 0);
	pair_close(&p);
}
END_TEST

/* Wait for one entry: poll for up to spins, then sleep (on the doorbell if efd >= 0). */
static int await_entry(struct shmring *r, int efd, unsigned spins)
{
	uint32_t pos = 0;

	while (spins--) {
		int n = shmring_peek(r, 1, &pos);

		if (n != 0)
			return n;
		cpu_relax();
	}
	return efd >= 0 ? wait_doorbell(r, efd, SLEEP_MS) : shmring_wait(r, SLEEP_MS);
}

/* The next step of a 64-bit LCG: the jitter that moves commits around. */
static uint64_t lcg_next(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x;
}

/* Send rounds descriptors one at a time through a ring to an echoing
 * shmring_peer and wait for each echo; with doorbells both sides sleep on
 * eventfds instead of the futex. The peer sleeps as soon as its ring is empty.
 * Half the rounds we poll for the echo first, so we see it within a cache-line
 * transfer and our next commit, after a random delay of 0 to a few
 * microseconds, lands inside the peer's peek / arm / sleep sequence; the other
 * half we sleep at once and the peer's commit lands inside ours. Fails on any
 * round slower than ROUND_LIMIT_NS: the sleeper's own timeout is longer, so a
 * lost wake-up shows up as a slow round. */
static void ping_pong_with_peer(int rounds, int doorbell)
{
	struct shmring out, in;
	char b1[16], b2[16], b3[16], b4[16], rbuf[16];
	int efd_peer = -1, efd_here = -1;
	uint64_t jitter = 0x5deece66dull;

	ck_assert_int_eq(shmring_create(&out, NULL, SHMRING_PRODUCER), 0);
	ck_assert_int_eq(shmring_create(&in, NULL, SHMRING_CONSUMER), 0);
	snprintf(rbuf, sizeof(rbuf), "%d", rounds);
	const char *args[] = {
	    "echo", fd_arg(b1, shmring_fd(&out)), fd_arg(b2, shmring_fd(&in)), rbuf, NULL, NULL,
	    NULL};
	int keep[4] = {shmring_fd(&out), shmring_fd(&in)};
	if (doorbell) {
		efd_peer = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		efd_here = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		ck_assert_int_ge(efd_peer, 0);
		ck_assert_int_ge(efd_here, 0);
		args[4] = fd_arg(b3, efd_peer);
		args[5] = fd_arg(b4, efd_here);
		keep[2] = efd_peer;
		keep[3] = efd_here;
		shmring_set_doorbell(&out, efd_peer);
	}
	pid_t pid = spawn_peer(args, keep, doorbell ? 4 : 2);

	for (int i = 0; i < rounds; i++) {
		uint32_t pos = 0;

		uint64_t j = lcg_next(&jitter);
		for (unsigned k = (unsigned)(j >> 58); k; k--)
			cpu_relax();

		require(shmring_reserve(&out, 1, &pos) == 1, "round %d: echo ring full", i);
		desc_fill(shmring_slot(&out, pos), (uint64_t)i);
		int64_t t0 = now_ns();
		shmring_commit(&out);

		int n = await_entry(&in, efd_here, (j & 1) ? 20000 : 0);
		int64_t dt = now_ns() - t0;
		require(n == 1, "round %d: no echo within %d ms (wait %d): lost wake-up", i,
		        SLEEP_MS, n);
		require(dt < ROUND_LIMIT_NS, "round %d took %lld ms: lost wake-up", i,
		        (long long)(dt / 1000000));
		require(shmring_peek(&in, 1, &pos) == 1, "round %d: echo vanished", i);
		require(desc_ok(shmring_slot(&in, pos), (uint64_t)i), "echo %d corrupt", i);
		shmring_release(&in, 1);
	}
	assert_peer_exited_ok(pid, "echo");
	if (doorbell) {
		close(efd_peer);
		close(efd_here);
	}
	shmring_close(&in);
	shmring_close(&out);
}

START_TEST(test_ping_pong_futex_never_loses_a_wakeup)
{
	ping_pong_with_peer(PING_PONG_ROUNDS, 0);
}
END_TEST

START_TEST(test_ping_pong_doorbell_never_loses_a_wakeup)
{
	ping_pong_with_peer(DOORBELL_ROUNDS, 1);
}
END_TEST

/* =============================== dead_peer =============================== */

/* Consume and verify from r until shmring_wait() says the producer is gone.
 * Returns the count and the time -EPIPE came. */
static uint64_t drain_until_epipe(struct shmring *r, uint64_t seq, int64_t *t_epipe)
{
	uint64_t first = seq;

	for (;;) {
		uint32_t pos = 0;
		int n = shmring_wait(r, SLEEP_MS);

		if (n == -EPIPE) {
			*t_epipe = now_ns();
			return seq - first;
		}
		require(n == 1, "wait returned %d (%s) after %" PRIu64, n, shmring_error(r),
		        seq - first);
		n = shmring_peek(r, 64, &pos);
		require(n > 0, "wait said entries, peek %d", n);
		for (int i = 0; i < n; i++)
			require(desc_ok(shmring_slot(r, pos + (uint32_t)i), seq + (uint64_t)i),
			        "descriptor %" PRIu64 " corrupt after the kill", seq + (uint64_t)i);
		shmring_release(r, (uint32_t)n);
		seq += (uint64_t)n;
	}
}

/* A consumer ring with an endless shmring_peer producer on it, watched. */
static pid_t spawn_endless_producer(struct shmring *r)
{
	char fdbuf[16];

	ck_assert_int_eq(shmring_create(r, NULL, SHMRING_CONSUMER), 0);
	if (!pidfd_supported(r))
		return -1;
	const char *args[] = {"produce", fd_arg(fdbuf, shmring_fd(r)), "0", NULL};
	int keep = shmring_fd(r);
	pid_t pid = spawn_peer(args, &keep, 1);
	ck_assert_int_eq(shmring_watch_peer(r, pid), 0);
	return pid;
}

START_TEST(test_killed_producer_leaves_committed_entries_then_epipe)
{
	struct shmring r;
	uint64_t seq = 0;
	int64_t t_kill, t_epipe, t0;
	pid_t pid = spawn_endless_producer(&r);

	if (pid < 0)
		return;
	/* Consume a while, then stop and let the producer fill the ring. */
	while (seq < 5000) {
		uint32_t pos = 0;
		int n = shmring_wait(&r, SLEEP_MS);

		require(n == 1, "wait %d (%s) at %" PRIu64, n, shmring_error(&r), seq);
		n = shmring_peek(&r, 64, &pos);
		for (int i = 0; i < n; i++)
			require(desc_ok(shmring_slot(&r, pos + (uint32_t)i), seq + (uint64_t)i),
			        "descriptor %" PRIu64 " corrupt", seq + (uint64_t)i);
		shmring_release(&r, (uint32_t)n);
		seq += (uint64_t)n;
	}
	t0 = now_ns();
	while (shmring_count(&r) < r.capacity) {
		require(now_ns() - t0 < 5 * NSEC_PER_SEC, "producer never filled the ring");
		usleep(1000);
	}
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	t_kill = now_ns();
	/* Let it die (a zombie, still unreaped) so that the ring is full of a dead
	 * producer's entries before we look: everything it committed comes out
	 * first, intact, and only then -EPIPE. */
	siginfo_t si;
	ck_assert_int_eq(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);

	uint64_t drained = drain_until_epipe(&r, seq, &t_epipe);
	ck_assert_uint_eq(drained, r.capacity);
	ck_assert_ptr_nonnull(strstr(shmring_error(&r), "exited"));
	ck_assert_msg(t_epipe - t_kill < EPIPE_LIMIT_NS, "-EPIPE %lld ms after the kill",
	              (long long)((t_epipe - t_kill) / 1000000));
	ck_assert_int_eq(shmring_peer_alive(&r), 0);
	ck_assert_int_eq(shmring_wait(&r, 0), -EPIPE);
	waitpid(pid, NULL, 0);
	shmring_close(&r);
}
END_TEST

START_TEST(test_producer_killed_mid_stream_gives_epipe_after_drain)
{
	struct shmring r;
	uint64_t seq = 0;
	int64_t t_kill, t_epipe;
	pid_t pid = spawn_endless_producer(&r);

	if (pid < 0)
		return;
	/* Kill it while both sides run flat out; batches it reserved but never
	 * committed must not appear, the ones it committed must. */
	while (seq < 200000) {
		uint32_t pos = 0;
		int n = shmring_wait(&r, SLEEP_MS);

		require(n == 1, "wait %d (%s) at %" PRIu64, n, shmring_error(&r), seq);
		n = shmring_peek(&r, 32, &pos);
		for (int i = 0; i < n; i++)
			require(desc_ok(shmring_slot(&r, pos + (uint32_t)i), seq + (uint64_t)i),
			        "descriptor %" PRIu64 " corrupt", seq + (uint64_t)i);
		shmring_release(&r, (uint32_t)n);
		seq += (uint64_t)n;
	}
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	t_kill = now_ns();
	uint64_t drained = drain_until_epipe(&r, seq, &t_epipe);
	ck_assert_uint_le(drained, r.capacity);
	ck_assert_ptr_nonnull(strstr(shmring_error(&r), "exited"));
	ck_assert_msg(t_epipe - t_kill < EPIPE_LIMIT_NS, "-EPIPE %lld ms after the kill",
	              (long long)((t_epipe - t_kill) / 1000000));
	waitpid(pid, NULL, 0);
	shmring_close(&r);
}
END_TEST

struct delayed_kill {
	pid_t pid;
	int delay_ms;
	_Atomic int64_t t_kill;
};

static void *kill_later(void *arg)
{
	struct delayed_kill *k = arg;

	usleep((useconds_t)k->delay_ms * 1000);
	atomic_store(&k->t_kill, now_ns());
	kill(k->pid, SIGKILL);
	return NULL;
}

START_TEST(test_sleeping_consumer_wakes_when_producer_dies)
{
	struct shmring to_peer, from_peer;
	char b1[16], b2[16];
	struct delayed_kill k = {.delay_ms = 100};
	pthread_t killer;

	/* The peer echoes from to_peer into from_peer; we never send, so it
	 * sleeps as a consumer while we sleep as its producer's consumer. */
	ck_assert_int_eq(shmring_create(&to_peer, NULL, SHMRING_PRODUCER), 0);
	ck_assert_int_eq(shmring_create(&from_peer, NULL, SHMRING_CONSUMER), 0);
	if (!pidfd_supported(&from_peer))
		return;
	const char *args[] = {"echo", fd_arg(b1, shmring_fd(&to_peer)),
	                      fd_arg(b2, shmring_fd(&from_peer)), "1", NULL};
	int keep[2] = {shmring_fd(&to_peer), shmring_fd(&from_peer)};
	k.pid = spawn_peer(args, keep, 2);
	ck_assert_int_eq(shmring_watch_peer(&from_peer, k.pid), 0);
	ck_assert_int_eq(pthread_create(&killer, NULL, kill_later, &k), 0);

	int n = shmring_wait(&from_peer, 10 * SLEEP_MS);
	int64_t t_wake = now_ns();
	ck_assert_int_eq(pthread_join(killer, NULL), 0);
	ck_assert_msg(n == -EPIPE, "wait returned %d (%s), expected -EPIPE", n,
	              shmring_error(&from_peer));
	ck_assert_msg(t_wake - atomic_load(&k.t_kill) < EPIPE_LIMIT_NS,
	              "woke %lld ms after the kill",
	              (long long)((t_wake - atomic_load(&k.t_kill)) / 1000000));
	waitpid(k.pid, NULL, 0);
	shmring_close(&from_peer);
	shmring_close(&to_peer);
}
END_TEST

START_TEST(test_producer_sees_killed_consumer_gone)
{
	struct shmring r;
	char fdbuf[16];

	ck_assert_int_eq(shmring_create(&r, NULL, SHMRING_PRODUCER), 0);
	if (!pidfd_supported(&r))
		return;
	const char *args[] = {"consume", fd_arg(fdbuf, shmring_fd(&r)), "1000000000", NULL};
	int keep = shmring_fd(&r);
	pid_t pid = spawn_peer(args, &keep, 1);
	ck_assert_int_eq(shmring_watch_peer(&r, pid), 0);
	ck_assert_int_eq(shmring_peer_alive(&r), 1);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	int64_t t_kill = now_ns();
	while (shmring_peer_alive(&r) != 0) {
		require(now_ns() - t_kill < EPIPE_LIMIT_NS, "consumer still alive 1 s after");
		usleep(1000);
	}
	waitpid(pid, NULL, 0);
	shmring_close(&r);
}
END_TEST

/* ================================ threads ================================ */

/* Both sides of one ring as two threads; errors are recorded, asserted by the caller. */
struct thread_side {
	struct shmring *r;
	struct thread_side *other;
	uint64_t count;
	uint64_t done;
	uint64_t bad_seq;    /* first descriptor that failed verification, or UINT64_MAX */
	int err;             /* first ring error, or 0 */
	int sleeps;          /* consumer: sleep in shmring_wait() when empty */
	_Atomic int stopped; /* this side returned: the other must not wait for it */
};

/* Waiting on a side that stopped (done or failed) would wait forever. */
static int other_stopped(struct thread_side *s)
{
	if (!atomic_load_explicit(&s->other->stopped, memory_order_acquire))
		return 0;
	s->err = -EPIPE;
	return 1;
}

static void *side_stop(struct thread_side *s)
{
	atomic_store_explicit(&s->stopped, 1, memory_order_release);
	return NULL;
}

static void *thread_produce(void *arg)
{
	struct thread_side *s = arg;
	uint64_t state = 0xabcdefull;
	unsigned spins = 0;

	while (s->done < s->count) {
		uint32_t want = next_batch(&state, 0), pos = 0;

		if (want > s->count - s->done)
			want = (uint32_t)(s->count - s->done);
		int n = shmring_reserve(s->r, want, &pos);
		if (n < 0) {
			s->err = n;
			break;
		}
		if (n == 0) {
			if (other_stopped(s))
				break;
			backoff(&spins);
			continue;
		}
		for (int i = 0; i < n; i++)
			desc_fill(shmring_slot(s->r, pos + (uint32_t)i), s->done + (uint64_t)i);
		shmring_commit(s->r);
		s->done += (uint64_t)n;
	}
	return side_stop(s);
}

static void *thread_consume(void *arg)
{
	struct thread_side *s = arg;
	uint64_t state = 0xfedcbaull;
	unsigned spins = 0;

	while (s->done < s->count) {
		uint32_t pos = 0;
		int n = shmring_peek(s->r, next_batch(&state, 0), &pos);

		if (n < 0) {
			s->err = n;
			break;
		}
		if (n == 0) {
			/* Re-peek after seeing the producer stop: it may have committed last. */
			if (atomic_load_explicit(&s->other->stopped, memory_order_acquire) &&
			    shmring_peek(s->r, 1, &pos) == 0) {
				s->err = -EPIPE;
				break;
			}
			if (!s->sleeps) {
				backoff(&spins);
				continue;
			}
			if (++spins < SPINS) {
				cpu_relax();
				continue;
			}
			spins = 0;
			/* The producer never pauses: a long sleep is a lost wake-up. */
			int64_t t0 = now_ns();
			n = shmring_wait(s->r, SLEEP_MS);
			if (n <= 0 || now_ns() - t0 > ROUND_LIMIT_NS) {
				s->err = n < 0 ? n : -ETIMEDOUT;
				break;
			}
			continue;
		}
		for (int i = 0; i < n; i++) {
			if (!desc_ok(shmring_slot(s->r, pos + (uint32_t)i),
			             s->done + (uint64_t)i)) {
				s->bad_seq = s->done + (uint64_t)i;
				return side_stop(s);
			}
		}
		shmring_release(s->r, (uint32_t)n);
		s->done += (uint64_t)n;
	}
	return side_stop(s);
}

static void threads_stream(struct shmring *prod, struct shmring *cons, uint64_t count, int sleeps)
{
	struct thread_side ps = {.r = prod, .count = count, .bad_seq = UINT64_MAX};
	struct thread_side cs = {
	    .r = cons, .count = count, .bad_seq = UINT64_MAX, .sleeps = sleeps};
	pthread_t pt, ct;

	ps.other = &cs;
	cs.other = &ps;
	ck_assert_int_eq(pthread_create(&ct, NULL, thread_consume, &cs), 0);
	ck_assert_int_eq(pthread_create(&pt, NULL, thread_produce, &ps), 0);
	ck_assert_int_eq(pthread_join(ct, NULL), 0);
	ck_assert_int_eq(pthread_join(pt, NULL), 0);
	ck_assert_msg(ps.err == 0 || ps.err == -EPIPE, "producer: %d (%s)", ps.err,
	              shmring_error(prod));
	if (cs.bad_seq != UINT64_MAX || cs.err) {
		ck_abort_msg("consumer: %s at %" PRIu64 " (%d: %s)",
		             cs.err == -ETIMEDOUT ? "slept through a commit (lost wake-up)"
		             : cs.err             ? "ring error"
		                                  : "bad descriptor",
		             cs.err ? cs.done : cs.bad_seq, cs.err, shmring_error(cons));
	}
	ck_assert_msg(ps.err == 0, "producer: %d (%s)", ps.err, shmring_error(prod));
	ck_assert_uint_eq(cs.done, count);
}

START_TEST(test_threads_stream_verified)
{
	struct ring_pair p;

	pair_open(&p, NULL);
	threads_stream(&p.prod, &p.cons, THREADS_STREAM_COUNT, 0);
	pair_close(&p);
}
END_TEST

START_TEST(test_threads_stream_verified_sleeping_consumer)
{
	struct shmring_opts o = {.capacity = 64};
	struct ring_pair p;

	pair_open(&p, &o);
	threads_stream(&p.prod, &p.cons, THREADS_STREAM_COUNT / 4, 1);
	pair_close(&p);
}
END_TEST

/* ThreadSanitizer tracks virtual addresses, so with the memfd mapped twice it
 * cannot relate the producer's stores to the consumer's loads. Point the
 * consumer handle at the producer's mapping so that it can check every
 * acquire/release pair of the library against the slot accesses. */
START_TEST(test_threads_stream_verified_one_mapping)
{
	struct ring_pair p;

	pair_open(&p, NULL);
	ck_assert_int_eq(munmap(p.cons.lay, p.cons.map_size), 0);
	p.cons.lay = p.prod.lay;
	p.cons.slots = p.prod.slots;
	threads_stream(&p.prod, &p.cons, THREADS_STREAM_COUNT / 2, 1);
	p.cons.lay = NULL; /* unmapped once, by the producer handle */
	pair_close(&p);
}
END_TEST

struct thread_echo {
	struct shmring *in, *out;
	int rounds;
	int err;
};

static void *thread_echo(void *arg)
{
	struct thread_echo *e = arg;

	for (int i = 0; i < e->rounds; i++) {
		uint32_t pos = 0, opos = 0;
		int n = shmring_wait(e->in, SLEEP_MS);

		if (n <= 0 || shmring_peek(e->in, 1, &pos) != 1 ||
		    shmring_reserve(e->out, 1, &opos) != 1) {
			e->err = n <= 0 ? (n ? n : -ETIMEDOUT) : -EPROTO;
			return NULL;
		}
		memcpy(shmring_slot(e->out, opos), shmring_slot(e->in, pos),
		       sizeof(struct test_desc));
		shmring_release(e->in, 1);
		shmring_commit(e->out);
	}
	return NULL;
}

START_TEST(test_threads_ping_pong_never_loses_a_wakeup)
{
	struct ring_pair a, b;
	struct thread_echo e = {.in = &a.cons, .out = &b.prod, .rounds = THREADS_PING_PONG_ROUNDS};
	uint64_t jitter = 0x5deece66dull;
	pthread_t t;

	pair_open(&a, NULL);
	pair_open(&b, NULL);
	ck_assert_int_eq(pthread_create(&t, NULL, thread_echo, &e), 0);
	for (int i = 0; i < e.rounds; i++) {
		uint32_t pos = 0;

		uint64_t j = lcg_next(&jitter);
		for (unsigned k = (unsigned)(j >> 58); k; k--)
			cpu_relax();
		require(shmring_reserve(&a.prod, 1, &pos) == 1, "round %d: ring full", i);
		desc_fill(shmring_slot(&a.prod, pos), (uint64_t)i);
		int64_t t0 = now_ns();
		shmring_commit(&a.prod);
		int n = await_entry(&b.cons, -1, (j & 1) ? 20000 : 0);
		int64_t dt = now_ns() - t0;
		require(n == 1, "round %d: wait %d, echo thread %d: lost wake-up", i, n, e.err);
		require(dt < ROUND_LIMIT_NS, "round %d took %lld ms: lost wake-up", i,
		        (long long)(dt / 1000000));
		require(shmring_peek(&b.cons, 1, &pos) == 1, "round %d: echo vanished", i);
		require(desc_ok(shmring_slot(&b.cons, pos), (uint64_t)i), "echo %d corrupt", i);
		shmring_release(&b.cons, 1);
	}
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(e.err, 0);
	pair_close(&b);
	pair_close(&a);
}
END_TEST

/* ================================ runner ================================ */

static Suite *procs_suite(void)
{
	Suite *s = suite_create("procs");
	TCase *tc;

	tc = tcase(s, "multiproc", 60);
	tcase_add_test(tc, test_multiproc_peer_consumer_verifies_10m);
	tcase_add_test(tc, test_multiproc_peer_producer_verified_here_10m);

	tc = tcase(s, "sleep_wake", 60);
	tcase_add_test(tc, test_wait_times_out_on_empty_ring);
	tcase_add_test(tc, test_ping_pong_futex_never_loses_a_wakeup);
	tcase_add_test(tc, test_ping_pong_doorbell_never_loses_a_wakeup);
	tcase_add_test(tc, test_futex_sleeper_woken_by_producer_with_doorbell);

	tc = tcase(s, "dead_peer", 30);
	tcase_add_test(tc, test_killed_producer_leaves_committed_entries_then_epipe);
	tcase_add_test(tc, test_producer_killed_mid_stream_gives_epipe_after_drain);
	tcase_add_test(tc, test_sleeping_consumer_wakes_when_producer_dies);
	tcase_add_test(tc, test_producer_sees_killed_consumer_gone);
	return s;
}

static Suite *threads_suite(void)
{
	Suite *s = suite_create("threads");
	TCase *tc = tcase(s, "threads", 120);

	tcase_add_test(tc, test_threads_stream_verified);
	tcase_add_test(tc, test_threads_stream_verified_sleeping_consumer);
	tcase_add_test(tc, test_threads_stream_verified_one_mapping);
	tcase_add_test(tc, test_threads_ping_pong_never_loses_a_wakeup);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(procs_suite());
	int failed;

	srunner_add_suite(sr, threads_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
