/* SPDX-License-Identifier: MIT */
/*
 * What both sides of the shmring tests share, two processes or two
 * threads: the descriptors they stream (64 bytes, a sequence number, a
 * payload derived from it and a checksum over both, so that each one is
 * verified on arrival) and how a consumer sleeps on a doorbell. Both sides
 * include this header (tests/test_shmring*.c and tests/shmring_peer.c, the
 * process they exec); header-only.
 */
#ifndef SHMRING_DESC_H
#define SHMRING_DESC_H

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <unistd.h>

#include "shmring.h"

struct test_desc {
	uint64_t seq;
	uint64_t payload[6];
	uint64_t sum;
};

_Static_assert(sizeof(struct test_desc) == 64, "descriptors are 64 bytes");

static inline uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline uint64_t desc_checksum(const struct test_desc *d)
{
	uint64_t h = 0xcbf29ce484222325ull ^ d->seq;

	for (int i = 0; i < 6; i++)
		h = (h ^ d->payload[i]) * 0x100000001b3ull;
	return h;
}

static inline void desc_fill(struct test_desc *d, uint64_t seq)
{
	d->seq = seq;
	for (int i = 0; i < 6; i++)
		d->payload[i] = mix64(seq * 8 + (uint64_t)i);
	d->sum = desc_checksum(d);
}

/* 1 if d is descriptor number seq and its checksum holds. */
static inline int desc_ok(const struct test_desc *d, uint64_t seq)
{
	return d->seq == seq && d->sum == desc_checksum(d);
}

/* Batch sizes that vary from call to call (mostly 1..64, now and then 300),
 * or fixed when fixed is not 0. */
static inline uint32_t next_batch(uint64_t *state, uint32_t fixed)
{
	if (fixed)
		return fixed;
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return (*state & 15) == 0 ? 300 : 1 + (uint32_t)(*state >> 32) % 64;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Consumer side of a doorbell: arm, sleep on the eventfd, disarm. Same
 * contract as shmring_wait(): 1 entries, 0 timeout, <0 error. */
static inline int wait_doorbell(struct shmring *r, int efd, int timeout_ms)
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

#endif /* SHMRING_DESC_H */
