/* SPDX-License-Identifier: MIT */
/*
 * mvtrace: everything about mover trace files (mover/trace_format.h) except
 * replaying them (mvreplay). `dump` prints every record as text or CSV,
 * `summary` the totals, kinds, a size histogram, latency percentiles and
 * errors by cause; `import` turns public LLM request traces (Azure LLM
 * inference 2023 CSV, Mooncake FAST'25 JSONL) into transfer traces of the
 * KV cache a prefill node writes to a decode node; `start` and `stop` ask a
 * running mover to begin or end a capture (MV_MSG_TRACE on its control
 * socket). Every trace is read through tools/trace_read.h, which rejects
 * what it cannot trust; every error names its cause and the fix, and the
 * exit status is non-zero after one.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mv_wire.h"
#include "trace_format.h"
#include "trace_read.h"

#define MOONCAKE_BLOCK 512u /* tokens per hash_id in the Mooncake traces */

static const char usage_text[] =
    "usage: mvtrace dump FILE [--csv]\n"
    "       mvtrace summary FILE\n"
    "       mvtrace import azure|mooncake INPUT OUTPUT --layers L --kv-heads H\n"
    "               --head-dim D --dtype-bytes E --tokens-per-page T [--limit N]\n"
    "       mvtrace start --socket PATH FILE\n"
    "       mvtrace stop --socket PATH\n"
    "\n"
    "dump     every record, one line each: time since the trace started, kind, ops,\n"
    "         page size, bytes, latency (complete - submit), parts, descriptors,\n"
    "         shards, client, peer, immediate, status and cause; --csv: the raw\n"
    "         fields with a header row.\n"
    "summary  batches, ops, bytes, duration, offered throughput, counts per kind,\n"
    "         a histogram of batch bytes in power-of-two buckets, latency\n"
    "         percentiles (n/a for imported traces), errors by cause, and the\n"
    "         records the writer dropped (from its END record).\n"
    "import   one request of a public LLM trace becomes one batch: the KV cache\n"
    "         of its prompt (K and V of every layer) written by a prefill node to\n"
    "         a decode node as a paged write, plus an immediate carrying the\n"
    "         request's index (0 = the input's first request) saying it landed.\n"
    "           page      = T tokens of one layer's K and V:\n"
    "                       page_size = 2 * H * D * E * T bytes\n"
    "           pages     = ceil(tokens / T) * L\n"
    "           azure     tokens = ContextTokens; arrival = TIMESTAMP minus the\n"
    "                     first row's (\"2023-11-16 18:17:03.9799600\", UTC)\n"
    "           mooncake  arrival = timestamp (ms) minus the first line's; prefix\n"
    "                     caching: each hash_id is a block of 512 tokens (the\n"
    "                     last one partial: min(512, what is left)); blocks whose\n"
    "                     hash_id an earlier request had are already on the\n"
    "                     decode node and are not sent: tokens = input_length\n"
    "                     minus those blocks' tokens, never below 0\n"
    "         Records: kind paged|imm, nops = pages, bytes = pages * page_size,\n"
    "         submit_ns = arrival, complete_ns = 0, imm = request index. A request\n"
    "         with no pages to send (an empty or fully cached prompt) becomes no\n"
    "         record; they are counted. --limit N reads the first N requests.\n"
    "         E.g. Llama-3-8B in bf16, 16-token pages: --layers 32 --kv-heads 8\n"
    "         --head-dim 128 --dtype-bytes 2 --tokens-per-page 16 (64 KiB pages).\n"
    "start    asks the mover listening on PATH to write a trace to FILE (made\n"
    "         absolute; the mover opens it, so it must be able to create it).\n"
    "stop     asks it to finish and close the current trace.\n";

static void usage(FILE *f)
{
	fputs(usage_text, f);
}

/* ---- formatting ---- */

static const char *errno_name(int status, char *buf, size_t len)
{
	const char *n = status < 0 ? strerrorname_np(-status) : NULL;

	if (n)
		snprintf(buf, len, "-%s", n);
	else
		snprintf(buf, len, "%d", status);
	return buf;
}

/* "18.81 MiB", "32 KiB", "100 B". */
static const char *fmt_bytes(uint64_t b, char *buf, size_t len)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)b;
	int u = 0;

	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u == 0 || v == floor(v))
		snprintf(buf, len, "%.0f %s", v, unit[u]);
	else
		snprintf(buf, len, "%.2f %s", v, unit[u]);
	return buf;
}

static const char *fmt_status(const struct mv_trace_rec *r, char *buf, size_t len)
{
	char e[32];

	if (r->status == 0)
		snprintf(buf, len, "ok");
	else
		snprintf(buf, len, "%s(%s)", errno_name(r->status, e, sizeof(e)),
		         mvt_cause_name(r->cause));
	return buf;
}

static int load(const char *path, struct mvt_trace *t)
{
	char err[512];
	int ret = mvt_load(path, t, err, sizeof(err));

	if (ret)
		fprintf(stderr, "mvtrace: %s\n", err);
	return ret;
}

/* ---- dump ---- */

static int cmd_dump(const char *path, int csv)
{
	struct mvt_trace t;
	const struct mv_trace_hdr *h = &t.hdr;
	char kb[32], b1[32], b2[32], st[48];

	if (load(path, &t))
		return 1;
	if (csv)
		printf("rec,type,kind,t_ns,submit_ns,complete_ns,latency_ns,bytes,nops,ndesc,"
		       "page_size,nparts,shard_mask,client,peer,imm,status,cause\n");
	else
		printf("# %s: trace v%u, provider %s, source %s, mover 0x%" PRIx64
		       ", %u shards, %zu batch records%s\n"
		       "# %5s %12s %-12s %7s %9s %11s %10s %5s %6s %6s %6s %18s %10s %s\n",
		       path, h->version, h->provider, h->source, h->mover_id, h->nshards, t.nrec,
		       t.has_end ? " + END" : " (no END record)", "rec", "t_ms", "kind", "ops",
		       "page", "bytes", "lat_us", "parts", "desc", "shards", "client", "peer",
		       "imm", "status");
	for (size_t i = 0; i < t.nrec; i++) {
		const struct mv_trace_rec *r = &t.rec[i];
		int64_t rel = (int64_t)(r->submit_ns - h->start_ns);
		mvt_kind_name(r->kind, kb, sizeof(kb));
		if (csv) {
			printf("%zu,batch,%s,%" PRId64 ",%" PRIu64 ",%" PRIu64 ",", i, kb, rel,
			       r->submit_ns, r->complete_ns);
			if (r->complete_ns)
				printf("%" PRIu64, r->complete_ns - r->submit_ns);
			printf(",%" PRIu64 ",%u,%u,%u,%u,%u,%u,%" PRIu64 ",%u,%d,%s\n", r->bytes,
			       r->nops, r->ndesc, r->page_size, r->nparts, r->shard_mask, r->client,
			       r->peer, r->imm, r->status, mvt_cause_name(r->cause));
			continue;
		}
		char lat[32];
		if (r->complete_ns)
			snprintf(lat, sizeof(lat), "%.1f",
			         (double)(r->complete_ns - r->submit_ns) / 1e3);
		else
			snprintf(lat, sizeof(lat), "n/a");
		printf("  %5zu %12.3f %-12s %7u %9s %11s %10s %5u %6u 0x%04x %6u 0x%016" PRIx64
		       " %10u %s\n",
		       i, (double)rel / 1e6, kb, r->nops,
		       r->page_size ? fmt_bytes(r->page_size, b1, sizeof(b1)) : "-",
		       fmt_bytes(r->bytes, b2, sizeof(b2)), lat, r->nparts, r->ndesc, r->shard_mask,
		       r->client, r->peer, r->imm, fmt_status(r, st, sizeof(st)));
	}
	if (t.has_end) {
		if (csv)
			printf("%zu,end,,,,,,%" PRIu64 ",%u,,,,,,,,,\n", t.nrec, t.end.bytes,
			       t.end.nops);
		else
			printf("  %5zu end: %" PRIu64 " records written, %u dropped\n", t.nrec,
			       t.end.bytes, t.end.nops);
	}
	mvt_free(&t);
	return 0;
}

/* ---- summary ---- */

/* Nearest-rank percentile of a sorted array. */
static uint64_t pct(const uint64_t *v, size_t n, double p)
{
	size_t k = (size_t)ceil(p / 100.0 * (double)n);

	return v[k ? k - 1 : 0];
}

static int cmd_summary(const char *path)
{
	struct mvt_trace t;
	const struct mv_trace_hdr *h = &t.hdr;
	uint64_t bytes = 0, ops = 0, first = UINT64_MAX, last_sub = 0, last = 0;
	uint64_t kinds[16] = {0}, hist[65] = {0}, cause[MVT_MAX_CAUSE + 1] = {0};
	int cause_status[MVT_MAX_CAUSE + 1] = {0};
	uint64_t nerr = 0;
	size_t nlat = 0;
	char b1[32], b2[32], kb[32];

	if (load(path, &t))
		return 1;
	uint64_t *lat = malloc((t.nrec ? t.nrec : 1) * sizeof(*lat));
	if (!lat) {
		fprintf(stderr, "mvtrace: no memory for %zu latencies\n", t.nrec);
		mvt_free(&t);
		return 1;
	}
	for (size_t i = 0; i < t.nrec; i++) {
		const struct mv_trace_rec *r = &t.rec[i];
		bytes += r->bytes;
		ops += r->nops;
		kinds[r->kind & 15]++;
		hist[r->bytes ? 64 - __builtin_clzll(r->bytes) : 0]++;
		if (r->submit_ns < first)
			first = r->submit_ns;
		if (r->submit_ns > last_sub)
			last_sub = r->submit_ns;
		if (r->submit_ns > last)
			last = r->submit_ns;
		if (r->complete_ns > last)
			last = r->complete_ns;
		if (r->complete_ns)
			lat[nlat++] = r->complete_ns - r->submit_ns;
		if (r->status) {
			nerr++;
			cause[r->cause]++;
			cause_status[r->cause] = r->status;
		}
	}
	printf("trace      %s\n", path);
	printf("format     version %u, provider %s, source %s, mover 0x%" PRIx64 ", %u shards\n",
	       h->version, h->provider, h->source, h->mover_id, h->nshards);
	if (h->start_unix_ns) {
		time_t s = (time_t)(h->start_unix_ns / 1000000000u);
		struct tm tm;
		char ts[48];
		gmtime_r(&s, &tm);
		strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
		printf("started    %s.%06u UTC\n", ts,
		       (unsigned)(h->start_unix_ns % 1000000000u / 1000u));
	}
	printf("batches    %zu\n", t.nrec);
	printf("ops        %" PRIu64 "\n", ops);
	printf("bytes      %" PRIu64 " (%s)\n", bytes, fmt_bytes(bytes, b1, sizeof(b1)));
	if (t.nrec == 0) {
		printf("duration   0 s (no batches)\n");
	} else {
		double dur = (double)(last - first) / 1e9;
		printf("duration   %.6f s (first submit to last %s)\n", dur,
		       nlat ? "completion" : "submit");
		if (last_sub > first)
			printf("offered    %.3f Gbit/s (bytes over the submit span, %.6f s)\n",
			       (double)bytes * 8 / ((double)(last_sub - first)),
			       (double)(last_sub - first) / 1e9);
		else
			printf("offered    n/a (every batch was submitted at the same time)\n");
	}
	printf("kinds     ");
	for (unsigned k = 0; k < 16; k++)
		if (kinds[k])
			printf(" %s %" PRIu64, mvt_kind_name(k, kb, sizeof(kb)), kinds[k]);
	printf("%s\n", t.nrec ? "" : " none");

	printf("sizes      batch bytes, power-of-two buckets\n");
	int lo = 65, hi = -1;
	uint64_t most = 0;
	for (int b = 0; b < 65; b++) {
		if (!hist[b])
			continue;
		lo = b < lo ? b : lo;
		hi = b;
		most = hist[b] > most ? hist[b] : most;
	}
	for (int b = lo; b <= hi; b++) {
		char range[48];
		if (b == 0)
			snprintf(range, sizeof(range), "0 B");
		else
			snprintf(range, sizeof(range), "[%s, %s)",
			         fmt_bytes(1ull << (b - 1), b1, sizeof(b1)),
			         b < 64 ? fmt_bytes(1ull << b, b2, sizeof(b2)) : "16 EiB");
		int bar = (int)(40 * hist[b] / most);
		printf("  %-24s %8" PRIu64 "  %.*s\n", range, hist[b], bar,
		       "########################################");
	}

	if (!nlat) {
		printf("latency    n/a (no completion times: an imported trace)\n");
	} else {
		qsort(lat, nlat, sizeof(*lat), mvt_cmp_u64);
		printf("latency    p50 %.1f us  p90 %.1f us  p99 %.1f us  p99.9 %.1f us  "
		       "max %.1f us",
		       pct(lat, nlat, 50) / 1e3, pct(lat, nlat, 90) / 1e3, pct(lat, nlat, 99) / 1e3,
		       pct(lat, nlat, 99.9) / 1e3, lat[nlat - 1] / 1e3);
		if (nlat < t.nrec)
			printf("  (%zu of %zu batches have completion times)", nlat, t.nrec);
		printf("\n");
	}
	if (!nerr) {
		printf("errors     none\n");
	} else {
		printf("errors     %" PRIu64 ":", nerr);
		for (unsigned c = 0; c <= MVT_MAX_CAUSE; c++) {
			char e[32];
			if (cause[c])
				printf(" %s %" PRIu64 " (e.g. %s)", mvt_cause_name(c), cause[c],
				       errno_name(cause_status[c], e, sizeof(e)));
		}
		printf("\n");
	}
	if (t.has_end) {
		printf("dropped    %u records (END record)\n", t.end.nops);
		if (t.end.bytes != t.nrec)
			printf("note       END says %" PRIu64 " records were written; the "
			       "file holds %zu\n",
			       t.end.bytes, t.nrec);
	} else {
		printf("dropped    unknown: no END record (the writer did not close the trace)\n");
	}
	free(lat);
	mvt_free(&t);
	return 0;
}

/* ---- import ---- */

struct model {
	uint64_t layers, heads, dim, dtype, tpp;
	uint64_t page_size;
};

struct importer {
	const char *in, *out;
	FILE *f;
	struct model m;
	struct mv_trace_hdr hdr;
	uint64_t limit;
	uint64_t nreq;  /* requests read */
	uint64_t nzero; /* of those, with no pages to send */
	uint64_t nrec, bytes, pages, tokens;
	uint64_t base_ns; /* the first request's arrival, as the input states it */
	int have_base;
	uint64_t line;
	char err[512];
};

static int imp_fail(struct importer *im, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int imp_fail(struct importer *im, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(im->err, sizeof(im->err), "%s line %" PRIu64 ": ", im->in, im->line);

	va_start(ap, fmt);
	vsnprintf(im->err + n, sizeof(im->err) - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* One request: arrival as the input states it (ns), tokens to send. */
static int imp_request(struct importer *im, uint64_t at_ns, uint64_t tokens)
{
	if (!im->have_base) {
		im->base_ns = at_ns;
		im->have_base = 1;
	}
	if (at_ns < im->base_ns)
		return imp_fail(im, "arrives before the first request; the input must be in "
		                    "arrival order (sort it)");
	uint64_t idx = im->nreq++;
	uint64_t per_layer = tokens / im->m.tpp + (tokens % im->m.tpp != 0);
	if (per_layer > UINT32_MAX / im->m.layers)
		return imp_fail(im,
		                "%" PRIu64 " tokens make more than 2^32 pages; use a "
		                "larger --tokens-per-page",
		                tokens);
	uint64_t pages = per_layer * im->m.layers;
	if (pages == 0) {
		im->nzero++;
		return 0;
	}
	struct mv_trace_rec r = {
	    .type = MV_TR_BATCH,
	    .submit_ns = at_ns - im->base_ns,
	    .bytes = pages * im->m.page_size,
	    .nops = (uint32_t)pages,
	    .page_size = (uint32_t)im->m.page_size,
	    .kind = MV_TK_PAGED | MV_TK_IMM,
	    .imm = (uint32_t)idx,
	};
	if (fwrite(&r, sizeof(r), 1, im->f) != 1) {
		snprintf(im->err, sizeof(im->err), "%s: write: %s", im->out, strerror(errno));
		return -EIO;
	}
	im->nrec++;
	im->bytes += r.bytes;
	im->pages += pages;
	im->tokens += tokens;
	return 0;
}

static int parse_u64(const char *s, const char *end, uint64_t *v)
{
	uint64_t x = 0;

	if (s == end)
		return -EINVAL;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9' || x > (UINT64_MAX - 9) / 10)
			return -EINVAL;
		x = x * 10 + (uint64_t)(*s - '0');
	}
	*v = x;
	return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	unsigned yoe = (unsigned)(y - era * 400);
	unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

/* "2023-11-16 18:17:03.9799600" (UTC; up to 9 fraction digits) to Unix ns. */
static int parse_azure_time(const char *s, const char *end, uint64_t *ns)
{
	unsigned Y, M, D, h, m, sec;
	int n = 0;
	char buf[64];

	if (end - s >= (long)sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, (size_t)(end - s));
	buf[end - s] = 0;
	if (sscanf(buf, "%4u-%2u-%2u%*1[ T]%2u:%2u:%2u%n", &Y, &M, &D, &h, &m, &sec, &n) != 6 ||
	    n == 0 || Y < 1970 || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 ||
	    sec > 60)
		return -EINVAL;
	uint64_t frac = 0, scale = 1000000000u;
	const char *p = buf + n;
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		for (; *p >= '0' && *p <= '9'; p++)
			if (scale > 1) {
				scale /= 10;
				frac += (uint64_t)(*p - '0') * scale;
			}
	}
	if (*p)
		return -EINVAL;
	int64_t days = days_from_civil(Y, M, D);
	*ns = ((uint64_t)days * 86400u + h * 3600u + m * 60u + sec) * 1000000000u + frac;
	return 0;
}

static void chomp(char *s, ssize_t *n)
{
	while (*n > 0 && (s[*n - 1] == '\n' || s[*n - 1] == '\r'))
		s[--*n] = 0;
}

static int import_azure(struct importer *im, FILE *in)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int col_ts = -1, col_tok = -1, ncol = 0, ret = 0;

	while ((n = getline(&line, &cap, in)) >= 0) {
		im->line++;
		chomp(line, &n);
		if (im->line == 1) {
			/* The header names the columns; a UTF-8 BOM may precede it. */
			char *p = line + (strncmp(line, "\xef\xbb\xbf", 3) ? 0 : 3);
			for (char *tok = strsep(&p, ","); tok; tok = strsep(&p, ","), ncol++) {
				if (!strcmp(tok, "TIMESTAMP"))
					col_ts = ncol;
				else if (!strcmp(tok, "ContextTokens"))
					col_tok = ncol;
			}
			if (col_ts < 0 || col_tok < 0) {
				ret = imp_fail(im, "the header names no TIMESTAMP and "
				                   "ContextTokens columns: is this the Azure LLM "
				                   "inference trace 2023 CSV?");
				break;
			}
			continue;
		}
		if (n == 0)
			continue;
		if (im->limit && im->nreq >= im->limit)
			break;
		const char *f[16], *fe[16];
		int k = 0;
		for (char *p = line; k < 16;) {
			f[k] = p;
			char *c = strchr(p, ',');
			fe[k++] = c ? c : p + strlen(p);
			if (!c)
				break;
			p = c + 1;
		}
		if (k < ncol) {
			ret = imp_fail(im, "%d fields, the header has %d", k, ncol);
			break;
		}
		uint64_t at, tokens;
		if (parse_azure_time(f[col_ts], fe[col_ts], &at)) {
			ret = imp_fail(im,
			               "TIMESTAMP '%.*s' is not like "
			               "2023-11-16 18:17:03.9799600",
			               (int)(fe[col_ts] - f[col_ts]), f[col_ts]);
			break;
		}
		if (parse_u64(f[col_tok], fe[col_tok], &tokens)) {
			ret = imp_fail(im, "ContextTokens '%.*s' is not a non-negative integer",
			               (int)(fe[col_tok] - f[col_tok]), f[col_tok]);
			break;
		}
		if (!im->have_base)
			im->hdr.start_unix_ns = at;
		ret = imp_request(im, at, tokens);
		if (ret)
			break;
	}
	if (!ret && ferror(in))
		ret = imp_fail(im, "read: %s", strerror(errno));
	if (!ret && im->line == 0)
		ret = imp_fail(im, "the file is empty");
	free(line);
	return ret;
}

/* A set of the Mooncake hash_ids seen so far: open addressing, grows by doubling. */
struct idset {
	uint64_t *key;
	uint8_t *used;
	size_t cap, n;
};

static size_t idset_slot(const struct idset *s, uint64_t k)
{
	uint64_t h = k * 0x9e3779b97f4a7c15ull;
	size_t i = (size_t)(h ^ (h >> 29)) & (s->cap - 1);

	while (s->used[i] && s->key[i] != k)
		i = (i + 1) & (s->cap - 1);
	return i;
}

static int idset_has(const struct idset *s, uint64_t k)
{
	return s->cap && s->used[idset_slot(s, k)];
}

static int idset_add(struct idset *s, uint64_t k)
{
	if ((s->n + 1) * 2 > s->cap) {
		struct idset t = {.cap = s->cap ? s->cap * 2 : 1024};
		t.key = malloc(t.cap * sizeof(*t.key));
		t.used = calloc(t.cap, 1);
		if (!t.key || !t.used) {
			free(t.key);
			free(t.used);
			return -ENOMEM;
		}
		for (size_t i = 0; i < s->cap; i++)
			if (s->used[i]) {
				size_t j = idset_slot(&t, s->key[i]);
				t.used[j] = 1;
				t.key[j] = s->key[i];
				t.n++;
			}
		free(s->key);
		free(s->used);
		*s = t;
	}
	size_t i = idset_slot(s, k);
	if (!s->used[i]) {
		s->used[i] = 1;
		s->key[i] = k;
		s->n++;
	}
	return 0;
}

/* A JSON cursor over one line: just enough for flat Mooncake objects. */
struct json {
	const char *s, *p;
};

static void jws(struct json *j)
{
	while (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n')
		j->p++;
}

static int jstring(struct json *j, const char **s, size_t *len)
{
	if (*j->p != '"')
		return -EINVAL;
	*s = ++j->p;
	while (*j->p && *j->p != '"')
		j->p += (*j->p == '\\' && j->p[1]) ? 2 : 1;
	if (*j->p != '"')
		return -EINVAL;
	*len = (size_t)(j->p - *s);
	j->p++;
	return 0;
}

/* The extent of a JSON number at the cursor. */
static int jnumber(struct json *j, const char **s, const char **e)
{
	*s = j->p;
	if (*j->p == '-')
		j->p++;
	if (*j->p < '0' || *j->p > '9')
		return -EINVAL;
	while ((*j->p >= '0' && *j->p <= '9') || *j->p == '.' || *j->p == 'e' || *j->p == 'E' ||
	       *j->p == '+' || *j->p == '-')
		j->p++;
	*e = j->p;
	return 0;
}

static int jskip(struct json *j, int depth)
{
	const char *a, *b;
	size_t n;

	jws(j);
	if (depth > 32)
		return -EINVAL;
	if (*j->p == '"')
		return jstring(j, &a, &n);
	if (*j->p == '{' || *j->p == '[') {
		char close = *j->p == '{' ? '}' : ']';
		j->p++;
		jws(j);
		if (*j->p == close) {
			j->p++;
			return 0;
		}
		for (;;) {
			if (close == '}') {
				jws(j);
				if (jstring(j, &a, &n))
					return -EINVAL;
				jws(j);
				if (*j->p++ != ':')
					return -EINVAL;
			}
			if (jskip(j, depth + 1))
				return -EINVAL;
			jws(j);
			if (*j->p == ',') {
				j->p++;
				continue;
			}
			if (*j->p++ != close)
				return -EINVAL;
			return 0;
		}
	}
	for (const char *lit = "true\0false\0null\0"; *lit; lit += strlen(lit) + 1)
		if (!strncmp(j->p, lit, strlen(lit))) {
			j->p += strlen(lit);
			return 0;
		}
	return jnumber(j, &a, &b);
}

struct mc_req {
	int has_ts, has_in, has_ids;
	double ts_ms;
	uint64_t input;
	uint64_t *ids;
	size_t nids, cap;
};

/* One Mooncake line into r; -EINVAL with the column in *col. */
static int mc_parse(const char *line, struct mc_req *r, size_t *col, const char **what)
{
	struct json j = {line, line};
	const char *k, *a, *b;
	size_t klen;

	r->has_ts = r->has_in = r->has_ids = 0;
	r->nids = 0;
	*what = "a JSON object";
	jws(&j);
	if (*j.p++ != '{')
		goto bad;
	jws(&j);
	if (*j.p == '}') {
		j.p++;
		goto end;
	}
	for (;;) {
		jws(&j);
		*what = "a key string";
		if (jstring(&j, &k, &klen))
			goto bad;
		jws(&j);
		*what = "':'";
		if (*j.p++ != ':')
			goto bad;
		jws(&j);
		if (klen == 9 && !strncmp(k, "timestamp", 9)) {
			*what = "timestamp as a non-negative number of milliseconds";
			const char *at = j.p;
			char num[64], *e;
			if (jnumber(&j, &a, &b) || b - a >= (long)sizeof(num)) {
				j.p = at;
				goto bad;
			}
			memcpy(num, a, (size_t)(b - a));
			num[b - a] = 0;
			r->ts_ms = strtod(num, &e);
			if (*e || !(r->ts_ms >= 0) || r->ts_ms > 1e15) {
				j.p = at;
				goto bad;
			}
			r->has_ts = 1;
		} else if (klen == 12 && !strncmp(k, "input_length", 12)) {
			*what = "input_length as a non-negative integer";
			const char *at = j.p;
			if (jnumber(&j, &a, &b) || parse_u64(a, b, &r->input)) {
				j.p = at;
				goto bad;
			}
			r->has_in = 1;
		} else if (klen == 8 && !strncmp(k, "hash_ids", 8)) {
			*what = "hash_ids as an array of non-negative integers";
			if (*j.p++ != '[')
				goto bad;
			jws(&j);
			if (*j.p == ']')
				j.p++;
			else
				for (;;) {
					uint64_t v;
					jws(&j);
					const char *at = j.p;
					if (jnumber(&j, &a, &b) || parse_u64(a, b, &v)) {
						j.p = at; /* name the value's column */
						goto bad;
					}
					if (r->nids == r->cap) {
						size_t cap = r->cap ? r->cap * 2 : 64;
						uint64_t *t = realloc(r->ids, cap * sizeof(*t));
						if (!t)
							return -ENOMEM;
						r->ids = t;
						r->cap = cap;
					}
					r->ids[r->nids++] = v;
					jws(&j);
					if (*j.p == ',') {
						j.p++;
						continue;
					}
					if (*j.p++ != ']')
						goto bad;
					break;
				}
			r->has_ids = 1;
		} else {
			*what = "a JSON value";
			if (jskip(&j, 0))
				goto bad;
		}
		jws(&j);
		*what = "',' or '}'";
		if (*j.p == ',') {
			j.p++;
			continue;
		}
		if (*j.p++ != '}')
			goto bad;
		break;
	}
end:
	jws(&j);
	*what = "the end of the line after the object";
	if (*j.p)
		goto bad;
	return 0;
bad:
	*col = (size_t)(j.p - line);
	return -EINVAL;
}

static int import_mooncake(struct importer *im, FILE *in)
{
	struct idset seen = {0};
	struct mc_req r = {0};
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int ret = 0;

	while ((n = getline(&line, &cap, in)) >= 0) {
		im->line++;
		chomp(line, &n);
		if (n == 0)
			continue;
		if (im->limit && im->nreq >= im->limit)
			break;
		size_t col = 0;
		const char *what;
		ret = mc_parse(line, &r, &col, &what);
		if (ret == -ENOMEM) {
			snprintf(im->err, sizeof(im->err), "%s: no memory", im->in);
			break;
		}
		if (ret) {
			ret = imp_fail(im,
			               "column %zu: expected %s (a Mooncake trace line is "
			               "{\"timestamp\": ms, \"input_length\": n, "
			               "\"hash_ids\": [..]})",
			               col + 1, what);
			break;
		}
		if (!r.has_ts || !r.has_in || !r.has_ids) {
			ret = imp_fail(im,
			               "no %s: each line needs timestamp, input_length and "
			               "hash_ids",
			               !r.has_ts   ? "timestamp"
			               : !r.has_in ? "input_length"
			                           : "hash_ids");
			break;
		}
		/* Blocks an earlier request had are on the decode node already. */
		uint64_t cached = 0;
		for (size_t b = 0; b < r.nids; b++) {
			uint64_t start = (uint64_t)b * MOONCAKE_BLOCK;
			if (start >= r.input)
				break;
			if (idset_has(&seen, r.ids[b]))
				cached += r.input - start < MOONCAKE_BLOCK ? r.input - start
				                                           : MOONCAKE_BLOCK;
		}
		for (size_t b = 0; b < r.nids; b++)
			if (idset_add(&seen, r.ids[b])) {
				ret = -ENOMEM;
				snprintf(im->err, sizeof(im->err), "%s: no memory for hash ids",
				         im->in);
				goto out;
			}
		ret = imp_request(im, (uint64_t)llround(r.ts_ms * 1e6), r.input - cached);
		if (ret)
			break;
	}
	if (!ret && ferror(in))
		ret = imp_fail(im, "read: %s", strerror(errno));
out:
	free(line);
	free(r.ids);
	free(seen.key);
	free(seen.used);
	return ret;
}

static int opt_u64(const char *name, const char *arg, uint64_t *v)
{
	if (parse_u64(arg, arg + strlen(arg), v) || *v == 0) {
		fprintf(stderr, "mvtrace import: %s wants a positive integer, not '%s'\n", name,
		        arg);
		return -EINVAL;
	}
	return 0;
}

static int cmd_import(int argc, char **argv)
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
	struct importer im = {0};
	int c, ret;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int r = 0;
		switch (c) {
		case 'L':
			r = opt_u64("--layers", optarg, &im.m.layers);
			break;
		case 'H':
			r = opt_u64("--kv-heads", optarg, &im.m.heads);
			break;
		case 'D':
			r = opt_u64("--head-dim", optarg, &im.m.dim);
			break;
		case 'E':
			r = opt_u64("--dtype-bytes", optarg, &im.m.dtype);
			break;
		case 'T':
			r = opt_u64("--tokens-per-page", optarg, &im.m.tpp);
			break;
		case 'n':
			r = opt_u64("--limit", optarg, &im.limit);
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
	im.in = argv[optind + 1];
	im.out = argv[optind + 2];
	int azure = !strcmp(fmt, "azure");
	if (!azure && strcmp(fmt, "mooncake")) {
		fprintf(stderr, "mvtrace import: format '%s' is unknown: azure or mooncake\n", fmt);
		return 2;
	}
	if (!im.m.layers || !im.m.heads || !im.m.dim || !im.m.dtype || !im.m.tpp) {
		fprintf(stderr, "mvtrace import: the model needs --layers, --kv-heads, --head-dim, "
		                "--dtype-bytes and --tokens-per-page (see --help)\n");
		return 2;
	}
	/* 2 (K and V) * H * D * E * T, checked against the 32-bit page_size field. */
	uint64_t ps = 2;
	uint64_t f[] = {im.m.heads, im.m.dim, im.m.dtype, im.m.tpp};
	for (int i = 0; i < 4; i++)
		ps = f[i] > UINT32_MAX || ps > UINT32_MAX / f[i] ? UINT64_MAX : ps * f[i];
	if (ps > UINT32_MAX || im.m.layers > UINT32_MAX) {
		fprintf(stderr,
		        "mvtrace import: a page of 2 * %" PRIu64 " * %" PRIu64 " * %" PRIu64
		        " * %" PRIu64 " bytes does not fit the trace's 32-bit page_size; "
		        "use fewer --tokens-per-page\n",
		        im.m.heads, im.m.dim, im.m.dtype, im.m.tpp);
		return 2;
	}
	im.m.page_size = ps;

	FILE *in = fopen(im.in, "r");
	if (!in) {
		fprintf(stderr, "mvtrace import: %s: %s\n", im.in, strerror(errno));
		return 1;
	}
	struct stat si, so;
	if (fstat(fileno(in), &si) == 0 && stat(im.out, &so) == 0 && si.st_dev == so.st_dev &&
	    si.st_ino == so.st_ino) {
		fprintf(stderr, "mvtrace import: %s is the input; name another OUTPUT\n", im.out);
		fclose(in);
		return 2;
	}
	im.f = fopen(im.out, "wb");
	if (!im.f) {
		fprintf(stderr, "mvtrace import: %s: %s\n", im.out, strerror(errno));
		fclose(in);
		return 1;
	}
	const char *base = strrchr(im.in, '/') ? strrchr(im.in, '/') + 1 : im.in;
	im.hdr = (struct mv_trace_hdr){.magic = MV_TRACE_MAGIC,
	                               .version = MV_TRACE_VERSION,
	                               .hdr_size = sizeof(struct mv_trace_hdr),
	                               .rec_size = sizeof(struct mv_trace_rec)};
	snprintf(im.hdr.provider, sizeof(im.hdr.provider), "import:%s", fmt);
	snprintf(im.hdr.source, sizeof(im.hdr.source), "%s", base);
	/* The header is rewritten at the end, when the start time is known. */
	ret = fwrite(&im.hdr, sizeof(im.hdr), 1, im.f) == 1 ? 0 : -EIO;
	if (ret)
		snprintf(im.err, sizeof(im.err), "%s: write: %s", im.out, strerror(errno));
	else
		ret = azure ? import_azure(&im, in) : import_mooncake(&im, in);
	fclose(in);
	if (!ret) {
		struct mv_trace_rec end = {.type = MV_TR_END, .bytes = im.nrec};
		if (fwrite(&end, sizeof(end), 1, im.f) != 1 || fseek(im.f, 0, SEEK_SET) ||
		    fwrite(&im.hdr, sizeof(im.hdr), 1, im.f) != 1 || fflush(im.f)) {
			ret = -EIO;
			snprintf(im.err, sizeof(im.err), "%s: write: %s", im.out, strerror(errno));
		}
	}
	if (fclose(im.f) && !ret) {
		ret = -EIO;
		snprintf(im.err, sizeof(im.err), "%s: write: %s", im.out, strerror(errno));
	}
	if (ret) {
		fprintf(stderr, "mvtrace import: %s\n", im.err);
		unlink(im.out);
		return 1;
	}
	char b1[32], b2[32];
	printf("mvtrace import: %" PRIu64 " requests from %s -> %" PRIu64 " batches in %s: %" PRIu64
	       " tokens, %" PRIu64 " pages of %s, %s\n",
	       im.nreq, im.in, im.nrec, im.out, im.tokens, im.pages,
	       fmt_bytes(im.m.page_size, b1, sizeof(b1)), fmt_bytes(im.bytes, b2, sizeof(b2)));
	if (im.nzero)
		printf("mvtrace import: %" PRIu64 " requests had no pages to send (%s) and became "
		       "no record\n",
		       im.nzero, azure ? "empty prompts" : "empty or fully cached prompts");
	return 0;
}

/* ---- start / stop ---- */

static int cmd_control(int argc, char **argv, int on)
{
	static const struct option opts[] = {
	    {"socket", required_argument, 0, 's'},
	    {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	const char *sock = NULL, *what = on ? "start" : "stop";
	struct mv_trace_req req = {.on = on ? 1u : 0u};
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "s:h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			sock = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!sock || argc - optind != (on ? 1 : 0)) {
		fprintf(stderr, "mvtrace %s: want --socket PATH%s\n", what, on ? " FILE" : "");
		return 2;
	}
	if (on) {
		const char *file = argv[optind];
		char cwd[4096];
		int n;
		if (file[0] == '/')
			n = snprintf(req.path, sizeof(req.path), "%s", file);
		else if (!getcwd(cwd, sizeof(cwd)))
			n = -1;
		else
			n = snprintf(req.path, sizeof(req.path), "%s/%s", cwd, file);
		if (n < 0 || (size_t)n >= sizeof(req.path)) {
			fprintf(stderr,
			        "mvtrace start: the absolute path of %s is longer than the "
			        "%zu bytes a trace request carries; pick a shorter one\n",
			        file, sizeof(req.path) - 1);
			return 2;
		}
	}

	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(sock) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "mvtrace %s: socket path %s is longer than %zu bytes\n", what, sock,
		        sizeof(sa.sun_path) - 1);
		return 2;
	}
	strcpy(sa.sun_path, sock);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		fprintf(stderr, "mvtrace %s: socket: %s\n", what, strerror(errno));
		return 1;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		fprintf(stderr,
		        "mvtrace %s: connect to %s: %s (is a mover listening there? its "
		        "--socket option names the path)\n",
		        what, sock, strerror(errno));
		close(fd);
		return 1;
	}
	/* A mover answers control messages at once; never hang on one that does not. */
	struct timeval tv = {.tv_sec = 10};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	struct {
		struct mv_msg_hdr h;
		struct mv_trace_req r;
	} msg = {.h = {.magic = MV_WIRE_MAGIC,
	               .version = MV_WIRE_VERSION,
	               .type = MV_MSG_TRACE,
	               .len = sizeof(struct mv_trace_req),
	               .seq = 1},
	         .r = req};
	if (send(fd, &msg, sizeof(msg), MSG_NOSIGNAL) != (ssize_t)sizeof(msg)) {
		fprintf(stderr, "mvtrace %s: send to %s: %s\n", what, sock, strerror(errno));
		close(fd);
		return 1;
	}
	union {
		struct {
			struct mv_msg_hdr h;
			struct mv_reply_hdr r;
		} m;
		char raw[1024];
	} rep;
	ssize_t n = recv(fd, &rep, sizeof(rep), 0);
	int err = errno;
	close(fd);
	if (n < 0) {
		fprintf(stderr, "mvtrace %s: no reply from the mover at %s: %s\n", what, sock,
		        err == EAGAIN ? "timed out after 10 s" : strerror(err));
		return 1;
	}
	if (n == 0) {
		fprintf(stderr,
		        "mvtrace %s: the mover at %s closed the connection without a "
		        "reply: it does not know MV_MSG_TRACE (rebuild it with trace "
		        "support) or refused the request (see its log)\n",
		        what, sock);
		return 1;
	}
	if ((size_t)n < sizeof(rep.m) || rep.m.h.magic != MV_WIRE_MAGIC ||
	    rep.m.h.type != (MV_MSG_TRACE | MV_MSG_REPLY) || rep.m.h.seq != 1 ||
	    rep.m.h.len < sizeof(struct mv_reply_hdr)) {
		fprintf(stderr,
		        "mvtrace %s: malformed reply from %s (%zd bytes, type 0x%x): "
		        "mover and mvtrace come from different builds\n",
		        what, sock, n, (size_t)n >= sizeof(rep.m.h) ? rep.m.h.type : 0);
		return 1;
	}
	rep.m.r.msg[sizeof(rep.m.r.msg) - 1] = 0;
	if (rep.m.r.status) {
		char e[32];
		fprintf(stderr, "mvtrace %s: the mover refused (%s): %s\n", what,
		        errno_name(rep.m.r.status, e, sizeof(e)),
		        rep.m.r.msg[0] ? rep.m.r.msg : strerror(-rep.m.r.status));
		return 1;
	}
	if (on)
		printf("mvtrace: the mover at %s is tracing to %s%s%s\n", sock, req.path,
		       rep.m.r.msg[0] ? ": " : "", rep.m.r.msg);
	else
		printf("mvtrace: the mover at %s stopped tracing%s%s\n", sock,
		       rep.m.r.msg[0] ? ": " : "", rep.m.r.msg);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "dump") || !strcmp(cmd, "summary")) {
		const char *file = NULL;
		int csv = 0;
		for (int i = 2; i < argc; i++) {
			if (!strcmp(argv[i], "--csv") && cmd[0] == 'd') {
				csv = 1;
			} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
				usage(stdout);
				return 0;
			} else if (argv[i][0] == '-' || file) {
				fprintf(stderr, "mvtrace %s: unexpected argument '%s'\n", cmd,
				        argv[i]);
				usage(stderr);
				return 2;
			} else {
				file = argv[i];
			}
		}
		if (!file) {
			fprintf(stderr, "mvtrace %s: which trace file?\n", cmd);
			return 2;
		}
		return cmd[0] == 'd' ? cmd_dump(file, csv) : cmd_summary(file);
	}
	if (!strcmp(cmd, "import"))
		return cmd_import(argc - 1, argv + 1);
	if (!strcmp(cmd, "start"))
		return cmd_control(argc - 1, argv + 1, 1);
	if (!strcmp(cmd, "stop"))
		return cmd_control(argc - 1, argv + 1, 0);
	fprintf(stderr, "mvtrace: unknown command '%s'\n", cmd);
	usage(stderr);
	return 2;
}
