/* SPDX-License-Identifier: MIT */
/*
 * Internal types of the mover daemon. Ownership is the whole design:
 *  - the main thread owns the control socket, clients, regions, imports and
 *    peers; it publishes table entries with release stores and frees them
 *    only after every shard has acknowledged a mailbox command issued after
 *    the entry was unpublished (a grace period);
 *  - each shard thread owns its fabric objects, its attachments (the rings of
 *    each client on that shard), its op pool and pending queue; nothing on the
 *    data path takes a lock;
 *  - the per-client batch table is the one place shards meet: a batch striped
 *    over k shards completes when k atomic increments have arrived.
 */
#ifndef MV_MOVER_H
#define MV_MOVER_H

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h> /* struct ucred */
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "stats_layout.h" /* enum mv_hop: the shards' hop histograms */

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "config.h" /* struct mv_config */
#include "log.h"
#include "mv_wire.h"
#include "shmring.h"

#define MV_MAX_CLIENTS        256u
#define MV_MAX_REGIONS        65536u /* mover-wide region table, index part of an id */
#define MV_CLIENT_MAX_IMPORTS 4096u
#define MV_CLIENT_MAX_PEERS   1024u
#define MV_MAX_PEERS          4096u
#define MV_UID_SLOTS          (2 * MV_MAX_CLIENTS) /* a shard's uids of clients and held ops */
#define MV_ATTACH_PEERS       8u /* peers a client's attachment counts bytes in flight to in slots */
#define MV_TIX_MORE           MV_ATTACH_PEERS /* an op counted in its attachment's to_more[] */
#define MV_TIX_NONE           255u            /* an op not counted by peer */
/* iovs one op holds: a same-host copy, which no provider limits, merges up
 * to this many writes, so that a batch of small writes is a few ops */
#define MV_IOV_MAX       16u
#define MV_SUB_CAPACITY  8192u
#define MV_COMP_CAPACITY 4096u
#define MV_MAX_BATCHES   1024u
#define MV_OPS_PER_SHARD 4096u
#define MV_CHUNK         (4u << 20)   /* bytes one fabric write carries at most */
#define MV_MAX_WRITE     (1ull << 30) /* bytes one WRITE descriptor carries at most */
/* A checked WRITE always fits an idle shard's op pool, so none waits for ever. */
static_assert(MV_MAX_WRITE / MV_CHUNK + 1 + MV_IOV_MAX < MV_OPS_PER_SHARD, "a WRITE fits the pool");
/*
 * Bytes one burst of posts carries at most before a shard turns to reap and
 * consume. Where a post copies its data before it returns (shm's single-iov
 * writes), a burst of a whole window would hold back the completion of a
 * batch done at its start until the window's last byte is copied: the
 * client learns of it, and sends the next batch, only as the shard runs dry.
 * On a NIC a post takes a microsecond and this is microseconds of wire.
 */
#define MV_BURST_BYTES   MV_CHUNK
#define MV_MAX_GPUS      16
#define MV_BOUNCE_CHUNKS 8 /* pinned MV_CHUNK bounce buffers per shard (path 3) */
#define MV_LAND_BUFS     8 /* receive buffers per shard for landing messages */
/* A shard's doorbell: bytes registered for peers' writes (mv_addr_blob). */
#define MV_BELL_SIZE (16u << 10)

/* log.c: mv_log (info), mv_dbg, mv_warn, mv_error, mv_log_client */

#include "access.h"
#include "fabric.h"
#include "gpu.h"
#include "samehost.h"

/* Bytes of one write's piece from which a same-host copy uses non-temporal
 * stores ($MV_NT_MIN overrides; samehost.c says why). */
#define MV_NT_MIN (2u << 20)

/* A receive buffer for landing messages (receiver-side staging). */
struct mv_land_buf {
	struct fi_context2 ctx;  /* the posted receive */
	struct fi_context2 actx; /* the ack written back */
	struct mv_land_buf *next;
	uint8_t *buf; /* MV_LAND_HDR + MV_CHUNK pinned bytes */
	void *ev;     /* the host-to-device copy */
	int dev;
	int state; /* MV_LAND_POSTED, _COPYING, _ACKING, _ACKED */
	fi_addr_t ack_to;
	uint64_t ack_addr, ack_key, ack_data;
};

/* A client's memory, mapped into the mover and registered on every shard. */
struct mv_region {
	uint32_t id;     /* generation << 16 | table index */
	uint32_t owner;  /* the client's id (mv_client.id) */
	uid_t owner_uid; /* and its uid: a freed GPU region still counts against it (quota.c) */
	uint8_t *base;   /* the mover's mapping */
	uint64_t len;
	size_t map_len;
	uint8_t *map;
	struct fid_mr *mr[MV_MAX_SHARDS]; /* written by shard s only */
	void *desc[MV_MAX_SHARDS];
	uint64_t key[MV_MAX_SHARDS];
	int64_t expires; /* freed: unmapped at this CLOCK_MONOTONIC second */
	struct mv_region *next_dead;
	int is_gpu; /* GPU memory: gpu, not base/map */
	struct mv_gpu_map gpu;
	struct mv_gpu_desc gdesc;   /* as the client described it, for same-host peers */
	uint64_t shard_mask;        /* shards near the memory (hwloc); 0: any */
	int gpu_fd;                 /* VMM: the exported fd, for same-host peers; else -1 */
	int by_dmabuf;              /* the fabric registered it by dma-buf fd (shard 0) */
	_Atomic int fabric_refused; /* GPU: a shard's provider refused it: staged */
	uint64_t secret;            /* random, in its blob: proves a blob came from us */
	int host_fd;      /* host memory: the client's memfd, for same-host peers; or -1 */
	uint64_t fd_off;  /* where the region starts in it */
	int handed;       /* its fd went to a peer mover: revoke at free */
	int mr_kept;      /* freed, still registered until reaped (shm) */
	int counted;      /* in the stats segment's regions by pages */
	uint32_t backing; /* host: enum mvc_backing of its pages */
	uint64_t map_ns;  /* host: mapping it and its page tables took */
	uint64_t mr_ns[MV_MAX_SHARDS]; /* fi_mr_reg on shard s took (written by shard s) */
};

struct mv_wake_page;

/* What a peer is fit for; only the main thread changes it. */
enum mv_peer_state {
	MV_PEER_LIVE = 0,
	MV_PEER_REMOVED = 1,  /* its last client removed it: refuse new work */
	MV_PEER_EXITED = 2,   /* its process exited (same host): fail all work */
	MV_PEER_CUT = 3,      /* it sent garbage (heartbeat.c): fail all work */
	MV_PEER_DEPARTED = 4, /* it left the etcd cluster (lease expired, key deleted): as EXITED */
};

/* Another mover, known by its address blob. */
struct mv_peer {
	uint64_t mover_id;
	uint32_t nshards;
	uint32_t index;
	int refs;                    /* clients using it (main thread) */
	_Atomic int gone;            /* enum mv_peer_state: anything but LIVE refuses work */
	char gone_why[MV_ERRLEN];    /* DEPARTED: who and how, written before gone (R2) */
	_Atomic uint32_t departures; /* times it left the cluster (main thread; R3) */
	pid_t pid;                   /* same host and pid namespace: its process; else 0 */
	int pidfd;                   /* watched while LIVE or REMOVED; else -1 (main thread) */
	struct mv_wake_page *wake;   /* its shards' sleeping words (shm), or NULL */
	int wake_fd[MV_MAX_SHARDS];  /* and their FIFOs */
	struct mv_addr_blob blob;
	struct mv_fence *fence; /* its fence segment, once it handed us a memfd */
	int host_told;          /* logged why its host regions are not copied into */
	/* Per local shard, written by that shard once (PEER_ADD) and read on
	 * every post. Nothing here is written per op: shards would share it. */
	fi_addr_t fiaddr[MV_MAX_SHARDS];
	/* What its heartbeats say (heartbeat.c): enum mv_live and the last
	 * round trip, written by shard 0 only, read by the main thread at
	 * PEER_ADD and by the stats. */
	_Atomic int live;
	_Atomic int left; /* SILENT because it left the cluster, back or not */
	_Atomic int64_t rtt_ns;
	_Atomic int64_t silent_since; /* CLOCK_MONOTONIC ns of the last answer while not OK */
	/* Garbage from it (a shard found it): 1 while the finder writes
	 * cut_why, then 2; the main thread then sets gone = MV_PEER_CUT. */
	_Atomic int cut;
	char cut_why[MV_ERRLEN];
};

/* A peer's region as imported by one client. */
struct mv_import {
	struct mv_peer *peer;
	uint32_t region;
	uint32_t nshards;
	uint32_t flags;               /* MV_BLOB_* of the peer's region */
	struct mv_gpu_remote *remote; /* same-host GPU region, opened here (path 2) */
	_Atomic uint32_t told;        /* bit per source kind: its GPU path was logged */
	/* Same-host host region, mapped here (samehost.c), or NULL: the fabric.
	 * Set by the main thread when the peer's memfd arrives, which may be
	 * after the import was published; R9 pairs with A9 in take.c. */
	_Atomic(struct mv_host_remote *) host;
	/* MV_IMPORT_HELD while its owner's word on the blob is awaited (a
	 * fabric that does not check keys: samehost_ask.c), MV_IMPORT_REFUSED when
	 * it was not given: mv_import_get() gives the import to no shard.
	 * R10 pairs with A10 there. */
	_Atomic uint8_t held;
	uint64_t len;
	uint64_t addr[MV_MAX_SHARDS];
	uint64_t key[MV_MAX_SHARDS];
};

/* Cross-shard batch state; the only data-path memory shards share. */
struct mv_batch {
	_Atomic uint32_t parts_done; /* MV_PARTS_CLAIMED: failed for parts that never came */
	_Atomic uint32_t gen;        /* completions published under this id */
	_Atomic int32_t status;
	_Atomic uint64_t bytes;
	_Atomic uint32_t ndesc;      /* for the trace: WRITEs over all parts */
	_Atomic uint32_t shard_mask; /* for the trace: shards that took part */
	_Atomic uint64_t peer;       /* for the trace: the peer mover written to */
	uint8_t cause;               /* written by whoever won the status CAS */
	uint32_t region;
	char msg[MV_ERRLEN];
	struct mv_desc end;       /* the last part's END, written by the finisher */
	int64_t t_data;           /* the finisher's: when its data was done, for the imm hop */
	int64_t t_take, t_posted; /* the finisher's part's, for the trace's hops */
	uint8_t imm_inline;
};

#define MV_IMPORT_HELD    1
#define MV_IMPORT_REFUSED 2

#define MV_PARTS_CLAIMED (1u << 31)

/* A batch whose END promised more parts than have finished, as the shard
 * that finished one of them waits for the rest (batch.c). */
struct mv_part_wait {
	struct mv_desc end;  /* the part's END: its parts and cookie */
	uint32_t batch, gen; /* the batch id, and its generation then */
	int64_t since;       /* when the part finished */
};

/* One shard's part of one batch: shard-local. */
struct mv_part {
	uint32_t outstanding; /* ops not yet completed */
	uint32_t ndesc;       /* WRITE descriptors seen */
	uint64_t peer;        /* mover id of the peer its writes went to */
	uint8_t ended;
	uint8_t failed;
	uint8_t cause;
	uint8_t imm_sent; /* its one write carries the immediate (take.c) */
	int64_t t_take;   /* its END taken */
	int64_t t_posted; /* its last op handed to the provider; 0: none yet */
	int32_t status;
	uint32_t region;
	uint64_t bytes;
	struct mv_desc end;
	char msg[MV_ERRLEN];
	/* This shard's part finished while its batch's generation was fin_gen:
	 * until that batch is published, a descriptor naming it is a
	 * descriptor after its END (take.c). */
	uint8_t fin;
	uint32_t fin_gen;
};

struct mv_client;

/* A LIST descriptor being expanded (list.c): shard-private copies of the
 * descriptor and its list's header, where expansion stands, and the run of
 * adjacent entries not yet queued. */
struct mv_cursor {
	struct mv_desc d;
	struct mv_list_hdr h;
	uint64_t next, end; /* entries still to expand */
	uint64_t part;      /* bytes of entry next already in the run or queued */
	uint64_t run_so, run_doff, run_len;
	int active;
};

/* A run of turns in which a client gave way to others (post.c): since its
 * first, and its latest; since is 0 when no run is going on. */
struct mv_yields {
	int64_t since, last;
	int64_t out; /* when its last run ran out; 0 once it goes unheld (post.c's yield()) */
};

/* A client's rings on one shard: owned by that shard's thread. */
struct mv_attach {
	struct mv_client *cl;
	struct shmring sub;  /* we consume descriptors */
	struct shmring comp; /* we produce completions */
	struct mv_part *parts;
	struct mv_cursor cur; /* the list being expanded: its ring waits for it */
	int64_t imm_at;       /* the oldest immediate on comp not yet committed (DELIVER hop) */
	struct mv_cqe *ovf;   /* completions waiting for room in comp */
	uint32_t ovf_head, ovf_tail, ovf_cap;
	uint32_t outstanding; /* ops pending or posted */
	int detaching;
	int dead;     /* completion ring corrupt or client gone: consume nothing more */
	int cut_told; /* this shard's completion ring carried the client's CUTOFF */
	struct mv_part_wait *waits; /* batches waiting for parts of other shards */
	uint32_t nwaits, waits_cap;
	int64_t touched;     /* when this shard last told cl->active_ns */
	uint32_t open_parts; /* parts with descriptors taken and no END yet */
	uint64_t descs, batches;
	uint32_t sub_hwm, comp_hwm; /* highest occupancy seen, for the stats */
	/* Fair share (post.c): the client's own queue of ops for the fabric,
	 * its place in the shard's round of clients with queued ops, and
	 * what deficit round robin and the in-flight share count for it. */
	struct mv_wr *pq_head, *pq_tail;
	struct mv_wr *run_tail; /* the first op of pq_tail's run (shard_int.h) */
	uint32_t npq;           /* ops on its queue */
	/* Its staged writes waiting for a bounce chunk, and those parked there
	 * while their peer holds its share (gpu_path.c). */
	struct mv_wr *sq_head, *sq_tail, *pk_head, *pk_tail;
	struct mv_attach *round_next; /* the next client with queued ops */
	uint8_t in_round;             /* on the shard's round */
	uint8_t turn;                 /* its quantum for this turn was added */
	int64_t deficit;              /* bytes it may still post this turn */
	uint64_t inflight;            /* bytes posted and not yet completed */
	uint32_t inflight_ops;        /* ops posted and not yet completed (an immediate: 0 bytes) */
	int64_t inflight_since;       /* when inflight last left 0 (post.c) */
	/* Of inflight, by peer, so that one peer's backlog holds up none of
	 * its writes to others (post.c's peer_hogs()): MV_ATTACH_PEERS slots
	 * for the peers it has writes in flight to (a slot is free while its
	 * ops are 0), and, once it has more at once, to_more[] by peer index
	 * (MV_MAX_PEERS of them, made then; shard_int.h's mv_inflight_to_add()
	 * keeps each peer in one of the two). */
	struct mv_inflight_to {
		uint32_t pix;
		uint32_t ops;
		uint64_t bytes;
	} to[MV_ATTACH_PEERS], *to_more;
	uint32_t hog;          /* 1 + the index of the peer peer_hogs() last found, or 0 (post.c) */
	struct mv_yields held; /* its pieces held for others' small writes (post.c) */
	struct mv_yields cut_short; /* its bursts ended early for other clients (post.c) */
	uint64_t posted_bytes;      /* bytes handed to the fabric, ever */
	int64_t last_take;          /* when this shard last took a descriptor of it */
	/* Anticipation (post.c): when its last batch completed here (until
	 * its next END is taken), and its rhythm (take.c's react_note()). */
	int64_t done_at;
	int64_t last_end; /* when this shard took its last END */
	int64_t react_ns; /* from a completion to its next submit, on average */
	int64_t cycle_ns; /* from one END taken to the next, on average */
	/* Its share against the shard's other clients: the weight its uid
	 * has (mv_config.weights, default 1) times the percent it asked for
	 * (its submission ring's hdr.user, mv_wire.h), so 1 to 100 * 100. */
	uint32_t weight;
	uint16_t uix; /* its uid's slot in the shard's s->uids */
};

enum mv_client_state { MV_CL_NEW, MV_CL_READY, MV_CL_DETACHING };

struct mv_client {
	uint32_t id;
	int sock;
	pid_t pid;
	uid_t uid;            /* from SO_PEERCRED at accept */
	uint32_t roles;       /* MV_ROLE_*, from the credentials (access.c) */
	uint32_t max_batches; /* its batch ids run below this (quota.c, at HELLO) */
	uint64_t reg_bytes;   /* bytes of its regions */
	int pidfd;
	int efd; /* the client's completion doorbell */
	enum mv_client_state state;
	struct mv_attach *att[MV_MAX_SHARDS];
	struct mv_batch *batches;
	_Atomic(struct mv_import *) imports[MV_CLIENT_MAX_IMPORTS];
	/* Written by the main thread; shard 0 reads them to tell the clients
	 * of a peer that its liveness changed (heartbeat.c). */
	_Atomic(struct mv_peer *) peers[MV_CLIENT_MAX_PEERS];
	_Atomic uint32_t shards_detached;
	struct mv_cmd *detach_cmds;
	uint32_t nregions;
	/* The list arena, mapped read-only: the client rewrites it at will, so
	 * shards copy what they read before checking it (list.c). */
	const uint8_t *arena;
	uint64_t arena_size;
	/* Set by the shard that found the client's rings make no sense
	 * (mv_cut_off()): 1 while it writes cut_why, then 2. Every shard takes
	 * nothing more from the client once it is non-zero. */
	_Atomic int cut;
	char cut_why[MV_ERRLEN];
	/* When a shard last took a descriptor of this client or ended one of
	 * its ops (to 10 ms): a batch waiting for parts while the client has
	 * been quiet that long waits for parts that will never come. */
	_Atomic int64_t active_ns;
};

#include "shard.h" /* struct mv_shard, struct mv_cmd */

struct mover {
	struct mv_config cfg;
	uint64_t mover_id;
	uint32_t nshards;
	struct mv_shard *shards;
	int efd; /* shards wake the main thread here */
	_Atomic int stopping;
	_Atomic int shards_stopped; /* every shard left its loop: no mailbox answers */
	_Atomic(struct mv_region *) regions[MV_MAX_REGIONS];
	uint16_t region_gen[MV_MAX_REGIONS];
	/* Written by the main thread (a peer is never freed before exit);
	 * shards read them to find a peer by mover id. */
	_Atomic(struct mv_peer *) peers[MV_MAX_PEERS];
	struct mv_client *clients[MV_MAX_CLIENTS];
	struct mv_region *graveyard; /* freed regions in quarantine (main thread) */
	struct mv_stats_hdr *stats;
	int stats_fd;
	size_t stats_size;
	_Atomic(struct mv_tracer *) tracer; /* non-NULL while tracing */
	void *gpu_ctx[MV_MAX_GPUS];         /* primary contexts, retained on first use */
	struct mv_gpu_remote *gpu_remote;   /* same-host peers' GPU regions (main thread) */
	int hmem;                           /* path 1: the provider registers GPU memory */
	int hmem_dmabuf;                    /* ... and takes it by dma-buf fd */
	struct mv_gpu_rates gpu_rates;
	struct mv_gpu_choice gpu_path[2][2][2]; /* [src GPU][dst GPU][same host] */
	int gpu_forced;                         /* MV_PATH_* from gpu_path, or -1: auto */
	int gpu_land;                           /* GPU regions take landing messages */
	int hmem_unused;                        /* hmem offered, but slower: turned off */
	int cal_dev;
	uint8_t host_id[16];       /* boot id: who shares this host */
	uint64_t pidns;            /* inode of our pid namespace */
	struct mv_wake_page *wake; /* our shards' sleeping words (shm) */
	void *topo;                /* hwloc topology, loaded once (main thread) */
	int cpus_fd;               /* our shards' CPUs for other movers (cpus_held.c) */
	int ep;                    /* the main thread's epoll (MV_TAG_*) */
	/* Bumped when a peer's process exits: a shard that sees it change
	 * fails its posted writes to exited peers at once. */
	_Atomic uint32_t peer_deaths;
	/* Bumped by a shard that found a peer sending garbage (p->cut == 2):
	 * the main thread cuts it off (heartbeat.c). */
	_Atomic uint32_t peer_cuts;
	uint32_t seen_cuts; /* main thread */
	char prov[32];
	struct mv_cluster *cluster; /* --etcd: membership and names (cluster.c), or NULL */
	struct mv_names *names;     /* the main thread's side of them (names.c) */
	/* The same-host path (main thread): the peers copying into our regions,
	 * each with its fence segment (samehost_owner.c); peers' regions mapped
	 * here and the HOST_FD requests in flight (samehost.c, samehost_ask.c). */
	struct mv_fence_peer *fence_peers[MV_FENCE_PEERS];
	struct mv_host_remote *host_remote, *host_dead;
	struct mv_host_fetch *host_fetch;
};

/* shm_lock.c: the main thread frees our shards' shm queue locks that
 * exited processes left held; every 100 ms at most unless at_once */
void mv_shm_locks_check(struct mover *mv, int at_once);

/* Main-thread epoll tags besides client slots: | a peer index. */
#define MV_TAG_PEER   0x02000000u
#define MV_TAG_FENCE  0x04000000u /* | a fence peer's index: its process exited */
#define MV_TAG_HOSTFD 0xffffff10u /* a HOST_FD answer came (any request in flight) */

/* liveness.c */
int mv_peer_watch(struct mover *mv, struct mv_peer *p, char *why, size_t whylen);
void mv_peer_unwatch(struct mover *mv, struct mv_peer *p);
void mv_peer_exited(struct mover *mv, struct mv_peer *p);
void mv_peer_why(const struct mv_peer *p, char *why, size_t whylen);
/* A member that left the cluster: fail the writes to it as to an exited
 * peer, with why (names it and how it left). */
void mv_peer_departed(struct mover *mv, struct mv_peer *p, const char *why);
/* A member back in the cluster (it lost etcd and registered again). */
void mv_peer_rejoined(struct mover *mv, struct mv_peer *p);

/* heartbeat.c: peers' liveness over the fabric, run by shard 0. */
struct mv_hb;
int mv_hb_init(struct mv_shard *s);
void mv_hb_fini(struct mv_shard *s);
void mv_hb_peer_add(struct mv_shard *s, struct mv_peer *p);
int mv_hb_tick(struct mv_shard *s);
/* A heartbeat's completion (err 0) or error: 1 if ctx was one. */
int mv_hb_event(struct mv_shard *s, void *ctx, int err);
/* The peer's liveness in words, for PEER_ADD's reply; its enum mv_live. */
int mv_hb_state(const struct mv_peer *p, char *why, size_t whylen);
/* A shard found garbage from the peer with this mover id: cut it off. */
void mv_peer_garbage(struct mover *mv, uint64_t mover_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Main thread: peers a shard marked as sending garbage are cut off. */
void mv_peer_cut_check(struct mover *mv);

/* wake.c */
int mv_wake_open(struct mover *mv, char *why, size_t whylen);
void mv_wake_close(struct mover *mv);
void mv_wake_peer_open(struct mover *mv, struct mv_peer *p);
void mv_wake_peer_close(struct mv_peer *p);
int mv_wake_arm(struct mv_shard *s);
void mv_wake_disarm(struct mv_shard *s, int woke);
void mv_wake_ring(struct mv_shard *s, struct mv_peer *p);

/* cpus_held.c */
int mv_cpus_held_read(int *used, int max);
void mv_cpus_held_publish(struct mover *mv);
void mv_cpus_held_drop(struct mover *mv);

/* topo.c */
int mv_topo_place(struct mover *mv, char *why, size_t whylen);
void mv_topo_close(struct mover *mv);
uint64_t mv_topo_gpu_mask(struct mover *mv, const char *busid);

/* Nanoseconds on the monotonic clock: the daemon's one clock, the same one
 * libclient stamps submissions with. */
/* Whether the fabric writes wherever a blob says without checking keys or
 * registered ranges: libfabric 1.17's shm copies a one-segment write
 * without remote CQ data into the target process itself (cross-memory
 * attach), unchecked. Such a mover writes into another mover's region only
 * on its owner's word on the blob (samehost_ask.c). */
static inline int mv_fabric_unchecked(const struct mover *mv)
{
	return mv->nshards && !strncmp(mv->shards[0].fab.prov, "shm", 3);
}

static inline int64_t mv_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Pins the calling thread to cpu (none if cpu < 0); 0 or -errno. Inline so
 * mvbench pins its direct threads the same way without linking hwloc. */
static inline int mv_topo_pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return 0;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) ? -errno : 0;
}

/* shard.c (the data path behind it: shard_int.h) */
int mv_shard_start(struct mv_shard *s);
void mv_shard_post(struct mv_shard *s, struct mv_cmd *c);
void *mv_shard_main(void *arg);

/* registry.c */
int mv_region_add(struct mover *mv, struct mv_client *cl, int fd, const struct mv_reg_req *req,
                  struct mv_region **out, char *why, size_t whylen);
int mv_region_add_gpu(struct mover *mv, struct mv_client *cl, const struct mv_gpu_desc *g, int fd,
                      uint64_t len, struct mv_region **out, char *why, size_t whylen);
int mv_region_del(struct mover *mv, struct mv_client *cl, uint32_t id, char *why, size_t whylen);
struct mv_region *mv_region_get(struct mover *mv, uint32_t id);
void mv_region_reap(struct mover *mv, int all);
void mv_region_blob(struct mover *mv, const struct mv_region *r, struct mv_region_blob *b);
/* *live: enum mv_live of the peer now; not MV_LIVE_OK: why says so. */
int mv_peer_add(struct mover *mv, struct mv_client *cl, const struct mv_addr_blob *b, size_t len,
                uint32_t *out, uint32_t *live, char *why, size_t whylen);
int mv_peer_del(struct mover *mv, struct mv_client *cl, uint32_t id, char *why, size_t whylen);
int mv_import_add(struct mover *mv, struct mv_client *cl, uint32_t peer,
                  const struct mv_region_blob *b, size_t len, uint32_t *out, char *why,
                  size_t whylen);
int mv_import_del(struct mover *mv, struct mv_client *cl, uint32_t handle, char *why,
                  size_t whylen);
void mv_addr_blob(struct mover *mv, struct mv_addr_blob *b);
int mv_call_all(struct mover *mv, enum mv_cmd_type type, void *arg, char *why, size_t whylen);
void mv_client_release_all(struct mover *mv, struct mv_client *cl);

/* validate.c: descriptor checks, pure functions so tests can drive them */
int mv_check_write(const struct mv_desc *d, const struct mv_region *src,
                   const struct mv_import *dst, uint32_t owner, char *why, size_t whylen,
                   uint8_t *cause);
/* A peer's address blob; a peer of another wire version is refused with
 * -EPROTO, naming both releases. */
int mv_check_addr_blob(const struct mv_addr_blob *b, size_t len, const char *prov, char *why,
                       size_t whylen);
/* A release field of a blob (untrusted) as printable text. */
void mv_release_text(const char *raw, char out[MV_RELEASE_LEN + 1]);
int mv_check_region_blob(const struct mv_region_blob *b, size_t len, char *why, size_t whylen);
/* A LIST descriptor against its client's arena: copies the list's header
 * into *h and checks it and the entries the descriptor names. */
int mv_check_list(const struct mv_desc *d, const uint8_t *arena, uint64_t arena_size,
                  struct mv_list_hdr *h, char *why, size_t whylen);
/* base + idx * stride, len bytes long, inside [0, limit): the offset in *off,
 * or -EOVERFLOW (the arithmetic wraps) or -ERANGE (outside, or empty).
 * Inline: it runs once per page of a list. */
static inline int mv_check_span(uint64_t base, uint64_t idx, uint64_t stride, uint64_t len,
                                uint64_t limit, uint64_t *off)
{
	uint64_t o;

	if (__builtin_mul_overflow(idx, stride, &o) || __builtin_add_overflow(o, base, &o))
		return -EOVERFLOW;
	if (o > limit || limit - o < len || len == 0)
		return -ERANGE;
	*off = o;
	return 0;
}

/* post.c: the piece a shared shard cuts now (the stats show it) */
uint64_t mv_fair_piece(const struct mv_shard *s);

/* stats.c */
int mv_stats_init(struct mover *mv);
void mv_stats_beat(struct mover *mv, uint32_t clients);
void mv_stats_shard_info(struct mv_shard *s);
void mv_stats_stop(struct mover *mv);
void mv_stats_publish(struct mv_shard *s, int force);

/* trace.c */
/* flags: MV_TRACE_HOPS, each batch record followed by its hops. */
int mv_trace_start(struct mover *mv, int fd, const char *name, uint32_t flags, char *why,
                   size_t whylen);
int mv_trace_stop(struct mover *mv, char *why, size_t whylen);
struct mv_trace_hops;
/* A batch's record, and its hops when the trace asked for them (hops may be
 * NULL); the shard's own queue, never blocking: dropped when full. */
void mv_trace_batch(struct mv_shard *s, const struct mv_trace_rec *rec,
                    const struct mv_trace_hops *hops);
/* Whether the running trace wants hops (a hint: relaxed). */
int mv_tracing_hops(const struct mover *mv);

/* control.c */
int mv_control_run(struct mover *mv);
/* A reply to req on sock: 0 or -errno. */
int mv_control_reply(int sock, const struct mv_msg_hdr *req, const void *payload, size_t len,
                     const int *fds, int nfds);

/* names.c (main thread): the control messages of named regions, and what
 * the cluster thread tells. */
struct mv_rx;
int mv_names_init(struct mover *mv);
void mv_names_free(struct mover *mv);
/* PUBLISH, UNPUBLISH, LOOKUP, CLUSTER: as handle() in control.c. */
int mv_names_handle(struct mover *mv, struct mv_client *cl, struct mv_rx *m, char *why,
                    size_t whylen);
/* The cluster thread's events; parked lookups past their time. */
void mv_names_events(struct mover *mv);
void mv_names_tick(struct mover *mv);
void mv_names_client_gone(struct mover *mv, struct mv_client *cl);
void mv_names_region_gone(struct mover *mv, uint32_t region);

#endif
