/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the shmring check suites (tests/test_shmring*.c): both sides
 * of a ring in one process, values pushed and popped, a doorbell wait, and
 * tests/shmring_peer started as the other process. Built into each suite
 * from tests/shmring_util.c.
 */
#ifndef SHMRING_UTIL_H
#define SHMRING_UTIL_H

#include "shmring.h"

#include <check.h>
#include <stdint.h>
#include <sys/types.h>

#define NSEC_PER_SEC 1000000000ll
/* A sleeper's own timeout: longer than the limits, so a lost wake-up shows as a slow round. */
#define SLEEP_MS 5000
#define SPINS    256

/* A passing ck_assert records a mark point, one write(2) to the runner, so
 * loops that check every descriptor or round test first and only then fail. */
#define require(cond, ...)                                                                         \
	do {                                                                                       \
		if (!(cond))                                                                       \
			ck_abort_msg(__VA_ARGS__);                                                 \
	} while (0)

/* Both sides of one ring in this process: the memfd mapped twice. */
struct ring_pair {
	struct shmring prod;
	struct shmring cons;
};

int64_t now_ns(void);
/* Spin a little, then give the CPU away: on two cores the peer may need this one. */
void backoff(unsigned *spins);

/* Both sides of ring p, created with o; closed by pair_close(). */
void pair_open(struct ring_pair *p, const struct shmring_opts *o);
void pair_close(struct ring_pair *p);
/* Reserve up to n, write values first.. into them, commit. Returns the count reserved. */
int push_values(struct shmring *r, uint64_t first, uint32_t n);
/* Peek up to n, check they hold first.., release them. Returns the count. */
int pop_values(struct shmring *r, uint64_t first, uint32_t n);

/* fork+exec tests/shmring_peer (under $MV_BUILD, default "build") with args;
 * the fds in keep survive the exec. */
pid_t spawn_peer(const char *const *args, const int *keep, int nkeep);
const char *fd_arg(char buf[16], int fd);
/* Fails the test unless shmring_peer pid exited with status 0. */
void assert_peer_exited_ok(pid_t pid, const char *what);
/* 1 when the kernel has pidfd_open (Linux 5.3) for r's liveness checks; 0
 * after printing a SKIP line. */
int pidfd_supported(struct shmring *r);

/* A test case named name in s, timing out after timeout_s. */
TCase *tcase(Suite *s, const char *name, double timeout_s);

#endif /* SHMRING_UTIL_H */
