/* SPDX-License-Identifier: MIT */
/*
 * Retries: an op whose connection broke waits on the shard's retry list and
 * goes back to the front of its client's queue when due, while its deadline
 * allows (counted from when it could first go, mv_pend_went(), or from its
 * connection's last completion since, as mv_expire() counts). Shard
 * thread.
 */
#include "shard_int.h"

#include <errno.h>

#include <rdma/fi_errno.h>

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

	/* Its budget counts from when it could go, or from the last write its
	 * connection completed since: a reset on a slow link, whose queue
	 * takes longer than op_timeout to drain, retries what it flushed. */
	int64_t from = mv_conn_since(s, op, op->born);

	if (op->abandoned || op->at->detaching || op->retries >= RETRY_MAX ||
	    s->now + wait - from > limit)
		return 0;
	/* rxm flushes the ops of a dropped connection as FI_ECANCELED. */
	if (err != FI_ENOTCONN && err != EPIPE && err != FI_ECONNRESET && err != FI_ECONNABORTED &&
	    err != FI_ECONNREFUSED && err != FI_ECANCELED)
		return 0;
	op->retries++;
	/* A landing message out of its peer's window until it is sent again
	 * (the post counts it again). */
	if (op->land_counted) {
		s->land_to[op->pix]--;
		op->land_counted = 0;
	}
	op->posted_at = s->now + wait; /* due then; mv_pend_push restamps it */
	mv_wr_append(&s->rq_head, &s->rq_tail, op);
	s->nretry++;
	s->st.retries++;
	return 1;
}

/* Ops whose retry is due go back to the front of their client's queue. */
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
		mv_pend_push_front(s, op);
		n++;
	}
	s->rq_tail = tail;
	return n;
}
