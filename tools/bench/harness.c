/* SPDX-License-Identifier: MIT */
/*
 * The harness of mvbench: one configuration (a provider and a shard count)
 * set up and torn down, movers A and B with a shard per planned CPU, the
 * client of A with its region, the receiver's region on B and the direct
 * endpoints; each row measured as pairs of runs, mover and direct, each
 * pair in the other order from the last, so whatever the order itself does
 * falls on both sides; and the row's figures: medians, extremes, the median
 * over pairs of mover/direct and its quartiles, printed as a table row, a
 * BENCH line and a CSV line.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include "mv_huge.h"

uint64_t window_bytes = WINDOW_BYTES;
const char *mover_extra[MOVER_EXTRA_MAX];
int nmover_extra;

const char *size_str(uint64_t s, char *buf, size_t len)
{
	if (s >= (1ull << 30) && s % (1ull << 30) == 0)
		snprintf(buf, len, "%" PRIu64 " GiB", s >> 30);
	else if (s >= (1u << 20) && s % (1u << 20) == 0)
		snprintf(buf, len, "%" PRIu64 " MiB", s >> 20);
	else if (s >= 1024 && s % 1024 == 0)
		snprintf(buf, len, "%" PRIu64 " KiB", s >> 10);
	else
		snprintf(buf, len, "%" PRIu64 " B", s);
	return buf;
}

/* ---- CPUs ---- */

int avail_cpus[1024], navail;

/* Each busy thread its own core, as on separate hosts: A's shards, B's
 * shards (and the direct threads standing in for them), then the client.
 * The first allowed CPU stays free for the kernel when there is room.
 * Without room for all, nobody is pinned and the scheduler shares. */
static void plan_cpus(uint32_t n, struct plan *p)
{
	int base = navail >= (int)(2 * n + 2) ? 1 : 0;
	size_t la = 0, lb = 0;

	memset(p, 0, sizeof(*p));
	p->pinned = navail - base >= (int)(2 * n + 1);
	p->client = p->pinned ? avail_cpus[base + 2 * n] : -1;
	for (uint32_t i = 0; i < n; i++) {
		p->a[i] = p->pinned ? avail_cpus[base + i] : -1;
		p->b[i] = p->pinned ? avail_cpus[base + n + i] : -1;
		la += (size_t)snprintf(p->alist + la, sizeof(p->alist) - la, "%s%d", i ? "," : "",
		                       p->a[i]);
		lb += (size_t)snprintf(p->blist + lb, sizeof(p->blist) - lb, "%s%d", i ? "," : "",
		                       p->b[i]);
		if (la >= sizeof(p->alist) - 8 || lb >= sizeof(p->blist) - 8)
			break;
	}
}

static void set_main_affinity(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	if (cpu >= 0) {
		CPU_SET(cpu, &set);
	} else {
		for (int i = 0; i < navail; i++)
			CPU_SET(avail_cpus[i], &set);
	}
	sched_setaffinity(0, sizeof(set), &set);
}

/* ---- a row: pairs of runs ---- */

static double rate(const struct meas *m, const char *what)
{
	if (m->bytes == 0 || m->secs <= 0)
		die("%s: nothing completed", what);
	return (double)m->bytes / m->secs;
}

void meas_fail(struct meas *m, const char *fmt, ...)
{
	va_list ap;

	if (m->failed)
		return; /* the first cause is the one to tell */
	m->failed = 1;
	va_start(ap, fmt);
	vsnprintf(m->err, sizeof(m->err), fmt, ap);
	va_end(ap);
}

/* A run that failed ends its row: the row says why, and the bench goes on
 * with the next one. */
static int row_failed(struct row *r, const struct meas *m)
{
	if (!m->failed)
		return 0;
	r->failed = 1;
	snprintf(r->err, sizeof(r->err), "%s", m->err);
	return 1;
}

void pairs_run(struct cfg *x, const struct rowkind *rk, const struct geom *gp, struct row *r,
               int first)
{
	const struct opts *o = x->o;
	const struct geom g = *gp;
	uint64_t size = g.size;
	double mv[64], dr[64], df[64], pr[64], pf[64];
	struct meas m, d;
	char sz[32];

	memset(r, 0, sizeof(*r));
	r->prov = x->prov;
	r->shards = x->n;
	r->size = size;
	r->reps = o->reps;

	/* Warm-up, time-bounded: connections (tcp;ofi_rxm connects on the
	 * first write) once per configuration, then the pace to size the
	 * measured runs by, so that the faster side takes --seconds. */
	if (first) {
		rk->mover(x, &g, UINT64_MAX, x->warm_s, &m);
		if (row_failed(r, &m))
			return;
		rk->direct(x, &g, UINT64_MAX, x->warm_s, 1, NULL, &d);
	}
	rk->mover(x, &g, UINT64_MAX, x->warm_s, &m);
	if (row_failed(r, &m))
		return;
	rk->direct(x, &g, UINT64_MAX, x->warm_s, 1, NULL, &d);
	double rm = rate(&m, "mover warm-up"), rd = rate(&d, "direct warm-up");
	double fast = rm > rd ? rm : rd;
	uint64_t batch = (uint64_t)g.k * g.size;
	uint64_t nb = (uint64_t)(fast * o->seconds / (double)batch) + 1;
	if (nb < 2ull * g.window)
		nb = 2ull * g.window;
	/* A side this much slower than the other is cut short (and flagged):
	 * its rate still counts, and a broken mover cannot stretch the run. */
	double limit = 3 * o->seconds + 0.5;

	book_mover.n = book_direct.n = 0;
	book_mover.secs = book_direct.secs = 0;
	for (int i = 0; i < o->reps; i++) {
		/* Odd reps run direct first: whatever the order itself does
		 * (the caches and page tables the run before left warm, a host
		 * that speeds up or slows down over the row) falls on both. */
		if (i % 2)
			rk->direct(x, &g, nb, limit, 1, &book_direct, &d);
		rk->mover(x, &g, nb, limit, &m);
		if (row_failed(r, &m))
			return;
		if (i % 2 == 0)
			rk->direct(x, &g, nb, limit, 1, &book_direct, &d);
		mv[i] = rate(&m, "through the mover");
		dr[i] = rate(&d, "direct");
		pr[i] = mv[i] / dr[i];
		r->cut |= m.cut | d.cut;
		if (o->verbose)
			printf("   rep %d: %s mover %.3f GB/s (%" PRIu64 " B in %.3f s%s), "
			       "direct %.3f GB/s (%" PRIu64 " B in %.3f s%s)\n",
			       i, size_str(size, sz, sizeof(sz)), mv[i] / 1e9, m.bytes, m.secs,
			       m.cut ? ", cut" : "", dr[i] / 1e9, d.bytes, d.secs,
			       d.cut ? ", cut" : "");
		if (!rk->uncoupled || !g.striped)
			continue;
		/* Uncoupled: each thread runs its own stripes, none waits for
		 * another's; shown beside the row, not held to the bar. */
		rk->direct(x, &g, nb, limit, 0, NULL, &d);
		df[i] = rate(&d, "direct, uncoupled");
		pf[i] = mv[i] / df[i];
		if (o->verbose)
			printf("   rep %d: %s direct uncoupled %.3f GB/s (%" PRIu64
			       " B in %.3f s%s)\n",
			       i, size_str(size, sz, sizeof(sz)), df[i] / 1e9, d.bytes, d.secs,
			       d.cut ? ", cut" : "");
	}
	/* median() sorts in place: the ends are then the extremes. */
	r->m_med = median(mv, o->reps);
	r->d_med = median(dr, o->reps);
	r->m_min = mv[0];
	r->m_max = mv[o->reps - 1];
	r->d_min = dr[0];
	r->d_max = dr[o->reps - 1];
	/* Pairs of neighbouring runs share the machine's state of the
	 * moment (a shared host drifts between speeds over seconds), so the
	 * median of their ratios is the steadier estimate of the cost. */
	r->ratio = median(pr, o->reps);
	/* The middle half of the pairs: how far one pair can be trusted. */
	r->ratio_q1 = pr[o->reps / 4];
	r->ratio_q3 = pr[(3 * o->reps) / 4];
	if (o->verbose)
		printf(
		    "   pairs mover/direct: lowest %.3f, quartiles %.3f %.3f %.3f, highest %.3f\n",
		    pr[0], r->ratio_q1, r->ratio, r->ratio_q3, pr[o->reps - 1]);
	r->ratio_med = r->m_med / r->d_med;
	r->f_med = rk->uncoupled && g.striped ? median(df, o->reps) : 0;
	r->f_ratio = rk->uncoupled && g.striped ? median(pf, o->reps) : 0;
}

/* ---- reports ---- */

static void print_head(void)
{
	printf("%-5s %6s %8s | %9s %8s %9s | %9s %8s %9s | %6s  %-12s %-13s | %s\n", "prov",
	       "shards", "size", "mover", "", "", "direct", "", "", "ratio", "bar", "range m/d",
	       "uncoupled");
	printf("%-5s %6s %8s | %9s %8s %9s | %9s %8s %9s | %6s  %-12s %-13s | %s\n", "", "", "",
	       "Gbit/s", "GB/s", "Mmsg/s", "Gbit/s", "GB/s", "Mmsg/s", "m/d", "", "(max-min)/med",
	       "GB/s  m/d");
}

static void print_row(const struct row *r)
{
	char sz[32], bar[32], unc[32];
	double s = (double)r->size;

	if (r->pages)
		snprintf(sz, sizeof(sz), "%u pg", r->pages);
	else
		size_str(r->size, sz, sizeof(sz));
	if (r->failed) {
		printf("%-5s %6u %8s | FAILED: %s\n", r->prov, r->shards, sz, r->err);
		fflush(stdout);
		return;
	}
	if (r->bar > 0)
		snprintf(bar, sizeof(bar), ">=%.2f %s", r->bar, r->ratio >= r->bar ? "ok" : "LOW");
	else
		snprintf(bar, sizeof(bar), "-");
	if (r->pages)
		snprintf(unc, sizeof(unc), "vs 4K %5.3f %5.3f %s", r->vs_contig, r->d_vs_contig,
		         r->vs_contig >= SC_BAR_CONTIG ? "ok" : "LOW");
	else if (r->f_med > 0)
		snprintf(unc, sizeof(unc), "%6.2f %5.3f", r->f_med / 1e9, r->f_ratio);
	else
		snprintf(unc, sizeof(unc), "%6s %5s", "-", "-");
	printf("%-5s %6u %8s | %9.3f %8.3f %9.5f | %9.3f %8.3f %9.5f | %6.3f%s %-12s %3.0f%% / "
	       "%3.0f%%    | %s\n",
	       r->prov, r->shards, sz, r->m_med * 8 / 1e9, r->m_med / 1e9, r->m_med / s / 1e6,
	       r->d_med * 8 / 1e9, r->d_med / 1e9, r->d_med / s / 1e6, r->ratio, r->cut ? "*" : " ",
	       bar, (r->m_max - r->m_min) / r->m_med * 100, (r->d_max - r->d_min) / r->d_med * 100,
	       unc);
	fflush(stdout);
}

void print_bench(const struct row *r, double seconds)
{
	double s = (double)r->size;

	printf("BENCH mvbench prov=%s shards=%u size=%" PRIu64 " reps=%d seconds=%.2f "
	       "mover_gbps=%.4f mover_gBps=%.4f mover_mmsgs=%.6f direct_gbps=%.4f direct_gBps=%.4f "
	       "direct_mmsgs=%.6f ratio=%.4f bar=%.2f pass=%d mover_min_gbps=%.4f "
	       "mover_max_gbps=%.4f direct_min_gbps=%.4f direct_max_gbps=%.4f cut=%d "
	       "uncoupled_gbps=%.4f uncoupled_ratio=%.4f ratio_of_medians=%.4f ratio_q1=%.4f "
	       "ratio_q3=%.4f",
	       r->prov, r->shards, r->size, r->reps, seconds, r->m_med * 8 / 1e9, r->m_med / 1e9,
	       r->m_med / s / 1e6, r->d_med * 8 / 1e9, r->d_med / 1e9, r->d_med / s / 1e6, r->ratio,
	       r->bar, r->pass, r->m_min * 8 / 1e9, r->m_max * 8 / 1e9, r->d_min * 8 / 1e9,
	       r->d_max * 8 / 1e9, r->cut, r->f_med * 8 / 1e9, r->f_ratio, r->ratio_med,
	       r->ratio_q1, r->ratio_q3);
	printf(" backing=%s", backing_name(r->backing));
	if (r->pages) {
		printf(" pattern=scattered pages=%u vs_contig=%.4f direct_vs_contig=%.4f "
		       "vs_contig_4k=%.4f direct_vs_contig_4k=%.4f failed=%d",
		       r->pages, r->vs_contig, r->d_vs_contig, r->vs_contig_4k, r->d_vs_contig_4k,
		       r->failed);
		if (r->failed)
			printf(" error=\"%s\"", r->err);
	}
	printf("\n");
}

static void csv_row(FILE *f, const struct row *r, double seconds)
{
	double s = (double)r->size;

	if (!f)
		return;
	fprintf(f,
	        "%s,%u,%" PRIu64 ",%d,%.2f,%.4f,%.4f,%.6f,%.4f,%.4f,%.6f,%.4f,%.2f,%d,%.4f,%.4f,"
	        "%.4f,%.4f,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%s,%u,%.4f,%.4f,%d,%s\n",
	        r->prov, r->shards, r->size, r->reps, seconds, r->m_med * 8 / 1e9, r->m_med / 1e9,
	        r->m_med / s / 1e6, r->d_med * 8 / 1e9, r->d_med / 1e9, r->d_med / s / 1e6,
	        r->ratio, r->bar, r->pass, r->m_min * 8 / 1e9, r->m_max * 8 / 1e9,
	        r->d_min * 8 / 1e9, r->d_max * 8 / 1e9, r->cut, r->f_med * 8 / 1e9, r->f_ratio,
	        r->ratio_med, r->ratio_q1, r->ratio_q3, r->pages ? "scattered" : "contig", r->pages,
	        r->vs_contig, r->d_vs_contig, r->failed, backing_name(r->backing));
	fflush(f);
}

/* Starts both movers and both clients, opens the direct endpoints, runs
 * every size, and undoes it all in reverse. */

void csv_head(FILE *f)
{
	fprintf(f, "provider,shards,size,reps,seconds,mover_gbps,mover_GBps,mover_mmsgs,"
	           "direct_gbps,direct_GBps,direct_mmsgs,ratio,bar,pass,mover_min_gbps,"
	           "mover_max_gbps,direct_min_gbps,direct_max_gbps,cut,uncoupled_gbps,"
	           "uncoupled_ratio,ratio_of_medians,ratio_q1,ratio_q3,pattern,pages,vs_contig,"
	           "direct_vs_contig,failed,backing\n");
}

/* Starts both movers and both clients, opens the direct endpoints, runs
 * every size, and undoes it all in reverse. */
const char *backing_name(uint32_t b)
{
	return b == MVC_BACKING_HUGETLB ? "hugetlb" : b == MVC_BACKING_THP ? "thp" : "4k";
}

enum mvc_huge backing_huge(uint32_t b)
{
	return b == MVC_BACKING_HUGETLB ? MVC_HUGE_HUGETLB
	       : b == MVC_BACKING_THP   ? MVC_HUGE_THP
	                                : MVC_HUGE_NEVER;
}

int backing_check(uint32_t b, uint64_t bytes, char *why, size_t whylen)
{
	struct mv_huge_state h;
	uint64_t need = (bytes + MV_HUGE_SIZE - 1) / MV_HUGE_SIZE;

	mv_huge_read(&h);
	if (b == MVC_BACKING_HUGETLB && (uint64_t)mv_huge_avail(&h) < need) {
		snprintf(why, whylen,
		         "hugetlb: %ld of %ld 2 MiB pages free, %" PRIu64 " needed (sysctl "
		         "vm.nr_hugepages=%" PRIu64 " or more)",
		         mv_huge_avail(&h), h.total, need, (uint64_t)h.total + need);
		return -ENOMEM;
	}
	if (b == MVC_BACKING_THP && !h.thp_ok) {
		snprintf(why, whylen,
		         "thp: shmem THP is %s (echo advise > " MV_THP_SYS "shmem_enabled)", h.thp);
		return -ENOMEM;
	}
	return 0;
}

int config_run(const struct opts *o, const char *bin, const char *prov, uint32_t n,
               uint32_t backing, struct row *rows, int *nrows, FILE *csv, int first)
{
	static struct cfg x;
	static struct trep rep;
	struct tcmd c;
	struct mvc_info info;
	uint32_t peer;
	int ret;

	memset(&x, 0, sizeof(x));
	x.o = o;
	x.prov = prov;
	x.backing = backing;
	x.host_copy = !strcmp(prov, "samehost");
	x.fab = x.host_copy ? "shm" : prov;
	x.n = n;
	x.iface = o->iface ? o->iface : !strcmp(prov, "tcp") ? "lo" : NULL;
	if (!strcmp(x.fab, "shm"))
		x.iface = NULL;
	x.warm_s = o->seconds / 4 < 0.1 ? 0.1 : o->seconds / 4;
	plan_cpus(n, &x.cpu);
	for (int i = 0; i < o->nsizes; i++) {
		struct geom g = geom_of(o->sizes[i], n);
		if (geom_bytes(&g) > x.region_len)
			x.region_len = geom_bytes(&g);
	}
	if (x.region_len < (1u << 20))
		x.region_len = 1u << 20; /* latency rows alone: the client's region is unused */
	if (o->scattered) {
		/* The pool is the start of the region: both families' runs
		 * clear what they check before they run. */
		x.pool_len = sc_pool_bytes(o);
		if (x.pool_len > x.region_len)
			x.region_len = x.pool_len;
	}

	/* Both pools on the pages asked for, or none of this run. */
	char why[200];
	if (backing_check(backing, 2 * x.region_len, why, sizeof(why))) {
		printf("\n== mvbench %s, %u shard%s, pools on %s pages: SKIPPED: %s\n", prov, n,
		       n > 1 ? "s" : "", backing_name(backing), why);
		return 0;
	}
	mover_start(&mover_a, bin, "a", x.fab, x.iface, n, x.cpu.alist, x.host_copy);
	mover_start(&mover_b, bin, "b", x.fab, x.iface, n, x.cpu.blist, x.host_copy);

	memset(&c, 0, sizeof(c));
	c.op = T_MOVER_UP;
	c.a = x.region_len;
	c.b = backing_huge(backing);
	snprintf(c.path, sizeof(c.path), "%s", mover_b.sock);
	tcall(&c, &rep);

	set_main_affinity(x.cpu.client);
	ret = mvc_connect(&x.c, mover_a.sock);
	if (ret)
		die("connecting to mover A at %s: %s", mover_a.sock, strerror(-ret));
	mvc_info(x.c, &info);
	if (info.nshards != n)
		die("mover A runs %u shards; asked for %u", info.nshards, n);
	snprintf(x.mover_prov, sizeof(x.mover_prov), "%s", info.provider);
	ret = mvc_alloc_huge(x.c, x.region_len, backing_huge(backing), &x.src);
	if (!ret)
		ret = mvc_peer_add(x.c, rep.addr, rep.alen, &peer);
	if (!ret)
		ret = mvc_import(x.c, peer, rep.region, rep.rlen, &x.dst);
	if (ret)
		die("through the mover: setting up %" PRIu64 " bytes: %s", x.region_len,
		    mvc_error(x.c));
	uint64_t *w = x.src.addr;
	for (uint64_t i = 0; i < x.region_len / 8; i++)
		w[i] = pat(i * 8);

	if (o->scattered)
		sc_pages_setup(&x);
	direct_pool_start(&x);
	const struct mv_fabric *f = &x.dp.t[0].fab;

	if (first) {
		printf("\n== mvbench %s: %sfabric %s%s%s, iov %zu, tx queue %zu, %s, "
		       "remote addresses are %s\n",
		       prov,
		       x.host_copy ? "movers copy host memory between them (same host); direct: "
		                   : "",
		       f->prov, x.iface ? " on " : "", x.iface ? x.iface : "", f->iov_limit,
		       f->tx_size, f->dc_flag ? "FI_DELIVERY_COMPLETE" : "completion on transmit",
		       f->virt_addr ? "virtual" : "offsets");
		printf("   %d reps of ~%.2f s each (after a %.2f s warm-up), mover and direct "
		       "in pairs, each pair in the other order from the last; ratio = median "
		       "of the pairs' mover / direct\n",
		       o->reps, o->seconds, x.warm_s);
		printf("   batches of min(64, 4 MiB/size) writes, %u per shard in flight (at most "
		       "%llu MiB); direct posts the fabric writes the shards would\n",
		       BATCHES_PER_SHARD, (unsigned long long)(window_bytes >> 20));
		printf("   striped rows: a batch is done when all its stripes are, for mover "
		       "and direct alike; 'uncoupled' lets each direct thread run ahead alone\n");
		if (o->scattered) {
			char pool[32];
			printf("   scattered rows (N pg): batches of N random 4 KiB pages of a "
			       "%s pool per side, one mvc_write_paged each; Mmsg/s is Mpages/s; "
			       "'vs 4K' is pages/s over the 4 KiB row's writes/s, mover and "
			       "direct; bars m/d >= %.2f and mover vs 4K >= %.2f\n",
			       size_str(x.pool_len, pool, sizeof(pool)), SC_BAR_RATIO,
			       SC_BAR_CONTIG);
		}
		print_head();
	}
	if (strcmp(f->prov, x.mover_prov))
		die("the mover runs %s but the direct endpoints opened %s", x.mover_prov, f->prov);
	printf("   (pools on %s pages, both sides)\n", backing_name(backing));
	if (x.cpu.pinned)
		printf("   (%u shard%s: mover A / direct senders on CPUs %s, mover B / direct "
		       "receivers on %s, client on %d)\n",
		       n, n > 1 ? "s" : "", x.cpu.alist, x.cpu.blist, x.cpu.client);
	else
		printf("   (%u shard%s: unpinned; %d CPUs cannot give %u busy threads a core "
		       "each)\n",
		       n, n > 1 ? "s" : "", navail, 2 * n + 1);
	fflush(stdout);

	const struct row *contig = NULL;
	for (int i = 0; i < o->nsizes; i++) {
		struct row *r = &rows[(*nrows)++];
		bw_row(&x, o->sizes[i], r, i == 0);
		r->backing = backing;
		print_row(r);
		book_print(&book_mover, "mover");
		book_print(&book_direct, "direct");
		csv_row(csv, r, o->seconds);
		if (r->size == SC_PAGE)
			contig = r;
	}
	for (int i = 0; o->scattered && i < o->npages; i++) {
		struct row *r = &rows[(*nrows)++];
		sc_row(&x, o->pages[i], contig, r, o->nsizes == 0 && i == 0);
		r->backing = backing;
		/* Huge pages are held against the contiguous row on 4 KiB pages
		 * too: what a user of 4 KiB pages gets now. */
		for (int k = 0; k < *nrows && backing != MVC_BACKING_4K; k++) {
			const struct row *q = &rows[k];
			if (!q->pages && !q->failed && q->size == SC_PAGE && q->shards == n &&
			    q->backing == MVC_BACKING_4K && !strcmp(q->prov, prov) &&
			    q->m_med > 0) {
				r->vs_contig_4k = r->m_med / q->m_med;
				r->d_vs_contig_4k = r->d_med / q->d_med;
			}
		}
		if (r->vs_contig_4k > 0)
			printf("   %u pg on %s pages over the 4 KiB row on 4k pages: mover %.3f, "
			       "direct %.3f\n",
			       r->pages, backing_name(backing), r->vs_contig_4k, r->d_vs_contig_4k);
		print_row(r);
		book_print(&book_mover, "mover");
		book_print(&book_direct, "direct");
		csv_row(csv, r, o->seconds);
	}
	if (o->external && o->nsizes)
		ext_rows(&x, rows, *nrows, csv);
	if (o->latency)
		lat_rows(&x);
	if (o->fairness)
		fair_rows(&x);
	if (o->reg && first) /* once per provider: it measures no shard's path */
		reg_rows(&x);

	direct_pool_stop(&x);
	mvc_free(x.c, &x.src);
	mvc_disconnect(x.c);
	set_main_affinity(-1);
	tsimple(T_MOVER_DOWN, 0);
	mover_stop(&mover_a, "mover A");
	mover_stop(&mover_b, "mover B");
	return 0;
}
