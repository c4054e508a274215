/* SPDX-License-Identifier: MIT */
/*
 * Tenants of one mover: what a second uid (nobody, 65534, taken by a child
 * of the test) may and may not do. Without --allow-any-uid it cannot
 * connect; with it, it is a client and nothing more: it cannot read the
 * stats segment, start a trace (nor make the mover touch a file it cannot
 * write itself), take a GPU region's fd, or reach another tenant's regions,
 * batches, completions or immediates. A member of --admin-group reads stats
 * without being a client. Region blobs carry a secret: a peer mover asking
 * for a region's fd, or a client importing a region of its own mover, must
 * show it. Every refusal leaves the mover serving the others. Runs as root
 * (it changes uid); skipped with the reason otherwise.
 */
#include "mover.h"
#include "mv_sock.h"
#include "mv_wire.h"

#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/mman.h>

#include <check.h>
#include <grp.h>
#include <stdio.h>

#include "mvtest.h"

#define NOBODY 65534

static char verdict[512]; /* what a tenant child found wrong; "" if nothing */

#define expect(cond, ...)                                                                          \
	do {                                                                                       \
		if (!(cond) && !verdict[0])                                                        \
			snprintf(verdict, sizeof(verdict), __VA_ARGS__);                           \
	} while (0)

/*
 * Runs fn(arg) in a child as uid and gid NOBODY, no supplementary groups,
 * and fails the test with what the child found wrong.
 */
static void as_nobody(void (*fn)(void *arg), void *arg)
{
	int p[2];

	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		verdict[0] = 0;
		if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
			snprintf(verdict, sizeof(verdict), "cannot become uid %d: %s", NOBODY,
			         strerror(errno));
		else
			fn(arg);
		ssize_t n = write(p[1], verdict, strlen(verdict));
		_exit(n < 0);
	}
	close(p[1]);
	char got[sizeof(verdict)] = "";
	ssize_t n = read(p[0], got, sizeof(got) - 1);
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	ck_assert_msg(WIFEXITED(st), "the tenant child died (status %d)", st);
	ck_assert_msg(n <= 0, "as uid %d: %s", NOBODY, got);
}

/* After a refusal: a pair of clients from `from` to `to` still moves 64 KiB,
 * verified, with the immediate that says it landed. */
static void still_serves(struct mvproc *from, struct mvproc *to, uint64_t seed)
{
	struct pair p;

	pair_open_on(&p, from, to, 1 << 16, 1 << 16);
	fill(p.src.addr, 1 << 16, seed);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 1 << 16), 0);
	landed(p.a, p.imp, p.b, seed);
	ck_assert_int_eq(memcmp(p.src.addr, p.dst.addr, 1 << 16), 0);
	pair_close(&p);
}

/* One request to the mover at sock; the status, the reply's message in msg. */
static int request(const char *sock, uint16_t type, const void *payload, uint32_t len, int send_fd,
                   char *msg, size_t msglen)
{
	union {
		struct {
			struct mv_msg_hdr h;
			struct mv_reply_hdr r;
		} m;
		char raw[4096];
	} rep;
	int fd = -1;
	int ret =
	    mv_request_fd(sock, type, payload, len, send_fd, &rep, sizeof(rep), &fd, msg, msglen);
	if (fd >= 0)
		close(fd);
	return ret;
}

/* 1 (and the reason printed) when the test cannot change uid here. */
static int skip_unless_root(void)
{
	if (geteuid() == 0)
		return 0;
	fprintf(stderr, "tenants: skipped: the tests change uid, which needs root\n");
	return 1;
}

static void setup(void)
{
	prov = "tcp";
	mover_extra = "--allow-any-uid";
	mover_launch(&A, "a", 1);
	mover_extra = NULL;
	mover_launch(&B, "b", 1);
	movers_listening();
}

/* ---- connecting ---- */

static void try_connect(void *arg)
{
	struct mvc *c;
	int ret = mvc_connect(&c, arg);

	expect(ret == -EACCES, "mvc_connect returned %d, want -EACCES", ret);
	expect(!c, "got a connection");
	expect(strstr(mvc_connect_error(), "own uid"), "connect error '%s' does not say why",
	       mvc_connect_error());
}

START_TEST(test_other_uid_is_refused_without_allow_any_uid)
{
	if (skip_unless_root())
		return;
	/* B serves its own uid only. Open the file's mode so that the mover's
	 * own check is the one that refuses. */
	ck_assert_int_eq(chmod(B.sock, 0666), 0);
	as_nobody(try_connect, B.sock);
	ck_assert_msg(log_grep(&B, "uid 65534 is not the mover's uid", NULL, 0),
	              "B logged no refusal");
	/* The mover still serves its own uid. */
	still_serves(&B, &A, 1);
}
END_TEST

/* ---- admin messages ---- */

struct admin_try {
	const char *sock;
	const char *file; /* root's 0600 file the tenant wants the mover to write */
	const char *mine; /* a file the tenant may write itself */
	char mvtrace[256];
};

static void try_admin(void *arg)
{
	struct admin_try *t = arg;
	char msg[256];
	int ret;

	ret = request(t->sock, MV_MSG_STATS, NULL, 0, -1, msg, sizeof(msg));
	expect(ret == -EACCES, "STATS returned %d, want -EACCES", ret);
	expect(strstr(msg, "STATS is for the mover's admins"), "STATS refusal says '%s'", msg);

	/* Its own file, passed as an fd: still not an admin. */
	int fd = open(t->mine, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	expect(fd >= 0, "cannot create %s: %s", t->mine, strerror(errno));
	struct mv_trace_req req = {.on = 1};
	snprintf(req.path, sizeof(req.path), "%s", t->mine);
	ret = request(t->sock, MV_MSG_TRACE, &req, sizeof(req), fd, msg, sizeof(msg));
	expect(ret == -EACCES, "TRACE returned %d, want -EACCES", ret);
	expect(strstr(msg, "TRACE is for the mover's admins"), "TRACE refusal says '%s'", msg);
	close(fd);

	/* The tool, at root's file: it must open the file itself, and cannot. */
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		execl(t->mvtrace, "mvtrace", "start", "--socket", t->sock, t->file, (char *)NULL);
		_exit(127);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "mvtrace start at root's file: status %d",
	       st);

	struct mv_gpu_fd_req g = {.id = 1};
	ret = request(t->sock, MV_MSG_GPU_FD, &g, sizeof(g), -1, msg, sizeof(msg));
	expect(ret == -EACCES, "GPU_FD returned %d, want -EACCES", ret);
	expect(strstr(msg, "peer movers on this host"), "GPU_FD refusal says '%s'", msg);
}

START_TEST(test_tenant_cannot_read_stats_start_traces_or_take_gpu_fds)
{
	if (skip_unless_root())
		return;
	struct admin_try t = {.sock = A.sock};
	char file[128], mine[128];
	snprintf(file, sizeof(file), "/tmp/mvt.%d.precious", getpid());
	snprintf(mine, sizeof(mine), "/tmp/mvt.%d.mine", getpid());
	snprintf(t.mvtrace, sizeof(t.mvtrace), "%s/bin/mvtrace",
	         getenv("MV_BUILD") ? getenv("MV_BUILD") : "build");
	t.file = file;
	t.mine = mine;
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "precious", 8), 8);
	close(fd);

	as_nobody(try_admin, &t);

	struct stat st;
	ck_assert_int_eq(stat(file, &st), 0);
	ck_assert_msg(st.st_size == 8, "root's file is %lld bytes now, was 8",
	              (long long)st.st_size);
	ck_assert_msg(log_grep(&A, "refused STATS from pid", NULL, 0),
	              "no log line for the refusal");
	ck_assert_msg(log_grep(&A, "uid 65534", NULL, 0), "the log line does not name the uid");
	unlink(file);
	unlink(mine);

	/* Root, an admin, reads stats and traces into a file it passes. */
	char msg[256];
	ck_assert_msg(request(A.sock, MV_MSG_STATS, NULL, 0, -1, msg, sizeof(msg)) == 0, "%s", msg);
	/* And the mover still serves its clients. */
	still_serves(&A, &B, 2);
}
END_TEST

static void try_group_admin(void *arg)
{
	const char *sock = arg;
	char msg[256];
	int ret = request(sock, MV_MSG_STATS, NULL, 0, -1, msg, sizeof(msg));

	expect(ret == 0, "STATS as a member of the admin group: %d (%s)", ret, msg);
	ret = request(sock, MV_MSG_HELLO, NULL, 0, -1, msg, sizeof(msg));
	expect(ret == -EACCES, "HELLO from an admin that is no client: %d, want -EACCES", ret);
	expect(strstr(msg, "HELLO is for clients"), "HELLO refusal says '%s'", msg);
}

START_TEST(test_admin_group_reads_stats_but_is_no_client)
{
	if (skip_unless_root())
		return;
	mover_extra = "--admin-group=65534";
	mover_start(&C, "c", 1);
	mover_extra = NULL;
	struct stat st;
	ck_assert_int_eq(stat(C.sock, &st), 0);
	ck_assert_msg((st.st_mode & 0777) == 0660 && st.st_gid == NOBODY,
	              "socket mode %o group %u, want 0660 and the admin group", st.st_mode & 0777,
	              (unsigned)st.st_gid);
	as_nobody(try_group_admin, C.sock);
}
END_TEST

/* ---- region secrets ---- */

START_TEST(test_gpu_fd_needs_the_region_blob_secret)
{
	struct mvc *c;
	struct mvc_mem m;
	struct mv_region_blob b;
	size_t len = sizeof(b);
	char msg[256];

	ck_assert_int_eq(mvc_connect(&c, A.sock), 0);
	ck_assert_int_eq(mvc_alloc(c, 1 << 16, &m), 0);
	ck_assert_int_eq(mvc_region_blob(c, m.region, &b, &len), 0);
	ck_assert_int_eq(b.region, m.region);

	struct mv_gpu_fd_req g = {.id = m.region, .secret = b.secret ^ 1};
	int ret = request(A.sock, MV_MSG_GPU_FD, &g, sizeof(g), -1, msg, sizeof(msg));
	ck_assert_msg(ret == -EACCES && strstr(msg, "secret"), "wrong secret: %d (%s)", ret, msg);
	g.secret = b.secret;
	ret = request(A.sock, MV_MSG_GPU_FD, &g, sizeof(g), -1, msg, sizeof(msg));
	ck_assert_msg(ret == -ENOENT && strstr(msg, "not a VMM GPU region"),
	              "right secret, host region: %d (%s)", ret, msg);
	mvc_disconnect(c);
}
END_TEST

/* ---- another tenant's regions, batches and immediates ---- */

struct reach_try {
	const char *sock; /* A: root's mover, and the tenant's */
	uint32_t victim;  /* root's region on A */
	int done[2];      /* the tenant says it is listening */
	int quiet[2];     /* root says its batch landed */
};

static void try_reach(void *arg)
{
	struct reach_try *t = arg;
	struct pair p = {0};
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	int ret;

	/* Its own pair: a region on A, B's region imported. */
	ret = mvc_connect(&p.a, t->sock);
	expect(ret == 0, "tenant connect to A: %d (%s)", ret, mvc_connect_error());
	if (ret)
		return;
	expect(mvc_alloc(p.a, 1 << 16, &p.src) == 0, "alloc: %s", mvc_error(p.a));
	if (verdict[0])
		return;

	/* Another tenant's region by id: not its blob, not its to free. */
	ret = mvc_region_blob(p.a, t->victim, blob, &len);
	expect(ret < 0, "the blob of root's region %u was handed to the tenant", t->victim);
	struct mvc_mem fake = {.region = t->victim, .fd = -1};
	ret = mvc_free(p.a, &fake);
	expect(ret < 0, "the tenant freed root's region %u", t->victim);

	/* Nor a source of its writes: to its own mover, its own region. */
	len = sizeof(blob);
	expect(mvc_address(p.a, blob, &len) == 0, "address: %s", mvc_error(p.a));
	ret = mvc_peer_add(p.a, blob, len, &p.peer);
	expect(ret == 0, "the tenant cannot add its own mover as a peer: %s", mvc_error(p.a));
	if (verdict[0])
		return;
	struct mv_region_blob rb;
	len = sizeof(rb);
	expect(mvc_region_blob(p.a, p.src.region, &rb, &len) == 0, "blob: %s", mvc_error(p.a));
	ret = mvc_import(p.a, p.peer, &rb, len, &p.imp);
	expect(ret == 0, "a genuine blob of its own region: %d (%s)", ret, mvc_error(p.a));
	/* A forged blob: its own, naming root's region. */
	struct mv_region_blob forged = rb;
	uint32_t h;
	forged.region = t->victim;
	ret = mvc_import(p.a, p.peer, &forged, len, &h);
	expect(ret == -EACCES, "a forged blob naming root's region imported: %d", ret);
	expect(strstr(mvc_error(p.a), "not a blob this mover handed out"), "forged: '%s'",
	       mvc_error(p.a));

	expect(mvc_write(p.a, t->victim, 0, p.imp, 0, 4096) == 0, "write: %s", mvc_error(p.a));
	expect(mvc_submit(p.a, 7) == 0, "submit: %s", mvc_error(p.a));
	struct mvc_event ev;
	double end = now_s() + 20;
	int n = 0;
	while (n == 0 && now_s() < end)
		n = mvc_wait(p.a, &ev, 1, 100);
	expect(n == 1 && ev.type == MVC_EV_BATCH && ev.status != 0,
	       "a write from root's region completed with status %d", n == 1 ? ev.status : 0);
	expect(strstr(ev.msg, "region"), "the failed write says '%s'", ev.msg);

	/* Root's batches and immediates go on meanwhile: none reach us. */
	char c = 1;
	expect(write(t->done[1], &c, 1) == 1, "pipe");
	expect(read(t->quiet[0], &c, 1) == 1, "pipe");
	for (double stop = now_s() + 0.3; now_s() < stop;) {
		n = mvc_poll(p.a, &ev, 1);
		expect(n == 0, "the tenant saw an event of type %d (cookie %llu)", ev.type,
		       (unsigned long long)ev.cookie);
	}
	mvc_disconnect(p.a);
}

START_TEST(test_tenant_cannot_reach_another_tenants_regions_batches_or_immediates)
{
	if (skip_unless_root())
		return;
	struct reach_try t = {.sock = A.sock};
	struct pair p;
	enum { LEN = 1 << 16 };

	pair_open(&p, LEN, LEN);
	fill(p.src.addr, LEN, 3);
	uint8_t before[LEN];
	memcpy(before, p.src.addr, LEN);
	t.victim = p.src.region;
	ck_assert_int_eq(pipe(t.done), 0);
	ck_assert_int_eq(pipe(t.quiet), 0);

	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* as_nobody() in a child of its own, so root goes on below. */
		as_nobody(try_reach, &t);
		_exit(0);
	}
	char c;
	ck_assert_int_eq(read(t.done[0], &c, 1), 1);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, LEN), 0);
	landed(p.a, p.imp, p.b, 3);
	ck_assert_int_eq(write(t.quiet[1], &c, 1), 1);
	int st;
	waitpid(pid, &st, 0);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the tenant's checks failed (%d)", st);
	ck_assert_int_eq(memcmp(p.dst.addr, before, LEN), 0);
	ck_assert_int_eq(memcmp(p.src.addr, before, LEN), 0);
	pair_close(&p);
}
END_TEST

/* ---- quotas ---- */

/* Starts C with quotas; mover_start() takes one extra option, so by hand. */
static void quota_mover(const char *const *quotas)
{
	const char *b = getenv("MV_BUILD") ? getenv("MV_BUILD") : "build";
	char bin[256];
	const char *argv[32] = {bin,        "--provider", "tcp",      "--iface", "lo",
	                        "--shards", "1",          "--socket", C.sock};
	int n = 9;

	snprintf(bin, sizeof(bin), "%s/bin/mover", b);
	snprintf(C.sock, sizeof(C.sock), "/tmp/mvt.%d.c.sock", getpid());
	snprintf(C.log, sizeof(C.log), "/tmp/mvt.%d.c.log", getpid());
	argv[n++] = "--no-config";
	for (int i = 0; quotas[i]; i++)
		argv[n++] = quotas[i];
	mover_spawn(&C, argv);
	mover_listening(&C, "c", 30);
}

static void ck_refused(int ret, struct mvc *c, const char *what)
{
	ck_assert_msg(ret == -EDQUOT, "want -EDQUOT, got %d (%s)", ret, c ? mvc_error(c) : "");
	ck_assert_msg(strstr(c ? mvc_error(c) : mvc_connect_error(), what),
	              "the refusal '%s' does not name %s", c ? mvc_error(c) : mvc_connect_error(),
	              what);
}

START_TEST(test_quotas_refuse_with_their_limit_and_free_on_release)
{
	static const char *const q[] = {"--quota-client-regions=2", "--quota-uid-bytes=192K",
	                                "--quota-client-peers=1",   "--quota-client-imports=1",
	                                "--quota-client-batches=4", "--quota-uid-batches=6",
	                                "--quota-client-arena=1M",  NULL};
	struct mvc_opts small = {.list_arena = 1 << 20};
	struct mvc *c1, *c2, *c3;
	struct mvc_mem m[4];
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	uint32_t peer, imp;

	quota_mover(q);
	/* The default 64 MiB arena is over client.arena. */
	ck_refused(mvc_connect(&c1, C.sock), NULL,
	           "quota_client_arena is 1 MiB: this client holds 0 bytes of list arena and asks "
	           "for 64 MiB more");
	ck_assert_int_eq(mvc_connect_opts(&c1, C.sock, &small), 0);
	ck_assert_int_eq(mvc_connect_opts(&c2, C.sock, &small), 0);

	ck_assert_int_eq(mvc_alloc(c1, 64 << 10, &m[0]), 0);
	ck_assert_int_eq(mvc_alloc(c1, 64 << 10, &m[1]), 0);
	ck_refused(mvc_alloc(c1, 4096, &m[2]), c1,
	           "quota_client_regions is 2: this client holds 2 regions and asks for 1 more");
	ck_assert_int_eq(mvc_alloc(c2, 64 << 10, &m[2]), 0);
	ck_refused(mvc_alloc(c2, 4096, &m[3]), c2, "quota_uid_bytes is 192 KiB: uid ");
	/* What a client frees stops counting at once. */
	ck_assert_int_eq(mvc_free(c1, &m[1]), 0);
	ck_assert_msg(mvc_alloc(c2, 64 << 10, &m[3]) == 0, "%s", mvc_error(c2));

	ck_assert_int_eq(mvc_address(c1, blob, &len), 0);
	ck_assert_int_eq(mvc_peer_add(c1, blob, len, &peer), 0);
	ck_refused(mvc_peer_add(c1, blob, len, &peer), c1, "quota_client_peers is 1: ");
	len = sizeof(blob);
	ck_assert_int_eq(mvc_region_blob(c1, m[0].region, blob, &len), 0);
	ck_assert_int_eq(mvc_import(c1, peer, blob, len, &imp), 0);
	ck_refused(mvc_import(c1, peer, blob, len, &imp), c1, "quota_client_imports is 1: ");

	/* Batches: c1 and c2 were granted 4 and 2 of the uid's 6; a third
	 * connection of the uid gets none and is refused. */
	struct mvc_info i1, i2;
	ck_assert_int_eq(mvc_info(c1, &i1), 0);
	ck_assert_int_eq(mvc_info(c2, &i2), 0);
	ck_assert_uint_eq(i1.max_batches, 4);
	ck_assert_uint_eq(i2.max_batches, 2);
	ck_refused(mvc_connect_opts(&c3, C.sock, &small), NULL, "quota_uid_batches is 6: ");
	for (uint64_t b = 0; b < 4; b++) {
		ck_assert_int_eq(mvc_write(c1, m[0].region, 0, imp, 4096 * b, 4096), 0);
		ck_assert_msg(mvc_submit(c1, b) == 0, "%s", mvc_error(c1));
	}
	ck_assert_int_eq(mvc_write(c1, m[0].region, 0, imp, 0, 4096), -EAGAIN);
	ck_assert_msg(strstr(mvc_error(c1), "all 4 batch ids are in flight"), "%s", mvc_error(c1));
	uint64_t want[4] = {0, 1, 2, 3};
	struct mvc_event ev[4];
	wait_batches(c1, want, ev, 4, 20);
	for (int i = 0; i < 4; i++)
		ck_assert_msg(ev[i].status == 0, "batch %d: %s", i, ev[i].msg);
	ck_assert_int_eq(mvc_write(c1, m[0].region, 0, imp, 0, 4096), 0);
	submit_ok(c1, 4);
	/* A departed client's grant goes back to its uid. */
	mvc_disconnect(c2);
	for (double end = now_s() + 10; mvc_connect_opts(&c3, C.sock, &small); usleep(50000))
		ck_assert_msg(now_s() < end, "the departed client's batches never came back");
	mvc_disconnect(c3);
	mvc_disconnect(c1);
	ck_assert_msg(log_grep(&C, "quota_client_regions is 2: ", NULL, 0),
	              "no log line for a refusal");
}
END_TEST

/* ---- a raw libfabric peer ---- */

/* One write from f to the mover's shard 0; its completion's status, or
 * -ETIMEDOUT. */
static int raw_write(struct mv_fabric *f, fi_addr_t to, void *buf, void *desc, size_t len,
                     uint64_t raddr, uint64_t key)
{
	struct iovec iov = {buf, len};
	struct fi_rma_iov riov = {.addr = raddr, .len = len, .key = key};
	struct fi_context2 ctx;
	struct fi_msg_rma msg = {.msg_iov = &iov,
	                         .desc = &desc,
	                         .iov_count = 1,
	                         .addr = to,
	                         .rma_iov = &riov,
	                         .rma_iov_count = 1,
	                         .context = &ctx};
	ssize_t ret;

	for (double end = now_s() + 5;
	     (ret = fi_writemsg(f->ep, &msg, FI_COMPLETION | f->dc_flag)) == -FI_EAGAIN;)
		if (now_s() > end)
			return -ETIMEDOUT;
	if (ret)
		return (int)ret;
	for (double end = now_s() + 10; now_s() < end;) {
		struct fi_cq_data_entry e;
		ssize_t n = fi_cq_read(f->cq, &e, 1);
		if (n == 1)
			return 0;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			fi_cq_readerr(f->cq, &err, 0);
			return -(int)(err.err ? err.err : EIO);
		}
	}
	return -ETIMEDOUT;
}

/*
 * A fresh endpoint of a raw peer writes once into ok (a region it may
 * write), so its connection is known to work, then once at raddr with key.
 * The second write's status.
 */
static int raw_peer_write(const struct mv_addr_blob *ab, const struct mv_region_blob *ok,
                          uint64_t raddr, uint64_t key)
{
	enum { N = 4096 };
	struct mv_fabric f;
	struct fid_mr *mr;
	void *desc;
	uint64_t lkey;
	fi_addr_t to;
	char why[256];
	static uint8_t buf[N];

	memset(buf, 0xee, sizeof(buf));
	ck_assert_int_eq(mv_fabric_open(&f, "tcp", "lo", 0), 0);
	ck_assert_int_eq(mv_fabric_av_insert(&f, ab->addr[0], &to), 0);
	ck_assert_msg(mv_fabric_reg(&f, buf, N, 7, &mr, &desc, &lkey, why, sizeof(why)) == 0, "%s",
	              why);
	int ret = raw_write(&f, to, buf, desc, N, ok->shard[0].addr, ok->shard[0].key);
	ck_assert_msg(ret == 0, "the raw peer cannot write where it may: %d", ret);
	ret = raw_write(&f, to, buf, desc, N, raddr, key);
	fi_close(&mr->fid);
	mv_fabric_close(&f);
	return ret;
}

START_TEST(test_raw_fabric_peer_cannot_write_past_a_region_or_after_its_free)
{
	enum { LEN = 64 << 10, FILE_LEN = 2 * LEN };
	struct mvc *c;
	struct mvc_mem m, ok;
	struct mv_region_blob rb, okb;
	struct mv_addr_blob ab;
	size_t len;

	/* The region is the first half of a memfd; the test watches the rest. */
	int fd = memfd_create("mvt-raw", MFD_ALLOW_SEALING);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, FILE_LEN), 0);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	uint8_t *mem = mmap(NULL, FILE_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(mem, MAP_FAILED);
	memset(mem, 0x11, FILE_LEN);
	ck_assert_int_eq(mvc_connect(&c, B.sock), 0);
	ck_assert_msg(mvc_register_fd(c, fd, 0, LEN, &m) == 0, "%s", mvc_error(c));
	ck_assert_int_eq(mvc_alloc(c, 4096, &ok), 0);
	len = sizeof(rb);
	ck_assert_int_eq(mvc_region_blob(c, m.region, &rb, &len), 0);
	len = sizeof(okb);
	ck_assert_int_eq(mvc_region_blob(c, ok.region, &okb, &len), 0);
	len = sizeof(ab);
	ck_assert_int_eq(mvc_address(c, &ab, &len), 0);
	uint64_t base = rb.shard[0].addr, key = rb.shard[0].key;

	/* What was exported, it may write. */
	ck_assert_int_eq(raw_peer_write(&ab, &okb, base, key), 0);
	ck_assert_int_eq(mem[0], 0xee);
	ck_assert_int_eq(mem[4095], 0xee);

	/* Across the region's end, and wholly past it: refused, nothing lands. */
	int r1 = raw_peer_write(&ab, &okb, base + LEN - 2048, key);
	int r2 = raw_peer_write(&ab, &okb, base + LEN, key);
	size_t at = first_not(mem + LEN, FILE_LEN - LEN, 0x11);
	ck_assert_msg(at == FILE_LEN - LEN, "byte %zu past the region was written", at);

	/* Freed: its key reaches nothing. */
	memset(mem, 0x22, LEN);
	ck_assert_int_eq(mvc_free(c, &m), 0);
	int r3 = raw_peer_write(&ab, &okb, base, key);
	at = first_not(mem, LEN, 0x22);
	if (at == LEN)
		at = LEN + first_not(mem + LEN, FILE_LEN - LEN, 0x11);
	ck_assert_msg(at == FILE_LEN, "byte %zu written after the free", at);
	fprintf(stderr, "tenants: raw writes past the region: %d, %d; after its free: %d\n", r1, r2,
	        r3);
	/* tcp asks for delivery: the writer hears its write was refused. */
	ck_assert_msg(r1 < 0 && r2 < 0 && r3 < 0, "refused writes completed: %d %d %d", r1, r2, r3);
	mvc_disconnect(c);

	/* The mover goes on serving. */
	still_serves(&A, &B, 4);
	munmap(mem, FILE_LEN);
	close(fd);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tenants");
	TCase *tc = tcase_create("access");
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_other_uid_is_refused_without_allow_any_uid);
	tcase_add_test(tc, test_tenant_cannot_read_stats_start_traces_or_take_gpu_fds);
	tcase_add_test(tc, test_admin_group_reads_stats_but_is_no_client);
	tcase_add_test(tc, test_gpu_fd_needs_the_region_blob_secret);
	tcase_add_test(tc, test_tenant_cannot_reach_another_tenants_regions_batches_or_immediates);
	tcase_add_test(tc, test_quotas_refuse_with_their_limit_and_free_on_release);
	tcase_add_test(tc, test_raw_fabric_peer_cannot_write_past_a_region_or_after_its_free);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
