/* SPDX-License-Identifier: MIT */
/*
 * mvgpubench: GPU memory through the mover, against what the hardware does
 * without it, measured in the same run, interleaved, medians:
 *   path 2 (same host): GPU to GPU through two movers (CUDA copies between
 *          IPC-opened memory) against cuMemcpyDtoD in one process;
 *   path 3 (staged):    GPU to another process's host memory through the
 *          movers' pinned bounce buffers and the fabric, against the lesser
 *          of the pinned device-to-host copy rate and the fabric's host to
 *          host rate through the same movers.
 * Bars: path 2 >= 0.9x the copy ceiling from 1 MiB; path 3 >= 0.8x the
 * lesser rate. Needs a CUDA device; says why not and exits 0 without one.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mv_cuda.h"
#include "mvc.h"
#include "mvtool.h"

#ifdef MV_HAVE_CUDA

#define REPS   5
#define WINDOW 16 /* transfers in flight, through the mover and in the baselines */

static pid_t start_mover(const char *bin, const char *prov, int shards, const char *sock,
                         const char *log)
{
	char ns[16];
	pid_t pid = fork();

	snprintf(ns, sizeof(ns), "%d", shards);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		freopen(log, "w", stderr);
		if (!strcmp(prov, "tcp"))
			execl(bin, bin, "--provider", "tcp", "--iface", "lo", "--shards", ns,
			      "--socket", sock, "--no-config", (char *)NULL);
		else
			execl(bin, bin, "--provider", prov, "--shards", ns, "--socket", sock,
			      "--no-config", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 600; i++) {
		struct stat st;
		if (stat(sock, &st) == 0)
			return pid;
		usleep(50000);
	}
	fprintf(stderr, "mvgpubench: mover did not start; see %s\n", log);
	exit(1);
}

/* The receiver: GPU and host pools, blobs to the sender, then waits. */
struct blobs {
	size_t alen, glen, hlen;
	uint8_t addr[MVC_BLOB_MAX], gpu[MVC_BLOB_MAX], host[MVC_BLOB_MAX];
};

static int receiver(const char *sock, size_t max, int to, int from)
{
	const char *why;
	struct mv_cuda *cu = mv_cuda_load(&why);
	struct mvc *c;
	struct mvc_mem g, h;
	struct blobs b = {.alen = MVC_BLOB_MAX, .glen = MVC_BLOB_MAX, .hlen = MVC_BLOB_MAX};
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr d;
	char x;

	if (!cu || cu->DeviceGet(&dev, 0) || cu->DevicePrimaryCtxRetain(&ctx, dev) ||
	    cu->CtxSetCurrent(ctx) || cu->MemAlloc(&d, max))
		return 1;
	if (mvc_connect(&c, sock) || mvc_register_cuda(c, (void *)d, max, &g) ||
	    mvc_alloc(c, max, &h) || mvc_address(c, b.addr, &b.alen) ||
	    mvc_region_blob(c, g.region, b.gpu, &b.glen) ||
	    mvc_region_blob(c, h.region, b.host, &b.hlen)) {
		fprintf(stderr, "mvgpubench receiver: %s\n",
		        c ? mvc_error(c) : mvc_connect_error());
		return 1;
	}
	if (write(to, &b, sizeof(b)) != sizeof(b))
		return 1;
	return read(from, &x, 1) < 0; /* until the sender is done */
}

/* Bytes per second of `size`-byte batches from src to dst through the mover. */
static double through(struct mvc *c, uint32_t src, uint32_t dst, size_t size, double secs)
{
	struct mvc_event ev[WINDOW];
	uint64_t cookie = 0, done = 0, inflight = 0;
	double t0 = now_s(), end = t0 + secs;

	for (;;) {
		while (inflight < WINDOW && now_s() < end) {
			if (mvc_write(c, src, 0, dst, 0, size) || mvc_submit(c, ++cookie)) {
				fprintf(stderr, "mvgpubench: %s\n", mvc_error(c));
				exit(1);
			}
			inflight++;
		}
		if (!inflight)
			break;
		int n = mvc_wait(c, ev, WINDOW, 20000);
		if (n <= 0) {
			fprintf(stderr, "mvgpubench: no completion in 20 s: %s\n", mvc_error(c));
			exit(1);
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].type != MVC_EV_BATCH)
				continue;
			if (ev[i].status) {
				fprintf(stderr, "mvgpubench: batch failed: %s\n", ev[i].msg);
				exit(1);
			}
			done += ev[i].bytes;
			inflight--;
		}
	}
	return (double)done / (now_s() - t0);
}

/* The same bytes with a plain CUDA copy on one stream: the ceiling. */
static double copy_rate(struct mv_cuda *cu, CUdeviceptr dst_d, void *dst_h, CUdeviceptr src,
                        size_t size, double secs, CUstream st)
{
	uint64_t n = 0;
	double t0 = now_s();

	while (now_s() - t0 < secs) {
		for (int i = 0; i < WINDOW; i++) {
			if (dst_h)
				cu->MemcpyDtoHAsync(dst_h, src, size, st);
			else
				cu->MemcpyDtoDAsync(dst_d, src, size, st);
		}
		cu->StreamSynchronize(st);
		n += WINDOW;
	}
	return (double)(n * size) / (now_s() - t0);
}

int main(int argc, char **argv)
{
	const char *prov = "shm", *why;
	int shards = 2, c;
	double secs = 0.5;
	size_t sizes[] = {1u << 20, 4u << 20, 16u << 20, 64u << 20, 256u << 20};
	int nsizes = 5;

	static const struct option lo[] = {
	    {"provider", required_argument, 0, 'p'},
	    {"shards", required_argument, 0, 'n'},
	    {"seconds", required_argument, 0, 't'},
	    {"quick", no_argument, 0, 'q'},
	    {"help", no_argument, 0, 'h'},
	    {"version", no_argument, 0, 'V'},
	    {0, 0, 0, 0},
	};
	while ((c = getopt_long(argc, argv, "p:n:t:qhV", lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			prov = optarg;
			break;
		case 'n':
			shards = atoi(optarg);
			break;
		case 't':
			secs = atof(optarg);
			break;
		case 'q':
			nsizes = 3;
			secs = 0.25;
			break;
		case 'V':
			printf("mvgpubench %s\n", MVC_VERSION);
			return 0;
		case 'h':
		default:
			fprintf(c == 'h' ? stdout : stderr,
			        "usage: mvgpubench [-p tcp|shm] [-n shards] [-t seconds] [-q]\n"
			        "GPU memory through two movers on this host against what the\n"
			        "hardware does without them (path 2: cuMemcpyDtoD; path 3: the\n"
			        "lesser of the device-to-host copy and the fabric's host rate);\n"
			        "says why and exits 0 without a CUDA device.\n"
			        "  -p, --provider P   tcp or shm (default shm)\n"
			        "  -n, --shards N     shards per mover (default 2)\n"
			        "  -t, --seconds S    length of each run (default 0.5)\n"
			        "  -q, --quick        three sizes, 0.25 s each\n"
			        "  -h, --help         print this help and exit\n"
			        "  -V, --version      print the version and exit\n");
			return c == 'h' ? 0 : 2;
		}
	}
	char bin[512], dir[] = "/tmp/mvgpu.XXXXXX", sa[600], sb[600], la[600], lb[600];
	ssize_t k = readlink("/proc/self/exe", bin, sizeof(bin) - 16);
	if (k <= 0 || !mkdtemp(dir))
		return 1;
	bin[k] = 0;
	strcpy(strrchr(bin, '/') + 1, "mover");
	snprintf(sa, sizeof(sa), "%s/a.sock", dir);
	snprintf(sb, sizeof(sb), "%s/b.sock", dir);
	snprintf(la, sizeof(la), "%s/a.log", dir);
	snprintf(lb, sizeof(lb), "%s/b.log", dir);

	/* Everything that forks goes first: no CUDA in this process yet. */
	size_t max = sizes[nsizes - 1];
	int p1[2], p2[2];
	if (pipe(p1) || pipe(p2))
		return 1;
	pid_t ma = start_mover(bin, prov, shards, sa, la);
	pid_t mb = start_mover(bin, prov, shards, sb, lb);
	pid_t rcv = fork();
	if (rcv == 0)
		_exit(receiver(sb, max, p1[1], p2[0]));

	struct mv_cuda *cu = mv_cuda_load(&why);
	if (!cu) {
		printf("mvgpubench: SKIPPED: %s\n", why);
		kill(rcv, SIGKILL);
		kill(ma, SIGTERM);
		kill(mb, SIGTERM);
		return 0;
	}
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr src, dd;
	CUstream st;
	void *pinned;
	char name[64] = "";
	cu->DeviceGet(&dev, 0);
	cu->DevicePrimaryCtxRetain(&ctx, dev);
	cu->CtxSetCurrent(ctx);
	if (cu->MemAlloc(&src, max) || cu->MemAlloc(&dd, max) || cu->MemAllocHost(&pinned, max) ||
	    cu->StreamCreate(&st, CU_STREAM_NON_BLOCKING)) {
		fprintf(stderr, "mvgpubench: CUDA allocations failed\n");
		return 1;
	}
	cu->MemsetD8(src, 0x5a, max);
	struct blobs b;
	if (read(p1[0], &b, sizeof(b)) != sizeof(b)) {
		fprintf(stderr, "mvgpubench: the receiver failed; see %s\n", lb);
		return 1;
	}
	struct mvc *cl;
	struct mvc_mem gsrc, hsrc;
	uint32_t peer, gdst, hdst;
	if (mvc_connect(&cl, sa) || mvc_register_cuda(cl, (void *)src, max, &gsrc) ||
	    mvc_alloc(cl, max, &hsrc) || mvc_peer_add(cl, b.addr, b.alen, &peer) ||
	    mvc_import(cl, peer, b.gpu, b.glen, &gdst) ||
	    mvc_import(cl, peer, b.host, b.hlen, &hdst)) {
		fprintf(stderr, "mvgpubench: %s\n", cl ? mvc_error(cl) : mvc_connect_error());
		return 1;
	}
	memset(hsrc.addr, 0x33, max);

	printf(
	    "mvgpubench: %s, %d shards per mover, %d reps of %.2f s, interleaved, medians (GB/s)\n",
	    prov, shards, REPS, secs);
	printf("%9s | %9s %9s %6s %4s | %9s %9s %9s %6s %4s\n", "size", "path2", "DtoD", "ratio",
	       "bar", "path3", "DtoH", "fabric", "ratio", "bar");
	int low = 0;
	for (int i = 0; i < nsizes; i++) {
		size_t s = sizes[i];
		double p2v[REPS], dd_v[REPS], p3v[REPS], dh_v[REPS], fab_v[REPS];
		for (int r = 0; r < REPS; r++) {
			p2v[r] = through(cl, gsrc.region, gdst, s, secs);
			dd_v[r] = copy_rate(cu, dd, NULL, src, s, secs, st);
			p3v[r] = through(cl, gsrc.region, hdst, s, secs);
			dh_v[r] = copy_rate(cu, 0, pinned, src, s, secs, st);
			fab_v[r] = through(cl, hsrc.region, hdst, s, secs);
		}
		double m2 = median(p2v, REPS) / 1e9, mdd = median(dd_v, REPS) / 1e9;
		double m3 = median(p3v, REPS) / 1e9, mdh = median(dh_v, REPS) / 1e9;
		double mf = median(fab_v, REPS) / 1e9, lesser = mdh < mf ? mdh : mf;
		int ok2 = m2 >= 0.9 * mdd, ok3 = m3 >= 0.8 * lesser;
		low += !ok2 + !ok3;
		printf("%6zu MiB | %9.2f %9.2f %6.3f %4s | %9.2f %9.2f %9.2f %6.3f %4s\n", s >> 20,
		       m2, mdd, m2 / mdd, ok2 ? "ok" : "LOW", m3, mdh, mf, m3 / lesser,
		       ok3 ? "ok" : "LOW");
		printf("BENCH mvgpubench prov=%s shards=%d size=%zu path2_GBps=%.3f dtod_GBps=%.3f "
		       "path2_ratio=%.3f path3_GBps=%.3f dtoh_GBps=%.3f fabric_GBps=%.3f "
		       "path3_ratio=%.3f\n",
		       prov, shards, s, m2, mdd, m2 / mdd, m3, mdh, mf, m3 / lesser);
		fflush(stdout);
	}
	(void)name;
	mvc_disconnect(cl);
	if (write(p2[1], "x", 1) < 0) {
		/* the receiver is gone already */
	}
	waitpid(rcv, NULL, 0);
	kill(ma, SIGTERM);
	kill(mb, SIGTERM);
	waitpid(ma, NULL, 0);
	waitpid(mb, NULL, 0);
	printf("mvgpubench: %d of %d figures below their bar\n", low, 2 * nsizes);
	return low ? 3 : 0;
}

#else
int main(void)
{
	printf("mvgpubench: SKIPPED: built without the CUDA toolkit (no cuda.h)\n");
	return 0;
}
#endif
