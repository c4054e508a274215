/* SPDX-License-Identifier: MIT */
/*
 * stats_view.h: a running mover's stats segment (mover/stats_layout.h) as
 * the tools see it: asked for over the control socket, mapped read-only and
 * checked, since everything in it is another process's writing; and the
 * hop histograms read back as percentiles. Header-only, for mvstat and
 * mvbench; safe from any thread.
 */
#ifndef MV_STATS_VIEW_H
#define MV_STATS_VIEW_H

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mv_sock.h"
#include "mv_wire.h"
#include "stats_layout.h"

struct view {
	int pidfd; /* the mover's process: readable once it exits, even as a zombie */
	const struct mv_stats_hdr *h;
	const struct mv_stats_shard *shards;
	const struct mv_stats_ring *rings;
	const struct mv_stats_peer *peers;
	size_t size;
};

/* Asks for the segment; returns its fd and size, or -errno with why. */
static inline int fetch_segment(const char *path, size_t *size, char *why, size_t whylen)
{
	struct {
		struct mv_msg_hdr h;
		struct mv_stats_rep r;
	} rep;
	int fd, ret = mv_request(path, MV_MSG_STATS, NULL, 0, &rep, sizeof(rep), &fd, why, whylen);

	if (ret)
		return ret;
	if (fd < 0) {
		snprintf(why, whylen, "the mover at %s did not hand out its stats segment", path);
		return -EPROTO;
	}
	*size = rep.r.seg_size;
	return fd;
}

/* Maps and checks the segment: everything in it is someone else's writing. */
static inline int map_view(int fd, size_t size, struct view *v, char *why, size_t whylen)
{
	void *base = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);

	if (base == MAP_FAILED) {
		snprintf(why, whylen, "mapping the stats segment: %s", strerror(errno));
		return -errno;
	}
	const struct mv_stats_hdr *h = base;
	if (size < sizeof(*h) || h->magic != MV_STATS_MAGIC || h->abi != MV_STATS_ABI ||
	    h->seg_size != size || h->nshards == 0 || h->nshards > MV_MAX_SHARDS ||
	    h->nrings != MV_STATS_RINGS || h->npeers != MV_STATS_PEERS ||
	    h->shard_off + (uint64_t)h->nshards * sizeof(struct mv_stats_shard) > size ||
	    h->ring_off + (uint64_t)h->nshards * h->nrings * sizeof(struct mv_stats_ring) > size ||
	    h->peer_off + (uint64_t)h->nshards * h->npeers * sizeof(struct mv_stats_peer) > size) {
		snprintf(why, whylen,
		         "the stats segment is not one this mvstat reads (magic %#" PRIx64
		         ", ABI %u)",
		         size >= sizeof(*h) ? h->magic : 0, size >= sizeof(*h) ? h->abi : 0);
		munmap(base, size);
		return -EPROTO;
	}
	v->h = h;
	v->pidfd = (int)syscall(SYS_pidfd_open, h->pid, 0);
	v->shards = (const void *)((const char *)base + h->shard_off);
	v->rings = (const void *)((const char *)base + h->ring_off);
	v->peers = (const void *)((const char *)base + h->peer_off);
	v->size = size;
	return 0;
}

static inline const char *hop_name(int h)
{
	static const char *const names[MV_HOPS] = {"queue", "post",  "fabric",
	                                           "imm",   "batch", "deliver"};
	return h >= 0 && h < MV_HOPS ? names[h] : "?";
}

/* Bucket b's range in ns: [lo, hi). */
static inline void hop_range(int b, double *lo, double *hi)
{
	*hi = (double)(1ull << (b + MV_HOP_SHIFT));
	*lo = b == 0 ? 0 : *hi / 2;
}

/* The q-quantile (0..1) of a histogram of n buckets, in ns, interpolated
 * within its bucket; 0 for an empty one. */
static inline double hop_quantile(const uint64_t *hist, int n, double q)
{
	uint64_t total = 0, cum = 0;

	for (int b = 0; b < n; b++)
		total += hist[b];
	if (!total)
		return 0;
	double rank = q * (double)total;
	for (int b = 0; b < n; b++) {
		if (!hist[b] || (double)(cum + hist[b]) < rank) {
			cum += hist[b];
			continue;
		}
		double lo, hi;
		hop_range(b, &lo, &hi);
		return lo + (hi - lo) * (rank - (double)cum) / (double)hist[b];
	}
	double lo, hi;
	hop_range(n - 1, &lo, &hi);
	return hi;
}

#endif
