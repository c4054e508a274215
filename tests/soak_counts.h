/* SPDX-License-Identifier: MIT */
/*
 * The counts one soak client keeps in a file (tests/soak_client.c writes
 * them as it goes, tests/soak_sum.c adds up every client's): mapped shared,
 * so they outlive a client killed with SIGKILL. One writer, the client;
 * readers read them after it exited.
 */
#ifndef SOAK_COUNTS_H
#define SOAK_COUNTS_H

#include <stdint.h>

#define SOAK_MAGIC  0x4b414f53564d0001ull /* "MVSOAK" v1 */
#define SOAK_CAUSES 16

struct soak_counts {
	uint64_t magic;
	int64_t pid;
	uint64_t running;    /* set once connected, cleared at a clean exit */
	uint64_t clean_exit; /* drained and exited on SIGTERM */
	uint64_t submitted;  /* batches handed to mvc_submit */
	uint64_t ok, failed; /* reported: each batch once */
	uint64_t dup;        /* reports of no batch in flight: must stay 0 */
	uint64_t descs;      /* pages, segments and writes of the submitted batches */
	uint64_t descs_ok;   /* of those that completed without error */
	uint64_t kind[3];    /* paged, writev, write */
	uint64_t verified;   /* batches whose every page was checked at the target */
	uint64_t bytes_verified;
	uint64_t verify_bad; /* pages that arrived wrong: must stay 0 */
	uint64_t imm_early;  /* immediates of no batch waiting for one */
	uint64_t imm_lost;   /* succeeded, immediate never came (its receiver's mover went) */
	uint64_t back;       /* MVC_EV_MOVER_BACK events, both connections */
	uint64_t relinked;   /* peer and import made again after the receiver's mover came back */
	uint64_t cause[SOAK_CAUSES];
};

#endif
