/* SPDX-License-Identifier: MIT */
/*
 * End-to-end tests of batches of any size: page and segment lists passed by
 * reference in the list arena and expanded lazily by the shards. A million
 * scattered pages in one batch, every page checked; immediates after the
 * last of them; the arena's full (-EAGAIN, batch kept) and too-small
 * (-E2BIG, with advice) answers; and what a hostile client can do to its
 * own lists: slices outside the arena, indices beyond the region, offsets
 * that overflow, counts that lie, lists rewritten after submit. Each fails
 * its own batch with a cause, and the mover serves everyone else.
 * libclient's sources are compiled in, so the tests can reach the arena and
 * the rings as such a client would.
 */
#include "arena.c"
#include "batch.c"
#include "client.c"
#include "events.c"
#include "rejoin.c"
#include "memory.c"

#include <check.h>
#include <signal.h>
#include <sys/wait.h>

#include "mvtest.h"

/* A random permutation of 0..n-1 (xorshift, fixed seed). */
static uint32_t *perm(uint32_t n, uint64_t seed)
{
	uint32_t *p = malloc((size_t)n * sizeof(*p));
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	ck_assert_ptr_nonnull(p);
	for (uint32_t i = 0; i < n; i++)
		p[i] = i;
	for (uint32_t i = n - 1; i > 0; i--) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint32_t j = (uint32_t)(x % (i + 1)), t = p[i];
		p[i] = p[j];
		p[j] = t;
	}
	return p;
}

/* a and b hold the same n bytes; else the test fails naming the first
 * byte that differs. */
static void same(const void *a, const void *b, uint64_t n, const char *what)
{
	const uint8_t *x = a, *y = b;
	uint64_t i = 0;

	if (!memcmp(a, b, n))
		return;
	while (x[i] == y[i])
		i++;
	ck_abort_msg("%s: byte %llu of %llu differs (%#x, want %#x)", what, (unsigned long long)i,
	             (unsigned long long)n, x[i], y[i]);
}

/* The LIST descriptors of the open batch, wherever they were reserved. */
static int open_lists(struct mvc *c, struct mv_desc **out, int max)
{
	int n = 0;

	for (uint32_t s = 0; s < c->info.nshards; s++) {
		struct shmring *r = &c->sh[s].sub;
		uint32_t k = shmring_reserved(r);
		for (uint32_t i = 0; i < k && n < max; i++) {
			struct mv_desc *d = shmring_slot(r, r->local - k + i);
			if (d->op == MV_OP_LIST)
				out[n++] = d;
		}
	}
	return n;
}

/* Pages sp[i] of region src to pages dp[i] of import dst, ps bytes each. */
static struct mvc_pages pages_of(uint32_t src, uint32_t dst, uint32_t *sp, uint32_t *dp, uint32_t n,
                                 uint64_t ps)
{
	return (struct mvc_pages){.src = src,
	                          .dst = dst,
	                          .src_stride = ps,
	                          .dst_stride = ps,
	                          .page_size = ps,
	                          .src_pages = sp,
	                          .dst_pages = dp,
	                          .npages = n};
}

static void paged(struct pair *p, uint32_t *sp, uint32_t *dp, uint32_t n, uint64_t ps)
{
	struct mvc_pages pg = pages_of(p->src.region, p->imp, sp, dp, n, ps);

	ck_assert_msg(mvc_write_paged(p->a, &pg) == 0, "%s", mvc_error(p->a));
}

/* ---- any size ---- */

START_TEST(test_million_scattered_pages_in_one_batch)
{
	enum { NP = 1000000, PS = 64 };
	struct pair p;
	uint32_t *sp = perm(NP, 1), *dp = perm(NP, 2);

	pair_open(&p, (uint64_t)NP * PS, (uint64_t)NP * PS);
	fill(p.src.addr, (uint64_t)NP * PS, 21);
	memset(p.dst.addr, 0, (uint64_t)NP * PS);
	paged(&p, sp, dp, NP, PS);
	ck_assert_int_eq(mvc_write_imm(p.a, p.imp, 77), 0);
	ck_assert_int_eq(mvc_imm_expect(p.b, 77, 1, 5), 0);
	ck_assert_msg(mvc_submit(p.a, 1) == 0, "%s", mvc_error(p.a));
	/* One completion, after every page landed. */
	struct mvc_event e = wait_batch(p.a, 1, 120);
	ck_assert_msg(e.status == 0, "%s", e.msg);
	ck_assert_uint_eq(e.bytes, (uint64_t)NP * PS);
	struct mvc_event ev;
	double end = now_s() + 20;
	int got = 0;
	while (!got && now_s() < end)
		got = mvc_wait(p.b, &ev, 1, 200) == 1 && ev.type == MVC_EV_IMM_COUNT;
	ck_assert_msg(got, "the immediate after the batch did not arrive");
	uint32_t bad = first_page_differing(p.src.addr, sp, p.dst.addr, dp, PS, NP);
	ck_assert_msg(bad == NP, "page %u (src %u -> dst %u) differs", bad, sp[bad], dp[bad]);
	ck_assert_uint_eq(mvc_inflight(p.a), 0);
	free(sp);
	free(dp);
	pair_close(&p);
}
END_TEST

START_TEST(test_adjacent_pages_merge_and_land)
{
	/* Runs of adjacent pages, some longer than a 4 MiB write. */
	enum { NP = 6000, PS = 4096 };
	struct pair p;
	static uint32_t sp[NP], dp[NP];

	pair_open(&p, (uint64_t)NP * PS, (uint64_t)NP * PS);
	fill(p.src.addr, (uint64_t)NP * PS, 22);
	memset(p.dst.addr, 0, (uint64_t)NP * PS);
	for (uint32_t i = 0; i < NP; i++) {
		sp[i] = i;
		dp[i] = i < 3000 ? i + 3000 : i - 3000; /* two runs of 12 MiB, swapped */
	}
	sp[100] = 5999; /* a break in the middle of a run: pages swapped */
	sp[5999] = 100;
	paged(&p, sp, dp, NP, PS);
	landed(p.a, p.imp, p.b, 1);
	uint32_t bad = first_page_differing(p.src.addr, sp, p.dst.addr, dp, PS, NP);
	ck_assert_msg(bad == NP, "page %u differs", bad);
	pair_close(&p);
}
END_TEST

START_TEST(test_many_segments_in_one_batch)
{
	enum { NS = 50000 };
	struct pair p;
	struct mvc_seg *seg = calloc(NS, sizeof(*seg));
	uint32_t *order = perm(NS, 3);

	ck_assert_ptr_nonnull(seg);
	pair_open(&p, (uint64_t)NS * 256, (uint64_t)NS * 256);
	fill(p.src.addr, (uint64_t)NS * 256, 23);
	memset(p.dst.addr, 0, (uint64_t)NS * 256);
	for (uint32_t i = 0; i < NS; i++)
		seg[i] = (struct mvc_seg){.src_off = (uint64_t)i * 256 + i % 7,
		                          .dst_off = (uint64_t)order[i] * 256,
		                          .len = 1 + (i * 37) % 249};
	ck_assert_int_eq(mvc_writev(p.a, p.src.region, p.imp, seg, NS), 0);
	landed(p.a, p.imp, p.b, 1);
	for (uint32_t i = 0; i < NS; i++)
		ck_assert_msg(!memcmp((uint8_t *)p.dst.addr + seg[i].dst_off,
		                      (uint8_t *)p.src.addr + seg[i].src_off, seg[i].len),
		              "segment %u differs", i);
	free(seg);
	free(order);
	pair_close(&p);
}
END_TEST

START_TEST(test_entries_longer_than_a_write_land_in_pieces)
{
	/* Segments and pages longer than one fabric write (MV_CHUNK), some
	 * adjacent to the one before them, mixed with short ones. */
	enum { NS = 20, MIB = 1 << 20, PS = 6 * MIB, NP = 16 };
	uint64_t sz = 128ull * MIB;
	struct pair p;
	struct mvc_seg seg[NS];
	uint64_t so = 0, doff = 0;

	pair_open(&p, sz, sz);
	fill(p.src.addr, sz, 25);
	memset(p.dst.addr, 0, sz);
	for (uint32_t i = 0; i < NS; i++) {
		uint64_t len = i % 3 == 0 ? 9ull * MIB + 4096 * i : i % 3 == 1 ? 4096 + i : 5 * MIB;
		seg[i] = (struct mvc_seg){.src_off = so, .dst_off = doff, .len = len};
		/* Every fourth segment starts right after the last on both sides. */
		so += len + (i % 4 == 3 ? 0 : 8192);
		doff += len + (i % 4 == 3 ? 0 : 4096);
	}
	ck_assert_uint_le(so, sz);
	ck_assert_uint_le(doff, sz);
	ck_assert_int_eq(mvc_writev(p.a, p.src.region, p.imp, seg, NS), 0);
	landed(p.a, p.imp, p.b, 1);
	for (uint32_t i = 0; i < NS; i++)
		same((uint8_t *)p.dst.addr + seg[i].dst_off, (uint8_t *)p.src.addr + seg[i].src_off,
		     seg[i].len, "a long segment");

	/* 16 pages of 6 MiB, half of them adjacent pairs on both sides. */
	uint32_t sp[NP], dp[NP];
	for (uint32_t i = 0; i < NP; i++) {
		sp[i] = i % 2 ? sp[i - 1] + 1 : (NP - 1 - i);
		dp[i] = i % 2 ? dp[i - 1] + 1 : i;
	}
	memset(p.dst.addr, 0, sz);
	ck_assert_uint_le((uint64_t)(NP + 1) * PS, sz);
	paged(&p, sp, dp, NP, PS);
	landed(p.a, p.imp, p.b, 2);
	for (uint32_t i = 0; i < NP; i++)
		same((uint8_t *)p.dst.addr + (uint64_t)dp[i] * PS,
		     (uint8_t *)p.src.addr + (uint64_t)sp[i] * PS, PS, "a long page");
	pair_close(&p);
}
END_TEST

/* ---- the arena's limits ---- */

START_TEST(test_full_arena_is_eagain_and_keeps_the_batch)
{
	enum { NP = 4000, PS = 64 };
	struct pair p;
	struct mvc_opts o = {.list_arena = 64 << 10}; /* two lists of 4000 pages */
	uint32_t *sp = perm(NP, 4);
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);

	pair_open(&p, (uint64_t)NP * PS, (uint64_t)NP * PS * 8);
	/* A second connection on A with a small arena. */
	struct mvc *c;
	struct mvc_mem src;
	uint32_t peer, imp;
	ck_assert_int_eq(mvc_connect_opts(&c, A.sock, &o), 0);
	ck_assert_int_eq(mvc_alloc(c, (uint64_t)NP * PS, &src), 0);
	fill(src.addr, (uint64_t)NP * PS, 24);
	ck_assert_int_eq(mvc_address(p.b, blob, &len), 0);
	ck_assert_int_eq(mvc_peer_add(c, blob, len, &peer), 0);
	len = sizeof(blob);
	ck_assert_int_eq(mvc_region_blob(p.b, p.dst.region, blob, &len), 0);
	ck_assert_int_eq(mvc_import(c, peer, blob, len, &imp), 0);

	struct mvc_pages pg = pages_of(src.region, imp, sp, sp, NP, PS);
	int submitted = 0, ret = 0;
	/* Batch k lands at its own eighth of the destination. */
	for (; submitted < 8; submitted++) {
		pg.dst_base = (uint64_t)submitted * NP * PS;
		ret = mvc_write_paged(c, &pg);
		if (ret)
			break;
		ck_assert_int_eq(mvc_write_imm(c, imp, 0x41), 0);
		ck_assert_int_eq(mvc_submit(c, (uint64_t)submitted), 0);
	}
	ck_assert_msg(ret == -EAGAIN, "ret %d after %d batches: %s", ret, submitted, mvc_error(c));
	ck_assert_msg(strstr(mvc_error(c), "list arena is full"), "%s", mvc_error(c));
	ck_assert_int_ge(submitted, 1);
	/* The open batch is as before the call: the same call goes through
	 * once completions come back. */
	struct mvc_event ev;
	double end = now_s() + 30;
	while (ret == -EAGAIN && now_s() < end) {
		int n = mvc_wait(c, &ev, 1, 100);
		ck_assert_int_ge(n, 0);
		if (n)
			ck_assert_msg(ev.status == 0, "%s", ev.msg);
		ret = mvc_write_paged(c, &pg);
	}
	ck_assert_int_eq(ret, 0);
	ck_assert_int_eq(mvc_write_imm(c, imp, 0x41), 0);
	ck_assert_int_eq(mvc_submit(c, 100), 0);
	while (mvc_inflight(c) && now_s() < end) {
		int n = mvc_wait(c, &ev, 1, 100);
		ck_assert_int_ge(n, 0);
		if (n)
			ck_assert_msg(ev.status == 0, "%s", ev.msg);
	}
	ck_assert_uint_eq(mvc_inflight(c), 0);
	/* Each batch's immediate says its pages landed. */
	ck_assert_int_eq(mvc_imm_expect(p.b, 0x41, (uint32_t)submitted + 1, 9), 0);
	int heard = 0;
	while (!heard && now_s() < end)
		heard = mvc_wait(p.b, &ev, 1, 100) == 1 && ev.type == MVC_EV_IMM_COUNT;
	ck_assert_msg(heard, "the batches' immediates did not all arrive");
	for (int k = 0; k <= submitted; k++)
		same((uint8_t *)p.dst.addr + (uint64_t)k * NP * PS, src.addr, (uint64_t)NP * PS,
		     "a batch that waited for the arena");
	mvc_disconnect(c);
	free(sp);
	pair_close(&p);
}
END_TEST

START_TEST(test_batch_larger_than_arena_is_e2big_with_advice)
{
	enum { NP = 20000 };
	struct mvc_opts o = {.list_arena = 64 << 10};
	uint32_t *sp = perm(NP, 5);
	struct mvc *c;
	struct mvc_mem src;

	ck_assert_int_eq(mvc_connect_opts(&c, A.sock, &o), 0);
	ck_assert_int_eq(mvc_alloc(c, (uint64_t)NP * 64, &src), 0);
	struct mvc_pages pg = pages_of(src.region, 0, sp, sp, NP, 64);
	ck_assert_int_eq(mvc_write_paged(c, &pg), -E2BIG);
	ck_assert_msg(strstr(mvc_error(c), "MVC_LIST_ARENA") && strstr(mvc_error(c), "65536"), "%s",
	              mvc_error(c));
	/* Nothing was opened for good: a small batch still works locally. */
	ck_assert_uint_eq(c->arena.head, c->arena.open_start);
	mvc_abort(c);
	mvc_disconnect(c);
	/* A bad size is refused at connect, with the reason. */
	o.list_arena = 1000;
	ck_assert_int_eq(mvc_connect_opts(&c, A.sock, &o), -EINVAL);
	ck_assert_msg(strstr(mvc_connect_error(), "list arena"), "%s", mvc_connect_error());
	/* One grammar for every size variable: digits and K, M or G. */
	static const char *const bad[] = {"12Q", "0x100000", "M", "1M1", "-1M", "99999999999G"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("MVC_LIST_ARENA", bad[i], 1);
		ck_assert_int_eq(mvc_connect(&c, A.sock), -EINVAL);
		ck_assert_msg(strstr(mvc_connect_error(), "MVC_LIST_ARENA=") &&
		                  strstr(mvc_connect_error(), "such as 64M"),
		              "%s: %s", bad[i], mvc_connect_error());
	}
	static const struct {
		const char *env;
		uint64_t want;
	} good[] = {{"1M", 1u << 20}, {"2m", 2u << 20}, {"3145728", 3u << 20}, {"4096k", 4u << 20}};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		setenv("MVC_LIST_ARENA", good[i].env, 1);
		ck_assert_int_eq(mvc_connect(&c, A.sock), 0);
		ck_assert_uint_eq(c->arena.size, good[i].want);
		mvc_disconnect(c);
	}
	unsetenv("MVC_LIST_ARENA");
	free(sp);
}
END_TEST

/* mvc_wait() polls before it sleeps for $MVC_WAIT_SPIN_US, read at
 * connect: a bad value is refused, naming the variable; 0 never polls, and
 * a wait with nothing to come still returns at its time-out. */
START_TEST(test_wait_spin_is_read_at_connect)
{
	struct mvc *c;
	struct mvc_event ev[4];

	setenv("MVC_WAIT_SPIN_US", "12x", 1);
	ck_assert_int_eq(mvc_connect(&c, A.sock), -EINVAL);
	ck_assert_msg(strstr(mvc_connect_error(), "MVC_WAIT_SPIN_US=12x"), "%s",
	              mvc_connect_error());
	setenv("MVC_WAIT_SPIN_US", "0", 1);
	ck_assert_int_eq(mvc_connect(&c, A.sock), 0);
	ck_assert_int_eq(c->wait_spin_ns, 0);
	mvc_disconnect(c);
	setenv("MVC_WAIT_SPIN_US", "500", 1);
	ck_assert_int_eq(mvc_connect(&c, A.sock), 0);
	ck_assert_int_eq(c->wait_spin_ns, 500000);
	double t0 = now_s();
	ck_assert_int_eq(mvc_wait(c, ev, 4, 50), 0);
	double took = now_s() - t0;
	ck_assert_msg(took >= 0.045 && took < 2, "a 50 ms wait took %.3f s", took);
	mvc_disconnect(c);
	unsetenv("MVC_WAIT_SPIN_US");
	ck_assert_int_eq(mvc_connect(&c, A.sock), 0);
	ck_assert_int_eq(c->wait_spin_ns, 20000);
	mvc_disconnect(c);
}
END_TEST

/* Lists from $MVC_ARENA_NT_MIN bytes go into the arena by streaming
 * stores (mv_copy.h), read at connect: a bad value is refused naming the
 * variable, and pages land alike by either copy, at list lengths that end
 * off every vector boundary. */
START_TEST(test_arena_streaming_is_read_at_connect)
{
	enum { NP = 3001, PS = 512 };
	static const struct {
		const char *env;
		uint64_t want;
	} set[] = {{"0", UINT64_MAX}, {"1", 1}, {"64k", 65536}, {NULL, 65536}};
	struct mvc *c;

	for (int i = 0; i < 2; i++) {
		const char *bad = i ? "-1" : "0x10000";
		setenv("MVC_ARENA_NT_MIN", bad, 1);
		ck_assert_int_eq(mvc_connect(&c, A.sock), -EINVAL);
		ck_assert_msg(strstr(mvc_connect_error(), "MVC_ARENA_NT_MIN="), "%s",
		              mvc_connect_error());
	}
	for (size_t k = 0; k < sizeof(set) / sizeof(set[0]); k++) {
		struct pair p;
		uint32_t *sp = perm(NP, 40 + (uint32_t)k), *dp = perm(NP, 50 + (uint32_t)k);

		if (set[k].env)
			setenv("MVC_ARENA_NT_MIN", set[k].env, 1);
		else
			unsetenv("MVC_ARENA_NT_MIN");
		pair_open(&p, (uint64_t)NP * PS, (uint64_t)NP * PS);
		ck_assert_uint_eq(p.a->arena_nt_min, set[k].want);
		fill(p.src.addr, (uint64_t)NP * PS, 60 + (int)k);
		memset(p.dst.addr, 0, (uint64_t)NP * PS);
		/* NP - k pages: lists of 8 x (3001 - k) bytes */
		paged(&p, sp, dp, NP - (uint32_t)k, PS);
		landed(p.a, p.imp, p.b, 1);
		uint32_t n = NP - (uint32_t)k;
		uint32_t bad = first_page_differing(p.src.addr, sp, p.dst.addr, dp, PS, n);
		ck_assert_msg(bad == n, "MVC_ARENA_NT_MIN=%s: page %u differs",
		              set[k].env ? set[k].env : "(unset)", bad);
		pair_close(&p);
		free(sp);
		free(dp);
	}
	unsetenv("MVC_ARENA_NT_MIN");
}
END_TEST

/* ---- bad lists: each fails its own batch, the rest goes on ---- */

/* The batch with this cookie fails with cause; the message contains want. */
static void fails_with(struct mvc *c, uint64_t cookie, int cause, const char *want)
{
	ck_assert_msg(mvc_submit(c, cookie) == 0, "%s", mvc_error(c));
	struct mvc_event e = wait_batch(c, cookie, 20);
	ck_assert_msg(e.status != 0, "batch %llu succeeded", (unsigned long long)cookie);
	ck_assert_msg(e.cause == cause, "cause %d, want %d: %s", e.cause, cause, e.msg);
	ck_assert_msg(strstr(e.msg, want), "message '%s' lacks '%s'", e.msg, want);
}

START_TEST(test_bad_lists_fail_their_batch_with_a_cause)
{
	enum { NP = 256, PS = 4096 };
	struct pair p;
	static uint32_t sp[NP], dp[NP];
	struct mv_desc *d[MV_MAX_SHARDS];

	pair_open(&p, (uint64_t)NP * PS, (uint64_t)NP * PS);
	fill(p.src.addr, (uint64_t)NP * PS, 25);
	for (uint32_t i = 0; i < NP; i++)
		sp[i] = dp[i] = i;

	/* A slice outside the arena. */
	paged(&p, sp, dp, NP, PS);
	ck_assert_int_ge(open_lists(p.a, d, MV_MAX_SHARDS), 1);
	d[0]->src_off = p.a->arena.size + 4096;
	fails_with(p.a, 1, MVC_CAUSE_BAD_DESC, "outside");

	/* Entries beyond the list's count. */
	paged(&p, sp, dp, NP, PS);
	ck_assert_int_ge(open_lists(p.a, d, MV_MAX_SHARDS), 1);
	d[0]->len = 1u << 30;
	fails_with(p.a, 2, MVC_CAUSE_BAD_DESC, "entries");

	/* An index beyond its region: named by entry and region. */
	sp[77] = NP;
	paged(&p, sp, dp, NP, PS);
	fails_with(p.a, 3, MVC_CAUSE_BOUNDS, "list entry 77");
	sp[77] = 77;
	dp[200] = 0xffffffffu;
	paged(&p, sp, dp, NP, PS);
	fails_with(p.a, 4, MVC_CAUSE_BOUNDS, "destination page 4294967295");
	dp[200] = 200;

	/* base + index x stride overflowing 64 bits. */
	struct mvc_pages pg = {.src = p.src.region,
	                       .dst = p.imp,
	                       .src_base = 4096,
	                       .src_stride = 1ull << 40,
	                       .dst_stride = PS,
	                       .page_size = PS,
	                       .src_pages = sp,
	                       .dst_pages = dp,
	                       .npages = NP};
	sp[NP - 1] = 0x01000000u; /* 2^24 x 2^40 wraps */
	ck_assert_int_eq(mvc_write_paged(p.a, &pg), 0);
	fails_with(p.a, 5, MVC_CAUSE_BOUNDS, "source page");
	sp[NP - 1] = NP - 1;

	/* A header that is not a list. */
	paged(&p, sp, dp, NP, PS);
	ck_assert_int_ge(open_lists(p.a, d, MV_MAX_SHARDS), 1);
	struct mv_list_hdr *h = (void *)(p.a->arena.map + d[0]->src_off);
	h->magic = 0;
	fails_with(p.a, 6, MVC_CAUSE_BAD_DESC, "no list");

	/* Pages larger than the shard's whole op pool could carry at once
	 * (found by tests/fuzz/fuzz_take): the shard waited for room that
	 * never comes before it looked at the page, and the client's ring
	 * stood still for good. Pages go out in pieces, so now it looks. */
	paged(&p, sp, dp, NP, PS);
	ck_assert_int_ge(open_lists(p.a, d, MV_MAX_SHARDS), 1);
	h = (void *)(p.a->arena.map + d[0]->src_off);
	h->page_size = 1ull << 50;
	fails_with(p.a, 7, MVC_CAUSE_BOUNDS, "lies outside region");

	/* And the client goes on working. */
	memset(p.dst.addr, 0, (uint64_t)NP * PS);
	paged(&p, sp, dp, NP, PS);
	landed(p.a, p.imp, p.b, 8);
	ck_assert(!memcmp(p.dst.addr, p.src.addr, (uint64_t)NP * PS));
	pair_close(&p);
}
END_TEST

/* A client that scribbles over its lists after submitting them hurts only
 * itself: each of its batches completes once (in error or not), and an
 * honest client of the same mover moves its data untouched. */
START_TEST(test_rewritten_lists_hurt_only_their_client)
{
	enum { NP = 50000, PS = 64, ROUNDS = 20 };
	struct pair bad, good;
	uint32_t *sp = perm(NP, 6);
	uint64_t x = 99;

	pair_open(&bad, (uint64_t)NP * PS, (uint64_t)NP * PS);
	pair_open(&good, (uint64_t)NP * PS, (uint64_t)NP * PS);
	fill(good.src.addr, (uint64_t)NP * PS, 26);
	for (int r = 0; r < ROUNDS; r++) {
		paged(&bad, sp, sp, NP, PS);
		struct mv_desc *d[MV_MAX_SHARDS];
		ck_assert_int_ge(open_lists(bad.a, d, MV_MAX_SHARDS), 1);
		uint32_t *body = (uint32_t *)(bad.a->arena.map + d[0]->src_off + 64);
		ck_assert_int_eq(mvc_submit(bad.a, (uint64_t)r), 0);
		/* Now rewrite the list while the shards expand it. */
		for (uint32_t i = 0; i < 2 * NP; i += 1 + (uint32_t)(x % 64)) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			body[i] = (uint32_t)x;
		}
		memset(good.dst.addr, 0, (uint64_t)NP * PS);
		paged(&good, sp, sp, NP, PS);
		landed(good.a, good.imp, good.b, (uint64_t)r);
		same(good.dst.addr, good.src.addr, (uint64_t)NP * PS, "the honest client's data");
		struct mvc_event e = wait_batch(bad.a, (uint64_t)r, 30);
		ck_assert_msg(e.status == 0 || e.cause == MVC_CAUSE_BOUNDS, "cause %d: %s", e.cause,
		              e.msg);
	}
	/* Exactly one completion each: nothing more arrives. */
	struct mvc_event e;
	ck_assert_int_eq(mvc_wait(bad.a, &e, 1, 300), 0);
	ck_assert_uint_eq(mvc_inflight(bad.a), 0);
	free(sp);
	pair_close(&bad);
	pair_close(&good);
}
END_TEST

/* A client killed in the middle of a long list: the shard drops its cursor,
 * and another client's batch behind it on the same shard completes. */
START_TEST(test_client_killed_mid_list_spares_others)
{
	enum { NP = 400000, PS = 64 };
	struct pair good;
	int go[2];

	ck_assert_int_eq(pipe(go), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct pair p;
		uint32_t *sp = perm(NP, 7);
		pair_open(&p, (uint64_t)NP * PS, (uint64_t)NP * PS);
		for (int k = 0; k < 4; k++) {
			paged(&p, sp, sp, NP, PS);
			if (mvc_submit(p.a, (uint64_t)k))
				_exit(2);
		}
		if (write(go[1], "x", 1) != 1)
			_exit(3);
		pause();
		_exit(0);
	}
	char ch;
	ck_assert_int_eq(read(go[0], &ch, 1), 1);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	pair_open(&good, 1 << 20, 1 << 20);
	fill(good.src.addr, 1 << 20, 27);
	uint32_t *sp = perm(16384, 8);
	paged(&good, sp, sp, 16384, PS);
	landed(good.a, good.imp, good.b, 1);
	same(good.dst.addr, good.src.addr, 16384 * PS, "the other client's data");
	free(sp);
	pair_close(&good);
	close(go[0]);
	close(go[1]);
}
END_TEST

/* mvc_submit_paged(): a paged write and its submit in one call. The
 * immediate added before it still follows the pages; a write it refuses
 * submits nothing and leaves the open batch as it was. */
START_TEST(test_submit_paged_is_write_paged_then_submit)
{
	enum { NP = 5000, PS = 256 };
	struct pair p;
	uint32_t *sp = perm(NP, 61), *dp = perm(NP, 62);

	pair_open(&p, (uint64_t)NP * PS, (uint64_t)NP * PS);
	struct mvc_pages pg = pages_of(p.src.region, p.imp, sp, dp, NP, PS);
	/* Refused: no batch opened, nothing submitted. */
	pg.npages = 0;
	ck_assert_int_eq(mvc_submit_paged(p.a, &pg, 9), -EINVAL);
	ck_assert_uint_eq(mvc_inflight(p.a), 0);
	ck_assert_int_eq(mvc_submit(p.a, 9), -EINVAL); /* no open batch */
	pg.npages = NP;
	for (uint64_t round = 1; round <= 2; round++) {
		fill(p.src.addr, (uint64_t)NP * PS, 70 + (int)round);
		memset(p.dst.addr, 0, (uint64_t)NP * PS);
		uint32_t imm = 0x5b000000u | (uint32_t)round;
		ck_assert_int_eq(mvc_imm_expect(p.b, imm, 1, round), 0);
		ck_assert_int_eq(mvc_write_imm(p.a, p.imp, imm), 0);
		ck_assert_msg(mvc_submit_paged(p.a, &pg, round) == 0, "%s", mvc_error(p.a));
		struct mvc_event e = wait_batch(p.a, round, 60);
		ck_assert_msg(e.status == 0, "%s", e.msg);
		ck_assert_uint_eq(e.bytes, (uint64_t)NP * PS);
		struct mvc_event ev;
		double end = now_s() + 20;
		int got = 0;
		while (!got && now_s() < end)
			got = mvc_wait(p.b, &ev, 1, 200) == 1 && ev.type == MVC_EV_IMM_COUNT &&
			      ev.imm == imm;
		ck_assert_msg(got, "round %llu: the immediate did not arrive",
		              (unsigned long long)round);
		uint32_t bad = first_page_differing(p.src.addr, sp, p.dst.addr, dp, PS, NP);
		ck_assert_msg(bad == NP, "round %llu: page %u differs", (unsigned long long)round,
		              bad);
	}
	free(sp);
	free(dp);
	pair_close(&p);
}
END_TEST

static TCase *lists(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_million_scattered_pages_in_one_batch);
	tcase_add_test(tc, test_adjacent_pages_merge_and_land);
	tcase_add_test(tc, test_many_segments_in_one_batch);
	tcase_add_test(tc, test_submit_paged_is_write_paged_then_submit);
	tcase_add_test(tc, test_entries_longer_than_a_write_land_in_pieces);
	tcase_add_test(tc, test_full_arena_is_eagain_and_keeps_the_batch);
	tcase_add_test(tc, test_batch_larger_than_arena_is_e2big_with_advice);
	tcase_add_test(tc, test_wait_spin_is_read_at_connect);
	tcase_add_test(tc, test_arena_streaming_is_read_at_connect);
	tcase_add_test(tc, test_bad_lists_fail_their_batch_with_a_cause);
	tcase_add_test(tc, test_rewritten_lists_hurt_only_their_client);
	tcase_add_test(tc, test_client_killed_mid_list_spares_others);
	return tc;
}

int main(void)
{
	Suite *s = suite_create("lists");

	suite_add_tcase(s, lists("lists_shm", setup_shm));
	suite_add_tcase(s, lists("lists_tcp", setup_tcp));
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
