/* SPDX-License-Identifier: MIT */
/*
 * Huge pages behind mvc_alloc's regions, end to end: with hugetlb pages
 * reserved by the test a region is hugetlb-backed in the client and in both
 * movers, and writes through two movers (shm and tcp) land byte for byte;
 * with shmem THP allowed (and no pool) it is THP, mapped huge in the client
 * and in the mover; with neither, the fallback to 4 KiB pages happens and
 * says why, in mvc_mem_info() and the mover's log; "require" with neither
 * is a clear error. And freeing a region while a peer streams writes into
 * it: every batch completes once, both movers live on, and no byte lands
 * in the region's memory after mvc_free returned.
 *
 * The kernel's knobs are the host's: the suite runs as root only, saves
 * vm.nr_hugepages and shmem_enabled first and puts them back when it ends,
 * on failure and on SIGINT/SIGTERM too. Skipped with the reason where it
 * cannot change them.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mvc.h"
#include "mv_huge.h"

#include "mvtest.h"

#define NR_PATH   "/proc/sys/vm/nr_hugepages"
#define THP_PATH  MV_THP_SYS "shmem_enabled"
#define THP2_PATH MV_THP_SYS "hugepages-2048kB/shmem_enabled"

static long saved_nr = -1;
static char saved_thp[32], saved_thp2[32];

static int knob_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? write(fd, val, strlen(val)) : -1;

	if (fd >= 0)
		close(fd);
	return n == (ssize_t)strlen(val) ? 0 : -1;
}

static void knobs_restore(void)
{
	char v[32];

	if (saved_nr >= 0) {
		snprintf(v, sizeof(v), "%ld", saved_nr);
		knob_write(NR_PATH, v);
	}
	if (saved_thp[0])
		knob_write(THP_PATH, saved_thp);
	if (saved_thp2[0])
		knob_write(THP2_PATH, saved_thp2);
}

static void on_signal(int sig)
{
	knobs_restore();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* The pool at the host's own size plus pages 2 MiB pages; fails the test
 * when the kernel gives fewer (memory too fragmented). */
static void pool_add(long pages)
{
	char v[32];

	snprintf(v, sizeof(v), "%ld", saved_nr + pages);
	ck_assert_int_eq(knob_write(NR_PATH, v), 0);
	long got = mv_huge_read_long(NR_PATH);
	ck_assert_msg(got >= saved_nr + pages, "asked the kernel for %ld hugepages, it made %ld",
	              saved_nr + pages, got);
}

static void thp_set(const char *mode)
{
	ck_assert_int_eq(knob_write(THP_PATH, mode), 0);
	if (saved_thp2[0])
		ck_assert_int_eq(knob_write(THP2_PATH, "inherit"), 0);
}

/* The largest value, in kB, of field over pid's mappings that hold addr,
 * or with addr NULL, of its mappings of mvc-region memfds; -1 when there is
 * no such mapping. */
static long smaps_max(pid_t pid, const void *addr, const char *field)
{
	char path[64], line[256];
	uintptr_t a = (uintptr_t)addr;
	int in = 0;
	long best = -1;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			in = addr ? a >= lo && a < hi : strstr(line, "mvc-region") != NULL;
			continue;
		}
		if (in && !strncmp(line, field, strlen(field))) {
			long v = strtol(line + strlen(field), NULL, 10);
			best = v > best ? v : best;
		}
	}
	fclose(f);
	return best;
}

/* Scattered 4 KiB pages and one long contiguous write, every byte checked. */
static void writes_land(struct pair *p, size_t n, uint64_t seed, uint64_t cookie)
{
	enum { NP = 512 };
	static uint32_t sp[NP], dp[NP];
	uint32_t pages = (uint32_t)(n / 2 / 4096);

	fill(p->src.addr, n, seed);
	memset(p->dst.addr, 0, n);
	for (uint32_t i = 0; i < NP; i++) {
		sp[i] = (uint32_t)((i * 2654435761u) % pages);
		dp[i] =
		    sp[i]; /* a permutation would do as well; the same index keeps it checkable */
	}
	/* Distinct pages: the multiplier is odd and pages a power of two. */
	struct mvc_pages pg = {.src = p->src.region,
	                       .dst = p->imp,
	                       .src_stride = 4096,
	                       .dst_stride = 4096,
	                       .page_size = 4096,
	                       .src_pages = sp,
	                       .dst_pages = dp,
	                       .npages = NP};
	ck_assert_msg(mvc_write_paged(p->a, &pg) == 0, "%s", mvc_error(p->a));
	ck_assert_int_eq(mvc_write(p->a, p->src.region, n / 2, p->imp, n / 2, n - n / 2), 0);
	landed(p->a, p->imp, p->b, cookie);
	uint32_t bad = first_page_differing(p->src.addr, sp, p->dst.addr, NULL, 4096, NP);
	ck_assert_msg(bad == NP, "page %u differs", bad < NP ? sp[bad] : 0);
	ck_assert_msg(
	    !memcmp((uint8_t *)p->src.addr + n / 2, (uint8_t *)p->dst.addr + n / 2, n - n / 2),
	    "the contiguous half differs");
}

static void info_of(struct mvc *c, const struct mvc_mem *m, struct mvc_mem_info *in)
{
	ck_assert_msg(mvc_mem_info(c, m, in) == 0, "%s", mvc_error(c));
}

/* ---- hugetlb ---- */

static void hugetlb_round(void)
{
	const size_t n = 32u << 20;
	struct mvc_mem_info in;
	struct pair p;
	char line[1024];

	pool_add(2 * (long)(n / MV_HUGE_SIZE) + 4);
	thp_set("never");
	setenv("MVC_HUGEPAGES", "auto", 1);
	pair_open(&p, n, n);
	for (int side = 0; side < 2; side++) {
		struct mvc_mem *m = side ? &p.dst : &p.src;
		info_of(side ? p.b : p.a, m, &in);
		ck_assert_msg(m->flags & MVC_MEM_HUGETLB, "side %d: flags %#x, why: %s", side,
		              m->flags, in.why);
		ck_assert_uint_eq(in.backing, MVC_BACKING_HUGETLB);
		ck_assert_uint_eq(in.page_size, MV_HUGE_SIZE);
		ck_assert_str_eq(in.why, "");
		ck_assert_int_eq(smaps_max(getpid(), m->addr, "KernelPageSize:"), 2048);
	}
	/* The movers map it on hugetlb pages too. */
	ck_assert_int_eq(smaps_max(B.pid, NULL, "KernelPageSize:"), 2048);
	ck_assert_int_gt(log_grep(&B, "on hugetlb 2 MiB pages", line, sizeof(line)), 0);
	/* And mvstat shows it. */
	ck_assert_uint_eq(stat_sum(&B, "\"hugetlb\":{\"count\""), 1);
	ck_assert_uint_eq(stat_sum(&B, "\"4k\":{\"count\""), 0);
	writes_land(&p, n, 7, 1);
	writes_land(&p, n, 8, 2);
	ck_assert_int_eq(mvc_free(p.a, &p.src), 0);
	ck_assert_int_eq(mvc_free(p.b, &p.dst), 0);
	pair_close(&p);
}

START_TEST(test_hugetlb_region_writes_land_on_shm)
{
	setup_shm();
	hugetlb_round();
	teardown();
}
END_TEST

START_TEST(test_hugetlb_region_writes_land_on_tcp)
{
	setup_tcp();
	hugetlb_round();
	teardown();
}
END_TEST

/* ---- THP ---- */

START_TEST(test_thp_region_is_mapped_huge_and_writes_land)
{
	const size_t n = 16u << 20;
	struct mvc_mem_info in;
	struct pair p;
	char line[1024];

	pool_add(0);
	thp_set("advise");
	setenv("MVC_HUGEPAGES", "thp", 1);
	setup_shm();
	pair_open(&p, n, n);
	info_of(p.b, &p.dst, &in);
	ck_assert_msg(p.dst.flags & MVC_MEM_THP, "flags %#x, why: %s", p.dst.flags, in.why);
	ck_assert_uint_eq(in.backing, MVC_BACKING_THP);
	ck_assert_uint_eq((uintptr_t)p.dst.addr % MV_HUGE_SIZE, 0);
	/* Huge in the client, and in the mover's mapping (MADV_HUGEPAGE there). */
	ck_assert_int_gt(smaps_max(getpid(), p.dst.addr, "ShmemPmdMapped:"), 0);
	ck_assert_int_gt(smaps_max(B.pid, NULL, "ShmemPmdMapped:"), 0);
	ck_assert_int_gt(log_grep(&B, "on shmem with transparent huge pages", line, sizeof(line)),
	                 0);
	writes_land(&p, n, 11, 1);
	pair_close(&p);
	teardown();
}
END_TEST

/* ---- neither: the fallback, and require ---- */

START_TEST(test_no_pool_no_thp_falls_back_and_says_why)
{
	struct mvc_mem_info in;
	struct mvc_mem m;
	struct mvc *c;
	char line[1024];
	struct mv_huge_state hs;

	pool_add(0);
	thp_set("never");
	mv_huge_read(&hs);
	/* Larger than what the host's pool has free. */
	size_t n = (size_t)(mv_huge_avail(&hs) + 4) * MV_HUGE_SIZE;
	unsetenv("MVC_HUGEPAGES");
	setup_tcp();
	ck_assert_int_eq(mvc_connect(&c, A.sock), 0);
	ck_assert_msg(mvc_alloc(c, n, &m) == 0, "%s", mvc_error(c));
	info_of(c, &m, &in);
	ck_assert_uint_eq(m.flags & (MVC_MEM_HUGETLB | MVC_MEM_THP), 0);
	ck_assert_uint_eq(in.backing, MVC_BACKING_4K);
	ck_assert_msg(strstr(in.why, "hugetlb pool has") && strstr(in.why, "vm.nr_hugepages") &&
	                  strstr(in.why, "shmem THP is never") && strstr(in.why, "shmem_enabled"),
	              "why: %s", in.why);
	ck_assert_int_gt(log_grep(&A, "on 4 KiB pages", line, sizeof(line)), 0);
	ck_assert_msg(strstr(line, "not huge: the hugetlb pool has"), "log: %s", line);
	/* The pages work: write them. */
	memset(m.addr, 0x5a, n);
	ck_assert_int_eq(mvc_free(c, &m), 0);
	/* Asked for 4 KiB pages: says so. */
	ck_assert_int_eq(mvc_alloc_huge(c, 4u << 20, MVC_HUGE_NEVER, &m), 0);
	info_of(c, &m, &in);
	ck_assert_msg(strstr(in.why, "asked for 4 KiB pages"), "why: %s", in.why);
	ck_assert_int_eq(mvc_free(c, &m), 0);
	mvc_disconnect(c);
	teardown();
}
END_TEST

START_TEST(test_require_without_huge_pages_is_a_clear_error)
{
	struct mvc_mem m;
	struct mvc *c;
	struct mv_huge_state hs;

	pool_add(0);
	thp_set("never");
	mv_huge_read(&hs);
	size_t n = (size_t)(mv_huge_avail(&hs) + 4) * MV_HUGE_SIZE;
	setup_tcp();
	setenv("MVC_HUGEPAGES", "require", 1);
	ck_assert_int_eq(mvc_connect(&c, A.sock), 0);
	ck_assert_int_eq(mvc_alloc(c, n, &m), -ENOMEM);
	ck_assert_msg(strstr(mvc_error(c), "no huge pages") &&
	                  strstr(mvc_error(c), "vm.nr_hugepages") &&
	                  strstr(mvc_error(c), "shmem_enabled"),
	              "error: %s", mvc_error(c));
	ck_assert_ptr_null(m.addr);
	ck_assert_int_eq(mvc_alloc_huge(c, n, MVC_HUGE_THP, &m), -ENOMEM);
	ck_assert_int_eq(mvc_alloc_huge(c, n, MVC_HUGE_HUGETLB, &m), -ENOMEM);
	mvc_disconnect(c);
	/* A word the library does not know is refused at connect. */
	setenv("MVC_HUGEPAGES", "sometimes", 1);
	ck_assert_int_eq(mvc_connect(&c, A.sock), -EINVAL);
	ck_assert_msg(strstr(mvc_connect_error(), "MVC_HUGEPAGES='sometimes'"), "%s",
	              mvc_connect_error());
	unsetenv("MVC_HUGEPAGES");
	teardown();
}
END_TEST

/* ---- free while writes stream in ---- */

enum { STREAM_MAX = 4096, STREAM_DEPTH = 8 };
static const char *route = "same-host copies";
static uint8_t seen[STREAM_MAX];

/* Takes what completed on a; counts each cookie's completions and the
 * failed ones. */
static void stream_reap(struct mvc *a, int timeout_ms, uint32_t *inflight, uint32_t *failed)
{
	struct mvc_event ev[16];
	int k = mvc_wait(a, ev, 16, timeout_ms);

	ck_assert_msg(k >= 0, "mvc_wait: %s", mvc_error(a));
	for (int i = 0; i < k; i++) {
		if (ev[i].type != MVC_EV_BATCH)
			continue;
		ck_assert_msg(ev[i].cookie >= 1 && ev[i].cookie < STREAM_MAX, "unknown batch %llu",
		              (unsigned long long)ev[i].cookie);
		ck_assert_msg(++seen[ev[i].cookie] == 1, "batch %llu completed twice",
		              (unsigned long long)ev[i].cookie);
		*failed += ev[i].status != 0;
		(*inflight)--;
	}
}

/* One batch: four 1 MiB writes into dst, from a source offset that moves
 * with the cookie, so any write landing changes dst's bytes. */
static int stream_submit(struct pair *p, size_t n, uint64_t cookie)
{
	const size_t w = 1u << 20;

	for (int k = 0; k < 4; k++) {
		size_t so = ((cookie * 4 + (size_t)k) * 4096) % (n - w);
		ck_assert_int_eq(mvc_write(p->a, p->src.region, so, p->imp, (size_t)k * w, w), 0);
	}
	return mvc_submit(p->a, cookie);
}

static void free_while_streaming(void)
{
	const size_t n = 8u << 20;
	struct pair p;
	uint32_t inflight = 0, failed = 0, failed_at_free;
	uint64_t cookie = 1;

	memset(seen, 0, sizeof(seen));
	pair_open(&p, n, n);
	fill(p.src.addr, n, 3);
	int keep = dup(p.dst.fd); /* the region's memory, as it lives on after the free */
	ck_assert_int_ge(keep, 0);
	/* Stream until the writes are well under way. Reap first, submit last:
	 * on a quiet machine a reap can find every batch done, and the free
	 * must come with batches in flight. */
	while (cookie < 64) {
		stream_reap(p.a, 0, &inflight, &failed);
		while (inflight < STREAM_DEPTH && cookie < 64) {
			ck_assert_msg(stream_submit(&p, n, cookie) == 0, "%s", mvc_error(p.a));
			cookie++;
			inflight++;
		}
	}
	ck_assert_uint_gt(inflight, 0);
	failed_at_free = failed;
	double t0 = now_s();
	ck_assert_msg(mvc_free(p.b, &p.dst) == 0, "%s", mvc_error(p.b));
	double free_s = now_s() - t0;
	/* From here no byte may land in the memory: snapshot it, write a new
	 * pattern to the source, and stream on. */
	uint8_t *mem = mmap(NULL, n, PROT_READ, MAP_SHARED, keep, 0);
	ck_assert_ptr_ne(mem, MAP_FAILED);
	uint8_t *snap = malloc(n);
	ck_assert_ptr_nonnull(snap);
	memcpy(snap, mem, n);
	fill(p.src.addr, n, 4);
	/* 24 batches more: three rounds of STREAM_DEPTH. Through tcp's
	 * fabric each round fails only at its deadline (the movers' 3 s op
	 * timeout), the target's provider having dropped the connection on
	 * the first write to the freed key. */
	uint64_t end = cookie + 24;
	double give_up = now_s() + 30;
	while ((cookie < end || inflight) && now_s() < give_up) {
		while (inflight < STREAM_DEPTH && cookie < end) {
			int r = stream_submit(&p, n, cookie);
			if (r == -EAGAIN) {
				mvc_abort(p.a);
				break;
			}
			ck_assert_msg(r == 0, "%s", mvc_error(p.a));
			cookie++;
			inflight++;
		}
		stream_reap(p.a, 50, &inflight, &failed);
	}
	ck_assert_msg(inflight == 0, "%u batches never completed", inflight);
	for (uint64_t c = 1; c < cookie; c++)
		ck_assert_msg(seen[c] == 1, "batch %llu completed %u times", (unsigned long long)c,
		              seen[c]);
	/* Writes after the free fail; none of them reached the memory. */
	ck_assert_msg(!memcmp(snap, mem, n), "bytes landed in the region after mvc_free returned");
	/* Writes after the free fail, but on shm's fabric path, which keeps
	 * the freed range registered over discarded memory (registry.c). */
	if (strcmp(prov, "shm") || !strstr(route, "fabric"))
		ck_assert_msg(failed > failed_at_free,
		              "no write failed after the region was freed");
	printf("free while streaming (%s, %s): mvc_free took %.2f ms, %u of %llu batches failed\n",
	       prov, route, free_s * 1e3, failed, (unsigned long long)cookie - 1);
	munmap(mem, n);
	free(snap);
	close(keep);
	/* Both movers carry on: a new region takes writes. */
	uint8_t blob[MVC_BLOB_MAX];
	size_t blen = sizeof(blob);
	ck_assert_int_eq(kill(A.pid, 0), 0);
	ck_assert_int_eq(kill(B.pid, 0), 0);
	ck_assert_msg(mvc_alloc(p.b, n, &p.dst) == 0, "%s", mvc_error(p.b));
	ck_assert_int_eq(mvc_region_blob(p.b, p.dst.region, blob, &blen), 0);
	ck_assert_msg(mvc_import(p.a, p.peer, blob, blen, &p.imp) == 0, "%s", mvc_error(p.a));
	writes_land(&p, n, 5, STREAM_MAX + 1);
	pair_close(&p);
}

START_TEST(test_free_while_writes_stream_in_on_shm)
{
	setup_shm();
	free_while_streaming();
	teardown();
}
END_TEST

START_TEST(test_free_while_writes_stream_in_on_tcp)
{
	setup_tcp();
	free_while_streaming();
	teardown();
}
END_TEST

/* The same through the fabric, not same-host copies: what lands is the
 * receiving mover's provider writing into its mapping. On tcp the batches
 * after the free fail at the op timeout, three rounds of them: half the
 * usual 3 s. */
#define TCP_FREE_TIMEOUT "--op-timeout=1.5"

START_TEST(test_free_while_fabric_writes_stream_in_on_shm)
{
	route = "fabric";
	mover_extra = "--no-host-copy";
	setup_shm();
	mover_extra = NULL;
	free_while_streaming();
	teardown();
}
END_TEST

START_TEST(test_free_while_fabric_writes_stream_in_on_tcp)
{
	route = "fabric";
	mover_extra = "--no-host-copy";
	mover_extra2 = TCP_FREE_TIMEOUT;
	setup_tcp();
	mover_extra = mover_extra2 = NULL;
	free_while_streaming();
	teardown();
}
END_TEST

/* A hugetlb region freed while writes stream in through the fabric: the
 * mover overlays and later unmaps whole huge pages. */
START_TEST(test_free_hugetlb_while_fabric_writes_stream_in)
{
	pool_add(16);
	setenv("MVC_HUGEPAGES", "hugetlb", 1);
	route = "fabric, hugetlb";
	mover_extra = "--no-host-copy";
	mover_extra2 = TCP_FREE_TIMEOUT;
	setup_tcp();
	mover_extra = mover_extra2 = NULL;
	free_while_streaming();
	teardown();
	unsetenv("MVC_HUGEPAGES");
}
END_TEST

int main(void)
{
	const char *skip = NULL;

	if (geteuid() != 0)
		skip = "changing vm.nr_hugepages and shmem_enabled needs root";
	else if (access(NR_PATH, W_OK) || access(THP_PATH, W_OK))
		skip = NR_PATH " or " THP_PATH " is not writable here";
	if (!skip) {
		saved_nr = mv_huge_read_long(NR_PATH);
		mv_huge_read_choice(THP_PATH, saved_thp, sizeof(saved_thp));
		mv_huge_read_choice(THP2_PATH, saved_thp2, sizeof(saved_thp2));
		if (!saved_thp[0])
			skip = THP_PATH " names no mode";
	}
	if (!skip) {
		atexit(knobs_restore);
		signal(SIGINT, on_signal);
		signal(SIGTERM, on_signal);
		signal(SIGHUP, on_signal);
	}

	Suite *s = suite_create("huge");
	TCase *tc = tcase_create("backing");
	tcase_set_timeout(tc, 90);
	if (skip) {
		printf("test_huge: backing SKIPPED: %s\n", skip);
	} else {
		tcase_add_test(tc, test_hugetlb_region_writes_land_on_shm);
		tcase_add_test(tc, test_hugetlb_region_writes_land_on_tcp);
		tcase_add_test(tc, test_thp_region_is_mapped_huge_and_writes_land);
		tcase_add_test(tc, test_no_pool_no_thp_falls_back_and_says_why);
		tcase_add_test(tc, test_require_without_huge_pages_is_a_clear_error);
		tcase_add_test(tc, test_free_hugetlb_while_fabric_writes_stream_in);
		suite_add_tcase(s, tc);
	}
	TCase *fr = tcase_create("free");
	tcase_set_timeout(fr, 90);
	tcase_add_test(fr, test_free_while_writes_stream_in_on_shm);
	tcase_add_test(fr, test_free_while_writes_stream_in_on_tcp);
	tcase_add_test(fr, test_free_while_fabric_writes_stream_in_on_shm);
	tcase_add_test(fr, test_free_while_fabric_writes_stream_in_on_tcp);
	suite_add_tcase(s, fr);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	knobs_restore(); /* each test's settings go; the host's come back */
	return failed ? 1 : 0;
}
