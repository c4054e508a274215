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
 *   sub ring: WRITE.. WRITE END ---> fi_writemsg .. fi_writedata(imm)
 *   comp ring: <-------------------- BATCH cqe (cookie, status) / IMM cqe
 */
#ifndef MV_WIRE_H
#define MV_WIRE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define MV_WIRE_MAGIC 0x3143564du /* "MVC1" */
#define MV_WIRE_VERSION 1u
#define MV_MAX_MSG 65536u
#define MV_MAX_SHARDS 64u
#define MV_MAX_ADDRLEN 64u
#define MV_ERRLEN 88u

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
	MV_MSG_BLOB = 10,  /* the blob of one of our regions */
	MV_MSG_STATS = 11, /* tools: the stats segment's fd (allowed before HELLO) */
	MV_MSG_TRACE = 12, /* tools: start or stop the trace (allowed before HELLO) */
	MV_MSG_REPLY = 0x8000,
};

struct mv_msg_hdr {
	uint32_t magic;	  /* MV_WIRE_MAGIC */
	uint16_t version; /* MV_WIRE_VERSION */
	uint16_t type;	  /* enum mv_msg_type */
	uint32_t len;	  /* payload bytes after this header, <= MV_MAX_MSG */
	uint32_t seq;	  /* echoed in the reply */
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
	uint32_t sub_capacity;	/* slots per submission ring the mover accepts (max) */
	uint32_t comp_capacity; /* slots per completion ring it expects (min) */
	uint32_t max_batches;	/* batch ids 0..max_batches-1 */
	uint32_t max_iov;	/* page writes merged per fabric write */
	uint32_t flags;		/* MV_HELLO_* */
	uint32_t rsvd;
	uint64_t mover_id;
	uint64_t max_write;	/* bytes one WRITE descriptor may carry */
	char provider[32];
	/* fds: one doorbell eventfd per shard, for the submission rings */
};

/* The provider cannot confirm delivery across endpoints: a batch with an
 * immediate must travel on one shard so the doorbell queues behind its data. */
#define MV_HELLO_IMM_ONE_SHARD 1u

/* ATTACH request: fds are nshards submission rings, nshards completion
 * rings, then the client's own eventfd for completion wake-ups. */
struct mv_attach_req {
	uint32_t nshards;
	uint32_t rsvd;
};

enum mv_reg_flags {
	MV_REG_GPU = 1, /* reserved for device memory */
};

struct mv_reg_req {
	uint64_t offset; /* into the passed fd */
	uint64_t len;
	uint32_t flags;
	uint32_t rsvd;
	/* fd: a memfd or hugetlbfs file */
};

struct mv_region_blob {
	uint32_t magic; /* MV_BLOB_MAGIC_REGION */
	uint16_t version;
	uint16_t nshards;
	uint64_t mover_id;
	uint32_t region; /* id on the owning mover */
	uint32_t rsvd;
	uint64_t len;
	struct {
		uint64_t addr; /* base for this shard's key: 0 or a virtual address */
		uint64_t key;
	} shard[MV_MAX_SHARDS];
};
#define MV_BLOB_MAGIC_REGION 0x4e474552u /* "REGN" */
#define MV_REGION_BLOB_SIZE(n) (offsetof(struct mv_region_blob, shard) + (n) * 16u)

struct mv_reg_rep {
	struct mv_reply_hdr r;
	uint32_t region;
	uint32_t blob_len;
	struct mv_region_blob blob;
};

struct mv_addr_blob {
	uint32_t magic; /* MV_BLOB_MAGIC_ADDR */
	uint16_t version;
	uint16_t nshards;
	uint64_t mover_id;
	char provider[32];
	uint32_t addrlen; /* bytes of each shard's fabric address */
	uint32_t rsvd;
	uint8_t addr[MV_MAX_SHARDS][MV_MAX_ADDRLEN];
};
#define MV_BLOB_MAGIC_ADDR 0x52444441u /* "ADDR" */

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
	uint32_t rsvd;
};

struct mv_import_req {
	uint32_t peer;
	uint32_t blob_len;
	struct mv_region_blob blob;
};

/* STATS reply: the segment's memfd comes with it; see mover/stats_layout.h. */
struct mv_stats_rep {
	struct mv_reply_hdr r;
	uint64_t seg_size;
};

/* TRACE request: on = 1 starts writing path (opened by the mover, which
 * must be able to create it), on = 0 stops and closes the current trace. */
struct mv_trace_req {
	uint32_t on;
	uint32_t rsvd;
	char path[256];
};

/* Submission descriptors: 64-byte slots. */
enum mv_op {
	MV_OP_WRITE = 1, /* src region+off -> dst import+off, len bytes */
	MV_OP_END = 2,	 /* ends this shard's part of a batch */
};

#define MV_END_IMM 1u /* after all parts landed, send imm to dst */

/*
 * END also describes the whole batch for the trace (mover/trace_format.h):
 * src = enum mv_trace_kind bits, src_off = ops the client asked for,
 * dst_off = page size of a paged write, len = bytes of the whole batch,
 * stamp = the client's CLOCK_MONOTONIC ns at submit. The mover only records
 * these; it trusts none of them for the data path.
 */
struct mv_desc {
	uint8_t op;
	uint8_t flags;
	uint16_t nparts; /* END: parts in the batch, one per shard used */
	uint32_t batch;	 /* batch id < max_batches */
	uint32_t src;	 /* WRITE: local region id; END: kind bits */
	uint32_t dst;	 /* WRITE, END+IMM: import handle */
	uint64_t src_off; /* END: ops asked for */
	uint64_t dst_off; /* END: page size */
	uint64_t len;	  /* END: bytes of the whole batch */
	uint64_t cookie;  /* END: returned in the batch completion */
	uint32_t imm;	  /* END+IMM: 32-bit value the target receives */
	uint32_t ndesc;	  /* END: WRITE descriptors in this part */
	uint64_t stamp;	  /* END: submit time, CLOCK_MONOTONIC ns */
};
static_assert(sizeof(struct mv_desc) == 64, "descriptors fill one 64-byte slot");

/* Completion entries: 128-byte slots. */
enum mv_cqe_type {
	MV_CQE_BATCH = 1, /* a batch finished: cookie, status, bytes */
	MV_CQE_IMM = 2,	  /* an immediate landed in one of our regions */
};

/* Causes, so a program can branch without parsing text. */
enum mv_cause {
	MV_CAUSE_NONE = 0,
	MV_CAUSE_BAD_DESC,    /* malformed descriptor */
	MV_CAUSE_NO_REGION,   /* unknown local region */
	MV_CAUSE_NO_IMPORT,   /* unknown import handle */
	MV_CAUSE_BOUNDS,      /* offset/length outside a region */
	MV_CAUSE_PEER_GONE,   /* peer removed or unreachable */
	MV_CAUSE_PROVIDER,    /* the fabric reported an error */
	MV_CAUSE_CANCELLED,   /* client detached before the batch ran */
};

struct mv_cqe {
	uint8_t type;
	uint8_t cause;
	uint16_t rsvd;
	int32_t status; /* 0 or -errno */
	uint32_t batch;
	uint32_t imm;
	uint64_t cookie;
	uint64_t bytes;
	uint32_t region; /* IMM: the local region written; errors: region at fault */
	uint32_t shard;
	char msg[MV_ERRLEN];
};
static_assert(sizeof(struct mv_cqe) == 128, "completions fill one 128-byte slot");

#endif
