/* SPDX-License-Identifier: MIT */
/*
 * Tests of the trace tools as a user runs them: the built mvtrace and
 * mvreplay binaries, executed with their output captured, against trace
 * files written here byte by byte. reader: every kind of damaged file is
 * refused with the byte offset, record index or field it names; output:
 * dump and summary print what the records hold; import: the public trace
 * slices in tests/data/ become the batches the conversion rule says (page
 * math, arrivals and Mooncake prefix caching recomputed independently
 * here); control: `mvtrace start|stop` speak MV_MSG_TRACE to a fake mover;
 * replay: two movers on loopback re-issue a trace with exactly its bytes
 * and ops, on schedule, and name what failed and why; capture: a mover's
 * own trace of a replay, replayed again, gives the same totals, and SIGTERM
 * closes a trace with its END record.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tools/trace_read.h"
#include "mv_sock.h"
#include "mv_wire.h"
#include "trace_format.h"

#include "mvtest.h"

/* A small model for the importers: 2 * 2 heads * 64 dims * 2 bytes * 16 tokens. */
#define MODEL                                                                                      \
	"--layers", "2", "--kv-heads", "2", "--head-dim", "64", "--dtype-bytes", "2",              \
	    "--tokens-per-page", "16"
#define M_LAYERS 2u
#define M_TPP    16u
#define M_PAGE   8192u

static char dir[64];      /* this test's scratch directory */
static char bindir[4096]; /* absolute: tests change directory */
static char datadir[4096];

static const char *in_dir(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
	return buf;
}

static void setup_dir(void)
{
	const char *b = getenv("MV_BUILD") ? getenv("MV_BUILD") : "build";
	const char *d = getenv("MV_TESTDATA") ? getenv("MV_TESTDATA") : "tests/data";
	char p[4200];

	snprintf(p, sizeof(p), "%s/bin", b);
	ck_assert_msg(realpath(p, bindir), "no %s: build first (make all)", p);
	ck_assert_msg(realpath(d, datadir),
	              "no %s: run from the repository root or set MV_TESTDATA", d);
	snprintf(dir, sizeof(dir), "/tmp/mvtt.XXXXXX");
	ck_assert(mkdtemp(dir));
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	return remove(path);
}

static void teardown_dir(void)
{
	if (dir[0])
		nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* ---- running the tools ---- */

struct out {
	int status; /* exit status, or 128 + signal */
	double secs;
	char out[1 << 16];
	char err[1 << 14];
};

static void slurp(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? 0 : read(fd, buf, len - 1);

	buf[n > 0 ? n : 0] = 0;
	if (fd >= 0)
		close(fd);
}

/* A tool running in the background, its output going to files. */
struct job {
	pid_t pid;
	double t0;
	char po[128], pe[128];
	const char *tool;
};

/* Starts bindir/tool with args (NULL-terminated) in cwd (NULL: here). */
static void spawn(struct job *j, const char *cwd, const char *tool, const char *const *args)
{
	static int seq;
	char bin[4200], name[32];
	const char *argv[64] = {bin};
	int n = 1;

	snprintf(bin, sizeof(bin), "%s/%s", bindir, tool);
	while (args[n - 1] && n < 63) {
		argv[n] = args[n - 1];
		n++;
	}
	argv[n] = NULL;
	snprintf(name, sizeof(name), ".run%d.out", seq);
	in_dir(j->po, sizeof(j->po), name);
	snprintf(name, sizeof(name), ".run%d.err", seq++);
	in_dir(j->pe, sizeof(j->pe), name);
	j->tool = tool;
	j->t0 = now_s();
	j->pid = fork();
	ck_assert_int_ge(j->pid, 0);
	if (j->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fo = open(j->po, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int fe = open(j->pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0 || (cwd && chdir(cwd)))
			_exit(126);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
}

/* Waits for it (60 s at most) and collects its exit status and output. */
static void finish(struct job *j, struct out *o)
{
	int st;

	for (;;) {
		if (waitpid(j->pid, &st, WNOHANG) == j->pid)
			break;
		if (now_s() - j->t0 > 60) {
			kill(j->pid, SIGKILL);
			waitpid(j->pid, &st, 0);
			ck_abort_msg("%s ran for more than 60 s", j->tool);
		}
		usleep(2000);
	}
	o->secs = now_s() - j->t0;
	o->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	slurp(j->po, o->out, sizeof(o->out));
	slurp(j->pe, o->err, sizeof(o->err));
}

static void runv(struct out *o, const char *cwd, const char *tool, const char *const *args)
{
	struct job j;

	spawn(&j, cwd, tool, args);
	finish(&j, o);
}

#define RUN(o, cwd, tool, ...)                                                                     \
	do {                                                                                       \
		const char *const a_[] = {__VA_ARGS__, NULL};                                      \
		runv((o), (cwd), (tool), a_);                                                      \
	} while (0)

#define ck_has(hay, needle)                                                                        \
	ck_assert_msg(strstr((hay), (needle)), "'%s' not in:\n%s", (needle), (hay))

/* ---- writing traces ---- */

static struct mv_trace_hdr hdr_ok(void)
{
	struct mv_trace_hdr h = {.magic = MV_TRACE_MAGIC,
	                         .version = MV_TRACE_VERSION,
	                         .hdr_size = sizeof(h),
	                         .rec_size = sizeof(struct mv_trace_rec),
	                         .nshards = 2,
	                         .mover_id = 0xabcdef,
	                         .start_ns = 1000000000,
	                         .start_unix_ns = 1700000000ull * 1000000000ull};
	snprintf(h.provider, sizeof(h.provider), "tcp;ofi_rxm");
	snprintf(h.source, sizeof(h.source), "testhost");
	return h;
}

static struct mv_trace_rec rec_paged(uint64_t submit, uint32_t pages, uint32_t ps, uint32_t imm)
{
	return (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .submit_ns = submit,
	                             .bytes = (uint64_t)pages * ps,
	                             .nops = pages,
	                             .page_size = ps,
	                             .kind = MV_TK_PAGED | MV_TK_IMM,
	                             .imm = imm};
}

/* Header, records, an END record if end, then extra raw bytes. */
static void write_trace(const char *path, const struct mv_trace_hdr *h,
                        const struct mv_trace_rec *r, size_t n, int end, size_t extra)
{
	FILE *f = fopen(path, "wb");
	struct mv_trace_rec e = {.type = MV_TR_END, .bytes = n, .nops = 3};
	static const char junk[64];

	ck_assert(f);
	ck_assert_int_eq(fwrite(h, sizeof(*h), 1, f), 1);
	if (n)
		ck_assert_int_eq(fwrite(r, sizeof(*r), n, f), n);
	if (end)
		ck_assert_int_eq(fwrite(&e, sizeof(e), 1, f), 1);
	if (extra)
		ck_assert_int_eq(fwrite(junk, extra, 1, f), 1);
	ck_assert_int_eq(fclose(f), 0);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

static void load_ok(const char *path, struct mvt_trace *t)
{
	char err[512];

	ck_assert_msg(mvt_load(path, t, err, sizeof(err)) == 0, "%s", err);
}

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

/* ---- control: start and stop against a fake mover ---- */

struct fake {
	int lfd;
	char path[108];
};

static void fake_listen(struct fake *f)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	snprintf(f->path, sizeof(f->path), "%s/fake.sock", dir);
	strcpy(sa.sun_path, f->path);
	f->lfd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	ck_assert_int_ge(f->lfd, 0);
	ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f->lfd, 4), 0);
}

/* Serves one TRACE request in a child: checks it, answers status and msg. */
static pid_t fake_serve(struct fake *f, uint32_t on, const char *want_path, int32_t status,
                        const char *msg)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid)
		return pid;
	alarm(20);
	int fd = accept(f->lfd, NULL, NULL);
	union {
		struct {
			struct mv_msg_hdr h;
			struct mv_trace_req r;
		} m;
		char raw[1024];
	} u = {0};
	union mv_cmsg cm;
	struct iovec iov = {&u, sizeof(u)};
	struct msghdr mh = {.msg_iov = &iov,
	                    .msg_iovlen = 1,
	                    .msg_control = cm.buf,
	                    .msg_controllen = sizeof(cm.buf)};
	ssize_t n = recvmsg(fd, &mh, 0);
	int tfd = -1, nfds = n > 0 ? mv_fds_take(&mh, &tfd, 1) : 0;
	typeof(u.m) m = u.m;
	int ok = n == (ssize_t)sizeof(m) && m.h.magic == MV_WIRE_MAGIC &&
	         m.h.version == MV_WIRE_VERSION && m.h.type == MV_MSG_TRACE &&
	         m.h.len == sizeof(m.r) && m.r.on == on && !strcmp(m.r.path, want_path);
	/* A start brings the file, opened for writing by the tool: the mover
	 * never opens the path itself. */
	struct stat fs, ps;
	int fl = tfd >= 0 ? fcntl(tfd, F_GETFL) : -1;
	int fd_ok = on ? nfds == 1 && fl >= 0 && (fl & O_ACCMODE) != O_RDONLY && !fstat(tfd, &fs) &&
	                     !stat(want_path, &ps) && fs.st_ino == ps.st_ino &&
	                     fs.st_dev == ps.st_dev
	               : nfds == 0;
	if (!ok || !fd_ok) {
		fprintf(
		    stderr,
		    "fake mover: bad request (%zd bytes, type %u, on %u, path '%s', %d fds%s)\n", n,
		    m.h.type, m.r.on, m.r.path, nfds, fd_ok ? "" : ", not the file");
		_exit(1);
	}
	struct {
		struct mv_msg_hdr h;
		struct mv_reply_hdr r;
	} rep = {.h = {.magic = MV_WIRE_MAGIC,
	               .version = MV_WIRE_VERSION,
	               .type = MV_MSG_TRACE | MV_MSG_REPLY,
	               .len = sizeof(rep.r),
	               .seq = m.h.seq},
	         .r = {.status = status}};
	snprintf(rep.r.msg, sizeof(rep.r.msg), "%s", msg);
	send(fd, &rep, sizeof(rep), 0);
	_exit(0);
}

static void fake_done(pid_t pid)
{
	int st;

	waitpid(pid, &st, 0);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the fake mover saw a bad request");
}

START_TEST(test_start_sends_absolute_path_and_reports_reply)
{
	struct fake f;
	struct out o;
	char want[300];

	fake_listen(&f);
	/* A relative FILE is made absolute against the tool's working directory. */
	snprintf(want, sizeof(want), "%s/cap.trace", dir);
	pid_t pid = fake_serve(&f, 1, want, 0, "");
	RUN(&o, dir, "mvtrace", "start", "--socket", f.path, "cap.trace");
	fake_done(pid);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "is tracing to");
	ck_has(o.out, want);

	snprintf(want, sizeof(want), "%s/refused.trace", dir);
	pid = fake_serve(&f, 1, want, -EACCES, "TRACE is for the mover's admins");
	RUN(&o, dir, "mvtrace", "start", "--socket", f.path, want);
	fake_done(pid);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "the mover refused (-EACCES): TRACE is for the mover's admins");

	pid = fake_serve(&f, 0, "", -ENOENT, "no trace is being written");
	RUN(&o, dir, "mvtrace", "stop", "--socket", f.path);
	fake_done(pid);
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "no trace is being written");

	/* A file the tool itself cannot create is its own error, named. */
	RUN(&o, dir, "mvtrace", "start", "--socket", f.path, "/proc/no/such.trace");
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "cannot create /proc/no/such.trace");
	close(f.lfd);
}
END_TEST

START_TEST(test_start_without_mover_names_the_socket)
{
	struct out o;
	char s[128];

	RUN(&o, NULL, "mvtrace", "start", "--socket", in_dir(s, sizeof(s), "none.sock"), "x");
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "connect to");
	ck_has(o.err, "none.sock");
	ck_has(o.err, "is a mover listening there?");
}
END_TEST

/* ---- two movers on loopback ---- */

/* A mover with its socket and log in this test's directory, on tcp with
 * 2 shards, capturing a trace when trace is not NULL. mover_stop() sends
 * SIGTERM, on which the mover closes its trace. */
static void trace_mover_spawn(struct mvproc *m, const char *name, const char *trace)
{
	char bin[4200];

	snprintf(m->sock, sizeof(m->sock), "%s/%s.sock", dir, name);
	snprintf(m->log, sizeof(m->log), "%s/%s.log", dir, name);
	snprintf(bin, sizeof(bin), "%s/mover", bindir);
	mover_spawn(m, (const char *const[]){bin, "--provider", "tcp", "--iface", "lo", "--shards",
	                                     "2", "--op-timeout", "5", "--socket", m->sock,
	                                     "--no-config", trace ? "--trace" : NULL, trace, NULL});
}

static void movers_up(const char *trace_a)
{
	trace_mover_spawn(&A, "a", trace_a);
	trace_mover_spawn(&B, "b", NULL);
	mover_listening(&A, "a", 10);
	mover_listening(&B, "b", 10);
}

static void setup_movers(void)
{
	setup_dir();
	movers_up(NULL);
}

static void teardown_movers(void)
{
	mover_stop(&A);
	mover_stop(&B);
	teardown_dir();
}

struct result {
	uint64_t batches, bytes, ops, errors;
	double p50, max_late;
};

static struct result result_of(const struct out *o)
{
	struct result r;
	const char *l = strstr(o->out, "RESULT mvreplay ");

	ck_assert_msg(l, "no RESULT line; stdout:\n%s\nstderr:\n%s", o->out, o->err);
	ck_assert_msg(sscanf(l,
	                     "RESULT mvreplay batches=%" SCNu64 " bytes=%" SCNu64 " ops=%" SCNu64
	                     " errors=%" SCNu64 " offered_gbps=%*s achieved_gbps=%*s p50_us=%lf "
	                     "p99_us=%*s p999_us=%*s max_late_us=%lf",
	                     &r.batches, &r.bytes, &r.ops, &r.errors, &r.p50, &r.max_late) == 6,
	              "%s", l);
	return r;
}

struct totals {
	uint64_t batches, bytes, ops;
};

static struct totals totals_of(const char *path)
{
	struct mvt_trace t;
	struct totals s = {0};

	load_ok(path, &t);
	s.batches = t.nrec;
	for (size_t i = 0; i < t.nrec; i++) {
		s.bytes += t.rec[i].bytes;
		s.ops += t.rec[i].nops;
	}
	mvt_free(&t);
	return s;
}

static void replay_spawn(struct job *j, const char *trace, const char *const *extra)
{
	const char *args[24] = {"--trace", trace, "--send", A.sock, "--recv", B.sock};
	int n = 6;

	while (extra && *extra && n < 23)
		args[n++] = *extra++;
	args[n] = NULL;
	spawn(j, NULL, "mvreplay", args);
}

static void replay(struct out *o, const char *trace, const char *const *extra)
{
	struct job j;

	replay_spawn(&j, trace, extra);
	finish(&j, o);
}

static void import_azure(char *p, size_t len)
{
	char in[4200];
	struct out o;

	snprintf(in, sizeof(in), "%s/azure_conv_50.csv", datadir);
	RUN(&o, NULL, "mvtrace", "import", "azure", in, in_dir(p, len, "az.trace"), MODEL);
	ck_assert_msg(o.status == 0, "%s", o.err);
}

START_TEST(test_replay_asap_issues_exactly_the_trace)
{
	char p[128];
	struct out o;

	import_azure(p, sizeof(p));
	struct totals want = totals_of(p);
	replay(&o, p, (const char *const[]){"--asap", "--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	struct result r = result_of(&o);
	ck_assert_uint_eq(r.batches, want.batches);
	ck_assert_uint_eq(r.bytes, want.bytes);
	ck_assert_uint_eq(r.ops, want.ops);
	ck_assert_uint_eq(r.errors, 0);
	ck_assert_msg(r.p50 > 0, "p50 %f", r.p50);
	ck_has(o.out, "immediates                   50                   50");
	/* Piped: no progress line. */
	ck_assert_msg(!strchr(o.err, '\r'), "progress line on a pipe: %s", o.err);
}
END_TEST

START_TEST(test_replay_splits_writes_and_segments_exactly)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[6];
	char p[128];
	struct out o;
	uint64_t t0 = h.start_ns;

	/* Uneven splits, every kind, a batch that mixed kinds, in completion order. */
	r[0] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .submit_ns = t0 + 5,
	                             .bytes = 1000,
	                             .nops = 3,
	                             .kind = MV_TK_WRITE};
	r[1] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .submit_ns = t0 + 1,
	                             .bytes = 12345,
	                             .nops = 5,
	                             .kind = MV_TK_WRITEV | MV_TK_IMM,
	                             .imm = 1};
	r[2] = (struct mv_trace_rec){
	    .type = MV_TR_BATCH, .submit_ns = t0 + 3, .kind = MV_TK_IMM, .imm = 2};
	r[3] = rec_paged(t0 + 2, 7, 4096, 3);
	r[4] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .submit_ns = t0 + 4,
	                             .bytes = 3 * 4096 + 777,
	                             .nops = 4,
	                             .page_size = 4096,
	                             .kind = MV_TK_PAGED | MV_TK_WRITE};
	r[5] = (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .submit_ns = t0 + 6,
	                             .bytes = 3u << 20,
	                             .nops = 1,
	                             .kind = MV_TK_WRITE | MV_TK_IMM,
	                             .imm = 5};
	write_trace(in_dir(p, sizeof(p), "w.trace"), &h, r, 6, 1, 0);
	replay(&o, p, (const char *const[]){"--asap", "--pool-mib", "4", "--window", "2", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	struct result res = result_of(&o);
	ck_assert_uint_eq(res.batches, 6);
	ck_assert_uint_eq(res.bytes, 1000 + 12345 + 7 * 4096 + 3 * 4096 + 777 + (3u << 20));
	ck_assert_uint_eq(res.ops, 3 + 5 + 7 + 4 + 1);
	ck_assert_uint_eq(res.errors, 0);
	ck_has(o.out, "immediates                    4                    4");
}
END_TEST

START_TEST(test_replay_keeps_the_schedule)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[6];
	char p[128];
	struct out o;

	/* 100 ms apart: 0.5 s of trace, 0.25 s at --speed 2. */
	for (int i = 0; i < 6; i++)
		r[i] = rec_paged(h.start_ns + (uint64_t)i * 100000000u, 32, 4096, (uint32_t)i);
	write_trace(in_dir(p, sizeof(p), "s.trace"), &h, r, 6, 1, 0);
	replay(&o, p, (const char *const[]){"--speed", "2", "--pool-mib", "4", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	struct result res = result_of(&o);
	ck_assert_uint_eq(res.batches, 6);
	ck_assert_msg(o.secs >= 0.25, "a 0.25 s schedule replayed in %.3f s", o.secs);
	ck_assert_msg(res.max_late < 100000, "fell %.0f us behind a light schedule", res.max_late);
	ck_has(o.out, "lateness   max");
}
END_TEST

START_TEST(test_replay_refuses_pages_larger_than_the_pool)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r = rec_paged(h.start_ns, 2, 2u << 20, 0);
	char p[128];
	struct out o;

	write_trace(in_dir(p, sizeof(p), "big.trace"), &h, &r, 1, 1, 0);
	replay(&o, p, (const char *const[]){"--asap", "--pool-mib", "1", NULL});
	ck_assert_int_eq(o.status, 1);
	ck_has(o.err, "trace record 0 has a page of 2097152 bytes; the regions are 1048576 bytes: "
	              "raise --pool-mib to at least 2");
}
END_TEST

START_TEST(test_replay_carries_requests_larger_than_the_rings)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[2] = {rec_paged(h.start_ns, 120000, 64, 0),
	                            rec_paged(h.start_ns + 1, 10, 64, 1)};
	char p[128];
	struct out o;

	/* 120,000 scattered pages: 15 times what the rings of a shard hold as
	 * descriptors, one LIST descriptor per shard by reference. */
	write_trace(in_dir(p, sizeof(p), "many.trace"), &h, r, 2, 1, 0);
	replay(&o, p, (const char *const[]){"--asap", "--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	struct result res = result_of(&o);
	ck_assert_uint_eq(res.errors, 0);
	ck_assert_uint_eq(res.batches, 2);
	ck_assert_uint_eq(res.ops, 120010);
}
END_TEST

START_TEST(test_replay_counts_errors_by_cause_when_the_peer_dies)
{
	struct mv_trace_hdr h = hdr_ok();
	struct mv_trace_rec r[40];
	char p[128];
	struct out o;
	struct job j;

	/* 2 s of batches; the receiving mover is killed after 0.5 s. */
	for (int i = 0; i < 40; i++)
		r[i] = rec_paged(h.start_ns + (uint64_t)i * 50000000u, 64, 4096, (uint32_t)i);
	write_trace(in_dir(p, sizeof(p), "d.trace"), &h, r, 40, 1, 0);
	replay_spawn(&j, p, (const char *const[]){"--pool-mib", "4", NULL});
	usleep(500000);
	kill(B.pid, SIGKILL);
	waitpid(B.pid, NULL, 0);
	B.pid = 0;
	finish(&j, &o);
	ck_assert_msg(o.status == 1, "exit %d\n%s\n%s", o.status, o.out, o.err);
	struct result res = result_of(&o);
	ck_assert_msg(res.errors > 0 && res.errors < 40, "%s", o.out);
	ck_has(o.err, "failed: peer_gone");
	ck_has(o.out, "errors     ");
	ck_has(o.out, "peer_gone");
	ck_has(o.out, "failed     the receiver failed");
}
END_TEST

/* ---- capture -> replay -> capture ---- */

static int mover_traces(void)
{
	struct out o;

	RUN(&o, NULL, "mover", "--help");
	return strstr(o.out, "--trace") || strstr(o.err, "--trace");
}

START_TEST(test_captured_replay_replays_to_the_same_totals)
{
	char az[128], cap1[128], cap2[128];
	struct out o;

	if (!mover_traces()) {
		printf("SKIP: test_captured_replay_replays_to_the_same_totals: this mover has no "
		       "--trace\n");
		return;
	}
	import_azure(az, sizeof(az));
	struct totals want = totals_of(az);
	/* Capture 1: started from the mover's command line, stopped at run time. */
	movers_up(in_dir(cap1, sizeof(cap1), "cap1.trace"));
	replay(&o, az, (const char *const[]){"--asap", "--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	RUN(&o, NULL, "mvtrace", "stop", "--socket", A.sock);
	ck_assert_msg(o.status == 0, "%s", o.err);

	struct mvt_trace t;
	load_ok(cap1, &t);
	ck_assert_msg(t.has_end, "the mover closed no END record");
	ck_assert_uint_eq(t.end.nops, 0);
	ck_assert_uint_eq(t.end.bytes, t.nrec);
	ck_assert_int_eq(t.hdr.nshards, 2);
	for (size_t i = 0; i < t.nrec; i++) {
		ck_assert_int_eq(t.rec[i].status, 0);
		ck_assert_int_eq(t.rec[i].kind, MV_TK_PAGED | MV_TK_IMM);
		ck_assert_uint_eq(t.rec[i].page_size, M_PAGE);
		ck_assert(t.rec[i].complete_ns >= t.rec[i].submit_ns);
		ck_assert(t.rec[i].nparts >= 1 && t.rec[i].nparts <= 2);
	}
	mvt_free(&t);
	struct totals got = totals_of(cap1);
	ck_assert_uint_eq(got.batches, want.batches);
	ck_assert_uint_eq(got.bytes, want.bytes);
	ck_assert_uint_eq(got.ops, want.ops);

	/* Capture 2: switched on at run time, of a replay of capture 1. */
	RUN(&o, dir, "mvtrace", "start", "--socket", A.sock, "cap2.trace");
	ck_assert_msg(o.status == 0, "%s", o.err);
	replay(&o, cap1, (const char *const[]){"--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	RUN(&o, NULL, "mvtrace", "stop", "--socket", A.sock);
	ck_assert_msg(o.status == 0, "%s", o.err);
	got = totals_of(in_dir(cap2, sizeof(cap2), "cap2.trace"));
	ck_assert_uint_eq(got.batches, want.batches);
	ck_assert_uint_eq(got.bytes, want.bytes);
	ck_assert_uint_eq(got.ops, want.ops);
	RUN(&o, NULL, "mvtrace", "summary", cap2);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "errors     none");
	ck_has(o.out, "dropped    0 records");
}
END_TEST

/* A trace started with --hops pairs every batch with its hops, in order:
 * submitted, taken, posted, data done, published; dump and summary show
 * them. */
START_TEST(test_captured_hops_follow_their_batches_in_order)
{
	char az[128], cap[128];
	struct out o;

	if (!mover_traces()) {
		printf("SKIP: test_captured_hops_follow_their_batches_in_order: this mover has "
		       "no --trace\n");
		return;
	}
	import_azure(az, sizeof(az));
	movers_up(NULL);
	RUN(&o, dir, "mvtrace", "start", "--socket", A.sock, "--hops", "cap.trace");
	ck_assert_msg(o.status == 0, "%s", o.err);
	replay(&o, az, (const char *const[]){"--asap", "--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	RUN(&o, NULL, "mvtrace", "stop", "--socket", A.sock);
	ck_assert_msg(o.status == 0, "%s", o.err);

	struct mvt_trace t;
	load_ok(in_dir(cap, sizeof(cap), "cap.trace"), &t);
	ck_assert_uint_eq(t.nrec, 50);
	ck_assert_uint_eq(t.nhops, t.nrec);
	for (size_t i = 0; i < t.nrec; i++) {
		const struct mv_trace_hops *h = &t.hops[i];
		ck_assert_uint_eq(h->type, MV_TR_HOPS);
		ck_assert_uint_eq(h->submit_ns, t.rec[i].submit_ns);
		ck_assert_uint_eq(h->complete_ns, t.rec[i].complete_ns);
		/* A long list's first writes can go before its END is taken. */
		ck_assert_msg(
		    h->taken_ns >= h->submit_ns && h->posted_ns && h->data_ns >= h->posted_ns &&
		        h->data_ns >= h->taken_ns && h->complete_ns >= h->data_ns,
		    "batch %zu: submit %" PRIu64 " taken %" PRIu64 " posted %" PRIu64
		    " data %" PRIu64 " done %" PRIu64,
		    i, h->submit_ns, h->taken_ns, h->posted_ns, h->data_ns, h->complete_ns);
		ck_assert(h->shard < 2);
	}
	mvt_free(&t);
	RUN(&o, NULL, "mvtrace", "dump", cap);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "hops (us): queue ");
	RUN(&o, NULL, "mvtrace", "summary", cap);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, "hops       us over 50 batches");
	ck_has(o.out, "  queue ");
	RUN(&o, NULL, "mvtrace", "dump", cap, "--csv");
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_has(o.out, ",taken_ns,posted_ns,data_ns,imm_ns,imm_inline");
}
END_TEST

START_TEST(test_sigterm_closes_the_trace)
{
	char az[128], cap[128];
	struct out o;

	if (!mover_traces()) {
		printf("SKIP: test_sigterm_closes_the_trace: this mover has no --trace\n");
		return;
	}
	import_azure(az, sizeof(az));
	movers_up(in_dir(cap, sizeof(cap), "cap.trace"));
	replay(&o, az, (const char *const[]){"--asap", "--pool-mib", "16", NULL});
	ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
	char log[2048];
	int st = mover_stop(&A);
	slurp(A.log, log, sizeof(log));
	ck_assert_msg(st == 0,
	              "the tracing mover did not exit cleanly within 6 s of SIGTERM; "
	              "its log:\n%s",
	              log);
	struct mvt_trace t;
	load_ok(cap, &t);
	ck_assert_msg(t.has_end, "SIGTERM left the trace without its END record");
	ck_assert_uint_eq(t.nrec, 50);
	mvt_free(&t);
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

	tc = tcase_create("control");
	tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
	tcase_add_test(tc, test_start_sends_absolute_path_and_reports_reply);
	tcase_add_test(tc, test_start_without_mover_names_the_socket);
	suite_add_tcase(s, tc);

	tc = tcase_create("replay");
	tcase_add_checked_fixture(tc, setup_movers, teardown_movers);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_replay_asap_issues_exactly_the_trace);
	tcase_add_test(tc, test_replay_splits_writes_and_segments_exactly);
	tcase_add_test(tc, test_replay_keeps_the_schedule);
	tcase_add_test(tc, test_replay_refuses_pages_larger_than_the_pool);
	tcase_add_test(tc, test_replay_carries_requests_larger_than_the_rings);
	tcase_add_test(tc, test_replay_counts_errors_by_cause_when_the_peer_dies);
	suite_add_tcase(s, tc);

	tc = tcase_create("capture");
	tcase_add_checked_fixture(tc, setup_dir, teardown_movers);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_captured_replay_replays_to_the_same_totals);
	tcase_add_test(tc, test_captured_hops_follow_their_batches_in_order);
	tcase_add_test(tc, test_sigterm_closes_the_trace);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
