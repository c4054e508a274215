/* SPDX-License-Identifier: MIT */
/*
 * Scattered-page rows, the KV-cache workload: batches of N random 4 KiB
 * pages drawn from a pool at the start of the region (the same page index
 * on both sides, so the payload check by offset still holds), one
 * mvc_write_paged() per batch through the mover. The pool's pages are
 * shuffled once, with a fixed seed, in this process and in the receiver
 * alike; window position p of the row is the p-th run of N pages of that
 * shuffle, so no page repeats within a batch and the batches of different
 * positions never overlap. Through the mover a position is reused only once
 * the batch that last used it completed. The direct threads post what the
 * shards would: libclient cuts a batch's page list into nshards equal
 * ranges of entries (mv_list_per(); below MV_LIST_MIN pages, into runs of
 * pages adjacent on both sides spread in contiguous ranges), range k on
 * shard k, and each shard merges its pages into fabric
 * writes by the mover's rule (extend the last iov while both sides are
 * contiguous, else add an iov up to the provider's limit, within 4 MiB).
 * A row's figure is pages per second, beside the 4 KiB contiguous row's
 * writes per second of the same configuration.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SC_SEED 0x6b7663616368ull /* the shuffle is the same in every run */

/* The row being measured: its page lists and how they fall to the shards. */
struct scatter {
	uint32_t *perm;               /* every page of the pool once, shuffled */
	uint64_t nperm;               /* pages in the pool */
	uint32_t pages;               /* per batch */
	uint64_t npos;                /* positions the pool holds: nperm / pages */
	uint32_t n;                   /* shards */
	uint32_t *start;              /* npos x (n + 1): position p's pages for shard k are
	                                 [start[p * (n + 1) + k], start[p * (n + 1) + k + 1]) */
	uint64_t most[MV_MAX_SHARDS]; /* the most pages shard k gets of a batch */
	uint8_t *busy;                /* through the mover: position in flight */
};

static struct scatter sc;

/* A Fisher-Yates shuffle of 0..n-1 driven by mix(): the same for a seed in
 * every process. */
static void shuffle(uint32_t *perm, uint64_t n, uint64_t seed)
{
	for (uint64_t i = 0; i < n; i++)
		perm[i] = (uint32_t)i;
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = mix(seed ^ (i * 0x9e3779b97f4a7c15ull)) % (i + 1);
		uint32_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
}

/* The pool: --pool, but at least two batches of the largest page count, so
 * two batches can be in flight without sharing a page. */
uint64_t sc_pool_bytes(const struct opts *o)
{
	uint64_t pool = o->pool / SC_PAGE * SC_PAGE;

	for (int i = 0; i < o->npages; i++)
		if (2ull * o->pages[i] * SC_PAGE > pool)
			pool = 2ull * o->pages[i] * SC_PAGE;
	return pool;
}

/* The same shuffle here and in the receiver. */
void sc_pages_setup(struct cfg *x)
{
	struct tcmd c = {.op = T_PAGES, .a = x->pool_len / SC_PAGE, .b = SC_SEED};
	static struct trep rep;
	uint64_t n = x->pool_len / SC_PAGE;

	tcall(&c, &rep);
	if (sc.nperm != n) {
		free(sc.perm);
		sc.perm = malloc(n * sizeof(*sc.perm));
		if (!sc.perm)
			die("out of memory for a pool of %" PRIu64 " pages", n);
		shuffle(sc.perm, n, SC_SEED);
		sc.nperm = n;
	}
}

static const uint32_t *position(uint64_t pos)
{
	return sc.perm + pos * sc.pages;
}

/* Splits every position's page list over n shards as libclient does. */
static void sc_split(uint32_t pages, uint32_t n)
{
	sc.pages = pages;
	sc.npos = sc.nperm / pages;
	sc.n = n;
	free(sc.start);
	free(sc.busy);
	sc.start = calloc(sc.npos * (n + 1), sizeof(*sc.start));
	sc.busy = calloc(sc.npos, 1);
	if (!sc.start || !sc.busy)
		die("out of memory for %" PRIu64 " page lists", sc.npos);
	memset(sc.most, 0, sizeof(sc.most));
	for (uint64_t p = 0; p < sc.npos; p++) {
		const uint32_t *pg = position(p);
		uint32_t *st = sc.start + p * (n + 1), runs = 0, run = 0, k = 0;
		if (pages >= MV_LIST_MIN) {
			/* By reference: equal ranges of entries (mv_list_per). */
			uint32_t per = mv_list_per(pages, n);
			for (k = 0; k <= n; k++)
				st[k] = k * per < pages ? k * per : pages;
		} else {
			for (uint32_t i = 0; i < pages; i++)
				runs += i == 0 || pg[i] != pg[i - 1] + 1;
			uint32_t per = (runs + n - 1) / n;
			/* Run r goes to shard r / per; shard k's pages start
			 * where its first run does. */
			for (uint32_t i = 0; i < pages; i++) {
				if (i > 0 && pg[i] == pg[i - 1] + 1)
					continue;
				while (k <= run / per && k < n)
					st[k++] = i;
				run++;
			}
			while (k <= n)
				st[k++] = pages;
		}
		for (k = 0; k < n; k++)
			if (st[k + 1] - st[k] > sc.most[k])
				sc.most[k] = st[k + 1] - st[k];
	}
}

static struct geom sc_geom(uint32_t pages, uint32_t n)
{
	struct geom g = {.size = SC_PAGE, .stride = SC_PAGE, .k = pages, .nshards = n};
	uint64_t w = window_bytes / ((uint64_t)pages * SC_PAGE);

	if (w > (uint64_t)BATCHES_PER_SHARD * n)
		w = (uint64_t)BATCHES_PER_SHARD * n;
	if (w > sc.npos)
		w = sc.npos; /* sc_pool_bytes() keeps it at 2 or more */
	g.window = w < 2 ? 2 : (uint32_t)w;
	g.striped = n > 1; /* every batch has a part on every shard */
	return g;
}

/* Clears (before a run) or checks (after it) the pages of the first npos
 * window positions. */
static void sc_clear_and_check(const struct geom *g, uint64_t npos, int check, const char *who)
{
	struct tcmd c = {.op = check ? T_PAGES_CHECK : T_PAGES_CLEAR, .a = g->k};
	static struct trep rep;

	snprintf(c.tag, sizeof(c.tag), " %s a %s run of %u pages", check ? "after" : "before", who,
	         g->k);
	c.b = npos < g->window ? npos : g->window;
	tcall(&c, &rep);
}

/* Through the mover: a window of batches, one paged write each. */
static void sc_mover_meas(struct cfg *x, const struct geom *g, uint64_t nbatches, double limit_s,
                          struct meas *m)
{
	struct mvc_event ev[64];
	uint64_t submitted = 0, done = 0, bytes = 0, want = (uint64_t)g->k * SC_PAGE;
	uint32_t inflight = 0;
	int spin = x->cpu.pinned && !x->o->wait, ret;

	sc_clear_and_check(g, nbatches, 0, "mover");
	memset(m, 0, sizeof(*m));
	memset(sc.busy, 0, sc.npos);
	book_snap(&book_mover, 1);
	double t0 = now_s(), deadline = t0 + limit_s, last = t0, t1 = t0;
	while (done < submitted || (!m->cut && !m->failed && submitted < nbatches)) {
		if (!m->cut && now_s() > deadline)
			m->cut = 1;
		while (!m->cut && !m->failed && submitted < nbatches && inflight < g->window) {
			uint64_t pos = submitted % sc.npos;
			if (sc.busy[pos])
				break; /* its last batch is still in flight */
			const uint32_t *pg = position(pos);
			struct mvc_pages p = {.src = x->src.region,
			                      .dst = x->dst,
			                      .src_stride = SC_PAGE,
			                      .dst_stride = SC_PAGE,
			                      .page_size = SC_PAGE,
			                      .src_pages = pg,
			                      .dst_pages = pg,
			                      .npages = g->k};
			ret = mvc_write_paged(x->c, &p);
			if (!ret)
				ret = mvc_submit(x->c, submitted);
			if (ret == -EAGAIN) {
				mvc_abort(x->c);
				break; /* rings full: reap first */
			}
			if (ret) {
				meas_fail(
				    m, "through the mover: batch %" PRIu64 " of %u pages: %s (%s)",
				    submitted, g->k, mvc_error(x->c), strerror(-ret));
				mvc_abort(x->c);
				break; /* what is in flight still drains */
			}
			sc.busy[pos] = 1;
			submitted++;
			inflight++;
		}
		int n = spin ? mvc_poll(x->c, ev, 64) : mvc_wait(x->c, ev, 64, 100);
		if (n < 0)
			die("through the mover: waiting for completions: %s", mvc_error(x->c));
		for (int i = 0; i < n; i++) {
			if (ev[i].type != MVC_EV_BATCH)
				continue;
			if (ev[i].status)
				meas_fail(m,
				          "through the mover: batch %" PRIu64
				          " of %u pages failed (cause %d): %s: %s",
				          ev[i].cookie, g->k, ev[i].cause, ev[i].msg,
				          strerror(-ev[i].status));
			else if (ev[i].bytes != want)
				meas_fail(m,
				          "through the mover: batch %" PRIu64 " reports %" PRIu64
				          " bytes written; it had %" PRIu64,
				          ev[i].cookie, ev[i].bytes, want);
			bytes += ev[i].bytes;
			sc.busy[ev[i].cookie % sc.npos] = 0;
			done++;
			inflight--;
		}
		double tn = now_s();
		if (n > 0)
			last = t1 = tn;
		else if (tn - last > STALL_S)
			die("through the mover: no completion for %.0f s with %u batches of %u "
			    "pages "
			    "in flight",
			    STALL_S, inflight, g->k);
	}
	book_snap(&book_mover, 0);
	m->secs = t1 - t0;
	m->bytes = bytes;
	if (m->failed)
		return; /* what landed is not the row's any more */
	m->checked = submitted < g->window ? submitted : g->window;
	sc_clear_and_check(g, m->checked, 1, "mover");
}

static uint64_t sc_ops_per_batch(const struct djob *j, uint32_t id)
{
	const struct scatter *s = j->arg;

	return s->most[id]; /* at most one fabric write per page */
}

/* Thread t's range of batch b's page list, merged as the shard would. */
static void sc_build(struct dsend *t, const struct djob *j, uint64_t b, uint32_t track)
{
	const struct scatter *s = j->arg;
	uint64_t pos = b % s->npos;
	const uint32_t *pg = s->perm + pos * s->pages, *st = s->start + pos * (s->n + 1);

	for (uint32_t i = st[t->id]; i < st[t->id + 1]; i++) {
		uint64_t off = (uint64_t)pg[i] * SC_PAGE;
		dsend_queue(t, track, off, off, SC_PAGE);
	}
}

static const struct dfamily sc_family = {.ops_per_batch = sc_ops_per_batch, .build = sc_build};

/* The baseline: the same pages, posted by the threads directly. */
static void sc_direct_meas(struct cfg *x, const struct geom *g, uint64_t nbatches, double limit_s,
                           int coupled, struct book *b, struct meas *m)
{
	struct dpool *p = &x->dp;
	uint64_t min_cover = UINT64_MAX;

	sc_clear_and_check(g, nbatches, 0, "direct");
	direct_job(x,
	           &(struct djob){.g = *g,
	                          .fam = &sc_family,
	                          .arg = &sc,
	                          .nbatches = nbatches,
	                          .limit_s = limit_s,
	                          .yield = !x->cpu.pinned,
	                          .coupled = coupled},
	           b);

	memset(m, 0, sizeof(*m));
	double t0 = p->t[0].t0, t1 = p->t[0].t1;
	for (uint32_t i = 0; i < p->n; i++) {
		const struct dsend *t = &p->t[i];
		uint64_t want = 0;
		t0 = t->t0 < t0 ? t->t0 : t0;
		t1 = t->t1 > t1 ? t->t1 : t1;
		m->bytes += t->bytes;
		m->cut |= t->cut;
		if (!sc.most[i])
			continue; /* no page falls to this thread */
		for (uint64_t k = 0; k < t->issued; k++) {
			const uint32_t *st = sc.start + (k % sc.npos) * (sc.n + 1);
			want += (uint64_t)(st[i + 1] - st[i]) * SC_PAGE;
		}
		if (t->bytes != want)
			die("direct sender %u: %" PRIu64 " bytes completed; its %" PRIu64
			    " batches of pages carry %" PRIu64,
			    i, t->bytes, t->issued, want);
		/* Every thread takes part in every batch: the batches below the
		 * fewest any thread issued all landed. */
		min_cover = t->issued < min_cover ? t->issued : min_cover;
	}
	if (min_cover > nbatches)
		min_cover = nbatches;
	m->secs = t1 - t0;
	m->checked = min_cover < g->window ? min_cover : g->window;
	sc_clear_and_check(g, m->checked, 1, "direct");
	tsimple(T_DIRECT_PARK, 0);
}

static const struct rowkind sc_kind = {.mover = sc_mover_meas, .direct = sc_direct_meas};

void sc_row(struct cfg *x, uint32_t pages, const struct row *contig, struct row *r, int first)
{
	sc_split(pages, x->n);
	struct geom g = sc_geom(pages, x->n);

	pairs_run(x, &sc_kind, &g, r, first);
	r->pages = pages;
	r->bar = SC_BAR_RATIO;
	if (r->failed) {
		r->pass = 0;
		return;
	}
	/* Pages per second over writes per second: both rows move 4 KiB
	 * pieces, so the ratio of their byte rates is the ratio. */
	if (contig && contig->m_med > 0 && contig->d_med > 0) {
		r->vs_contig = r->m_med / contig->m_med;
		r->d_vs_contig = r->d_med / contig->d_med;
	}
	r->pass = r->ratio >= SC_BAR_RATIO && r->vs_contig >= SC_BAR_CONTIG;
}

/* ---- in the receiver ---- */

int sc_target_pages(struct target *tg, const struct tcmd *c, char *why, size_t len)
{
	uint64_t n = c->a;

	if (!tg->c || n == 0 || n * SC_PAGE > tg->pool.len || n > UINT32_MAX) {
		snprintf(why, len, "a pool of %" PRIu64 " pages does not fit the region", n);
		return -EINVAL;
	}
	if (tg->nperm != n) {
		free(tg->perm);
		tg->nperm = 0;
		tg->perm = malloc(n * sizeof(*tg->perm));
		if (!tg->perm) {
			snprintf(why, len, "out of memory for %" PRIu64 " page indices", n);
			return -ENOMEM;
		}
		tg->nperm = n;
	}
	shuffle(tg->perm, n, c->b);
	/* Touch the whole pool once: random pages of a fresh memfd would
	 * otherwise be faulted in by the first runs, and only by them. */
	memset(tg->pool.addr, 0, n * SC_PAGE);
	return 0;
}

/* The pages of the first c->b positions of c->a pages each, or -EINVAL. */
static int land_pages(const struct target *tg, const struct tcmd *c, uint64_t *count, char *why,
                      size_t len)
{
	if (!tg->perm || c->a == 0 || c->a * c->b > tg->nperm) {
		snprintf(why, len,
		         "%" PRIu64 " positions of %" PRIu64
		         " pages are more than the pool's %" PRIu64,
		         c->b, c->a, tg->nperm);
		return -EINVAL;
	}
	*count = c->a * c->b;
	return 0;
}

int sc_land_clear(const struct target *tg, const struct tcmd *c, char *why, size_t len)
{
	uint64_t n;
	int ret = land_pages(tg, c, &n, why, len);

	for (uint64_t i = 0; !ret && i < n; i++)
		memset((uint8_t *)tg->pool.addr + (uint64_t)tg->perm[i] * SC_PAGE, 0, SC_PAGE);
	return ret;
}

/* 0 when nine words of each page (both ends and seven between) hold the
 * source's pattern, else -EIO with the first miss described in why. */
int sc_land_check(const struct target *tg, const struct tcmd *c, char *why, size_t len)
{
	const uint8_t *base = tg->pool.addr;
	uint64_t n;
	int ret = land_pages(tg, c, &n, why, len);

	for (uint64_t i = 0; !ret && i < n; i++) {
		for (uint64_t j = 0; j <= 8; j++) {
			uint64_t o = j == 8 ? SC_PAGE - 8 : j * SC_PAGE / 8;
			uint64_t at = (uint64_t)tg->perm[i] * SC_PAGE + o, w;
			memcpy(&w, base + at, 8);
			if (w != pat(at)) {
				snprintf(why, len,
				         "page %u (entry %" PRIu64 " of position %" PRIu64
				         ") did not land: its word at +%" PRIu64 " is %016" PRIx64
				         ", expected %016" PRIx64,
				         tg->perm[i], i % c->a, i / c->a, o, w, pat(at));
				return -EIO;
			}
		}
	}
	return ret;
}
