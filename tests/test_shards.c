/* SPDX-License-Identifier: MIT */
/*
 * End-to-end tests of a mover's shards over tcp;ofi_rxm on loopback and shm:
 * where they are pinned (hwloc's synthetic topologies: physical cores
 * before a core's second thread; two movers of one host on cores apart),
 * how they sleep when idle (near no CPU, a sleeping shm receiver woken by
 * its sender, long sleeps kept beside an idle peer), and which shard a
 * client's small batch goes to (the least loaded).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <pthread.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
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

/* ---- idle shards ---- */

static long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024];
	long ut = 0, st = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(buf, sizeof(buf), f));
	fclose(f);
	/* Fields 14 and 15 (utime, stime) follow the ')' that ends the name. */
	char *p = strrchr(buf, ')');
	ck_assert(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &ut, &st) ==
	          2);
	return ut + st;
}

START_TEST(test_idle_mover_sleeps)
{
	struct pair p;

	/* After some traffic, nothing: the shards must go to sleep. */
	pair_open(&p, 1u << 20, 1u << 20);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 1u << 20), 0);
	submit_ok(p.a, 1);
	usleep(300000);
	long t0 = cpu_ticks(A.pid), hz = sysconf(_SC_CLK_TCK);
	sleep(3);
	long used = cpu_ticks(A.pid) - t0;
	/* 2 shards spinning would be 6 s of CPU; sleeping is near 0. */
	ck_assert_msg(used * 10 < 3 * hz, "idle mover used %ld of %ld ticks in 3 s", used, 3 * hz);
	pair_close(&p);
}
END_TEST

/*
 * shm: the receiver copies a write of several segments (one segment the
 * sender copies itself), and shm has no wait object, so a receiving shard
 * asleep after a second of idleness would hold such a write for up to
 * 50 ms. The sending shard wakes it instead (mover/wake.c): its "wakes"
 * counter says it did. The shard's short wakes between sleeps could meet a
 * write, so three tries.
 */
START_TEST(test_idle_shm_receiver_is_woken_by_its_sender)
{
	struct pair p;
	long wakes = 0;

	if (strcmp(prov, "shm")) {
		fprintf(stderr, "skipped on %s: its receiver sleeps on the CQ fd\n", prov);
		return;
	}
	sender_on_fabric();
	pair_open(&p, 1u << 20, 1u << 20);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 1u << 20), 0);
	submit_ok(p.a, 1);
	for (int i = 0; i < 3 && wakes <= 0; i++) {
		usleep(1200000); /* past 1 s idle: B's shards sleep 50 ms at a time */
		struct mvc_seg seg[4];
		for (int k = 0; k < 4; k++)
			seg[k] = (struct mvc_seg){.src_off = (uint64_t)k << 14,
			                          .dst_off = (uint64_t)k << 16,
			                          .len = 1u << 14};
		fill(p.src.addr, 65536, (uint64_t)i);
		double t0 = now_s();
		ck_assert_int_eq(mvc_writev(p.a, p.src.region, p.imp, seg, 4), 0);
		submit_ok(p.a, 2 + (uint64_t)i);
		fprintf(stderr, "idle shm receiver: 4 x 16 KiB write completed in %.2f ms\n",
		        (now_s() - t0) * 1e3);
		for (int k = 0; k < 4; k++)
			ck_assert(!memcmp((uint8_t *)p.dst.addr + seg[k].dst_off,
			                  (uint8_t *)p.src.addr + seg[k].src_off, 1u << 14));
		wakes = (long)stat_sum(&A, "\"wakes\"");
	}
	ck_assert_msg(wakes > 0, "the sender never woke the idle receiver");
	pair_close(&p);
}
END_TEST

/*
 * An idle mover with a peer stays in its long sleeps: the peer's heartbeat
 * (one a second from the mover that watches it, and its completion there)
 * is no work. Counted as work, each one started an shm shard's 20 us sleeps
 * again (mover/shard.c): ~250 sleeps a second on that shard, against ~20 at
 * 50 ms a sleep, and 0.8% of a core idle on the 2-core machine.
 */
START_TEST(test_idle_mover_with_a_peer_keeps_its_long_sleeps)
{
	struct pair p;

	if (strcmp(prov, "shm")) {
		fprintf(stderr,
		        "skipped on %s: its shards sleep on the CQ fd, with no short steps\n",
		        prov);
		return;
	}
	pair_open(&p, 1u << 20, 1u << 20);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 4096), 0);
	submit_ok(p.a, 1);
	usleep(1100000); /* past 1 s idle: shm shards sleep 50 ms at a time */
	long a0 = (long)stat_sum(&A, "\"sleeps\""), b0 = (long)stat_sum(&B, "\"sleeps\"");
	sleep(2);
	long a1 = (long)stat_sum(&A, "\"sleeps\""), b1 = (long)stat_sum(&B, "\"sleeps\"");
	fprintf(stderr, "idle shm movers with a peer, 2 s: %ld sleeps (watcher), %ld (watched)\n",
	        a1 - a0, b1 - b0);
	/* Two shards each: ~40 sleeps in 2 s at 50 ms, the heartbeats' own
	 * looks (8 a second on A's shard 0) and wakes on top; with the short
	 * steps again, ~500. */
	ck_assert_msg(a1 - a0 < 200 && b1 - b0 < 200,
	              "idle movers slept %ld and %ld times in 2 s: short sleeps again", a1 - a0,
	              b1 - b0);
	pair_close(&p);
}
END_TEST

/* ---- which shard ---- */

/* Batches that are not split go to the shard with the fewest bytes in
 * flight: with a big batch outstanding on one shard (its completion not yet
 * read), the small ones that follow all go to the other, where strict turns
 * would have put every second one behind the big one. The big one stays
 * below 64 KiB, whole on the same-host path too (mv_host_parts()). */
START_TEST(test_small_batches_go_to_the_least_loaded_shard)
{
	struct pair p;
	struct mvc_event ev[4];
	const uint64_t n = 1u << 20, big = 60u << 10;
	const uint64_t cookies[4] = {21, 22, 23, 24};

	pair_open(&p, n, n);
	fill(p.src.addr, n, 5);
	memset(p.dst.addr, 0, n);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, big), 0);
	ck_assert_int_eq(mvc_submit(p.a, cookies[0]), 0);
	for (int i = 1; i < 4; i++) {
		uint64_t off = big + (uint64_t)(i - 1) * 4096;
		ck_assert_int_eq(mvc_write(p.a, p.src.region, off, p.imp, off, 4096), 0);
		ck_assert_int_eq(mvc_submit(p.a, cookies[i]), 0);
	}
	uint64_t b0 = mvc_shard_bytes(p.a, 0), b1 = mvc_shard_bytes(p.a, 1);
	ck_assert_msg((b0 == big && b1 == 3 * 4096) || (b1 == big && b0 == 3 * 4096),
	              "shard 0 took %llu bytes and shard 1 %llu; the big batch was %llu",
	              (unsigned long long)b0, (unsigned long long)b1, (unsigned long long)big);
	wait_batches(p.a, cookies, ev, 4, 20);
	for (int i = 0; i < 4; i++)
		ck_assert_msg(ev[i].status == 0, "batch %d: %s", i, ev[i].msg);
	ck_assert(!memcmp(p.dst.addr, p.src.addr, big + 3 * 4096));
	pair_close(&p);
}
END_TEST

/* ---- where shards run ---- */

/*
 * The CPUs a mover started under hwloc's synthetic topology syn
 * ($HWLOC_SYNTHETIC) gives its n shards, read from its log ("shard k:
 * ..., CPU c, ..."). CPUs the machine lacks only make pinning fail with a
 * warning; the choice is the mover's all the same.
 */
static void shard_cpus(const char *syn, int n, int *cpu)
{
	char line[1024], what[32];

	setenv("HWLOC_SYNTHETIC", syn, 1);
	mover_start(&A, "a", n);
	unsetenv("HWLOC_SYNTHETIC");
	for (int k = 0; k < n; k++) {
		snprintf(what, sizeof(what), "shard %d: provider", k);
		ck_assert_msg(log_grep(&A, what, line, sizeof(line)) == 1, "no '%s' in %s", what,
		              A.log);
		const char *c = strstr(line, ", CPU ");
		ck_assert_msg(c, "no CPU in '%s'", line);
		cpu[k] = atoi(c + 6);
	}
	ck_assert_int_eq(mover_stop(&A), 0);
}

/* Busy-polling shards on the two hardware threads of one core share its
 * pipeline: each shard gets a core of its own first, whichever way the
 * machine numbers its threads, core 0 (the kernel's and the control
 * thread's) last, and only then do shards share cores. */
START_TEST(test_shards_take_physical_cores_before_sharing_one)
{
	struct {
		const char *syn;
		int want[5];
	} cases[] = {
	    /* Threads of a core side by side (0,1 | 2,3 | ...), as many VMs number them. */
	    {"pack:1 core:4 pu:2", {2, 4, 6, 1, 3}},
	    /* Thread n and n + 4 on one core, as most servers do. */
	    {"pack:1 core:4 pu:2(indexes=0,4,1,5,2,6,3,7)", {1, 2, 3, 4, 5}},
	    /* One thread a core. */
	    {"pack:1 core:4 pu:1", {1, 2, 3, 0, 1}},
	};
	int cpu[5];

	prov = "shm";
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		shard_cpus(cases[i].syn, 5, cpu);
		for (int k = 0; k < 5; k++)
			ck_assert_msg(cpu[k] == cases[i].want[k], "%s: shard %d on CPU %d, not %d",
			              cases[i].syn, k, cpu[k], cases[i].want[k]);
	}
}
END_TEST

/* Shard 0's CPU and the mover's id, from m's log ("mover[pid] ID info:
 * shard 0: ..., CPU c, ..."). */
static int shard0_cpu(const struct mvproc *m, char *id, size_t idlen)
{
	char line[1024];

	ck_assert_msg(log_grep(m, "shard 0: provider", line, sizeof(line)) == 1, "no shard 0 in %s",
	              m->log);
	const char *c = strstr(line, ", CPU "), *b = strstr(line, "] ");
	ck_assert_msg(c && b, "no CPU or id in '%s'", line);
	snprintf(id, idlen, "%.16s", b + 2);
	return atoi(c + 6);
}

/*
 * Movers of one host keep off each other's cores (mover/cpus_held.c): each
 * keeps its shards' CPUs in /dev/shm/mv.ID.cpus, locked while it lives; the
 * next one to start counts them taken, and says so. Two spinning shards on
 * one core take turns of the scheduler's slice (on a 16-core machine, 3,000
 * small batches beside a flood took 27 s so against 0.1 s apart). A dead
 * mover's file is unlocked: the next mover removes it and counts nothing.
 */
START_TEST(test_movers_of_one_host_keep_off_each_others_cores)
{
	char ida[20], idb[20], path[64], text[64] = "";
	const char *stale = "/dev/shm/mv.00000000deadbeef.cpus";

	prov = "tcp";
	/* A dead mover's file: nobody holds its lock. */
	int sfd = open(stale, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(sfd, 0);
	ck_assert_int_eq(write(sfd, "1\n", 2), 2);
	close(sfd);

	mover_start(&A, "a", 1);
	int ca = shard0_cpu(&A, ida, sizeof(ida));
	ck_assert_msg(access(stale, F_OK) < 0, "%s, nobody's, was left in place", stale);
	snprintf(path, sizeof(path), "/dev/shm/mv.%s.cpus", ida);
	int fd = open(path, O_RDONLY);
	ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
	ck_assert_int_gt(read(fd, text, sizeof(text) - 1), 0);
	ck_assert_int_eq(atoi(text), ca);
	ck_assert_msg(flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK,
	              "%s is not locked while its mover lives", path);
	close(fd);

	mover_start(&B, "b", 1);
	int cb = shard0_cpu(&B, idb, sizeof(idb));
	ck_assert_msg(log_grep(&B, "on this host pin", NULL, 0) == 1,
	              "B does not say another mover pins shards (%s)", B.log);
	/* With a core besides A's and core 0 free, B takes it; on two cores,
	 * B shares A's rather than core 0 (least_used_pu()). */
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (ncpu > 2) {
		ck_assert_msg(cb != ca && cb != 0, "B's shard on CPU %d, A's on %d, of %ld", cb, ca,
		              ncpu);
	} else if (log_grep(&B, "1 other mover on", NULL, 0) == 1) {
		ck_assert_msg(cb == ca, "B's shard on CPU %d, not beside A's on %d, of 2", cb, ca);
		printf("placement: 2 CPUs: B's shard shares A's CPU %d rather than take core 0 "
		       "(apart with a third core)\n",
		       ca);
	}

	/* A dies without a word: its CPUs are free for the next mover. */
	kill(A.pid, SIGKILL);
	waitpid(A.pid, NULL, 0);
	A.pid = 0;
	mover_start(&C, "c", 1);
	ck_assert_msg(access(path, F_OK) < 0, "%s of a killed mover was left in place", path);
	ck_assert_int_eq(mover_stop(&B), 0);
	snprintf(path, sizeof(path), "/dev/shm/mv.%s.cpus", idb);
	ck_assert_msg(access(path, F_OK) < 0, "%s is left after its mover stopped", path);
}
END_TEST

/*
 * /dev/shm is everyone's: a FIFO named like a CPU file would block a reader
 * for good, a link would be followed, and anyone may hold the place lock.
 * A mover starts past all three: the FIFO and the link are left alone, and
 * a lock held for good keeps it 2 s at most, which its log says.
 */
START_TEST(test_cpu_files_of_others_never_stop_a_start)
{
	const char *fifo = "/dev/shm/mv.00000000f1f0f1f0.cpus";
	const char *link = "/dev/shm/mv.000000001111abcd.cpus";
	int p[2];
	char c;

	prov = "tcp";
	unlink(fifo);
	unlink(link);
	ck_assert_int_eq(mkfifo(fifo, 0644), 0);
	ck_assert_int_eq(symlink("/etc/hostname", link), 0);
	/* A process that takes the place lock and keeps it. */
	ck_assert_int_eq(pipe(p), 0);
	pid_t holder = fork();
	ck_assert_int_ge(holder, 0);
	if (holder == 0) {
		int fd = open("/dev/shm/mv.place.lock", O_RDONLY | O_CREAT, 0666);
		if (fd < 0 || flock(fd, LOCK_EX) < 0)
			_exit(1);
		(void)!write(p[1], "x", 1);
		pause();
		_exit(0);
	}
	ck_assert_int_eq(read(p[0], &c, 1), 1);
	double t0 = now_s();
	mover_start(&A, "a", 1);
	double took = now_s() - t0;
	kill(holder, SIGKILL);
	waitpid(holder, NULL, 0);
	ck_assert_msg(log_grep(&A, "held by another process for 2 s", NULL, 0) == 1,
	              "A does not say the place lock was held (%s)", A.log);
	ck_assert_msg(took < 10, "A listened %.1f s after it started", took);
	/* Without the lock, A did not read them; with it, B passes them by. */
	mover_start(&B, "b", 1);
	ck_assert_msg(log_grep(&B, "1 other mover on", NULL, 0) == 1,
	              "B counts other than A's CPUs (%s)", B.log);
	struct stat st;
	ck_assert_msg(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was removed");
	ck_assert_msg(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link was removed");
	unlink(fifo);
	unlink(link);
}
END_TEST

static TCase *shards(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_idle_mover_sleeps);
	tcase_add_test(tc, test_idle_shm_receiver_is_woken_by_its_sender);
	tcase_add_test(tc, test_idle_mover_with_a_peer_keeps_its_long_sleeps);
	tcase_add_test(tc, test_small_batches_go_to_the_least_loaded_shard);
	return tc;
}

int main(void)
{
	Suite *s = suite_create("shards");
	TCase *tc = tcase_create("placement");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_shards_take_physical_cores_before_sharing_one);
	tcase_add_test(tc, test_movers_of_one_host_keep_off_each_others_cores);
	tcase_add_test(tc, test_cpu_files_of_others_never_stop_a_start);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, shards("shards_tcp", setup_tcp));
	suite_add_tcase(s, shards("shards_shm", setup_shm));

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
