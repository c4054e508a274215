/* SPDX-License-Identifier: MIT */
/*
 * End-to-end tests of mover and libclient when something dies or leaves
 * mid-transfer, over tcp;ofi_rxm on loopback and shm: a client killed
 * mid-batch, a peer mover killed mid-transfer (and one killed holding its
 * shm queue lock), peers added and removed while traffic runs, and SIGTERM
 * draining what was committed. Every one spares the other clients.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mv_wire.h"
#include "mvc.h"

#include "mvtest.h"

START_TEST(test_client_killed_mid_batch_spares_others)
{
	int ready[2];

	ck_assert_int_eq(pipe(ready), 0);
	pid_t kid = fork();
	if (kid == 0) {
		struct pair p;
		pair_open(&p, 16u << 20, 16u << 20);
		ck_assert_int_eq(write(ready[1], "x", 1), 1);
		for (uint64_t r = 0;; r++) {
			mvc_write(p.a, p.src.region, 0, p.imp, 0, 16u << 20);
			if (mvc_submit(p.a, r) == 0) {
				struct mvc_event ev;
				mvc_wait(p.a, &ev, 1, 0);
			}
		}
	}
	char c;
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	usleep(200000);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);

	struct pair p;
	pair_open(&p, 1u << 20, 1u << 20);
	for (uint32_t r = 0; r < 10; r++) {
		fill(p.src.addr, 1u << 20, r);
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 1u << 20), 0);
		submit_ok(p.a, r);
		ck_assert(!memcmp(p.dst.addr, p.src.addr, 1u << 20));
	}
	pair_close(&p);
	ck_assert_int_eq(kill(A.pid, 0), 0);
	ck_assert_int_eq(mover_stop(&A), 0);
}
END_TEST

START_TEST(test_peer_mover_killed_gives_errors_not_hangs)
{
	struct pair p;
	int errors = 0, done = 0;
	uint64_t r;

	/* Copies into a dead peer's memory land (its memfd outlives it) until
	 * the mover hears of the death: test_samehost checks those fail once
	 * it has; here the fabric's writes are what must fail. */
	sender_on_fabric();
	pair_open(&p, 4u << 20, 4u << 20);
	for (r = 0; r < 4; r++) {
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 4u << 20), 0);
		ck_assert_int_eq(mvc_submit(p.a, r), 0);
	}
	kill(B.pid, SIGKILL);
	waitpid(B.pid, NULL, 0);
	shm_cleanup(B.pid);
	B.pid = 0;
	double t0 = now_s();
	for (; r < 8; r++) {
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 4u << 20), 0);
		ck_assert_int_eq(mvc_submit(p.a, r), 0);
	}
	while (done < 8 && now_s() - t0 < 60) {
		struct mvc_event ev[8];
		int n = mvc_wait(p.a, ev, 8, 500);
		ck_assert_int_ge(n, 0);
		for (int i = 0; i < n; i++) {
			done++;
			if (ev[i].status) {
				errors++;
				ck_assert_msg(ev[i].msg[0], "an error completion without a reason");
			}
		}
	}
	ck_assert_msg(done == 8, "%d of 8 batches completed within 60 s of the peer's death", done);
	ck_assert_msg(errors > 0, "writes to a dead peer all succeeded");
	fprintf(stderr, "peer death: %d errors of 8 batches, last after %.1f s\n", errors,
	        now_s() - t0);
	ck_assert_int_eq(mover_stop(&A), 0);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b); /* its mover is dead: this only lets go of it */
}
END_TEST

/*
 * shm 1.17: a peer mover killed while it holds its command-queue lock
 * leaves it held, and writes to it spin inside the provider. The test
 * holds B's locks itself, as B would inside its copy, and never lets go;
 * then B is killed. A must see B exit, release the locks, fail the writes
 * with the cause, and still stop cleanly (no shard stuck).
 */
START_TEST(test_peer_killed_holding_its_shm_lock_fails_writes)
{
	struct pair p;
	glob_t g;
	char pat[64];
	int held = 0;

	if (strcmp(prov, "shm")) {
		fprintf(stderr, "skipped on %s: the queue lock is shm's\n", prov);
		return;
	}
	sender_on_fabric();
	pair_open(&p, 4u << 20, 4u << 20);
	snprintf(pat, sizeof(pat), "/dev/shm/%d:*", B.pid);
	ck_assert_int_eq(glob(pat, 0, NULL, &g), 0);
	for (size_t i = 0; i < g.gl_pathc; i++) {
		int fd = open(g.gl_pathv[i], O_RDWR);
		ck_assert_int_ge(fd, 0);
		uint8_t *r = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		ck_assert(r != MAP_FAILED);
		int owner;
		memcpy(&owner, r + 4, sizeof(owner));
		if (r[0] != 4 || owner != B.pid) {
			fprintf(stderr, "skipped: %s is not a libfabric 1.17 shm region\n",
			        g.gl_pathv[i]);
			globfree(&g);
			return;
		}
		pthread_spin_lock((pthread_spinlock_t *)(r + 24)); /* never unlocked */
		held++;
	}
	globfree(&g);
	ck_assert_int_gt(held, 0);
	for (uint64_t r = 0; r < 4; r++) {
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 4u << 20), 0);
		ck_assert_int_eq(mvc_submit(p.a, r), 0);
	}
	/* A's shards are now stuck posting to B: nothing completes. */
	struct mvc_event ev[4];
	ck_assert_int_eq(mvc_wait(p.a, ev, 4, 300), 0);

	kill(B.pid, SIGKILL);
	waitpid(B.pid, NULL, 0);
	double t0 = now_s();
	int done = 0;
	while (done < 4 && now_s() - t0 < 20) {
		int n = mvc_wait(p.a, ev, 4, 500);
		ck_assert_int_ge(n, 0);
		for (int i = 0; i < n; i++, done++) {
			ck_assert_msg(ev[i].status != 0, "a write to a dead peer succeeded");
			ck_assert_int_eq(ev[i].cause, MVC_CAUSE_PEER_GONE);
			ck_assert_msg(strstr(ev[i].msg, "exited"), "cause: %s", ev[i].msg);
		}
	}
	ck_assert_msg(done == 4, "%d of 4 batches failed within 20 s of the peer's death", done);
	fprintf(stderr, "peer died holding its lock: 4 batches failed after %.2f s\n",
	        now_s() - t0);
	shm_cleanup(B.pid);
	B.pid = 0;
	ck_assert_int_eq(mover_stop(&A), 0);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b); /* its mover is dead: this only lets go of it */
}
END_TEST

START_TEST(test_peers_added_and_removed_during_traffic)
{
	struct pair p;
	uint8_t blob[MVC_BLOB_MAX], rblob[MVC_BLOB_MAX];
	size_t alen, rlen;
	struct mvc *cc;
	struct mvc_mem cdst;

	mover_start(&C, "c", 2);
	pair_open(&p, 1u << 20, 1u << 20);
	ck_assert_int_eq(mvc_connect(&cc, C.sock), 0);
	ck_assert_int_eq(mvc_alloc(cc, 1u << 20, &cdst), 0);
	alen = sizeof(blob);
	rlen = sizeof(rblob);
	ck_assert_int_eq(mvc_address(cc, blob, &alen), 0);
	ck_assert_int_eq(mvc_region_blob(cc, cdst.region, rblob, &rlen), 0);

	for (uint32_t r = 0; r < 12; r++) {
		/* Traffic to B keeps flowing while C comes and goes. */
		fill(p.src.addr, 1u << 20, r);
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 1u << 20), 0);
		ck_assert_int_eq(mvc_submit(p.a, 1000 + r), 0);
		uint32_t peer, imp;
		ck_assert_msg(mvc_peer_add(p.a, blob, alen, &peer) == 0, "%s", mvc_error(p.a));
		ck_assert_int_eq(mvc_import(p.a, peer, rblob, rlen, &imp), 0);
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, imp, 0, 1u << 20), 0);
		ck_assert_int_eq(mvc_submit(p.a, 2000 + r), 0);
		uint64_t want[2] = {1000 + r, 2000 + r};
		struct mvc_event e[2];
		wait_batches(p.a, want, e, 2, 20);
		ck_assert_msg(e[0].status == 0 && e[1].status == 0, "%s / %s", e[0].msg, e[1].msg);
		ck_assert(!memcmp(cdst.addr, p.src.addr, 1u << 20));
		ck_assert(!memcmp(p.dst.addr, p.src.addr, 1u << 20));
		ck_assert_int_eq(mvc_peer_remove(p.a, peer), 0);
		/* The import went with the peer. */
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, imp, 0, 64), 0);
		ck_assert_int_eq(mvc_submit(p.a, 3000 + r), 0);
		struct mvc_event e3 = wait_batch(p.a, 3000 + r, 20);
		ck_assert_int_eq(e3.cause, MVC_CAUSE_NO_IMPORT);
	}
	mvc_disconnect(cc);
	pair_close(&p);
}
END_TEST

START_TEST(test_sigterm_drains_committed_batches)
{
	struct pair p;
	int ok = 0;

	pair_open(&p, 8u << 20, 8u << 20);
	for (uint64_t r = 0; r < 16; r++) {
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 8u << 20), 0);
		ck_assert_int_eq(mvc_submit(p.a, r), 0);
	}
	kill(A.pid, SIGTERM);
	double end = now_s() + 30;
	while (ok < 16 && now_s() < end) {
		struct mvc_event ev[16];
		int n = mvc_wait(p.a, ev, 16, 200);
		if (n < 0)
			break;
		for (int i = 0; i < n; i++) {
			ck_assert_msg(ev[i].status == 0, "batch %llu: %s",
			              (unsigned long long)ev[i].cookie, ev[i].msg);
			ok++;
		}
	}
	ck_assert_msg(ok == 16, "%d of 16 committed batches completed before the mover left", ok);
	int st;
	ck_assert_int_eq(waitpid(A.pid, &st, 0), A.pid);
	A.pid = 0;
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	pair_close(&p);
}
END_TEST

static TCase *faults(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_client_killed_mid_batch_spares_others);
	tcase_add_test(tc, test_peer_mover_killed_gives_errors_not_hangs);
	tcase_add_test(tc, test_peer_killed_holding_its_shm_lock_fails_writes);
	tcase_add_test(tc, test_peers_added_and_removed_during_traffic);
	tcase_add_test(tc, test_sigterm_drains_committed_batches);
	return tc;
}

int main(void)
{
	Suite *s = suite_create("faults");

	suite_add_tcase(s, faults("faults_tcp", setup_tcp));
	suite_add_tcase(s, faults("faults_shm", setup_shm));

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
