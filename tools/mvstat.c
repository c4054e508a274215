/* SPDX-License-Identifier: MIT */
/*
 * mvstat: look inside a running mover. Asks the mover's control socket for
 * its stats segment, maps it read-only (the mover never waits for us), and
 * prints per shard: provider, NIC, CPU, posted and completed writes, bytes,
 * Gbit/s and messages/s over the interval, pending and in-flight depth,
 * EAGAINs, CQ errors; per client ring: positions, occupancy and high-water
 * marks, owner pid and liveness, who sleeps; per peer: bytes, errors and
 * what its heartbeats say (ok, silent, dead, cut) with their round trip.
 * --watch refreshes like top (plain blocks when piped), --json prints one
 * snapshot, --prometheus the text exposition format. A mover that stopped,
 * died or stopped beating is reported as such, with its last numbers.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mv_sock.h"
#include "mv_wire.h"
#include "stats_layout.h"
#include "stats_view.h"
#include "mvstat_mem.h"

struct snap {
	uint64_t t_ns;
	struct mv_stats_shard shard[MV_MAX_SHARDS];
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void take(const struct view *v, struct snap *s)
{
	s->t_ns = mono_ns();
	memcpy(s->shard, v->shards, v->h->nshards * sizeof(struct mv_stats_shard));
}

#define GET(x) atomic_load_explicit(&(x), memory_order_relaxed)

struct peer_total {
	uint64_t id, bytes, writes, errors;
	uint32_t live, rtt_us; /* shard 0's: enum mv_live + 1, 0 when not watched */
};

static const char *live_name(uint32_t live)
{
	static const char *const names[] = {"-", "ok", "silent", "dead", "cut"};

	return live < 5 ? names[live] : "?";
}

/* One peer's traffic over every shard, and its liveness; 0 when nobody
 * wrote to it and no client holds it. */
static int peer_total(const struct view *v, uint32_t p, struct peer_total *t)
{
	memset(t, 0, sizeof(*t));
	for (uint32_t s = 0; s < v->h->nshards; s++) {
		const struct mv_stats_peer *x = &v->peers[(size_t)s * v->h->npeers + p];
		t->id |= GET(x->mover_id);
		t->bytes += GET(x->bytes);
		t->writes += GET(x->writes);
		t->errors += GET(x->errors);
		if (s == 0) {
			t->live = GET(x->live);
			t->rtt_us = GET(x->rtt_us);
		}
	}
	return t->writes || t->errors || t->live;
}

/* "running", "stopped", "dead" or "stale": never zeros for a mover that is gone. */
static const char *state(const struct view *v)
{
	struct pollfd p = {.fd = v->pidfd, .events = POLLIN};

	if (GET(v->h->stopped))
		return "stopped";
	if (v->pidfd < 0 || (poll(&p, 1, 0) == 1 && (p.revents & POLLIN)))
		return "dead";
	if (mono_ns() - GET(v->h->heartbeat_ns) > 1000000000ull)
		return "stale";
	return "running";
}

/* The mover's release; "?" from a mover before 0.2.0, which had none. */
static const char *release(const struct view *v, char *buf, size_t len)
{
	shown(v->h->release, sizeof(v->h->release), buf, len, 0);
	return buf[0] ? buf : "?";
}

static double rate(uint64_t a, uint64_t b, double secs)
{
	return secs > 0 ? (double)(b - a) / secs : 0;
}

/* Re-posts per write: posts the provider refused (-FI_EAGAIN, a full
 * queue) for each write it took, since start. Under back-pressure a shard
 * waits for completions before it posts again, so this stays below 1. */
static double reposts(const struct mv_stats_shard *y)
{
	uint64_t posted = GET(y->posted);

	return posted ? (double)GET(y->eagain) / (double)posted : 0;
}

static void print_text(FILE *f, const struct view *v, const struct snap *a, const struct snap *b)
{
	const struct mv_stats_hdr *h = v->h;
	double secs = (double)(b->t_ns - a->t_ns) * 1e-9;
	uint64_t age = (mono_ns() - GET(h->heartbeat_ns)) / 1000000;
	char rel[32];

	fprintf(f,
	        "mover %016" PRIx64 " %s pid %d on %s: %s (heartbeat %" PRIu64
	        " ms ago), %u clients, %u shards, socket %s\n",
	        h->mover_id, release(v, rel, sizeof(rel)), h->pid, h->provider, state(v), age,
	        GET(h->clients), h->nshards, h->socket);
	if (GET(h->tracing))
		fprintf(f, "tracing to %s: %" PRIu64 " records written\n", h->trace_path,
		        GET(h->trace_records));
	fprintf(f, "%-5s %-12s %-8s %4s %12s %12s %14s %9s %10s %7s %7s %7s %6s %6s %6s\n", "shard",
	        "provider", "iface", "cpu", "posted", "completed", "bytes", "Gbit/s", "msg/s",
	        "pending", "inflight", "eagain", "rp/wr", "cqerr", "tmo");
	for (uint32_t s = 0; s < h->nshards; s++) {
		const struct mv_stats_shard *x = &a->shard[s], *y = &b->shard[s];
		fprintf(f,
		        "%-5u %-12.12s %-8.8s %4d %12" PRIu64 " %12" PRIu64 " %14" PRIu64
		        " %9.3f %10.0f %7" PRIu64 " %7" PRIu64 " %7" PRIu64 " %6.3f %6" PRIu64
		        " %6" PRIu64 "\n",
		        s, y->provider, y->iface, y->cpu, GET(y->posted), GET(y->completed),
		        GET(y->bytes), rate(GET(x->bytes), GET(y->bytes), secs) * 8e-9,
		        rate(GET(x->completed), GET(y->completed), secs), GET(y->pending),
		        GET(y->inflight), GET(y->eagain), reposts(y), GET(y->cq_errors),
		        GET(y->timeouts));
	}
	uint64_t other = 0;
	for (uint32_t s = 0; s < h->nshards; s++)
		other += GET(b->shard[s].path_bytes[1]) + GET(b->shard[s].path_bytes[2]) +
		         GET(b->shard[s].path_bytes[3]) + GET(b->shard[s].samehost_bytes);
	if (other) {
		fprintf(f, "%-5s %16s %16s %16s %16s %16s   (bytes by path)\n", "shard",
		        "host fabric", "FI_HMEM", "CUDA copy", "staged", "same-host copy");
		for (uint32_t s = 0; s < h->nshards; s++)
			fprintf(f,
			        "%-5u %16" PRIu64 " %16" PRIu64 " %16" PRIu64 " %16" PRIu64
			        " %16" PRIu64 "\n",
			        s, GET(b->shard[s].path_bytes[0]), GET(b->shard[s].path_bytes[1]),
			        GET(b->shard[s].path_bytes[2]), GET(b->shard[s].path_bytes[3]),
			        GET(b->shard[s].samehost_bytes));
	}
	mvstat_mem_text(f, h);
	int any = 0;
	for (uint32_t s = 0; s < h->nshards; s++)
		for (uint32_t i = 0; i < h->nrings; i++) {
			const struct mv_stats_ring *r = &v->rings[(size_t)s * h->nrings + i];
			if (!GET(r->used))
				continue;
			if (!any++)
				fprintf(f,
				        "%-5s %-8s %7s %5s %10s %10s %6s %6s %10s %10s %6s %6s %6s "
				        "%14s %s\n",
				        "shard", "client", "pid", "alive", "sub.tail", "sub.head",
				        "occ", "hwm", "comp.tail", "comp.head", "occ", "hwm",
				        "weight", "bytes posted", "asleep");
			uint32_t so = GET(r->sub_tail) - GET(r->sub_head);
			uint32_t co = GET(r->comp_tail) - GET(r->comp_head);
			fprintf(
			    f,
			    "%-5u %-8u %7d %5s %10u %10u %6u %6u %10u %10u %6u %6u %6u %14" PRIu64
			    " %s%s%s\n",
			    s, GET(r->client), GET(r->pid), GET(r->alive) ? "yes" : "NO",
			    GET(r->sub_tail), GET(r->sub_head), so, GET(r->sub_hwm),
			    GET(r->comp_tail), GET(r->comp_head), co, GET(r->comp_hwm),
			    GET(r->weight), GET(r->bytes_posted),
			    GET(r->shard_sleeping) ? "shard " : "",
			    GET(r->client_sleeping) ? "client" : "",
			    !GET(r->shard_sleeping) && !GET(r->client_sleeping) ? "-" : "");
		}
	any = 0;
	for (uint32_t p = 0; p < h->npeers; p++) {
		struct peer_total t;
		if (!peer_total(v, p, &t))
			continue;
		if (!any++)
			fprintf(f, "%-16s %14s %12s %8s %-7s %9s\n", "peer", "bytes", "writes",
			        "errors", "state", "rtt_us");
		fprintf(f, "%016" PRIx64 " %14" PRIu64 " %12" PRIu64 " %8" PRIu64 " %-7s %9u\n",
		        t.id, t.bytes, t.writes, t.errors, live_name(t.live), t.rtt_us);
	}
}

/* Hop h of shard s: the counts over the interval a..b when it saw any,
 * else since the start; returns the count, and 1 in *since_start then. */
static uint64_t hop_hist(const struct snap *a, const struct snap *b, uint32_t s, int h,
                         uint64_t *hist, uint64_t *sum, int *since_start)
{
	uint64_t n = 0;

	for (int pass = 0; pass < 2 && !n; pass++) {
		*since_start = pass;
		n = 0;
		for (int k = 0; k < MV_HOP_BUCKETS; k++) {
			uint64_t y = GET(b->shard[s].hop[h][k]),
			         x = pass ? 0 : GET(a->shard[s].hop[h][k]);
			hist[k] = y - x;
			n += hist[k];
		}
		*sum = GET(b->shard[s].hop_sum_ns[h]) - (pass ? 0 : GET(a->shard[s].hop_sum_ns[h]));
	}
	return n;
}

/* Where batches' time went, per shard and hop (stats_layout.h says what
 * each hop is): percentiles from the histograms, in microseconds. */
static void print_hops(FILE *f, const struct view *v, const struct snap *a, const struct snap *b)
{
	int head = 0;

	for (uint32_t s = 0; s < v->h->nshards; s++)
		for (int h = 0; h < MV_HOPS; h++) {
			uint64_t hist[MV_HOP_BUCKETS], sum;
			int since;
			uint64_t n = hop_hist(a, b, s, h, hist, &sum, &since);
			if (!n)
				continue;
			if (!head++)
				fprintf(f, "%-5s %-8s %12s %10s %10s %10s %10s  %s\n", "shard",
				        "hop", "count", "mean us", "p50 us", "p90 us", "p99 us",
				        "over");
			fprintf(f, "%-5u %-8s %12" PRIu64 " %10.1f %10.1f %10.1f %10.1f  %s\n", s,
			        hop_name(h), n, (double)sum / (double)n / 1e3,
			        hop_quantile(hist, MV_HOP_BUCKETS, 0.5) / 1e3,
			        hop_quantile(hist, MV_HOP_BUCKETS, 0.9) / 1e3,
			        hop_quantile(hist, MV_HOP_BUCKETS, 0.99) / 1e3,
			        since ? "all time" : "interval");
		}
	if (!head)
		fprintf(f, "no batch or immediate has passed through this mover yet\n");
}

static void print_json(FILE *f, const struct view *v, const struct snap *a, const struct snap *b)
{
	const struct mv_stats_hdr *h = v->h;
	double secs = (double)(b->t_ns - a->t_ns) * 1e-9;
	char rel[32];

	fprintf(f, "{\"version\":\"%s\",", release(v, rel, sizeof(rel)));
	fprintf(f,
	        "\"mover_id\":\"%016" PRIx64 "\",\"pid\":%d,\"provider\":\"%s\",\"state\":\"%s\","
	        "\"heartbeat_age_ms\":%" PRIu64 ",\"clients\":%u,\"interval_s\":%.3f,"
	        "\"tracing\":%s,\"trace_records\":%" PRIu64 ",\"shards\":[",
	        h->mover_id, h->pid, h->provider, state(v),
	        (mono_ns() - GET(h->heartbeat_ns)) / 1000000, GET(h->clients), secs,
	        GET(h->tracing) ? "true" : "false", GET(h->trace_records));
	for (uint32_t s = 0; s < h->nshards; s++) {
		const struct mv_stats_shard *x = &a->shard[s], *y = &b->shard[s];
		fprintf(f,
		        "%s{\"shard\":%u,\"provider\":\"%s\",\"iface\":\"%s\",\"cpu\":%d,"
		        "\"numa\":%d,\"posted\":%" PRIu64 ",\"completed\":%" PRIu64
		        ",\"bytes\":%" PRIu64 ",\"descs\":%" PRIu64 ",\"batches\":%" PRIu64
		        ",\"gbit_s\":%.6f,\"msg_s\":%.1f,\"pending\":%" PRIu64
		        ",\"inflight\":%" PRIu64 ",\"eagain\":%" PRIu64
		        ",\"reposts_per_write\":%.6f,\"cq_errors\":%" PRIu64 ",\"retries\":%" PRIu64
		        ",\"timeouts\":%" PRIu64 ",\"imm_rx\":%" PRIu64 ",\"sleeps\":%" PRIu64
		        ",\"wakes\":%" PRIu64 ",\"host_bytes\":%" PRIu64 ",\"hmem_bytes\":%" PRIu64
		        ",\"copy_bytes\":%" PRIu64 ",\"staged_bytes\":%" PRIu64
		        ",\"samehost_bytes\":%" PRIu64 ",\"posted_small\":%" PRIu64
		        ",\"copy_stops\":%" PRIu64 ",\"holds\":%" PRIu64 ",\"piece_bytes\":%" PRIu64
		        ",\"promoted\":%" PRIu64 ",\"bounce_held\":%" PRIu64 "}",
		        s ? "," : "", s, y->provider, y->iface, y->cpu, y->numa, GET(y->posted),
		        GET(y->completed), GET(y->bytes), GET(y->descs), GET(y->batches),
		        rate(GET(x->bytes), GET(y->bytes), secs) * 8e-9,
		        rate(GET(x->completed), GET(y->completed), secs), GET(y->pending),
		        GET(y->inflight), GET(y->eagain), reposts(y), GET(y->cq_errors),
		        GET(y->retries), GET(y->timeouts), GET(y->imm_rx), GET(y->sleeps),
		        GET(y->wakes), GET(y->path_bytes[0]), GET(y->path_bytes[1]),
		        GET(y->path_bytes[2]), GET(y->path_bytes[3]), GET(y->samehost_bytes),
		        GET(y->posted_small), GET(y->copy_stops), GET(y->holds),
		        GET(y->piece_bytes), GET(y->promoted), GET(y->bounce_held));
	}
	fprintf(f, "]");
	mvstat_mem_json(f, h);
	fprintf(f, ",\"hops\":[");
	int any = 0;
	for (uint32_t s = 0; s < h->nshards; s++)
		for (int k = 0; k < MV_HOPS; k++) {
			uint64_t hist[MV_HOP_BUCKETS], sum;
			int since;
			uint64_t n = hop_hist(a, b, s, k, hist, &sum, &since);
			if (!n)
				continue;
			fprintf(
			    f,
			    "%s{\"shard\":%u,\"hop\":\"%s\",\"over\":\"%s\",\"count\":%" PRIu64
			    ",\"mean_us\":%.3f,\"p50_us\":%.3f,\"p90_us\":%.3f,\"p99_us\":%.3f}",
			    any++ ? "," : "", s, hop_name(k), since ? "all time" : "interval", n,
			    (double)sum / (double)n / 1e3,
			    hop_quantile(hist, MV_HOP_BUCKETS, 0.5) / 1e3,
			    hop_quantile(hist, MV_HOP_BUCKETS, 0.9) / 1e3,
			    hop_quantile(hist, MV_HOP_BUCKETS, 0.99) / 1e3);
		}
	fprintf(f, "],\"rings\":[");
	any = 0;
	for (uint32_t s = 0; s < h->nshards; s++)
		for (uint32_t i = 0; i < h->nrings; i++) {
			const struct mv_stats_ring *r = &v->rings[(size_t)s * h->nrings + i];
			if (!GET(r->used))
				continue;
			fprintf(
			    f,
			    "%s{\"shard\":%u,\"client\":%u,\"pid\":%d,\"alive\":%s,"
			    "\"sub_tail\":%u,\"sub_head\":%u,\"sub_capacity\":%u,\"sub_hwm\":%u,"
			    "\"comp_tail\":%u,\"comp_head\":%u,\"comp_capacity\":%u,"
			    "\"comp_hwm\":%u,\"shard_sleeping\":%s,\"client_sleeping\":%s,"
			    "\"descs\":%" PRIu64 ",\"batches\":%" PRIu64 ",\"weight\":%u,"
			    "\"bytes_posted\":%" PRIu64 "}",
			    any++ ? "," : "", s, GET(r->client), GET(r->pid),
			    GET(r->alive) ? "true" : "false", GET(r->sub_tail), GET(r->sub_head),
			    GET(r->sub_cap), GET(r->sub_hwm), GET(r->comp_tail), GET(r->comp_head),
			    GET(r->comp_cap), GET(r->comp_hwm),
			    GET(r->shard_sleeping) ? "true" : "false",
			    GET(r->client_sleeping) ? "true" : "false", GET(r->descs),
			    GET(r->batches), GET(r->weight), GET(r->bytes_posted));
		}
	fprintf(f, "],\"peers\":[");
	any = 0;
	for (uint32_t p = 0; p < h->npeers; p++) {
		struct peer_total t;
		if (peer_total(v, p, &t))
			fprintf(f,
			        "%s{\"peer\":\"%016" PRIx64 "\",\"bytes\":%" PRIu64
			        ",\"writes\":%" PRIu64 ",\"errors\":%" PRIu64
			        ",\"state\":\"%s\",\"rtt_us\":%u}",
			        any++ ? "," : "", t.id, t.bytes, t.writes, t.errors,
			        live_name(t.live), t.rtt_us);
	}
	fprintf(f, "]}\n");
}

static void print_prometheus(FILE *f, const struct view *v, const struct snap *b)
{
	const struct mv_stats_hdr *h = v->h;
	static const struct {
		const char *name, *help;
		size_t off;
		int gauge;
	} m[] = {
#define M(n, h, g) {#n, h, offsetof(struct mv_stats_shard, n), g}
	    M(posted, "fabric writes posted", 0),
	    M(completed, "fabric writes completed", 0),
	    M(bytes, "bytes of completed writes", 0),
	    M(descs, "descriptors consumed from client rings", 0),
	    M(batches, "batch completions published", 0),
	    M(eagain, "posts the provider deferred with EAGAIN", 0),
	    M(cq_errors, "completion queue errors", 0),
	    M(retries, "writes re-posted after a broken connection", 0),
	    M(timeouts, "writes failed at their deadline", 0),
	    M(imm_rx, "immediates received", 0),
	    M(sleeps, "times the shard slept, idle", 0),
	    M(wakes, "same-host peer shards this shard woke", 0),
	    M(copy_stops, "same-host copies stopped partway for another client", 0),
	    M(holds, "turns a large piece waited for another client's small write or next batch",
	      0),
	    M(promoted, "writes posted ahead of their client's head, whose peer could not take it",
	      0),
	    M(pending, "writes queued, not yet posted", 1),
	    M(inflight, "writes posted, not yet completed", 1),
	    M(piece_bytes, "bytes one post carries at most while the shard is shared", 1),
	    M(bounce_held, "bounce chunks staged GPU writes hold, each until its write completes",
	      1),
#undef M
	};

	char rel[32];

	fprintf(f, "# HELP mover_build_info the mover's release (always 1)\n"
	           "# TYPE mover_build_info gauge\n");
	fprintf(f, "mover_build_info{mover=\"%016" PRIx64 "\",version=\"%s\",provider=\"%s\"} 1\n",
	        h->mover_id, release(v, rel, sizeof(rel)), h->provider);
	mvstat_mem_prom(f, h);
	fprintf(f, "# HELP mover_up 1 while the mover runs and beats\n# TYPE mover_up gauge\n");
	fprintf(f, "mover_up{mover=\"%016" PRIx64 "\",state=\"%s\"} %d\n", h->mover_id, state(v),
	        !strcmp(state(v), "running"));
	fprintf(f, "# HELP mover_clients attached clients\n# TYPE mover_clients gauge\n");
	fprintf(f, "mover_clients{mover=\"%016" PRIx64 "\"} %u\n", h->mover_id, GET(h->clients));
	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		const char *suffix = m[i].gauge ? "" : "_total";
		fprintf(f, "# HELP mover_shard_%s%s %s\n# TYPE mover_shard_%s%s %s\n", m[i].name,
		        suffix, m[i].help, m[i].name, suffix, m[i].gauge ? "gauge" : "counter");
		for (uint32_t s = 0; s < h->nshards; s++) {
			const _Atomic uint64_t *p =
			    (const void *)((const char *)&b->shard[s] + m[i].off);
			fprintf(f,
			        "mover_shard_%s%s{mover=\"%016" PRIx64
			        "\",shard=\"%u\",provider=\"%s\",iface=\"%s\"} %" PRIu64 "\n",
			        m[i].name, suffix, h->mover_id, s, b->shard[s].provider,
			        b->shard[s].iface, atomic_load_explicit(p, memory_order_relaxed));
		}
	}
	fprintf(f, "# HELP mover_shard_reposts_per_write posts the provider refused (EAGAIN) per "
	           "write posted, since start\n# TYPE mover_shard_reposts_per_write gauge\n");
	for (uint32_t s = 0; s < h->nshards; s++)
		fprintf(f,
		        "mover_shard_reposts_per_write{mover=\"%016" PRIx64
		        "\",shard=\"%u\",provider=\"%s\",iface=\"%s\"} %.6f\n",
		        h->mover_id, s, b->shard[s].provider, b->shard[s].iface,
		        reposts(&b->shard[s]));
	fprintf(f, "# HELP mover_hop_seconds where batches' time goes, hop by hop (queue, post, "
	           "fabric, imm, batch, deliver: see mvstat(1))\n# TYPE mover_hop_seconds "
	           "histogram\n");
	for (uint32_t s = 0; s < h->nshards; s++)
		for (int k = 0; k < MV_HOPS; k++) {
			uint64_t cum = 0;
			for (int i = 0; i < MV_HOP_BUCKETS; i++) {
				cum += GET(b->shard[s].hop[k][i]);
				if (i == MV_HOP_BUCKETS - 1)
					break; /* the last bucket also takes longer waits: +Inf */
				fprintf(f,
				        "mover_hop_seconds_bucket{mover=\"%016" PRIx64
				        "\",shard=\"%u\",hop=\"%s\",le=\"%.9g\"} %" PRIu64 "\n",
				        h->mover_id, s, hop_name(k),
				        (double)(1ull << (i + MV_HOP_SHIFT)) / 1e9, cum);
			}
			fprintf(f,
			        "mover_hop_seconds_bucket{mover=\"%016" PRIx64
			        "\",shard=\"%u\",hop=\"%s\",le=\"+Inf\"} %" PRIu64 "\n",
			        h->mover_id, s, hop_name(k), cum);
			fprintf(f,
			        "mover_hop_seconds_sum{mover=\"%016" PRIx64
			        "\",shard=\"%u\",hop=\"%s\"} %.9f\n",
			        h->mover_id, s, hop_name(k),
			        (double)GET(b->shard[s].hop_sum_ns[k]) / 1e9);
			fprintf(f,
			        "mover_hop_seconds_count{mover=\"%016" PRIx64
			        "\",shard=\"%u\",hop=\"%s\"} %" PRIu64 "\n",
			        h->mover_id, s, hop_name(k), cum);
		}
	fprintf(f, "# HELP mover_ring_occupancy descriptors waiting in a client's submission "
	           "ring\n# TYPE mover_ring_occupancy gauge\n");
	for (uint32_t s = 0; s < h->nshards; s++)
		for (uint32_t i = 0; i < h->nrings; i++) {
			const struct mv_stats_ring *r = &v->rings[(size_t)s * h->nrings + i];
			if (GET(r->used))
				fprintf(f,
				        "mover_ring_occupancy{mover=\"%016" PRIx64
				        "\",shard=\"%u\","
				        "client=\"%u\",pid=\"%d\"} %u\n",
				        h->mover_id, s, GET(r->client), GET(r->pid),
				        GET(r->sub_tail) - GET(r->sub_head));
		}
	fprintf(f, "# HELP mover_peer_bytes_total bytes written to a peer\n"
	           "# TYPE mover_peer_bytes_total counter\n");
	for (uint32_t p = 0; p < h->npeers; p++) {
		struct peer_total t;
		if (peer_total(v, p, &t))
			fprintf(f,
			        "mover_peer_bytes_total{mover=\"%016" PRIx64 "\",peer=\"%016" PRIx64
			        "\"} %" PRIu64 "\n",
			        h->mover_id, t.id, t.bytes);
	}
	fprintf(f, "# HELP mover_peer_up 1 while a peer mover answers its heartbeats\n"
	           "# TYPE mover_peer_up gauge\n");
	for (uint32_t p = 0; p < h->npeers; p++) {
		struct peer_total t;
		if (peer_total(v, p, &t) && t.live)
			fprintf(f,
			        "mover_peer_up{mover=\"%016" PRIx64 "\",peer=\"%016" PRIx64
			        "\"} %d\n",
			        h->mover_id, t.id, t.live == 1);
	}
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void usage(FILE *f)
{
	fputs("usage: mvstat [--socket PATH] [--watch [--count N]] [--hops]\n"
	      "              [--json | --prometheus [--output FILE]] [--interval S]\n"
	      "       mvstat [--socket PATH] --cluster\n"
	      "Shows a running mover's shards, client rings and peers.\n"
	      "  --socket PATH   the mover's control socket (default $MOVER_SOCKET, else\n"
	      "                  $XDG_RUNTIME_DIR/mover.sock, else /tmp/mover-UID.sock)\n"
	      "  --interval S    rates are over S seconds (default 1; --json and\n"
	      "                  --prometheus take one snapshot pair over it)\n"
	      "  --watch         refresh every interval, like top (plain blocks when piped)\n"
	      "  --count N       with --watch: stop after N refreshes\n"
	      "  --hops          where batches' time went, per shard and hop: queue (submit\n"
	      "                  to taken), post (taken to posted), fabric (posted to done),\n"
	      "                  imm (the separate immediate), batch (submit to completion),\n"
	      "                  deliver (an immediate read to its completion published);\n"
	      "                  over the interval when it saw any, else since the start\n"
	      "  --json          one snapshot as JSON (hops included)\n"
	      "  --prometheus    the Prometheus text format (hops included)\n"
	      "  --cluster       the mover's etcd cluster: whether etcd answers, the\n"
	      "                  members and the published region names (mover --etcd)\n"
	      "  --output FILE   write to FILE instead of standard output, replacing it\n"
	      "                  whole each time (for node_exporter's textfile collector)\n"
	      "  --version       print the version and exit\n"
	      "Exit status: 0, 1 no mover to read, 2 usage, 3 the mover is not running.\n",
	      f);
}

/* Where each snapshot goes: stdout, or FILE replaced atomically (a reader
 * such as node_exporter never sees half a file). */
static const char *out_path;
static char out_tmp[4200];

static FILE *out_open(void)
{
	if (!out_path)
		return stdout;
	snprintf(out_tmp, sizeof(out_tmp), "%s.tmp.%d", out_path, (int)getpid());
	FILE *f = fopen(out_tmp, "we");
	if (!f)
		fprintf(stderr, "mvstat: %s: %s\n", out_tmp, strerror(errno));
	return f;
}

static int out_close(FILE *f)
{
	if (f == stdout)
		return fflush(f) ? -1 : 0;
	int bad = ferror(f) | fclose(f);
	if (bad || rename(out_tmp, out_path)) {
		fprintf(stderr, "mvstat: writing %s: %s\n", out_path, strerror(errno));
		unlink(out_tmp);
		return -1;
	}
	return 0;
}

/* --cluster: the mover's own listing of members and names, as it sends it. */
static int print_cluster(const char *path)
{
	struct {
		struct mv_msg_hdr h;
		struct mv_cluster_rep rep;
	} *m = calloc(1, sizeof(*m));
	char why[256];
	int fd;

	if (!m)
		return 1;
	int ret = mv_request(path, MV_MSG_CLUSTER, NULL, 0, m, sizeof(*m), &fd, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "mvstat: %s\n", why);
		free(m);
		return 1;
	}
	m->rep.text[sizeof(m->rep.text) - 1] = 0;
	fputs(m->rep.text, stdout);
	free(m);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"socket", required_argument, 0, 's'},   {"watch", no_argument, 0, 'w'},
	    {"json", no_argument, 0, 'j'},           {"prometheus", no_argument, 0, 'p'},
	    {"interval", required_argument, 0, 'i'}, {"count", required_argument, 0, 'n'},
	    {"hops", no_argument, 0, 'H'},           {"cluster", no_argument, 0, 'C'},
	    {"output", required_argument, 0, 'o'},   {"help", no_argument, 0, 'h'},
	    {"version", no_argument, 0, 'V'},        {0, 0, 0, 0},
	};
	char sockbuf[256], why[256];
	const char *path = NULL;
	int watch = 0, json = 0, prom = 0, hops = 0, cluster = 0, c, count = -1;
	double interval = 1.0;

	while ((c = getopt_long(argc, argv, "s:wjpi:n:o:hV", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			path = optarg;
			break;
		case 'w':
			watch = 1;
			break;
		case 'j':
			json = 1;
			break;
		case 'p':
			prom = 1;
			break;
		case 'i':
			interval = atof(optarg);
			break;
		case 'n':
			count = atoi(optarg);
			break;
		case 'H':
			hops = 1;
			break;
		case 'C':
			cluster = 1;
			break;
		case 'o':
			out_path = optarg;
			break;
		case 'V':
			printf("mvstat %s\n", MVC_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "mvstat: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (out_path && !json && !prom) {
		fprintf(stderr, "mvstat: --output goes with --json or --prometheus\n");
		return 2;
	}
	if (interval <= 0 || interval > 3600) {
		fprintf(stderr, "mvstat: --interval %g: give seconds in (0, 3600]\n", interval);
		return 2;
	}
	if (!path)
		path = mv_default_socket(sockbuf, sizeof(sockbuf));
	if (cluster)
		return print_cluster(path);

	size_t size = 0;
	int fd = fetch_segment(path, &size, why, sizeof(why));
	struct view v;
	if (fd < 0 || map_view(fd, size, &v, why, sizeof(why))) {
		fprintf(stderr, "mvstat: %s\n", why);
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	struct snap *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
	int tty = isatty(1);
	struct timespec ts = {(time_t)interval, (long)((interval - (time_t)interval) * 1e9)};
	if (!a || !b)
		return 1;
	take(&v, a);
	do {
		nanosleep(&ts, NULL);
		take(&v, b);
		if (json || prom) {
			FILE *f = out_open();
			if (!f)
				return 1;
			if (json)
				print_json(f, &v, a, b);
			else
				print_prometheus(f, &v, b);
			if (out_close(f))
				return 1;
		} else {
			if (watch && tty)
				fputs("\033[H\033[2J", stdout); /* redraw in place, like top */
			print_text(stdout, &v, a, b);
			if (hops)
				print_hops(stdout, &v, a, b);
			if (watch && !tty)
				fputs("\n", stdout);
		}
		fflush(stdout);
		struct snap *t = a;
		a = b;
		b = t;
		if (count > 0)
			count--;
	} while (watch && !stop && count != 0 && !strcmp(state(&v), "running"));
	/* A mover that went away ends the watch with its state said once more. */
	if (watch && strcmp(state(&v), "running"))
		fprintf(stdout, "mover %016" PRIx64 " is %s\n", v.h->mover_id, state(&v));
	int ret = strcmp(state(&v), "running") ? 3 : 0;
	free(a);
	free(b);
	return ret;
}
