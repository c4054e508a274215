/* SPDX-License-Identifier: MIT */
/*
 * What movers on one host write into the command-queue spinlock of
 * libfabric 1.17's shm endpoints, and where that lock and queue lie in an
 * endpoint's shared region. Every mover writes the lock word this way
 * (shm_lock.c takes glibc's pthread_spin_lock and _trylock over), so the
 * region's owner can tell which process holds its lock; tests read it.
 *
 * A held lock holds -(pid << 6 | MV_SHM_LOCK_TAG): negative, as glibc's own
 * held values are on x86 (1 free, <= 0 held) and nonzero, as they are
 * elsewhere (0 free), so a process without the override still sees it held.
 * glibc's x86 lock decrements a word it found free when two take it at
 * once; a word so changed loses the tag and names nobody.
 */
#ifndef MV_SHM_LOCK_H
#define MV_SHM_LOCK_H

#include <stdint.h>
#include <sys/types.h>

#define MV_SHM_LOCK_TAG   0x25
#define MV_SHM_LOCK_SHIFT 6

static inline int mv_shm_lock_word(pid_t pid)
{
	return -(int)(((uint32_t)pid << MV_SHM_LOCK_SHIFT) | MV_SHM_LOCK_TAG);
}

/* The pid a held lock word names, or 0 when it names none (free, or taken
 * by a process that does not record itself). */
static inline pid_t mv_shm_lock_holder(int word)
{
	if (word >= 0)
		return 0;
	uint32_t v = (uint32_t) - (int64_t)word;
	if ((v & ((1u << MV_SHM_LOCK_SHIFT) - 1)) != MV_SHM_LOCK_TAG)
		return 0;
	return (pid_t)(v >> MV_SHM_LOCK_SHIFT);
}

/*
 * libfabric 1.17's struct smr_region (region version 4), as far as it is
 * read here; checked against a live region of Debian's 1.17.0: the owner's
 * pid, the lock, the count of free command slots, the command queue's
 * offset, then the response queue's (which bounds the command queue).
 */
#define MV_SHM_VERSION     4
#define MV_SHM_OFF_PID     4
#define MV_SHM_OFF_LOCK    24
#define MV_SHM_OFF_TOTAL   40
#define MV_SHM_OFF_CMD_CNT 48
#define MV_SHM_OFF_CMDQ    64
#define MV_SHM_OFF_RESPQ   72
/* The command queue: an ofi_cirque of size, size_mask, rcnt, wcnt (8 bytes
 * each), then its slots of 256 bytes; a slot's op (uint32) at byte 16. */
#define MV_SHM_CMDQ_HDR   32
#define MV_SHM_CMD_SIZE   256
#define MV_SHM_CMD_OFF_OP 16
/* 1.17's ofi_op values whose command takes a second slot (the remote iovs):
 * read_req, write, atomic, atomic_fetch, atomic_compare. */
#define MV_SHM_TWO_SLOT_OPS ((1u << 2) | (1u << 4) | (1u << 6) | (1u << 7) | (1u << 8))

#endif
