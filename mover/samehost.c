/* SPDX-License-Identifier: MIT */
/*
 * The same-host path, the copier's side: a write into a host region of a
 * peer mover on this host is a copy by the sending shard straight into the
 * region's memfd, at memory speed, instead of a fabric write (shm's
 * cross-memory attach moves 10-13 GB/s here; a copy between mappings 4x
 * that). At IMPORT this mover asked the region's mover for its memfd
 * (samehost_ask.c); an import answered before its fd writes through the
 * fabric until the fd switches it to copies. Immediates and completions
 * stay as they are: the immediate is a fabric write posted after the
 * copies are done.
 *
 * A freed region must take no byte after its free returns, as a fabric
 * write cannot once the owner overlays its mapping: the fence segment the
 * owner gave this mover (samehost_layout.h) says which regions may still be
 * copied into, and each copying shard says which one it is in. An import
 * dropped while copies are queued is overlaid with anonymous memory (the
 * overlay registry.c gives freed regions) and unmapped after the same
 * quarantine.
 */
#include "shard_int.h"

#include "mv_huge.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mv_copy.h"
#include "mv_sock.h"
#include "samehost_layout.h"

void mv_host_import_close(struct mover *mv, struct mv_import *imp)
{
	struct mv_host_remote **pp = &mv->host_remote, *hr;
	struct timespec ts;

	/* Still waiting for its fd: it waits no more. */
	mv_host_fetch_forget(mv, imp);
	hr = atomic_exchange_explicit(&imp->host, NULL, memory_order_relaxed);
	if (!hr || --hr->refs)
		return;
	while (*pp && *pp != hr)
		pp = &(*pp)->next;
	if (*pp)
		*pp = hr->next;
	/* Copies may still be queued on a shard (an unimport with writes in
	 * flight): they land in anonymous memory from here, as late writes
	 * into a freed region do (registry.c), and the range is unmapped after
	 * the same quarantine. */
	if (mmap(hr->map, hr->map_len, PROT_READ | PROT_WRITE,
	         MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
		munmap(hr->map, hr->map_len);
		free(hr);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	hr->expires = (int64_t)ts.tv_sec + 3 * mv->cfg.op_timeout_ms / 1000 + 30;
	hr->next = mv->host_dead;
	mv->host_dead = hr;
}

void mv_host_reap(struct mover *mv, int all)
{
	struct mv_host_remote **pp = &mv->host_dead;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	while (*pp) {
		struct mv_host_remote *hr = *pp;
		if (all || hr->expires <= (int64_t)ts.tv_sec) {
			*pp = hr->next;
			munmap(hr->map, hr->map_len);
			free(hr);
			continue;
		}
		pp = &hr->next;
	}
}

void mv_host_close_all(struct mover *mv)
{
	mv_host_fetch_close_all(mv);
	while (mv->host_remote) {
		struct mv_import imp = {0};
		atomic_store(&imp.host, mv->host_remote);
		mv->host_remote->refs = 1;
		mv_host_import_close(mv, &imp);
	}
	mv_host_reap(mv, 1);
	mv_host_fence_close_all(mv);
}

/* ---- the shard's side: the copy ---- */

/*
 * Bytes of one piece (one write's part of an op: at most MV_CHUNK, and a
 * stripe of it where libclient striped the write over shards) from which
 * the copy streams past the caches (non-temporal stores); smaller pieces go
 * by memcpy, whose stores stay in the caches where the receiver finds
 * them. From MV_NT_MIN, 2 MiB, a piece's source and destination overflow a
 * core's L2 (1-2 MiB on the machines measured) and its lines would be
 * written back before anyone reads them. Measured (2026-11-26, a loop over
 * one pair of buffers, and one streaming through 512 MiB): on the H100
 * machine's Xeon (2 MiB L2) a memcpy of 2 to 64 MiB moves 12.2-13.4 GB/s
 * reused and 6.3-8.2 streaming, AVX streaming stores 15.1-18.2 and
 * 9.2-10.4; on the 2-core EPYC (1 MiB L2) streaming stores win streaming
 * (18.1-20.4 against 15.4-17.9 GB/s) and on buffers that stop fitting its
 * L3 (34.5 against 29.8 at 16 MiB reused), and lose on those that fit it
 * (35-36.5 against 43-49 at 2-8 MiB reused). Both machines report L3s of
 * 300-530 MiB that one core does not get, so no size is derived from it.
 * $MV_NT_MIN sets the size (0: never). Read once; shards only read it after.
 */
static uint64_t nt_min(void)
{
	static _Atomic uint64_t v;
	uint64_t n = atomic_load_explicit(&v, memory_order_relaxed);

	if (!n) {
		const char *e = getenv("MV_NT_MIN");
		n = e && *e ? strtoull(e, NULL, 0) : (uint64_t)MV_NT_MIN;
		if (n == 0)
			n = UINT64_MAX;
		atomic_store_explicit(&v, n, memory_order_relaxed);
	}
	return n;
}

int64_t mv_host_copy(struct mv_shard *s, struct mv_wr *op, uint64_t step, int (*stop)(void *),
                     void *arg, char *why, size_t whylen)
{
	struct mv_host_remote *hr = op->hr;
	_Atomic uint32_t *busy = &hr->fence->busy[hr->slot + (uint32_t)s->id].region;
	uint64_t nt = nt_min(), done = 0;
	uint32_t k = 0; /* pieces copied whole */

	/* F1 pairs with F2 in mv_host_revoke(): say where we copy, then look
	 * whether the region is still there. */
	atomic_store_explicit(busy, hr->region, memory_order_seq_cst);
	if (atomic_load_explicit(&hr->fence->live[hr->region % MV_MAX_REGIONS],
	                         memory_order_seq_cst) != hr->region) {
		atomic_store_explicit(busy, 0, memory_order_release);
		snprintf(why, whylen, "peer region %u was freed by its owner", hr->region);
		return -ENOENT;
	}
	while (k < op->niov) {
		struct iovec *v = &op->iov[k];
		uint64_t n = v->iov_len;
		if (step && n > step)
			n = step;
		uint8_t *d = (uint8_t *)(uintptr_t)op->riov[k].addr;
		if (n >= nt)
			mv_copy_nt(d, v->iov_base, n);
		else
			memcpy(d, v->iov_base, n);
		done += n;
		if (n == v->iov_len)
			k++;
		else
			mv_wr_skip(op, k, n);
		if (stop && k < op->niov && stop(arg))
			break;
	}
	/* R8: the copy is done before the owner may see the slot free. */
	atomic_store_explicit(busy, 0, memory_order_release);
	/* The pieces copied whole leave the op at once (mv_wr_advance() one
	 * at a time would move the rest of the arrays for each). */
	if (k)
		mv_wr_drop(op, k);
	op->bytes -= done;
	op->copied += done;
	return (int64_t)done;
}
