/* SPDX-License-Identifier: MIT */
/*
 * libclient's private header: the connection handle the library's files
 * share, and the calls between them. Never installed; applications see only
 * mvc.h. Functions here are hidden from libmvc.so's exports.
 *
 *   client.c  the connection, memory, peers and imports (control socket)
 *   batch.c   building batches in the submission rings, and submitting them
 *   arena.c   the list arena: page and segment lists passed by reference
 *   events.c  completions, immediates and their expectations
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

struct mvc {
	int sock;
	uint32_t seq;
	int efd; /* the mover wakes us here */
	int dead;
	char cut[MV_ERRLEN];    /* why the mover cut this connection off; "" while it has not */
	struct mvc_latency lat; /* immediates' wait in our rings: mvc_latency() */
	int64_t wait_spin_ns;   /* mvc_wait() polls this long before it sleeps */
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
	uint8_t host[16];

	char err[256];
};

MVC_INTERNAL int mvc_fail(struct mvc *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* client.c: one request on the control socket and its reply (and fds). */
MVC_INTERNAL int mvc_call(struct mvc *c, uint16_t type, const void *payload, size_t len,
                          const int *fds, int nfds, void *rep, size_t replen, int *rfds,
                          int maxrfds, int *nrfds);

/* batch.c */
MVC_INTERNAL int mvc_batch_tables_alloc(struct mvc *c, uint32_t nb);
MVC_INTERNAL void mvc_batch_tables_free(struct mvc *c);
MVC_INTERNAL void mvc_batch_done(struct mvc *c, uint32_t b);

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
