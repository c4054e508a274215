/* SPDX-License-Identifier: MIT */
/*
 * The mover's stats segment: a sealed memfd the mover writes and tools map
 * read-only (mvstat asks for its fd over the control socket). Nothing on the
 * data path pays for it: each shard keeps plain counters in its own memory
 * and copies them here every few milliseconds, into cache lines only it
 * writes, with relaxed stores (no read-modify-write). Readers get a
 * consistent-enough snapshot: each word is whole, counters only grow.
 *
 *   0              struct mv_stats_hdr           (main thread)
 *   shard_off      struct mv_stats_shard[nshards] (shard i writes entry i)
 *   ring_off       struct mv_stats_ring[nshards][nrings]  (shard i: row i)
 *   peer_off       struct mv_stats_peer[nshards][npeers]  (shard i: row i)
 *   seg_size
 *
 * A reader checks magic, ABI and every offset against the segment size. A
 * mover that stopped sets `stopped`; one that died stops beating: readers
 * call it stale when heartbeat_ns is over a second old, dead when its pid
 * is gone, and show the last numbers as such, never as zeros.
 */
#ifndef MV_STATS_LAYOUT_H
#define MV_STATS_LAYOUT_H

#include <assert.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#define MV_STATS_MAGIC 0x31535441545356ull /* "VSTATS1" */
/* ABI 7-12 added: posted_small, copy_stops, holds, piece_bytes, promoted,
 * bounce_held */
#define MV_STATS_ABI   12u
#define MV_STATS_RINGS 256u /* ring rows per shard: client slots */
#define MV_STATS_PEERS 256u /* peer rows per shard: the first peer slots */

struct mv_stats_hdr {
	uint64_t magic;
	uint32_t abi;
	uint32_t hdr_size;
	uint32_t nshards;
	uint32_t nrings;
	uint32_t npeers;
	int32_t pid;
	uint64_t mover_id;
	uint64_t shard_off, ring_off, peer_off, seg_size;
	uint64_t started_ns; /* CLOCK_MONOTONIC at start */
	char provider[32];
	char socket[108];
	uint32_t rsvd;
	char release[16]; /* MVC_VERSION; empty from movers before 0.2.0 (same ABI) */
	/* written by the main thread as it runs */
	alignas(64) _Atomic uint64_t heartbeat_ns;
	_Atomic uint32_t stopped;
	_Atomic uint32_t clients;
	_Atomic uint32_t tracing;
	_Atomic uint32_t rsvd2;
	_Atomic uint64_t trace_records;
	_Atomic uint64_t trace_dropped;
	char trace_path[256];
	/* How writes of GPU memory move (gpu_calib.c): written once before
	 * the magic. Movers before 0.3 end the header above (hdr_size says). */
	uint32_t gpu;          /* a CUDA device is there */
	uint32_t gpu_measured; /* the rates below were measured at start */
	int32_t gpu_forced;    /* MV_PATH_* forced by gpu_path, or -1 */
	uint32_t gpu_mbps[7];  /* fabric to itself host->host, GPU->GPU, host->GPU,
	                        * GPU->host; CUDA D2H, H2D, D2D (MB/s) */
	uint8_t gpu_path[8];   /* [src GPU * 4 + dst GPU * 2 + same host]: MV_PATH_* */
	char gpu_why[8][120];  /* why that path, as the log says it */
	/* Host regions by their pages (enum mvc_backing: 4 KiB, hugetlb,
	 * THP), written by the main thread as clients register and free
	 * them. Movers before 0.3 end the header above (hdr_size says). */
	alignas(8) _Atomic uint64_t reg_now[3]; /* regions registered now */
	_Atomic uint64_t reg_bytes[3];          /* ... and their bytes */
	_Atomic uint64_t reg_total;             /* registrations since start */
	_Atomic uint64_t reg_map_ns;            /* ... their mapping, summed */
	_Atomic uint64_t reg_mr_ns;             /* ... their fi_mr_reg (slowest shard), summed */
	char reg_why[192]; /* why the last region of 2 MiB or more got 4 KiB pages */
};
#define MV_STATS_HDR_GPU_END (offsetof(struct mv_stats_hdr, gpu_why) + 8 * 120)
#define MV_STATS_HDR_REG_END (offsetof(struct mv_stats_hdr, reg_why) + 192)
static_assert(offsetof(struct mv_stats_hdr, heartbeat_ns) == 256,
              "the release took padding: ABI 4 and 5 keep its offsets");

/*
 * Where a batch's time goes, hop by hop, as per-shard histograms of
 * durations. Bucket i counts durations below 2^(i + 7) ns (i = 0: under
 * 128 ns; i = 31: under 275 s); the last bucket also takes anything longer.
 * The sending shard that publishes a batch's completion records its hops:
 *   queue   the client's mvc_submit to the shard taking the batch's END
 *   post    END taken to the part's last write handed to the provider
 *   fabric  that post to the part's last write completed (delivered, where
 *           the provider offers delivery-complete; else sent)
 *   imm     the data done to the separate immediate's completion (batches
 *           whose one write carries the immediate have none)
 *   batch   mvc_submit to the completion published: the whole of it
 * and the shard that receives an immediate:
 *   deliver its fabric completion read to its entry published on the
 *           owning client's completion ring
 * The client's own hop, from that entry to its read, is the client's to
 * measure: mvc_latency().
 */
enum mv_hop {
	MV_HOP_QUEUE,
	MV_HOP_POST,
	MV_HOP_FABRIC,
	MV_HOP_IMM,
	MV_HOP_BATCH,
	MV_HOP_DELIVER,
	MV_HOPS
};
#define MV_HOP_BUCKETS 32
#define MV_HOP_SHIFT   7 /* bucket 0 is below 2^7 ns */

static inline uint32_t mv_hop_bucket(uint64_t ns)
{
	uint32_t b =
	    ns < (1u << MV_HOP_SHIFT) ? 0 : 64 - (uint32_t)__builtin_clzll(ns) - MV_HOP_SHIFT;
	return b < MV_HOP_BUCKETS ? b : MV_HOP_BUCKETS - 1;
}

/* One shard: written by that shard only. Counters are totals since start. */
struct mv_stats_shard {
	char provider[32];
	char iface[32];
	int32_t cpu;
	int32_t numa;
	alignas(64) _Atomic uint64_t heartbeat_ns;
	_Atomic uint64_t posted;    /* fabric writes posted */
	_Atomic uint64_t completed; /* ... and completed */
	_Atomic uint64_t bytes;     /* bytes of completed writes */
	_Atomic uint64_t descs;     /* descriptors consumed from rings */
	_Atomic uint64_t batches;   /* batch completions published */
	_Atomic uint64_t eagain;    /* posts the provider deferred */
	_Atomic uint64_t cq_errors;
	_Atomic uint64_t retries;
	_Atomic uint64_t timeouts; /* ops failed at their deadline */
	_Atomic uint64_t imm_rx;
	_Atomic uint64_t pending;  /* gauge: ops queued, not yet posted */
	_Atomic uint64_t inflight; /* gauge: ops posted, not yet completed */
	_Atomic uint64_t sleeps;
	_Atomic uint64_t wakes;         /* same-host peer shards this one woke (shm) */
	_Atomic uint64_t path_bytes[4]; /* by path: host, FI_HMEM, CUDA copy, staged */
	_Atomic uint64_t hop_sum_ns[MV_HOPS];
	_Atomic uint64_t hop[MV_HOPS][MV_HOP_BUCKETS]; /* see enum mv_hop */
	/* ABI 6: bytes copied straight into same-host peers' host regions */
	alignas(64) _Atomic uint64_t samehost_bytes;
	/* ABI 7: of posted, those on the small-write endpoint (tcp; post.c) */
	_Atomic uint64_t posted_small;
	/* ABI 8: same-host copies stopped partway for another client (post.c) */
	_Atomic uint64_t copy_stops;
	/* ABI 9: turns a client's large piece waited for another client's
	 * small write in flight or its next batch (post.c) */
	_Atomic uint64_t holds;
	/* ABI 10: bytes one post carries at most while the shard is shared,
	 * now: the configured piece, or less where posts copy slowly (post.c) */
	_Atomic uint64_t piece_bytes;
	/* ABI 11: ops a client posted ahead of its head, whose peer could
	 * not take it (post.c's promote()) */
	_Atomic uint64_t promoted;
	/* ABI 12: gauge: bounce chunks that staged GPU writes hold now, of
	 * MV_BOUNCE_CHUNKS (gpu_path.c); each is held until its write completes */
	_Atomic uint64_t bounce_held;
};

/* One client's rings on one shard (row slot = client slot). */
struct mv_stats_ring {
	_Atomic uint32_t used; /* 1 while attached */
	_Atomic uint32_t client;
	_Atomic int32_t pid;
	_Atomic uint32_t alive; /* the owner process runs */
	_Atomic uint32_t sub_tail, sub_head, sub_cap, sub_hwm;
	_Atomic uint32_t comp_tail, comp_head, comp_cap, comp_hwm;
	_Atomic uint32_t shard_sleeping;  /* the shard asked to be woken (sub ring) */
	_Atomic uint32_t client_sleeping; /* the client asked to be woken (comp ring) */
	_Atomic uint64_t descs;
	_Atomic uint64_t batches;
	_Atomic uint64_t bytes_posted; /* its writes' bytes handed to the fabric */
	_Atomic uint32_t weight;       /* its fair-share weight here (post.c); 0: older mover */
	_Atomic uint32_t rsvd32;
	_Atomic uint64_t rsvd[1];
};

/* Traffic to one peer from one shard; shard 0's row also says what the
 * peer's heartbeats say (mover/heartbeat.c). */
struct mv_stats_peer {
	_Atomic uint64_t mover_id; /* 0: row unused */
	_Atomic uint64_t bytes;
	_Atomic uint64_t writes;
	_Atomic uint64_t errors;
	_Atomic uint32_t live;   /* 0: not watched (no client holds it); else enum mv_live + 1 */
	_Atomic uint32_t rtt_us; /* the last heartbeat's round trip */
};

static_assert(sizeof(struct mv_stats_shard) % 64 == 0, "shard entries own whole lines");
static_assert(sizeof(struct mv_stats_ring) == 96, "ring rows are 96 bytes");
static_assert(sizeof(struct mv_stats_peer) == 40, "peer rows are 40 bytes");
static_assert(offsetof(struct mv_stats_hdr, magic) == 0, "magic first");

#endif
