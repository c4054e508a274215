/* SPDX-License-Identifier: MIT */
/*
 * The same-host path between movers (mover/samehost_ask.c,
 * samehost_owner.c): an fd that does not match its blob (too short, not
 * sealed, not from the peer mover's process) is refused with one log line,
 * the writes going through the fabric instead; movers importing each other
 * at once, or from an owner that is stopped, do not block and switch to
 * copies; a copier restarted past the owner's fence segments still copies,
 * each segment reclaimed when its mover goes; a peer in another pid
 * namespace is written through the fabric, saying why. The copies
 * themselves are test_samehost.c.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mvc.h"
#include "mv_sock.h"
#include "mv_wire.h"

#include "mvtest.h"

/* ---- bad input: a HOST_FD reply whose fd does not match the blob ---- */

enum fake_kind { FAKE_SHORT, FAKE_UNSEALED, FAKE_NOT_OWNER, FAKE_KINDS };
static const char *const fake_why[FAKE_KINDS] = {"bytes; the blob needs", "not sealed",
                                                 "the answer came from pid"};

/* Serves HOST_FD on path, answering with a memfd of the given kind; a
 * child process, killed by the caller. */
static pid_t fake_mover(const char *path, enum fake_kind kind, uint64_t len)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int ls = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	unlink(path);
	ck_assert_int_eq(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(ls, 4), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid) {
		close(ls);
		return pid;
	}
	for (;;) {
		int s = accept(ls, NULL, NULL);
		struct {
			struct mv_msg_hdr h;
			struct mv_host_fd_req q;
		} in;
		if (s < 0 || recv(s, &in, sizeof(in), 0) != (ssize_t)sizeof(in))
			_exit(1);
		int fd = memfd_create("fake", MFD_ALLOW_SEALING);
		int fence = memfd_create("fake-fence", MFD_ALLOW_SEALING);
		if (ftruncate(fd, (off_t)(kind == FAKE_SHORT ? len / 2 : len)) < 0 ||
		    ftruncate(fence, 1 << 20) < 0)
			_exit(1);
		if (kind != FAKE_UNSEALED)
			fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
		struct {
			struct mv_msg_hdr h;
			struct mv_host_fd_rep r;
		} out = {.h = in.h};
		out.h.type |= MV_MSG_REPLY;
		out.h.len = sizeof(out.r);
		out.r.region = in.q.id;
		out.r.len = len;
		out.r.nfds = 2;
		int fds[2] = {fd, fence};
		struct iovec iov = {&out, sizeof(out)};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
		union mv_cmsg u;
		mv_fds_put(&mh, &u, fds, 2);
		sendmsg(s, &mh, MSG_NOSIGNAL);
		close(fd);
		close(fence);
		close(s);
	}
}

START_TEST(test_mismatched_fd_is_refused_and_writes_go_by_fabric)
{
	const size_t n = 2u << 20;
	struct mvc_mem d2;
	struct pair p;

	pair_open(&p, n, n);
	/* A region of B no genuine import has mapped (one mapping serves
	 * every import of a region). */
	ck_assert_int_eq(mvc_alloc(p.b, n, &d2), 0);
	for (int k = 0; k < FAKE_KINDS; k++) {
		uint8_t blob[MVC_BLOB_MAX];
		size_t len = sizeof(blob);
		char path[108];
		uint32_t imp;

		/* B's genuine blob, its socket swapped for ours. */
		ck_assert_int_eq(mvc_region_blob(p.b, d2.region, blob, &len), 0);
		struct mv_region_blob *rb = (struct mv_region_blob *)blob;
		ck_assert_uint_ne(rb->flags & MV_BLOB_HOST_FD, 0);
		snprintf(path, sizeof(path), "/tmp/mvt.%d.fake%d.sock", getpid(), k);
		pid_t fake = fake_mover(path, (enum fake_kind)k, rb->len);
		memset(rb->sock, 0, sizeof(rb->sock));
		memcpy(rb->sock, path, strlen(path));
		int before = log_grep(&A, "refused", NULL, 0);
		uint64_t host0 = stat_sum(&A, "\"host_bytes\"");
		int ret = mvc_import(p.a, p.peer, blob, len, &imp);
		kill(fake, SIGKILL);
		waitpid(fake, NULL, 0);
		unlink(path);
		if (!strcmp(prov, "shm")) {
			/* shm writes where a blob says: without its owner's word
			 * (this answer is no owner's) the import is refused. */
			ck_assert_msg(ret < 0, "an import on a fake owner's answer stood on shm");
			ck_assert_msg(strstr(mvc_error(p.a), fake_why[k]), "cause: %s",
			              mvc_error(p.a));
			continue;
		}
		ck_assert_msg(ret == 0, "%s", mvc_error(p.a));
		ck_assert_int_eq(log_grep(&A, "refused", NULL, 0) - before, 1);
		ck_assert_int_eq(log_grep(&A, fake_why[k], NULL, 0), 1);
		/* The writes still land, through the fabric. */
		fill(p.src.addr, n, 40 + (uint64_t)k);
		memset(d2.addr, 0, n);
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, imp, 0, n), 0);
		landed(p.a, imp, p.b, 50 + (uint64_t)k);
		ck_assert(!memcmp(p.src.addr, d2.addr, n));
		ck_assert_uint_eq(stat_sum(&A, "\"host_bytes\"") - host0, n);
		ck_assert_int_eq(mvc_unimport(p.a, imp), 0);
	}
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), 0);
	pair_close(&p);
}
END_TEST

/* ---- fence segments: one per copying peer mover, reclaimed when it goes ---- */

/*
 * The copier restarts more times than the owner serves copying peers at
 * once (MV_FENCE_PEERS): each restart is an exit the owner reclaims the
 * old segment on, so every incarnation still copies. Alternately killed
 * and stopped with SIGTERM.
 */
START_TEST(test_copier_restarts_beyond_the_fence_peers_still_copy)
{
	/* > MV_FENCE_PEERS (64) incarnations, started WAVE at a time: most of
	 * a mover's start is a sleep in a library's constructor, so a wave
	 * takes about as long as one start. On shm, whose endpoints cost a
	 * start a third of tcp's CPU. */
	enum { WAVE = 10, rounds = 70 };
	const size_t n = 64u << 10;
	struct mvc *b;
	struct mvc_mem dst;
	uint8_t addr[MVC_BLOB_MAX], rblob[MVC_BLOB_MAX];
	size_t alen = sizeof(addr), rlen = sizeof(rblob);

	prov = "shm";
	mover_start(&B, "b", 1);
	ck_assert_int_eq(mvc_connect(&b, B.sock), 0);
	ck_assert_int_eq(mvc_alloc(b, n, &dst), 0);
	ck_assert_int_eq(mvc_address(b, addr, &alen), 0);
	ck_assert_int_eq(mvc_region_blob(b, dst.region, rblob, &rlen), 0);
	for (int w = 0; w < rounds / WAVE; w++) {
		struct mvproc m[WAVE];
		char name[WAVE][8];

		for (int i = 0; i < WAVE; i++) {
			snprintf(name[i], sizeof(name[i]), "a%d", i);
			mover_launch(&m[i], name[i], 1);
		}
		for (int i = 0; i < WAVE; i++)
			mover_listening(&m[i], name[i], 30);
		for (int i = 0; i < WAVE; i++) {
			int r = w * WAVE + i;
			struct mvc *a;
			struct mvc_mem src;
			uint32_t peer, imp;

			ck_assert_int_eq(mvc_connect(&a, m[i].sock), 0);
			ck_assert_int_eq(mvc_alloc(a, n, &src), 0);
			ck_assert_msg(mvc_peer_add(a, addr, alen, &peer) == 0, "%s", mvc_error(a));
			ck_assert_msg(mvc_import(a, peer, rblob, rlen, &imp) == 0, "%s",
			              mvc_error(a));
			fill(src.addr, n, 300 + (uint64_t)r);
			ck_assert_int_eq(mvc_write(a, src.region, 0, imp, 0, n), 0);
			landed(a, imp, b, 1 + (uint64_t)r);
			ck_assert_msg(!memcmp(src.addr, dst.addr, n), "round %d: bytes differ", r);
			ck_assert_msg(log_grep(&m[i], "refused", NULL, 0) == 0, "round %d: see %s",
			              r, m[i].log);
			if (r == rounds - 1) /* the last incarnation copied, not the fabric */
				ck_assert_uint_eq(stat_sum(&m[i], "\"samehost_bytes\""), n);
			mvc_disconnect(a);
			if (r % 2) {
				ck_assert_int_eq(mover_stop(&m[i]), 0);
			} else {
				kill(m[i].pid, SIGKILL);
				waitpid(m[i].pid, NULL, 0);
				shm_cleanup(m[i].pid);
				m[i].pid = 0;
			}
		}
	}
	/* The owner reclaimed a segment per exit it has seen (the last one
	 * may not be seen yet). */
	for (double t0 = now_s(); now_s() - t0 < 5;) {
		if (log_grep(&B, "its fence segment is reclaimed", NULL, 0) >= rounds)
			break;
		usleep(20000);
	}
	ck_assert_int_eq(log_grep(&B, "its fence segment is reclaimed", NULL, 0), rounds);
	ck_assert_int_eq(log_grep(&B, "the most it serves", NULL, 0), 0);
	mvc_disconnect(b);
}
END_TEST

/* ---- HOST_FD without blocking: the control loop keeps serving ---- */

struct importer {
	struct mvc *c;
	uint32_t peer, imp;
	uint8_t blob[MVC_BLOB_MAX];
	size_t len;
	int ret;
	double took;
	_Atomic int done;
};

static void *import_thread(void *arg)
{
	struct importer *im = arg;
	double t0 = now_s();

	im->ret = mvc_import(im->c, im->peer, im->blob, im->len, &im->imp);
	im->took = now_s() - t0;
	atomic_store(&im->done, 1);
	return NULL;
}

/* A client of mover m with a region of n bytes, peer of mover o's client. */
static void side_open(struct mvc **c, struct mvc_mem *mem, struct mvproc *m, size_t n)
{
	ck_assert_int_eq(mvc_connect(c, m->sock), 0);
	ck_assert_int_eq(mvc_alloc(*c, n, mem), 0);
}

static void importer_for(struct importer *im, struct mvc *c, struct mvc *owner,
                         const struct mvc_mem *mem)
{
	uint8_t addr[MVC_BLOB_MAX];
	size_t alen = sizeof(addr);

	memset(im, 0, sizeof(*im));
	im->c = c;
	im->len = sizeof(im->blob);
	ck_assert_int_eq(mvc_address(owner, addr, &alen), 0);
	ck_assert_msg(mvc_peer_add(c, addr, alen, &im->peer) == 0, "%s", mvc_error(c));
	ck_assert_int_eq(mvc_region_blob(owner, mem->region, im->blob, &im->len), 0);
}

/*
 * Two movers whose clients import each other's regions at the same moment:
 * both movers are stopped while the two IMPORTs are sent, and continued
 * together, so each reads its client's IMPORT and asks the other for the
 * memfd at once. Each control loop answers the other's HOST_FD while its
 * own waits: both imports succeed and both directions copy. (A mover that
 * waited for its answer on the main thread made each wait for the other
 * until its time ran out, and both wrote through the fabric.)
 */
START_TEST(test_movers_importing_each_other_at_once_both_copy)
{
	const size_t n = 1u << 20;
	struct mvc *a, *b;
	struct mvc_mem ma, mb;
	struct importer ia, ib;
	pthread_t ta, tb;

	side_open(&a, &ma, &A, n);
	side_open(&b, &mb, &B, n);
	importer_for(&ia, a, b, &mb);
	importer_for(&ib, b, a, &ma);
	kill(A.pid, SIGSTOP);
	kill(B.pid, SIGSTOP);
	ck_assert_int_eq(pthread_create(&ta, NULL, import_thread, &ia), 0);
	ck_assert_int_eq(pthread_create(&tb, NULL, import_thread, &ib), 0);
	usleep(100000); /* both IMPORTs wait in the movers' sockets */
	kill(A.pid, SIGCONT);
	kill(B.pid, SIGCONT);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	ck_assert_msg(ia.ret == 0, "A's import: %s", mvc_error(a));
	ck_assert_msg(ib.ret == 0, "B's import: %s", mvc_error(b));
	ck_assert_int_eq(log_grep(&A, "refused", NULL, 0) + log_grep(&B, "refused", NULL, 0), 0);
	ck_assert_int_eq(log_grep(&A, "no HOST_FD answer", NULL, 0) +
	                     log_grep(&B, "no HOST_FD answer", NULL, 0),
	                 0);
	fill(ma.addr, n, 71);
	fill(mb.addr, n, 72);
	/* Both ways at once, each checked. */
	ck_assert_int_eq(mvc_write(a, ma.region, 0, ia.imp, 0, n / 2), 0);
	ck_assert_int_eq(mvc_write(b, mb.region, n / 2, ib.imp, n / 2, n / 2), 0);
	landed(a, ia.imp, b, 1);
	landed(b, ib.imp, a, 2);
	ck_assert(!memcmp(ma.addr, mb.addr, n / 2));
	ck_assert(!memcmp((uint8_t *)ma.addr + n / 2, (uint8_t *)mb.addr + n / 2, n / 2));
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), n / 2);
	ck_assert_uint_eq(stat_sum(&B, "\"samehost_bytes\""), n / 2);
	ck_assert_uint_eq(stat_sum(&A, "\"host_bytes\"") + stat_sum(&B, "\"host_bytes\""), 0);
	mvc_disconnect(a);
	mvc_disconnect(b);
}
END_TEST

/*
 * The owner is stopped when a client imports its region: the importing
 * mover's control loop serves another client meanwhile, the IMPORT is
 * answered after MV_HOST_PARK_MS on the fabric (its writes land), and once
 * the owner answers, the import switches to copies.
 */
START_TEST(test_import_from_a_stopped_owner_goes_on_and_switches_to_copies)
{
	const size_t n = 1u << 20;
	struct mvc *a, *b, *other;
	struct mvc_mem ma, mb, om;
	struct importer ia;
	pthread_t ta;

	side_open(&a, &ma, &A, n);
	side_open(&b, &mb, &B, n);
	ck_assert_int_eq(mvc_connect(&other, A.sock), 0);
	importer_for(&ia, a, b, &mb);
	kill(B.pid, SIGSTOP);
	ck_assert_int_eq(pthread_create(&ta, NULL, import_thread, &ia), 0);
	usleep(100000);
	/* A's control loop is not held by the import that waits. */
	ck_assert_msg(mvc_alloc(other, 4096, &om) == 0, "%s", mvc_error(other));
	ck_assert_msg(!atomic_load(&ia.done), "the import returned before B answered");
	if (!strcmp(prov, "shm")) {
		/* On shm the import waits for B's word on the blob, past the
		 * 1 s a copy waits for; B answers, and it copies at once. */
		usleep(1500000);
		ck_assert_msg(!atomic_load(&ia.done), "the import stood without its owner's word");
		kill(B.pid, SIGCONT);
		pthread_join(ta, NULL);
		ck_assert_msg(ia.ret == 0, "import: %s", mvc_error(a));
		fill(ma.addr, n, 81);
		ck_assert_int_eq(mvc_write(a, ma.region, 0, ia.imp, 0, n), 0);
		landed(a, ia.imp, b, 1);
		ck_assert(!memcmp(ma.addr, mb.addr, n));
		ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), n);
		mvc_disconnect(a);
		mvc_disconnect(b);
		mvc_disconnect(other);
		return;
	}
	pthread_join(ta, NULL);
	ck_assert_msg(ia.ret == 0, "import: %s", mvc_error(a));
	ck_assert_int_eq(log_grep(&A, "no HOST_FD answer in", NULL, 0), 1);
	/* The fabric, while B sleeps: the write waits for it. */
	fill(ma.addr, n, 81);
	ck_assert_int_eq(mvc_write(a, ma.region, 0, ia.imp, 0, n), 0);
	uint64_t descs = stat_sum(&A, "\"descs\"");
	ck_assert_int_eq(mvc_submit(a, 1), 0);
	/* Taken (its path chosen) before B runs again. A's shard may instead
	 * be spinning in the post on B's shm queue lock, which B was stopped
	 * holding (then it took the write but cannot publish the count): B
	 * runs again after 1 s at most, well inside the 3 s op timeout. */
	for (double t0 = now_s(); now_s() - t0 < 1 && stat_sum(&A, "\"descs\"") == descs;)
		usleep(10000);
	kill(B.pid, SIGCONT);
	struct mvc_event e = wait_batch(a, 1, 20);
	ck_assert_msg(e.status == 0, "%s", e.msg);
	ck_assert_uint_eq(stat_sum(&A, "\"host_bytes\""), n);
	/* B answers once it runs: later writes are copies. */
	for (double t0 = now_s(); now_s() - t0 < 5 && !stat_sum(&A, "\"samehost_bytes\"");) {
		ck_assert_int_eq(mvc_write(a, ma.region, 0, ia.imp, 0, 4096), 0);
		submit_ok(a, 2);
		usleep(20000);
	}
	fill(ma.addr, n, 82);
	uint64_t copied = stat_sum(&A, "\"samehost_bytes\"");
	ck_assert_msg(copied > 0, "no copy after B answered; see %s", A.log);
	ck_assert_int_eq(mvc_write(a, ma.region, 0, ia.imp, 0, n), 0);
	landed(a, ia.imp, b, 3);
	ck_assert(!memcmp(ma.addr, mb.addr, n));
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\"") - copied, n);
	ck_assert_int_eq(log_grep(&A, "refused", NULL, 0), 0);
	mvc_disconnect(other);
	mvc_disconnect(a);
	mvc_disconnect(b);
}
END_TEST

/*
 * A peer mover on this host but in a pid namespace of its own (a
 * container): its pid means nothing here, so no copies; its regions are
 * written through the fabric, and the log says why, once for the peer.
 */
START_TEST(test_peer_in_another_pid_namespace_is_written_through_the_fabric_with_why)
{
	const char *bdir = getenv("MV_BUILD") ? getenv("MV_BUILD") : "build";
	const size_t n = 1u << 20;
	char bin[256];
	struct mvc_mem d2;
	struct pair p;

	if (system("unshare --pid --fork true 2>/dev/null") != 0) {
		printf("skipped: no rights to make a pid namespace (unshare --pid)\n");
		return;
	}
	prov = "tcp";
	mover_start(&A, "a", 1);
	snprintf(B.sock, sizeof(B.sock), "/tmp/mvt.%d.b.sock", getpid());
	snprintf(B.log, sizeof(B.log), "/tmp/mvt.%d.b.log", getpid());
	snprintf(bin, sizeof(bin), "%s/bin/mover", bdir);
	const char *argv[] = {"/usr/bin/unshare",
	                      "--pid",
	                      "--fork",
	                      "--kill-child=SIGTERM",
	                      bin,
	                      "--provider",
	                      "tcp",
	                      "--iface",
	                      "lo",
	                      "--shards",
	                      "1",
	                      "--op-timeout",
	                      "3",
	                      "--socket",
	                      B.sock,
	                      "--no-config",
	                      NULL};
	mover_spawn(&B, argv);
	mover_listening(&B, "b", 30);
	pair_open(&p, n, n);
	contiguous_round(&p, n, 61, 1);
	ck_assert_int_eq(mvc_alloc(p.b, n, &d2), 0);
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	uint32_t imp2;
	ck_assert_int_eq(mvc_region_blob(p.b, d2.region, blob, &len), 0);
	ck_assert_msg(mvc_import(p.a, p.peer, blob, len, &imp2) == 0, "%s", mvc_error(p.a));
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), 0);
	ck_assert_uint_eq(stat_sum(&A, "\"host_bytes\""), n);
	ck_assert_int_eq(log_grep(&A, "not in this pid namespace", NULL, 0), 1);
	pair_close(&p);
}
END_TEST

static TCase *peers(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_mismatched_fd_is_refused_and_writes_go_by_fabric);
	tcase_add_test(tc, test_movers_importing_each_other_at_once_both_copy);
	tcase_add_test(tc, test_import_from_a_stopped_owner_goes_on_and_switches_to_copies);
	return tc;
}

int main(void)
{
	Suite *s = suite_create("samehost_peers");
	TCase *tc;

	suite_add_tcase(s, peers("peers_shm", setup_shm));
	suite_add_tcase(s, peers("peers_tcp", setup_tcp));
	tc = tcase_create("pidns");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc,
	               test_peer_in_another_pid_namespace_is_written_through_the_fabric_with_why);
	suite_add_tcase(s, tc);
	tc = tcase_create("fence");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_copier_restarts_beyond_the_fence_peers_still_copy);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
