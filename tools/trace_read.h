/* SPDX-License-Identifier: MIT */
/*
 * trace_read.h: the one reader of mover trace files (mover/trace_format.h)
 * that mvtrace, mvreplay and tests/test_trace.c share; header-only, since
 * tools/ holds one file per command. mvt_load() reads a whole file and
 * mvt_parse() (bytes already in memory; tests/fuzz/fuzz_trace.c drives it)
 * checks everything before a caller sees it: magic, version, header and
 * record sizes, a truncated tail (named by byte offset, with the command
 * that keeps the whole records), and every field the tools use of every
 * record (named by record index and field). A trace is untrusted input: it
 * may come from another host, a dying mover or a hand-written importer.
 * No global state: every function may be called from any thread.
 */
#ifndef MV_TRACE_READ_H
#define MV_TRACE_READ_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace_format.h"

#define MVT_KIND_ALL  (MV_TK_WRITE | MV_TK_WRITEV | MV_TK_PAGED | MV_TK_IMM)
#define MVT_KIND_DATA (MV_TK_WRITE | MV_TK_WRITEV | MV_TK_PAGED)
#define MVT_MAX_PARTS 64u /* MV_MAX_SHARDS in mv_wire.h */
#define MVT_MAX_CAUSE 8u  /* mv_cause values, and libclient's MVC_CAUSE_MOVER_GONE */

/* A loaded trace. rec holds the BATCH records in file (completion) order. */
struct mvt_trace {
	struct mv_trace_hdr hdr;
	struct mv_trace_rec *rec;
	struct mv_trace_hops *hops; /* hops[i] belongs to rec[i]; type 0: none */
	size_t nrec;
	size_t nhops;
	int has_end;
	struct mv_trace_rec end; /* valid when has_end */
	uint64_t file_size;
};

static inline int mvt_fail(char *err, size_t errlen, int ret, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline int mvt_fail(char *err, size_t errlen, int ret, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return ret;
}

/* The name of one mv_cause value (the same numbers as libclient's mvc_cause). */
/* qsort order for latencies and other uint64_t samples. */
static inline int mvt_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static inline const char *mvt_cause_name(unsigned cause)
{
	static const char *const names[] = {"none",      "bad_desc",  "no_region",
	                                    "no_import", "bounds",    "peer_gone",
	                                    "provider",  "cancelled", "mover_gone"};

	return cause < sizeof(names) / sizeof(names[0]) ? names[cause] : "unknown";
}

/* Kind bits as text, "paged|imm"; buf of at least 32 bytes. */
static inline const char *mvt_kind_name(unsigned kind, char *buf, size_t len)
{
	static const struct {
		unsigned bit;
		const char *name;
	} k[] = {{MV_TK_WRITE, "write"},
	         {MV_TK_WRITEV, "writev"},
	         {MV_TK_PAGED, "paged"},
	         {MV_TK_IMM, "imm"}};
	size_t n = 0;

	buf[0] = 0;
	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		if (kind & k[i].bit)
			n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s", n ? "|" : "",
			                      k[i].name);
	if (!n)
		snprintf(buf, len, "none");
	return buf;
}

/*
 * Checks one record's fields. idx is its index in the file (0 = the first
 * after the header), last whether it is the file's last record. Returns 0,
 * or -EINVAL with err naming the record, its byte offset and the field.
 */
static inline int mvt_check_rec(const struct mv_trace_rec *r, size_t idx, int last,
                                const struct mv_trace_hdr *h, char *err, size_t errlen)
{
	unsigned long long off = (unsigned long long)h->hdr_size + (unsigned long long)idx * 64u;
	char where[64];

	snprintf(where, sizeof(where), "record %zu (byte offset %llu)", idx, off);
	if (r->type == MV_TR_END) {
		if (!last)
			return mvt_fail(err, errlen, -EINVAL,
			                "%s: type is END but records follow it; END must be the "
			                "last record (the file was appended to or is corrupt)",
			                where);
		return 0;
	}
	if (r->type == MV_TR_HOPS)
		return 0; /* checked where it is paired with its batch */
	if (r->type != MV_TR_BATCH)
		return mvt_fail(err, errlen, -EINVAL,
		                "%s: field type is %u; version 1 knows 1 (batch), 2 (end) and 3 "
		                "(hops)",
		                where, r->type);
	if (r->kind == 0 || (r->kind & ~MVT_KIND_ALL))
		return mvt_fail(err, errlen, -EINVAL,
		                "%s: field kind is 0x%x; it must be a non-empty set of write 0x1, "
		                "writev 0x2, paged 0x4, imm 0x8",
		                where, r->kind);
	if (r->nparts > MVT_MAX_PARTS)
		return mvt_fail(err, errlen, -EINVAL,
		                "%s: field nparts is %u; a batch has at most %u parts (one per "
		                "shard)",
		                where, r->nparts, MVT_MAX_PARTS);
	if (!(r->kind & MVT_KIND_DATA)) {
		if (r->nops || r->bytes)
			return mvt_fail(err, errlen, -EINVAL,
			                "%s: an immediate-only batch has nops %u and bytes %" PRIu64
			                "; both must be 0",
			                where, r->nops, r->bytes);
	} else {
		if (r->nops == 0)
			return mvt_fail(err, errlen, -EINVAL,
			                "%s: field nops is 0 in a batch that writes data", where);
		if (r->bytes < r->nops)
			return mvt_fail(err, errlen, -EINVAL,
			                "%s: field bytes is %" PRIu64 " for %u ops; every op "
			                "writes at least one byte",
			                where, r->bytes, r->nops);
	}
	/* page_size 0 in a paged batch: its pages were of more than one size. */
	if (!(r->kind & MV_TK_PAGED) && r->page_size != 0)
		return mvt_fail(err, errlen, -EINVAL,
		                "%s: field page_size is %u in a batch without paged writes", where,
		                r->page_size);
	if ((r->kind & MVT_KIND_DATA) == MV_TK_PAGED && r->page_size &&
	    r->bytes != (uint64_t)r->page_size * r->nops)
		return mvt_fail(err, errlen, -EINVAL,
		                "%s: field bytes is %" PRIu64 " but %u pages of %u bytes are "
		                "%" PRIu64,
		                where, r->bytes, r->nops, r->page_size,
		                (uint64_t)r->page_size * r->nops);
	if (r->status > 0 || r->status < -4095)
		return mvt_fail(err, errlen, -EINVAL,
		                "%s: field status is %d; it must be 0 or a negative errno", where,
		                r->status);
	if (r->cause > MVT_MAX_CAUSE || (r->status == 0 && r->cause != 0))
		return mvt_fail(err, errlen, -EINVAL, "%s: field cause is %u with status %d", where,
		                r->cause, r->status);
	if (r->complete_ns && r->complete_ns < r->submit_ns)
		return mvt_fail(err, errlen, -EINVAL,
		                "%s: field complete_ns %" PRIu64 " is before submit_ns %" PRIu64,
		                where, r->complete_ns, r->submit_ns);
	return 0;
}

/*
 * Checks the trace in the size bytes at buf (a whole file; path names it in
 * messages) and fills *t from it as mvt_load() does; buf stays the
 * caller's. Returns 0 (free *t with mvt_free) or -errno with err saying
 * what is wrong: -EPROTO, -ENODATA, -EINVAL, -ENOMEM as mvt_load().
 */
static inline int mvt_parse(const uint8_t *buf, size_t size, const char *path, struct mvt_trace *t,
                            char *err, size_t errlen)
{
	int ret;

	memset(t, 0, sizeof(*t));
	t->file_size = size;
	if (t->file_size < sizeof(struct mv_trace_hdr))
		return mvt_fail(err, errlen, -ENODATA,
		                "%s: truncated: the file is %" PRIu64 " bytes, shorter than the "
		                "%zu-byte header (the writer died before writing it)",
		                path, t->file_size, sizeof(struct mv_trace_hdr));
	struct mv_trace_hdr *h = &t->hdr;
	memcpy(h, buf, sizeof(*h));
	if (h->magic != MV_TRACE_MAGIC) {
		ret = mvt_fail(err, errlen, -EPROTO,
		               "%s: not a mover trace: magic is 0x%016" PRIx64 ", want 0x%016llx "
		               "(\"CVTRACE1\"); write traces with `mover --trace` or "
		               "`mvtrace start|import`",
		               path, h->magic, MV_TRACE_MAGIC);
		return ret;
	}
	if (h->version == 0 || h->version > MV_TRACE_VERSION) {
		ret = mvt_fail(err, errlen, -EPROTO,
		               "%s: trace format version %u; this tool reads version %u and "
		               "older: use the tools built with the mover that wrote it",
		               path, h->version, MV_TRACE_VERSION);
		return ret;
	}
	if (h->hdr_size != sizeof(struct mv_trace_hdr)) {
		ret = mvt_fail(err, errlen, -EPROTO,
		               "%s: field hdr_size is %u; version %u headers are %zu bytes", path,
		               h->hdr_size, h->version, sizeof(struct mv_trace_hdr));
		return ret;
	}
	if (h->rec_size != sizeof(struct mv_trace_rec)) {
		ret = mvt_fail(err, errlen, -EPROTO,
		               "%s: field rec_size is %u; this tool reads %zu-byte records", path,
		               h->rec_size, sizeof(struct mv_trace_rec));
		return ret;
	}
	/* The text fields are printed: make sure they end. */
	h->provider[sizeof(h->provider) - 1] = 0;
	h->source[sizeof(h->source) - 1] = 0;

	uint64_t body = t->file_size - h->hdr_size;
	size_t nall = (size_t)(body / h->rec_size);
	if (body % h->rec_size) {
		uint64_t keep = h->hdr_size + (uint64_t)nall * h->rec_size;
		ret = mvt_fail(err, errlen, -ENODATA,
		               "%s: truncated: partial record %zu at byte offset %" PRIu64
		               " (%" PRIu64 " of %u bytes; the writer died mid-record); "
		               "`truncate -s %" PRIu64 " %s` keeps the %zu whole records",
		               path, nall, keep, body % h->rec_size, h->rec_size, keep, path, nall);
		return ret;
	}
	t->rec = malloc((nall ? nall : 1) * sizeof(*t->rec));
	t->hops = calloc(nall ? nall : 1, sizeof(*t->hops));
	if (!t->rec || !t->hops) {
		ret = mvt_fail(err, errlen, -ENOMEM, "%s: no memory for %zu records", path, nall);
		goto err_rec;
	}
	for (size_t i = 0; i < nall; i++) {
		struct mv_trace_rec r;
		memcpy(&r, buf + h->hdr_size + i * h->rec_size, sizeof(r));
		char why[320];
		ret = mvt_check_rec(&r, i, i + 1 == nall, h, why, sizeof(why));
		if (ret) {
			mvt_fail(err, errlen, ret, "%s: corrupt %s", path, why);
			goto err_rec;
		}
		if (r.type == MV_TR_END) {
			t->has_end = 1;
			t->end = r;
		} else if (r.type == MV_TR_HOPS) {
			struct mv_trace_hops hp;
			memcpy(&hp, &r, sizeof(hp));
			/* It follows its batch at once and names the same submit. */
			if (!t->nrec || t->hops[t->nrec - 1].type ||
			    hp.submit_ns != t->rec[t->nrec - 1].submit_ns) {
				ret = mvt_fail(
				    err, errlen, -EINVAL,
				    "%s: corrupt record %zu (byte offset %llu): a hops "
				    "record that follows no batch record of its submit time",
				    path, i,
				    (unsigned long long)h->hdr_size + (unsigned long long)i * 64u);
				goto err_rec;
			}
			t->hops[t->nrec - 1] = hp;
			t->nhops++;
		} else {
			t->rec[t->nrec++] = r;
		}
	}
	return 0;

err_rec:
	free(t->rec);
	free(t->hops);
	t->rec = NULL;
	t->hops = NULL;
	return ret;
}

/*
 * Reads and checks the trace at path. Returns 0 with *t filled (free it with
 * mvt_free), or -errno with err saying what is wrong and how to fix it:
 * -ENOENT etc. (cannot read), -EPROTO (not a trace, or a newer version),
 * -ENODATA (truncated), -EINVAL (a corrupt record).
 */
static inline int mvt_load(const char *path, struct mvt_trace *t, char *err, size_t errlen)
{
	struct stat st;
	uint8_t *buf = NULL;
	size_t got = 0;
	int fd, ret;

	memset(t, 0, sizeof(*t));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return mvt_fail(err, errlen, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		ret = mvt_fail(err, errlen, -errno, "%s: %s", path, strerror(errno));
		goto err_close;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = mvt_fail(err, errlen, -EINVAL, "%s: not a regular file", path);
		goto err_close;
	}
	t->file_size = (uint64_t)st.st_size;
	if (t->file_size < sizeof(struct mv_trace_hdr)) {
		ret = mvt_fail(err, errlen, -ENODATA,
		               "%s: truncated: the file is %" PRIu64 " bytes, shorter than the "
		               "%zu-byte header (the writer died before writing it)",
		               path, t->file_size, sizeof(struct mv_trace_hdr));
		goto err_close;
	}
	buf = malloc(t->file_size);
	if (!buf) {
		ret = mvt_fail(err, errlen, -ENOMEM, "%s: no memory for %" PRIu64 " bytes", path,
		               t->file_size);
		goto err_close;
	}
	while (got < t->file_size) {
		ssize_t n = read(fd, buf + got, t->file_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = mvt_fail(err, errlen, n ? -errno : -EIO, "%s: read at byte %zu: %s",
			               path, got, n ? strerror(errno) : "the file shrank");
			goto err_free;
		}
		got += (size_t)n;
	}
	close(fd);
	ret = mvt_parse(buf, (size_t)t->file_size, path, t, err, errlen);
	free(buf);
	return ret;

err_free:
	free(buf);
err_close:
	close(fd);
	return ret;
}

static inline void mvt_free(struct mvt_trace *t)
{
	free(t->rec);
	free(t->hops);
	t->hops = NULL;
	t->rec = NULL;
	t->nrec = 0;
}

#endif
