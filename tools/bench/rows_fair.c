/* SPDX-License-Identifier: MIT */
/*
 * The fairness row: what a flood through a shared mover does to another
 * client's small batches. The bench's client of mover A submits one batch
 * at a time, a 4 KiB write and its immediate into a region of a client of
 * mover B (the owner, in this process), and times each from its submit to
 * its completion; the owner checks that every immediate found its data in
 * place. A second client of A, a thread of its own, floods the same region
 * with 64 MiB writes, two batches in flight, through the same shards. Each
 * rep runs the small batches alone, then beside the flood (counted once a
 * flood batch came back, the small batches going on meanwhile), then the
 * flood alone, then one small batch after that idle spell; the row gives
 * the p50 and p99 of both sets of small batches, the ratio of the p99s (the
 * bar: 2), the flood's rate beside the small batches and alone (how much
 * the sharing costs it), and the batches after an idle spell, apart: they
 * find the shard serving the flood alone. At the end the flood's bytes are
 * compared where they landed.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "hops.h"

#define FAIR_SMALL        4096u       /* the small batch's one write */
#define FAIR_FLOOD        (64u << 20) /* the flood's writes */
#define FAIR_WINDOW       2           /* flood batches in flight */
#define FAIR_ROUNDS       400         /* small batches per chunk, at least */
#define FAIR_CHUNK_MIN_S  0.15        /* a chunk lasts at least this, alone or loaded */
#define FAIR_CHUNK_ROUNDS 20000       /* and takes at most this many rounds */
#define FAIR_CHUNK_S      2.0         /* and at most this long */
#define FAIR_ALONE_S      0.15        /* the flood alone, per rep */
#define FAIR_WAIT_S       5.0         /* a batch or an immediate later than this fails the row */

/* The flooding client: a thread of its own with its own connection to A. */
struct flood {
	pthread_t thread;
	int made, cpu;
	struct mvc *c;
	struct mvc_mem src;
	uint32_t dst;
	_Atomic int on;   /* keep FAIR_WINDOW batches in flight; off: drain */
	_Atomic int stop; /* drain and leave */
	_Atomic int failed;
	_Atomic int inflight;   /* batches submitted and not completed */
	_Atomic uint64_t bytes; /* completed, ever */
	/* The flood's progress at its last completion, for rates taken from
	 * one completion to another (a 64 MiB batch is a coarse unit). */
	pthread_mutex_t mu;
	uint64_t done_bytes, ndone;
	double done_t;
	char err[200];
};

struct fair {
	struct flood fl;
	struct mvc *owner; /* the client of B whose region both write into */
	struct mvc_mem dst;
	struct mvc_mem small; /* the small batches' source, a region of x->c */
	uint32_t to_owner;    /* x->c's import of the owner's region */
	uint64_t seq;
	int sleep; /* the small batches' client sleeps in mvc_wait */
	struct movers_stats ms;
	/* Hop counts of the small batches alone and beside the flood, summed
	 * over the reps' stretches (the flood's few batches count too). */
	struct hop_counts alone, loaded;
};

/* Adds the counts between a and b to acc. */
static void hops_add(struct hop_counts *acc, const struct hop_counts *a, const struct hop_counts *b)
{
	for (int h = 0; h < MV_HOPS; h++)
		for (int k = 0; k < MV_HOP_BUCKETS; k++)
			acc->h[h][k] += b->h[h][k] - a->h[h][k];
}

/* The counts, once the movers have published what came before (every
 * 10 ms). */
static void hops_settled(const struct fair *F, struct hop_counts *o)
{
	if (F->ms.mapped)
		usleep(25000);
	hop_counts_take(&F->ms, o);
}

static void flood_fail(struct flood *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void flood_fail(struct flood *f, const char *fmt, ...)
{
	va_list ap;

	if (atomic_load(&f->failed))
		return;
	va_start(ap, fmt);
	vsnprintf(f->err, sizeof(f->err), fmt, ap);
	va_end(ap);
	atomic_store(&f->failed, 1);
}

static void *flood_main(void *arg)
{
	struct flood *f = arg;
	struct mvc_event ev[16];
	uint64_t cookie = 0;

	if (f->cpu >= 0)
		mv_topo_pin(f->cpu);
	for (;;) {
		int on = atomic_load(&f->on) && !atomic_load(&f->stop);
		int inflight = atomic_load(&f->inflight);

		if (on && inflight < FAIR_WINDOW) {
			int ret = mvc_write(f->c, f->src.region, 0, f->dst, 0, FAIR_FLOOD);
			if (!ret)
				ret = mvc_submit(f->c, ++cookie);
			if (!ret) {
				atomic_fetch_add(&f->inflight, 1);
				continue;
			}
			if (ret != -EAGAIN) {
				flood_fail(f, "flood: %s", mvc_error(f->c));
				return NULL;
			}
			mvc_abort(f->c); /* rings full: submit it again after a completion */
		}
		if (!inflight) {
			if (atomic_load(&f->stop))
				return NULL;
			usleep(200);
			continue;
		}
		/* It sleeps: the small batches' client and the shards need the
		 * cores more than a thread that only counts. */
		int n = mvc_wait(f->c, ev, 16, 10);
		if (n < 0) {
			flood_fail(f, "flood: %s", mvc_error(f->c));
			return NULL;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].type != MVC_EV_BATCH)
				continue;
			if (ev[i].status) {
				flood_fail(f, "a flood batch failed: %s", ev[i].msg);
				return NULL;
			}
			atomic_fetch_add(&f->bytes, ev[i].bytes);
			pthread_mutex_lock(&f->mu);
			f->done_bytes += ev[i].bytes;
			f->ndone++;
			f->done_t = now_s();
			pthread_mutex_unlock(&f->mu);
			atomic_fetch_sub(&f->inflight, 1);
		}
	}
}

/* Turns the flood off and waits until its last batch completed. */
static int flood_drain(struct flood *f, char *why, size_t whylen)
{
	double end = now_s() + 4 * FAIR_WAIT_S;

	atomic_store(&f->on, 0);
	while (atomic_load(&f->inflight) && !atomic_load(&f->failed) && now_s() < end)
		usleep(500);
	if (atomic_load(&f->failed)) {
		snprintf(why, whylen, "%s", f->err);
		return -EIO;
	}
	if (atomic_load(&f->inflight)) {
		snprintf(why, whylen, "the flood did not drain in %.0f s", 4 * FAIR_WAIT_S);
		return -ETIMEDOUT;
	}
	return 0;
}

/* Turns the flood on and waits until its window is full and a batch came
 * back: the flood is running when this returns. */
static int flood_start(struct flood *f, char *why, size_t whylen)
{
	uint64_t b0 = atomic_load(&f->bytes);
	double end = now_s() + 4 * FAIR_WAIT_S;

	atomic_store(&f->on, 1);
	while (atomic_load(&f->bytes) == b0 && !atomic_load(&f->failed) && now_s() < end)
		usleep(200);
	if (atomic_load(&f->failed)) {
		snprintf(why, whylen, "%s", f->err);
		return -EIO;
	}
	if (atomic_load(&f->bytes) == b0) {
		snprintf(why, whylen, "no flood batch completed in %.0f s", 4 * FAIR_WAIT_S);
		return -ETIMEDOUT;
	}
	return 0;
}

static double small_round(struct cfg *x, struct fair *F, char *why, size_t whylen);

/* Turns the flood on while the small batches go on, uncounted, until a
 * flood batch came back: the shard has served both since the flood began,
 * the steady state the loaded chunk measures. */
static int flood_start_beside(struct cfg *x, struct fair *F, char *why, size_t whylen)
{
	struct flood *f = &F->fl;
	uint64_t b0 = atomic_load(&f->bytes);
	double end = now_s() + 4 * FAIR_WAIT_S;

	atomic_store(&f->on, 1);
	while (atomic_load(&f->bytes) == b0 && !atomic_load(&f->failed) && now_s() < end)
		if (small_round(x, F, why, whylen) < 0)
			return -EIO;
	return flood_start(f, why, whylen); /* the flood's failure, or its timeout */
}

/* One small batch: microseconds from its submit to its completion, or < 0.
 * Then the owner must hear its immediate, with the data in place. */
static double small_round(struct cfg *x, struct fair *F, char *why, size_t whylen)
{
	struct mvc_event ev[16];
	uint64_t seq = ++F->seq;
	uint32_t imm = (uint32_t)seq;
	double us = -1;

	memcpy(F->small.addr, &seq, 8);
	double t0 = now_s();
	int ret = mvc_write(x->c, F->small.region, 0, F->to_owner, FAIR_FLOOD, FAIR_SMALL);
	if (!ret)
		ret = mvc_write_imm(x->c, F->to_owner, imm);
	if (!ret)
		ret = mvc_submit(x->c, seq);
	if (ret) {
		snprintf(why, whylen, "small batch: %s", mvc_error(x->c));
		return -1;
	}
	while (us < 0) {
		int n = F->sleep ? mvc_wait(x->c, ev, 16, 100) : mvc_poll(x->c, ev, 16);
		if (n < 0) {
			snprintf(why, whylen, "small batch: %s", mvc_error(x->c));
			return -1;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].type != MVC_EV_BATCH)
				continue;
			if (ev[i].status || ev[i].cookie != seq) {
				snprintf(why, whylen, "small batch %" PRIu64 ": %s", ev[i].cookie,
				         ev[i].status ? ev[i].msg : "completed out of turn");
				return -1;
			}
			us = (now_s() - t0) * 1e6;
		}
		if (us < 0 && now_s() - t0 > FAIR_WAIT_S) {
			snprintf(why, whylen, "small batch %" PRIu64 " not done in %.0f s", seq,
			         FAIR_WAIT_S);
			return -1;
		}
	}
	/* Not timed: the owner reads the immediate, which must find its data. */
	for (;;) {
		int n = mvc_poll(F->owner, ev, 16);
		if (n < 0) {
			snprintf(why, whylen, "owner: %s", mvc_error(F->owner));
			return -1;
		}
		for (int i = 0; i < n; i++) {
			uint64_t first;
			if (ev[i].type != MVC_EV_IMM)
				continue;
			memcpy(&first, (uint8_t *)F->dst.addr + FAIR_FLOOD, 8);
			if (ev[i].imm != imm || first != seq) {
				snprintf(why, whylen,
				         "immediate %u for batch %" PRIu64 " found word %" PRIu64
				         ": out of order, or ahead of its data",
				         ev[i].imm, seq, first);
				return -1;
			}
			return us;
		}
		if (now_s() - t0 > FAIR_WAIT_S) {
			snprintf(why, whylen, "no immediate for batch %" PRIu64 " in %.0f s", seq,
			         FAIR_WAIT_S);
			return -1;
		}
	}
}

static int fair_up(struct cfg *x, struct fair *F, char *why, size_t whylen)
{
	struct flood *f = &F->fl;
	int ret;

	memset(F, 0, sizeof(*F));
	pthread_mutex_init(&F->fl.mu, NULL);
	/* Polling needs a core of its own: without one (or with --wait), the
	 * client sleeps in mvc_wait, as the shards' threads need the CPUs. */
	F->sleep = x->o->wait || !x->cpu.pinned;
	ret = mvc_connect(&F->owner, mover_b.sock);
	if (ret) {
		snprintf(why, whylen, "owner: connecting to mover B: %s", strerror(-ret));
		return ret;
	}
	ret = mvc_alloc(F->owner, FAIR_FLOOD + (64u << 10), &F->dst);
	if (ret) {
		snprintf(why, whylen, "owner's region: %s", mvc_error(F->owner));
		return ret;
	}
	ret = mvc_alloc(x->c, 64u << 10, &F->small);
	if (!ret)
		ret = reach_region(x->c, F->owner, F->dst.region, &F->to_owner);
	if (ret) {
		snprintf(why, whylen, "small batches' client: %s", mvc_error(x->c));
		return ret;
	}
	for (uint32_t i = 8; i < FAIR_SMALL; i++)
		((uint8_t *)F->small.addr)[i] = (uint8_t)mix(i);
	ret = mvc_connect(&f->c, mover_a.sock);
	if (ret) {
		snprintf(why, whylen, "flood: connecting to mover A: %s", strerror(-ret));
		return ret;
	}
	ret = mvc_alloc(f->c, FAIR_FLOOD, &f->src);
	if (!ret)
		ret = reach_region(f->c, F->owner, F->dst.region, &f->dst);
	if (ret) {
		snprintf(why, whylen, "flood: %s", mvc_error(f->c));
		return ret;
	}
	uint64_t *w = f->src.addr;
	for (uint64_t i = 0; i < FAIR_FLOOD / 8; i++)
		w[i] = pat(i * 8);
	if (movers_stats_open(&F->ms, why, whylen))
		printf("   (no hop histograms: %s)\n", why);
	/* The next CPU after the client's: the flood runs beside it. */
	f->cpu = spare_cpu(x);
	if (pthread_create(&f->thread, NULL, flood_main, f)) {
		snprintf(why, whylen, "flood thread: %s", strerror(errno));
		return -EAGAIN;
	}
	f->made = 1;
	return 0;
}

static void fair_down(struct cfg *x, struct fair *F)
{
	struct flood *f = &F->fl;
	char why[200];

	if (f->made) {
		flood_drain(f, why, sizeof(why));
		atomic_store(&f->stop, 1);
		pthread_join(f->thread, NULL);
		f->made = 0;
	}
	pthread_mutex_destroy(&f->mu);
	movers_stats_close(&F->ms);
	if (f->c) {
		mvc_disconnect(f->c); /* its region goes with it */
		f->c = NULL;
	}
	if (F->small.addr) {
		struct mvc_event ev[16];
		double end = now_s() + 2;
		while (mvc_inflight(x->c) && now_s() < end)
			mvc_wait(x->c, ev, 16, 10);
		mvc_free(x->c, &F->small);
	}
	if (F->owner) {
		mvc_disconnect(F->owner);
		F->owner = NULL;
	}
}

static double pct(const double *sorted, int n, double q)
{
	int i = (int)(q * (n - 1) + 0.5);

	return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* The flood's bytes, completions and time at its last completion. */
struct progress {
	uint64_t bytes, n;
	double t;
};

static struct progress progress_of(struct flood *f)
{
	struct progress p;

	pthread_mutex_lock(&f->mu);
	p = (struct progress){f->done_bytes, f->ndone, f->done_t};
	pthread_mutex_unlock(&f->mu);
	return p;
}

/* A chunk of small batches: at least `rounds` of them and min_s seconds,
 * and until the flood has made `until_n` completions; at most FAIR_CHUNK_S.
 * The first max_rounds are appended to v; past them the small batches go
 * on unrecorded while the flood has not made its completions (at 3 us a
 * batch, 20,000 of them were over before a flood of 64 MiB batches at 7
 * Gbit/s completed one, and the row read no flood rate at all). */
static int chunk(struct cfg *x, struct fair *F, double *v, int *nv, int rounds, int max_rounds,
                 double min_s, uint64_t until_n, struct frow *r)
{
	double t0 = now_s();

	for (int i = 0;; i++) {
		double el = now_s() - t0;
		int flood_due = progress_of(&F->fl).n < until_n;
		if ((i >= rounds && el >= min_s && !flood_due) || (i >= max_rounds && !flood_due) ||
		    el > FAIR_CHUNK_S)
			break;
		double us = small_round(x, F, r->err, sizeof(r->err));
		if (us < 0)
			return -1;
		if (i < max_rounds)
			v[(*nv)++] = us;
		if (atomic_load(&F->fl.failed)) {
			snprintf(r->err, sizeof(r->err), "%s", F->fl.err);
			return -1;
		}
	}
	return 0;
}

/* The p99 of v[lo, hi), sorted in place. */
static double p99_of(double *v, int lo, int hi)
{
	qsort(v + lo, (size_t)(hi - lo), sizeof(*v), mv_cmp_double);
	return pct(v + lo, hi - lo, 0.99);
}

static void fair_row(struct cfg *x, struct fair *F, struct frow *r)
{
	const struct opts *o = x->o;
	int reps = o->reps, na = 0, nl = 0;
	double *va = calloc((size_t)reps * FAIR_CHUNK_ROUNDS, sizeof(double));
	double *vl = calloc((size_t)reps * FAIR_CHUNK_ROUNDS, sizeof(double));
	double vi[64];          /* the first small batch after an idle spell, per rep */
	int a_at[65], l_at[65]; /* where each rep's chunks start in va and vl */
	double loaded_s = 0, alone_s = 0;
	uint64_t loaded_b = 0, alone_b = 0;
	struct flood *f = &F->fl;

	memset(r, 0, sizeof(*r));
	r->prov = x->prov;
	r->shards = x->n;
	r->size = FAIR_SMALL;
	r->flood_size = FAIR_FLOOD;
	if (!va || !vl) {
		snprintf(r->err, sizeof(r->err), "no memory");
		goto fail;
	}
	/* Warm-up: connections (tcp connects on the first write), caches. */
	double tmp[50];
	int ntmp = 0;
	if (chunk(x, F, tmp, &ntmp, 50, 50, 0, 0, r) || flood_start(f, r->err, sizeof(r->err)) ||
	    flood_drain(f, r->err, sizeof(r->err)))
		goto fail;
	for (int rep = 0; rep < reps; rep++) {
		struct hop_counts h0, h1;
		hops_settled(F, &h0);
		a_at[rep] = na;
		l_at[rep] = nl;
		/* As long as a loaded chunk, so both p99s stand on about as
		 * many batches: with 400 a rep the alone p99 was the 20th
		 * slowest of 2,000 and moved 3-22 us between runs (shm, H100). */
		if (chunk(x, F, va, &na, FAIR_ROUNDS, FAIR_CHUNK_ROUNDS, FAIR_CHUNK_MIN_S, 0, r))
			goto fail;
		hops_settled(F, &h1);
		hops_add(&F->alone, &h0, &h1);
		if (flood_start_beside(x, F, r->err, sizeof(r->err)))
			goto fail;
		hop_counts_take(&F->ms, &h0);
		/* Beside the flood: its rate from one completion to another,
		 * two or more of them (within FAIR_CHUNK_S). */
		struct progress p0 = progress_of(f), p1;
		if (chunk(x, F, vl, &nl, FAIR_ROUNDS, FAIR_CHUNK_ROUNDS * (rep + 1) - nl,
		          FAIR_CHUNK_MIN_S, p0.n + 2, r))
			goto fail;
		p1 = progress_of(f);
		loaded_b += p1.bytes - p0.bytes;
		loaded_s += p1.t - p0.t;
		hops_settled(F, &h1);
		hops_add(&F->loaded, &h0, &h1);
		/* The flood alone, right after, the same way. */
		p0 = progress_of(f);
		for (double t0 = now_s();
		     (now_s() - t0 < FAIR_ALONE_S || progress_of(f).n < p0.n + 2) &&
		     now_s() - t0 < FAIR_CHUNK_S && !atomic_load(&f->failed);)
			usleep(1000);
		p1 = progress_of(f);
		alone_b += p1.bytes - p0.bytes;
		alone_s += p1.t - p0.t;
		/* One small batch after that idle spell, the flood still on: it
		 * finds the shard serving the flood alone. Shown apart. */
		vi[rep] = small_round(x, F, r->err, sizeof(r->err));
		if (vi[rep] < 0 || flood_drain(f, r->err, sizeof(r->err)))
			goto fail;
	}
	/* Every flood batch wrote the same bytes to the same place. */
	if (memcmp(F->dst.addr, f->src.addr, FAIR_FLOOD)) {
		snprintf(r->err, sizeof(r->err), "the flood's bytes differ where they landed");
		goto fail;
	}
	/* Each rep's ratio, before the whole sort (each sorts its own span);
	 * a rep with an empty chunk has none. */
	double rr[64];
	int nr = 0;
	a_at[reps] = na;
	l_at[reps] = nl;
	for (int rep = 0; rep < reps; rep++)
		if (a_at[rep + 1] > a_at[rep] && l_at[rep + 1] > l_at[rep]) {
			r->rep_a99[nr] = p99_of(va, a_at[rep], a_at[rep + 1]);
			r->rep_l99[nr] = p99_of(vl, l_at[rep], l_at[rep + 1]);
			rr[nr] = r->rep_l99[nr] / r->rep_a99[nr];
			nr++;
		}
	r->nrep = nr;
	qsort(rr, (size_t)nr, sizeof(*rr), mv_cmp_double);
	r->rep_ratio_med = nr ? pct(rr, nr, 0.5) : 0;
	r->rep_ratio_min = nr ? rr[0] : 0;
	r->rep_ratio_max = nr ? rr[nr - 1] : 0;
	qsort(va, (size_t)na, sizeof(*va), mv_cmp_double);
	qsort(vl, (size_t)nl, sizeof(*vl), mv_cmp_double);
	r->rounds_alone = na;
	r->rounds_loaded = nl;
	qsort(vi, (size_t)reps, sizeof(*vi), mv_cmp_double);
	r->i_p50 = pct(vi, reps, 0.5);
	r->i_max = vi[reps - 1];
	r->a_p50 = pct(va, na, 0.5);
	r->a_p99 = pct(va, na, 0.99);
	r->l_p50 = pct(vl, nl, 0.5);
	r->l_p99 = pct(vl, nl, 0.99);
	r->ratio = r->l_p99 / r->a_p99;
	r->flood_bps = loaded_s > 0 ? (double)loaded_b / loaded_s : 0;
	r->flood_alone_bps = alone_s > 0 ? (double)alone_b / alone_s : 0;
	r->pass = r->ratio <= FAIR_BAR;
	r->hops = F->ms.mapped;
	struct hop_counts zero = {0};
	hop_counts_pct(&zero, &F->alone, r->hop_a50, r->hop_a99);
	hop_counts_pct(&zero, &F->loaded, r->hop_l50, r->hop_l99);
	free(va);
	free(vl);
	return;
fail:
	r->failed = 1;
	free(va);
	free(vl);
}

static void fair_print_row(const struct frow *r)
{
	if (r->failed) {
		printf("%-5s %6u | FAILED: %s\n", r->prov, r->shards, r->err);
		fflush(stdout);
		return;
	}
	printf("%-5s %6u | %7.1f us %7.1f us | %7.1f us %7.1f us | %6.2f %-7s | %7.2f  %7.2f | "
	       "%7.1f us %7.1f us\n",
	       r->prov, r->shards, r->a_p50, r->a_p99, r->l_p50, r->l_p99, r->ratio,
	       r->pass ? "ok" : "MISS", r->flood_bps * 8 / 1e9, r->flood_alone_bps * 8 / 1e9,
	       r->i_p50, r->i_max);
	printf("   ratio within each rep (its alone chunk, then its loaded one): median %.2f, "
	       "%.2f-%.2f\n",
	       r->rep_ratio_med, r->rep_ratio_min, r->rep_ratio_max);
	printf("   each rep's p99, alone / loaded (us):");
	for (int i = 0; i < r->nrep; i++)
		printf(" %.1f / %.1f%s", r->rep_a99[i], r->rep_l99[i], i + 1 < r->nrep ? "," : "");
	printf("\n");
	for (int q = 0; q < 2 && r->hops; q++) {
		const double *a = q ? r->hop_a99 : r->hop_a50, *l = q ? r->hop_l99 : r->hop_l50;
		printf("   hops %s, alone -> loaded (us, both movers):", q ? "p99" : "p50");
		for (int h = 0; h < MV_HOPS; h++)
			if (a[h] >= 0 || l[h] >= 0)
				printf(" %s %.1f -> %.1f", hop_name(h), a[h], l[h]);
		printf("\n");
	}
	fflush(stdout);
}

struct frow fair_done[FAIR_ROWS_MAX];
int nfair_done;

int fair_rows(struct cfg *x)
{
	static struct fair F;
	struct frow *r;
	char why[200];

	if (nfair_done == FAIR_ROWS_MAX)
		die("too many fairness rows: give fewer providers or shard counts");
	r = &fair_done[nfair_done++];
	printf("   fairness: one 4 KiB write + immediate per batch, one batch at a time, "
	       "alone and beside a second client of A writing 64 MiB batches (%d in flight) "
	       "to the same region; bar: loaded p99 <= %.0fx alone p99\n",
	       FAIR_WINDOW, FAIR_BAR);
	printf("   the small batches' client %s\n",
	       x->o->wait || !x->cpu.pinned ? "sleeps in mvc_wait (--wait, or no core of its own)"
	                                    : "polls (mvc_poll)");
	printf("%-5s %6s | %10s %10s | %10s %10s | %6s %-7s | %-16s | %s\n", "prov", "shards",
	       "alone p50", "p99", "loaded p50", "p99", "ratio", "bar", "flood Gbit/s b, a",
	       "after 150 ms idle: p50, max");
	if (fair_up(x, &F, why, sizeof(why))) {
		memset(r, 0, sizeof(*r));
		r->prov = x->prov;
		r->shards = x->n;
		r->failed = 1;
		snprintf(r->err, sizeof(r->err), "%s", why);
	} else {
		fair_row(x, &F, r);
	}
	fair_print_row(r);
	fair_down(x, &F);
	return r->failed ? -1 : 0;
}

void fair_print_bench(const struct frow *r)
{
	printf("BENCH fairness prov=%s shards=%u size=%" PRIu64 " flood_size=%" PRIu64
	       " rounds_alone=%d rounds_loaded=%d alone_p50_us=%.2f alone_p99_us=%.2f "
	       "loaded_p50_us=%.2f loaded_p99_us=%.2f ratio=%.3f bar=%.1f flood_gbps=%.3f "
	       "flood_alone_gbps=%.3f after_idle_p50_us=%.2f after_idle_max_us=%.2f "
	       "rep_ratio_med=%.3f rep_ratio_min=%.3f rep_ratio_max=%.3f pass=%d failed=%d",
	       r->prov, r->shards, r->size, r->flood_size, r->rounds_alone, r->rounds_loaded,
	       r->a_p50, r->a_p99, r->l_p50, r->l_p99, r->ratio, FAIR_BAR, r->flood_bps * 8 / 1e9,
	       r->flood_alone_bps * 8 / 1e9, r->i_p50, r->i_max, r->rep_ratio_med, r->rep_ratio_min,
	       r->rep_ratio_max, r->pass, r->failed);
	for (int h = 0; h < MV_HOPS && r->hops; h++)
		printf(" hop_%s_us=%.2f,%.2f,%.2f,%.2f", hop_name(h), r->hop_a50[h], r->hop_a99[h],
		       r->hop_l50[h], r->hop_l99[h]);
	if (r->failed)
		printf(" error=\"%s\"", r->err);
	printf("\n");
}
