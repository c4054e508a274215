/* SPDX-License-Identifier: MIT */
/*
 * The shard loop: one thread per NIC shard, pinned near its NIC, owning its
 * fabric objects. Each turn it runs mailbox commands, consumes descriptors
 * from the submission rings of its clients (fairly, a budget per ring),
 * validates them and turns them into fabric writes on a pending FIFO, posts
 * that FIFO as the provider has room (FI_MORE on all but the last of a
 * burst, -FI_EAGAIN just ends the burst), reads the CQ in batches, and
 * publishes completions. Idle, it spins briefly, then sleeps on its doorbell
 * eventfd and, where the provider has one, the CQ's wait fd.
 */
#include "mover.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "stats_layout.h"
#include "trace_format.h"

#define RING_BUDGET   256u /* descriptors from one ring per turn */
#define CQ_BATCH      64
#define SPIN_NS       200000  /* busy-poll this long after the last work, */
#define SPIN_MAX_NS   2000000 /* or up to this long while a stream has gaps */
#define STOP_DRAIN_NS 10000000000ll
#define OVF_MAX       65536u /* completions held for a client whose ring is full */

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
	struct mv_wr *pprev, *pnext; /* the posted list, oldest first */
	int64_t posted_at;
	int abandoned;        /* reported as failed; waits for the provider to let go */
	int retries;          /* re-posts after connection-level errors */
	int64_t born;         /* first queued: the deadline runs from here */
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
	int land_counted; /* counted in the shard's landing messages in flight */
	struct mv_attach *at;
	struct mv_peer *peer;
	uint32_t batch;
	uint8_t kind;
	uint8_t niov;
	uint64_t bytes;
	uint64_t data;
	uint64_t cookie;
	struct iovec iov[MV_IOV_MAX];
	void *desc[MV_IOV_MAX];
	struct fi_rma_iov riov[MV_IOV_MAX];
	struct mv_land_hdr lhdr; /* landing: sent ahead of the data */
};

enum { MV_LAND_POSTED, MV_LAND_COPYING, MV_LAND_ACKING, MV_LAND_ACKED };

void mv_shard_post(struct mv_shard *s, struct mv_cmd *c)
{
	uint64_t one = 1;

	c->next = NULL;
	pthread_mutex_lock(&s->mbox_mu);
	if (s->mbox_tail)
		s->mbox_tail->next = c;
	else
		s->mbox_head = c;
	s->mbox_tail = c;
	/* R3 pairs with A3 in shard_loop(): the command is queued before the flag */
	atomic_store_explicit(&s->mbox_pending, 1, memory_order_release);
	pthread_mutex_unlock(&s->mbox_mu);
	if (write(s->efd, &one, sizeof(one)) < 0) {
		/* The counter saturated: the shard is already due to wake. */
	}
}

static void cmd_done(struct mv_shard *s, struct mv_cmd *c, int status)
{
	c->status = status;
	if (c->done)
		sem_post(c->done);
}

static struct mv_wr *op_get(struct mv_shard *s)
{
	struct mv_wr *op = s->free_ops;

	if (!op)
		return NULL;
	s->free_ops = op->next;
	s->nfree--;
	memset(op, 0, offsetof(struct mv_wr, iov));
	op->chunk = -1;
	return op;
}

static void posted_add(struct mv_shard *s, struct mv_wr *op)
{
	op->posted_at = s->now;
	op->pnext = NULL;
	op->pprev = s->posted_tail;
	if (s->posted_tail)
		s->posted_tail->pnext = op;
	else
		s->posted_head = op;
	s->posted_tail = op;
	s->posted++;
}

static void posted_del(struct mv_shard *s, struct mv_wr *op)
{
	if (op->pprev)
		op->pprev->pnext = op->pnext;
	else
		s->posted_head = op->pnext;
	if (op->pnext)
		op->pnext->pprev = op->pprev;
	else
		s->posted_tail = op->pprev;
	s->posted--;
}

static void op_put(struct mv_shard *s, struct mv_wr *op)
{
	if (op->land_counted)
		s->land_inflight--;
	op->land_counted = 0;
	if (op->chunk >= 0)
		s->gpu.free_chunks |= 1u << op->chunk;
	op->next = s->free_ops;
	s->free_ops = op;
	s->nfree++;
}

/* Appends op to the FIFO of ops at *head .. *tail (pending, retry, staged,
 * GPU copies in flight: each queue is the shard's own). */
static void wr_append(struct mv_wr **head, struct mv_wr **tail, struct mv_wr *op)
{
	op->next = NULL;
	if (*tail)
		(*tail)->next = op;
	else
		*head = op;
	*tail = op;
}

static void pend_push(struct mv_shard *s, struct mv_wr *op)
{
	op->born = op->posted_at = s->now; /* queued at, until it is posted */
	wr_append(&s->pend_head, &s->pend_tail, op);
	s->npend++;
}

/* Completions: into the client's ring, or held in order when it is full. */
static void push_cqe(struct mv_attach *at, const struct mv_cqe *c)
{
	uint32_t pos;

	if (at->dead || at->detaching)
		return;
	if (at->ovf_head == at->ovf_tail) {
		int n = shmring_reserve(&at->comp, 1, &pos);
		if (n == 1) {
			memcpy(shmring_slot(&at->comp, pos), c, sizeof(*c));
			uint32_t occ = at->comp.local - (at->comp.cached - at->comp.capacity);
			if (occ > at->comp_hwm)
				at->comp_hwm = occ;
			return;
		}
		if (n < 0) {
			mv_log("client %u: completion ring: %s; dropping the client's rings",
			       at->cl->id, shmring_error(&at->comp));
			at->dead = 1;
			return;
		}
	}
	if (at->ovf_tail - at->ovf_head == at->ovf_cap) {
		uint32_t cap = at->ovf_cap ? at->ovf_cap * 2 : 64;
		if (cap > OVF_MAX) {
			mv_log("client %u: %u completions waiting and none read; dropping one",
			       at->cl->id, OVF_MAX);
			return;
		}
		struct mv_cqe *n = malloc(sizeof(*n) * cap);
		if (!n)
			return;
		for (uint32_t i = 0; i < at->ovf_tail - at->ovf_head; i++)
			n[i] = at->ovf[(at->ovf_head + i) % (at->ovf_cap ? at->ovf_cap : 1)];
		at->ovf_tail -= at->ovf_head;
		at->ovf_head = 0;
		free(at->ovf);
		at->ovf = n;
		at->ovf_cap = cap;
	}
	at->ovf[at->ovf_tail++ % at->ovf_cap] = *c;
}

static int flush_ovf(struct mv_attach *at)
{
	uint32_t pos, moved = 0;

	while (at->ovf_head != at->ovf_tail && !at->dead) {
		int n = shmring_reserve(&at->comp, 1, &pos);
		if (n != 1)
			break;
		memcpy(shmring_slot(&at->comp, pos), &at->ovf[at->ovf_head++ % at->ovf_cap],
		       sizeof(struct mv_cqe));
		moved++;
	}
	return (int)moved;
}

static void fail_part(struct mv_part *p, int status, uint8_t cause, uint32_t region,
                      const char *msg)
{
	if (p->failed)
		return;
	p->failed = 1;
	p->status = status;
	p->cause = cause;
	p->region = region;
	snprintf(p->msg, sizeof(p->msg), "%s", msg);
}

static void publish_batch(struct mv_shard *s, struct mv_attach *at, uint32_t b, uint64_t cookie,
                          int status, uint8_t cause, const char *msg)
{
	struct mv_batch *B = &at->cl->batches[b];
	struct mv_cqe c = {.type = MV_CQE_BATCH, .batch = b, .cookie = cookie};

	c.status = status;
	c.cause = cause;
	c.bytes = atomic_load_explicit(&B->bytes, memory_order_relaxed);
	c.region = B->region;
	c.shard = (uint32_t)s->id;
	if (msg)
		snprintf(c.msg, sizeof(c.msg), "%s", msg);
	if (atomic_load_explicit(&s->mv->tracer, memory_order_relaxed)) {
		const struct mv_desc *e = &B->end;
		struct mv_trace_rec t = {
		    .type = MV_TR_BATCH,
		    .nparts = e->nparts,
		    .client = at->cl->id,
		    .submit_ns = e->stamp,
		    .complete_ns = (uint64_t)mv_now_ns(),
		    .bytes = status ? e->len : c.bytes,
		    .peer = atomic_load_explicit(&B->peer, memory_order_relaxed),
		    .nops = e->src_off > UINT32_MAX ? UINT32_MAX : (uint32_t)e->src_off,
		    .ndesc = atomic_load_explicit(&B->ndesc, memory_order_relaxed),
		    .page_size = (uint32_t)e->dst_off,
		    .kind = (uint8_t)e->src,
		    .cause = cause,
		    .shard_mask =
		        (uint16_t)atomic_load_explicit(&B->shard_mask, memory_order_relaxed),
		    .status = status,
		    .imm = e->imm,
		};
		mv_trace_batch(s, &t);
	}
	/* Reset before the client can see the id again. */
	atomic_store_explicit(&B->bytes, 0, memory_order_relaxed);
	atomic_store_explicit(&B->ndesc, 0, memory_order_relaxed);
	atomic_store_explicit(&B->shard_mask, 0, memory_order_relaxed);
	atomic_store_explicit(&B->status, 0, memory_order_relaxed);
	atomic_store_explicit(&B->parts_done, 0, memory_order_release);
	at->batches++;
	s->st.batches++;
	push_cqe(at, &c);
}

static struct mv_import *import_get(struct mv_client *cl, uint32_t h)
{
	if (h >= MV_CLIENT_MAX_IMPORTS)
		return NULL;
	/* A4 pairs with R4 in mv_import_add(): the entry is complete */
	return atomic_load_explicit(&cl->imports[h], memory_order_acquire);
}

static void finish_part(struct mv_shard *s, struct mv_attach *at, uint32_t b)
{
	struct mv_part *p = &at->parts[b];
	struct mv_batch *B = &at->cl->batches[b];
	struct mv_desc end = p->end;

	if (p->failed) {
		int32_t zero = 0;
		if (atomic_compare_exchange_strong(&B->status, &zero, p->status)) {
			B->cause = p->cause;
			B->region = p->region;
			memcpy(B->msg, p->msg, sizeof(B->msg));
		}
	}
	atomic_fetch_add_explicit(&B->bytes, p->bytes, memory_order_relaxed);
	atomic_fetch_add_explicit(&B->ndesc, p->ndesc, memory_order_relaxed);
	atomic_fetch_or_explicit(&B->shard_mask, 1u << (s->id % 16), memory_order_relaxed);
	if (p->peer)
		atomic_store_explicit(&B->peer, p->peer, memory_order_relaxed);
	memset(p, 0, sizeof(*p));
	/* AR5: each part's results are released here and the last part's
	 * increment acquires all of them (the CAS winner wrote msg before). */
	uint32_t done = atomic_fetch_add_explicit(&B->parts_done, 1, memory_order_acq_rel) + 1;
	if (done < end.nparts)
		return;
	B->end = end; /* the finisher's own copy, for the trace */

	int32_t status = atomic_load_explicit(&B->status, memory_order_relaxed);
	if (status == 0 && (end.flags & MV_END_IMM)) {
		struct mv_import *imp = import_get(at->cl, end.dst);
		struct mv_wr *op = op_get(s);
		if (!imp || !op || atomic_load(&imp->peer->gone)) {
			char why[MV_ERRLEN] = "immediate names an unknown import handle";
			if (op)
				op_put(s, op);
			if (imp)
				mv_peer_why(imp->peer, why, sizeof(why));
			publish_batch(s, at, b, end.cookie, imp ? -EHOSTUNREACH : -ENOENT,
			              imp ? MV_CAUSE_PEER_GONE : MV_CAUSE_NO_IMPORT, why);
			return;
		}
		uint32_t t = (uint32_t)s->id % imp->nshards;
		atomic_store_explicit(&B->peer, imp->peer->mover_id, memory_order_relaxed);
		op->kind = MV_OPK_IMM;
		op->at = at;
		op->batch = b;
		op->cookie = end.cookie;
		op->peer = imp->peer;
		op->data = (uint64_t)imp->region << 32 | end.imm;
		/* To the peer shard's doorbell, not the data region: that may be
		 * GPU memory the fabric cannot reach. */
		op->riov[0].addr = imp->peer->blob.bell[t].addr;
		op->riov[0].key = imp->peer->blob.bell[t].key;
		op->riov[0].len = 0;
		at->outstanding++;
		pend_push(s, op);
		return;
	}
	publish_batch(s, at, b, end.cookie, status, status ? B->cause : MV_CAUSE_NONE,
	              status ? B->msg : NULL);
}

static void check_part(struct mv_shard *s, struct mv_attach *at, uint32_t b)
{
	struct mv_part *p = &at->parts[b];

	if (p->ended && p->outstanding == 0)
		finish_part(s, at, b);
}

/* Accounts an op's outcome to its part or batch; the op itself stays. */
static void op_report(struct mv_shard *s, struct mv_wr *op, int err, const char *text)
{
	struct mv_attach *at = op->at;

	if (op->peer && op->peer->index < 256) {
		s->pst[op->peer->index].writes++;
		if (err)
			s->pst[op->peer->index].errors++;
		else
			s->pst[op->peer->index].bytes += op->bytes;
	}
	if (err == -ETIMEDOUT)
		s->st.timeouts++;

	at->outstanding--;
	if (op->kind == MV_OPK_IMM) {
		char msg[MV_ERRLEN];
		if (err)
			snprintf(msg, sizeof(msg), "immediate: %s", text);
		publish_batch(s, at, op->batch, op->cookie, err,
		              err ? (err == -ETIMEDOUT || err == -EHOSTUNREACH ? MV_CAUSE_PEER_GONE
		                                                               : MV_CAUSE_PROVIDER)
		                  : MV_CAUSE_NONE,
		              err ? msg : NULL);
		return;
	}
	struct mv_part *p = &at->parts[op->batch];
	p->outstanding--;
	if (err) {
		uint8_t cause = err == -ECANCELED                           ? MV_CAUSE_CANCELLED
		                : err == -EHOSTUNREACH || err == -ETIMEDOUT ? MV_CAUSE_PEER_GONE
		                                                            : MV_CAUSE_PROVIDER;
		fail_part(p, err, cause, 0, text);
	} else {
		p->bytes += op->bytes;
		s->st.path_bytes[op->path] += op->bytes;
	}
	check_part(s, at, op->batch);
}

static void op_done(struct mv_shard *s, struct mv_wr *op, int err, const char *text)
{
	if (op->abandoned)
		s->abandoned--; /* reported at its deadline; at may be gone since */
	else
		op_report(s, op, err, text);
	op_put(s, op);
}

/* A descriptor that cannot be tied to a batch: report it on its own. */
static void bad_desc(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d,
                     const char *why)
{
	struct mv_cqe c = {.type = MV_CQE_BATCH, .status = -EINVAL, .cause = MV_CAUSE_BAD_DESC};

	c.batch = d->batch;
	c.shard = (uint32_t)s->id;
	snprintf(c.msg, sizeof(c.msg), "%s", why);
	push_cqe(at, &c);
}

static int ops_needed(const struct mv_desc *d)
{
	if (d->op != MV_OP_WRITE)
		return 1;
	return (int)((d->len + MV_CHUNK - 1) / MV_CHUNK) + 1;
}

/* The header a landing message carries ahead of its data; the token is
 * set when it is posted. */
static void land_hdr(struct mv_shard *s, struct mv_wr *op, const struct mv_import *dst,
                     uint64_t dst_off, uint64_t len)
{
	struct mv_land_hdr *h = &op->lhdr;

	memset(h, 0, sizeof(*h));
	h->magic = MV_LAND_MAGIC;
	h->region = dst->region;
	h->offset = dst_off;
	h->len = len;
	h->mover_id = s->mv->mover_id;
	h->shard = (uint16_t)s->id;
	h->addrlen = (uint16_t)s->fab.addrlen;
	h->bell_addr = s->fab.virt_addr ? (uint64_t)(uintptr_t)s->bell : 0;
	h->bell_key = s->bell_key;
	memcpy(h->addr, s->fab.addr, s->fab.addrlen);
	op->kind = MV_OPK_LAND;
	op->niov = 2;
	op->iov[0] = (struct iovec){h, sizeof(*h)};
	op->desc[0] = s->ops_desc;
}

/* Host memory into a peer's GPU region its fabric cannot reach: landing
 * messages, one per chunk, straight from the region. */
static void take_land(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d,
                      const struct mv_region *src, const struct mv_import *dst)
{
	struct mv_part *p = &at->parts[d->batch];

	for (uint64_t off = 0; off < d->len;) {
		uint64_t n = d->len - off < MV_CHUNK ? d->len - off : MV_CHUNK;
		struct mv_wr *op = op_get(s);

		op->path = MV_PATH_STAGED;
		op->at = at;
		op->batch = d->batch;
		op->peer = dst->peer;
		op->bytes = n;
		land_hdr(s, op, dst, d->dst_off + off, n);
		op->iov[1] = (struct iovec){src->base + d->src_off + off, n};
		op->desc[1] = src->desc[s->id];
		p->outstanding++;
		at->outstanding++;
		pend_push(s, op);
		off += n;
	}
}

/*
 * Copies on one stream finish in order, so one event can stand for many:
 * the copies queued since the last fence form a group, and the event
 * recorded after the group's last copy tells when all of them are done.
 * Groups stay contiguous in the queue, one device each.
 */
static int fence(struct mv_shard *s, char *why, size_t whylen)
{
	int dev = s->gpu_open_dev, ret;

	if (dev < 0)
		return 0;
	s->gpu_open_dev = -1;
	ret = mv_gpu_event(s, dev, &s->gq_tail->ev, why, whylen);
	if (ret) {
		/* Without an event nobody learns the group finished: wait for
		 * the stream here instead (a stall, never a hang). */
		mv_log("shard %d: %s; waiting for device %d", s->id, why, dev);
		mv_gpu_sync(s, dev, why, whylen);
		s->gq_tail->ev = MV_GPU_EV_DONE;
	}
	return ret;
}

/* Paths 2 and 3: one op per chunk, copies issued (or queued for a bounce
 * chunk) at once, on the stream of the device that runs them. */
static void take_gpu(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d,
                     const struct mv_region *src, const struct mv_import *dst, uint8_t path,
                     int land)
{
	struct mv_part *p = &at->parts[d->batch];
	int dev = path == MV_PATH_COPY ? dst->remote->map.dev : src->gpu.dev;
	uint32_t t = (uint32_t)s->id % dst->nshards;
	char why[MV_ERRLEN];
	int ret;

	ret = mv_gpu_shard_ready(s, dev, why, sizeof(why));
	if (ret) {
		fail_part(p, ret, MV_CAUSE_PROVIDER, d->src, why);
		return;
	}
	for (uint64_t off = 0; off < d->len;) {
		/* A CUDA copy takes the whole descriptor at once; a staged write
		 * goes chunk by chunk through the bounce pool. */
		uint64_t n =
		    path == MV_PATH_COPY || d->len - off < MV_CHUNK ? d->len - off : MV_CHUNK;
		struct mv_wr *op = op_get(s);

		op->kind = path == MV_PATH_COPY ? MV_OPK_COPY : MV_OPK_STAGE;
		op->path = path;
		op->at = at;
		op->batch = d->batch;
		op->peer = dst->peer;
		op->bytes = n;
		op->dev = dev;
		op->src_dev = src->is_gpu ? src->gpu.dev : -1;
		op->csrc = src->is_gpu ? src->gpu.dptr + d->src_off + off
		                       : (uint64_t)(uintptr_t)(src->base + d->src_off + off);
		p->outstanding++;
		at->outstanding++;
		s->ngpu++;
		if (path == MV_PATH_COPY) {
			op->dst_dev = dst->remote->map.dev;
			op->cdst = dst->remote->map.dptr + d->dst_off + off;
			if (s->gpu_open_dev >= 0 && s->gpu_open_dev != dev)
				fence(s, why, sizeof(why));
			ret = mv_gpu_copy(s, dev, op->cdst, op->dst_dev, op->csrc, op->src_dev, n,
			                  why, sizeof(why));
			if (ret) {
				s->ngpu--;
				op_done(s, op, ret, why);
			} else {
				wr_append(&s->gq_head, &s->gq_tail, op);
				s->gpu_open_dev = dev; /* fenced after this consume round */
			}
		} else {
			op->dst_dev = -1;
			op->niov = 1;
			op->riov[0] = (struct fi_rma_iov){
			    .addr = dst->addr[t] + d->dst_off + off, .len = n, .key = dst->key[t]};
			/* Into GPU memory the fabric cannot reach: after the copy to
			 * the bounce chunk it goes as a landing message. */
			op->land = land;
			if (land) {
				land_hdr(s, op, dst, d->dst_off + off, n);
				op->kind = MV_OPK_STAGE; /* until its chunk is filled */
			}
			wr_append(&s->sq_head, &s->sq_tail, op);
		}
		off += n;
	}
}

/*
 * GPU work of the shard: staged writes take a free bounce chunk and start
 * their device-to-host copy; finished copies either complete (path 2) or
 * become fabric writes from their chunk (path 3), so the copy of one chunk
 * overlaps the RDMA write of the one before.
 */
static int gpu_progress(struct mv_shard *s)
{
	char why[MV_ERRLEN];
	int n = 0;

	while (s->sq_head && s->gpu.free_chunks) {
		struct mv_wr *op = s->sq_head;
		int c = __builtin_ctz(s->gpu.free_chunks);
		uint64_t buf = (uint64_t)(uintptr_t)s->gpu.bounce + (uint64_t)c * MV_CHUNK;

		s->sq_head = op->next;
		if (!s->sq_head)
			s->sq_tail = NULL;
		s->gpu.free_chunks &= ~(1u << c);
		op->chunk = c;
		op->cdst = buf;
		fence(s, why, sizeof(why)); /* a staged op is a group of its own */
		int ret = mv_gpu_copy(s, op->dev, buf, -1, op->csrc, op->src_dev, op->bytes, why,
		                      sizeof(why));
		if (!ret)
			ret = mv_gpu_event(s, op->dev, &op->ev, why, sizeof(why));
		if (ret) {
			s->ngpu--;
			op_done(s, op, ret, why);
		} else {
			wr_append(&s->gq_head, &s->gq_tail, op);
		}
		n++;
	}
	while (s->gq_head) {
		struct mv_wr *f = s->gq_head;

		while (f && !f->ev)
			f = f->next; /* the group's fence: its last op */
		if (!f)
			break; /* the open group is fenced after this round */
		int done = mv_gpu_event_done(s, f->dev, f->ev, why, sizeof(why));
		if (done == 0)
			break; /* one stream per device runs them in order */
		/* The whole group, head through the fence, is done. */
		for (struct mv_wr *op = s->gq_head, *next;; op = next) {
			next = op->next;
			s->gq_head = next;
			if (!next)
				s->gq_tail = NULL;
			s->ngpu--;
			n++;
			int last = op == f;
			if (done < 0 || op->kind == MV_OPK_COPY) {
				op_done(s, op, done < 0 ? -EIO : 0, why);
			} else if (op->land) {
				op->kind = MV_OPK_LAND;
				op->niov = 2;
				op->iov[0] = (struct iovec){&op->lhdr, sizeof(op->lhdr)};
				op->desc[0] = s->ops_desc;
				op->iov[1] = (struct iovec){(void *)(uintptr_t)op->cdst, op->bytes};
				op->desc[1] = s->gpu.bounce_desc;
				pend_push(s, op);
			} else {
				op->kind = MV_OPK_WRITE;
				op->iov[0] = (struct iovec){(void *)(uintptr_t)op->cdst, op->bytes};
				op->desc[0] = s->gpu.bounce_desc;
				pend_push(s, op);
			}
			if (last)
				break;
		}
	}
	return n;
}

/* Turns one WRITE into ops; the caller checked there are enough free. */
static void take_write(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d)
{
	struct mv_part *p = &at->parts[d->batch];
	struct mv_region *src = mv_region_get(s->mv, d->src);
	struct mv_import *dst = import_get(at->cl, d->dst);
	char why[MV_ERRLEN];
	uint8_t cause;

	p->ndesc++;
	if (p->failed)
		return;
	if (mv_check_write(d, src, dst, at->cl->id, why, sizeof(why), &cause)) {
		fail_part(p, cause == MV_CAUSE_BOUNDS ? -ERANGE : -ENOENT, cause,
		          cause == MV_CAUSE_NO_IMPORT ? d->dst : d->src, why);
		return;
	}
	if (atomic_load_explicit(&dst->peer->gone, memory_order_relaxed)) {
		mv_peer_why(dst->peer, why, sizeof(why));
		fail_part(p, -EHOSTUNREACH, MV_CAUSE_PEER_GONE, d->dst, why);
		return;
	}
	uint32_t t = (uint32_t)s->id % dst->nshards;
	uint64_t off = 0;

	p->peer = dst->peer->mover_id;
	/* GPU memory picks the path: a same-host peer's GPU region gets CUDA
	 * copies; a GPU source the provider cannot register goes through the
	 * bounce pool; whatever the fabric registered is written directly. */
	uint8_t path = src->is_gpu || (dst->flags & MV_BLOB_GPU) ? MV_PATH_HMEM : MV_PATH_HOST;
	int land = !dst->remote && (dst->flags & MV_BLOB_NO_FABRIC);
	if (dst->remote)
		path = MV_PATH_COPY;
	else if (land || (src->is_gpu && !src->mr[s->id]))
		path = MV_PATH_STAGED;
	if (path == MV_PATH_COPY || (src->is_gpu && !src->mr[s->id])) {
		take_gpu(s, at, d, src, dst, path, land);
		return;
	}
	if (land) {
		take_land(s, at, d, src, dst);
		return;
	}
	while (off < d->len) {
		uint64_t n = d->len - off < MV_CHUNK ? d->len - off : MV_CHUNK;
		uint8_t *la = src->base + d->src_off + off;
		uint64_t ra = dst->addr[t] + d->dst_off + off;
		struct mv_wr *tail = s->pend_tail;

		/* Merge into the previous op of the same batch and peer: extend
		 * its last iov when both sides are contiguous, else add an iov. */
		if (tail && tail->kind == MV_OPK_WRITE && tail->path == path && tail->at == at &&
		    tail->batch == d->batch && tail->peer == dst->peer &&
		    tail->bytes + n <= MV_CHUNK && tail->riov[0].key == dst->key[t]) {
			struct iovec *li = &tail->iov[tail->niov - 1];
			struct fi_rma_iov *ri = &tail->riov[tail->niov - 1];
			if ((uint8_t *)li->iov_base + li->iov_len == la &&
			    ri->addr + ri->len == ra &&
			    tail->desc[tail->niov - 1] == src->desc[s->id]) {
				li->iov_len += n;
				ri->len += n;
				tail->bytes += n;
				off += n;
				continue;
			}
			if (tail->niov < s->fab.iov_limit) {
				tail->iov[tail->niov] = (struct iovec){la, n};
				tail->desc[tail->niov] = src->desc[s->id];
				tail->riov[tail->niov] =
				    (struct fi_rma_iov){.addr = ra, .len = n, .key = dst->key[t]};
				tail->niov++;
				tail->bytes += n;
				off += n;
				continue;
			}
		}
		struct mv_wr *op = op_get(s);
		op->kind = MV_OPK_WRITE;
		op->path = path;
		op->at = at;
		op->batch = d->batch;
		op->peer = dst->peer;
		op->niov = 1;
		op->bytes = n;
		op->iov[0] = (struct iovec){la, n};
		op->desc[0] = src->desc[s->id];
		op->riov[0] = (struct fi_rma_iov){.addr = ra, .len = n, .key = dst->key[t]};
		p->outstanding++;
		at->outstanding++;
		pend_push(s, op);
		off += n;
	}
}

static void take_end(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d)
{
	struct mv_part *p = &at->parts[d->batch];
	char why[MV_ERRLEN];

	if (d->nparts == 0 || d->nparts > s->mv->nshards) {
		snprintf(why, sizeof(why), "batch %u END says %u parts; this mover has %u shards",
		         d->batch, d->nparts, s->mv->nshards);
		fail_part(p, -EINVAL, MV_CAUSE_BAD_DESC, 0, why);
	} else if (d->ndesc != p->ndesc) {
		snprintf(why, sizeof(why), "batch %u END counts %u writes; shard %d received %u",
		         d->batch, d->ndesc, s->id, p->ndesc);
		fail_part(p, -EINVAL, MV_CAUSE_BAD_DESC, 0, why);
	} else if ((d->flags & MV_END_IMM) && !import_get(at->cl, d->dst)) {
		snprintf(why, sizeof(why), "immediate names import %u, which does not exist",
		         d->dst);
		fail_part(p, -ENOENT, MV_CAUSE_NO_IMPORT, d->dst, why);
	}
	p->end = *d;
	if (p->end.nparts == 0 || p->end.nparts > s->mv->nshards)
		p->end.nparts = 1; /* complete it alone, with its error */
	p->ended = 1;
	check_part(s, at, d->batch);
}

/* One descriptor; returns 0 if the shard lacks ops for it now (retry later). */
static int take_desc(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d)
{
	char why[MV_ERRLEN];

	if (d->batch >= MV_MAX_BATCHES) {
		snprintf(why, sizeof(why), "descriptor names batch %u; ids run below %u", d->batch,
		         MV_MAX_BATCHES);
		bad_desc(s, at, d, why);
		return 1;
	}
	if (at->parts[d->batch].ended) {
		snprintf(why, sizeof(why), "batch %u is already ended and still in flight",
		         d->batch);
		bad_desc(s, at, d, why);
		return 1;
	}
	switch (d->op) {
	case MV_OP_WRITE:
		if ((uint32_t)ops_needed(d) > s->nfree)
			return 0;
		take_write(s, at, d);
		return 1;
	case MV_OP_END:
		take_end(s, at, d);
		return 1;
	default:
		snprintf(why, sizeof(why), "descriptor op %u is not WRITE (1) or END (2)", d->op);
		fail_part(&at->parts[d->batch], -EINVAL, MV_CAUSE_BAD_DESC, 0, why);
		return 1;
	}
}

static int consume(struct mv_shard *s)
{
	uint32_t total = 0, n = s->natt;

	for (uint32_t k = 0; k < n; k++) {
		struct mv_attach *at = s->att[(s->rr + k) % n];
		uint32_t pos, used = 0;

		if (at->dead || at->detaching)
			continue;
		if (s->npend > s->fab.tx_size * 2 || s->nfree <= MV_IOV_MAX)
			break;
		int got = shmring_peek(&at->sub, RING_BUDGET, &pos);
		if (got > 0 && at->sub.cached - at->sub.local > at->sub_hwm)
			at->sub_hwm = at->sub.cached - at->sub.local;
		if (got < 0) {
			mv_log("client %u shard %d: %s; no more descriptors taken from it",
			       at->cl->id, s->id, shmring_error(&at->sub));
			at->dead = 1;
			continue;
		}
		for (int i = 0; i < got; i++) {
			struct mv_desc d;
			/* Copy first: the client can rewrite the slot while we look. */
			memcpy(&d, shmring_slot(&at->sub, pos + (uint32_t)i), sizeof(d));
			if (!take_desc(s, at, &d))
				break;
			used++;
		}
		if (used)
			shmring_release(&at->sub, used);
		at->descs += used;
		s->st.descs += used;
		total += used;
	}
	s->rr++;
	return (int)total;
}

static int retry(struct mv_shard *s, struct mv_wr *op, int err);

/* The landing window: messages a shard keeps in flight at most. The target
 * posts MV_LAND_BUFS receive buffers a shard; a message beyond them arrives
 * unexpected, which rxm 1.17 cancels: keep within half until acks come. */
#define LAND_WINDOW (MV_LAND_BUFS / 2)

/*
 * Whether op's post may carry FI_MORE: only while the next op surely
 * follows in this burst. A burst cut short (a full queue, the landing
 * window, a next op whose peer is gone, the burst's byte budget) must not
 * leave the doorbell unrung. A post that fails for another reason can
 * still end a burst early.
 */
static int more_follows(const struct mv_shard *s, const struct mv_wr *op, uint64_t burst)
{
	const struct mv_wr *nx = op->next;

	if (!nx || burst + op->bytes >= MV_BURST_BYTES || s->posted + 1 >= s->fab.tx_size ||
	    atomic_load_explicit(&nx->peer->gone, memory_order_relaxed))
		return 0;
	if (nx->kind == MV_OPK_LAND && s->land_inflight + (op->kind == MV_OPK_LAND) >= LAND_WINDOW)
		return 0;
	return 1;
}

static int post(struct mv_shard *s)
{
	struct mv_peer *wake[4]; /* same-host peers written to: woken once, at the end */
	uint64_t burst = 0;
	uint32_t nwake = 0;
	int n = 0;

	while (s->pend_head && burst < MV_BURST_BYTES) {
		struct mv_wr *op = s->pend_head;
		uint64_t flags = FI_COMPLETION | s->fab.dc_flag;
		struct fi_msg_rma msg = {
		    .msg_iov = op->iov,
		    .desc = op->desc,
		    .iov_count = op->niov,
		    .rma_iov = op->riov,
		    .rma_iov_count = op->niov,
		    .context = &op->ctx,
		};
		ssize_t ret;

		if (atomic_load_explicit(&op->peer->gone, memory_order_relaxed)) {
			ret = -FI_EHOSTUNREACH;
		} else {
			msg.addr = op->peer->fiaddr[s->id];
			if (op->kind == MV_OPK_IMM) {
				flags |= FI_REMOTE_CQ_DATA;
				msg.iov_count = 0;
				msg.rma_iov_count = 1;
				msg.data = op->data;
			}
			if (more_follows(s, op, burst))
				flags |= FI_MORE;
			if (op->kind == MV_OPK_LAND && s->land_inflight >= LAND_WINDOW)
				break; /* more_follows() kept FI_MORE off the last post */
			if (op->kind == MV_OPK_LAND) {
				/* The ack names this use of the op: index and sequence. */
				op->seq = ++s->seq;
				op->lhdr.token = (uint64_t)(op - s->ops) << 32 | op->seq;
				op->acks = 2; /* the send's completion, and the ack */
				op->land_err = 0;
				struct fi_msg m = {.msg_iov = op->iov,
				                   .desc = op->desc,
				                   .iov_count = 2,
				                   .addr = msg.addr,
				                   .context = &op->ctx};
				ret = fi_sendmsg(s->fab.ep, &m, flags & (FI_COMPLETION | FI_MORE));
			} else {
				ret = fi_writemsg(s->fab.ep, &msg, flags);
			}
			if (ret == -FI_EAGAIN) {
				s->st.eagain++;
				break;
			}
		}
		s->pend_head = op->next;
		if (!s->pend_head)
			s->pend_tail = NULL;
		s->npend--;
		if (ret) {
			char text[MV_ERRLEN];
			if (retry(s, op, (int)-ret))
				continue;
			if (atomic_load_explicit(&op->peer->gone, memory_order_relaxed))
				mv_peer_why(op->peer, text, sizeof(text));
			else
				snprintf(text, sizeof(text), "posting a write: %s",
				         fi_strerror((int)-ret));
			op_done(s, op, ret == -FI_EHOSTUNREACH ? -EHOSTUNREACH : (int)ret, text);
			continue;
		}
		posted_add(s, op);
		if (op->peer->wake) {
			uint32_t i = 0;
			while (i < nwake && wake[i] != op->peer)
				i++;
			if (i == nwake && nwake < 4)
				wake[nwake++] = op->peer;
			else if (i == nwake)
				mv_wake_ring(s, op->peer); /* a fifth peer in one burst */
		}
		burst += op->bytes;
		if (op->kind == MV_OPK_LAND) {
			s->land_inflight++;
			op->land_counted = 1;
		}
		s->st.posted++;
		n++;
	}
	for (uint32_t i = 0; i < nwake; i++)
		mv_wake_ring(s, wake[i]);
	return n;
}

static void deliver_imm(struct mv_shard *s, uint64_t data)
{
	struct mv_region *r = mv_region_get(s->mv, (uint32_t)(data >> 32));
	struct mv_cqe c = {.type = MV_CQE_IMM, .imm = (uint32_t)data};

	s->st.imm_rx++;
	if (!r)
		return; /* the region went away: nobody to tell */
	struct mv_client *cl = s->mv->clients[r->owner % MV_MAX_CLIENTS];
	if (!cl || cl->id != r->owner || !cl->att[s->id])
		return;
	c.region = r->id;
	c.shard = (uint32_t)s->id;
	push_cqe(cl->att[s->id], &c);
}

/*
 * A connection that broke (the peer reset it, say because another client's
 * late write hit a region that was just freed) says nothing about this op:
 * rxm reconnects on a later post. So the op waits on the retry list, 10 ms
 * the first time and twice as long each next time, and is posted again,
 * for as long as its deadline allows.
 */
#define RETRY_FIRST_NS 10000000ll
#define RETRY_MAX      10

static int retry(struct mv_shard *s, struct mv_wr *op, int err)
{
	int64_t limit = s->mv->cfg.op_timeout_ms * 1000000ll;
	int64_t wait = RETRY_FIRST_NS << op->retries;

	if (op->abandoned || op->at->detaching || op->retries >= RETRY_MAX ||
	    s->now + wait - op->born > limit)
		return 0;
	/* rxm flushes the ops of a dropped connection as FI_ECANCELED. */
	if (err != FI_ENOTCONN && err != EPIPE && err != FI_ECONNRESET && err != FI_ECONNABORTED &&
	    err != FI_ECONNREFUSED && err != FI_ECANCELED)
		return 0;
	op->retries++;
	op->posted_at = s->now + wait; /* due then; pend_push restamps it */
	wr_append(&s->rq_head, &s->rq_tail, op);
	s->nretry++;
	s->st.retries++;
	return 1;
}

/* Ops whose retry is due go back to the front of the pending queue. */
static int retry_due(struct mv_shard *s)
{
	struct mv_wr **pp = &s->rq_head, *tail = NULL;
	int n = 0;

	while (*pp) {
		struct mv_wr *op = *pp;
		if (op->posted_at > s->now) {
			tail = op;
			pp = &op->next;
			continue;
		}
		*pp = op->next;
		s->nretry--;
		op->posted_at = s->now;
		op->next = s->pend_head;
		s->pend_head = op;
		if (!s->pend_tail)
			s->pend_tail = op;
		s->npend++;
		n++;
	}
	s->rq_tail = tail;
	return n;
}

/* ---- receiver-side staging: landing buffers ---- */

static struct mv_land_buf *land_of(struct mv_shard *s, void *ctx)
{
	if (!s->land || (char *)ctx < (char *)s->land ||
	    (char *)ctx >= (char *)(s->land + MV_LAND_BUFS))
		return NULL;
	return &s->land[((char *)ctx - (char *)s->land) / sizeof(*s->land)];
}

static void land_post(struct mv_shard *s, struct mv_land_buf *lb)
{
	ssize_t ret = fi_recv(s->fab.ep, lb->buf, MV_LAND_HDR + MV_CHUNK, s->land_desc,
	                      FI_ADDR_UNSPEC, &lb->ctx);

	lb->state = MV_LAND_POSTED;
	if (ret) /* retried from land_progress */
		lb->state = MV_LAND_ACKED;
}

/* The pool of pinned receive buffers, posted the first time this shard
 * holds a GPU region the fabric cannot register. */
static int land_init(struct mv_shard *s, char *why, size_t whylen)
{
	size_t one = MV_LAND_HDR + MV_CHUNK;
	uint8_t *mem;
	uint64_t key;
	int ret;

	if (s->land)
		return 0;
	mem = mv_gpu_pinned(s, one * MV_LAND_BUFS, why, whylen);
	if (!mem)
		return -ENOMEM;
	ret = mv_fabric_reg(&s->fab, mem, one * MV_LAND_BUFS, 0x1a0d000000ull + (uint64_t)s->id,
	                    &s->land_mr, &s->land_desc, &key, why, whylen);
	if (ret) {
		mv_gpu_unpin(mem);
		return ret;
	}
	s->land = calloc(MV_LAND_BUFS, sizeof(*s->land));
	if (!s->land) {
		fi_close(&s->land_mr->fid);
		mv_gpu_unpin(mem);
		return -ENOMEM;
	}
	for (int i = 0; i < MV_LAND_BUFS; i++) {
		s->land[i].buf = mem + (size_t)i * one;
		land_post(s, &s->land[i]);
	}
	return 0;
}

static fi_addr_t land_sender(struct mv_shard *s, const struct mv_land_hdr *h)
{
	fi_addr_t fa;

	for (uint32_t i = 0; i < s->nsenders; i++)
		if (s->senders[i].mover_id == h->mover_id && s->senders[i].shard == h->shard)
			return s->senders[i].fa;
	if (h->addrlen != s->fab.addrlen || mv_fabric_av_insert(&s->fab, h->addr, &fa))
		return FI_ADDR_NOTAVAIL;
	uint32_t i = s->nsenders < 64 ? s->nsenders++ : (uint32_t)(h->mover_id % 64);
	s->senders[i].mover_id = h->mover_id;
	s->senders[i].shard = h->shard;
	s->senders[i].fa = fa;
	return fa;
}

static void lq_push(struct mv_shard *s, struct mv_land_buf *lb)
{
	lb->next = NULL;
	if (s->lq_tail)
		s->lq_tail->next = lb;
	else
		s->lq_head = lb;
	s->lq_tail = lb;
	s->nland_busy++;
}

/* A landing buffer's receive or ack completed (err: it failed). */
static void land_event(struct mv_shard *s, struct mv_land_buf *lb, void *ctx, size_t len, int err)
{
	char why[MV_ERRLEN];
	struct mv_land_hdr h;

	if (ctx == &lb->actx) {
		/* The ack is out: the buffer takes the next message. */
		s->nland_busy--;
		land_post(s, lb);
		return;
	}
	if (err) {
		land_post(s, lb);
		return;
	}
	memcpy(&h, lb->buf, sizeof(h));
	if (len < MV_LAND_HDR || h.magic != MV_LAND_MAGIC || h.len != len - MV_LAND_HDR) {
		mv_log("shard %d: a landing message of %zu bytes is malformed; dropped", s->id,
		       len);
		land_post(s, lb);
		return;
	}
	lb->ack_to = land_sender(s, &h);
	if (lb->ack_to == FI_ADDR_NOTAVAIL) {
		mv_log("shard %d: cannot answer the sender of a landing message; dropped", s->id);
		land_post(s, lb);
		return;
	}
	lb->ack_addr = h.bell_addr;
	lb->ack_key = h.bell_key;
	lb->ack_data = MV_ACK | (h.token & (MV_ACK_ERR - 1));
	lb->ev = NULL;
	struct mv_region *r = mv_region_get(s->mv, h.region);
	if (!r || !r->is_gpu || h.offset > r->len || r->len - h.offset < h.len ||
	    mv_gpu_shard_ready(s, r->gpu.dev, why, sizeof(why)) ||
	    mv_gpu_copy(s, r->gpu.dev, r->gpu.dptr + h.offset, r->gpu.dev,
	                (uint64_t)(uintptr_t)(lb->buf + MV_LAND_HDR), -1, h.len, why,
	                sizeof(why)) ||
	    mv_gpu_event(s, r->gpu.dev, &lb->ev, why, sizeof(why))) {
		lb->ack_data |= MV_ACK_ERR; /* the sender's batch fails, naming us */
		lb->state = MV_LAND_ACKING;
	} else {
		lb->dev = r->gpu.dev;
		lb->state = MV_LAND_COPYING;
		s->st.path_bytes[MV_PATH_STAGED] += h.len;
	}
	lq_push(s, lb);
}

/* Copies done become acks; the data is on the device before the sender hears. */
static int land_progress(struct mv_shard *s)
{
	char why[MV_ERRLEN];
	int n = 0;

	while (s->lq_head) {
		struct mv_land_buf *lb = s->lq_head;
		if (lb->state == MV_LAND_COPYING) {
			int done = mv_gpu_event_done(s, lb->dev, lb->ev, why, sizeof(why));
			if (done == 0)
				break;
			if (done < 0)
				lb->ack_data |= MV_ACK_ERR;
			lb->state = MV_LAND_ACKING;
		}
		struct fi_rma_iov ri = {.addr = lb->ack_addr, .len = 0, .key = lb->ack_key};
		struct fi_msg_rma m = {.rma_iov = &ri,
		                       .rma_iov_count = 1,
		                       .addr = lb->ack_to,
		                       .context = &lb->actx,
		                       .data = lb->ack_data};
		ssize_t ret = fi_writemsg(s->fab.ep, &m, FI_COMPLETION | FI_REMOTE_CQ_DATA);
		if (ret == -FI_EAGAIN)
			break;
		s->lq_head = lb->next;
		if (!s->lq_head)
			s->lq_tail = NULL;
		n++;
		if (ret) {
			mv_log("shard %d: acking a landing message: %s", s->id,
			       fi_strerror((int)-ret));
			s->nland_busy--;
			land_post(s, lb);
		}
	}
	/* Buffers whose re-post failed try again. */
	for (int i = 0; s->land && i < MV_LAND_BUFS; i++)
		if (s->land[i].state == MV_LAND_ACKED)
			land_post(s, &s->land[i]);
	return n;
}

/* A target says a landing message is on its GPU (or could not be). */
static void ack_arrived(struct mv_shard *s, uint64_t data)
{
	uint64_t idx = (data & (MV_ACK_ERR - 1)) >> 32;
	struct mv_wr *op;

	if (idx >= MV_OPS_PER_SHARD)
		return;
	op = &s->ops[idx];
	if (op->kind != MV_OPK_LAND || op->seq != (uint32_t)data || op->acks <= 0)
		return; /* late: that use of the op ended at its deadline */
	if (data & MV_ACK_ERR)
		op->land_err = 1;
	if (--op->acks > 0)
		return;
	posted_del(s, op);
	s->st.completed++;
	op_done(s, op, op->land_err ? -EIO : 0,
	        op->land_err ? "the target mover could not put the data in its GPU memory" : NULL);
}

static int reap(struct mv_shard *s)
{
	struct fi_cq_data_entry ent[CQ_BATCH];
	int total = 0;

	for (;;) {
		ssize_t n = fi_cq_read(s->fab.cq, ent, CQ_BATCH);
		if (n == -FI_EAGAIN || n == 0)
			break;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry e = {0};
			char buf[128], text[MV_ERRLEN];

			if (fi_cq_readerr(s->fab.cq, &e, 0) != 1)
				break;
			s->st.cq_errors++;
			const char *pe =
			    fi_cq_strerror(s->fab.cq, e.prov_errno, e.err_data, buf, sizeof(buf));
			if (!e.op_context || (e.flags & FI_REMOTE_WRITE)) {
				mv_log("shard %d: remote write error: %s", s->id, pe ? pe : "?");
				continue;
			}
			struct mv_land_buf *elb = land_of(s, e.op_context);
			if (elb) {
				mv_log("shard %d: landing buffer: %s", s->id,
				       pe ? pe : fi_strerror(e.err));
				land_event(s, elb, e.op_context, 0, -(int)e.err);
				continue;
			}
			struct mv_wr *op = (struct mv_wr *)e.op_context;
			snprintf(text, sizeof(text), "%s: %s", fi_strerror(e.err), pe ? pe : "");
			posted_del(s, op);
			if (retry(s, op, e.err)) {
				total++;
				continue;
			}
			op_done(s, op, e.err == FI_EHOSTUNREACH ? -EHOSTUNREACH : -(int)e.err,
			        text);
			total++;
			continue;
		}
		if (n < 0) {
			mv_log("shard %d: fi_cq_read: %s", s->id, fi_strerror((int)-n));
			break;
		}
		for (ssize_t i = 0; i < n; i++) {
			if (ent[i].flags & FI_REMOTE_CQ_DATA) {
				if (ent[i].data & MV_ACK)
					ack_arrived(s, ent[i].data);
				else
					deliver_imm(s, ent[i].data);
				continue;
			}
			struct mv_land_buf *lb = land_of(s, ent[i].op_context);
			if (lb) {
				land_event(s, lb, ent[i].op_context, ent[i].len, 0);
				continue;
			}
			struct mv_wr *op = (struct mv_wr *)ent[i].op_context;
			if (op->kind == MV_OPK_LAND && --op->acks > 0)
				continue; /* sent; landed once the ack comes */
			if (op->kind == MV_OPK_LAND && op->land_err) {
				posted_del(s, op);
				op_done(
				    s, op, -EIO,
				    "the target mover could not put the data in its GPU memory");
				continue;
			}
			posted_del(s, op);
			s->st.completed++;
			s->st.bytes += op->bytes;
			op_done(s, op, 0, NULL);
		}
		total += (int)n;
		if (n < CQ_BATCH)
			break;
	}
	return total;
}

/*
 * Writes the provider has not completed within the deadline (a peer that
 * died before its connection was made never answers on tcp;ofi_rxm) fail
 * their batches now. libfabric cannot cancel a posted write, so the op
 * stays parked, owned by the provider, until it completes or the shard
 * closes its endpoint; only then is it reused.
 */
static int expire(struct mv_shard *s)
{
	int64_t now = s->now, limit = s->mv->cfg.op_timeout_ms * 1000000ll;
	int n = 0;

	/* A1 pairs with R1 in mv_peer_exited(). */
	uint32_t deaths = atomic_load_explicit(&s->mv->peer_deaths, memory_order_acquire);
	if (deaths != s->seen_deaths) {
		/* An exited peer completes nothing more: its posted writes fail
		 * now, not at their deadline (still parked: the provider owns
		 * them). Pending ones fail when post() reaches them. */
		s->seen_deaths = deaths;
		for (struct mv_wr *op = s->posted_head; op; op = op->pnext) {
			char text[MV_ERRLEN];
			if (op->abandoned ||
			    atomic_load_explicit(&op->peer->gone, memory_order_relaxed) !=
			        MV_PEER_EXITED)
				continue;
			mv_peer_why(op->peer, text, sizeof(text));
			op_report(s, op, -EHOSTUNREACH, text);
			op->abandoned = 1;
			s->abandoned++;
			n++;
		}
	}
	if (now < s->next_expire)
		return n;
	s->next_expire = now + 50000000ll;
	/* Never posted: the provider kept answering EAGAIN (rxm does while it
	 * cannot connect). These are ours alone and end here. */
	while (s->pend_head && now - s->pend_head->posted_at > limit) {
		struct mv_wr *op = s->pend_head;
		char text[MV_ERRLEN];
		s->pend_head = op->next;
		if (!s->pend_head)
			s->pend_tail = NULL;
		s->npend--;
		snprintf(text, sizeof(text),
		         "peer mover %016llx took no write for %d ms: unreachable or gone",
		         (unsigned long long)op->peer->mover_id, s->mv->cfg.op_timeout_ms);
		op_report(s, op, -ETIMEDOUT, text);
		op_put(s, op);
		n++;
	}
	for (struct mv_wr *op = s->posted_head; op && now - op->posted_at > limit; op = op->pnext) {
		char text[MV_ERRLEN];
		if (op->abandoned)
			continue;
		snprintf(text, sizeof(text),
		         "no completion from peer mover %016llx in %d ms: unreachable or gone",
		         (unsigned long long)op->peer->mover_id, s->mv->cfg.op_timeout_ms);
		op_report(s, op, -ETIMEDOUT, text);
		op->abandoned = 1;
		s->abandoned++;
		n++;
	}
	return n;
}

static void attach_free(struct mv_attach *at)
{
	shmring_close(&at->sub);
	shmring_close(&at->comp);
	free(at->parts);
	free(at->ovf);
	free(at);
}

/* Takes a leaving client's ops out of one queue; returns how many. */
static uint32_t drop_queued(struct mv_shard *s, struct mv_wr **head, struct mv_wr **tail,
                            struct mv_attach *at, int report)
{
	struct mv_wr **pp = head, *keep_tail = NULL;
	uint32_t n = 0;

	while (*pp) {
		struct mv_wr *op = *pp;
		if (op->at != at) {
			keep_tail = op;
			pp = &op->next;
			continue;
		}
		*pp = op->next;
		n++;
		if (report)
			op_report(s, op, -ECANCELED, "the client left");
		else
			at->outstanding--;
		op_put(s, op);
	}
	*tail = keep_tail;
	return n;
}

/* Pending (never posted) ops of a leaving client end as cancelled. */
static void cancel_pending(struct mv_shard *s, struct mv_attach *at)
{
	/* Staged writes still waiting for a bounce chunk: nothing started. */
	s->ngpu -= drop_queued(s, &s->sq_head, &s->sq_tail, at, 0);
	/* Writes waiting to be retried: nothing of them is in the provider. */
	s->nretry -= drop_queued(s, &s->rq_head, &s->rq_tail, at, 1);
	s->npend -= drop_queued(s, &s->pend_head, &s->pend_tail, at, 0);
}

static void run_cmd(struct mv_shard *s, struct mv_cmd *c)
{
	struct mv_region *r;
	struct mv_peer *p;
	struct mv_attach *at;
	struct mv_client *cl;
	int ret = 0;

	switch (c->type) {
	case MV_CMD_ATTACH:
		at = ((struct mv_client *)c->arg)->att[s->id];
		if (s->natt >= MV_MAX_CLIENTS) {
			ret = -ENOSPC;
			break;
		}
		shmring_set_doorbell(&at->comp, at->cl->efd);
		s->att[s->natt++] = at;
		break;
	case MV_CMD_DETACH:
		cl = c->arg;
		at = cl->att[s->id];
		if (at) {
			at->detaching = 1;
			cancel_pending(s, at);
		}
		break;
	case MV_CMD_REG: {
		uint64_t want = 0, key = 0;
		r = c->arg;
		if (s->fab.key_size >= 8)
			want = (uint64_t)(uint32_t)random() << 32;
		want |= r->id;
		if (r->is_gpu && !s->mv->hmem) {
			/* Not registrable: it is reached by CUDA copies or by
			 * landing messages, into buffers this shard posts. */
			ret = mv_gpu_shard_ready(s, r->gpu.dev, c->msg, sizeof(c->msg));
			if (!ret)
				ret = land_init(s, c->msg, sizeof(c->msg));
			break;
		}
		if (r->is_gpu)
			ret = mv_fabric_reg_hmem(&s->fab, r->gpu.dptr, r->len, r->gpu.dev, want,
			                         &r->mr[s->id], &r->desc[s->id], &key, c->msg,
			                         sizeof(c->msg));
		else
			ret = mv_fabric_reg(&s->fab, r->base, r->len, want, &r->mr[s->id],
			                    &r->desc[s->id], &key, c->msg, sizeof(c->msg));
		r->key[s->id] = key;
		break;
	}
	case MV_CMD_DEREG:
		r = c->arg;
		if (r->mr[s->id])
			fi_close(&r->mr[s->id]->fid);
		r->mr[s->id] = NULL;
		break;
	case MV_CMD_PEER_ADD: {
		p = c->arg;
		uint32_t t = (uint32_t)s->id % p->nshards;
		ret = mv_fabric_av_insert(&s->fab, p->blob.addr[t], &p->fiaddr[s->id]);
		if (ret)
			snprintf(c->msg, sizeof(c->msg), "fi_av_insert of peer shard %u: %s", t,
			         fi_strerror(-ret));
		break;
	}
	case MV_CMD_SYNC:
		mv_stats_publish(s, 1);
		break;
	case MV_CMD_STOP:
		s->stop_cmd = c;
		return; /* acknowledged once drained */
	}
	if (c->type == MV_CMD_DETACH)
		return; /* acknowledged by the detach path below */
	cmd_done(s, c, ret);
}

static void mailbox(struct mv_shard *s)
{
	struct mv_cmd *c;

	/* A3 pairs with R3 in mv_shard_post() */
	if (!atomic_load_explicit(&s->mbox_pending, memory_order_acquire))
		return;
	pthread_mutex_lock(&s->mbox_mu);
	c = s->mbox_head;
	s->mbox_head = s->mbox_tail = NULL;
	atomic_store_explicit(&s->mbox_pending, 0, memory_order_relaxed);
	pthread_mutex_unlock(&s->mbox_mu);
	while (c) {
		struct mv_cmd *next = c->next;
		run_cmd(s, c);
		c = next;
	}
}

/* Attachments whose client left and whose last op finished go away. */
static void reap_detached(struct mv_shard *s)
{
	for (uint32_t i = 0; i < s->natt; i++) {
		struct mv_attach *at = s->att[i];
		if (!at->detaching || at->outstanding)
			continue;
		struct mv_client *cl = at->cl;
		s->att[i] = s->att[--s->natt];
		i--;
		cl->att[s->id] = NULL;
		attach_free(at);
		uint64_t one = 1;
		atomic_fetch_add_explicit(&cl->shards_detached, 1, memory_order_release);
		if (write(s->mv->efd, &one, sizeof(one)) < 0) {
			/* saturated counter: the main thread wakes anyway */
		}
	}
}

static int flush_all(struct mv_shard *s)
{
	int n = 0;

	for (uint32_t i = 0; i < s->natt; i++) {
		struct mv_attach *at = s->att[i];
		if (at->ovf_head != at->ovf_tail)
			n += flush_ovf(at);
		if (!at->dead && shmring_reserved(&at->comp))
			shmring_commit(&at->comp);
	}
	return n;
}

static int rings_empty(struct mv_shard *s)
{
	for (uint32_t i = 0; i < s->natt; i++) {
		struct mv_attach *at = s->att[i];
		uint32_t pos;
		if (!at->dead && !at->detaching && shmring_peek(&at->sub, 1, &pos) > 0)
			return 0;
	}
	return 1;
}

/* Returns 1 when something woke the shard (doorbell, CQ fd), 0 otherwise. */
static int sleep_once(struct mv_shard *s, int64_t idle_ns)
{
	struct pollfd pf[2] = {{.fd = s->efd, .events = POLLIN},
	                       {.fd = s->fab.cq_fd, .events = POLLIN}};
	uint32_t armed = 0;
	int64_t timeout; /* ns */
	int nfds = 1, woke = 1, wake = 0;

	for (; armed < s->natt; armed++) {
		struct mv_attach *at = s->att[armed];
		if (!at->dead && !at->detaching && shmring_arm_doorbell(&at->sub))
			goto disarm;
	}
	if (s->posted > s->abandoned || s->npend || s->ngpu || s->nretry || s->nland_busy) {
		/* Work is in flight: yield the core briefly, never block long. */
		timeout = s->fab.cq_fd >= 0 ? 1000000 : 0;
	} else if (s->fab.cq_fd >= 0) {
		timeout = 100000000;
	} else {
		/* No wait object (shm): nothing wakes a shard when a peer writes
		 * here, and shm's receiver does the copy, so a sleeping receiver
		 * stalls its senders. Poll in short steps first (a stream with
		 * gaps is the common case), backing off the longer nothing comes;
		 * the first write after a long idle waits at most 50 ms. A 20 us
		 * step sleeps up to 70 us with the default 50 us timer slack. */
		timeout = idle_ns < 2000000ll      ? 20000
		          : idle_ns < 50000000ll   ? 1000000
		          : idle_ns < 1000000000ll ? 10000000
		                                   : 50000000;
		/* Past the polling steps, a same-host sender wakes us (wake.c). */
		if (timeout >= 1000000) {
			wake = mv_wake_arm(s);
			if (wake < 0)
				goto disarm; /* a write came in meanwhile */
			if (wake) {
				pf[1].fd = s->wake_fd;
				nfds = 2;
			}
		}
	}
	if (s->fab.cq_fd >= 0) {
		struct fid *f = &s->fab.cq->fid;
		if (fi_trywait(s->fab.fabric, &f, 1) != FI_SUCCESS)
			goto disarm;
		nfds = 2;
	}
	if (timeout == 0) {
		sched_yield();
		woke = 0;
	} else {
		struct timespec ts = {.tv_sec = timeout / 1000000000,
		                      .tv_nsec = timeout % 1000000000};
		woke = ppoll(pf, (nfds_t)nfds, &ts, NULL) > 0;
		if (woke && (pf[0].revents & POLLIN)) {
			uint64_t v;
			if (read(s->efd, &v, sizeof(v)) < 0) {
				/* EAGAIN: another reader drained it */
			}
		}
	}
	if (wake > 0)
		mv_wake_disarm(s, woke && (pf[1].revents & POLLIN));
disarm:
	for (uint32_t i = 0; i < armed && i < s->natt; i++)
		shmring_disarm(&s->att[i]->sub);
	return woke;
}

/* How long to busy-poll after the last work. A stream whose pieces come
 * further apart than the spin (a receiving tcp shard sees socket data but
 * no work until a whole write lands; a big shm write lands every few
 * hundred us) would sleep between every two pieces, and on a virtual
 * machine every wake from a sleep costs tens of us in which the socket is
 * not drained. So a sleep that the stream cut short, or work that came back
 * soon after one, doubles the spin up to SPIN_MAX_NS; a sleep that ran its
 * whole timeout, or a gap longer than that, sets it back. An idle mover
 * still sleeps within SPIN_MAX_NS of its last work. Only while the host has
 * a CPU for every runnable thread does a shard spin longer: on a crowded
 * host (two movers and their clients on two cores) it would spin on time
 * that other threads, its own clients among them, are waiting for. */
static int64_t spin_after_sleep(int64_t spin, int64_t gap, int cut_short, int crowded)
{
	if (!cut_short || gap >= SPIN_MAX_NS || crowded)
		return SPIN_NS;
	spin *= 2;
	if (spin < 2 * gap)
		spin = 2 * gap;
	return spin > SPIN_MAX_NS ? SPIN_MAX_NS : spin;
}

/* Whether the host has no CPU to spare right now: as many runnable threads
 * (this one among them) as CPUs, so a thread that wakes would have to wait.
 * The fourth field of /proc/loadavg (fd) is runnable/all. 1 when unknown. */
static int host_crowded(int fd, long ncpu)
{
	double l1, l5, l15;
	long running, all;
	char buf[128];
	ssize_t n = fd < 0 ? -1 : pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0 || ncpu <= 0)
		return 1;
	buf[n] = 0;
	if (sscanf(buf, "%lf %lf %lf %ld/%ld", &l1, &l5, &l15, &running, &all) != 5)
		return 1;
	return running >= ncpu;
}

static void shard_loop(struct mv_shard *s)
{
	int64_t last_work = mv_now_ns(), last_active = last_work, spin = SPIN_NS, stop_at = 0;
	int load_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int slept = 0, crowded = 1;

	for (;;) {
		int work = 0;

		s->now = mv_now_ns();
		mailbox(s);
		if (s->nretry)
			work += retry_due(s);
		work += consume(s);
		if (s->gpu_open_dev >= 0) {
			char why[MV_ERRLEN];
			fence(s, why, sizeof(why));
		}
		work += post(s);
		work += reap(s);
		if (s->ngpu)
			work += gpu_progress(s);
		if (s->nland_busy || s->land)
			work += land_progress(s);
		work += expire(s);
		work += flush_all(s);
		reap_detached(s);
		mv_stats_publish(s, 0);
		if (s->stop_cmd) {
			if (!stop_at)
				stop_at = mv_now_ns() + STOP_DRAIN_NS;
			if ((rings_empty(s) && !s->npend && !s->ngpu &&
			     s->posted == s->abandoned) ||
			    mv_now_ns() > stop_at) {
				if (s->npend || s->posted)
					mv_log(
					    "shard %d: stopping with %u queued and %u posted ops",
					    s->id, s->npend, s->posted);
				break;
			}
		}
		/* Writes landing here make no CQ entry, but they are work: read
		 * the counter only on a turn that found nothing else, since on
		 * some providers reading it runs progress again. */
		if (!work && s->fab.rx_cntr) {
			uint64_t v = fi_cntr_read(s->fab.rx_cntr);
			if (v != s->rx_seen) {
				s->rx_seen = v;
				work++;
			}
		}
		/* Stamped when the work ended, not when the turn began: a long
		 * turn (a big post, or preemption) must not count as idle time. */
		if (work) {
			int64_t now = mv_now_ns();
			if (slept)
				spin = spin_after_sleep(spin, now - last_work, 1, crowded);
			slept = 0;
			last_work = last_active = now;
			continue;
		}
		if (mv_now_ns() - last_active < spin || s->stop_cmd)
			continue;
		s->st.sleeps++;
		mv_stats_publish(s, 1);
		crowded = host_crowded(load_fd, ncpu);
		/* Woken by data (the CQ fd of a receiving shard: its writes make
		 * no CQ entry) or a doorbell: spin again rather than sleep per
		 * message while a stream lasts. */
		int64_t t0 = mv_now_ns();
		int woke = sleep_once(s, t0 - last_active);
		int64_t now = mv_now_ns();
		slept = 1;
		if (woke)
			last_active = now;
		spin = spin_after_sleep(spin, now - t0, woke, crowded);
	}
	if (load_fd >= 0)
		close(load_fd);
}

void *mv_shard_main(void *arg)
{
	struct mv_shard *s = arg;
	int ret;

	s->gpu_open_dev = -1;
	ret = mv_topo_pin(s->cpu);
	if (ret)
		mv_log("shard %d: pinning to CPU %d failed: %s", s->id, s->cpu, strerror(-ret));
	/* Everything the shard owns is allocated after pinning, on its node. */
	ret = mv_fabric_open(&s->fab, s->mv->prov, s->iface, s->mv->hmem);
	if (ret) {
		s->start_status = ret;
		snprintf(s->start_msg, sizeof(s->start_msg), "opening %s on %s: %s", s->mv->prov,
		         s->iface, fi_strerror(-ret));
		sem_post(&s->started);
		return NULL;
	}
	s->ops = calloc(MV_OPS_PER_SHARD, sizeof(*s->ops));
	if (!s->ops) {
		s->start_status = -ENOMEM;
		snprintf(s->start_msg, sizeof(s->start_msg), "no memory for the op pool");
		mv_fabric_close(&s->fab);
		sem_post(&s->started);
		return NULL;
	}
	for (uint32_t i = 0; i < MV_OPS_PER_SHARD; i++) {
		s->ops[i].chunk = -1;
		op_put(s, &s->ops[i]);
	}
	/* Landing headers live in the ops: register them, for providers that
	 * want local buffers registered (FI_MR_LOCAL). */
	ret = mv_fabric_reg(&s->fab, s->ops, MV_OPS_PER_SHARD * sizeof(*s->ops),
	                    0x0b5000000ull + (uint64_t)s->id, &s->ops_mr, &s->ops_desc,
	                    &(uint64_t){0}, s->start_msg, sizeof(s->start_msg));
	if (ret) {
		s->start_status = ret;
		free(s->ops);
		mv_fabric_close(&s->fab);
		sem_post(&s->started);
		return NULL;
	}
	void *bell_desc; /* unused: the doorbell is only written to, by peers */
	s->bell = aligned_alloc(4096, 4096);
	ret = s->bell ? mv_fabric_reg(&s->fab, s->bell, 4096, 0xbe11000000ull + (uint64_t)s->id,
	                              &s->bell_mr, &bell_desc, &s->bell_key, s->start_msg,
	                              sizeof(s->start_msg))
	              : -ENOMEM;
	if (ret) {
		s->start_status = ret;
		free(s->bell);
		free(s->ops);
		mv_fabric_close(&s->fab);
		sem_post(&s->started);
		return NULL;
	}
	sem_post(&s->started);

	shard_loop(s);

	struct mv_cmd *stop = s->stop_cmd;
	for (uint32_t i = 0; i < s->natt; i++)
		attach_free(s->att[i]);
	s->natt = 0;
	if (s->land) {
		fi_close(&s->land_mr->fid);
		mv_gpu_unpin(s->land[0].buf);
		free(s->land);
	}
	mv_gpu_shard_close(s);
	fi_close(&s->bell_mr->fid);
	fi_close(&s->ops_mr->fid);
	free(s->bell);
	/* Registrations before the domain they belong to. */
	for (uint32_t i = 0; i < MV_MAX_REGIONS; i++) {
		struct mv_region *r =
		    atomic_load_explicit(&s->mv->regions[i], memory_order_acquire);
		if (r && r->mr[s->id]) {
			fi_close(&r->mr[s->id]->fid);
			r->mr[s->id] = NULL;
		}
	}
	mv_fabric_close(&s->fab);
	free(s->ops);
	cmd_done(s, stop, 0);
	return NULL;
}

int mv_shard_start(struct mv_shard *s)
{
	int ret;

	pthread_mutex_init(&s->mbox_mu, NULL);
	sem_init(&s->started, 0, 0);
	ret = pthread_create(&s->thread, NULL, mv_shard_main, s);
	if (ret)
		return -ret;
	/* Named so top -H, perf and mvbench --threads can tell shards apart. */
	char name[16];
	snprintf(name, sizeof(name), "mv-shard%d", s->id);
	pthread_setname_np(s->thread, name);
	sem_wait(&s->started);
	return s->start_status;
}
