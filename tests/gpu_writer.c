/* SPDX-License-Identifier: MIT */
/*
 * A client that writes from its GPU memory, for tests that need one run as
 * another uid (test_gpu_chunks): a process that starts CUDA must not fork,
 * so the suite forks, drops to the uid and runs this. It connects to the
 * mover at SOCK, makes BYTES of device memory holding fill SEED (xorshift,
 * as mvtest.h's fill()), adds the peer and imports the region of the two
 * hex blobs, submits COUNT batches of one write of BYTES each, to offsets
 * 0, BYTES, ..., and waits up to 20 s for them. Prints one line, "ok SECONDS"
 * or the first failure in words, and exits 0 only when every batch
 * completed with status 0.
 *
 *   gpu_writer SOCK PEER_HEX REGION_HEX BYTES COUNT SEED
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mv_cuda.h"
#include "mvc.h"

#ifdef MV_HAVE_CUDA

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The blob hex-decoded into out; its length, or 0 when it is not hex. */
static size_t unhex(const char *hex, uint8_t *out, size_t max)
{
	size_t n = strlen(hex) / 2;

	if (strlen(hex) % 2 || n > max)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return 0;
		out[i] = (uint8_t)v;
	}
	return n;
}

static int fail(const char *what, const char *why)
{
	printf("%s: %s\n", what, why);
	return 1;
}

int main(int argc, char **argv)
{
	uint8_t addr[MVC_BLOB_MAX], blob[MVC_BLOB_MAX];
	const char *why = "";
	struct mv_cuda *cu;
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr d;
	struct mvc *c;
	struct mvc_mem g;
	uint32_t peer, imp;

	if (argc != 7)
		return fail("usage", "gpu_writer SOCK PEER_HEX REGION_HEX BYTES COUNT SEED");
	size_t alen = unhex(argv[2], addr, sizeof(addr)), blen = unhex(argv[3], blob, sizeof(blob));
	size_t bytes = strtoull(argv[4], NULL, 0);
	int count = atoi(argv[5]);
	uint64_t x = strtoull(argv[6], NULL, 0) * 0x9e3779b97f4a7c15ull + 1;
	if (!alen || !blen || !bytes || bytes % 8 || count < 1)
		return fail("arguments", "a blob is not hex, or BYTES or COUNT is off");
	if (!(cu = mv_cuda_load(&why)))
		return fail("cuda", why);
	if (cu->DeviceGet(&dev, 0) || cu->DevicePrimaryCtxRetain(&ctx, dev) ||
	    cu->CtxSetCurrent(ctx) || cu->MemAlloc(&d, bytes))
		return fail("cuda", "no device memory");
	uint8_t *h = malloc(bytes);
	if (!h)
		return fail("malloc", "no host memory");
	for (size_t i = 0; i < bytes / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(h + 8 * i, &x, 8);
	}
	if (cu->MemcpyHtoD(d, h, bytes))
		return fail("cuda", "copy to the device failed");
	if (mvc_connect(&c, argv[1]))
		return fail("connect", argv[1]);
	if (mvc_register_cuda(c, (void *)d, bytes, &g) || mvc_peer_add(c, addr, alen, &peer) ||
	    mvc_import(c, peer, blob, blen, &imp))
		return fail("setup", mvc_error(c));
	double t0 = now_s();
	for (int i = 0; i < count; i++)
		if (mvc_write(c, g.region, 0, imp, (uint64_t)i * bytes, bytes) ||
		    mvc_submit(c, (uint64_t)i))
			return fail("submit", mvc_error(c));
	for (int left = count; left > 0;) {
		struct mvc_event ev;
		int n = mvc_wait(c, &ev, 1, 200);
		if (n < 0)
			return fail("wait", mvc_error(c));
		if (now_s() - t0 > 20) {
			printf("%d of %d batches still out after 20 s\n", left, count);
			return 1;
		}
		if (n && ev.type == MVC_EV_BATCH) {
			if (ev.status) {
				printf("batch %llu, %.2f s in: %s\n", (unsigned long long)ev.cookie,
				       now_s() - t0, ev.msg);
				return 1;
			}
			left--;
		}
	}
	printf("ok %.3f\n", now_s() - t0);
	mvc_disconnect(c);
	return 0;
}
#else
int main(void)
{
	printf("gpu_writer: built without the CUDA toolkit (no cuda.h)\n");
	return 2;
}
#endif
