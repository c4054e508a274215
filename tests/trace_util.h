/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the trace tools' suites (tests/test_trace.c: files, output,
 * import; tests/test_replay.c: control, replay, capture): a scratch
 * directory per test, the built tools run with their output captured, and
 * trace files written byte by byte. Built into both from tests/trace_util.c.
 */
#ifndef TRACE_UTIL_H
#define TRACE_UTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "../tools/trace_read.h"
#include "trace_format.h"

/* A small model for the importers: 2 * 2 heads * 64 dims * 2 bytes * 16 tokens. */
#define MODEL                                                                                      \
	"--layers", "2", "--kv-heads", "2", "--head-dim", "64", "--dtype-bytes", "2",              \
	    "--tokens-per-page", "16"
#define M_LAYERS 2u
#define M_TPP    16u
#define M_PAGE   8192u

extern char dir[64];      /* this test's scratch directory */
extern char bindir[4096]; /* absolute: tests change directory */
extern char datadir[4096];

/* dir/name in buf. */
const char *in_dir(char *buf, size_t len, const char *name);
/* The checked fixture: a fresh dir, bindir and datadir found. */
void setup_dir(void);
void teardown_dir(void);

/* ---- running the tools ---- */

struct out {
	int status; /* exit status, or 128 + signal */
	double secs;
	char out[1 << 16];
	char err[1 << 14];
};

/* A tool running in the background, its output going to files. */
struct job {
	pid_t pid;
	double t0;
	char po[128], pe[128];
	const char *tool;
};

/* Starts bindir/tool with args (NULL-terminated) in cwd (NULL: here). */
void spawn(struct job *j, const char *cwd, const char *tool, const char *const *args);
/* Waits for it (60 s at most) and collects its exit status and output. */
void finish(struct job *j, struct out *o);
/* spawn() then finish(). */
void runv(struct out *o, const char *cwd, const char *tool, const char *const *args);
/* The whole file at path as a string in buf ("" when unreadable). */
void slurp(const char *path, char *buf, size_t len);

#define RUN(o, cwd, tool, ...)                                                                     \
	do {                                                                                       \
		const char *const a_[] = {__VA_ARGS__, NULL};                                      \
		runv((o), (cwd), (tool), a_);                                                      \
	} while (0)

#define ck_has(hay, needle)                                                                        \
	ck_assert_msg(strstr((hay), (needle)), "'%s' not in:\n%s", (needle), (hay))

/* ---- writing traces ---- */

/* A valid header: two shards, tcp, fixed ids and times. */
struct mv_trace_hdr hdr_ok(void);
/* A paged batch record with an immediate. */
struct mv_trace_rec rec_paged(uint64_t submit, uint32_t pages, uint32_t ps, uint32_t imm);
/* Header, records, an END record if end, then extra raw bytes. */
void write_trace(const char *path, const struct mv_trace_hdr *h, const struct mv_trace_rec *r,
                 size_t n, int end, size_t extra);
void write_text(const char *path, const char *text);
/* mvt_load() that must succeed. */
void load_ok(const char *path, struct mvt_trace *t);

#endif /* TRACE_UTIL_H */
