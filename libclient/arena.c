/* SPDX-License-Identifier: MIT */
/*
 * The list arena: a memfd, sealed against shrinking and growing, that the
 * client writes page and segment lists into and the mover maps read-only
 * (format in mv_wire.h). Lists are taken in submission order from a ring of
 * bytes; a batch's bytes come back when the batch completes and every older
 * batch holding bytes has completed too, so a batch that completes out of
 * order only delays reuse. The open batch's lists are given back at once
 * when it is aborted or a call adding to it fails. Single-threaded, like
 * the rest of a struct mvc.
 */
#include "mvc_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define NO_SLOT UINT32_MAX

int mvc_arena_open(struct mvc_arena *a, uint64_t size, uint32_t max_batches, char *why,
                   size_t whylen)
{
	int ret;

	size = (size + MV_LIST_ALIGN - 1) & ~(uint64_t)(MV_LIST_ALIGN - 1);
	if (size < MV_ARENA_MIN || size > MV_ARENA_MAX) {
		snprintf(why, whylen,
		         "list arena of %" PRIu64 " bytes; it must be %u bytes to %" PRIu64 " GiB",
		         size, MV_ARENA_MIN, (uint64_t)(MV_ARENA_MAX >> 30));
		return -EINVAL;
	}
	*a = (struct mvc_arena){.size = size, .fd = -1};
	/* Room for every batch id in flight and as many finished ones queued
	 * behind an old one; past that, new lists wait (-EAGAIN). */
	a->held_cap = 4 * max_batches;
	a->held = calloc(a->held_cap, sizeof(*a->held));
	a->slot_of = malloc(max_batches * sizeof(*a->slot_of));
	if (!a->held || !a->slot_of) {
		snprintf(why, whylen, "no memory for the list arena's tables");
		ret = -ENOMEM;
		goto err_free;
	}
	for (uint32_t i = 0; i < max_batches; i++)
		a->slot_of[i] = NO_SLOT;
	a->fd = memfd_create("mvc-lists", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (a->fd < 0 || ftruncate(a->fd, (off_t)size) ||
	    fcntl(a->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		ret = -errno;
		snprintf(why, whylen, "making the %" PRIu64 "-byte list arena: %m", size);
		goto err_close;
	}
	a->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
	if (a->map == MAP_FAILED) {
		ret = -errno;
		a->map = NULL;
		snprintf(why, whylen, "mapping the %" PRIu64 "-byte list arena: %m", size);
		goto err_close;
	}
	return 0;

err_close:
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
err_free:
	free(a->held);
	free(a->slot_of);
	a->held = NULL;
	a->slot_of = NULL;
	return ret;
}

void mvc_arena_close(struct mvc_arena *a)
{
	if (a->map)
		munmap(a->map, a->size);
	if (a->fd >= 0)
		close(a->fd);
	free(a->held);
	free(a->slot_of);
	*a = (struct mvc_arena){.fd = -1};
}

void mvc_arena_batch_open(struct mvc_arena *a)
{
	/* An idle arena starts over at its first byte, so that a batch as
	 * large as the whole arena fits without wrapping. */
	if (a->map && a->head == a->tail && a->held_n == 0)
		a->head = a->tail = (a->head + a->size - 1) / a->size * a->size;
	a->open_start = a->head;
}

void mvc_arena_batch_abort(struct mvc_arena *a)
{
	a->head = a->open_start;
}

/*
 * Takes bytes (a multiple of MV_LIST_ALIGN) for a list of the open batch:
 * the arena offset, or -EAGAIN (in use by batches in flight: reap
 * completions) or -E2BIG (the open batch's lists would not fit the arena
 * even empty), with c's error saying which. The caller undoes it by
 * restoring head on failure of the call as a whole.
 */
int64_t mvc_arena_take(struct mvc *c, uint64_t bytes)
{
	struct mvc_arena *a = &c->arena;
	if (!a->map)
		return mvc_fail(c, -ENOTSUP, "this connection has no list arena");
	uint64_t at = a->head % a->size, pad = at + bytes > a->size ? a->size - at : 0;
	if (a->head - a->open_start + pad + bytes > a->size)
		return mvc_fail(c, -E2BIG,
		                "the batch's lists need %" PRIu64 " bytes of the %" PRIu64
		                "-byte list arena; submit part of it first, or connect with a "
		                "larger arena (MVC_LIST_ARENA or mvc_opts.list_arena)",
		                a->head - a->open_start + pad + bytes, a->size);
	if (a->head + pad + bytes - a->tail > a->size)
		return mvc_fail(c, -EAGAIN,
		                "the list arena is full (%" PRIu64 " bytes held by batches in "
		                "flight); reap completions and try again",
		                a->head - a->tail);
	if (a->head == a->open_start && a->held_n == a->held_cap)
		return mvc_fail(c, -EAGAIN,
		                "%u batches hold list arena bytes behind one still in flight; "
		                "reap completions and try again",
		                a->held_n);
	a->head += pad;
	int64_t off = (int64_t)(a->head % a->size);
	a->head += bytes;
	return off;
}

/* Records that batch b, being submitted, holds the open lists. Cannot fail
 * once mvc_arena_take() succeeded for the batch. */
int mvc_arena_batch_submit(struct mvc_arena *a, uint32_t b)
{
	if (a->head == a->open_start)
		return 0;
	uint32_t slot = (a->held_head + a->held_n) % a->held_cap;
	a->held[slot].end = a->head;
	a->held[slot].batch = b;
	a->held[slot].done = 0;
	a->slot_of[b] = slot;
	a->held_n++;
	return 1;
}

/* Batch b completed: its bytes, and those of finished batches after it,
 * come back once no older batch still holds any. */
void mvc_arena_batch_done(struct mvc_arena *a, uint32_t b)
{
	if (!a->slot_of || a->slot_of[b] == NO_SLOT)
		return;
	a->held[a->slot_of[b]].done = 1;
	a->slot_of[b] = NO_SLOT;
	while (a->held_n && a->held[a->held_head].done) {
		a->tail = a->held[a->held_head].end;
		a->held_head = (a->held_head + 1) % a->held_cap;
		a->held_n--;
	}
}
