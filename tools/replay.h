/* SPDX-License-Identifier: MIT */
/*
 * What mvreplay's two processes share: the command line they both read,
 * the blobs the receiver hands the sender once over a pipe, and the
 * receiver itself (replay_recv.c), which owns the destination pool and
 * counts immediates for the sender (mvreplay.c).
 */
#ifndef MV_REPLAY_H
#define MV_REPLAY_H

#include <stdint.h>
#include <time.h>

#include "mvc.h"

#define IMM_WAIT_MS 10000 /* stragglers: immediates after the last completion */

struct cfg {
	const char *trace, *send_sock, *recv_sock;
	double speed;
	int asap;
	uint32_t window;
	uint64_t pool;
	int quiet;
	int contig;
};

/* Receiver to sender, once. */
struct blobs {
	uint64_t alen, rlen, pool_len;
	uint8_t addr[MVC_BLOB_MAX];
	uint8_t region[MVC_BLOB_MAX];
};

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int replay_receiver(const struct cfg *cf, int to_send, int from_send);

#endif
