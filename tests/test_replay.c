/* SPDX-License-Identifier: MIT */
/*
 * Tests of the trace tools against movers, as a user runs them: control:
 * `mvtrace start|stop` speak MV_MSG_TRACE to a fake mover; replay: two
 * movers on loopback re-issue a trace with exactly its bytes and ops, on
 * schedule, and name what failed and why; capture: a mover's own trace of a
 * replay, replayed again, gives the same totals, and SIGTERM closes a trace
 * with its END record. On files alone: tests/test_trace.c.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mv_sock.h"
#include "mv_wire.h"
#include "trace_util.h"

#include "mvtest.h"

/* ---- control: start and stop against a fake mover ---- */

struct fake {
	int lfd;
	char path[108];
};

static void fake_listen(struct fake *f)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	snprintf(f->path, sizeof(f->path), "%s/fake.sock", dir);
	strcpy(sa.sun_path, f->path);
	f->lfd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	ck_assert_int_ge(f->lfd, 0);
	ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f->lfd, 4), 0);
}

/* Serves one TRACE request in a child: checks it, answers status and msg. */
static pid_t fake_serve(struct fake *f, uint32_t on, const char *want_path, int32_t status,
                        const char *msg)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid)
		return pid;
	alarm(20);
	int fd = accept(f->lfd, NULL, NULL);
	union {
		struct {
			struct mv_msg_hdr h;
			struct mv_trace_req r;
		} m;
		char raw[1024];
	} u = {0};
	union mv_cmsg cm;
	struct iovec iov = {&u, sizeof(u)};
	struct msghdr mh = {.msg_iov = &iov,
	                    .msg_iovlen = 1,
	                    .msg_control = cm.buf,
	                    .msg_controllen = sizeof(cm.buf)};
	ssize_t n = recvmsg(fd, &mh, 0);
	int tfd = -1, nfds = n > 0 ? mv_fds_take(&mh, &tfd, 1) : 0;
	typeof(u.m) m = u.m;
	int ok = n == (ssize_t)sizeof(m) && m.h.magic == MV_WIRE_MAGIC &&
	         m.h.version == MV_WIRE_VERSION && m.h.type == MV_MSG_TRACE &&
	         m.h.len == sizeof(m.r) && m.r.on == on && !strcmp(m.r.path, want_path);
	/* A start brings the file, opened for writing by the tool: the mover
	 * never opens the path itself. */
	struct stat fs, ps;
	int fl = tfd >= 0 ? fcntl(tfd, F_GETFL) : -1;
	int fd_ok = on ? nfds == 1 && fl >= 0 && (fl & O_ACCMODE) != O_RDONLY && !fstat(tfd, &fs) &&
	                     !stat(want_path, &ps) && fs.st_ino == ps.st_ino &&
	                     fs.st_dev == ps.st_dev
	               : nfds == 0;
	if (!ok || !fd_ok) {
		fprintf(
		    stderr,
		    "fake mover: bad request (%zd bytes, type %u, on %u, path '%s', %d fds%s)\n", n,
		    m.h.type, m.r.on, m.r.path, nfds, fd_ok ? "" : ", not the file");
		_exit(1);
	}
	struct {
		struct mv_msg_hdr h;
		struct mv_reply_hdr r;
	} rep = {.h = {.magic = MV_WIRE_MAGIC,
	               .version = MV_WIRE_VERSION,
	               .type = MV_MSG_TRACE | MV_MSG_REPLY,
	               .len = sizeof(rep.r),
	               .seq = m.h.seq},
	         .r = {.status = status}};
	snprintf(rep.r.msg, sizeof(rep.r.msg), "%s", msg);
	send(fd, &rep, sizeof(rep), 0);
	_exit(0);
}

static void fake_done(pid_t pid)
{
	int st;

	waitpid(pid, &st, 0);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the fake mover saw a bad request");
}

START_TEST(test_start_sends_absolute_path_and_reports_reply)
{
	struct fake f;
	struct out o;
	char want[300];

	fake_listen(&f);
	/* A relative FILE is made absolute against the tool's working directory. */
	snprintf(want, sizeof(want), "%s/cap.trace", dir);
	pid_t pid = fake_serve(&f, 1, want, 0, "");
	RUN(&o, dir, "mvtrace", "start", "--socket", f.path, "cap.trace");
	fake_done(pid);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "is tracing to");
	ck_has(o.out, want);

	snprintf(want, sizeof(want), "%s/refused.trace", dir);
	pid = fake_serve(&f, 1, want, -EACCES, "TRACE is for the mover's admins");
	RUN(&o, dir, "mvtrace", "start", "--socket", f.path, want);
	fake_done(pid);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "the mover refused (-EACCES): TRACE is for the mover's admins");

	pid = fake_serve(&f, 0, "", -ENOENT, "no trace is being written");
	RUN(&o, dir, "mvtrace", "stop", "--socket", f.path);
	fake_done(pid);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "no trace is being written");

	/* A file the tool itself cannot create is its own error, named. */
	RUN(&o, dir, "mvtrace", "start", "--socket", f.path, "/proc/no/such.trace");
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "cannot create /proc/no/such.trace");
	close(f.lfd);
}
END_TEST

START_TEST(test_start_without_mover_names_the_socket)
{
	struct out o;
	char s[128];

	RUN(&o, NULL, "mvtrace", "start", "--socket", in_dir(s, sizeof(s), "none.sock"), "x");
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "connect to");
	ck_has(o.err, "none.sock");
	ck_has(o.err, "is a mover listening there?");
}
END_TEST

/* ---- two movers on loopback ---- */

/* A mover with its socket and log in this test's directory, on tcp with
 * 2 shards, capturing a trace when trace is not NULL. mover_stop() sends
 * SIGTERM, on which the mover closes its trace. */
static void trace_mover_spawn(struct mvproc *m, const char *name, const char *trace)
{
	char bin[4200];

	snprintf(m->sock, sizeof(m->sock), "%s/%s.sock", dir, name);
	snprintf(m->log, sizeof(m->log), "%s/%s.log", dir, name);
	snprintf(bin, sizeof(bin), "%s/mover", bindir);
	mover_spawn(m, (const char *const[]){bin, "--provider", "tcp", "--iface", "lo", "--shards",
	                                     "2", "--op-timeout", "5", "--socket", m->sock,
	                                     "--no-config", trace ? "--trace" : NULL, trace, NULL});
}

static void movers_up(const char *trace_a)
{
	trace_mover_spawn(&A, "a", trace_a);
	trace_mover_spawn(&B, "b", NULL);
	mover_listening(&A, "a", 10);
	mover_listening(&B, "b", 10);
}

static void setup_movers(void)
{
	setup_dir();
	movers_up(NULL);
}

static void teardown_movers(void)
{
	mover_stop(&A);
	mover_stop(&B);
	teardown_dir();
}

struct result {
	uint64_t batches, bytes, ops, errors;
	double p50, max_late;
};

static struct result result_of(const struct out *o)
{
	struct result r;
	const char *l = strstr(o->out, "RESULT mvreplay ");

	ck_assert_msg(l, "no RESULT line; stdout:\n%s\nstderr:\n%s", o->out, o->err);
	ck_assert_msg(sscanf(l,
	                     "RESULT mvreplay batches=%" SCNu64 " bytes=%" SCNu64 " ops=%" SCNu64
	                     " errors=%" SCNu64 " offered_gbps=%*s achieved_gbps=%*s p50_us=%lf "
	                     "p99_us=%*s p999_us=%*s max_late_us=%lf",
	                     &r.batches, &r.bytes, &r.ops, &r.errors, &r.p50, &r.max_late) == 6,
	              "%s", l);
	return r;
}

struct totals {
	uint64_t batches, bytes, ops;
};

static struct totals totals_of(const char *path)
{
	struct mvt_trace t;
	struct totals s = {0};

	load_ok(path, &t);
	s.batches = t.nrec;
	for (size_t i = 0; i < t.nrec; i++) {
		s.bytes += t.rec[i].bytes;
		s.ops += t.rec[i].nops;
	}
	mvt_free(&t);
	return s;
}

static void replay_spawn(struct job *j, const char *trace, const char *const *extra)
{
	const char *args[24] = {"--trace", trace, "--send", A.sock, "--recv", B.sock};
	int n = 6;

	while (extra && *extra && n < 23)
		args[n++] = *extra++;
	args[n] = NULL;
	spawn(j, NULL, "mvreplay", args);
}

static void replay(struct out *o, const char *trace, const char *const *extra)
{
	struct job j;

	replay_spawn(&j, trace, extra);
	finish(&j, o);
}

static void import_azure(char *p, size_t len)
{
	char in[4200];
	struct out o;

	snprintf(in, sizeof(in), "%s/azure_conv_50.csv", datadir);
	RUN(&o, NULL, "mvtrace", "import", "azure", in, in_dir(p, len, "az.trace"), MODEL);
	ck_assert_msg(o.status == 0, "%s", o.err);
}

START_TEST(test_replay_asap_issues_exactly_the_trace)
{
	char p[128];
	struct out o;

	import_azure(p, sizeof(p));
	struct totals want = totals_of(p);
	replay(&o, p, (const char *const[]){"--asap", "--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	struct result r = result_of(&o);
	ck_assert_uint_eq(r.batches, want.batches);
	ck_assert_uint_eq(r.bytes, want.bytes);
	ck_assert_uint_eq(r.ops, want.ops);
	ck_assert_uint_eq(r.errors, 0);
	ck_assert_msg(r.p50 > 0, "p50 %f", r.p50);
	ck_has(o.out, "immediates                   50                   50");
	/* Piped: no progress line. */
	ck_assert_msg(!strchr(o.err, '\r'), "progress line on a pipe: %s", o.err);
}
END_TEST

START_TEST(test_replay_splits_writes_and_segments_exactly)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[6];
	char p[128];
	struct out o;
	uint64_t t0 = h.start_ns;

	/* Uneven splits, every kind, a batch that mixed kinds, in completion order. */
	r[0] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .submit_ns = t0 + 5,
	                             .bytes = 1000,
	                             .nops = 3,
	                             .kind = MV_TK_WRITE};
	r[1] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .submit_ns = t0 + 1,
	                             .bytes = 12345,
	                             .nops = 5,
	                             .kind = MV_TK_WRITEV | MV_TK_IMM,
	                             .imm = 1};
	r[2] = (struct mv_trace_rec){
	    .type = MV_TR_BATCH, .submit_ns = t0 + 3, .kind = MV_TK_IMM, .imm = 2};
	r[3] = rec_paged(t0 + 2, 7, 4096, 3);
	r[4] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .submit_ns = t0 + 4,
	                             .bytes = 3 * 4096 + 777,
	                             .nops = 4,
	                             .page_size = 4096,
	                             .kind = MV_TK_PAGED | MV_TK_WRITE};
	r[5] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .submit_ns = t0 + 6,
	                             .bytes = 3u << 20,
	                             .nops = 1,
	                             .kind = MV_TK_WRITE | MV_TK_IMM,
	                             .imm = 5};
	write_trace(in_dir(p, sizeof(p), "w.trace"), &h, r, 6, 1, 0);
	replay(&o, p, (const char *const[]){"--asap", "--pool-mib", "4", "--window", "2", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	struct result res = result_of(&o);
	ck_assert_uint_eq(res.batches, 6);
	ck_assert_uint_eq(res.bytes, 1000 + 12345 + 7 * 4096 + 3 * 4096 + 777 + (3u << 20));
	ck_assert_uint_eq(res.ops, 3 + 5 + 7 + 4 + 1);
	ck_assert_uint_eq(res.errors, 0);
	ck_has(o.out, "immediates                    4                    4");
}
END_TEST

START_TEST(test_replay_keeps_the_schedule)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[6];
	char p[128];
	struct out o;

	/* 100 ms apart: 0.5 s of trace, 0.25 s at --speed 2. */
	for (int i = 0; i < 6; i++)
		r[i] = rec_paged(h.start_ns + (uint64_t)i * 100000000u, 32, 4096, (uint32_t)i);
	write_trace(in_dir(p, sizeof(p), "s.trace"), &h, r, 6, 1, 0);
	replay(&o, p, (const char *const[]){"--speed", "2", "--pool-mib", "4", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	struct result res = result_of(&o);
	ck_assert_uint_eq(res.batches, 6);
	ck_assert_msg(o.secs >= 0.25, "a 0.25 s schedule replayed in %.3f s", o.secs);
	ck_assert_msg(res.max_late < 100000, "fell %.0f us behind a light schedule", res.max_late);
	ck_has(o.out, "lateness   max");
}
END_TEST

START_TEST(test_replay_refuses_pages_larger_than_the_pool)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r = rec_paged(h.start_ns, 2, 2u << 20, 0);
	char p[128];
	struct out o;

	write_trace(in_dir(p, sizeof(p), "big.trace"), &h, &r, 1, 1, 0);
	replay(&o, p, (const char *const[]){"--asap", "--pool-mib", "1", NULL});
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "trace record 0 has a page of 2097152 bytes; the regions are 1048576 bytes: "
	              "raise --pool-mib to at least 2");
}
END_TEST

START_TEST(test_replay_carries_requests_larger_than_the_rings)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[2] = {rec_paged(h.start_ns, 120000, 64, 0),
	                            rec_paged(h.start_ns + 1, 10, 64, 1)};
	char p[128];
	struct out o;

	/* 120,000 scattered pages: 15 times what the rings of a shard hold as
	 * descriptors, one LIST descriptor per shard by reference. */
	write_trace(in_dir(p, sizeof(p), "many.trace"), &h, r, 2, 1, 0);
	replay(&o, p, (const char *const[]){"--asap", "--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	struct result res = result_of(&o);
	ck_assert_uint_eq(res.errors, 0);
	ck_assert_uint_eq(res.batches, 2);
	ck_assert_uint_eq(res.ops, 120010);
}
END_TEST

START_TEST(test_replay_counts_errors_by_cause_when_the_peer_dies)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[40];
	char p[128];
	struct out o;
	struct job j;

	/* 2 s of batches; the receiving mover is killed after 0.5 s. */
	for (int i = 0; i < 40; i++)
		r[i] = rec_paged(h.start_ns + (uint64_t)i * 50000000u, 64, 4096, (uint32_t)i);
	write_trace(in_dir(p, sizeof(p), "d.trace"), &h, r, 40, 1, 0);
	replay_spawn(&j, p, (const char *const[]){"--pool-mib", "4", NULL});
	usleep(500000);
	kill(B.pid, SIGKILL);
	waitpid(B.pid, NULL, 0);
	B.pid = 0;
	finish(&j, &o);
	ck_assert_msg(o.status == 1, "exit %d\n%s\n%s", o.status, o.out, o.err);
	struct result res = result_of(&o);
	ck_assert_msg(res.errors > 0 && res.errors < 40, "%s", o.out);
	ck_has(o.err, "failed: peer_gone");
	ck_has(o.out, "errors     ");
	ck_has(o.out, "peer_gone");
	ck_has(o.out, "failed     the receiver failed");
}
END_TEST

/* ---- capture -> replay -> capture ---- */

static int mover_traces(void)
{
	struct out o;

	RUN(&o, NULL, "mover", "--help");
	return strstr(o.out, "--trace") || strstr(o.err, "--trace");
}

START_TEST(test_captured_replay_replays_to_the_same_totals)
{
	char az[128], cap1[128], cap2[128];
	struct out o;

	if (!mover_traces()) {
		printf("SKIP: test_captured_replay_replays_to_the_same_totals: this mover has no "
		       "--trace\n");
		return;
	}
	import_azure(az, sizeof(az));
	struct totals want = totals_of(az);
	/* Capture 1: started from the mover's command line, stopped at run time. */
	movers_up(in_dir(cap1, sizeof(cap1), "cap1.trace"));
	replay(&o, az, (const char *const[]){"--asap", "--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	RUN(&o, NULL, "mvtrace", "stop", "--socket", A.sock);
	ck_assert_msg(o.status == 0, "%s", o.err);

	struct mvt_trace t;
	load_ok(cap1, &t);
	ck_assert_msg(t.has_end, "the mover closed no END record");
	ck_assert_uint_eq(t.end.nops, 0);
	ck_assert_uint_eq(t.end.bytes, t.nrec);
	ck_assert_int_eq(t.hdr.nshards, 2);
	for (size_t i = 0; i < t.nrec; i++) {
		ck_assert_int_eq(t.rec[i].status, 0);
		ck_assert_int_eq(t.rec[i].kind, MV_TK_PAGED | MV_TK_IMM);
		ck_assert_uint_eq(t.rec[i].page_size, M_PAGE);
		ck_assert(t.rec[i].complete_ns >= t.rec[i].submit_ns);
		ck_assert(t.rec[i].nparts >= 1 && t.rec[i].nparts <= 2);
	}
	mvt_free(&t);
	struct totals got = totals_of(cap1);
	ck_assert_uint_eq(got.batches, want.batches);
	ck_assert_uint_eq(got.bytes, want.bytes);
	ck_assert_uint_eq(got.ops, want.ops);

	/* Capture 2: switched on at run time, of a replay of capture 1. */
	RUN(&o, dir, "mvtrace", "start", "--socket", A.sock, "cap2.trace");
	ck_assert_msg(o.status == 0, "%s", o.err);
	replay(&o, cap1, (const char *const[]){"--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	RUN(&o, NULL, "mvtrace", "stop", "--socket", A.sock);
	ck_assert_msg(o.status == 0, "%s", o.err);
	got = totals_of(in_dir(cap2, sizeof(cap2), "cap2.trace"));
	ck_assert_uint_eq(got.batches, want.batches);
	ck_assert_uint_eq(got.bytes, want.bytes);
	ck_assert_uint_eq(got.ops, want.ops);
	RUN(&o, NULL, "mvtrace", "summary", cap2);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "errors     none");
	ck_has(o.out, "dropped    0 records");
}
END_TEST

/* A trace started with --hops pairs every batch with its hops, in order:
 * submitted, taken, posted, data done, published; dump and summary show
 * them. */
START_TEST(test_captured_hops_follow_their_batches_in_order)
{
	char az[128], cap[128];
	struct out o;

	if (!mover_traces()) {
		printf("SKIP: test_captured_hops_follow_their_batches_in_order: this mover has "
		       "no --trace\n");
		return;
	}
	import_azure(az, sizeof(az));
	movers_up(NULL);
	RUN(&o, dir, "mvtrace", "start", "--socket", A.sock, "--hops", "cap.trace");
	ck_assert_msg(o.status == 0, "%s", o.err);
	replay(&o, az, (const char *const[]){"--asap", "--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	RUN(&o, NULL, "mvtrace", "stop", "--socket", A.sock);
	ck_assert_msg(o.status == 0, "%s", o.err);

	struct mvt_trace t;
	load_ok(in_dir(cap, sizeof(cap), "cap.trace"), &t);
	ck_assert_uint_eq(t.nrec, 50);
	ck_assert_uint_eq(t.nhops, t.nrec);
	for (size_t i = 0; i < t.nrec; i++) {
		const struct mv_trace_hops *h = &t.hops[i];
		ck_assert_uint_eq(h->type, MV_TR_HOPS);
		ck_assert_uint_eq(h->submit_ns, t.rec[i].submit_ns);
		ck_assert_uint_eq(h->complete_ns, t.rec[i].complete_ns);
		/* A long list's first writes can go before its END is taken. */
		ck_assert_msg(
		    h->taken_ns >= h->submit_ns && h->posted_ns && h->data_ns >= h->posted_ns &&
		        h->data_ns >= h->taken_ns && h->complete_ns >= h->data_ns,
		    "batch %zu: submit %" PRIu64 " taken %" PRIu64 " posted %" PRIu64
		    " data %" PRIu64 " done %" PRIu64,
		    i, h->submit_ns, h->taken_ns, h->posted_ns, h->data_ns, h->complete_ns);
		ck_assert(h->shard < 2);
	}
	mvt_free(&t);
	RUN(&o, NULL, "mvtrace", "dump", cap);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "hops (us): queue ");
	RUN(&o, NULL, "mvtrace", "summary", cap);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "hops       us over 50 batches");
	ck_has(o.out, "  queue ");
	RUN(&o, NULL, "mvtrace", "dump", cap, "--csv");
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, ",taken_ns,posted_ns,data_ns,imm_ns,imm_inline");
}
END_TEST

START_TEST(test_sigterm_closes_the_trace)
{
	char az[128], cap[128];
	struct out o;

	if (!mover_traces()) {
		printf("SKIP: test_sigterm_closes_the_trace: this mover has no --trace\n");
		return;
	}
	import_azure(az, sizeof(az));
	movers_up(in_dir(cap, sizeof(cap), "cap.trace"));
	replay(&o, az, (const char *const[]){"--asap", "--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	char log[2048];
	int st = mover_stop(&A);
	slurp(A.log, log, sizeof(log));
	ck_assert_msg(st == 0,
	              "the tracing mover did not exit cleanly within 6 s of SIGTERM; "
	              "its log:\n%s",
	              log);
	struct mvt_trace t;
	load_ok(cap, &t);
	ck_assert_msg(t.has_end, "SIGTERM left the trace without its END record");
	ck_assert_uint_eq(t.nrec, 50);
	mvt_free(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("replay");
	TCase *tc;

	tc = tcase_create("control");
	tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
	tcase_add_test(tc, test_start_sends_absolute_path_and_reports_reply);
	tcase_add_test(tc, test_start_without_mover_names_the_socket);
	suite_add_tcase(s, tc);

	tc = tcase_create("replay");
	tcase_add_checked_fixture(tc, setup_movers, teardown_movers);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_replay_asap_issues_exactly_the_trace);
	tcase_add_test(tc, test_replay_splits_writes_and_segments_exactly);
	tcase_add_test(tc, test_replay_keeps_the_schedule);
	tcase_add_test(tc, test_replay_refuses_pages_larger_than_the_pool);
	tcase_add_test(tc, test_replay_carries_requests_larger_than_the_rings);
	tcase_add_test(tc, test_replay_counts_errors_by_cause_when_the_peer_dies);
	suite_add_tcase(s, tc);

	tc = tcase_create("capture");
	tcase_add_checked_fixture(tc, setup_dir, teardown_movers);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_captured_replay_replays_to_the_same_totals);
	tcase_add_test(tc, test_captured_hops_follow_their_batches_in_order);
	tcase_add_test(tc, test_sigterm_closes_the_trace);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
