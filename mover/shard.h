/* SPDX-License-Identifier: MIT */
/*
 * A shard's state: the mailbox commands the main thread sends it, its
 * counters, and struct mv_shard, which its thread alone writes (but the
 * mailbox and the few fields marked otherwise). Included by mover.h where
 * the types it names are declared; read mover.h's opening for who owns
 * what.
 */
#ifndef MV_SHARD_H
#define MV_SHARD_H

#ifndef MV_MOVER_H
#error "include mover.h, which includes this header"
#endif

enum mv_cmd_type {
	MV_CMD_ATTACH,   /* start polling a client's rings */
	MV_CMD_DETACH,   /* drain a client, then drop it */
	MV_CMD_REG,      /* register a region on this shard's domain */
	MV_CMD_DEREG,    /* close this shard's MR of a region */
	MV_CMD_PEER_ADD, /* insert the peer's address into the AV */
	MV_CMD_SYNC,     /* a grace period: acknowledged at a loop boundary */
	MV_CMD_STOP,     /* drain everything and leave the loop */
};

/* A mailbox command; the main thread waits on done. */
struct mv_cmd {
	enum mv_cmd_type type;
	struct mv_cmd *next;
	void *arg;
	int status;
	char msg[MV_ERRLEN];
	sem_t *done;
};

struct mv_wr;

/* Shard-local counters: plain, copied to the stats segment by stats.c. */
struct mv_shard_counters {
	uint64_t posted, completed, bytes, eagain, cq_errors, imm_rx, descs, retries;
	uint64_t posted_small; /* of posted, on the small-write endpoint (fab.ep_small) */
	uint64_t copy_stops;   /* same-host copies stopped partway for another client */
	uint64_t holds;        /* large pieces held for another client (post.c) */
	uint64_t promoted;     /* ops moved ahead of a head whose peer could not take it */
	uint64_t batches, timeouts, sleeps, wakes, trace_dropped;
	uint64_t path_bytes[5]; /* by enum mv_gpu_path: host, HMEM, CUDA copy, staged, same host */
	uint64_t hop_sum[MV_HOPS];
	uint64_t hop[MV_HOPS][MV_HOP_BUCKETS]; /* stats_layout.h says what each hop is */
};

struct mv_stats_hdr;
struct mv_stats_shard;
struct mv_stats_ring;
struct mv_stats_peer;
struct mv_tracer;
struct mv_trace_rec;

struct mover;

/* Shards sit in one array: each starts on its own 128-byte unit, so one
 * shard's hot words never share a line (or an adjacent-line pair) with
 * another's. */
struct mv_shard {
	alignas(128) int id;
	struct mover *mv;
	pthread_t thread;
	int cpu;
	int numa;
	char iface[64]; /* the NIC this shard drives, from the provider's list */
	char pci[32];
	struct mv_fabric fab; /* opened by the shard thread after pinning */
	int start_status;
	char start_msg[MV_ERRLEN];
	sem_t started;
	int efd;     /* doorbell: clients and the main thread wake the shard here */
	int wake_fd; /* shm: same-host peers wake the sleeping shard here (wake.c) */

	pthread_mutex_t mbox_mu;
	struct mv_cmd *mbox_head, *mbox_tail;
	_Atomic int mbox_pending;
	struct mv_cmd *stop_cmd;

	struct mv_attach *att[MV_MAX_CLIENTS];
	uint32_t natt;
	uint32_t rr;

	struct mv_wr *ops;
	struct mv_wr *free_ops;
	uint32_t nfree;     /* ops free: on free_ops, and ops[ops_fresh..] */
	uint32_t ops_fresh; /* ops[ops_fresh..] were never used (untouched pages) */
	uint32_t npend;     /* ops on the clients' queues (at->pq_head), all together */
	/* Clients with queued ops, in deficit round robin order (post.c). */
	struct mv_attach *round_head, *round_tail;
	/* Clients active on this shard (ops queued or in flight, or a
	 * descriptor taken within MV_FAIR_LINGER_NS), as the last consume
	 * found them, and the sum of their weights: with two or more, the
	 * shard is shared and posts in fair shares (post.c). */
	uint32_t nactive;
	uint64_t wsum;
	uint32_t posted;       /* ops handed to the provider, not yet completed */
	uint32_t posted_small; /* of those, and heartbeats, on fab.ep_small: its CQ is
	                        * read while any */
	uint32_t abandoned;    /* of those, failed at their deadline */
	struct mv_wr *posted_head, *posted_tail;
	int64_t next_expire;
	uint32_t seen_deaths; /* mv->peer_deaths when posted ops were last checked */
	int64_t now;          /* CLOCK_MONOTONIC ns at the start of this loop turn */
	int64_t woke_at;      /* when this shard last woke a client or a peer shard */
	int64_t post_hold;    /* after a full queue, no post before this (post.c) */
	int64_t piece_ns;     /* a large piece's post while shared, on average (post.c) */
	int64_t kib_ns;       /* and its cost per KiB, on average: mv_fair_piece() (post.c) */
	int ring_cut;         /* mv_post() ended its burst for another client's ring */
	int64_t hold_ns;      /* the wait after the last refusal in a row, or 0 */
	uint64_t rx_seen;     /* rx_cntr's value when last read */
	/* Heartbeats (heartbeat.c), shard 0 only: one slot per peer index. */
	struct mv_hb *hb;
	uint32_t hb_n;        /* slots up to the highest peer index seen, + 1 */
	int64_t hb_next;      /* the next look at the peers */
	int64_t hb_round;     /* when heartbeats next go out, to every peer at once */
	uint32_t hb_deaths;   /* mv->peer_deaths at the last look */
	uint64_t imm_unknown; /* immediates for no region we know (no sender to blame) */
	uint64_t hb_rx;       /* peers' heartbeats that carried remote CQ data (shm) */

	struct mv_shard_counters st;
	uint8_t *bell; /* the doorbell immediates land on (see mv_addr_blob) */
	struct fid_mr *bell_mr;
	void *bell_desc;
	uint64_t bell_key;
	struct mv_gpu_shard gpu;
	struct mv_wr *gq_head, *gq_tail; /* GPU copies in flight, in stream order */
	uint32_t nsq, npk;               /* staged writes waiting for a bounce chunk, on their
	                                  * clients' queues (at->sq_head) and parked (at->pk_head) */
	uint32_t sq_rr;                  /* the client whose staged write takes the next chunk */
	int unpark;                      /* a chunk came free: the parked try again */
	uint16_t freed_pix[MV_BOUNCE_CHUNKS]; /* ... of these peers since the last try */
	uint32_t nfreed;
	int64_t chunks_full_since;       /* every chunk held, none freed since (0: not so) */
	int64_t chunks_told;             /* the chunks_full_since the log told of */
	uint32_t ngpu;                   /* ops in those queues */
	struct mv_wr *rq_head, *rq_tail; /* writes waiting to be posted again, due at posted_at */
	uint32_t nretry;
	struct mv_land_buf *land; /* the receive pool, once a GPU region needs it */
	struct fid_mr *land_mr;
	void *land_desc;
	struct mv_land_buf *lq_head, *lq_tail; /* arrived: copying, then acking */
	uint32_t nland_busy;
	struct fid_mr *ops_mr; /* the op pool, where landing headers live */
	void *ops_desc;
	uint32_t seq;
	struct {
		uint64_t mover_id;
		uint32_t shard;
		fi_addr_t fa;
	} senders[64]; /* landing senders this shard has put in its AV */
	uint32_t nsenders;
	int gpu_open_dev; /* device of copies queued since the last fence, or -1 */
	struct {
		uint64_t bytes, writes, errors;
	} pst[256]; /* per peer slot (first 256), for the stats */
	struct mv_stats_shard *pub;
	struct mv_stats_ring *pub_rings;
	struct mv_stats_peer *pub_peers;
	int64_t next_pub, next_rows;
	_Atomic uint64_t trace_dropped_pub;
	/* By uid of the clients: the ops each uid holds of the pool
	 * (mv_pool_room()) and the bounce chunks (gpu_path.c's chunk_room()),
	 * those of writes failed at their deadline that the provider still
	 * holds too (they outlive their client), and its clients attached
	 * here. A slot is free while ops and natt are 0. */
	struct mv_uid_ops {
		uid_t uid;
		uint32_t ops;
		uint32_t natt;
		uint32_t chunks;
		int64_t moved_at; /* when a chunk of its was last taken or freed */
	} uids[MV_UID_SLOTS];
	/* By peer index, last (24 KiB a shard, read one entry a post): posted
	 * ops of s->posted, landing messages sent and not yet acked (each peer
	 * has its own window, so one that stops acking holds up only the
	 * writes into it), and bounce chunks held. */
	uint32_t posted_to[MV_MAX_PEERS];
	uint8_t land_to[MV_MAX_PEERS];
	uint8_t chunks_to[MV_MAX_PEERS]; /* bounce chunks held by staged writes */
	/* When the peer last completed one of this shard's writes posted on
	 * ep, [0], or on ep_small, [1] (s->now, or 0): a posted write fails
	 * only once its connection to the peer completed none for op_timeout
	 * (mv_expire()), so a slow link's deep queue is not "gone". */
	int64_t took_at[2][MV_MAX_PEERS];
};

#endif /* MV_SHARD_H */
