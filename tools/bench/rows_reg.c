/* SPDX-License-Identifier: MIT */
/*
 * The register rows: how fast a client makes memory the mover can reach
 * (mvc_alloc: a memfd, its pages allocated and zeroed, mapped and registered
 * by the mover on every shard), on each kind of pages in the same run (4 KiB,
 * hugetlb, THP), beside how fast the same process makes as much plain memory
 * at all (a fresh anonymous mapping, memset once), in turns; where the time
 * goes (the client's pages, the mover's mapping, fi_mr_reg on the slowest
 * shard, from mvc_mem_info); how long mvc_free takes, idle and while a peer
 * streams writes into the region. A KV pool of tens of GiB is made once at
 * start-up; what matters is that it comes up at memory speed.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"

struct rrow reg_done[REG_ROWS_MAX];
int nreg_done;

#define STREAM_DEPTH 8
#define STREAM_WRITE (4u << 20)

/* Takes x's batch completions for up to timeout_ms; counts them. */
static void stream_reap(struct cfg *x, int timeout_ms, uint32_t *inflight, uint32_t *failed)
{
	struct mvc_event ev[16];
	int k = mvc_wait(x->c, ev, 16, timeout_ms);

	for (int i = 0; i < k; i++)
		if (ev[i].type == MVC_EV_BATCH) {
			(*inflight)--;
			*failed += ev[i].status != 0;
		}
}

/*
 * mvc_free of a region of mover B (a second client of this process) while
 * the bench's client of mover A streams 4 MiB writes into it, 8 in flight:
 * the time mvc_free takes then, and the stream's batches (those after the
 * free fail). 0, or -1 with r->err set.
 */
static int free_streaming(struct cfg *x, struct rrow *r, uint32_t backing)
{
	uint8_t blob[MVC_BLOB_MAX];
	size_t blen = sizeof(blob);
	struct mvc *cb = NULL;
	struct mvc_mem m = {.fd = -1};
	uint32_t peer, imp, inflight = 0, failed = 0, sent = 0;
	uint64_t wlen = x->region_len < STREAM_WRITE ? x->region_len : STREAM_WRITE;
	uint64_t size = r->size < (256ull << 20) ? r->size : 256ull << 20;
	int ret;

	if ((ret = mvc_connect(&cb, mover_b.sock)) != 0) {
		snprintf(r->err, sizeof(r->err), "free while streaming: connecting to mover B: %s",
		         strerror(-ret));
		return -1;
	}
	ret = mvc_alloc_huge(cb, size, backing_huge(backing), &m);
	if (!ret)
		ret = mvc_address(cb, blob, &blen) ?: mvc_peer_add(x->c, blob, blen, &peer);
	blen = sizeof(blob);
	if (!ret)
		ret = mvc_region_blob(cb, m.region, blob, &blen)
		          ?: mvc_import(x->c, peer, blob, blen, &imp);
	if (ret) {
		snprintf(r->err, sizeof(r->err), "free while streaming: %s",
		         mvc_error(m.addr ? x->c : cb));
		goto out;
	}
	/* Stream for a moment, free in the middle of it, stream on a little. */
	double t0 = now_s(), t_free = 0;
	while (now_s() - t0 < 0.3 || inflight) {
		while (inflight < STREAM_DEPTH && now_s() - t0 < 0.3) {
			uint64_t off = (uint64_t)sent * wlen % (size - wlen + 1);
			if (mvc_write(x->c, x->src.region, 0, imp, off, wlen) ||
			    mvc_submit(x->c, 0x5eed0000ull + sent)) {
				mvc_abort(x->c);
				break;
			}
			inflight++;
			sent++;
		}
		if (!t_free && now_s() - t0 > 0.1 && inflight) {
			double f0 = now_s();
			mvc_free(cb, &m);
			t_free = now_s() - f0;
		}
		if (now_s() - t0 > 30) {
			snprintf(r->err, sizeof(r->err),
			         "free while streaming: %u batches never completed", inflight);
			ret = -1;
			goto out;
		}
		stream_reap(x, 10, &inflight, &failed);
	}
	r->free_stream_ms = t_free * 1e3;
	r->stream_batches = sent;
	r->stream_failed = failed;
	mvc_unimport(x->c, imp);
	mvc_peer_remove(x->c, peer); /* a slot of its own; the run's peer stays */
out:
	if (m.addr)
		mvc_free(cb, &m);
	mvc_disconnect(cb);
	return ret ? -1 : 0;
}

static double med_ms(double *v, int n)
{
	return median(v, n) * 1e3;
}

/* One backing's row: reps of mvc_alloc and mvc_free in turns with a memset
 * of fresh memory, then the free under a stream. */
static void reg_row(struct cfg *x, uint32_t backing)
{
	struct rrow *r;
	uint64_t size = x->o->reg_size;
	int reps = x->o->reps < 3 ? 3 : x->o->reps > 9 ? 9 : x->o->reps;
	double reg[9], mem[9], fre[9], alloc[9], map[9], mr[9];

	if (nreg_done == REG_ROWS_MAX)
		die("too many register rows: give fewer providers");
	r = &reg_done[nreg_done++];
	memset(r, 0, sizeof(*r));
	r->prov = x->prov;
	r->shards = x->n;
	r->backing = backing;
	r->size = size;
	r->memset_size = size < REG_MEMSET_MAX ? size : REG_MEMSET_MAX;
	r->reps = reps;
	if (backing_check(backing, size, r->err, sizeof(r->err))) {
		r->skipped = 1;
		goto out;
	}
	for (int i = 0; i < reps; i++) {
		struct mvc_mem m;
		struct mvc_mem_info in;
		/* In turns: the order alternates, as the pairs of the other rows. */
		for (int k = 0; k < 2; k++) {
			double t0 = now_s();
			if ((i + k) % 2 == 0) {
				if (mvc_alloc_huge(x->c, size, backing_huge(backing), &m)) {
					r->failed = 1;
					snprintf(r->err, sizeof(r->err), "mvc_alloc: %s",
					         mvc_error(x->c));
					goto out;
				}
				reg[i] = now_s() - t0;
				mvc_mem_info(x->c, &m, &in);
				alloc[i] = (double)in.alloc_ns * 1e-9;
				map[i] = (double)in.map_ns * 1e-9;
				mr[i] = (double)in.mr_ns * 1e-9;
				if (in.backing != backing) {
					r->failed = 1;
					snprintf(r->err, sizeof(r->err),
					         "asked for %s pages, got %s: %s",
					         backing_name(backing), backing_name(in.backing),
					         in.why);
					mvc_free(x->c, &m);
					goto out;
				}
				t0 = now_s();
				mvc_free(x->c, &m);
				fre[i] = now_s() - t0;
			} else {
				uint8_t *p = mmap(NULL, r->memset_size, PROT_READ | PROT_WRITE,
				                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
				if (p == MAP_FAILED)
					die("mapping %" PRIu64 " bytes for the memset",
					    r->memset_size);
				memset(p, 0x5a, r->memset_size);
				mem[i] = now_s() - t0;
				munmap(p, r->memset_size);
			}
		}
	}
	r->gbps = (double)size / median(reg, reps) / 1e9;
	r->memset_gbps = (double)r->memset_size / median(mem, reps) / 1e9;
	r->ratio = r->gbps / r->memset_gbps;
	r->free_ms = med_ms(fre, reps);
	r->alloc_ms = med_ms(alloc, reps);
	r->map_ms = med_ms(map, reps);
	r->mr_ms = med_ms(mr, reps);
	r->pass = r->ratio >= REG_BAR;
	if (free_streaming(x, r, backing))
		r->failed = 1;
out:
	printf("   register %" PRIu64 " MiB on %s pages (mvc_alloc, %u shard%s), %d in turns with "
	       "a memset of %" PRIu64 " MiB of fresh memory: ",
	       size >> 20, backing_name(backing), x->n, x->n > 1 ? "s" : "", reps,
	       r->memset_size >> 20);
	if (r->skipped)
		printf("SKIPPED: %s\n", r->err);
	else if (r->failed && !r->gbps)
		printf("FAILED: %s\n", r->err);
	else {
		printf("%.2f GB/s against %.2f GB/s, ratio %.2f (bar %.1f: %s); client pages %.1f "
		       "ms, mover mapping %.1f ms, fi_mr_reg %.3f ms; mvc_free %.1f ms, %.1f ms "
		       "while a peer streams into it (%u of %u batches failed)\n",
		       r->gbps, r->memset_gbps, r->ratio, REG_BAR, r->pass ? "ok" : "MISS",
		       r->alloc_ms, r->map_ms, r->mr_ms, r->free_ms, r->free_stream_ms,
		       r->stream_failed, r->stream_batches);
		if (r->failed)
			printf("   FAILED: %s\n", r->err);
	}
	fflush(stdout);
}

int reg_rows(struct cfg *x)
{
	int failed = 0;

	for (int i = 0; i < x->o->nreg_backings; i++) {
		reg_row(x, x->o->reg_backings[i]);
		failed |= reg_done[nreg_done - 1].failed;
	}
	return failed ? -1 : 0;
}

void reg_print_bench(const struct rrow *r)
{
	printf("BENCH register prov=%s shards=%u backing=%s size=%" PRIu64 " memset_size=%" PRIu64
	       " reps=%d GBps=%.3f memset_GBps=%.3f ratio=%.3f bar=%.1f alloc_ms=%.2f map_ms=%.2f "
	       "mr_ms=%.3f free_ms=%.1f free_stream_ms=%.1f stream_batches=%u stream_failed=%u "
	       "pass=%d failed=%d skipped=%d",
	       r->prov, r->shards, backing_name(r->backing), r->size, r->memset_size, r->reps,
	       r->gbps, r->memset_gbps, r->ratio, REG_BAR, r->alloc_ms, r->map_ms, r->mr_ms,
	       r->free_ms, r->free_stream_ms, r->stream_batches, r->stream_failed, r->pass,
	       r->failed, r->skipped);
	if (r->failed || r->skipped)
		printf(" error=\"%s\"", r->err);
	printf("\n");
}
