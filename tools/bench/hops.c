/* SPDX-License-Identifier: MIT */
/*
 * The bench movers' hop histograms: mapped from their stats segments,
 * summed over shards, and read back as percentiles of a stretch. See
 * hops.h.
 */
#include <string.h>

#include "hops.h"

int movers_stats_open(struct movers_stats *m, char *why, size_t whylen)
{
	const char *sock[2] = {mover_a.sock, mover_b.sock};
	int ret = 0, i;

	memset(m, 0, sizeof(*m));
	for (i = 0; i < 2 && !ret; i++) {
		size_t size = 0;
		int fd = fetch_segment(sock[i], &size, why, whylen);
		if (fd < 0) {
			ret = fd;
			break;
		}
		ret = map_view(fd, size, &m->v[i], why, whylen);
		close(fd);
	}
	if (ret) {
		while (--i >= 0 && m->v[i].h) {
			munmap((void *)m->v[i].h, m->v[i].size);
			close(m->v[i].pidfd);
		}
		memset(m, 0, sizeof(*m));
		return ret;
	}
	m->mapped = 1;
	return 0;
}

void movers_stats_close(struct movers_stats *m)
{
	for (int i = 0; i < 2 && m->mapped; i++) {
		munmap((void *)m->v[i].h, m->v[i].size);
		close(m->v[i].pidfd);
	}
	m->mapped = 0;
}

void hop_counts_take(const struct movers_stats *m, struct hop_counts *o)
{
	memset(o, 0, sizeof(*o));
	for (int i = 0; i < 2 && m->mapped; i++)
		for (uint32_t s = 0; s < m->v[i].h->nshards; s++) {
			const struct mv_stats_shard *sh = &m->v[i].shards[s];
			o->sleeps[i] += atomic_load_explicit(&sh->sleeps, memory_order_relaxed);
			for (int h = 0; h < MV_HOPS; h++)
				for (int b = 0; b < MV_HOP_BUCKETS; b++)
					o->h[h][b] += atomic_load_explicit(&sh->hop[h][b],
					                                   memory_order_relaxed);
		}
}

void hop_counts_pct(const struct hop_counts *a, const struct hop_counts *b, double *p50,
                    double *p99)
{
	uint64_t d[MV_HOP_BUCKETS];

	for (int h = 0; h < MV_HOPS; h++) {
		uint64_t n = 0;
		for (int k = 0; k < MV_HOP_BUCKETS; k++)
			n += d[k] = b->h[h][k] - a->h[h][k];
		p50[h] = n ? hop_quantile(d, MV_HOP_BUCKETS, 0.5) / 1e3 : -1;
		p99[h] = n ? hop_quantile(d, MV_HOP_BUCKETS, 0.99) / 1e3 : -1;
	}
}
