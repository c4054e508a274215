/* SPDX-License-Identifier: MIT */
/*
 * Entry points for language bindings: a paged write whose page arrays are
 * the binding's own array objects, checked and taken by reading their
 * headers where the binding says they keep their fields. From Python each
 * attribute read of an array costs what a thousand pages' worth of libmvc's
 * own work does, after a wait more (libclient/python/bench/bench_submit.py),
 * so the binding hands the objects over and libmvc reads them in C.
 */
#include "mvc_int.h"

#include <string.h>

/* The fields at byte offset at of obj, read with memcpy: the binding's
 * offsets promise this compiler nothing about alignment. */
static const void *ptr_at(const void *obj, uint32_t at)
{
	const void *v;

	memcpy(&v, (const char *)obj + at, sizeof(v));
	return v;
}

static int int_at(const void *obj, uint32_t at)
{
	int v;

	memcpy(&v, (const char *)obj + at, sizeof(v));
	return v;
}

int mvc_array_take(const struct mvc_array_layout *l, const void *obj, const uint32_t **data,
                   uint64_t *n)
{
	/* The type first: an object of another type may be shorter than the
	 * offsets that follow. */
	if (!obj || ptr_at(obj, l->type_at) != l->type || ptr_at(obj, l->descr_at) != l->descr ||
	    int_at(obj, l->nd_at) != 1 ||
	    (int_at(obj, l->flags_at) & (int)l->flags) != (int)l->flags)
		return 0;
	const int64_t *dims = ptr_at(obj, l->dims_at);
	int64_t len = 0;
	if (dims)
		memcpy(&len, dims, sizeof(len));
	if (len < 1 || len > UINT32_MAX)
		return 0;
	*data = ptr_at(obj, l->data_at);
	*n = (uint64_t)len;
	return 1;
}

/* Stores a's arrays and bases in *p when l takes both at one length. */
static int take_both(struct mvc_pages *p, const struct mvc_array_layout *l,
                     const struct mvc_paged_objs *a)
{
	const uint32_t *src, *dst;
	uint64_t n, dn;

	if (!mvc_array_take(l, a->src_pages, &src, &n) ||
	    !mvc_array_take(l, a->dst_pages, &dst, &dn) || n != dn)
		return 0;
	p->src_pages = src;
	p->dst_pages = dst;
	p->npages = (uint32_t)n;
	p->src_base = a->src_base;
	p->dst_base = a->dst_base;
	return 1;
}

int mvc_write_paged_objs(struct mvc *c, struct mvc_pages *p, const struct mvc_array_layout *l,
                         const struct mvc_paged_objs *a)
{
	return take_both(p, l, a) ? mvc_write_paged(c, p) : 1;
}

int mvc_submit_paged_objs(struct mvc *c, struct mvc_pages *p, const struct mvc_array_layout *l,
                          const struct mvc_paged_objs *a)
{
	return take_both(p, l, a) ? mvc_submit_paged(c, p, a->cookie) : 1;
}
