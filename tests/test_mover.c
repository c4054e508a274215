/* SPDX-License-Identifier: MIT */
/*
 * End-to-end tests of mover and libclient over real libfabric providers
 * (tcp;ofi_rxm on loopback, and shm): two movers per test, clients of each,
 * every operation kind verified byte for byte, waiting in an event loop
 * (mvc_event_fd), and the errors users make: bad offsets, unknown handles,
 * malformed control messages. Processes that die or leave mid-transfer:
 * tests/test_faults.c; the shards' placement, sleep and choice:
 * tests/test_shards.c.
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

/* ---- ops: every operation kind, verified byte for byte ---- */

START_TEST(test_write_lands_byte_for_byte)
{
	struct pair p;
	const uint64_t n = 8u << 20;

	pair_open(&p, n, n);
	fill(p.src.addr, n, 1);
	memset(p.dst.addr, 0, n);
	/* Striped (>= 256 KiB), small, and unaligned writes in one batch. */
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 3u << 20), 0);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 3u << 20, p.imp, 5u << 20, 4096), 0);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 7777, p.imp, (6u << 20) + 13, 100001), 0);
	submit_ok(p.a, 11);
	uint8_t *s = p.src.addr, *d = p.dst.addr;
	ck_assert(!memcmp(d, s, 3u << 20));
	ck_assert(!memcmp(d + (5u << 20), s + (3u << 20), 4096));
	ck_assert(!memcmp(d + (6u << 20) + 13, s + 7777, 100001));
	/* Nothing outside what was written changed. */
	size_t at = first_not(d + (3u << 20), 2u << 20, 0);
	ck_assert_msg(at == 2u << 20, "byte %zu written", (3u << 20) + at);
	pair_close(&p);
}
END_TEST

START_TEST(test_writev_segments_land)
{
	struct pair p;
	struct mvc_seg seg[300];
	const uint64_t n = 4u << 20;

	pair_open(&p, n, n);
	fill(p.src.addr, n, 2);
	memset(p.dst.addr, 0, n);
	for (uint32_t i = 0; i < 300; i++)
		seg[i] = (struct mvc_seg){.src_off = (uint64_t)i * 13000 + i,
		                          .dst_off = n - (uint64_t)(i + 1) * 13000,
		                          .len = 1 + (i * 37) % 12000};
	ck_assert_int_eq(mvc_writev(p.a, p.src.region, p.imp, seg, 300), 0);
	submit_ok(p.a, 12);
	for (uint32_t i = 0; i < 300; i++)
		ck_assert_msg(!memcmp((uint8_t *)p.dst.addr + seg[i].dst_off,
		                      (uint8_t *)p.src.addr + seg[i].src_off, seg[i].len),
		              "segment %u differs", i);
	pair_close(&p);
}
END_TEST

START_TEST(test_paged_write_scattered_pages)
{
	struct pair p;
	enum { NP = 2000, PS = 4096, SSTR = 4096 + 512, DSTR = 8192 };
	static uint32_t sp[NP], dp[NP];

	pair_open(&p, (uint64_t)NP * SSTR, (uint64_t)(2 * NP) * DSTR);
	fill(p.src.addr, (uint64_t)NP * SSTR, 3);
	memset(p.dst.addr, 0, (uint64_t)(2 * NP) * DSTR);
	for (uint32_t i = 0; i < NP; i++) {
		sp[i] = (i * 7919) % NP;
		dp[i] = (i < NP / 2) ? i : 2 * NP - 1 - i; /* a run, then reversed */
	}
	struct mvc_pages pg = {.src = p.src.region,
	                       .dst = p.imp,
	                       .src_base = 0,
	                       .dst_base = 64,
	                       .src_stride = SSTR,
	                       .dst_stride = DSTR,
	                       .page_size = PS,
	                       .src_pages = sp,
	                       .dst_pages = dp,
	                       .npages = NP};
	ck_assert_int_eq(mvc_write_paged(p.a, &pg), 0);
	submit_ok(p.a, 13);
	for (uint32_t i = 0; i < NP; i++)
		ck_assert_msg(!memcmp((uint8_t *)p.dst.addr + 64 + (uint64_t)dp[i] * DSTR,
		                      (uint8_t *)p.src.addr + (uint64_t)sp[i] * SSTR, PS),
		              "page %u (src %u -> dst %u) differs", i, sp[i], dp[i]);
	pair_close(&p);
}
END_TEST

START_TEST(test_imm_arrives_after_its_data)
{
	struct pair p;
	struct mvc_event ev[4];
	const uint64_t n = 2u << 20;

	pair_open(&p, n, n);
	for (uint32_t round = 1; round <= 20; round++) {
		fill(p.src.addr, n, round);
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, n), 0);
		ck_assert_int_eq(mvc_write_imm(p.a, p.imp, 1000 + round), 0);
		ck_assert_int_eq(mvc_submit(p.a, round), 0);
		/* The receiver learns of the immediate; the data must be there. */
		int got = 0;
		double end = now_s() + 20;
		while (!got && now_s() < end) {
			int k = mvc_wait(p.b, ev, 4, 200);
			ck_assert_int_ge(k, 0);
			for (int i = 0; i < k; i++)
				if (ev[i].type == MVC_EV_IMM) {
					ck_assert_uint_eq(ev[i].imm, 1000 + round);
					ck_assert_uint_eq(ev[i].region, p.dst.region);
					got = 1;
				}
		}
		ck_assert_msg(got, "no immediate in round %u", round);
		ck_assert_msg(!memcmp(p.dst.addr, p.src.addr, n), "round %u: data behind imm",
		              round);
		struct mvc_event e = wait_batch(p.a, round, 20);
		ck_assert_int_eq(e.status, 0);
		ck_assert_uint_eq(e.bytes, n);
	}
	pair_close(&p);
}
END_TEST

/* One small write and its immediate: the write carries it (one fabric
 * write, not two), and still never before its data. The receiver's
 * mvc_latency() counts every immediate it read. */
START_TEST(test_small_write_carries_its_imm_in_order)
{
	struct pair p;
	struct mvc_event ev[4];
	struct mvc_latency lat;
	const uint32_t rounds = 300;

	pair_open(&p, 1 << 16, 1 << 16);
	for (uint32_t round = 1; round <= rounds; round++) {
		uint64_t len = 8u << (round % 10); /* 8 B to 4 KiB */
		fill(p.src.addr, len, round);
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, len), 0);
		ck_assert_int_eq(mvc_write_imm(p.a, p.imp, round), 0);
		ck_assert_int_eq(mvc_submit(p.a, round), 0);
		int got = 0;
		double end = now_s() + 20;
		while (!got && now_s() < end) {
			int k = mvc_poll(p.b, ev, 4);
			ck_assert_int_ge(k, 0);
			for (int i = 0; i < k; i++)
				if (ev[i].type == MVC_EV_IMM) {
					ck_assert_uint_eq(ev[i].imm, round);
					got = 1;
				}
		}
		ck_assert_msg(got, "no immediate in round %u", round);
		ck_assert_msg(!memcmp(p.dst.addr, p.src.addr, len),
		              "round %u: %" PRIu64 " bytes behind their immediate", round, len);
		struct mvc_event e = wait_batch(p.a, round, 20);
		ck_assert_int_eq(e.status, 0);
	}
	ck_assert_int_eq(mvc_latency(p.b, &lat), 0);
	ck_assert_uint_eq(lat.count, rounds);
	uint64_t sum = 0;
	for (int i = 0; i < MVC_LAT_BUCKETS; i++)
		sum += lat.hist[i];
	ck_assert_uint_eq(sum, rounds);
	ck_assert_uint_gt(lat.sum_ns, 0);
	ck_assert_int_eq(mvc_latency(p.a, &lat), 0);
	ck_assert_uint_eq(lat.count, 0); /* it received none */
	pair_close(&p);
}
END_TEST

START_TEST(test_imm_expect_counts_in_any_order)
{
	struct pair p;
	struct mvc_event ev[8];

	pair_open(&p, 1u << 20, 1u << 20);
	/* Three arrive before anyone asks; they count. */
	for (uint32_t i = 0; i < 3; i++) {
		ck_assert_int_eq(mvc_write(p.a, p.src.region, i * 4096, p.imp, i * 4096, 4096), 0);
		ck_assert_int_eq(mvc_write_imm(p.a, p.imp, 77), 0);
		submit_ok(p.a, 100 + i);
	}
	for (int k = 0; k < 3;) {
		int n = mvc_wait(p.b, ev, 8, 5000);
		ck_assert_int_gt(n, 0);
		k += n;
	}
	ck_assert_int_eq(mvc_imm_expect(p.b, 77, 10, 4242), 0);
	for (uint32_t i = 3; i < 10; i++) {
		ck_assert_int_eq(mvc_write_imm(p.a, p.imp, 77), 0); /* immediate alone */
		ck_assert_int_eq(mvc_write_imm(p.a, p.imp, 5), -EBUSY);
		submit_ok(p.a, 100 + i);
	}
	int counted = 0;
	double end = now_s() + 10;
	while (!counted && now_s() < end) {
		int n = mvc_wait(p.b, ev, 8, 200);
		for (int i = 0; i < n; i++) {
			ck_assert_msg(ev[i].type == MVC_EV_IMM_COUNT, "imm %u reported alone",
			              ev[i].imm);
			ck_assert_uint_eq(ev[i].cookie, 4242);
			ck_assert_uint_eq(ev[i].count, 10);
			counted = 1;
		}
	}
	ck_assert(counted);
	pair_close(&p);
}
END_TEST

/* An expectation already met when it is made is reported at the next
 * poll: no later immediate of that value need come to trigger it. */
START_TEST(test_imm_expect_already_met_reports_at_once)
{
	struct pair p;
	struct mvc_event ev[8];

	pair_open(&p, 1u << 20, 1u << 20);
	for (uint32_t i = 0; i < 3; i++) {
		ck_assert_int_eq(mvc_write_imm(p.a, p.imp, 88), 0);
		submit_ok(p.a, 300 + i);
	}
	for (int k = 0; k < 3;) {
		int n = mvc_wait(p.b, ev, 8, 5000);
		ck_assert_int_gt(n, 0);
		for (int i = 0; i < n; i++)
			ck_assert_uint_eq(ev[i].type, MVC_EV_IMM);
		k += n;
	}
	ck_assert_int_eq(mvc_imm_expect(p.b, 88, 3, 4343), 0);
	int n = mvc_wait(p.b, ev, 8, 2000);
	ck_assert_int_eq(n, 1);
	ck_assert_uint_eq(ev[0].type, MVC_EV_IMM_COUNT);
	ck_assert_uint_eq(ev[0].cookie, 4343);
	ck_assert_uint_eq(ev[0].count, 3);
	/* Reported once; the next expectation of the value starts from zero. */
	ck_assert_int_eq(mvc_poll(p.b, ev, 8), 0);
	ck_assert_int_eq(mvc_imm_expect(p.b, 88, 1, 4344), 0);
	ck_assert_int_eq(mvc_poll(p.b, ev, 8), 0);
	pair_close(&p);
}
END_TEST

START_TEST(test_several_clients_at_once)
{
	enum { NCL = 4 };
	pid_t kids[NCL];

	for (int k = 0; k < NCL; k++) {
		kids[k] = fork();
		if (kids[k] == 0) {
			struct pair p;
			const uint64_t n = 1u << 20;
			pair_open(&p, n, n);
			for (uint32_t r = 0; r < 30; r++) {
				fill(p.src.addr, n, (uint64_t)k << 32 | r);
				ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, n), 0);
				submit_ok(p.a, r);
				ck_assert_msg(!memcmp(p.dst.addr, p.src.addr, n),
				              "client %d round %u", k, r);
			}
			pair_close(&p);
			_exit(0);
		}
	}
	for (int k = 0; k < NCL; k++) {
		int st;
		waitpid(kids[k], &st, 0);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client %d failed", k);
	}
}
END_TEST

/* ---- errors: named causes, nothing else disturbed ---- */

START_TEST(test_out_of_bounds_write_names_sizes)
{
	struct pair p;

	pair_open(&p, 65536, 65536);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 60000, 8192), 0);
	ck_assert_int_eq(mvc_submit(p.a, 1), 0);
	struct mvc_event e = wait_batch(p.a, 1, 10);
	ck_assert_int_eq(e.status, -ERANGE);
	ck_assert_int_eq(e.cause, MVC_CAUSE_BOUNDS);
	ck_assert_msg(strstr(e.msg, "65536 bytes") && strstr(e.msg, "8192 at offset 60000"),
	              "message: %s", e.msg);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 65000, p.imp, 0, 1000), 0);
	ck_assert_int_eq(mvc_submit(p.a, 2), 0);
	e = wait_batch(p.a, 2, 10);
	ck_assert_int_eq(e.cause, MVC_CAUSE_BOUNDS);
	ck_assert_msg(strstr(e.msg, "region"), "message: %s", e.msg);
	/* The client goes on working. */
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 65536), 0);
	submit_ok(p.a, 3);
	pair_close(&p);
}
END_TEST

START_TEST(test_unknown_handles_are_named)
{
	struct pair p;

	struct mvc *none;
	ck_assert_int_eq(mvc_connect(&none, "/tmp/no-mover-here.sock"), -ENOENT);
	ck_assert_ptr_null(none);
	ck_assert_msg(strstr(mvc_connect_error(), "/tmp/no-mover-here.sock"), "%s",
	              mvc_connect_error());
	pair_open(&p, 65536, 65536);
	ck_assert_int_eq(mvc_write(p.a, 12345, 0, p.imp, 0, 64), 0);
	ck_assert_int_eq(mvc_submit(p.a, 1), 0);
	struct mvc_event e = wait_batch(p.a, 1, 10);
	ck_assert_int_eq(e.cause, MVC_CAUSE_NO_REGION);
	ck_assert_msg(strstr(e.msg, "12345"), "message: %s", e.msg);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, 999, 0, 64), 0);
	ck_assert_int_eq(mvc_submit(p.a, 2), 0);
	e = wait_batch(p.a, 2, 10);
	ck_assert_int_eq(e.cause, MVC_CAUSE_NO_IMPORT);
	/* Another client's region on the same mover is not ours to write from. */
	struct mvc *other;
	struct mvc_mem om;
	ck_assert_int_eq(mvc_connect(&other, A.sock), 0);
	ck_assert_int_eq(mvc_alloc(other, 4096, &om), 0);
	ck_assert_int_eq(mvc_write(p.a, om.region, 0, p.imp, 0, 64), 0);
	ck_assert_int_eq(mvc_submit(p.a, 3), 0);
	e = wait_batch(p.a, 3, 10);
	ck_assert_int_eq(e.cause, MVC_CAUSE_NO_REGION);
	mvc_disconnect(other);
	ck_assert_int_eq(mvc_import(p.a, 55, "garbage", 7, &p.imp), -ENOENT);
	ck_assert_msg(strstr(mvc_error(p.a), "peer 55"), "%s", mvc_error(p.a));
	uint8_t bad[64] = {0};
	uint32_t peer;
	ck_assert_int_eq(mvc_peer_add(p.a, bad, sizeof(bad), &peer), -EINVAL);
	ck_assert_msg(strstr(mvc_error(p.a), "address blob"), "%s", mvc_error(p.a));
	pair_close(&p);
}
END_TEST

/* A peer mover of another release: refused with both releases named, by
 * a mover that goes on serving the client. Blobs of wire version 5 on keep
 * magic, version and release in place; version 4 (0.1.x) had no release. */
START_TEST(test_peer_of_another_release_is_refused_naming_both)
{
	struct pair p;
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	uint32_t peer;

	pair_open(&p, 4096, 4096);
	ck_assert_int_eq(mvc_address(p.b, blob, &len), 0);
	struct mv_addr_blob *ab = (struct mv_addr_blob *)blob;
	ck_assert_str_eq(ab->release, MVC_VERSION);
	ab->version = MV_WIRE_VERSION + 1;
	memset(ab->release, 0, sizeof(ab->release));
	strcpy(ab->release, "9.9.9");
	ck_assert_int_eq(mvc_peer_add(p.a, blob, len, &peer), -EPROTO);
	char want[128];
	snprintf(want, sizeof(want),
	         "peer is mover 9.9.9 (protocol %u); this is mover %s (protocol %u)",
	         MV_WIRE_VERSION + 1, MVC_VERSION, MV_WIRE_VERSION);
	ck_assert_msg(strstr(mvc_error(p.a), want), "%s", mvc_error(p.a));
	/* An 0.1.x mover's address: version 4, the mover id where the release is. */
	ab->version = 4;
	memset(ab->release, 0x7f, sizeof(ab->release));
	ck_assert_int_eq(mvc_peer_add(p.a, blob, len, &peer), -EPROTO);
	snprintf(want, sizeof(want), "peer is mover 0.1.x (protocol 4); this is mover %s",
	         MVC_VERSION);
	ck_assert_msg(strstr(mvc_error(p.a), want), "%s", mvc_error(p.a));
	/* The connection is whole: the same release is taken. */
	len = sizeof(blob);
	ck_assert_int_eq(mvc_address(p.b, blob, &len), 0);
	ck_assert_msg(mvc_peer_add(p.a, blob, len, &peer) == 0, "%s", mvc_error(p.a));
	pair_close(&p);
}
END_TEST

static int raw_connect(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	strcpy(a.sun_path, path);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* Sends raw bytes; returns the reply's status, or 1 if the socket closed silently. */
static int raw_exchange(int fd, const void *msg, size_t len, char *why, size_t whylen)
{
	struct {
		struct mv_msg_hdr h;
		struct mv_reply_hdr r;
	} rep;

	ck_assert_int_eq(send(fd, msg, len, MSG_NOSIGNAL), (ssize_t)len);
	ssize_t n = recv(fd, &rep, sizeof(rep), 0);
	if (n < (ssize_t)sizeof(rep))
		return 1;
	snprintf(why, whylen, "%s", rep.r.msg);
	return rep.r.status;
}

START_TEST(test_malformed_messages_close_only_that_client)
{
	struct pair p;
	char why[128];
	struct mv_msg_hdr h = {
	    .magic = MV_WIRE_MAGIC, .version = MV_WIRE_VERSION, .type = MV_MSG_HELLO};

	pair_open(&p, 65536, 65536);
	struct {
		const char *name;
		struct mv_msg_hdr h;
		size_t len;
		const char *expect;
	} cases[] = {
	    {"short", h, 5, "shorter than"},
	    {"magic", {.magic = 0x1234, .version = 1, .type = 1}, sizeof(h), "bad magic"},
	    {"version",
	     {.magic = MV_WIRE_MAGIC, .version = 9, .type = 1},
	     sizeof(h),
	     "protocol version 9"},
	    {"length",
	     {.magic = MV_WIRE_MAGIC, .version = MV_WIRE_VERSION, .type = 1, .len = 100},
	     sizeof(h),
	     "header says 100"},
	    {"type",
	     {.magic = MV_WIRE_MAGIC, .version = MV_WIRE_VERSION, .type = 77},
	     sizeof(h),
	     "before HELLO"},
	    {"truncated",
	     {.magic = MV_WIRE_MAGIC, .version = MV_WIRE_VERSION, .type = MV_MSG_ATTACH},
	     sizeof(h),
	     "needs"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fd = raw_connect(A.sock);
		int st = raw_exchange(fd, &cases[i].h, cases[i].len, why, sizeof(why));
		ck_assert_msg(st < 0, "case %s: status %d", cases[i].name, st);
		ck_assert_msg(strstr(why, cases[i].expect), "case %s: '%s'", cases[i].name, why);
		char c;
		ck_assert_msg(recv(fd, &c, 1, 0) == 0, "case %s: connection left open",
		              cases[i].name);
		close(fd);
	}
	/* A garbage ring fd in ATTACH: refused with the ring's reason. */
	{
		int fd = raw_connect(A.sock);
		ck_assert_int_eq(raw_exchange(fd, &h, sizeof(h), why, sizeof(why)), 0);
		close(fd);
	}
	/* The well-behaved client never noticed. */
	fill(p.src.addr, 65536, 9);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 65536), 0);
	submit_ok(p.a, 1);
	ck_assert(!memcmp(p.dst.addr, p.src.addr, 65536));
	pair_close(&p);
}
END_TEST

/* ---- registration, and sleeping in an event loop ---- */

START_TEST(test_register_existing_memfd_range)
{
	struct pair p;
	long page = sysconf(_SC_PAGESIZE);
	int fd = memfd_create("app-kv", MFD_ALLOW_SEALING);
	struct mvc_mem m;

	pair_open(&p, 65536, 65536);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 16 * page), 0);
	/* Unsealed memfds could shrink under the mover: refused, with the fix. */
	ck_assert_int_eq(mvc_register_fd(p.a, fd, 0, 4096, &m), -EPERM);
	ck_assert_msg(strstr(mvc_error(p.a), "F_SEAL_SHRINK"), "%s", mvc_error(p.a));
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	/* A file that cannot carry the seal (a disk file here) is refused
	 * too: truncated under the mover, it would fault a shard. */
	char dpath[] = "mvt-disk-XXXXXX";
	int df = mkstemp(dpath);
	ck_assert_int_ge(df, 0);
	unlink(dpath);
	ck_assert_int_eq(ftruncate(df, 16 * page), 0);
	ck_assert_int_eq(mvc_register_fd(p.a, df, 0, 4096, &m), -EPERM);
	ck_assert_msg(strstr(mvc_error(p.a), "F_SEAL_SHRINK"), "%s", mvc_error(p.a));
	close(df);
	ck_assert_int_eq(mvc_register_fd(p.a, fd, 16 * page, 1, &m), -ERANGE);
	/* An unaligned range in the middle of the file. */
	ck_assert_msg(mvc_register_fd(p.a, fd, 3 * page + 100, 5000, &m) == 0, "%s",
	              mvc_error(p.a));
	fill(m.addr, 4992, 5);
	ck_assert_int_eq(mvc_write(p.a, m.region, 0, p.imp, 1000, 5000), 0);
	submit_ok(p.a, 1);
	ck_assert(!memcmp((uint8_t *)p.dst.addr + 1000, m.addr, 5000));
	/* The write came from the file at that offset. */
	uint8_t back[5000];
	ck_assert_int_eq(pread(fd, back, 5000, 3 * page + 100), 5000);
	ck_assert(!memcmp(back, m.addr, 5000));
	uint32_t gone = m.region;
	ck_assert_int_eq(mvc_free(p.a, &m), 0);
	ck_assert_int_eq(mvc_write(p.a, gone, 0, p.imp, 0, 8), 0);
	ck_assert_int_eq(mvc_submit(p.a, 2), 0);
	ck_assert_int_eq(wait_batch(p.a, 2, 10).cause, MVC_CAUSE_NO_REGION);
	close(fd);
	pair_close(&p);
}
END_TEST

/* An event loop's turn as mvc.h gives it: poll until nothing is left,
 * arm, sleep on fd (here at most 100 ms a time); the first events, or 0
 * after secs. */
static int loop_turns(struct mvc *c, int fd, struct mvc_event *ev, int max, double secs)
{
	for (double end = now_s() + secs; now_s() < end;) {
		int n = mvc_poll(c, ev, max);
		if (n > 0)
			return n;
		int r = mvc_arm(c);
		if (r < 0)
			return r;
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (r == 0)
			poll(&pf, 1, 100);
	}
	return 0;
}

/* mvc_event_fd() in an application's event loop: readable when a
 * completion comes and not before, armed again after; its mover's loss
 * wakes it, and while the reconnect is pending its timer does, until the
 * mover is back. */
START_TEST(test_event_fd_wakes_an_event_loop)
{
	const uint64_t n = 1u << 20;
	struct pair p;
	struct mvc_event ev[4];

	pair_open(&p, n, n);
	int fd = mvc_event_fd(p.a);
	ck_assert_msg(fd >= 0, "%s", mvc_error(p.a));
	ck_assert_int_eq(mvc_event_fd(p.a), fd);
	ck_assert_int_eq(mvc_arm(p.a), 0);
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	ck_assert_int_eq(poll(&pf, 1, 50), 0);

	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, n), 0);
	ck_assert_int_eq(mvc_submit(p.a, 1), 0);
	ck_assert_msg(poll(&pf, 1, 10000) == 1, "the completion did not wake the fd");
	/* Not polled yet: arming again finds it waiting. */
	ck_assert_int_eq(mvc_arm(p.a), 1);
	ck_assert_int_eq(mvc_poll(p.a, ev, 4), 1);
	ck_assert_msg(ev[0].type == MVC_EV_BATCH && ev[0].cookie == 1 && ev[0].status == 0,
	              "event %d, cookie %llu, status %d: %s", ev[0].type,
	              (unsigned long long)ev[0].cookie, ev[0].status, ev[0].msg);
	ck_assert_int_eq(mvc_arm(p.a), 0);
	ck_assert_int_eq(poll(&pf, 1, 50), 0); /* what woke it was taken */

	kill(A.pid, SIGKILL);
	waitpid(A.pid, NULL, 0);
	shm_cleanup(A.pid);
	A.pid = 0;
	ck_assert_msg(poll(&pf, 1, 5000) == 1, "the mover's loss did not wake the fd");
	/* Known gone now: the next reconnect is the timer's. */
	ck_assert_int_eq(mvc_arm(p.a), 0);
	ck_assert_msg(poll(&pf, 1, 5000) == 1, "the reconnect timer did not wake the fd");
	ck_assert_int_eq(mvc_poll(p.a, ev, 4), -EPIPE); /* no mover to reconnect to yet */
	mover_start(&A, "a", 2);
	int got = loop_turns(p.a, fd, ev, 4, 10);
	ck_assert_msg(got == 1 && ev[0].type == MVC_EV_MOVER_BACK,
	              "%d events (the first of type %d) on the mover's return: %s", got,
	              got > 0 ? ev[0].type : -1, got < 0 ? mvc_error(p.a) : "");
	pair_close(&p);
}
END_TEST

static TCase *ops(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_write_lands_byte_for_byte);
	tcase_add_test(tc, test_writev_segments_land);
	tcase_add_test(tc, test_paged_write_scattered_pages);
	tcase_add_test(tc, test_imm_arrives_after_its_data);
	tcase_add_test(tc, test_small_write_carries_its_imm_in_order);
	tcase_add_test(tc, test_imm_expect_counts_in_any_order);
	tcase_add_test(tc, test_imm_expect_already_met_reports_at_once);
	tcase_add_test(tc, test_several_clients_at_once);
	tcase_add_test(tc, test_event_fd_wakes_an_event_loop);
	return tc;
}

int main(void)
{
	Suite *s = suite_create("mover");
	TCase *tc = tcase_create("errors");

	tcase_add_checked_fixture(tc, setup_tcp, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_out_of_bounds_write_names_sizes);
	tcase_add_test(tc, test_unknown_handles_are_named);
	tcase_add_test(tc, test_peer_of_another_release_is_refused_naming_both);
	tcase_add_test(tc, test_malformed_messages_close_only_that_client);
	tcase_add_test(tc, test_register_existing_memfd_range);
	suite_add_tcase(s, ops("ops_tcp", setup_tcp));
	suite_add_tcase(s, ops("ops_shm", setup_shm));
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
