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
#include <fcntl.h>
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

#include "mv_sock.h"
#include "mv_wire.h"
#include "trace_format.h"
#include "trace_read.h"
#include "trace_import.h"

static const char usage_text[] =
    "usage: mvtrace dump FILE [--csv]\n"
    "       mvtrace summary FILE\n"
    "       mvtrace import azure|mooncake INPUT OUTPUT --layers L --kv-heads H\n"
    "               --head-dim D --dtype-bytes E --tokens-per-page T [--limit N]\n"
    "       mvtrace start --socket PATH [--hops] FILE\n"
    "       mvtrace stop --socket PATH\n"
    "       mvtrace --help | --version\n"
    "\n"
    "dump     every record, one line each: time since the trace started, kind, ops,\n"
    "         page size, bytes, latency (complete - submit), parts, descriptors,\n"
    "         shards, client, peer, immediate, status and cause; --csv: the raw\n"
    "         fields with a header row. A trace with hops adds, per batch, us from\n"
    "         submit to its END taken (queue), to its last write posted (post), to\n"
    "         its data done (data), to its completion published (done), and\n"
    "         whether its one write carried the immediate.\n"
    "summary  batches, ops, bytes, duration, offered throughput, counts per kind,\n"
    "         a histogram of batch bytes in power-of-two buckets, latency\n"
    "         percentiles (n/a for imported traces), errors by cause, and the\n"
    "         records the writer dropped (from its END record); with hops, the\n"
    "         percentiles of each hop.\n"
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
    "         absolute; the mover opens it, so it must be able to create it);\n"
    "         --hops: each batch's hops too (where its time went).\n"
    "stop     asks it to finish and close the current trace.\n";

void usage(FILE *f)
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
const char *fmt_bytes(uint64_t b, char *buf, size_t len)
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

/* us from a to b, or "-" when either step did not happen. */
static const char *span(uint64_t a, uint64_t b, char *buf, size_t len)
{
	if (!a || !b || b < a)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f", (double)(b - a) / 1e3);
	return buf;
}

static void print_hops(const struct mv_trace_hops *hp)
{
	char q[24], p[24], d[24], i[24], c[24];

	printf("         hops (us): queue %s  post %s  data %s  imm %s  done %s%s  (shard %u)\n",
	       span(hp->submit_ns, hp->taken_ns, q, sizeof(q)),
	       span(hp->taken_ns, hp->posted_ns, p, sizeof(p)),
	       span(hp->posted_ns, hp->data_ns, d, sizeof(d)),
	       span(hp->data_ns, hp->imm_ns, i, sizeof(i)),
	       span(hp->submit_ns, hp->complete_ns, c, sizeof(c)),
	       hp->imm_inline ? ", the write carried the immediate" : "", hp->shard);
}

static int cmd_dump(const char *path, int csv)
{
	struct mvt_trace t;
	const struct mv_trace_hdr *h = &t.hdr;
	char kb[32], b1[32], b2[32], st[48];

	if (load(path, &t))
		return 1;
	if (csv)
		printf("rec,type,kind,t_ns,submit_ns,complete_ns,latency_ns,bytes,nops,ndesc,"
		       "page_size,nparts,shard_mask,client,peer,imm,status,cause%s\n",
		       t.nhops ? ",taken_ns,posted_ns,data_ns,imm_ns,imm_inline" : "");
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
			printf(",%" PRIu64 ",%u,%u,%u,%u,%u,%u,%" PRIu64 ",%u,%d,%s", r->bytes,
			       r->nops, r->ndesc, r->page_size, r->nparts, r->shard_mask, r->client,
			       r->peer, r->imm, r->status, mvt_cause_name(r->cause));
			const struct mv_trace_hops *hp = &t.hops[i];
			if (t.nhops && hp->type)
				printf(",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%u",
				       hp->taken_ns, hp->posted_ns, hp->data_ns, hp->imm_ns,
				       hp->imm_inline);
			else if (t.nhops)
				printf(",,,,,");
			printf("\n");
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
		if (t.hops[i].type)
			print_hops(&t.hops[i]);
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

/* Each hop's percentiles over the batches that have it (see dump). */
static void summary_hops(const struct mvt_trace *t)
{
	static const char *const names[] = {"queue", "post", "data", "imm", "done"};
	uint64_t *v = malloc(t->nrec * sizeof(*v));

	if (!v)
		return;
	printf("hops       us over %zu batches with hops (p50 / p99 / max):\n", t->nhops);
	for (int k = 0; k < 5; k++) {
		size_t n = 0;
		for (size_t i = 0; i < t->nrec; i++) {
			const struct mv_trace_hops *hp = &t->hops[i];
			uint64_t a = 0, b = 0;
			if (!hp->type)
				continue;
			switch (k) {
			case 0:
				a = hp->submit_ns;
				b = hp->taken_ns;
				break;
			case 1:
				a = hp->taken_ns;
				b = hp->posted_ns;
				break;
			case 2:
				a = hp->posted_ns;
				b = hp->data_ns;
				break;
			case 3:
				a = hp->data_ns;
				b = hp->imm_ns;
				break;
			default:
				a = hp->submit_ns;
				b = hp->complete_ns;
				break;
			}
			if (a && b && b >= a)
				v[n++] = b - a;
		}
		if (!n) {
			printf("  %-8s -\n", names[k]);
			continue;
		}
		qsort(v, n, sizeof(*v), mvt_cmp_u64);
		printf("  %-8s %9.1f / %9.1f / %9.1f  (%zu)\n", names[k], pct(v, n, 50) / 1e3,
		       pct(v, n, 99) / 1e3, v[n - 1] / 1e3, n);
	}
	free(v);
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
	if (t.nhops)
		summary_hops(&t);
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

/* ---- start / stop ---- */

static int cmd_control(int argc, char **argv, int on)
{
	static const struct option opts[] = {
	    {"socket", required_argument, 0, 's'},
	    {"hops", no_argument, 0, 'H'},
	    {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	const char *sock = NULL, *what = on ? "start" : "stop";
	struct mv_trace_req req = {.on = on ? 1u : 0u};
	int c, tfd = -1;

	optind = 1;
	while ((c = getopt_long(argc, argv, "s:Hh", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			sock = optarg;
			break;
		case 'H':
			req.flags |= MV_TRACE_HOPS;
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
	/* The file goes with the request, opened here with our own rights:
	 * the mover never opens a path that a connection names (and it
	 * truncates the file once it takes it). */
	if (on && (tfd = open(req.path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) < 0) {
		fprintf(stderr, "mvtrace start: cannot create %s: %s\n", req.path, strerror(errno));
		close(fd);
		return 1;
	}
	struct iovec iov = {&msg, sizeof(msg)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	union mv_cmsg u;
	mv_fds_put(&mh, &u, &tfd, on ? 1 : 0);
	ssize_t sent = sendmsg(fd, &mh, MSG_NOSIGNAL);
	if (tfd >= 0)
		close(tfd);
	if (sent != (ssize_t)sizeof(msg)) {
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
	if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
		printf("mvtrace %s\n", MVC_VERSION);
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
		return mvt_cmd_import(argc - 1, argv + 1);
	if (!strcmp(cmd, "start"))
		return cmd_control(argc - 1, argv + 1, 1);
	if (!strcmp(cmd, "stop"))
		return cmd_control(argc - 1, argv + 1, 0);
	fprintf(stderr, "mvtrace: unknown command '%s'\n", cmd);
	usage(stderr);
	return 2;
}
