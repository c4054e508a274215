/* SPDX-License-Identifier: MIT */
/*
 * The formats libclient and the mover exchange: control messages on the Unix
 * socket, descriptors on the submission rings, completion entries on the
 * completion rings, and the address and region blobs applications pass
 * between hosts. Internal to the project (not installed): applications see
 * only mvc.h. Everything here that arrives from the other side is untrusted
 * and is checked before use.
 *
 *   client                          mover (one shard shown)
 *   ------                          -----------------------
 *   HELLO  ------------------------> limits, shard count, doorbell eventfds
 *   ATTACH (ring memfds, eventfd) -> shards start polling the rings
 *   REG (memfd) -------------------> mmap + fi_mr_reg on every shard -> blob
 *   PEER_ADD (address blob) -------> fi_av_insert on every shard
 *   IMPORT (peer, region blob) ----> handle for descriptors
 *   sub ring: WRITE.. LIST.. END --> fi_writemsg .. fi_writedata(imm)
 *   list arena: page and segment lists that LIST descriptors name, expanded
 *               by the shard into fabric writes as its queue has room
 *   comp ring: <-------------------- BATCH cqe (cookie, status) / IMM cqe
 */
#ifndef MV_WIRE_H
#define MV_WIRE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "mvc.h" /* MVC_VERSION: the release */

/*
 * The wire version: what the client, the mover and peer movers must agree
 * on. Bumped with every change to a format below; releases map onto it
 * (4: mover 0.1.x; 5: 0.2.0, which added the release to the address blob;
 * 6: peer liveness, the PEER completion and heartbeats between movers;
 * 7: HOST_FD asks its owner to confirm a region blob, and its reply says
 * what the owner's blobs say).
 */
#define MV_WIRE_MAGIC   0x3143564du /* "MVC1" */
#define MV_WIRE_VERSION 7u
#define MV_MAX_MSG      65536u
#define MV_MAX_SHARDS   64u
#define MV_MAX_ADDRLEN  64u
#define MV_ERRLEN       88u

/* Control message types; a reply carries the request's type | MV_MSG_REPLY. */
enum mv_msg_type {
	MV_MSG_HELLO = 1,
	MV_MSG_ATTACH = 2,
	MV_MSG_REG = 3,
	MV_MSG_DEREG = 4,
	MV_MSG_ADDR = 5,
	MV_MSG_PEER_ADD = 6,
	MV_MSG_PEER_DEL = 7,
	MV_MSG_IMPORT = 8,
	MV_MSG_UNIMPORT = 9,
	MV_MSG_BLOB = 10,      /* the blob of one of our regions */
	MV_MSG_STATS = 11,     /* admins: the stats segment's fd (no HELLO needed) */
	MV_MSG_TRACE = 12,     /* admins: start (with the file's fd) or stop the trace */
	MV_MSG_REG_GPU = 13,   /* register CUDA device memory (IPC handle or VMM fd) */
	MV_MSG_GPU_FD = 14,    /* same-host peer movers: the fd behind a VMM region */
	MV_MSG_PUBLISH = 15,   /* name one of our regions in the cluster (etcd) */
	MV_MSG_UNPUBLISH = 16, /* take a name of ours back */
	MV_MSG_LOOKUP = 17,    /* a name's peer and region: PEER_ADD and IMPORT in one */
	MV_MSG_CLUSTER = 18,   /* admins: the members and names, as text */
	MV_MSG_HOST_FD = 19,   /* same-host peer movers: the memfd behind a host region */
	MV_MSG_REPLY = 0x8000,
};

struct mv_msg_hdr {
	uint32_t magic;   /* MV_WIRE_MAGIC */
	uint16_t version; /* MV_WIRE_VERSION */
	uint16_t type;    /* enum mv_msg_type */
	uint32_t len;     /* payload bytes after this header, <= MV_MAX_MSG */
	uint32_t seq;     /* echoed in the reply */
};

/* Every reply payload starts with this; on failure msg says why. */
struct mv_reply_hdr {
	int32_t status; /* 0 or -errno */
	char msg[124];
};

struct mv_hello_rep {
	struct mv_reply_hdr r;
	uint32_t client_id;
	uint32_t nshards;
	uint32_t sub_capacity;  /* slots per submission ring the mover accepts (max) */
	uint32_t comp_capacity; /* slots per completion ring it expects (min) */
	uint32_t max_batches;   /* batch ids 0..max_batches-1 */
	uint32_t max_iov;       /* page writes merged per fabric write */
	uint32_t flags;         /* MV_HELLO_* */
	uint32_t rsvd;
	uint64_t mover_id;
	uint64_t max_write; /* bytes one WRITE descriptor may carry */
	char provider[32];
	/* fds: one doorbell eventfd per shard, for the submission rings */
};

/* The provider cannot confirm delivery across endpoints: a batch with an
 * immediate must travel on one shard so the doorbell queues behind its data. */
#define MV_HELLO_IMM_ONE_SHARD 1u

/* ATTACH request: fds are nshards submission rings, nshards completion
 * rings, the client's own eventfd for completion wake-ups, then its list
 * arena: a memfd sealed against shrinking and growing (see below). */
struct mv_attach_req {
	uint32_t nshards;
	uint32_t rsvd;
};

/* What a client asks of its share: each submission ring's hdr.user (set by
 * its creator, libclient) is the percent of its uid's weight the client
 * wants on that shard, MV_SHARE_MIN to MV_SHARE_FULL. The mover reads it
 * once, at ATTACH, and takes anything outside that range as MV_SHARE_FULL:
 * a client can lower its own weight, never raise it. */
#define MV_SHARE_MIN  1u
#define MV_SHARE_FULL 100u

/* How GPU memory reaches the mover. */
enum mv_gpu_kind {
	MV_GPU_IPC = 1, /* cudaMalloc memory: a CUDA IPC handle of its allocation */
	MV_GPU_VMM = 2, /* cuMemCreate memory: an exported POSIX fd (passed along) */
};

struct mv_gpu_desc {
	uint32_t kind; /* enum mv_gpu_kind */
	uint32_t rsvd;
	char busid[16];      /* PCI bus id of the device, "0000:00:06.0" */
	uint64_t alloc_size; /* of the whole allocation the handle names */
	uint64_t alloc_off;  /* where the region starts in it */
	uint8_t ipc[64];     /* MV_GPU_IPC: the CUipcMemHandle bytes */
};

/* REG_GPU request: an fd comes with it for MV_GPU_VMM, none for IPC. */
struct mv_reg_gpu_req {
	struct mv_gpu_desc gpu;
	uint64_t len;
};

struct mv_reg_req {
	uint64_t offset; /* into the passed fd */
	uint64_t len;
	uint32_t flags; /* MV_REG_* */
	uint32_t why;   /* on 4 KiB pages: enum mv_huge_why (mv_huge.h), for the log */
	                /* fd: a memfd sealed against shrinking */
};
/* The client mapped the memfd with MADV_HUGEPAGE (shmem THP): the mover's
 * mapping asks for huge pages too, 2 MiB-aligned. */
#define MV_REG_THP 1u

#define MV_BLOB_GPU       1u /* the region is GPU memory (see gpu below) */
#define MV_BLOB_NO_FABRIC 2u /* ... that the owner's provider could not register */
#define MV_BLOB_LANDING                                                                            \
	4u /* ... so its mover takes it as landing messages (receiver-side staging) */
#define MV_BLOB_HOST_FD                                                                            \
	8u /* host memory whose mover hands its memfd to same-host peer movers (HOST_FD) */

struct mv_region_blob {
	uint32_t magic; /* MV_BLOB_MAGIC_REGION */
	uint16_t version;
	uint16_t nshards;
	uint64_t mover_id;
	uint32_t region; /* id on the owning mover */
	uint32_t flags;  /* MV_BLOB_* */
	uint64_t len;
	/* For GPU regions: a mover on the same host (same boot id) copies into
	 * them with CUDA instead of the fabric, opening the IPC handle, or
	 * asking the owner mover at sock for the VMM fd. */
	uint8_t host[16];
	struct mv_gpu_desc gpu;
	char sock[108];
	uint32_t rsvd2;
	/* A random number the owner mover made for this region: whoever asks
	 * it for the region's memory itself (GPU_FD) or imports the region on
	 * the owner mover proves with it that the owner handed out this blob. */
	uint64_t secret;
	struct {
		uint64_t addr; /* base for this shard's key: 0 or a virtual address */
		uint64_t key;
	} shard[MV_MAX_SHARDS];
};
#define MV_BLOB_MAGIC_REGION   0x4e474552u /* "REGN" */
#define MV_REGION_BLOB_SIZE(n) (offsetof(struct mv_region_blob, shard) + (n)*16u)
static_assert(sizeof(struct mv_region_blob) <= 8192, "a region blob fits MVC_BLOB_MAX");

struct mv_reg_rep {
	struct mv_reply_hdr r;
	uint32_t region;
	uint32_t blob_len;
	uint64_t shard_mask; /* shards near the memory (GPU: hwloc); 0: any */
	uint32_t path;       /* GPU: enum mv_gpu_path the mover can use here */
	uint32_t backing;    /* host: enum mvc_backing as the mover mapped it */
	struct mv_region_blob blob;
	/* Host regions: what the registration cost the mover (an older mover
	 * of this protocol sends a shorter reply: zeros). */
	uint64_t map_ns; /* mapping the fd and its page tables */
	uint64_t mr_ns;  /* fi_mr_reg: the slowest shard's (they run at once) */
};

/* How GPU bytes move, chosen per transfer (reported by mvstat). */
enum mv_gpu_path {
	MV_PATH_HOST = 0,     /* host memory: plain fabric writes */
	MV_PATH_HMEM = 1,     /* the provider registers GPU memory (FI_HMEM) */
	MV_PATH_COPY = 2,     /* same host: CUDA copies between IPC-opened memory */
	MV_PATH_STAGED = 3,   /* through pinned host bounce buffers */
	MV_PATH_SAMEHOST = 4, /* same host, host memory: the shard copies into the peer's memfd */
};

/* A path's name as the log, mvstat and the gpu_path setting spell it. */
static inline const char *mv_path_name(unsigned path)
{
	static const char *const names[] = {"host", "fabric", "copy", "staged", "samehost"};

	return path < sizeof(names) / sizeof(names[0]) ? names[path] : "?";
}

/* GPU_FD request: a peer mover names the region and proves it holds its blob. */
struct mv_gpu_fd_req {
	uint32_t id;
	uint32_t rsvd;
	uint64_t secret; /* the region blob's */
};

/* GPU_FD reply: the VMM allocation's fd comes with it. */
struct mv_gpu_fd_rep {
	struct mv_reply_hdr r;
	struct mv_gpu_desc gpu;
};

/* HOST_FD request: a peer mover on this host names one of our regions and
 * proves it holds the region's blob; it asks for the memfd behind a host
 * region (MV_HOST_WANT_FD: the same-host copy), or only for the owner's
 * word on the blob (a fabric that does not check keys, shm, writes where a
 * blob says). It says who it is, for its fence slots (one per shard of it;
 * samehost_layout.h). */
struct mv_host_fd_req {
	uint32_t id;
	uint32_t nshards;  /* of the asking mover */
	uint64_t secret;   /* the region blob's */
	uint64_t mover_id; /* of the asking mover */
	uint32_t want;     /* MV_HOST_WANT_* */
	uint32_t rsvd;
};
#define MV_HOST_WANT_FD 1u

/*
 * A mover's address. magic, version and release stay where they are in
 * every wire version from 5 on, so that a mover refusing a peer of another
 * version names both releases (a blob of version 4 or older has no release:
 * it is mover 0.1.x or older).
 */
#define MV_RELEASE_LEN 16u
struct mv_addr_blob {
	uint32_t magic; /* MV_BLOB_MAGIC_ADDR */
	uint16_t version;
	uint16_t nshards;
	char release[MV_RELEASE_LEN]; /* MVC_VERSION of the mover, NUL-padded */
	uint64_t mover_id;
	char provider[32];
	uint32_t addrlen; /* bytes of each shard's fabric address */
	/* Who the mover is on its host: a mover on the same host (same boot
	 * id) in the same pid namespace watches pid, and fails writes to this
	 * mover as soon as it exits instead of at their deadline. */
	int32_t pid;
	uint64_t pidns; /* inode of /proc/self/ns/pid */
	uint8_t host[16];
	/* Each shard's doorbell: a small registered buffer immediates are
	 * written to (no bytes, only remote CQ data), whatever memory the data
	 * went to, GPU memory the fabric cannot reach included. From
	 * protocol 6 it is 16 KiB, and peers' heartbeats write up to 8 KiB
	 * of it. */
	struct {
		uint64_t addr;
		uint64_t key;
	} bell[MV_MAX_SHARDS];
	uint8_t addr[MV_MAX_SHARDS][MV_MAX_ADDRLEN];
};
#define MV_BLOB_MAGIC_ADDR 0x52444441u /* "ADDR" */

/* HOST_FD reply. Its status is the owner's word on the blob: 0, the region
 * is the owner's and the secret its blob's. Then `addr` and `blob` are what
 * the owner's own blobs say (its fabric addresses, doorbells, the region's
 * length, addresses and keys), for the asker to hold the blob and address
 * its client gave against. With MV_HOST_WANT_FD, nfds is 2 when the fds
 * came (the region's memfd and the owner's fence segment,
 * samehost_layout.h), or 0 with r.msg saying why not. */
struct mv_host_fd_rep {
	struct mv_reply_hdr r;
	uint32_t region;
	uint32_t slot;   /* the asker's first fence slot; its shard k uses slot + k */
	uint64_t offset; /* where the region starts in the memfd */
	uint64_t len;
	uint32_t nfds;
	uint32_t rsvd;
	struct mv_addr_blob addr;
	struct mv_region_blob blob;
};
static_assert(sizeof(struct mv_msg_hdr) + sizeof(struct mv_host_fd_rep) <= MV_MAX_MSG,
              "a HOST_FD reply fits a control message");
#define MV_ADDR_RELEASE_END (offsetof(struct mv_addr_blob, release) + MV_RELEASE_LEN)
static_assert(offsetof(struct mv_addr_blob, release) == 8, "the release stays at byte 8");
static_assert(sizeof(struct mv_addr_blob) <= 8192, "an address blob fits MVC_BLOB_MAX");

struct mv_addr_rep {
	struct mv_reply_hdr r;
	uint32_t blob_len;
	uint32_t rsvd;
	struct mv_addr_blob blob;
};

struct mv_id_req {
	uint32_t id; /* region (DEREG), peer (PEER_DEL), import handle (UNIMPORT) */
	uint32_t rsvd;
};

struct mv_id_rep {
	struct mv_reply_hdr r;
	uint32_t id; /* new peer (PEER_ADD) or import handle (IMPORT) */
	union {
		/* PEER_ADD: enum mv_live of the peer as its heartbeats stand
		 * now; not MV_LIVE_OK: r.msg says why (the add itself
		 * succeeded). */
		uint32_t live;
		/* IMPORT: MV_PATH_SAMEHOST when the shards copy into the region
		 * (libclient stripes its writes by mv_host_parts()), else 0
		 * (the fabric, or a mover that does not say). */
		uint32_t path;
	};
};

/*
 * Peer liveness (mover/heartbeat.c): what a mover knows of a peer mover,
 * told to each client that added the peer as a PEER completion when it
 * changes. A peer comes back from SILENT when a heartbeat is answered
 * again; DEAD (its process exited) and CUT (it sent garbage) are final for
 * that mover id.
 */
enum mv_live {
	MV_LIVE_OK = 0,     /* answers its heartbeats */
	MV_LIVE_SILENT = 1, /* no heartbeat answered for 2 intervals: hung or unreachable */
	MV_LIVE_DEAD = 2,   /* its process exited (same host, pidfd) */
	MV_LIVE_CUT = 3,    /* it sent what no mover sends: cut off */
};

struct mv_import_req {
	uint32_t peer;
	uint32_t blob_len;
	struct mv_region_blob blob;
};

/*
 * Named regions (mover --etcd --cluster). A name is 1 to MV_NAME_MAX - 1
 * bytes of [A-Za-z0-9._:/-], NUL-padded; it is scoped by the cluster and
 * lives as long as its region and the owner mover's etcd lease.
 */
#define MV_NAME_MAX 64u

/* PUBLISH (region: one of the client's) and UNPUBLISH (region unused). */
struct mv_publish_req {
	uint32_t region;
	uint32_t rsvd;
	char name[MV_NAME_MAX];
};

/* LOOKUP: waits up to timeout_ms (0: not at all) for the name to appear. */
struct mv_lookup_req {
	int32_t timeout_ms;
	uint32_t rsvd;
	char name[MV_NAME_MAX];
};

struct mv_lookup_rep {
	struct mv_reply_hdr r;
	uint32_t peer;   /* the client's peer slot for the owner mover */
	uint32_t handle; /* the import of the named region */
	uint64_t len;    /* bytes of the region */
	uint64_t mover_id;
	uint32_t live; /* enum mv_live of the owner mover now */
	uint32_t path; /* the import's, as mv_id_rep's */
};

/* CLUSTER reply: text lines, NUL-terminated, at most what fits a message. */
struct mv_cluster_rep {
	struct mv_reply_hdr r;
	uint32_t len; /* bytes of text, the NUL excluded */
	uint32_t rsvd;
	char text[MV_MAX_MSG - sizeof(struct mv_reply_hdr) - 8];
};

/* STATS reply: the segment's memfd comes with it; see mover/stats_layout.h. */
struct mv_stats_rep {
	struct mv_reply_hdr r;
	uint64_t seg_size;
};

/* TRACE request: on = 1 starts writing the trace into the one fd that comes
 * with it, a regular file the requester opened for writing itself (the mover
 * never opens a path a connection names); path is only the name shown for
 * it. on = 0 stops and closes the current trace.
 * flags: MV_TRACE_HOPS adds each batch's hops (mover/trace_format.h). */
#define MV_TRACE_HOPS 1u
struct mv_trace_req {
	uint32_t on;
	uint32_t flags;
	char path[256];
};

/*
 * Receiver-side staging: a write into GPU memory its mover's fabric cannot
 * register travels as a two-sided message, this header then the data, into
 * a pinned receive buffer of the target shard. The target copies the data
 * to the device and only then answers with remote CQ data on the sender
 * shard's doorbell: MV_ACK | token, or MV_ACK | MV_ACK_ERR | token.
 */
#define MV_LAND_MAGIC 0x444e414cu /* "LAND" */
#define MV_LAND_HDR   128u
#define MV_ACK        (1ull << 63)
#define MV_ACK_ERR    (1ull << 62)
/* Remote CQ data of a peer's heartbeat (with MV_ACK clear): no immediate,
 * since region ids stay below 2^30 (generation < 2^14). Dropped. */
#define MV_HB (1ull << 62)

struct mv_land_hdr {
	uint32_t magic;
	uint32_t region; /* on the target mover */
	uint64_t offset;
	uint64_t len;
	uint64_t token;    /* echoed in the ack (62 bits) */
	uint64_t mover_id; /* the sender's */
	uint16_t shard;    /* the sender's shard */
	uint16_t addrlen;
	uint32_t rsvd;
	uint64_t bell_addr, bell_key; /* the sender shard's doorbell */
	uint8_t addr[MV_MAX_ADDRLEN]; /* the sender shard's fabric address */
};
static_assert(sizeof(struct mv_land_hdr) == MV_LAND_HDR, "landing headers are 128 bytes");

/*
 * libclient's striping rule: a write from MV_STRIPE_MIN bytes is split over
 * n shards in equal parts of mv_stripe_part() bytes, stripe k on shard k.
 * Here so that the bench's direct baseline cuts exactly the same stripes.
 */
#define MV_STRIPE_MIN   (256u << 10)
#define MV_STRIPE_ALIGN 4096u

static inline uint64_t mv_stripe_part(uint64_t len, uint32_t n)
{
	return (len / n + MV_STRIPE_ALIGN - 1) & ~(uint64_t)(MV_STRIPE_ALIGN - 1);
}

/*
 * A write into a region the shards copy into (same host, MV_PATH_SAMEHOST)
 * is split from 2 x MV_HOST_PART_MIN bytes, over as many shards as give
 * each part MV_HOST_PART_MIN at least: each shard copies its part on its
 * own core, and a part always goes to the shard its destination offset
 * names (mv_host_shard()), whose caches then hold that part from the
 * last write into it. One core's copy is the ceiling of a write otherwise
 * (a 64 KiB write into one buffer again and again: 26-33 GB/s on the H100
 * machine with one shard; with two, whole writes spread over both landed
 * in the same lines from two cores, 15-17 GB/s), which two shards' halves
 * raise to 58-62 GB/s. Below 32 KiB a part's own costs (a descriptor, its
 * completion) would eat the gain.
 */
#define MV_HOST_PART_MIN (32u << 10)

/* Parts of a write of len bytes into a copied region on n shards (1: whole). */
static inline uint32_t mv_host_parts(uint64_t len, uint32_t n)
{
	uint64_t k = len / MV_HOST_PART_MIN;

	return k < 2 ? 1 : k < n ? (uint32_t)k : n;
}

/* The shard of part k of a write of parts of part bytes at dst_off. */
static inline uint32_t mv_host_shard(uint64_t dst_off, uint64_t part, uint32_t k, uint32_t n)
{
	return (uint32_t)((dst_off / part + k) % n);
}

/*
 * libclient's list rule: a page or segment list of MV_LIST_MIN entries or
 * more travels by reference in the arena, cut into n contiguous ranges of
 * mv_list_per() entries, range k on the k-th shard the batch uses. Here so
 * that the bench's direct baseline cuts the same ranges.
 */
#define MV_LIST_MIN 16u

static inline uint32_t mv_list_per(uint32_t count, uint32_t n)
{
	return (count + n - 1) / n;
}

/* Submission descriptors: 64-byte slots. */
enum mv_op {
	MV_OP_WRITE = 1, /* src region+off -> dst import+off, len bytes */
	MV_OP_END = 2,   /* ends this shard's part of a batch */
	MV_OP_LIST = 3,  /* entries [dst_off, dst_off + len) of the list at arena offset src_off */
};

#define MV_END_IMM 1u /* after all parts landed, send imm to dst */

/* What a batch did, as libclient declares it in END (recorded in traces). */
enum mv_batch_kind {
	MV_TK_WRITE = 1,  /* mvc_write calls */
	MV_TK_WRITEV = 2, /* mvc_writev segments */
	MV_TK_PAGED = 4,  /* mvc_write_paged pages */
	MV_TK_IMM = 8,    /* carried an immediate */
};

/*
 * END also describes the whole batch for the trace (mover/trace_format.h):
 * src = enum mv_batch_kind bits, src_off = ops the client asked for,
 * dst_off = page size of a paged write, len = bytes of the whole batch,
 * stamp = the client's CLOCK_MONOTONIC ns at submit. The mover only records
 * these; it trusts none of them for the data path. END's ndesc counts the
 * WRITE and LIST descriptors of its part.
 */
struct mv_desc {
	uint8_t op;
	uint8_t flags;
	uint16_t nparts;  /* END: parts in the batch, one per shard used */
	uint32_t batch;   /* batch id < max_batches */
	uint32_t src;     /* WRITE, LIST: local region id; END: kind bits */
	uint32_t dst;     /* WRITE, LIST, END+IMM: import handle */
	uint64_t src_off; /* LIST: arena offset of its mv_list_hdr; END: ops asked for */
	uint64_t dst_off; /* LIST: first entry; END: page size */
	uint64_t len;     /* LIST: entries; END: bytes of the whole batch */
	uint64_t cookie;  /* END: returned in the batch completion */
	uint32_t imm;     /* END+IMM: 32-bit value the target receives */
	uint32_t ndesc;   /* END: WRITE and LIST descriptors in this part */
	uint64_t stamp;   /* END: submit time, CLOCK_MONOTONIC ns */
};
static_assert(sizeof(struct mv_desc) == 64, "descriptors fill one 64-byte slot");

/*
 * The list arena: one per connection, a memfd the client writes page and
 * segment lists into and the mover maps read-only, so a batch of any
 * length costs one LIST descriptor per shard instead of one per page.
 *
 *   arena offset o (MV_LIST_ALIGN-aligned)
 *   +-------------------------------+
 *   | struct mv_list_hdr (64 bytes) |  kind, count, geometry
 *   +-------------------------------+
 *   | PAGES: uint32_t src[count]    |  page indices, then
 *   |        uint32_t dst[count]    |
 *   | SEGS:  struct mv_seg[count]   |  (src_off, dst_off, len) triples
 *   +-------------------------------+
 *
 * The client allocates lists in submission order and reuses a batch's
 * bytes only after its completion. Everything in the arena is untrusted:
 * the mover copies the header and each index before it checks and uses
 * them, so a client that rewrites a list after submitting fails only its
 * own batch. The arena is sealed against shrinking and growing, so the
 * mover's mapping can never fault.
 */
#define MV_LIST_MAGIC    0x5453494cu /* "LIST" */
#define MV_LIST_ALIGN    64u
#define MV_ARENA_MIN     (64u << 10)
#define MV_ARENA_MAX     (1ull << 34)
#define MV_ARENA_DEFAULT (64ull << 20)

enum mv_list_kind {
	MV_LIST_PAGES = 1, /* page k at base + k * stride, page_size long, on each side */
	MV_LIST_SEGS = 2,  /* explicit (src_off, dst_off, len) triples */
};

struct mv_list_hdr {
	uint32_t magic; /* MV_LIST_MAGIC */
	uint32_t kind;  /* enum mv_list_kind */
	uint32_t count; /* entries in the list */
	uint32_t rsvd;
	uint64_t src_base, dst_base;     /* PAGES */
	uint64_t src_stride, dst_stride; /* PAGES */
	uint64_t page_size;              /* PAGES */
	uint64_t rsvd2;
};
static_assert(sizeof(struct mv_list_hdr) == MV_LIST_ALIGN, "a list header is 64 bytes");

struct mv_seg {
	uint64_t src_off;
	uint64_t dst_off;
	uint64_t len;
};
static_assert(sizeof(struct mv_seg) == 24, "segments are three words");

/* Bytes a list of count entries of kind takes in the arena, header included. */
static inline uint64_t mv_list_bytes(uint32_t kind, uint64_t count)
{
	uint64_t body = kind == MV_LIST_PAGES ? count * 8u : count * sizeof(struct mv_seg);

	return (sizeof(struct mv_list_hdr) + body + MV_LIST_ALIGN - 1) &
	       ~(uint64_t)(MV_LIST_ALIGN - 1);
}

/* Completion entries: 128-byte slots. */
enum mv_cqe_type {
	MV_CQE_BATCH = 1,  /* a batch finished: cookie, status, bytes */
	MV_CQE_IMM = 2,    /* an immediate landed in one of our regions */
	MV_CQE_CUTOFF = 3, /* the mover takes nothing more from this client: msg says why;
	                      every batch in flight is failed by the client library */
	MV_CQE_PEER = 4,   /* a peer's liveness changed: imm = the client's peer handle,
	                      region = enum mv_live, status 0 (OK) or -errno, msg why,
	                      cookie = the peer's mover id */
};

/* Causes, so a program can branch without parsing text. */
enum mv_cause {
	MV_CAUSE_NONE = 0,
	MV_CAUSE_BAD_DESC,  /* malformed descriptor */
	MV_CAUSE_NO_REGION, /* unknown local region */
	MV_CAUSE_NO_IMPORT, /* unknown import handle */
	MV_CAUSE_BOUNDS,    /* offset/length outside a region */
	MV_CAUSE_PEER_GONE, /* peer removed or unreachable */
	MV_CAUSE_PROVIDER,  /* the fabric reported an error */
	MV_CAUSE_CANCELLED, /* client detached before the batch ran */
	/* 8 is the client library's own MVC_CAUSE_MOVER_GONE */
	MV_CAUSE_PROTOCOL = 9,   /* the client broke the ring protocol and was cut off */
	MV_CAUSE_PEER_DEAD = 10, /* the peer mover is dead, hung or unreachable */
	MV_CAUSE_PEER_BAD = 11,  /* the peer mover sent garbage and was cut off */
};

struct mv_cqe {
	uint8_t type;
	uint8_t cause;
	uint16_t rsvd;
	int32_t status; /* 0 or -errno */
	uint32_t batch;
	uint32_t imm;
	uint64_t cookie;
	uint64_t bytes;  /* BATCH: bytes written; IMM: CLOCK_MONOTONIC ns when the mover read it */
	uint32_t region; /* IMM: the local region written; errors: region at fault */
	uint32_t shard;
	char msg[MV_ERRLEN];
};
static_assert(sizeof(struct mv_cqe) == 128, "completions fill one 128-byte slot");

#endif
