/* SPDX-License-Identifier: MIT */
/*
 * A client's queue of ops for the fabric, when its head cannot go: its
 * writes to one peer wait on that peer, not its writes to other peers.
 * The queue is FIFO, and a head op that could not go for its peer's sake
 * (post.c's peer_full(), or the provider refusing it: rxm while it
 * connects, a peer that never answers) held every write behind it, to live
 * peers too, until it failed at op_timeout. So the first run of ops (in a
 * row to one peer: shard_int.h) within PROMOTE_RUNS behind the head whose
 * peer has not refused this turn comes to the head and goes first
 * ("promoted"); the head keeps its place and its deadline. The first ops
 * of their peer in the queue, they overtake no write to that peer, so each
 * peer still gets a client's writes in their order; promoted ops that
 * cannot go either go back behind the head. Shard thread only.
 */
#include "shard_int.h"

#define PROMOTE_RUNS 64 /* runs a head looks past, at most */

int mv_refused_has(const struct mv_refused *r, const struct mv_attach *at, const struct mv_peer *p)
{
	for (uint32_t i = 0; i < r->n; i++)
		if (r->e[i].at == at && r->e[i].peer == p)
			return 1;
	return 0;
}

/* Puts the promoted ops at at's head (a run, or its piece and the rest)
 * back behind the op they went ahead of, which has a run of its own then;
 * returns 0 where no op of another peer follows them (they are just
 * queued then: none may go behind a write to its own peer). */
static int demote(struct mv_attach *at)
{
	struct mv_wr *first = at->pq_head, *last = first, *h, *after;

	while (last->next && last->next->promoted && last->next->peer == first->peer)
		last = last->next;
	h = last->next; /* the head they went ahead of */
	if (!h || h->peer == first->peer) {
		for (struct mv_wr *op = first; op != h; op = op->next)
			op->promoted = 0;
		return 0;
	}
	after = h->next;
	if (h->run_last != h) { /* h's run goes on after them */
		after->run_last = h->run_last;
		if (at->run_tail == h)
			at->run_tail = after;
	}
	for (struct mv_wr *op = first; op != h; op = op->next)
		op->promoted = 0;
	first->run_last = last;
	h->run_last = h;
	at->pq_head = h;
	h->next = first;
	last->next = after;
	if (at->pq_tail == h) {
		at->pq_tail = last;
		at->run_tail = first;
	}
	return 1;
}

int mv_promote(struct mv_shard *s, struct mv_attach *at, struct mv_refused *r)
{
	struct mv_wr *head = at->pq_head, *prev = NULL, *f, *pfirst = NULL;
	uint32_t k = 0;

	if (!mv_refused_has(r, at, head->peer)) {
		if (r->n == MV_REFUSED)
			return 0; /* enough passing for one burst */
		r->e[r->n].at = at;
		r->e[r->n++].peer = head->peer;
	}
	if (head->promoted && demote(at))
		return 1;
	for (f = head; f && k < PROMOTE_RUNS; pfirst = f, prev = f->run_last, f = prev->next, k++) {
		if (mv_refused_has(r, at, f->peer))
			continue;
		struct mv_wr *last = f->run_last;
		prev->next = last->next;
		if (at->pq_tail == last) {
			at->pq_tail = prev;
			at->run_tail = pfirst;
		}
		for (struct mv_wr *op = f; op != last->next; op = op->next)
			op->promoted = 1;
		last->next = head;
		at->pq_head = f;
		mv_pend_wait_from(s, f); /* could go since, unless it waited already */
		s->st.promoted++;
		return 1;
	}
	return 0;
}
