/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the trace reader every tool shares (tools/trace_read.h): the
 * input is a whole trace file, parsed with mvt_parse(), the body of
 * mvt_load(). A refusal must say why; an accepted trace must account for
 * every record in the file (batches, hops paired with the batch before
 * them, at most one END and only last), and its records must pass the
 * field checks again and print (kind and cause names) without trouble.
 */
#include <assert.h>
#include <stdint.h>

#include "trace_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mvt_trace t;
	char err[512] = "";

	if (mvt_parse(data, size, "fuzz.trace", &t, err, sizeof(err))) {
		assert(err[0] && !t.rec && !t.hops);
		return 0;
	}
	size_t nall = (size - sizeof(struct mv_trace_hdr)) / sizeof(struct mv_trace_rec);
	assert((size - sizeof(struct mv_trace_hdr)) % sizeof(struct mv_trace_rec) == 0);
	assert(t.nrec + t.nhops + (size_t)t.has_end == nall);
	assert(t.nhops <= t.nrec);
	assert(memchr(t.hdr.provider, 0, sizeof(t.hdr.provider)));
	assert(memchr(t.hdr.source, 0, sizeof(t.hdr.source)));
	for (size_t i = 0; i < t.nrec; i++) {
		const struct mv_trace_rec *r = &t.rec[i];
		char why[320], kind[32];
		assert(r->type == MV_TR_BATCH);
		assert(!mvt_check_rec(r, i, 0, &t.hdr, why, sizeof(why)));
		assert(!t.hops[i].type || t.hops[i].submit_ns == r->submit_ns);
		mvt_kind_name(r->kind, kind, sizeof(kind));
		assert(strcmp(mvt_cause_name(r->cause), "unknown"));
	}
	mvt_free(&t);
	return 0;
}
