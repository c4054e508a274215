/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the trace tools' suites; what each does is in
 * tests/trace_util.h.
 */
#include "trace_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mvtest.h" /* now_s() */

char dir[64];
char bindir[4096];
char datadir[4096];

const char *in_dir(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
	return buf;
}

void setup_dir(void)
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

void teardown_dir(void)
{
	if (dir[0])
		nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

void slurp(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? 0 : read(fd, buf, len - 1);

	buf[n > 0 ? n : 0] = 0;
	if (fd >= 0)
		close(fd);
}

void spawn(struct job *j, const char *cwd, const char *tool, const char *const *args)
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

void finish(struct job *j, struct out *o)
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

void runv(struct out *o, const char *cwd, const char *tool, const char *const *args)
{
	struct job j;

	spawn(&j, cwd, tool, args);
	finish(&j, o);
}

struct mv_trace_hdr hdr_ok(void)
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

struct mv_trace_rec rec_paged(uint64_t submit, uint32_t pages, uint32_t ps, uint32_t imm)
{
	return (struct mv_trace_rec){.type = MV_TR_BATCH,
	                             .submit_ns = submit,
	                             .bytes = (uint64_t)pages * ps,
	                             .nops = pages,
	                             .page_size = ps,
	                             .kind = MV_TK_PAGED | MV_TK_IMM,
	                             .imm = imm};
}

void write_trace(const char *path, const struct mv_trace_hdr *h, const struct mv_trace_rec *r,
                 size_t n, int end, size_t extra)
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

void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

void load_ok(const char *path, struct mvt_trace *t)
{
	char err[512];

	ck_assert_msg(mvt_load(path, t, err, sizeof(err)) == 0, "%s", err);
}
