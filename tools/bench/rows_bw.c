/* SPDX-License-Identifier: MIT */
/*
 * Contiguous rows: write bandwidth and message rate at one write size.
 * A batch is min(64, 4 MiB/size) writes, each at its own slot with a gap
 * after it (contiguous neighbours would merge into one long fabric write
 * and the size would no longer be the size); slot k of window position p
 * is at the same offset in both regions. Through the mover the client
 * keeps a window of batches in flight; libclient stripes writes from
 * 256 KiB over the shards, and the direct threads post the same stripes.
 * Every run's slots are cleared before it and checked after it.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

struct geom geom_of(uint64_t size, uint32_t n)
{
	struct geom g = {.size = size, .nshards = n};
	uint64_t k = BATCH_BYTES / size, w;

	g.k = k < 1 ? 1 : k > BATCH_WRITES_MAX ? BATCH_WRITES_MAX : (uint32_t)k;
	/* A gap after each write: contiguous neighbours would merge into one
	 * long fabric write and the size would no longer be the size. */
	g.stride = (size + 4095) / 4096 * 4096 + SLOT_GAP;
	w = window_bytes / ((uint64_t)g.k * size);
	if (w > (uint64_t)BATCHES_PER_SHARD * n)
		w = (uint64_t)BATCHES_PER_SHARD * n;
	g.window = w < 2 ? 2 : (uint32_t)w;
	g.striped = size >= MV_STRIPE_MIN && n > 1;
	return g;
}

static uint64_t slot_off(const struct geom *g, uint64_t batch, uint32_t w)
{
	return ((batch % g->window) * g->k + w) * g->stride;
}

uint64_t geom_bytes(const struct geom *g)
{
	return (uint64_t)g->window * g->k * g->stride;
}

static void clear_and_check(const struct geom *g, uint64_t npos, int check, const char *who)
{
	struct tcmd c = {.op = check ? T_CHECK : T_CLEAR};
	static struct trep rep;
	char sz[32];

	snprintf(c.tag, sizeof(c.tag), " %s a %s run of %s writes", check ? "after" : "before", who,
	         size_str(g->size, sz, sizeof(sz)));

	if (npos > g->window)
		npos = g->window;
	if (check) {
		c.a = g->stride;
		c.b = g->size;
		c.c = npos;
		c.d = g->k;
	} else {
		c.a = npos * g->k * g->stride;
	}
	tcall(&c, &rep);
}

/* Through the mover: a window of batches, each k writes of one size. */
static void mover_meas(struct cfg *x, const struct geom *g, uint64_t nbatches, double limit_s,
                       struct meas *m)
{
	struct mvc_event ev[64];
	uint64_t submitted = 0, done = 0, bytes = 0;
	uint32_t inflight = 0;
	int spin = x->cpu.pinned && !x->o->wait, ret;

	clear_and_check(g, nbatches, 0, "mover");
	memset(m, 0, sizeof(*m));
	book_snap(&book_mover, 1);
	double t0 = now_s(), deadline = t0 + limit_s, last = t0, t1 = t0;
	while (done < submitted || (!m->cut && submitted < nbatches)) {
		if (!m->cut && now_s() > deadline)
			m->cut = 1;
		while (!m->cut && submitted < nbatches && inflight < g->window) {
			uint32_t w;
			for (w = 0, ret = 0; w < g->k && !ret; w++) {
				uint64_t off = slot_off(g, submitted, w);
				ret = mvc_write(x->c, x->src.region, off, x->dst, off, g->size);
			}
			if (!ret)
				ret = mvc_submit(x->c, submitted);
			if (ret == -EAGAIN) {
				mvc_abort(x->c);
				break; /* rings full: reap first */
			}
			if (ret)
				die("through the mover: building batch %" PRIu64 ": %s", submitted,
				    mvc_error(x->c));
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
				die("through the mover: batch %" PRIu64
				    " failed (cause %d): %s: %s",
				    ev[i].cookie, ev[i].cause, ev[i].msg, strerror(-ev[i].status));
			if (ev[i].bytes != (uint64_t)g->k * g->size)
				die("through the mover: batch %" PRIu64 " reports %" PRIu64
				    " bytes written; it had %" PRIu64,
				    ev[i].cookie, ev[i].bytes, (uint64_t)g->k * g->size);
			bytes += ev[i].bytes;
			done++;
			inflight--;
		}
		double tn = now_s();
		if (n > 0)
			last = t1 = tn;
		else if (tn - last > STALL_S)
			die("through the mover: no completion for %.0f s with %u batches in flight",
			    STALL_S, inflight);
	}
	book_snap(&book_mover, 0);
	m->secs = t1 - t0;
	m->bytes = bytes;
	m->checked = submitted < g->window ? submitted : g->window;
	clear_and_check(g, m->checked, 1, "mover");
}

void bw_mover_run(struct cfg *x, const struct geom *g, double limit_s, struct meas *m)
{
	mover_meas(x, g, UINT64_MAX, limit_s, m);
}

/* What of a batch falls to direct thread id: a stripe of every write
 * when striped, as shard id carries it under libclient; else the whole
 * batch (every n-th batch falls to it). */
static void bw_share(const struct geom *g, uint32_t id, uint64_t *soff, uint64_t *slen)
{
	*soff = 0;
	*slen = g->size;
	if (g->striped) {
		uint64_t part = mv_stripe_part(g->size, g->nshards);
		*soff = (uint64_t)id * part;
		*slen = *soff >= g->size ? 0 : g->size - *soff < part ? g->size - *soff : part;
	}
}

static uint64_t bw_ops_per_batch(const struct djob *j, uint32_t id)
{
	uint64_t soff, slen;

	bw_share(&j->g, id, &soff, &slen);
	return (uint64_t)j->g.k * ((slen + MV_CHUNK - 1) / MV_CHUNK);
}

static void bw_build(struct dsend *t, const struct djob *j, uint64_t batch, uint32_t track)
{
	uint64_t soff, slen;

	bw_share(&j->g, t->id, &soff, &slen);
	for (uint32_t w = 0; w < j->g.k; w++) {
		uint64_t off = slot_off(&j->g, batch, w) + soff;
		dsend_queue(t, track, off, off, slen);
	}
}

static const struct dfamily bw_family = {.ops_per_batch = bw_ops_per_batch, .build = bw_build};

/* The baseline: the same batches, posted by the threads directly. */
static void direct_meas(struct cfg *x, const struct geom *g, uint64_t nbatches, double limit_s,
                        int coupled, struct book *b, struct meas *m)
{
	struct dpool *p = &x->dp;
	uint64_t min_cover = UINT64_MAX;

	clear_and_check(g, nbatches, 0, "direct");
	direct_job(x,
	           &(struct djob){.g = *g,
	                          .fam = &bw_family,
	                          .nbatches = nbatches,
	                          .limit_s = limit_s,
	                          .yield = !x->cpu.pinned,
	                          .coupled = coupled},
	           b);

	memset(m, 0, sizeof(*m));
	double t0 = p->t[0].t0, t1 = p->t[0].t1;
	for (uint32_t i = 0; i < p->n; i++) {
		const struct dsend *t = &p->t[i];
		uint64_t cover, soff, slen;
		t0 = t->t0 < t0 ? t->t0 : t0;
		t1 = t->t1 > t1 ? t->t1 : t1;
		m->bytes += t->bytes;
		m->cut |= t->cut;
		/* Batches below cover were all issued (and completed) by this
		 * thread's share: its first batch not issued. */
		bw_share(g, i, &soff, &slen);
		if (!slen)
			continue; /* no stripe falls to this thread */
		if (t->bytes != t->issued * g->k * slen)
			die("direct sender %u: %" PRIu64 " bytes completed; its %" PRIu64
			    " batches carry %" PRIu64,
			    i, t->bytes, t->issued, t->issued * g->k * slen);
		cover = g->striped ? t->issued : t->issued * x->n + i;
		min_cover = cover < min_cover ? cover : min_cover;
	}
	if (min_cover > nbatches)
		min_cover = nbatches;
	m->secs = t1 - t0;
	m->checked = min_cover < g->window ? min_cover : g->window;
	clear_and_check(g, m->checked, 1, "direct");
	tsimple(T_DIRECT_PARK, 0);
}

static double bar_for(uint64_t size)
{
	if (size >= 65536)
		return 0.97; /* bandwidth */
	if (size <= 4096)
		return 0.90; /* message rate */
	return 0;
}

static const struct rowkind bw_kind = {.mover = mover_meas, .direct = direct_meas, .uncoupled = 1};

void bw_row(struct cfg *x, uint64_t size, struct row *r, int first)
{
	struct geom g = geom_of(size, x->n);

	pairs_run(x, &bw_kind, &g, r, first);
	r->bar = bar_for(size);
	r->pass = r->bar == 0 || r->ratio >= r->bar;
}

/* In the receiver: 0 when every sampled word of the first npos window
 * positions holds the source's pattern, else -EIO with the first miss
 * described in why. */
int bw_land_check(const struct target *tg, const struct tcmd *c, char *why, size_t len)
{
	uint64_t stride = c->a, size = c->b, npos = c->c, k = c->d;
	const uint8_t *base = tg->pool.addr;

	if (npos * k * stride > tg->pool.len) {
		snprintf(why, len, "check beyond the region");
		return -EINVAL;
	}
	if (size < 8)
		return 0;

	for (uint64_t s = 0; s < npos * k; s++) {
		/* Nine words: both ends and seven between, so every stripe of a
		 * write split over up to eight shards is looked at. */
		for (uint64_t j = 0; j <= 8; j++) {
			uint64_t o = j == 8 ? size - 8 : (j * size / 8) & ~7ull;
			uint64_t at = s * stride + o, w;
			memcpy(&w, base + at, 8);
			if (w != pat(at)) {
				snprintf(why, len,
				         "the write of slot %" PRIu64
				         " did not land: its word at +%" PRIu64 " is %016" PRIx64
				         ", expected %016" PRIx64,
				         s, o, w, pat(at));
				return -EIO;
			}
		}
	}
	return 0;
}
