/* SPDX-License-Identifier: MIT */
/*
 * Completions: the shard reads its CQ in batches. An entry ends an op (or,
 * for a landing message, its send), delivers a peer's immediate to the
 * client that owns the region, brings a landing message's ack, or hands a
 * landing buffer the message it received. Deadlines end the ops that the
 * provider does not complete in time or whose peer exited.
 */
#include "shard_int.h"

#include <stdio.h>

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define CQ_BATCH 64

static void deliver_imm(struct mv_shard *s, uint64_t data)
{
	struct mv_region *r = mv_region_get(s->mv, (uint32_t)(data >> 32));
	struct mv_cqe c = {.type = MV_CQE_IMM, .imm = (uint32_t)data};
	int64_t now = mv_now_ns();

	s->st.imm_rx++;
	if (!r) {
		/* The region went away, or never was: an immediate carries no
		 * sender (remote CQ data is region and value only), so there is
		 * nobody to blame for it either. Counted and logged. */
		s->imm_unknown++;
		mv_log_client(MV_LOG_WARN, MV_WHO_SHARD | (uint64_t)s->id,
		              "shard %d: immediate %u for region %u, which is not ours (%llu so "
		              "far); dropped",
		              s->id, (uint32_t)data, (uint32_t)(data >> 32),
		              (unsigned long long)s->imm_unknown);
		return;
	}
	struct mv_client *cl = s->mv->clients[r->owner % MV_MAX_CLIENTS];
	if (!cl || cl->id != r->owner || !cl->att[s->id])
		return;
	c.region = r->id;
	c.shard = (uint32_t)s->id;
	c.bytes = (uint64_t)now; /* for the client's own hop: mvc_latency() */
	if (!cl->att[s->id]->imm_at)
		cl->att[s->id]->imm_at = now;
	mv_push_cqe(cl->att[s->id], &c);
}
/* Why a landing message failed, naming the region (thread-local text). */
static const char *land_failed(const struct mv_wr *op)
{
	static _Thread_local char msg[MV_ERRLEN];

	snprintf(msg, sizeof(msg),
	         "the target mover could not put the data in its GPU region %u (freed by its "
	         "owner, or a CUDA copy failed: its log says which)",
	         op->dst_region);
	return msg;
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
	mv_peer_took(s, op);
	if (--op->acks > 0)
		return;
	mv_posted_del(s, op);
	s->st.completed++;
	mv_op_done(s, op, op->land_err ? -EIO : 0, op->land_err ? land_failed(op) : NULL);
}

/* Reads one of the shard's CQs dry; returns the entries and errors read
 * but heartbeats (ours completing, peers' arriving): those are no work to
 * the idle policy, or a mover with peers would never reach its long sleeps
 * (shard.c). */
static int reap_cq(struct mv_shard *s, struct fid_cq *cq)
{
	struct fi_cq_data_entry ent[CQ_BATCH];
	int total = 0;

	for (;;) {
		ssize_t n = fi_cq_read(cq, ent, CQ_BATCH);
		if (n == -FI_EAGAIN || n == 0)
			break;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry e = {0};
			char buf[128], text[MV_ERRLEN];

			if (fi_cq_readerr(cq, &e, 0) != 1)
				break;
			s->st.cq_errors++;
			const char *pe =
			    fi_cq_strerror(cq, e.prov_errno, e.err_data, buf, sizeof(buf));
			if (mv_hb_event(s, e.op_context, e.err ? e.err : FI_EIO))
				continue;
			if (!e.op_context || (e.flags & FI_REMOTE_WRITE)) {
				mv_log_client(MV_LOG_WARN, MV_WHO_SHARD | (uint64_t)s->id,
				              "shard %d: remote write error: %s", s->id,
				              pe ? pe : "?");
				continue;
			}
			struct mv_land_buf *elb = mv_land_of(s, e.op_context);
			if (elb) {
				mv_log_client(MV_LOG_WARN, MV_WHO_SHARD | (uint64_t)s->id,
				              "shard %d: landing buffer: %s", s->id,
				              pe ? pe : fi_strerror(e.err));
				mv_land_event(s, elb, e.op_context, 0, -(int)e.err);
				continue;
			}
			struct mv_wr *op = (struct mv_wr *)e.op_context;
			snprintf(text, sizeof(text), "%s: %s", fi_strerror(e.err), pe ? pe : "");
			mv_posted_del(s, op);
			if (mv_retry(s, op, e.err)) {
				total++;
				continue;
			}
			mv_op_done(s, op, e.err == FI_EHOSTUNREACH ? -EHOSTUNREACH : -(int)e.err,
			           text);
			total++;
			continue;
		}
		if (n < 0) {
			mv_error("shard %d: fi_cq_read: %s", s->id, fi_strerror((int)-n));
			break;
		}
		int hb = 0;
		for (ssize_t i = 0; i < n; i++) {
			if (ent[i].flags & FI_REMOTE_CQ_DATA) {
				if (ent[i].data & MV_ACK) {
					ack_arrived(s, ent[i].data);
				} else if (ent[i].data & MV_HB) {
					s->hb_rx++; /* a peer's heartbeat (heartbeat.c) */
					hb++;
				} else {
					deliver_imm(s, ent[i].data);
				}
				continue;
			}
			if (mv_hb_event(s, ent[i].op_context, 0)) {
				hb++;
				continue;
			}
			struct mv_land_buf *lb = mv_land_of(s, ent[i].op_context);
			if (lb) {
				mv_land_event(s, lb, ent[i].op_context, ent[i].len, 0);
				continue;
			}
			struct mv_wr *op = (struct mv_wr *)ent[i].op_context;
			mv_peer_took(s, op); /* its connection moves: mv_expire() */
			if (op->kind == MV_OPK_LAND && --op->acks > 0)
				continue; /* sent; landed once the ack comes */
			if (op->kind == MV_OPK_LAND && op->land_err) {
				mv_posted_del(s, op);
				mv_op_done(s, op, -EIO, land_failed(op));
				continue;
			}
			mv_posted_del(s, op);
			s->st.completed++;
			s->st.bytes += op->bytes;
			mv_op_done(s, op, 0, NULL);
		}
		total += (int)n - hb;
		s->post_hold = 0; /* room again: post.c may try at once */
		if (n < CQ_BATCH)
			break;
	}
	return total;
}

/* The shard's CQ, and the small-write endpoint's (fabric.c) while ops are
 * posted on it: reading a CQ is what progresses its endpoint, and an idle
 * one costs a poll of its sockets per read. */
int mv_reap(struct mv_shard *s)
{
	int n = reap_cq(s, s->fab.cq);

	if (s->posted_small)
		n += reap_cq(s, s->fab.cq_small);
	return n;
}

/* Fails each of at's queued ops to peer p with text; how many. */
static int expire_to(struct mv_shard *s, struct mv_attach *at, struct mv_peer *p, const char *text)
{
	uint32_t n;

	for (struct mv_wr *op = mv_wr_take(&at->pq_head, &at->pq_tail, NULL, p, &n), *next; op;
	     op = next) {
		next = op->next;
		at->npq--;
		s->npend--;
		mv_op_report(s, op, -ETIMEDOUT, text);
		mv_op_put(s, op);
	}
	mv_pend_runs_fix(at);
	if (!at->pq_head)
		mv_round_leave(s, at);
	return (int)n;
}

/* The op of at's queue whose deadline counts: its head, or where ops were
 * promoted past the head (queue.c), which go now, the head they passed. */
static struct mv_wr *waiter(const struct mv_attach *at)
{
	struct mv_wr *h = at->pq_head;

	while (h && h->promoted)
		h = h->next;
	return h;
}

/*
 * Writes the provider has not completed within the deadline (a peer that
 * died before its connection was made never answers on tcp;ofi_rxm) fail
 * their batches now. libfabric cannot cancel a posted write, so the op
 * stays parked, owned by the provider, until it completes or the shard
 * closes its endpoint; only then is it reused.
 */
int mv_expire(struct mv_shard *s)
{
	int64_t now = s->now, limit = s->mv->cfg.op_timeout_ms * 1000000ll;
	int n = 0;

	/* A1 pairs with R1 in mv_peer_exited(). */
	uint32_t deaths = atomic_load_explicit(&s->mv->peer_deaths, memory_order_acquire);
	if (deaths != s->seen_deaths) {
		/* An exited, cut-off or departed peer completes nothing more: its
		 * posted writes fail now, not at their deadline (still parked:
		 * the provider owns them). Pending ones fail when mv_post()
		 * reaches them. */
		s->seen_deaths = deaths;
		for (struct mv_wr *op = s->posted_head; op; op = op->pnext) {
			char text[MV_ERRLEN];
			if (op->abandoned ||
			    atomic_load_explicit(&op->peer->gone, memory_order_relaxed) <
			        MV_PEER_EXITED) /* EXITED, CUT or DEPARTED */
				continue;
			mv_peer_why(op->peer, text, sizeof(text));
			mv_op_report(s, op, -EHOSTUNREACH, text);
			op->abandoned = 1;
			s->abandoned++;
			n++;
		}
	}
	if (now < s->next_expire)
		return n;
	s->next_expire = now + 50000000ll;
	n += mv_expire_waits(s);
	if (s->npk || s->nsq)
		n += mv_gpu_expire(s, limit);
	/* Never posted: at the head of their client's queue for op_timeout,
	 * their peer completing none of the shard's writes meanwhile (a head
	 * may wait for room behind a slow link's writes in flight, or while
	 * its client's writes to other peers go first: post.c), the provider
	 * answering EAGAIN (rxm does while it cannot connect;
	 * mv_pend_went() starts the count). These are ours alone and end here,
	 * with the client's other queued writes to that peer: they could not
	 * go either, and each would otherwise wait its own op_timeout at the
	 * head, holding the writes to other peers behind it. */
	for (struct mv_attach *at = s->round_head, *next; at; at = next) {
		next = at->round_next; /* at leaves the round when its queue empties */
		struct mv_wr *h = waiter(at);
		if (h && now - h->posted_at > limit && now - mv_peer_took_at(s, h->peer) > limit) {
			struct mv_peer *p = h->peer;
			char text[MV_ERRLEN];
			mv_took_none(s, p, text, sizeof(text));
			n += expire_to(s, at, p, text);
			mv_pend_wait_from(s, waiter(at)); /* the next waited on those */
		}
	}
	/* Posted: failed once its connection to the peer (this shard's ep or
	 * ep_small) completed none of the shard's writes for op_timeout since
	 * the op went. A slow link (or many senders into one peer) takes
	 * longer than that to drain what is in flight, and a connection (tcp,
	 * verbs) completes its writes in order, so one still behind
	 * completions is waiting its turn, not lost. shm completes writes at
	 * the sender: to a stopped peer until its queue is full, then no
	 * more. */
	for (struct mv_wr *op = s->posted_head; op && now - op->posted_at > limit; op = op->pnext) {
		char text[MV_ERRLEN];
		if (op->abandoned || now - mv_conn_since(s, op, op->posted_at) <= limit)
			continue;
		snprintf(text, sizeof(text),
		         "no completion from peer mover %016llx in %d ms: unreachable or gone",
		         (unsigned long long)op->peer->mover_id, s->mv->cfg.op_timeout_ms);
		mv_op_report(s, op, -ETIMEDOUT, text);
		op->abandoned = 1;
		s->abandoned++;
		n++;
	}
	return n;
}
