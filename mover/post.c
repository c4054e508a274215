/* SPDX-License-Identifier: MIT */
/*
 * Posting: the clients' queues of ops go to the fabric in bursts, lazily
 * (FI_MORE on all but the last post of a burst; -FI_EAGAIN just ends the
 * burst), in fair shares when the shard serves more than one client (see
 * "Fair share" below), and the same-host peers written to are woken once a
 * burst; a refused post (-FI_EAGAIN) passes the turn to the next client.
 * Ops whose connection broke go to the retry list (retry.c).
 */
#include "shard_int.h"

#include <stdio.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

/* The landing window: messages a shard keeps in flight at most. The target
 * posts MV_LAND_BUFS receive buffers a shard; a message beyond them arrives
 * unexpected, which rxm 1.17 cancels: keep within half until acks come. */
#define LAND_WINDOW (MV_LAND_BUFS / 2)
static_assert(LAND_WINDOW <= UINT8_MAX && MV_MAX_PEERS <= UINT16_MAX + 1u,
              "mv_shard.land_to, mv_wr.pix");

/*
 * Fair share. A shard serves every client attached to it, and one that
 * floods it must not make another wait behind the flood. Each client has
 * its own queue of ops, and the clients with queued ops stand in a round.
 * While one client is active on the shard, the shard posts its queue as it
 * always did: bursts of up to MV_BURST_BYTES, with ALONE_INFLIGHT bytes in
 * flight at most, or QUIET_INFLIGHT while other clients are attached (a
 * client that comes back waits behind that much, until the shard is shared
 * again). Once two or more are active (ops queued or in flight, or a
 * descriptor taken within MV_FAIR_LINGER_NS; mv_consume() counts them),
 * the shard is shared, and it
 *  - serves the round by deficit round robin on bytes: each turn gives a
 *    client a piece * weight / MV_SHARE_FULL bytes more credit, and it
 *    posts from the head of its queue while its credit covers the op;
 *  - cuts a write longer than a piece (FAIR_PIECE), at the head of its
 *    queue, into a piece and the rest: where a post copies before it
 *    returns (shm's one-segment writes), a 4 MiB post holds the shard for
 *    hundreds of microseconds, and where the fabric is a byte stream to the
 *    peer (tcp), whatever went before a small write delays it;
 *  - keeps each client within its weighted share of FAIR_INFLIGHT bytes in
 *    flight (one op may always go; a peer holding more than half of it
 *    counts for the client's writes to other peers only up to that half:
 *    over_cap()), so that on a stream a small write waits behind that much
 *    of a flood at most, and floods share by weight there too;
 *  - while another client's small write (half a piece or less in flight)
 *    waits for its completion, posts no op larger than half a piece, for
 *    MV_SMALL_HOLD_NS at most: the small write's completion is read by the
 *    loop, not after the post of the flood's next piece (shm copies inside
 *    the post; tcp's send of a 32 KiB piece takes 8-16 us on the H100),
 *    and the peer's shard is not busy taking that piece in when the small
 *    write comes. On tcp, with small writes on their own connection
 *    (ep_small), the hold halved the small write's time on the fabric at
 *    p99 (60-64 -> 31-32 us; fairness ratio 1.85-2.11 -> 1.39-1.57, the
 *    flood beside a client of back-to-back small batches 7-10 -> 4 Gbit/s;
 *    2026-11-27, five interleaved pairs);
 *  - where posting a piece takes long (tcp's send, shm's copy), holds a
 *    flood's next piece briefly for a client whose small batch just
 *    completed and that usually sends its next one at once (mv_anticipated()
 *    below);
 *  - ends a burst after FAIR_BURST bytes, or at once when another client
 *    waits on it (mv_others_wait()): the loop takes its descriptors, or reads
 *    its small write's completion, without waiting out the burst.
 * Neither the hold nor the early end lasts: a client held (or cut short)
 * for MV_SMALL_HOLD_NS in a row posts one piece (one piece more in its burst)
 * whatever the others do, then may be held again (mv_yield()); where
 * mv_fair_piece() cuts pieces smaller than configured, the runs after the
 * first of a client held without a break shorten with them, so that it moves
 * a configured piece's bytes every MV_SMALL_HOLD_NS. Else a client
 * that sends small writes back to back, or keeps descriptors in its ring
 * that are never taken, would hold a flood to a piece a loop turn or none.
 *
 * Where the shard has a small-write endpoint (fabric.c: tcp), while it is
 * shared immediates and writes of half a piece or less go on it, landing
 * messages and larger writes on the shard's endpoint: on a connection of
 * their own to the peer, the small ones no longer queue in the sender's
 * socket behind a flood's bytes in flight.
 * A batch's immediate still follows its data: it goes after the data's
 * delivery-complete, whichever endpoints carried it, or rides on the
 * batch's one write.
 * Order within a client is kept: its queue is FIFO, and a piece goes before
 * the rest of its write. Clients' ops interleave, which no client can see:
 * each batch's immediate follows its own data's completions, or rides on
 * its one write (a write that is cut sends its immediate apart instead).
 */
#define FAIR_PIECE      (32u << 10)  /* bytes a post carries at most while shared */
#define FAIR_PIECE_MIN  (8u << 10)   /* ... and at least, where posts are slow (mv_fair_piece()) */
#define FAIR_POST_NS    2000         /* the post of a piece, where the provider's posts copy */
#define FAIR_BURST      (256u << 10) /* bytes one burst carries at most while shared */
#define FAIR_BURST_NS   4000         /* and nanoseconds (see mv_post()) */
#define FAIR_INFLIGHT   (256u << 10) /* bytes in flight, all clients, while shared */
#define STREAM_INFLIGHT (64u << 10)  /* ... where each peer is a byte stream (tcp) */
#define ALONE_INFLIGHT  (32u << 20)  /* bytes in flight of the one client attached */
#define QUIET_INFLIGHT  (8u << 20)   /* of the one active client beside idle ones */

/* The piece the configuration gives: mv_config's, else FAIR_PIECE. */
static uint64_t piece_cfg(const struct mv_shard *s)
{
	uint64_t p = s->mv->cfg.fair_piece > 0 ? (uint64_t)s->mv->cfg.fair_piece : FAIR_PIECE;

	return p < 4096 ? 4096 : p > MV_CHUNK ? MV_CHUNK : p;
}

/*
 * The piece: a weight-1 client's credit per turn, so such a client posts one
 * piece a turn, and the most one post carries while the shard is shared.
 * Where the provider's post copies before it returns (shm's cross-memory
 * attach, tcp's send into its socket), a client whose batch comes during a
 * post waits it out: so the default piece shrinks to what the shard has seen
 * a post carry in FAIR_POST_NS, FAIR_PIECE_MIN at least, in 4 KiB steps. A
 * piece the operator set (fair_piece) is what posts carry. On the H100 a
 * 32 KiB piece's post took 4-16 us on shm (process_vm_writev) and 8-16 us on
 * tcp, an RDMA NIC's well under a microsecond (the piece then stays whole).
 * The fairness row (1 shard, two interleaved rounds, 2026-11-27) with 8 KiB
 * pieces and one piece a burst while a client may come: shm 2.71 / 3.01 ->
 * 1.90 / 1.67 (loaded p99 14-16 -> 8-9 us, the flood beside it 9-15 -> 9
 * Gbit/s), tcp 1.39 / 1.48 -> 1.13 / 1.28 (the flood 4.0-4.4 -> 2.7-3.3
 * Gbit/s); the rule as built, in the README ("Fair share between clients").
 */
uint64_t mv_fair_piece(const struct mv_shard *s)
{
	uint64_t p = piece_cfg(s);

	if (s->kib_ns > 0 && p > FAIR_PIECE_MIN && s->mv->cfg.fair_piece <= 0) {
		uint64_t fit = ((uint64_t)FAIR_POST_NS * 1024 / (uint64_t)s->kib_ns) & ~4095ull;
		if (fit < p)
			p = fit < FAIR_PIECE_MIN ? FAIR_PIECE_MIN : fit;
	}
	return p;
}

static uint64_t quantum(uint64_t piece, const struct mv_attach *at)
{
	return piece * at->weight / MV_SHARE_FULL;
}

/* A turn that posted nothing (a full share, a hold, a refusal) leaves at
 * one quantum of credit at most: credit does not pile up while it waits. */
static void credit_cap(struct mv_attach *at, uint64_t piece)
{
	if (at->deficit > (int64_t)quantum(piece, at))
		at->deficit = (int64_t)quantum(piece, at);
}

/* Bytes at may have in flight before its next op must wait. */
static uint64_t inflight_cap(const struct mv_shard *s, const struct mv_attach *at)
{
	/* On a stream a small write waits at its target behind the bytes in
	 * flight to it: the target reads the flood's socket dry first. On the
	 * H100 (tcp on loopback, fairness row, ten interleaved pairs) 64 KiB
	 * against 256 KiB gave the small batch a lower loaded p99 in nine of
	 * ten (medians 59 against 70 us; its fabric hop p99 33 against 52 in
	 * the six that read it), the flood beside it 2.07 against 2.12 Gbit/s,
	 * and two floods together 8.3 against 7.4: the pieces' posts bound them.
	 * Where a round trip is longer than 64 KiB takes at their rate (about
	 * 65 us at 8 Gbit/s), the cap binds first: fair_inflight raises it. */
	uint64_t all = s->mv->cfg.fair_inflight > 0 ? (uint64_t)s->mv->cfg.fair_inflight
	               : s->fab.byte_stream         ? STREAM_INFLIGHT
	                                            : FAIR_INFLIGHT;

	/* Alone: a stream's worth, and less where a client that is attached
	 * may come back (whatever is in flight then, it waits behind). */
	if (s->nactive < 2)
		return s->natt > 1 ? QUIET_INFLIGHT : ALONE_INFLIGHT;
	if (s->wsum < at->weight) /* it came after the count: a share beside them */
		return all * at->weight / (s->wsum + at->weight);
	return all * at->weight / s->wsum;
}

/* A run of yields after one that ran out (mv_yield()): MV_SMALL_HOLD_NS at the
 * configured piece, shorter in step with a piece mv_fair_piece() cut. */
static int64_t hold_run(const struct mv_shard *s, uint64_t piece)
{
	return (int64_t)(MV_SMALL_HOLD_NS * piece / piece_cfg(s));
}

/* The endpoint op goes on: while the shard is shared, small writes and
 * immediates on the small-write endpoint where the shard has one (see
 * "Fair share"); landing messages, whose acks come back to the address
 * they carry, and everything of a client alone, on the shard's own. Alone,
 * a stream of small writes on the second endpoint cost the shard a second
 * CQ read (a second poll of the provider's sockets) a turn: 4 KiB writes
 * of one client lost 19% of their rate on the 2-core machine. */
static struct fid_ep *ep_of(const struct mv_shard *s, const struct mv_wr *op, uint64_t piece)
{
	if (s->fab.ep_small && s->nactive > 1 && op->kind != MV_OPK_LAND && op->bytes <= piece / 2)
		return s->fab.ep_small;
	return s->fab.ep;
}

/*
 * Cuts the first `piece` bytes of op, the head of at's queue, into an op
 * of their own, queued before it, and returns that piece; or op itself when
 * it cannot be cut (not a plain write, a bounce chunk's, or no op to spare).
 */
static struct mv_wr *cut_piece(struct mv_shard *s, struct mv_attach *at, struct mv_wr *op,
                               uint64_t piece)
{
	struct mv_part *p = &at->parts[op->batch];
	uint64_t left = piece;
	struct mv_wr *pc;

	if (op->kind != MV_OPK_WRITE || op->chunk >= 0 || op->bytes <= piece ||
	    s->nfree <= MV_IOV_MAX)
		return op;
	pc = mv_op_get(s);
	pc->kind = MV_OPK_WRITE;
	pc->path = op->path;
	pc->at = at;
	pc->batch = op->batch;
	pc->peer = op->peer;
	pc->hr = op->hr;
	/* Each iov's local and remote sides have the same length (take.c). */
	while (left) {
		uint64_t n = op->iov[0].iov_len < left ? op->iov[0].iov_len : left;
		pc->iov[pc->niov] = (struct iovec){op->iov[0].iov_base, n};
		pc->desc[pc->niov] = op->desc[0];
		pc->riov[pc->niov] = op->riov[0];
		pc->riov[pc->niov].len = n;
		pc->niov++;
		left -= n;
		mv_wr_advance(op, n);
	}
	pc->bytes = piece;
	op->bytes -= piece;
	/* The immediate rode on the whole write. Its data is two writes now,
	 * which the provider need not deliver in order (shm): it goes apart,
	 * once both completed, as any larger batch's does. */
	if (op->with_imm) {
		op->with_imm = 0;
		p->imm_sent = 0;
	}
	p->outstanding++;
	mv_op_own(s, at, pc);
	/* The piece could go since the write could (its retries' budget);
	 * the rest's deadline counts again once it went (mv_pend_went). */
	pc->born = op->born;
	pc->promoted = op->promoted;
	pc->waiting = op->waiting;
	op->waiting = 0; /* behind its piece: its wait starts again once the piece went */
	pc->run_last = op->run_last; /* the first of op's run now */
	if (at->run_tail == op)
		at->run_tail = pc;
	pc->next = op;
	at->pq_head = pc;
	at->npq++;
	s->npend++;
	pc->posted_at = op->posted_at;
	return pc;
}

/* What a same-host copy asks between its steps while the shard is shared:
 * whether another client waits (mv_others_wait()). */
struct copy_stop {
	const struct mv_shard *s;
	const struct mv_attach *at;
	uint64_t piece;
	int why; /* mv_others_wait()'s answer when it stopped the copy */
};

static int copy_stop(void *arg)
{
	struct copy_stop *c = arg;

	c->why = mv_others_wait(c->s, c->at, c->piece);
	return c->why != MV_OTHERS_NONE;
}

/*
 * A same-host copy (samehost.c) at the head of at's queue: done here, on
 * the shard's thread, in place of a post, and ended once all of it is
 * copied. Its size is the burst's and the round's like a post's: an op of
 * MV_CHUNK at most, a piece while shared, so a long copy never holds the
 * shard from its other clients for more than a burst. With piece (the
 * shard shared, whatever the yields say) the copy goes in COPY_STEP steps
 * and stops at the first step after which another client waits, the rest
 * of the op staying at the head of at's queue: a small batch that comes
 * while a flood's piece is being copied waits a step, not the piece (32 KiB
 * of a 64 MiB write from memory: 3-4 us on the H100, most of the small
 * batch's wait in its ring there), and the flood still moves a step a
 * turn. Returns the bytes copied; *stopped says whether it stopped so
 * (mv_others_wait()'s answer, or MV_OTHERS_NONE).
 */
#define COPY_STEP 4096u

static uint64_t copy_op(struct mv_shard *s, struct mv_attach *at, struct mv_wr *op, int64_t cost,
                        uint64_t piece, int *stopped)
{
	struct copy_stop cs = {s, at, piece, MV_OTHERS_NONE};
	char why[MV_ERRLEN];
	int64_t n;

	if (atomic_load_explicit(&op->peer->gone, memory_order_relaxed)) {
		mv_peer_why(op->peer, why, sizeof(why));
		n = -EHOSTUNREACH;
	} else {
		n = mv_host_copy(s, op, piece ? COPY_STEP : 0, piece ? copy_stop : NULL, &cs, why,
		                 sizeof(why));
	}
	if (n >= 0 && op->bytes) {
		/* Stopped for another client: charged what it copied. */
		*stopped = cs.why;
		s->st.copy_stops++;
		op->posted_at = s->now; /* it moved: its deadline counts from here */
		at->deficit -= n;
		at->posted_bytes += (uint64_t)n;
		s->st.bytes += (uint64_t)n;
		return (uint64_t)n;
	}
	at->deficit -= n >= 0 ? n : cost;
	mv_pend_went(s, at);
	op->bytes += op->copied; /* the whole write, for its batch */
	if (n >= 0) {
		at->posted_bytes += (uint64_t)n;
		at->parts[op->batch].t_posted = mv_now_ns();
		s->st.posted++;
		s->st.completed++;
		s->st.bytes += (uint64_t)n;
	}
	uint64_t bytes = n >= 0 ? (uint64_t)n : op->bytes;
	/* Its part may queue the immediate. */
	mv_op_done(s, op, n < 0 ? (int)n : 0, n < 0 ? why : NULL);
	return bytes;
}

/* The round's head client had its turn: the next one's begins. */
static void round_next(struct mv_shard *s)
{
	struct mv_attach *at = s->round_head;

	at->turn = 0;
	if (!at->round_next)
		return;
	s->round_head = at->round_next;
	at->round_next = NULL;
	s->round_tail->round_next = at;
	s->round_tail = at;
}

/*
 * Whether a write to op's peer leaves room in the provider's queue for the
 * writes to other peers, with mine and others more posted to op's peer
 * and to the rest. A write holds its place in that queue until its peer
 * takes it, and libfabric cannot take it back: on tcp a peer whose process
 * stopped (its kernel still acks) takes nothing for as long, and its
 * writes filled the queue that every client of the shard posts into (a
 * second client's writes to a live peer then failed as that peer's
 * "took no write"). So the writes to one peer hold at most half of what
 * those to every other peer leave free; a client alone too, since one
 * that came later found the queue full.
 */
static int room_for(const struct mv_shard *s, const struct mv_wr *op, uint32_t mine,
                    uint32_t others)
{
	uint64_t to = s->posted_to[op->peer->index], rest = s->posted - to;

	return mv_within_share(to + mine, rest + others, s->fab.tx_size, 1, 2);
}

/* Whether op, its client's head, has the client's writes to another peer
 * queued behind its run. */
static int other_run(const struct mv_wr *op)
{
	return op->run_last && op->run_last->next;
}

/* Whether op's peer would hold more than half of what its client may have
 * in flight while op, its client's head, has writes to other peers behind
 * it: then those go first (mv_promote()). A client alone has 32 MiB in
 * flight; with a 64 MiB write to a peer behind a 32 Mbit/s link in its
 * queue, its 1 MiB write to a fast peer queued 0.2 s later waited 9.7 s
 * for the slow one's backlog (tests/slow_link.sh). */
static int peer_hogs(const struct mv_shard *s, struct mv_attach *at, const struct mv_wr *op)
{
	if (!other_run(op)) /* a client writing to one peer: no scan of at->to[] */
		return 0;
	uint64_t to = mv_inflight_to(at, op->peer->index);

	if (!to || 2 * (to + op->bytes) <= inflight_cap(s, at))
		return 0;
	at->hog = op->peer->index + 1; /* over_cap() */
	return 1;
}

/* Whether op must wait for its client's bytes in flight to come down (one
 * op may always go). Where another peer holds more than half of the cap (a
 * slow link's backlog: the one peer_hogs() found last, else the largest of
 * at->to[]'s slots), its bytes count for op only up to half the cap: the
 * writes to the other peers have the other half. Before, a 1 MiB write to a
 * fast peer waited 0.9 s for a 4 MiB piece to a peer behind a 32 Mbit/s
 * link that had taken the whole cap first (tests/slow_link.sh). No peer's
 * bytes pass the cap, and the client's stay within that peer's and half the
 * cap more. more_follows() predicts with the plain cap: stricter, so it can
 * only drop an FI_MORE, never leave one on a burst's last post. */
static int over_cap(const struct mv_shard *s, const struct mv_attach *at, const struct mv_wr *op)
{
	uint64_t in = at->inflight, cap, h = 0;
	uint32_t pix = op->peer->index;

	if (!in || in + op->bytes <= (cap = inflight_cap(s, at)))
		return 0;
	/* Refused by the plain cap: the rare path, where the scan is paid. */
	if (at->hog && at->hog != pix + 1)
		h = mv_inflight_to(at, at->hog - 1);
	for (uint32_t i = 0; i < MV_ATTACH_PEERS; i++)
		if (at->to[i].ops && at->to[i].pix != pix && at->to[i].bytes > h)
			h = at->to[i].bytes;
	if (2 * h > cap)
		in -= h - cap / 2;
	return in + op->bytes > cap;
}

/* Whether op cannot go now for its peer's sake: its landing window is full,
 * or no room_for() it. before: an op of this burst posted ahead of it
 * (more_follows()'s question), or NULL. */
static int peer_full(const struct mv_shard *s, const struct mv_wr *op, const struct mv_wr *before)
{
	int same = before && before->peer == op->peer;

	if (op->kind == MV_OPK_LAND &&
	    s->land_to[op->peer->index] + (same && before->kind == MV_OPK_LAND) >= LAND_WINDOW)
		return 1;
	return !room_for(s, op, same, before && !same);
}

/*
 * Whether op's post may carry FI_MORE: only while the shard posts for one
 * client and that client's next op surely follows in this burst. A burst
 * cut short (a full queue, the landing window or no room_for() the next
 * op, a next op whose peer is gone, the burst's byte budget, the client's
 * bytes in flight), or a next op on the other endpoint or copied (same
 * host: no post), must not leave the doorbell unrung. A post
 * that fails for another reason can still end a burst early.
 */
static int more_follows(const struct mv_shard *s, const struct mv_wr *op, uint64_t burst,
                        uint64_t piece, const struct mv_refused *r)
{
	const struct mv_wr *nx = op->next;

	/* A promoted op's next, where not promoted, is the head that could
	 * not go (queue.c): it may refuse again, in a burst that knows it not. */
	if (!nx || s->nactive > 1 || mv_refused_has(r, op->at, nx->peer) ||
	    (op->promoted && !nx->promoted) || nx->path == MV_PATH_SAMEHOST ||
	    burst + op->bytes >= MV_BURST_BYTES || ep_of(s, nx, piece) != ep_of(s, op, piece) ||
	    s->posted + 1 >= s->fab.tx_size ||
	    op->at->inflight + op->bytes + nx->bytes > inflight_cap(s, op->at) ||
	    (nx->peer == op->peer && other_run(op) &&
	     2 * (mv_inflight_to(op->at, op->peer->index) + op->bytes + nx->bytes) >
	         inflight_cap(s, op->at)) ||
	    /* nx, the head then, may find its own peer hogging and pass the
	     * turn to an op that cannot go. */
	    (nx->peer != op->peer && peer_hogs(s, op->at, nx)) ||
	    atomic_load_explicit(&nx->peer->gone, memory_order_relaxed))
		return 0;
	return !peer_full(s, nx, op);
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
 * need: so after a burst in which every client's post was refused the
 * shard waits, 2 us and twice as long after each refusal in a row up to
 * 64 us, or until a completion arrives. A refusal that is one peer's (rxm
 * connecting, or a peer that never answers) passes the turn on instead.
 */
#define HOLD_FIRST_NS 2000
#define HOLD_MAX_NS   64000

/*
 * A client whose head op cannot go this turn (its post refused, its peer's
 * landing window full, or no room_for() it) passes the turn to the next client on the
 * round: the other clients' writes must not wait on one client's peer.
 * Returns 0 once every client on the round was passed over this burst
 * (*passed counts them, *nround is the round's length, counted at the
 * first pass); then the burst ends.
 */
static int pass_turn(struct mv_shard *s, struct mv_attach *at, uint64_t piece, uint32_t *passed,
                     uint32_t *nround)
{
	if (!*nround)
		for (struct mv_attach *a = s->round_head; a; a = a->round_next)
			(*nround)++;
	if (++*passed >= *nround)
		return 0;
	credit_cap(at, piece);
	round_next(s);
	return 1;
}

/* at's head cannot go for its peer's sake: its writes to other peers go
 * first where they may (mv_promote(); promote 0: the provider's queue is
 * full, none may), else the turn passes (pass_turn()). Whether the loop
 * goes on. */
static int give_way(struct mv_shard *s, struct mv_attach *at, int promote, struct mv_refused *r,
                    uint64_t piece, uint32_t *passed, uint32_t *nround)
{
	if (promote && mv_promote(s, at, r))
		return 1;
	return pass_turn(s, at, piece, passed, nround);
}

int mv_post(struct mv_shard *s)
{
	struct mv_peer *wake[4];         /* same-host peers written to: woken once, at the end */
	struct mv_attach *capped = NULL; /* first of a run of turns ended by the share */
	int shared = s->nactive > 1;
	uint64_t burst = 0, limit = shared ? FAIR_BURST : MV_BURST_BYTES, piece = mv_fair_piece(s);
	int64_t run = hold_run(s, piece); /* mv_yield() */
	uint32_t nwake = 0;
	int64_t t_post = 0; /* read once a burst, for the hops */
	int n = 0;
	uint64_t grace = 0; /* a client whose yields ran out posts on to this burst byte */
	uint32_t passed = 0, nround = 0; /* pass_turn() */
	struct mv_refused refused = {0}; /* mv_promote() */

	s->ring_cut = 0;
	if (s->post_hold && s->now < s->post_hold)
		return 0;
	/* While shared and a client may come (mv_one_may_come()), a burst also
	 * ends after FAIR_BURST_NS: where each post copies (shm's one-segment
	 * writes, same-host copies), a burst that mv_others_wait() did not cut
	 * (the small client's next descriptor came just after the last look)
	 * held a waiting client for FAIR_BURST bytes of copies. The fairness
	 * row on the H100 (4 interleaved pairs): the small batch's wait in its
	 * ring, p99, went from 25-32 us to 16-20 with 8 us bursts and 15-17
	 * with 4 us ones, the flood's rate unchanged. While mv_fair_piece() cuts
	 * pieces smaller than configured (its posts copy slowly), a burst
	 * ends after each piece: a waiting client waits out one post at most.
	 * Floods alone among themselves keep whole bursts (fewer turns of the
	 * loop a byte). */
	int64_t burst_end = !shared ? 0 : mv_now_ns() + (piece < piece_cfg(s) ? 0 : FAIR_BURST_NS);
	while (s->round_head && burst < limit &&
	       (!burst_end || !n || mv_now_ns() < burst_end || !mv_one_may_come(s))) {
		struct mv_attach *at = s->round_head;
		struct mv_wr *op = at->pq_head;
		uint64_t flags = FI_COMPLETION | s->fab.dc_flag;
		int64_t cost = 0;

		if (shared) {
			if (!at->turn) {
				at->deficit += (int64_t)quantum(piece, at);
				at->turn = 1;
			}
			op = cut_piece(s, at, op, piece);
			cost =
			    op->bytes ? (int64_t)op->bytes : 64; /* an immediate: a small write */
			/* Not progress: a round of clients each at its
			 * share still ends the burst (capped). */
			if (peer_hogs(s, at, op) && mv_promote(s, at, &refused))
				continue;
			if (over_cap(s, at, op)) {
				credit_cap(at, piece);
				if (capped == at)
					break; /* a whole round, every client at its share */
				if (!capped)
					capped = at;
				round_next(s);
				continue;
			}
			if (cost > at->deficit) {
				round_next(s);
				continue;
			}
			if (op->bytes > piece / 2 &&
			    (mv_small_in_flight(s, at, piece / 2) ||
			     (op->path != MV_PATH_SAMEHOST && mv_anticipated(s, at))) &&
			    mv_yield(s, &at->held, run)) {
				s->st.holds++;
				credit_cap(at, piece);
				if (capped == at)
					break;
				if (!capped)
					capped = at;
				round_next(s);
				continue;
			}
		} else if (peer_hogs(s, at, op) && mv_promote(s, at, &refused)) {
			continue;
		} else if (over_cap(s, at, op)) {
			break;
		}
		if (op->path == MV_PATH_SAMEHOST) {
			capped = NULL;
			/* Steps whatever the yields say, and a copy that
			 * stopped for another client ends the burst: it moves
			 * at least a step a turn, so a flood is never held
			 * for good, and a whole piece after a run of yields
			 * (grace) would hold a small batch for it again. */
			int stopped = MV_OTHERS_NONE, why;
			burst += copy_op(s, at, op, cost, shared ? piece : 0, &stopped);
			n++;
			if (stopped) {
				s->ring_cut = stopped == MV_OTHERS_RING;
				break;
			}
			if (shared && burst >= grace && (why = mv_others_wait(s, at, piece))) {
				if (mv_yield(s, &at->cut_short, run)) {
					s->ring_cut = why == MV_OTHERS_RING;
					break;
				}
				grace = burst + piece;
			} else if (shared && burst >= grace) {
				at->cut_short.since = at->cut_short.out = 0;
			}
			continue;
		}
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
			if (more_follows(s, op, burst, piece, &refused))
				flags |= FI_MORE;
			if (peer_full(s, op, NULL)) {
				/* Until this peer acks, or takes its writes;
				 * both come through the CQ, so no hold.
				 * more_follows() kept FI_MORE off the post
				 * before. Its writes to other peers first. */
				if (give_way(s, at, 1, &refused, piece, &passed, &nround)) {
					capped = NULL;
					continue;
				}
				break;
			}
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
				int64_t t0 = shared && op->bytes > piece / 2 ? mv_now_ns() : 0;
				ret = fi_writemsg(ep_of(s, op, piece), &msg, flags);
				if (t0 && !ret) {
					int64_t took = mv_now_ns() - t0;
					s->piece_ns = mv_avg8(s->piece_ns, took);
					s->kib_ns =
					    mv_avg8(s->kib_ns, took * 1024 / (int64_t)op->bytes);
				}
			}
			if (ret == -FI_EAGAIN) {
				s->st.eagain++;
				/* A sleeping shm receiver must drain its queue. */
				wake_add(s, wake, &nwake, op->peer);
				/* The provider took nothing: its queue is full, or
				 * this op's peer is not connected (rxm while it
				 * connects; a peer that never answers, until
				 * op_timeout): its writes to other peers (where
				 * the queue is not full), then the next client
				 * try, and the shard holds once each was passed
				 * over. */
				if (give_way(s, at, s->posted + 1 < s->fab.tx_size, &refused, piece,
				             &passed, &nround)) {
					capped = NULL;
					continue;
				}
				s->hold_ns = s->hold_ns ? s->hold_ns * 2 : HOLD_FIRST_NS;
				if (s->hold_ns > HOLD_MAX_NS)
					s->hold_ns = HOLD_MAX_NS;
				s->post_hold = s->now + s->hold_ns;
				break;
			}
		}
		at->deficit -= cost;
		capped = NULL;
		mv_pend_went(s, at);
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
		if (!op->at->inflight_ops)
			op->at->inflight_since = s->now;
		op->on_small = op->kind != MV_OPK_LAND && ep_of(s, op, piece) == s->fab.ep_small;
		mv_posted_add(s, op);
		if (op->kind != MV_OPK_IMM)
			op->at->parts[op->batch].t_posted =
			    t_post ? t_post : (t_post = mv_now_ns());
		s->hold_ns = 0;
		wake_add(s, wake, &nwake, op->peer);
		burst += op->bytes;
		if (op->kind == MV_OPK_LAND) {
			s->land_to[op->pix]++;
			op->land_counted = 1;
		}
		s->st.posted++;
		s->st.posted_small += op->on_small;
		/* A large piece went: a next hold is a new run, and one that is
		 * not the run's end (mv_yield() said no this turn) breaks a streak. */
		if (op->bytes > piece / 2) {
			at->held.since = 0;
			if (at->held.out != s->now)
				at->held.out = 0;
		}
		n++;
		int why;
		if (shared && burst >= grace && (why = mv_others_wait(s, at, piece))) {
			if (mv_yield(s, &at->cut_short, run)) {
				s->ring_cut = why == MV_OTHERS_RING;
				break;
			}
			/* One piece more whatever the others do: enough that a
			 * client kept waiting cannot pin the flood to one op a
			 * turn, little enough (a piece, not the rest of a
			 * burst) that the waiting client's next descriptor is
			 * not held behind 256 KiB of copies. */
			grace = burst + piece;
		} else if (shared && burst >= grace) {
			at->cut_short.since = at->cut_short.out = 0;
		}
	}
	for (uint32_t i = 0; i < nwake; i++)
		mv_wake_ring(s, wake[i]);
	return n;
}
