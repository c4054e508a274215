/* SPDX-License-Identifier: MIT */
/*
 * GPU memory through the mover, on a machine with a CUDA device (skipped
 * with the reason elsewhere): cudaMalloc and VMM memory registered by their
 * owners; GPU to GPU and host to GPU on one host (CUDA copies, path 2), GPU
 * to host (staged through pinned bounce buffers, path 3), paged writes of
 * scattered device pages, immediates after the data; data checked on the
 * device side by copying it back; the path each transfer took read from the
 * stats; a GPU destination no path reaches refused with the reason.
 *
 * The check parent never touches CUDA: a process forked after CUDA starts
 * cannot use it, and every test runs in a forked child that starts CUDA
 * itself.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>

#include "mv_wire.h"
#include "mvtest.h"

#ifdef MV_HAVE_CUDA
#include "gpu_util.h"

START_TEST(test_gpu_to_gpu_same_host_by_cuda_copy)
{
	struct gpair p;
	struct mvc_mem src, dst;
	const size_t n = 24u << 20;
	size_t vsize;
	uint8_t *want = malloc(n), *got = malloc(n);
	struct mvc_event ev[4];

	gpair_open(&p);
	CUdeviceptr s = dev_alloc(n), d = vmm_alloc(n, &vsize);
	fill(want, n, 7);
	to_dev(s, want, n);
	ck_assert_int_eq(cu->MemsetD8(d, 0, vsize), CUDA_SUCCESS);
	ck_assert_msg(mvc_register_cuda(p.a, (void *)s, n, &src) == 0, "%s", mvc_error(p.a));
	ck_assert_msg(mvc_register_cuda(p.b, (void *)d, n, &dst) == 0, "%s", mvc_error(p.b));
	ck_assert_uint_eq(src.flags & MVC_MEM_GPU, MVC_MEM_GPU);
	uint32_t imp = gpair_import(&p, dst.region);
	ck_assert_int_eq(mvc_write(p.a, src.region, 0, imp, 0, n), 0);
	ck_assert_int_eq(mvc_write_imm(p.a, imp, 99), 0);
	ck_assert_int_eq(mvc_submit(p.a, 1), 0);
	int got_imm = 0;
	double end = now_s() + 20;
	while (!got_imm && now_s() < end) {
		int k = mvc_wait(p.b, ev, 4, 200);
		for (int i = 0; i < k; i++)
			got_imm |= ev[i].type == MVC_EV_IMM && ev[i].imm == 99;
	}
	ck_assert_msg(got_imm, "no immediate");
	/* The immediate came after the data: it is all on the device now. */
	from_dev(got, d, n);
	ck_assert_msg(!memcmp(got, want, n), "device data differs after the immediate");
	struct mvc_event e = wait_batch(p.a, 1, 20);
	ck_assert_msg(e.status == 0, "%s", e.msg);
	ck_assert_uint_eq(e.bytes, n);
	usleep(50000);
	ck_assert_uint_eq(stat_sum(&A, "\"copy_bytes\""), n);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
	free(want);
	free(got);
}
END_TEST

START_TEST(test_host_to_gpu_same_host)
{
	struct gpair p;
	struct mvc_mem src, dst;
	const size_t n = 5u << 20;
	uint8_t *got = malloc(n);

	gpair_open(&p);
	CUdeviceptr d = dev_alloc(n);
	ck_assert_int_eq(cu->MemsetD8(d, 0, n), CUDA_SUCCESS);
	ck_assert_int_eq(mvc_alloc(p.a, n, &src), 0);
	fill(src.addr, n, 11);
	ck_assert_msg(mvc_register_cuda(p.b, (void *)d, n, &dst) == 0, "%s", mvc_error(p.b));
	uint32_t imp = gpair_import(&p, dst.region);
	ck_assert_int_eq(mvc_write(p.a, src.region, 4096, imp, 1000, n - 4096), 0);
	submit_ok(p.a, 2);
	from_dev(got, d, n);
	ck_assert(!memcmp(got + 1000, (uint8_t *)src.addr + 4096, n - 4096));
	for (int i = 0; i < 1000; i++)
		ck_assert_msg(got[i] == 0, "byte %d before the write changed", i);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
	free(got);
}
END_TEST

START_TEST(test_gpu_to_host_staged_through_bounce_buffers)
{
	struct gpair p;
	struct mvc_mem src, dst;
	const size_t n = 40u << 20; /* ten bounce chunks: the pool of 8 must cycle */
	uint8_t *want = malloc(n);

	gpair_open(&p);
	CUdeviceptr s = dev_alloc(n);
	fill(want, n, 13);
	to_dev(s, want, n);
	ck_assert_msg(mvc_register_cuda(p.a, (void *)s, n, &src) == 0, "%s", mvc_error(p.a));
	ck_assert_int_eq(mvc_alloc(p.b, n, &dst), 0);
	memset(dst.addr, 0, n);
	uint32_t imp = gpair_import(&p, dst.region);
	uint64_t before = stat_sum(&A, "\"staged_bytes\"");
	for (uint64_t r = 0; r < 3; r++) {
		ck_assert_int_eq(mvc_write(p.a, src.region, 0, imp, 0, n), 0);
		submit_ok(p.a, 10 + r);
		ck_assert_msg(!memcmp(dst.addr, want, n), "round %llu: host data differs",
		              (unsigned long long)r);
		memset(dst.addr, 0, n);
	}
	usleep(50000);
	ck_assert_uint_eq(stat_sum(&A, "\"staged_bytes\"") - before, 3 * n);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
	free(want);
}
END_TEST

START_TEST(test_paged_write_of_scattered_device_pages)
{
	struct gpair p;
	struct gbufs g;
	enum { NP = 1500, PS = 16384 };
	static uint32_t sp[NP], dp[NP];
	const size_t n = (size_t)NP * PS * 2;
	uint8_t *want = malloc(n), *got = malloc(n);

	gpair_open(&p);
	gbufs_open(&p, &g, want, n, 17);
	for (uint32_t i = 0; i < NP; i++) {
		sp[i] = (i * 7919) % (2 * NP);
		dp[i] = (i * 104729 + 3) % (2 * NP);
	}
	/* Distinct destinations: 104729 and 2*NP share no factor. */
	struct mvc_pages pg = {.src = g.src.region,
	                       .dst = g.imp,
	                       .src_stride = PS,
	                       .dst_stride = PS,
	                       .page_size = PS,
	                       .src_pages = sp,
	                       .dst_pages = dp,
	                       .npages = NP};
	ck_assert_int_eq(mvc_write_paged(p.a, &pg), 0);
	ck_assert_int_eq(mvc_imm_expect(p.b, 5, 1, 55), 0);
	ck_assert_int_eq(mvc_write_imm(p.a, g.imp, 5), 0);
	submit_ok(p.a, 3);
	struct mvc_event ev;
	ck_assert_int_eq(mvc_wait(p.b, &ev, 1, 10000), 1);
	ck_assert_int_eq(ev.type, MVC_EV_IMM_COUNT);
	from_dev(got, g.d, n);
	for (uint32_t i = 0; i < NP; i++)
		ck_assert_msg(!memcmp(got + (size_t)dp[i] * PS, want + (size_t)sp[i] * PS, PS),
		              "page %u (src %u -> dst %u) differs on the device", i, sp[i], dp[i]);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
	free(want);
	free(got);
}
END_TEST

START_TEST(test_gpu_destination_no_path_reaches_is_refused)
{
	struct gpair p;
	struct mvc_mem dst;
	struct mv_region_blob blob;
	size_t len = sizeof(blob);
	uint32_t h;

	gpair_open(&p);
	CUdeviceptr d = dev_alloc(1 << 20);
	ck_assert_int_eq(mvc_register_cuda(p.b, (void *)d, 1 << 20, &dst), 0);
	ck_assert_int_eq(mvc_region_blob(p.b, dst.region, &blob, &len), 0);
	ck_assert(blob.flags & MV_BLOB_GPU);
	if (!(blob.flags & MV_BLOB_NO_FABRIC)) {
		fprintf(stderr, "the provider registers GPU memory: nothing to refuse\n");
		return;
	}
	ck_assert(blob.flags & MV_BLOB_LANDING);
	blob.host[0] ^= 0xff;           /* as if it were on another host */
	blob.flags &= ~MV_BLOB_LANDING; /* whose mover could not take landing messages */
	ck_assert_int_eq(mvc_import(p.a, p.peer, &blob, len, &h), -EOPNOTSUPP);
	ck_assert_msg(strstr(mvc_error(p.a), "neither register nor take as landing"), "%s",
	              mvc_error(p.a));
	/* Not CUDA memory at all: named. */
	char host[64];
	struct mvc_mem bad;
	ck_assert_int_eq(mvc_register_cuda(p.a, host, sizeof(host), &bad), -EINVAL);
	ck_assert_msg(strstr(mvc_error(p.a), "not CUDA device memory"), "%s", mvc_error(p.a));
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
}
END_TEST

START_TEST(test_host_to_gpu_by_landing_messages)
{
	struct gpair p;
	struct mvc_mem src, dst;
	const size_t n = 41u << 20; /* eleven chunks, the last short */
	uint8_t *got = malloc(n);
	struct mvc_event ev;

	gpair_open(&p);
	CUdeviceptr d = dev_alloc(n + 8192);
	ck_assert_int_eq(cu->MemsetD8(d, 0, n + 8192), CUDA_SUCCESS);
	ck_assert_int_eq(mvc_alloc(p.a, n, &src), 0);
	fill(src.addr, n, 23);
	ck_assert_msg(mvc_register_cuda(p.b, (void *)d, n + 8192, &dst) == 0, "%s", mvc_error(p.b));
	uint32_t imp = gpair_import(&p, dst.region);
	ck_assert_int_eq(mvc_imm_expect(p.b, 31, 1, 3131), 0);
	ck_assert_int_eq(mvc_write(p.a, src.region, 0, imp, 4096, n), 0);
	ck_assert_int_eq(mvc_write_imm(p.a, imp, 31), 0);
	submit_ok(p.a, 4);
	ck_assert_int_eq(mvc_wait(p.b, &ev, 1, 10000), 1);
	ck_assert_int_eq(ev.type, MVC_EV_IMM_COUNT);
	/* Acked only once on the device, so the immediate finds it there. */
	from_dev(got, d + 4096, n);
	ck_assert_msg(!memcmp(got, src.addr, n), "device data differs after the immediate");
	usleep(50000);
	ck_assert_uint_eq(stat_sum(&B, "\"staged_bytes\""), n); /* landed by B */
	ck_assert_uint_eq(stat_sum(&A, "\"copy_bytes\""), 0);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
	free(got);
}
END_TEST

START_TEST(test_gpu_to_gpu_staged_on_both_sides)
{
	struct gpair p;
	struct gbufs g;
	const size_t n = 40u << 20; /* more chunks than the bounce and landing pools */
	uint8_t *want = malloc(n), *got = malloc(n);

	/* GPU to a GPU the fabric cannot reach: through the sender's bounce
	 * chunks, as landing messages, into the target's GPU. */
	gpair_open(&p);
	gbufs_open(&p, &g, want, n, 29);
	for (uint64_t r = 0; r < 2; r++) {
		ck_assert_int_eq(mvc_write(p.a, g.src.region, 0, g.imp, 0, n), 0);
		submit_ok(p.a, 20 + r);
		from_dev(got, g.d, n);
		ck_assert_msg(!memcmp(got, want, n), "round %llu: device data differs",
		              (unsigned long long)r);
		ck_assert_int_eq(cu->MemsetD8(g.d, 0, n), CUDA_SUCCESS);
	}
	usleep(50000);
	ck_assert_uint_eq(stat_sum(&B, "\"staged_bytes\""), 2 * n); /* landed by B */
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
	free(want);
	free(got);
}
END_TEST

/* A GPU region freed by its owner (source or target) while a write through
 * it is in flight: the write's batch completes once (done or failed, never
 * hung), and the mover's GPU work goes on for everyone: a fresh pair of
 * regions moves and verifies right after. */
static void free_mid_write(int free_target)
{
	struct gpair p;
	struct gbufs g, h;
	const size_t n = 96u << 20, m = 6u << 20;
	uint8_t *want = malloc(m), *got = malloc(m), *big = malloc(n);

	gpair_open(&p);
	gbufs_open(&p, &g, big, n, 51);
	ck_assert_int_eq(mvc_write(p.a, g.src.region, 0, g.imp, 0, n), 0);
	ck_assert_int_eq(mvc_submit(p.a, 60), 0);
	if (free_target)
		ck_assert_msg(mvc_free(p.b, &g.dst) == 0, "%s", mvc_error(p.b));
	else
		ck_assert_msg(mvc_free(p.a, &g.src) == 0, "%s", mvc_error(p.a));
	struct mvc_event e = wait_batch(p.a, 60, 30);
	printf("test_gpu: %s freed mid-write: batch %s%s\n", free_target ? "target" : "source",
	       e.status ? "failed: " : "done", e.status ? e.msg : "");
	/* Everyone's GPU work goes on: a second client of each mover too. */
	struct gpair q;
	gpair_open(&q);
	gbufs_open(&q, &h, want, m, 53);
	ck_assert_int_eq(mvc_write(q.a, h.src.region, 0, h.imp, 0, m), 0);
	landed(q.a, h.imp, q.b, 61);
	from_dev(got, h.d, m);
	ck_assert_msg(!memcmp(got, want, m), "device data differs after the free");
	mvc_disconnect(q.a);
	mvc_disconnect(q.b);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
	free(want);
	free(got);
	free(big);
}

START_TEST(test_gpu_source_freed_mid_write_disturbs_nobody)
{
	free_mid_write(0);
}
END_TEST

START_TEST(test_gpu_target_freed_mid_write_disturbs_nobody)
{
	free_mid_write(1);
}
END_TEST

/* ---- path 1: the provider reads and writes GPU memory (FI_HMEM) ---- */

static void fabric_setup_shm(void)
{
	mover_extra = "--no-gpu-copy"; /* one host, taken as two */
	mover_extra2 = "--gpu-path=fabric";
	gpu_setup_on(setup_shm);
}

static void fabric_setup_tcp(void)
{
	mover_extra = "--no-gpu-copy";
	mover_extra2 = "--gpu-path=fabric";
	gpu_setup_on(setup_tcp);
}

/* Path 1 runs only where the provider registers GPU memory: else the test
 * says why (the mover's own log line) and passes nothing off as tested. */
static int fabric_offered(void)
{
	char line[512];

	if (log_grep(&A, "the provider registers it", line, sizeof(line)))
		return 1;
	log_grep(&A, "GPU memory:", line, sizeof(line));
	printf("test_gpu: path 1 on %s SKIPPED: %s\n", prov,
	       *line ? strstr(line, "GPU memory:") : "?");
	return 0;
}

START_TEST(test_gpu_to_gpu_by_the_fabric_with_immediate)
{
	struct gpair p;
	struct gbufs g;
	const size_t n = (9u << 20) + 4096; /* chunks and a short tail */
	uint8_t *want = malloc(n), *got = malloc(n);
	char line[512];

	if (!fabric_offered())
		return;
	gpair_open(&p);
	gbufs_open(&p, &g, want, n, 31);
	ck_assert_int_eq(mvc_write(p.a, g.src.region, 0, g.imp, 0, n), 0);
	landed(p.a, g.imp, p.b, 40); /* the immediate after every byte landed */
	from_dev(got, g.d, n);
	ck_assert_msg(!memcmp(got, want, n), "device data differs");
	usleep(50000);
	ck_assert_uint_eq(stat_sum(&A, "\"hmem_bytes\""), n);
	ck_assert_uint_eq(stat_sum(&A, "\"staged_bytes\""), 0);
	ck_assert_msg(log_grep(&A, "path fabric (forced by gpu_path)", line, sizeof(line)),
	              "the sender's log does not say the write took path 1");
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
	free(want);
	free(got);
}
END_TEST

START_TEST(test_host_and_gpu_both_ways_by_the_fabric)
{
	struct gpair p;
	const size_t n = 5u << 20;
	uint8_t *got = malloc(n), *want = malloc(n);
	struct mvc_mem hsrc, hdst, gsrc, gdst;

	if (!fabric_offered())
		return;
	gpair_open(&p);
	CUdeviceptr s = dev_alloc(n), d = dev_alloc(n);
	fill(want, n, 37);
	to_dev(s, want, n);
	ck_assert_int_eq(cu->MemsetD8(d, 0, n), CUDA_SUCCESS);
	ck_assert_int_eq(mvc_alloc(p.a, n, &hsrc), 0);
	ck_assert_int_eq(mvc_alloc(p.b, n, &hdst), 0);
	ck_assert_int_eq(mvc_register_cuda(p.a, (void *)s, n, &gsrc), 0);
	ck_assert_int_eq(mvc_register_cuda(p.b, (void *)d, n, &gdst), 0);
	uint32_t ih = gpair_import(&p, hdst.region), ig = gpair_import(&p, gdst.region);
	/* GPU to host memory, then host memory to GPU, both by the fabric. */
	ck_assert_int_eq(mvc_write(p.a, gsrc.region, 0, ih, 0, n), 0);
	landed(p.a, ih, p.b, 41);
	ck_assert_msg(!memcmp(hdst.addr, want, n), "host data differs");
	fill(hsrc.addr, n, 43);
	ck_assert_int_eq(mvc_write(p.a, hsrc.region, 0, ig, 0, n), 0);
	landed(p.a, ig, p.b, 42);
	from_dev(got, d, n);
	ck_assert_msg(!memcmp(got, hsrc.addr, n), "device data differs");
	usleep(50000);
	ck_assert_uint_eq(stat_sum(&A, "\"hmem_bytes\""), 2 * n);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
	free(want);
	free(got);
}
END_TEST

/* With no path forced, the movers measured the paths at start and say what
 * they chose for each kind of write, and why, in mvstat. */
START_TEST(test_paths_chosen_by_measurement_are_in_mvstat)
{
	const char *b = getenv("MV_BUILD") ? getenv("MV_BUILD") : "build";
	char cmd[512], out[32768] = "", line[512];

	snprintf(cmd, sizeof(cmd), "%s/bin/mvstat --socket %s --json --interval 0.05", b, A.sock);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	pclose(f);
	out[n] = 0;
	ck_assert_msg(strstr(out, "\"gpu\":{\"measured\":true"), "%.400s",
	              strstr(out, "\"gpu\"") ? strstr(out, "\"gpu\"") : out);
	ck_assert_msg(strstr(out, "\"why\":\"measured "), "no measured choice in %.400s", out);
	/* A same-host GPU destination: CUDA copies beat any fabric here. */
	ck_assert_msg(strstr(out, "\"src\":\"gpu\",\"dst\":\"gpu\",\"same_host\":true,"
	                          "\"path\":\"copy\""),
	              "%.600s", strstr(out, "\"paths\""));
	ck_assert_msg(log_grep(&A, "GPU paths measured", line, sizeof(line)),
	              "the log does not give the measured rates");
}
END_TEST

int main(void)
{
	char why[256];

	if (!gpu_usable(why, sizeof(why))) {
		printf("test_gpu: SKIPPED: %s\n", why);
		return 0;
	}
	Suite *s = suite_create("gpu");
	TCase *tc = tcase_create("paths");
	tcase_add_checked_fixture(tc, gpu_setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_gpu_to_gpu_same_host_by_cuda_copy);
	tcase_add_test(tc, test_host_to_gpu_same_host);
	tcase_add_test(tc, test_paged_write_of_scattered_device_pages);
	tcase_add_test(tc, test_gpu_destination_no_path_reaches_is_refused);
	tcase_add_test(tc, test_paths_chosen_by_measurement_are_in_mvstat);
	tcase_add_test(tc, test_gpu_source_freed_mid_write_disturbs_nobody);
	tcase_add_test(tc, test_gpu_target_freed_mid_write_disturbs_nobody);
	suite_add_tcase(s, tc);
	/* Path 1 on each provider here: run where it registers GPU memory. */
	void (*fab[])(void) = {fabric_setup_shm, fabric_setup_tcp};
	for (int i = 0; i < 2; i++) {
		TCase *tf = tcase_create(i ? "fabric-tcp" : "fabric-shm");
		tcase_add_checked_fixture(tf, fab[i], teardown);
		tcase_set_timeout(tf, 120);
		tcase_add_test(tf, test_gpu_to_gpu_by_the_fabric_with_immediate);
		tcase_add_test(tf, test_host_and_gpu_both_ways_by_the_fabric);
		tcase_add_test(tf, test_gpu_source_freed_mid_write_disturbs_nobody);
		tcase_add_test(tf, test_gpu_target_freed_mid_write_disturbs_nobody);
		suite_add_tcase(s, tf);
	}
	TCase *tl = tcase_create("landing");
	tcase_add_checked_fixture(tl, landing_setup, teardown);
	tcase_set_timeout(tl, 120);
	tcase_add_test(tl, test_host_to_gpu_by_landing_messages);
	tcase_add_test(tl, test_gpu_to_host_staged_through_bounce_buffers);
	tcase_add_test(tl, test_gpu_source_freed_mid_write_disturbs_nobody);
	tcase_add_test(tl, test_gpu_target_freed_mid_write_disturbs_nobody);
	tcase_add_test(tl, test_gpu_to_gpu_staged_on_both_sides);
	suite_add_tcase(s, tl);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

#else
int main(void)
{
	printf("test_gpu: SKIPPED: built without the CUDA toolkit (no cuda.h)\n");
	return 0;
}
#endif
