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

#ifdef __SSE2__
#include <emmintrin.h>
#endif

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
 * Bytes from which a copy streams past the caches (non-temporal stores):
 * a copy larger than half the last-level cache would only push out what
 * the receiver and the next copies need; smaller ones go by memcpy, whose
 * stores stay in the caches where the receiver finds them (and which
 * streams itself above glibc's own threshold). An op is at most MV_CHUNK,
 * so on a host whose L3 holds 8 MiB or more every copy is a memcpy: on the
 * machines measured, streaming stores cost a third of the rate of buffers
 * that stay in their large L3 (README, same-host path). $MV_NT_MIN sets the
 * size (0: never). Read once; shards only read it after.
 */
static uint64_t nt_min(void)
{
	static _Atomic uint64_t v;
	uint64_t n = atomic_load_explicit(&v, memory_order_relaxed);

	if (!n) {
		const char *e = getenv("MV_NT_MIN");
		long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
		n = e && *e  ? strtoull(e, NULL, 0)
		    : l3 > 0 ? (uint64_t)l3 / 2
		             : (uint64_t)MV_NT_MIN;
		if (n == 0)
			n = UINT64_MAX;
		atomic_store_explicit(&v, n, memory_order_relaxed);
	}
	return n;
}

static void copy_nt(uint8_t *d, const uint8_t *s, size_t n)
{
#ifdef __SSE2__
	size_t head = (16 - ((uintptr_t)d & 15)) & 15;

	if (head > n)
		head = n;
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
	/* Streaming stores are weakly ordered: all of them are visible before
	 * anything this shard does next (the immediate's post). */
	_mm_sfence();
#else
	memcpy(d, s, n);
#endif
}

int mv_host_copy(struct mv_shard *s, struct mv_wr *op, char *why, size_t whylen)
{
	struct mv_host_remote *hr = op->hr;
	_Atomic uint32_t *busy = &hr->fence->busy[hr->slot + (uint32_t)s->id].region;
	int nt = op->bytes >= nt_min();

	/* F1 pairs with F2 in mv_host_revoke(): say where we copy, then look
	 * whether the region is still there. */
	atomic_store_explicit(busy, hr->region, memory_order_seq_cst);
	if (atomic_load_explicit(&hr->fence->live[hr->region % MV_MAX_REGIONS],
	                         memory_order_seq_cst) != hr->region) {
		atomic_store_explicit(busy, 0, memory_order_release);
		snprintf(why, whylen, "peer region %u was freed by its owner", hr->region);
		return -ENOENT;
	}
	for (uint32_t i = 0; i < op->niov; i++) {
		uint8_t *d = (uint8_t *)(uintptr_t)op->riov[i].addr;
		if (nt)
			copy_nt(d, op->iov[i].iov_base, op->iov[i].iov_len);
		else
			memcpy(d, op->iov[i].iov_base, op->iov[i].iov_len);
	}
	/* R8: the copy is done before the owner may see the slot free. */
	atomic_store_explicit(busy, 0, memory_order_release);
	return 0;
}
