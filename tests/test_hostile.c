/* SPDX-License-Identifier: MIT */
/*
 * A hostile client beside an honest one. The hostile client builds batches
 * through libclient, then rewrites the WRITE descriptors it reserved in its
 * own submission rings before it submits them: random fields and edge
 * values (0, 1, 2^32, 2^63, UINT64_MAX, the region's size) in op, flags,
 * nparts, src, dst, offsets and lengths. Each such batch must reach exactly
 * one completion, the honest client's pages must land intact meanwhile, and
 * a mover whose only client is that hostile one must stay near idle. A
 * client whose rings stop making sense (a batch id out of range, a
 * descriptor after its batch's END, impossible ring indices) is cut off:
 * its batches in flight fail once with MVC_CAUSE_PROTOCOL, its next call
 * fails with -EPROTO naming the reason (the mover refuses its requests too),
 * and the mover logs it once. A corrupt completion ring cuts off the same
 * way; an END that promises parts that never come fails its batch, and a
 * part whose END never comes cuts the client off, once the client is quiet.
 * libclient's sources are compiled in, so the test can reach the rings as
 * such a client would.
 */
#include "arena.c"
#include "batch.c"
#include "client.c"
#include "events.c"
#include "rejoin.c"
#include "memory.c"

#include <check.h>
#include <glob.h>
#include <stdio.h>
#include <sys/mman.h>

#include "mvtest.h"

#define REGION (1u << 20)

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* An edge value or a random one, for a field of the given width in bits. */
static uint64_t edge(uint64_t *x, int bits)
{
	static const uint64_t e[] = {0,          1,          REGION - 1,     REGION,
	                             REGION + 1, 1ull << 31, 1ull << 32,     (1ull << 32) - 1,
	                             1ull << 63, UINT64_MAX, UINT64_MAX - 8, 4ull << 20};
	uint64_t v = rnd(x) % 3 ? e[rnd(x) % (sizeof(e) / sizeof(e[0]))] : rnd(x);

	return bits == 64 ? v : v & ((1ull << bits) - 1);
}

/* Rewrites fields of the descriptors the open batch of c reserved: any
 * field of a WRITE, and the counts of an END (the parts and writes it
 * claims). Now and then the op or the batch id too, which cuts the client
 * off. */
static void spoil(struct mvc *c, uint64_t *x)
{
	for (uint32_t s = 0; s < c->info.nshards; s++) {
		struct shmring *r = &c->sh[s].sub;
		uint32_t k = shmring_reserved(r);
		for (uint32_t i = 0; i < k; i++) {
			struct mv_desc *d = shmring_slot(r, r->local - k + i);
			if (d->op == MV_OP_END) {
				if (rnd(x) % 8 == 0)
					d->ndesc = (uint32_t)edge(x, 32);
				if (rnd(x) % 8 == 0)
					d->nparts = (uint16_t)edge(x, 16);
				continue;
			}
			if (rnd(x) % 64 == 0) {
				d->op = (uint8_t)edge(x, 8);
				continue;
			}
			if (rnd(x) % 256 == 0) {
				d->batch = (uint32_t)edge(x, 32);
				continue;
			}
			switch (rnd(x) % 7) {
			case 0:
				d->flags = (uint8_t)edge(x, 8);
				d->nparts = (uint16_t)edge(x, 16);
				break;
			case 1:
				d->src = (uint32_t)edge(x, 32);
				break;
			case 2:
				d->dst = (uint32_t)edge(x, 32);
				break;
			case 3:
				d->src_off = edge(x, 64);
				break;
			case 4:
				d->dst_off = edge(x, 64);
				break;
			default:
				d->len = edge(x, 64);
				if (rnd(x) % 2)
					d->src_off = edge(x, 64);
				break;
			}
		}
	}
}

/* mover's CPU time (user + system) in seconds, from /proc. */
static double cpu_s(pid_t pid)
{
	char path[64];
	unsigned long ut, st;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	int n = fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
	fclose(f);
	ck_assert_int_eq(n, 2);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* One honest round: 64 scattered pages A -> B, then an immediate; every
 * page checked once the immediate arrived. */
static void honest_round(struct pair *p, uint32_t round)
{
	enum { NP = 64, PS = 4096 };
	uint32_t sp[NP], dp[NP];

	fill(p->src.addr, REGION, round + 1);
	for (uint32_t i = 0; i < NP; i++) {
		sp[i] = (i * 37 + round) % (REGION / PS);
		dp[i] = (i * 101 + round * 7) % (REGION / PS); /* 101 is odd: no repeats */
	}
	struct mvc_pages pg = {.src = p->src.region,
	                       .dst = p->imp,
	                       .src_stride = PS,
	                       .dst_stride = PS,
	                       .page_size = PS,
	                       .src_pages = sp,
	                       .dst_pages = dp,
	                       .npages = NP};
	ck_assert_msg(mvc_write_paged(p->a, &pg) == 0, "%s", mvc_error(p->a));
	landed(p->a, p->imp, p->b, 1000000 + round);
	uint32_t bad = first_page_differing(p->src.addr, sp, p->dst.addr, dp, PS, NP);
	ck_assert_msg(bad == NP, "honest round %u: page %u differs", round, bad);
}

/* Reaps what the hostile client has: each cookie completes at most once.
 * -EPROTO once the client was cut off and nothing is left in flight. */
static int reap(struct mvc *c, uint8_t *seen, uint32_t n, int timeout_ms, uint32_t *failed)
{
	struct mvc_event ev[32];
	int k = mvc_wait(c, ev, 32, timeout_ms);

	if (k == -EPROTO)
		return k; /* cut off, and every batch in flight reported */
	ck_assert_msg(k >= 0, "hostile client: mvc_wait: %s", mvc_error(c));
	for (int i = 0; i < k; i++) {
		if (ev[i].type != MVC_EV_BATCH)
			continue;
		ck_assert_uint_lt(ev[i].cookie, n);
		ck_assert_msg(!seen[ev[i].cookie], "hostile batch %llu completed twice",
		              (unsigned long long)ev[i].cookie);
		seen[ev[i].cookie] = 1;
		*failed += ev[i].status != 0;
		if (ev[i].status)
			ck_assert_msg(ev[i].msg[0], "batch %llu failed without a cause",
			              (unsigned long long)ev[i].cookie);
	}
	return k;
}

START_TEST(test_spoiled_writes_complete_once_and_spare_others)
{
	enum { NB = 3000, WINDOW = 32 };
	struct pair p, h;
	uint8_t *seen = calloc(NB, 1);
	uint64_t x = 0x686f7374696c65ull;
	uint32_t failed = 0, rounds = 0, cuts = 0;

	ck_assert_ptr_nonnull(seen);
	pair_open(&p, REGION, REGION);
	pair_open(&h, REGION, REGION);
	for (uint32_t b = 0; b < NB; b++) {
		for (double stop = now_s() + 20; mvc_inflight(h.a) >= WINDOW;) {
			ck_assert_msg(
			    now_s() < stop,
			    "hostile batches stopped completing: %u in flight after batch %u",
			    mvc_inflight(h.a), b);
			if (reap(h.a, seen, NB, 100, &failed) == -EPROTO)
				break;
		}
		if (h.a->cut[0]) {
			/* Cut off: its batches were all reported; start over. */
			while (reap(h.a, seen, NB, 100, &failed) != -EPROTO)
				;
			ck_assert_int_eq(mvc_inflight(h.a), 0);
			pair_close(&h);
			pair_open(&h, REGION, REGION);
			cuts++;
		}
		uint32_t nw = 1 + (uint32_t)(rnd(&x) % 3);
		for (uint32_t w = 0; w < nw; w++) {
			uint64_t off = rnd(&x) % (REGION / 4096) * 4096;
			ck_assert_msg(mvc_write(h.a, h.src.region, off, h.imp, off, 4096) == 0,
			              "%s", mvc_error(h.a));
		}
		if (rnd(&x) % 4 == 0)
			ck_assert_int_eq(mvc_write_imm(h.a, h.imp, 0x5a000000u | b), 0);
		spoil(h.a, &x);
		ck_assert_msg(mvc_submit(h.a, b) == 0, "%s", mvc_error(h.a));
		if (b % 250 == 0)
			honest_round(&p, rounds++);
	}
	double end = now_s() + 30;
	while (mvc_inflight(h.a) && now_s() < end)
		if (reap(h.a, seen, NB, 100, &failed) == -EPROTO)
			break;
	uint32_t missing = 0;
	for (uint32_t b = 0; b < NB; b++)
		missing += !seen[b];
	ck_assert_msg(missing == 0, "%u of %u hostile batches never completed", missing, NB);
	ck_assert_uint_gt(failed, NB / 2);
	ck_assert_uint_gt(cuts, 0);
	fprintf(stderr,
	        "hostile: %u batches, %u failed with a cause, %u cut-offs, %u honest rounds "
	        "verified\n",
	        NB, failed, cuts, rounds);
	honest_round(&p, rounds++);
	pair_close(&p);

	/* Leave it cut off, with descriptors in its ring that nobody takes. */
	if (!h.a->cut[0]) {
		for (uint32_t w = 0; w < 4; w++)
			ck_assert_int_eq(mvc_write(h.a, h.src.region, 0, h.imp, 0, 4096), 0);
		struct shmring *r = &h.a->sh[h.a->home].sub;
		((struct mv_desc *)shmring_slot(r, r->local - shmring_reserved(r)))->op = 0xee;
		ck_assert_int_eq(mvc_submit(h.a, NB), 0);
		for (double stop = now_s() + 10; !h.a->cut[0] && now_s() < stop;)
			mvc_wait(h.a, (struct mvc_event[4]){0}, 4, 100);
		ck_assert_msg(h.a->cut[0], "an unknown op did not cut the client off");
	}
	/* Only the hostile client is left, cut off and still connected: the
	 * movers rest. */
	double a0 = cpu_s(A.pid), b0 = cpu_s(B.pid), t0 = now_s();
	usleep(5000000);
	double t = now_s() - t0, ua = (cpu_s(A.pid) - a0) / t, ub = (cpu_s(B.pid) - b0) / t;
	fprintf(stderr,
	        "hostile: mover CPU over %.1f s with only the hostile client: A %.1f%%, "
	        "B %.1f%% of a core\n",
	        t, ua * 100, ub * 100);
	ck_assert_msg(ua < 0.10 && ub < 0.10, "movers use %.0f%% and %.0f%% of a core", ua * 100,
	              ub * 100);
	pair_close(&h);
	free(seen);
}
END_TEST

/* The ways a client's rings can stop making sense, one per connection. */
enum forgery { F_BATCH_ID, F_AFTER_END, F_SUB_PRODUCER, F_N };

static const char *const forged_why[F_N] = {
    [F_BATCH_ID] = "names batch",
    [F_AFTER_END] = "after its END",
    [F_SUB_PRODUCER] = "submission ring",
};

/*
 * Forges the open batch of c: its first WRITE names an impossible batch id
 * (F_BATCH_ID), or its second WRITE becomes an END that counts the first,
 * so the batch's real END comes after an END while the first write is
 * still in flight (F_AFTER_END).
 */
static void forge(struct mvc *c, enum forgery f)
{
	for (uint32_t s = 0; s < c->info.nshards; s++) {
		struct shmring *r = &c->sh[s].sub;
		uint32_t k = shmring_reserved(r), seen = 0;
		for (uint32_t i = 0; i < k; i++) {
			struct mv_desc *d = shmring_slot(r, r->local - k + i);
			if (d->op != MV_OP_WRITE)
				continue;
			if (f == F_BATCH_ID) {
				d->batch = 5000;
				return;
			}
			if (++seen == 2) {
				*d = (struct mv_desc){
				    .op = MV_OP_END, .batch = d->batch, .nparts = 1, .ndesc = 1};
				return;
			}
		}
	}
	ck_abort_msg("no WRITE to forge");
}

START_TEST(test_senseless_rings_cut_the_client_off)
{
	enum { GOOD = 20 };
	struct pair p;
	uint32_t rounds = 0;

	pair_open(&p, REGION, REGION);
	for (int f = 0; f < F_N; f++) {
		struct pair h;
		uint8_t done[GOOD + 1] = {0};
		uint32_t n = 0;

		pair_open(&h, REGION, REGION);
		/* A producer index forged after the submits could come after the
		 * shard took every batch, and nothing would be in flight to fail:
		 * hold the mover until the forgery is in place. */
		if (f == F_SUB_PRODUCER) {
			/* Stopped, every thread: kill() returns before a shard
			 * spinning on another core has stopped, and on the
			 * 16-core H100 host it took all the good batches in
			 * that time. The parent hears of the stop when it is
			 * whole. */
			int st;
			ck_assert_int_eq(kill(A.pid, SIGSTOP), 0);
			ck_assert_int_eq(waitpid(A.pid, &st, WUNTRACED), A.pid);
			ck_assert(WIFSTOPPED(st));
		}
		/* Good batches in flight, then the forged one. */
		for (uint32_t b = 0; b < GOOD; b++) {
			ck_assert_int_eq(
			    mvc_write(h.a, h.src.region, b * 4096, h.imp, b * 4096, 4096), 0);
			ck_assert_int_eq(mvc_submit(h.a, b), 0);
		}
		ck_assert_int_eq(mvc_write(h.a, h.src.region, 0, h.imp, 0, 4096), 0);
		ck_assert_int_eq(mvc_write(h.a, h.src.region, 8192, h.imp, 8192, 4096), 0);
		if (f == F_BATCH_ID || f == F_AFTER_END)
			forge(h.a, (enum forgery)f);
		ck_assert_int_eq(mvc_submit(h.a, GOOD), 0);
		const uint32_t want = GOOD + 1;
		if (f == F_SUB_PRODUCER) {
			/* A producer index no consumer can reach, then a wake-up. */
			struct shmring *r = &h.a->sh[0].sub;
			uint64_t one = 1;
			atomic_store(&r->lay->prod.idx, r->local + 1000000);
			if (r->doorbell >= 0)
				ck_assert_int_eq(write(r->doorbell, &one, sizeof(one)),
				                 sizeof(one));
			ck_assert_int_eq(kill(A.pid, SIGCONT), 0);
		}
		/* Every batch completes once, and the connection ends cut off. */
		int ret = 0, cut = 0;
		double end = now_s() + 15;
		while (!ret && now_s() < end) {
			struct mvc_event ev[8];
			ret = mvc_wait(h.a, ev, 8, 100);
			for (int i = 0; ret > 0 && i < ret; i++) {
				uint64_t k = ev[i].cookie;
				ck_assert_uint_lt(k, want);
				ck_assert_msg(!done[k], "forgery %d: batch %llu completed twice", f,
				              (unsigned long long)k);
				done[k] = 1;
				n++;
				if (ev[i].cause == MVC_CAUSE_PROTOCOL) {
					ck_assert_int_eq(ev[i].status, -EPROTO);
					ck_assert_msg(strstr(ev[i].msg, forged_why[f]), "%s",
					              ev[i].msg);
					cut = 1;
				}
			}
			if (ret > 0)
				ret = 0;
		}
		ck_assert_msg(ret == -EPROTO, "forgery %d: mvc_wait gave %d (%s) after %u events",
		              f, ret, mvc_error(h.a), n);
		ck_assert_msg(strstr(mvc_error(h.a), forged_why[f]), "%s", mvc_error(h.a));
		ck_assert_uint_eq(n, want);
		ck_assert_uint_eq(mvc_inflight(h.a), 0);
		ck_assert_msg(cut, "forgery %d: no batch failed as cut off", f);
		/* Every later call says so. */
		ck_assert_int_eq(mvc_write(h.a, h.src.region, 0, h.imp, 0, 4096), -EPROTO);
		uint32_t r;
		ck_assert_int_eq(mvc_import(h.a, h.peer, "x", 1, &r), -EPROTO);
		/* A client that ignores the cut-off hears it from the mover. */
		uint8_t blob[MVC_BLOB_MAX];
		size_t len = sizeof(blob);
		h.a->cut[0] = 0;
		ck_assert_int_eq(mvc_region_blob(h.a, h.src.region, blob, &len), -EPROTO);
		ck_assert_msg(strstr(mvc_error(h.a), "this connection was cut off"), "%s",
		              mvc_error(h.a));
		pair_close(&h);
		honest_round(&p, rounds++);
	}
	pair_close(&p);
	/* One log line per cut-off, naming the client's pid. */
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "grep -c 'pid %d) cut off' %s", getpid(), A.log);
	FILE *g = popen(cmd, "r");
	int lines = 0;
	ck_assert_int_eq(fscanf(g, "%d", &lines), 1);
	pclose(g);
	ck_assert_int_eq(lines, F_N);
}
END_TEST

/*
 * Commits the open batch of c on its home shard as it stands, with end (its
 * batch and cookie filled in) after it if given, and does the bookkeeping
 * mvc_submit() would have done: a submission libmvc never makes.
 */
static void commit_raw(struct mvc *c, uint64_t cookie, const struct mv_desc *end)
{
	uint32_t home = c->home, b = c->batch, pos;
	struct shmring *r = &c->sh[home].sub;

	if (end) {
		ck_assert_int_eq(shmring_reserve(r, 1, &pos), 1);
		struct mv_desc *d = shmring_slot(r, pos);
		*d = *end;
		d->batch = b;
		d->cookie = cookie;
	}
	shmring_commit(r);
	c->cookies[b] = cookie;
	c->busy[b] = 1;
	c->parts_of[b] = 1ull << home;
	c->inflight++;
	c->open = 0;
	c->sh[home].ndesc = 0;
	c->sh[home].nbytes = 0;
}

START_TEST(test_end_promising_parts_that_never_come_fails_once_quiet)
{
	struct pair p, h;

	pair_open(&p, REGION, REGION);
	pair_open(&h, REGION, REGION);
	/* One WRITE, then an END of our own that promises two parts. */
	ck_assert_int_eq(mvc_write(h.a, h.src.region, 0, h.imp, 0, 4096), 0);
	commit_raw(h.a, 7, &(struct mv_desc){.op = MV_OP_END, .nparts = 2, .ndesc = 1});
	/* Others are served meanwhile; this client stays quiet. */
	double t0 = now_s();
	honest_round(&p, 0);
	struct mvc_event e = wait_batch(h.a, 7, 30);
	double t = now_s() - t0;
	ck_assert_int_eq(e.status, -EINVAL);
	ck_assert_int_eq(e.cause, MVC_CAUSE_BAD_DESC);
	ck_assert_msg(strstr(e.msg, "END says 2 parts; 1 came"), "%s", e.msg);
	/* The movers run with --op-timeout 1.5: three of them of quiet. */
	ck_assert_msg(t > 4.2 && t < 10, "failed after %.1f s", t);
	fprintf(stderr, "hostile: a batch promising 2 parts with 1 sent failed after %.1f s\n", t);
	ck_assert_uint_eq(mvc_inflight(h.a), 0);
	/* The connection goes on. */
	ck_assert_int_eq(mvc_write(h.a, h.src.region, 0, h.imp, 0, 4096), 0);
	submit_ok(h.a, 8);
	honest_round(&p, 1);
	pair_close(&h);
	pair_close(&p);
}
END_TEST

/*
 * A second END for a batch whose part on this shard already finished while
 * the batch waits for another part (found by tests/fuzz/fuzz_take): it was
 * taken as a fresh part, made the part count whole, and completed the batch
 * at once, its missing part never sent. It is a descriptor after its
 * batch's END, and cuts the client off.
 */
START_TEST(test_end_for_a_batch_in_flight_cuts_the_client_off)
{
	struct pair p, h;

	pair_open(&p, REGION, REGION);
	pair_open(&h, REGION, REGION);
	uint32_t b = h.a->batch, home = h.a->home, pos;
	ck_assert_int_eq(mvc_write(h.a, h.src.region, 0, h.imp, 0, 4096), 0);
	commit_raw(h.a, 7, &(struct mv_desc){.op = MV_OP_END, .nparts = 2, .ndesc = 1});
	usleep(300000); /* its part is done: the batch waits for the other */
	struct shmring *r = &h.a->sh[home].sub;
	ck_assert_int_eq(shmring_reserve(r, 1, &pos), 1);
	*(struct mv_desc *)shmring_slot(r, pos) =
	    (struct mv_desc){.op = MV_OP_END, .nparts = 2, .batch = b, .cookie = 7};
	shmring_commit(r);
	struct mvc_event e = wait_batch(h.a, 7, 10);
	ck_assert_msg(e.cause == MVC_CAUSE_PROTOCOL, "status %d cause %d: %s", e.status, e.cause,
	              e.msg);
	ck_assert_msg(strstr(e.msg, "after its END (still in flight)"), "%s", e.msg);
	honest_round(&p, 0);
	pair_close(&h);
	pair_close(&p);
}
END_TEST

/* Sends one datagram with nfds copies of fd on sock; the reply's status,
 * 1 if none came within 5 s, 2 if the mover closed the connection. */
static int send_raw(int sock, const uint8_t *msg, size_t len, int fd, int nfds)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * 253)];
		struct cmsghdr align;
	} cbuf;
	int fds[253];
	struct iovec iov = {(void *)msg, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	struct timeval tv = {.tv_sec = 5};

	for (int i = 0; i < nfds; i++)
		fds[i] = fd;
	mv_fds_put_buf(&mh, cbuf.b, fds, nfds);
	if (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0)
		return 2;
	struct {
		struct mv_msg_hdr h;
		struct mv_reply_hdr r;
		uint8_t rest[8192];
	} rep;
	char cb[CMSG_SPACE(sizeof(int) * MV_MAX_FDS)];
	struct iovec riov = {&rep, sizeof(rep)};
	struct msghdr rm = {
	    .msg_iov = &riov, .msg_iovlen = 1, .msg_control = cb, .msg_controllen = sizeof(cb)};
	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ssize_t n = recvmsg(sock, &rm, MSG_CMSG_CLOEXEC);
	int got[MV_MAX_FDS], k = n > 0 ? mv_fds_take(&rm, got, MV_MAX_FDS) : 0;
	for (int i = 0; i < k; i++)
		close(got[i]);
	if (n == 0)
		return 2;
	if (n < (ssize_t)(sizeof(rep.h) + sizeof(rep.r)))
		return 1;
	return rep.r.status;
}

/*
 * The fuzz corpus of control messages (tests/fuzz/corpus/fuzz_ctlmsg and
 * the committed crash inputs) against a real mover: each message and
 * mutations of its payload, with their fds, sent by an attached client on
 * its own socket, where every handler is reachable. Whatever each is
 * refused with, the mover answers the next, and an honest client of the
 * same mover keeps moving its pages.
 */
START_TEST(test_fuzzed_control_messages_spare_others)
{
	glob_t g;
	struct pair p;
	uint64_t x = 77;
	uint32_t refused = 0, closed = 0, rounds = 0;

	ck_assert_int_eq(glob("tests/fuzz/corpus/fuzz_ctlmsg/*", 0, NULL, &g), 0);
	glob("tests/fuzz/regress/fuzz_ctlmsg/*", GLOB_APPEND, NULL, &g);
	ck_assert_uint_ge(g.gl_pathc, 10);
	pair_open(&p, REGION, REGION);
	struct mvc *h;
	ck_assert_int_eq(mvc_connect(&h, A.sock), 0);
	int memfd = memfd_create("hostile", MFD_CLOEXEC);
	ck_assert_int_eq(ftruncate(memfd, REGION), 0);
	char trace[64];
	snprintf(trace, sizeof(trace), "/tmp/mvt.%d.fuzz.trace", getpid());
	for (size_t i = 0; i < 4 * g.gl_pathc; i++) {
		uint8_t buf[2 + sizeof(struct mv_msg_hdr) + MV_MAX_MSG];
		FILE *f = fopen(g.gl_pathv[i % g.gl_pathc], "rb");
		ck_assert_ptr_nonnull(f);
		size_t len = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		ck_assert_uint_ge(len, 2 + sizeof(struct mv_msg_hdr));
		uint8_t *msg = buf + 2;
		size_t mlen = len - 2;
		struct mv_msg_hdr hd;
		memcpy(&hd, msg, sizeof(hd));
		/* A trace goes to a file of this test's own. */
		if (hd.type == MV_MSG_TRACE && mlen >= sizeof(hd) + sizeof(struct mv_trace_req))
			snprintf((char *)msg + sizeof(hd) + 8, 256, "%s", trace);
		/* Later rounds: a few payload bytes changed. */
		for (int k = 0; i >= g.gl_pathc && mlen > sizeof(hd) && k < 1 + (int)(rnd(&x) % 4);
		     k++)
			msg[sizeof(hd) + rnd(&x) % (mlen - sizeof(hd))] = (uint8_t)rnd(&x);
		int st = send_raw(h->sock, msg, mlen, memfd, buf[0] < 253 ? buf[0] : 253);
		ck_assert_msg(st != 1, "%s: no reply in 5 s", g.gl_pathv[i % g.gl_pathc]);
		refused += st < 0;
		/* A malformed message ends its connection (the mover reads no
		 * more from it): a new one for the next. */
		if (st == 2 || st == -EBADMSG || st == -EPROTONOSUPPORT || st == -EMSGSIZE) {
			closed++;
			mvc_disconnect(h);
			ck_assert_int_eq(mvc_connect(&h, A.sock), 0);
		}
		if (i % 8 == 7)
			honest_round(&p, rounds++);
	}
	honest_round(&p, rounds++);
	fprintf(stderr, "hostile: %zu fuzzed control messages: %u refused, %u connections closed\n",
	        4 * g.gl_pathc, refused, closed);
	ck_assert_uint_gt(refused, 0);
	unlink(trace);
	close(memfd);
	mvc_disconnect(h);
	pair_close(&p);
	globfree(&g);
}
END_TEST

START_TEST(test_corrupt_completion_ring_cuts_the_client_off)
{
	enum { NIMM = 20000 };
	struct pair p;
	struct mvc_event ev[64];

	pair_open(&p, REGION, REGION);
	/* B's first completion ring claims its consumer is ahead of the
	 * mover: the mover reads that word when the ring's room runs out. */
	struct shmring *r = &p.b->sh[0].comp;
	atomic_store(&r->lay->cons.idx, r->local + 100000);
	/* Immediates to B that B does not read: they fill its rings. */
	for (uint32_t i = 0; i < NIMM; i++) {
		while (mvc_inflight(p.a) >= 512) {
			int n = mvc_wait(p.a, ev, 64, 1000);
			ck_assert_int_ge(n, 0);
			for (int k = 0; k < n; k++)
				ck_assert_msg(ev[k].status == 0, "%s", ev[k].msg);
		}
		ck_assert_int_eq(mvc_write_imm(p.a, p.imp, 0x77), 0);
		ck_assert_int_eq(mvc_submit(p.a, i), 0);
	}
	while (mvc_inflight(p.a)) {
		int n = mvc_wait(p.a, ev, 64, 1000);
		ck_assert_int_ge(n, 0);
	}
	/* B hears on its other ring that it was cut off, and why. */
	int ret = 0;
	for (double end = now_s() + 10; ret >= 0 && now_s() < end;)
		ret = mvc_wait(p.b, ev, 64, 100);
	ck_assert_msg(ret == -EPROTO, "mvc_wait gave %d: %s", ret, mvc_error(p.b));
	ck_assert_msg(strstr(mvc_error(p.b), "completion ring"), "%s", mvc_error(p.b));
	fprintf(stderr, "hostile: B was told: %s\n", mvc_error(p.b));
	ck_assert_int_eq(mvc_imm_expect(p.b, 0x78, 1, 1), 0); /* local: no mover call */
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	ck_assert_int_eq(mvc_region_blob(p.b, p.dst.region, blob, &len), -EPROTO);
	/* A and its mover carry on. */
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 4096), 0);
	submit_ok(p.a, NIMM);
	pair_close(&p);
}
END_TEST

START_TEST(test_part_without_end_cuts_the_client_off_once_quiet)
{
	struct pair p, h;

	pair_open(&p, REGION, REGION);
	pair_open(&h, REGION, REGION);
	/* Two WRITEs committed with no END. */
	ck_assert_int_eq(mvc_write(h.a, h.src.region, 0, h.imp, 0, 4096), 0);
	ck_assert_int_eq(mvc_write(h.a, h.src.region, 8192, h.imp, 8192, 4096), 0);
	commit_raw(h.a, 7, NULL);
	double t0 = now_s();
	honest_round(&p, 0);
	struct mvc_event e = wait_batch(h.a, 7, 30);
	double t = now_s() - t0;
	ck_assert_int_eq(e.status, -EPROTO);
	ck_assert_int_eq(e.cause, MVC_CAUSE_PROTOCOL);
	ck_assert_msg(strstr(e.msg, "no END"), "%s", e.msg);
	/* Three op timeouts of quiet, as above. */
	ck_assert_msg(t > 4.2 && t < 10, "cut off after %.1f s", t);
	fprintf(stderr, "hostile: a part with no END was cut off after %.1f s\n", t);
	ck_assert_int_eq(mvc_write(h.a, h.src.region, 0, h.imp, 0, 4096), -EPROTO);
	honest_round(&p, 1);
	pair_close(&h);
	pair_close(&p);
}
END_TEST

static TCase *hostile(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_spoiled_writes_complete_once_and_spare_others);
	tcase_add_test(tc, test_senseless_rings_cut_the_client_off);
	tcase_add_test(tc, test_end_for_a_batch_in_flight_cuts_the_client_off);
	tcase_add_test(tc, test_fuzzed_control_messages_spare_others);
	tcase_add_test(tc, test_corrupt_completion_ring_cuts_the_client_off);
	return tc;
}

/* The cases that wait out a quiet client: three op timeouts, 1.5 s each
 * here rather than mvtest.h's 3 s, so each waits 4.5 s and not 9. */
static void setup_shm_quiet(void)
{
	mover_extra = "--op-timeout=1.5";
	setup_shm();
	mover_extra = NULL;
}

static void setup_tcp_quiet(void)
{
	mover_extra = "--op-timeout=1.5";
	setup_tcp();
	mover_extra = NULL;
}

static TCase *quiet(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_end_promising_parts_that_never_come_fails_once_quiet);
	tcase_add_test(tc, test_part_without_end_cuts_the_client_off_once_quiet);
	return tc;
}

int main(void)
{
	Suite *s = suite_create("hostile");

	suite_add_tcase(s, hostile("hostile_shm", setup_shm));
	suite_add_tcase(s, hostile("hostile_tcp", setup_tcp));
	suite_add_tcase(s, quiet("quiet_shm", setup_shm_quiet));
	suite_add_tcase(s, quiet("quiet_tcp", setup_tcp_quiet));
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
