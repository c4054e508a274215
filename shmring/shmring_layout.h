/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory layout of one shmring: a single-producer single-consumer
 * ring of fixed-size slots in a sealed memfd segment. Both processes map the
 * same segment; everything in it is addressed by offsets from the segment
 * start, never by pointers, and everything a peer wrote is untrusted.
 *
 *   offset 0     +--------------------------------------------+
 *                | struct shmring_hdr   (written once, creator)|
 *                |  magic, abi, sizes, slots_off, seg_size     |
 *   offset 256   +--------------------------------------------+
 *                | struct shmring_side prod (producer writes)  |
 *                |  tail: next free slot index (free-running)  |
 *                |  pid                                        |
 *   offset 512   +--------------------------------------------+
 *                | struct shmring_side cons (consumer writes)  |
 *                |  head: next slot to consume (free-running)  |
 *                |  pid                                        |
 *   offset 768   +--------------------------------------------+
 *                | struct shmring_sleep (consumer arms it,     |
 *                |  producer reads it on every commit)         |
 *                |  flags (NEED_WAKEUP, DOORBELL), wake_seq    |
 *   slots_off    +--------------------------------------------+
 *                | slot[0] ... slot[capacity - 1]              |
 *                |  capacity is a power of two; slot i of the  |
 *                |  free-running index n is n & (capacity-1)   |
 *   seg_size     +--------------------------------------------+
 *
 * Producer- and consumer-written words sit 256 bytes apart, so neither the
 * adjacent-line prefetcher nor a 128-byte coherence unit makes them share.
 * The sleep block has a line of its own: the producer loads its flags after
 * every commit, and if they shared the consumer's index line (rewritten on
 * every release) each commit would wait for two line transfers in a row.
 * The consumer writes the block only when it goes to sleep or wakes; the
 * producer writes it only to wake the consumer (shmring_wake()).
 */
#ifndef SHMRING_LAYOUT_H
#define SHMRING_LAYOUT_H

#include <assert.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#define SHMRING_MAGIC        0x474e49524d485321ull /* "!SHMRING" little-endian */
#define SHMRING_ABI          2u
#define SHMRING_SIDE_ALIGN   256u
#define SHMRING_SLOTS_OFF    1024u
#define SHMRING_MIN_SLOT     16u
#define SHMRING_MAX_SLOT     4096u
#define SHMRING_MAX_CAPACITY (1u << 24)

/* sleep.flags bits */
#define SHMRING_NEED_WAKEUP 1u /* consumer is (about to be) asleep */
#define SHMRING_DOORBELL    2u /* ... on the producer's eventfd, not the futex */

/* Written once by the creator before the segment is passed; read-only after. */
struct shmring_hdr {
	uint64_t magic;     /* SHMRING_MAGIC */
	uint32_t abi;       /* SHMRING_ABI */
	uint32_t hdr_size;  /* sizeof(struct shmring_layout) */
	uint32_t slot_size; /* bytes per slot, power of two */
	uint32_t capacity;  /* slots, power of two */
	uint64_t slots_off; /* offset of slot 0 from the segment start */
	uint64_t seg_size;  /* bytes in the segment, sealed */
	uint64_t user;      /* free for the owner of the ring (e.g. a ring id) */
};

struct shmring_side {
	_Atomic uint32_t idx; /* prod: tail (next to fill); cons: head (next to read) */
	_Atomic int32_t pid;  /* pid of the process on this side, 0 until attached */
};

struct shmring_sleep {
	_Atomic uint32_t flags;    /* SHMRING_NEED_WAKEUP | SHMRING_DOORBELL */
	_Atomic uint32_t wake_seq; /* futex word, bumped on each futex wake-up */
};

struct shmring_layout {
	struct shmring_hdr hdr;
	alignas(SHMRING_SIDE_ALIGN) struct shmring_side prod;   /* written by the producer */
	alignas(SHMRING_SIDE_ALIGN) struct shmring_side cons;   /* written by the consumer */
	alignas(SHMRING_SIDE_ALIGN) struct shmring_sleep sleep; /* see above */
};

static_assert(offsetof(struct shmring_layout, hdr) == 0, "magic must come first");
static_assert(offsetof(struct shmring_hdr, magic) == 0, "magic must come first");
static_assert(offsetof(struct shmring_hdr, abi) == 8, "ABI version follows magic");
static_assert(offsetof(struct shmring_layout, prod) == 256, "producer side at 256");
static_assert(offsetof(struct shmring_layout, cons) == 512, "consumer side at 512");
static_assert(offsetof(struct shmring_layout, sleep) == 768, "sleep block at 768");
static_assert(offsetof(struct shmring_layout, cons) - offsetof(struct shmring_layout, prod) >= 128,
              "producer- and consumer-written words at least 128 bytes apart");
static_assert(sizeof(struct shmring_layout) <= SHMRING_SLOTS_OFF, "slots follow the header");
static_assert(sizeof(_Atomic uint32_t) == 4, "atomics must be plain words in shared memory");

#endif
