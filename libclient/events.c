/* SPDX-License-Identifier: MIT */
/*
 * Completions: batch and immediate entries read from the completion rings
 * and turned into events, counted immediates (mvc_imm_expect), the sleeping
 * wait on the client's eventfd, and what a client is told when its mover is
 * gone.
 */
#include "mvc_int.h"

#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct imm_ent *imm_find(struct mvc *c, uint32_t value, int add)
{
	if (add && (c->imm_used + 1) * 2 > c->imm_cap) {
		uint32_t cap = c->imm_cap ? c->imm_cap * 2 : 256;
		struct imm_ent *t = calloc(cap, sizeof(*t)), *old = c->imm_tab;
		if (!t)
			return NULL;
		for (uint32_t i = 0; i < c->imm_cap; i++) {
			if (!old[i].used)
				continue;
			uint32_t h = old[i].value * 2654435761u & (cap - 1);
			while (t[h].used)
				h = (h + 1) & (cap - 1);
			t[h] = old[i];
		}
		free(old);
		c->imm_tab = t;
		c->imm_cap = cap;
	}
	if (!c->imm_cap)
		return NULL;
	uint32_t h = value * 2654435761u & (c->imm_cap - 1);
	while (c->imm_tab[h].used) {
		if (c->imm_tab[h].value == value)
			return &c->imm_tab[h];
		h = (h + 1) & (c->imm_cap - 1);
	}
	if (!add)
		return NULL;
	c->imm_tab[h] = (struct imm_ent){.value = value, .used = 1};
	c->imm_used++;
	return &c->imm_tab[h];
}

static int imm_ready(struct mvc *c, struct imm_ent *e, struct mvc_event *ev)
{
	if (e->want && e->fail && e->count < e->want) {
		/* Its peer went down first: what arrived goes with the failure. */
		*ev = (struct mvc_event){.type = MVC_EV_IMM_COUNT,
		                         .status = e->fail,
		                         .cookie = e->cookie,
		                         .imm = e->value,
		                         .count = e->count,
		                         .cause = (int)e->cause};
		if (e->cause == MVC_CAUSE_MOVER_GONE)
			snprintf(ev->msg, sizeof(ev->msg),
			         "the mover exited with %u of %u immediates of %u arrived",
			         e->count, e->want, e->value);
		else if (c->peers && e->from)
			snprintf(ev->msg, sizeof(ev->msg), "%s", c->peers[e->from - 1].msg);
		e->count = 0;
		e->want = 0;
		e->fail = 0;
		return 1;
	}
	e->fail = 0;
	if (!e->want || e->count < e->want)
		return 0;
	*ev = (struct mvc_event){
	    .type = MVC_EV_IMM_COUNT, .cookie = e->cookie, .imm = e->value, .count = e->want};
	e->count -= e->want;
	e->want = 0;
	return 1;
}

static int expect(struct mvc *c, uint32_t from, uint32_t imm, uint32_t count, uint64_t cookie)
{
	struct imm_ent *e = imm_find(c, imm, 1);
	const struct mvc_peer_state *st = from ? &c->peers[from - 1] : NULL;

	if (!e)
		return mvc_fail(c, -ENOMEM, "no memory to count immediates");
	if (count == 0)
		return mvc_fail(c, -EINVAL, "expecting 0 immediates of %u", imm);
	if (e->want)
		return mvc_fail(c, -EBUSY, "immediates of value %u are already being counted", imm);
	int down = st && st->cause && e->count < count;
	if ((e->count >= count || down) && c->ndue == c->due_cap) {
		uint32_t cap = c->due_cap ? c->due_cap * 2 : 16;
		uint32_t *due = realloc(c->imm_due, cap * sizeof(*due));
		if (!due)
			return mvc_fail(c, -ENOMEM, "no memory to count immediates");
		c->imm_due = due;
		c->due_cap = cap;
	}
	e->want = count;
	e->cookie = cookie;
	e->from = from;
	e->fail = down ? st->status : 0;
	e->cause = down ? st->cause : 0;
	/* Enough already arrived, or its peer is down: no later immediate
	 * may come to report it. */
	if (e->count >= count || down)
		c->imm_due[c->ndue++] = imm;
	return 0;
}

int mvc_imm_expect(struct mvc *c, uint32_t imm, uint32_t count, uint64_t cookie)
{
	return expect(c, 0, imm, count, cookie);
}

int mvc_imm_expect_from(struct mvc *c, uint32_t peer, uint32_t imm, uint32_t count, uint64_t cookie)
{
	if (peer >= MVC_MAX_PEERS || !c->peers || !c->peers[peer].added)
		return mvc_fail(c, -ENOENT, "peer %u is not one of this connection's peers", peer);
	return expect(c, peer + 1, imm, count, cookie);
}

static struct mvc_peer_state *peer_state(struct mvc *c, uint32_t peer)
{
	if (peer >= MVC_MAX_PEERS)
		return NULL;
	if (!c->peers)
		c->peers = calloc(MVC_MAX_PEERS, sizeof(*c->peers));
	return c->peers ? &c->peers[peer] : NULL;
}

void mvc_peer_down(struct mvc *c, uint32_t peer, int status, int cause, const char *msg)
{
	struct mvc_peer_state *st = peer_state(c, peer);

	if (!st)
		return;
	st->status = status;
	st->cause = (uint8_t)cause;
	snprintf(st->msg, sizeof(st->msg), "%s", msg);
	for (uint32_t i = 0; i < c->imm_cap; i++) {
		struct imm_ent *e = &c->imm_tab[i];
		if (e->used && e->want && e->from == peer + 1 && !e->fail) {
			e->fail = status;
			e->cause = (uint32_t)cause;
			c->peer_scan = 1;
		}
	}
}

void mvc_peer_added(struct mvc *c, uint32_t peer, uint64_t mover_id, uint32_t live, const char *msg)
{
	struct mvc_peer_state *st = peer_state(c, peer);

	if (!st)
		return;
	*st = (struct mvc_peer_state){.added = 1, .mover_id = mover_id};
	if (live == MV_LIVE_SILENT || live == MV_LIVE_DEAD)
		mvc_peer_down(c, peer, live == MV_LIVE_DEAD ? -EHOSTUNREACH : -ETIMEDOUT,
		              MVC_CAUSE_PEER_DEAD, msg);
	else if (live == MV_LIVE_CUT)
		mvc_peer_down(c, peer, -EPROTO, MVC_CAUSE_PEER_BAD, msg);
}

void mvc_peer_removed(struct mvc *c, uint32_t peer)
{
	char msg[88];

	if (peer >= MVC_MAX_PEERS || !c->peers || !c->peers[peer].added)
		return;
	snprintf(msg, sizeof(msg), "peer %u was removed before its immediates came", peer);
	mvc_peer_down(c, peer, -ENOENT, MVC_CAUSE_PEER_GONE, msg);
	c->peers[peer].added = 0;
	c->peers[peer].cause = 0;
}

void mvc_events_free(struct mvc *c)
{
	free(c->peers);
	c->peers = NULL;
}

/* A PEER completion: the mover's word on one of our peers' liveness. */
static void peer_told(struct mvc *c, const struct mv_cqe *e)
{
	/* The mover names its own id for the peer: ours may differ since a
	 * reconnect. */
	uint32_t p = mvc_app(c, MVC_OBJ_PEER, e->imm);

	if (p >= MVC_MAX_PEERS || !c->peers || !c->peers[p].added ||
	    c->peers[p].mover_id != e->cookie)
		return;
	if (e->region == MV_LIVE_OK) {
		c->peers[p].cause = 0;
		c->peers[p].status = 0;
		return;
	}
	char msg[88];
	memcpy(msg, e->msg, sizeof(msg));
	msg[sizeof(msg) - 1] = 0;
	mvc_peer_down(c, p, e->status < 0 ? e->status : -EHOSTUNREACH,
	              e->cause == MVC_CAUSE_PEER_BAD ? MVC_CAUSE_PEER_BAD : MVC_CAUSE_PEER_DEAD,
	              msg);
}

/*
 * The mover is gone, and the immediates it had received and not handed
 * over went with it: a count it was still short of might never be met, so
 * every open expectation fails, once, with what had arrived (mvc_poll
 * reports them, before the mover's return). One already failed by its
 * peer keeps that cause.
 */
void mvc_expects_gone(struct mvc *c)
{
	for (uint32_t i = 0; i < c->imm_cap; i++) {
		struct imm_ent *e = &c->imm_tab[i];
		if (!e->used || !e->want || e->fail || e->count >= e->want)
			continue;
		e->fail = -EPIPE;
		e->cause = MVC_CAUSE_MOVER_GONE;
		c->peer_scan = 1;
	}
}

/* Expectations failed by their peer or by the mover's loss, up to max
 * events. */
static int peer_failures(struct mvc *c, struct mvc_event *ev, int max)
{
	int n = 0;

	for (uint32_t i = 0; i < c->imm_cap && n < max; i++) {
		struct imm_ent *e = &c->imm_tab[i];
		if (e->used && e->want && e->fail)
			n += imm_ready(c, e, &ev[n]);
	}
	if (n < max)
		c->peer_scan = 0;
	return n;
}

/* One completion entry to at most one event; 1 if ev was filled. */
/* How long an immediate the mover read at `at` waited for us. The stamp is
 * the mover's clock word, CLOCK_MONOTONIC on this host; one from the
 * future (or none) is not a duration. */
static void lat_note(struct mvc *c, uint64_t at)
{
	struct timespec ts;

	if (!at)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	if (at > now)
		return;
	uint64_t ns = now - at;
	uint32_t b = ns < 128 ? 0 : 64 - (uint32_t)__builtin_clzll(ns) - 7;
	c->lat.hist[b < MVC_LAT_BUCKETS ? b : MVC_LAT_BUCKETS - 1]++;
	c->lat.count++;
	c->lat.sum_ns += ns;
}

int mvc_latency(const struct mvc *c, struct mvc_latency *out)
{
	if (!c || !out)
		return -EINVAL;
	*out = c->lat;
	return 0;
}

static int translate(struct mvc *c, const struct mv_cqe *q, struct mvc_event *ev)
{
	struct mv_cqe e;

	memcpy(&e, q, sizeof(e)); /* the slot is shared memory: read it once */
	if (e.type == MV_CQE_IMM) {
		lat_note(c, e.bytes);
		struct imm_ent *t = imm_find(c, e.imm, 1);
		if (t) {
			t->count++;
			if (t->want)
				return imm_ready(c, t, ev);
		}
		*ev = (struct mvc_event){.type = MVC_EV_IMM,
		                         .imm = e.imm,
		                         .region = mvc_app(c, MVC_OBJ_REGION, e.region)};
		return 1;
	}
	if (e.type == MV_CQE_PEER) {
		peer_told(c, &e);
		return 0;
	}
	if (e.type == MV_CQE_CUTOFF) {
		/* Its batches in flight fail in mvc_poll(); every shard that
		 * served the client says it once, and the first one counts. */
		if (!c->cut[0]) {
			memcpy(c->cut, e.msg, sizeof(c->cut));
			c->cut[sizeof(c->cut) - 1] = 0;
			if (!c->cut[0])
				snprintf(c->cut, sizeof(c->cut), "no reason given");
		}
		return 0;
	}
	/* A completion of no batch in flight (after a cut-off, or of a part
	 * that a forged END finished twice) is not one of ours: the cookie,
	 * copied from the batch's END, must be the one it was submitted with. */
	if (e.type != MV_CQE_BATCH || e.batch >= c->info.max_batches || !c->busy[e.batch] ||
	    e.cookie != c->cookies[e.batch])
		return 0;
	/* The id at fault, as the application knows it: a region of ours or
	 * an import (the words in msg are the mover's). */
	uint32_t at = e.region;
	if (e.status) {
		at = mvc_app(c, MVC_OBJ_REGION, e.region);
		if (at == e.region)
			at = mvc_app(c, MVC_OBJ_IMPORT, e.region);
	}
	*ev = (struct mvc_event){.type = MVC_EV_BATCH,
	                         .status = e.status,
	                         .bytes = e.bytes,
	                         .region = at,
	                         .cause = e.cause};
	memcpy(ev->msg, e.msg, sizeof(ev->msg));
	ev->msg[sizeof(ev->msg) - 1] = 0;
	ev->cookie = c->cookies[e.batch];
	mvc_batch_done(c, e.batch);
	return 1;
}

/* Fails up to max batches in flight, each with one event saying why. */
static int fail_inflight(struct mvc *c, struct mvc_event *ev, int max, int status, int cause,
                         const char *msg)
{
	int n = 0;

	for (uint32_t b = 0; b < c->info.max_batches && n < max; b++) {
		if (!c->busy[b])
			continue;
		ev[n++] = (struct mvc_event){.type = MVC_EV_BATCH,
		                             .status = status,
		                             .cookie = c->cookies[b],
		                             .cause = cause};
		snprintf(ev[n - 1].msg, sizeof(ev[n - 1].msg), "%s", msg);
		mvc_batch_done(c, b);
	}
	return n;
}

/* The mover is gone: each batch in flight fails once; then -EPIPE until a
 * reconnect (rejoin.c) brings it back. */
static int mover_gone(struct mvc *c, struct mvc_event *ev, int max)
{
	mvc_gone(c);
	int n = fail_inflight(c, ev, max, -EPIPE, MVC_CAUSE_MOVER_GONE,
	                      "the mover exited before the batch completed");
	if (c->peer_scan && n < max)
		n += peer_failures(c, ev + n, max - n);
	if (n)
		return n;
	if (mvc_rejoin_due(c)) {
		ev[0] = c->back_ev;
		c->back = 0;
		return 1;
	}
	if (mvc_rejoin_wait_ns(c) >= 0)
		return -EPIPE; /* mvc_error() says when the next try is */
	return mvc_fail(c, -EPIPE, "the mover is gone");
}

/* How often an idle mvc_poll looks whether the mover hung up: a polling
 * client learns that its mover is gone without sleeping in mvc_wait. */
#define HUP_CHECK_POLLS 64
#define HUP_CHECK_NS    10000000ll

/* Whether the mover's end of the socket hung up, asked now. */
static int sock_hung_up(const struct mvc *c)
{
	struct pollfd pf = {.fd = c->sock, .events = POLLRDHUP};

	return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

static int hung_up(struct mvc *c)
{
	struct timespec ts;

	if (++c->idle_polls < HUP_CHECK_POLLS)
		return 0;
	c->idle_polls = 0;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	if (now - c->hup_at < HUP_CHECK_NS)
		return 0;
	c->hup_at = now;
	return sock_hung_up(c);
}

static void disarm_rings(struct mvc *c, uint32_t n)
{
	for (uint32_t s = 0; s < n; s++)
		shmring_disarm(&c->sh[s].comp);
}

/* Arms the doorbell of every completion ring before a sleep: 1, none left
 * armed, when one holds entries already; else 0, all armed (disarm_rings()
 * after the sleep). */
static int arm_rings(struct mvc *c)
{
	for (uint32_t s = 0; s < c->info.nshards; s++)
		if (shmring_arm_doorbell(&c->sh[s].comp)) {
			disarm_rings(c, s); /* ring s disarmed itself */
			return 1;
		}
	return 0;
}

/* Cut off: what is in flight fails with the mover's reason. */
static int fail_cut(struct mvc *c, struct mvc_event *ev, int max)
{
	char msg[sizeof(ev->msg)];

	snprintf(msg, sizeof(msg), "cut off: %s", c->cut);
	return fail_inflight(c, ev, max, -EPROTO, MVC_CAUSE_PROTOCOL, msg);
}

int mvc_poll(struct mvc *c, struct mvc_event *ev, int max)
{
	int n = 0;

	if (c->cut[0]) {
		n = fail_cut(c, ev, max);
		return n ? n
		         : mvc_fail(c, -EPROTO, "the mover cut this connection off: %s", c->cut);
	}
	/* Expectations the mover's loss failed go before its return. */
	if (c->peer_scan && max > 0)
		n += peer_failures(c, ev, max);
	if (c->back && n < max) {
		ev[n++] = c->back_ev;
		c->back = 0;
	}
	while (c->ndue && n < max) {
		struct imm_ent *t = imm_find(c, c->imm_due[--c->ndue], 0);
		if (t)
			n += imm_ready(c, t, &ev[n]);
	}
	if (c->peer_scan && n < max)
		n += peer_failures(c, ev + n, max - n);
	for (uint32_t s = 0; s < c->info.nshards && n < max; s++) {
		struct shmring *r = &c->sh[s].comp;
		uint32_t pos, used = 0;
		int got = shmring_peek(r, (uint32_t)(max - n), &pos);

		if (got < 0)
			return mvc_fail(c, got, "completion ring of shard %u: %s", s,
			                shmring_error(r));
		for (; used < (uint32_t)got && n < max; used++)
			n += translate(c, shmring_slot(r, pos + used), &ev[n]);
		if (used)
			shmring_release(r, used);
	}
	if (c->peer_scan && n < max)
		n += peer_failures(c, ev + n, max - n);
	if (c->cut[0] && n < max)
		n += fail_cut(c, ev + n, max - n);
	if (!n && max > 0 && (c->dead || hung_up(c)))
		return mover_gone(c, ev, max);
	return n;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sleeps up to ms milliseconds (a reconnect's wait). */
static void nap_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

int mvc_wait(struct mvc *c, struct mvc_event *ev, int max, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : now_ms() + timeout_ms;

	/* A completion due within a few us costs less polled for than slept
	 * for: a sleep on the eventfd and the wake-up add several us (tens on
	 * a virtual machine) to every round trip. */
	if (timeout_ms != 0 && c->wait_spin_ns > 0 && !c->dead) {
		int64_t end = now_ns() + c->wait_spin_ns;
		do {
			int n = mvc_poll(c, ev, max);
			if (n)
				return n;
		} while (now_ns() < end);
	}
	for (;;) {
		int n = mvc_poll(c, ev, max);
		if (n > 0)
			return n;
		if (n < 0) {
			/* Gone, and a reconnect will be tried: sleep until it
			 * is due, never past the timeout. */
			int64_t wait = mvc_rejoin_wait_ns(c), left = deadline - now_ms();
			if (n != -EPIPE || wait < 0 || left <= 0)
				return n;
			wait = wait / 1000000 + 1;
			nap_ms(wait < left ? wait : left);
			continue;
		}

		if (!arm_rings(c)) {
			int64_t left = deadline - now_ms();
			if (left <= 0) {
				disarm_rings(c, c->info.nshards);
				return 0;
			}
			struct pollfd pf[2] = {{.fd = c->efd, .events = POLLIN},
			                       {.fd = c->sock, .events = POLLRDHUP}};
			int p = poll(pf, 2, left > 1000000 ? 1000000 : (int)left);
			if (p > 0 && (pf[0].revents & POLLIN)) {
				uint64_t v;
				if (read(c->efd, &v, sizeof(v)) < 0) {
					/* drained by an earlier wake-up */
				}
			}
			if (p > 0 && (pf[1].revents & (POLLHUP | POLLRDHUP | POLLERR))) {
				/* Completions already in the rings still count:
				 * the next mvc_poll reads them, then fails the rest. */
				disarm_rings(c, c->info.nshards);
				mvc_gone(c);
				continue;
			}
			disarm_rings(c, c->info.nshards);
		}
	}
}

/* ---- sleeping in the application's event loop ---- */

int mvc_event_fd(struct mvc *c)
{
	if (c->epfd >= 0)
		return c->epfd;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	int t = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	struct epoll_event e = {.events = EPOLLIN};

	if (ep < 0 || t < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c->efd, &e) < 0 ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, t, &e) < 0) {
		int ret = mvc_fail(c, -errno, "the event fd: %s", strerror(errno));
		if (ep >= 0)
			close(ep);
		if (t >= 0)
			close(t);
		return ret;
	}
	c->epfd = ep;
	c->tfd = t;
	c->ep_sock = -1;
	return ep;
}

/* The event fd watches fd for the mover's hang-up (-1: no socket). */
static void watch_sock(struct mvc *c, int fd)
{
	struct epoll_event e = {.events = EPOLLRDHUP};

	if (c->ep_sock == fd)
		return;
	mvc_event_fd_unwatch(c);
	if (fd >= 0 && epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &e) == 0)
		c->ep_sock = fd;
}

void mvc_event_fd_unwatch(struct mvc *c)
{
	if (c->epfd >= 0 && c->ep_sock >= 0)
		epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->ep_sock, NULL);
	c->ep_sock = -1;
}

void mvc_event_fd_close(struct mvc *c)
{
	if (c->epfd >= 0)
		close(c->epfd);
	if (c->tfd >= 0)
		close(c->tfd);
	c->epfd = c->tfd = c->ep_sock = -1;
}

int mvc_arm(struct mvc *c)
{
	uint64_t v;

	if (c->epfd < 0) {
		int ret = mvc_event_fd(c);
		if (ret < 0)
			return ret;
	}
	/* What woke the fd is taken here: the rings, the flags and the
	 * connection below say what there is. Both are non-blocking. */
	if (read(c->efd, &v, sizeof(v)) < 0) {
		/* nothing to drain */
	}
	if (read(c->tfd, &v, sizeof(v)) < 0) {
		/* the timer had not fired */
	}
	if (c->cut[0]) {
		/* Its batches still to fail, once each; then nothing will come. */
		watch_sock(c, -1);
		return c->inflight
		           ? 1
		           : mvc_fail(c, -EPROTO, "the mover cut this connection off: %s", c->cut);
	}
	if (c->peer_scan || c->back || c->ndue)
		return 1; /* events mvc_poll makes without the rings */
	/* A hung-up socket would keep the fd readable: find out now. */
	if (!c->dead && c->sock >= 0 && sock_hung_up(c))
		mvc_gone(c);
	if (c->dead) {
		watch_sock(c, -1);
		if (c->inflight)
			return 1; /* batches to fail, once each */
		int64_t w = mvc_rejoin_wait_ns(c);
		if (w == 0)
			return 1; /* a reconnect to try */
		if (w < 0)
			return mvc_fail(c, -EPIPE, "the mover is gone%s",
			                c->open
			                    ? " (a batch is open: abort it, and a reconnect will "
			                      "be tried)"
			                    : "");
		struct itimerspec it = {
		    .it_value = {.tv_sec = w / 1000000000, .tv_nsec = w % 1000000000}};
		if (timerfd_settime(c->tfd, 0, &it, NULL) < 0)
			return mvc_fail(c, -errno, "the event fd's timer: %s", strerror(errno));
		return 0;
	}
	watch_sock(c, c->sock);
	return arm_rings(c);
}
