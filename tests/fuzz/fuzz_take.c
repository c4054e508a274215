/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes a shard's data path from the ring to the fabric's doorstep with
 * the daemon's own code: the input's descriptors go into a real submission
 * ring and its bytes into the client's list arena, and mv_consume() takes
 * them (take.c, list.c, validate.c) on a mover of one or two shards (run
 * in turn on this thread) whose client owns one region and imports one
 * peer region (plus a foreign region and a gone peer to name). Every op the shard queues is checked
 * to lie inside its source region and its import, then completed through mv_op_done() (with a
 * failure where the input says), and completions come back on a real completion ring. Unless the
 * client was cut off (one CUTOFF per shard at most), the rings must be drained, every batch with an
 * END must come back (on one shard: exactly once per END, with the bytes its ops wrote; on two: at
 * least once and at most once per END), and no op may be left out of a pool: nothing accepted is
 * lost, nothing waits for ever (a turn limit catches that), nothing escapes its regions.
 *
 * Input: struct take_case; with two shards (virt bit 1) 32 bytes whose
 * bit i sends descriptor i to shard 1; up to 255 descriptors (64 bytes
 * each, the count in the case); then the arena's bytes.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cases.h"
#include "shard_int.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint64_t sizes[] = {4096, 65536, 1 << 20, 1ull << 30, 64ull << 30, 1ull << 40};
#define NSIZES     (sizeof(sizes) / sizeof(sizes[0]))
#define SRC_ID     ((1u << 16) | 1u)
#define FOREIGN_ID ((1u << 16) | 2u)

#define NSH 2 /* shards at most */

static struct mover *mv;
static struct mv_shard *SH[NSH];
static struct mv_attach *AT[NSH];
static uint32_t nsh; /* this input's */
static struct mv_client *cl;
static struct mv_region *src, *foreign;
static struct mv_import *imp, *gone_imp;
static struct mv_peer *peer, *gone_peer;
static uint8_t *space; /* sizes[last] of address space, reserved, never touched */

static void rings_open(void);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char why[128];

	/* The daemon's log lines are formatted (log.c), and dropped. */
	if (mv_log_file("/dev/null", why, sizeof(why)))
		mv_log_level(MV_LOG_ERROR);
	space = mmap(NULL, sizes[NSIZES - 1], PROT_NONE,
	             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	mv = calloc(1, sizeof(*mv));
	struct mv_shard *shards = aligned_alloc(128, NSH * sizeof(*shards));
	cl = calloc(1, sizeof(*cl));
	src = calloc(1, sizeof(*src));
	foreign = calloc(1, sizeof(*foreign));
	imp = calloc(1, sizeof(*imp));
	gone_imp = calloc(1, sizeof(*gone_imp));
	peer = calloc(1, sizeof(*peer));
	gone_peer = calloc(1, sizeof(*gone_peer));
	if (space == MAP_FAILED || !mv || !shards || !cl || !src || !foreign || !imp || !gone_imp ||
	    !peer || !gone_peer)
		abort();
	memset(shards, 0, NSH * sizeof(*shards));
	mv->shards = shards;
	mv->cfg.op_timeout_ms = 10000;
	snprintf(mv->prov, sizeof(mv->prov), "tcp;ofi_rxm");
	cl->id = 1u << 8 | 7u;
	cl->efd = -1;
	cl->state = MV_CL_READY;
	cl->batches = calloc(MV_MAX_BATCHES, sizeof(*cl->batches));
	cl->max_batches = MV_MAX_BATCHES; /* the grant of a client without quotas */
	if (!cl->batches)
		abort();
	for (int k = 0; k < NSH; k++) {
		struct mv_shard *s = SH[k] = &shards[k];
		s->id = k;
		s->mv = mv;
		s->fab.tx_size = 128;
		s->ops = calloc(MV_OPS_PER_SHARD, sizeof(*s->ops));
		AT[k] = calloc(1, sizeof(*AT[k]));
		if (!s->ops || !AT[k])
			abort();
		AT[k]->cl = cl;
		s->uids[0].natt = 1; /* as run_cmd() attaches it: uid slot 0 */
		AT[k]->parts = calloc(MV_MAX_BATCHES, sizeof(*AT[k]->parts));
		if (!AT[k]->parts)
			abort();
		s->att[0] = AT[k];
		s->natt = 1;
		cl->att[k] = AT[k];
	}
	src->id = SRC_ID;
	src->owner = cl->id;
	src->base = space;
	src->key[0] = 11;
	foreign->id = FOREIGN_ID;
	foreign->owner = cl->id + 1; /* another client's */
	foreign->base = space;
	foreign->len = 1 << 20;
	atomic_store(&mv->regions[1], src);
	atomic_store(&mv->regions[2], foreign);
	peer->mover_id = 0xabc;
	peer->nshards = 1;
	gone_peer->mover_id = 0xdef;
	gone_peer->nshards = 1;
	gone_peer->index = 1;
	atomic_store(&gone_peer->gone, MV_PEER_REMOVED);
	imp->peer = peer;
	imp->region = 5;
	imp->nshards = 1;
	imp->key[0] = 42;
	*gone_imp = *imp;
	gone_imp->peer = gone_peer;
	gone_imp->len = 1 << 20;
	atomic_store(&cl->imports[0], imp);
	atomic_store(&cl->imports[1], gone_imp);
	rings_open();
	return 0;
}

/* Per batch id: ENDs written, completions seen, bytes its OK ops wrote. */
static struct {
	uint32_t ends, done;
	uint64_t bytes;
	int failed;
} B[MV_MAX_BATCHES];
static uint32_t cutoffs, nops_done;
static uint64_t fail_bits;

static void op_inside(int k, const struct mv_wr *op)
{
	assert(op->kind == MV_OPK_WRITE || op->kind == MV_OPK_IMM);
	assert(op->at == AT[k] && op->batch < MV_MAX_BATCHES);
	if (op->kind == MV_OPK_IMM) {
		assert(op->peer == peer && op->riov[0].len == 0);
		return;
	}
	assert(op->niov >= 1 && op->niov <= SH[k]->fab.iov_limit && op->peer == peer);
	uint64_t sum = 0;
	for (int i = 0; i < op->niov; i++) {
		const uint8_t *b = op->iov[i].iov_base;
		size_t n = op->iov[i].iov_len;
		assert(n && n == op->riov[i].len && n <= MV_CHUNK);
		assert(b >= src->base && n <= src->len &&
		       (uint64_t)(b - src->base) <= src->len - n);
		uint64_t ra = op->riov[i].addr;
		assert(ra >= imp->addr[0] && ra - imp->addr[0] <= imp->len - n);
		assert(op->riov[i].key == 42);
		sum += n;
	}
	assert(sum == op->bytes && op->bytes <= MV_CHUNK);
}

/* Completes every queued op as the fabric would, with failures as asked. */
static int complete_all(int k)
{
	struct mv_shard *s = SH[k];
	int n = 0;

	while (AT[k]->pq_head) {
		struct mv_wr *op = mv_pend_pop(s, AT[k]);
		op_inside(k, op);
		int err = nops_done < 64 && (fail_bits >> nops_done & 1) ? -EIO : 0;
		nops_done++;
		if (!err && op->kind == MV_OPK_WRITE)
			B[op->batch].bytes += op->bytes;
		if (err)
			B[op->batch].failed = 1;
		mv_op_done(s, op, err, "fuzz: the fabric failed this write");
		n++;
	}
	return n;
}

/* Reads what the shard published, as libmvc would. */
static void drain_cqes(int k)
{
	struct mv_attach *at = AT[k];
	uint32_t pos;

	mv_flush_all(SH[k]);
	struct shmring_layout *lay = at->comp.lay;
	uint32_t head = atomic_load(&lay->cons.idx), tail = atomic_load(&lay->prod.idx);
	for (pos = head; pos != tail; pos++) {
		struct mv_cqe c;
		memcpy(&c, shmring_slot(&at->comp, pos), sizeof(c));
		assert(memchr(c.msg, 0, sizeof(c.msg)));
		if (c.type == MV_CQE_CUTOFF) {
			cutoffs++;
			continue;
		}
		assert(c.type == MV_CQE_BATCH && c.batch < MV_MAX_BATCHES);
		if (getenv("FUZZ_TAKE_VERBOSE"))
			fprintf(stderr, "cqe batch %u status %d cause %u bytes %llu: %s\n", c.batch,
			        c.status, c.cause, (unsigned long long)c.bytes, c.msg);
		B[c.batch].done++;
		/* No more completions than ENDs; on one shard each is for the
		 * END just taken, with the bytes of its own ops. */
		assert(B[c.batch].done <= B[c.batch].ends);
		if (c.status == 0)
			assert(nsh > 1 || (c.bytes == B[c.batch].bytes && !B[c.batch].failed));
		else
			assert(c.status < 0 && c.cause != MV_CAUSE_NONE && c.msg[0]);
		B[c.batch].bytes = 0;
		B[c.batch].failed = 0;
	}
	atomic_store(&lay->cons.idx, tail);
}

/* The rings and the op pools are made once; each input starts them empty. */
static void rings_open(void)
{
	struct shmring_opts so = {.capacity = 256, .slot_size = sizeof(struct mv_desc)};
	struct shmring_opts co = {.capacity = 64, .slot_size = sizeof(struct mv_cqe)};

	for (int k = 0; k < NSH; k++) {
		struct mv_shard *s = SH[k];
		if (shmring_create(&AT[k]->sub, &so, SHMRING_CONSUMER) ||
		    shmring_create(&AT[k]->comp, &co, SHMRING_PRODUCER))
			abort();
		for (uint32_t i = 0; i < MV_OPS_PER_SHARD; i++) {
			s->ops[i].next = s->free_ops;
			s->free_ops = &s->ops[i];
			s->nfree++;
		}
	}
}

static void rings_empty(struct mv_attach *at)
{
	atomic_store(&at->sub.lay->prod.idx, 0);
	atomic_store(&at->sub.lay->cons.idx, 0);
	at->sub.local = at->sub.cached = 0;
	at->sub.corrupt = 0;
	atomic_store(&at->comp.lay->prod.idx, 0);
	atomic_store(&at->comp.lay->cons.idx, 0);
	at->comp.local = 0;
	at->comp.cached = at->comp.capacity;
	at->comp.corrupt = 0;
}

static void reset(const struct take_case *c, uint8_t *arena, uint64_t arena_size)
{
	src->len = sizes[c->src_size % NSIZES];
	imp->len = sizes[c->dst_size % NSIZES];
	imp->addr[0] = c->virt & 1 ? 0x7f0000000000ull : 0;
	nsh = c->virt & 2 ? 2 : 1;
	mv->nshards = nsh;
	cl->arena = arena;
	cl->arena_size = arena_size;
	atomic_store(&cl->cut, 0);
	cl->cut_why[0] = 0;
	for (int k = 0; k < NSH; k++) {
		struct mv_attach *at = AT[k];
		struct shmring sub = at->sub, comp = at->comp;
		struct mv_part *parts = at->parts;
		SH[k]->fab.iov_limit = 1 + c->iov % MV_IOV_MAX;
		free(at->ovf);
		free(at->waits);
		memset(at, 0, sizeof(*at));
		at->cl = cl;
		at->weight = MV_SHARE_FULL; /* as run_cmd() attaches it */
		at->parts = parts;
		at->sub = sub;
		at->comp = comp;
		rings_empty(at);
		SH[k]->now = mv_now_ns();
	}
	cutoffs = nops_done = 0;
	fail_bits = c->fail;
}

/* What an input touched goes back to zero: batch tables and their parts. */
static void forget(const uint8_t *descs, size_t nd)
{
	for (size_t i = 0; i < nd; i++) {
		struct mv_desc d;
		memcpy(&d, descs + i * sizeof(d), sizeof(d));
		uint32_t b = d.batch % MV_MAX_BATCHES;
		memset(&cl->batches[b], 0, sizeof(cl->batches[b]));
		for (int k = 0; k < NSH; k++)
			memset(&AT[k]->parts[b], 0, sizeof(AT[k]->parts[b]));
		memset(&B[b], 0, sizeof(B[b]));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct take_case c;

	if (size < sizeof(c))
		return 0;
	memcpy(&c, data, sizeof(c));
	data += sizeof(c);
	size -= sizeof(c);
	uint8_t route[32] = {0};
	if (c.virt & 2) {
		size_t r = size < sizeof(route) ? size : sizeof(route);
		memcpy(route, data, r);
		data += r;
		size -= r;
	}
	size_t nd = c.ndesc;
	if (nd * sizeof(struct mv_desc) > size)
		nd = size / sizeof(struct mv_desc);
	const uint8_t *descs = data;
	data += nd * sizeof(struct mv_desc);
	size -= nd * sizeof(struct mv_desc);
	/* The arena as the client's memfd holds it, exactly that long. */
	uint64_t arena_size = (uint64_t)(c.arena_kb % 128) * MV_LIST_ALIGN;
	uint8_t *arena = arena_size ? calloc(1, arena_size) : NULL;
	if (arena)
		memcpy(arena, data, size < arena_size ? size : arena_size);

	reset(&c, arena, arena_size);
	uint32_t put[NSH] = {0};
	for (size_t i = 0; i < nd; i++) {
		struct mv_desc d;
		int k = nsh == 2 && (route[i / 8] >> (i % 8) & 1);
		memcpy(&d, descs + i * sizeof(d), sizeof(d));
		if (d.op == MV_OP_END && d.batch < MV_MAX_BATCHES)
			B[d.batch].ends++;
		memcpy(shmring_slot(&AT[k]->sub, put[k]++), &d, sizeof(d));
	}
	/* The client commits them all at once. */
	for (int k = 0; k < NSH; k++)
		atomic_store(&AT[k]->sub.lay->prod.idx, put[k]);

	int turns = 0;
	for (;;) {
		int n = 0;
		for (uint32_t k = 0; k < nsh; k++) {
			SH[k]->now = mv_now_ns();
			n += mv_consume(SH[k]);
			/* What consume published first: a batch id may be used
			 * again by the ops it queued after that. */
			drain_cqes((int)k);
			n += complete_all((int)k);
			drain_cqes((int)k);
		}
		if (!n)
			break;
		assert(++turns < 10000); /* a descriptor that keeps the ring waiting */
	}
	/* Quiet for three op timeouts: parts that promised more come out. */
	for (uint32_t k = 0; k < nsh; k++) {
		SH[k]->now = mv_now_ns() + 4ll * mv->cfg.op_timeout_ms * 1000000;
		mv_expire_waits(SH[k]);
		complete_all((int)k);
		drain_cqes((int)k);
	}
	/* A cut-off is told on every ring at the shard's next turn. */
	for (uint32_t k = 0; k < nsh; k++) {
		mv_consume(SH[k]);
		drain_cqes((int)k);
		complete_all((int)k);
		drain_cqes((int)k);
	}

	if (getenv("FUZZ_TAKE_VERBOSE")) { /* what a replayed input did */
		fprintf(stderr, "shards %u, ops %u, cut %d (%s), taken %u + %u of %zu\n", nsh,
		        nops_done, atomic_load(&cl->cut), cl->cut_why,
		        atomic_load(&AT[0]->sub.lay->cons.idx),
		        atomic_load(&AT[1]->sub.lay->cons.idx), nd);
		for (uint32_t b = 0; b < MV_MAX_BATCHES; b++)
			if (B[b].ends)
				fprintf(stderr, "batch %u: %u END, %u completions\n", b, B[b].ends,
				        B[b].done);
	}
	for (uint32_t k = 0; k < nsh; k++) {
		assert(SH[k]->nfree == MV_OPS_PER_SHARD && !SH[k]->npend); /* no op lost */
		assert(!SH[k]->uids[0].ops);                                  /* nor counted */
		assert(!AT[k]->cur.active);
	}
	if (atomic_load(&cl->cut)) {
		assert(cutoffs >= 1 && cutoffs <= nsh && cl->cut_why[0]);
	} else {
		assert(cutoffs == 0);
		for (uint32_t k = 0; k < nsh; k++) /* all taken */
			assert(atomic_load(&AT[k]->sub.lay->cons.idx) == put[k]);
		for (uint32_t b = 0; b < MV_MAX_BATCHES; b++)
			assert(nsh == 1 ? B[b].done == B[b].ends : !B[b].ends == !B[b].done);
	}
	forget(descs, nd);
	free(arena);
	return 0;
}
