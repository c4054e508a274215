/* SPDX-License-Identifier: MIT */
/*
 * Latency rows: a round trip of one small write through two movers, beside
 * a direct libfabric ping-pong of the same writes in the same run. Through
 * the mover, the bench's client of A writes size bytes and an immediate to
 * a region of a second client, of B, whose thread (the pong) answers each
 * immediate by writing the same bytes back with the same immediate; the
 * ping times from its submit to the answer's immediate. Both clients poll
 * (mvc_poll) or sleep (mvc_wait). Directly, two endpoints of the provider,
 * each polled by its own thread, do the same with fi_writemsg and
 * FI_REMOTE_CQ_DATA. Every answer is checked: the first word that landed
 * must be the one sent with the immediate (the immediate never overtakes
 * its data), and each row ends by comparing the echoed bytes. Rounds come
 * in pairs of chunks, mover and direct in turns of order; the row's
 * percentiles pool every round of its side. After a configuration's rows,
 * both movers are left idle and their CPU time is read from /proc.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "lat.h"

void pong_fail(struct pong *p, const char *fmt, ...)
{
	va_list ap;

	if (atomic_load(&p->failed))
		return;
	va_start(ap, fmt);
	vsnprintf(p->err, sizeof(p->err), fmt, ap);
	va_end(ap);
	atomic_store(&p->failed, 1);
}

void pin_self(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* ---- through the mover ---- */

int pong_parked(struct pong *p)
{
	if (!atomic_load_explicit(&p->parked, memory_order_acquire))
		return 0;
	/* Blocked, not napping: a pong woken every few tens of microseconds
	 * took the CPU from the one being measured as often. */
	syscall(SYS_futex, &p->parked, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
	return 1;
}

void pong_park(struct pong *p, int parked)
{
	atomic_store_explicit(&p->parked, parked, memory_order_release);
	if (!parked)
		syscall(SYS_futex, &p->parked, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *pong_main(void *arg)
{
	struct pong *p = arg;
	struct mvc_event ev[16];

	pin_self(p->cpu);
	while (!atomic_load_explicit(&p->stop, memory_order_relaxed)) {
		if (pong_parked(p))
			continue;
		int n = atomic_load_explicit(&p->sleep, memory_order_relaxed)
		            ? mvc_wait(p->c, ev, 16, 20)
		            : mvc_poll(p->c, ev, 16);
		if (n < 0) {
			pong_fail(p, "pong: %s", mvc_error(p->c));
			return NULL;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].type == MVC_EV_BATCH && ev[i].status) {
				pong_fail(p, "pong's write failed: %s", ev[i].msg);
				return NULL;
			}
			if (ev[i].type != MVC_EV_IMM)
				continue;
			uint64_t first;
			memcpy(&first, p->mem.addr, 8);
			if ((uint32_t)first != ev[i].imm) {
				pong_fail(p,
				          "immediate %u arrived before its data (the first word "
				          "holds %" PRIu64 ")",
				          ev[i].imm, first);
				return NULL;
			}
			uint64_t size = atomic_load_explicit(&p->size, memory_order_relaxed);
			int ret = mvc_write(p->c, p->mem.region, 0, p->back, LAT_ECHO, size);
			if (!ret)
				ret = mvc_write_imm(p->c, p->back, ev[i].imm);
			while (!ret && (ret = mvc_submit(p->c, ev[i].imm)) == -EAGAIN) {
				struct mvc_event e2[16];
				int k = mvc_poll(p->c, e2, 16);
				for (int j = 0; j < k; j++)
					if (e2[j].type == MVC_EV_BATCH && e2[j].status) {
						pong_fail(p, "pong's write failed: %s", e2[j].msg);
						return NULL;
					}
				ret = k < 0 ? k : -EAGAIN;
				if (ret != -EAGAIN)
					break;
			}
			if (ret) {
				pong_fail(p, "pong's answer: %s", mvc_error(p->c));
				return NULL;
			}
		}
	}
	return NULL;
}

/* One round trip through the mover: microseconds, or < 0 on failure. */
static double mover_round(struct cfg *x, struct lat *L, uint64_t size, int sleep, char *why,
                          size_t whylen)
{
	struct mvc_event ev[16];
	uint64_t seq = ++L->seq;
	uint32_t imm = (uint32_t)seq;

	memcpy(L->mem.addr, &seq, 8);
	double t0 = now_s();
	int ret = mvc_write(x->c, L->mem.region, 0, L->to_pong, 0, size);
	if (!ret)
		ret = mvc_write_imm(x->c, L->to_pong, imm);
	if (!ret)
		ret = mvc_submit(x->c, seq);
	if (ret) {
		snprintf(why, whylen, "ping: %s", mvc_error(x->c));
		return -1;
	}
	for (;;) {
		int n = sleep ? mvc_wait(x->c, ev, 16, 100) : mvc_poll(x->c, ev, 16);
		if (n < 0) {
			snprintf(why, whylen, "ping: %s", mvc_error(x->c));
			return -1;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].type == MVC_EV_BATCH && ev[i].status) {
				snprintf(why, whylen, "ping's write failed: %s", ev[i].msg);
				return -1;
			}
			if (ev[i].type != MVC_EV_IMM)
				continue;
			double us = (now_s() - t0) * 1e6;
			uint64_t first;
			memcpy(&first, (uint8_t *)L->mem.addr + LAT_ECHO, 8);
			if (ev[i].imm != imm || first != seq) {
				snprintf(why, whylen,
				         "answer %u to ping %u, first word %" PRIu64
				         ": out of order, or the immediate overtook its data",
				         ev[i].imm, imm, first);
				return -1;
			}
			return us;
		}
		if (atomic_load(&L->pong.failed)) {
			snprintf(why, whylen, "%s", L->pong.err);
			return -1;
		}
		if (now_s() - t0 > LAT_WAIT_S) {
			snprintf(why, whylen, "no answer to ping %u in %.0f s", imm, LAT_WAIT_S);
			return -1;
		}
	}
}

/* ---- set-up ---- */

/* The pong's CPU: the first one after everything plan_cpus() gave out. */
int spare_cpu(const struct cfg *x)
{
	int base = navail >= (int)(2 * x->n + 2) ? 1 : 0;
	int i = base + 2 * (int)x->n + 1;

	return x->cpu.pinned && i < navail ? avail_cpus[i] : -1;
}

/* Lets client `from` write into `region` of client `owner`: adds owner's
 * mover as a peer of from's and imports the region (the two blobs an
 * application would carry between hosts). */
int reach_region(struct mvc *from, struct mvc *owner, uint32_t region, uint32_t *handle)
{
	uint8_t addr[MVC_BLOB_MAX], blob[MVC_BLOB_MAX];
	size_t alen = sizeof(addr), blen = sizeof(blob);
	uint32_t peer;
	int ret = mvc_address(owner, addr, &alen);

	if (!ret)
		ret = mvc_region_blob(owner, region, blob, &blen);
	if (!ret)
		ret = mvc_peer_add(from, addr, alen, &peer);
	if (!ret)
		ret = mvc_import(from, peer, blob, blen, handle);
	return ret;
}

static int lat_up(struct cfg *x, struct lat *L, char *why, size_t whylen)
{
	struct pong *p = &L->pong;
	int ret;

	memset(L, 0, sizeof(*L));
	ret = mvc_connect(&p->c, mover_b.sock);
	if (ret) {
		snprintf(why, whylen, "pong: connecting to mover B: %s", strerror(-ret));
		return ret;
	}
	/* Each client reaches the other's region. */
	ret = mvc_alloc(x->c, LAT_REGION, &L->mem);
	if (!ret)
		ret = mvc_alloc(p->c, LAT_REGION, &p->mem);
	if (ret) {
		snprintf(why, whylen, "latency regions: %s", mvc_error(ret ? x->c : p->c));
		return ret;
	}
	if ((ret = reach_region(x->c, p->c, p->mem.region, &L->to_pong))) {
		snprintf(why, whylen, "ping: reaching the pong: %s", mvc_error(x->c));
		return ret;
	}
	if ((ret = reach_region(p->c, x->c, L->mem.region, &p->back))) {
		snprintf(why, whylen, "pong: reaching the ping: %s", mvc_error(p->c));
		return ret;
	}
	/* A client of A that stops reading its completions (the stalled row). */
	ret = mvc_connect(&L->stalled, mover_a.sock);
	if (!ret)
		ret = mvc_alloc(L->stalled, LAT_REGION, &L->smem);
	if (!ret)
		ret = reach_region(L->stalled, p->c, p->mem.region, &L->sto);
	if (ret) {
		snprintf(why, whylen, "the stalled client: %s",
		         L->stalled ? mvc_error(L->stalled) : strerror(-ret));
		return ret;
	}
	/* The hops, where the movers keep them (an older mover, run with
	 * --mover to compare, may not: its rows go without). */
	char whyh[200];
	if (movers_stats_open(&L->ms, whyh, sizeof(whyh)))
		printf("   (no hop histograms: %s)\n", whyh);
	p->cpu = spare_cpu(x);
	if (pthread_create(&p->thread, NULL, pong_main, p)) {
		snprintf(why, whylen, "pong thread: %s", strerror(errno));
		return -EAGAIN;
	}
	p->made = 1;

	ret = dside_open(x, &L->dping, 0x1a70, why, whylen);
	if (ret)
		return ret;
	ret = dside_open(x, &L->dpong, 0x1a71, why, whylen);
	if (!ret)
		ret = dside_pair(&L->dping, &L->dpong, why, whylen);
	if (ret)
		return ret;
	L->dpong.cpu = p->cpu;
	if (pthread_create(&L->dpong.thread, NULL, dpong_main, &L->dpong)) {
		snprintf(why, whylen, "direct pong thread: %s", strerror(errno));
		return -EAGAIN;
	}
	L->dpong.made = 1;
	return 0;
}

static void lat_down(struct cfg *x, struct lat *L)
{
	struct pong *ps[2] = {&L->pong, &L->dpong};

	for (int i = 0; i < 2; i++) {
		atomic_store(&ps[i]->stop, 1);
		if (ps[i]->made)
			pthread_join(ps[i]->thread, NULL);
		ps[i]->made = 0;
	}
	dside_close(&L->dpong);
	dside_close(&L->dping);
	movers_stats_close(&L->ms);
	if (L->stalled) {
		mvc_disconnect(L->stalled); /* its region goes with it */
		L->stalled = NULL;
	}
	if (L->pong.c) {
		if (L->pong.mem.addr)
			mvc_free(L->pong.c, &L->pong.mem);
		mvc_disconnect(L->pong.c);
	}
	if (L->mem.addr) {
		/* Drain the last completions before the region goes. */
		struct mvc_event ev[16];
		double end = now_s() + 2;
		while (mvc_inflight(x->c) && now_s() < end)
			mvc_wait(x->c, ev, 16, 10);
		mvc_free(x->c, &L->mem);
	}
}

/* Fills the stalled client's completion ring and more: submits until the
 * mover refuses, and never polls. */
static uint64_t stall_client(struct lat *L)
{
	uint64_t n = 0;

	for (;;) {
		int ret = mvc_write(L->stalled, L->smem.region, 0, L->sto, LAT_ECHO, 64);
		if (!ret)
			ret = mvc_submit(L->stalled, n);
		if (ret) {
			mvc_abort(L->stalled);
			return n;
		}
		n++;
	}
}

/* ---- where the time went: the movers' hops, the client's wait ---- */

struct hops {
	struct hop_counts c;            /* both movers, every shard */
	uint64_t wait[MVC_LAT_BUCKETS]; /* the ping's immediates in its ring */
};

static void hops_take(struct cfg *x, const struct lat *L, struct hops *o)
{
	struct mvc_latency ml;

	hop_counts_take(&L->ms, &o->c);
	memset(o->wait, 0, sizeof(o->wait));
	if (!mvc_latency(x->c, &ml))
		memcpy(o->wait, ml.hist, sizeof(o->wait));
}

/* The row's median and 99th percentile per hop, us, from the counts between two takes; the
 * movers publish their counters every 10 ms, so the later take waits that
 * long first. < 0: the hop saw nothing. */
static void hops_row(struct cfg *x, const struct lat *L, const struct hops *before, struct lrow *r)
{
	struct hops after;
	uint64_t d[MV_HOP_BUCKETS], n = 0;

	usleep(25000);
	hops_take(x, L, &after);
	hop_counts_pct(&before->c, &after.c, r->hop_p50, r->hop_p99);
	for (int b = 0; b < MV_HOP_BUCKETS; b++)
		n += d[b] = after.wait[b] - before->wait[b];
	r->hop_p50[MV_HOPS] = n ? hop_quantile(d, MV_HOP_BUCKETS, 0.5) / 1e3 : -1;
	r->hop_p99[MV_HOPS] = n ? hop_quantile(d, MV_HOP_BUCKETS, 0.99) / 1e3 : -1;
	for (int m = 0; m < 2; m++)
		r->sleeps[m] = after.c.sleeps[m] - before->c.sleeps[m];
}

/* ---- rows ---- */

static double pct(const double *sorted, int n, double q)
{
	int i = (int)(q * (n - 1) + 0.5);

	return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* A row's percentiles from its rounds. */
static void lat_stats(double *v, int n, double *p50, double *p99, double *min)
{
	qsort(v, (size_t)n, sizeof(*v), mv_cmp_double);
	*p50 = pct(v, n, 0.5);
	*p99 = pct(v, n, 0.99);
	*min = v[0];
}

static int echo_check(const uint8_t *mem, uint64_t size, char *why, size_t whylen)
{
	if (memcmp(mem, mem + LAT_ECHO, size)) {
		snprintf(why, whylen, "the echoed %" PRIu64 " bytes differ from those sent", size);
		return -EIO;
	}
	return 0;
}

static void lat_row(struct cfg *x, struct lat *L, uint64_t size, int sleep, int stalled, int gap_us,
                    struct lrow *r)
{
	const struct opts *o = x->o;
	int per = LAT_PER, reps = o->reps, total = per * reps;
	double *mv = calloc((size_t)total, sizeof(double));
	double *dr = calloc((size_t)total, sizeof(double));
	double *dp = calloc((size_t)total, sizeof(double));
	int nm = 0, nd = 0, np = 0;
	/* Where the shards post with delivery-complete (tcp), the direct side
	 * runs twice: with the same flags (the baseline the bars use), and
	 * plain, what a program that never asks whether its write landed
	 * would post. */
	int nsides = L->dping.fab.dc_flag ? 3 : 2;

	memset(r, 0, sizeof(*r));
	r->prov = x->prov;
	r->shards = x->n;
	r->size = size;
	r->sleep = sleep;
	r->stalled = stalled;
	r->gap_us = gap_us;
	if (!mv || !dr || !dp) {
		r->failed = 1;
		snprintf(r->err, sizeof(r->err), "no memory");
		goto out;
	}
	atomic_store(&L->pong.size, size);
	atomic_store(&L->pong.sleep, sleep);
	atomic_store(&L->dpong.size, size);
	/* The ping's source: a pattern under the sequence word. */
	for (uint64_t i = 8; i < size; i++)
		((uint8_t *)L->mem.addr)[i] = (uint8_t)mix(i ^ size);
	for (uint64_t i = 8; i < size; i++)
		L->dping.buf[i] = (uint8_t)mix(i ^ size ^ 1);
	/* Warm-up: connections, caches, the movers' spin. */
	for (int i = 0; i < 50; i++) {
		if (mover_round(x, L, size, sleep, r->err, sizeof(r->err)) < 0 ||
		    direct_round(L, size, 1, r->err, sizeof(r->err)) < 0 ||
		    (nsides == 3 && direct_round(L, size, 0, r->err, sizeof(r->err)) < 0)) {
			r->failed = 1;
			goto out;
		}
	}
	struct hops before;
	hops_take(x, L, &before);
	for (int rep = 0; rep < reps; rep++) {
		for (int k = 0; k < nsides; k++) {
			/* Each rep starts with the next side: any effect of the
			 * order falls on every side alike. */
			int side = (k + rep) % nsides, mover = side == 0;
			/* Only this side's pong polls (pong_parked()); the
			 * other wakes in time for its side's first round:
			 * uncounted (back to back) or after the gap. */
			pong_park(&L->pong, !mover);
			pong_park(&L->dpong, mover);
			/* Each chunk starts after the other side's: its first
			 * rounds find the movers idle for that long. Back to
			 * back rows measure traffic that keeps coming, so those
			 * rounds are not counted; the gap rows measure the
			 * other case, each round after a pause. */
			for (int i = gap_us ? 0 : -LAT_CHUNK_WARM; i < per; i++) {
				if (gap_us)
					usleep((useconds_t)gap_us);
				double us =
				    mover
				        ? mover_round(x, L, size, sleep, r->err, sizeof(r->err))
				        : direct_round(L, size, side == 1, r->err, sizeof(r->err));
				if (us < 0) {
					r->failed = 1;
					goto out;
				}
				if (i < 0)
					continue;
				if (mover)
					mv[nm++] = us;
				else if (side == 1)
					dr[nd++] = us;
				else
					dp[np++] = us;
			}
		}
	}
	if (echo_check(L->mem.addr, size, r->err, sizeof(r->err)) ||
	    echo_check(L->dping.buf, size, r->err, sizeof(r->err))) {
		r->failed = 1;
		goto out;
	}
	hops_row(x, L, &before, r);
	r->rounds = nm;
	lat_stats(mv, nm, &r->m_p50, &r->m_p99, &r->m_min);
	lat_stats(dr, nd, &r->d_p50, &r->d_p99, &r->d_min);
	if (np)
		lat_stats(dp, np, &r->dp_p50, &r->dp_p99, &r->dp_min);
	r->ratio = r->m_p50 / r->d_p50;
	/* The bars of issue 14, on the 16-core device; the same rows run
	 * here and are only quoted. */
	int tcp = !strcmp(x->fab, "tcp");
	double p50_bar =
	    sleep ? (tcp ? 2 * r->d_p50 + 25 : r->d_p50 + 25) : (tcp ? 2 * r->d_p50 : r->d_p50 + 5);
	r->bar_p50 = p50_bar;
	r->pass = r->m_p50 <= p50_bar && r->m_p99 <= 3 * r->m_p50;
out:
	/* Both pongs poll again: the next row's warm-up has both sides. */
	pong_park(&L->pong, 0);
	pong_park(&L->dpong, 0);
	free(mv);
	free(dr);
	free(dp);
}

static const char *others(const struct lrow *r)
{
	return r->stalled ? "stalled" : r->gap_us ? "gap 1ms" : "-";
}

void lat_print_head(void)
{
	printf("%-5s %8s %-6s %-7s | %9s %9s %9s | %9s %9s | %9s | %7s  %-16s\n", "prov", "size",
	       "wait", "others", "mover p50", "p99", "min", "direct p50", "p99", "plain p50", "m/d",
	       "bar (p50, p99)");
}

void lat_print_row(const struct lrow *r)
{
	char sz[32];

	size_str(r->size, sz, sizeof(sz));
	if (r->failed) {
		printf("%-5s %8s %-6s %-7s | FAILED: %s\n", r->prov, sz,
		       r->sleep ? "sleep" : "poll", others(r), r->err);
		fflush(stdout);
		return;
	}
	char plain[24];
	if (r->dp_p50 > 0)
		snprintf(plain, sizeof(plain), "%7.1f us", r->dp_p50);
	else
		snprintf(plain, sizeof(plain), "%10s", "(same)");
	printf("%-5s %8s %-6s %-7s | %7.1f us %7.1f us %7.1f us | %7.1f us %7.1f us | %s | %7.2f  "
	       "<=%.1f us, <=3x %s\n",
	       r->prov, sz, r->sleep ? "sleep" : "poll", others(r), r->m_p50, r->m_p99, r->m_min,
	       r->d_p50, r->d_p99, plain, r->ratio, r->bar_p50, r->pass ? "ok" : "MISS");
	for (int q = 0; q < 2; q++) {
		const double *v = q ? r->hop_p99 : r->hop_p50;
		printf("   hops %s (us, both movers):", q ? "p99" : "p50");
		for (int h = 0; h <= MV_HOPS; h++) {
			const char *name = h < MV_HOPS ? hop_name(h) : "client wait";
			if (v[h] < 0)
				printf(" %s -", name);
			else
				printf(" %s %.1f", name, v[h]);
			printf(h < MV_HOPS ? "," : "");
		}
		if (!q)
			printf("; shard sleeps A %" PRIu64 ", B %" PRIu64, r->sleeps[0],
			       r->sleeps[1]);
		printf("\n");
	}
	fflush(stdout);
}

void lat_print_bench(const struct lrow *r)
{
	printf("BENCH latency prov=%s shards=%u size=%" PRIu64 " wait=%s stalled=%d gap_us=%d "
	       "rounds=%d "
	       "mover_p50_us=%.2f mover_p99_us=%.2f mover_min_us=%.2f direct_p50_us=%.2f "
	       "direct_p99_us=%.2f direct_min_us=%.2f direct_plain_p50_us=%.2f "
	       "direct_plain_p99_us=%.2f ratio=%.4f bar_p50_us=%.2f pass=%d failed=%d",
	       r->prov, r->shards, r->size, r->sleep ? "sleep" : "poll", r->stalled, r->gap_us,
	       r->rounds, r->m_p50, r->m_p99, r->m_min, r->d_p50, r->d_p99, r->d_min, r->dp_p50,
	       r->dp_p99, r->ratio, r->bar_p50, r->pass, r->failed);
	if (!r->failed)
		printf(" sleeps_a=%" PRIu64 " sleeps_b=%" PRIu64, r->sleeps[0], r->sleeps[1]);
	for (int h = 0; h <= MV_HOPS && !r->failed; h++)
		printf(" hop_%s_p50_us=%.2f", h < MV_HOPS ? hop_name(h) : "wait", r->hop_p50[h]);
	for (int h = 0; h <= MV_HOPS && !r->failed; h++)
		printf(" hop_%s_p99_us=%.2f", h < MV_HOPS ? hop_name(h) : "wait", r->hop_p99[h]);
	if (r->failed)
		printf(" error=\"%s\"", r->err);
	printf("\n");
}

/* The CPU seconds (utime + stime) a /proc stat file says, and the command
 * name in it when name is not NULL; < 0 when it cannot be read. */
static double stat_cpu_s(const char *path, char *name, size_t namelen)
{
	char buf[1024];
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* Fields after the command, which may hold spaces: from the last ')'. */
	char *l = strchr(buf, '('), *r = strrchr(buf, ')');
	unsigned long ut, st;
	if (!l || !r || r < l ||
	    sscanf(r + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	if (name)
		snprintf(name, namelen, "%.*s", (int)(r - l - 1), l + 1);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds a process has used (utime + stime), or < 0. */
static double proc_cpu_s(int pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	return stat_cpu_s(path, NULL, 0);
}

/* A process's CPU seconds by thread name ("mv-shard0", "mover", ...): fills
 * up to max names, returns how many; -1 when the process is gone. */
#define IDLE_THREADS 16
struct tcpu {
	char name[20];
	double s;
};

static int threads_cpu(int pid, struct tcpu *t, int max)
{
	char path[64];
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));) {
		char sp[96], name[20];
		if (e->d_name[0] == '.')
			continue;
		snprintf(sp, sizeof(sp), "%s/%s/stat", path, e->d_name);
		double cpu = stat_cpu_s(sp, name, sizeof(name));
		if (cpu < 0)
			continue; /* the thread ended */
		int i = 0;
		while (i < n && strcmp(t[i].name, name))
			i++;
		if (i == n) {
			if (n == max)
				continue;
			memcpy(t[n].name, name, sizeof(name));
			t[n++].s = 0;
		}
		t[i].s += cpu;
	}
	closedir(d);
	return n;
}

/* Prints, after "mover X p%", which threads used that CPU: " (mv-shard0
 * 0.40%, mover 0.10%)", those that used any; "ended" the rest of pct, the
 * time of threads that ended meanwhile. */
static void print_threads(const struct tcpu *t0, int n0, const struct tcpu *t1, int n1, double secs,
                          double pct)
{
	const char *sep = " (";
	double rest = pct;

	for (int i = 0; i < n1; i++) {
		double before = 0;
		for (int j = 0; j < n0; j++)
			if (!strcmp(t0[j].name, t1[i].name))
				before = t0[j].s;
		if (t1[i].s - before <= 0)
			continue;
		printf("%s%s %.2f%%", sep, t1[i].name, (t1[i].s - before) / secs * 100);
		rest -= (t1[i].s - before) / secs * 100;
		sep = ", ";
	}
	if (rest > 0.005) {
		printf("%sended %.2f%%", sep, rest);
		sep = ", ";
	}
	if (*sep == ',')
		printf(")");
}

struct lrow lat_done[LAT_ROWS_MAX];
int nlat_done;
struct idle_cpu idle_done[IDLE_MAX];
int nidle_done;

int lat_rows(struct cfg *x)
{
	const struct opts *o = x->o;
	static struct lat L;
	struct lrow *rows = lat_done;
	int *nrows = &nlat_done, first = nlat_done;
	struct idle_cpu *idle = &idle_done[nidle_done < IDLE_MAX - 1 ? nidle_done++ : nidle_done];
	char why[200];

	if (nlat_done + 2 * o->nlat + 4 > LAT_ROWS_MAX)
		die("too many latency rows: give fewer --lat-sizes, providers or shard counts");

	if (lat_up(x, &L, why, sizeof(why))) {
		struct lrow *r = &rows[(*nrows)++];
		memset(r, 0, sizeof(*r));
		r->prov = x->prov;
		r->shards = x->n;
		r->failed = 1;
		snprintf(r->err, sizeof(r->err), "%s", why);
		lat_print_row(r);
		lat_down(x, &L);
		return -1;
	}
	lat_print_head();
	for (int w = 0; w < 2; w++)
		for (int i = 0; i < o->nlat; i++) {
			struct lrow *r = &rows[(*nrows)++];
			lat_row(x, &L, o->lat[i], w, 0, 0, r);
			lat_print_row(r);
		}
	/* Rounds 1 ms apart: the movers' shards would sleep between them but
	 * for their adaptive spin. */
	for (int w = 0; w < 2; w++) {
		struct lrow *r = &rows[(*nrows)++];
		lat_row(x, &L, 64, w, 0, LAT_GAP_US, r);
		lat_print_row(r);
	}
	/* A client of A that never reads its completions, beside the ping. */
	uint64_t stuck = stall_client(&L);
	for (int w = 0; w < 2; w++) {
		struct lrow *r = &rows[(*nrows)++];
		lat_row(x, &L, 64, w, 1, 0, r);
		lat_print_row(r);
	}
	printf("   (the stalled client of A submitted %" PRIu64
	       " batches, read none of their completions)\n",
	       stuck);
	lat_down(x, &L);

	/* Idle: nothing connected but the bench's own client. */
	double secs = o->quick ? 3.0 : 10.0;
	int pa = atomic_load(&mover_a.pid), pb = atomic_load(&mover_b.pid);
	struct tcpu ta0[IDLE_THREADS], tb0[IDLE_THREADS], ta1[IDLE_THREADS], tb1[IDLE_THREADS];
	/* Each process, then its threads, at both ends: the same window. */
	double a0 = proc_cpu_s(pa), b0 = proc_cpu_s(pb);
	int na0 = threads_cpu(pa, ta0, IDLE_THREADS), nb0 = threads_cpu(pb, tb0, IDLE_THREADS);
	usleep((useconds_t)(secs * 1e6));
	double a1 = proc_cpu_s(pa), b1 = proc_cpu_s(pb);
	int na1 = threads_cpu(pa, ta1, IDLE_THREADS), nb1 = threads_cpu(pb, tb1, IDLE_THREADS);
	idle->prov = x->prov;
	idle->shards = x->n;
	idle->secs = secs;
	idle->a_pct = a0 < 0 || a1 < 0 ? -1 : (a1 - a0) / secs * 100;
	idle->b_pct = b0 < 0 || b1 < 0 ? -1 : (b1 - b0) / secs * 100;
	idle->pass = idle->a_pct >= 0 && idle->a_pct < 1 && idle->b_pct >= 0 && idle->b_pct < 1;
	printf("   idle after the rows, %.0f s: mover A %.2f%%, mover B %.2f%% of a core "
	       "(bar < 1%%: %s)\n",
	       secs, idle->a_pct, idle->b_pct, idle->pass ? "ok" : "MISS");
	/* By thread: which of them an idle mover's CPU went to. */
	printf("     mover A %.2f%%", idle->a_pct);
	if (na0 >= 0 && na1 >= 0)
		print_threads(ta0, na0, ta1, na1, secs, idle->a_pct);
	printf(", mover B %.2f%%", idle->b_pct);
	if (nb0 >= 0 && nb1 >= 0)
		print_threads(tb0, nb0, tb1, nb1, secs, idle->b_pct);
	printf("\n");
	fflush(stdout);
	for (int i = first; i < *nrows; i++)
		if (rows[i].failed)
			return -1;
	return 0;
}

void idle_print_bench(const struct idle_cpu *c)
{
	printf("BENCH idle prov=%s shards=%u seconds=%.1f mover_a_cpu_pct=%.3f "
	       "mover_b_cpu_pct=%.3f pass=%d\n",
	       c->prov, c->shards, c->secs, c->a_pct, c->b_pct, c->pass);
}
