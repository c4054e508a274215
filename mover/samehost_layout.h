/* SPDX-License-Identifier: MIT */
/*
 * The fence segment: what a mover shares with the peer movers of its host
 * that copy straight into its clients' host regions (samehost.c). One
 * sealed memfd per mover, made on the first HOST_FD request and handed with
 * every HOST_FD reply; the owner maps it read-write, the peers too (they
 * write their busy words).
 *
 *   0       header (magic, ABI, sizes)              owner, once, before any fd goes out
 *   64      busy[MV_FENCE_SLOTS], 64 bytes each      slot k: the one peer shard given it
 *   64+64K  live[MV_FENCE_REGIONS]                   owner's main thread
 *
 * live[i] holds the id of the region in slot i while a peer may copy into
 * it (the owner set it when it handed the region's fd out), and 0 once the
 * region is freed. A peer shard that copies into region R first stores R
 * in its busy word, then reads live (both sequentially consistent: F1 in
 * mv_host_copy()); the owner that frees R first clears live, then reads
 * every busy word (F2 in mv_host_revoke()) and waits while one holds R.
 * Either the copier sees the region gone and copies nothing, or the owner
 * sees the copier and waits for its chunk: no byte lands in a region after
 * its free returned, as no fabric write does once its mapping is overlaid.
 * Everything here is written by another process: bound-checked before use.
 */
#ifndef MV_SAMEHOST_LAYOUT_H
#define MV_SAMEHOST_LAYOUT_H

#include <assert.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#define MV_FENCE_MAGIC   0x314543454e4556ull /* "VFENCE1" */
#define MV_FENCE_ABI     1u
#define MV_FENCE_SLOTS   1024u  /* peer shards that may copy into one mover's regions */
#define MV_FENCE_REGIONS 65536u /* = MV_MAX_REGIONS: a region id's index part */

struct mv_fence_slot {
	alignas(64) _Atomic uint32_t region; /* the region being copied into, or 0 */
};

struct mv_fence {
	uint64_t magic; /* MV_FENCE_MAGIC */
	uint32_t abi;   /* MV_FENCE_ABI */
	uint32_t nslots;
	uint32_t nregions;
	uint32_t rsvd[11];
	struct mv_fence_slot busy[MV_FENCE_SLOTS];
	_Atomic uint32_t live[MV_FENCE_REGIONS];
};

static_assert(offsetof(struct mv_fence, magic) == 0, "magic first");
static_assert(offsetof(struct mv_fence, busy) == 64, "busy words on their own lines");
static_assert(sizeof(struct mv_fence_slot) == 64, "one busy word a line");
static_assert(offsetof(struct mv_fence, live) == 64 + 64 * MV_FENCE_SLOTS, "live after busy");

#endif
