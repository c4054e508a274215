/* SPDX-License-Identifier: MIT */
/*
 * The C side of bench_submit.py: one mvc_write_paged() and mvc_submit() of
 * a prepared page list, timed in C, on the connection the Python side uses.
 * It takes libmvc's functions as pointers (ctypes hands over the ones it
 * loaded) instead of linking libmvc, so both sides drive the same library
 * instance, connection and arena. Built as $(B)/libmvc_pybench.so.
 */
#include <stdint.h>
#include <time.h>

#include "mvc.h"

typedef int (*paged_fn)(struct mvc *, const struct mvc_pages *);
typedef int (*submit_fn)(struct mvc *, uint64_t);

int64_t mvb_paged_submit(struct mvc *c, paged_fn write_paged, submit_fn submit,
                         const struct mvc_pages *p, uint64_t cookie);

/* Nanoseconds the two calls took, or the first -errno either returned. */
int64_t mvb_paged_submit(struct mvc *c, paged_fn write_paged, submit_fn submit,
                         const struct mvc_pages *p, uint64_t cookie)
{
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	int ret = write_paged(c, p);
	if (!ret)
		ret = submit(c, cookie);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (ret)
		return ret;
	return (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
}
