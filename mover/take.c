/* SPDX-License-Identifier: MIT */
/*
 * Taking descriptors, the start of a shard's data path. Each turn the shard
 * consumes descriptors from the submission ring of each client in turn, a
 * budget per ring, copies each out of shared memory before it looks, checks
 * it, and turns a WRITE into ops on its client's queue (contiguous pieces
 * merged into one op), a LIST into a cursor list.c expands, and an END into
 * the end of its batch part. Writes that GPU memory needs go to gpu_path.c
 * or land.c. A client whose queue is full, or that holds more than its
 * share of the op pool while others are active, is passed over for the
 * turn, never the clients after it; the turn ends by counting the clients
 * active on the shard, for post.c's fair shares.
 */
#include "shard_int.h"

#include <stdio.h>

#define RING_BUDGET 256u /* descriptors from one ring per turn */

/* Ops one checked WRITE needs at most: its chunks, and one to spare. */
static uint32_t ops_needed(const struct mv_desc *d)
{
	return (uint32_t)((d->len + MV_CHUNK - 1) / MV_CHUNK) + 1;
}

/*
 * Turns one checked write (d's src_off, dst_off, len between src and dst)
 * into ops, merged with the op before it where they meet; the caller
 * checked there are enough free. WRITE descriptors and list runs both.
 */
void mv_take_run(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d,
                 struct mv_region *src, struct mv_import *dst)
{
	struct mv_part *p = &at->parts[d->batch];
	uint32_t t = (uint32_t)s->id % dst->nshards;
	uint64_t off = 0;

	/* GPU memory takes the path the mover chose for this kind of write
	 * (gpu_calib.c), as far as both sides allow: CUDA copies into a
	 * same-host peer's mapped GPU region; the fabric reading and writing
	 * registered GPU memory; or staging, through the bounce pool on a GPU
	 * source and as landing messages into a GPU destination. */
	uint8_t path = MV_PATH_HOST;
	int land = 0, sg = src->is_gpu, dg = !!(dst->flags & MV_BLOB_GPU);
	if (sg || dg) {
		const struct mv_gpu_choice *c = &s->mv->gpu_path[sg][dg][dst->remote != NULL];
		if (c->path == MV_PATH_COPY && dst->remote) {
			path = MV_PATH_COPY;
		} else {
			int dst_direct =
			    !(dst->flags & MV_BLOB_NO_FABRIC) &&
			    (c->path == MV_PATH_HMEM || !(dst->flags & MV_BLOB_LANDING));
			land = dg && !dst_direct;
			int src_staged = sg && (!src->mr[s->id] || c->path != MV_PATH_HMEM || land);
			path = src_staged || land ? MV_PATH_STAGED : MV_PATH_HMEM;
		}
		mv_gpu_path_tell(s, src, dst, path, c);
	}
	if (path == MV_PATH_COPY || (sg && path == MV_PATH_STAGED)) {
		mv_take_gpu(s, at, d, src, dst, path, land);
		return;
	}
	if (land) {
		mv_take_land(s, at, d, src, dst);
		return;
	}
	/* Host memory into a same-host peer's host region the peer handed us:
	 * the shard copies it there itself (samehost.c); an op's remote
	 * address is then our mapping's. A9 pairs with R9 in samehost.c:
	 * the mapping may come after the import. */
	struct mv_host_remote *hr =
	    !src->is_gpu ? atomic_load_explicit(&dst->host, memory_order_acquire) : NULL;
	/* The import's length was checked (validate.c) and equals the
	 * mapping's (samehost.c); checked again here, since an op's address
	 * is then ours: a write past the mapping goes to the fabric, whose
	 * key bounds it at the owner. */
	if (hr && (d->dst_off > hr->len || hr->len - d->dst_off < d->len))
		hr = NULL;
	/* A copy is bounded by no provider: up to MV_IOV_MAX writes merge
	 * into one op, whose per-op costs (the fence words, the bookkeeping)
	 * a batch of 64 KiB writes then pays per MiB, not per 256 KiB. */
	uint32_t iov_max = hr ? MV_IOV_MAX : (uint32_t)s->fab.iov_limit;
	if (hr)
		path = MV_PATH_SAMEHOST;
	while (off < d->len) {
		uint64_t n = d->len - off < MV_CHUNK ? d->len - off : MV_CHUNK;
		uint8_t *la = src->base + d->src_off + off;
		uint64_t ra = hr ? (uint64_t)(uintptr_t)(hr->base + d->dst_off + off)
		                 : dst->addr[t] + d->dst_off + off;
		struct mv_wr *tail = at->pq_tail;

		/* Merge into the client's previous op of the same batch and
		 * peer: extend its last iov when both sides are contiguous, else
		 * add an iov. */
		if (tail && tail->kind == MV_OPK_WRITE && tail->path == path &&
		    tail->batch == d->batch && tail->peer == dst->peer && tail->hr == hr &&
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
			if (tail->niov < iov_max) {
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
		struct mv_wr *op = mv_op_get(s);
		op->kind = MV_OPK_WRITE;
		op->path = path;
		op->at = at;
		op->batch = d->batch;
		op->peer = dst->peer;
		op->hr = hr;
		op->niov = 1;
		op->bytes = n;
		op->iov[0] = (struct iovec){la, n};
		op->desc[0] = src->desc[s->id];
		op->riov[0] = (struct fi_rma_iov){.addr = ra, .len = n, .key = dst->key[t]};
		p->outstanding++;
		mv_op_own(s, at, op);
		mv_pend_push(s, op);
		off += n;
	}
}

/*
 * Gives one WRITE its verdict, then its ops: returns 0 only for a write that
 * passed every check and waits for free ops (retried later). A descriptor
 * that fails is done with at once, so nothing untrusted decides how long it
 * stays at the head of the ring.
 */
static int take_write(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d)
{
	struct mv_part *p = &at->parts[d->batch];
	struct mv_region *src = mv_region_get(s->mv, d->src);
	struct mv_import *dst = mv_import_get(at->cl, d->dst);
	char why[MV_ERRLEN];
	uint8_t cause;
	int ret;

	if (p->failed) {
		p->ndesc++;
		return 1;
	}
	ret = mv_check_write(d, src, dst, at->cl->id, why, sizeof(why), &cause);
	if (ret) {
		p->ndesc++;
		mv_fail_part(p, ret, cause, cause == MV_CAUSE_NO_IMPORT ? d->dst : d->src, why);
		return 1;
	}
	if (atomic_load_explicit(&dst->peer->gone, memory_order_relaxed)) {
		p->ndesc++;
		mv_peer_why(dst->peer, why, sizeof(why));
		mv_fail_part(p, -EHOSTUNREACH, MV_CAUSE_PEER_GONE, d->dst, why);
		return 1;
	}
	/* Checked, so bounded: at most MV_MAX_WRITE / MV_CHUNK + 1 ops. */
	if (ops_needed(d) > s->nfree)
		return 0;
	p->ndesc++;
	p->peer = dst->peer->mover_id;
	mv_take_run(s, at, d, src, dst);
	return 1;
}

/*
 * A client's rhythm, for post.c's anticipation, on average: how soon it
 * submitted its next batch after its last one completed here (react_ns:
 * from that completion to the stamp on the next END, the client's own time
 * rather than the shard's in taking it), and how far apart the shard took
 * its ENDs (cycle_ns). Intervals longer than REACT_MAX_NS count as that
 * much, so a client that pauses between batches soon stops being waited
 * for; a batch submitted before the last one completed is no return. The
 * stamp is the client's word, taken only between that completion and the
 * take: it can make the client look quicker than it was, never slower, and
 * the cycle is the shard's own clock, so what others wait for a client
 * stays within the third of its real cycle that hold.c allows.
 */
#define REACT_MAX_NS 50000

static int64_t capped(int64_t v)
{
	return v > REACT_MAX_NS ? REACT_MAX_NS : v;
}

static void react_note(struct mv_attach *at, uint64_t stamp, int64_t now)
{
	int64_t done = at->done_at, last = at->last_end;

	at->done_at = 0;
	at->last_end = now;
	if (last && now > last)
		at->cycle_ns = mv_avg8(at->cycle_ns, capped(now - last));
	if (done && stamp >= (uint64_t)done && stamp <= (uint64_t)now)
		at->react_ns = mv_avg8(at->react_ns, capped((int64_t)stamp - done));
}

/*
 * A batch of one part whose one write is still queued carries its
 * immediate on that write (FI_REMOTE_CQ_DATA): the target's CQ entry comes
 * only once the write's data is in place, so the order the contract asks
 * for holds, and a small write's round trip saves the wait for the data's
 * completion and a second fabric write. Larger batches keep the immediate
 * after every write's completion: the providers do not order separate
 * writes (shm) or order only some (rxm), and a batch of several parts
 * needs all of them.
 */
static void imm_inline(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d)
{
	struct mv_part *p = &at->parts[d->batch];
	struct mv_wr *op = at->pq_tail;
	struct mv_import *imp = mv_import_get(at->cl, d->dst);

	/* A same-host copy is no fabric write: its immediate goes after it. */
	if (d->nparts != 1 || p->outstanding != 1 || !op || op->batch != d->batch ||
	    op->kind != MV_OPK_WRITE || op->path == MV_PATH_SAMEHOST || !imp ||
	    imp->peer != op->peer)
		return;
	op->with_imm = 1;
	op->data = (uint64_t)imp->region << 32 | d->imm;
	p->imm_sent = 1;
}

static void take_end(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d)
{
	struct mv_part *p = &at->parts[d->batch];
	char why[MV_ERRLEN];

	if (d->nparts == 0 || d->nparts > s->mv->nshards) {
		snprintf(why, sizeof(why), "batch %u END says %u parts; this mover has %u shards",
		         d->batch, d->nparts, s->mv->nshards);
		mv_fail_part(p, -EINVAL, MV_CAUSE_BAD_DESC, 0, why);
	} else if (d->ndesc != p->ndesc) {
		snprintf(why, sizeof(why), "batch %u END counts %u writes; shard %d received %u",
		         d->batch, d->ndesc, s->id, p->ndesc);
		mv_fail_part(p, -EINVAL, MV_CAUSE_BAD_DESC, 0, why);
	} else if ((d->flags & MV_END_IMM) && !mv_import_get(at->cl, d->dst)) {
		snprintf(why, sizeof(why), "immediate names import %u, which does not exist",
		         d->dst);
		mv_fail_part(p, -ENOENT, MV_CAUSE_NO_IMPORT, d->dst, why);
	}
	if (p->ndesc)
		at->open_parts--;
	if (!p->failed && (d->flags & MV_END_IMM))
		imm_inline(s, at, d);
	/* A clock read of its own: the turn's s->now can be older than the
	 * client's stamp of a batch it committed during this turn. */
	p->t_take = mv_now_ns();
	/* The client's stamp is its word only: a stamp from the future is
	 * not a duration, and one past 2^63 is no time (compared unsigned:
	 * as a signed number it made the difference overflow). */
	if (d->stamp && d->stamp <= (uint64_t)p->t_take)
		mv_hop(s, MV_HOP_QUEUE, p->t_take - (int64_t)d->stamp);
	react_note(at, d->stamp, p->t_take);
	p->end = *d;
	if (p->end.nparts == 0 || p->end.nparts > s->mv->nshards)
		p->end.nparts = 1; /* complete it alone, with its error */
	p->ended = 1;
	mv_check_part(s, at, d->batch);
}

/* One descriptor; returns 0 if the shard lacks ops for it now (retry later). */
static int take_desc(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d)
{
	char why[MV_ERRLEN];

	/* No batch can own these: the client's rings no longer make sense. */
	if (d->batch >= at->cl->max_batches) {
		snprintf(why, sizeof(why), "a descriptor names batch %u; ids run below %u",
		         d->batch, at->cl->max_batches);
		mv_cut_off(s, at, why);
		return 1;
	}
	struct mv_part *p = &at->parts[d->batch];
	/* Its END taken, or its part here finished and the batch not yet
	 * published (an immediate or another shard's part still to come): a
	 * client reuses an id only after its completion. The generation is
	 * relaxed: the completion the client read was published after the
	 * bump, and its descriptor reached us through the ring's acquire. */
	if (p->fin && atomic_load_explicit(&at->cl->batches[d->batch].gen, memory_order_relaxed) !=
	                  p->fin_gen)
		p->fin = 0;
	if (p->ended || p->fin) {
		snprintf(why, sizeof(why),
		         "a descriptor for batch %u after its END (still in flight)", d->batch);
		mv_cut_off(s, at, why);
		return 1;
	}
	uint32_t before = p->ndesc;
	int ret;

	switch (d->op) {
	case MV_OP_WRITE:
		ret = take_write(s, at, d);
		break;
	case MV_OP_LIST:
		mv_list_take(s, at, d);
		ret = 1;
		break;
	case MV_OP_END:
		take_end(s, at, d);
		return 1;
	default:
		/* It may have been its batch's END: no part could end, so
		 * nothing short of a cut-off completes the batch. */
		snprintf(why, sizeof(why), "descriptor op %u is not WRITE (1), END (2) or LIST (3)",
		         d->op);
		mv_cut_off(s, at, why);
		return 1;
	}
	/* A part opened: its END must follow (mv_expire_waits() checks). */
	if (!before && p->ndesc)
		at->open_parts++;
	return ret;
}

/* Counts the clients active on the shard and their weights (post.c). */
static void count_active(struct mv_shard *s)
{
	uint32_t n = 0;
	uint64_t w = 0;

	for (uint32_t i = 0; i < s->natt; i++) {
		const struct mv_attach *at = s->att[i];
		if (at->npq || at->inflight_ops || at->cur.active ||
		    s->now - at->last_take < MV_FAIR_LINGER_NS) {
			n++;
			w += at->weight;
		}
	}
	s->nactive = n;
	s->wsum = w;
}

int mv_consume(struct mv_shard *s)
{
	uint32_t total = 0, n = s->natt;
	char why[MV_ERRLEN];

	for (uint32_t k = 0; k < n; k++) {
		struct mv_attach *at = s->att[(s->rr + k) % n];
		uint32_t pos, used = 0;

		if (!mv_serving(at)) {
			mv_cut(at); /* says so on this shard's ring, once */
			continue;
		}
		if (s->nfree <= MV_IOV_MAX)
			break;
		if (at->npq > s->fab.tx_size * 2 || !mv_pool_room(s, at))
			continue;
		/* A list being expanded goes first; what follows it waits. */
		if (at->cur.active) {
			int n_exp = mv_list_expand(s, at);
			total += (uint32_t)n_exp;
			if (n_exp)
				mv_touch(s, at);
			if (at->cur.active)
				continue;
		}
		int got = shmring_peek(&at->sub, RING_BUDGET, &pos);
		if (got > 0 && at->sub.cached - at->sub.local > at->sub_hwm)
			at->sub_hwm = at->sub.cached - at->sub.local;
		if (got < 0) {
			snprintf(why, sizeof(why), "submission ring: %s", shmring_error(&at->sub));
			mv_cut_off(s, at, why);
			continue;
		}
		for (int i = 0; i < got; i++) {
			struct mv_desc d;
			/* Copy first: the client can rewrite the slot while we look. */
			memcpy(&d, shmring_slot(&at->sub, pos + (uint32_t)i), sizeof(d));
			if (!take_desc(s, at, &d))
				break;
			used++;
			if (atomic_load_explicit(&at->cl->cut, memory_order_relaxed))
				break;
			if (at->cur.active)
				break; /* a list the shard has no more room for now */
		}
		if (used) {
			shmring_release(&at->sub, used);
			mv_touch(s, at);
		}
		at->descs += used;
		s->st.descs += used;
		total += used;
		if (used)
			at->last_take = s->now;
	}
	s->rr++;
	count_active(s);
	return (int)total;
}
