/* SPDX-License-Identifier: MIT */
/*
 * The check suites of the shmring library. Suite "shmring" covers the API in
 * one process (api, wrap, full_empty, errors: hand-written hostile segments),
 * then producer and consumer in separate processes (multiproc, sleep_wake,
 * dead_peer) with tests/shmring_peer as the other process, exec'd with the
 * ring's memfd inherited. Suite "threads" runs both sides as two threads of
 * one process, and is the one `make check-tsan` selects with
 * CK_RUN_SUITE=threads. Stream payloads carry sequence numbers and checksums
 * (the format matches tests/shmring_peer.c) and are verified on arrival.
 * MV_BUILD names the build tree holding tests/shmring_peer (default "build").
 */
#include "shmring.h"

#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MULTIPROC_COUNT  10000000ull
#define PING_PONG_ROUNDS 20000
#define DOORBELL_ROUNDS  5000
/* The same counts under ThreadSanitizer: the threads suite still takes seconds there. */
#define THREADS_STREAM_COUNT     4000000ull
#define THREADS_PING_PONG_ROUNDS 10000

#define NSEC_PER_SEC 1000000000ll
/* A round or a death notice slower than these is a lost wake-up, not noise. */
#define ROUND_LIMIT_NS (2 * NSEC_PER_SEC)
#define EPIPE_LIMIT_NS (1 * NSEC_PER_SEC)
/* A sleeper's own timeout: longer than the limits, so a lost wake-up shows as a slow round. */
#define SLEEP_MS 5000
#define SPINS    256

/* ---- descriptors: 64 bytes, same format and checksum as tests/shmring_peer.c ---- */

struct test_desc {
	uint64_t seq;
	uint64_t payload[6];
	uint64_t sum;
};

_Static_assert(sizeof(struct test_desc) == 64, "descriptors are 64 bytes");

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t desc_checksum(const struct test_desc *d)
{
	uint64_t h = 0xcbf29ce484222325ull ^ d->seq;

	for (int i = 0; i < 6; i++)
		h = (h ^ d->payload[i]) * 0x100000001b3ull;
	return h;
}

static void desc_fill(struct test_desc *d, uint64_t seq)
{
	d->seq = seq;
	for (int i = 0; i < 6; i++)
		d->payload[i] = mix64(seq * 8 + (uint64_t)i);
	d->sum = desc_checksum(d);
}

/* 1 if d is descriptor number seq and its checksum holds. */
static int desc_ok(const struct test_desc *d, uint64_t seq)
{
	return d->seq == seq && d->sum == desc_checksum(d);
}

/* Batch sizes that vary from call to call: mostly 1..64, now and then 300. */
static uint32_t next_batch(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return (*state & 15) == 0 ? 300 : 1 + (uint32_t)(*state >> 32) % 64;
}

/* ---- helpers ---- */

/* A passing ck_assert records a mark point, one write(2) to the runner, so
 * loops that check every descriptor or round test first and only then fail. */
#define require(cond, ...)                                                                         \
	do {                                                                                       \
		if (!(cond))                                                                       \
			ck_abort_msg(__VA_ARGS__);                                                 \
	} while (0)

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Spin a little, then give the CPU away: on two cores the peer may need this one. */
static void backoff(unsigned *spins)
{
	if (++*spins > SPINS) {
		sched_yield();
		*spins = 0;
	}
	cpu_relax();
}

/* Both sides of one ring in this process: the memfd mapped twice. */
struct ring_pair {
	struct shmring prod;
	struct shmring cons;
};

static void pair_open(struct ring_pair *p, const struct shmring_opts *o)
{
	int err, fd;

	err = shmring_create(&p->prod, o, SHMRING_PRODUCER);
	ck_assert_msg(err == 0, "create: %d (%s)", err, shmring_error(&p->prod));
	fd = dup(shmring_fd(&p->prod));
	ck_assert_int_ge(fd, 0);
	err = shmring_attach(&p->cons, fd, SHMRING_CONSUMER);
	ck_assert_msg(err == 0, "attach: %d (%s)", err, shmring_error(&p->cons));
}

static void pair_close(struct ring_pair *p)
{
	shmring_close(&p->cons);
	shmring_close(&p->prod);
}

/* Reserve up to n, write values first.. into them, commit. Returns the count reserved. */
static int push_values(struct shmring *r, uint64_t first, uint32_t n)
{
	uint32_t pos = 0;
	int got = shmring_reserve(r, n, &pos);

	for (int i = 0; i < got; i++)
		*(uint64_t *)shmring_slot(r, pos + (uint32_t)i) = first + (uint64_t)i;
	if (got > 0)
		shmring_commit(r);
	return got;
}

/* Peek up to n, check they hold first.., release them. Returns the count. */
static int pop_values(struct shmring *r, uint64_t first, uint32_t n)
{
	uint32_t pos = 0;
	int got = shmring_peek(r, n, &pos);

	for (int i = 0; i < got; i++) {
		uint64_t v = *(uint64_t *)shmring_slot(r, pos + (uint32_t)i);

		require(v == first + (uint64_t)i, "entry %" PRIu64 " holds %" PRIu64,
		        first + (uint64_t)i, v);
	}
	if (got > 0)
		shmring_release(r, (uint32_t)got);
	return got;
}

/* Consumer side of a doorbell: arm, sleep on the eventfd, disarm. Same contract
 * as shmring_wait(): 1 entries, 0 timeout, <0 error. */
static int wait_doorbell(struct shmring *r, int efd, int timeout_ms)
{
	uint32_t pos = 0;
	int n;

	for (;;) {
		n = shmring_peek(r, 1, &pos);
		if (n != 0)
			return n;
		if (shmring_arm_doorbell(r))
			return 1;
		struct pollfd p = {.fd = efd, .events = POLLIN};
		n = poll(&p, 1, timeout_ms);
		if (n > 0) {
			uint64_t v;
			/* Drain the counter; a stale count only costs a spurious wake. */
			if (read(efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				n = -errno;
		}
		shmring_disarm(r);
		if (n <= 0)
			return n < 0 ? n : shmring_peek(r, 1, &pos);
	}
}

/* ---- the helper process ---- */

static const char *peer_path(void)
{
	static char path[PATH_MAX];
	const char *build = getenv("MV_BUILD");

	snprintf(path, sizeof(path), "%s/tests/shmring_peer", build && *build ? build : "build");
	return path;
}

/* fork+exec shmring_peer with args; the fds in keep survive the exec. */
static pid_t spawn_peer(const char *const *args, const int *keep, int nkeep)
{
	const char *path = peer_path();
	char *argv[12];
	int argc = 0;
	pid_t pid;

	ck_assert_msg(access(path, X_OK) == 0, "helper %s: %s (build it: make all)", path,
	              strerror(errno));
	argv[argc++] = (char *)path;
	while (*args && argc < 11)
		argv[argc++] = (char *)*args++;
	argv[argc] = NULL;

	pid = fork();
	ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		/* Never outlive a failed test: die with the test process. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int i = 0; i < nkeep; i++)
			fcntl(keep[i], F_SETFD, 0);
		execv(path, argv);
		_exit(127);
	}
	return pid;
}

static const char *fd_arg(char buf[16], int fd)
{
	snprintf(buf, 16, "%d", fd);
	return buf;
}

static void assert_peer_exited_ok(pid_t pid, const char *what)
{
	int st;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	              "%s: shmring_peer %s %d (1 bad descriptor, 2 usage, 3 ring broke)", what,
	              WIFEXITED(st) ? "exited with" : "killed by signal",
	              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

/* pidfd_open arrived in Linux 5.3; without it the liveness tests cannot run. */
static int pidfd_supported(struct shmring *r)
{
	int err = shmring_watch_peer(r, getpid());

	if (err == -ENOSYS) {
		printf("SKIP: pidfd_open is not supported by this kernel: %s\n", shmring_error(r));
		return 0;
	}
	ck_assert_msg(err == 0, "watch_peer(self): %s", shmring_error(r));
	return 1;
}

/* ================================ api ================================ */

START_TEST(test_create_and_attach_map_one_sealed_segment)
{
	struct shmring_opts o = {.capacity = 64, .slot_size = 128, .user = 0xfeedull};
	struct ring_pair p;
	struct stat st;
	int seals;

	pair_open(&p, &o);
	ck_assert_uint_eq(p.cons.capacity, 64);
	ck_assert_uint_eq(p.cons.slot_size, 128);
	ck_assert_uint_eq(p.cons.mask, 63);
	ck_assert_uint_eq(p.cons.lay->hdr.user, 0xfeedull);
	ck_assert_int_eq(p.cons.lay->hdr.magic == SHMRING_MAGIC, 1);
	ck_assert_uint_eq(p.cons.lay->hdr.abi, SHMRING_ABI);
	ck_assert_int_eq(atomic_load(&p.cons.lay->prod.pid), getpid());
	ck_assert_int_eq(atomic_load(&p.cons.lay->cons.pid), getpid());

	ck_assert_int_eq(fstat(shmring_fd(&p.prod), &st), 0);
	ck_assert_int_eq(st.st_size, SHMRING_SLOTS_OFF + 64 * 128);
	seals = fcntl(shmring_fd(&p.prod), F_GET_SEALS);
	ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
	                 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);

	/* Two mappings of one segment: a write through one is read through the other. */
	ck_assert_ptr_ne(p.prod.lay, p.cons.lay);
	memset(shmring_slot(&p.prod, 5), 0xa5, 128);
	ck_assert_int_eq(((uint8_t *)shmring_slot(&p.cons, 5))[127], 0xa5);
	pair_close(&p);
}
END_TEST

START_TEST(test_batches_round_trip_in_order)
{
	struct shmring_opts o = {.capacity = 256};
	struct ring_pair p;
	uint64_t sent = 0, got = 0;

	pair_open(&p, &o);
	for (uint32_t batch = 1; batch <= 256; batch += 17) {
		for (int round = 0; round < 20; round++) {
			ck_assert_int_eq(push_values(&p.prod, sent, batch), batch);
			sent += batch;
			/* Consume in two parts to check partial releases too. */
			uint32_t half = batch / 2;
			ck_assert_int_eq(pop_values(&p.cons, got, half), half);
			got += half;
			ck_assert_int_eq(pop_values(&p.cons, got, batch), batch - half);
			got += batch - half;
		}
	}
	ck_assert_uint_eq(sent, got);
	pair_close(&p);
}
END_TEST

START_TEST(test_uncommitted_slots_stay_invisible)
{
	struct ring_pair p;
	uint32_t pos = 0, cpos = 0;

	pair_open(&p, NULL);
	ck_assert_int_eq(shmring_reserve(&p.prod, 3, &pos), 3);
	for (uint32_t i = 0; i < 3; i++)
		*(uint64_t *)shmring_slot(&p.prod, pos + i) = 40 + i;
	ck_assert_int_eq(shmring_peek(&p.cons, 3, &cpos), 0);
	ck_assert_uint_eq(shmring_count(&p.cons), 0);
	shmring_commit(&p.prod);
	ck_assert_uint_eq(shmring_count(&p.cons), 3);
	ck_assert_int_eq(pop_values(&p.cons, 40, 3), 3);
	pair_close(&p);
}
END_TEST

START_TEST(test_peek_without_release_returns_same_slots)
{
	struct ring_pair p;
	uint32_t pos1 = 0, pos2 = 0;

	pair_open(&p, NULL);
	ck_assert_int_eq(push_values(&p.prod, 100, 5), 5);
	ck_assert_int_eq(shmring_peek(&p.cons, 8, &pos1), 5);
	ck_assert_int_eq(shmring_peek(&p.cons, 8, &pos2), 5);
	ck_assert_uint_eq(pos1, pos2);
	shmring_release(&p.cons, 2);
	ck_assert_int_eq(shmring_peek(&p.cons, 8, &pos2), 3);
	ck_assert_uint_eq(pos2, pos1 + 2);
	ck_assert_uint_eq(*(uint64_t *)shmring_slot(&p.cons, pos2), 102);
	pair_close(&p);
}
END_TEST

START_TEST(test_cancel_and_unreserve_drop_uncommitted_slots)
{
	struct shmring_opts o = {.capacity = 16};
	struct ring_pair p;
	uint32_t pos = 0, again = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 2), 2);
	ck_assert_uint_eq(shmring_reserved(&p.prod), 0);
	ck_assert_int_eq(shmring_reserve(&p.prod, 10, &pos), 10);
	ck_assert_uint_eq(shmring_reserved(&p.prod), 10);

	/* Give back the last 4: the next reserve starts where they began. */
	shmring_unreserve(&p.prod, 4);
	ck_assert_uint_eq(shmring_reserved(&p.prod), 6);
	ck_assert_int_eq(shmring_reserve(&p.prod, 1, &again), 1);
	ck_assert_uint_eq(again, pos + 6);

	/* Cancel all of them: none is ever seen, the room is back. */
	shmring_cancel(&p.prod);
	ck_assert_uint_eq(shmring_reserved(&p.prod), 0);
	shmring_commit(&p.prod);
	ck_assert_uint_eq(shmring_count(&p.cons), 2);
	ck_assert_int_eq(shmring_reserve(&p.prod, 100, &again), 14);
	ck_assert_uint_eq(again, pos);
	shmring_cancel(&p.prod);
	ck_assert_int_eq(pop_values(&p.cons, 0, 16), 2);
	ck_assert_int_eq(push_values(&p.prod, 2, 3), 3);
	ck_assert_int_eq(pop_values(&p.cons, 2, 16), 3);
	pair_close(&p);
}
END_TEST

START_TEST(test_slot_size_chosen_at_creation)
{
	static const uint32_t sizes[] = {16, 64, 256, 4096};

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		struct shmring_opts o = {.capacity = 32, .slot_size = sizes[s]};
		struct ring_pair p;
		uint32_t pos = 0;

		pair_open(&p, &o);
		ck_assert_uint_eq(p.prod.slot_size, sizes[s]);
		ck_assert_uint_eq(p.cons.slot_size, sizes[s]);
		ck_assert_uint_eq((uint8_t *)shmring_slot(&p.prod, 1) -
		                      (uint8_t *)shmring_slot(&p.prod, 0),
		                  sizes[s]);
		/* Fill every slot to its last byte; no slot may overwrite a neighbour. */
		for (int lap = 0; lap < 3; lap++) {
			ck_assert_int_eq(shmring_reserve(&p.prod, 32, &pos), 32);
			for (uint32_t i = 0; i < 32; i++)
				memset(shmring_slot(&p.prod, pos + i), (int)(i + (uint32_t)lap),
				       sizes[s]);
			shmring_commit(&p.prod);
			ck_assert_int_eq(shmring_peek(&p.cons, 32, &pos), 32);
			for (uint32_t i = 0; i < 32; i++) {
				const uint8_t *b = shmring_slot(&p.cons, pos + i);

				for (uint32_t k = 0; k < sizes[s]; k++)
					require(b[k] == (uint8_t)(i + (uint32_t)lap),
					        "slot %u byte %u of %u", i, k, sizes[s]);
			}
			shmring_release(&p.cons, 32);
		}
		pair_close(&p);
	}
}
END_TEST

START_TEST(test_default_sizes_without_opts)
{
	struct shmring r;
	struct stat st;

	ck_assert_int_eq(shmring_create(&r, NULL, SHMRING_PRODUCER), 0);
	ck_assert_uint_eq(r.capacity, 1024);
	ck_assert_uint_eq(r.slot_size, 64);
	ck_assert_int_eq(fstat(shmring_fd(&r), &st), 0);
	ck_assert_int_eq(st.st_size, SHMRING_SLOTS_OFF + 1024 * 64);
	ck_assert_uint_eq(r.lay->hdr.seg_size, (uint64_t)st.st_size);
	shmring_close(&r);
}
END_TEST

START_TEST(test_creator_may_take_either_role)
{
	struct shmring c, pr;

	ck_assert_int_eq(shmring_create(&c, NULL, SHMRING_CONSUMER), 0);
	ck_assert_int_eq(shmring_attach(&pr, dup(shmring_fd(&c)), SHMRING_PRODUCER), 0);
	ck_assert_int_eq(push_values(&pr, 7, 1024), 1024);
	ck_assert_int_eq(push_values(&pr, 0, 1), 0);
	ck_assert_int_eq(pop_values(&c, 7, 2000), 1024);
	shmring_close(&pr);
	shmring_close(&c);
}
END_TEST

START_TEST(test_close_is_safe_on_zeroed_and_closed_handles)
{
	struct shmring r = {0};

	r.fd = r.pidfd = -1;
	shmring_close(&r);
	ck_assert_int_eq(shmring_create(&r, NULL, SHMRING_PRODUCER), 0);
	shmring_close(&r);
	shmring_close(&r);
	ck_assert_ptr_null(r.lay);
}
END_TEST

START_TEST(test_arm_reports_entries_or_sets_need_wakeup)
{
	struct ring_pair p;

	pair_open(&p, NULL);
	ck_assert_int_eq(shmring_arm(&p.cons), 0);
	ck_assert_uint_eq(atomic_load(&p.cons.lay->sleep.flags) & SHMRING_NEED_WAKEUP,
	                  SHMRING_NEED_WAKEUP);
	/* The commit sees the flag, clears it and bumps the futex word. */
	uint32_t seq = atomic_load(&p.cons.lay->sleep.wake_seq);
	ck_assert_int_eq(push_values(&p.prod, 1, 1), 1);
	ck_assert_uint_eq(atomic_load(&p.cons.lay->sleep.flags) & SHMRING_NEED_WAKEUP, 0);
	ck_assert_uint_eq(atomic_load(&p.cons.lay->sleep.wake_seq), seq + 1);
	shmring_disarm(&p.cons);

	/* Entries already there: arming reports them and leaves no flag behind. */
	ck_assert_int_eq(shmring_arm(&p.cons), 1);
	ck_assert_uint_eq(atomic_load(&p.cons.lay->sleep.flags) & SHMRING_NEED_WAKEUP, 0);
	ck_assert_int_eq(shmring_wait(&p.cons, -1), 1);
	pair_close(&p);
}
END_TEST

START_TEST(test_watch_peer_needs_a_recorded_pid)
{
	struct shmring c;

	ck_assert_int_eq(shmring_create(&c, NULL, SHMRING_CONSUMER), 0);
	ck_assert_int_eq(shmring_peer_alive(&c), -ENOTCONN);
	ck_assert_int_eq(shmring_watch_peer(&c, 0), -ENOTCONN);
	ck_assert_ptr_nonnull(strstr(shmring_error(&c), "pid"));
	if (pidfd_supported(&c)) {
		ck_assert_int_ge(shmring_peer_pidfd(&c), 0);
		ck_assert_int_eq(shmring_peer_alive(&c), 1);
	}
	shmring_close(&c);
}
END_TEST

/* ================================ wrap ================================ */

/* Stream count values through a ring whose indices start at start, in batches
 * of varying size, keeping up to a full ring in flight. Returns whether the
 * index wrapped past 2^32 on the way. */
static int stream_across(uint32_t start, uint32_t capacity, uint64_t count)
{
	struct shmring_opts o = {.capacity = capacity, .start = start};
	struct ring_pair p;
	uint64_t sent = 0, got = 0, state = 88172645463325252ull;
	int wrapped = 0;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(shmring_reserve(&p.prod, 0, &pos), 0);
	ck_assert_uint_eq(pos, start);
	while (got < count) {
		uint32_t n = next_batch(&state);

		if (sent < count) {
			if (n > count - sent)
				n = (uint32_t)(count - sent);
			sent += (uint64_t)push_values(&p.prod, sent, n);
		}
		int k = shmring_peek(&p.cons, next_batch(&state), &pos);
		require(k >= 0, "peek: %s", shmring_error(&p.cons));
		if (k > 0 && pos + (uint32_t)k - 1 < pos)
			wrapped = 1;
		if (k > 0 && pos < start)
			wrapped = 1;
		require(pop_values(&p.cons, got, (uint32_t)k) == k, "entries vanished at %" PRIu64,
		        got);
		got += (uint64_t)k;
	}
	ck_assert_uint_eq(shmring_count(&p.cons), 0);
	pair_close(&p);
	return wrapped;
}

START_TEST(test_stream_crosses_2_32_from_max_minus_5)
{
	ck_assert_int_eq(stream_across(UINT32_MAX - 5, 16, 2000), 1);
}
END_TEST

START_TEST(test_stream_crosses_2_32_from_max_minus_1000)
{
	ck_assert_int_eq(stream_across(UINT32_MAX - 1000, 1024, 20000), 1);
}
END_TEST

START_TEST(test_full_and_empty_detected_across_2_32)
{
	struct shmring_opts o = {.capacity = 8, .start = UINT32_MAX - 3};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 8), 8); /* tail is now 4 */
	ck_assert_uint_eq(atomic_load(&p.prod.lay->prod.idx), 4);
	ck_assert_int_eq(shmring_reserve(&p.prod, 1, &pos), 0);
	ck_assert_uint_eq(shmring_count(&p.cons), 8);
	ck_assert_int_eq(pop_values(&p.cons, 0, 9), 8);
	ck_assert_int_eq(shmring_peek(&p.cons, 1, &pos), 0);
	ck_assert_int_eq(push_values(&p.prod, 8, 3), 3);
	ck_assert_int_eq(pop_values(&p.cons, 8, 3), 3);
	pair_close(&p);
}
END_TEST

START_TEST(test_attach_accepts_indices_straddling_2_32)
{
	struct shmring_opts o = {.capacity = 16, .start = UINT32_MAX - 2};
	struct ring_pair p;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 50, 10), 10); /* tail 7, head 2^32 - 3 */
	shmring_close(&p.cons);
	ck_assert_int_eq(shmring_attach(&p.cons, dup(shmring_fd(&p.prod)), SHMRING_CONSUMER), 0);
	ck_assert_int_eq(pop_values(&p.cons, 50, 16), 10);
	pair_close(&p);
}
END_TEST

/* ============================= full_empty ============================= */

START_TEST(test_reserve_on_full_ring_returns_zero)
{
	struct shmring_opts o = {.capacity = 16};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 16), 16);
	ck_assert_int_eq(shmring_reserve(&p.prod, 1, &pos), 0);
	ck_assert_int_eq(shmring_reserve(&p.prod, 100, &pos), 0);
	ck_assert_uint_eq(shmring_count(&p.prod), 16);
	/* One release makes room for exactly one. */
	ck_assert_int_eq(pop_values(&p.cons, 0, 1), 1);
	ck_assert_int_eq(shmring_reserve(&p.prod, 100, &pos), 1);
	ck_assert_int_eq(shmring_reserve(&p.prod, 1, &pos), 0);
	pair_close(&p);
}
END_TEST

START_TEST(test_peek_on_empty_ring_returns_zero)
{
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, NULL);
	ck_assert_int_eq(shmring_peek(&p.cons, 1, &pos), 0);
	ck_assert_int_eq(shmring_peek(&p.cons, 1000, &pos), 0);
	ck_assert_int_eq(push_values(&p.prod, 0, 4), 4);
	ck_assert_int_eq(pop_values(&p.cons, 0, 4), 4);
	ck_assert_int_eq(shmring_peek(&p.cons, 1, &pos), 0);
	ck_assert_int_eq(shmring_wait(&p.cons, 0), 0);
	pair_close(&p);
}
END_TEST

START_TEST(test_reserve_returns_what_fits)
{
	struct shmring_opts o = {.capacity = 8};
	struct ring_pair p;
	uint32_t pos = 0, first = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(shmring_reserve(&p.prod, 5, &first), 5);
	ck_assert_int_eq(shmring_reserve(&p.prod, 5, &pos), 3);
	ck_assert_uint_eq(pos, first + 5);
	/* Reserved but uncommitted slots count toward full. */
	ck_assert_int_eq(shmring_reserve(&p.prod, 5, &pos), 0);
	for (uint32_t i = 0; i < 8; i++)
		*(uint64_t *)shmring_slot(&p.prod, first + i) = i;
	shmring_commit(&p.prod);
	ck_assert_int_eq(pop_values(&p.cons, 0, 2), 2);
	ck_assert_int_eq(shmring_reserve(&p.prod, 5, &pos), 2);
	pair_close(&p);
}
END_TEST

START_TEST(test_peek_returns_what_is_committed)
{
	struct shmring_opts o = {.capacity = 64};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 3), 3);
	ck_assert_int_eq(shmring_peek(&p.cons, 10, &pos), 3);
	ck_assert_int_eq(push_values(&p.prod, 3, 20), 20);
	/* A cached tail that covers the request is enough; a larger request re-reads it. */
	ck_assert_int_eq(shmring_peek(&p.cons, 2, &pos), 2);
	ck_assert_int_eq(shmring_peek(&p.cons, 30, &pos), 23);
	ck_assert_int_eq(pop_values(&p.cons, 0, 23), 23);
	pair_close(&p);
}
END_TEST

/* ================================ errors ================================ */

/* A header as shmring_create() writes it, for a ring of cap slots of slot bytes. */
static void layout_valid(struct shmring_layout *l, uint32_t cap, uint32_t slot)
{
	memset(l, 0, sizeof(*l));
	l->hdr.magic = SHMRING_MAGIC;
	l->hdr.abi = SHMRING_ABI;
	l->hdr.hdr_size = sizeof(struct shmring_layout);
	l->hdr.slot_size = slot;
	l->hdr.capacity = cap;
	l->hdr.slots_off = SHMRING_SLOTS_OFF;
	l->hdr.seg_size = SHMRING_SLOTS_OFF + (uint64_t)cap * slot;
}

/* A memfd of size bytes starting with l, sealed against resizing if seals. */
static int segment_from_layout(const struct shmring_layout *l, off_t size, int seals)
{
	int fd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	size_t len = sizeof(*l) < (size_t)size ? sizeof(*l) : (size_t)size;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, size), 0);
	ck_assert_int_eq(pwrite(fd, l, len, 0), (ssize_t)len);
	if (seals)
		ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

static int segment_sealed(const struct shmring_layout *l)
{
	return segment_from_layout(l, (off_t)l->hdr.seg_size, F_SEAL_SHRINK | F_SEAL_GROW);
}

/* Attaching fd must fail with want and an error naming why; fd stays ours. */
static void assert_attach_fails(int fd, int want, const char *why)
{
	struct shmring r;
	int err = shmring_attach(&r, fd, SHMRING_CONSUMER);

	ck_assert_msg(err == want, "attach returned %d (%s), expected %d", err, shmring_error(&r),
	              want);
	ck_assert_msg(strstr(shmring_error(&r), why) != NULL, "error \"%s\" does not name \"%s\"",
	              shmring_error(&r), why);
	ck_assert_ptr_null(r.lay);
	if (fd >= 0) {
		ck_assert_msg(fcntl(fd, F_GETFD) >= 0, "a failed attach closed the caller's fd");
		close(fd);
	}
}

START_TEST(test_attach_accepts_handwritten_valid_layout)
{
	struct shmring_layout l;
	struct shmring r;

	layout_valid(&l, 16, 64);
	ck_assert_int_eq(shmring_attach(&r, segment_sealed(&l), SHMRING_CONSUMER), 0);
	ck_assert_uint_eq(r.capacity, 16);
	shmring_close(&r);
}
END_TEST

START_TEST(test_create_rejects_impossible_opts)
{
	static const struct {
		struct shmring_opts o;
		const char *why;
	} bad[] = {
	    {{.capacity = 1000}, "capacity"},   {{.capacity = 1u << 25}, "capacity"},
	    {{.slot_size = 8}, "slot size"},    {{.slot_size = 24}, "slot size"},
	    {{.slot_size = 8192}, "slot size"},
	};
	struct shmring r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(shmring_create(&r, &bad[i].o, SHMRING_PRODUCER), -EINVAL);
		ck_assert_msg(strstr(shmring_error(&r), bad[i].why), "case %zu: \"%s\"", i,
		              shmring_error(&r));
		ck_assert_int_eq(r.fd, -1);
	}
	ck_assert_int_eq(shmring_create(&r, NULL, (enum shmring_role)7), -EINVAL);
	ck_assert_ptr_nonnull(strstr(shmring_error(&r), "role"));
}
END_TEST

START_TEST(test_attach_rejects_bad_magic)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	l.hdr.magic ^= 1;
	assert_attach_fails(segment_sealed(&l), -ENOEXEC, "magic");
}
END_TEST

START_TEST(test_attach_rejects_other_abi)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	l.hdr.abi = SHMRING_ABI + 1;
	assert_attach_fails(segment_sealed(&l), -EPROTO, "ABI");
	layout_valid(&l, 16, 64);
	l.hdr.hdr_size = 256;
	assert_attach_fails(segment_sealed(&l), -EPROTO, "header size");
}
END_TEST

START_TEST(test_attach_rejects_segment_smaller_than_header)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	assert_attach_fails(segment_from_layout(&l, 100, F_SEAL_SHRINK | F_SEAL_GROW), -EINVAL,
	                    "smaller");
	assert_attach_fails(segment_from_layout(&l, 0, F_SEAL_SHRINK | F_SEAL_GROW), -EINVAL,
	                    "smaller");
	assert_attach_fails(
	    segment_from_layout(&l, SHMRING_SLOTS_OFF - 1, F_SEAL_SHRINK | F_SEAL_GROW), -EINVAL,
	    "smaller");
}
END_TEST

START_TEST(test_attach_rejects_bad_capacity)
{
	static const uint32_t caps[] = {0, 3, 24, 1000, 1u << 25, 1u << 31, UINT32_MAX};
	struct shmring_layout l;

	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		layout_valid(&l, 16, 64);
		l.hdr.capacity = caps[i];
		assert_attach_fails(segment_sealed(&l), -EINVAL, "capacity");
	}
}
END_TEST

START_TEST(test_attach_rejects_capacity_beyond_segment)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	l.hdr.capacity = 1u << 20; /* 64 MiB of slots in a 2 KiB segment */
	assert_attach_fails(segment_sealed(&l), -EINVAL, "do not fit");
	layout_valid(&l, 16, 64);
	l.hdr.capacity = SHMRING_MAX_CAPACITY;
	l.hdr.slot_size = SHMRING_MAX_SLOT; /* 2^36 bytes: overflows 32 bits */
	assert_attach_fails(segment_sealed(&l), -EINVAL, "do not fit");
	layout_valid(&l, 16, 64);
	l.hdr.capacity = 32; /* one slot-ring too many for the segment */
	assert_attach_fails(segment_sealed(&l), -EINVAL, "do not fit");
}
END_TEST

START_TEST(test_attach_rejects_bad_slot_size)
{
	static const uint32_t sizes[] = {0, 3, 8, 24, 8192, 1u << 20, UINT32_MAX};
	struct shmring_layout l;

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		layout_valid(&l, 16, 64);
		l.hdr.slot_size = sizes[i];
		assert_attach_fails(segment_sealed(&l), -EINVAL, "slot size");
	}
}
END_TEST

START_TEST(test_attach_rejects_slots_off_out_of_range)
{
	struct shmring_layout l;
	uint64_t seg = SHMRING_SLOTS_OFF + 16 * 64;
	const uint64_t offs[] = {
	    0,                                  /* slots over the header */
	    sizeof(struct shmring_layout) - 64, /* last header line */
	    SHMRING_SLOTS_OFF + 1,              /* not 64-byte aligned */
	    SHMRING_SLOTS_OFF + 64,             /* last slot past the end */
	    seg,                                /* all slots past the end */
	    seg + 4096,                         /* outside the segment */
	    UINT64_MAX & ~63ull,                /* wraps a 64-bit sum */
	};

	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		layout_valid(&l, 16, 64);
		l.hdr.slots_off = offs[i];
		assert_attach_fails(segment_sealed(&l), -EINVAL, "do not fit");
	}
}
END_TEST

START_TEST(test_attach_rejects_seg_size_other_than_file)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	l.hdr.seg_size += 4096;
	assert_attach_fails(
	    segment_from_layout(&l, SHMRING_SLOTS_OFF + 16 * 64, F_SEAL_SHRINK | F_SEAL_GROW),
	    -EINVAL, "segment has");
}
END_TEST

START_TEST(test_attach_rejects_unsealed_memfd)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	assert_attach_fails(segment_from_layout(&l, (off_t)l.hdr.seg_size, 0), -EBADF, "sealed");
	assert_attach_fails(segment_from_layout(&l, (off_t)l.hdr.seg_size, F_SEAL_SHRINK), -EBADF,
	                    "sealed");
	assert_attach_fails(segment_from_layout(&l, (off_t)l.hdr.seg_size, F_SEAL_GROW), -EBADF,
	                    "sealed");
}
END_TEST

START_TEST(test_attach_rejects_bad_fd_and_role)
{
	struct shmring_layout l;
	struct shmring r;
	int fd;

	assert_attach_fails(-1, -EBADF, "fstat");
	layout_valid(&l, 16, 64);
	fd = segment_sealed(&l);
	ck_assert_int_eq(shmring_attach(&r, fd, (enum shmring_role)0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(shmring_error(&r), "role"));
	close(fd);
}
END_TEST

START_TEST(test_attach_rejects_indices_more_than_capacity_apart)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	atomic_store(&l.prod.idx, 17); /* tail 17 ahead of head 0 */
	assert_attach_fails(segment_sealed(&l), -EPROTO, "indices");
	layout_valid(&l, 16, 64);
	atomic_store(&l.cons.idx, 1); /* head past the tail */
	assert_attach_fails(segment_sealed(&l), -EPROTO, "indices");
	layout_valid(&l, 16, 64);
	atomic_store(&l.prod.idx, 5);
	atomic_store(&l.cons.idx, UINT32_MAX - 10); /* 16 apart across 2^32: legal */
	struct shmring r;
	ck_assert_int_eq(shmring_attach(&r, segment_sealed(&l), SHMRING_CONSUMER), 0);
	ck_assert_uint_eq(shmring_count(&r), 16);
	shmring_close(&r);
}
END_TEST

START_TEST(test_peek_accepts_tail_a_full_ring_ahead)
{
	struct shmring_opts o = {.capacity = 16};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 16), 16);
	ck_assert_int_eq(pop_values(&p.cons, 0, 4), 4);
	uint32_t head = atomic_load(&p.prod.lay->cons.idx);

	/* A tail exactly capacity ahead of the head is a full ring, not corruption. */
	atomic_store(&p.prod.lay->prod.idx, head + 16);
	ck_assert_int_eq(shmring_peek(&p.cons, 100, &pos), 16);
	ck_assert_uint_eq(pos, head);
	pair_close(&p);
}
END_TEST

START_TEST(test_corrupt_peer_stays_rejected)
{
	struct shmring_opts o = {.capacity = 16};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 3), 3);
	uint32_t good = atomic_load(&p.prod.lay->prod.idx);
	atomic_store(&p.prod.lay->prod.idx, good + 1000);
	ck_assert_int_eq(shmring_peek(&p.cons, 16, &pos), -EPROTO);
	/* The peer puts a plausible index back: it is still not believed. */
	atomic_store(&p.prod.lay->prod.idx, good);
	ck_assert_int_eq(shmring_peek(&p.cons, 1, &pos), -EPROTO);
	ck_assert_int_eq(shmring_wait(&p.cons, 100), -EPROTO);
	/* Same on the producer side for an impossible consumer head. */
	atomic_store(&p.prod.lay->cons.idx, good + 1000);
	ck_assert_int_eq(shmring_reserve(&p.prod, 16, &pos), -EPROTO);
	atomic_store(&p.prod.lay->cons.idx, good);
	ck_assert_int_eq(shmring_reserve(&p.prod, 1, &pos), -EPROTO);
	pair_close(&p);
}
END_TEST

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

START_TEST(test_peek_rejects_producer_tail_far_ahead)
{
	static const uint32_t ahead[] = {17, 1000, 0x80000000u, UINT32_MAX /* one behind */};

	for (size_t i = 0; i < sizeof(ahead) / sizeof(ahead[0]); i++) {
		struct shmring_opts o = {.capacity = 16, .start = UINT32_MAX - 7};
		struct ring_pair p;
		uint32_t pos = 0;

		pair_open(&p, &o);
		ck_assert_int_eq(push_values(&p.prod, 0, 5), 5);
		ck_assert_int_eq(pop_values(&p.cons, 0, 5), 5);
		uint32_t head = atomic_load(&p.prod.lay->cons.idx);

		/* The consumer has nothing cached, so it must read the bad tail:
		 * no entries, a reason, and no sleeping on it. */
		atomic_store(&p.prod.lay->prod.idx, head + ahead[i]);
		ck_assert_int_eq(shmring_peek(&p.cons, 1, &pos), -EPROTO);
		ck_assert_int_eq(shmring_peek(&p.cons, 100, &pos), -EPROTO);
		ck_assert_msg(strstr(shmring_error(&p.cons), "producer tail"), "case %zu: \"%s\"",
		              i, shmring_error(&p.cons));
		ck_assert_int_eq(p.cons.corrupt, 1);
		ck_assert_int_eq(shmring_wait(&p.cons, 1000), -EPROTO);
		ck_assert_int_eq(shmring_arm(&p.cons), 1); /* "entries": go and peek, get -EPROTO */
		ck_assert_uint_le(shmring_count(&p.cons), 16);
		pair_close(&p);
	}
}
END_TEST

START_TEST(test_reserve_rejects_impossible_consumer_head)
{
	static const uint32_t behind[] = {UINT32_MAX /* one past the tail */, 17, 1000,
	                                  0x80000000u};

	for (size_t i = 0; i < sizeof(behind) / sizeof(behind[0]); i++) {
		struct shmring_opts o = {.capacity = 16, .start = UINT32_MAX - 7};
		struct ring_pair p;
		uint32_t pos = 0;

		pair_open(&p, &o);
		ck_assert_int_eq(push_values(&p.prod, 0, 16), 16);
		uint32_t tail = atomic_load(&p.prod.lay->prod.idx);

		/* A full ring makes the producer re-read the head. */
		atomic_store(&p.cons.lay->cons.idx, tail - behind[i]);
		ck_assert_int_eq(shmring_reserve(&p.prod, 1, &pos), -EPROTO);
		ck_assert_int_eq(shmring_reserve(&p.prod, 16, &pos), -EPROTO);
		ck_assert_msg(strstr(shmring_error(&p.prod), "consumer head"), "case %zu: \"%s\"",
		              i, shmring_error(&p.prod));
		ck_assert_int_eq(p.prod.corrupt, 1);
		pair_close(&p);
	}
}
END_TEST

START_TEST(test_reserve_accepts_every_possible_consumer_head)
{
	struct shmring_opts o = {.capacity = 16, .start = UINT32_MAX - 7};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 16), 16);
	uint32_t tail = atomic_load(&p.prod.lay->prod.idx);

	/* Any head from a full ring behind the tail up to the tail is possible;
	 * the room it leaves is exactly what it released. */
	for (uint32_t free_slots = 0; free_slots <= 16; free_slots++) {
		atomic_store(&p.cons.lay->cons.idx, tail - 16 + free_slots);
		ck_assert_int_eq(shmring_reserve(&p.prod, 100, &pos), free_slots);
		ck_assert_uint_eq(pos, tail);
		shmring_cancel(&p.prod);
	}
	pair_close(&p);
}
END_TEST

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
		uint32_t want = next_batch(&state), pos = 0;

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
		int n = shmring_peek(&r, next_batch(&state), &pos);

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
		uint32_t want = next_batch(&state), pos = 0;

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
		int n = shmring_peek(s->r, next_batch(&state), &pos);

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

static TCase *tcase(Suite *s, const char *name, double timeout_s)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, timeout_s);
	suite_add_tcase(s, tc);
	return tc;
}

static Suite *shmring_suite(void)
{
	Suite *s = suite_create("shmring");
	TCase *tc;

	tc = tcase(s, "api", 10);
	tcase_add_test(tc, test_create_and_attach_map_one_sealed_segment);
	tcase_add_test(tc, test_batches_round_trip_in_order);
	tcase_add_test(tc, test_uncommitted_slots_stay_invisible);
	tcase_add_test(tc, test_peek_without_release_returns_same_slots);
	tcase_add_test(tc, test_cancel_and_unreserve_drop_uncommitted_slots);
	tcase_add_test(tc, test_slot_size_chosen_at_creation);
	tcase_add_test(tc, test_default_sizes_without_opts);
	tcase_add_test(tc, test_creator_may_take_either_role);
	tcase_add_test(tc, test_close_is_safe_on_zeroed_and_closed_handles);
	tcase_add_test(tc, test_arm_reports_entries_or_sets_need_wakeup);
	tcase_add_test(tc, test_watch_peer_needs_a_recorded_pid);

	tc = tcase(s, "wrap", 10);
	tcase_add_test(tc, test_stream_crosses_2_32_from_max_minus_5);
	tcase_add_test(tc, test_stream_crosses_2_32_from_max_minus_1000);
	tcase_add_test(tc, test_full_and_empty_detected_across_2_32);
	tcase_add_test(tc, test_attach_accepts_indices_straddling_2_32);

	tc = tcase(s, "full_empty", 10);
	tcase_add_test(tc, test_reserve_on_full_ring_returns_zero);
	tcase_add_test(tc, test_peek_on_empty_ring_returns_zero);
	tcase_add_test(tc, test_reserve_returns_what_fits);
	tcase_add_test(tc, test_peek_returns_what_is_committed);

	tc = tcase(s, "errors", 10);
	tcase_add_test(tc, test_attach_accepts_handwritten_valid_layout);
	tcase_add_test(tc, test_create_rejects_impossible_opts);
	tcase_add_test(tc, test_attach_rejects_bad_magic);
	tcase_add_test(tc, test_attach_rejects_other_abi);
	tcase_add_test(tc, test_attach_rejects_segment_smaller_than_header);
	tcase_add_test(tc, test_attach_rejects_bad_capacity);
	tcase_add_test(tc, test_attach_rejects_capacity_beyond_segment);
	tcase_add_test(tc, test_attach_rejects_bad_slot_size);
	tcase_add_test(tc, test_attach_rejects_slots_off_out_of_range);
	tcase_add_test(tc, test_attach_rejects_seg_size_other_than_file);
	tcase_add_test(tc, test_attach_rejects_unsealed_memfd);
	tcase_add_test(tc, test_attach_rejects_bad_fd_and_role);
	tcase_add_test(tc, test_attach_rejects_indices_more_than_capacity_apart);
	tcase_add_test(tc, test_peek_accepts_tail_a_full_ring_ahead);
	tcase_add_test(tc, test_peek_rejects_producer_tail_far_ahead);
	tcase_add_test(tc, test_corrupt_peer_stays_rejected);
	tcase_add_test(tc, test_reserve_rejects_impossible_consumer_head);
	tcase_add_test(tc, test_reserve_accepts_every_possible_consumer_head);

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
	SRunner *sr = srunner_create(shmring_suite());
	int failed;

	srunner_add_suite(sr, threads_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
