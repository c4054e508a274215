/* SPDX-License-Identifier: MIT */
/*
 * The memory registry: client regions mapped into the mover and registered
 * on every shard's domain, peers known by their address blobs, and each
 * client's imports of peers' regions. Runs on the main thread only; shards
 * read the tables lock-free, so entries are published complete with release
 * stores and freed only after a mailbox round trip through every shard.
 */
#include "mover.h"

#include "mv_huge.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int mv_call_all(struct mover *mv, enum mv_cmd_type type, void *arg, char *why, size_t whylen)
{
	struct mv_cmd *cmds = calloc(mv->nshards, sizeof(*cmds));
	sem_t done;
	int ret = 0;

	if (!cmds)
		return -ENOMEM;
	sem_init(&done, 0, 0);
	for (uint32_t s = 0; s < mv->nshards; s++) {
		cmds[s].type = type;
		cmds[s].arg = arg;
		cmds[s].done = &done;
		mv_shard_post(&mv->shards[s], &cmds[s]);
	}
	/* Shards answer at their next loop turn; they never block on us. One
	 * may be stuck inside the provider, though, on a shm queue lock of ours
	 * that a dead sender left held, which only this thread frees
	 * (shm_lock.c): so the wait looks at those locks every 100 ms, but not
	 * for STOP (a stopping shard closes its endpoint before it answers). */
	for (uint32_t s = 0; s < mv->nshards; s++)
		for (;;) {
			struct timespec at;
			clock_gettime(CLOCK_REALTIME, &at);
			at.tv_nsec += 100000000;
			if (at.tv_nsec >= 1000000000) {
				at.tv_sec++;
				at.tv_nsec -= 1000000000;
			}
			if (sem_timedwait(&done, &at) == 0)
				break;
			if (errno == ETIMEDOUT && type != MV_CMD_STOP)
				mv_shm_locks_check(mv, 0);
		}
	for (uint32_t s = 0; s < mv->nshards; s++)
		if (cmds[s].status && !ret) {
			ret = cmds[s].status;
			snprintf(why, whylen, "shard %u: %s", s, cmds[s].msg);
		}
	sem_destroy(&done);
	free(cmds);
	return ret;
}

/* Generation << 16 | slot, the generation below 2^14: in remote CQ data a
 * region id sits in the top 32 bits, and the top two belong to acks. */
static uint32_t next_region_id(struct mover *mv, uint32_t idx)
{
	mv->region_gen[idx] = (uint16_t)((mv->region_gen[idx] + 1) & 0x3fff);
	if (!mv->region_gen[idx])
		mv->region_gen[idx] = 1;
	return (uint32_t)mv->region_gen[idx] << 16 | idx;
}

struct mv_region *mv_region_get(struct mover *mv, uint32_t id)
{
	/* A6 pairs with R6 in mv_region_add(): the region is complete */
	struct mv_region *r =
	    atomic_load_explicit(&mv->regions[id % MV_MAX_REGIONS], memory_order_acquire);

	return r && r->id == id ? r : NULL;
}

/* The stats segment's count of host regions by their pages (main thread
 * only: plain read, relaxed store). */
static void region_count(struct mover *mv, struct mv_region *r, int delta)
{
	struct mv_stats_hdr *st = mv->stats;
	uint32_t b = r->backing % 3;

	if (r->is_gpu || r->counted == (delta > 0))
		return;
	r->counted = delta > 0;
	atomic_store_explicit(&st->reg_now[b], st->reg_now[b] + (uint64_t)(int64_t)delta,
	                      memory_order_relaxed);
	atomic_store_explicit(&st->reg_bytes[b],
	                      st->reg_bytes[b] + (uint64_t)(delta * (int64_t)r->len),
	                      memory_order_relaxed);
}

/*
 * A remote mover may be in the middle of a write into the region (a
 * one-sided write is invisible to us), and a write we abandoned at its
 * deadline may still read from it. So the range is not unmapped now: it is
 * overlaid with anonymous memory, which drops the client's memfd at once and
 * catches late bytes harmlessly, and unmapped after a quarantine.
 */
static void region_free(struct mover *mv, struct mv_region *r)
{
	char why[MV_ERRLEN];
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (r->is_gpu) {
		/* A write may still land in it (the provider's, or a landing
		 * message's copy) or read from it (a CUDA copy queued on a
		 * shard's stream): deregistering and unmapping it now faulted
		 * the mover (libfabric 2.5.1's shm, path 1). GPU memory cannot
		 * be overlaid, so it stays registered and mapped, ours only, for
		 * the quarantine; late bytes land in what is still the client's
		 * allocation. */
		r->expires = (int64_t)ts.tv_sec + 3 * mv->cfg.op_timeout_ms / 1000 + 30;
		r->next_dead = mv->graveyard;
		mv->graveyard = r;
		return;
	}
	region_count(mv, r, -1);
	mv_host_revoke(mv, r); /* same-host peers copy into it no more */
	/* libfabric 1.17's shm drops a write into a closed key without
	 * answering its sender, whose endpoint then hangs for every client
	 * (tests/test_huge.c, free while writes stream in): on shm the key
	 * stays registered through the quarantine, over the overlay below,
	 * where late bytes land harmlessly (shm writes by virtual address).
	 * Providers that pin pages (verbs, efa) deregister now: late writes
	 * must not reach the client's pages. */
	r->mr_kept = !strcmp(mv->shards[0].fab.prov, "shm");
	if (!r->mr_kept)
		mv_call_all(mv, MV_CMD_DEREG, r, why, sizeof(why));
	if (r->host_fd >= 0)
		close(r->host_fd);
	r->host_fd = -1;
	if (mmap(r->map, r->map_len, PROT_READ | PROT_WRITE,
	         MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
		munmap(r->map, r->map_len);
		free(r);
		return;
	}
	r->expires = (int64_t)ts.tv_sec + 3 * mv->cfg.op_timeout_ms / 1000 + 30;
	r->next_dead = mv->graveyard;
	mv->graveyard = r;
}

void mv_region_reap(struct mover *mv, int all)
{
	struct timespec ts;
	struct mv_region **pp = &mv->graveyard;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	mv_host_reap(mv, all);
	while (*pp) {
		struct mv_region *r = *pp;
		if (all || r->expires <= (int64_t)ts.tv_sec) {
			*pp = r->next_dead;
			if (r->is_gpu) {
				/* At exit the shards and their fabric are gone already. */
				char why[MV_ERRLEN];
				if (!all)
					mv_call_all(mv, MV_CMD_DEREG, r, why, sizeof(why));
				mv_gpu_region_close(mv, r);
				if (r->gpu_fd >= 0)
					close(r->gpu_fd);
			} else {
				char why[MV_ERRLEN];
				if (r->mr_kept && !all)
					mv_call_all(mv, MV_CMD_DEREG, r, why, sizeof(why));
				munmap(r->map, r->map_len);
			}
			free(r);
			continue;
		}
		pp = &r->next_dead;
	}
}

static int region_slot(struct mover *mv, char *why, size_t whylen)
{
	for (uint32_t idx = 1; idx < MV_MAX_REGIONS; idx++)
		if (!atomic_load_explicit(&mv->regions[idx], memory_order_relaxed))
			return (int)idx;
	snprintf(why, whylen, "all %u region slots are in use", MV_MAX_REGIONS);
	return -ENOSPC;
}

/* Names a new region, registers it on every shard and publishes it; on
 * failure the region is freed (deregistered where it was registered). */
static int region_publish(struct mover *mv, struct mv_client *cl, struct mv_region *r, uint32_t idx,
                          struct mv_region **out, char *why, size_t whylen)
{
	int ret;

	r->id = next_region_id(mv, idx);
	if (getrandom(&r->secret, sizeof(r->secret), 0) != (ssize_t)sizeof(r->secret)) {
		snprintf(why, whylen, "getrandom for the region's secret: %s", strerror(errno));
		region_free(mv, r);
		return -EAGAIN;
	}
	ret = mv_call_all(mv, MV_CMD_REG, r, why, whylen);
	if (ret) {
		region_free(mv, r);
		return ret;
	}
	/* R6 pairs with A6 in mv_region_get() */
	atomic_store_explicit(&mv->regions[idx], r, memory_order_release);
	cl->nregions++;
	cl->reg_bytes += r->len;
	*out = r;
	return 0;
}

static const char *const backing_name[] = {"4 KiB pages", "hugetlb 2 MiB pages",
                                           "shmem with transparent huge pages"};

/* One line per registration: what backs it, what it cost, and on 4 KiB
 * pages why not huge ones (the client says which of its choices it was;
 * the numbers are this host's now). Regions under 2 MiB at debug level. */
static void region_log(struct mover *mv, const struct mv_client *cl, struct mv_region *r,
                       uint32_t why)
{
	uint64_t mr = 0;
	char whytext[256] = "";

	for (uint32_t s = 0; s < mv->nshards; s++)
		mr = r->mr_ns[s] > mr ? r->mr_ns[s] : mr;
	if (r->backing == MVC_BACKING_4K && why != MV_HUGE_WHY_NONE) {
		struct mv_huge_state h;
		char t[192];
		mv_huge_read(&h);
		mv_huge_why_text(t, sizeof(t), why, r->len, &h);
		snprintf(whytext, sizeof(whytext), ", not huge: %s", t);
		if (r->len >= MV_HUGE_SIZE)
			memcpy(mv->stats->reg_why, t, sizeof(mv->stats->reg_why));
	}
	struct mv_stats_hdr *st = mv->stats;
	region_count(mv, r, 1);
	atomic_store_explicit(&st->reg_total, st->reg_total + 1, memory_order_relaxed);
	atomic_store_explicit(&st->reg_map_ns, st->reg_map_ns + r->map_ns, memory_order_relaxed);
	atomic_store_explicit(&st->reg_mr_ns, st->reg_mr_ns + mr, memory_order_relaxed);
	mv_logl(
	    r->len >= MV_HUGE_SIZE ? MV_LOG_INFO : MV_LOG_DEBUG,
	    "region %u of client %u: %.1f MiB on %s (mapped in %.1f ms, fi_mr_reg %.2f ms on the "
	    "slowest of %u shards)%s",
	    r->id, cl->id, (double)r->len / (1 << 20), backing_name[r->backing % 3],
	    (double)r->map_ns / 1e6, (double)mr / 1e6, mv->nshards, whytext);
}

int mv_region_add(struct mover *mv, struct mv_client *cl, int fd, const struct mv_reg_req *req,
                  struct mv_region **out, char *why, size_t whylen)
{
	uint64_t off = req->offset, len = req->len;
	struct stat st;
	uint32_t idx;
	int ret;

	if (fstat(fd, &st) < 0) {
		snprintf(why, whylen, "fstat of the region fd: %s", strerror(errno));
		return -errno;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "region fd is not a memfd or hugetlbfs file");
		return -EBADF;
	}
	if (len == 0 || off > (uint64_t)st.st_size || (uint64_t)st.st_size - off < len) {
		snprintf(why, whylen,
		         "region of %llu bytes at offset %llu does not fit a %lld-byte file",
		         (unsigned long long)len, (unsigned long long)off, (long long)st.st_size);
		return -ERANGE;
	}
	/* A client that shrinks its file later would fault us (SIGBUS in a
	 * shard): demand the seal. Files that cannot carry it (a disk file,
	 * a file on a mounted hugetlbfs) are refused; a hugetlb memfd can. */
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
		snprintf(why, whylen,
		         "region fd must be a memfd sealed against shrinking (F_SEAL_SHRINK); "
		         "for huge pages use memfd_create(MFD_HUGETLB | MFD_ALLOW_SEALING)");
		return -EPERM;
	}
	if ((ret = mv_quota_take(mv, cl, MV_Q_REGIONS, 1, why, whylen)) ||
	    (ret = mv_quota_take(mv, cl, MV_Q_BYTES, len, why, whylen)))
		return ret;
	int slot = region_slot(mv, why, whylen);
	if (slot < 0)
		return slot;
	idx = (uint32_t)slot;

	struct mv_region *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	/* A hugetlbfs file maps in whole huge pages; shmem asked for THP maps
	 * 2 MiB-aligned with MADV_HUGEPAGE, as the client's mapping does, so
	 * that its huge pages map huge here too. */
	int thp = (req->flags & MV_REG_THP) != 0;
	r->backing = mv_huge_fd_page(fd) > (uint64_t)sysconf(_SC_PAGESIZE) ? MVC_BACKING_HUGETLB
	             : thp                                                 ? MVC_BACKING_THP
	                                                                   : MVC_BACKING_4K;
	int64_t t0 = mv_now_ns();
	r->base = mv_huge_map(fd, off, len, r->backing == MVC_BACKING_THP, 1, &r->map, &r->map_len);
	if (!r->base) {
		ret = -errno;
		snprintf(why, whylen,
		         "mapping the region (%llu bytes at %llu of the fd, on %s): %s",
		         (unsigned long long)len, (unsigned long long)off, backing_name[r->backing],
		         strerror(errno));
		goto err_free;
	}
	r->map_ns = (uint64_t)(mv_now_ns() - t0);
	r->len = len;
	r->owner = cl->id;
	r->owner_uid = cl->uid;
	/* Kept to hand to same-host peer movers (HOST_FD), who copy into it;
	 * without an fd to spare the region is written through the fabric. */
	r->host_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	r->fd_off = off;
	ret = region_publish(mv, cl, r, idx, out, why, whylen);
	if (!ret)
		region_log(mv, cl, r, req->why);
	return ret;

err_free:
	free(r);
	return ret;
}

int mv_region_add_gpu(struct mover *mv, struct mv_client *cl, const struct mv_gpu_desc *g, int fd,
                      uint64_t len, struct mv_region **out, char *why, size_t whylen)
{
	int idx, ret;

	if (len == 0) {
		snprintf(why, whylen, "cannot register an empty GPU region");
		return -EINVAL;
	}
	if ((ret = mv_quota_take(mv, cl, MV_Q_REGIONS, 1, why, whylen)) ||
	    (ret = mv_quota_take(mv, cl, MV_Q_BYTES, len, why, whylen)))
		return ret;
	idx = region_slot(mv, why, whylen);
	if (idx < 0)
		return idx;
	struct mv_region *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->len = len;
	r->owner = cl->id;
	r->owner_uid = cl->uid;
	r->gpu_fd = -1;
	r->host_fd = -1;
	ret = mv_gpu_region_open(mv, r, g, fd, why, whylen);
	if (ret) {
		free(r);
		return ret;
	}
	/* Kept to hand to same-host peer movers (GPU_FD); owned from here. */
	if (g->kind == MV_GPU_VMM)
		r->gpu_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	/* Never dereferenced here: the address the provider registers (path 1). */
	r->base = (uint8_t *)(uintptr_t)r->gpu.dptr;
	char busid[sizeof(g->busid) + 1];
	memcpy(busid, g->busid, sizeof(g->busid));
	busid[sizeof(g->busid)] = 0;
	r->shard_mask = mv_topo_gpu_mask(mv, busid);
	return region_publish(mv, cl, r, (uint32_t)idx, out, why, whylen);
}

int mv_region_del(struct mover *mv, struct mv_client *cl, uint32_t id, char *why, size_t whylen)
{
	struct mv_region *r = mv_region_get(mv, id);
	char tmp[MV_ERRLEN];

	if (!r || r->owner != cl->id) {
		snprintf(why, whylen, "region %u is not one of this client's regions", id);
		return -ENOENT;
	}
	atomic_store_explicit(&mv->regions[id % MV_MAX_REGIONS], NULL, memory_order_release);
	mv_names_region_gone(mv, id); /* its names go from the cluster */
	/* Grace period: after it no shard holds r from a lookup. Ops already
	 * queued keep using the mapping, which stays until they finish: the
	 * client must not free a region it has writes in flight from. */
	mv_call_all(mv, MV_CMD_SYNC, NULL, tmp, sizeof(tmp));
	cl->reg_bytes -= r->len;
	region_free(mv, r);
	cl->nregions--;
	return 0;
}

void mv_region_blob(struct mover *mv, const struct mv_region *r, struct mv_region_blob *b)
{
	memset(b, 0, sizeof(*b));
	b->magic = MV_BLOB_MAGIC_REGION;
	b->version = MV_WIRE_VERSION;
	b->nshards = (uint16_t)mv->nshards;
	b->mover_id = mv->mover_id;
	b->region = r->id;
	b->len = r->len;
	b->secret = r->secret;
	if (r->is_gpu) {
		int refused = atomic_load_explicit(&r->fabric_refused, memory_order_relaxed);
		b->flags = MV_BLOB_GPU | (mv->hmem && !refused ? 0 : MV_BLOB_NO_FABRIC) |
		           (mv->gpu_land || refused ? MV_BLOB_LANDING : 0);
		memcpy(b->host, mv->host_id, sizeof(b->host));
		b->gpu = r->gdesc;
		snprintf(b->sock, sizeof(b->sock), "%s", mv->cfg.socket_path);
	} else if (r->host_fd >= 0) {
		/* A peer mover of this host may ask for the memfd (HOST_FD). */
		b->flags = MV_BLOB_HOST_FD;
		memcpy(b->host, mv->host_id, sizeof(b->host));
		snprintf(b->sock, sizeof(b->sock), "%s", mv->cfg.socket_path);
	}
	for (uint32_t s = 0; s < mv->nshards; s++) {
		/* With FI_MR_VIRT_ADDR the target address is our virtual one;
		 * otherwise it is an offset into the registration. */
		b->shard[s].addr = mv->shards[s].fab.virt_addr ? (uint64_t)(uintptr_t)r->base : 0;
		b->shard[s].key = r->key[s];
	}
}

void mv_addr_blob(struct mover *mv, struct mv_addr_blob *b)
{
	memset(b, 0, sizeof(*b));
	b->magic = MV_BLOB_MAGIC_ADDR;
	b->version = MV_WIRE_VERSION;
	b->nshards = (uint16_t)mv->nshards;
	snprintf(b->release, sizeof(b->release), "%s", MVC_VERSION);
	b->mover_id = mv->mover_id;
	snprintf(b->provider, sizeof(b->provider), "%s", mv->prov);
	b->addrlen = (uint32_t)mv->shards[0].fab.addrlen;
	b->pid = (int32_t)getpid();
	b->pidns = mv->pidns;
	memcpy(b->host, mv->host_id, sizeof(b->host));
	for (uint32_t s = 0; s < mv->nshards; s++) {
		struct mv_shard *sh = &mv->shards[s];
		memcpy(b->addr[s], sh->fab.addr, sh->fab.addrlen);
		b->bell[s].addr = sh->fab.virt_addr ? (uint64_t)(uintptr_t)sh->bell : 0;
		b->bell[s].key = sh->bell_key;
	}
}

int mv_peer_add(struct mover *mv, struct mv_client *cl, const struct mv_addr_blob *b, size_t len,
                uint32_t *out, uint32_t *live, char *why, size_t whylen)
{
	struct mv_peer *p = NULL;
	uint32_t slot, free_slot = MV_MAX_PEERS;
	int ret;

	ret = mv_check_addr_blob(b, len, mv->prov, why, whylen);
	if (ret)
		return ret;
	for (slot = 0; slot < MV_CLIENT_MAX_PEERS; slot++)
		if (!cl->peers[slot])
			break;
	if (slot == MV_CLIENT_MAX_PEERS) {
		snprintf(why, whylen, "this client already has %u peers", MV_CLIENT_MAX_PEERS);
		return -ENOSPC;
	}
	if ((ret = mv_quota_take(mv, cl, MV_Q_PEERS, 1, why, whylen)))
		return ret;
	for (uint32_t i = 0; i < MV_MAX_PEERS; i++) {
		struct mv_peer *q = mv->peers[i];
		if (q && q->mover_id == b->mover_id && !memcmp(&q->blob, b, sizeof(*b))) {
			p = q;
			break;
		}
		if (!q && free_slot == MV_MAX_PEERS)
			free_slot = i;
	}
	if (!p) {
		if (free_slot == MV_MAX_PEERS) {
			snprintf(why, whylen, "the mover knows %u peers already", MV_MAX_PEERS);
			return -ENOSPC;
		}
		p = calloc(1, sizeof(*p));
		if (!p)
			return -ENOMEM;
		memcpy(&p->blob, b, sizeof(*b));
		p->mover_id = b->mover_id;
		p->nshards = b->nshards;
		p->index = free_slot;
		ret = mv_peer_watch(mv, p, why, whylen);
		if (ret) {
			free(p);
			return ret;
		}
		ret = mv_call_all(mv, MV_CMD_PEER_ADD, p, why, whylen);
		if (ret) {
			mv_peer_unwatch(mv, p);
			mv_wake_peer_close(p);
			free(p);
			return ret;
		}
		mv->peers[free_slot] = p;
	}
	if (atomic_load(&p->gone) >= MV_PEER_EXITED) { /* or CUT, DEPARTED */
		mv_peer_why(p, why, whylen);
		return atomic_load(&p->gone) == MV_PEER_CUT ? -EPROTO : -EHOSTUNREACH;
	}
	/* A peer removed earlier and added again comes back to life: the AV
	 * entries were kept, since in-flight ops may still name them. */
	atomic_store(&p->gone, MV_PEER_LIVE);
	p->refs++;
	cl->peers[slot] = p;
	*out = slot;
	/* After the slot is stored (seq_cst): see tell() in heartbeat.c. */
	*live = (uint32_t)mv_hb_state(p, why, whylen);
	return 0;
}

/*
 * Unlinks the client's imports from peer p (or import h alone when p is
 * NULL), waits for every shard to pass one turn, so that none still reads
 * them, then frees them: one round trip however many there are.
 */
static void imports_drop(struct mover *mv, struct mv_client *cl, const struct mv_peer *p,
                         uint32_t h)
{
	static struct mv_import *gone[MV_CLIENT_MAX_IMPORTS]; /* main thread only */
	uint32_t n = 0, end = p ? MV_CLIENT_MAX_IMPORTS : h + 1;
	char tmp[MV_ERRLEN];

	for (uint32_t i = p ? 0 : h; i < end; i++) {
		struct mv_import *imp = atomic_load(&cl->imports[i]);
		if (imp && (!p || imp->peer == p))
			gone[n++] = atomic_exchange(&cl->imports[i], NULL);
	}
	if (!n)
		return;
	mv_call_all(mv, MV_CMD_SYNC, NULL, tmp, sizeof(tmp));
	for (uint32_t i = 0; i < n; i++) {
		mv_gpu_import_close(mv, gone[i]);
		mv_host_import_close(mv, gone[i]);
		free(gone[i]);
	}
}

int mv_peer_del(struct mover *mv, struct mv_client *cl, uint32_t id, char *why, size_t whylen)
{
	struct mv_peer *p = id < MV_CLIENT_MAX_PEERS ? cl->peers[id] : NULL;

	if (!p) {
		snprintf(why, whylen, "peer %u is not one of this client's peers", id);
		return -ENOENT;
	}
	/* This client's imports from the peer go first. */
	imports_drop(mv, cl, p, 0);
	cl->peers[id] = NULL;
	/* Ops still queued to it fail as "peer gone"; an exited peer stays so. */
	if (--p->refs == 0 && atomic_load(&p->gone) == MV_PEER_LIVE)
		atomic_store(&p->gone, MV_PEER_REMOVED);
	return 0;
}

int mv_import_add(struct mover *mv, struct mv_client *cl, uint32_t peer,
                  const struct mv_region_blob *b, size_t len, uint32_t *out, char *why,
                  size_t whylen)
{
	struct mv_peer *p = peer < MV_CLIENT_MAX_PEERS ? cl->peers[peer] : NULL;
	uint32_t h;
	int ret;

	if (!p) {
		snprintf(why, whylen, "peer %u is not one of this client's peers", peer);
		return -ENOENT;
	}
	ret = mv_check_region_blob(b, len, why, whylen);
	if (ret == -EPROTO && b->mover_id == p->mover_id) {
		/* The peer speaks our protocol (PEER_ADD checked its address
		 * blob) yet handed out a region blob of another: garbage. The
		 * client's expectations of it fail (libmvc); a client cannot
		 * cut a peer off for the others, so they carry on. */
		snprintf(why, whylen,
		         "peer mover %016llx handed out a region blob of protocol %u (its address "
		         "says %u): garbage",
		         (unsigned long long)p->mover_id, b->version, MV_WIRE_VERSION);
		mv_log_client(MV_LOG_WARN, (uint64_t)cl->pid, "client %u (pid %d): %s", cl->id,
		              (int)cl->pid, why);
	}
	if (ret)
		return ret;
	if (b->mover_id != p->mover_id || b->nshards != p->nshards) {
		snprintf(why, whylen,
		         "region blob is from mover %016llx (%u shards); peer %u is mover %016llx "
		         "(%u shards)",
		         (unsigned long long)b->mover_id, b->nshards, peer,
		         (unsigned long long)p->mover_id, p->nshards);
		return -EXDEV;
	}
	/* A region of this very mover: the blob must be one we handed out,
	 * or a client could write into another's memory by guessing its id. */
	if (b->mover_id == mv->mover_id) {
		struct mv_region *own = mv_region_get(mv, b->region);
		if (!own || own->secret != b->secret || own->len != b->len) {
			snprintf(why, whylen,
			         "region blob names region %u of this mover, but it is not a blob "
			         "this mover handed out (a forged or stale blob)",
			         b->region);
			mv_log_client(
			    MV_LOG_WARN, (uint64_t)cl->pid,
			    "refused IMPORT of region %u from pid %d uid %u: forged or stale "
			    "blob",
			    b->region, cl->pid, (unsigned)cl->uid);
			return -EACCES;
		}
	}
	for (h = 0; h < MV_CLIENT_MAX_IMPORTS; h++)
		if (!atomic_load_explicit(&cl->imports[h], memory_order_relaxed))
			break;
	if (h == MV_CLIENT_MAX_IMPORTS) {
		snprintf(why, whylen, "this client already has %u imports", MV_CLIENT_MAX_IMPORTS);
		return -ENOSPC;
	}
	if ((ret = mv_quota_take(mv, cl, MV_Q_IMPORTS, 1, why, whylen)))
		return ret;
	struct mv_import *imp = calloc(1, sizeof(*imp));
	if (!imp)
		return -ENOMEM;
	imp->flags = b->flags;
	if (b->flags & MV_BLOB_GPU) {
		/* Same host: CUDA copies into it (path 2). Elsewhere the fabric
		 * writes it if its mover registered it, or it lands as messages
		 * its mover copies to the device (receiver-side staging). */
		if (!memcmp(b->host, mv->host_id, sizeof(b->host)) && !mv->cfg.no_gpu_copy) {
			ret = mv_gpu_import_open(mv, imp, b, why, whylen);
			if (ret) {
				free(imp);
				return ret;
			}
		} else if ((b->flags & MV_BLOB_NO_FABRIC) && !(b->flags & MV_BLOB_LANDING)) {
			snprintf(why, whylen,
			         "peer region %u is GPU memory its mover can neither register nor "
			         "take as landing messages",
			         b->region);
			free(imp);
			return -EOPNOTSUPP;
		}
	}
	imp->peer = p;
	imp->region = b->region;
	imp->nshards = b->nshards;
	imp->len = b->len;
	for (uint32_t s = 0; s < b->nshards; s++) {
		imp->addr[s] = b->shard[s].addr;
		imp->key[s] = b->shard[s].key;
	}
	if (b->mover_id == mv->mover_id) {
		/* Our own region: where the fabric writes comes from our
		 * registration, never from the blob (shm checks no key). */
		struct mv_region_blob own;
		mv_region_blob(mv, mv_region_get(mv, b->region), &own);
		for (uint32_t s = 0; s < b->nshards; s++) {
			imp->addr[s] = own.shard[s].addr;
			imp->key[s] = own.shard[s].key;
		}
	}
	/* A same-host peer's memfd, or its owner's word on the blob (shm),
	 * asked for; or the fabric, as before. */
	ret = mv_host_import_open(mv, imp, p, b, why, whylen);
	if (ret) {
		mv_log_client(MV_LOG_WARN, (uint64_t)cl->pid,
		              "refused IMPORT of region %u from pid %d uid %u: %s", b->region,
		              cl->pid, (unsigned)cl->uid, why);
		mv_gpu_import_close(mv, imp);
		free(imp);
		return ret;
	}
	/* R4 pairs with A4 in mv_import_get() */
	atomic_store_explicit(&cl->imports[h], imp, memory_order_release);
	*out = h;
	return 0;
}

int mv_import_del(struct mover *mv, struct mv_client *cl, uint32_t handle, char *why, size_t whylen)
{
	if (handle >= MV_CLIENT_MAX_IMPORTS || !atomic_load(&cl->imports[handle])) {
		snprintf(why, whylen, "import %u is not one of this client's imports", handle);
		return -ENOENT;
	}
	imports_drop(mv, cl, NULL, handle);
	return 0;
}

/* Everything a departed client held; its rings are already detached. */
void mv_client_release_all(struct mover *mv, struct mv_client *cl)
{
	char why[MV_ERRLEN];

	for (uint32_t h = 0; h < MV_CLIENT_MAX_IMPORTS; h++) {
		struct mv_import *imp = atomic_exchange(&cl->imports[h], NULL);
		if (imp) {
			mv_gpu_import_close(mv, imp); /* the detach was the grace period */
			mv_host_import_close(mv, imp);
		}
		free(imp);
	}
	for (uint32_t i = 0; i < MV_CLIENT_MAX_PEERS; i++)
		if (cl->peers[i])
			mv_peer_del(mv, cl, i, why, sizeof(why));
	/* Unpublish every region, one grace period for all, then free them: a
	 * shard delivering an immediate may hold one from a lookup until then. */
	struct mv_region **gone = calloc(cl->nregions ? cl->nregions : 1, sizeof(*gone));
	uint32_t n = 0;
	for (uint32_t idx = 1; gone && idx < MV_MAX_REGIONS && n < cl->nregions; idx++) {
		struct mv_region *r = atomic_load(&mv->regions[idx]);
		if (r && r->owner == cl->id) {
			atomic_store(&mv->regions[idx], NULL);
			gone[n++] = r;
		}
	}
	mv_call_all(mv, MV_CMD_SYNC, NULL, why, sizeof(why));
	for (uint32_t i = 0; i < n; i++) {
		cl->reg_bytes -= gone[i]->len;
		region_free(mv, gone[i]);
	}
	cl->nregions -= n;
	free(gone);
}
