/* SPDX-License-Identifier: MIT */
/*
 * The fence segment: what a mover shares with one peer mover of its host
 * that copies straight into its clients' host regions (samehost.c, the
 * copier; samehost_owner.c, the owner). One sealed memfd per copying peer
 * mover, made on its first HOST_FD request and handed with every HOST_FD
 * reply to it; both map it read-write (the copier writes its busy words).
 * A segment belongs to one peer for its life and is never given to
 * another, so reclaiming it when that peer exits or is cut off can make no
 * late copy land in anyone else's slot.
 *
 *   0       header (magic, ABI, sizes)              owner, once, before the fd goes out
 *   64      busy[MV_FENCE_SLOTS], 64 bytes each      word k: the copier's shard k
 *   64+4K   live[MV_FENCE_REGIONS]                   owner's main thread
 *
 * live[i] holds the id of the region in slot i while this peer may copy
 * into it (the owner set it when it handed the region's fd to this peer),
 * and 0 once the region is freed or the peer cut off. A copier shard that
 * copies into region R first stores R in its busy word, then reads live
 * (both sequentially consistent: F1 in mv_host_copy()); the owner that
 * frees R first clears live, then reads the busy words (F2 in
 * mv_host_revoke()) and waits while one holds R. Either the copier sees
 * the region gone and copies nothing, or the owner sees the copier and
 * waits for its chunk: no byte lands in a region after its free returned,
 * as no fabric write does once its mapping is overlaid. Everything here is
 * written by another process: bound-checked before use.
 */
#ifndef MV_SAMEHOST_LAYOUT_H
#define MV_SAMEHOST_LAYOUT_H

#include <assert.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#define MV_FENCE_MAGIC   0x314543454e4556ull /* "VFENCE1" */
#define MV_FENCE_ABI     2u
#define MV_FENCE_SLOTS   64u    /* = MV_MAX_SHARDS: one busy word per copier shard */
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
