/* SPDX-License-Identifier: MIT */
/*
 * The bounce chunks of staged GPU writes (8 a shard, each held until its
 * write completes) against peers that take nothing, on a machine with a
 * CUDA device (skipped with the reason elsewhere). Over tcp, movers stopped
 * once they had met take nothing while their kernels still ack, so the
 * chunks of the writes to them stay held. A uid whose writes wait on them
 * holds up no other uid's staged writes; a client whose uid holds its
 * share, none freeing, fails at the deadline saying so; and where every
 * chunk is held for the deadline, the staged writes waiting for one fail,
 * naming the holders, and mvstat shows all eight held. The cases with a
 * second uid need root (skipped, saying so, without it). A stopped peer
 * beside a client's own chunks, with one client each: test_gpu_guard.c.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mvc.h"
#include "mvtest.h"

#ifdef MV_HAVE_CUDA
#include "gpu_util.h"
#include "mvflood.h"

#define HEX_MAX (2 * MVC_BLOB_MAX + 1)

/* Movers A and C, and four more to stop (NSTOP), one shard each. */
#define NSTOP 4
static struct mvproc stopped[NSTOP];

/* A region of each stopped mover, as hex blobs (its mover's address and
 * the region's), for clients of another uid: taken before the stop. */
static char stopped_addr[NSTOP][HEX_MAX], stopped_blob[NSTOP][HEX_MAX];

static void movers_chunks(void)
{
	prov = "tcp";
	mover_launch(&A, "a", 1);
	mover_launch(&C, "c", 1);
	for (int i = 0; i < NSTOP; i++) {
		char name[8];
		snprintf(name, sizeof(name), "s%d", i);
		mover_launch(&stopped[i], name, 1);
	}
	movers_listening();
	for (int i = 0; i < NSTOP; i++)
		mover_listening(&stopped[i], "s*", 30);
	ck_assert_int_eq(chmod(A.sock, 0666), 0); /* a client of uid 65534 too */
}

static void chunks_setup(void)
{
	mover_extra = "--no-gpu-copy"; /* one host, taken as six */
	mover_extra2 = "--gpu-path=staged";
	mover_extra3 = "--allow-any-uid";
	gpu_setup_on(movers_chunks);
	mover_extra3 = NULL;
}

static void chunks_teardown(void)
{
	for (int i = 0; i < NSTOP; i++) {
		if (stopped[i].pid > 0)
			kill(stopped[i].pid, SIGCONT);
		mover_stop(&stopped[i]);
		unlink(stopped[i].log);
		unlink(stopped[i].sock);
	}
	teardown();
}

/* Whether this process may run a client as another uid; says so where not. */
static int as_root(const char *test)
{
	if (geteuid() == 0)
		return 1;
	printf("%s: SKIPPED: needs root to run a client as uid 65534\n", test);
	return 0;
}

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/* The address of owner's mover and the blob of its region, in hex. */
static void blob_hex(struct mvc *owner, uint32_t region, char *ahex, char *bhex)
{
	uint8_t addr[MVC_BLOB_MAX], blob[MVC_BLOB_MAX];
	size_t alen = sizeof(addr), blen = sizeof(blob);

	ck_assert_int_eq(mvc_address(owner, addr, &alen), 0);
	ck_assert_msg(mvc_region_blob(owner, region, blob, &blen) == 0, "%s", mvc_error(owner));
	hex(addr, alen, ahex);
	hex(blob, blen, bhex);
}

/* X of A writes 40 MiB (ten chunks) from its GPU memory to each of the
 * stopped movers, once it met each, stopped then; X's writes hold what
 * chunks they may (4, 2: their uid's share, 6 of 8). */
static struct mvc *chunks_held_by_stopped(CUdeviceptr *dx, struct mvc *os[NSTOP])
{
	const size_t xn = 40u << 20;
	struct mvc *x;
	struct mvc_mem gx, hs;
	uint32_t ixs[NSTOP];
	int st;

	ck_assert_int_eq(mvc_connect(&x, A.sock), 0);
	*dx = dev_alloc(xn);
	ck_assert_msg(mvc_register_cuda(x, (void *)*dx, xn, &gx) == 0, "%s", mvc_error(x));
	for (int i = 0; i < NSTOP; i++) {
		ck_assert_int_eq(mvc_connect(&os[i], stopped[i].sock), 0);
		ck_assert_msg(mvc_alloc(os[i], xn, &hs) == 0, "%s", mvc_error(os[i]));
		blob_hex(os[i], hs.region, stopped_addr[i], stopped_blob[i]);
		ixs[i] = reach(x, os[i], hs.region);
		ck_assert_int_eq(mvc_write(x, gx.region, 0, ixs[i], 0, 1u << 20), 0);
		submit_ok(x, 100 + (uint64_t)i);
	}
	for (int i = 0; i < NSTOP; i++) {
		ck_assert_int_eq(kill(stopped[i].pid, SIGSTOP), 0);
		ck_assert_int_eq(waitpid(stopped[i].pid, &st, WUNTRACED), stopped[i].pid);
	}
	for (int i = 0; i < NSTOP; i++) {
		ck_assert_int_eq(mvc_write(x, gx.region, 0, ixs[i], 0, xn), 0);
		ck_assert_int_eq(mvc_submit(x, (uint64_t)i), 0);
	}
	usleep(300000); /* X's chunks copied and written, their sockets full */
	return x;
}

/* The stopped movers go on; X's batches end (went on, or failed at the
 * deadline), and its owners leave. */
static void chunks_release(struct mvc *x, CUdeviceptr dx, struct mvc *os[NSTOP])
{
	uint64_t xc[NSTOP] = {0, 1, 2, 3};
	struct mvc_event xe[NSTOP];

	for (int i = 0; i < NSTOP; i++)
		kill(stopped[i].pid, SIGCONT);
	wait_batches(x, xc, xe, NSTOP, 20);
	mvc_disconnect(x);
	for (int i = 0; i < NSTOP; i++)
		mvc_disconnect(os[i]);
	cu->MemFree(dx);
}

/* tests/gpu_writer, beside this program, run as uid 65534 (a process that
 * started CUDA must not fork, so the child only execs): through mover A it
 * writes count batches of bytes of fill seed from its GPU memory into the
 * region of the hex blob bhex, at the mover of the hex address ahex. Its
 * pid; *out is the pipe its one line comes on. */
static pid_t writer_start(const char *ahex, const char *bhex, size_t bytes, int count, int seed,
                          int *out)
{
	char bin[256], nb[32], nc[16], ns[16];
	int pfd[2];

	snprintf(nb, sizeof(nb), "%zu", bytes);
	snprintf(nc, sizeof(nc), "%d", count);
	snprintf(ns, sizeof(ns), "%d", seed);
	/* Beside this program, whichever mover MV_BUILD names. */
	ssize_t bl = readlink("/proc/self/exe", bin, sizeof(bin) - 16);
	ck_assert_int_gt(bl, 0);
	bin[bl] = 0;
	strcpy(strrchr(bin, '/') + 1, "gpu_writer");
	ck_assert_int_eq(pipe2(pfd, O_CLOEXEC), 0); /* dup2 clears it on fd 1 */
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		if (setgid(65534) || setuid(65534))
			_exit(3);
		execl(bin, bin, A.sock, ahex, bhex, nb, nc, ns, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	*out = pfd[0];
	return pid;
}

/* The writer's line (newline cut) into line; its exit status, -1 where it
 * did not exit. */
static int writer_end(pid_t pid, int out, char *line, size_t len)
{
	ssize_t got = read(out, line, len - 1);
	int st;

	line[got > 0 ? got : 0] = 0;
	line[strcspn(line, "\n")] = 0;
	close(out);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/*
 * A uid whose writes wait on stopped peers holds up no other uid's staged
 * writes. Client X of root writes from its GPU memory to four movers
 * stopped once they had met (chunks_held_by_stopped()); then a client of
 * uid 65534 (tests/gpu_writer, run as that uid: a process that started
 * CUDA must not fork) writes 4 x 4 MiB from its GPU memory to C: every
 * batch completes and lands. Before, X's writes took every chunk, four
 * peers' shares, and the other uid's batches failed at the deadline.
 */
START_TEST(test_a_uids_stopped_peers_hold_no_chunk_of_another_uid)
{
	if (!as_root(__func__))
		return;
	enum { NY = 4 };
	const size_t yn = 4u << 20;
	struct mvc *x, *oc, *os[NSTOP];
	struct mvc_mem hc;
	CUdeviceptr dx;

	ck_assert_int_eq(mvc_connect(&oc, C.sock), 0);
	ck_assert_msg(mvc_alloc(oc, (size_t)NY * yn, &hc) == 0, "%s", mvc_error(oc));
	x = chunks_held_by_stopped(&dx, os);
	char ahex[HEX_MAX], bhex[HEX_MAX], line[256];
	blob_hex(oc, hc.region, ahex, bhex);
	int out;
	pid_t pid = writer_start(ahex, bhex, yn, NY, 73, &out);
	int rc = writer_end(pid, out, line, sizeof(line));
	ck_assert_msg(rc == 0 && !strncmp(line, "ok", 2),
	              "uid 65534's staged batches beside root's stopped peers (exit %d): %s", rc,
	              line);
	uint8_t *want = malloc(yn);
	fill(want, yn, 73);
	for (int i = 0; i < NY; i++)
		ck_assert_msg(!memcmp((uint8_t *)hc.addr + (size_t)i * yn, want, yn),
		              "uid 65534's batch %d: C's memory differs", i);
	free(want);
	printf("staged: uid 65534's %d batches into C beside root's stopped peers: %s s\n", NY,
	       line + 3);
	chunks_release(x, dx, os);
	mvc_disconnect(oc);
}
END_TEST

/* Y, a new client of A, writes n bytes from its GPU memory d to the region
 * of C's client oc in one batch: the batch's event, and the seconds from
 * its submit. */
static struct mvc_event y_writes(struct mvc **y, CUdeviceptr d, size_t n, struct mvc *oc,
                                 uint32_t region, double *took)
{
	struct mvc_mem g;

	ck_assert_int_eq(mvc_connect(y, A.sock), 0);
	ck_assert_msg(mvc_register_cuda(*y, (void *)d, n, &g) == 0, "%s", mvc_error(*y));
	uint32_t imp = reach(*y, oc, region);
	ck_assert_int_eq(mvc_write(*y, g.region, 0, imp, 0, n), 0);
	double t0 = now_s();
	ck_assert_int_eq(mvc_submit(*y, 200), 0);
	struct mvc_event e = wait_batch(*y, 200, 20);
	*took = now_s() - t0;
	return e;
}

/*
 * A staged write whose bounce chunk cannot come fails at the deadline,
 * naming why, instead of waiting for good. Each chunk (8 a shard) is held
 * until its write completes, and libfabric cannot take a posted write back:
 * client X of A writes from its GPU memory to four movers stopped once they
 * had met, so its writes hold 4 and 2 chunks, each peer its share of what
 * the others leave, until their uid holds its share (6 of 8), and none
 * frees. Client Y of the same uid then writes from its GPU memory to C:
 * its batch fails within twice the deadline (3 s), saying that its uid
 * holds its share of the chunks and none came free. Before, it waited for
 * as long as those movers stayed stopped.
 */
START_TEST(test_a_staged_write_whose_chunk_cannot_come_fails_naming_why)
{
	const size_t yn = 4u << 20;
	struct mvc *x, *y, *oc, *os[NSTOP];
	struct mvc_mem hc;
	CUdeviceptr dx, dy = dev_alloc(yn);

	ck_assert_int_eq(mvc_connect(&oc, C.sock), 0);
	ck_assert_msg(mvc_alloc(oc, yn, &hc) == 0, "%s", mvc_error(oc));
	x = chunks_held_by_stopped(&dx, os);
	double took;
	struct mvc_event e = y_writes(&y, dy, yn, oc, hc.region, &took);
	ck_assert_msg(e.status == -ETIMEDOUT && strstr(e.msg, "bounce chunks, its share"),
	              "Y's batch beside four stopped peers' chunks, %.2f s in: status %d, %s", took,
	              e.status, e.msg);
	ck_assert_msg(took > 2.5 && took < 6,
	              "Y's batch failed %.2f s in: not at its own deadline (3 s) of waiting", took);
	printf("staged: Y's batch failed %.2f s in: %s\n", took, e.msg);
	chunks_release(x, dx, os);
	mvc_disconnect(y);
	mvc_disconnect(oc);
	cu->MemFree(dy);
}
END_TEST

/*
 * Where every bounce chunk has been held for the deadline, none freeing,
 * the staged writes waiting for one fail, naming the holders, instead of
 * waiting for as long as their peers stay stopped. X of root holds 6
 * chunks (chunks_held_by_stopped(): 4 for S0, 2 for S1); two clients of
 * uid 65534 then write 8 MiB each from their GPU memory to S2 and S3,
 * stopped too, and take the last two (one each: each peer's share of
 * what the others leave, and their uid's of what root's leave). mvstat
 * then shows A's 8 chunks held. Y of root writes 4 MiB from its GPU
 * memory to C, a live mover: its batch fails within the deadline (3 s)
 * of the eighth chunk's taking, saying that no chunk came free and that
 * S0 holds 4 of 8; A's log names the four holders, 8 chunks in all.
 */
START_TEST(test_every_chunk_held_fails_the_waiting_writes_naming_the_holders)
{
	if (!as_root(__func__))
		return;
	const size_t yn = 4u << 20;
	struct mvc *x, *y, *oc, *os[NSTOP];
	struct mvc_mem hc;
	struct mvc_info s0;
	CUdeviceptr dx, dy = dev_alloc(yn);
	pid_t w[2];
	int out[2];

	ck_assert_int_eq(mvc_connect(&oc, C.sock), 0);
	ck_assert_msg(mvc_alloc(oc, yn, &hc) == 0, "%s", mvc_error(oc));
	x = chunks_held_by_stopped(&dx, os);
	ck_assert_int_eq(mvc_info(os[0], &s0), 0);
	for (int i = 0; i < 2; i++)
		w[i] = writer_start(stopped_addr[2 + i], stopped_blob[2 + i], 8u << 20, 1, 80 + i,
		                    &out[i]);
	uint64_t held = 0;
	for (double t0 = now_s(); now_s() - t0 < 15 && held < 8; usleep(20000))
		held = stat_sum(&A, "\"bounce_held\"");
	if (held != 8) {
		char l0[256], l1[256];
		chunks_release(x, dx, os);
		writer_end(w[0], out[0], l0, sizeof(l0));
		writer_end(w[1], out[1], l1, sizeof(l1));
		ck_abort_msg("A's bounce chunks held beside six stopped writes and two of uid "
		             "65534: %llu of 8 (the writers: '%s', '%s')",
		             (unsigned long long)held, l0, l1);
	}
	uint64_t pend = stat_sum(&A, "\"pending\""), infl = stat_sum(&A, "\"inflight\"");
	/* Y comes now: a client attached while X's writes were queued would
	 * have held them to a shared share of bytes in flight, and those not
	 * posted fail at the deadline, giving their chunks back. */
	double took;
	struct mvc_event e = y_writes(&y, dy, yn, oc, hc.region, &took);
	char want[96];
	snprintf(want, sizeof(want), "peer mover %016llx holds 4 of 8",
	         (unsigned long long)s0.mover_id);
	ck_assert_msg(e.status == -ETIMEDOUT && strstr(e.msg, "no bounce chunk freed in 3000 ms") &&
	                  strstr(e.msg, want),
	              "Y's batch with every chunk held, %.2f s in: status %d, %s (want: %s; A's "
	              "writes then: %llu queued, %llu posted)",
	              took, e.status, e.msg, want, (unsigned long long)pend,
	              (unsigned long long)infl);
	ck_assert_msg(took < 4.5,
	              "Y's batch failed %.2f s in, past the deadline (3 s) of the "
	              "chunks' being held",
	              took);
	char logl[1024];
	ck_assert_int_eq(
	    log_grep(&A, "Held by writes to peer movers that take nothing:", logl, sizeof(logl)),
	    1);
	unsigned n = 0, sum = 0, v;
	int used;
	for (const char *q = strstr(logl, "take nothing:") + 13;
	     sscanf(q, " %*16[0-9a-f]: %u%n", &v, &used) == 1; q += used)
		n++, sum += v;
	ck_assert_msg(n == 4 && sum == 8, "A's log names %u holders of %u chunks: %s", n, sum,
	              logl);
	printf("staged: every chunk held: Y's batch failed %.2f s in: %s\n", took, e.msg);
	chunks_release(x, dx, os);
	/* The writers end either way: their writes went on, or failed. */
	for (int i = 0; i < 2; i++) {
		char line[256];
		writer_end(w[i], out[i], line, sizeof(line));
	}
	mvc_disconnect(y);
	mvc_disconnect(oc);
	cu->MemFree(dy);
}
END_TEST

int main(void)
{
	char why[256];

	if (!gpu_usable(why, sizeof(why))) {
		printf("test_gpu_chunks: SKIPPED: %s\n", why);
		return 0;
	}
	Suite *s = suite_create("gpu_chunks");
	TCase *tc = tcase_create("chunks");
	tcase_add_checked_fixture(tc, chunks_setup, chunks_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_a_staged_write_whose_chunk_cannot_come_fails_naming_why);
	tcase_add_test(tc, test_a_uids_stopped_peers_hold_no_chunk_of_another_uid);
	tcase_add_test(tc, test_every_chunk_held_fails_the_waiting_writes_naming_the_holders);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

#else
int main(void)
{
	printf("test_gpu_chunks: SKIPPED: built without the CUDA toolkit (no cuda.h)\n");
	return 0;
}
#endif
