/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the checks every descriptor a client writes goes through before a
 * shard acts on it (mover/validate.c): a WRITE against the client's region
 * and import, a LIST against the client's list arena, and each list entry
 * as list.c copies and checks it (mv_check_span). The arena is a heap
 * buffer of exactly its size, so a list accepted past its end is an ASan
 * error; beyond that every acceptance is checked in 128-bit arithmetic:
 * nothing accepted reaches outside its region, import or arena.
 *
 * Input: struct desc_case (region and import sizes, owner, arena size, the
 * 64-byte descriptor), then the arena's bytes.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "mover.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STEP 256u /* entries list.c copies out of the arena at a time */
typedef unsigned __int128 u128;

static void write_case(const struct desc_case *c)
{
	struct mv_region src = {.id = c->d.src, .owner = 7, .len = c->src_len};
	struct mv_import dst = {.len = c->dst_len};
	char why[MV_ERRLEN] = "";
	uint8_t cause = 0;

	if (mv_check_write(&c->d, &src, c->d.dst & 1 ? NULL : &dst, c->owner, why, sizeof(why),
	                   &cause)) {
		assert(why[0] && cause != MV_CAUSE_NONE);
		return;
	}
	assert(c->owner == 7 && !(c->d.dst & 1));
	assert(c->d.len > 0 && c->d.len <= MV_MAX_WRITE);
	assert((u128)c->d.src_off + c->d.len <= src.len);
	assert((u128)c->d.dst_off + c->d.len <= dst.len);
}

/* One side of an entry as list.c's side() checks it. */
static void span(int pages, uint64_t base, uint64_t stride, uint64_t a, uint64_t len,
                 uint64_t limit)
{
	uint64_t off = 0;
	int ret = pages ? mv_check_span(base, a, stride, len, limit, &off)
	                : mv_check_span(a, 0, 0, len, limit, &off);
	if (ret) {
		assert(ret == -ERANGE || ret == -EOVERFLOW);
		return;
	}
	u128 o = pages ? (u128)a * stride + base : a;
	assert(len > 0 && o == off && o + len <= limit);
}

/* The entries [first, first + k) copied out as mv_list_expand() does. */
static void entries(const uint8_t *arena, const struct mv_desc *d, const struct mv_list_hdr *h,
                    uint64_t first, uint32_t k, uint64_t src_len, uint64_t dst_len)
{
	const uint8_t *body = arena + d->src_off + sizeof(struct mv_list_hdr);
	uint32_t a[STEP], b[STEP];
	struct mv_seg sg[STEP];

	if (h->kind == MV_LIST_PAGES) {
		memcpy(a, body + first * 4, k * 4u);
		memcpy(b, body + (uint64_t)h->count * 4 + first * 4, k * 4u);
		for (uint32_t i = 0; i < k; i++) {
			span(1, h->src_base, h->src_stride, a[i], h->page_size, src_len);
			span(1, h->dst_base, h->dst_stride, b[i], h->page_size, dst_len);
		}
	} else {
		memcpy(sg, body + first * sizeof(*sg), k * sizeof(*sg));
		for (uint32_t i = 0; i < k; i++) {
			span(0, 0, 0, sg[i].src_off, sg[i].len, src_len);
			span(0, 0, 0, sg[i].dst_off, sg[i].len, dst_len);
		}
	}
}

static void list_case(const struct desc_case *c, const uint8_t *bytes, size_t n)
{
	char why[MV_ERRLEN] = "";
	struct mv_list_hdr h;
	uint64_t size = c->arena_size % 65536;
	uint8_t *arena = size ? malloc(size) : NULL;

	if (arena) {
		memset(arena, 0, size);
		memcpy(arena, bytes, n < size ? n : size);
	}
	if (mv_check_list(&c->d, arena, size, &h, why, sizeof(why))) {
		assert(why[0]);
		free(arena);
		return;
	}
	assert(arena && c->d.src_off % MV_LIST_ALIGN == 0);
	assert((u128)c->d.src_off + mv_list_bytes(h.kind, h.count) <= size);
	assert(c->d.len && (u128)c->d.dst_off + c->d.len <= h.count);
	assert(h.kind != MV_LIST_PAGES || h.page_size);
	/* The first and the last steps of the slice: where a bound would slip. */
	uint64_t first = c->d.dst_off, end = c->d.dst_off + c->d.len;
	uint32_t k = end - first < STEP ? (uint32_t)(end - first) : STEP;
	entries(arena, &c->d, &h, first, k, c->src_len, c->dst_len);
	entries(arena, &c->d, &h, end - k, k, c->src_len, c->dst_len);
	free(arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct desc_case c;

	if (size < sizeof(c))
		return 0;
	memcpy(&c, data, sizeof(c));
	if (c.d.op == MV_OP_LIST)
		list_case(&c, data + sizeof(c), size - sizeof(c));
	else
		write_case(&c);
	return 0;
}
