/* SPDX-License-Identifier: MIT */
/*
 * Helpers the end-to-end check suites share: starting and stopping real
 * movers (they die with the test process), a sender/receiver client pair
 * with a region each and the receiver's region imported, and waiting for
 * batch completions. Include once per test program, after <check.h>.
 */
#ifndef MV_TEST_H
#define MV_TEST_H

#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mvc.h"

struct mvproc {
	pid_t pid;
	char sock[108];
	char log[160];
};

static const char *prov = "tcp";
static const char *mover_extra;  /* one more mover option, or NULL */
static const char *mover_extra2; /* and another */
static const char *mover_extra3; /* and a third */
static struct mvproc A, B, C;

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Forks and execs a mover with argv (argv[0] its path), its output going to
 * m->log. It gets SIGKILL when the test process dies. */
static inline void mover_spawn(struct mvproc *m, const char *const *argv)
{
	unlink(m->sock);
	m->pid = fork();
	ck_assert_int_ge(m->pid, 0);
	if (m->pid == 0) {
		/* A failed test must not leave movers behind. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(m->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
}

/* Returns once the mover listens on m->sock; fails the test, naming its log,
 * when it exits first or has not listened within wait_s. */
static inline void mover_listening(struct mvproc *m, const char *name, double wait_s)
{
	for (double t0 = now_s(); now_s() - t0 < wait_s;) {
		struct stat st;
		if (stat(m->sock, &st) == 0)
			return;
		int status;
		if (waitpid(m->pid, &status, WNOHANG) == m->pid) {
			m->pid = 0;
			ck_abort_msg("mover %s exited at start; see %s", name, m->log);
		}
		usleep(5000);
	}
	ck_abort_msg("mover %s did not listen within %.0f s; see %s", name, wait_s, m->log);
}

/* Starts a mover without waiting for it to listen (mover_listening()):
 * movers launched together start in parallel. */
static inline void mover_launch(struct mvproc *m, const char *name, int shards)
{
	const char *b = getenv("MV_BUILD") ? getenv("MV_BUILD") : "build";
	char bin[256], ns[16];

	snprintf(m->sock, sizeof(m->sock), "/tmp/mvt.%d.%s.sock", getpid(), name);
	snprintf(m->log, sizeof(m->log), "/tmp/mvt.%d.%s.log", getpid(), name);
	snprintf(bin, sizeof(bin), "%s/bin/mover", b);
	snprintf(ns, sizeof(ns), "%d", shards);
	/* A short deadline so a dead peer fails writes within the test. */
	/* --no-config: the host's /etc/mover.conf is not the test's. */
	const char *argv[16] = {bin, "--provider", prov,    "--shards",   ns, "--op-timeout",
	                        "3", "--socket",   m->sock, "--no-config"};
	int n = 10;
	if (!strcmp(prov, "tcp")) {
		argv[n++] = "--iface";
		argv[n++] = "lo";
	}
	if (mover_extra)
		argv[n++] = mover_extra;
	if (mover_extra2)
		argv[n++] = mover_extra2;
	if (mover_extra3)
		argv[n++] = mover_extra3;
	mover_spawn(m, argv);
}

static inline void mover_start(struct mvproc *m, const char *name, int shards)
{
	mover_launch(m, name, shards);
	/* Up to 30 s: a mover on a GPU host starts CUDA before it listens. */
	mover_listening(m, name, 30);
}

/*
 * Waits until every mover launched (A, B and C, those with a pid) listens.
 * Launch a test's movers first, then wait here: a mover's start is mostly
 * waiting (Debian's libfabric links a PSM library whose constructor spends
 * ~200 ms calibrating a clock in sleeps, and reads /proc/kallsyms for its
 * verbs provider), so two started side by side take the time of one.
 */
static inline void movers_listening(void)
{
	struct mvproc *m[] = {&A, &B, &C};
	const char *name[] = {"a", "b", "c"};

	for (int i = 0; i < 3; i++)
		if (m[i]->pid > 0)
			mover_listening(m[i], name[i], 30);
}

/* A killed shm mover leaves its endpoint's segments behind (/dev/shm/PID:*)
 * and its wake files (/dev/shm/mv.PID.*). */
static inline void shm_cleanup(pid_t pid)
{
	const char *fmt[] = {"/dev/shm/%d:*", "/dev/shm/mv.%d.*"};
	char pat[64];
	glob_t g;

	for (int k = 0; k < 2; k++) {
		snprintf(pat, sizeof(pat), fmt[k], pid);
		if (glob(pat, 0, NULL, &g) == 0) {
			for (size_t i = 0; i < g.gl_pathc; i++)
				unlink(g.gl_pathv[i]);
			globfree(&g);
		}
	}
}

/* SIGTERM, then the exit status (or -1 if it had to be killed). */
static inline int mover_stop(struct mvproc *m)
{
	int status = 0;

	if (m->pid <= 0)
		return 0;
	kill(m->pid, SIGTERM);
	for (int i = 0; i < 1200; i++) {
		if (waitpid(m->pid, &status, WNOHANG) == m->pid) {
			shm_cleanup(m->pid);
			m->pid = 0;
			return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		}
		usleep(5000);
	}
	kill(m->pid, SIGKILL);
	waitpid(m->pid, &status, 0);
	shm_cleanup(m->pid);
	m->pid = 0;
	return -1;
}

static inline void setup_tcp(void)
{
	prov = "tcp";
	mover_launch(&A, "a", 2);
	mover_launch(&B, "b", 2);
	movers_listening();
}

static inline void setup_shm(void)
{
	prov = "shm";
	mover_launch(&A, "a", 2);
	mover_launch(&B, "b", 2);
	movers_listening();
}

static inline void teardown(void)
{
	mover_stop(&A);
	mover_stop(&B);
	mover_stop(&C);
	/* Reached only when the test passed (check's fork mode leaves a
	 * failed test at its assertion): a failure keeps its movers' logs. */
	struct mvproc *all[] = {&A, &B, &C};
	for (int i = 0; i < 3; i++)
		if (all[i]->log[0]) {
			unlink(all[i]->log);
			unlink(all[i]->sock); /* a killed mover leaves it */
		}
}

/* Restarts mover A with --no-host-copy: tests of what the shm provider
 * does between two movers of this host need their writes on the fabric,
 * not copied (mover/samehost.c). */
static inline void sender_on_fabric(void)
{
	mover_stop(&A);
	mover_extra = "--no-host-copy";
	mover_start(&A, "a", 2);
	mover_extra = NULL;
}

/*
 * Comparisons that let a test assert once over a whole buffer or page list:
 * check's fork mode reports every assertion that passes to its parent
 * through a pipe, a system call each, and one a byte or a page of a
 * 100,000-page batch costs seconds.
 */

/* The offset of the first of n bytes at p that is not v; n if none. */
static inline size_t first_not(const void *p, size_t n, uint8_t v)
{
	const uint8_t *b = p;
	size_t i = 0;

	while (i < n && b[i] == v)
		i++;
	return i;
}

/* The index of the first of n pages of ps bytes that differ between page
 * sp[i] of src and page dp[i] of dst (dp NULL: page sp[i] of both); n if
 * none. */
static inline uint32_t first_page_differing(const void *src, const uint32_t *sp, const void *dst,
                                            const uint32_t *dp, size_t ps, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (memcmp((const uint8_t *)dst + (size_t)(dp ? dp[i] : sp[i]) * ps,
		           (const uint8_t *)src + (size_t)sp[i] * ps, ps))
			return i;
	return n;
}

/* Words of a xorshift sequence from seed; p need not be aligned (a range
 * registered at an odd offset is filled too). */
static inline void fill(void *p, size_t n, uint64_t seed)
{
	uint8_t *w = p;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(w + 8 * i, &x, 8);
	}
}

/* A sender on A and a receiver on B, src and dst regions, B imported by A. */
struct pair {
	struct mvc *a, *b;
	struct mvc_mem src, dst;
	uint32_t peer, imp;
};

static inline void pair_open_on(struct pair *p, struct mvproc *ma, struct mvproc *mb,
                                uint64_t srclen, uint64_t dstlen)
{
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);

	ck_assert_int_eq(mvc_connect(&p->a, ma->sock), 0);
	ck_assert_int_eq(mvc_connect(&p->b, mb->sock), 0);
	ck_assert_msg(mvc_alloc(p->a, srclen, &p->src) == 0, "%s", mvc_error(p->a));
	ck_assert_msg(mvc_alloc(p->b, dstlen, &p->dst) == 0, "%s", mvc_error(p->b));
	ck_assert_int_eq(mvc_address(p->b, blob, &len), 0);
	ck_assert_msg(mvc_peer_add(p->a, blob, len, &p->peer) == 0, "%s", mvc_error(p->a));
	len = sizeof(blob);
	ck_assert_int_eq(mvc_region_blob(p->b, p->dst.region, blob, &len), 0);
	ck_assert_msg(mvc_import(p->a, p->peer, blob, len, &p->imp) == 0, "%s", mvc_error(p->a));
}

static inline void pair_open(struct pair *p, uint64_t srclen, uint64_t dstlen)
{
	pair_open_on(p, &A, &B, srclen, dstlen);
}

static inline void pair_close(struct pair *p)
{
	mvc_disconnect(p->a);
	mvc_disconnect(p->b);
}

/* Waits for n batches, whatever their order; their events land in out. */
static inline void wait_batches(struct mvc *c, const uint64_t *cookies, struct mvc_event *out,
                                int n, double timeout)
{
	double end = now_s() + timeout;
	int got = 0;

	while (got < n && now_s() < end) {
		struct mvc_event ev;
		int k = mvc_wait(c, &ev, 1, 200);
		ck_assert_msg(k >= 0, "mvc_wait: %s", mvc_error(c));
		if (k == 0 || ev.type != MVC_EV_BATCH)
			continue;
		int i = 0;
		while (i < n && cookies[i] != ev.cookie)
			i++;
		ck_assert_msg(i < n, "unexpected batch %llu", (unsigned long long)ev.cookie);
		out[i] = ev;
		got++;
	}
	ck_assert_msg(got == n, "%d of %d batches completed in %.0f s", got, n, timeout);
}

/* Waits for the batch with this cookie; other batch events fail the test. */
static inline struct mvc_event wait_batch(struct mvc *c, uint64_t cookie, double timeout)
{
	struct mvc_event ev[8];
	double end = now_s() + timeout;

	while (now_s() < end) {
		int n = mvc_wait(c, ev, 1, 200);
		ck_assert_msg(n >= 0, "mvc_wait: %s", mvc_error(c));
		if (n == 1 && ev[0].type == MVC_EV_BATCH) {
			ck_assert_msg(ev[0].cookie == cookie,
			              "batch %llu completed, waited for %llu",
			              (unsigned long long)ev[0].cookie, (unsigned long long)cookie);
			return ev[0];
		}
	}
	ck_abort_msg("batch %llu did not complete in %.0f s", (unsigned long long)cookie, timeout);
	return ev[0];
}

/* Lines of m's log that hold what; the first of them, newline cut, into
 * first (when given; "" when none). */
static inline int log_grep(const struct mvproc *m, const char *what, char *first, size_t len)
{
	char line[1024];
	int n = 0;
	FILE *f = fopen(m->log, "r");

	if (first && len)
		first[0] = 0;
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, what) && !n++ && first && len) {
			line[strcspn(line, "\n")] = 0;
			snprintf(first, len, "%s", line);
		}
	if (f)
		fclose(f);
	return n;
}

/* Each value of field in mvstat's JSON of m (the field with its quotes:
 * "\"copy_bytes\""), in order (a shard's counter: shard 0 first), at most
 * max of them in v; returns how many there were. */
static inline int stat_each(struct mvproc *m, const char *field, uint64_t *v, int max)
{
	const char *b = getenv("MV_BUILD") ? getenv("MV_BUILD") : "build";
	char cmd[512], out[32768] = "";
	int k = 0;

	snprintf(cmd, sizeof(cmd), "%s/bin/mvstat --socket %s --json --interval 0.05", b, m->sock);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	pclose(f);
	out[n] = 0;
	for (char *q = out; (q = strstr(q, field)); q += strlen(field), k++)
		if (k < max)
			v[k] = strtoull(q + strlen(field) + 1, NULL, 10); /* past the ':' */
	return k;
}

/* The sum of field's values in mvstat's JSON of m (over the shards). */
static inline uint64_t stat_sum(struct mvproc *m, const char *field)
{
	uint64_t v[64], total = 0;
	int n = stat_each(m, field, v, 64);

	for (int i = 0; i < n && i < 64; i++)
		total += v[i];
	return total;
}

static inline void submit_ok(struct mvc *c, uint64_t cookie)
{
	ck_assert_msg(mvc_submit(c, cookie) == 0, "submit: %s", mvc_error(c));
	struct mvc_event e = wait_batch(c, cookie, 20);
	ck_assert_msg(e.status == 0, "batch %llu failed: %s", (unsigned long long)cookie, e.msg);
}

/*
 * Submits the open batch of a with an immediate to b, and returns once the
 * batch succeeded and b heard the immediate: only then has every write
 * landed (shm completes writes on transmit).
 */
static inline void landed(struct mvc *a, uint32_t imp, struct mvc *b, uint64_t cookie)
{
	uint32_t imm = 0x4c000000u | (uint32_t)cookie;
	struct mvc_event ev;

	ck_assert_int_eq(mvc_write_imm(a, imp, imm), 0);
	ck_assert_int_eq(mvc_imm_expect(b, imm, 1, cookie), 0);
	submit_ok(a, cookie);
	double end = now_s() + 20;
	while (now_s() < end) {
		int n = mvc_wait(b, &ev, 1, 100);
		ck_assert_int_ge(n, 0);
		if (n && ev.type == MVC_EV_IMM_COUNT && ev.imm == imm)
			return;
	}
	ck_abort_msg("the immediate of batch %llu did not arrive", (unsigned long long)cookie);
}

/* Writes n bytes (a few contiguous writes, one past MV_CHUNK) with an
 * immediate, and checks every byte at the receiver. */
static inline void contiguous_round(struct pair *p, size_t n, uint64_t seed, uint64_t cookie)
{
	fill(p->src.addr, n, seed);
	memset(p->dst.addr, 0, n);
	ck_assert_int_eq(mvc_write(p->a, p->src.region, 0, p->imp, 0, n / 2), 0);
	ck_assert_int_eq(mvc_write(p->a, p->src.region, n / 2, p->imp, n / 2, n - n / 2), 0);
	landed(p->a, p->imp, p->b, cookie);
	ck_assert_msg(!memcmp(p->src.addr, p->dst.addr, n), "bytes differ after batch %llu",
	              (unsigned long long)cookie);
}

#endif
