/* SPDX-License-Identifier: MIT */
/*
 * A same-host sender mover killed with SIGKILL under a stream, over
 * libfabric's shm, many times over: the receiver stays, a new sender mover
 * starts on the same socket, the client reconnects by itself, and a write
 * with an immediate into the same receiver must land. shm 1.17 guards each
 * endpoint's command queue with a spinlock in shared memory; the sender
 * holds its receiver's lock through the whole copy of a one-segment write,
 * and while it posts the two command slots of a multi-segment one. A
 * sender killed there left the lock held, and every later write to that
 * receiver (and the receiver's own progress) spun for ever: a wedge, in 15
 * of 30 and 6 of 30 kills before the fix. The receiver now frees a lock
 * whose recorded holder has exited (mover/shm_lock.c). The stream mixes
 * both kinds of write. MV_SHM_KILLS sets the number of kills (default 30).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>

#include <sys/mman.h>

#include "mvtest.h"
#include "shm_lock.h"

#define SEG    (1u << 20) /* one segment: the sender copies it under the lock */
#define WINDOW 4u
#define SRCLEN ((uint64_t)WINDOW * SEG)

static unsigned kills(void)
{
	const char *e = getenv("MV_SHM_KILLS");
	long n = e ? strtol(e, NULL, 10) : 30;

	return n > 0 ? (unsigned)n : 30;
}

/* Events of a, the mover away (-EPIPE) taken as none; counts what came. */
static void reap(struct mvc *a, uint32_t *inflight, uint32_t *backs, int timeout_ms)
{
	struct mvc_event ev[16];
	int n = mvc_wait(a, ev, 16, timeout_ms);

	if (n == -EPIPE)
		return;
	ck_assert_msg(n >= 0, "mvc_wait: %d %s", n, mvc_error(a));
	for (int i = 0; i < n; i++) {
		if (ev[i].type == MVC_EV_MOVER_BACK) {
			ck_assert_msg(ev[i].status == 0, "back: %s", ev[i].msg);
			(*backs)++;
			continue;
		}
		ck_assert_int_eq(ev[i].type, MVC_EV_BATCH);
		ck_assert_msg(ev[i].status == 0 || ev[i].cause == MVC_CAUSE_MOVER_GONE,
		              "batch %llu: %s", (unsigned long long)ev[i].cookie, ev[i].msg);
		(*inflight)--;
	}
}

/*
 * Streams WINDOW one-segment writes at a time into the receiver for
 * stream_s, then kills the sender's mover and starts a new one. Returns
 * once the client is back on it with nothing in flight.
 */
static void stream_then_kill(struct pair *p, uint64_t *cookie, double stream_s)
{
	uint32_t inflight = 0, backs = 0;
	double end = now_s() + stream_s;

	while (now_s() < end) {
		while (inflight < WINDOW) {
			uint64_t o = (uint64_t)(*cookie % WINDOW) * SEG;
			/* One segment (the sender copies it under the lock) or
			 * four (the receiver copies them: two command slots). */
			struct mvc_seg seg[4];
			for (uint32_t j = 0; j < 4; j++)
				seg[j] =
				    (struct mvc_seg){o + j * (SEG / 4), o + j * (SEG / 4), SEG / 4};
			int r = *cookie % 2 ? mvc_writev(p->a, p->src.region, p->imp, seg, 4)
			                    : mvc_write(p->a, p->src.region, o, p->imp, o, SEG);
			ck_assert_msg(r == 0, "write: %s", mvc_error(p->a));
			ck_assert_msg(mvc_submit(p->a, (*cookie)++) == 0, "submit: %s",
			              mvc_error(p->a));
			inflight++;
		}
		reap(p->a, &inflight, &backs, 1);
	}
	kill(A.pid, SIGKILL);
	waitpid(A.pid, NULL, 0);
	shm_cleanup(A.pid);
	A.pid = 0;
	mover_start(&A, "a", 1);
	for (double t = now_s() + 20; (inflight || !backs) && now_s() < t;)
		reap(p->a, &inflight, &backs, 100);
	ck_assert_msg(!inflight && backs == 1, "%u batches unreported, %u backs", inflight, backs);
}

/*
 * One 4 KiB write and an immediate into the receiver after the restart:
 * 1 if both came within 10 s (the op deadline is 3 s, so a write that is
 * neither done nor failed by then is stuck), else 0.
 */
static int lands(struct pair *p, uint64_t cookie)
{
	uint32_t imm = 0x5a000000u | (uint32_t)(cookie & 0xffffff);
	int done = 0, heard = 0;
	struct mvc_event ev;

	ck_assert_int_eq(mvc_write(p->a, p->src.region, 0, p->imp, 0, 4096), 0);
	ck_assert_int_eq(mvc_write_imm(p->a, p->imp, imm), 0);
	ck_assert_int_eq(mvc_imm_expect(p->b, imm, 1, cookie), 0);
	ck_assert_msg(mvc_submit(p->a, cookie) == 0, "submit: %s", mvc_error(p->a));
	for (double end = now_s() + 10; (!done || !heard) && now_s() < end;) {
		if (mvc_wait(p->a, &ev, 1, 20) == 1 && ev.type == MVC_EV_BATCH) {
			ck_assert_uint_eq(ev.cookie, cookie);
			ck_assert_msg(ev.status == 0, "write after the restart failed: %s", ev.msg);
			done = 1;
		}
		if (mvc_wait(p->b, &ev, 1, 20) == 1 && ev.type == MVC_EV_IMM_COUNT)
			heard = ev.imm == imm;
	}
	return done && heard;
}

/* The receiver's queue lock, read from its endpoint's file (diagnosis of a
 * wedge only; 1 is free with glibc on x86). */
static void print_locks(pid_t pid)
{
	char pat[64];
	glob_t g;

	snprintf(pat, sizeof(pat), "/dev/shm/%d:*", pid);
	if (glob(pat, 0, NULL, &g))
		return;
	for (size_t i = 0; i < g.gl_pathc; i++) {
		static uint8_t r[1 << 20];
		FILE *f = fopen(g.gl_pathv[i], "r");
		if (f && fread(r, sizeof(r), 1, f) == 1) {
			int32_t w[8];
			uint64_t q[4], off;
			memcpy(w, r, sizeof(w));
			memcpy(&off, r + 64, 8);
			memcpy(q, r + off, sizeof(q));
			printf("  %s: owner pid %d, lock word %d, cmd_cnt %llu, queue size %llu r "
			       "%llu w %llu\n",
			       g.gl_pathv[i], w[1], w[6], (unsigned long long)*(uint64_t *)(r + 48),
			       (unsigned long long)q[0], (unsigned long long)q[2],
			       (unsigned long long)q[3]);
			pid_t h = mv_shm_lock_holder(w[6]);
			char path[64], st[256] = "(none: exited)";
			snprintf(path, sizeof(path), "/proc/%d/stat", (int)h);
			FILE *sf = h > 0 ? fopen(path, "r") : NULL;
			if (sf && !fgets(st, sizeof(st), sf))
				st[0] = 0;
			if (sf)
				fclose(sf);
			printf("  its holder, pid %d: %.120s\n", (int)h, st);
			for (uint64_t k = q[3] - 6; k != q[3] + 2; k++) {
				uint8_t *c = r + off + 32 + (k & q[1]) * 256;
				uint32_t op;
				uint16_t src, fl;
				uint64_t sz, c0;
				memcpy(&op, c + 16, 4);
				memcpy(&src, c + 20, 2);
				memcpy(&fl, c + 22, 2);
				memcpy(&sz, c + 24, 8);
				memcpy(&c0, c, 8);
				printf(
				    "    slot %llu: op %u src %u flags %u size %llu word0 %llu\n",
				    (unsigned long long)k, op, src, fl, (unsigned long long)sz,
				    (unsigned long long)c0);
			}
		}
		if (f)
			fclose(f);
	}
	globfree(&g);
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* B's (one) shm endpoint region, mapped here. */
static uint8_t *b_region(void)
{
	char pat[64];
	glob_t g;

	snprintf(pat, sizeof(pat), "/dev/shm/%d:*", B.pid);
	ck_assert_int_eq(glob(pat, 0, NULL, &g), 0);
	ck_assert_uint_eq(g.gl_pathc, 1);
	int fd = open(g.gl_pathv[0], O_RDWR);
	ck_assert_int_ge(fd, 0);
	struct stat st;
	ck_assert_int_eq(fstat(fd, &st), 0);
	uint8_t *r = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	globfree(&g);
	ck_assert(r != MAP_FAILED);
	return r;
}

START_TEST(test_shm_sender_killed_under_a_stream_never_wedges_the_receiver)
{
	struct pair p;
	unsigned n = kills(), wedged = 0;
	uint64_t cookie = 1;
	double t0 = now_s();

	setvbuf(stdout, NULL, _IOLBF, 0);
	prov = "shm";
	/* Fabric writes, not same-host copies: the provider's path is the one
	 * under test. */
	mover_extra = "--no-host-copy";
	mover_launch(&A, "a", 1);
	mover_launch(&B, "b", 1);
	movers_listening();
	pair_open(&p, SRCLEN, SRCLEN);
	fill(p.src.addr, SRCLEN, 9);
	srand(7);
	for (unsigned k = 0; k < n; k++) {
		if (k % 2) {
			/* Every other round the receiver's client holds the
			 * sender's mover as a peer, so its mover watches that
			 * pid and looks at its lock the moment it exits; in the
			 * others the receiver knows nothing of the sender. */
			uint8_t blob[MVC_BLOB_MAX];
			size_t len = sizeof(blob);
			uint32_t pa;
			ck_assert_int_eq(mvc_address(p.a, blob, &len), 0);
			ck_assert_msg(mvc_peer_add(p.b, blob, len, &pa) == 0, "%s", mvc_error(p.b));
		}
		stream_then_kill(&p, &cookie, 0.05 + (rand() % 200) / 1000.0);
		if (lands(&p, cookie++))
			continue;
		wedged++;
		printf("kill %u of %u: the write after the restart did not land in 10 s\n", k + 1,
		       n);
		print_locks(B.pid);
		char keep[200], cmd[512];
		snprintf(keep, sizeof(keep), "%s.wedge%u", B.log, k + 1);
		snprintf(cmd, sizeof(cmd), "cp %s %s", B.log, keep);
		if (system(cmd) == 0)
			printf("  the receiver's log: %s\n", keep);
		/* Both movers again, and a new pair, for the next rounds. */
		pair_close(&p);
		kill(B.pid, SIGKILL);
		waitpid(B.pid, NULL, 0);
		shm_cleanup(B.pid);
		B.pid = 0;
		mover_stop(&A);
		mover_launch(&A, "a", 1);
		mover_launch(&B, "b", 1);
		movers_listening();
		pair_open(&p, SRCLEN, SRCLEN);
		fill(p.src.addr, SRCLEN, 9);
	}
	char first[1024];
	int released = log_grep(&B, "exited holding our shm queue lock", first, sizeof(first));
	printf("shm: %u kill -9 of a streaming sender mover, %u wedged the receiver, %d locks "
	       "released by it (%.1f s)\n",
	       n, wedged, released, now_s() - t0);
	if (released)
		printf("  %s\n", first);
	/* A release on the watched peer's exit comes in the same turn of the
	 * main loop as the exit's own log line. */
	FILE *f = fopen(B.log, "r");
	char line[1024], exit_at[32] = "";
	int at_once = 0;
	while (f && fgets(line, sizeof(line), f)) {
		if (strstr(line, ") exited: failing the writes"))
			snprintf(exit_at, sizeof(exit_at), "%.23s", line);
		else if (strstr(line, "exited holding our shm queue lock") && exit_at[0] &&
		         !strncmp(line, exit_at, 21)) /* the same 10 ms */
			at_once++;
	}
	if (f)
		fclose(f);
	printf("  %d of the releases came with a watched peer's exit, at once\n", at_once);
	/* The receiver's free command slots: those of commands whose
	 * responses a dead sender never read are not given back. */
	uint8_t *r = b_region();
	const uint8_t *q = r + rd64(r + MV_SHM_OFF_CMDQ);
	uint64_t size = rd64(q), used = rd64(q + 24) - rd64(q + 16);
	uint64_t cnt = rd64(r + MV_SHM_OFF_CMD_CNT);
	printf("  the receiver's command queue: %llu slots, %llu used, %llu counted free, %lld "
	       "not given back\n",
	       (unsigned long long)size, (unsigned long long)used, (unsigned long long)cnt,
	       (long long)(size - used - cnt));
	pair_close(&p);
	mover_extra = NULL;
	ck_assert_msg(!wedged, "%u of %u kills wedged the receiver", wedged, n);
}
END_TEST

/*
 * The repair, step by step: a process (this test's child, in the movers'
 * lock format) takes the receiver's queue lock and publishes the first
 * slot of a write without its second, as a sender killed between the two
 * would, then stops. While it lives, stopped, the receiver leaves the lock
 * alone; once it is dead the receiver takes the half-posted command back
 * (it must not read the unfilled slot as the write's target), frees the
 * lock, and a write from another mover lands.
 */
START_TEST(test_receiver_repairs_and_frees_a_lock_only_once_its_holder_died)
{
	struct pair p;
	char line[1024];

	prov = "shm";
	mover_extra = "--no-host-copy";
	mover_launch(&A, "a", 1);
	mover_launch(&B, "b", 1);
	movers_listening();
	pair_open(&p, 1 << 16, 1 << 16);
	fill(p.src.addr, 1 << 16, 5);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 4096), 0);
	landed(p.a, p.imp, p.b, 1); /* the path works, and the queue has seen use */
	memset(p.dst.addr, 0, 4096);
	uint8_t *r = b_region();
	int *lock = (int *)(r + MV_SHM_OFF_LOCK);
	uint8_t *q = r + rd64(r + MV_SHM_OFF_CMDQ);
	int free_word = __atomic_load_n(lock, __ATOMIC_ACQUIRE);
	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		int want = free_word;
		while (!__atomic_compare_exchange_n(lock, &want, mv_shm_lock_word(getpid()), 0,
		                                    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			want = free_word;
		uint64_t w = rd64(q + 24), mask = rd64(q + 8);
		uint8_t *slot = q + MV_SHM_CMDQ_HDR + (w & mask) * MV_SHM_CMD_SIZE;
		uint32_t op = 4; /* ofi_op_write: its remote iovs would follow */
		memset(slot, 0, MV_SHM_CMD_SIZE);
		memcpy(slot + MV_SHM_CMD_OFF_OP, &op, sizeof(op));
		w++;
		memcpy(q + 24, &w, sizeof(w));
		uint64_t cnt = rd64(r + MV_SHM_OFF_CMD_CNT) - 1;
		memcpy(r + MV_SHM_OFF_CMD_CNT, &cnt, sizeof(cnt));
		raise(SIGSTOP);
		_exit(0);
	}
	int status;
	ck_assert_int_eq(waitpid(child, &status, WUNTRACED), child);
	ck_assert(WIFSTOPPED(status));
	uint64_t wcnt = rd64(q + 24);
	/* Alive (stopped): its lock stays its own. */
	usleep(800000);
	ck_assert_int_eq(__atomic_load_n(lock, __ATOMIC_ACQUIRE), mv_shm_lock_word(child));
	ck_assert_uint_eq(rd64(q + 24), wcnt);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	double t0 = now_s();
	/* Freed is "no longer the dead child's": once free, the receiver's
	 * shard (which spun on the lock) and the senders take it at once, so
	 * a look may well find it held again, rightly, by one of them. */
	int dead = mv_shm_lock_word(child), word;
	while ((word = __atomic_load_n(lock, __ATOMIC_ACQUIRE)) == dead && now_s() - t0 < 3)
		usleep(5000);
	printf("lock of a dead holder freed after %.0f ms\n", (now_s() - t0) * 1e3);
	ck_assert_msg(word != dead, "the receiver did not free the dead holder's lock in 3 s");
	ck_assert_int_eq(log_grep(&B, "took back a write it had half posted", line, sizeof(line)),
	                 1);
	printf("  %s\n", line);
	/* The command taken back is the half-posted one (writers blocked on the
	 * lock have posted since). */
	char cmd[48];
	snprintf(cmd, sizeof(cmd), "command %llu without", (unsigned long long)(wcnt - 1));
	ck_assert_msg(strstr(line, cmd), "not %s: %s", cmd, line);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 4096), 0);
	landed(p.a, p.imp, p.b, 2);
	ck_assert(!memcmp(p.src.addr, p.dst.addr, 4096));
	pair_close(&p);
	mover_extra = NULL;
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shm_restart");
	TCase *tc = tcase_create("kill9");
	SRunner *sr;
	int nf;

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 60 + 20 * kills());
	tcase_add_test(tc, test_shm_sender_killed_under_a_stream_never_wedges_the_receiver);
	tcase_add_test(tc, test_receiver_repairs_and_frees_a_lock_only_once_its_holder_died);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
