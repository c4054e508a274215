/* SPDX-License-Identifier: MIT */
/*
 * A mover restarted under a running client: the client's batches in flight
 * fail once each with MVC_CAUSE_MOVER_GONE, libmvc reconnects to the new
 * mover on its own, registers the same memory again, re-adds the peer and
 * the import, and the application's region id and import handle keep
 * working; one MVC_EV_MOVER_BACK says so. Every batch gets exactly one
 * event, and every one that succeeded wrote its stamped slot at the target.
 * Over tcp and shm, by SIGKILL and SIGTERM. Also:
 * MVC_OPT_NO_RECONNECT keeps the old behaviour.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>

#include "mvtest.h"

#define SLOT   4096u
#define NBATCH 400u
#define WINDOW 8u

static void stamp(uint8_t *p, uint64_t k)
{
	fill(p, SLOT, k + 1);
	memcpy(p, &k, sizeof(k));
}

static void kill_a(int sig)
{
	int status;

	kill(A.pid, sig);
	waitpid(A.pid, &status, 0);
	shm_cleanup(A.pid);
	A.pid = 0;
}

/*
 * Batches of one 4 KiB slot each, WINDOW in flight; after `at` of them
 * completed the sending mover is stopped with sig and a new one started on
 * its socket. Returns once all NBATCH were submitted and each reported
 * once; *failed: how many failed.
 */
static void run_across_restart(int sig, uint32_t at, uint32_t *failed)
{
	struct pair p;
	uint8_t *seen = calloc(NBATCH, 1);
	uint32_t submitted = 0, reported = 0, ok = 0, backs = 0, inflight = 0;
	int restarted = 0;

	ck_assert_ptr_nonnull(seen);
	pair_open(&p, (uint64_t)NBATCH * SLOT, (uint64_t)NBATCH * SLOT);
	uint32_t region = p.src.region, imp = p.imp;
	for (uint32_t k = 0; k < NBATCH; k++)
		stamp((uint8_t *)p.src.addr + (uint64_t)k * SLOT, k);
	*failed = 0;
	double end = now_s() + 60;
	while ((submitted < NBATCH || reported < submitted) && now_s() < end) {
		while (submitted < NBATCH && inflight < WINDOW) {
			uint64_t o = (uint64_t)submitted * SLOT;
			int r = mvc_write(p.a, region, o, imp, o, SLOT);
			if (r == -EPIPE)
				break; /* gone: wait for it to come back */
			ck_assert_msg(r == 0, "write: %s", mvc_error(p.a));
			ck_assert_msg(mvc_submit(p.a, submitted) == 0, "submit: %s",
			              mvc_error(p.a));
			submitted++;
			inflight++;
		}
		if (!restarted && reported >= at) {
			kill_a(sig);
			mover_start(&A, "a", 2);
			restarted = 1;
		}
		struct mvc_event ev[16];
		int n = mvc_wait(p.a, ev, 16, 100);
		if (n == -EPIPE)
			continue;
		ck_assert_msg(n >= 0, "mvc_wait: %d %s", n, mvc_error(p.a));
		for (int i = 0; i < n; i++) {
			if (ev[i].type == MVC_EV_MOVER_BACK) {
				ck_assert_msg(ev[i].status == 0, "back: %s", ev[i].msg);
				ck_assert_uint_eq(ev[i].count, 3); /* region, peer, import */
				backs++;
				continue;
			}
			ck_assert_int_eq(ev[i].type, MVC_EV_BATCH);
			ck_assert_uint_lt(ev[i].cookie, submitted);
			ck_assert_msg(!seen[ev[i].cookie], "batch %llu reported twice",
			              (unsigned long long)ev[i].cookie);
			seen[ev[i].cookie] = 1 + (ev[i].status != 0);
			reported++;
			inflight--;
			if (ev[i].status == 0) {
				ok++;
				continue;
			}
			ck_assert_msg(ev[i].cause == MVC_CAUSE_MOVER_GONE, "batch %llu: %s",
			              (unsigned long long)ev[i].cookie, ev[i].msg);
			(*failed)++;
		}
	}
	ck_assert_msg(submitted == NBATCH && reported == NBATCH,
	              "%u submitted, %u reported of %u (back %u)", submitted, reported, NBATCH,
	              backs);
	ck_assert_uint_eq(backs, 1);
	ck_assert_uint_eq(ok + *failed, NBATCH);
	/* Only the window in flight at the restart may fail. */
	ck_assert_uint_le(*failed, WINDOW);
	/* Every batch that succeeded put its slot in place. */
	for (uint32_t k = 0; k < NBATCH; k++)
		if (seen[k] == 1)
			ck_assert_msg(!memcmp((uint8_t *)p.dst.addr + (uint64_t)k * SLOT,
			                      (uint8_t *)p.src.addr + (uint64_t)k * SLOT, SLOT),
			              "slot %u: batch succeeded, bytes differ", k);
	/* The ids still work for new memory after the restart, too. */
	struct mvc_mem m2;
	ck_assert_msg(mvc_alloc(p.a, SLOT, &m2) == 0, "%s", mvc_error(p.a));
	stamp(m2.addr, 7777);
	ck_assert_int_eq(mvc_write(p.a, m2.region, 0, imp, 0, SLOT), 0);
	ck_assert_int_eq(mvc_write(p.a, region, SLOT, imp, SLOT, SLOT), 0);
	landed(p.a, imp, p.b, 1000000);
	ck_assert(!memcmp(p.dst.addr, m2.addr, SLOT));
	ck_assert_int_eq(mvc_free(p.a, &m2), 0);
	free(seen);
	pair_close(&p);
}

START_TEST(test_kill9_fails_only_inflight_batches_and_reconnects)
{
	uint32_t failed;

	prov = "tcp";
	mover_launch(&A, "a", 2);
	mover_launch(&B, "b", 2);
	movers_listening();
	run_across_restart(SIGKILL, 100, &failed);
	printf("kill -9 under load: %u of %u batches failed (in flight), each once\n", failed,
	       NBATCH);
}
END_TEST

START_TEST(test_sigterm_drains_then_reconnects)
{
	uint32_t failed;

	prov = "tcp";
	mover_launch(&A, "a", 2);
	mover_launch(&B, "b", 2);
	movers_listening();
	run_across_restart(SIGTERM, 100, &failed);
}
END_TEST

/*
 * On shm a restart by SIGKILL, over the fabric and over same-host copies.
 * A sender mover killed while it holds the receiver's command-queue lock
 * used to leave it held, and the new mover's first write spun for ever;
 * the receiver now frees a lock whose holder exited (mover/shm_lock.c,
 * and test_shm_restart for 30 kills in a row).
 */
START_TEST(test_shm_kill9_reconnects)
{
	uint32_t failed;

	prov = "shm";
	mover_extra = _i ? NULL : "--no-host-copy";
	mover_launch(&A, "a", 2);
	mover_launch(&B, "b", 2);
	movers_listening();
	run_across_restart(SIGKILL, 50, &failed);
	mover_extra = NULL;
}
END_TEST

START_TEST(test_shm_sigterm_reconnects)
{
	uint32_t failed;

	prov = "shm";
	mover_launch(&A, "a", 2);
	mover_launch(&B, "b", 2);
	movers_listening();
	run_across_restart(SIGTERM, 50, &failed);
}
END_TEST

/* Waits on c for an event of type, taking -EPIPE (the mover away) as none. */
static struct mvc_event wait_type(struct mvc *c, int type, double timeout)
{
	struct mvc_event ev;
	double end = now_s() + timeout;

	while (now_s() < end) {
		int n = mvc_wait(c, &ev, 1, 100);
		ck_assert_msg(n >= 0 || n == -EPIPE, "mvc_wait: %s", mvc_error(c));
		if (n == 1 && ev.type == type)
			return ev;
	}
	ck_abort_msg("no event of type %d in %.0f s", type, timeout);
	return ev;
}

/*
 * The receiver's mover dies between two immediates that one expectation
 * counts (and while another, naming the sender's mover, waits for its
 * first): the immediates the old mover held went with it, so each open
 * expectation completes once with MVC_CAUSE_MOVER_GONE and the count that
 * had arrived, before the mover's return is reported, and never again. An
 * expectation made after the reconnect counts the immediates that come
 * through the new mover (the sender having imported the receiver's new
 * blob, as an application must).
 */
START_TEST(test_receivers_mover_death_fails_its_expectations_once)
{
	struct pair p;
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	struct mvc_event ev;
	uint32_t pa;

	prov = "tcp";
	mover_launch(&A, "a", 2);
	mover_launch(&B, "b", 2);
	movers_listening();
	pair_open(&p, 1 << 16, 1 << 16);
	ck_assert_int_eq(mvc_address(p.a, blob, &len), 0);
	ck_assert_msg(mvc_peer_add(p.b, blob, len, &pa) == 0, "%s", mvc_error(p.b));
	ck_assert_int_eq(mvc_imm_expect(p.b, 77, 2, 5), 0);
	ck_assert_int_eq(mvc_imm_expect_from(p.b, pa, 78, 1, 6), 0);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 4096), 0);
	ck_assert_int_eq(mvc_write_imm(p.a, p.imp, 77), 0);
	submit_ok(p.a, 1);
	/* The first is counted, and reported to nobody. */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(mvc_wait(p.b, &ev, 1, 100), 0);
	kill(B.pid, SIGKILL);
	waitpid(B.pid, NULL, 0);
	B.pid = 0;
	mover_start(&B, "b", 2);
	int got5 = 0, got6 = 0, back = 0;
	for (double end = now_s() + 20; !back && now_s() < end;) {
		int n = mvc_wait(p.b, &ev, 1, 100);
		if (n == -EPIPE || n == 0)
			continue;
		ck_assert_msg(n == 1, "mvc_wait: %d %s", n, mvc_error(p.b));
		if (ev.type == MVC_EV_MOVER_BACK) {
			back = 1;
			continue;
		}
		ck_assert_int_eq(ev.type, MVC_EV_IMM_COUNT);
		ck_assert_int_eq(ev.status, -EPIPE);
		ck_assert_int_eq(ev.cause, MVC_CAUSE_MOVER_GONE);
		ck_assert_msg(strstr(ev.msg, "mover exited"), "%s", ev.msg);
		if (ev.cookie == 5) {
			ck_assert_uint_eq(ev.imm, 77);
			ck_assert_uint_eq(ev.count, 1); /* what had arrived */
			got5++;
		} else {
			ck_assert_uint_eq(ev.cookie, 6);
			ck_assert_uint_eq(ev.count, 0);
			got6++;
		}
	}
	ck_assert_msg(back && got5 == 1 && got6 == 1, "back %d, failures %d and %d", back, got5,
	              got6);
	/* New address and keys: the sender adds and imports them again. */
	len = sizeof(blob);
	ck_assert_int_eq(mvc_peer_remove(p.a, p.peer), 0);
	ck_assert_int_eq(mvc_address(p.b, blob, &len), 0);
	ck_assert_msg(mvc_peer_add(p.a, blob, len, &p.peer) == 0, "%s", mvc_error(p.a));
	len = sizeof(blob);
	ck_assert_int_eq(mvc_region_blob(p.b, p.dst.region, blob, &len), 0);
	ck_assert_msg(mvc_import(p.a, p.peer, blob, len, &p.imp) == 0, "%s", mvc_error(p.a));
	ck_assert_int_eq(mvc_imm_expect(p.b, 77, 1, 7), 0);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 4096, 4096), 0);
	ck_assert_int_eq(mvc_write_imm(p.a, p.imp, 77), 0);
	submit_ok(p.a, 2);
	ev = wait_type(p.b, MVC_EV_IMM_COUNT, 20);
	ck_assert_int_eq(ev.status, 0);
	ck_assert_uint_eq(ev.imm, 77);
	ck_assert_uint_eq(ev.count, 1);
	ck_assert_uint_eq(ev.cookie, 7);
	/* Nothing more: the failed expectations were reported once. */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(mvc_wait(p.b, &ev, 1, 100), 0);
	pair_close(&p);
}
END_TEST

/*
 * Peer ids after a restart stay usable for mvc_imm_expect_from: a peer
 * added once the restored peers took other mover slots gets an id in the
 * liveness table, not a made-up one, and what the new mover knows of a
 * restored peer's liveness replaces what the old one said.
 */
START_TEST(test_peer_ids_after_a_restart_still_name_peers)
{
	uint8_t ab[MVC_BLOB_MAX], cb[MVC_BLOB_MAX];
	size_t alen = sizeof(ab), clen = sizeof(cb);
	struct mvc *a, *b, *cc;
	uint32_t pa, pc, pc2;

	prov = "tcp";
	mover_launch(&A, "a", 1);
	mover_launch(&B, "b", 1);
	mover_launch(&C, "c", 1);
	movers_listening();
	ck_assert_int_eq(mvc_connect(&a, A.sock), 0);
	ck_assert_int_eq(mvc_connect(&b, B.sock), 0);
	ck_assert_int_eq(mvc_connect(&cc, C.sock), 0);
	ck_assert_int_eq(mvc_address(a, ab, &alen), 0);
	ck_assert_int_eq(mvc_address(cc, cb, &clen), 0);
	/* b holds C (slot 0) and A (slot 1), then lets C go. */
	ck_assert_int_eq(mvc_peer_add(b, cb, clen, &pc), 0);
	ck_assert_int_eq(mvc_peer_add(b, ab, alen, &pa), 0);
	ck_assert_int_eq(mvc_peer_remove(b, pc), 0);
	kill(B.pid, SIGKILL);
	waitpid(B.pid, NULL, 0);
	B.pid = 0;
	mover_start(&B, "b", 1);
	struct mvc_event ev = wait_type(b, MVC_EV_MOVER_BACK, 20);
	ck_assert_msg(ev.status == 0, "%s", ev.msg);
	/* A is back on the new mover's slot 0; C comes on slot 1, which the
	 * application's id for A holds. */
	ck_assert_msg(mvc_peer_add(b, cb, clen, &pc2) == 0, "%s", mvc_error(b));
	ck_assert_uint_ne(pc2, pa);
	ck_assert_uint_lt(pc2, 1024); /* the liveness table's, MVC_MAX_PEERS */
	ck_assert_msg(mvc_imm_expect_from(b, pc2, 31, 1, 1) == 0, "%s", mvc_error(b));
	ck_assert_msg(mvc_imm_expect_from(b, pa, 32, 1, 2) == 0, "%s", mvc_error(b));
	mvc_disconnect(a);
	mvc_disconnect(b);
	mvc_disconnect(cc);
}
END_TEST

/*
 * The call that finds the mover back may be a write: it reconnects inside
 * the call and builds the batch on the new mover's shards (writev of 4 and
 * of 32 segments, a paged write, a striped write).
 */
START_TEST(test_a_write_is_the_call_that_reconnects)
{
	struct pair p;
	struct mvc_event ev[8];
	struct mvc_seg seg[32];
	uint32_t pages[32];

	prov = "tcp";
	mover_launch(&A, "a", 2);
	mover_launch(&B, "b", 2);
	movers_listening();
	pair_open(&p, 4 << 20, 4 << 20);
	fill(p.src.addr, 4 << 20, 3);
	kill_a(SIGKILL);
	/* Gone (nothing in flight, so no failure to reap), and tried. */
	int w = 0;
	for (double end = now_s() + 5; w != -EPIPE && now_s() < end;)
		w = mvc_wait(p.a, ev, 8, 100);
	ck_assert_int_eq(w, -EPIPE);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 64), -EPIPE);
	mover_start(&A, "a", 2);
	for (uint32_t i = 0; i < 32; i++) {
		seg[i] = (struct mvc_seg){.src_off = i * 8192, .dst_off = i * 8192, .len = 4096};
		pages[i] = 64 + 2 * i;
	}
	int r = -EPIPE;
	for (double end = now_s() + 10; r == -EPIPE && now_s() < end; usleep(20000))
		r = mvc_writev(p.a, p.src.region, p.imp, seg, 4);
	ck_assert_msg(r == 0, "writev after the restart: %d %s", r, mvc_error(p.a));
	ck_assert_int_eq(mvc_writev(p.a, p.src.region, p.imp, seg, 32), 0);
	struct mvc_pages pg = {.src = p.src.region,
	                       .dst = p.imp,
	                       .src_stride = 4096,
	                       .dst_stride = 4096,
	                       .page_size = 4096,
	                       .src_pages = pages,
	                       .dst_pages = pages,
	                       .npages = 32};
	ck_assert_int_eq(mvc_write_paged(p.a, &pg), 0);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 1 << 20, p.imp, 1 << 20, 2 << 20), 0);
	/* The reconnect's event comes with the next poll. */
	ck_assert_int_ge(mvc_poll(p.a, ev, 8), 1);
	ck_assert_int_eq(ev[0].type, MVC_EV_MOVER_BACK);
	landed(p.a, p.imp, p.b, 7);
	ck_assert(
	    !memcmp((uint8_t *)p.dst.addr + (1 << 20), (uint8_t *)p.src.addr + (1 << 20), 2 << 20));
	for (uint32_t i = 0; i < 32; i++)
		ck_assert(!memcmp((uint8_t *)p.dst.addr + i * 8192,
		                  (uint8_t *)p.src.addr + i * 8192, 4096));
	for (uint32_t i = 0; i < 32; i++)
		ck_assert(!memcmp((uint8_t *)p.dst.addr + pages[i] * 4096ull,
		                  (uint8_t *)p.src.addr + pages[i] * 4096ull, 4096));
	pair_close(&p);
}
END_TEST

START_TEST(test_no_reconnect_opt_stays_gone)
{
	struct mvc *c;
	struct mvc_mem m;
	struct mvc_event ev[4];
	struct mvc_opts o = {.flags = MVC_OPT_NO_RECONNECT};

	prov = "tcp";
	mover_start(&A, "a", 1);
	ck_assert_int_eq(mvc_connect_opts(&c, A.sock, &o), 0);
	ck_assert_int_eq(mvc_alloc(c, 4096, &m), 0);
	kill_a(SIGKILL);
	mover_start(&A, "a", 1);
	double end = now_s() + 1.5;
	while (now_s() < end) {
		int n = mvc_wait(c, ev, 4, 100);
		ck_assert_msg(n == -EPIPE || n == 0, "%d", n);
	}
	ck_assert_int_eq(mvc_poll(c, ev, 4), -EPIPE);
	ck_assert_int_eq(mvc_write_imm(c, 0, 1), -EPIPE);
	mvc_free(c, &m);
	mvc_disconnect(c);
}
END_TEST

START_TEST(test_bad_opt_flags_are_refused)
{
	struct mvc *c;
	struct mvc_opts o = {.flags = 0x40};

	prov = "tcp";
	mover_start(&A, "a", 1);
	ck_assert_int_eq(mvc_connect_opts(&c, A.sock, &o), -EINVAL);
	ck_assert_msg(strstr(mvc_connect_error(), "flags"), "%s", mvc_connect_error());
}
END_TEST

int main(void)
{
	Suite *s = suite_create("reconnect");
	TCase *tc = tcase_create("restart");
	SRunner *sr;
	int nf;

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_kill9_fails_only_inflight_batches_and_reconnects);
	tcase_add_test(tc, test_sigterm_drains_then_reconnects);
	tcase_add_test(tc, test_receivers_mover_death_fails_its_expectations_once);
	tcase_add_test(tc, test_a_write_is_the_call_that_reconnects);
	tcase_add_test(tc, test_peer_ids_after_a_restart_still_name_peers);
	tcase_add_test(tc, test_no_reconnect_opt_stays_gone);
	tcase_add_test(tc, test_bad_opt_flags_are_refused);
	suite_add_tcase(s, tc);
	tc = tcase_create("shm");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_shm_kill9_reconnects, 0, 2);
	tcase_add_test(tc, test_shm_sigterm_reconnects);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
