/* SPDX-License-Identifier: MIT */
/*
 * The register row: how fast a client makes memory the mover can reach
 * (mvc_alloc: a memfd, its pages allocated and zeroed, mapped and registered
 * by the mover on every shard), beside how fast the same process makes as
 * much plain memory at all (a fresh anonymous mapping, memset once), in
 * turns, and how long mvc_free takes. A KV pool of tens of GiB is made once
 * at start-up; what matters is that it comes up at memory speed.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"

struct rrow reg_done[REG_ROWS_MAX];
int nreg_done;

int reg_rows(struct cfg *x)
{
	struct rrow *r;
	uint64_t size = x->o->quick ? 256ull << 20 : 1ull << 30;
	int reps = x->o->reps < 3 ? 3 : x->o->reps > 9 ? 9 : x->o->reps;
	double reg[9], mem[9], fre[9];

	if (nreg_done == REG_ROWS_MAX)
		die("too many register rows: give fewer providers");
	r = &reg_done[nreg_done++];
	memset(r, 0, sizeof(*r));
	r->prov = x->prov;
	r->shards = x->n;
	r->size = size;
	r->reps = reps;
	for (int i = 0; i < reps; i++) {
		struct mvc_mem m;
		/* In turns: the order alternates, as the pairs of the other rows. */
		for (int k = 0; k < 2; k++) {
			double t0 = now_s();
			if ((i + k) % 2 == 0) {
				if (mvc_alloc(x->c, size, &m)) {
					r->failed = 1;
					snprintf(r->err, sizeof(r->err), "mvc_alloc: %s",
					         mvc_error(x->c));
					goto out;
				}
				reg[i] = now_s() - t0;
				t0 = now_s();
				mvc_free(x->c, &m);
				fre[i] = now_s() - t0;
			} else {
				uint8_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
				                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
				if (p == MAP_FAILED)
					die("mapping %" PRIu64 " bytes for the memset", size);
				memset(p, 0x5a, size);
				mem[i] = now_s() - t0;
				munmap(p, size);
			}
		}
	}
	r->gbps = (double)size / median(reg, reps) / 1e9;
	r->memset_gbps = (double)size / median(mem, reps) / 1e9;
	r->ratio = r->gbps / r->memset_gbps;
	r->free_ms = median(fre, reps) * 1e3;
	r->pass = r->ratio >= REG_BAR;
out:
	printf("   register %" PRIu64 " MiB (mvc_alloc, %u shard%s), %d in turns with a memset of "
	       "fresh memory: ",
	       size >> 20, x->n, x->n > 1 ? "s" : "", reps);
	if (r->failed)
		printf("FAILED: %s\n", r->err);
	else
		printf("%.2f GB/s against %.2f GB/s, ratio %.2f (bar %.1f: %s), mvc_free %.1f ms\n",
		       r->gbps, r->memset_gbps, r->ratio, REG_BAR, r->pass ? "ok" : "MISS",
		       r->free_ms);
	fflush(stdout);
	return r->failed ? -1 : 0;
}

void reg_print_bench(const struct rrow *r)
{
	printf("BENCH register prov=%s shards=%u size=%" PRIu64 " reps=%d GBps=%.3f "
	       "memset_GBps=%.3f ratio=%.3f bar=%.1f free_ms=%.1f pass=%d failed=%d",
	       r->prov, r->shards, r->size, r->reps, r->gbps, r->memset_gbps, r->ratio, REG_BAR,
	       r->free_ms, r->pass, r->failed);
	if (r->failed)
		printf(" error=\"%s\"", r->err);
	printf("\n");
}
