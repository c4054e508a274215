/* SPDX-License-Identifier: MIT */
/*
 * The parsers of mvtrace import: public LLM request traces (Azure's CSVs,
 * Mooncake's JSONL) read line by line and turned into mover trace records,
 * one batch per request: the KV cache of its prompt as a paged write and an
 * immediate. Every line is untrusted; a bad one is refused with its line,
 * column and what was expected. trace_import.c is the command around it;
 * tests/fuzz/fuzz_import.c drives mvt_import_stream() directly.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_format.h"
#include "trace_import.h"

struct importer {
	const char *in, *out;
	FILE *f;
	struct mvt_model m;
	struct mv_trace_hdr hdr;
	uint64_t limit;
	struct mvt_import_totals t;
	uint64_t base_ns; /* the first request's arrival, as the input states it */
	uint64_t prev_ns; /* the request before's, and its line */
	uint64_t prev_line;
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
		im->base_ns = im->prev_ns = at_ns;
		im->have_base = 1;
	}
	/* Records go out in input order: one out of order would be replayed
	 * out of order, and make a gap of years from a wrapped difference. */
	if (at_ns < im->prev_ns)
		return imp_fail(im,
		                "arrives %.3f s before the request on line %" PRIu64
		                "; the input must be in arrival order (sort it)",
		                (double)(im->prev_ns - at_ns) / 1e9, im->prev_line);
	im->prev_ns = at_ns;
	im->prev_line = im->line;
	uint64_t idx = im->t.nreq++;
	uint64_t per_layer = tokens / im->m.tpp + (tokens % im->m.tpp != 0);
	if (per_layer > UINT32_MAX / im->m.layers)
		return imp_fail(im,
		                "%" PRIu64 " tokens make more than 2^32 pages; use a "
		                "larger --tokens-per-page",
		                tokens);
	uint64_t pages = per_layer * im->m.layers;
	if (pages == 0) {
		im->t.nzero++;
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
	im->t.nrec++;
	im->t.bytes += r.bytes;
	im->t.pages += pages;
	im->t.tokens += tokens;
	return 0;
}

int mvt_parse_u64(const char *s, const char *end, uint64_t *v)
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

/* n decimal digits at *p, advancing it; -1 if any is not a digit. */
static int digits(const char **p, int n)
{
	int v = 0;

	for (int i = 0; i < n; i++, (*p)++) {
		if (**p < '0' || **p > '9')
			return -1;
		v = v * 10 + (**p - '0');
	}
	return v;
}

/*
 * "2023-11-16 18:17:03.9799600" (UTC; up to 9 fraction digits) to Unix ns:
 * -EINVAL if it is not written so (fixed-width digits, no signs or
 * spaces), -ERANGE for a day that does not exist or a year outside
 * 1970-2262 (beyond, nanoseconds since 1970 leave 63 bits).
 */
static int parse_azure_time(const char *s, const char *end, uint64_t *ns)
{
	static const unsigned mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	const char *p;
	char buf[64];

	if (end - s >= (long)sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, (size_t)(end - s));
	buf[end - s] = 0;
	p = buf;
	int Y = digits(&p, 4), M = (*p++ == '-') ? digits(&p, 2) : -1;
	int D = M >= 0 && *p++ == '-' ? digits(&p, 2) : -1;
	int h = D >= 0 && (*p == ' ' || *p == 'T') ? (p++, digits(&p, 2)) : -1;
	int m = h >= 0 && *p++ == ':' ? digits(&p, 2) : -1;
	int sec = m >= 0 && *p++ == ':' ? digits(&p, 2) : -1;
	if (Y < 0 || sec < 0 || h > 23 || m > 59 || sec > 60)
		return -EINVAL;
	uint64_t frac = 0, scale = 1000000000u;
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
	int leap = (Y % 4 == 0 && Y % 100 != 0) || Y % 400 == 0;
	if (Y < 1970 || Y > 2262 || M < 1 || M > 12 || D < 1 ||
	    (unsigned)D > mdays[M - 1] + (M == 2 && leap))
		return -ERANGE;
	int64_t days = days_from_civil(Y, (unsigned)M, (unsigned)D);
	*ns = ((uint64_t)days * 86400u + (unsigned)h * 3600u + (unsigned)m * 60u + (unsigned)sec) *
	          1000000000u +
	      frac;
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
		if (im->limit && im->t.nreq >= im->limit)
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
		ret = parse_azure_time(f[col_ts], fe[col_ts], &at);
		if (ret) {
			ret = imp_fail(im,
			               ret == -ERANGE ? "TIMESTAMP '%.*s' is no day of the years "
			                                "1970 to 2262"
			                              : "TIMESTAMP '%.*s' is not like "
			                                "2023-11-16 18:17:03.9799600",
			               (int)(fe[col_ts] - f[col_ts]), f[col_ts]);
			break;
		}
		if (mvt_parse_u64(f[col_tok], fe[col_tok], &tokens)) {
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
			/* Up to 9e12 ms (the year 2255 from 1970): its nanoseconds
			 * fit the 63 bits llround() gives. */
			*what = "timestamp as a number of milliseconds from 0 to 9e12";
			const char *at = j.p;
			char num[64], *e;
			if (jnumber(&j, &a, &b) || b - a >= (long)sizeof(num)) {
				j.p = at;
				goto bad;
			}
			memcpy(num, a, (size_t)(b - a));
			num[b - a] = 0;
			r->ts_ms = strtod(num, &e);
			if (*e || !(r->ts_ms >= 0) || r->ts_ms > 9e12) {
				j.p = at;
				goto bad;
			}
			r->has_ts = 1;
		} else if (klen == 12 && !strncmp(k, "input_length", 12)) {
			*what = "input_length as a non-negative integer";
			const char *at = j.p;
			if (jnumber(&j, &a, &b) || mvt_parse_u64(a, b, &r->input)) {
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
					if (jnumber(&j, &a, &b) || mvt_parse_u64(a, b, &v)) {
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
		if (im->limit && im->t.nreq >= im->limit)
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

int mvt_import_stream(int azure, const char *name, FILE *in, const char *out_name, FILE *out,
                      const struct mvt_model *m, uint64_t limit, struct mvt_import_totals *t,
                      char *err, size_t errlen)
{
	struct importer im = {.in = name, .out = out_name, .f = out, .m = *m, .limit = limit};
	const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
	int ret;

	im.hdr = (struct mv_trace_hdr){.magic = MV_TRACE_MAGIC,
	                               .version = MV_TRACE_VERSION,
	                               .hdr_size = sizeof(struct mv_trace_hdr),
	                               .rec_size = sizeof(struct mv_trace_rec)};
	snprintf(im.hdr.provider, sizeof(im.hdr.provider), "import:%s",
	         azure ? "azure" : "mooncake");
	snprintf(im.hdr.source, sizeof(im.hdr.source), "%s", base);
	/* The header is rewritten at the end, when the start time is known. */
	ret = fwrite(&im.hdr, sizeof(im.hdr), 1, out) == 1 ? 0 : -EIO;
	if (ret)
		snprintf(im.err, sizeof(im.err), "%s: write: %s", out_name, strerror(errno));
	else
		ret = azure ? import_azure(&im, in) : import_mooncake(&im, in);
	if (!ret) {
		struct mv_trace_rec end = {.type = MV_TR_END, .bytes = im.t.nrec};
		if (fwrite(&end, sizeof(end), 1, out) != 1 || fseek(out, 0, SEEK_SET) ||
		    fwrite(&im.hdr, sizeof(im.hdr), 1, out) != 1 || fflush(out)) {
			ret = -EIO;
			snprintf(im.err, sizeof(im.err), "%s: write: %s", out_name,
			         strerror(errno));
		}
	}
	*t = im.t;
	if (ret)
		snprintf(err, errlen, "%s", im.err);
	return ret;
}
