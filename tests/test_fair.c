/* SPDX-License-Identifier: MIT */
/*
 * Fair share between the clients of one mover, end to end over tcp;ofi_rxm
 * and shm with one shard per mover, and between same-host copies: a
 * client's small batch is served while another client's flood is still in
 * flight, not after it; a write cut into pieces keeps its immediate after
 * its data; small writes take their own endpoint on tcp; a flood still
 * moves beside back-to-back small batches, with the piece the shard cut or
 * the one the operator set. Counted in batches and bytes, never in time:
 * timed bars belong to mvbench's fairness row. Weights: test_weights.c;
 * deadlines and stopped peers: test_stopped_peer.c.
 */
#include <check.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mvc.h"

#include "mvtest.h"
#include "mvflood.h"

#define FLOOD (64u << 20) /* bytes of one flood batch */

/* tcp with the piece the operator set: fixed, however long its posts. */
static uint64_t want_piece; /* 0: the shard's own */

static void setup_tcp1_set_piece(void)
{
	want_piece = 32768;
	mover_extra2 = "--fair-piece=32768";
	setup_tcp1();
	mover_extra2 = NULL;
}

static void setup_shm1_copy(void)
{
	prov = "shm";
	mover_launch(&A, "a", 1);
	mover_launch(&B, "b", 1);
	movers_listening();
}

/* ---- a small batch beside a flood ---- */

/* Clients F (a flood) and S (small batches) of A, both writing into one
 * region of the owner, a client of B: F's FLOOD bytes from 0, S's 4 KiB
 * just past them. */
struct beside {
	struct mvc *owner, *f, *s;
	struct mvc_mem dst, fsrc, ssrc;
	uint32_t fimp, simp;
};

static void beside_open(struct beside *t)
{
	ck_assert_int_eq(mvc_connect(&t->owner, B.sock), 0);
	ck_assert_int_eq(mvc_connect(&t->f, A.sock), 0);
	ck_assert_int_eq(mvc_connect(&t->s, A.sock), 0);
	ck_assert_msg(mvc_alloc(t->owner, FLOOD + 4096, &t->dst) == 0, "%s", mvc_error(t->owner));
	ck_assert_msg(mvc_alloc(t->f, FLOOD, &t->fsrc) == 0, "%s", mvc_error(t->f));
	ck_assert_msg(mvc_alloc(t->s, 4096, &t->ssrc) == 0, "%s", mvc_error(t->s));
	t->fimp = reach(t->f, t->owner, t->dst.region);
	t->simp = reach(t->s, t->owner, t->dst.region);
}

static void beside_close(struct beside *t)
{
	mvc_disconnect(t->s);
	mvc_disconnect(t->f);
	mvc_disconnect(t->owner);
}

/*
 * Client F of A submits eight 64 MiB batches at once; then client S of the
 * same mover and shard submits one 4 KiB write and its immediate. S's batch
 * must complete, its data and immediate at the owner, while F's batches are
 * still in flight: when S's completion is read, F must have fewer than all
 * eight completions waiting. One FIFO for both clients would finish S last.
 */
START_TEST(test_small_batch_completes_before_a_flood_drains)
{
	struct beside t;
	struct mvc_event ev[16];
	const int nflood = 8;

	beside_open(&t);
	fill(t.fsrc.addr, FLOOD, 7);
	fill(t.ssrc.addr, 4096, 8);
	/* Connections up (tcp connects on the first write), before timing
	 * matters: one small batch of each. */
	ck_assert_int_eq(mvc_write(t.f, t.fsrc.region, 0, t.fimp, 0, 4096), 0);
	submit_ok(t.f, 1000);
	ck_assert_int_eq(mvc_write(t.s, t.ssrc.region, 0, t.simp, FLOOD, 4096), 0);
	submit_ok(t.s, 1000);

	for (int i = 0; i < nflood; i++) {
		ck_assert_int_eq(mvc_write(t.f, t.fsrc.region, 0, t.fimp, 0, FLOOD), 0);
		ck_assert_msg(mvc_submit(t.f, (uint64_t)i) == 0, "%s", mvc_error(t.f));
	}
	usleep(2000); /* the shard has taken the flood */
	ck_assert_int_eq(mvc_write(t.s, t.ssrc.region, 0, t.simp, FLOOD, 4096), 0);
	ck_assert_int_eq(mvc_write_imm(t.s, t.simp, 77), 0);
	ck_assert_int_eq(mvc_submit(t.s, 1), 0);
	struct mvc_event e = wait_batch(t.s, 1, 30);
	ck_assert_msg(e.status == 0, "%s", e.msg);
	int done = mvc_poll(t.f, ev, 16);
	ck_assert_int_ge(done, 0);
	ck_assert_msg(done < nflood,
	              "the small batch completed after all %d flood batches: served behind "
	              "the flood",
	              nflood);

	/* Its data and immediate reached the owner. */
	int got = 0;
	for (double end = now_s() + 20; !got && now_s() < end;) {
		int k = mvc_wait(t.owner, ev, 16, 100);
		ck_assert_int_ge(k, 0);
		for (int i = 0; i < k; i++)
			got |= ev[i].type == MVC_EV_IMM && ev[i].imm == 77;
	}
	ck_assert_msg(got, "the small batch's immediate did not arrive");
	ck_assert(!memcmp((uint8_t *)t.dst.addr + FLOOD, t.ssrc.addr, 4096));

	/* The flood finishes too, every byte in place. */
	for (int left = nflood - done; left > 0;) {
		int k = mvc_wait(t.f, ev, 16, 200);
		ck_assert_int_ge(k, 0);
		for (int i = 0; i < k; i++) {
			ck_assert_msg(ev[i].status == 0, "%s", ev[i].msg);
			left--;
		}
		ck_assert_msg(k || mvc_inflight(t.f), "flood batches lost");
	}
	for (int i = 0; i < done; i++)
		ck_assert_msg(ev[i].status == 0, "%s", ev[i].msg);
	ck_assert(!memcmp(t.dst.addr, t.fsrc.addr, FLOOD));
	beside_close(&t);
}
END_TEST

/*
 * Same-host copies, while the shard is shared, go in steps and stop when
 * another client waits (mover/post.c): the flood's write must still land
 * whole, every byte where it belongs, however often it stopped. Client F
 * sends one 64 MiB write at a time, a new pattern each, while client S
 * sends small batches back to back; each flood batch is compared where it
 * landed. Until the shard's copy_stops counter says a copy stopped (up to
 * 20 flood batches: S must come while a piece is being copied).
 */
START_TEST(test_copy_stopped_for_another_client_lands_whole)
{
	struct beside t;
	struct mvc_event ev[16];
	uint64_t stops0 = stat_sum(&A, "\"copy_stops\""), stops = 0, small = 100;
	int k;

	beside_open(&t);
	fill(t.ssrc.addr, 4096, 5);
	ck_assert_int_eq(mvc_write(t.s, t.ssrc.region, 0, t.simp, FLOOD, 4096), 0);
	submit_ok(t.s, small++);
	for (k = 0; k < 20 && !stops; k++) {
		fill(t.fsrc.addr, FLOOD, 40 + (uint64_t)k);
		ck_assert_int_eq(mvc_write(t.f, t.fsrc.region, 0, t.fimp, 0, FLOOD), 0);
		ck_assert_int_eq(mvc_submit(t.f, (uint64_t)k), 0);
		int done = 0;
		for (double end = now_s() + 30; !done && now_s() < end;) {
			/* One small batch at a time, back to back. */
			ck_assert_int_eq(mvc_write(t.s, t.ssrc.region, 0, t.simp, FLOOD, 4096), 0);
			ck_assert_int_eq(mvc_submit(t.s, small), 0);
			for (int got = 0; !got;) {
				int n = mvc_poll(t.s, ev, 16);
				ck_assert_int_ge(n, 0);
				for (int i = 0; i < n; i++) {
					ck_assert_msg(ev[i].status == 0, "%s", ev[i].msg);
					got |= ev[i].cookie == small;
				}
			}
			small++;
			int n = mvc_poll(t.f, ev, 16);
			ck_assert_int_ge(n, 0);
			for (int i = 0; i < n; i++) {
				ck_assert_msg(ev[i].status == 0, "flood batch %d: %s", k,
				              ev[i].msg);
				done |= ev[i].cookie == (uint64_t)k;
			}
		}
		ck_assert_msg(done, "flood batch %d did not complete", k);
		/* Same host: a copy is done when its batch completes. */
		uint64_t off = 0;
		while (off < FLOOD &&
		       !memcmp((uint8_t *)t.dst.addr + off, (uint8_t *)t.fsrc.addr + off, 4096))
			off += 4096;
		ck_assert_msg(off == FLOOD, "flood batch %d: bytes at %llu differ", k,
		              (unsigned long long)off);
		stops = stat_sum(&A, "\"copy_stops\"") - stops0;
	}
	fprintf(stderr, "same-host flood beside small batches: %llu copies stopped in %d batches\n",
	        (unsigned long long)stops, k);
	ck_assert_msg(stops > 0, "no copy stopped for the small client in %d flood batches", k);
	beside_close(&t);
}
END_TEST

/*
 * A one-write batch carries its immediate on the write; beside a flood the
 * shard cuts that write into pieces, and the immediate must then come once,
 * after all of them: 1 MiB batches of a fresh pattern each, beside a
 * flooder, every byte in place when the owner hears the immediate, and one
 * immediate a batch. (Here an immediate left on the last piece would still
 * arrive in order: shm's sender copies one-segment writes itself and rxm
 * keeps write order; a NIC need not.)
 */
START_TEST(test_cut_write_keeps_its_imm_after_its_data)
{
	struct mvc *s, *owner;
	struct mvc_mem src, dst;
	struct mvc_event ev[16];
	struct flooder fl;
	const uint64_t n = 1u << 20;

	ck_assert_int_eq(mvc_connect(&owner, B.sock), 0);
	ck_assert_int_eq(mvc_connect(&s, A.sock), 0);
	ck_assert_msg(mvc_alloc(owner, 16u << 20, &dst) == 0, "%s", mvc_error(owner));
	ck_assert_msg(mvc_alloc(s, n, &src) == 0, "%s", mvc_error(s));
	uint32_t imp = reach(s, owner, dst.region);
	flooder_open(&fl, owner, dst.region, NULL); /* writes the first 4 MiB */
	usleep(100000);
	for (uint32_t round = 1; round <= 30; round++) {
		fill(src.addr, n, round);
		ck_assert_int_eq(mvc_write(s, src.region, 0, imp, 8u << 20, n), 0);
		ck_assert_int_eq(mvc_write_imm(s, imp, round), 0);
		ck_assert_int_eq(mvc_submit(s, round), 0);
		int got = 0;
		for (double end = now_s() + 20; !got && now_s() < end;) {
			int k = mvc_wait(owner, ev, 16, 100);
			ck_assert_int_ge(k, 0);
			for (int i = 0; i < k; i++)
				if (ev[i].type == MVC_EV_IMM) {
					ck_assert_uint_eq(ev[i].imm, round);
					got = 1;
				}
		}
		ck_assert_msg(got, "no immediate in round %u", round);
		ck_assert_msg(!memcmp((uint8_t *)dst.addr + (8u << 20), src.addr, n),
		              "round %u: the immediate came before all of its data", round);
		struct mvc_event e = wait_batch(s, round, 20);
		ck_assert_msg(e.status == 0, "%s", e.msg);
		ck_assert_uint_eq(e.bytes, n);
	}
	flooder_close(&fl);
	mvc_disconnect(s);
	mvc_disconnect(owner);
}
END_TEST

/* n batches of a 4 KiB write and its immediate (which rides on the write),
 * one at a time; every byte and immediate arrives. */
static void small_batches(struct mvc *s, struct mvc *owner, const struct mvc_mem *src,
                          const struct mvc_mem *dst, uint32_t imp, uint64_t at, uint32_t n)
{
	struct mvc_event ev[16];
	uint32_t imms = 0;

	for (uint32_t i = 1; i <= n; i++) {
		uint64_t off = (i % 64) * 4096;
		ck_assert_int_eq(mvc_write(s, src->region, off, imp, at + off, 4096), 0);
		ck_assert_int_eq(mvc_write_imm(s, imp, i), 0);
		submit_ok(s, i);
		int k = mvc_poll(owner, ev, 16);
		ck_assert_int_ge(k, 0);
		for (int j = 0; j < k; j++)
			imms += ev[j].type == MVC_EV_IMM;
	}
	for (double end = now_s() + 20; imms < n && now_s() < end;) {
		int k = mvc_wait(owner, ev, 16, 100);
		ck_assert_int_ge(k, 0);
		for (int j = 0; j < k; j++)
			imms += ev[j].type == MVC_EV_IMM;
	}
	ck_assert_uint_eq(imms, n);
	uint64_t pages = n < 63 ? n : 63; /* 1 to 63: the offsets written */
	ck_assert(
	    !memcmp((uint8_t *)dst->addr + at + 4096, (uint8_t *)src->addr + 4096, pages * 4096));
}

/*
 * On tcp a shared shard posts small writes and immediates on an endpoint
 * of its own (a connection of its own to the peer, so they do not queue
 * behind a flood's bytes in the sender's socket), and larger writes on
 * its usual one; a client alone, and shm, have the one endpoint. Counted
 * by mvstat's posted and posted_small: batches of a 4 KiB write and its
 * immediate take it beside a flooder on tcp, one post each, and never
 * alone; the flooder's pieces never do.
 */
START_TEST(test_small_writes_take_their_own_endpoint_on_tcp)
{
	struct mvc *s, *owner;
	struct mvc_mem src, dst;
	struct flooder fl;
	const uint64_t at = 8u << 20;
	int tcp = !strcmp(prov, "tcp");

	ck_assert_int_eq(mvc_connect(&owner, B.sock), 0);
	ck_assert_int_eq(mvc_connect(&s, A.sock), 0);
	ck_assert_msg(mvc_alloc(owner, 16u << 20, &dst) == 0, "%s", mvc_error(owner));
	ck_assert_msg(mvc_alloc(s, 64 * 4096, &src) == 0, "%s", mvc_error(s));
	uint32_t imp = reach(s, owner, dst.region);
	fill(src.addr, 64 * 4096, 5);
	/* Connections up first (tcp connects on a first write, and may
	 * re-post while it does). */
	ck_assert_int_eq(mvc_write(s, src.region, 0, imp, at, 4096), 0);
	submit_ok(s, 1000);

	uint64_t p0 = stat_sum(&A, "\"posted\""), q0 = stat_sum(&A, "\"posted_small\"");
	small_batches(s, owner, &src, &dst, imp, at, 50);
	uint64_t p1 = stat_sum(&A, "\"posted\""), q1 = stat_sum(&A, "\"posted_small\"");
	ck_assert_uint_ge(p1 - p0, 50);
	ck_assert_msg(q1 == q0, "alone, %llu posts went on the small-write endpoint",
	              (unsigned long long)(q1 - q0));

	flooder_open(&fl, owner, dst.region, NULL); /* 4 MiB writes at offset 0 */
	for (double end = now_s() + 20; !atomic_load(&fl.bytes) && now_s() < end;)
		usleep(1000);
	uint64_t q2 = stat_sum(&A, "\"posted_small\"");
	small_batches(s, owner, &src, &dst, imp, at, 100);
	uint64_t q3 = stat_sum(&A, "\"posted_small\"");
	flooder_close(&fl);
	uint64_t q4 = stat_sum(&A, "\"posted_small\"");
	if (tcp)
		ck_assert_msg(q3 - q2 == 100,
		              "tcp, beside a flood: %llu posts on the small-write endpoint for 100 "
		              "batches of a 4 KiB write with its immediate, want 100",
		              (unsigned long long)(q3 - q2));
	else
		ck_assert_uint_eq(q3, q2);
	ck_assert_msg(q4 == q3 && q2 == q1,
	              "the flooder's pieces went on the small-write endpoint (%llu posts)",
	              (unsigned long long)(q4 - q3 + q2 - q1));
	mvc_disconnect(s);
	mvc_disconnect(owner);
}
END_TEST

/*
 * A client that sends small batches back to back, one at a time, keeps a
 * small write in flight nearly all the time, and its next batch always
 * about to come: where the shard holds other clients' pieces for a small
 * write in flight or for the next batch of a client about to come back
 * (anticipation), on shm and tcp, the holds must run out, so a flood beside
 * it still moves. Counted, not timed: while the small client
 * completes 3000 batches (each at least a post and a completion, so the
 * run lasts far longer than the 128 holds of MV_SMALL_HOLD_NS a 4 MiB write
 * needs at worst), the flooder must complete a 4 MiB batch.
 */
START_TEST(test_flood_moves_beside_back_to_back_small_writes)
{
	struct mvc *s, *owner;
	struct mvc_mem src, dst;
	struct mvc_event ev[16];
	struct flooder fl;

	ck_assert_int_eq(mvc_connect(&owner, B.sock), 0);
	ck_assert_int_eq(mvc_connect(&s, A.sock), 0);
	ck_assert_msg(mvc_alloc(owner, 16u << 20, &dst) == 0, "%s", mvc_error(owner));
	ck_assert_msg(mvc_alloc(s, 4096, &src) == 0, "%s", mvc_error(s));
	uint32_t imp = reach(s, owner, dst.region);
	fill(src.addr, 4096, 3);
	ck_assert_int_eq(mvc_write(s, src.region, 0, imp, 8u << 20, 4096), 0);
	submit_ok(s, 1);
	flooder_open(&fl, owner, dst.region, NULL);
	/* The flood is under way: its first batch came back. */
	for (double end = now_s() + 20; !atomic_load(&fl.bytes) && now_s() < end;)
		usleep(1000);
	ck_assert_msg(atomic_load(&fl.bytes), "the flood completed nothing alone: %s", fl.err);

	uint64_t b0 = atomic_load(&fl.bytes), flood_during = 0;
	uint64_t holds0 = stat_sum(&A, "\"holds\""), copied0 = stat_sum(&A, "\"samehost_bytes\"");
	double t0 = now_s();
	for (uint64_t i = 2; i < 3002; i++) {
		ck_assert_int_eq(mvc_write(s, src.region, 0, imp, 8u << 20, 4096), 0);
		ck_assert_msg(mvc_submit(s, i) == 0, "%s", mvc_error(s));
		int got = 0;
		for (double end = now_s() + 20; !got && now_s() < end;) {
			int k = mvc_poll(s, ev, 16); /* back to back: polling, never asleep */
			ck_assert_int_ge(k, 0);
			for (int j = 0; j < k; j++) {
				ck_assert_msg(ev[j].status == 0, "%s", ev[j].msg);
				got |= ev[j].type == MVC_EV_BATCH && ev[j].cookie == i;
			}
		}
		ck_assert_msg(got, "small batch %llu never completed", (unsigned long long)i);
	}
	flood_during = atomic_load(&fl.bytes) - b0;
	double took = now_s() - t0;
	uint64_t holds = stat_sum(&A, "\"holds\"") - holds0;
	flooder_close(&fl);
	ck_assert_msg(flood_during >= fl.size,
	              "the flood completed %llu bytes while the small client sent 3000 batches "
	              "back to back: held for good (%llu holds)",
	              (unsigned long long)flood_during, (unsigned long long)holds);
	/* On the fabric a piece waits for a small write in flight, which a
	 * client sending back to back nearly always has: mvstat counts those
	 * turns (asserted on shm, printed on tcp; same-host copies stop in
	 * steps instead: copy_stops). */
	int copies = stat_sum(&A, "\"samehost_bytes\"") != copied0;
	printf("%s%s: flood beside 3000 back-to-back small batches (%.2f s): %.0f MB/s, "
	       "%llu holds\n",
	       prov, copies ? " (copies)" : "", took, flood_during / took / 1e6,
	       (unsigned long long)holds);
	if (!strcmp(prov, "shm") && !copies)
		ck_assert_msg(holds > 0, "shm: no piece was held for 3000 small writes in flight");
	/* The piece each shard cuts now: the default 32 KiB, or what its
	 * posts carried in 2 us (shm's and tcp's copy), 8 KiB at least, in
	 * 4 KiB steps; the piece the operator set, whatever the posts take. */
	uint64_t piece[64];
	int n = stat_each(&A, "\"piece_bytes\"", piece, 64);
	ck_assert_msg(n > 0, "mvstat shows no piece");
	for (int i = 0; i < n && i < 64; i++) {
		printf("%s: shard %d cuts %llu-byte pieces\n", prov, i,
		       (unsigned long long)piece[i]);
		ck_assert_msg(want_piece
		                  ? piece[i] == want_piece
		                  : piece[i] >= 8192 && piece[i] <= 32768 && piece[i] % 4096 == 0,
		              "shard %d's piece is %llu bytes", i, (unsigned long long)piece[i]);
	}
	mvc_disconnect(s);
	mvc_disconnect(owner);
}
END_TEST

/*
 * A client writing to two peers beside a flood keeps the shard moving.
 * While the shard is shared each client has a small share in flight, and
 * a head whose peer holds half of its client's share lets the client's
 * writes to another peer go first (post.c's peer_hogs()). Client X of A
 * sends batches of writes to B and to C by turns, client F floods B: with
 * every head so passed and every client at its share, a round must still
 * end the burst. At 97c3963 it did not: the shard looped in mv_post()
 * without reading its CQ, and no batch of either client completed.
 */
static void setup_tcp_three(void)
{
	prov = "tcp";
	mover_extra = "--no-host-copy";
	mover_launch(&A, "a", 1);
	mover_extra = NULL;
	mover_launch(&B, "b", 1);
	mover_launch(&C, "c", 1);
	movers_listening();
}

START_TEST(test_a_client_writing_to_two_peers_beside_a_flood_keeps_the_shard_moving)
{
	const uint64_t n = 8u << 20;
	struct mvc *ob, *oc, *x;
	struct mvc_mem db, dc, dfl, src;
	struct flooder f;

	ck_assert_int_eq(mvc_connect(&ob, B.sock), 0);
	ck_assert_int_eq(mvc_connect(&oc, C.sock), 0);
	ck_assert_msg(mvc_alloc(ob, n, &db) == 0, "%s", mvc_error(ob));
	ck_assert_msg(mvc_alloc(ob, 4u << 20, &dfl) == 0, "%s", mvc_error(ob));
	ck_assert_msg(mvc_alloc(oc, n, &dc) == 0, "%s", mvc_error(oc));
	ck_assert_int_eq(mvc_connect(&x, A.sock), 0);
	ck_assert_msg(mvc_alloc(x, n, &src) == 0, "%s", mvc_error(x));
	fill(src.addr, n, 31);
	uint32_t xb = reach(x, ob, db.region), xc = reach(x, oc, dc.region);
	flooder_open(&f, ob, dfl.region, NULL);

	int batches = 0;
	double t0 = now_s();
	while (now_s() - t0 < 1.5 || batches < 3) {
		for (int k = 0; k < 4; k++) {
			ck_assert_int_eq(mvc_write(x, src.region, 0, xb, 0, n / 2), 0);
			ck_assert_int_eq(mvc_write(x, src.region, n / 2, xc, n / 2, n / 2), 0);
		}
		ck_assert_int_eq(mvc_write(x, src.region, 0, xb, 0, n), 0);
		ck_assert_int_eq(mvc_write(x, src.region, 0, xc, 0, n), 0);
		ck_assert_int_eq(mvc_submit(x, (uint64_t)batches), 0);
		struct mvc_event e = wait_batch(x, (uint64_t)batches, 20);
		ck_assert_msg(e.status == 0, "batch %d, %.2f s in: %s", batches, now_s() - t0,
		              e.msg);
		batches++;
	}
	uint64_t flooded = atomic_load(&f.bytes);
	flooder_close(&f);
	printf("tcp: %d batches to two peers in %.2f s beside a flood of %.0f MiB\n", batches,
	       now_s() - t0, flooded / 1048576.0);
	ck_assert_msg(flooded > 0, "the flood moved nothing");
	ck_assert(!memcmp(db.addr, src.addr, n));
	ck_assert(!memcmp(dc.addr, src.addr, n));
	mvc_disconnect(x);
	mvc_disconnect(oc);
	mvc_disconnect(ob);
}
END_TEST

/* ---- deadlines of queued writes ---- */

/* A's writes on tcp's fabric, and a deadline (--op-timeout) of 0.5 s. */
static TCase *flows(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_small_batch_completes_before_a_flood_drains);
	tcase_add_test(tc, test_cut_write_keeps_its_imm_after_its_data);
	tcase_add_test(tc, test_small_writes_take_their_own_endpoint_on_tcp);
	tcase_add_test(tc, test_flood_moves_beside_back_to_back_small_writes);
	return tc;
}

/* Same-host copies: a small batch still goes before a flood drains, a
 * write cut into pieces keeps its immediate after its data, a copy stopped
 * for another client lands whole, and a flood still moves beside small
 * batches back to back (a copy moves a step a turn). */
static TCase *flows_copy(void)
{
	TCase *tc = tcase_create("flows_shm_copy");

	tcase_add_checked_fixture(tc, setup_shm1_copy, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_small_batch_completes_before_a_flood_drains);
	tcase_add_test(tc, test_cut_write_keeps_its_imm_after_its_data);
	tcase_add_test(tc, test_copy_stopped_for_another_client_lands_whole);
	tcase_add_test(tc, test_flood_moves_beside_back_to_back_small_writes);
	return tc;
}

/* The piece the operator set stays what they set beside a flood. */
static TCase *set_piece(void)
{
	TCase *tc = tcase_create("flows_tcp_set_piece");

	tcase_add_checked_fixture(tc, setup_tcp1_set_piece, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_flood_moves_beside_back_to_back_small_writes);
	return tc;
}

int main(void)
{
	Suite *s = suite_create("fair");

	suite_add_tcase(s, flows("flows_tcp", setup_tcp1));
	suite_add_tcase(s, flows("flows_shm", setup_shm1));
	suite_add_tcase(s, flows_copy());
	suite_add_tcase(s, set_piece());
	TCase *tc = tcase_create("two_peers");
	tcase_add_checked_fixture(tc, setup_tcp_three, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc,
	               test_a_client_writing_to_two_peers_beside_a_flood_keeps_the_shard_moving);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
