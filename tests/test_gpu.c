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

#include "mover.h" /* the raw fabric endpoint of the bad-input test */
#include "mv_cuda.h"
#include "mv_wire.h"
#include "mvtest.h"

#include <rdma/fi_endpoint.h>

#ifdef MV_HAVE_CUDA

static struct mv_cuda *cu;

static void gpu_setup_on(void (*movers)(void))
{
	const char *why;
	CUcontext ctx;
	CUdevice dev;

	movers(); /* movers first: fork+exec before this process starts CUDA */
	cu = mv_cuda_load(&why);
	ck_assert_msg(cu, "%s", why);
	ck_assert_int_eq(cu->DeviceGet(&dev, 0), CUDA_SUCCESS);
	ck_assert_int_eq(cu->DevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
	ck_assert_int_eq(cu->CtxSetCurrent(ctx), CUDA_SUCCESS);
}

static void gpu_setup(void)
{
	gpu_setup_on(setup_tcp);
}

/* cudaMalloc-style memory: shared through an IPC handle. */
static CUdeviceptr dev_alloc(size_t n)
{
	CUdeviceptr p;

	ck_assert_int_eq(cu->MemAlloc(&p, n), CUDA_SUCCESS);
	return p;
}

/* A VMM allocation that may be exported as a POSIX fd. */
static CUdeviceptr vmm_alloc(size_t n, size_t *size)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
	                            .requestedHandleTypes =
	                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	size_t gran;
	CUmemGenericAllocationHandle h;
	CUdeviceptr p;

	ck_assert_int_eq(
	    cu->MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
	    CUDA_SUCCESS);
	*size = (n + gran - 1) / gran * gran;
	ck_assert_int_eq(cu->MemCreate(&h, *size, &prop, 0), CUDA_SUCCESS);
	ck_assert_int_eq(cu->MemAddressReserve(&p, *size, 0, 0, 0), CUDA_SUCCESS);
	ck_assert_int_eq(cu->MemMap(p, *size, 0, h, 0), CUDA_SUCCESS);
	CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
	                     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	ck_assert_int_eq(cu->MemSetAccess(p, *size, &a, 1), CUDA_SUCCESS);
	cu->MemRelease(h);
	return p;
}

static void to_dev(CUdeviceptr d, const void *h, size_t n)
{
	ck_assert_int_eq(cu->MemcpyHtoD(d, h, n), CUDA_SUCCESS);
}

static void from_dev(void *h, CUdeviceptr d, size_t n)
{
	ck_assert_int_eq(cu->MemcpyDtoH(h, d, n), CUDA_SUCCESS);
}

/* A sender on A, a receiver on B, B's region imported by A. */
struct gpair {
	struct mvc *a, *b;
	uint32_t peer, imp;
};

static void gpair_open(struct gpair *p)
{
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);

	ck_assert_int_eq(mvc_connect(&p->a, A.sock), 0);
	ck_assert_int_eq(mvc_connect(&p->b, B.sock), 0);
	ck_assert_int_eq(mvc_address(p->b, blob, &len), 0);
	ck_assert_msg(mvc_peer_add(p->a, blob, len, &p->peer) == 0, "%s", mvc_error(p->a));
}

static uint32_t gpair_import(struct gpair *p, uint32_t region)
{
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	uint32_t h;

	ck_assert_int_eq(mvc_region_blob(p->b, region, blob, &len), 0);
	ck_assert_msg(mvc_import(p->a, p->peer, blob, len, &h) == 0, "%s", mvc_error(p->a));
	return h;
}

/* n bytes of device memory on each side of a pair: the source holds want
 * (filled from seed), the target is zeroed; both registered, the target
 * imported by the sender. */
struct gbufs {
	CUdeviceptr s, d;
	struct mvc_mem src, dst;
	uint32_t imp;
};

static void gbufs_open(struct gpair *p, struct gbufs *g, uint8_t *want, size_t n, uint64_t seed)
{
	g->s = dev_alloc(n);
	g->d = dev_alloc(n);
	fill(want, n, seed);
	to_dev(g->s, want, n);
	ck_assert_int_eq(cu->MemsetD8(g->d, 0, n), CUDA_SUCCESS);
	ck_assert_int_eq(mvc_register_cuda(p->a, (void *)g->s, n, &g->src), 0);
	ck_assert_int_eq(mvc_register_cuda(p->b, (void *)g->d, n, &g->dst), 0);
	g->imp = gpair_import(p, g->dst.region);
}

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

static void landing_setup(void)
{
	mover_extra = "--no-gpu-copy"; /* one host, taken as two */
	mover_extra2 = "--gpu-path=staged";
	gpu_setup();
}

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

/* Sends one message from a fresh raw endpoint of the movers' provider to
 * a shard address; 0 once the provider says it went, else -errno. */
static int raw_send(const void *to_addr, const void *buf, size_t len)
{
	struct mv_fabric f;
	struct fi_context2 ctx;
	fi_addr_t to;
	ssize_t ret;

	ck_assert_int_eq(mv_fabric_open(&f, prov, "lo", 0), 0);
	ck_assert_int_eq(mv_fabric_av_insert(&f, to_addr, &to), 0);
	double end = now_s() + 5;
	while ((ret = fi_send(f.ep, buf, len, NULL, to, &ctx)) == -FI_EAGAIN && now_s() < end) {
		struct fi_cq_data_entry e;
		(void)fi_cq_read(f.cq, &e, 1); /* progress */
	}
	for (; !ret && now_s() < end;) {
		struct fi_cq_data_entry e;
		ssize_t n = fi_cq_read(f.cq, &e, 1);
		if (n == 1)
			break;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			fi_cq_readerr(f.cq, &err, 0);
			ret = -(ssize_t)(err.err ? err.err : EIO);
		}
	}
	usleep(100000); /* let the provider hand it over before the close */
	mv_fabric_close(&f);
	return (int)ret;
}

/*
 * Bad input from a peer (issue 17): a landing message whose header names a
 * peer of the receiver (its mover id and its shard's fabric address, as
 * that peer's address blob has them) with a length that is not the
 * message's is what no mover sends. The receiver cuts the peer off: a log
 * line with the reason, and what its clients expect of that peer fails
 * with MVC_CAUSE_PEER_BAD; other peers carry on (a third mover's write and
 * immediate land). The test sends the message from a raw endpoint, since
 * no mover would. Landing buffers are posted only by a mover with a GPU
 * region, so this runs where CUDA does.
 */
START_TEST(test_bad_landing_header_cuts_its_peer_off)
{
	struct gpair p;
	struct mvc_mem dst, hsrc, hdst;
	struct mv_addr_blob ab, bb;
	struct mv_region_blob rb;
	struct mvc_event ev;
	size_t len, blen;
	uint32_t pa;
	char line[1024];

	gpair_open(&p);
	CUdeviceptr d = dev_alloc(1 << 20);
	ck_assert_msg(mvc_register_cuda(p.b, (void *)d, 1 << 20, &dst) == 0, "%s", mvc_error(p.b));
	len = sizeof(ab);
	ck_assert_int_eq(mvc_address(p.a, &ab, &len), 0);
	ck_assert_msg(mvc_peer_add(p.b, &ab, len, &pa) == 0, "%s", mvc_error(p.b));
	ck_assert_int_eq(mvc_imm_expect_from(p.b, pa, 0x51, 1, 51), 0);
	blen = sizeof(bb);
	ck_assert_int_eq(mvc_address(p.b, &bb, &blen), 0);
	len = sizeof(rb);
	ck_assert_int_eq(mvc_region_blob(p.b, dst.region, &rb, &len), 0);

	static uint8_t msg[MV_LAND_HDR + 64];
	struct mv_land_hdr h = {.magic = MV_LAND_MAGIC,
	                        .region = rb.region,
	                        .len = 100, /* 64 come */
	                        .mover_id = ab.mover_id,
	                        .shard = 0,
	                        .addrlen = (uint16_t)ab.addrlen};
	memcpy(h.addr, ab.addr[0], ab.addrlen);
	memcpy(msg, &h, sizeof(h));
	double t0 = now_s();
	ck_assert_int_eq(raw_send(bb.addr[0], msg, sizeof(msg)), 0);

	int failed = 0;
	while (!failed && now_s() - t0 < 10) {
		int n = mvc_wait(p.b, &ev, 1, 100);
		ck_assert_int_ge(n, 0);
		if (n && ev.type == MVC_EV_IMM_COUNT && ev.cookie == 51) {
			ck_assert_int_ne(ev.status, 0);
			ck_assert_int_eq(ev.cause, MVC_CAUSE_PEER_BAD);
			failed = 1;
		}
	}
	ck_assert_msg(failed, "the expectation of the peer that sent garbage did not fail in 10 s");
	printf("bad landing header: the expectation failed after %.0f ms: %s\n",
	       (now_s() - t0) * 1e3, ev.msg);
	ck_assert_int_ge(log_grep(&B, "landing header says 100 bytes; 64 came", line, sizeof(line)),
	                 1);
	ck_assert_msg(strstr(line, "cut off"), "%s", line);

	/* Everyone else carries on: a third mover's write into B lands. */
	mover_start(&C, "c", 2);
	struct mvc *c;
	uint32_t pb, imp;
	uint8_t blob[MVC_BLOB_MAX];
	ck_assert_int_eq(mvc_connect(&c, C.sock), 0);
	ck_assert_int_eq(mvc_alloc(c, 4096, &hsrc), 0);
	ck_assert_int_eq(mvc_alloc(p.b, 4096, &hdst), 0);
	fill(hsrc.addr, 4096, 52);
	ck_assert_msg(mvc_peer_add(c, &bb, blen, &pb) == 0, "%s", mvc_error(c));
	len = sizeof(blob);
	ck_assert_int_eq(mvc_region_blob(p.b, hdst.region, blob, &len), 0);
	ck_assert_msg(mvc_import(c, pb, blob, len, &imp) == 0, "%s", mvc_error(c));
	ck_assert_int_eq(mvc_write(c, hsrc.region, 0, imp, 0, 4096), 0);
	landed(c, imp, p.b, 52);
	ck_assert(!memcmp(hsrc.addr, hdst.addr, 4096));
	mvc_disconnect(c);
	mvc_disconnect(p.a);
	mvc_disconnect(p.b);
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

/* ---- quotas: freed GPU memory the mover still holds ---- */

static void quota_setup(void)
{
	mover_extra = "--quota-client-bytes=3M";
	mover_extra2 = "--quota-uid-bytes=4M";
	gpu_setup();
	mover_extra = mover_extra2 = NULL;
}

/* A freed GPU region stays mapped by the mover through its quarantine, its
 * device memory allocated whatever the client's free, so it still counts
 * against its client's and its uid's registered bytes, the client gone or
 * not: registering and freeing in a loop holds no more than the quota. */
START_TEST(test_freed_gpu_region_counts_against_quota_until_reaped)
{
	const size_t mb = 1u << 20;
	CUdeviceptr p = dev_alloc(2 * mb), p2 = dev_alloc(2 * mb);
	struct mvc_mem g, g2, h;
	struct mvc *c, *d;

	ck_assert_int_eq(mvc_connect(&c, A.sock), 0);
	ck_assert_msg(mvc_register_cuda(c, (void *)p, 2 * mb, &g) == 0, "%s", mvc_error(c));
	ck_assert_int_eq(mvc_free(c, &g), 0);
	/* Its 2 MiB in quarantine and 2 more pass the client's 3. */
	ck_assert_int_eq(mvc_register_cuda(c, (void *)p2, 2 * mb, &g2), -EDQUOT);
	ck_assert_msg(strstr(mvc_error(c), "quota_client_bytes is 3 MiB: this client holds 2 MiB "
	                                   "registered (2 MiB of it freed GPU memory, kept up to "),
	              "%s", mvc_error(c));
	/* A megabyte of host memory fits beside them. */
	ck_assert_msg(mvc_alloc(c, mb, &h) == 0, "%s", mvc_error(c));
	ck_assert_int_eq(mvc_free(c, &h), 0);
	mvc_disconnect(c);

	/* Gone, the client's quarantined 2 MiB still count against its uid's
	 * 4: a new client registers 2 MiB, and then not one more. */
	ck_assert_int_eq(mvc_connect(&d, A.sock), 0);
	ck_assert_msg(mvc_register_cuda(d, (void *)p2, 2 * mb, &g2) == 0, "%s", mvc_error(d));
	ck_assert_int_eq(mvc_alloc(d, mb, &h), -EDQUOT);
	ck_assert_msg(
	    strstr(mvc_error(d), "quota_uid_bytes is 4 MiB: uid ") &&
	        strstr(mvc_error(d), " holds 4 MiB registered (2 MiB of it freed GPU memory"),
	    "%s", mvc_error(d));
	mvc_disconnect(d);
	cu->MemFree(p);
	cu->MemFree(p2);
}
END_TEST

/* In a child, so the parent stays free of CUDA: "" if usable, else why not. */
static int gpu_usable(char *why, size_t len)
{
	int fds[2];

	if (pipe(fds))
		return 0;
	pid_t pid = fork();
	if (pid == 0) {
		const char *w = NULL;
		struct mv_cuda *c = mv_cuda_load(&w);
		if (!c && write(fds[1], w, strlen(w)) < 0)
			_exit(2);
		_exit(c ? 0 : 1);
	}
	close(fds[1]);
	ssize_t n = read(fds[0], why, len - 1);
	why[n > 0 ? n : 0] = 0;
	close(fds[0]);
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

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
	TCase *tq = tcase_create("quota");
	tcase_add_checked_fixture(tq, quota_setup, teardown);
	tcase_set_timeout(tq, 60);
	tcase_add_test(tq, test_freed_gpu_region_counts_against_quota_until_reaped);
	suite_add_tcase(s, tq);
	TCase *tl = tcase_create("landing");
	tcase_add_checked_fixture(tl, landing_setup, teardown);
	tcase_set_timeout(tl, 120);
	tcase_add_test(tl, test_host_to_gpu_by_landing_messages);
	tcase_add_test(tl, test_gpu_to_host_staged_through_bounce_buffers);
	tcase_add_test(tl, test_gpu_source_freed_mid_write_disturbs_nobody);
	tcase_add_test(tl, test_gpu_target_freed_mid_write_disturbs_nobody);
	tcase_add_test(tl, test_gpu_to_gpu_staged_on_both_sides);
	tcase_add_test(tl, test_bad_landing_header_cuts_its_peer_off);
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
