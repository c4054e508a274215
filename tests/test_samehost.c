/* SPDX-License-Identifier: MIT */
/*
 * The same-host path (mover/samehost.c), end to end on shm and tcp: writes
 * between two movers of this host are copies by the sending shard into the
 * receiver's memfd (mvstat's samehost_bytes counts them), byte for byte,
 * contiguous and paged (lists by reference), each batch's immediate after
 * its data; --no-host-copy keeps them on the fabric; a region freed by its
 * owner takes no copy after; and an fd that does not match its blob (too
 * short, not sealed, not from the peer mover's process) is refused with one
 * log line, the writes going through the fabric instead.
 */
#include <check.h>
#include <errno.h>
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

static void setup_shm_copy(void)
{
	mover_extra = NULL;
	setup_shm();
}

static void setup_tcp_copy(void)
{
	mover_extra = NULL;
	setup_tcp();
}

static void setup_shm_fabric(void)
{
	mover_extra = "--no-host-copy";
	prov = "shm";
	mover_start(&A, "a", 2);
	mover_extra = NULL;
	mover_start(&B, "b", 2);
}

/* Writes n bytes (a few contiguous writes, one past MV_CHUNK) with an
 * immediate, and checks every byte at the receiver. */
static void contiguous_round(struct pair *p, size_t n, uint64_t seed, uint64_t cookie)
{
	fill(p->src.addr, n, seed);
	memset(p->dst.addr, 0, n);
	ck_assert_int_eq(mvc_write(p->a, p->src.region, 0, p->imp, 0, n / 2), 0);
	ck_assert_int_eq(mvc_write(p->a, p->src.region, n / 2, p->imp, n / 2, n - n / 2), 0);
	landed(p->a, p->imp, p->b, cookie);
	ck_assert_msg(!memcmp(p->src.addr, p->dst.addr, n), "bytes differ after batch %llu",
	              (unsigned long long)cookie);
}

START_TEST(test_same_host_write_is_a_copy_and_lands_whole)
{
	struct pair p;
	const size_t n = 10u << 20;

	pair_open(&p, n, n);
	for (int r = 0; r < 3; r++)
		contiguous_round(&p, n, 11 + (uint64_t)r, 100 + (uint64_t)r);
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), 3 * (uint64_t)n);
	ck_assert_uint_eq(stat_sum(&A, "\"host_bytes\""), 0);
	pair_close(&p);
}
END_TEST

START_TEST(test_same_host_paged_write_is_a_copy_and_lands_whole)
{
	struct pair p;
	const uint32_t npages = 4096, page = 4096;
	const size_t n = (size_t)npages * page;
	uint32_t *sp = malloc(npages * sizeof(*sp)), *dp = malloc(npages * sizeof(*dp));

	pair_open(&p, n, n);
	fill(p.src.addr, n, 5);
	memset(p.dst.addr, 0, n);
	/* Sources in order, destinations in groups of 8, every other group
	 * reversed: runs that merge into one copy and pages that do not, a
	 * list by reference. */
	for (uint32_t i = 0; i < npages; i++) {
		sp[i] = i;
		dp[i] = (i / 8) % 2 ? (i / 8) * 8 + 7 - i % 8 : i;
	}
	struct mvc_pages pg = {.src = p.src.region,
	                       .dst = p.imp,
	                       .src_stride = page,
	                       .dst_stride = page,
	                       .page_size = page,
	                       .src_pages = sp,
	                       .dst_pages = dp,
	                       .npages = npages};
	ck_assert_msg(mvc_write_paged(p.a, &pg) == 0, "%s", mvc_error(p.a));
	landed(p.a, p.imp, p.b, 7);
	for (uint32_t i = 0; i < npages; i++)
		ck_assert_msg(!memcmp((uint8_t *)p.src.addr + (size_t)sp[i] * page,
		                      (uint8_t *)p.dst.addr + (size_t)dp[i] * page, page),
		              "page %u (source %u, destination %u) differs", i, sp[i], dp[i]);
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), n);
	free(sp);
	free(dp);
	pair_close(&p);
}
END_TEST

START_TEST(test_no_host_copy_keeps_writes_on_the_fabric)
{
	struct pair p;
	const size_t n = 6u << 20;

	pair_open(&p, n, n);
	contiguous_round(&p, n, 3, 1);
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), 0);
	ck_assert_uint_eq(stat_sum(&A, "\"host_bytes\""), n);
	pair_close(&p);
}
END_TEST

START_TEST(test_freed_region_takes_no_more_copies)
{
	struct pair p;
	const size_t n = 1u << 20;

	pair_open(&p, n, n);
	contiguous_round(&p, n, 9, 1);
	ck_assert_int_eq(mvc_free(p.b, &p.dst), 0);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, n), 0);
	ck_assert_int_eq(mvc_submit(p.a, 2), 0);
	struct mvc_event e = wait_batch(p.a, 2, 20);
	ck_assert_msg(e.status != 0, "a write into a freed region succeeded");
	ck_assert_msg(strstr(e.msg, "freed"), "cause: %s", e.msg);
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), n);
	pair_close(&p);
}
END_TEST

START_TEST(test_dead_peer_fails_copies_once_its_death_is_seen)
{
	struct pair p;
	const size_t n = 1u << 20;
	struct mvc_event e = {0};

	pair_open(&p, n, n);
	contiguous_round(&p, n, 21, 1);
	kill(B.pid, SIGKILL);
	waitpid(B.pid, NULL, 0);
	shm_cleanup(B.pid);
	B.pid = 0;
	/* A hears of it through B's pidfd, at once or nearly: a copy taken
	 * after that fails, naming the exit, and none hangs. */
	for (uint64_t c = 2; c < 200 && !e.status; c++) {
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, n), 0);
		ck_assert_int_eq(mvc_submit(p.a, c), 0);
		e = wait_batch(p.a, c, 20);
		if (!e.status)
			usleep(10000);
	}
	ck_assert_msg(e.status != 0, "copies into a dead peer never failed");
	ck_assert_msg(strstr(e.msg, "exited"), "cause: %s", e.msg);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
	ck_assert_int_eq(mover_stop(&A), 0);
}
END_TEST

/* ---- bad input: a HOST_FD reply whose fd does not match the blob ---- */

enum fake_kind { FAKE_SHORT, FAKE_UNSEALED, FAKE_NOT_OWNER, FAKE_KINDS };
static const char *const fake_why[FAKE_KINDS] = {"bytes; the blob needs", "not sealed",
                                                 "the fd came from pid"};

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
		ck_assert_msg(mvc_import(p.a, p.peer, blob, len, &imp) == 0, "%s", mvc_error(p.a));
		kill(fake, SIGKILL);
		waitpid(fake, NULL, 0);
		unlink(path);
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

static TCase *copies(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_same_host_write_is_a_copy_and_lands_whole);
	tcase_add_test(tc, test_same_host_paged_write_is_a_copy_and_lands_whole);
	tcase_add_test(tc, test_freed_region_takes_no_more_copies);
	tcase_add_test(tc, test_dead_peer_fails_copies_once_its_death_is_seen);
	tcase_add_test(tc, test_mismatched_fd_is_refused_and_writes_go_by_fabric);
	return tc;
}

int main(void)
{
	Suite *s = suite_create("samehost");
	TCase *tc = tcase_create("fabric_shm");

	suite_add_tcase(s, copies("copy_shm", setup_shm_copy));
	suite_add_tcase(s, copies("copy_tcp", setup_tcp_copy));
	tcase_add_checked_fixture(tc, setup_shm_fabric, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_no_host_copy_keeps_writes_on_the_fabric);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
