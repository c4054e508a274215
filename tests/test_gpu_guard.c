/* SPDX-License-Identifier: MIT */
/*
 * GPU memory under bad input and quotas, on a machine with a CUDA device
 * (skipped with the reason elsewhere): a landing message from a peer whose
 * header lies about its length cuts that peer off and no one else (sent
 * from a raw libfabric endpoint, since no mover would), a landing peer
 * that stops acking holds up the writes into it and no others, a peer that
 * takes nothing holds no bounce chunk another client needs (and writes
 * waiting for a chunk outlive the deadline while their peer moves, and a
 * client's small one goes beside another's backlog), and freed GPU
 * memory the mover still holds through its quarantine counts against its
 * client's and its uid's quotas. The paths themselves are test_gpu.c; the
 * bounce chunks between uids, and all of them held, test_gpu_chunks.c.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>

#include "mover.h" /* the raw fabric endpoint of the bad-input test */
#include "mv_wire.h"
#include "mvtest.h"

#ifdef MV_HAVE_CUDA
#include "gpu_util.h"
#include "mvflood.h"

#include <rdma/fi_endpoint.h>

/* Sends one message from a fresh raw endpoint of the movers' provider to
 * a shard address; 0 once the provider says it went, else -errno. */
static int raw_send(const void *to_addr, const void *buf, size_t len)
{
	struct mv_fabric f;
	struct fi_context2 ctx;
	fi_addr_t to;
	ssize_t ret;

	ck_assert_int_eq(mv_fabric_open(&f, prov, "lo", 0), 0);
	ck_assert_int_eq(mv_fabric_av_insert(&f, to_addr, &to), 0);
	double end = now_s() + 5;
	while ((ret = fi_send(f.ep, buf, len, NULL, to, &ctx)) == -FI_EAGAIN && now_s() < end) {
		struct fi_cq_data_entry e;
		(void)fi_cq_read(f.cq, &e, 1); /* progress */
	}
	for (; !ret && now_s() < end;) {
		struct fi_cq_data_entry e;
		ssize_t n = fi_cq_read(f.cq, &e, 1);
		if (n == 1)
			break;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			fi_cq_readerr(f.cq, &err, 0);
			ret = -(ssize_t)(err.err ? err.err : EIO);
		}
	}
	usleep(100000); /* let the provider hand it over before the close */
	mv_fabric_close(&f);
	return (int)ret;
}

/*
 * Bad input from a peer (issue 17): a landing message whose header names a
 * peer of the receiver (its mover id and its shard's fabric address, as
 * that peer's address blob has them) with a length that is not the
 * message's is what no mover sends. The receiver cuts the peer off: a log
 * line with the reason, and what its clients expect of that peer fails
 * with MVC_CAUSE_PEER_BAD; other peers carry on (a third mover's write and
 * immediate land). The test sends the message from a raw endpoint, since
 * no mover would. Landing buffers are posted only by a mover with a GPU
 * region, so this runs where CUDA does.
 */
START_TEST(test_bad_landing_header_cuts_its_peer_off)
{
	struct gpair p;
	struct mvc_mem dst, hsrc, hdst;
	struct mv_addr_blob ab, bb;
	struct mv_region_blob rb;
	struct mvc_event ev;
	size_t len, blen;
	uint32_t pa;
	char line[1024];

	gpair_open(&p);
	CUdeviceptr d = dev_alloc(1 << 20);
	ck_assert_msg(mvc_register_cuda(p.b, (void *)d, 1 << 20, &dst) == 0, "%s", mvc_error(p.b));
	len = sizeof(ab);
	ck_assert_int_eq(mvc_address(p.a, &ab, &len), 0);
	ck_assert_msg(mvc_peer_add(p.b, &ab, len, &pa) == 0, "%s", mvc_error(p.b));
	ck_assert_int_eq(mvc_imm_expect_from(p.b, pa, 0x51, 1, 51), 0);
	blen = sizeof(bb);
	ck_assert_int_eq(mvc_address(p.b, &bb, &blen), 0);
	len = sizeof(rb);
	ck_assert_int_eq(mvc_region_blob(p.b, dst.region, &rb, &len), 0);

	static uint8_t msg[MV_LAND_HDR + 64];
	struct mv_land_hdr h = {.magic = MV_LAND_MAGIC,
	                        .region = rb.region,
	                        .len = 100, /* 64 come */
	                        .mover_id = ab.mover_id,
	                        .shard = 0,
	                        .addrlen = (uint16_t)ab.addrlen};
	memcpy(h.addr, ab.addr[0], ab.addrlen);
	memcpy(msg, &h, sizeof(h));
	double t0 = now_s();
	ck_assert_int_eq(raw_send(bb.addr[0], msg, sizeof(msg)), 0);

	int failed = 0;
	while (!failed && now_s() - t0 < 10) {
		int n = mvc_wait(p.b, &ev, 1, 100);
		ck_assert_int_ge(n, 0);
		if (n && ev.type == MVC_EV_IMM_COUNT && ev.cookie == 51) {
			ck_assert_int_ne(ev.status, 0);
			ck_assert_int_eq(ev.cause, MVC_CAUSE_PEER_BAD);
			failed = 1;
		}
	}
	ck_assert_msg(failed, "the expectation of the peer that sent garbage did not fail in 10 s");
	printf("bad landing header: the expectation failed after %.0f ms: %s\n",
	       (now_s() - t0) * 1e3, ev.msg);
	ck_assert_int_ge(log_grep(&B, "landing header says 100 bytes; 64 came", line, sizeof(line)),
	                 1);
	ck_assert_msg(strstr(line, "cut off"), "%s", line);

	/* Everyone else carries on: a third mover's write into B lands. */
	mover_start(&C, "c", 2);
	struct mvc *c;
	uint32_t pb, imp;
	uint8_t blob[MVC_BLOB_MAX];
	ck_assert_int_eq(mvc_connect(&c, C.sock), 0);
	ck_assert_int_eq(mvc_alloc(c, 4096, &hsrc), 0);
	ck_assert_int_eq(mvc_alloc(p.b, 4096, &hdst), 0);
	fill(hsrc.addr, 4096, 52);
	ck_assert_msg(mvc_peer_add(c, &bb, blen, &pb) == 0, "%s", mvc_error(c));
	len = sizeof(blob);
	ck_assert_int_eq(mvc_region_blob(p.b, hdst.region, blob, &len), 0);
	ck_assert_msg(mvc_import(c, pb, blob, len, &imp) == 0, "%s", mvc_error(c));
	ck_assert_int_eq(mvc_write(c, hsrc.region, 0, imp, 0, 4096), 0);
	landed(c, imp, p.b, 52);
	ck_assert(!memcmp(hsrc.addr, hdst.addr, 4096));
	mvc_disconnect(c);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
}
END_TEST

/* Movers A, B and C, one shard each (A's clients share its shard), GPU
 * writes into a peer as landing messages. */
static void movers_landing1(void)
{
	prov = "tcp";
	mover_launch(&A, "a", 1);
	mover_launch(&B, "b", 1);
	mover_launch(&C, "c", 1);
	movers_listening();
}

static void landing3_setup(void)
{
	mover_extra = "--no-gpu-copy"; /* one host, taken as three */
	mover_extra2 = "--gpu-path=staged";
	gpu_setup_on(movers_landing1);
}

/*
 * A landing peer that stops acking holds up no other client (issue 15):
 * client X of A writes into B's GPU memory by landing messages, and B
 * stops (SIGSTOP) once they flow, so that X's next batch (eight writes, a
 * message each) fills the messages B may have in flight with ones no one
 * acks. Client Y of the
 * same shard then writes into C, into host memory and by landing messages
 * into GPU memory: every batch of Y's lands while X's write is still out.
 * Before, the shard had one landing window for all its peers, and X at the
 * round's head ended every burst, so Y waited until X's messages timed out.
 */
START_TEST(test_a_stopped_landing_peer_holds_up_no_other_client)
{
	enum { NY = 8 };
	const size_t n = 1u << 20, yn = 8u << 20;
	struct mvc *x, *y, *ob, *oc;
	struct mvc_mem sx, sy, gb, gc, hc;
	struct mvc_event ev[NY];
	uint64_t cookies[NY];
	uint8_t *got = malloc(yn);
	int st;

	ck_assert_int_eq(mvc_connect(&x, A.sock), 0);
	ck_assert_int_eq(mvc_connect(&y, A.sock), 0);
	ck_assert_int_eq(mvc_connect(&ob, B.sock), 0);
	ck_assert_int_eq(mvc_connect(&oc, C.sock), 0);
	CUdeviceptr db = dev_alloc(n), dc = dev_alloc(yn);
	ck_assert_int_eq(cu->MemsetD8(dc, 0, yn), CUDA_SUCCESS);
	ck_assert_msg(mvc_register_cuda(ob, (void *)db, n, &gb) == 0, "%s", mvc_error(ob));
	ck_assert_msg(mvc_register_cuda(oc, (void *)dc, yn, &gc) == 0, "%s", mvc_error(oc));
	ck_assert_msg(mvc_alloc(oc, 1u << 20, &hc) == 0, "%s", mvc_error(oc));
	ck_assert_msg(mvc_alloc(x, n, &sx) == 0, "%s", mvc_error(x));
	ck_assert_msg(mvc_alloc(y, yn, &sy) == 0, "%s", mvc_error(y));
	fill(sx.addr, n, 61);
	fill(sy.addr, yn, 62);
	uint32_t ixb = reach(x, ob, gb.region);
	uint32_t iyg = reach(y, oc, gc.region), iyh = reach(y, oc, hc.region);
	/* Both peers met and their landing messages acked. */
	ck_assert_int_eq(mvc_write(x, sx.region, 0, ixb, 0, 1u << 20), 0);
	submit_ok(x, 100);
	ck_assert_int_eq(mvc_write(y, sy.region, 0, iyg, 0, 1u << 20), 0);
	submit_ok(y, 100);

	ck_assert_int_eq(kill(B.pid, SIGSTOP), 0);
	ck_assert_int_eq(waitpid(B.pid, &st, WUNTRACED), B.pid);
	/* Small messages, so that X's bytes in flight stay under its share's
	 * cap while the window is full (a cap passes the turn on by itself). */
	for (uint64_t k = 0; k < 8; k++)
		ck_assert_int_eq(mvc_write(x, sx.region, k << 17, ixb, k << 17, 1u << 16), 0);
	ck_assert_int_eq(mvc_submit(x, 1), 0);
	usleep(50000); /* X's first messages out, the window into B full */
	double t0 = now_s();
	for (int i = 0; i < NY; i++) {
		/* 1 MiB into C's GPU memory, and 64 KiB into its host memory */
		ck_assert_int_eq(
		    mvc_write(y, sy.region, (uint64_t)i << 20, iyg, (uint64_t)i << 20, 1u << 20),
		    0);
		ck_assert_int_eq(
		    mvc_write(y, sy.region, (uint64_t)i << 16, iyh, (uint64_t)i << 16, 1u << 16),
		    0);
		ck_assert_int_eq(mvc_submit(y, cookies[i] = 200 + (uint64_t)i), 0);
	}
	wait_batches(y, cookies, ev, NY, 30);
	double took = now_s() - t0;
	for (int i = 0; i < NY; i++)
		ck_assert_msg(ev[i].status == 0, "Y's batch %d: %s", i, ev[i].msg);
	struct mvc_event xe[2];
	int xn = mvc_poll(x, xe, 2);
	ck_assert_msg(xn == 0 && mvc_inflight(x) == 1,
	              "Y's %d batches completed in %.2f s, after X's write into the stopped "
	              "peer ended (%s): held up behind it",
	              NY, took, xn > 0 ? xe[0].msg : "gone");
	from_dev(got, dc, yn);
	ck_assert_msg(!memcmp(got, sy.addr, yn), "C's GPU memory differs from what Y wrote");
	ck_assert_msg(!memcmp(hc.addr, sy.addr, (size_t)NY << 16),
	              "C's host memory differs from what Y wrote");
	printf("landing: Y's %d batches into C done in %.3f s while X's into stopped B waits\n", NY,
	       took);

	kill(B.pid, SIGCONT);
	struct mvc_event e = wait_batch(x, 1, 20); /* acked now, or timed out: either ends */
	printf("landing: X's write into B once it went on: %s\n", e.status ? e.msg : "done");
	mvc_disconnect(x);
	mvc_disconnect(y);
	mvc_disconnect(ob);
	mvc_disconnect(oc);
	cu->MemFree(db);
	cu->MemFree(dc);
	free(got);
}
END_TEST

/*
 * A peer that takes nothing holds no bounce chunk another client needs:
 * client X of A, alone on it, writes from its GPU memory to B's host
 * memory, staged through A's bounce chunks (8, each held until its write
 * completes), and B stops (SIGSTOP) once the two had met, so X's writes
 * stop completing once its socket is full. Client Y comes to A then and
 * writes from its GPU memory to C: every batch of Y's lands before any of
 * X's writes times out. Before, X's writes took every chunk (the share
 * applied only beside another client, and none was there when X took
 * them), and Y's waited for a free one for as long as B stayed stopped.
 */
START_TEST(test_a_stopped_peer_holds_no_chunk_of_another_client)
{
	enum { NY = 4 };
	const size_t xn = 40u << 20, yn = 4u << 20; /* X: ten chunks */
	struct mvc *x, *y, *ob, *oc;
	struct mvc_mem gx, gy, hb, hc;
	struct mvc_event ev[NY];
	uint64_t cookies[NY];
	uint8_t *want = malloc(yn);
	int st;

	ck_assert_int_eq(mvc_connect(&x, A.sock), 0);
	ck_assert_int_eq(mvc_connect(&ob, B.sock), 0);
	ck_assert_int_eq(mvc_connect(&oc, C.sock), 0);
	CUdeviceptr dx = dev_alloc(xn), dy = dev_alloc(yn);
	fill(want, yn, 71);
	to_dev(dy, want, yn);
	ck_assert_msg(mvc_register_cuda(x, (void *)dx, xn, &gx) == 0, "%s", mvc_error(x));
	ck_assert_msg(mvc_alloc(ob, xn, &hb) == 0, "%s", mvc_error(ob));
	ck_assert_msg(mvc_alloc(oc, (size_t)NY * yn, &hc) == 0, "%s", mvc_error(oc));
	uint32_t ixb = reach(x, ob, hb.region);
	ck_assert_int_eq(mvc_write(x, gx.region, 0, ixb, 0, 1u << 20), 0);
	submit_ok(x, 100);

	ck_assert_int_eq(kill(B.pid, SIGSTOP), 0);
	ck_assert_int_eq(waitpid(B.pid, &st, WUNTRACED), B.pid);
	ck_assert_int_eq(mvc_write(x, gx.region, 0, ixb, 0, xn), 0);
	ck_assert_int_eq(mvc_submit(x, 1), 0);
	usleep(200000); /* X's chunks copied and written, its socket full */
	ck_assert_int_eq(mvc_connect(&y, A.sock), 0);
	ck_assert_msg(mvc_register_cuda(y, (void *)dy, yn, &gy) == 0, "%s", mvc_error(y));
	uint32_t iyc = reach(y, oc, hc.region);
	for (int i = 0; i < NY; i++) {
		ck_assert_int_eq(mvc_write(y, gy.region, 0, iyc, (uint64_t)i * yn, yn), 0);
		ck_assert_int_eq(mvc_submit(y, cookies[i] = 200 + (uint64_t)i), 0);
	}
	double t0 = now_s();
	wait_batches(y, cookies, ev, NY, 20);
	double took = now_s() - t0;
	/* Before any of X's writes timed out (3 s): not behind them. The
	 * counters are published every few ms; wait for them. */
	usleep(200000);
	uint64_t tmo = stat_sum(&A, "\"timeouts\"");
	ck_assert_msg(tmo == 0,
	              "Y's batches completed %.2f s in, after %llu of X's writes timed out: "
	              "held up behind them",
	              took, (unsigned long long)tmo);
	for (int i = 0; i < NY; i++) {
		ck_assert_msg(ev[i].status == 0, "Y's batch %d: %s", i, ev[i].msg);
		ck_assert_msg(!memcmp((uint8_t *)hc.addr + (size_t)i * yn, want, yn),
		              "Y's batch %d: C's memory differs", i);
	}
	struct mvc_event xe;
	int xn_done = mvc_poll(x, &xe, 1);
	printf("staged: Y's %d batches into C landed in %.3f s; X's into stopped B %s\n", NY, took,
	       xn_done ? "had ended" : "still out");
	kill(B.pid, SIGCONT);
	xe = wait_batch(x, 1, 20); /* went on, or failed at the deadline: either ends */
	mvc_disconnect(x);
	mvc_disconnect(y);
	mvc_disconnect(ob);
	mvc_disconnect(oc);
	cu->MemFree(dx);
	cu->MemFree(dy);
	free(want);
}
END_TEST

/* As landing3_setup, and A fails a write whose peer took none in 0.5 s. */
static void landing3_short_setup(void)
{
	mover_extra3 = "--op-timeout=0.5";
	landing3_setup();
	mover_extra3 = NULL;
}

/*
 * A staged backlog outlives the deadline while it moves: client X of A
 * writes 6 GiB from its GPU memory to B's host memory in one batch, alone
 * and then with a second client attached (X's writes hold half the bounce
 * chunks, one peer's share, and the rest wait for them), with a 0.5 s
 * deadline; the batch takes longer than that and every write completes.
 * Before, a write waiting for a chunk
 * counted its deadline from its first wait, and the tail of the backlog
 * failed as "took no write" while B took every write.
 */
START_TEST(test_a_staged_backlog_outlives_the_deadline_while_it_moves)
{
	const size_t n = 1u << 30;
	enum { REPS = 6 };
	struct mvc *x, *y, *ob;
	struct mvc_mem gx, hb;
	uint8_t *want = malloc(n);

	ck_assert_int_eq(mvc_connect(&x, A.sock), 0);
	ck_assert_int_eq(mvc_connect(&ob, B.sock), 0);
	CUdeviceptr dx = dev_alloc(n);
	fill(want, n, 81);
	to_dev(dx, want, n);
	ck_assert_msg(mvc_register_cuda(x, (void *)dx, n, &gx) == 0, "%s", mvc_error(x));
	ck_assert_msg(mvc_alloc(ob, n, &hb) == 0, "%s", mvc_error(ob));
	uint32_t ixb = reach(x, ob, hb.region);
	double took[2];
	/* Alone, then beside an idle client. */
	for (int k = 0; k < 2; k++) {
		if (k)
			ck_assert_int_eq(mvc_connect(&y, A.sock), 0);
		for (int i = 0; i < REPS; i++)
			ck_assert_int_eq(mvc_write(x, gx.region, 0, ixb, 0, n), 0);
		double t0 = now_s();
		ck_assert_int_eq(mvc_submit(x, 1 + (uint64_t)k), 0);
		struct mvc_event e = wait_batch(x, 1 + (uint64_t)k, 60);
		took[k] = now_s() - t0;
		ck_assert_msg(e.status == 0, "%d GiB staged, %s, %.2f s in: %s", REPS,
		              k ? "beside an idle client" : "alone", took[k], e.msg);
	}
	ck_assert_msg(!memcmp(hb.addr, want, n), "B's memory differs from X's");
	printf("staged: %d GiB alone in %.2f s, beside an idle client in %.2f s, deadline 0.5 s\n",
	       REPS, took[0], took[1]);
	mvc_disconnect(x);
	mvc_disconnect(y);
	mvc_disconnect(ob);
	cu->MemFree(dx);
	free(want);
}
END_TEST

/*
 * A client's small staged write goes beside another client's staged
 * backlog, not behind it: client X of A writes 6 GiB from its GPU memory
 * to B in one batch; 100 ms later client Y of the same shard writes 4 MiB
 * from its GPU memory to B, and its batch completes while most of X's
 * bytes are still to go (A's byte counters, which both clients' writes
 * add to). Before, the shard's staged writes took the bounce chunks in one
 * queue, and Y's waited for all of X's (1.3-1.9 s on the H100).
 */
START_TEST(test_a_small_staged_write_goes_beside_a_staged_backlog)
{
	const size_t n = 1u << 30, yn = 4u << 20;
	enum { REPS = 6 };
	struct mvc *x, *y, *ob;
	struct mvc_mem gx, gy, hb;

	ck_assert_int_eq(mvc_connect(&x, A.sock), 0);
	ck_assert_int_eq(mvc_connect(&y, A.sock), 0);
	ck_assert_int_eq(mvc_connect(&ob, B.sock), 0);
	CUdeviceptr dx = dev_alloc(n), dy = dev_alloc(yn);
	ck_assert_int_eq(cu->MemsetD8(dx, 0x5a, n), CUDA_SUCCESS);
	ck_assert_int_eq(cu->MemsetD8(dy, 0xa5, yn), CUDA_SUCCESS);
	ck_assert_msg(mvc_register_cuda(x, (void *)dx, n, &gx) == 0, "%s", mvc_error(x));
	ck_assert_msg(mvc_register_cuda(y, (void *)dy, yn, &gy) == 0, "%s", mvc_error(y));
	ck_assert_msg(mvc_alloc(ob, n + yn, &hb) == 0, "%s", mvc_error(ob));
	uint32_t ixb = reach(x, ob, hb.region), iyb = reach(y, ob, hb.region);
	ck_assert_int_eq(mvc_write(y, gy.region, 0, iyb, n, yn), 0);
	submit_ok(y, 50);
	usleep(50000); /* the counters published */
	uint64_t base = stat_sum(&A, "\"bytes\"");

	for (int i = 0; i < REPS; i++)
		ck_assert_int_eq(mvc_write(x, gx.region, 0, ixb, 0, n), 0);
	ck_assert_int_eq(mvc_submit(x, 1), 0);
	usleep(100000);
	memset((uint8_t *)hb.addr + n, 0, yn);
	double t0 = now_s();
	ck_assert_int_eq(mvc_write(y, gy.region, 0, iyb, n, yn), 0);
	submit_ok(y, 51);
	double took = now_s() - t0;
	uint64_t at_y = stat_sum(&A, "\"bytes\"");
	struct mvc_event e = wait_batch(x, 1, 60);
	ck_assert_msg(e.status == 0, "X's batch: %s", e.msg);
	usleep(50000);
	uint64_t at_end = stat_sum(&A, "\"bytes\"");
	double part = (double)(at_y - base) / (double)(at_end - base);
	printf("staged: Y's 4 MiB beside X's %d GiB in %.3f s, when %.0f%% of the bytes had "
	       "moved\n",
	       REPS, took, 100 * part);
	ck_assert_msg(part < 0.5,
	              "Y's write completed %.2f s in, once %.0f%% of X's bytes had "
	              "moved: behind X's backlog",
	              took, 100 * part);
	const uint8_t *got = (const uint8_t *)hb.addr + n;
	for (size_t i = 0; i < yn; i++)
		ck_assert_msg(got[i] == 0xa5, "Y's byte %zu is %#x", i, got[i]);
	mvc_disconnect(x);
	mvc_disconnect(y);
	mvc_disconnect(ob);
	cu->MemFree(dx);
	cu->MemFree(dy);
}
END_TEST

/* ---- quotas: freed GPU memory the mover still holds ---- */

static void quota_setup(void)
{
	mover_extra = "--quota-client-bytes=3M";
	mover_extra2 = "--quota-uid-bytes=4M";
	gpu_setup();
	mover_extra = mover_extra2 = NULL;
}

/* A freed GPU region stays mapped by the mover through its quarantine, its
 * device memory allocated whatever the client's free, so it still counts
 * against its client's and its uid's registered bytes, the client gone or
 * not: registering and freeing in a loop holds no more than the quota. */
START_TEST(test_freed_gpu_region_counts_against_quota_until_reaped)
{
	const size_t mb = 1u << 20;
	CUdeviceptr p = dev_alloc(2 * mb), p2 = dev_alloc(2 * mb);
	struct mvc_mem g, g2, h;
	struct mvc *c, *d;

	ck_assert_int_eq(mvc_connect(&c, A.sock), 0);
	ck_assert_msg(mvc_register_cuda(c, (void *)p, 2 * mb, &g) == 0, "%s", mvc_error(c));
	ck_assert_int_eq(mvc_free(c, &g), 0);
	/* Its 2 MiB in quarantine and 2 more pass the client's 3. */
	ck_assert_int_eq(mvc_register_cuda(c, (void *)p2, 2 * mb, &g2), -EDQUOT);
	ck_assert_msg(strstr(mvc_error(c), "quota_client_bytes is 3 MiB: this client holds 2 MiB "
	                                   "registered (2 MiB of it freed GPU memory, kept up to "),
	              "%s", mvc_error(c));
	/* A megabyte of host memory fits beside them. */
	ck_assert_msg(mvc_alloc(c, mb, &h) == 0, "%s", mvc_error(c));
	ck_assert_int_eq(mvc_free(c, &h), 0);
	mvc_disconnect(c);

	/* Gone, the client's quarantined 2 MiB still count against its uid's
	 * 4: a new client registers 2 MiB, and then not one more. */
	ck_assert_int_eq(mvc_connect(&d, A.sock), 0);
	ck_assert_msg(mvc_register_cuda(d, (void *)p2, 2 * mb, &g2) == 0, "%s", mvc_error(d));
	ck_assert_int_eq(mvc_alloc(d, mb, &h), -EDQUOT);
	ck_assert_msg(
	    strstr(mvc_error(d), "quota_uid_bytes is 4 MiB: uid ") &&
	        strstr(mvc_error(d), " holds 4 MiB registered (2 MiB of it freed GPU memory"),
	    "%s", mvc_error(d));
	mvc_disconnect(d);
	cu->MemFree(p);
	cu->MemFree(p2);
}
END_TEST

int main(void)
{
	char why[256];

	if (!gpu_usable(why, sizeof(why))) {
		printf("test_gpu_guard: SKIPPED: %s\n", why);
		return 0;
	}
	Suite *s = suite_create("gpu_guard");
	TCase *tl = tcase_create("landing");
	tcase_add_checked_fixture(tl, landing_setup, teardown);
	tcase_set_timeout(tl, 120);
	tcase_add_test(tl, test_bad_landing_header_cuts_its_peer_off);
	suite_add_tcase(s, tl);
	TCase *t3 = tcase_create("landing_three");
	tcase_add_checked_fixture(t3, landing3_setup, teardown);
	tcase_set_timeout(t3, 120);
	tcase_add_test(t3, test_a_stopped_landing_peer_holds_up_no_other_client);
	tcase_add_test(t3, test_a_stopped_peer_holds_no_chunk_of_another_client);
	suite_add_tcase(s, t3);
	TCase *t4 = tcase_create("landing_deadline");
	tcase_add_checked_fixture(t4, landing3_short_setup, teardown);
	tcase_set_timeout(t4, 120);
	tcase_add_test(t4, test_a_staged_backlog_outlives_the_deadline_while_it_moves);
	tcase_add_test(t4, test_a_small_staged_write_goes_beside_a_staged_backlog);
	suite_add_tcase(s, t4);
	TCase *tq = tcase_create("quota");
	tcase_add_checked_fixture(tq, quota_setup, teardown);
	tcase_set_timeout(tq, 60);
	tcase_add_test(tq, test_freed_gpu_region_counts_against_quota_until_reaped);
	suite_add_tcase(s, tq);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

#else
int main(void)
{
	printf("test_gpu_guard: SKIPPED: built without the CUDA toolkit (no cuda.h)\n");
	return 0;
}
#endif
