/* SPDX-License-Identifier: MIT */
/*
 * libclient's private header: the connection handle the library's files
 * share, and the calls between them. Never installed; applications see only
 * mvc.h. Functions here are hidden from libmvc.so's exports.
 *
 *   client.c  the connection, peers and imports (control socket)
 *   memory.c  regions: allocated, registered fds, CUDA memory
 *   batch.c   building batches in the submission rings, and submitting them
 *   arena.c   the list arena: page and segment lists passed by reference
 *   events.c  completions, immediates and their expectations
 *   rejoin.c  staying connected: the ids the application holds, and
 *             reconnecting to a mover that came back
 */
#ifndef MVC_INT_H
#define MVC_INT_H

#include "mvc.h"

#include <stdint.h>

#include "mv_wire.h"
#include "shmring.h"

#define MVC_INTERNAL __attribute__((visibility("hidden")))

struct mvc_shard {
	struct shmring sub;
	struct shmring comp;
	int doorbell;          /* the mover shard's eventfd */
	uint32_t ndesc;        /* WRITE and LIST descriptors of the open batch here */
	uint64_t nbytes;       /* bytes of the open batch on this shard */
	uint64_t bytes, descs; /* submitted, all time */
	uint64_t load;         /* bytes in flight here: each batch's spread over its parts */
};

struct imm_ent {
	uint32_t value;
	uint32_t count; /* arrived, not yet handed to an expectation */
	uint32_t want;  /* > 0 while an expectation is open */
	uint32_t used;
	uint64_t cookie;
	uint32_t from;  /* the expectation's peer handle + 1; 0: any sender */
	int32_t fail;   /* its peer went down: the status it fails with, due in mvc_poll */
	uint32_t cause; /* ... and the MVC_CAUSE_* */
};

/* What this connection knows of one of its peers (events.c): added, and
 * whether its mover is down, as the mover last told us (PEER completions). */
struct mvc_peer_state {
	uint64_t mover_id; /* from its address blob: a PEER completion for an
	                      earlier peer of the same handle is not about it */
	uint8_t added;
	uint8_t cause; /* MVC_CAUSE_PEER_*: down; 0: up */
	int32_t status;
	char msg[88];
};

/* The list arena (arena.c): lists are taken in submission order, and a
 * batch's bytes come back when it completes. Offsets run free; the byte
 * at free-running offset o is at map[o % size]. */
struct mvc_arena {
	uint8_t *map;
	uint64_t size;
	int fd;
	uint64_t head;       /* next free byte */
	uint64_t tail;       /* first byte still in use */
	uint64_t open_start; /* where the open batch's lists begin */
	/* Batches holding arena bytes, oldest first: the end of each, and
	 * whether it completed. A ring of held_cap entries. */
	struct {
		uint64_t end;
		uint32_t batch;
		uint8_t done;
	} * held;
	uint32_t held_head, held_n, held_cap;
	uint32_t *slot_of; /* per batch id: its entry in held, or UINT32_MAX */
};

/*
 * What a new mover needs to take back the connection's regions, peers and
 * imports (rejoin.c), each under the id the application holds (app) and the
 * current mover's (cur). Until a mover is replaced the two are equal.
 */
enum mvc_obj_kind { MVC_OBJ_REGION, MVC_OBJ_PEER, MVC_OBJ_IMPORT, MVC_OBJ_KINDS };
#define MVC_ID_LOST     UINT32_MAX /* not restored by the last reconnect */
#define MVC_MAX_IMPORTS 4096u      /* the mover's per-client limit */

struct mvc_obj {
	uint32_t app, cur;
	uint32_t kind;
	int fd; /* a region's memfd (the library's own), or -1 */
	uint64_t off, len;
	void *dptr;    /* a CUDA region's device pointer */
	uint32_t peer; /* an import's peer (app id) */
	uint32_t blob_len;
	uint8_t *blob; /* a peer's address blob, an import's region blob; named: the name */
	int named;     /* found by mvc_lookup: restored by looking the name up again */
	uint32_t reg_flags, reg_why; /* a host region's mv_reg_req flags and why */
	struct mvc_mem_info info;    /* a region's backing and costs: mvc_mem_info() */
};

struct mvc {
	int sock;
	uint32_t seq;
	int efd; /* the mover wakes us here */
	/* mvc_event_fd(): an epoll set of efd, tfd and the session's socket
	 * (ep_sock: the one registered, -1 none); -1 until first asked for. */
	int epfd, tfd, ep_sock;
	int dead;
	char cut[MV_ERRLEN];    /* why the mover cut this connection off; "" while it has not */
	struct mvc_latency lat; /* immediates' wait in our rings: mvc_latency() */
	int64_t wait_spin_ns;   /* mvc_wait() polls this long before it sleeps */
	uint64_t arena_nt_min;  /* lists of this many bytes go into the arena by streaming stores */
	struct mvc_info info;
	uint32_t flags; /* MV_HELLO_* */
	uint64_t max_write;
	struct mvc_shard sh[MV_MAX_SHARDS];
	struct mvc_arena arena;

	/* the open batch */
	int open;
	uint32_t batch;
	uint32_t home; /* shard for small writes: the least loaded, per batch */
	uint32_t turn; /* where the search for the next home starts */
	int has_imm;
	/* The open batch writes into an import the shards do not copy into
	 * (c->copied): one with an immediate must gather on one shard where
	 * the mover says MV_HELLO_IMM_ONE_SHARD. Copies are in the target's
	 * memory once their parts complete, before any immediate goes. */
	int uncopied;
	uint32_t imm_dst, imm;
	uint32_t kind;      /* MV_TK_* bits of the open batch, for the trace */
	uint64_t nops;      /* writes, segments or pages asked for */
	uint64_t page_size; /* of its paged writes */

	uint32_t *free_ids;
	uint32_t nfree;
	uint64_t *cookies;
	uint8_t *busy;
	uint64_t *parts_of; /* per batch id in flight: its shards, a bit each */
	uint64_t *share;    /* per batch id in flight: its load on each of them */
	uint32_t inflight;

	struct imm_ent *imm_tab;
	uint32_t imm_cap, imm_used;
	/* Values whose expectation was met when it was made: mvc_poll reports
	 * them before reading the rings. */
	uint32_t *imm_due;
	uint32_t ndue, due_cap;
	struct mvc_peer_state *peers; /* MVC_MAX_PEERS entries, made on first use */
	int peer_scan;                /* expectations failed by a peer going down wait */
	int expects_failed;           /* the mover's loss failed the open expectations */

	/* GPU regions and the shards near them (hwloc, via the mover). */
	struct {
		uint32_t region;
		uint64_t mask;
	} near[64];
	uint32_t nnear;

	/* Imports of GPU regions on this host: the mover copies with CUDA, and
	 * splitting a copy over shards only doubles its launch costs. */
	uint32_t local_gpu[64];
	uint32_t nlocal_gpu;
	/* Imports the mover's shards copy into (the same-host path, as the
	 * import's reply said), by handle: their writes split by
	 * mv_host_parts(). */
	uint64_t copied[MVC_MAX_IMPORTS / 64];
	uint8_t host[16];

	/* Staying connected (rejoin.c). */
	char path[108];      /* the mover's socket */
	uint64_t arena_size; /* the list arena's, for every session */
	uint32_t share_pct;  /* asked for in every session's rings */
	uint32_t huge;       /* enum mvc_huge for mvc_alloc (never DEFAULT) */
	int rejoin;          /* reconnect when the mover goes (not MVC_OPT_NO_RECONNECT) */
	int ctl_timeout_ms;  /* receive timeout on the socket while reconnecting, or 0 */
	int64_t retry_at;    /* CLOCK_MONOTONIC ns of the next try */
	int64_t backoff;     /* ns from a failed try to the next */
	int back;            /* back_ev is due: mvc_poll reports it first */
	struct mvc_event back_ev;
	struct mvc_obj *objs;
	uint32_t nobj, obj_cap;
	int remapped;   /* some app id differs from its cur: ids are translated */
	uint32_t synth; /* app ids made up when a new mover's id was taken */
	uint32_t idle_polls;
	int64_t hup_at; /* when mvc_poll last looked whether the socket hung up */

	char err[256];
};

MVC_INTERNAL int mvc_fail(struct mvc *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* client.c: one request on the control socket and its reply (and fds). */
MVC_INTERNAL int mvc_call(struct mvc *c, uint16_t type, const void *payload, size_t len,
                          const int *fds, int nfds, void *rep, size_t replen, int *rfds,
                          int maxrfds, int *nrfds);
MVC_INTERNAL int mvc_id_call(struct mvc *c, uint16_t type, uint32_t id);
MVC_INTERNAL int mvc_session_open(struct mvc *c);
MVC_INTERNAL void mvc_session_close(struct mvc *c);
MVC_INTERNAL int mvc_reg_fd(struct mvc *c, int fd, uint64_t off, uint64_t len, uint32_t flags,
                            uint32_t why, uint32_t *region, struct mv_reg_rep *rep);
/* memory.c: the connection's enum mvc_huge, from opts or $MVC_HUGEPAGES. */
MVC_INTERNAL int mvc_huge_default(const struct mvc_opts *o, uint32_t *out, char *why,
                                  size_t whylen);
#ifdef MV_HAVE_CUDA
MVC_INTERNAL int mvc_cuda_reg(struct mvc *c, void *dptr, uint64_t len, struct mv_reg_rep *rep);
#endif

/* rejoin.c */
MVC_INTERNAL int mvc_rejoin_init(struct mvc *c, uint32_t flags);
MVC_INTERNAL int mvc_obj_add(struct mvc *c, const struct mvc_obj *o, const void *blob,
                             uint32_t blob_len, uint32_t *app);
MVC_INTERNAL uint32_t mvc_obj_del(struct mvc *c, uint32_t kind, uint32_t app);
MVC_INTERNAL struct mvc_obj *mvc_obj_find(const struct mvc *c, uint32_t kind, uint32_t app);
MVC_INTERNAL void mvc_obj_del_imports_of(struct mvc *c, uint32_t peer);
MVC_INTERNAL int mvc_obj_has_cur(const struct mvc *c, uint32_t kind, uint32_t cur);
MVC_INTERNAL void mvc_objs_free(struct mvc *c);
MVC_INTERNAL uint32_t mvc_cur_slow(const struct mvc *c, uint32_t kind, uint32_t app);
MVC_INTERNAL uint32_t mvc_app_slow(const struct mvc *c, uint32_t kind, uint32_t cur);
MVC_INTERNAL void mvc_gone(struct mvc *c);
MVC_INTERNAL void mvc_expects_gone(struct mvc *c);
MVC_INTERNAL int mvc_rejoin_due(struct mvc *c);
/* Stops the event fd watching the session's socket, before it is closed. */
MVC_INTERNAL void mvc_event_fd_unwatch(struct mvc *c);
/* Closes the event fd's epoll set and timer (mvc_disconnect). */
MVC_INTERNAL void mvc_event_fd_close(struct mvc *c);
MVC_INTERNAL int64_t mvc_rejoin_wait_ns(const struct mvc *c);

/* Whether the shards copy into import handle h (struct mvc's copied). */
static inline int mvc_copied(const struct mvc *c, uint32_t h)
{
	return h < MVC_MAX_IMPORTS && (c->copied[h / 64] >> (h % 64) & 1);
}

static inline void mvc_copied_set(struct mvc *c, uint32_t h, uint32_t path)
{
	if (h >= MVC_MAX_IMPORTS)
		return;
	c->copied[h / 64] &= ~(1ull << (h % 64));
	c->copied[h / 64] |= (uint64_t)(path == MV_PATH_SAMEHOST) << (h % 64);
}

/* The mover's id for an id the application holds, and back: the same
 * until a reconnect gave some object another id. */
static inline uint32_t mvc_cur(const struct mvc *c, uint32_t kind, uint32_t app)
{
	return c->remapped ? mvc_cur_slow(c, kind, app) : app;
}

static inline uint32_t mvc_app(const struct mvc *c, uint32_t kind, uint32_t cur)
{
	return c->remapped ? mvc_app_slow(c, kind, cur) : cur;
}

/* batch.c */
MVC_INTERNAL int mvc_batch_tables_alloc(struct mvc *c, uint32_t nb);
MVC_INTERNAL void mvc_batch_tables_free(struct mvc *c);
MVC_INTERNAL void mvc_batch_done(struct mvc *c, uint32_t b);

/* events.c: peers' liveness. peer_added: live is enum mv_live, msg why
 * when it is not OK. peer_down: fails the expectations naming peer. */
#define MVC_MAX_PEERS 1024u /* the mover's per-client limit */
MVC_INTERNAL void mvc_peer_added(struct mvc *c, uint32_t peer, uint64_t mover_id, uint32_t live,
                                 const char *msg);
MVC_INTERNAL void mvc_peer_down(struct mvc *c, uint32_t peer, int status, int cause,
                                const char *msg);
MVC_INTERNAL void mvc_peer_removed(struct mvc *c, uint32_t peer);
MVC_INTERNAL void mvc_events_free(struct mvc *c);

/* arena.c */
MVC_INTERNAL int mvc_arena_open(struct mvc_arena *a, uint64_t size, uint32_t max_batches, char *why,
                                size_t whylen);
MVC_INTERNAL void mvc_arena_close(struct mvc_arena *a);
MVC_INTERNAL int64_t mvc_arena_take(struct mvc *c, uint64_t bytes);
MVC_INTERNAL void mvc_arena_batch_open(struct mvc_arena *a);
MVC_INTERNAL void mvc_arena_batch_abort(struct mvc_arena *a);
MVC_INTERNAL int mvc_arena_batch_submit(struct mvc_arena *a, uint32_t b);
MVC_INTERNAL void mvc_arena_batch_done(struct mvc_arena *a, uint32_t b);

#endif
