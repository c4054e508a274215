/* SPDX-License-Identifier: MIT */
/*
 * External baselines: the mover beside what a user could pick instead,
 * measured in the same run at the same sizes. fabtests' fi_rma_bw (the
 * provider alone, one endpoint each side) on shm and tcp, and UCX's
 * ucx_perftest put_bw over posix (a copy into the peer's mapped segment:
 * what the same-host path competes with), cma and tcp, each a client and a
 * server process on this host. Both tools write from one buffer into one
 * buffer over and over, so their working set is one write: the mover's
 * like-for-like row ("reuse") writes every write of every batch from
 * offset 0 to offset 0 likewise, beside its streaming row (the contiguous
 * row of the same size: a window of up to 128 MiB of distinct slots,
 * against the direct baseline). The tools have no streaming mode; their
 * streaming column says so. Pairs of runs, mover and tool, in turns of
 * order; the ratio is the median of the pairs' mover / tool.
 *
 * The tools are found on PATH, or at $MV_FI_RMA_BW and $MV_UCX_PERFTEST;
 * an absent one is said so, never silently skipped.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

struct xrow ext_done[EXT_ROWS_MAX];
int next_done;

/* A tool run's output is kept up to this much, its last lines parsed. */
#define OUT_MAX 16384

/* Where the tool of env or name is: $env, else the first PATH entry that
 * has it; NULL when neither. */
static const char *find_tool(const char *env, const char *name, char *buf, size_t len)
{
	const char *e = getenv(env), *path = getenv("PATH");

	if (e && *e)
		return access(e, X_OK) ? NULL : e;
	for (const char *p = path; p && *p;) {
		const char *c = strchr(p, ':');
		size_t n = c ? (size_t)(c - p) : strlen(p);
		snprintf(buf, len, "%.*s/%s", (int)n, p, name);
		if (n && !access(buf, X_OK))
			return buf;
		p = c ? c + 1 : NULL;
	}
	return NULL;
}

/* Forks argv (pinned to cpu when cpu >= 0, env set when not NULL), its
 * stdout and stderr into a pipe whose read end *fd gets. */
static pid_t spawn(char *const *argv, const char *env, int cpu, int *fd)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC))
		return -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		if (cpu >= 0)
			mv_topo_pin(cpu);
		if (env)
			putenv((char *)env);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	if (pid < 0)
		close(p[0]);
	*fd = p[0];
	return pid;
}

/* Reads fd into out until EOF or the deadline; returns its exit status
 * (killed at the deadline: -1). */
static int collect(pid_t pid, int fd, char *out, size_t len, double deadline)
{
	size_t n = 0;
	int status = 0;

	fcntl(fd, F_SETFL, O_NONBLOCK);
	for (;;) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		double left = deadline - now_s();
		if (left <= 0) {
			kill(pid, SIGKILL);
			break;
		}
		if (poll(&pf, 1, (int)(left * 1000) + 1) <= 0)
			continue;
		char tmp[4096];
		ssize_t k = read(fd, tmp, sizeof(tmp));
		if (k == 0)
			break;
		if (k < 0 && errno == EAGAIN)
			continue;
		if (k < 0)
			break;
		/* Keep the tail: the figures are on the last lines. */
		if (n + (size_t)k >= len) {
			size_t drop = n + (size_t)k - len + 1;
			drop = drop > n ? n : drop;
			memmove(out, out + drop, n - drop);
			n -= drop;
		}
		size_t c = (size_t)k < len - 1 - n ? (size_t)k : len - 1 - n;
		memcpy(out + n, tmp, c);
		n += c;
	}
	out[n] = 0;
	close(fd);
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void stop(pid_t pid, int fd)
{
	char sink[OUT_MAX];

	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	collect(pid, fd, sink, sizeof(sink), now_s() + 2);
}

/* The number in column col (from 1) of the last line of out that has at
 * least col columns and a digit first; 0 when none. */
static double last_col(const char *out, int col)
{
	double v = 0;
	const char *l = out;

	while (l && *l) {
		const char *e = strchr(l, '\n');
		char line[512];
		size_t n = e ? (size_t)(e - l) : strlen(l);
		snprintf(line, sizeof(line), "%.*s", (int)(n < 511 ? n : 511), l);
		char *save = NULL, *tok = strtok_r(line, " \t|", &save);
		int k = 1;
		if (tok && tok[0] >= '0' && tok[0] <= '9') {
			while (tok && k < col) {
				tok = strtok_r(NULL, " \t|", &save);
				k++;
			}
			if (tok)
				v = atof(tok);
		}
		l = e ? e + 1 : NULL;
	}
	return v;
}

enum tool_id { T_FI_RMA_BW, T_UCX };

struct tool {
	enum tool_id id;
	const char *name; /* as printed: "fi_rma_bw shm", "ucx posix" */
	const char *arg;  /* fi_rma_bw's provider, or UCX's transport */
	int goal;         /* the ratio of 1.0 is held against this one */
};

/* The tools each configuration is held against; the first is its goal. */
static int tools_of(const struct cfg *x, struct tool *t)
{
	if (x->host_copy) {
		t[0] = (struct tool){T_UCX, "ucx posix", "posix", 1};
		t[1] = (struct tool){T_UCX, "ucx cma", "cma", 0};
		return 2;
	}
	if (!strcmp(x->fab, "shm")) {
		t[0] = (struct tool){T_FI_RMA_BW, "fi_rma_bw shm", "shm", 1};
		t[1] = (struct tool){T_UCX, "ucx cma", "cma", 0};
		return 2;
	}
	if (!strcmp(x->fab, "tcp")) {
		t[0] = (struct tool){T_FI_RMA_BW, "fi_rma_bw tcp", "tcp", 1};
		t[1] = (struct tool){T_UCX, "ucx tcp", "tcp", 0};
		return 2;
	}
	return 0;
}

/*
 * One run of tool t at size writes for about secs, guessing its rate at
 * guess bytes/s; the rate in bytes/s, or < 0 with why.
 */
static double tool_run(const struct cfg *x, const struct tool *t, const char *bin, uint64_t size,
                       double secs, double guess, char *why, size_t whylen)
{
	static unsigned port_seq;
	char sz[32], iters[32], port[32], port2[32], win[16], out[OUT_MAX];
	uint64_t n = (uint64_t)(guess * secs / (double)size);
	int base = 20000 + (int)(getpid() % 20000) + (int)(port_seq++ % 64) * 2;
	const char *sv[32], *cl[32];
	const char *env = NULL;
	int ns = 0, nc = 0, sfd = -1, cfd = -1;

	n = n < 200 ? 200 : n > 50000000 ? 50000000 : n;
	snprintf(sz, sizeof(sz), "%" PRIu64, size);
	snprintf(iters, sizeof(iters), "%" PRIu64, n);
	if (t->id == T_FI_RMA_BW) {
		/* fi_rma_bw keeps -W writes in flight, all from one buffer to one
		 * buffer, but allocates -W buffers a side: the mover's bytes in
		 * flight (--window) at most, from 2 to fabtests' usual 64. */
		uint64_t w = window_bytes / size;
		snprintf(win, sizeof(win), "%" PRIu64, w < 2 ? 2 : w > 64 ? 64 : w);
		snprintf(port, sizeof(port), "-E=%d", base);
		snprintf(port2, sizeof(port2), "%d", base + 1);
		const char *common[] = {bin,  "-p", t->arg, "-e",  "rdm", "-o", "write",
		                        "-S", sz,   "-I",   iters, "-W",  win,  port};
		for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++)
			sv[ns++] = cl[nc++] = common[i];
		if (!strcmp(t->arg, "tcp")) {
			sv[ns++] = "-s";
			sv[ns++] = "127.0.0.1";
		} else {
			cl[nc++] = "-B"; /* shm names its endpoint by port: two of them */
			cl[nc++] = port2;
		}
		cl[nc++] = "127.0.0.1";
	} else {
		int tcp = !strcmp(t->arg, "tcp");
		snprintf(port, sizeof(port), "%d", base);
		const char *common[] = {bin, "-t", "put_bw", "-x", t->arg, "-d",
		                        tcp ? "lo" : "memory", "-D",
		                        /* what each transport's put takes at any size */
		                        !strcmp(t->arg, "posix") ? "short" : "zcopy", "-s", sz,
		                        "-n", iters, "-p", port, "-f"};
		for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++)
			sv[ns++] = cl[nc++] = common[i];
		cl[nc++] = "127.0.0.1";
		env = "UCX_WARN_UNUSED_ENV_VARS=n";
	}
	sv[ns] = cl[nc] = NULL;
	pid_t sp = spawn((char *const *)sv, env, x->cpu.pinned ? x->cpu.b[0] : -1, &sfd);
	if (sp < 0) {
		snprintf(why, whylen, "%s: fork: %s", t->name, strerror(errno));
		return -1;
	}
	double rate = -1, limit = now_s() + 10 * secs + 20;
	int st = -1;
	/* The server listens within a moment; a client that came too early
	 * is tried again. */
	for (int attempt = 0; attempt < 4 && rate < 0; attempt++) {
		struct timespec nap = {0, 300000000};
		nanosleep(&nap, NULL);
		pid_t cp = spawn((char *const *)cl, env, x->cpu.pinned ? x->cpu.a[0] : -1, &cfd);
		if (cp < 0)
			break;
		st = collect(cp, cfd, out, sizeof(out), limit);
		/* fi_rma_bw: MB/sec (10^6 bytes) is column 5; ucx_perftest -f:
		 * the overall bandwidth in MB/s (2^20 bytes) is column 6. */
		double v =
		    t->id == T_FI_RMA_BW ? last_col(out, 5) * 1e6 : last_col(out, 6) * 1048576.0;
		if (st == 0 && v > 0)
			rate = v;
		if (now_s() > limit)
			break;
	}
	stop(sp, sfd);
	if (rate < 0) {
		char *nl = out + strlen(out);
		while (nl > out && (nl[-1] == '\n' || nl[-1] == ' '))
			*--nl = 0;
		const char *last = strrchr(out, '\n');
		snprintf(why, whylen, "%s %s: exit %d: %.120s", t->name,
		         size_str(size, sz, sizeof(sz)), st, last ? last + 1 : out);
	}
	return rate;
}

static double xrate(const struct meas *m)
{
	return m->secs > 0 ? (double)m->bytes / m->secs : 0;
}

/* The row of size: the mover's reused-buffer runs paired with each tool's,
 * and its streaming figure from the contiguous row stream (NULL: none). */
static void ext_row(struct cfg *x, uint64_t size, const struct row *stream, struct xrow *r)
{
	const struct opts *o = x->o;
	struct tool t[EXT_TOOLS];
	struct geom g = geom_of(size, x->n);
	double mv[64], tv[EXT_TOOLS][64], pr[EXT_TOOLS][64];
	char pathbuf[EXT_TOOLS][4096];
	const char *bin[EXT_TOOLS];
	struct meas m;

	memset(r, 0, sizeof(*r));
	r->prov = x->prov;
	r->shards = x->n;
	r->size = size;
	r->reps = o->reps;
	r->m_stream = stream && !stream->failed ? stream->m_med : 0;
	r->d_stream = stream && !stream->failed ? stream->d_med : 0;
	r->ntools = tools_of(x, t);
	/* One buffer each side, as the tools have: every write at offset 0. */
	g.stride = 0;
	for (int k = 0; k < r->ntools; k++) {
		struct xtool *xt = &r->t[k];
		snprintf(xt->name, sizeof(xt->name), "%s", t[k].name);
		xt->goal = t[k].goal;
		bin[k] = t[k].id == T_FI_RMA_BW ? find_tool("MV_FI_RMA_BW", "fi_rma_bw", pathbuf[k],
		                                            sizeof(pathbuf[k]))
		                                : find_tool("MV_UCX_PERFTEST", "ucx_perftest",
		                                            pathbuf[k], sizeof(pathbuf[k]));
		if (!bin[k]) {
			xt->absent = 1;
			snprintf(xt->why, sizeof(xt->why), "%s",
			         t[k].id == T_FI_RMA_BW
			             ? "fi_rma_bw is not on PATH (fabtests 1.17; or $MV_FI_RMA_BW)"
			             : "ucx_perftest is not on PATH (Debian's ucx-utils; or "
			               "$MV_UCX_PERFTEST)");
		}
	}
	bw_mover_run(x, &g, x->warm_s, &m); /* warm-up, and the tools' first guess */
	double guess = xrate(&m) > 0 ? xrate(&m) : 1e9;
	int nm = 0, np[EXT_TOOLS] = {0};
	for (int rep = 0; rep < o->reps && rep < 64; rep++) {
		double mr = 0;
		int mover_first = rep % 2 == 0;
		if (mover_first) {
			bw_mover_run(x, &g, o->seconds, &m);
			mr = xrate(&m);
		}
		for (int k = 0; k < r->ntools; k++) {
			struct xtool *xt = &r->t[k];
			if (xt->absent || xt->failed)
				continue;
			double v = tool_run(x, &t[k], bin[k], size, o->seconds, guess, xt->why,
			                    sizeof(xt->why));
			/* Once more, on other ports, before the row gives the tool up:
			 * a run can fail for the host's sake (a port still held). */
			if (v < 0)
				v = tool_run(x, &t[k], bin[k], size, o->seconds, guess, xt->why,
				             sizeof(xt->why));
			if (v < 0) {
				xt->failed = 1;
				continue;
			}
			tv[k][np[k]++] = v;
		}
		if (!mover_first) {
			bw_mover_run(x, &g, o->seconds, &m);
			mr = xrate(&m);
		}
		mv[nm++] = mr;
		for (int k = 0; k < r->ntools; k++)
			if (!r->t[k].absent && !r->t[k].failed && np[k] == nm && tv[k][nm - 1] > 0)
				pr[k][nm - 1] = mr / tv[k][nm - 1];
		guess = mr > 0 ? mr : guess;
		if (o->verbose) {
			printf("      rep %d: mover reuse %.3f GB/s", rep, mr / 1e9);
			for (int k = 0; k < r->ntools; k++)
				if (np[k] == nm)
					printf(", %s %.3f", r->t[k].name, tv[k][nm - 1] / 1e9);
			printf("\n");
		}
	}
	r->m_reuse = median(mv, nm);
	for (int k = 0; k < r->ntools; k++) {
		struct xtool *xt = &r->t[k];
		if (xt->absent || xt->failed || np[k] != nm)
			continue;
		xt->bps = median(tv[k], np[k]);
		xt->ratio = median(pr[k], np[k]);
		xt->pass = xt->ratio >= EXT_BAR;
	}
}

static void print_head(void)
{
	printf("%-8s %6s %8s | %9s %9s | %-14s %9s %7s %5s | %s\n", "prov", "shards", "size",
	       "reuse", "stream", "baseline", "reuse", "m/tool", "bar", "stream");
	printf("%-8s %6s %8s | %9s %9s | %-14s %9s %7s %5s | %s\n", "", "", "", "GB/s", "GB/s", "",
	       "GB/s", "", "", "(the tools reuse one buffer)");
}

static void print_row(const struct xrow *r)
{
	char sz[32];

	size_str(r->size, sz, sizeof(sz));
	for (int k = 0; k < r->ntools; k++) {
		const struct xtool *t = &r->t[k];
		if (k == 0)
			printf("%-8s %6u %8s | %9.3f %9.3f | ", r->prov, r->shards, sz,
			       r->m_reuse / 1e9, r->m_stream / 1e9);
		else
			printf("%-8s %6s %8s | %9s %9s | ", "", "", "", "", "");
		if (t->absent || t->failed)
			printf("%-14s %s: %s\n", t->name, t->absent ? "absent" : "FAILED", t->why);
		else
			printf("%-14s %9.3f %7.3f %5s | mover/direct %.3f%s\n", t->name,
			       t->bps / 1e9, t->ratio, t->goal ? (t->pass ? "ok" : "MISS") : "-",
			       r->d_stream > 0 ? r->m_stream / r->d_stream : 0,
			       r->d_stream > 0 ? "" : " (no streaming row)");
	}
	fflush(stdout);
}

void ext_print_bench(const struct xrow *r)
{
	for (int k = 0; k < r->ntools; k++) {
		const struct xtool *t = &r->t[k];
		printf(
		    "BENCH external prov=%s shards=%u size=%" PRIu64 " reps=%d tool=\"%s\" "
		    "mover_reuse_gBps=%.4f mover_stream_gBps=%.4f direct_stream_gBps=%.4f "
		    "tool_reuse_gBps=%.4f ratio=%.4f goal=%d bar=%.2f pass=%d absent=%d failed=%d",
		    r->prov, r->shards, r->size, r->reps, t->name, r->m_reuse / 1e9,
		    r->m_stream / 1e9, r->d_stream / 1e9, t->bps / 1e9, t->ratio, t->goal, EXT_BAR,
		    t->pass, t->absent, t->failed);
		if (t->absent || t->failed)
			printf(" why=\"%s\"", t->why);
		printf("\n");
	}
}

static void ext_csv(FILE *f, const struct xrow *r, double seconds)
{
	if (!f)
		return;
	/* The contiguous rows' columns: mover = the reused-buffer runs,
	 * direct = the tool; pattern names the tool. */
	for (int k = 0; k < r->ntools; k++) {
		const struct xtool *t = &r->t[k];
		double s = (double)r->size;
		char pat[48];
		snprintf(pat, sizeof(pat), "reuse_vs_%s", t->name);
		for (char *c = pat; *c; c++)
			if (*c == ' ')
				*c = '_';
		fprintf(f,
		        "%s,%u,%" PRIu64
		        ",%d,%.2f,%.4f,%.4f,%.6f,%.4f,%.4f,%.6f,%.4f,%.2f,%d,0,0,0,0,"
		        "0,0,0,%.4f,0,0,%s,0,0,0,%d\n",
		        r->prov, r->shards, r->size, r->reps, seconds, r->m_reuse * 8 / 1e9,
		        r->m_reuse / 1e9, r->m_reuse / s / 1e6, t->bps * 8 / 1e9, t->bps / 1e9,
		        t->bps / s / 1e6, t->ratio, t->goal ? EXT_BAR : 0, t->pass, t->ratio, pat,
		        t->absent || t->failed);
	}
	fflush(f);
}

int ext_rows(struct cfg *x, const struct row *rows, int nrows, FILE *csv)
{
	const struct opts *o = x->o;

	printf("   external baselines, same sizes: 'reuse' writes one buffer into one buffer as "
	       "the tools do (mover: every write from offset 0 to offset 0); 'stream' is the "
	       "contiguous row above; m/tool = median of pairs' mover reuse / tool; bar %.2f "
	       "against the first baseline\n",
	       EXT_BAR);
	print_head();
	for (int i = 0; i < o->nsizes && next_done < EXT_ROWS_MAX; i++) {
		const struct row *stream = NULL;
		for (int k = 0; k < nrows; k++)
			if (rows[k].prov == x->prov && rows[k].shards == x->n && !rows[k].pages &&
			    rows[k].size == o->sizes[i])
				stream = &rows[k];
		struct xrow *r = &ext_done[next_done++];
		ext_row(x, o->sizes[i], stream, r);
		print_row(r);
		ext_csv(csv, r, o->seconds);
	}
	return 0;
}
