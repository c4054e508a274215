/* SPDX-License-Identifier: MIT */
/*
 * shmring_peer: the other process of the shmring tests. tests/test_shmring_procs.c
 * creates a ring, clears CLOEXEC on its memfd and execs this program with the
 * fd number on argv; the program attaches as the role the command names and
 * produces, consumes (verifying every descriptor) or echoes, then exits with
 * a status the test asserts on. The descriptor format and its checksum are
 * tests/shmring_desc.h, which the tests include too.
 *
 *   shmring_peer produce FD COUNT [BATCH]     COUNT 0: until killed; BATCH 0: varying
 *   shmring_peer consume FD COUNT [BATCH]     verify seq and checksum of each
 *   shmring_peer echo FD_IN FD_OUT ROUNDS [EFD_IN EFD_OUT]
 *                                             ping-pong, sleeping between rounds;
 *                                             with eventfds, sleep on doorbells
 *
 * Exit status: 0 done, 1 a descriptor failed verification, 2 bad usage or
 * attach failure, 3 the ring broke (dead or corrupt peer, lost wake-up).
 */
#include "shmring.h"

#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmring_desc.h"

#define PEER_EXIT_OK     0
#define PEER_EXIT_VERIFY 1
#define PEER_EXIT_USAGE  2
#define PEER_EXIT_RING   3

/* A sleeping round longer than this is a lost wake-up, not a slow machine. */
#define PEER_WAIT_MS 5000
/* Spins on an empty or full ring before sleeping or yielding. */
#define PEER_SPINS 256

/* 0 if d is descriptor number seq, intact; else prints what is wrong and returns -EBADMSG. */
static int desc_verify(const struct test_desc *d, uint64_t seq)
{
	if (d->seq != seq) {
		fprintf(stderr, "shmring_peer: descriptor %" PRIu64 " carries seq %" PRIu64 "\n",
		        seq, d->seq);
		return -EBADMSG;
	}
	if (d->sum != desc_checksum(d)) {
		fprintf(stderr, "shmring_peer: descriptor %" PRIu64 " fails its checksum\n", seq);
		return -EBADMSG;
	}
	return 0;
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	*v = strtoull(s, &end, 0);
	return *s && !*end ? 0 : -EINVAL;
}

static int attach(struct shmring *r, const char *fdarg, enum shmring_role role)
{
	uint64_t fd;
	int err;

	if (parse_u64(fdarg, &fd) < 0 || fd > INT32_MAX) {
		fprintf(stderr, "shmring_peer: '%s' is not a file descriptor number\n", fdarg);
		return -EINVAL;
	}
	err = shmring_attach(r, (int)fd, role);
	if (err < 0)
		fprintf(stderr, "shmring_peer: attach fd %d: %s\n", (int)fd, shmring_error(r));
	return err;
}

static int produce(struct shmring *r, uint64_t count, uint32_t fixed)
{
	uint64_t state = 0x2545f4914f6cdd1dull, seq = 0;
	unsigned spins = 0;

	while (count == 0 || seq < count) {
		uint32_t want = next_batch(&state, fixed), pos = 0;

		if (count && want > count - seq)
			want = (uint32_t)(count - seq);
		int n = shmring_reserve(r, want, &pos);
		if (n < 0) {
			fprintf(stderr, "shmring_peer: reserve: %s\n", shmring_error(r));
			return PEER_EXIT_RING;
		}
		if (n == 0) {
			/* Full. The consumer may be asleep on another core or
			 * descheduled on this one: give it the CPU now and then. */
			if (++spins > PEER_SPINS) {
				sched_yield();
				spins = 0;
			}
			cpu_relax();
			continue;
		}
		spins = 0;
		for (int i = 0; i < n; i++)
			desc_fill(shmring_slot(r, pos + (uint32_t)i), seq + (uint64_t)i);
		shmring_commit(r);
		seq += (uint64_t)n;
	}
	return PEER_EXIT_OK;
}

static int consume(struct shmring *r, uint64_t count, uint32_t fixed)
{
	uint64_t state = 0x9e3779b97f4a7c15ull, seq = 0;
	unsigned spins = 0;

	/* The creator (the test) is the producer and recorded its pid. */
	if (shmring_watch_peer(r, 0) < 0) {
		fprintf(stderr, "shmring_peer: watching the producer: %s\n", shmring_error(r));
		return PEER_EXIT_RING;
	}
	while (seq < count) {
		uint32_t pos = 0;
		int n = shmring_peek(r, next_batch(&state, fixed), &pos);

		if (n < 0) {
			fprintf(stderr, "shmring_peer: peek: %s\n", shmring_error(r));
			return PEER_EXIT_RING;
		}
		if (n == 0) {
			if (++spins < PEER_SPINS) {
				cpu_relax();
				continue;
			}
			spins = 0;
			n = shmring_wait(r, PEER_WAIT_MS);
			if (n < 0) {
				fprintf(stderr,
				        "shmring_peer: after %" PRIu64 " of %" PRIu64 ": %s\n", seq,
				        count, shmring_error(r));
				return PEER_EXIT_RING;
			}
			continue;
		}
		for (int i = 0; i < n; i++)
			if (desc_verify(shmring_slot(r, pos + (uint32_t)i), seq + (uint64_t)i) < 0)
				return PEER_EXIT_VERIFY;
		shmring_release(r, (uint32_t)n);
		seq += (uint64_t)n;
	}
	return PEER_EXIT_OK;
}

/* Sleep until in has an entry: on the doorbell eventfd if given, else the futex. */
static int sleep_for_entry(struct shmring *in, int efd)
{
	return efd < 0 ? shmring_wait(in, PEER_WAIT_MS) : wait_doorbell(in, efd, PEER_WAIT_MS);
}

static int echo(struct shmring *in, struct shmring *out, uint64_t rounds, int efd_in, int efd_out)
{
	if (efd_out >= 0)
		shmring_set_doorbell(out, efd_out);
	for (uint64_t i = 0; i < rounds; i++) {
		uint32_t pos = 0, opos = 0;
		int n = sleep_for_entry(in, efd_in);

		if (n <= 0) {
			fprintf(stderr, "shmring_peer: echo round %" PRIu64 ": %s\n", i,
			        n == 0 ? "no entry within the wait: lost wake-up"
			               : shmring_error(in));
			return PEER_EXIT_RING;
		}
		if (shmring_peek(in, 1, &pos) != 1)
			return PEER_EXIT_RING;
		if (desc_verify(shmring_slot(in, pos), i) < 0)
			return PEER_EXIT_VERIFY;
		/* The test sends one at a time and waits for the echo: never full. */
		if (shmring_reserve(out, 1, &opos) != 1) {
			fprintf(stderr, "shmring_peer: echo ring full in round %" PRIu64 "\n", i);
			return PEER_EXIT_RING;
		}
		memcpy(shmring_slot(out, opos), shmring_slot(in, pos), sizeof(struct test_desc));
		shmring_release(in, 1);
		shmring_commit(out);
	}
	return PEER_EXIT_OK;
}

static int usage(void)
{
	fprintf(stderr, "usage: shmring_peer produce FD COUNT [BATCH]\n"
	                "       shmring_peer consume FD COUNT [BATCH]\n"
	                "       shmring_peer echo FD_IN FD_OUT ROUNDS [EFD_IN EFD_OUT]\n");
	return PEER_EXIT_USAGE;
}

int main(int argc, char **argv)
{
	struct shmring r = {0}, out = {0};
	uint64_t count, batch = 0, efd_in, efd_out;
	int rc;

	if (argc < 4)
		return usage();
	if (!strcmp(argv[1], "produce") || !strcmp(argv[1], "consume")) {
		int prod = argv[1][0] == 'p';

		if (argc > 5 || parse_u64(argv[3], &count) < 0 ||
		    (argc == 5 && (parse_u64(argv[4], &batch) < 0 || batch > UINT32_MAX)))
			return usage();
		if (attach(&r, argv[2], prod ? SHMRING_PRODUCER : SHMRING_CONSUMER) < 0)
			return PEER_EXIT_USAGE;
		rc = prod ? produce(&r, count, (uint32_t)batch)
		          : consume(&r, count, (uint32_t)batch);
		shmring_close(&r);
		return rc;
	}
	if (!strcmp(argv[1], "echo")) {
		if ((argc != 5 && argc != 7) || parse_u64(argv[4], &count) < 0)
			return usage();
		efd_in = efd_out = (uint64_t)-1;
		if (argc == 7 &&
		    (parse_u64(argv[5], &efd_in) < 0 || parse_u64(argv[6], &efd_out) < 0 ||
		     efd_in > INT32_MAX || efd_out > INT32_MAX))
			return usage();
		if (attach(&r, argv[2], SHMRING_CONSUMER) < 0)
			return PEER_EXIT_USAGE;
		if (attach(&out, argv[3], SHMRING_PRODUCER) < 0) {
			shmring_close(&r);
			return PEER_EXIT_USAGE;
		}
		rc = echo(&r, &out, count, (int)efd_in, (int)efd_out);
		shmring_close(&out);
		shmring_close(&r);
		return rc;
	}
	return usage();
}
