/* SPDX-License-Identifier: MIT */
/*
 * The shard's private header, shared by the files of the shard thread and
 * by nothing else: the op (struct mv_wr: one fabric write, GPU copy or
 * landing message from a shard's pool), the helpers on the pool and its
 * queues, inline because they run once per op, and the calls from one stage
 * of the data path to the next. All of it runs on the shard's own thread.
 *
 * A descriptor's way through a shard, file by file:
 *
 *   the client's submission ring
 *     -> take.c      descriptors, validated, become ops on their client's
 *                    queue (list.c: lists in the client's arena, expanded lazily)
 *                    (gpu_path.c: CUDA copies and bounce staging; land.c:
 *                    landing messages into GPU memory the fabric cannot reach)
 *     -> post.c      the clients' queues go to the fabric in fair shares
 *                    (deficit round robin on bytes, by weight), with retries
 *                    (queue.c: a client's writes to other peers past a head
 *                    whose peer cannot take it)
 *     -> complete.c  fabric completions and deadlines end ops
 *     -> batch.c     ended ops finish batch parts; completions go back on the
 *                    client's completion ring
 *
 * shard.c runs the loop over these stages, the mailbox and the attachments;
 * idle.c decides when a shard spins and sleeps.
 */
#ifndef MV_SHARD_INT_H
#define MV_SHARD_INT_H

#include "mover.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_rma.h>

#define SPIN_NS     200000   /* busy-poll this long after the last work, */
#define SPIN_MAX_NS 10000000 /* or up to this long while traffic has gaps */

enum mv_op_kind {
	MV_OPK_WRITE = 1, /* a fabric write */
	MV_OPK_IMM = 2,   /* a fabric write of remote CQ data, after a batch */
	MV_OPK_COPY = 3,  /* a CUDA copy into a same-host peer's GPU memory (path 2) */
	MV_OPK_STAGE = 4, /* GPU -> bounce chunk, then a fabric write (path 3) */
	MV_OPK_LAND = 5,  /* a landing message: the target copies it to its GPU, then acks */
};

struct mv_wr {
	struct fi_context2 ctx; /* first: the provider's scratch, and our cookie */
	struct mv_wr *next;
	/* Queued, the first op of a run (ops in a row to one peer, post.c's
	 * promote()): the run's last op. */
	struct mv_wr *run_last;
	struct mv_wr *pprev, *pnext; /* the posted list, oldest first */
	int64_t posted_at;
	int abandoned;        /* reported as failed; waits for the provider to let go */
	int retries;          /* re-posts after connection-level errors */
	int64_t born;         /* could go since (queued at its client's head): retries' budget */
	void *ev;             /* GPU ops: the CUDA event after the copy */
	int chunk;            /* staged: the bounce chunk it holds, or -1 */
	int dev;              /* GPU ops: the device whose stream runs the copy */
	int src_dev, dst_dev; /* -1: host memory */
	uint8_t path;         /* enum mv_gpu_path, for the stats */
	uint64_t csrc, cdst;  /* GPU ops: copy source and destination */
	int land;             /* staged: a landing message once in the bounce chunk */
	int acks;             /* landing: events still due, the send's and the ack */
	uint32_t seq;         /* landing: matches the ack to this use of the op */
	int land_err;
	uint32_t src_region;  /* GPU and landing ops: for the messages naming them */
	uint32_t dst_region;  /* ... the peer's region written */
	int land_counted;     /* counted in s->land_to[pix] (in flight) */
	uint16_t pix;         /* posted: its peer's index, kept (the peer may go first) */
	uint16_t uix;         /* its client's uid slot (s->uids): mv_op_own() */
	uint8_t uid_owned;    /* counted in s->uids[uix].ops (mv_op_own()) */
	int inflight_counted; /* counted in at->inflight (posted, not yet reported) */
	struct mv_attach *at;
	struct mv_peer *peer;
	struct mv_host_remote *hr; /* MV_PATH_SAMEHOST: copied into, not posted */
	uint32_t batch;
	uint8_t kind;
	uint8_t niov;
	uint8_t with_imm; /* a WRITE that carries its batch's immediate (data) */
	uint8_t on_small; /* posted on the small-write endpoint (fab.ep_small) */
	uint8_t promoted; /* queued ahead of a head whose peer could not take it (queue.c) */
	uint8_t waiting;  /* queued, its deadline counts: it was its client's head */
	uint8_t tix;      /* posted: its slot in at->to[], MV_TIX_MORE or MV_TIX_NONE */
	uint64_t bytes;
	uint64_t copied; /* MV_PATH_SAMEHOST: bytes copied so far (bytes: what is left) */
	uint64_t data;
	uint64_t cookie;
	struct iovec iov[MV_IOV_MAX];
	void *desc[MV_IOV_MAX];
	struct fi_rma_iov riov[MV_IOV_MAX];
	struct mv_land_hdr lhdr; /* landing: sent ahead of the data */
};

/* ---- run once an op or a completion, so inline: the op pool, its queues, lookups ---- */

/* A running average that weighs the newest value an eighth; 0 means none
 * yet, so the first value (1 at least) starts it. */
static inline int64_t mv_avg8(int64_t avg, int64_t v)
{
	return avg ? (avg * 7 + v) / 8 : v > 0 ? v : 1;
}

/* Drops op's first k iovs, all of whose bytes were passed. */
static inline void mv_wr_drop(struct mv_wr *op, uint32_t k)
{
	op->niov = (uint8_t)(op->niov - k);
	memmove(op->iov, op->iov + k, op->niov * sizeof(op->iov[0]));
	memmove(op->desc, op->desc + k, op->niov * sizeof(op->desc[0]));
	memmove(op->riov, op->riov + k, op->niov * sizeof(op->riov[0]));
}

/* Moves iov k's front past n bytes, fewer than its length (whose local
 * and remote sides have the same length: take.c). */
static inline void mv_wr_skip(struct mv_wr *op, uint32_t k, uint64_t n)
{
	op->iov[k].iov_base = (uint8_t *)op->iov[k].iov_base + n;
	op->iov[k].iov_len -= n;
	op->riov[k].addr += n;
	op->riov[k].len -= n;
}

/* Moves op's front past n bytes of its first iov (n at most that iov's
 * length): that iov shrinks, or goes when all of it is passed. op->bytes
 * stays. */
static inline void mv_wr_advance(struct mv_wr *op, uint64_t n)
{
	if (n == op->iov[0].iov_len)
		mv_wr_drop(op, 1);
	else
		mv_wr_skip(op, 0, n);
}

static inline struct mv_wr *mv_op_get(struct mv_shard *s)
{
	struct mv_wr *op = s->free_ops;

	if (op)
		s->free_ops = op->next;
	else if (s->ops_fresh < MV_OPS_PER_SHARD)
		op = &s->ops[s->ops_fresh++]; /* first use: calloc'd, never put */
	else
		return NULL;
	s->nfree--;
	memset(op, 0, offsetof(struct mv_wr, iov));
	op->chunk = -1;
	return op;
}

/* Whether one holder (a peer, a uid) may take one more of total things
 * while it holds mine and the others hold others: while mine stays under
 * num/den of what the others leave. The per-peer half of the provider's
 * queue (post.c's room_for()) and of the bounce chunks (gpu_path.c's
 * chunk_room()), and the per-uid three quarters of the op pool and of the
 * chunks, are all this rule. */
static inline int mv_within_share(uint64_t mine, uint64_t others, uint64_t total, unsigned num,
                                  unsigned den)
{
	return others < total && den * mine < num * (total - others);
}

/*
 * Whether at may take more ops from the shard's pool: its weighted share
 * while other clients are active, and half while none is, since others
 * may come (a client whose peer took nothing held every op until its queue
 * expired, op_timeout later, and a client that came then took none), so
 * that a flood of small writes cannot take every op. A client alone too:
 * one that came while the first one's writes waited on a stopped peer
 * found every op taken. And the clients of one uid together hold at most
 * three quarters of what other uids' clients leave, the ops of their writes
 * that their peers never took included: each client took its share while
 * the shares were larger (a half, then a third), so three clients of one
 * uid, their writes waiting on a stopped peer, held every op, and another
 * uid's client waited for those writes to fail. Three quarters, not half:
 * beside a client that holds its half, another of its uid still finds ops.
 */
static inline int mv_pool_room(const struct mv_shard *s, const struct mv_attach *at)
{
	uint64_t w = s->wsum > at->weight ? s->wsum : (uint64_t)at->weight * 2;
	uint64_t uid = s->uids[at->uix].ops, held = MV_OPS_PER_SHARD - s->nfree;

	return at->outstanding <= (uint64_t)MV_OPS_PER_SHARD * at->weight / w &&
	       mv_within_share(uid, held - uid, MV_OPS_PER_SHARD, 3, 4);
}

/* op is at's: counted in its client's ops until reported, and in its
 * uid's ops of the pool until it goes back to the pool (an op reported at
 * its deadline stays the provider's until it lets go), for mv_pool_room(). */
static inline void mv_op_own(struct mv_shard *s, struct mv_attach *at, struct mv_wr *op)
{
	at->outstanding++;
	op->uix = at->uix;
	op->uid_owned = 1;
	s->uids[at->uix].ops++;
}

/* Why a write failed whose peer took none in op_timeout (queued or parked). */
static inline void mv_took_none(const struct mv_shard *s, const struct mv_peer *p, char *text,
                                size_t len)
{
	snprintf(text, len, "peer mover %016llx took no write for %d ms: unreachable or gone",
	         (unsigned long long)p->mover_id, s->mv->cfg.op_timeout_ms);
}

static_assert(MV_ATTACH_PEERS < MV_TIX_NONE && MV_TIX_MORE < MV_TIX_NONE,
              "mv_wr.tix holds a slot, MV_TIX_MORE or MV_TIX_NONE");
static_assert(MV_MAX_PEERS <= UINT16_MAX + 1, "mv_wr.pix indexes to_more[]");

/* at's bytes in flight to the peer of index pix. */
static inline uint64_t mv_inflight_to(const struct mv_attach *at, uint32_t pix)
{
	for (uint32_t i = 0; i < MV_ATTACH_PEERS; i++)
		if (at->to[i].ops && at->to[i].pix == pix)
			return at->to[i].bytes;
	return at->to_more && pix < MV_MAX_PEERS ? at->to_more[pix].bytes : 0;
}

/* Counts op's bytes where its peer's are counted: its peer's slot, else
 * to_more[] where the peer has ops there already, else a free slot, else
 * to_more[] (made now). op->tix says which: a slot, MV_TIX_MORE, or
 * MV_TIX_NONE when to_more[] cannot be made (the op is then not counted by
 * peer, and a backlog of its peer's is not passed). */
static inline void mv_inflight_to_add(struct mv_attach *at, struct mv_wr *op)
{
	struct mv_inflight_to *t = NULL;
	uint32_t free = MV_ATTACH_PEERS;

	for (uint32_t i = 0; i < MV_ATTACH_PEERS; i++) {
		if (at->to[i].ops && at->to[i].pix == op->pix) {
			free = i;
			break;
		}
		if (!at->to[i].ops && free == MV_ATTACH_PEERS)
			free = i;
	}
	if (free < MV_ATTACH_PEERS &&
	    (at->to[free].ops || !at->to_more || !at->to_more[op->pix].ops)) {
		t = &at->to[free];
		op->tix = (uint8_t)free;
	} else {
		if (!at->to_more && op->pix < MV_MAX_PEERS)
			at->to_more = calloc(MV_MAX_PEERS, sizeof(*at->to_more));
		if (!at->to_more || op->pix >= MV_MAX_PEERS) {
			op->tix = MV_TIX_NONE;
			return;
		}
		t = &at->to_more[op->pix];
		op->tix = MV_TIX_MORE;
	}
	t->pix = op->pix;
	t->ops++;
	t->bytes += op->bytes;
}

static inline void mv_posted_add(struct mv_shard *s, struct mv_wr *op)
{
	op->inflight_counted = 1;
	op->at->inflight += op->bytes;
	op->at->inflight_ops++;
	op->at->posted_bytes += op->bytes;
	op->posted_at = s->now;
	op->pix = (uint16_t)op->peer->index;
	mv_inflight_to_add(op->at, op);
	s->posted_to[op->pix]++;
	op->pnext = NULL;
	op->pprev = s->posted_tail;
	if (s->posted_tail)
		s->posted_tail->pnext = op;
	else
		s->posted_head = op;
	s->posted_tail = op;
	s->posted++;
	s->posted_small += op->on_small;
}

/* Op's peer completed it (or part of it): its connection moves. */
static inline void mv_peer_took(struct mv_shard *s, const struct mv_wr *op)
{
	s->took_at[op->on_small][op->pix] = s->now;
}

/* When peer p last completed one of the shard's writes, on either endpoint. */
static inline int64_t mv_peer_took_at(const struct mv_shard *s, const struct mv_peer *p)
{
	int64_t a = s->took_at[0][p->index], b = s->took_at[1][p->index];

	return a > b ? a : b;
}

/* Since when op has waited, counted from `from` (its post; its retries'
 * budget, born): then, or the last completion on its connection to its
 * peer after that, as mv_expire() and mv_retry() count. */
static inline int64_t mv_conn_since(const struct mv_shard *s, const struct mv_wr *op, int64_t from)
{
	int64_t took = s->took_at[op->on_small][op->pix];

	return took > from ? took : from;
}

/* Op's bytes leave its client's in flight: once, when it completes or is
 * reported (an abandoned op is reported at its deadline, and its client may
 * be gone by the time the provider lets the op go). */
static inline void mv_inflight_end(struct mv_wr *op)
{
	if (op->inflight_counted) {
		op->at->inflight -= op->bytes;
		op->at->inflight_ops--;
		struct mv_inflight_to *t = op->tix < MV_ATTACH_PEERS ? &op->at->to[op->tix]
		                           : op->tix == MV_TIX_MORE  ? &op->at->to_more[op->pix]
		                                                     : NULL;
		if (t) {
			t->bytes -= op->bytes;
			t->ops--;
		}
	}
	op->inflight_counted = 0;
}

static inline void mv_posted_del(struct mv_shard *s, struct mv_wr *op)
{
	mv_inflight_end(op);
	if (op->pprev)
		op->pprev->pnext = op->pnext;
	else
		s->posted_head = op->pnext;
	if (op->pnext)
		op->pnext->pprev = op->pprev;
	else
		s->posted_tail = op->pprev;
	s->posted--;
	s->posted_to[op->pix]--;
	s->posted_small -= op->on_small;
}

static inline void mv_op_put(struct mv_shard *s, struct mv_wr *op)
{
	if (op->uid_owned)
		s->uids[op->uix].ops--;
	if (op->land_counted)
		s->land_to[op->pix]--;
	op->land_counted = 0;
	if (op->chunk >= 0) {
		s->gpu.free_chunks |= 1u << op->chunk;
		s->chunks_to[op->pix]--;
		/* Its peer moved: the parked writes to it try again, their
		 * deadline counting from now (gpu_path.c). */
		if (s->nfreed < MV_BOUNCE_CHUNKS)
			s->freed_pix[s->nfreed++] = op->pix;
		s->unpark = 1;
		s->chunks_full_since = 0;
		s->uids[op->uix].chunks--;
		s->uids[op->uix].moved_at = s->now;
	}
	op->next = s->free_ops;
	s->free_ops = op;
	s->nfree++;
}

/* Appends op to the FIFO of ops at *head .. *tail (pending, retry, staged,
 * GPU copies in flight: each queue is the shard's own). */
static inline void mv_wr_append(struct mv_wr **head, struct mv_wr **tail, struct mv_wr *op)
{
	op->next = NULL;
	if (*tail)
		(*tail)->next = op;
	else
		*head = op;
	*tail = op;
}

/*
 * Takes out of the FIFO *head .. *tail, in order, the ops of client at
 * (NULL: any client) to peer p (NULL: any peer), as a list linked by next;
 * how many in *n. What stays keeps its order.
 */
static inline struct mv_wr *mv_wr_take(struct mv_wr **head, struct mv_wr **tail,
                                       const struct mv_attach *at, const struct mv_peer *p,
                                       uint32_t *n)
{
	struct mv_wr **pp = head, *keep_tail = NULL, *out = NULL, *out_tail = NULL;

	*n = 0;
	while (*pp) {
		struct mv_wr *op = *pp;
		if ((at && op->at != at) || (p && op->peer != p)) {
			keep_tail = op;
			pp = &op->next;
			continue;
		}
		*pp = op->next;
		mv_wr_append(&out, &out_tail, op);
		(*n)++;
	}
	*tail = keep_tail;
	return out;
}

/* One duration into hop h's histogram (stats_layout.h). */
static inline void mv_hop(struct mv_shard *s, enum mv_hop h, int64_t ns)
{
	if (ns < 0)
		ns = 0;
	s->st.hop[h][mv_hop_bucket((uint64_t)ns)]++;
	s->st.hop_sum[h] += (uint64_t)ns;
}

/* ---- the clients' queues of ops, and the round post.c serves them in ---- */

/* A client whose queue was empty joins the round at its head, before the
 * clients with a backlog (which keep their place and credit): a client that
 * sends now and then is served at once, for one quantum, and one with a
 * backlog never leaves the round to jump the queue this way. */
static inline void mv_round_join(struct mv_shard *s, struct mv_attach *at)
{
	at->in_round = 1;
	at->round_next = s->round_head;
	s->round_head = at;
	if (!s->round_tail)
		s->round_tail = at;
}

/* Takes at off the round, wherever it stands (at the head in post.c: one
 * step; a walk only when deadlines or a detach empty a queue). */
static inline void mv_round_leave(struct mv_shard *s, struct mv_attach *at)
{
	struct mv_attach **pp = &s->round_head, *prev = NULL;

	while (*pp && *pp != at) {
		prev = *pp;
		pp = &(*pp)->round_next;
	}
	if (*pp) {
		*pp = at->round_next;
		if (s->round_tail == at)
			s->round_tail = prev;
	}
	at->round_next = NULL;
	at->in_round = 0;
	at->turn = 0;
	at->deficit = 0;
}

/*
 * A client's queue is also a list of runs, ops in a row to one peer: the
 * first op of each holds its last (run_last), and at->run_tail is the
 * first op of the run that ends the queue. post.c's promote() steps over
 * a peer's ops a run at a time.
 */

/* Queues op for the fabric behind its client's other ops. */
static inline void mv_pend_push(struct mv_shard *s, struct mv_wr *op)
{
	struct mv_attach *at = op->at;

	op->born = op->posted_at = s->now; /* queued at, until it is posted */
	op->promoted = 0;
	op->waiting = !at->pq_head; /* the head from now */
	if (at->pq_tail && at->pq_tail->peer == op->peer) {
		at->run_tail->run_last = op;
	} else {
		op->run_last = op;
		at->run_tail = op;
	}
	mv_wr_append(&at->pq_head, &at->pq_tail, op);
	at->npq++;
	s->npend++;
	if (!at->in_round)
		mv_round_join(s, at);
}

/* Queues op before its client's other ops (a retry, stamped by the
 * caller: its wait counts from there). */
static inline void mv_pend_push_front(struct mv_shard *s, struct mv_wr *op)
{
	struct mv_attach *at = op->at;

	int same = at->pq_head && at->pq_head->peer == op->peer;

	/* Ops promoted to the head (queue.c) are just queued behind it now. */
	for (struct mv_wr *p = at->pq_head; p && p->promoted; p = p->next)
		p->promoted = 0;
	op->promoted = 0;
	op->waiting = 1;
	op->run_last = same ? at->pq_head->run_last : op; /* the head's run goes on */
	if (!at->pq_tail || (same && at->run_tail == at->pq_head))
		at->run_tail = op;
	op->next = at->pq_head;
	at->pq_head = op;
	if (!at->pq_tail)
		at->pq_tail = op;
	at->npq++;
	s->npend++;
	if (!at->in_round)
		mv_round_join(s, at);
}

/* Takes the first op off at's queue; at leaves the round when it empties. */
static inline struct mv_wr *mv_pend_pop(struct mv_shard *s, struct mv_attach *at)
{
	struct mv_wr *op = at->pq_head;

	at->pq_head = op->next;
	if (op->run_last != op)
		op->next->run_last = op->run_last; /* the run's first now */
	if (at->run_tail == op)
		at->run_tail = op->run_last != op ? op->next : NULL;
	if (!at->pq_head)
		at->pq_tail = NULL;
	at->npq--;
	s->npend--;
	if (!at->pq_head)
		mv_round_leave(s, at);
	return op;
}

/*
 * op could go from now: its deadline and its retries' budget (born) start,
 * unless they did already. op_timeout is for a peer that takes nothing
 * ("took no write"), so it counts while an op could go, at the head of its
 * client's queue, not while it waits behind the client's own writes: a
 * client alone may queue more than its mover moves in op_timeout. Once
 * counting it goes on, whatever passes the op (a retry, ops promoted past
 * it: queue.c): its peer took nothing meanwhile.
 */
static inline void mv_pend_wait_from(struct mv_shard *s, struct mv_wr *op)
{
	if (op && !op->waiting) {
		op->born = op->posted_at = s->now;
		op->waiting = 1;
	}
}

static inline void mv_pend_head_fresh(struct mv_shard *s, struct mv_attach *at)
{
	mv_pend_wait_from(s, at->pq_head);
}

/* Pops at's head, which went (posted, copied, or failed); the next one's
 * count starts. */
static inline struct mv_wr *mv_pend_went(struct mv_shard *s, struct mv_attach *at)
{
	struct mv_wr *op = mv_pend_pop(s, at);

	mv_pend_head_fresh(s, at);
	return op;
}

/* at->run_tail again, after ops were taken out of at's queue: whole runs,
 * those of one peer (mv_wr_take()), so the others stay as they were. */
static inline void mv_pend_runs_fix(struct mv_attach *at)
{
	at->run_tail = NULL;
	for (struct mv_wr *f = at->pq_head; f; f = f->run_last->next)
		at->run_tail = f;
}

static inline struct mv_import *mv_import_get(struct mv_client *cl, uint32_t h)
{
	if (h >= MV_CLIENT_MAX_IMPORTS)
		return NULL;
	/* A4 pairs with R4 in mv_import_add(): the entry is complete */
	struct mv_import *imp = atomic_load_explicit(&cl->imports[h], memory_order_acquire);
	/* A10 pairs with R10 in samehost_ask.c's fetch_end(): an import waiting
	 * for its owner's word, or refused it, is no import yet. */
	if (imp && atomic_load_explicit(&imp->held, memory_order_acquire))
		return NULL;
	return imp;
}

static inline struct mv_land_buf *mv_land_of(struct mv_shard *s, void *ctx)
{
	if (!s->land || (char *)ctx < (char *)s->land ||
	    (char *)ctx >= (char *)(s->land + MV_LAND_BUFS))
		return NULL;
	return &s->land[((char *)ctx - (char *)s->land) / sizeof(*s->land)];
}

/* batch.c */
void mv_push_cqe(struct mv_attach *at, const struct mv_cqe *c);
void mv_cut_off(struct mv_shard *s, struct mv_attach *at, const char *why);
int mv_cut(struct mv_attach *at);

int mv_expire_waits(struct mv_shard *s);

/* Notes that the shard did something for at's client (see active_ns). */
static inline void mv_touch(struct mv_shard *s, struct mv_attach *at)
{
	if (s->now - at->touched < 10000000)
		return;
	at->touched = s->now;
	atomic_store_explicit(&at->cl->active_ns, s->now, memory_order_relaxed);
}

/* Whether the shard still takes descriptors from at: not dead, not leaving,
 * not cut off (a cut-off client's rings may hold descriptors for ever, and
 * they must neither count as work nor keep the shard from sleeping). */
static inline int mv_serving(const struct mv_attach *at)
{
	return !at->dead && !at->detaching &&
	       !atomic_load_explicit(&at->cl->cut, memory_order_relaxed);
}
void mv_fail_part(struct mv_part *p, int status, uint8_t cause, uint32_t region, const char *msg);
void mv_check_part(struct mv_shard *s, struct mv_attach *at, uint32_t b);
void mv_op_report(struct mv_shard *s, struct mv_wr *op, int err, const char *text);
void mv_op_done(struct mv_shard *s, struct mv_wr *op, int err, const char *text);
int mv_flush_all(struct mv_shard *s);

/* take.c */
int mv_consume(struct mv_shard *s);
void mv_take_run(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d,
                 struct mv_region *src, struct mv_import *dst);

/* list.c: LIST descriptors; both return entries expanded this turn. */
int mv_list_take(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d);
int mv_list_expand(struct mv_shard *s, struct mv_attach *at);

/* gpu_path.c */
int mv_fence(struct mv_shard *s, char *why, size_t whylen);
void mv_take_gpu(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d,
                 const struct mv_region *src, const struct mv_import *dst, uint8_t path, int land);
/* queue.c: a client's writes to other peers go while its head's peer
 * cannot take it. The peers that could not take an op of a client, each
 * with that client, this burst (at most MV_REFUSED; post.c keeps them).
 * Kept for every client of the burst: a set that began again whenever
 * another client's head was refused let two clients pass their heads back
 * and forth for good (mv_promote() bounds a burst's promotions by it). */
#define MV_REFUSED 32
struct mv_refused {
	uint32_t n;
	struct {
		const struct mv_attach *at;
		const struct mv_peer *peer;
	} e[MV_REFUSED];
};
/* Whether p refused an op of at's, this burst. */
int mv_refused_has(const struct mv_refused *r, const struct mv_attach *at, const struct mv_peer *p);
/* at's head op could not go for its peer's sake (noted in r): puts
 * promoted ops back behind the head they went ahead of, or brings the next
 * run of ops to a peer not in r to the head. Returns whether the head
 * changed (the caller tries it), 0 when no other op may go. */
int mv_promote(struct mv_shard *s, struct mv_attach *at, struct mv_refused *r);

/* hold.c: when a client's piece gives way to the others (fair share). */
#define MV_SMALL_HOLD_NS 50000 /* a small write holds the others' pieces this long at most */
enum { MV_OTHERS_NONE, MV_OTHERS_REAP, MV_OTHERS_RING };
int mv_small_in_flight(const struct mv_shard *s, const struct mv_attach *at, uint64_t small);
int mv_others_wait(const struct mv_shard *s, const struct mv_attach *at, uint64_t piece);
int mv_one_may_come(const struct mv_shard *s);
int mv_anticipated(const struct mv_shard *s, const struct mv_attach *at);
int mv_yield(const struct mv_shard *s, struct mv_yields *y, int64_t short_ns);

int mv_gpu_progress(struct mv_shard *s);
int mv_gpu_expire(struct mv_shard *s, int64_t limit);

/* land.c */
void mv_land_hdr(struct mv_shard *s, struct mv_wr *op, const struct mv_import *dst,
                 uint64_t dst_off, uint64_t len);
void mv_take_land(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d,
                  const struct mv_region *src, const struct mv_import *dst);
int mv_land_init(struct mv_shard *s, char *why, size_t whylen);
void mv_land_event(struct mv_shard *s, struct mv_land_buf *lb, void *ctx, size_t len, int err);
int mv_land_progress(struct mv_shard *s);

/* samehost.c: copies op's iovs into its peer region, front to back, in steps
 * of step bytes (0: whole iovs), asking stop(arg) after each step but the
 * last: when it says so the copy stops there, the rest of op left (its iovs
 * advanced past what was copied; op->bytes what is left, op->copied what
 * was). Returns the bytes copied, or -errno with why (nothing copied). */
int64_t mv_host_copy(struct mv_shard *s, struct mv_wr *op, uint64_t step, int (*stop)(void *),
                     void *arg, char *why, size_t whylen);

/* post.c: posts the clients' queues; sets s->ring_cut when a burst ended
 * because another client has descriptors in its ring. */
#define MV_FAIR_LINGER_NS 10000000ll /* a client counts as active this long after a take */
int mv_post(struct mv_shard *s);
int mv_retry(struct mv_shard *s, struct mv_wr *op, int err);
int mv_retry_due(struct mv_shard *s);

/* complete.c */
int mv_reap(struct mv_shard *s);
int mv_expire(struct mv_shard *s);

/* idle.c */
int mv_rings_empty(struct mv_shard *s);
int mv_sleep_once(struct mv_shard *s, int64_t idle_ns);
int64_t mv_spin_after_sleep(int64_t spin, int64_t gap, int cut_short, int crowded);
int mv_host_crowded(int fd, long ncpu);

#endif
