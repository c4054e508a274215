/* SPDX-License-Identifier: MIT */
/*
 * Which path GPU memory takes, chosen by measurement. At start the mover
 * times what each path is made of on this machine and this provider: the
 * fabric writing to itself (host to host, and GPU to GPU, host to GPU, GPU
 * to host where the provider registers GPU memory), and CUDA copies (device
 * to host, host to device, device to device). From those it fills one table,
 * (source kind, destination kind, same host or not) -> path, with the rate
 * each candidate is expected to reach and why the winner won; the shards
 * follow it per write (take.c), the log and mvstat show it, and the
 * gpu_path setting forces one path where it can work, for tests and
 * benchmarks.
 *
 * The candidates for a write that touches GPU memory:
 *   1 fabric (FI_HMEM): the provider reads and writes GPU memory itself;
 *   2 copy (same host): one CUDA copy into the peer's mapped GPU memory;
 *   3 staged: a CUDA copy through pinned host memory on the side(s) with GPU
 *     memory, pipelined with host-to-host fabric writes: it runs at the
 *     slowest of its stages.
 */
#include "mover.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "mv_cuda.h"

/* gpu_path setting -> MV_PATH_* or -1 for auto; -EINVAL if unknown. */
int mv_gpu_path_parse(const char *v)
{
	if (!v || !strcmp(v, "auto"))
		return -1;
	for (int p = MV_PATH_HMEM; p <= MV_PATH_STAGED; p++)
		if (!strcmp(v, mv_path_name(p)))
			return p;
	return -EINVAL;
}

#ifdef MV_HAVE_CUDA

#define CAL_BYTES (64u << 20) /* per measurement: long enough to see a rate */
#define CAL_BUF   (16u << 20) /* buffers written round robin */
#define CAL_WIN   8           /* writes in flight */

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* GB/s of CAL_BYTES written from src to dst through f, to itself. */
static double fabric_rate(struct mv_fabric *f, fi_addr_t self, void *src, void *sdesc, uint64_t dst,
                          uint64_t dkey, char *why, size_t whylen)
{
	uint64_t posted = 0, done = 0, n = MV_CHUNK;
	double t0 = now_s();

	while (done < CAL_BYTES) {
		while (posted < CAL_BYTES && posted - done < CAL_WIN * n) {
			uint64_t off = posted % CAL_BUF;
			struct iovec iov = {(uint8_t *)src + off, n};
			struct fi_rma_iov r = {.addr = dst + off, .len = n, .key = dkey};
			struct fi_msg_rma m = {.msg_iov = &iov,
			                       .desc = &sdesc,
			                       .iov_count = 1,
			                       .addr = self,
			                       .rma_iov = &r,
			                       .rma_iov_count = 1};
			ssize_t ret = fi_writemsg(f->ep, &m, FI_COMPLETION);
			if (ret == -FI_EAGAIN)
				break;
			if (ret) {
				snprintf(why, whylen, "fi_writemsg: %s", fi_strerror((int)-ret));
				return 0;
			}
			posted += n;
		}
		struct fi_cq_data_entry e[8];
		ssize_t k = fi_cq_read(f->cq, e, 8);
		if (k > 0)
			done += (uint64_t)k * n;
		else if (k != -FI_EAGAIN) {
			struct fi_cq_err_entry ee = {0};
			fi_cq_readerr(f->cq, &ee, 0);
			snprintf(why, whylen, "a write failed: %s", fi_strerror(ee.err));
			return 0;
		}
		if (now_s() - t0 > 5) {
			snprintf(why, whylen, "writes to itself did not complete in 5 s");
			return 0;
		}
	}
	return CAL_BYTES / (now_s() - t0) / 1e9;
}

/* GB/s of CUDA copies of CAL_BYTES, chunk by chunk as the shards copy. */
static double copy_rate(struct mv_cuda *cu, CUdeviceptr d, CUdeviceptr s, int kind)
{
	double t0 = now_s();
	CUresult r = CUDA_SUCCESS;

	for (uint64_t off = 0; off < CAL_BYTES && r == CUDA_SUCCESS; off += MV_CHUNK) {
		uint64_t o = off % CAL_BUF;
		if (kind == 0)
			r = cu->MemcpyDtoHAsync((void *)(uintptr_t)(d + o), s + o, MV_CHUNK, 0);
		else if (kind == 1)
			r = cu->MemcpyHtoDAsync(d + o, (void *)(uintptr_t)(s + o), MV_CHUNK, 0);
		else
			r = cu->MemcpyDtoDAsync(d + o, s + o, MV_CHUNK, 0);
	}
	if (r == CUDA_SUCCESS)
		r = cu->CtxSynchronize();
	return r == CUDA_SUCCESS ? CAL_BYTES / (now_s() - t0) / 1e9 : 0;
}

struct cal_bufs {
	void *h[2];       /* pinned host */
	CUdeviceptr g[2]; /* device */
	struct fid_mr *mr[4];
	void *desc[4]; /* h0 h1 g0 g1 */
	uint64_t key[4];
};

static void measure_fabric(struct mover *mv, struct cal_bufs *b, struct mv_gpu_rates *rt)
{
	struct mv_fabric f;
	fi_addr_t self;
	char why[MV_ERRLEN];
	int ret = mv_fabric_open(&f, mv->prov, mv->shards[0].iface, mv->hmem);

	if (ret) {
		snprintf(rt->why, sizeof(rt->why), "opening the fabric: %s", fi_strerror(-ret));
		return;
	}
	ret = mv_fabric_av_insert(&f, f.addr, &self);
	for (int i = 0; i < 2 && !ret; i++)
		ret = mv_fabric_reg(&f, b->h[i], CAL_BUF, 0xca1000 + (uint64_t)i, &b->mr[i],
		                    &b->desc[i], &b->key[i], why, sizeof(why));
	for (int i = 0; i < 2 && !ret && mv->hmem; i++) {
		struct mv_gpu_map m = {.dev = mv->cal_dev, .dptr = b->g[i]};
		int dmabuf;
		ret =
		    mv_fabric_reg_hmem(&f, &m, CAL_BUF, 0xca1002 + (uint64_t)i, &b->mr[2 + i],
		                       &b->desc[2 + i], &b->key[2 + i], &dmabuf, why, sizeof(why));
	}
	if (ret) {
		snprintf(rt->why, sizeof(rt->why), "setting up writes to itself: %s", why);
		goto out;
	}
	/* The addresses a peer would write to: virtual or offsets. */
	uint64_t addr[4];
	for (int i = 0; i < 4; i++)
		addr[i] = !f.virt_addr ? 0
		          : i < 2      ? (uint64_t)(uintptr_t)b->h[i]
		                       : (uint64_t)b->g[i - 2];
	void *src[4] = {b->h[0], b->h[1], (void *)(uintptr_t)b->g[0], (void *)(uintptr_t)b->g[1]};
	mv_dbg("GPU paths: timing the fabric writing to itself (%s)", f.prov);
	rt->fab_hh =
	    fabric_rate(&f, self, src[0], b->desc[0], addr[1], b->key[1], why, sizeof(why));
	mv_dbg("GPU paths: host->host %.2f GB/s", rt->fab_hh);
	if (rt->fab_hh > 0 && mv->hmem) {
		rt->fab_gg =
		    fabric_rate(&f, self, src[2], b->desc[2], addr[3], b->key[3], why, sizeof(why));
		rt->fab_hg =
		    fabric_rate(&f, self, src[0], b->desc[0], addr[2], b->key[2], why, sizeof(why));
		rt->fab_gh =
		    fabric_rate(&f, self, src[2], b->desc[2], addr[1], b->key[1], why, sizeof(why));
	}
	if (rt->fab_hh <= 0 ||
	    (mv->hmem && (rt->fab_gg <= 0 || rt->fab_hg <= 0 || rt->fab_gh <= 0)))
		snprintf(rt->why, sizeof(rt->why), "the fabric writing to itself: %s", why);
out:
	for (int i = 0; i < 4; i++)
		if (b->mr[i])
			fi_close(&b->mr[i]->fid);
	mv_fabric_close(&f);
}

int mv_gpu_calibrate(struct mover *mv)
{
	struct mv_cuda *cu = mv_cuda_load(NULL);
	struct mv_gpu_rates *rt = &mv->gpu_rates;
	struct cal_bufs b = {0};
	CUresult r = CUDA_SUCCESS;
	int ret = mv_gpu_dev0(mv, &mv->cal_dev, rt->why, sizeof(rt->why));

	if (ret)
		return ret;
	rt->gpu = 1;
	for (int i = 0; i < 2 && r == CUDA_SUCCESS; i++) {
		r = cu->MemAllocHost(&b.h[i], CAL_BUF);
		if (r == CUDA_SUCCESS)
			r = cu->MemAlloc(&b.g[i], CAL_BUF);
	}
	if (r != CUDA_SUCCESS) {
		snprintf(rt->why, sizeof(rt->why), "buffers to measure with: %s", mv_cuda_err(r));
		goto out;
	}
	mv_dbg("GPU paths: timing CUDA copies");
	/* Warm-up copies first: the first of each kind pays for set-up. */
	copy_rate(cu, (CUdeviceptr)(uintptr_t)b.h[0], b.g[0], 0);
	rt->dtoh = copy_rate(cu, (CUdeviceptr)(uintptr_t)b.h[0], b.g[0], 0);
	rt->htod = copy_rate(cu, b.g[0], (CUdeviceptr)(uintptr_t)b.h[0], 1);
	rt->dtod = copy_rate(cu, b.g[1], b.g[0], 2);
	measure_fabric(mv, &b, rt);
	rt->measured = rt->fab_hh > 0 && rt->dtoh > 0 && rt->htod > 0 && rt->dtod > 0;
out:
	for (int i = 0; i < 2; i++) {
		if (b.g[i])
			cu->MemFree(b.g[i]);
		if (b.h[i])
			cu->MemFreeHost(b.h[i]);
	}
	return rt->measured ? 0 : -EIO;
}

#else /* !MV_HAVE_CUDA */

int mv_gpu_calibrate(struct mover *mv)
{
	snprintf(mv->gpu_rates.why, sizeof(mv->gpu_rates.why), "this mover was built without CUDA");
	return -ENOTSUP;
}

#endif

static double min3(double a, double b, double c)
{
	double m = a < b ? a : b;
	return m < c ? m : c;
}

/*
 * Fills mv->gpu_path[sg][dg][same] from the measured rates (or, unmeasured,
 * the fixed order: copy on the same host, else fabric where the provider
 * registers GPU memory, else staged), honouring a forced path where it can
 * work. Returns -EINVAL for a gpu_path setting it does not know.
 */
int mv_gpu_paths_choose(struct mover *mv, char *why, size_t whylen)
{
	const struct mv_gpu_rates *rt = &mv->gpu_rates;
	int forced = mv_gpu_path_parse(mv->cfg.gpu_path);

	if (forced == -EINVAL) {
		snprintf(why, whylen, "gpu_path %s: one of auto, fabric, copy, staged",
		         mv->cfg.gpu_path);
		return -EINVAL;
	}
	mv->gpu_forced = forced;
	for (int sg = 0; sg < 2; sg++)
		for (int dg = 0; dg < 2; dg++)
			for (int same = 0; same < 2; same++) {
				struct mv_gpu_choice *c = &mv->gpu_path[sg][dg][same];
				double rate[4] = {0};
				int ok[4] = {0};

				memset(c, 0, sizeof(*c));
				if (!sg && !dg) {
					c->path = MV_PATH_HOST;
					continue;
				}
				/* Which can work here: */
				ok[MV_PATH_HMEM] = mv->hmem;
				ok[MV_PATH_COPY] = same && dg && !mv->cfg.no_gpu_copy;
				ok[MV_PATH_STAGED] = 1;
				rate[MV_PATH_HMEM] = sg && dg ? rt->fab_gg
				                     : sg     ? rt->fab_gh
				                              : rt->fab_hg;
				rate[MV_PATH_COPY] = sg ? rt->dtod : rt->htod;
				rate[MV_PATH_STAGED] =
				    min3(sg ? rt->dtoh : 1e9, rt->fab_hh, dg ? rt->htod : 1e9);
				int best = 0;
				if (forced > 0 && ok[forced]) {
					best = forced;
					snprintf(c->why, sizeof(c->why), "forced by gpu_path");
				} else if (rt->measured) {
					for (int p = MV_PATH_HMEM; p <= MV_PATH_STAGED; p++)
						if (ok[p] && (!best || rate[p] > rate[best]))
							best = p;
					int n = snprintf(c->why, sizeof(c->why), "measured");
					for (int p = MV_PATH_HMEM; p <= MV_PATH_STAGED; p++)
						if (ok[p] && n < (int)sizeof(c->why))
							n += snprintf(
							    c->why + n, sizeof(c->why) - (size_t)n,
							    " %s %.1f", mv_path_name(p), rate[p]);
					if (n < (int)sizeof(c->why))
						snprintf(c->why + n, sizeof(c->why) - (size_t)n,
						         " GB/s");
				} else {
					best = ok[MV_PATH_COPY]   ? MV_PATH_COPY
					       : ok[MV_PATH_HMEM] ? MV_PATH_HMEM
					                          : MV_PATH_STAGED;
					snprintf(c->why, sizeof(c->why),
					         "fixed order (not measured: %.80s)",
					         rt->why[0] ? rt->why : "no GPU");
				}
				if (forced > 0 && !ok[forced] && forced != best) {
					size_t n = strlen(c->why);
					snprintf(c->why + n, sizeof(c->why) - n,
					         "; %s cannot work here", mv_path_name(forced));
				}
				c->path = (uint8_t)best;
				c->rate = rate[best];
			}
	/* Path 1 chosen nowhere: the shards open their domains without
	 * FI_HMEM and GPU regions are not registered with the fabric, so that
	 * neither costs anything (a provider may treat every buffer of an
	 * FI_HMEM domain as possibly device memory). */
	int used = 0;
	for (int i = 0; i < 8; i++)
		used |= mv->gpu_path[i >> 2][(i >> 1) & 1][i & 1].path == MV_PATH_HMEM;
	if (mv->hmem && !used) {
		mv->hmem = 0;
		mv->hmem_unused = 1;
	}
	/* A GPU region takes landing messages where the fabric cannot reach
	 * it, or where a writer of another host is to stage into it. */
	mv->gpu_land = !mv->hmem || mv->gpu_path[0][1][0].path == MV_PATH_STAGED ||
	               mv->gpu_path[1][1][0].path == MV_PATH_STAGED ||
	               mv->gpu_path[0][1][1].path == MV_PATH_STAGED ||
	               mv->gpu_path[1][1][1].path == MV_PATH_STAGED;
	return 0;
}

void mv_gpu_paths_log(struct mover *mv)
{
	const struct mv_gpu_rates *rt = &mv->gpu_rates;
	static const char *const kind[] = {"host", "GPU"};

	if (!rt->gpu)
		return; /* nothing to say without a GPU */
	if (mv->hmem_unused)
		mv_log("GPU memory: the provider registers it, but path 1 is chosen for no kind of "
		       "write: shards open their domains without FI_HMEM");
	if (rt->measured)
		mv_log("GPU paths measured (GB/s): fabric host->host %.1f, GPU->GPU %.1f, "
		       "host->GPU %.1f, GPU->host %.1f; CUDA copies D2H %.1f, H2D %.1f, D2D %.1f",
		       rt->fab_hh, rt->fab_gg, rt->fab_hg, rt->fab_gh, rt->dtoh, rt->htod,
		       rt->dtod);
	for (int sg = 0; sg < 2; sg++)
		for (int dg = 0; dg < 2; dg++)
			for (int same = 0; same < 2; same++) {
				const struct mv_gpu_choice *c = &mv->gpu_path[sg][dg][same];
				if (!sg && !dg)
					continue;
				mv_log("GPU path %s -> %s %s: %s (%s)", kind[sg], kind[dg],
				       same ? "same host" : "other host", mv_path_name(c->path),
				       c->why);
			}
}

/* The first write of each source kind into an import says, once, which
 * path it takes and why: "where did my GPU write go" answered in the log. */
void mv_gpu_path_tell(struct mv_shard *s, const struct mv_region *src, struct mv_import *dst,
                      uint8_t path, const struct mv_gpu_choice *c)
{
	uint32_t bit = 1u << (src->is_gpu ? 1 : 0);

	if (atomic_load_explicit(&dst->told, memory_order_relaxed) & bit ||
	    atomic_fetch_or_explicit(&dst->told, bit, memory_order_relaxed) & bit)
		return;
	mv_log("GPU write: %s region %u -> %s region %u of peer mover %016llx%s: path %s%s%s (%s)",
	       src->is_gpu ? "GPU" : "host", src->id, dst->flags & MV_BLOB_GPU ? "GPU" : "host",
	       dst->region, (unsigned long long)dst->peer->mover_id,
	       dst->remote ? " (same host)" : "", mv_path_name(path),
	       path != c->path ? ", not the chosen " : "",
	       path != c->path ? mv_path_name(c->path) : "",
	       path != c->path ? "the peer's region or this one cannot take it" : c->why);
}
