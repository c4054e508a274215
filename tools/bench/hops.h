/* SPDX-License-Identifier: MIT */
/*
 * hops.h: both bench movers' hop histograms (mover/stats_layout.h), for
 * rows that say where a batch's time went: the stats segments mapped once,
 * counts taken before and after a stretch, and the stretch's median and
 * 99th percentile per hop. Single-threaded: the row's thread uses it.
 */
#ifndef MV_BENCH_HOPS_H
#define MV_BENCH_HOPS_H

#include "harness.h"
#include "../stats_view.h"

struct movers_stats {
	struct view v[2]; /* mover A, mover B */
	int mapped;
};

/* Hop counts summed over both movers' shards, and their shards' sleeps. */
struct hop_counts {
	uint64_t h[MV_HOPS][MV_HOP_BUCKETS];
	uint64_t sleeps[2];
};

/* Maps both movers' segments. 0, or -errno with why (an older mover, run
 * with --mover to compare, may hand out none: rows then go without). */
int movers_stats_open(struct movers_stats *m, char *why, size_t whylen);
void movers_stats_close(struct movers_stats *m);
/* The counts now (zeros where nothing is mapped). The movers publish every
 * 10 ms: take the later counts 25 ms after the stretch ends. */
void hop_counts_take(const struct movers_stats *m, struct hop_counts *o);
/* Per hop, the p50 and p99 in us of what was counted between a and b; < 0
 * where the hop saw nothing. */
void hop_counts_pct(const struct hop_counts *a, const struct hop_counts *b, double *p50,
                    double *p99);

#endif
