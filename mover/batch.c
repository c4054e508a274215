/* SPDX-License-Identifier: MIT */
/*
 * Parts of client batches, the end of a shard's data path. An ended op's
 * outcome goes to its batch part (its bytes, or the part's first failure); a
 * part that has its END and no op outstanding finishes, and the shard that
 * finishes a batch's last part publishes the batch's completion (posting its
 * immediate first, where it has one). Completions go into the client's
 * completion ring, or wait in order while it is full, and are committed once
 * a turn.
 */
#include "shard_int.h"

#include <stdio.h>
#include <stdlib.h>

#include "trace_format.h"

#define OVF_MAX 65536u /* completions held for a client whose ring is full */

/* Completions: into the client's ring, or held in order when it is full. */
void mv_push_cqe(struct mv_attach *at, const struct mv_cqe *c)
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
			char why[MV_ERRLEN];
			snprintf(why, sizeof(why), "completion ring: %s", shmring_error(&at->comp));
			at->dead = 1;
			mv_cut_off(NULL, at, why);
			return;
		}
	}
	if (at->ovf_tail - at->ovf_head == at->ovf_cap) {
		uint32_t cap = at->ovf_cap ? at->ovf_cap * 2 : 64;
		if (cap > OVF_MAX) {
			mv_log_client(MV_LOG_WARN, (uint64_t)at->cl->pid,
			              "client %u (pid %d): %u completions waiting and none read; "
			              "dropping one",
			              at->cl->id, (int)at->cl->pid, OVF_MAX);
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

/*
 * Cuts the client of at off: its rings broke the protocol (a descriptor no
 * batch can own, a ring whose indices are impossible), so nothing more is
 * taken from any of its rings and its completion rings carry one CUTOFF
 * saying why; the client library fails its batches in flight (-EPROTO).
 * What the shards already took runs to its end. s is NULL when the shard is
 * not known here. Any shard thread; the first caller's reason is kept.
 */
void mv_cut_off(struct mv_shard *s, struct mv_attach *at, const char *why)
{
	struct mv_client *cl = at->cl;
	int none = 0;

	if (!atomic_compare_exchange_strong_explicit(&cl->cut, &none, 1, memory_order_relaxed,
	                                             memory_order_relaxed))
		return;
	snprintf(cl->cut_why, sizeof(cl->cut_why), "%s", why);
	/* R1 pairs with A1 in mv_cut() and in control.c: cut_why is whole before 2
	 * is seen. */
	atomic_store_explicit(&cl->cut, 2, memory_order_release);
	if (s)
		mv_log_client(MV_LOG_WARN, (uint64_t)cl->pid,
		              "client %u (pid %d) cut off by shard %d: %s", cl->id, (int)cl->pid,
		              s->id, why);
	else
		mv_log_client(MV_LOG_WARN, (uint64_t)cl->pid, "client %u (pid %d) cut off: %s",
		              cl->id, (int)cl->pid, why);
	mv_cut(at);
}

/* 1 if the client of at is cut off; tells it on at's ring once. */
int mv_cut(struct mv_attach *at)
{
	struct mv_client *cl = at->cl;
	/* A1 pairs with R1 in mv_cut_off(). */
	int cut = atomic_load_explicit(&cl->cut, memory_order_acquire);

	if (cut == 2 && !at->cut_told) {
		struct mv_cqe c = {
		    .type = MV_CQE_CUTOFF, .status = -EPROTO, .cause = MV_CAUSE_PROTOCOL};
		snprintf(c.msg, sizeof(c.msg), "%s", cl->cut_why);
		at->cut_told = 1;
		mv_push_cqe(at, &c);
	}
	return cut != 0;
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

void mv_fail_part(struct mv_part *p, int status, uint8_t cause, uint32_t region, const char *msg)
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
	int64_t now = mv_now_ns();
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
		    .complete_ns = (uint64_t)now,
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
		struct mv_trace_hops hp = {
		    .type = MV_TR_HOPS,
		    .shard = (uint16_t)s->id,
		    .imm_inline = B->imm_inline,
		    .submit_ns = e->stamp,
		    .taken_ns = (uint64_t)B->t_take,
		    .posted_ns = (uint64_t)B->t_posted,
		    .data_ns = (uint64_t)B->t_data,
		    .imm_ns = status == 0 && (e->flags & MV_END_IMM) && !B->imm_inline && B->t_data
		                  ? (uint64_t)now
		                  : 0,
		    .complete_ns = t.complete_ns,
		};
		mv_trace_batch(s, &t, mv_tracing_hops(s->mv) ? &hp : NULL);
	}
	if (B->end.stamp && B->end.stamp <= (uint64_t)now) /* as in take_end() */
		mv_hop(s, MV_HOP_BATCH, now - (int64_t)B->end.stamp);
	/* Reset before the client can see the id again. */
	atomic_store_explicit(&B->bytes, 0, memory_order_relaxed);
	atomic_store_explicit(&B->ndesc, 0, memory_order_relaxed);
	atomic_store_explicit(&B->shard_mask, 0, memory_order_relaxed);
	atomic_store_explicit(&B->status, 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&B->gen, 1, memory_order_relaxed);
	atomic_store_explicit(&B->parts_done, 0, memory_order_release);
	at->batches++;
	s->st.batches++;
	at->done_at = now;
	mv_push_cqe(at, &c);
}

/* Notes that batch b waits for parts of other shards, in case its END
 * promised parts that never come (mv_expire_waits()). */
static void part_wait(struct mv_shard *s, struct mv_attach *at, uint32_t b,
                      const struct mv_desc *end)
{
	if (at->nwaits == at->waits_cap) {
		uint32_t cap = at->waits_cap ? at->waits_cap * 2 : 16;
		struct mv_part_wait *w = realloc(at->waits, cap * sizeof(*w));
		if (!w)
			return; /* not watched: only a lying END would wait for ever */
		at->waits = w;
		at->waits_cap = cap;
	}
	at->waits[at->nwaits++] = (struct mv_part_wait){
	    .end = *end,
	    .batch = b,
	    .gen = atomic_load_explicit(&at->cl->batches[b].gen, memory_order_relaxed),
	    .since = s->now};
}

/*
 * What a client that has been quiet for 3 op timeouts (no descriptor taken,
 * no op of its ended) still waits for never comes: an honest client commits
 * each part with its END and all parts at once, and a shard ends every op
 * it took within one op timeout. So then a batch whose END promised parts
 * that have not come fails, and a part whose END never came (its op
 * rewritten) cuts the client off, since without an END there is no cookie
 * to complete the batch with. A claimed batch (parts_done set to
 * MV_PARTS_CLAIMED) is published by the claimer; a part finishing at the
 * same moment either wins, or finds the claim and publishes nothing. Once
 * per expiry tick; returns batches failed.
 */
int mv_expire_waits(struct mv_shard *s)
{
	int64_t quiet = 3ll * s->mv->cfg.op_timeout_ms * 1000000ll;
	int n = 0;

	for (uint32_t i = 0; i < s->natt; i++) {
		struct mv_attach *at = s->att[i];
		struct mv_client *cl = at->cl;
		int64_t active = atomic_load_explicit(&cl->active_ns, memory_order_relaxed);
		int still = s->now - active < quiet || !mv_serving(at);

		if (at->open_parts && !still && !at->cur.active) {
			char why[MV_ERRLEN];
			snprintf(why, sizeof(why),
			         "%u batch part(s) with no END after %.0f s of quiet",
			         at->open_parts, (double)(s->now - active) / 1e9);
			mv_cut_off(s, at, why);
			continue;
		}
		for (uint32_t k = 0; k < at->nwaits; k++) {
			struct mv_part_wait *w = &at->waits[k];
			struct mv_batch *B = &cl->batches[w->batch];
			uint32_t done = atomic_load_explicit(&B->parts_done, memory_order_acquire);
			/* Published (gen moved, or parts_done reset), or claimed by
			 * another shard. As many parts as this END says, or more,
			 * and still not published: the parts disagreed on their
			 * number (the one that made the count would have published
			 * at once), and the batch is failed here like a short one. */
			int over = atomic_load_explicit(&B->gen, memory_order_relaxed) != w->gen ||
			           done == 0 || (done & MV_PARTS_CLAIMED);
			if (!over) {
				if (still || s->now - w->since < quiet)
					continue;
				if (atomic_compare_exchange_strong_explicit(
				        &B->parts_done, &done, MV_PARTS_CLAIMED,
				        memory_order_acq_rel, memory_order_relaxed)) {
					char why[MV_ERRLEN];
					if (done < w->end.nparts)
						snprintf(
						    why, sizeof(why),
						    "batch %u END says %u parts; %u came in %.0f s",
						    w->batch, w->end.nparts, done,
						    (double)(s->now - w->since) / 1e9);
					else
						snprintf(
						    why, sizeof(why),
						    "batch %u: its parts disagree on their number "
						    "(an END says %u; %u came)",
						    w->batch, w->end.nparts, done);
					B->end = w->end; /* for the trace */
					B->t_take = B->t_posted = B->t_data = 0;
					B->imm_inline = 0;
					publish_batch(s, at, w->batch, w->end.cookie, -EINVAL,
					              MV_CAUSE_BAD_DESC, why);
					n++;
				}
			}
			at->waits[k--] = at->waits[--at->nwaits];
		}
	}
	return n;
}

static void finish_part(struct mv_shard *s, struct mv_attach *at, uint32_t b)
{
	struct mv_part *p = &at->parts[b];
	struct mv_batch *B = &at->cl->batches[b];
	struct mv_desc end = p->end;
	int imm_sent = p->imm_sent;
	int64_t t_take = p->t_take, t_posted = p->t_posted;

	int64_t now = mv_now_ns();

	if (p->t_posted) {
		mv_hop(s, MV_HOP_POST, p->t_posted - p->t_take);
		mv_hop(s, MV_HOP_FABRIC, now - p->t_posted);
	}
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
	/* Read before our increment: the batch cannot be published (gen
	 * bumped) under this id before it, so an unchanged gen later means
	 * the batch is still in flight. */
	p->fin = 1;
	p->fin_gen = atomic_load_explicit(&B->gen, memory_order_relaxed);
	/* AR5: each part's results are released here and the last part's
	 * increment acquires all of them (the CAS winner wrote msg before). */
	uint32_t done = atomic_fetch_add_explicit(&B->parts_done, 1, memory_order_acq_rel) + 1;
	/* Only the part that makes the count exact publishes: not a part
	 * after the batch was failed for missing parts, nor one more than the
	 * END promised. */
	if (done != end.nparts) {
		if (done < end.nparts)
			part_wait(s, at, b, &end);
		return;
	}
	B->end = end; /* the finisher's own copy, for the trace */
	B->t_data = now;
	B->t_take = t_take;
	B->t_posted = t_posted;
	B->imm_inline = (uint8_t)imm_sent;

	int32_t status = atomic_load_explicit(&B->status, memory_order_relaxed);
	if (status == 0 && (end.flags & MV_END_IMM) && imm_sent) {
		struct mv_import *imp = mv_import_get(at->cl, end.dst);
		if (imp)
			atomic_store_explicit(&B->peer, imp->peer->mover_id, memory_order_relaxed);
	} else if (status == 0 && (end.flags & MV_END_IMM)) {
		struct mv_import *imp = mv_import_get(at->cl, end.dst);
		struct mv_wr *op = mv_op_get(s);
		if (!imp || !op || atomic_load(&imp->peer->gone)) {
			char why[MV_ERRLEN] = "immediate names an unknown import handle";
			if (op)
				mv_op_put(s, op);
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
		mv_op_own(s, at, op);
		mv_pend_push(s, op);
		return;
	}
	publish_batch(s, at, b, end.cookie, status, status ? B->cause : MV_CAUSE_NONE,
	              status ? B->msg : NULL);
}

void mv_check_part(struct mv_shard *s, struct mv_attach *at, uint32_t b)
{
	struct mv_part *p = &at->parts[b];

	if (p->ended && p->outstanding == 0)
		finish_part(s, at, b);
}

/* Accounts an op's outcome to its part or batch; the op itself stays. */
void mv_op_report(struct mv_shard *s, struct mv_wr *op, int err, const char *text)
{
	struct mv_attach *at = op->at;

	mv_inflight_end(op);
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
	mv_touch(s, at);
	if (op->kind == MV_OPK_IMM) {
		char msg[MV_ERRLEN];
		if (!err)
			mv_hop(s, MV_HOP_IMM, mv_now_ns() - at->cl->batches[op->batch].t_data);
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
		mv_fail_part(p, err, cause, 0, text);
	} else {
		p->bytes += op->bytes;
		s->st.path_bytes[op->path] += op->bytes;
	}
	mv_check_part(s, at, op->batch);
}

void mv_op_done(struct mv_shard *s, struct mv_wr *op, int err, const char *text)
{
	if (op->abandoned)
		s->abandoned--; /* reported at its deadline; at may be gone since */
	else
		mv_op_report(s, op, err, text);
	mv_op_put(s, op);
}

int mv_flush_all(struct mv_shard *s)
{
	int n = 0;

	for (uint32_t i = 0; i < s->natt; i++) {
		struct mv_attach *at = s->att[i];
		if (at->ovf_head != at->ovf_tail)
			n += flush_ovf(at);
		if (!at->dead && shmring_reserved(&at->comp)) {
			if (shmring_consumer_sleeps(&at->comp))
				s->woke_at = s->now; /* the commit wakes a client */
			shmring_commit(&at->comp);
			if (at->imm_at) {
				mv_hop(s, MV_HOP_DELIVER, mv_now_ns() - at->imm_at);
				at->imm_at = 0;
			}
		}
	}
	return n;
}
