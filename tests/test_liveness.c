/* SPDX-License-Identifier: MIT */
/*
 * Peer liveness end to end (mover/heartbeat.c, mvc_imm_expect_from): a
 * receiver that expects immediates from a peer hears, within three
 * heartbeat intervals, that the peer's mover was stopped (SIGSTOP) or
 * killed, hears again when it comes back, and is never told anything of a
 * peer it did not name; a peer that hands out garbage fails what is
 * expected of it while another peer carries on. Movers run with a 250 ms
 * heartbeat, on tcp (loopback) and shm.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "../mover/mover.h" /* struct mv_fabric: the raw peer below */
#include "mv_wire.h"
#include "mvc.h"

#include "mvtest.h"

#define HB_S 0.25 /* the movers' heartbeat: mover_extra below */

static void setup_hb_tcp(void)
{
	mover_extra = "--heartbeat=0.25";
	setup_tcp();
}

static void setup_hb_shm(void)
{
	mover_extra = "--heartbeat=0.25";
	setup_shm();
}

/* The pair, and the receiver's handle for the sender's mover. */
static uint32_t add_sender(struct pair *p)
{
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	uint32_t from;

	ck_assert_int_eq(mvc_address(p->a, blob, &len), 0);
	ck_assert_msg(mvc_peer_add(p->b, blob, len, &from) == 0, "%s", mvc_error(p->b));
	return from;
}

/* The next event on c within timeout seconds that is not a lone immediate
 * or a batch; fails the test when none comes. */
static struct mvc_event next_count(struct mvc *c, double timeout)
{
	struct mvc_event ev;
	double end = now_s() + timeout;

	while (now_s() < end) {
		int n = mvc_wait(c, &ev, 1, 20);
		ck_assert_msg(n >= 0, "mvc_wait: %s", mvc_error(c));
		if (n == 1 && ev.type == MVC_EV_IMM_COUNT)
			return ev;
	}
	ck_abort_msg("no expectation ended within %.2f s", timeout);
	return ev;
}

/* No expectation ends on c within s seconds. */
static void quiet_for(struct mvc *c, double s)
{
	struct mvc_event ev;
	double end = now_s() + s;

	while (now_s() < end) {
		int n = mvc_wait(c, &ev, 1, 20);
		ck_assert_msg(n >= 0, "mvc_wait: %s", mvc_error(c));
		ck_assert_msg(n == 0 || ev.type != MVC_EV_IMM_COUNT,
		              "expectation %llu ended (status %d: %s)",
		              (unsigned long long)ev.cookie, ev.status, ev.msg);
	}
}

static void send_imms(struct pair *p, uint32_t imm, int n, uint64_t cookie)
{
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(mvc_write_imm(p->a, p->imp, imm), 0);
		submit_ok(p->a, cookie + (uint64_t)i);
	}
}

/* ---- api ---- */

START_TEST(test_expect_from_is_met_by_its_peer)
{
	struct pair p;
	pair_open(&p, 1u << 20, 1u << 20);
	uint32_t from = add_sender(&p);

	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 501, 3, 9001), 0);
	send_imms(&p, 501, 3, 10);
	struct mvc_event ev = next_count(p.b, 10);
	ck_assert_int_eq(ev.status, 0);
	ck_assert_uint_eq(ev.cookie, 9001);
	ck_assert_uint_eq(ev.count, 3);
	/* A healthy, idle peer is never declared dead. */
	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 502, 1, 9002), 0);
	quiet_for(p.b, 8 * HB_S);
	send_imms(&p, 502, 1, 20);
	ev = next_count(p.b, 10);
	ck_assert_msg(ev.status == 0, "%s", ev.msg);
	pair_close(&p);
}
END_TEST

START_TEST(test_expect_from_unknown_peer_is_enoent)
{
	struct pair p;
	pair_open(&p, 1u << 20, 1u << 20);
	uint32_t from = add_sender(&p);

	ck_assert_int_eq(mvc_imm_expect_from(p.b, from + 1, 1, 1, 1), -ENOENT);
	ck_assert_msg(strstr(mvc_error(p.b), "not one of"), "%s", mvc_error(p.b));
	ck_assert_int_eq(mvc_imm_expect_from(p.b, 5000, 1, 1, 1), -ENOENT);
	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 1, 0, 1), -EINVAL);
	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 1, 1, 1), 0);
	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 1, 1, 2), -EBUSY);
	/* Removing the peer fails what was expected of it, naming it. */
	ck_assert_int_eq(mvc_peer_remove(p.b, from), 0);
	struct mvc_event ev = next_count(p.b, 2);
	ck_assert_int_eq(ev.status, -ENOENT);
	ck_assert_int_eq(ev.cause, MVC_CAUSE_PEER_GONE);
	ck_assert_uint_eq(ev.cookie, 1);
	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 1, 1, 3), -ENOENT);
	pair_close(&p);
}
END_TEST

/* ---- faults: the sender's mover stops, dies, comes back ---- */

/* SIGSTOP of the sender's mover: the receiver's expectation fails within
 * 3 heartbeats, naming the mover; a plain expectation is untouched; after
 * SIGCONT new expectations of the peer are met again. */
START_TEST(test_stopped_sender_fails_expectation_then_comes_back)
{
	struct pair p;
	struct mvc_info ia;
	char id[32];

	pair_open(&p, 1u << 20, 1u << 20);
	uint32_t from = add_sender(&p);
	ck_assert_int_eq(mvc_info(p.a, &ia), 0);
	snprintf(id, sizeof(id), "%016llx", (unsigned long long)ia.mover_id);
	send_imms(&p, 600, 1, 10);
	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 600, 3, 7001), 0);
	ck_assert_int_eq(mvc_imm_expect(p.b, 601, 1, 7002), 0);
	usleep(3 * HB_S * 1e6); /* a few heartbeats answered first */

	kill(A.pid, SIGSTOP);
	double t0 = now_s();
	struct mvc_event ev = next_count(p.b, 3 * HB_S + 1);
	double dt = now_s() - t0;
	kill(A.pid, SIGCONT);
	fprintf(stderr,
	        "liveness(%s): SIGSTOP of the sender's mover told in %.0f ms (%.1f x %.0f ms)\n",
	        prov, dt * 1e3, dt / HB_S, HB_S * 1e3);
	ck_assert_uint_eq(ev.cookie, 7001);
	ck_assert_int_eq(ev.status, -ETIMEDOUT);
	ck_assert_int_eq(ev.cause, MVC_CAUSE_PEER_DEAD);
	ck_assert_uint_eq(ev.count, 1);
	ck_assert_msg(strstr(ev.msg, id), "'%s' does not name mover %s", ev.msg, id);
	ck_assert_msg(dt <= 3 * HB_S, "told after %.3f s; the bar is 3 x %.2f s", dt, HB_S);

	/* Back: the peer answers again, and new expectations are met. */
	quiet_for(p.b, 3 * HB_S); /* reads the news that it is back */
	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 600, 2, 7003), 0);
	send_imms(&p, 600, 2, 20);
	ev = next_count(p.b, 10);
	ck_assert_msg(ev.status == 0 && ev.cookie == 7003, "after SIGCONT: %llu %d %s",
	              (unsigned long long)ev.cookie, ev.status, ev.msg);
	/* The plain expectation never was the peer's business. */
	send_imms(&p, 601, 1, 30);
	ev = next_count(p.b, 10);
	ck_assert_msg(ev.status == 0 && ev.cookie == 7002, "plain: %llu %d %s",
	              (unsigned long long)ev.cookie, ev.status, ev.msg);
	pair_close(&p);
}
END_TEST

/* kill -9 of the sender's mover: on this host its pidfd says so at once. */
START_TEST(test_killed_sender_fails_expectation)
{
	struct pair p;

	pair_open(&p, 1u << 20, 1u << 20);
	uint32_t from = add_sender(&p);
	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 700, 1, 8001), 0);
	usleep(2 * HB_S * 1e6);
	kill(A.pid, SIGKILL);
	double t0 = now_s();
	struct mvc_event ev = next_count(p.b, 3 * HB_S + 1);
	double dt = now_s() - t0;
	waitpid(A.pid, NULL, 0);
	shm_cleanup(A.pid);
	A.pid = 0;
	fprintf(stderr, "liveness(%s): kill -9 of the sender's mover told in %.0f ms\n", prov,
	        dt * 1e3);
	ck_assert_uint_eq(ev.cookie, 8001);
	ck_assert_int_eq(ev.cause, MVC_CAUSE_PEER_DEAD);
	ck_assert_msg(ev.status == -EHOSTUNREACH || ev.status == -ETIMEDOUT, "%d", ev.status);
	ck_assert_msg(dt <= 3 * HB_S, "told after %.3f s; the bar is 3 x %.2f s", dt, HB_S);
	/* Expected from a dead peer: fails at once. */
	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 701, 1, 8002), 0);
	ev = next_count(p.b, 1);
	ck_assert_uint_eq(ev.cookie, 8002);
	ck_assert_int_eq(ev.cause, MVC_CAUSE_PEER_DEAD);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
}
END_TEST

/* A peer busy with bulk both ways is never declared dead: heartbeats are
 * posted outside the clients' queues and wait behind what is on the
 * connection, never behind the backlog. */
START_TEST(test_busy_peer_is_not_declared_dead)
{
	struct pair p, r;
	const uint64_t big = 8u << 20;
	uint64_t sent = 0, back = 0;
	int inflight = 0, rin = 0;

	pair_open(&p, big, big);
	pair_open_on(&r, &B, &A, big, big); /* the other way round */
	uint32_t from = add_sender(&p);
	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 900, 1, 9900), 0);
	for (double end = now_s() + 16 * HB_S; now_s() < end;) {
		struct mvc_event ev[8];
		while (inflight < 4) {
			ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, big), 0);
			ck_assert_int_eq(mvc_submit(p.a, sent++), 0);
			inflight++;
		}
		while (rin < 4) {
			ck_assert_int_eq(mvc_write(r.a, r.src.region, 0, r.imp, 0, big), 0);
			ck_assert_int_eq(mvc_submit(r.a, back++), 0);
			rin++;
		}
		int n = mvc_wait(p.a, ev, 8, 5);
		for (int i = 0; i < n; i++, inflight--)
			ck_assert_msg(ev[i].status == 0, "%s", ev[i].msg);
		n = mvc_poll(r.a, ev, 8);
		for (int i = 0; i < n; i++, rin--)
			ck_assert_msg(ev[i].status == 0, "%s", ev[i].msg);
		n = mvc_poll(p.b, ev, 8);
		for (int i = 0; i < n; i++)
			ck_assert_msg(ev[i].type != MVC_EV_IMM_COUNT, "busy peer declared: %s",
			              ev[i].msg);
		mvc_poll(r.b, ev, 8);
	}
	fprintf(stderr,
	        "liveness(%s): %llu + %llu MiB moved both ways in %.1f s of 250 ms "
	        "heartbeats, no peer declared dead\n",
	        prov, (unsigned long long)(sent * 8), (unsigned long long)(back * 8), 16 * HB_S);
	for (double end = now_s() + 30; (inflight || rin) && now_s() < end;) {
		struct mvc_event ev[8];
		inflight -= mvc_wait(p.a, ev, 8, 5);
		rin -= mvc_poll(r.a, ev, 8);
	}
	send_imms(&p, 900, 1, 1u << 20);
	struct mvc_event ev = next_count(p.b, 10);
	ck_assert_msg(ev.status == 0, "%s", ev.msg);
	pair_close(&r);
	pair_close(&p);
}
END_TEST

/* ---- bad input: a peer that hands out garbage ---- */

/* A region blob of another protocol from peer A (which speaks ours):
 * the import is refused, the mover logs it, what the receiver expects of
 * A fails, and what it expects of C is met. */
START_TEST(test_garbage_blob_fails_only_that_peers_expectations)
{
	struct pair p, q;
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	uint32_t imp;

	mover_start(&C, "c", 2);
	pair_open(&p, 1u << 20, 1u << 20); /* A -> B */
	/* C -> the same receiver: q.b is p.b, q's import is of p.dst. */
	q = p;
	ck_assert_int_eq(mvc_connect(&q.a, C.sock), 0);
	ck_assert_int_eq(mvc_alloc(q.a, 1u << 20, &q.src), 0);
	ck_assert_int_eq(mvc_address(p.b, blob, &len), 0);
	ck_assert_int_eq(mvc_peer_add(q.a, blob, len, &q.peer), 0);
	len = sizeof(blob);
	ck_assert_int_eq(mvc_region_blob(p.b, p.dst.region, blob, &len), 0);
	ck_assert_msg(mvc_import(q.a, q.peer, blob, len, &q.imp) == 0, "%s", mvc_error(q.a));
	uint32_t fa = add_sender(&p), fc = add_sender(&q);
	len = sizeof(blob);
	ck_assert_int_eq(mvc_imm_expect_from(p.b, fa, 800, 1, 1), 0);
	ck_assert_int_eq(mvc_imm_expect_from(p.b, fc, 801, 1, 2), 0);
	/* A's region blob, as a broken A would hand it out. */
	ck_assert_int_eq(mvc_region_blob(p.a, p.src.region, blob, &len), 0);
	((struct mv_region_blob *)blob)->version = MV_WIRE_VERSION + 7;
	ck_assert_int_eq(mvc_import(p.b, fa, blob, len, &imp), -EPROTO);
	ck_assert_msg(strstr(mvc_error(p.b), "garbage"), "%s", mvc_error(p.b));
	struct mvc_event ev = next_count(p.b, 2);
	ck_assert_uint_eq(ev.cookie, 1);
	ck_assert_int_eq(ev.status, -EPROTO);
	ck_assert_int_eq(ev.cause, MVC_CAUSE_PEER_BAD);
	/* C carries on; so do A's writes to B (one client cannot cut A off
	 * for the others). */
	ck_assert_int_eq(mvc_write_imm(q.a, q.imp, 801), 0);
	submit_ok(q.a, 5);
	ev = next_count(p.b, 10);
	ck_assert_msg(ev.cookie == 2 && ev.status == 0, "%llu %d %s", (unsigned long long)ev.cookie,
	              ev.status, ev.msg);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 4096), 0);
	submit_ok(p.a, 6);
	/* The mover said so in its log. */
	ck_assert_msg(log_grep(&B, "region blob of protocol", NULL, 0), "no log line in %s", B.log);
	mvc_disconnect(q.a);
	pair_close(&p);
}
END_TEST

/* A raw libfabric peer writes remote CQ data to B's shard 0 doorbell:
 * immediates for regions B never had (stale generations, indices out of
 * range), heartbeat tags, a landing ack for no op of ours. The fabric says nothing
 * of who wrote them, so nobody is blamed: B counts and logs them, and the
 * honest A's immediates are expected and met before and after. */
START_TEST(test_unknown_immediates_are_dropped_and_logged)
{
	static const uint64_t junk[] = {0xffffffffull << 32 | 7,
	                                0x3fff0001ull << 32 | 1,
	                                1ull << 32,
	                                MV_HB | 12345,
	                                MV_HB | (0x3fffffffull << 32),
	                                0x0000ffffull << 32 | 0xffffffffu};
	struct pair p;
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	struct mv_fabric f;
	fi_addr_t to;

	pair_open(&p, 1u << 20, 1u << 20);
	uint32_t from = add_sender(&p);
	ck_assert_int_eq(mvc_imm_expect_from(p.b, from, 950, 2, 9500), 0);
	send_imms(&p, 950, 1, 1);
	ck_assert_int_eq(mvc_address(p.b, blob, &len), 0);
	const struct mv_addr_blob *ab = (const void *)blob;
	ck_assert_int_eq(mv_fabric_open(&f, "tcp", "lo", 0), 0);
	ck_assert_int_eq(mv_fabric_av_insert(&f, ab->addr[0], &to), 0);
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
		struct fi_context2 ctx;
		struct fi_rma_iov ri = {.addr = ab->bell[0].addr, .len = 0, .key = ab->bell[0].key};
		struct fi_msg_rma m = {.rma_iov = &ri,
		                       .rma_iov_count = 1,
		                       .addr = to,
		                       .context = &ctx,
		                       .data = junk[i]};
		ssize_t ret;
		for (double end = now_s() + 5;
		     (ret = fi_writemsg(f.ep, &m, FI_COMPLETION | FI_REMOTE_CQ_DATA | f.dc_flag)) ==
		         -FI_EAGAIN &&
		     now_s() < end;)
			;
		ck_assert_int_eq(ret, 0);
		int done = 0;
		for (double end = now_s() + 10; !done && now_s() < end;) {
			struct fi_cq_data_entry e;
			ssize_t n = fi_cq_read(f.cq, &e, 1);
			ck_assert_msg(n == 1 || n == -FI_EAGAIN, "raw write %zu: %zd", i, n);
			done = n == 1;
		}
		ck_assert_msg(done, "raw write %zu did not complete", i);
	}
	mv_fabric_close(&f);
	/* No event for the junk; the honest peer carries on. */
	quiet_for(p.b, 0.2);
	send_imms(&p, 950, 1, 2);
	struct mvc_event ev = next_count(p.b, 10);
	ck_assert_msg(ev.status == 0 && ev.cookie == 9500 && ev.count == 2, "%d %s", ev.status,
	              ev.msg);
	int logged = log_grep(&B, "which is not ours", NULL, 0);
	fprintf(stderr, "liveness: %zu junk CQ data words, %d logged as not ours\n",
	        sizeof(junk) / sizeof(junk[0]), logged);
	ck_assert_msg(logged >= 3, "%d log lines in %s", logged, B.log);
	pair_close(&p);
}
END_TEST

static TCase *faults(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_stopped_sender_fails_expectation_then_comes_back);
	tcase_add_test(tc, test_killed_sender_fails_expectation);
	tcase_add_test(tc, test_busy_peer_is_not_declared_dead);
	return tc;
}

int main(void)
{
	Suite *s = suite_create("liveness");
	TCase *api = tcase_create("api");

	tcase_add_checked_fixture(api, setup_hb_tcp, teardown);
	tcase_set_timeout(api, 60);
	tcase_add_test(api, test_expect_from_is_met_by_its_peer);
	tcase_add_test(api, test_expect_from_unknown_peer_is_enoent);
	tcase_add_test(api, test_garbage_blob_fails_only_that_peers_expectations);
	tcase_add_test(api, test_unknown_immediates_are_dropped_and_logged);
	suite_add_tcase(s, api);
	suite_add_tcase(s, faults("faults_tcp", setup_hb_tcp));
	suite_add_tcase(s, faults("faults_shm", setup_hb_shm));

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
