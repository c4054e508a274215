/* SPDX-License-Identifier: MIT */
/*
 * The same-host path (mover/samehost.c), end to end on shm and tcp: writes
 * between two movers of this host are copies by the sending shard into the
 * receiver's memfd (mvstat's samehost_bytes counts them), byte for byte,
 * contiguous and paged (lists by reference), with streaming stores from
 * MV_NT_MIN, each batch's immediate after its data; --no-host-copy keeps
 * them on the fabric; a region freed by its owner takes no copy after. On
 * shm, whose provider checks no key, an import of another mover's region
 * stands only on its owner's word (mover/samehost_ask.c): a blob with
 * another secret, moved addresses, or through a forged peer address is
 * refused there. How the movers of one host find and trust each other is
 * test_samehost_peers.c.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
	mover_launch(&A, "a", 2);
	mover_extra = NULL;
	mover_launch(&B, "b", 2);
	movers_listening();
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

/* A piece from MV_NT_MIN (2 MiB) is copied with streaming stores: here two
 * stripes of 2.5 MiB, one a shard, at odd offsets on both sides (the
 * stores' alignment head), with a tail shorter than one store; not a byte
 * lands outside the write. */
START_TEST(test_same_host_streamed_copy_lands_at_odd_offsets)
{
	struct pair p;
	const size_t n = 6u << 20, len = (5u << 20) + 45, so = 3, doff = 77;

	pair_open(&p, n, n);
	fill(p.src.addr, n, 21);
	memset(p.dst.addr, 0xa5, n);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, so, p.imp, doff, len), 0);
	landed(p.a, p.imp, p.b, 9);
	ck_assert_msg(!memcmp((uint8_t *)p.src.addr + so, (uint8_t *)p.dst.addr + doff, len),
	              "bytes differ after a streamed copy");
	/* Nothing around the copy changed. */
	size_t at = first_not(p.dst.addr, doff, 0xa5);
	ck_assert_msg(at == doff, "byte %zu before the copy was written", at);
	at = first_not((uint8_t *)p.dst.addr + doff + len, n - doff - len, 0xa5);
	ck_assert_msg(at == n - doff - len, "byte %zu after the copy was written", doff + len + at);
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), len);
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
	uint32_t bad = first_page_differing(p.src.addr, sp, p.dst.addr, dp, page, npages);
	ck_assert_msg(bad == npages, "page %u (source %u, destination %u) differs", bad,
	              bad < npages ? sp[bad] : 0, bad < npages ? dp[bad] : 0);
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), n);
	free(sp);
	free(dp);
	pair_close(&p);
}
END_TEST

/* field of m's two shards in v, once they add up to total: a shard
 * publishes its counters every so often, and before it sleeps. */
static void shard_counts(struct mvproc *m, const char *field, uint64_t total, uint64_t v[2])
{
	for (double t0 = now_s();; usleep(20000)) {
		ck_assert_int_eq(stat_each(m, field, v, 2), 2);
		if (v[0] + v[1] == total)
			return;
		ck_assert_msg(now_s() - t0 < 5, "%s: shards show %llu and %llu bytes, not %llu",
		              field, (unsigned long long)v[0], (unsigned long long)v[1],
		              (unsigned long long)total);
	}
}

/* A write into a region the shards copy into splits from 64 KiB over the
 * shards (mv_host_parts() in mv_wire.h), each part on the shard its
 * destination offset names: two 64 KiB writes are 32 KiB a shard each; a
 * 48 KiB write goes whole to one shard. Every byte lands, none around
 * them, and the immediate comes after all parts: on shm too, where a
 * batch with an immediate into an import on the fabric gathers on one
 * shard (MV_HELLO_IMM_ONE_SHARD), copies do not. */
START_TEST(test_same_host_write_splits_over_the_shards_by_offset)
{
	struct pair p;
	const size_t n = 1u << 20, k64 = 64u << 10, k48 = 48u << 10;
	uint64_t v[2];

	pair_open(&p, n, n);
	fill(p.src.addr, n, 31);
	memset(p.dst.addr, 0, n);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, k64), 0);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, k64, p.imp, k64, k64), 0);
	landed(p.a, p.imp, p.b, 5);
	ck_assert_msg(!memcmp(p.src.addr, p.dst.addr, 2 * k64), "bytes differ");
	shard_counts(&A, "\"samehost_bytes\"", 2 * k64, v);
	ck_assert_msg(v[0] == k64 && v[1] == k64,
	              "shards copied %llu and %llu bytes, not 64 KiB each",
	              (unsigned long long)v[0], (unsigned long long)v[1]);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 2 * k64, p.imp, 2 * k64, k48), 0);
	landed(p.a, p.imp, p.b, 6);
	shard_counts(&A, "\"samehost_bytes\"", 2 * k64 + k48, v);
	ck_assert_msg((v[0] == k64 && v[1] == k64 + k48) || (v[0] == k64 + k48 && v[1] == k64),
	              "a 48 KiB write was split: shards copied %llu and %llu bytes",
	              (unsigned long long)v[0], (unsigned long long)v[1]);
	ck_assert_msg(!memcmp(p.src.addr, p.dst.addr, 2 * k64 + k48), "bytes differ");
	size_t at = first_not((uint8_t *)p.dst.addr + 2 * k64 + k48, n - 2 * k64 - k48, 0);
	ck_assert_msg(at == n - 2 * k64 - k48, "byte %zu past the writes was written",
	              2 * k64 + k48 + at);
	pair_close(&p);
}
END_TEST

/* On the fabric nothing is copied, and the import says so: a 64 KiB write
 * goes whole to one shard (libclient's stripes start at 256 KiB there). */
START_TEST(test_no_host_copy_keeps_writes_on_the_fabric)
{
	struct pair p;
	const size_t n = 6u << 20;
	uint64_t v[2];

	pair_open(&p, n, n);
	contiguous_round(&p, n, 3, 1);
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), 0);
	ck_assert_uint_eq(stat_sum(&A, "\"host_bytes\""), n);
	shard_counts(&A, "\"host_bytes\"", n, v);
	uint64_t was0 = v[0];
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, p.imp, 0, 64u << 10), 0);
	landed(p.a, p.imp, p.b, 2);
	shard_counts(&A, "\"host_bytes\"", n + (64u << 10), v);
	ck_assert_msg(v[0] - was0 == 0 || v[0] - was0 == 64u << 10,
	              "a 64 KiB write on the fabric was split: shard 0 took %llu bytes of it",
	              (unsigned long long)(v[0] - was0));
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

/* A second client of A imports the same region with a blob that shows
 * another secret and a larger length (forged, or stale). On shm, whose
 * provider copies a one-segment write into the owner's process without
 * checking its key (README, Security model), the import is refused: its
 * owner does not vouch for the blob. On tcp it gets no mapping (the first
 * import's checked blob opened it), so its write past the region's end
 * goes to the fabric and the owner's provider refuses it there. Either
 * way mover A lives on and the region's bytes are untouched. */
START_TEST(test_import_with_another_secret_gets_no_mapping)
{
	struct pair p;
	const size_t n = 1u << 20;
	uint8_t blob[MVC_BLOB_MAX], addr[MVC_BLOB_MAX];
	size_t len = sizeof(blob), alen = sizeof(addr);
	struct mvc *c2;
	struct mvc_mem s2;
	uint32_t peer2, imp2;
	int shm = !strcmp(prov, "shm");

	pair_open(&p, n, n);
	contiguous_round(&p, n, 21, 1);
	ck_assert_int_eq(mvc_connect(&c2, A.sock), 0);
	ck_assert_msg(mvc_alloc(c2, 1u << 16, &s2) == 0, "%s", mvc_error(c2));
	memset(s2.addr, 0xee, 1u << 16);
	ck_assert_int_eq(mvc_address(p.b, addr, &alen), 0);
	ck_assert_msg(mvc_peer_add(c2, addr, alen, &peer2) == 0, "%s", mvc_error(c2));
	ck_assert_int_eq(mvc_region_blob(p.b, p.dst.region, blob, &len), 0);
	struct mv_region_blob *rb = (struct mv_region_blob *)blob;
	rb->secret ^= 1;
	rb->len = 4 * (uint64_t)n;
	uint8_t *before = malloc(n);
	ck_assert_ptr_nonnull(before);
	memcpy(before, p.dst.addr, n);
	uint64_t copied = stat_sum(&A, "\"samehost_bytes\"");
	int ret = mvc_import(c2, peer2, blob, len, &imp2);
	if (shm) {
		ck_assert_msg(ret == -EACCES, "a forged blob was imported on shm: %d %s", ret,
		              mvc_error(c2));
		ck_assert_msg(strstr(mvc_error(c2), "not the one its owner"), "cause: %s",
		              mvc_error(c2));
		ck_assert_int_ge(log_grep(&A, "refused IMPORT of region", NULL, 0), 1);
	} else {
		ck_assert_msg(ret == 0, "%s", mvc_error(c2));
		ck_assert_int_eq(mvc_write(c2, s2.region, 0, imp2, 2 * (uint64_t)n, 1u << 16), 0);
		ck_assert_int_eq(mvc_submit(c2, 7), 0);
		struct mvc_event e = wait_batch(c2, 7, 20);
		ck_assert_msg(e.status != 0,
		              "a write past the region through a forged blob succeeded");
		ck_assert_int_ge(log_grep(&A, "another blob than the one its owner", NULL, 0), 1);
	}
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), copied);
	ck_assert_msg(!memcmp(before, p.dst.addr, n), "the region changed");
	free(before);
	mvc_disconnect(c2);
	/* The first import still copies. */
	contiguous_round(&p, n, 22, 2);
	ck_assert_uint_eq(stat_sum(&A, "\"samehost_bytes\""), copied + n);
	pair_close(&p);
}
END_TEST

/* The right secret and length, but every shard's address moved past the
 * region: where shm would write (unchecked) lies outside it. On shm the
 * owner's word refuses the import before any write; on tcp the import
 * stands on the fabric, whose key check refuses the write. A region of
 * the client's own mover imported the same way writes where the mover
 * registered it, never where the blob says. */
START_TEST(test_import_with_a_moved_address_never_writes_outside_the_region)
{
	struct pair p;
	const size_t n = 1u << 20;
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	uint32_t imp2;
	int shm = !strcmp(prov, "shm");

	pair_open(&p, n, n);
	contiguous_round(&p, n, 31, 1);
	ck_assert_int_eq(mvc_region_blob(p.b, p.dst.region, blob, &len), 0);
	struct mv_region_blob *rb = (struct mv_region_blob *)blob;
	for (uint32_t s = 0; s < rb->nshards; s++)
		rb->shard[s].addr += n;
	int ret = mvc_import(p.a, p.peer, blob, len, &imp2);
	if (shm) {
		ck_assert_msg(ret == -EACCES,
		              "a blob with moved addresses was imported on shm: %d %s", ret,
		              mvc_error(p.a));
		ck_assert_msg(strstr(mvc_error(p.a), "not the one its owner"), "cause: %s",
		              mvc_error(p.a));
	} else {
		ck_assert_msg(ret == 0, "%s", mvc_error(p.a));
		fill(p.src.addr, 4096, 32);
		ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, imp2, n - 4096, 4096), 0);
		ck_assert_int_eq(mvc_submit(p.a, 5), 0);
		struct mvc_event e = wait_batch(p.a, 5, 20);
		ck_assert_msg(e.status != 0, "a write through moved addresses succeeded");
	}
	/* The first import still writes, and its bytes are whole. */
	contiguous_round(&p, n, 33, 2);

	/* Mover A's own region, through a blob with moved addresses. */
	struct mvc_mem own;
	uint8_t ablob[MVC_BLOB_MAX];
	size_t alen = sizeof(ablob);
	uint32_t self, imp3;
	ck_assert_msg(mvc_alloc(p.a, n, &own) == 0, "%s", mvc_error(p.a));
	memset(own.addr, 0, n);
	ck_assert_int_eq(mvc_address(p.a, ablob, &alen), 0);
	ck_assert_msg(mvc_peer_add(p.a, ablob, alen, &self) == 0, "%s", mvc_error(p.a));
	len = sizeof(blob);
	ck_assert_int_eq(mvc_region_blob(p.a, own.region, blob, &len), 0);
	for (uint32_t s = 0; s < rb->nshards; s++)
		rb->shard[s].addr += n;
	ck_assert_msg(mvc_import(p.a, self, blob, len, &imp3) == 0, "%s", mvc_error(p.a));
	fill(p.src.addr, 4096, 34);
	ck_assert_int_eq(mvc_write(p.a, p.src.region, 0, imp3, 0, 4096), 0);
	ck_assert_int_eq(mvc_submit(p.a, 6), 0);
	struct mvc_event e = wait_batch(p.a, 6, 20);
	ck_assert_msg(e.status == 0, "%s", e.msg);
	ck_assert_msg(!memcmp(own.addr, p.src.addr, 4096),
	              "the write to the own region did not land at its offset 0");
	pair_close(&p);
}
END_TEST

/* A region no import has asked about yet, through a blob with another
 * secret: the owner is asked, says no, and on shm the IMPORT fails with
 * its words (on tcp the import stands on the fabric, whose keys decide). */
START_TEST(test_import_its_owner_disowns_is_refused_on_shm)
{
	struct pair p;
	const size_t n = 1u << 20;
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	struct mvc_mem d2;
	uint32_t imp2;

	pair_open(&p, n, n);
	ck_assert_int_eq(mvc_alloc(p.b, n, &d2), 0);
	ck_assert_int_eq(mvc_region_blob(p.b, d2.region, blob, &len), 0);
	((struct mv_region_blob *)blob)->secret ^= 3;
	int ret = mvc_import(p.a, p.peer, blob, len, &imp2);
	if (!strcmp(prov, "shm")) {
		ck_assert_msg(ret == -EACCES, "an import its owner disowned stood on shm: %d %s",
		              ret, mvc_error(p.a));
		ck_assert_msg(strstr(mvc_error(p.a), "secret"), "cause: %s", mvc_error(p.a));
		ck_assert_int_ge(log_grep(&A, "refused IMPORT of region", NULL, 0), 1);
		ck_assert_int_ge(log_grep(&B, "wrong secret", NULL, 0), 1);
	} else {
		ck_assert_msg(ret == 0, "%s", mvc_error(p.a));
		ck_assert_int_ge(log_grep(&A, "secret", NULL, 0), 1);
	}
	/* The client and its genuine import carry on. */
	contiguous_round(&p, n, 51, 1);
	pair_close(&p);
}
END_TEST

/* A peer address whose doorbell key is not its mover's (a forged address
 * blob: on shm the endpoints writes go to come from it). On shm the owner's
 * word does not match it and the import is refused; on tcp the copies are
 * refused and the writes take the fabric, which lands them. */
START_TEST(test_import_through_a_forged_peer_address_is_refused_on_shm)
{
	struct pair p;
	const size_t n = 1u << 20;
	uint8_t blob[MVC_BLOB_MAX], addr[MVC_BLOB_MAX];
	size_t len = sizeof(blob), alen = sizeof(addr);
	struct mvc *c2;
	uint32_t peer2, imp2;
	int shm = !strcmp(prov, "shm");

	pair_open(&p, n, n);
	ck_assert_int_eq(mvc_connect(&c2, A.sock), 0);
	ck_assert_int_eq(mvc_address(p.b, addr, &alen), 0);
	((struct mv_addr_blob *)addr)->bell[0].key ^= 0x5a5a;
	ck_assert_msg(mvc_peer_add(c2, addr, alen, &peer2) == 0, "%s", mvc_error(c2));
	ck_assert_int_eq(mvc_region_blob(p.b, p.dst.region, blob, &len), 0);
	int ret = mvc_import(c2, peer2, blob, len, &imp2);
	if (shm) {
		ck_assert_msg(ret == -EACCES, "an import through a forged address stood: %d %s",
		              ret, mvc_error(c2));
		ck_assert_msg(strstr(mvc_error(c2), "forged address"), "cause: %s", mvc_error(c2));
	} else {
		ck_assert_msg(ret == 0, "%s", mvc_error(c2));
		ck_assert_int_ge(log_grep(&A, "forged address", NULL, 0), 1);
	}
	mvc_disconnect(c2);
	contiguous_round(&p, n, 41, 1);
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

static TCase *copies(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_same_host_write_is_a_copy_and_lands_whole);
	tcase_add_test(tc, test_same_host_paged_write_is_a_copy_and_lands_whole);
	tcase_add_test(tc, test_same_host_streamed_copy_lands_at_odd_offsets);
	tcase_add_test(tc, test_same_host_write_splits_over_the_shards_by_offset);
	tcase_add_test(tc, test_freed_region_takes_no_more_copies);
	tcase_add_test(tc, test_import_with_another_secret_gets_no_mapping);
	tcase_add_test(tc, test_import_with_a_moved_address_never_writes_outside_the_region);
	tcase_add_test(tc, test_import_through_a_forged_peer_address_is_refused_on_shm);
	tcase_add_test(tc, test_import_its_owner_disowns_is_refused_on_shm);
	tcase_add_test(tc, test_dead_peer_fails_copies_once_its_death_is_seen);
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
	tcase_add_test(tc, test_import_with_a_moved_address_never_writes_outside_the_region);
	tcase_add_test(tc, test_import_its_owner_disowns_is_refused_on_shm);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
