/* SPDX-License-Identifier: MIT */
/*
 * mvgpubench: GPU memory through the mover, against what the hardware does
 * without it, measured in the same run, interleaved, medians. Four pairs of
 * movers on this host, started before any CUDA in this process:
 *   same   default settings: a same-host GPU destination gets CUDA copies
 *          (path 2), against cuMemcpyDtoD in one process (bar 0.9x);
 *   auto   --no-gpu-copy --no-host-copy, so that writes cross the fabric as to another
 *          host, the path chosen by the movers' own measurement;
 *   fabric the same, forced to path 1 (the provider reads and writes GPU
 *          memory: FI_HMEM), where the provider registers GPU memory;
 *   staged the same, forced to path 3 (pinned bounce buffers, landing
 *          messages), against the lesser of the pinned device-to-host copy
 *          and the fabric's host rate (bar 0.8x).
 * For GPU->GPU, GPU->host and host->GPU writes the chosen path must reach
 * 0.9x the best of the forced ones at every size (the bar). Needs a
 * CUDA device; says why not and exits 0 without one.
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
                         const char *log, const char *path, int nocopy)
{
	char ns[16];
	const char *argv[16];
	int n = 0;
	pid_t pid;

	snprintf(ns, sizeof(ns), "%d", shards);
	argv[n++] = bin;
	argv[n++] = "--provider";
	argv[n++] = prov;
	if (!strcmp(prov, "tcp")) {
		argv[n++] = "--iface";
		argv[n++] = "lo";
	}
	argv[n++] = "--shards";
	argv[n++] = ns;
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n++] = "--no-config";
	argv[n++] = "--gpu-path";
	argv[n++] = path;
	/* Writes as to another host: no CUDA copies into GPU memory and no
	 * memcpy into host memory of the peer mover (the same-host path), so
	 * the fabric carries them. */
	if (nocopy) {
		argv[n++] = "--no-gpu-copy";
		argv[n++] = "--no-host-copy";
	}
	argv[n] = NULL;
	pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		freopen(log, "w", stderr);
		execv(bin, (char *const *)argv);
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

/* Two movers and a receiving process, set one way. */
struct pair {
	const char *name, *path;
	int nocopy;
	pid_t ma, mb, rcv;
	int to_rcv[2], from_rcv[2];
	char sa[600], sb[600], la[600], lb[600];
	struct mvc *c;
	uint32_t peer, gdst, hdst;
	struct mvc_mem gsrc, hsrc;
};

enum { P_SAME, P_AUTO, P_FABRIC, P_STAGED, NPAIRS };

static void pair_start(struct pair *p, const char *bin, const char *dir, const char *prov,
                       int shards, size_t max)
{
	snprintf(p->sa, sizeof(p->sa), "%s/%s-a.sock", dir, p->name);
	snprintf(p->sb, sizeof(p->sb), "%s/%s-b.sock", dir, p->name);
	snprintf(p->la, sizeof(p->la), "%s/%s-a.log", dir, p->name);
	snprintf(p->lb, sizeof(p->lb), "%s/%s-b.log", dir, p->name);
	if (pipe(p->to_rcv) || pipe(p->from_rcv))
		exit(1);
	p->ma = start_mover(bin, prov, shards, p->sa, p->la, p->path, p->nocopy);
	p->mb = start_mover(bin, prov, shards, p->sb, p->lb, p->path, p->nocopy);
	p->rcv = fork();
	if (p->rcv == 0)
		_exit(receiver(p->sb, max, p->from_rcv[1], p->to_rcv[0]));
}

/* In this process, after CUDA: the sending client of the pair. */
static int pair_connect(struct pair *p, CUdeviceptr src, size_t max)
{
	struct blobs b;

	if (read(p->from_rcv[0], &b, sizeof(b)) != sizeof(b)) {
		fprintf(stderr, "mvgpubench: the %s receiver failed; see %s\n", p->name, p->lb);
		return -1;
	}
	if (mvc_connect(&p->c, p->sa) || mvc_register_cuda(p->c, (void *)src, max, &p->gsrc) ||
	    mvc_alloc(p->c, max, &p->hsrc) || mvc_peer_add(p->c, b.addr, b.alen, &p->peer) ||
	    mvc_import(p->c, p->peer, b.gpu, b.glen, &p->gdst) ||
	    mvc_import(p->c, p->peer, b.host, b.hlen, &p->hdst)) {
		fprintf(stderr, "mvgpubench: %s pair: %s\n", p->name,
		        p->c ? mvc_error(p->c) : mvc_connect_error());
		return -1;
	}
	memset(p->hsrc.addr, 0x33, max);
	return 0;
}

static void pair_stop(struct pair *p)
{
	if (p->c)
		mvc_disconnect(p->c);
	if (write(p->to_rcv[1], "x", 1) < 0) {
		/* the receiver is gone already */
	}
	waitpid(p->rcv, NULL, 0);
	kill(p->ma, SIGTERM);
	kill(p->mb, SIGTERM);
	waitpid(p->ma, NULL, 0);
	waitpid(p->mb, NULL, 0);
}

/* Whether a line of the mover's log holds a, b and c (NULL: anything); the
 * last such line into last when given. The mover logs each import's path. */
static int log_find(const char *log, const char *a, const char *b, const char *c, char *last,
                    size_t len)
{
	char line[1024];
	int found = 0;
	FILE *f = fopen(log, "r");

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, a) && (!b || strstr(line, b)) && (!c || strstr(line, c))) {
			found = 1;
			if (last)
				snprintf(last, len, "%s", line);
		}
	if (f)
		fclose(f);
	return found;
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
			fprintf(
			    c == 'h' ? stdout : stderr,
			    "usage: mvgpubench [-p tcp|shm] [-n shards] [-t seconds] [-q]\n"
			    "GPU memory through movers on this host against what the hardware\n"
			    "does without them, and each path against the others: path 2\n"
			    "against cuMemcpyDtoD, path 3 against the lesser of the device-to-\n"
			    "host copy and the fabric's host rate, and the path the movers\n"
			    "chose by measurement against the best of paths 1 and 3 forced;\n"
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
	char bin[512], dir[] = "/tmp/mvgpu.XXXXXX";
	ssize_t k = readlink("/proc/self/exe", bin, sizeof(bin) - 16);
	if (k <= 0 || !mkdtemp(dir))
		return 1;
	bin[k] = 0;
	strcpy(strrchr(bin, '/') + 1, "mover");

	/* Everything that forks goes first: no CUDA in this process yet. */
	size_t max = sizes[nsizes - 1];
	struct pair pr[NPAIRS] = {
	    [P_SAME] = {.name = "same", .path = "auto"},
	    /* the rest take the fabric between them */
	    [P_AUTO] = {.name = "auto", .path = "auto", .nocopy = 1},
	    [P_FABRIC] = {.name = "fabric", .path = "fabric", .nocopy = 1},
	    [P_STAGED] = {.name = "staged", .path = "staged", .nocopy = 1},
	};
	for (int i = 0; i < NPAIRS; i++)
		pair_start(&pr[i], bin, dir, prov, shards, max);

	struct mv_cuda *cu = mv_cuda_load(&why);
	if (!cu) {
		printf("mvgpubench: SKIPPED: %s\n", why);
		for (int i = 0; i < NPAIRS; i++)
			pair_stop(&pr[i]);
		return 0;
	}
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr src, dd;
	CUstream st;
	void *pinned;
	cu->DeviceGet(&dev, 0);
	cu->DevicePrimaryCtxRetain(&ctx, dev);
	cu->CtxSetCurrent(ctx);
	if (cu->MemAlloc(&src, max) || cu->MemAlloc(&dd, max) || cu->MemAllocHost(&pinned, max) ||
	    cu->StreamCreate(&st, CU_STREAM_NON_BLOCKING)) {
		fprintf(stderr, "mvgpubench: CUDA allocations failed\n");
		return 1;
	}
	cu->MemsetD8(src, 0x5a, max);
	for (int i = 0; i < NPAIRS; i++)
		if (pair_connect(&pr[i], src, max))
			return 1;

	/* A forced path that cannot work here runs as the movers fall back:
	 * then its column is not a path of its own. */
	through(pr[P_FABRIC].c, pr[P_FABRIC].gsrc.region, pr[P_FABRIC].gdst, 1 << 20, 0.01);
	int have1 = log_find(pr[P_FABRIC].la, "path fabric (", NULL, NULL, NULL, 0);
	printf("mvgpubench: %s, %d shards per mover, %d reps of %.2f s, interleaved, medians "
	       "(GB/s)%s\n",
	       prov, shards, REPS, secs,
	       have1 ? ""
	             : "; path 1 (fabric) is not offered here: its column is what the movers "
	               "fell back to");
	printf("same host   %9s | %9s %9s %6s %4s | %9s %9s %9s %6s %4s\n", "size", "path2", "DtoD",
	       "ratio", "bar", "path3", "DtoH", "fabric", "ratio", "bar");
	int low = 0, nbars = 0;
	for (int i = 0; i < nsizes; i++) {
		size_t s = sizes[i];
		double p2v[REPS], dd_v[REPS], p3v[REPS], dh_v[REPS], fab_v[REPS];
		for (int r = 0; r < REPS; r++) {
			p2v[r] =
			    through(pr[P_SAME].c, pr[P_SAME].gsrc.region, pr[P_SAME].gdst, s, secs);
			dd_v[r] = copy_rate(cu, dd, NULL, src, s, secs, st);
			p3v[r] = through(pr[P_STAGED].c, pr[P_STAGED].gsrc.region,
			                 pr[P_STAGED].hdst, s, secs);
			dh_v[r] = copy_rate(cu, 0, pinned, src, s, secs, st);
			fab_v[r] = through(pr[P_STAGED].c, pr[P_STAGED].hsrc.region,
			                   pr[P_STAGED].hdst, s, secs);
		}
		double m2 = median(p2v, REPS) / 1e9, mdd = median(dd_v, REPS) / 1e9;
		double m3 = median(p3v, REPS) / 1e9, mdh = median(dh_v, REPS) / 1e9;
		double mf = median(fab_v, REPS) / 1e9, lesser = mdh < mf ? mdh : mf;
		int ok2 = m2 >= 0.9 * mdd, ok3 = m3 >= 0.8 * lesser;
		low += !ok2 + !ok3;
		nbars += 2;
		printf(
		    "same host   %5zu MiB | %9.2f %9.2f %6.3f %4s | %9.2f %9.2f %9.2f %6.3f %4s\n",
		    s >> 20, m2, mdd, m2 / mdd, ok2 ? "ok" : "LOW", m3, mdh, mf, m3 / lesser,
		    ok3 ? "ok" : "LOW");
		printf("BENCH mvgpubench prov=%s shards=%d size=%zu path2_GBps=%.3f dtod_GBps=%.3f "
		       "path2_ratio=%.3f path3_GBps=%.3f dtoh_GBps=%.3f fabric_GBps=%.3f "
		       "path3_ratio=%.3f\n",
		       prov, shards, s, m2, mdd, m2 / mdd, m3, mdh, mf, m3 / lesser);
		fflush(stdout);
	}

	/* As to another host: each kind of write by path 1, path 3 and the
	 * path the movers chose, interleaved. */
	static const char *const kinds[] = {"GPU->GPU", "GPU->host", "host->GPU"};
	printf("other host  %9s %-9s | %9s %9s | %9s %6s %6s %4s\n", "size", "kind", "path1",
	       "path3", "chosen", "/best", "path", "bar");
	for (int i = 0; i < nsizes; i++)
		for (int kd = 0; kd < 3; kd++) {
			size_t s = sizes[i];
			double v[3][REPS];
			for (int r = 0; r < REPS; r++)
				for (int q = 0; q < 3; q++) {
					struct pair *p = &pr[P_AUTO + q];
					uint32_t from = kd == 2 ? p->hsrc.region : p->gsrc.region;
					uint32_t to = kd == 1 ? p->hdst : p->gdst;
					v[q][r] = through(p->c, from, to, s, secs);
				}
			double ma = median(v[0], REPS) / 1e9, m1 = median(v[1], REPS) / 1e9;
			double m3 = median(v[2], REPS) / 1e9;
			double best = have1 && m1 > m3 ? m1 : m3;
			int ok = ma >= 0.9 * best;
			low += !ok;
			nbars++;
			/* Which path the auto movers took, from the sender's log. */
			char want[64];
			snprintf(want, sizeof(want), "%s region", kd == 2 ? "host" : "GPU");
			const char *took = "?";
			char line[1024];
			if (log_find(pr[P_AUTO].la, "GPU write: ", want,
			             kd == 1 ? "-> host" : "-> GPU", line, sizeof(line)))
				took = strstr(line, "path fabric")   ? "fabric"
				       : strstr(line, "path staged") ? "staged"
				       : strstr(line, "path copy")   ? "copy"
				                                     : "?";
			printf("other host  %5zu MiB %-9s | %9.2f %9.2f | %9.2f %6.3f %6s %4s\n",
			       s >> 20, kinds[kd], m1, m3, ma, ma / best, took, ok ? "ok" : "LOW");
			printf(
			    "BENCH mvgpubench prov=%s shards=%d size=%zu kind=%s path1_GBps=%.3f "
			    "path1_offered=%d path3_GBps=%.3f chosen_GBps=%.3f chosen_path=%s "
			    "chosen_ratio=%.3f\n",
			    prov, shards, s, kinds[kd], m1, have1, m3, ma, took, ma / best);
			fflush(stdout);
		}
	for (int i = 0; i < NPAIRS; i++)
		pair_stop(&pr[i]);
	printf("mvgpubench: %d of %d figures below their bar (logs in %s)\n", low, nbars, dir);
	return low ? 3 : 0;
}

#else
int main(void)
{
	printf("mvgpubench: SKIPPED: built without the CUDA toolkit (no cuda.h)\n");
	return 0;
}
#endif
