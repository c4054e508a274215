/* SPDX-License-Identifier: MIT */
/*
 * The direct baseline: the same provider driven with no daemon and no
 * rings. In the receiver process, N endpoints register the one region and
 * poll their CQs while a direct run is on (both providers progress only
 * when the owner reads the CQ), parked otherwise so the movers have the
 * cores. In this process, N sender threads, each with its own endpoint
 * opened by mover/fabric.c and pinned where shard i of mover A runs, post
 * exactly the fabric writes the shards would: the same iov merging, 4 MiB
 * pieces, flags, FI_MORE rule and window. A row family says, through
 * struct dfamily, which spans of each batch a thread queues; the threads do
 * the rest. A striped batch of a coupled run is done when every thread's
 * part of it is, and a new one starts only as an old one is done, as the
 * client's window counts batches.
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "harness.h"

/* ---- the receiver endpoints, in the receiver process ---- */

static void rx_fail(struct target *tg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rx_fail(struct target *tg, const char *fmt, ...)
{
	int zero = 0;
	va_list ap;

	if (!atomic_compare_exchange_strong(&tg->failed, &zero, 1))
		return;
	va_start(ap, fmt);
	vsnprintf(tg->fail_msg, sizeof(tg->fail_msg), fmt, ap);
	va_end(ap);
}

/* Progress: target-side writes complete nothing here, but errors may. */
static void rx_poll(struct drecv *r, struct fi_cq_data_entry *ent)
{
	ssize_t n = fi_cq_read(r->fab.cq, ent, CQ_BATCH);
	struct fi_cq_err_entry e = {0};
	char buf[128];

	if (n == -FI_EAVAIL) {
		if (fi_cq_readerr(r->fab.cq, &e, 0) != 1)
			return;
		const char *pe =
		    fi_cq_strerror(r->fab.cq, e.prov_errno, e.err_data, buf, sizeof(buf));
		rx_fail(r->tg, "receiver endpoint %u: error completion: %s: %s", r->id,
		        fi_strerror(e.err), pe ? pe : "");
	} else if (n < 0 && n != -FI_EAGAIN) {
		rx_fail(r->tg, "receiver endpoint %u: fi_cq_read: %s", r->id, fi_strerror((int)-n));
	}
}

/* One receiving endpoint: writes land without it, but both providers
 * progress only when the owner reads the CQ, so it polls while a direct run
 * is on and parks otherwise (the movers then have the cores). */
static void *drecv_main(void *arg)
{
	struct drecv *r = arg;
	struct target *tg = r->tg;
	struct fi_cq_data_entry ent[CQ_BATCH];
	void *desc;
	uint64_t key;
	int ret;

	ret = mv_topo_pin(r->cpu);
	if (ret) {
		snprintf(r->msg, sizeof(r->msg), "pinning receiver endpoint %u to CPU %d: %s",
		         r->id, r->cpu, strerror(-ret));
		goto out_start;
	}
	ret = mv_fabric_open(&r->fab, tg->prov, tg->iface[0] ? tg->iface : NULL, 0);
	if (ret) {
		snprintf(r->msg, sizeof(r->msg), "receiver endpoint %u: opening %s%s%s: %s", r->id,
		         tg->prov, tg->iface[0] ? " on " : "", tg->iface, fi_strerror(-ret));
		goto out_start;
	}
	ret = mv_fabric_reg(&r->fab, tg->pool.addr, tg->pool.len, 0x100 + r->id, &r->mr, &desc,
	                    &key, r->msg, sizeof(r->msg));
	if (ret)
		mv_fabric_close(&r->fab);
out_start:
	r->status = ret;
	sem_post(&tg->started);
	if (ret)
		return NULL;

	for (;;) {
		/* A1 pairs with R1 in target_state() */
		int st = atomic_load_explicit(&tg->state, memory_order_acquire);
		if (st == RX_RUN) {
			rx_poll(r, ent);
			if (tg->yield)
				sched_yield();
			continue;
		}
		if (st == RX_STOP)
			break;
		pthread_mutex_lock(&tg->mu);
		tg->parked++;
		pthread_cond_signal(&tg->parked_cv);
		while (atomic_load_explicit(&tg->state, memory_order_relaxed) == RX_PARK)
			pthread_cond_wait(&tg->go, &tg->mu);
		tg->parked--;
		pthread_mutex_unlock(&tg->mu);
	}
	fi_close(&r->mr->fid);
	mv_fabric_close(&r->fab);
	return NULL;
}

void target_state(struct target *tg, int st)
{
	pthread_mutex_lock(&tg->mu);
	/* R1 pairs with A1 in drecv_main() */
	atomic_store_explicit(&tg->state, st, memory_order_release);
	pthread_cond_broadcast(&tg->go);
	pthread_mutex_unlock(&tg->mu);
}

/* Waits until every endpoint thread parked; 0, or -ETIMEDOUT after 5 s. */
int target_park(struct target *tg)
{
	struct timespec ts;
	int ret = 0;

	target_state(tg, RX_PARK);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	pthread_mutex_lock(&tg->mu);
	while (tg->parked < tg->n && ret == 0)
		ret = pthread_cond_timedwait(&tg->parked_cv, &tg->mu, &ts);
	pthread_mutex_unlock(&tg->mu);
	return ret ? -ret : 0;
}

void direct_down(struct target *tg)
{
	if (!tg->rx)
		return;
	target_state(tg, RX_STOP);
	for (uint32_t i = 0; i < tg->n; i++)
		if (tg->rx[i].made)
			pthread_join(tg->rx[i].thread, NULL);
	free(tg->rx);
	tg->rx = NULL;
	tg->n = 0;
}

int direct_up(struct target *tg, const struct tcmd *c, struct trep *rep)
{
	struct timespec ts;
	uint32_t i, made = 0;
	int ret = 0;

	if (!tg->c) {
		snprintf(rep->msg, sizeof(rep->msg), "no region: set up the mover side first");
		return -EINVAL;
	}
	if (c->nshards == 0 || c->nshards > MV_MAX_SHARDS)
		return -EINVAL;
	snprintf(tg->prov, sizeof(tg->prov), "%s", c->prov);
	snprintf(tg->iface, sizeof(tg->iface), "%s", c->iface);
	tg->yield = c->yield;
	tg->rx = calloc(c->nshards, sizeof(*tg->rx));
	if (!tg->rx)
		return -ENOMEM;
	tg->n = c->nshards;
	tg->parked = 0;
	atomic_store(&tg->state, RX_PARK);
	for (i = 0; i < c->nshards; i++) {
		struct drecv *r = &tg->rx[i];
		r->tg = tg;
		r->id = i;
		r->cpu = c->cpus[i];
		r->status = -EINPROGRESS;
		if (pthread_create(&r->thread, NULL, drecv_main, r)) {
			r->status = -EAGAIN;
			snprintf(rep->msg, sizeof(rep->msg), "cannot start receiver thread %u", i);
			ret = -EAGAIN;
			break;
		}
		r->made = 1;
		made++;
		char name[16];
		snprintf(name, sizeof(name), "recv%u", i);
		pthread_setname_np(r->thread, name);
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += CALL_S - 5;
	for (i = 0; i < made; i++)
		if (sem_timedwait(&tg->started, &ts)) {
			snprintf(rep->msg, sizeof(rep->msg), "endpoints did not open in time");
			/* Threads still opening cannot be joined: the bench
			 * stops on this answer and the process goes with it. */
			return -ETIMEDOUT;
		}
	for (i = 0; i < made && !ret; i++)
		if (tg->rx[i].status) {
			ret = tg->rx[i].status;
			snprintf(rep->msg, sizeof(rep->msg), "%s", tg->rx[i].msg);
		}
	if (ret) {
		direct_down(tg);
		return ret;
	}
	for (i = 0; i < tg->n; i++) {
		struct drecv *r = &tg->rx[i];
		memcpy(rep->ep[i].addr, r->fab.addr, r->fab.addrlen);
		rep->ep[i].addrlen = r->fab.addrlen;
		/* Follow the mr_mode the provider returned: shm wants virtual
		 * addresses, tcp;ofi_rxm offsets into the registration. */
		rep->ep[i].base = r->fab.virt_addr ? (uint64_t)(uintptr_t)tg->pool.addr : 0;
		rep->ep[i].key = fi_mr_key(r->mr);
	}
	return target_park(tg);
}

/* ---- the sender threads, in this process ---- */

static struct dop *dop_get(struct dsend *t)
{
	struct dop *op = t->free_ops;

	t->free_ops = op->next;
	memset(op, 0, offsetof(struct dop, iov));
	return op;
}

static void dop_put(struct dsend *t, struct dop *op)
{
	op->next = t->free_ops;
	t->free_ops = op;
}

/*
 * Queues one span the way mv_take_run() in mover/take.c turns a WRITE into
 * fabric writes: cut into MV_CHUNK pieces, each merged into the previous
 * write of the same batch when it has room, by extending its last iov where
 * both sides are contiguous, else by adding an iov up to the provider's
 * limit.
 */
void dsend_queue(struct dsend *t, uint32_t track, uint64_t src_off, uint64_t dst_off, uint64_t len)
{
	for (uint64_t x = 0; x < len;) {
		uint64_t n = len - x < MV_CHUNK ? len - x : MV_CHUNK;
		uint8_t *la = t->p->src + src_off + x;
		uint64_t ra = t->rbase + dst_off + x;
		struct dop *tail = t->pend_tail;

		if (tail && tail->track == track && tail->bytes + n <= MV_CHUNK) {
			struct iovec *li = &tail->iov[tail->niov - 1];
			struct fi_rma_iov *ri = &tail->riov[tail->niov - 1];
			if ((uint8_t *)li->iov_base + li->iov_len == la &&
			    ri->addr + ri->len == ra) {
				li->iov_len += n;
				ri->len += n;
				tail->bytes += n;
				x += n;
				continue;
			}
			if (tail->niov < t->fab.iov_limit) {
				tail->iov[tail->niov] = (struct iovec){la, n};
				tail->desc[tail->niov] = t->desc;
				tail->riov[tail->niov] =
				    (struct fi_rma_iov){.addr = ra, .len = n, .key = t->rkey};
				tail->niov++;
				tail->bytes += n;
				x += n;
				continue;
			}
		}
		struct dop *op = dop_get(t);
		op->track = track;
		op->niov = 1;
		op->bytes = n;
		op->iov[0] = (struct iovec){la, n};
		op->desc[0] = t->desc;
		op->riov[0] = (struct fi_rma_iov){.addr = ra, .len = n, .key = t->rkey};
		op->next = NULL;
		if (t->pend_tail)
			t->pend_tail->next = op;
		else
			t->pend_head = op;
		t->pend_tail = op;
		t->track_left[track]++;
		x += n;
	}
}

/* Posts the pending FIFO as mv_post() in mover/post.c does: same flags,
 * FI_MORE while the queue surely takes the next one and the burst's byte
 * budget lasts, EAGAIN ends it. */
static int dpost(struct dsend *t)
{
	uint64_t burst = 0;
	int n = 0;

	while (t->pend_head && burst < MV_BURST_BYTES) {
		struct dop *op = t->pend_head;
		uint64_t flags = FI_COMPLETION | t->fab.dc_flag;
		struct fi_msg_rma msg = {
		    .msg_iov = op->iov,
		    .desc = op->desc,
		    .iov_count = op->niov,
		    .addr = t->peer,
		    .rma_iov = op->riov,
		    .rma_iov_count = op->niov,
		    .context = &op->ctx,
		};

		if (op->next && burst + op->bytes < MV_BURST_BYTES &&
		    t->posted + 1 < t->fab.tx_size)
			flags |= FI_MORE;
		ssize_t ret = fi_writemsg(t->fab.ep, &msg, flags);
		if (ret == -FI_EAGAIN)
			break;
		if (ret) {
			snprintf(t->err, sizeof(t->err), "direct sender %u: fi_writemsg: %s", t->id,
			         fi_strerror((int)-ret));
			return -1;
		}
		t->pend_head = op->next;
		if (!t->pend_head)
			t->pend_tail = NULL;
		t->posted++;
		burst += op->bytes;
		n++;
	}
	return n;
}

static int dreap(struct dsend *t)
{
	struct fi_cq_data_entry ent[CQ_BATCH];
	int total = 0;

	for (;;) {
		ssize_t n = fi_cq_read(t->fab.cq, ent, CQ_BATCH);
		if (n == -FI_EAGAIN || n == 0)
			break;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry e = {0};
			char buf[128];
			const char *pe = NULL;
			if (fi_cq_readerr(t->fab.cq, &e, 0) == 1)
				pe = fi_cq_strerror(t->fab.cq, e.prov_errno, e.err_data, buf,
				                    sizeof(buf));
			snprintf(t->err, sizeof(t->err), "direct sender %u: a write failed: %s: %s",
			         t->id, fi_strerror(e.err), pe ? pe : "");
			return -1;
		}
		if (n < 0) {
			snprintf(t->err, sizeof(t->err), "direct sender %u: fi_cq_read: %s", t->id,
			         fi_strerror((int)-n));
			return -1;
		}
		for (ssize_t i = 0; i < n; i++) {
			struct dop *op = ent[i].op_context;
			t->posted--;
			t->bytes += op->bytes;
			if (--t->track_left[op->track] == 0) {
				t->track_free[t->ntrack_free++] = op->track;
				t->done++;
			}
			dop_put(t, op);
		}
		total += (int)n;
		if (n < CQ_BATCH)
			break;
	}
	if (total)
		t->t1 = now_s();
	return total;
}

/* This thread's share of a job: a stripe of every write when striped, as
 * shard id carries it under libclient; else every n-th batch whole, with a
 * window of its own (libclient gives a batch to its least loaded shard,
 * which at best keeps every shard as busy as this does). */
static void dsend_run(struct dsend *t, const struct djob *j)
{
	const struct geom *g = &j->g;
	uint32_t n = g->nshards;
	uint64_t mine, win, per_batch = j->fam->ops_per_batch(j, t->id);

	if (g->striped) {
		mine = per_batch ? j->nbatches : 0;
		win = g->window;
	} else {
		mine = j->nbatches / n + (t->id < j->nbatches % n);
		win = (g->window + n - 1) / n;
	}
	t->issued = t->done = t->bytes = 0;
	t->posted = 0;
	t->cut = 0;
	t->err[0] = 0;
	t->pend_head = t->pend_tail = t->free_ops = NULL;
	t->ops = calloc(win * per_batch + 1, sizeof(*t->ops));
	t->track_left = calloc(win, sizeof(*t->track_left));
	t->track_free = calloc(win, sizeof(*t->track_free));
	if (!t->ops || !t->track_left || !t->track_free) {
		snprintf(t->err, sizeof(t->err), "direct sender %u: out of memory", t->id);
		goto out;
	}
	for (uint64_t i = 0; i < win * per_batch + 1; i++)
		dop_put(t, &t->ops[i]);
	for (uint32_t i = 0; i < win; i++)
		t->track_free[i] = (uint32_t)(win - 1 - i);
	t->ntrack_free = (uint32_t)win;

	double start = now_s(), deadline = start + j->limit_s, last = start;
	t->t0 = t->t1 = start;
	while (t->done < mine || t->issued > t->done) {
		if (!t->cut && (now_s() > deadline ||
		                atomic_load_explicit(&t->p->abort, memory_order_relaxed)))
			t->cut = 1;
		if (t->cut && t->issued == t->done)
			break;
		uint64_t limit = mine;
		if (j->coupled && g->striped) {
			/* As through the mover: batch b may start once batch
			 * b - window completed everywhere. */
			uint64_t low = UINT64_MAX;
			for (uint32_t i = 0; i < n; i++) {
				uint64_t d = atomic_load_explicit(&t->p->t[i].done_pub,
				                                  memory_order_relaxed);
				low = d < low ? d : low;
			}
			if (low + win < limit)
				limit = low + win;
		}
		while (!t->cut && t->issued < limit && t->ntrack_free) {
			uint64_t b = g->striped ? t->issued : t->issued * n + t->id;
			uint32_t track = t->track_free[--t->ntrack_free];
			j->fam->build(t, j, b, track);
			t->issued++;
			if (!t->track_left[track]) {
				/* Nothing of this batch fell to this thread. */
				t->track_free[t->ntrack_free++] = track;
				t->done++;
				atomic_store_explicit(&t->done_pub, t->done, memory_order_relaxed);
			}
		}
		int post = dpost(t), got = post < 0 ? -1 : dreap(t);
		if (post < 0 || got < 0)
			goto out; /* ops stay allocated: the provider may still hold them */
		if (got > 0)
			atomic_store_explicit(&t->done_pub, t->done, memory_order_relaxed);
		double tn = now_s();
		if (got > 0) {
			last = tn;
		} else if (tn - last > STALL_S) {
			snprintf(t->err, sizeof(t->err),
			         "direct sender %u: no completion for %.0f s with %u writes posted",
			         t->id, STALL_S, t->posted);
			goto out;
		} else if (j->yield && !post) {
			sched_yield();
		}
	}
	free(t->ops);
	t->ops = NULL;
out:
	free(t->track_left);
	free(t->track_free);
	t->track_left = t->track_free = NULL;
	if (t->err[0])
		atomic_store(&t->p->abort, 1);
}

static void *dsend_main(void *arg)
{
	struct dsend *t = arg;
	struct dpool *p = t->p;
	const struct tep *ep = &p->eps->ep[t->id % p->n];
	uint64_t key, seen = 0;
	int ret;

	ret = mv_topo_pin(t->cpu);
	if (ret) {
		snprintf(t->err, sizeof(t->err), "pinning direct sender %u to CPU %d: %s", t->id,
		         t->cpu, strerror(-ret));
		goto out_start;
	}
	/* Opened after pinning, like a shard's, so its memory is near it. */
	ret = mv_fabric_open(&t->fab, p->prov, p->iface, 0);
	if (ret) {
		snprintf(t->err, sizeof(t->err), "direct sender %u: opening %s: %s", t->id, p->prov,
		         fi_strerror(-ret));
		goto out_start;
	}
	ret = mv_fabric_reg(&t->fab, p->src, p->src_len, 0x200 + t->id, &t->mr, &t->desc, &key,
	                    t->err, sizeof(t->err));
	if (!ret) {
		ret = mv_fabric_av_insert(&t->fab, ep->addr, &t->peer);
		if (ret) {
			snprintf(t->err, sizeof(t->err), "direct sender %u: fi_av_insert: %s",
			         t->id, fi_strerror(-ret));
			fi_close(&t->mr->fid);
		}
	}
	if (ret)
		mv_fabric_close(&t->fab);
	t->rbase = ep->base;
	t->rkey = ep->key;
out_start:
	pthread_mutex_lock(&p->mu);
	t->status = ret;
	p->nstarted++;
	pthread_cond_broadcast(&p->done_cv);
	pthread_mutex_unlock(&p->mu);
	if (ret)
		return NULL;

	for (;;) {
		struct djob j;
		pthread_mutex_lock(&p->mu);
		while (p->gen == seen && !p->stop)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->stop) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		seen = p->gen;
		j = p->job;
		pthread_mutex_unlock(&p->mu);

		dsend_run(t, &j);

		pthread_mutex_lock(&p->mu);
		p->ndone++;
		pthread_cond_broadcast(&p->done_cv);
		pthread_mutex_unlock(&p->mu);
		if (t->err[0])
			return NULL; /* the bench stops; the fabric may still hold ops */
	}
	fi_close(&t->mr->fid);
	mv_fabric_close(&t->fab);
	return NULL;
}

/* Waits under p->mu until *count reaches want; 0, or -ETIMEDOUT. */
static int pool_wait(struct dpool *p, uint32_t *count, uint32_t want, double secs)
{
	struct timespec ts;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)secs + 1;
	pthread_mutex_lock(&p->mu);
	while (*count < want && ret == 0)
		ret = pthread_cond_timedwait(&p->done_cv, &p->mu, &ts);
	pthread_mutex_unlock(&p->mu);
	return ret ? -ret : 0;
}

/* Opens the receiver endpoints in the receiver process, then one sender
 * thread per shard here, each connected to its receiver; dies on failure. */
void direct_pool_start(struct cfg *x)
{
	struct dpool *p = &x->dp;
	struct tcmd c;
	uint32_t n = x->n;

	memset(&c, 0, sizeof(c));
	c.op = T_DIRECT_UP;
	c.nshards = n;
	c.yield = !x->cpu.pinned;
	memcpy(c.cpus, x->cpu.b, sizeof(c.cpus));
	snprintf(c.prov, sizeof(c.prov), "%s", x->fab);
	snprintf(c.iface, sizeof(c.iface), "%s", x->iface ? x->iface : "");
	tcall(&c, &x->eps);

	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	p->n = n;
	p->prov = x->fab;
	p->iface = x->iface;
	p->src = x->src.addr;
	p->src_len = x->src.len;
	p->eps = &x->eps;
	p->t = calloc(n, sizeof(*p->t));
	if (!p->t)
		die("out of memory");
	uint32_t made = 0;
	for (; made < n; made++) {
		p->t[made].p = p;
		p->t[made].id = made;
		p->t[made].cpu = x->cpu.a[made];
		if (pthread_create(&p->t[made].thread, NULL, dsend_main, &p->t[made]))
			die("cannot start direct sender thread %u", made);
		char name[16];
		snprintf(name, sizeof(name), "send%u", made);
		pthread_setname_np(p->t[made].thread, name);
	}
	if (pool_wait(p, &p->nstarted, n, CALL_S))
		die("direct: sender endpoints did not open within %d s", CALL_S);
	for (uint32_t i = 0; i < n; i++)
		if (p->t[i].status)
			die("%s", p->t[i].err);
}

/* Undoes direct_pool_start() in reverse. */
void direct_pool_stop(struct cfg *x)
{
	struct dpool *p = &x->dp;

	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (uint32_t i = 0; i < x->n; i++)
		pthread_join(p->t[i].thread, NULL);
	free(p->t);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done_cv);
	pthread_mutex_destroy(&p->mu);
	tsimple(T_DIRECT_DOWN, 0);
}

void direct_job(struct cfg *x, const struct djob *j, struct book *b)
{
	struct dpool *p = &x->dp;

	tsimple(T_DIRECT_GO, 0);
	book_snap(b, 1);
	for (uint32_t i = 0; i < p->n; i++) {
		/* A thread no stripe falls to never holds a batch back. */
		int none = j->g.striped && j->fam->ops_per_batch(j, i) == 0;
		atomic_store(&p->t[i].done_pub, none ? UINT64_MAX : 0);
	}
	pthread_mutex_lock(&p->mu);
	p->job = *j;
	p->ndone = 0;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	if (pool_wait(p, &p->ndone, p->n, j->limit_s + STALL_S + 5))
		die("direct: the sender threads did not finish within %.0f s",
		    j->limit_s + STALL_S + 5);
	book_snap(b, 0);
	for (uint32_t i = 0; i < p->n; i++)
		if (p->t[i].err[0])
			die("%s", p->t[i].err);
}
