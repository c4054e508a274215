/* SPDX-License-Identifier: MIT */
/*
 * The mover's trace file format, version 1: what `mover --trace FILE` (or
 * `mvtrace start`) writes, what `mvtrace dump` prints, what `mvtrace import`
 * produces from public LLM request traces, and what `mvreplay` re-issues.
 *
 *   offset 0    struct mv_trace_hdr     (128 bytes, little-endian)
 *   offset 128  struct mv_trace_rec[]   (64 bytes each, until end of file)
 *
 * One record per batch, written when the batch completes (so records are in
 * completion order; sort by submit_ns for arrival order). Times are
 * CLOCK_MONOTONIC nanoseconds of the host that wrote them; hdr.start_ns is
 * the same clock at the start of the trace and hdr.start_unix_ns the wall
 * clock then. A file may end with one MV_TR_END record carrying the totals;
 * a file without it (a mover that died) is still valid up to its last whole
 * record. Readers must reject a wrong magic or a newer major version and a
 * record size other than rec_size, and must check every field they use.
 *
 * A trace started with hops (`mover --trace-hops`, `mvtrace start --hops`)
 * follows each batch record at once with an MV_TR_HOPS record: where that
 * batch's time went on the shard that finished it. Readers that predate it
 * reject such files by type; ours pair each with the batch before it.
 */
#ifndef MV_TRACE_FORMAT_H
#define MV_TRACE_FORMAT_H

#include <assert.h>
#include <stdint.h>

#include "mv_wire.h" /* enum mv_batch_kind: the kind bits a record carries */

#define MV_TRACE_MAGIC   0x3145434152545643ull /* "CVTRACE1" little-endian */
#define MV_TRACE_VERSION 1u

enum mv_trace_type {
	MV_TR_BATCH = 1, /* a batch completed */
	MV_TR_END = 2,   /* totals: bytes = records written, nops = records dropped */
	MV_TR_HOPS = 3,  /* the hops of the batch record just before it */
};

struct mv_trace_hdr {
	uint64_t magic;    /* MV_TRACE_MAGIC */
	uint32_t version;  /* MV_TRACE_VERSION */
	uint32_t hdr_size; /* 128 */
	uint32_t rec_size; /* 64 */
	uint32_t nshards;  /* of the mover that wrote it (0: imported) */
	uint64_t mover_id; /* of the mover that wrote it (0: imported) */
	uint64_t start_ns; /* CLOCK_MONOTONIC at the start */
	uint64_t start_unix_ns;
	char provider[32]; /* e.g. "tcp;ofi_rxm", or "import:mooncake" */
	char source[48];   /* free text: host, or the imported file's name */
};

struct mv_trace_rec {
	uint16_t type;        /* enum mv_trace_type */
	uint16_t nparts;      /* shards the batch was split over */
	uint32_t client;      /* client id on the writing mover */
	uint64_t submit_ns;   /* when the client submitted (its mvc_submit) */
	uint64_t complete_ns; /* when the mover published the completion */
	uint64_t bytes;       /* bytes written (asked for, on failure) */
	uint64_t peer;        /* the peer mover's id */
	uint32_t nops;        /* writes, segments or pages the client asked for */
	uint32_t ndesc;       /* WRITE descriptors over all shards */
	uint32_t page_size;   /* paged: bytes per page; 0: pages of several sizes, or none */
	uint8_t kind;         /* enum mv_batch_kind bits */
	uint8_t cause;        /* enum mv_cause when status != 0 */
	uint16_t shard_mask;  /* which shards took part (shard i: bit i % 16) */
	int32_t status;       /* 0 or -errno */
	uint32_t imm;         /* the immediate, when kind has MV_TK_IMM */
};

/* One batch's way through the shard that finished it (the part that made
 * it whole); times as in its batch record, 0 where a step did not happen
 * (a batch that failed before any write was posted, say). */
struct mv_trace_hops {
	uint16_t type;        /* MV_TR_HOPS */
	uint16_t shard;       /* the finishing shard */
	uint32_t imm_inline;  /* 1: its one write carried the immediate */
	uint64_t submit_ns;   /* as in the batch record: pairs them */
	uint64_t taken_ns;    /* its part's END taken from the ring */
	uint64_t posted_ns;   /* its part's last write handed to the provider */
	uint64_t data_ns;     /* the batch's data done (every part) */
	uint64_t imm_ns;      /* a separate immediate's completion; 0: none */
	uint64_t complete_ns; /* the completion published */
	uint64_t rsvd;
};

static_assert(sizeof(struct mv_trace_hops) == 64, "hops records are 64 bytes");
static_assert(sizeof(struct mv_trace_hdr) == 128, "trace header is 128 bytes");
static_assert(sizeof(struct mv_trace_rec) == 64, "trace records are 64 bytes");

#endif
