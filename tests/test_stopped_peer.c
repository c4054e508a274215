/* SPDX-License-Identifier: MIT */
/*
 * Deadlines and peers that take nothing, between the clients of one mover
 * over tcp;ofi_rxm with one shard per mover: writes queued or cut into
 * pieces outlive the deadline (op_timeout) while they move; those queued
 * for a stopped peer fail together, at one deadline; and a stopped peer
 * holds up no other client of the shard, whether it stopped before its
 * connection was made (rxm refuses the posts) or after (its writes stay in
 * the provider's queue), whether the other client came before or after,
 * and whatever number of clients the first one's uid has. Fair share
 * itself: test_fair.c.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mvc.h"

#include "mvtest.h"
#include "mvflood.h"

#define FLOOD (64u << 20) /* bytes of one flood batch */

static void setup_tcp_deadline(void)
{
	prov = "tcp";
	mover_extra = "--no-host-copy";
	mover_extra2 = "--op-timeout=0.5";
	mover_launch(&A, "a", 1);
	mover_extra = NULL;
	mover_launch(&B, "b", 1);
	mover_extra2 = NULL;
	movers_listening();
}

/*
 * A write's deadline (op_timeout) is for a peer that takes nothing: it
 * counts while the write could go (the head of its client's queue, or the
 * rest of one cut into pieces since its last piece went), not while it
 * waits behind its client's own writes. Two clients of A each queue
 * batches of one 64 MiB write, more until they take tcp on loopback over
 * 1 s, twice the 0.5 s deadline: every batch completes with status 0, and
 * its bytes are in place.
 */

/* Clients c[0] and c[1] each queue nb batches of one FLOOD-byte write at
 * once; the seconds until every one completed, with status 0. */
static double queue_floods(struct mvc **c, struct mvc_mem *src, const uint32_t *imp, int nb)
{
	struct mvc_event ev[16];
	double t0 = now_s();

	for (int i = 0; i < nb; i++)
		for (int k = 0; k < 2; k++) {
			ck_assert_int_eq(
			    mvc_write(c[k], src[k].region, 0, imp[k], (uint64_t)k * FLOOD, FLOOD),
			    0);
			ck_assert_msg(mvc_submit(c[k], (uint64_t)i) == 0, "%s", mvc_error(c[k]));
		}
	for (int k = 0; k < 2; k++)
		for (int left = nb; left > 0;) {
			int n = mvc_wait(c[k], ev, 16, 200);
			ck_assert_int_ge(n, 0);
			for (int i = 0; i < n; i++) {
				ck_assert_msg(ev[i].status == 0,
				              "client %d, batch %llu of %d queued at once, %.2f s "
				              "in: %s",
				              k, (unsigned long long)ev[i].cookie, nb, now_s() - t0,
				              ev[i].msg);
				left--;
			}
			ck_assert_msg(n || mvc_inflight(c[k]), "batches lost");
		}
	return now_s() - t0;
}

START_TEST(test_queued_writes_outlive_the_deadline_while_they_move)
{
	struct mvc *owner, *c[2];
	struct mvc_mem dst, src[2];
	uint32_t imp[2];
	int nb = 1;
	double took;

	ck_assert_int_eq(mvc_connect(&owner, B.sock), 0);
	ck_assert_msg(mvc_alloc(owner, 2 * FLOOD, &dst) == 0, "%s", mvc_error(owner));
	for (int k = 0; k < 2; k++) {
		ck_assert_int_eq(mvc_connect(&c[k], A.sock), 0);
		ck_assert_msg(mvc_alloc(c[k], FLOOD, &src[k]) == 0, "%s", mvc_error(c[k]));
		fill(src[k].addr, FLOOD, 20 + k);
		imp[k] = reach(c[k], owner, dst.region);
		/* Connected (tcp connects on the first write) before the clock. */
		ck_assert_int_eq(mvc_write(c[k], src[k].region, 0, imp[k], 0, 4096), 0);
		submit_ok(c[k], 1000);
	}
	/* One of each, then as many as that rate moves in 1.6 s, until a
	 * round takes over 1 s (the first writes run colder than the rest). */
	for (int round = 0; (took = queue_floods(c, src, imp, nb)) <= 1.0; round++) {
		ck_assert_msg(round < 4 && nb < 96,
		              "%d x 2 batches of 64 MiB drained in %.2f s, within twice the "
		              "deadline: the test proves nothing",
		              nb, took);
		nb = (int)(nb * 1.6 / took) + 1;
		if (nb > 96)
			nb = 96;
	}
	printf("tcp: %d x 2 queued 64 MiB writes drained in %.2f s beside a 0.5 s deadline\n", nb,
	       took);
	for (int k = 0; k < 2; k++)
		ck_assert(!memcmp((uint8_t *)dst.addr + (size_t)k * FLOOD, src[k].addr, FLOOD));
	for (int k = 0; k < 2; k++)
		mvc_disconnect(c[k]);
	mvc_disconnect(owner);
}
END_TEST

/* Lets `from` write into `region` of `owner`, a client of C, with C stopped
 * (SIGSTOP, whole) before A meets it: its blobs first, then the stop, then
 * the peer and the import. */
static uint32_t reach_stopped(struct mvc *from, struct mvc *owner, uint32_t region)
{
	uint8_t addr[MVC_BLOB_MAX], rblob[MVC_BLOB_MAX];
	size_t alen = sizeof(addr), rlen = sizeof(rblob);
	uint32_t peer, imp;
	int st;

	ck_assert_int_eq(mvc_address(owner, addr, &alen), 0);
	ck_assert_int_eq(mvc_region_blob(owner, region, rblob, &rlen), 0);
	ck_assert_int_eq(kill(C.pid, SIGSTOP), 0);
	ck_assert_int_eq(waitpid(C.pid, &st, WUNTRACED), C.pid);
	ck_assert_msg(mvc_peer_add(from, addr, alen, &peer) == 0, "%s", mvc_error(from));
	ck_assert_msg(mvc_import(from, peer, rblob, rlen, &imp) == 0, "%s", mvc_error(from));
	return imp;
}

/*
 * The cast of most tests here: mover C (on the fabric with c_fabric: A
 * then reaches it by tcp, not by same-host copies), client x of A, owners
 * ob of B and oc of C, each with a region (x's xlen bytes, ob's blen,
 * oc's 1 MiB).
 */
struct cast {
	struct mvc *x, *ob, *oc;
	struct mvc_mem sx, db, dc;
};

static void cast_open(struct cast *k, int c_fabric, size_t xlen, size_t blen)
{
	mover_extra = c_fabric ? "--no-host-copy" : NULL;
	mover_start(&C, "c", 1);
	mover_extra = NULL;
	ck_assert_int_eq(mvc_connect(&k->x, A.sock), 0);
	ck_assert_int_eq(mvc_connect(&k->ob, B.sock), 0);
	ck_assert_int_eq(mvc_connect(&k->oc, C.sock), 0);
	ck_assert_msg(mvc_alloc(k->x, xlen, &k->sx) == 0, "%s", mvc_error(k->x));
	ck_assert_msg(mvc_alloc(k->ob, blen, &k->db) == 0, "%s", mvc_error(k->ob));
	ck_assert_msg(mvc_alloc(k->oc, 1u << 20, &k->dc) == 0, "%s", mvc_error(k->oc));
}

/* C goes on, if it was stopped, and the cast leaves. */
static void cast_close(struct cast *k)
{
	kill(C.pid, SIGCONT);
	mvc_disconnect(k->x);
	mvc_disconnect(k->ob);
	mvc_disconnect(k->oc);
}

/*
 * And a peer that takes nothing still fails what waits for it within about
 * the deadline, all of it, and holds up none of the client's writes to
 * other peers: client X of A writes by turns to a stopped mover C (never
 * met before it stopped: rxm answers EAGAIN while it connects) and to B.
 * Each write to C fails as "took no write" within 3 deadlines of its
 * submit, not one deadline after another in turn, and every write to B
 * completes before the first of them fails (before, they waited behind
 * X's first write to C, and completed once it failed).
 */
START_TEST(test_writes_to_a_stopped_peer_fail_together)
{
	enum { NB = 8 };
	struct cast cs;
	struct mvc_event ev[16];
	uint32_t ib, ic;
	double at[2 * NB] = {0};

	cast_open(&cs, 0, 1u << 20, 1u << 20);
	struct mvc *x = cs.x;
	struct mvc_mem src = cs.sx;
	fill(src.addr, 1u << 20, 31);
	ib = reach(x, cs.ob, cs.db.region);
	ck_assert_int_eq(mvc_write(x, src.region, 0, ib, 0, 4096), 0);
	submit_ok(x, 1000);
	ic = reach_stopped(x, cs.oc, cs.dc.region);
	double t0 = now_s();
	for (int i = 0; i < 2 * NB; i++) {
		ck_assert_int_eq(mvc_write(x, src.region, (uint64_t)i * 4096, i % 2 ? ib : ic,
		                           (uint64_t)i * 4096, 4096),
		                 0);
		ck_assert_int_eq(mvc_submit(x, (uint64_t)i), 0);
	}
	for (int left = 2 * NB; left > 0;) {
		int n = mvc_wait(x, ev, 16, 200);
		ck_assert_int_ge(n, 0);
		ck_assert_msg(now_s() - t0 < 30, "%d batches still out after 30 s", left);
		for (int k = 0; k < n; k++) {
			int i = (int)ev[k].cookie;
			ck_assert_int_lt(i, 2 * NB);
			at[i] = now_s() - t0;
			if (i % 2)
				ck_assert_msg(ev[k].status == 0, "write %d to B: %s", i, ev[k].msg);
			else
				ck_assert_msg(ev[k].status == -ETIMEDOUT &&
				                  strstr(ev[k].msg, "took no write"),
				              "write %d to C: status %d, %s", i, ev[k].status,
				              ev[k].msg);
			left--;
		}
	}
	kill(C.pid, SIGCONT);
	for (int i = 0; i < 2 * NB; i += 2)
		ck_assert_msg(at[i] < 1.5, "write %d to the stopped peer failed %.2f s in", i,
		              at[i]);
	for (int i = 1; i < 2 * NB; i += 2)
		ck_assert_msg(at[i] < at[0],
		              "write %d to B completed %.2f s in, after the first write to the "
		              "stopped peer failed (%.2f s): held up behind it",
		              i, at[i], at[0]);
	printf("tcp: %d writes to a stopped peer failed %.2f-%.2f s in (deadline 0.5 s), "
	       "the %d to B done by %.2f s\n",
	       NB, at[0], at[2 * NB - 2], NB, at[2 * NB - 1]);
	cast_close(&cs);
}
END_TEST

/*
 * A peer that takes nothing holds up no other client: while client X's
 * writes wait for a stopped mover C (rxm answers EAGAIN for them), client
 * Y of the same mover and shard writes to B, and its batches complete
 * while X's are still out (they fail at the 0.5 s deadline), every one.
 */
START_TEST(test_a_stopped_peer_of_one_client_holds_up_no_other)
{
	struct cast cs;
	struct mvc *y;
	struct mvc_mem sy;
	uint32_t iby, icx;

	cast_open(&cs, 0, 1u << 20, 1u << 20);
	struct mvc *x = cs.x;
	struct mvc_mem sx = cs.sx, db = cs.db;
	ck_assert_int_eq(mvc_connect(&y, A.sock), 0);
	ck_assert_msg(mvc_alloc(y, 1u << 20, &sy) == 0, "%s", mvc_error(y));
	fill(sy.addr, 1u << 20, 41);
	iby = reach(y, cs.ob, db.region);
	ck_assert_int_eq(mvc_write(y, sy.region, 0, iby, 0, 4096), 0);
	submit_ok(y, 1000);
	icx = reach_stopped(x, cs.oc, cs.dc.region);

	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(mvc_write(x, sx.region, 0, icx, (uint64_t)i * 4096, 4096), 0);
		ck_assert_int_eq(mvc_submit(x, (uint64_t)i), 0);
	}
	usleep(20000); /* X's first write refused a few times over */
	/* More than a burst's bytes, so Y stays on the round behind X. */
	uint64_t cookies[16];
	struct mvc_event ye[16];
	for (int i = 0; i < 16; i++) {
		ck_assert_int_eq(
		    mvc_write(y, sy.region, (uint64_t)i << 16, iby, (uint64_t)i << 16, 1u << 16),
		    0);
		ck_assert_int_eq(mvc_submit(y, cookies[i] = (uint64_t)i), 0);
	}
	wait_batches(y, cookies, ye, 16, 30);
	for (int i = 0; i < 16; i++)
		ck_assert_msg(ye[i].status == 0, "%s", ye[i].msg);
	struct mvc_event ev[8];
	int got = mvc_poll(x, ev, 8);
	ck_assert_msg(got == 0 && mvc_inflight(x) == 4,
	              "Y's 16 batches completed after %d of X's 4 to the stopped peer ended: "
	              "held up behind them",
	              got);
	ck_assert(!memcmp(db.addr, sy.addr, 1u << 20));
	mvc_disconnect(y);
	cast_close(&cs);
}
END_TEST

/* Adds writes of 1 KiB to x's batches until n were submitted or its ring
 * stayed full (the shard took no more) for 100 ms; returns the count. */
static int small_writes(struct mvc *x, uint32_t src, uint32_t imp, int n)
{
	int sent = 0, full = 0;

	while (sent < n && full < 5) {
		int r = 0, k;
		for (k = 0; k < 128 && !r; k++)
			r = mvc_write(x, src, (uint64_t)k * 2048, imp, (uint64_t)k * 2048, 1024);
		if (!r)
			r = mvc_submit(x, (uint64_t)sent);
		if (r) {
			ck_assert_msg(r == -EAGAIN, "%s", mvc_error(x));
			mvc_abort(x);
			full++;
			usleep(20000);
			continue;
		}
		sent += k;
	}
	return sent;
}

/*
 * A peer that stopped after its connection was made holds up no other
 * client: its writes stay in the provider's queue (the socket, then rxm's
 * own queue, the same for every peer of the shard), and libfabric cannot
 * take them back. Client X of A writes 1 KiB pieces to mover C, stopped
 * (SIGSTOP) once the two had met, more than that queue holds; client Y of
 * the same shard, attached before the flood (y_late 0) or after it
 * (y_late 1), then writes to B: every batch of Y's completes and lands
 * before any of X's fails at the deadline. Before, X's writes filled the
 * queue, and Y's failed as B's "took no write" at the deadline; and then X's
 * queue, which took every op of the shard's pool, kept Y's descriptors out
 * until X's writes failed. A Y that came after the flood found both full
 * while X was alone.
 */
static void stopped_after_meeting(int y_late)
{
	enum { NY = 16 };
	struct cast cs;
	struct mvc *y;
	struct mvc_mem sy;
	uint64_t cookies[NY];
	struct mvc_event ye[NY];
	uint32_t iby = 0;
	int st;

	cast_open(&cs, 1, 1u << 20, 1u << 20);
	struct mvc *x = cs.x, *ob = cs.ob;
	struct mvc_mem sx = cs.sx, db = cs.db;
	uint32_t icx = reach(x, cs.oc, cs.dc.region);
	ck_assert_int_eq(mvc_write(x, sx.region, 0, icx, 0, 4096), 0);
	submit_ok(x, 1000);
	for (int late = 0; late < 2; late++) {
		if (late != y_late)
			continue;
		if (late) {
			ck_assert_int_eq(kill(C.pid, SIGSTOP), 0);
			ck_assert_int_eq(waitpid(C.pid, &st, WUNTRACED), C.pid);
			/* 24,576 writes: past what the socket takes (a few MiB)
			 * and rxm's queue (2,048), under X's bytes in flight. */
			small_writes(x, sx.region, icx, 24576);
			usleep(100000); /* the shard posts what it can of them */
		}
		ck_assert_int_eq(mvc_connect(&y, A.sock), 0);
		ck_assert_msg(mvc_alloc(y, 1u << 20, &sy) == 0, "%s", mvc_error(y));
		fill(sy.addr, 1u << 20, 43);
		iby = reach(y, ob, db.region);
		ck_assert_int_eq(mvc_write(y, sy.region, 0, iby, 0, 4096), 0);
		submit_ok(y, 1000);
	}
	int nx = 0;
	if (!y_late) {
		ck_assert_int_eq(kill(C.pid, SIGSTOP), 0);
		ck_assert_int_eq(waitpid(C.pid, &st, WUNTRACED), C.pid);
		/* As above; under X's bytes in flight (8 MiB beside Y). */
		nx = small_writes(x, sx.region, icx, 24576);
		usleep(100000);
	}
	uint64_t posted = stat_sum(&A, "\"posted\""), eagain = stat_sum(&A, "\"eagain\"");
	for (int i = 0; i < NY; i++) {
		ck_assert_int_eq(
		    mvc_write(y, sy.region, (uint64_t)i << 16, iby, (uint64_t)i << 16, 1u << 16),
		    0);
		ck_assert_int_eq(mvc_submit(y, cookies[i] = (uint64_t)i), 0);
	}
	wait_batches(y, cookies, ye, NY, 30);
	for (int i = 0; i < NY; i++)
		ck_assert_msg(ye[i].status == 0, "Y's batch %d to B: %s", i, ye[i].msg);
	/* Before X's queued writes failed at the deadline (3 s): not behind them. */
	struct mvc_event xe[4];
	int got = mvc_poll(x, xe, 4);
	ck_assert_msg(got == 0,
	              "Y's batches completed after %d of X's failed (%s): held up behind them", got,
	              got > 0 ? xe[0].msg : "");
	ck_assert(!memcmp(db.addr, sy.addr, (size_t)NY << 16));
	printf("tcp: Y's %d batches to B landed beside %d writes of X to stopped C, Y %s (A "
	       "had posted %llu, refused %llu)\n",
	       NY, nx, y_late ? "attached after them" : "attached before",
	       (unsigned long long)posted, (unsigned long long)eagain);
	mvc_disconnect(y);
	cast_close(&cs);
}

START_TEST(test_a_peer_stopped_after_meeting_holds_up_no_other)
{
	stopped_after_meeting(0);
}
END_TEST

START_TEST(test_a_lone_clients_stopped_peer_holds_up_no_later_one)
{
	stopped_after_meeting(1);
}
END_TEST

/*
 * A peer that stopped after meeting holds up none of its client's writes
 * to other peers either: client X of A writes 6,144 pieces of 1 KiB to C,
 * stopped once they had met (more than C's half of the provider's queue:
 * the rest wait in X's queue), then batches of 64 KiB to B, 16 at once, and
 * of 8 MiB, eight at a time, for as long as its writes to C are out. Its first 16
 * to B complete and land before any write to C fails, and those to C fail
 * at the deadline (3 s) all the same, not later while X keeps B busy.
 * Before, X's writes to B waited behind its first write to C still queued,
 * until it failed.
 */
START_TEST(test_a_stopped_peer_holds_up_none_of_its_clients_other_writes)
{
	enum { NY = 16, NC = 6144 };
	struct cast cs;
	struct mvc_event ev[16];
	int st;

	cast_open(&cs, 1, 8u << 20, 8u << 20);
	struct mvc *x = cs.x;
	struct mvc_mem sx = cs.sx, db = cs.db;
	fill(sx.addr, 8u << 20, 53);
	uint32_t icx = reach(x, cs.oc, cs.dc.region), ibx = reach(x, cs.ob, db.region);
	ck_assert_int_eq(mvc_write(x, sx.region, 0, icx, 0, 4096), 0);
	submit_ok(x, 1u << 30);
	ck_assert_int_eq(mvc_write(x, sx.region, 0, ibx, 0, 4096), 0);
	submit_ok(x, (1u << 30) + 1);
	ck_assert_int_eq(kill(C.pid, SIGSTOP), 0);
	ck_assert_int_eq(waitpid(C.pid, &st, WUNTRACED), C.pid);
	int nc = small_writes(x, sx.region, icx, NC), nbc = (nc + 127) / 128;
	ck_assert_int_eq(nc, NC);
	double t0 = now_s();
	uint64_t nb = 0;
	for (; nb < NY; nb++) {
		ck_assert_int_eq(
		    mvc_write(x, sx.region, (nb % NY) << 16, ibx, (nb % NY) << 16, 1u << 16), 0);
		ck_assert_int_eq(mvc_submit(x, (1u << 20) + nb), 0);
	}
	double b_done = 0, c_first = 0, c_last = 0;
	int b_out = NY, b_ok = 0, c_out = nbc;
	while (c_out > 0) {
		int n = mvc_wait(x, ev, 16, 200);
		ck_assert_int_ge(n, 0);
		ck_assert_msg(now_s() - t0 < 30, "%d batches to C still out after 30 s", c_out);
		for (int k = 0; k < n; k++) {
			if (ev[k].cookie >= 1u << 20) {
				ck_assert_msg(ev[k].status == 0, "X's batch to B: %s", ev[k].msg);
				b_out--;
				if (++b_ok == NY)
					b_done = now_s() - t0;
				continue;
			}
			/* Posted ("no completion") or still queued ("took no write"). */
			ck_assert_msg(ev[k].status == -ETIMEDOUT &&
			                  (strstr(ev[k].msg, "took no write") ||
			                   strstr(ev[k].msg, "no completion from peer")),
			              "X's batch to stopped C: status %d, %s", ev[k].status,
			              ev[k].msg);
			c_last = now_s() - t0;
			if (!c_first)
				c_first = c_last;
			c_out--;
		}
		/* B kept busy while C's are out: batches of 8 MiB, more in
		 * flight than X may have (32 MiB), so that writes to B wait at
		 * the head of X's queue too. */
		for (; b_ok >= NY && b_out < 8 && c_out > 0; nb++, b_out++) {
			ck_assert_int_eq(mvc_write(x, sx.region, 0, ibx, 0, 8u << 20), 0);
			ck_assert_int_eq(mvc_submit(x, (1u << 20) + nb), 0);
		}
	}
	while (b_out > 0) {
		int n = mvc_wait(x, ev, 16, 200);
		ck_assert_int_ge(n, 0);
		for (int k = 0; k < n; k++, b_out--)
			ck_assert_msg(ev[k].status == 0, "X's batch to B: %s", ev[k].msg);
	}
	ck_assert_msg(b_done && b_done < c_first,
	              "X's %d batches to B completed %.2f s in, after its first batch to stopped "
	              "C failed (%.2f s): held up behind it",
	              NY, b_done, c_first);
	ck_assert_msg(c_last < 4.5,
	              "X's last batch to stopped C failed %.2f s in, past 1.5 deadlines, while X "
	              "kept writing to B",
	              c_last);
	ck_assert(!memcmp(db.addr, sx.addr, (size_t)NY << 16));
	printf("tcp: X's %d batches to B done %.3f s in, beside %d writes to stopped C (failed "
	       "%.2f-%.2f s in, %llu batches to B meanwhile)\n",
	       NY, b_done, nc, c_first, c_last, (unsigned long long)nb);
	cast_close(&cs);
}
END_TEST

/*
 * The clients of one uid whose writes wait on a stopped peer hold up no
 * client of another uid. Each client takes ops from the shard's pool up to
 * its share while it can, and keeps them while its writes wait: three
 * clients of root on A each write 1 KiB pieces to mover C, stopped once
 * they had met (the first takes half the pool while alone, the next two
 * most of the rest while the shares are halves and thirds); then a client
 * Y of uid 65534 writes 64 KiB batches to B: every one completes and lands
 * before any of root's fails at the deadline. Before, Y's descriptors found
 * no op until root's writes failed.
 */
#define NX 3

START_TEST(test_a_uids_clients_on_a_stopped_peer_hold_up_no_other_uid)
{
	enum { NY = 16 };
	struct mvc *x[NX], *ob, *oc;
	struct mvc_mem sx[NX], db, dc;
	uint32_t icx[NX];
	int st;

	mover_extra = "--no-host-copy";
	mover_start(&C, "c", 1);
	mover_extra = NULL;
	ck_assert_int_eq(mvc_connect(&ob, B.sock), 0);
	ck_assert_int_eq(mvc_connect(&oc, C.sock), 0);
	ck_assert_msg(mvc_alloc(ob, 1u << 20, &db) == 0, "%s", mvc_error(ob));
	ck_assert_msg(mvc_alloc(oc, 1u << 20, &dc) == 0, "%s", mvc_error(oc));
	for (int i = 0; i < NX; i++) {
		ck_assert_int_eq(mvc_connect(&x[i], A.sock), 0);
		ck_assert_msg(mvc_alloc(x[i], 1u << 20, &sx[i]) == 0, "%s", mvc_error(x[i]));
		icx[i] = reach(x[i], oc, dc.region);
		ck_assert_int_eq(mvc_write(x[i], sx[i].region, 0, icx[i], 0, 4096), 0);
		submit_ok(x[i], 1000);
	}
	ck_assert_int_eq(kill(C.pid, SIGSTOP), 0);
	ck_assert_int_eq(waitpid(C.pid, &st, WUNTRACED), C.pid);
	int nx = 0;
	for (int i = 0; i < NX; i++)
		nx += small_writes(x[i], sx[i].region, icx[i], 24576);
	usleep(100000); /* the shard takes what it can of them */
	uint64_t posted = stat_sum(&A, "\"posted\"") - NX;

	/* Y: a child as uid 65534, which says how its batches went on a pipe. */
	uint8_t addr[MVC_BLOB_MAX], blob[MVC_BLOB_MAX];
	size_t alen = sizeof(addr), blen = sizeof(blob);
	ck_assert_int_eq(mvc_address(ob, addr, &alen), 0);
	ck_assert_int_eq(mvc_region_blob(ob, db.region, blob, &blen), 0);
	int pfd[2];
	ck_assert_int_eq(pipe(pfd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char why[512] = "";
		struct mvc *y;
		struct mvc_mem sy;
		uint32_t peer, imp;
		if (setgid(65534) || setuid(65534) || mvc_connect(&y, A.sock) ||
		    mvc_alloc(y, (size_t)NY << 16, &sy) || mvc_peer_add(y, addr, alen, &peer) ||
		    mvc_import(y, peer, blob, blen, &imp)) {
			snprintf(why, sizeof(why), "uid 65534's client could not start");
		} else {
			fill(sy.addr, (size_t)NY << 16, 47);
			double t0 = now_s();
			for (int i = 0; i < NY && !why[0]; i++)
				if (mvc_write(y, sy.region, (uint64_t)i << 16, imp,
				              (uint64_t)i << 16, 1u << 16) ||
				    mvc_submit(y, (uint64_t)i))
					snprintf(why, sizeof(why), "submit: %s", mvc_error(y));
			for (int left = NY; left > 0 && !why[0];) {
				struct mvc_event ev;
				int n = mvc_wait(y, &ev, 1, 200);
				if (n < 0 || now_s() - t0 > 20)
					snprintf(why, sizeof(why),
					         "%d of Y's batches still out after %.1f s", left,
					         now_s() - t0);
				else if (n && ev.status)
					snprintf(
					    why, sizeof(why), "Y's batch %llu to B, %.2f s in: %s",
					    (unsigned long long)ev.cookie, now_s() - t0, ev.msg);
				else
					left -= n;
			}
		}
		if (write(pfd[1], why, sizeof(why)) != (ssize_t)sizeof(why))
			_exit(2);
		_exit(0);
	}
	char why[512];
	ck_assert_int_eq(read(pfd[0], why, sizeof(why)), (ssize_t)sizeof(why));
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(!why[0], "%s (A had posted %llu of root's %d writes to stopped C)", why,
	              (unsigned long long)posted, nx);
	/* Before root's writes failed at the deadline (3 s): not behind them. */
	for (int i = 0; i < NX; i++) {
		struct mvc_event xe[4];
		int got = mvc_poll(x[i], xe, 4);
		ck_assert_msg(got == 0,
		              "Y's batches completed after %d of root's failed (%s): held up "
		              "behind them",
		              got, got > 0 ? xe[0].msg : "");
	}
	struct mvc_mem want;
	ck_assert_int_eq(mvc_alloc(ob, (size_t)NY << 16, &want), 0);
	fill(want.addr, (size_t)NY << 16, 47);
	ck_assert(!memcmp(db.addr, want.addr, (size_t)NY << 16));
	printf("tcp: uid 65534's %d batches to B landed beside %d writes of %d clients of root to "
	       "stopped C (A had posted %llu)\n",
	       NY, nx, NX, (unsigned long long)posted);
	kill(C.pid, SIGCONT);
	for (int i = 0; i < NX; i++)
		mvc_disconnect(x[i]);
	mvc_disconnect(oc);
	mvc_disconnect(ob);
}
END_TEST

/* Movers A (on the fabric) and B, one shard each, the tests' deadline (3 s). */
static void setup_tcp1_fabric(void)
{
	prov = "tcp";
	mover_extra = "--no-host-copy";
	mover_launch(&A, "a", 1);
	mover_extra = NULL;
	mover_launch(&B, "b", 1);
	movers_listening();
}

/* Movers A (on the fabric, any uid) and B, one shard each. */
static void setup_tcp1_uids(void)
{
	prov = "tcp";
	mover_extra = "--no-host-copy";
	mover_extra2 = "--allow-any-uid";
	mover_launch(&A, "a", 1);
	mover_extra = mover_extra2 = NULL;
	mover_launch(&B, "b", 1);
	movers_listening();
	ck_assert_int_eq(chmod(A.sock, 0666), 0);
}

int main(void)
{
	Suite *s = suite_create("stopped_peer");
	TCase *tc = tcase_create("deadline_tcp");

	tcase_add_checked_fixture(tc, setup_tcp_deadline, teardown);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_queued_writes_outlive_the_deadline_while_they_move);
	tcase_add_test(tc, test_writes_to_a_stopped_peer_fail_together);
	tcase_add_test(tc, test_a_stopped_peer_of_one_client_holds_up_no_other);
	suite_add_tcase(s, tc);
	tc = tcase_create("stopped_tcp");
	tcase_add_checked_fixture(tc, setup_tcp1_fabric, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_a_peer_stopped_after_meeting_holds_up_no_other);
	tcase_add_test(tc, test_a_lone_clients_stopped_peer_holds_up_no_later_one);
	tcase_add_test(tc, test_a_stopped_peer_holds_up_none_of_its_clients_other_writes);
	suite_add_tcase(s, tc);
	tc = tcase_create("stopped_uids");
	tcase_add_checked_fixture(tc, setup_tcp1_uids, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_a_uids_clients_on_a_stopped_peer_hold_up_no_other_uid);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
