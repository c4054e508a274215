/* SPDX-License-Identifier: MIT */
/*
 * When a client's piece gives way to the other clients of a shared shard
 * (post.c's fair share): whether another client has a small write in
 * flight, waits with descriptors in its ring, may send one at any moment,
 * or is expected back soon (anticipation); and the runs of such holds,
 * which end with one piece posted whatever comes (mv_yield()). Each asks
 * only the shard's own state: the shard thread alone calls them.
 */
#include "shard_int.h"

#include <stdatomic.h>

/* Whether a client other than at has a small write in flight (`small`
 * bytes or less) since less than MV_SMALL_HOLD_NS. */
int mv_small_in_flight(const struct mv_shard *s, const struct mv_attach *at, uint64_t small)
{
	for (uint32_t i = 0; i < s->natt; i++) {
		struct mv_attach *o = s->att[i];
		if (o != at && o->inflight_ops && o->inflight <= small &&
		    s->now - o->inflight_since < MV_SMALL_HOLD_NS && mv_serving(o))
			return 1;
	}
	return 0;
}

/*
 * Whether another client waits on this burst: one with nothing queued that
 * has descriptors in its ring (MV_OTHERS_RING: the loop must take them), or
 * one whose few bytes in flight (half a piece or less: a small batch, not a
 * stream) may have completed already, which only the next read of the
 * completion queue tells (MV_OTHERS_REAP). Where a post copies before it
 * returns (shm), each post of a burst holds both off for the length of a
 * copy. A ring with descriptors is told first: the loop takes them before
 * it reads the completion queue (s->ring_cut, shard.c). The ring check is a
 * hint (relaxed; mv_consume() checks what it takes).
 */
int mv_others_wait(const struct mv_shard *s, const struct mv_attach *at, uint64_t piece)
{
	int why = MV_OTHERS_NONE;

	for (uint32_t i = 0; i < s->natt; i++) {
		struct mv_attach *o = s->att[i];
		if (o == at || !mv_serving(o))
			continue;
		/* Ops, not bytes: a batch's separate immediate (the same-host
		 * path's, after its copies) has none, and its completion is
		 * what the client waits for. */
		if (o->inflight_ops && o->inflight <= piece / 2)
			why = MV_OTHERS_REAP;
		if (o->npq || o->cur.active)
			continue;
		if (atomic_load_explicit(&o->sub.lay->prod.idx, memory_order_relaxed) !=
		    o->sub.local)
			return MV_OTHERS_RING;
	}
	return why;
}

/*
 * Whether a client active on the shard (a descriptor taken within
 * MV_FAIR_LINGER_NS) has nothing queued: its next descriptor may come at
 * any moment and, if it comes just after mv_others_wait() looked, waits for
 * the burst's end. Floods with ops queued stand in the round instead.
 */
int mv_one_may_come(const struct mv_shard *s)
{
	for (uint32_t i = 0; i < s->natt; i++) {
		const struct mv_attach *o = s->att[i];
		if (mv_serving(o) && !o->npq && !o->cur.active &&
		    s->now - o->last_take < MV_FAIR_LINGER_NS)
			return 1;
	}
	return 0;
}

/*
 * Anticipation. A client that sends one small batch at a time sends its
 * next one a moment after it reads the last one's completion: if a flood's
 * piece is posted in that moment, the next batch waits out the whole post
 * (tcp's send of a piece, shm's copy inside the post: 8-10 us on the H100,
 * most of the small batch's wait beside a flood). So, where posting a piece
 * takes long, a flood's piece waits a little for a client whose batch just
 * completed with nothing of it left queued or in flight: about as long as
 * that client took to come back before (twice that, and a microsecond),
 * never as long as a piece's post, and never more than a third of the
 * client's own cycle, so the waiting for one client costs the others a
 * third of the shard's time at most (the anticipatory disk scheduler's
 * idea, bounded; for several such clients the yield runs below bound it).
 * A quarter was too little on shm, where a piece's copy takes about 2 us
 * and a small batch's cycle 3-5: the client came back after the hold ran
 * out, into the piece's copy (ANTICIPATE_SHARE).
 * Only a client of the flood's weight or more is waited for: an operator
 * who weighs a bulk job above the others keeps its pieces from waiting.
 * Holds are yields (mv_yield()): a run of them ends with one piece posted
 * whatever comes.
 */
#define ANTICIPATE_MIN_NS 2000 /* posts quicker than this hold nobody long */
#define ANTICIPATE_PAD_NS 1000 /* past twice the client's usual return */
#define ANTICIPATE_SHARE  3    /* a client is waited for a 1/3 of its cycle at most */

/* Whether a client other than at is expected back before at's next piece
 * could be posted and done with. */
int mv_anticipated(const struct mv_shard *s, const struct mv_attach *at)
{
	int64_t post = s->piece_ns;

	if (post < ANTICIPATE_MIN_NS)
		return 0;
	for (uint32_t i = 0; i < s->natt; i++) {
		const struct mv_attach *o = s->att[i];
		if (o == at || !o->done_at || !o->react_ns || o->weight < at->weight || o->npq ||
		    o->cur.active || o->inflight_ops || !mv_serving(o))
			continue;
		int64_t wait = 2 * o->react_ns + ANTICIPATE_PAD_NS;
		if (wait > o->cycle_ns / ANTICIPATE_SHARE)
			wait = o->cycle_ns / ANTICIPATE_SHARE;
		if (wait < post && s->now - o->done_at < wait)
			return 1;
	}
	return 0;
}

/*
 * Whether a client that would give way to others now (a piece held, a
 * burst ended early) does: yes for MV_SMALL_HOLD_NS from the first of a run
 * of such turns, then no once, which ends the run. A run whose latest
 * turn is over YIELD_STALE_NS old ended unseen (the client's queue ran
 * dry, say): the next turn starts a new one, as does a turn that did not
 * mv_yield (the caller zeroes since and out).
 *
 * A run that follows one that ran out, with no unheld turn between, lasts
 * short_ns (mv_hold_run()): a client held without a break for smaller pieces
 * than configured then still moves a configured piece's bytes every
 * MV_SMALL_HOLD_NS, where a client held now and then (its pieces go in the
 * others' gaps) keeps the whole run. On the H100 (fairness row, tcp, the
 * small client back to back) the flood went from one 8 KiB piece per 50 us
 * (a 64 MiB batch in 0.4 s) to 2.3-2.7 Gbit/s; shortening every run instead
 * also put a piece ahead of shm's small writes four times as often (loaded
 * p99 21-25 us against 8-21, the flood no faster: it posts in the gaps).
 */
#define YIELD_STALE_NS 1000000

int mv_yield(const struct mv_shard *s, struct mv_yields *y, int64_t short_ns)
{
	if (!y->since || s->now - y->last > YIELD_STALE_NS) {
		if (y->since && s->now - y->last > YIELD_STALE_NS)
			y->out = 0;
		y->since = s->now;
	}
	y->last = s->now;
	if (s->now - y->since < (y->out ? short_ns : MV_SMALL_HOLD_NS))
		return 1;
	y->since = 0;
	y->out = s->now;
	return 0;
}
