/* SPDX-License-Identifier: MIT */
/*
 * The stats segment (layout in stats_layout.h): created at start, handed to
 * tools as a read-only fd, refreshed by the main thread (heartbeat) and by
 * each shard (its counters every 10 ms, its ring and peer rows every
 * 100 ms) from the shard's own plain counters: the data path never touches
 * shared cache lines for statistics.
 */
#include "mover.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "stats_layout.h"

#define PUB_COUNTERS_NS 10000000ll
#define PUB_ROWS_NS     100000000ll

int mv_stats_init(struct mover *mv)
{
	size_t shard_off = (sizeof(struct mv_stats_hdr) + 63) & ~(size_t)63;
	size_t ring_off = shard_off + mv->nshards * sizeof(struct mv_stats_shard);
	size_t peer_off =
	    ring_off + (size_t)mv->nshards * MV_STATS_RINGS * sizeof(struct mv_stats_ring);
	size_t size =
	    peer_off + (size_t)mv->nshards * MV_STATS_PEERS * sizeof(struct mv_stats_peer);
	int fd = memfd_create("mover-stats", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	size = (size + 4095) & ~(size_t)4095;
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		close(fd);
		return -errno;
	}
	void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		close(fd);
		return -errno;
	}
	struct mv_stats_hdr *h = base;
	h->abi = MV_STATS_ABI;
	h->hdr_size = sizeof(*h);
	h->nshards = mv->nshards;
	h->nrings = MV_STATS_RINGS;
	h->npeers = MV_STATS_PEERS;
	h->pid = getpid();
	h->mover_id = mv->mover_id;
	h->shard_off = shard_off;
	h->ring_off = ring_off;
	h->peer_off = peer_off;
	h->seg_size = size;
	h->started_ns = (uint64_t)mv_now_ns();
	snprintf(h->provider, sizeof(h->provider), "%s", mv->prov);
	snprintf(h->socket, sizeof(h->socket), "%s", mv->cfg.socket_path);
	snprintf(h->release, sizeof(h->release), "%s", MVC_VERSION);
	const struct mv_gpu_rates *rt = &mv->gpu_rates;
	double mbps[7] = {rt->fab_hh, rt->fab_gg, rt->fab_hg, rt->fab_gh,
	                  rt->dtoh,   rt->htod,   rt->dtod};
	h->gpu = (uint32_t)rt->gpu;
	h->gpu_measured = (uint32_t)rt->measured;
	h->gpu_forced = mv->gpu_forced;
	for (int i = 0; i < 7; i++)
		h->gpu_mbps[i] = (uint32_t)(mbps[i] * 1e3);
	for (int i = 0; i < 8; i++) {
		const struct mv_gpu_choice *c = &mv->gpu_path[i >> 2][(i >> 1) & 1][i & 1];
		h->gpu_path[i] = c->path;
		snprintf(h->gpu_why[i], sizeof(h->gpu_why[i]), "%s", c->why);
	}
	atomic_store_explicit(&h->heartbeat_ns, (uint64_t)mv_now_ns(), memory_order_relaxed);
	for (uint32_t s = 0; s < mv->nshards; s++) {
		struct mv_shard *sh = &mv->shards[s];
		struct mv_stats_shard *ss = (struct mv_stats_shard *)((char *)base + shard_off) + s;
		ss->cpu = sh->cpu;
		ss->numa = sh->numa;
		sh->pub = ss;
		sh->pub_rings =
		    (struct mv_stats_ring *)((char *)base + ring_off) + (size_t)s * MV_STATS_RINGS;
		sh->pub_peers =
		    (struct mv_stats_peer *)((char *)base + peer_off) + (size_t)s * MV_STATS_PEERS;
	}
	atomic_thread_fence(memory_order_release);
	h->magic = MV_STATS_MAGIC;
	mv->stats = h;
	mv->stats_fd = fd;
	mv->stats_size = size;
	return 0;
}

/* Names a started shard's NIC; the shard itself never writes these. */
void mv_stats_shard_info(struct mv_shard *s)
{
	snprintf(s->pub->provider, sizeof(s->pub->provider), "%s", s->fab.prov);
	snprintf(s->pub->iface, sizeof(s->pub->iface), "%s", s->fab.iface);
}

void mv_stats_beat(struct mover *mv, uint32_t clients)
{
	struct mv_stats_hdr *h = mv->stats;

	atomic_store_explicit(&h->heartbeat_ns, (uint64_t)mv_now_ns(), memory_order_relaxed);
	atomic_store_explicit(&h->clients, clients, memory_order_relaxed);
}

void mv_stats_stop(struct mover *mv)
{
	if (mv->stats)
		atomic_store_explicit(&mv->stats->stopped, 1, memory_order_release);
}

#define PUT(field, v) atomic_store_explicit(&(field), (v), memory_order_relaxed)

static void publish_rows(struct mv_shard *s)
{
	uint8_t seen[MV_STATS_RINGS] = {0};

	for (uint32_t i = 0; i < s->natt; i++) {
		struct mv_attach *at = s->att[i];
		uint32_t slot = at->cl->id % MV_STATS_RINGS;
		struct mv_stats_ring *r = &s->pub_rings[slot];
		struct shmring_layout *sub = at->sub.lay, *comp = at->comp.lay;

		seen[slot] = 1;
		PUT(r->client, at->cl->id);
		PUT(r->pid, at->cl->pid);
		PUT(r->alive, shmring_peer_alive(&at->sub) != 0);
		PUT(r->sub_tail, atomic_load_explicit(&sub->prod.idx, memory_order_relaxed));
		PUT(r->sub_head, at->sub.local);
		PUT(r->sub_cap, at->sub.capacity);
		PUT(r->sub_hwm, at->sub_hwm);
		PUT(r->comp_tail, at->comp.local);
		PUT(r->comp_head, atomic_load_explicit(&comp->cons.idx, memory_order_relaxed));
		PUT(r->comp_cap, at->comp.capacity);
		PUT(r->comp_hwm, at->comp_hwm);
		PUT(r->shard_sleeping,
		    !!(atomic_load_explicit(&sub->sleep.flags, memory_order_relaxed) &
		       SHMRING_NEED_WAKEUP));
		PUT(r->client_sleeping,
		    !!(atomic_load_explicit(&comp->sleep.flags, memory_order_relaxed) &
		       SHMRING_NEED_WAKEUP));
		PUT(r->descs, at->descs);
		PUT(r->batches, at->batches);
		PUT(r->bytes_posted, at->posted_bytes);
		PUT(r->weight, at->weight);
		atomic_store_explicit(&r->used, 1, memory_order_release);
	}
	for (uint32_t slot = 0; slot < MV_STATS_RINGS; slot++)
		if (!seen[slot] &&
		    atomic_load_explicit(&s->pub_rings[slot].used, memory_order_relaxed))
			atomic_store_explicit(&s->pub_rings[slot].used, 0, memory_order_release);
	for (uint32_t p = 0; p < MV_STATS_PEERS && p < MV_MAX_PEERS; p++) {
		struct mv_peer *peer = s->mv->peers[p];
		if (s->hb && peer) {
			int gone = atomic_load_explicit(&peer->gone, memory_order_relaxed);
			int live = atomic_load_explicit(&peer->live, memory_order_relaxed);
			int64_t rtt = atomic_load_explicit(&peer->rtt_ns, memory_order_relaxed);
			PUT(s->pub_peers[p].mover_id, peer->mover_id);
			PUT(s->pub_peers[p].live,
			    gone == MV_PEER_REMOVED ? 0u : (uint32_t)live + 1);
			PUT(s->pub_peers[p].rtt_us, (uint32_t)(rtt / 1000));
		}
		if (!s->pst[p].writes && !s->pst[p].errors)
			continue;
		PUT(s->pub_peers[p].bytes, s->pst[p].bytes);
		PUT(s->pub_peers[p].writes, s->pst[p].writes);
		PUT(s->pub_peers[p].errors, s->pst[p].errors);
		if (peer)
			PUT(s->pub_peers[p].mover_id, peer->mover_id);
	}
}

/* force: the counters now, whatever the timer (before sleeping, on SYNC). */
void mv_stats_publish(struct mv_shard *s, int force)
{
	struct mv_stats_shard *o = s->pub;

	if (!o || (!force && s->now < s->next_pub))
		return;
	s->next_pub = s->now + PUB_COUNTERS_NS;
	PUT(o->posted, s->st.posted);
	PUT(o->completed, s->st.completed);
	PUT(o->bytes, s->st.bytes);
	PUT(o->descs, s->st.descs);
	PUT(o->batches, s->st.batches);
	PUT(o->eagain, s->st.eagain);
	PUT(o->posted_small, s->st.posted_small);
	PUT(o->copy_stops, s->st.copy_stops);
	PUT(o->holds, s->st.holds);
	PUT(o->promoted, s->st.promoted);
	PUT(o->bounce_held, mv_chunks_held(&s->gpu));
	PUT(o->piece_bytes, mv_fair_piece(s));
	PUT(o->cq_errors, s->st.cq_errors);
	PUT(o->retries, s->st.retries);
	PUT(o->timeouts, s->st.timeouts);
	PUT(o->imm_rx, s->st.imm_rx);
	PUT(o->pending, s->npend);
	PUT(o->inflight, s->posted);
	PUT(o->sleeps, s->st.sleeps);
	PUT(o->wakes, s->st.wakes);
	for (int i = 0; i < 4; i++)
		PUT(o->path_bytes[i], s->st.path_bytes[i]);
	PUT(o->samehost_bytes, s->st.path_bytes[MV_PATH_SAMEHOST]);
	for (int h = 0; h < MV_HOPS; h++) {
		PUT(o->hop_sum_ns[h], s->st.hop_sum[h]);
		for (int b = 0; b < MV_HOP_BUCKETS; b++)
			PUT(o->hop[h][b], s->st.hop[h][b]);
	}
	PUT(o->heartbeat_ns, (uint64_t)s->now);
	PUT(s->trace_dropped_pub, s->st.trace_dropped);
	if (s->now >= s->next_rows) {
		s->next_rows = s->now + PUB_ROWS_NS;
		publish_rows(s);
	}
}
