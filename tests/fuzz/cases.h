/* SPDX-License-Identifier: MIT */
/*
 * The fixed heads of two fuzz harnesses' inputs, shared by the harness
 * that reads them (tests/fuzz/fuzz_desc.c, fuzz_take.c) and the program
 * that writes their seed corpora (tests/fuzz/seeds.c): a change here is a
 * change of the corpus format, so rerun `make fuzz-seeds`.
 */
#ifndef FUZZ_CASES_H
#define FUZZ_CASES_H

#include <stdint.h>

#include "mv_wire.h"

/* fuzz_desc: this, then the arena's bytes. */
struct desc_case {
	uint64_t src_len, dst_len;  /* the client's region and its import */
	uint32_t owner, arena_size; /* the client's id; its list arena's bytes */
	struct mv_desc d;           /* the descriptor checked */
};

/* fuzz_take: this; with two shards (virt bit 1) 32 bytes whose bit i sends
 * descriptor i to shard 1; ndesc descriptors; then the arena's bytes. */
struct take_case {
	uint8_t src_size;  /* index into fuzz_take.c's sizes[] */
	uint8_t dst_size;  /* index into sizes[] */
	uint8_t ndesc;     /* descriptors that follow */
	uint8_t virt;      /* bit 0: the import's base is a virtual address; bit 1: 2 shards */
	uint32_t fail;     /* bit k: the k-th op completed fails */
	uint16_t arena_kb; /* arena size in 64-byte units, below 8 KiB */
	uint16_t iov;      /* the provider's iov limit: 1 + iov % 4 */
};

#endif /* FUZZ_CASES_H */
