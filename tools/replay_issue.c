/* SPDX-License-Identifier: MIT */
/*
 * mvreplay's batches: one BATCH record of a trace becomes the same batch
 * through libmvc, of the same kind, op count and bytes: pages of the same
 * size (scattered over the destination pool as a paged KV cache's are,
 * unless --contig), writes and writev segments whose sizes add up exactly,
 * and the same immediate. Where the data goes is chosen here, from cursors
 * that wrap around in the two regions.
 */
#include <errno.h>

#include "replay_send.h"

uint64_t part_len(uint64_t total, uint32_t n, uint32_t k)
{
	return total / n + (k < total % n);
}

/* The next len bytes of a region of size cap, wrapping to 0 where they would not fit. */
static uint64_t take(uint64_t *cur, uint64_t len, uint64_t cap)
{
	if (*cur + len > cap)
		*cur = 0;
	uint64_t off = *cur;
	*cur += len;
	return off;
}

int issue(struct replay *r, size_t i, uint64_t *ops, uint64_t *bytes)
{
	const struct mv_trace_rec *t = &r->t.rec[r->order[i]];
	uint32_t data = t->kind & MVT_KIND_DATA;
	uint64_t scur = r->scur, dcur = r->dcur;
	int ret = 0;

	*ops = 0;
	*bytes = 0;
	if (data == MV_TK_PAGED && t->page_size) {
		uint64_t ps = t->page_size;
		/* Page indices are 32-bit: a pool of more pages uses its first 2^32. */
		uint64_t ns = r->src.len / ps, nd = r->dst_len / ps;
		ns = ns > (1ull << 32) ? 1ull << 32 : ns;
		nd = nd > (1ull << 32) ? 1ull << 32 : nd;
		/* Source pages run on; destination pages scatter like a paged KV cache's
		 * (no two neighbours adjacent, so each is its own descriptor) unless
		 * --contig asked for runs the client merges into large writes. */
		uint64_t step = r->cf->contig ? 1 : r->stride;
		for (uint32_t k = 0; k < t->nops; k++) {
			r->sp[k] = (uint32_t)((scur + k) % ns);
			r->dp[k] = (uint32_t)((dcur + (uint64_t)k * step) % nd);
		}
		struct mvc_pages pg = {.src = r->src.region,
		                       .dst = r->dst,
		                       .src_stride = ps,
		                       .dst_stride = ps,
		                       .page_size = ps,
		                       .src_pages = r->sp,
		                       .dst_pages = r->dp,
		                       .npages = t->nops};
		ret = mvc_write_paged(r->c, &pg);
		scur = (scur + t->nops) % ns;
		dcur = (dcur + t->nops) % nd;
		*ops = t->nops;
		*bytes = ps * t->nops;
	} else if (data == MV_TK_WRITEV) {
		for (uint32_t k = 0; k < t->nops; k++) {
			uint64_t len = part_len(t->bytes, t->nops, k);
			r->segs[k] = (struct mvc_seg){.src_off = take(&scur, len, r->src.len),
			                              .dst_off = take(&dcur, len, r->dst_len),
			                              .len = len};
		}
		ret = mvc_writev(r->c, r->src.region, r->dst, r->segs, t->nops);
		*ops = t->nops;
		*bytes = t->bytes;
	} else if (data) {
		/* Writes, and batches that mixed kinds: the same ops and bytes as writes. */
		for (uint32_t k = 0; k < t->nops && !ret; k++) {
			uint64_t len = part_len(t->bytes, t->nops, k);
			uint64_t so = take(&scur, len, r->src.len);
			uint64_t doff = take(&dcur, len, r->dst_len);
			ret = mvc_write(r->c, r->src.region, so, r->dst, doff, len);
		}
		*ops = t->nops;
		*bytes = t->bytes;
	}
	if (!ret && (t->kind & MV_TK_IMM))
		ret = mvc_write_imm(r->c, r->dst, t->imm);
	if (!ret)
		ret = mvc_submit(r->c, i);
	if (ret) {
		mvc_abort(r->c);
		return ret;
	}
	r->scur = scur;
	r->dcur = dcur;
	return 0;
}

uint32_t scatter_stride(uint64_t npages)
{
	static const uint32_t primes[] = {7919, 7907, 7901, 7883, 7879, 7877, 7873};

	for (size_t i = 0; i < sizeof(primes) / sizeof(primes[0]); i++)
		if (npages % primes[i] && (npages <= 2 || primes[i] % npages != 1))
			return primes[i];
	return 2;
}
