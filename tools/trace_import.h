/* SPDX-License-Identifier: MIT */
/*
 * trace_import.h: what mvtrace's files share. mvtrace.c is the command
 * line, dump, summary, start and stop; trace_import.c the import command,
 * import_parse.c its parsers.
 */
#ifndef MV_TRACE_IMPORT_H
#define MV_TRACE_IMPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MOONCAKE_BLOCK 512u /* tokens per hash_id in the Mooncake traces */

/* The model a request's KV cache is sized by (README: importing traces). */
struct mvt_model {
	uint64_t layers, heads, dim, dtype, tpp;
	uint64_t page_size; /* 2 * heads * dim * dtype * tpp, below 2^32 */
};

struct mvt_import_totals {
	uint64_t nreq;  /* requests read */
	uint64_t nzero; /* of those, with no pages to send (no record) */
	uint64_t nrec, bytes, pages, tokens;
};

/*
 * import_parse.c: reads in (Azure CSV when azure, else Mooncake JSONL;
 * name is its name in messages and the header) and writes a whole trace to
 * out, which must be seekable (the header is rewritten at the end), at most
 * limit requests (0: all). Returns 0 with *t filled, -EINVAL with err
 * naming the line and column of a bad input, -EIO or -ENOMEM.
 */
int mvt_import_stream(int azure, const char *name, FILE *in, const char *out_name, FILE *out,
                      const struct mvt_model *m, uint64_t limit, struct mvt_import_totals *t,
                      char *err, size_t errlen);
/* Decimal digits [s, end) into *v; -EINVAL for anything else or overflow. */
int mvt_parse_u64(const char *s, const char *end, uint64_t *v);

/* mvtrace import ARGS: 0, 1 on failure, 2 on a usage error. */
int mvt_cmd_import(int argc, char **argv);
/* mvtrace.c: the usage text, and bytes in words ("4 KiB"). */
void usage(FILE *f);
const char *fmt_bytes(uint64_t b, char *buf, size_t len);

#endif
