/* SPDX-License-Identifier: MIT */
/*
 * The sending side of mvreplay, shared by its two files: mvreplay.c (the
 * schedule, the window, completions and the report) and replay_issue.c
 * (turning one trace record into the same batch through libmvc). The
 * receiver process (replay_recv.c) needs none of this: replay.h.
 */
#ifndef MV_REPLAY_SEND_H
#define MV_REPLAY_SEND_H

#include <stddef.h>
#include <stdint.h>

#include "mvc.h"
#include "replay.h"
#include "trace_read.h"

/* Error causes: libclient's, then the replay's own. */
enum {
	ERR_TOO_BIG = MVT_MAX_CAUSE + 1, /* the batch can never fit the rings */
	ERR_SUBMIT,                      /* building or submitting it failed otherwise */
	ERR_TIMEOUT,                     /* no progress for 30 s, or 10 min in flight */
	ERR_IMM,                         /* immediates that never arrived */
	ERR_N,
};

enum bstate {
	B_WAITING = 0,
	B_INFLIGHT,
	B_FAILED, /* not submitted, failed, or stuck */
	B_OK,
};

struct replay {
	const struct cfg *cf;
	struct mvc *c;
	struct mvc_mem src;
	uint32_t dst;
	uint64_t dst_len;
	uint32_t window;

	/* the trace, in submit order */
	struct mvt_trace t;
	size_t nb;
	size_t *order;     /* order[i]: index in the file of the i-th batch to issue */
	uint64_t first_ns; /* the first submit_ns */
	uint64_t trace_bytes, trace_ops, trace_imms;

	/* per batch, by issue index (= cookie) */
	uint64_t *t_sub; /* when this replay submitted it */
	uint8_t *state;  /* enum bstate */
	uint64_t *lat;   /* successful batches' latencies */
	size_t nlat;

	/* where the next batch's data comes from and goes */
	uint64_t scur, dcur;
	uint32_t *sp, *dp;
	struct mvc_seg *segs;
	uint32_t max_ops;
	uint32_t stride; /* scattered destination pages: step between neighbours */

	/* what was issued and what came back */
	size_t next;   /* batches before this one were tried */
	size_t oldest; /* batches before this one are finished */
	size_t issued; /* submitted */
	size_t done, inflight;
	uint64_t bytes, ops, done_bytes;
	uint64_t err[ERR_N], nerr;
	uint64_t t0, t_last;
	int64_t max_late;
	int stuck;
	const char *fatal; /* why the replay stopped early, or NULL */

	/* the progress line */
	int tty;
	uint64_t t_progress, t_check;
	int line_open; /* the progress line has no newline yet */
};

/* replay_issue.c */
/* Splits total into n parts that differ by at most one, the larger first:
 * part k's length. */
uint64_t part_len(uint64_t total, uint32_t n, uint32_t k);
/*
 * Builds and submits batch i (r->order[i] in the trace) as the trace made
 * it: ops and bytes it carried go to *ops and *bytes. Returns 0, -EAGAIN
 * (the rings are full: reap and call again; nothing was kept), or another
 * -errno with the batch aborted. The cursors move only when it was
 * submitted.
 */
int issue(struct replay *r, size_t i, uint64_t *ops, uint64_t *bytes);
/* A step between scattered destination pages: coprime with npages, never 1
 * apart. */
uint32_t scatter_stride(uint64_t npages);

#endif
