/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the importers of public LLM traces (tools/import_parse.c): the
 * input is an Azure CSV or a Mooncake JSONL file, imported in memory with
 * mvt_import_stream() for Llama-3-8B-like pages. A refusal must say why;
 * an import that succeeds must write a trace that its own reader accepts
 * (mvt_parse()), with one record per request that had pages to send, in
 * arrival order, each a paged write whose bytes are its pages times the
 * page size, ending with an END that counts them.
 *
 * Input: byte 0: bit 0 Mooncake (else Azure), bits 1-3 tokens per page
 * (1 << n), bits 4-7 a request limit (0: none); then the file.
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "trace_import.h"
#include "trace_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mvt_model m = {.layers = 32, .heads = 8, .dim = 128, .dtype = 2};
	struct mvt_import_totals tot = {0};
	char err[512] = "";

	if (size < 1)
		return 0;
	int azure = !(data[0] & 1);
	m.tpp = 1u << ((data[0] >> 1) & 7);
	m.page_size = 2 * m.heads * m.dim * m.dtype * m.tpp;
	uint64_t limit = data[0] >> 4;
	/* fmemopen() refuses an empty buffer: read an empty file from /dev/null. */
	FILE *in = size > 1 ? fmemopen((void *)(data + 1), size - 1, "r") : fopen("/dev/null", "r");
	/* A file in memory: the importer seeks back to rewrite the header. */
	FILE *out = fdopen(memfd_create("fuzz_import", MFD_CLOEXEC), "w+");
	if (!in || !out)
		abort();
	int ret = mvt_import_stream(azure, "fuzz.in", in, "fuzz.trace", out, &m, limit, &tot, err,
	                            sizeof(err));
	fclose(in);
	if (ret) {
		assert(ret < 0 && err[0]);
		fclose(out);
		return 0;
	}
	fseek(out, 0, SEEK_END);
	size_t olen = (size_t)ftell(out);
	char *obuf = malloc(olen);
	if (fseek(out, 0, SEEK_SET) || fread(obuf, 1, olen, out) != olen)
		abort();
	fclose(out);
	assert(!limit || tot.nreq <= limit);
	assert(tot.nrec + tot.nzero == tot.nreq);

	struct mvt_trace t;
	char why[512] = "";
	ret = mvt_parse((const uint8_t *)obuf, olen, "fuzz.trace", &t, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "the importer wrote a trace its reader refuses: %s\n", why);
		abort();
	}
	assert(t.nrec == tot.nrec && t.has_end && t.end.bytes == tot.nrec && !t.nhops);
	uint64_t bytes = 0, pages = 0;
	for (size_t i = 0; i < t.nrec; i++) {
		const struct mv_trace_rec *r = &t.rec[i];
		assert(r->kind == (MV_TK_PAGED | MV_TK_IMM) && r->page_size == m.page_size);
		assert(r->bytes == (uint64_t)r->nops * m.page_size && r->nops % m.layers == 0);
		/* The first record is at 0 unless empty requests came before it. */
		assert(i ? r->submit_ns >= t.rec[i - 1].submit_ns : tot.nzero || !r->submit_ns);
		assert(r->imm < tot.nreq && (i == 0 || r->imm > t.rec[i - 1].imm));
		bytes += r->bytes;
		pages += r->nops;
	}
	assert(bytes == tot.bytes && pages == tot.pages);
	mvt_free(&t);
	free(obuf);
	return 0;
}
