/* SPDX-License-Identifier: MIT */
/*
 * Posting: the pending FIFO goes to the fabric in bursts, lazily (FI_MORE on
 * all but the last post of a burst; -FI_EAGAIN just ends the burst), and the
 * same-host peers written to are woken once a burst. Ops whose connection
 * broke wait on the retry list and are posted again while their deadline
 * allows.
 */
#include "shard_int.h"

#include <stdio.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

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

/* Adds a same-host peer to the burst's list of peers to wake at its end. */
static void wake_add(struct mv_shard *s, struct mv_peer **wake, uint32_t *nwake, struct mv_peer *p)
{
	uint32_t i = 0;

	if (!p->wake)
		return;
	while (i < *nwake && wake[i] != p)
		i++;
	if (i == *nwake && *nwake < 4)
		wake[(*nwake)++] = p;
	else if (i == *nwake)
		mv_wake_ring(s, p); /* a fifth peer in one burst */
}

/*
 * A full queue (-FI_EAGAIN) empties only as the provider makes progress: our
 * completions, or (shm) the receiver draining its command queue. Posting
 * again on every turn until then only spins a core that the receiver may
 * need: so after a refused burst the shard waits, 2 us and twice as long
 * after each refusal in a row up to 64 us, or until a completion arrives.
 */
#define HOLD_FIRST_NS 2000
#define HOLD_MAX_NS   64000

int mv_post(struct mv_shard *s)
{
	struct mv_peer *wake[4]; /* same-host peers written to: woken once, at the end */
	uint64_t burst = 0;
	uint32_t nwake = 0;
	int64_t t_post = 0; /* read once a burst, for the hops */
	int n = 0;

	if (s->post_hold && s->now < s->post_hold)
		return 0;
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
			} else if (op->with_imm) {
				flags |= FI_REMOTE_CQ_DATA;
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
				/* A sleeping shm receiver must drain its queue. */
				wake_add(s, wake, &nwake, op->peer);
				s->hold_ns = s->hold_ns ? s->hold_ns * 2 : HOLD_FIRST_NS;
				if (s->hold_ns > HOLD_MAX_NS)
					s->hold_ns = HOLD_MAX_NS;
				s->post_hold = s->now + s->hold_ns;
				break;
			}
		}
		s->pend_head = op->next;
		if (!s->pend_head)
			s->pend_tail = NULL;
		s->npend--;
		if (ret) {
			char text[MV_ERRLEN];
			if (mv_retry(s, op, (int)-ret))
				continue;
			if (atomic_load_explicit(&op->peer->gone, memory_order_relaxed))
				mv_peer_why(op->peer, text, sizeof(text));
			else
				snprintf(text, sizeof(text), "posting a write: %s",
				         fi_strerror((int)-ret));
			mv_op_done(s, op, ret == -FI_EHOSTUNREACH ? -EHOSTUNREACH : (int)ret, text);
			continue;
		}
		mv_posted_add(s, op);
		if (op->kind != MV_OPK_IMM)
			op->at->parts[op->batch].t_posted = t_post ? t_post : (t_post = mv_now_ns());
		s->hold_ns = 0;
		wake_add(s, wake, &nwake, op->peer);
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

/*
 * A connection that broke (the peer reset it, say because another client's
 * late write hit a region that was just freed) says nothing about this op:
 * rxm reconnects on a later post. So the op waits on the retry list, 10 ms
 * the first time and twice as long each next time, and is posted again,
 * for as long as its deadline allows.
 */
#define RETRY_FIRST_NS 10000000ll
#define RETRY_MAX      10

int mv_retry(struct mv_shard *s, struct mv_wr *op, int err)
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
	op->posted_at = s->now + wait; /* due then; mv_pend_push restamps it */
	mv_wr_append(&s->rq_head, &s->rq_tail, op);
	s->nretry++;
	s->st.retries++;
	return 1;
}

/* Ops whose retry is due go back to the front of the pending queue. */
int mv_retry_due(struct mv_shard *s)
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
