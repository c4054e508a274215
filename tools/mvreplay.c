/* SPDX-License-Identifier: MIT */
/*
 * mvreplay: re-issues a trace (mover/trace_format.h; captured by a mover or
 * made by `mvtrace import`) against two live movers, on the trace's
 * schedule (scaled by --speed) or as fast as a window allows (--asap). A
 * receiver process, forked first, is a client of the --recv mover: it
 * allocates the destination pool, passes its address and region blob
 * through a pipe and counts the immediates that arrive. This process is a
 * client of the --send mover: it imports the pool, allocates a source
 * region of the same size, and turns each BATCH record, in submit order,
 * into the same batch: the same kind, op count and bytes (pages of the same
 * size, writes and segments of sizes that add up exactly), the same
 * immediate. Where the data lands is chosen here, modulo what fits in the
 * two regions; the content is whatever is there (the trace has none). It
 * reports what it issued against what the trace holds, offered against
 * achieved throughput, latency percentiles, errors by cause and how far
 * behind schedule it fell, and ends with a RESULT line. Exit status 0 only
 * if every batch completed without error and every immediate arrived.
 * Everything is bounded in time: a batch still in flight when no batch
 * has completed for 30 s since its submit, or 10 minutes after its submit
 * whatever else completes, is an error. A batch queued behind many large
 * ones may wait longer than 30 s while the mover makes progress.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mvc.h"
#include "mvtool.h"
#include "replay.h"
#include "replay_send.h"
#include "trace_format.h"
#include "trace_read.h"

#define STUCK_NS      (30ull * 1000000000u)  /* no completion for this long: stuck */
#define STUCK_MAX_NS  (600ull * 1000000000u) /* a batch must complete within this */
#define PIPE_WAIT_MS  60000                  /* the other process answers within this */
#define MAX_ERR_LINES 5                      /* failures printed one by one, then counted */

static const char *err_name(unsigned e)
{
	switch (e) {
	case ERR_TOO_BIG:
		return "too_big";
	case ERR_SUBMIT:
		return "submit";
	case ERR_TIMEOUT:
		return "timeout";
	case ERR_IMM:
		return "imm_missing";
	default:
		return mvt_cause_name(e);
	}
}

static void report_err(struct replay *r, unsigned cause, size_t i, const char *msg)
{
	r->err[cause < ERR_N ? cause : 0]++;
	if (r->nerr++ < MAX_ERR_LINES)
		fprintf(stderr, "%smvreplay: batch %zu (trace record %zu) failed: %s: %s\n",
		        r->line_open ? "\n" : "", i, r->order[i], err_name(cause), msg);
	else if (r->nerr == MAX_ERR_LINES + 1)
		fprintf(stderr, "%smvreplay: more failures; counted below\n",
		        r->line_open ? "\n" : "");
	else
		return;
	r->line_open = 0;
}

static void progress(struct replay *r, int last)
{
	uint64_t now = now_ns();

	if (!r->tty || (!last && now - r->t_progress < 100000000u))
		return;
	r->t_progress = now;
	double s = (double)(now - r->t0) / 1e9;
	fprintf(stderr,
	        "\rmvreplay: %zu/%zu batches, %.1f MiB, %zu in flight, %.2f Gbit/s, "
	        "behind %.1f ms, %" PRIu64 " errors  %s",
	        r->done, r->nb, (double)r->done_bytes / 1048576.0, r->inflight,
	        s > 0 ? (double)r->done_bytes * 8 / s / 1e9 : 0.0,
	        r->cf->asap ? 0.0 : (double)r->max_late / 1e6, r->nerr, last ? "\n" : "");
	r->line_open = !last;
}

/* Fails every batch in flight that is stuck: nothing has completed for 30 s
 * since its submit, or it was submitted 10 minutes ago. The replay cannot go
 * on without their ids. */
static void check_stuck(struct replay *r)
{
	uint64_t now = now_ns();

	r->t_check = now;
	while (r->oldest < r->next && r->state[r->oldest] >= B_FAILED)
		r->oldest++;
	for (size_t i = r->oldest; i < r->next; i++) {
		if (r->state[i] != B_INFLIGHT)
			continue;
		uint64_t since = now - r->t_sub[i];
		uint64_t idle = now - (r->t_last > r->t_sub[i] ? r->t_last : r->t_sub[i]);
		if (idle < STUCK_NS && since < STUCK_MAX_NS)
			continue;
		char msg[160];
		snprintf(msg, sizeof(msg),
		         idle >= STUCK_NS ? "not completed %.0f s after its submit, and no batch "
		                            "completed for %.0f s; the mover or its peer is stuck "
		                            "(see their logs)"
		                          : "not completed %.0f s after its submit (%.0f s since "
		                            "any batch completed); the mover or its peer is stuck "
		                            "(see their logs)",
		         (double)since / 1e9, (double)idle / 1e9);
		report_err(r, ERR_TIMEOUT, i, msg);
		r->state[i] = B_FAILED;
		r->inflight--;
		r->stuck = 1;
		/* Its batch id stays taken: stop rather than run out of them. */
		r->fatal = "a batch was stuck (no progress for 30 s, or 10 minutes in flight)";
	}
}

/* Reaps completions: poll only (timeout 0) or wait up to timeout_ms. */
static void reap(struct replay *r, int timeout_ms)
{
	struct mvc_event ev[64];
	int n = timeout_ms ? mvc_wait(r->c, ev, 64, timeout_ms) : mvc_poll(r->c, ev, 64);
	uint64_t now = now_ns();

	if (n < 0) {
		if (!r->fatal)
			fprintf(stderr, "%smvreplay: %s\n", r->line_open ? "\n" : "",
			        mvc_error(r->c));
		r->line_open = 0;
		r->fatal = "completions could not be read";
		return;
	}
	for (int k = 0; k < n; k++) {
		const struct mvc_event *e = &ev[k];
		size_t i = (size_t)e->cookie;
		if (e->type != MVC_EV_BATCH)
			continue;
		if (i >= r->nb || r->state[i] != B_INFLIGHT)
			continue; /* failed as stuck already, or not ours */
		r->state[i] = e->status ? B_FAILED : B_OK;
		r->inflight--;
		r->done++;
		r->t_last = now;
		if (e->status) {
			report_err(r, e->cause ? (unsigned)e->cause : 0, i, e->msg);
			if (e->cause == MVC_CAUSE_MOVER_GONE)
				r->fatal = "the sending mover is gone";
			continue;
		}
		r->done_bytes += e->bytes;
		r->lat[r->nlat++] = now - r->t_sub[i];
	}
	if (now - r->t_check > 100000000u)
		check_stuck(r);
	progress(r, 0);
}

/* Waits until the absolute time `at`, reaping completions meanwhile. */
static void wait_until(struct replay *r, uint64_t at)
{
	for (;;) {
		uint64_t now = now_ns();
		if (now >= at || r->fatal)
			return;
		uint64_t left_ms = (at - now) / 1000000u;
		if (left_ms >= 1) {
			reap(r, left_ms > 100 ? 100 : (int)left_ms);
			continue;
		}
		struct timespec ts = {.tv_sec = (time_t)(at / 1000000000u),
		                      .tv_nsec = (long)(at % 1000000000u)};
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
}

static void replay_one(struct replay *r, size_t i)
{
	const struct mv_trace_rec *t = &r->t.rec[r->order[i]];
	uint64_t sched = r->t0;

	if (!r->cf->asap) {
		sched += (uint64_t)((double)(t->submit_ns - r->first_ns) / r->cf->speed);
		wait_until(r, sched);
	}
	while (r->inflight >= r->window && !r->fatal)
		reap(r, 100);
	reap(r, 0);
	uint64_t first_try = now_ns();
	for (;;) {
		if (r->fatal)
			return;
		uint64_t ops, bytes, ts = now_ns();
		int ret = issue(r, i, &ops, &bytes);
		if (ret == 0) {
			r->t_sub[i] = ts;
			r->state[i] = B_INFLIGHT;
			r->issued++;
			r->inflight++;
			r->ops += ops;
			r->bytes += bytes;
			if (!r->cf->asap && (int64_t)(ts - sched) > r->max_late)
				r->max_late = (int64_t)(ts - sched);
			return;
		}
		if (ret == -EAGAIN && now_ns() - first_try < STUCK_NS) {
			/* Full rings or all batch ids in flight: make room. */
			reap(r, r->inflight ? 10 : 1);
			continue;
		}
		/* Not submitted: counted as done, and failed. */
		r->state[i] = B_FAILED;
		r->done++;
		const char *fix = "";
		unsigned cause = ERR_SUBMIT;
		if (ret == -E2BIG) {
			cause = ERR_TOO_BIG;
			if (t->kind & MV_TK_PAGED)
				fix = " (replay with --contig, or import with a larger "
				      "--tokens-per-page)";
		} else if (ret == -EAGAIN) {
			cause = ERR_TIMEOUT;
			fix = " (no room in the rings for 30 s)";
		}
		char msg[300];
		snprintf(msg, sizeof(msg), "%s%s", mvc_error(r->c), fix);
		report_err(r, cause, i, msg);
		if (ret == -EPIPE)
			r->fatal = "the sending mover is gone";
		return;
	}
}

static int cmp_order(const void *a, const void *b, void *arg)
{
	const struct mv_trace_rec *rec = arg;
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	if (rec[x].submit_ns != rec[y].submit_ns)
		return rec[x].submit_ns < rec[y].submit_ns ? -1 : 1;
	return x < y ? -1 : x > y;
}

static double pct_us(const uint64_t *v, size_t n, double p)
{
	if (!n)
		return 0;
	size_t k = (size_t)ceil(p / 100.0 * (double)n);
	return (double)v[k ? k - 1 : 0] / 1e3;
}

/* Checks the trace against the regions before anything is issued. */
static int plan(struct replay *r, uint64_t src_len, uint64_t dst_len)
{
	uint64_t cap = src_len < dst_len ? src_len : dst_len;

	for (size_t i = 0; i < r->nb; i++) {
		const struct mv_trace_rec *t = &r->t.rec[r->order[i]];
		uint32_t data = t->kind & MVT_KIND_DATA;
		uint64_t biggest = data == MV_TK_PAGED && t->page_size ? t->page_size
		                   : data ? part_len(t->bytes, t->nops, 0)
		                          : 0;
		if (biggest > cap) {
			fprintf(stderr,
			        "mvreplay: trace record %zu has a %s of %" PRIu64 " bytes; the "
			        "regions are %" PRIu64 " bytes: raise --pool-mib to at least "
			        "%" PRIu64 "\n",
			        r->order[i], data == MV_TK_PAGED && t->page_size ? "page" : "write",
			        biggest, cap, (biggest + (1u << 20) - 1) >> 20);
			return -EINVAL;
		}
		if (t->nops > r->max_ops)
			r->max_ops = t->nops;
		r->trace_bytes += t->bytes;
		r->trace_ops += t->nops;
		r->trace_imms += (t->kind & MV_TK_IMM) != 0;
	}
	return 0;
}

static int sender(struct replay *r, int from_recv, int to_recv)
{
	const struct cfg *cf = r->cf;
	struct mvc_info info;
	struct blobs b;
	uint32_t peer;
	int ret;

	if (xread(from_recv, &b, sizeof(b), PIPE_WAIT_MS)) {
		fprintf(stderr, "mvreplay: the receiver did not start (see its message above)\n");
		return 1;
	}
	ret = mvc_connect(&r->c, cf->send_sock);
	if (ret) {
		fprintf(stderr, "mvreplay: connect to %s: %s (is a mover listening there?)\n",
		        cf->send_sock, strerror(-ret));
		return 1;
	}
	mvc_info(r->c, &info);
	ret = mvc_alloc(r->c, cf->pool, &r->src);
	if (ret) {
		fprintf(stderr,
		        "mvreplay: a %" PRIu64 " MiB source region: %s (lower "
		        "--pool-mib)\n",
		        cf->pool >> 20, mvc_error(r->c));
		goto err_disconnect;
	}
	ret = mvc_peer_add(r->c, b.addr, b.alen, &peer);
	if (!ret)
		ret = mvc_import(r->c, peer, b.region, b.rlen, &r->dst);
	if (ret) {
		fprintf(stderr, "mvreplay: reaching the receiver's mover: %s\n", mvc_error(r->c));
		goto err_free;
	}
	r->dst_len = b.pool_len;
	if (plan(r, r->src.len, r->dst_len))
		goto err_free;
	r->window = cf->window;
	if (r->window > info.max_batches) {
		fprintf(stderr,
		        "mvreplay: --window %u is more than the %u batches the mover "
		        "takes at once; using %u\n",
		        r->window, info.max_batches, info.max_batches);
		r->window = info.max_batches;
	}
	r->sp = malloc(((size_t)r->max_ops + 1) * sizeof(*r->sp));
	r->dp = malloc(((size_t)r->max_ops + 1) * sizeof(*r->dp));
	r->segs = malloc(((size_t)r->max_ops + 1) * sizeof(*r->segs));
	r->t_sub = calloc(r->nb, sizeof(*r->t_sub));
	r->state = calloc(r->nb, 1);
	r->lat = calloc(r->nb, sizeof(*r->lat));
	if (!r->sp || !r->dp || !r->segs || !r->t_sub || !r->state || !r->lat) {
		fprintf(stderr, "mvreplay: no memory for %zu batches\n", r->nb);
		goto err_free;
	}

	r->t0 = now_ns();
	r->t_progress = r->t0;
	r->t_check = r->t0;
	r->t_last = r->t0;
	for (size_t i = 0; i < r->nb && !r->fatal; i++) {
		/* Scattered strides suit one page size; recompute when it changes. */
		const struct mv_trace_rec *t = &r->t.rec[r->order[i]];
		if (t->page_size && (i == 0 || t->page_size != r->t.rec[r->order[i - 1]].page_size))
			r->stride = scatter_stride(r->dst_len / t->page_size);
		r->next = i + 1;
		replay_one(r, i);
	}
	while (r->inflight && !r->fatal)
		reap(r, 100);
	progress(r, 1);

	/* The receiver counts immediates; each successful batch's must be there.
	 * Failed batches may have sent theirs too: only a shortfall is an error. */
	uint64_t want = 0, got = 0;
	for (size_t i = 0; i < r->nb; i++)
		want += r->state[i] == B_OK && (r->t.rec[r->order[i]].kind & MV_TK_IMM);
	uint64_t ask = r->fatal ? UINT64_MAX : want;
	int got_known = 0;
	if (xwrite(to_recv, &ask, sizeof(ask)) == 0 && !r->fatal)
		got_known = !xread(from_recv, &got, sizeof(got), IMM_WAIT_MS + PIPE_WAIT_MS);
	if (!got_known && !r->fatal) {
		fprintf(stderr, "mvreplay: the receiver did not report its immediates\n");
		r->fatal = "the receiver failed";
	}

	/* ---- the report ---- */
	double wall = (double)(r->t_last - r->t0) / 1e9;
	double span =
	    r->nb ? (double)(r->t.rec[r->order[r->nb - 1]].submit_ns - r->first_ns) / 1e9 : 0;
	double offered = span > 0 ? (double)r->trace_bytes * 8 / span / 1e9 : INFINITY;
	double achieved = wall > 0 ? (double)r->bytes * 8 / wall / 1e9 : 0;
	if (!r->fatal && got < want) {
		char msg[96];
		snprintf(msg, sizeof(msg),
		         "%" PRIu64 " of %" PRIu64 " immediates arrived within %d s", got, want,
		         IMM_WAIT_MS / 1000);
		r->err[ERR_IMM] += want - got;
		r->nerr += want - got;
		fprintf(stderr, "mvreplay: %s\n", msg);
	}
	qsort(r->lat, r->nlat, sizeof(*r->lat), mvt_cmp_u64);
	char b1[32], b2[32];
	printf("mvreplay: %s (%s, source %s) over %s, %u shards, window %u, %s\n", cf->trace,
	       r->t.hdr.provider, r->t.hdr.source, info.provider, info.nshards, r->window,
	       cf->asap ? "as fast as possible" : "on schedule");
	if (!cf->asap && cf->speed != 1)
		printf("  speed      x%g\n", cf->speed);
	printf("  %-10s %20s %20s\n", "", "trace", "replay");
	printf("  %-10s %20zu %20zu\n", "batches", r->nb, r->issued);
	printf("  %-10s %20" PRIu64 " %20" PRIu64 "\n", "ops", r->trace_ops, r->ops);
	printf("  %-10s %20" PRIu64 " %20" PRIu64 "\n", "bytes", r->trace_bytes, r->bytes);
	if (got_known)
		printf("  %-10s %20" PRIu64 " %20" PRIu64 "\n", "immediates", r->trace_imms, got);
	else
		printf("  %-10s %20" PRIu64 " %20s\n", "immediates", r->trace_imms, "unknown");
	printf("  %-10s %18.6f s %18.6f s\n", "duration", span, wall);
	snprintf(b1, sizeof(b1), "%.3f Gbit/s", offered);
	snprintf(b2, sizeof(b2), "%.3f Gbit/s", achieved);
	printf("  %-10s %20s %20s   (offered: trace bytes over its submit span; achieved: "
	       "bytes over the replay's wall time)\n",
	       "throughput", span > 0 ? b1 : "n/a", b2);
	if (r->nlat)
		printf("  latency    p50 %.1f us  p99 %.1f us  p99.9 %.1f us  max %.1f us  (%zu "
		       "successful batches, submit to completion)\n",
		       pct_us(r->lat, r->nlat, 50), pct_us(r->lat, r->nlat, 99),
		       pct_us(r->lat, r->nlat, 99.9), (double)r->lat[r->nlat - 1] / 1e3, r->nlat);
	else
		printf("  latency    n/a (no batch completed successfully)\n");
	if (cf->asap)
		printf("  lateness   n/a (--asap)\n");
	else
		printf("  lateness   max %.3f ms behind schedule\n", (double)r->max_late / 1e6);
	if (!r->nerr) {
		printf("  errors     none\n");
	} else {
		printf("  errors     %" PRIu64 ":", r->nerr);
		for (unsigned e = 0; e < ERR_N; e++)
			if (r->err[e])
				printf(" %s %" PRIu64, err_name(e), r->err[e]);
		printf("\n");
	}
	if (r->fatal)
		printf("  failed     %s (see above)\n", r->fatal);
	printf("RESULT mvreplay batches=%zu bytes=%" PRIu64 " ops=%" PRIu64 " errors=%" PRIu64
	       " offered_gbps=%.3f achieved_gbps=%.3f p50_us=%.1f p99_us=%.1f p999_us=%.1f"
	       " max_late_us=%.1f\n",
	       r->issued, r->bytes, r->ops, r->nerr, offered, achieved, pct_us(r->lat, r->nlat, 50),
	       pct_us(r->lat, r->nlat, 99), pct_us(r->lat, r->nlat, 99.9),
	       cf->asap ? 0.0 : (double)r->max_late / 1e3);
	fflush(stdout);

	int bad = r->fatal != NULL || r->stuck || r->nerr || r->issued != r->nb ||
	          r->bytes != r->trace_bytes || r->ops != r->trace_ops;
	if (!bad && r->done_bytes != r->bytes) {
		fprintf(stderr,
		        "mvreplay: the mover reported %" PRIu64 " bytes written of %" PRIu64
		        " issued\n",
		        r->done_bytes, r->bytes);
		bad = 1;
	}
	/* Batches still in flight (stuck) are cancelled by the mover on disconnect. */
	mvc_free(r->c, &r->src);
	mvc_disconnect(r->c);
	return bad;

err_free:
	mvc_free(r->c, &r->src);
err_disconnect:
	mvc_disconnect(r->c);
	return 1;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: mvreplay --trace FILE --send SOCK --recv SOCK [--speed X | --asap]\n"
	        "                [--window N] [--pool-mib M] [--contig] [--quiet]\n"
	        "\n"
	        "Re-issues every batch of a trace (from `mover --trace`, `mvtrace start` or\n"
	        "`mvtrace import`) from a client of the mover at --send into memory of a\n"
	        "client of the mover at --recv, in submit order.\n"
	        "  --speed X     X times the trace's pace (default 1)\n"
	        "  --asap        no pacing: only the window limits\n"
	        "  --window N    batches in flight at most (default 64)\n"
	        "  --pool-mib M  destination pool and source region, MiB each (default 256);\n"
	        "                pages and writes wrap around in them\n"
	        "  --contig      paged batches write consecutive pool pages (the client merges\n"
	        "                them into large writes); by default pages scatter, one\n"
	        "                descriptor each, as in a paged KV cache\n"
	        "  --quiet       no progress line (there is none when stderr is not a terminal)\n"
	        "  --help        print this help and exit\n"
	        "  --version     print the version and exit\n"
	        "Prints trace against replay (batches, ops, bytes, immediates, duration,\n"
	        "throughput), latency percentiles, lateness and errors by cause, then\n"
	        "RESULT mvreplay batches=.. bytes=.. ops=.. errors=.. offered_gbps=..\n"
	        "achieved_gbps=.. p50_us=.. p99_us=.. p999_us=.. max_late_us=..\n"
	        "Exit status 0 only if every batch completed without error.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"trace", required_argument, 0, 't'},    {"send", required_argument, 0, 's'},
	    {"recv", required_argument, 0, 'r'},     {"speed", required_argument, 0, 'x'},
	    {"asap", no_argument, 0, 'a'},           {"window", required_argument, 0, 'w'},
	    {"pool-mib", required_argument, 0, 'p'}, {"quiet", no_argument, 0, 'q'},
	    {"contig", no_argument, 0, 'c'},         {"help", no_argument, 0, 'h'},
	    {"version", no_argument, 0, 'V'},        {0, 0, 0, 0},
	};
	struct cfg cf = {.speed = 1, .window = 64, .pool = 256ull << 20};
	int c, a[2], b[2], st;
	char *end;

	while ((c = getopt_long(argc, argv, "t:s:r:x:aw:p:qchV", opts, NULL)) != -1) {
		switch (c) {
		case 't':
			cf.trace = optarg;
			break;
		case 's':
			cf.send_sock = optarg;
			break;
		case 'r':
			cf.recv_sock = optarg;
			break;
		case 'x':
			cf.speed = strtod(optarg, &end);
			if (*end || !(cf.speed > 0) || isinf(cf.speed)) {
				fprintf(stderr,
				        "mvreplay: --speed wants a positive number, not '%s'\n",
				        optarg);
				return 2;
			}
			break;
		case 'a':
			cf.asap = 1;
			break;
		case 'w': {
			unsigned long v = strtoul(optarg, &end, 0);
			if (*end || v == 0 || v > 1u << 20) {
				fprintf(stderr, "mvreplay: --window wants 1 to 1048576, not '%s'\n",
				        optarg);
				return 2;
			}
			cf.window = (uint32_t)v;
			break;
		}
		case 'p': {
			unsigned long long v = strtoull(optarg, &end, 0);
			if (*end || v == 0 || v > 1u << 20) {
				fprintf(stderr,
				        "mvreplay: --pool-mib wants 1 to 1048576, not '%s'\n",
				        optarg);
				return 2;
			}
			cf.pool = (uint64_t)v << 20;
			break;
		}
		case 'q':
			cf.quiet = 1;
			break;
		case 'c':
			cf.contig = 1;
			break;
		case 'V':
			printf("mvreplay %s\n", MVC_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!cf.trace || !cf.send_sock || !cf.recv_sock || optind != argc) {
		fprintf(stderr, "mvreplay: need --trace FILE, --send SOCK and --recv SOCK\n");
		usage(stderr);
		return 2;
	}

	struct replay r = {.cf = &cf, .tty = !cf.quiet && isatty(2)};
	char err[512];
	if (mvt_load(cf.trace, &r.t, err, sizeof(err))) {
		fprintf(stderr, "mvreplay: %s\n", err);
		return 1;
	}
	r.nb = r.t.nrec;
	if (!r.nb) {
		fprintf(stderr, "mvreplay: %s holds no batches; nothing to replay\n", cf.trace);
		mvt_free(&r.t);
		return 1;
	}
	r.order = malloc(r.nb * sizeof(*r.order));
	if (!r.order) {
		fprintf(stderr, "mvreplay: no memory for %zu batches\n", r.nb);
		return 1;
	}
	for (size_t i = 0; i < r.nb; i++)
		r.order[i] = i;
	/* Records are in completion order; arrival order is submit order. */
	qsort_r(r.order, r.nb, sizeof(*r.order), cmp_order, r.t.rec);
	r.first_ns = r.t.rec[r.order[0]].submit_ns;

	signal(SIGPIPE, SIG_IGN);
	if (pipe(a) || pipe(b)) {
		fprintf(stderr, "mvreplay: pipe: %s\n", strerror(errno));
		return 1;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "mvreplay: fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		/* The receiver must not outlive a sender killed outright. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(a[0]);
		close(b[1]);
		mvt_free(&r.t);
		_exit(replay_receiver(&cf, a[1], b[0]));
	}
	close(a[1]);
	close(b[0]);
	int ret = sender(&r, a[0], b[1]);
	close(b[1]);
	close(a[0]);
	/* The receiver ends once the pipe closes; bounded, then forced. */
	for (int i = 0; i < 100 && waitpid(pid, &st, WNOHANG) == 0; i++)
		usleep(50000);
	if (waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	if (!ret && (!WIFEXITED(st) || WEXITSTATUS(st))) {
		fprintf(stderr, "mvreplay: the receiver failed (see its message above)\n");
		ret = 1;
	}
	free(r.order);
	free(r.sp);
	free(r.dp);
	free(r.segs);
	free(r.t_sub);
	free(r.state);
	free(r.lat);
	mvt_free(&r.t);
	return ret;
}
