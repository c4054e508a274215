/* SPDX-License-Identifier: MIT */
/*
 * mvtrace import: public LLM request traces (Azure's CSVs, Mooncake's
 * JSONL) turned into mover traces, one batch per request: the KV cache of
 * its prompt as a paged write and an immediate. This file is the command
 * (options, model, files); import_parse.c reads the inputs. mvtrace.c holds
 * the other commands and the usage text that describes this one.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trace_format.h"
#include "trace_import.h"
#include "trace_read.h"

static int opt_u64(const char *name, const char *arg, uint64_t *v)
{
	if (mvt_parse_u64(arg, arg + strlen(arg), v) || *v == 0) {
		fprintf(stderr, "mvtrace import: %s wants a positive integer, not '%s'\n", name,
		        arg);
		return -EINVAL;
	}
	return 0;
}

int mvt_cmd_import(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"layers", required_argument, 0, 'L'},
	    {"kv-heads", required_argument, 0, 'H'},
	    {"head-dim", required_argument, 0, 'D'},
	    {"dtype-bytes", required_argument, 0, 'E'},
	    {"tokens-per-page", required_argument, 0, 'T'},
	    {"limit", required_argument, 0, 'n'},
	    {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	struct mvt_model m = {0};
	struct mvt_import_totals t;
	uint64_t limit = 0;
	char err[512];
	int c, ret;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int r = 0;
		switch (c) {
		case 'L':
			r = opt_u64("--layers", optarg, &m.layers);
			break;
		case 'H':
			r = opt_u64("--kv-heads", optarg, &m.heads);
			break;
		case 'D':
			r = opt_u64("--head-dim", optarg, &m.dim);
			break;
		case 'E':
			r = opt_u64("--dtype-bytes", optarg, &m.dtype);
			break;
		case 'T':
			r = opt_u64("--tokens-per-page", optarg, &m.tpp);
			break;
		case 'n':
			r = opt_u64("--limit", optarg, &limit);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		if (r)
			return 2;
	}
	if (argc - optind != 3) {
		fprintf(stderr, "mvtrace import: want FORMAT INPUT OUTPUT, got %d arguments\n",
		        argc - optind);
		usage(stderr);
		return 2;
	}
	const char *fmt = argv[optind];
	const char *in_name = argv[optind + 1], *out_name = argv[optind + 2];
	int azure = !strcmp(fmt, "azure");
	if (!azure && strcmp(fmt, "mooncake")) {
		fprintf(stderr, "mvtrace import: format '%s' is unknown: azure or mooncake\n", fmt);
		return 2;
	}
	if (!m.layers || !m.heads || !m.dim || !m.dtype || !m.tpp) {
		fprintf(stderr, "mvtrace import: the model needs --layers, --kv-heads, --head-dim, "
		                "--dtype-bytes and --tokens-per-page (see --help)\n");
		return 2;
	}
	/* 2 (K and V) * H * D * E * T, checked against the 32-bit page_size field. */
	uint64_t ps = 2;
	uint64_t f[] = {m.heads, m.dim, m.dtype, m.tpp};
	for (int i = 0; i < 4; i++)
		ps = f[i] > UINT32_MAX || ps > UINT32_MAX / f[i] ? UINT64_MAX : ps * f[i];
	if (ps > UINT32_MAX || m.layers > UINT32_MAX) {
		fprintf(stderr,
		        "mvtrace import: a page of 2 * %" PRIu64 " * %" PRIu64 " * %" PRIu64
		        " * %" PRIu64 " bytes does not fit the trace's 32-bit page_size; "
		        "use fewer --tokens-per-page\n",
		        m.heads, m.dim, m.dtype, m.tpp);
		return 2;
	}
	m.page_size = ps;

	FILE *in = fopen(in_name, "r");
	if (!in) {
		fprintf(stderr, "mvtrace import: %s: %s\n", in_name, strerror(errno));
		return 1;
	}
	struct stat si, so;
	if (fstat(fileno(in), &si) == 0 && stat(out_name, &so) == 0 && si.st_dev == so.st_dev &&
	    si.st_ino == so.st_ino) {
		fprintf(stderr, "mvtrace import: %s is the input; name another OUTPUT\n", out_name);
		fclose(in);
		return 2;
	}
	FILE *out = fopen(out_name, "wb");
	if (!out) {
		fprintf(stderr, "mvtrace import: %s: %s\n", out_name, strerror(errno));
		fclose(in);
		return 1;
	}
	ret = mvt_import_stream(azure, in_name, in, out_name, out, &m, limit, &t, err, sizeof(err));
	fclose(in);
	if (fclose(out) && !ret) {
		ret = -EIO;
		snprintf(err, sizeof(err), "%s: write: %s", out_name, strerror(errno));
	}
	if (ret) {
		fprintf(stderr, "mvtrace import: %s\n", err);
		unlink(out_name);
		return 1;
	}
	char b1[32], b2[32];
	printf("mvtrace import: %" PRIu64 " requests from %s -> %" PRIu64 " batches in %s: %" PRIu64
	       " tokens, %" PRIu64 " pages of %s, %s\n",
	       t.nreq, in_name, t.nrec, out_name, t.tokens, t.pages,
	       fmt_bytes(m.page_size, b1, sizeof(b1)), fmt_bytes(t.bytes, b2, sizeof(b2)));
	if (t.nzero)
		printf("mvtrace import: %" PRIu64 " requests had no pages to send (%s) and became "
		       "no record\n",
		       t.nzero, azure ? "empty prompts" : "empty or fully cached prompts");
	return 0;
}
