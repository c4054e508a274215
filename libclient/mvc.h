/* SPDX-License-Identifier: MIT */
/*
 * mvc.h: the one header applications include to move bytes through a local
 * mover daemon. No libfabric here: the client talks to the mover over a Unix
 * socket and shared-memory rings, and the mover drives the NICs.
 *
 *   struct mvc *c;  mvc_connect(&c, NULL);
 *   struct mvc_mem m;  mvc_alloc(c, 1 << 30, &m);         // memory the mover reaches
 *   mvc_address(c, addr, &alen);   ...send addr to the peer out of band...
 *   mvc_peer_add(c, peer_addr, plen, &peer);
 *   mvc_import(c, peer, peer_region_blob, blen, &dst);    // the peer's mvc_mem blob
 *   mvc_write_paged(c, &(struct mvc_pages){ ... });       // 4096 scattered pages
 *   mvc_write_imm(c, dst, 42);                            // tell the peer when they land
 *   mvc_submit(c, cookie);                                // non-blocking
 *   mvc_wait(c, ev, 16, 1000);                            // or mvc_poll
 *
 * Errors: every int function returns >= 0 on success and -errno on failure;
 * mvc_error(c) then says why in words. Concurrency: one thread at a time per
 * struct mvc; open one connection per thread for parallel submitters.
 */
#ifndef MVC_H
#define MVC_H

#include <stddef.h>
#include <stdint.h>

/*
 * The release: the one place the project's version is written. The Makefile
 * reads these three lines (pkg-config, man pages), every binary prints it
 * for --version, and the mover logs it at start, shows it in mvstat and
 * carries it in its address blob. MVC_VERSION is the string "MAJOR.MINOR.PATCH";
 * MVC_CHECK_VERSION(0, 2, 0) is true when building against 0.2.0 or later.
 */
#define MVC_VERSION_MAJOR 0
#define MVC_VERSION_MINOR 2
#define MVC_VERSION_PATCH 0
#define MVC_STR_(x)       #x
#define MVC_STR(x)        MVC_STR_(x)
#define MVC_VERSION                                                                                \
	MVC_STR(MVC_VERSION_MAJOR) "." MVC_STR(MVC_VERSION_MINOR) "." MVC_STR(MVC_VERSION_PATCH)
#define MVC_VERSION_NUM (MVC_VERSION_MAJOR * 10000 + MVC_VERSION_MINOR * 100 + MVC_VERSION_PATCH)
#define MVC_CHECK_VERSION(major, minor, patch)                                                     \
	(MVC_VERSION_NUM >= (major)*10000 + (minor)*100 + (patch))

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the libmvc the program runs with (MVC_VERSION is the one
 * it was built against). */
const char *mvc_version(void);

struct mvc;

struct mvc_mem {
	uint32_t region; /* id for writes and for mvc_region_blob */
	void *addr;      /* this process's mapping; for GPU memory the device pointer */
	uint64_t len;
	int fd;         /* the memfd behind it (owned by the library) */
	uint32_t flags; /* MVC_MEM_* */
	uint32_t path;  /* GPU: how the mover can move it: enum mvc_gpu_path */
};

#define MVC_MEM_GPU     1u /* CUDA device memory */
#define MVC_MEM_HUGETLB 2u /* host memory on hugetlb pages (2 MiB) */
#define MVC_MEM_THP     4u /* host memory on shmem asked for transparent huge pages */

/* How GPU bytes move (chosen per transfer by the mover; see mvstat). */
enum mvc_gpu_path {
	MVC_PATH_HOST = 0,   /* host memory */
	MVC_PATH_HMEM = 1,   /* the fabric reads and writes GPU memory itself */
	MVC_PATH_COPY = 2,   /* same host: CUDA copies, no fabric */
	MVC_PATH_STAGED = 3, /* through pinned host bounce buffers */
};

enum mvc_event_type {
	MVC_EV_BATCH = 1,     /* a submitted batch finished; status says how */
	MVC_EV_IMM = 2,       /* an immediate arrived in one of our regions */
	MVC_EV_IMM_COUNT = 3, /* the count asked for with mvc_imm_expect arrived */
	/* The mover came back after it was gone (MVC_CAUSE_MOVER_GONE): libmvc
	 * reconnected, re-registered the regions and re-added the peers and
	 * imports, under the ids the application already holds. count: what
	 * was restored; status and cause: the first thing that could not be
	 * (its id in region), msg: in words. This mover's address and region
	 * blobs are new: send them to the peers again. See mvc_connect(3). */
	MVC_EV_MOVER_BACK = 4,
};

struct mvc_event {
	int type;
	int status;      /* 0 or -errno */
	uint64_t cookie; /* BATCH: mvc_submit's; IMM_COUNT: mvc_imm_expect's */
	uint64_t bytes;  /* BATCH: bytes written */
	uint32_t imm;    /* IMM, IMM_COUNT: the value */
	uint32_t region; /* IMM: the region written; errors: the region at fault */
	uint32_t count;  /* IMM_COUNT: how many arrived */
	int cause;       /* why it failed: see MVC_CAUSE_* */
	char msg[88];    /* the failure in words */
};

enum mvc_cause {
	MVC_CAUSE_NONE = 0,
	MVC_CAUSE_BAD_DESC,
	MVC_CAUSE_NO_REGION,
	MVC_CAUSE_NO_IMPORT,
	MVC_CAUSE_BOUNDS,
	MVC_CAUSE_PEER_GONE,
	MVC_CAUSE_PROVIDER,
	MVC_CAUSE_CANCELLED,
	MVC_CAUSE_MOVER_GONE,
	MVC_CAUSE_PROTOCOL, /* the connection was cut off: its rings broke the protocol */
	/* mvc_imm_expect_from: the peer mover the expectation names exited, or
	 * answered no heartbeat for two intervals (hung, or its host
	 * unreachable); msg names the peer mover. status -EHOSTUNREACH (exited)
	 * or -ETIMEDOUT (silent). */
	MVC_CAUSE_PEER_DEAD,
	/* mvc_imm_expect_from: the peer mover sent what no mover sends (a bad
	 * landing header, a region blob of another version) and was cut off;
	 * status -EPROTO. */
	MVC_CAUSE_PEER_BAD,
};

/* One (source offset, destination offset, length) triple of a writev. */
struct mvc_seg {
	uint64_t src_off;
	uint64_t dst_off;
	uint64_t len;
};

/* A paged write: page src_pages[i] of the source goes to page dst_pages[i]
 * of the destination; page k starts at base + k * stride, page_size long. */
struct mvc_pages {
	uint32_t src; /* local region */
	uint32_t dst; /* import handle */
	uint64_t src_base;
	uint64_t dst_base;
	uint64_t src_stride;
	uint64_t dst_stride;
	uint64_t page_size;
	const uint32_t *src_pages;
	const uint32_t *dst_pages;
	uint32_t npages;
};

struct mvc_info {
	uint32_t client_id;
	uint32_t nshards;
	uint32_t max_batches;
	uint64_t mover_id;
	char provider[32];
};

/* Connection. path NULL: $MOVER_SOCKET, else the mover's default path.
 * On failure *out is NULL and mvc_connect_error() says why (per thread). */
int mvc_connect(struct mvc **out, const char *path);

/*
 * Connection options; zero means the default. list_arena: bytes of the
 * connection's list arena, where page and segment lists of 16 entries or
 * more travel by reference (8 bytes a page, 24 a segment, plus 64 a list);
 * it bounds the lists of the batches in flight, not the batch size in the
 * rings. Default: $MVC_LIST_ARENA (e.g. "256M"), else 64 MiB (about 8
 * million pages in flight); 64 KiB to 16 GiB. The memory is touched only
 * as lists use it.
 */
struct mvc_opts {
	uint64_t list_arena;
	/* The percent of its uid's weight this connection asks for on every
	 * shard, 1 to 100 (0: 100). A mover serves its clients in shares by
	 * weight (mover --weight-uid): a bulk sender can ask for less. */
	uint32_t share_pct;
	uint32_t flags; /* MVC_OPT_* */
	/* How mvc_alloc backs regions: enum mvc_huge (0: $MVC_HUGEPAGES,
	 * "auto", "never", "require", "hugetlb" or "thp"; else auto). */
	uint32_t hugepages;
	uint32_t rsvd32;
	uint64_t rsvd[5];
};
/* Do not reconnect when the mover goes: every call after the in-flight
 * batches failed returns -EPIPE for good (the behaviour before 0.2.0's
 * reconnect; $MVC_RECONNECT=0 does the same for every connection). */
#define MVC_OPT_NO_RECONNECT 1u
int mvc_connect_opts(struct mvc **out, const char *path, const struct mvc_opts *opts);
const char *mvc_connect_error(void);
void mvc_disconnect(struct mvc *c);
const char *mvc_error(const struct mvc *c);
int mvc_info(const struct mvc *c, struct mvc_info *info);

/* Memory the mover can reach: a new sealed memfd mapping (mvc_alloc), or a
 * range of an existing memfd sealed against shrinking, hugetlb memfds
 * included (mvc_register_fd; fd is duplicated, the caller keeps its own). */
int mvc_alloc(struct mvc *c, uint64_t len, struct mvc_mem *out);

/*
 * The pages behind a region of mvc_alloc. Huge pages make registration
 * and the fabric's page walks cheaper (one 2 MiB page in place of 512):
 *   AUTO     hugetlb pages when the hugetlb pool has enough free for the
 *            region (vm.nr_hugepages), else shmem with transparent huge
 *            pages when the kernel's shmem_enabled allows them (advise,
 *            within_size, always, force), else 4 KiB pages; regions under
 *            2 MiB take 4 KiB pages
 *   NEVER    4 KiB pages
 *   REQUIRE  hugetlb or THP as AUTO, else -ENOMEM saying why
 *   HUGETLB  hugetlb only, THP only: else -ENOMEM saying why
 * A hugetlb region's memfd is a whole number of 2 MiB pages (len stays
 * what was asked). mvc_mem.flags says which it got (MVC_MEM_HUGETLB,
 * MVC_MEM_THP); mvc_mem_info() says why not, and what it cost.
 */
enum mvc_huge {
	MVC_HUGE_DEFAULT = 0, /* the connection's (mvc_opts.hugepages, else $MVC_HUGEPAGES) */
	MVC_HUGE_AUTO = 1,
	MVC_HUGE_NEVER = 2,
	MVC_HUGE_REQUIRE = 3,
	MVC_HUGE_HUGETLB = 4,
	MVC_HUGE_THP = 5,
};
int mvc_alloc_huge(struct mvc *c, uint64_t len, enum mvc_huge huge, struct mvc_mem *out);

/* What backs a region, and what registering it cost (see mvc_alloc(3)). */
enum mvc_backing {
	MVC_BACKING_4K = 0,      /* 4 KiB shmem pages (or a registered fd's own) */
	MVC_BACKING_HUGETLB = 1, /* hugetlb pages */
	MVC_BACKING_THP = 2,     /* shmem asked for transparent huge pages */
	MVC_BACKING_GPU = 3,     /* CUDA device memory */
};
struct mvc_mem_info {
	uint32_t backing;   /* enum mvc_backing */
	uint32_t page_size; /* bytes of the pages mapped, as far as asked for */
	uint64_t alloc_ns;  /* this process: memfd, mapping, pages allocated and zeroed */
	uint64_t map_ns;    /* the mover: its mapping and page tables */
	uint64_t mr_ns;     /* the mover: fi_mr_reg, the slowest shard (they run at once) */
	char why[192];      /* 4 KiB pages: why not huge ones; else "" */
};
/* 0, or -ENOENT when m is not one of c's regions (the connection's
 * regions only: a region restored after a reconnect reports its first
 * registration's costs). */
int mvc_mem_info(struct mvc *c, const struct mvc_mem *m, struct mvc_mem_info *info);
int mvc_register_fd(struct mvc *c, int fd, uint64_t offset, uint64_t len, struct mvc_mem *out);
int mvc_free(struct mvc *c, struct mvc_mem *m);

/*
 * mvc_register_cuda - let the mover reach CUDA device memory of this
 * process: cudaMalloc memory (through a CUDA IPC handle) or a VMM allocation
 * made with POSIX-fd export allowed (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
 * in cuMemCreate), at dptr for len bytes. Needs the CUDA driver at run time;
 * -ENOTSUP says why when it is not there. mvc_free() releases the region;
 * the memory stays the caller's.
 */
int mvc_register_cuda(struct mvc *c, void *dptr, uint64_t len, struct mvc_mem *out);

/* Blobs to pass between hosts out of band. *len: in, buffer size; out, used. */
int mvc_address(struct mvc *c, void *buf, size_t *len);
int mvc_region_blob(struct mvc *c, uint32_t region, void *buf, size_t *len);
#define MVC_BLOB_MAX 8192 /* enough for either blob of a 64-shard mover */

/* Peers and their regions; any time, also while transfers run. A peer
 * mover of another wire protocol is refused with -EPROTO, and mvc_error()
 * names both movers' releases. */
int mvc_peer_add(struct mvc *c, const void *addr, size_t len, uint32_t *peer);
int mvc_peer_remove(struct mvc *c, uint32_t peer);
int mvc_import(struct mvc *c, uint32_t peer, const void *blob, size_t len, uint32_t *handle);
int mvc_unimport(struct mvc *c, uint32_t handle);

/*
 * Named regions, where the mover is in an etcd cluster (mover --etcd
 * --cluster). mvc_publish() puts one of this client's regions in the
 * cluster under name (1 to MVC_NAME_MAX - 1 bytes of [A-Za-z0-9._:/-]):
 * every mover of the cluster can then import it, so publish only what
 * the whole cluster may write. It returns once etcd holds the name;
 * -EEXIST when another region has it, -ENOTCONN when the mover is in no
 * cluster or etcd does not answer. A name goes with mvc_unpublish(), with
 * its region, with the client, and with its mover's etcd lease.
 * mvc_lookup() adds the owner mover as a peer (reusing this client's slot
 * for it) and imports the named region, in one call: *out gets the peer,
 * the import handle and the region's length. A name not there yet is
 * waited for up to timeout_ms (0: not at all, -ENOENT at once; then
 * -ETIMEDOUT); the mover waits, not this thread's CPU. Concurrency: as every
 * call on c, one thread at a time; a lookup that waits holds c meanwhile.
 */
#define MVC_NAME_MAX 64
struct mvc_found {
	uint32_t peer;     /* for mvc_peer_remove() */
	uint32_t dst;      /* the import handle, for writes */
	uint64_t len;      /* bytes of the region */
	uint64_t mover_id; /* the owner mover */
};
int mvc_publish(struct mvc *c, uint32_t region, const char *name);
int mvc_unpublish(struct mvc *c, const char *name);
int mvc_lookup(struct mvc *c, const char *name, int timeout_ms, struct mvc_found *out);

/*
 * Building a batch: each call adds to the open batch (opened by the first);
 * mvc_submit closes it and hands it over; one MVC_EV_BATCH reports it, after
 * every write of it landed, whatever its length. Page and segment lists are
 * copied before the call returns: the arrays are the caller's again. A call
 * that fails leaves the batch as it was before it (none open, if it had
 * opened one).
 * -EAGAIN: the rings or the list arena are full right now: poll completions
 * and call again, or mvc_abort() the batch.
 * -E2BIG: the batch's lists are larger than the whole list arena (see
 * mvc_opts), or a batch with an immediate on a provider that needs one shard
 * has more than one ring's worth of short writes; submit what it has, or
 * connect with a larger arena.
 */
int mvc_write(struct mvc *c, uint32_t src, uint64_t src_off, uint32_t dst, uint64_t dst_off,
              uint64_t len);
int mvc_writev(struct mvc *c, uint32_t src, uint32_t dst, const struct mvc_seg *segs, uint32_t n);
int mvc_write_paged(struct mvc *c, const struct mvc_pages *p);
/* After every write of the batch has landed, the target's client receives imm. */
int mvc_write_imm(struct mvc *c, uint32_t dst, uint32_t imm);
int mvc_submit(struct mvc *c, uint64_t cookie);
/* mvc_write_paged() then mvc_submit() in one call, for bindings that pay for
 * every foreign call (a layer's pages from Python): a write that fails
 * leaves the open batch as it was; a submit that fails leaves it open with
 * the write in it, as mvc_submit() does. */
int mvc_submit_paged(struct mvc *c, const struct mvc_pages *p, uint64_t cookie);
void mvc_abort(struct mvc *c);

/* Completions: non-blocking poll, and a wait that sleeps (timeout ms, -1
 * forever) after polling for 20 us ($MVC_WAIT_SPIN_US: microseconds, 0 never;
 * read at connect). Both return the number of events written to ev, or -errno
 * (-EPIPE: the mover is gone; in-flight batches then complete with
 * MVC_CAUSE_MOVER_GONE, once each, and unless MVC_OPT_NO_RECONNECT the
 * library then tries to reconnect to the same socket on later calls of
 * mvc_poll, mvc_wait and the batch calls, 10 ms after the loss and twice
 * as long after each failed try, up to 1 s; mvc_wait sleeps until the
 * next try, never past its timeout. Until one succeeds these calls return
 * -EPIPE; then one MVC_EV_MOVER_BACK event says so. -EPROTO: the mover cut this connection off
 * because what its rings held broke the protocol, a batch id out of range, a descriptor after its
 * batch's END, impossible ring indices; in-flight batches then complete with MVC_CAUSE_PROTOCOL and
 * mvc_error() says why, and every later call on the connection fails with -EPROTO). */
int mvc_poll(struct mvc *c, struct mvc_event *ev, int max);
int mvc_wait(struct mvc *c, struct mvc_event *ev, int max, int timeout_ms);

/*
 * Sleeping in the application's event loop (epoll, libuv, asyncio) instead
 * of in mvc_wait(). mvc_event_fd() returns a file descriptor that becomes
 * readable when there may be events for mvc_poll(): completions, or news of
 * the connection (the mover gone, a reconnect due). It belongs to the
 * library: never read, write or close it; it stays the same for the
 * connection's life, reconnects included, and mvc_disconnect() closes it.
 * -errno if it cannot be made. mvc_arm() readies it before each sleep:
 * 1 when there are events already (call mvc_poll() now, then arm again);
 * 0 when armed (sleep until the fd is readable, then mvc_poll() and arm
 * again); -EPIPE when the mover is gone and no reconnect will be tried
 * (MVC_OPT_NO_RECONNECT, or a batch left open), -EPROTO when it cut this
 * connection off, each once every batch in flight was reported; or what
 * mvc_event_fd() returns (it makes the fd if need be). While a reconnect
 * is pending it arms a timer: the fd wakes when the next try is due. A
 * wake-up may find no event: arm again. The same one-thread rule as
 * mvc_poll().
 *
 *   int fd = mvc_event_fd(c);   // watch fd in the loop; at first and
 *   do {                        // whenever it is readable:
 *       while ((n = mvc_poll(c, ev, 16)) > 0)
 *           handle(ev, n);
 *   } while ((r = mvc_arm(c)) == 1);
 *   // r == 0: back to the loop until fd is readable; r < 0: gone for good
 */
int mvc_event_fd(struct mvc *c);
int mvc_arm(struct mvc *c);

/* Ask for one MVC_EV_IMM_COUNT event once count immediates of value imm
 * have arrived (counting those already here). Immediates of a value being
 * counted are not reported one by one. If this connection's mover goes
 * first, the event comes then, once: status -EPIPE, cause
 * MVC_CAUSE_MOVER_GONE, count = how many had arrived (the same for
 * mvc_imm_expect_from). */
int mvc_imm_expect(struct mvc *c, uint32_t imm, uint32_t count, uint64_t cookie);

/*
 * The same, naming the peer (a handle from mvc_peer_add) whose mover the
 * immediates come from: if that mover exits, stops answering heartbeats
 * (mover.conf heartbeat, default 1 s; silent for two intervals: hung, or its
 * host unreachable) or is cut off for sending garbage before count arrived,
 * the one MVC_EV_IMM_COUNT event comes with status < 0, cause
 * MVC_CAUSE_PEER_DEAD or MVC_CAUSE_PEER_BAD, count = how many had arrived,
 * and msg naming the peer mover; those immediates are used up with it. An
 * expectation made while the peer is down fails at once, the same way;
 * removing the peer fails its expectations with MVC_CAUSE_PEER_GONE. A
 * peer that answers again (SIGCONT, a link back up) takes new
 * expectations; failed ones stay failed. -ENOENT: peer is not one of this
 * connection's; -EINVAL, -EBUSY, -ENOMEM as mvc_imm_expect.
 */
int mvc_imm_expect_from(struct mvc *c, uint32_t peer, uint32_t imm, uint32_t count,
                        uint64_t cookie);

/*
 * How long immediates waited between the mover reading them from its fabric
 * and this client reading them from its completion ring: the last hop of a
 * write's way, which only the client sees (the mover's own hops are in its
 * stats: mvstat --hops). Totals since connect; hist[i] counts waits below
 * 2^(i + 7) ns, the last bucket also any longer. Same thread rule as the
 * rest of the connection.
 */
#define MVC_LAT_BUCKETS 32
struct mvc_latency {
	uint64_t count;  /* immediates measured */
	uint64_t sum_ns; /* their waits, summed */
	uint64_t hist[MVC_LAT_BUCKETS];
};
int mvc_latency(const struct mvc *c, struct mvc_latency *out);

/*
 * For language bindings: a paged write whose page arrays are given as the
 * binding's own array objects (numpy arrays, for the Python package), so
 * that one foreign call checks them, takes them and writes or submits. The
 * binding says where an array object keeps what libmvc reads, at byte
 * offsets from the object's start; libmvc never writes the objects. An
 * object is taken when its type pointer is `type` (read first, and nothing
 * else is read when it differs), its element-type pointer is `descr` (the
 * binding's 4-byte unsigned element type), its int dimension count is 1, its
 * int flags hold every bit of `flags` (contiguous and aligned) and its
 * length, an int64 at the dimension pointer, is 1 to UINT32_MAX.
 */
struct mvc_array_layout {
	const void *type;
	const void *descr;
	uint32_t type_at;  /* the type pointer */
	uint32_t data_at;  /* the pointer to the first element */
	uint32_t nd_at;    /* the int number of dimensions */
	uint32_t dims_at;  /* the pointer to the int64 length of each dimension */
	uint32_t descr_at; /* the element type's pointer */
	uint32_t flags_at; /* the int flags */
	uint32_t flags;
	uint32_t rsvd; /* 0 */
};

/* The page arrays, as objects live for the call, and the per-call values. */
struct mvc_paged_objs {
	const void *src_pages;
	const void *dst_pages;
	uint64_t src_base;
	uint64_t dst_base;
	uint64_t cookie; /* mvc_submit_paged_objs() only */
};

/* Returns 1 and stores obj's first element and its length when l takes
 * obj, else 0 with nothing stored. Reads obj only; any thread. */
int mvc_array_take(const struct mvc_array_layout *l, const void *obj, const uint32_t **data,
                   uint64_t *n);

/* When l takes both arrays of a and they are of one length: stores their
 * elements, the length and a's bases in *p (its other fields are the
 * caller's) and returns what mvc_write_paged(c, p), or
 * mvc_submit_paged(c, p, a->cookie), returns. Else returns 1 with nothing
 * stored and nothing written: the binding checks and converts the arrays
 * itself. Thread rule of the connection. */
int mvc_write_paged_objs(struct mvc *c, struct mvc_pages *p, const struct mvc_array_layout *l,
                         const struct mvc_paged_objs *a);
int mvc_submit_paged_objs(struct mvc *c, struct mvc_pages *p, const struct mvc_array_layout *l,
                          const struct mvc_paged_objs *a);

/* Bytes and WRITE descriptors this client sent through one mover shard. */
uint64_t mvc_shard_bytes(const struct mvc *c, uint32_t shard);
uint64_t mvc_shard_descs(const struct mvc *c, uint32_t shard);

/* Batches submitted and not yet reported. */
uint32_t mvc_inflight(const struct mvc *c);

#ifdef __cplusplus
}
#endif
#endif
