/* SPDX-License-Identifier: MIT */
/*
 * What the latency rows' two files share: rows_lat.c (the rows, the round
 * trips through the movers, where the time went) and lat_direct.c (the
 * direct libfabric ping-pong beside them). Not a public header of mvbench.
 */
#ifndef MV_BENCH_LAT_H
#define MV_BENCH_LAT_H

#include "harness.h"
#include "hops.h"

#define LAT_REGION     (128u << 10) /* per side: the source at 0, the echo lands at LAT_ECHO */
#define LAT_ECHO       (64u << 10)
#define LAT_WAIT_S     5.0  /* an answer later than this: the row fails */
#define LAT_PER        200  /* rounds of one side in a row's chunk; a row has --reps pairs */
#define LAT_CHUNK_WARM 5    /* uncounted rounds that start each back-to-back chunk */
#define LAT_GAP_US     1000 /* the pause before each round of the gap rows */

/* One side of the pong, a thread polling its own connection or endpoint. */
struct pong {
	pthread_t thread;
	int cpu;
	int made;
	_Atomic int stop;
	_Atomic int sleep; /* mover: mvc_wait rather than mvc_poll */
	/* The other side is being measured: sleep, not poll (pong_park()). */
	_Atomic int parked;
	_Atomic uint64_t size;
	_Atomic uint64_t flags; /* direct: more fi_writemsg flags (FI_DELIVERY_COMPLETE) */
	_Atomic int failed;
	char err[200];
	/* through the mover */
	struct mvc *c;
	struct mvc_mem mem;
	uint32_t back; /* import of the ping's region */
	/* direct */
	struct mv_fabric fab;
	struct fid_mr *mr;
	void *desc;
	uint8_t *buf;
	fi_addr_t peer;
	uint64_t rbase, rkey;
};

struct lat {
	struct pong pong, dpong;
	struct mvc_mem mem; /* the ping's region on mover A */
	uint32_t to_pong;   /* import of the pong's region */
	struct pong dping;  /* the direct ping's endpoint (its thread is ours) */
	uint64_t seq;
	struct movers_stats ms; /* the movers' hop histograms */
	struct mvc *stalled;    /* a client of A that never polls (the stalled row) */
	struct mvc_mem smem;
	uint32_t sto;
};

/* Records the pong's first failure in p->err (later ones are dropped). */
void pong_fail(struct pong *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Pins the calling thread to cpu; < 0: leaves it where it is. */
void pin_self(int cpu);
/* In a pong's loop: while p is parked, blocks until pong_park(p, 0) and
 * returns 1. The two pongs poll on one CPU; both polling, the scheduler
 * gave each slices of about 3 ms, and a round after a pause found its pong
 * out of its slice (p99 3.6-4.1 ms for the mover and the direct ping-pong
 * alike in the 1 ms gap rows and tcp's 64 KiB rows on the H100). */
int pong_parked(struct pong *p);
/* Parks p (its thread blocks at its next look) or lets it poll again. */
void pong_park(struct pong *p, int parked);

/* lat_direct.c: two endpoints of the provider writing to each other. */
/* Opens p's endpoint and its registered buffer (LAT_REGION bytes, key). */
int dside_open(struct cfg *x, struct pong *p, uint64_t key, char *why, size_t whylen);
void dside_close(struct pong *p);
/* Makes a and b each other's peer. */
int dside_pair(struct pong *a, struct pong *b, char *why, size_t whylen);
/* The direct pong's thread: answers every write with the same bytes. */
void *dpong_main(void *arg);
/* One round trip of size bytes from L->dping, with FI_DELIVERY_COMPLETE
 * where dc and the provider has it; seconds, or < 0 with why. */
double direct_round(struct lat *L, uint64_t size, int dc, char *why, size_t whylen);

#endif
