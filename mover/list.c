/* SPDX-License-Identifier: MIT */
/*
 * Lists by reference: a LIST descriptor names a slice of a page or segment
 * list in its client's arena (format in mv_wire.h), and the shard expands
 * it into fabric writes lazily, only as far as its client's queue and the
 * op pool have room, resuming on later turns. While a list is being expanded
 * nothing after it in the same ring is taken, so its END still comes last.
 * The header is copied and checked once; each index is copied into shard
 * memory before it is checked and used, so a client rewriting its list
 * after submitting fails its own batch at worst. Runs adjacent on both
 * sides merge into one write (up to MV_CHUNK), and take.c merges
 * neighbouring runs into multi-iov writes within the provider's limits.
 */
#include "shard_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define LIST_STEP 256u /* entries copied out of the arena at a time */

/* Room for one more run: the client's queue and the op pool, and its share
 * of the pool, as consume() keeps them. */
static int room_for(const struct mv_shard *s, const struct mv_attach *at, uint64_t len)
{
	return at->npq <= s->fab.tx_size * 2 &&
	       s->nfree > MV_IOV_MAX + (len + MV_CHUNK - 1) / MV_CHUNK + 1 && mv_pool_room(s, at);
}

/* Ends the cursor of at, failing its part with why. */
static void list_fail(struct mv_attach *at, int err, uint8_t cause, uint32_t region,
                      const char *why)
{
	struct mv_cursor *c = &at->cur;

	mv_fail_part(&at->parts[c->d.batch], err, cause, region, why);
	c->active = 0;
}

/* One side of entry i: page a (base + a * stride) or offset a of a segment,
 * len bytes inside limit; its offset in *off, or the cursor ends failed. */
static int side(struct mv_attach *at, uint64_t i, const char *what, const char *holder, uint32_t id,
                uint64_t base, uint64_t stride, uint64_t a, uint64_t len, uint64_t limit,
                uint64_t *off)
{
	int pages = at->cur.h.kind == MV_LIST_PAGES;
	char why[MV_ERRLEN];
	int ret = pages ? mv_check_span(base, a, stride, len, limit, off)
	                : mv_check_span(a, 0, 0, len, limit, off);

	if (!ret)
		return 0;
	if (pages)
		snprintf(why, sizeof(why),
		         "list entry %" PRIu64 ": %s page %" PRIu64 " lies outside %s %u (%" PRIu64
		         " bytes)",
		         i, what, a, holder, id, limit);
	else
		snprintf(why, sizeof(why),
		         "list entry %" PRIu64 ": %" PRIu64 " bytes at %" PRIu64
		         " lie outside %s %u (%" PRIu64 " bytes)",
		         i, len, a, holder, id, limit);
	list_fail(at, ret == -EOVERFLOW ? -EOVERFLOW : -ERANGE, MV_CAUSE_BOUNDS, id, why);
	return ret;
}

/* Checks entry i (copied: src, dst, len) of the list and gives its offsets. */
static int entry(struct mv_attach *at, const struct mv_region *src, const struct mv_import *dst,
                 uint64_t i, uint64_t a, uint64_t b, uint64_t len, uint64_t *so, uint64_t *doff)
{
	const struct mv_list_hdr *h = &at->cur.h;

	return side(at, i, "source", "region", at->cur.d.src, h->src_base, h->src_stride, a, len,
	            src->len, so)
	           ?: side(at, i, "destination", "import", at->cur.d.dst, h->dst_base,
	                   h->dst_stride, b, len, dst->len, doff);
}

/* Queues the cursor's run, if it has one. */
static void flush_run(struct mv_shard *s, struct mv_attach *at, struct mv_region *src,
                      struct mv_import *dst)
{
	struct mv_cursor *c = &at->cur;

	if (!c->run_len)
		return;
	struct mv_desc d = c->d;
	d.op = MV_OP_WRITE;
	d.src_off = c->run_so;
	d.dst_off = c->run_doff;
	d.len = c->run_len;
	mv_take_run(s, at, &d, src, dst);
	c->run_len = 0;
}

int mv_list_expand(struct mv_shard *s, struct mv_attach *at)
{
	struct mv_cursor *c = &at->cur;
	struct mv_part *p = &at->parts[c->d.batch];
	const struct mv_client *cl = at->cl;
	char why[MV_ERRLEN];
	uint8_t cause;
	int n = 0;

	if (p->failed) {
		c->active = 0;
		return 0;
	}
	/* Looked up on every turn: the client may free either between two. */
	struct mv_region *src = mv_region_get(s->mv, c->d.src);
	struct mv_import *dst = mv_import_get(at->cl, c->d.dst);
	struct mv_desc probe = c->d;
	probe.src_off = probe.dst_off = 0;
	probe.len = 1;
	if (mv_check_write(&probe, src, dst, cl->id, why, sizeof(why), &cause)) {
		list_fail(at, -ENOENT, cause, cause == MV_CAUSE_NO_IMPORT ? c->d.dst : c->d.src,
		          why);
		return 0;
	}
	if (atomic_load_explicit(&dst->peer->gone, memory_order_relaxed)) {
		mv_peer_why(dst->peer, why, sizeof(why));
		list_fail(at, -EHOSTUNREACH, MV_CAUSE_PEER_GONE, c->d.dst, why);
		return 0;
	}
	p->peer = dst->peer->mover_id;

	const uint8_t *body = cl->arena + c->d.src_off + sizeof(struct mv_list_hdr);
	int pages = c->h.kind == MV_LIST_PAGES;
	while (c->next < c->end) {
		uint32_t a[LIST_STEP], b[LIST_STEP];
		struct mv_seg sg[LIST_STEP];
		uint32_t k =
		    c->end - c->next < LIST_STEP ? (uint32_t)(c->end - c->next) : LIST_STEP;

		/* Room for the run and the next piece: entries go out in pieces
		 * of MV_CHUNK at most, so a page of any size needs no more (a
		 * whole page could never fit the pool, and the ring would wait
		 * for ever before its bounds were even checked). */
		uint64_t next = pages && c->h.page_size < MV_CHUNK ? c->h.page_size : MV_CHUNK;
		if (!room_for(s, at, c->run_len + next))
			break;
		/* The copy is the list from here on: nothing below reads the
		 * arena again for these entries. */
		if (pages) {
			memcpy(a, body + c->next * 4, k * 4u);
			memcpy(b, body + (uint64_t)c->h.count * 4 + c->next * 4, k * 4u);
		} else {
			memcpy(sg, body + c->next * sizeof(*sg), k * sizeof(*sg));
		}
		uint32_t i = 0;
		while (i < k) {
			uint64_t so, doff, len = pages ? c->h.page_size : sg[i].len;
			if (entry(at, src, dst, c->next + i, pages ? a[i] : sg[i].src_off,
			          pages ? b[i] : sg[i].dst_off, len, &so, &doff))
				return n + (int)i;
			if (c->part >= len) {
				snprintf(why, sizeof(why),
				         "list entry %" PRIu64 " changed while it was expanded",
				         c->next + i);
				list_fail(at, -EINVAL, MV_CAUSE_BAD_DESC, 0, why);
				return n + (int)i;
			}
			/* A long entry joins the run in pieces of MV_CHUNK at
			 * most, so no run needs more ops than the pool holds. */
			uint64_t piece = len - c->part < MV_CHUNK ? len - c->part : MV_CHUNK;
			so += c->part;
			doff += c->part;
			/* Adjacent on both sides: one longer write. */
			if (!c->run_len || c->run_so + c->run_len != so ||
			    c->run_doff + c->run_len != doff || c->run_len + piece > MV_CHUNK) {
				if (!room_for(s, at, c->run_len))
					break;
				flush_run(s, at, src, dst);
				c->run_so = so;
				c->run_doff = doff;
			}
			c->run_len += piece;
			c->part += piece;
			if (c->part == len) {
				c->part = 0;
				i++;
			}
		}
		c->next += i;
		n += (int)i;
		if (i < k)
			break;
	}
	if (c->next == c->end) {
		flush_run(s, at, src, dst);
		c->active = 0;
	}
	return n;
}

int mv_list_take(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d)
{
	struct mv_part *p = &at->parts[d->batch];
	struct mv_cursor *c = &at->cur;
	char why[MV_ERRLEN];
	int ret;

	p->ndesc++;
	if (p->failed)
		return 0;
	*c = (struct mv_cursor){.d = *d};
	ret = mv_check_list(d, at->cl->arena, at->cl->arena_size, &c->h, why, sizeof(why));
	if (ret) {
		mv_fail_part(p, ret, MV_CAUSE_BAD_DESC, 0, why);
		return 0;
	}
	c->next = d->dst_off;
	c->end = d->dst_off + d->len;
	c->active = 1;
	return mv_list_expand(s, at);
}
