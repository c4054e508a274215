/* SPDX-License-Identifier: MIT */
/*
 * Tests of the trace tools on files, as a user runs them: the built mvtrace
 * and mvreplay binaries, executed with their output captured, against trace
 * files written here byte by byte. reader: every kind of damaged file is
 * refused with the byte offset, record index or field it names; output:
 * dump and summary print what the records hold; import: the public trace
 * slices in tests/data/ become the batches the conversion rule says (page
 * math, arrivals and Mooncake prefix caching recomputed independently
 * here). With movers running: tests/test_replay.c.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trace_util.h"

/* ---- reader: damaged files are refused, saying where ---- */

/* summary exits 1 and says all of want (NULL-terminated). */
static void refused(const char *path, const char *const *want)
{
	struct out o;

	RUN(&o, NULL, "mvtrace", "summary", path);
	ck_assert_msg(o.status == 1, "exit %d; stderr:\n%s", o.status, o.err);
	for (; *want; want++)
		ck_has(o.err, *want);
}

START_TEST(test_reader_refuses_wrong_magic)
{
	struct mv_trace_hdr h = hdr_ok();
	char p[128];

	h.magic = 0x1122334455667788ull;
	write_trace(in_dir(p, sizeof(p), "t"), &h, NULL, 0, 1, 0);
	refused(p, (const char *const[]){"not a mover trace", "magic is 0x1122334455667788", NULL});
}
END_TEST

START_TEST(test_reader_refuses_newer_version)
{
	struct mv_trace_hdr h = hdr_ok();
	char p[128];

	h.version = MV_TRACE_VERSION + 1;
	write_trace(in_dir(p, sizeof(p), "t"), &h, NULL, 0, 1, 0);
	refused(p, (const char *const[]){"version 2", "reads version 1", NULL});
}
END_TEST

START_TEST(test_reader_refuses_other_record_size)
{
	struct mv_trace_hdr h = hdr_ok();
	char p[128];

	h.rec_size = 72;
	write_trace(in_dir(p, sizeof(p), "t"), &h, NULL, 0, 0, 0);
	refused(p, (const char *const[]){"rec_size is 72", "64-byte records", NULL});
	h = hdr_ok();
	h.hdr_size = 256;
	write_trace(p, &h, NULL, 0, 0, 0);
	refused(p, (const char *const[]){"hdr_size is 256", NULL});
}
END_TEST

START_TEST(test_reader_names_truncated_header)
{
	struct mv_trace_hdr h = hdr_ok();
	char p[128];
	FILE *f = fopen(in_dir(p, sizeof(p), "t"), "wb");

	ck_assert_int_eq(fwrite(&h, 100, 1, f), 1);
	fclose(f);
	refused(p, (const char *const[]){"truncated", "100 bytes", "128-byte header", NULL});
}
END_TEST

START_TEST(test_reader_names_offset_of_partial_last_record)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[2] = {rec_paged(h.start_ns, 4, 4096, 0),
	                            rec_paged(h.start_ns + 10, 4, 4096, 1)};
	char p[128], want[300];

	write_trace(in_dir(p, sizeof(p), "t"), &h, r, 2, 0, 10);
	snprintf(want, sizeof(want), "`truncate -s 256 %s` keeps the 2 whole records", p);
	refused(p, (const char *const[]){"partial record 2 at byte offset 256", "10 of 64 bytes",
	                                 want, NULL});
	/* The same file cut at a record boundary is valid, without an END. */
	ck_assert_int_eq(truncate(p, 256), 0);
	struct out o;
	RUN(&o, NULL, "mvtrace", "summary", p);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "batches    2\n");
	ck_has(o.out, "no END record");
}
END_TEST

/* One bad field in record 1 of 3; want: what the message must say. */
static void bad_field(void (*spoil)(struct mv_trace_rec *), const char *want)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[3] = {rec_paged(h.start_ns, 4, 4096, 0),
	                            rec_paged(h.start_ns + 10, 4, 4096, 1),
	                            rec_paged(h.start_ns + 20, 4, 4096, 2)};
	char p[128];

	spoil(&r[1]);
	write_trace(in_dir(p, sizeof(p), "t"), &h, r, 3, 1, 0);
	refused(p, (const char *const[]){"corrupt record 1 (byte offset 192)", want, NULL});
}

static void spoil_type(struct mv_trace_rec *r)
{
	r->type = 7;
}
static void spoil_kind(struct mv_trace_rec *r)
{
	r->kind = 0x30;
}
static void spoil_nparts(struct mv_trace_rec *r)
{
	r->nparts = 65;
}
static void spoil_bytes(struct mv_trace_rec *r)
{
	r->bytes += 1;
}
/* A page size on a batch without pages (0 on a paged one means mixed sizes). */
static void spoil_page_size(struct mv_trace_rec *r)
{
	r->kind = MV_TK_WRITE;
	r->page_size = 4096;
}
static void spoil_nops(struct mv_trace_rec *r)
{
	r->nops = 0;
	r->bytes = 0;
}
static void spoil_status(struct mv_trace_rec *r)
{
	r->status = 5;
}
static void spoil_cause(struct mv_trace_rec *r)
{
	r->status = -EIO;
	r->cause = 40;
}
static void spoil_end(struct mv_trace_rec *r)
{
	r->type = MV_TR_END;
}
static void spoil_complete(struct mv_trace_rec *r)
{
	r->complete_ns = r->submit_ns - 1;
}

START_TEST(test_reader_names_record_and_field)
{
	bad_field(spoil_type, "field type is 7");
	bad_field(spoil_kind, "field kind is 0x30");
	bad_field(spoil_nparts, "field nparts is 65");
	bad_field(spoil_bytes, "field bytes is 16385 but 4 pages of 4096 bytes are 16384");
	bad_field(spoil_page_size, "field page_size is 4096 in a batch without paged writes");
	bad_field(spoil_nops, "field nops is 0");
	bad_field(spoil_status, "field status is 5");
	bad_field(spoil_cause, "field cause is 40");
	bad_field(spoil_complete, "field complete_ns");
	bad_field(spoil_end, "END must be the last record");
}
END_TEST

START_TEST(test_replay_refuses_damaged_trace_before_connecting)
{
	struct mv_trace_hdr h = hdr_ok();
	char p[128];
	struct out o;

	h.version = 9;
	write_trace(in_dir(p, sizeof(p), "t"), &h, NULL, 0, 0, 0);
	RUN(&o, NULL, "mvreplay", "--trace", p, "--send", "/nonexistent/a", "--recv",
	    "/nonexistent/b");
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "trace format version 9");
	ck_assert_msg(!strstr(o.err, "connect"), "%s", o.err);
}
END_TEST

/* ---- output: dump and summary ---- */

/* A captured-looking trace: every kind, a failure, completion order. */
static size_t captured(struct mv_trace_hdr *h, struct mv_trace_rec *r)
{
	uint64_t t0 = h->start_ns;

	r[0] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .nparts = 1,
	                             .client = 5,
	                             .submit_ns = t0 + 2000000,
	                             .complete_ns = t0 + 2000100,
	                             .bytes = 1000,
	                             .peer = 0x77,
	                             .nops = 3,
	                             .ndesc = 3,
	                             .kind = MV_TK_WRITE,
	                             .shard_mask = 1};
	r[1] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .nparts = 2,
	                             .client = 5,
	                             .submit_ns = t0 + 1000000,
	                             .complete_ns = t0 + 1000250,
	                             .bytes = 12345,
	                             .peer = 0x77,
	                             .nops = 5,
	                             .ndesc = 5,
	                             .kind = MV_TK_WRITEV | MV_TK_IMM,
	                             .shard_mask = 3,
	                             .imm = 9};
	r[2] = rec_paged(t0 + 3000000, 16, 65536, 42);
	r[2].complete_ns = t0 + 4234500;
	r[2].nparts = 2;
	r[3] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .nparts = 1,
	                             .client = 6,
	                             .submit_ns = t0 + 4000000,
	                             .complete_ns = t0 + 4000050,
	                             .bytes = 4096,
	                             .nops = 1,
	                             .kind = MV_TK_WRITE,
	                             .status = -ERANGE,
	                             .cause = MV_CAUSE_BOUNDS};
	r[4] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .nparts = 1,
	                             .client = 6,
	                             .submit_ns = t0 + 5000000,
	                             .complete_ns = t0 + 5000010,
	                             .kind = MV_TK_IMM,
	                             .imm = 7};
	return 5;
}

START_TEST(test_dump_prints_every_record)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[8];
	size_t n = captured(&h, r);
	char p[128];
	struct out o;

	write_trace(in_dir(p, sizeof(p), "t"), &h, r, n, 1, 0);
	RUN(&o, NULL, "mvtrace", "dump", p);
	ck_assert_msg(o.status == 0, "%s", o.err);
	int lines = 0;
	for (char *s = o.out; (s = strchr(s, '\n')); s++)
		lines++;
	ck_assert_int_eq(lines, 2 + 5 + 1); /* two comment lines, records, END */
	ck_has(o.out, "provider tcp;ofi_rxm, source testhost, mover 0xabcdef, 2 shards, 5 batch "
	              "records + END");
	/* Times from the trace start, kinds by name, latency in us, status by cause. */
	ck_has(o.out, "2.000 write");
	ck_has(o.out, "1.000 writev|imm");
	ck_has(o.out, "3.000 paged|imm");
	ck_has(o.out, "64 KiB");
	ck_has(o.out, "1234.5");
	ck_has(o.out, "-ERANGE(bounds)");
	ck_has(o.out, "end: 5 records written, 3 dropped");

	RUN(&o, NULL, "mvtrace", "dump", p, "--csv");
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_assert_msg(!strncmp(o.out,
	                       "rec,type,kind,t_ns,submit_ns,complete_ns,latency_ns,bytes,"
	                       "nops,ndesc,page_size,nparts,shard_mask,client,peer,imm,"
	                       "status,cause\n",
	                       strlen("rec,type,kind,")),
	              "%s", o.out);
	ck_has(o.out, "\n0,batch,write,2000000,1002000000,1002000100,100,1000,3,3,0,1,1,5,119,0,0,"
	              "none\n");
	ck_has(o.out, "\n2,batch,paged|imm,3000000,1003000000,1004234500,1234500,1048576,16,0,"
	              "65536,2,0,0,0,42,0,none\n");
	ck_has(o.out, "\n3,batch,write,4000000,1004000000,1004000050,50,4096,1,0,0,1,0,6,0,0,"
	              "-34,bounds\n");
	ck_has(o.out, "\n5,end,,,,,,5,3,,,,,,,,,\n");
}
END_TEST

START_TEST(test_summary_totals_histogram_percentiles_errors)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[100];
	char p[128];
	struct out o;

	/* Latencies 1..100 us; sizes 4 KiB (50), 1 MiB (49), one 3 MiB; two failures. */
	for (uint32_t i = 0; i < 100; i++) {
		uint32_t pages = i < 50 ? 1 : i < 99 ? 256 : 768;
		r[i] = rec_paged(h.start_ns + i * 1000000ull, pages, 4096, i);
		r[i].complete_ns = r[i].submit_ns + (i + 1) * 1000ull;
	}
	r[10].status = -EPIPE;
	r[10].cause = MV_CAUSE_PEER_GONE;
	r[20].status = -ERANGE;
	r[20].cause = MV_CAUSE_BOUNDS;
	write_trace(in_dir(p, sizeof(p), "t"), &h, r, 100, 1, 0);
	RUN(&o, NULL, "mvtrace", "summary", p);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "batches    100\n");
	ck_has(o.out, "ops        13362\n"); /* 50 + 49 * 256 + 768 */
	ck_has(o.out, "bytes      54730752 (52.20 MiB)\n");
	ck_has(o.out, "duration   0.099100 s (first submit to last completion)\n");
	ck_has(o.out, "kinds      paged|imm 100\n");
	ck_has(o.out, "[4 KiB, 8 KiB)                 50");
	ck_has(o.out, "[1 MiB, 2 MiB)                 49");
	ck_has(o.out, "[2 MiB, 4 MiB)                  1");
	ck_has(o.out, "p50 50.0 us  p90 90.0 us  p99 99.0 us  p99.9 100.0 us  max 100.0 us");
	ck_has(o.out, "errors     2: bounds 1 (e.g. -ERANGE) peer_gone 1 (e.g. -EPIPE)");
	ck_has(o.out, "dropped    3 records (END record)");
	ck_has(o.out, "started    2023-11-14 22:13:20.000000 UTC");
}
END_TEST

/* ---- import ---- */

/* Independent of mvtrace: Unix ns of "2023-11-16 18:15:46.6805900". */
static uint64_t azure_ns(const char *s)
{
	struct tm tm = {0};
	char frac[16] = "";

	ck_assert_int_ge(sscanf(s, "%d-%d-%d %d:%d:%d.%15[0-9]", &tm.tm_year, &tm.tm_mon,
	                        &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, frac),
	                 6);
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	uint64_t ns = (uint64_t)timegm(&tm) * 1000000000ull;
	uint64_t scale = 100000000;
	for (char *c = frac; *c && scale; c++, scale /= 10)
		ns += (uint64_t)(*c - '0') * scale;
	return ns;
}

static uint32_t pages_for(uint64_t tokens)
{
	return (uint32_t)((tokens + M_TPP - 1) / M_TPP * M_LAYERS);
}

START_TEST(test_import_azure_slice_page_math_and_arrivals)
{
	char in[4200], p[128], line[256];
	struct out o;
	struct mvt_trace t;

	snprintf(in, sizeof(in), "%s/azure_conv_50.csv", datadir);
	RUN(&o, NULL, "mvtrace", "import", "azure", in, in_dir(p, sizeof(p), "az.trace"), MODEL);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "50 requests");
	ck_has(o.out, "-> 50 batches");
	load_ok(p, &t);
	ck_assert_int_eq(t.nrec, 50);
	ck_assert(t.has_end);
	ck_assert_int_eq(t.end.bytes, 50);
	ck_assert_int_eq(t.end.nops, 0);
	ck_assert_str_eq(t.hdr.provider, "import:azure");
	ck_assert_str_eq(t.hdr.source, "azure_conv_50.csv");
	ck_assert_int_eq(t.hdr.nshards, 0);
	ck_assert_int_eq(t.hdr.mover_id, 0);
	ck_assert_int_eq(t.hdr.start_ns, 0);

	/* Every row, recomputed here from the CSV. */
	FILE *f = fopen(in, "r");
	ck_assert(f);
	ck_assert(fgets(line, sizeof(line), f)); /* header */
	uint64_t first = 0;
	for (size_t i = 0; fgets(line, sizeof(line), f); i++) {
		char *c = strchr(line, ',');
		ck_assert(c);
		uint64_t at = azure_ns(line), tokens = strtoull(c + 1, NULL, 10);
		if (i == 0) {
			first = at;
			ck_assert_uint_eq(t.hdr.start_unix_ns, at);
		}
		const struct mv_trace_rec *r = &t.rec[i];
		ck_assert_int_eq(r->type, MV_TR_BATCH);
		ck_assert_int_eq(r->kind, MV_TK_PAGED | MV_TK_IMM);
		ck_assert_uint_eq(r->submit_ns, at - first);
		ck_assert_uint_eq(r->complete_ns, 0);
		ck_assert_uint_eq(r->nops, pages_for(tokens));
		ck_assert_uint_eq(r->page_size, M_PAGE);
		ck_assert_uint_eq(r->bytes, (uint64_t)r->nops * M_PAGE);
		ck_assert_uint_eq(r->imm, i);
		ck_assert_uint_eq(r->nparts, 0);
		ck_assert_uint_eq(r->peer, 0);
	}
	fclose(f);
	/* The first two rows by hand: 374 tokens -> 24 pages per layer; the second
	 * arrived 18:15:50.9951690 - 18:15:46.6805900 = 4.314579 s later. */
	ck_assert_uint_eq(t.rec[0].nops, 48);
	ck_assert_uint_eq(t.rec[0].bytes, 393216);
	ck_assert_uint_eq(t.rec[1].submit_ns, 4314579000ull);
	mvt_free(&t);
}
END_TEST

/* Independent Mooncake rule: blocks of 512 tokens, seen in an earlier request. */
static uint64_t mooncake_tokens(const char *line, uint64_t *seen, size_t *nseen, double *ts)
{
	const char *p = strstr(line, "\"timestamp\":");
	uint64_t input, ids[4096];
	size_t n = 0, cached = 0;

	ck_assert(p);
	*ts = strtod(p + 12, NULL);
	p = strstr(line, "\"input_length\":");
	ck_assert(p);
	input = strtoull(p + 15, NULL, 10);
	p = strstr(line, "\"hash_ids\": [");
	ck_assert(p);
	for (p += 13; *p && *p != ']'; n++) {
		char *e;
		ids[n] = strtoull(p, &e, 10);
		p = *e == ',' ? e + 1 : e;
	}
	for (size_t b = 0; b < n && b * 512 < input; b++)
		for (size_t k = 0; k < *nseen; k++)
			if (seen[k] == ids[b]) {
				cached += input - b * 512 < 512 ? input - b * 512 : 512;
				break;
			}
	for (size_t b = 0; b < n; b++)
		seen[(*nseen)++] = ids[b];
	return input - cached;
}

START_TEST(test_import_mooncake_slice_page_math_and_arrivals)
{
	char in[4200], p[128];
	static char line[1 << 16];
	static uint64_t seen[1 << 16];
	size_t nseen = 0, rec = 0, empty = 0;
	struct out o;
	struct mvt_trace t;

	snprintf(in, sizeof(in), "%s/mooncake_conv_50.jsonl", datadir);
	RUN(&o, NULL, "mvtrace", "import", "mooncake", in, in_dir(p, sizeof(p), "mc.trace"), MODEL);
	ck_assert_msg(o.status == 0, "%s", o.err);
	load_ok(p, &t);
	ck_assert_str_eq(t.hdr.provider, "import:mooncake");
	ck_assert_str_eq(t.hdr.source, "mooncake_conv_50.jsonl");
	FILE *f = fopen(in, "r");
	ck_assert(f);
	for (uint32_t i = 0; fgets(line, sizeof(line), f); i++) {
		double ts;
		uint64_t tokens = mooncake_tokens(line, seen, &nseen, &ts);
		if (!tokens) {
			empty++;
			continue;
		}
		ck_assert_uint_lt(rec, t.nrec);
		const struct mv_trace_rec *r = &t.rec[rec++];
		ck_assert_uint_eq(r->imm, i);
		ck_assert_uint_eq(r->nops, pages_for(tokens));
		ck_assert_uint_eq(r->bytes, (uint64_t)r->nops * M_PAGE);
		ck_assert_uint_eq(r->submit_ns, (uint64_t)llround(ts * 1e6));
	}
	fclose(f);
	ck_assert_uint_eq(rec, t.nrec);
	ck_assert_uint_eq(rec + empty, 50);
	/* By hand: 6758 tokens, all new -> 423 pages per layer; the second request
	 * shares block 0 with the first: 7322 - 512 = 6810 -> 426 per layer. */
	ck_assert_uint_eq(t.rec[0].nops, 846);
	ck_assert_uint_eq(t.rec[1].nops, 852);
	mvt_free(&t);
}
END_TEST

START_TEST(test_import_mooncake_prefix_cache_exact_pages)
{
	char in[128], p[128];
	struct out o;
	struct mvt_trace t;

	write_text(in_dir(in, sizeof(in), "tiny.jsonl"),
	           /* 0: all new: 1100 tokens -> 69 per layer */
	           "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 1, "
	           "\"hash_ids\": [1, 2, 3]}\n"
	           /* 1: blocks 1, 2 cached: 1100 - 1024 = 76 -> 5 */
	           "{\"timestamp\": 5, \"input_length\": 1100, \"output_length\": 1, "
	           "\"hash_ids\": [1, 2, 4]}\n"
	           /* 2: all cached, the last block partial (6 tokens): no record */
	           "{\"timestamp\": 7.5, \"input_length\": 1030, \"output_length\": 1, "
	           "\"hash_ids\": [1, 2, 4]}\n"
	           "\n"
	           /* 3: a block repeated within one request is still new: 600 -> 38 */
	           "{\"timestamp\": 9, \"input_length\": 600, \"hash_ids\": [9, 9]}\n"
	           /* 4: two cached blocks; tokens past the listed blocks are sent: 976 -> 61 */
	           "{\"timestamp\": 10, \"input_length\": 2000, \"hash_ids\": [9, 1]}\n"
	           /* 5: keys in any order, unknown values skipped: 100 -> 7 */
	           "{\"hash_ids\": [], \"extra\": {\"a\": [1, \"x]\", null]}, "
	           "\"input_length\": 100, \"timestamp\": 11}\n"
	           /* 6: an empty prompt: no record */
	           "{\"timestamp\": 12, \"input_length\": 0, \"hash_ids\": [77]}\n");
	RUN(&o, NULL, "mvtrace", "import", "mooncake", in, in_dir(p, sizeof(p), "tiny.trace"),
	    MODEL);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "7 requests");
	ck_has(o.out, "2 requests had no pages to send");
	load_ok(p, &t);
	ck_assert_int_eq(t.nrec, 5);
	const uint32_t pages[] = {138, 10, 76, 122, 14}, imm[] = {0, 1, 3, 4, 5};
	const uint64_t at[] = {0, 5000000, 9000000, 10000000, 11000000};
	for (int i = 0; i < 5; i++) {
		ck_assert_uint_eq(t.rec[i].nops, pages[i]);
		ck_assert_uint_eq(t.rec[i].imm, imm[i]);
		ck_assert_uint_eq(t.rec[i].submit_ns, at[i]);
	}
	mvt_free(&t);

	/* --limit counts requests read, records or not. */
	RUN(&o, NULL, "mvtrace", "import", "mooncake", in, p, MODEL, "--limit", "3");
	ck_assert_msg(o.status == 0, "%s", o.err);
	load_ok(p, &t);
	ck_assert_int_eq(t.nrec, 2);
	mvt_free(&t);
}
END_TEST

START_TEST(test_import_refuses_bad_input_naming_the_line)
{
	char in[128], p[128];
	struct out o;

	write_text(in_dir(in, sizeof(in), "bad.csv"), "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	                                              "2023-11-16 18:15:46.6805900,374,44\n"
	                                              "2023-11-16 18:15:4x.0,396,109\n");
	RUN(&o, NULL, "mvtrace", "import", "azure", in, in_dir(p, sizeof(p), "o.trace"), MODEL);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "bad.csv line 3: TIMESTAMP '2023-11-16 18:15:4x.0'");
	ck_assert_msg(access(p, F_OK) != 0, "a failed import left %s behind", p);

	write_text(in, "2023-11-16 18:15:46.6805900,374,44\n");
	RUN(&o, NULL, "mvtrace", "import", "azure", in, p, MODEL);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "line 1: the header names no TIMESTAMP and ContextTokens");

	write_text(in, "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6,12\n"
	               "2023-11-16 18:15:45.0,12\n");
	RUN(&o, NULL, "mvtrace", "import", "azure", in, p, MODEL);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "line 3: arrives 1.600 s before the request on line 2; the input must be in "
	              "arrival order");
	/* Found by tests/fuzz/fuzz_import: only the first request was compared,
	 * so a later one out of order became a record out of order. */
	write_text(in, "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.0,12\n"
	               "2023-11-16 18:15:50.0,12\n2023-11-16 18:15:47.0,12\n");
	RUN(&o, NULL, "mvtrace", "import", "azure", in, p, MODEL);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "line 4: arrives 3.000 s before the request on line 3");
	/* Dates that do not exist, or whose nanoseconds since 1970 wrap, and
	 * digits with signs: refused, not read as another time. */
	write_text(in, "TIMESTAMP,ContextTokens\n2023-02-29 18:15:46.0,12\n");
	RUN(&o, NULL, "mvtrace", "import", "azure", in, p, MODEL);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "line 2: TIMESTAMP '2023-02-29 18:15:46.0' is no day of the years 1970 to "
	              "2262");
	write_text(in, "TIMESTAMP,ContextTokens\n2600-01-01 00:00:00,12\n");
	RUN(&o, NULL, "mvtrace", "import", "azure", in, p, MODEL);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "is no day of the years 1970 to 2262");
	write_text(in, "TIMESTAMP,ContextTokens\n+023-11-16 18:15:46.0,12\n");
	RUN(&o, NULL, "mvtrace", "import", "azure", in, p, MODEL);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "TIMESTAMP '+023-11-16 18:15:46.0' is not like");
	write_text(in, "TIMESTAMP,ContextTokens\n2024-02-29T18:15:46.0,12\n");
	RUN(&o, NULL, "mvtrace", "import", "azure", in, p, MODEL);
	ck_assert_msg(o.status == 0, "%s", o.err);

	write_text(in_dir(in, sizeof(in), "bad.jsonl"),
	           "{\"timestamp\": 0, \"input_length\": 10, \"hash_ids\": [1]}\n"
	           "{\"timestamp\": 1, \"input_length\": 10, \"hash_ids\": [1, -2]}\n");
	RUN(&o, NULL, "mvtrace", "import", "mooncake", in, p, MODEL);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "bad.jsonl line 2: column 54: expected hash_ids as an array of non-negative");

	/* 1e15 ms was accepted, and its nanoseconds overflowed into a record
	 * 2^63 ns late. */
	write_text(in, "{\"timestamp\": 0, \"input_length\": 10, \"hash_ids\": [1]}\n"
	               "{\"timestamp\": 1e15, \"input_length\": 10, \"hash_ids\": [2]}\n");
	RUN(&o, NULL, "mvtrace", "import", "mooncake", in, p, MODEL);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "line 2: column 15: expected timestamp as a number of milliseconds from 0 to "
	              "9e12");

	write_text(in, "{\"timestamp\": 0, \"hash_ids\": [1]}\n");
	RUN(&o, NULL, "mvtrace", "import", "mooncake", in, p, MODEL);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "line 1: no input_length");

	/* The model is required and must fit the format. */
	RUN(&o, NULL, "mvtrace", "import", "mooncake", in, p, "--layers", "2");
	ck_assert_int_eq(o.status, 2);
	ck_has(o.err, "needs --layers, --kv-heads, --head-dim, --dtype-bytes and "
	              "--tokens-per-page");
	RUN(&o, NULL, "mvtrace", "import", "mooncake", in, p, "--layers", "2", "--kv-heads",
	    "1048576", "--head-dim", "128", "--dtype-bytes", "2", "--tokens-per-page", "64");
	ck_assert_int_eq(o.status, 2);
	ck_has(o.err, "does not fit the trace's 32-bit page_size");
	RUN(&o, NULL, "mvtrace", "import", "parquet", in, p, MODEL);
	ck_assert_int_eq(o.status, 2);
	ck_has(o.err, "format 'parquet' is unknown");
}
END_TEST

START_TEST(test_help_documents_the_conversion)
{
	struct out o;

	RUN(&o, NULL, "mvtrace", "--help");
	ck_assert_int_eq(o.status, 0);
	ck_has(o.out, "page_size = 2 * H * D * E * T");
	ck_has(o.out, "pages     = ceil(tokens / T) * L");
	ck_has(o.out, "512 tokens");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("trace");
	TCase *tc;

	tc = tcase_create("reader");
	tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
	tcase_add_test(tc, test_reader_refuses_wrong_magic);
	tcase_add_test(tc, test_reader_refuses_newer_version);
	tcase_add_test(tc, test_reader_refuses_other_record_size);
	tcase_add_test(tc, test_reader_names_truncated_header);
	tcase_add_test(tc, test_reader_names_offset_of_partial_last_record);
	tcase_add_test(tc, test_reader_names_record_and_field);
	tcase_add_test(tc, test_replay_refuses_damaged_trace_before_connecting);
	suite_add_tcase(s, tc);

	tc = tcase_create("output");
	tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
	tcase_add_test(tc, test_dump_prints_every_record);
	tcase_add_test(tc, test_summary_totals_histogram_percentiles_errors);
	suite_add_tcase(s, tc);

	tc = tcase_create("import");
	tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
	tcase_add_test(tc, test_import_azure_slice_page_math_and_arrivals);
	tcase_add_test(tc, test_import_mooncake_slice_page_math_and_arrivals);
	tcase_add_test(tc, test_import_mooncake_prefix_cache_exact_pages);
	tcase_add_test(tc, test_import_refuses_bad_input_naming_the_line);
	tcase_add_test(tc, test_help_documents_the_conversion);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
