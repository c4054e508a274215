/* SPDX-License-Identifier: MIT */
/*
 * Peer liveness over the fabric. Shard 0 sends each peer mover that a
 * client of ours holds a heartbeat every mv_config.heartbeat_ms: one
 * zero-byte RMA write to the peer's shard 0 doorbell, delivery-complete
 * where the provider offers it (tcp), so that it completes only once the
 * peer's shard has read it off its connection. A peer whose heartbeat has
 * not been answered for two intervals is SILENT: hung (SIGSTOP, a stuck
 * thread) or unreachable (a link down, a host gone); one that answers
 * again is OK again. Our own probe is the evidence, so a mover that only
 * receives watches its senders as well as they watch it, and the peer
 * needs to know nothing of us. One heartbeat per peer is in flight at a
 * time; it is posted outside the clients' fair-share queues, and on the
 * small-write endpoint where there is one (tcp: a connection of its own,
 * fabric.h), so neither the clients' backlogs nor what our bulk writes
 * put on the connection (seconds of it on a slow link) delay it.
 *
 * Every change of a peer's liveness (SILENT, OK again, DEAD when its
 * process exited on this host, CUT when it sent garbage) becomes a PEER
 * completion on shard 0's ring of every client that added the peer:
 * libmvc fails the expectations that name it (mvc_imm_expect_from). A
 * peer that sends garbage (a bad landing header naming it) is cut off by
 * the main thread: its writes fail, new ones are refused, for the life of
 * its mover id. Shard 0 only, except mv_peer_garbage() (any shard) and
 * mv_peer_cut_check() (main thread).
 */
#include "shard_int.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define MV_HB_SHM_BYTES 8192u /* within the peer's doorbell (MV_BELL_SIZE) */
static_assert(MV_HB_SHM_BYTES <= MV_BELL_SIZE, "a heartbeat fits a doorbell");

/* One peer's heartbeat as shard 0 keeps it. */
struct mv_hb {
	struct fi_context2 ctx; /* the heartbeat in flight; the provider's until it ends */
	struct mv_peer *p;
	int64_t sent_at; /* the last one posted */
	int64_t ok_at;   /* the last one answered (or the peer added) */
	uint64_t cpu;    /* same host: the peer process's CPU ticks when last read, */
	int64_t cpu_at;  /* at this time (0: unknown) */
	int64_t grace;   /* busy (peer_busy): not called SILENT before this */
	uint8_t inflight;
	uint8_t small; /* that one went on fab.ep_small (counted in s->posted_small) */
	uint8_t due;   /* this round's not posted yet (the queue was full, or one in flight) */
	uint32_t departures; /* p->departures at the last look */
};

int mv_hb_init(struct mv_shard *s)
{
	if (s->id != 0 || s->mv->cfg.heartbeat_ms <= 0)
		return 0;
	s->hb = calloc(MV_MAX_PEERS, sizeof(*s->hb));
	return s->hb ? 0 : -ENOMEM;
}

void mv_hb_fini(struct mv_shard *s)
{
	/* After the endpoint closed: no heartbeat is the provider's now. */
	free(s->hb);
	s->hb = NULL;
}

void mv_hb_peer_add(struct mv_shard *s, struct mv_peer *p)
{
	if (!s->hb || p->index >= MV_MAX_PEERS)
		return;
	struct mv_hb *h = &s->hb[p->index];
	if (h->p == p)
		return;
	h->p = p;
	h->ok_at = mv_now_ns();
	h->sent_at = 0;
	h->departures = atomic_load_explicit(&p->departures, memory_order_acquire);
	h->due = 1; /* a first probe now, then with the rounds */
	if (p->index + 1 > s->hb_n)
		s->hb_n = p->index + 1;
	s->hb_next = 0; /* look now */
}

int mv_hb_state(const struct mv_peer *p, char *why, size_t whylen)
{
	int live = atomic_load_explicit(&p->live, memory_order_relaxed);
	int64_t since = atomic_load_explicit(&p->silent_since, memory_order_relaxed);

	switch (live) {
	case MV_LIVE_SILENT:
		if (atomic_load_explicit(&p->gone, memory_order_acquire) == MV_PEER_DEPARTED ||
		    atomic_load_explicit(&p->left, memory_order_acquire)) {
			/* left the cluster, and how (gone_why outlives a return) */
			snprintf(why, whylen, "%s", p->gone_why);
			break;
		}
		snprintf(why, whylen,
		         "peer mover %016llx answered no heartbeat for %lld ms: hung "
		         "or unreachable",
		         (unsigned long long)p->mover_id,
		         (long long)((mv_now_ns() - since) / 1000000));
		break;
	case MV_LIVE_DEAD:
		mv_peer_why(p, why, whylen);
		break;
	case MV_LIVE_CUT:
		snprintf(why, whylen, "peer mover %016llx was cut off: %s",
		         (unsigned long long)p->mover_id, p->cut_why);
		break;
	default:
		snprintf(why, whylen, "peer mover %016llx answers its heartbeats",
		         (unsigned long long)p->mover_id);
	}
	return live;
}

/* Every client on this shard that holds p hears that its liveness is now
 * live (a PEER completion on our ring of it). */
static void tell(struct mv_shard *s, struct mv_peer *p, int live)
{
	struct mv_cqe c = {.type = MV_CQE_PEER, .region = (uint32_t)live, .shard = (uint32_t)s->id};

	c.cookie = p->mover_id;
	c.status = live == MV_LIVE_OK       ? 0
	           : live == MV_LIVE_SILENT ? -ETIMEDOUT
	           : live == MV_LIVE_DEAD   ? -EHOSTUNREACH
	                                    : -EPROTO;
	c.cause = live == MV_LIVE_OK    ? MV_CAUSE_NONE
	          : live == MV_LIVE_CUT ? MV_CAUSE_PEER_BAD
	                                : MV_CAUSE_PEER_DEAD;
	mv_hb_state(p, c.msg, sizeof(c.msg));
	for (uint32_t i = 0; i < s->natt; i++) {
		struct mv_attach *at = s->att[i];
		if (!mv_serving(at))
			continue;
		/* A client adding p now reads p->live after it stored the slot;
		 * we stored live before reading the slots (both seq_cst), so it
		 * hears of the change from one of the two, maybe both. */
		for (uint32_t slot = 0; slot < MV_CLIENT_MAX_PEERS; slot++)
			if (atomic_load(&at->cl->peers[slot]) == p) {
				c.imm = slot;
				mv_push_cqe(at, &c);
			}
	}
}

static void set_live(struct mv_shard *s, struct mv_hb *h, int live)
{
	struct mv_peer *p = h->p;
	int was = atomic_load_explicit(&p->live, memory_order_relaxed);
	char why[MV_ERRLEN];

	if (was == live || was == MV_LIVE_DEAD || was == MV_LIVE_CUT)
		return; /* dead and cut are final for this mover id */
	if (live == MV_LIVE_OK)
		atomic_store_explicit(&p->left, 0, memory_order_relaxed);
	if (live == MV_LIVE_SILENT)
		atomic_store_explicit(&p->silent_since, h->ok_at, memory_order_relaxed);
	atomic_store(&p->live, live);
	if (live == MV_LIVE_SILENT &&
	    (atomic_load(&p->gone) == MV_PEER_DEPARTED || atomic_load(&p->left))) {
		mv_hb_state(p, why, sizeof(why));
		mv_warn("%s; failing the expectations that name it", why);
	} else if (live == MV_LIVE_SILENT) {
		mv_warn("peer mover %016llx answered no heartbeat for %lld ms (interval %d ms): "
		        "hung or unreachable; failing the expectations that name it",
		        (unsigned long long)p->mover_id, (long long)((s->now - h->ok_at) / 1000000),
		        s->mv->cfg.heartbeat_ms);
	} else if (live == MV_LIVE_OK) {
		mv_log("peer mover %016llx answers heartbeats again after %lld ms of silence",
		       (unsigned long long)p->mover_id,
		       (long long)((s->now - atomic_load(&p->silent_since)) / 1000000));
	} else if (live == MV_LIVE_CUT) {
		mv_hb_state(p, why, sizeof(why));
		mv_warn("%s; failing the expectations that name it", why);
	}
	tell(s, p, live);
}

/* A heartbeat for a peer, posted outside the clients' queues. */
static void send_one(struct mv_shard *s, struct mv_hb *h)
{
	struct mv_peer *p = h->p;
	/* shm offers no delivery-complete: it completes a write it can
	 * inject (up to 4 KiB) on transmit, and copies a longer one itself
	 * (process_vm_writev) unless it carries remote CQ data; so a longer
	 * one with data, which completes once the peer's shard has taken it
	 * from its queue. The peer reads MV_HB and drops it (complete.c). */
	size_t len = s->fab.dc_flag ? 0 : MV_HB_SHM_BYTES;
	uint64_t flags = FI_COMPLETION | s->fab.dc_flag | (len ? FI_REMOTE_CQ_DATA : 0);
	struct iovec iov = {s->bell, len};
	void *desc = s->bell_desc;
	struct fi_rma_iov ri = {
	    .addr = p->blob.bell[0].addr, .len = len, .key = p->blob.bell[0].key};
	struct fi_msg_rma m = {.msg_iov = len ? &iov : NULL,
	                       .desc = len ? &desc : NULL,
	                       .iov_count = len ? 1 : 0,
	                       .rma_iov = &ri,
	                       .rma_iov_count = 1,
	                       .addr = p->fiaddr[s->id],
	                       .context = &h->ctx,
	                       .data = MV_HB};
	/* On the small-write endpoint's own connection, not behind our bulk
	 * writes to the peer in the socket: a mover writing 16 MiB over a
	 * 32 Mbit/s link heard no answer for 510 ms (250 ms heartbeats) and
	 * failed its clients' expectations of that live peer
	 * (tests/slow_link.sh). */
	struct fid_ep *ep = s->fab.ep_small ? s->fab.ep_small : s->fab.ep;
	ssize_t ret = fi_writemsg(ep, &m, flags);

	if (ret == -FI_EAGAIN)
		return; /* the queue is full: the next look tries again */
	h->sent_at = s->now;
	h->due = 0;
	if (ret) {
		mv_dbg("shard %d: heartbeat to peer mover %016llx: %s", s->id,
		       (unsigned long long)p->mover_id, fi_strerror((int)-ret));
		return;
	}
	h->inflight = 1;
	h->small = ep == s->fab.ep_small;
	s->posted_small += h->small; /* its CQ is read while any (complete.c) */
	if (p->wake)
		mv_wake_ring(s, p); /* a sleeping same-host shard reads it now */
}

int mv_hb_event(struct mv_shard *s, void *ctx, int err)
{
	if (!s->hb || (char *)ctx < (char *)s->hb || (char *)ctx >= (char *)(s->hb + MV_MAX_PEERS))
		return 0;
	struct mv_hb *h = &s->hb[((char *)ctx - (char *)s->hb) / sizeof(*s->hb)];
	h->inflight = 0;
	s->posted_small -= h->small;
	h->small = 0;
	if (err) {
		/* No answer is no evidence either way: silence decides. */
		mv_dbg("shard %d: heartbeat to peer mover %016llx failed: %s", s->id,
		       (unsigned long long)h->p->mover_id, fi_strerror(err));
		return 1;
	}
	int64_t now = mv_now_ns();
	h->ok_at = now;
	atomic_store_explicit(&h->p->rtt_ns, now - h->sent_at, memory_order_relaxed);
	s->now = now;
	set_live(s, h, MV_LIVE_OK);
	return 1;
}

/*
 * The CPU ticks a peer process on this host has used, and its state
 * letter; -1 when unknown. /proc/PID/stat, after the command name's
 * closing parenthesis: state, then utime and stime as fields 14 and 15.
 */
static int peer_cpu(const struct mv_peer *p, uint64_t *cpu, char *state)
{
	char path[64], buf[512];
	unsigned long long ut, st;

	if (p->pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)p->pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	const char *r = strrchr(buf, ')');
	if (!r || sscanf(r + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", state, &ut,
	                 &st) != 3)
		return -1;
	*cpu = ut + st;
	return 0;
}

/*
 * A peer on this host that is about to be called SILENT may only be busy:
 * on shm its shard copies what it receives inside its progress calls, and
 * with both movers flooding each other on a crowded host one such call
 * has been seen to take 270 ms. If its process is neither stopped nor
 * traced and ran since the baseline taken when its answer was an interval
 * late (its CPU time grew), it is busy, not hung: 1, and the next look at
 * it is an interval away, up to MV_HB_BUSY_MAX intervals of silence. A
 * SIGSTOPped or deadlocked mover runs no CPU. Only where the peer's progress
 * does the copying (shm, fabric.h: rx_copies): over a network a peer that
 * runs says nothing of the link to it, and a link that went down was told
 * an interval or two late (925 ms instead of 500 at 250 ms heartbeats, one
 * run in ten of tests/liveness.sh on the 2-core machine).
 */
#define MV_HB_BUSY_MAX 8
static int peer_busy(struct mv_hb *h)
{
	uint64_t cpu;
	char state;

	if (!h->cpu_at || peer_cpu(h->p, &cpu, &state))
		return 0;
	uint64_t was = h->cpu;
	h->cpu = cpu;
	h->cpu_at = mv_now_ns();
	return state != 'T' && state != 't' && cpu > was;
}

/*
 * Each look (every eighth of an interval, and whenever a peer's process
 * exited): heartbeats due go out, and peers whose state changed are told.
 * A peer is SILENT once its last answer is two intervals old, so a peer
 * that stops just after an answer is reported between 2 and 2.125
 * intervals later; an answer may take up to an interval without a false
 * alarm.
 */
int mv_hb_tick(struct mv_shard *s)
{
	int64_t iv = (int64_t)s->mv->cfg.heartbeat_ms * 1000000ll;
	/* A2 pairs with R1 in mv_peer_exited(). */
	uint32_t deaths = atomic_load_explicit(&s->mv->peer_deaths, memory_order_acquire);

	if (!s->hb || (s->now < s->hb_next && deaths == s->hb_deaths))
		return 0;
	s->hb_deaths = deaths;
	s->hb_next = s->now + iv / 8;
	/* Every peer's heartbeat in one round an interval: their completions
	 * wake this shard once, not once a peer at scattered times (each
	 * wake costs a spin; an idle tcp mover with eight peers spent 0.5%
	 * of a core so on the 2-core machine). A peer added meanwhile is
	 * probed at once (mv_hb_peer_add()), then goes with the rounds; one
	 * whose heartbeat is still in flight, or the queue refused, goes at
	 * the first look after (due). */
	int round = s->now >= s->hb_round;
	if (round)
		s->hb_round = s->now + iv;
	for (uint32_t i = 0; i < s->hb_n; i++) {
		struct mv_hb *h = &s->hb[i];
		if (!h->p)
			continue;
		/* A3 pairs with R3 in mv_peer_departed(). */
		uint32_t dep = atomic_load_explicit(&h->p->departures, memory_order_acquire);
		if (dep != h->departures) {
			/* It left the cluster since the last look, and may be back
			 * already (its key deleted and put again, a lease lost and
			 * granted again): the departure fails the expectations that
			 * name it all the same; its heartbeats then say it is back. */
			h->departures = dep;
			atomic_store_explicit(&h->p->left, 1, memory_order_release);
			set_live(s, h, MV_LIVE_SILENT);
		}
		int gone = atomic_load_explicit(&h->p->gone, memory_order_relaxed);
		if (gone == MV_PEER_EXITED) {
			set_live(s, h, MV_LIVE_DEAD);
			continue;
		}
		if (gone == MV_PEER_CUT) {
			set_live(s, h, MV_LIVE_CUT);
			continue;
		}
		if (gone == MV_PEER_DEPARTED) {
			/* It left the cluster: silent, as a hung peer, until it is
			 * back under a new lease and answers again. */
			set_live(s, h, MV_LIVE_SILENT);
			continue;
		}
		if (gone == MV_PEER_REMOVED) {
			/* Nobody here listens: no probes, and a fresh start if
			 * a client adds it again. */
			h->ok_at = s->now;
			continue;
		}
		h->due |= round;
		if (h->due && !h->inflight)
			send_one(s, h);
		/* An answer an interval late: the baseline for peer_busy(). */
		if (s->now - h->ok_at > iv && h->cpu_at <= h->ok_at) {
			char state;
			h->cpu_at = peer_cpu(h->p, &h->cpu, &state) ? 0 : s->now;
		}
		if (s->now - h->ok_at <= 2 * iv || s->now < h->grace)
			continue;
		if (s->fab.rx_copies && s->now - h->ok_at <= MV_HB_BUSY_MAX * iv &&
		    atomic_load(&h->p->live) == MV_LIVE_OK && peer_busy(h)) {
			h->grace = s->now + iv;
			continue;
		}
		set_live(s, h, MV_LIVE_SILENT);
	}
	return 0;
}

void mv_peer_garbage(struct mover *mv, uint64_t mover_id, const char *fmt, ...)
{
	for (uint32_t i = 0; i < MV_MAX_PEERS; i++) {
		struct mv_peer *p = atomic_load_explicit(&mv->peers[i], memory_order_acquire);
		if (!p || p->mover_id != mover_id)
			continue;
		int zero = 0;
		if (!atomic_compare_exchange_strong(&p->cut, &zero, 1))
			return; /* another shard is at it already */
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(p->cut_why, sizeof(p->cut_why), fmt, ap);
		va_end(ap);
		/* R4 pairs with A4 in mv_peer_cut_check(). */
		atomic_store_explicit(&p->cut, 2, memory_order_release);
		atomic_fetch_add_explicit(&mv->peer_cuts, 1, memory_order_release);
		uint64_t one = 1;
		if (write(mv->efd, &one, sizeof(one)) < 0) {
			/* saturated: the main thread wakes anyway */
		}
		return;
	}
}

void mv_peer_cut_check(struct mover *mv)
{
	uint32_t cuts = atomic_load_explicit(&mv->peer_cuts, memory_order_acquire);

	if (cuts == mv->seen_cuts)
		return;
	mv->seen_cuts = cuts;
	for (uint32_t i = 0; i < MV_MAX_PEERS; i++) {
		struct mv_peer *p = mv->peers[i];
		/* A4 pairs with R4 in mv_peer_garbage(): cut_why is whole. */
		if (!p || atomic_load_explicit(&p->cut, memory_order_acquire) != 2 ||
		    atomic_load(&p->gone) == MV_PEER_CUT)
			continue;
		mv_peer_unwatch(mv, p); /* its exit is not ours to handle now */
		mv_warn("peer mover %016llx sent garbage and is cut off: %s",
		        (unsigned long long)p->mover_id, p->cut_why);
		/* And it copies into none of our regions from now. */
		mv_host_fence_cut(mv, p->mover_id, "sent garbage");
		/* R1 again, as for an exit: shards fail its posted writes now. */
		atomic_store_explicit(&p->gone, MV_PEER_CUT, memory_order_relaxed);
		atomic_fetch_add_explicit(&mv->peer_deaths, 1, memory_order_release);
		for (uint32_t s = 0; s < mv->nshards; s++) {
			uint64_t one = 1;
			if (write(mv->shards[s].efd, &one, sizeof(one)) < 0) {
				/* saturated: that shard is due to wake anyway */
			}
		}
		/* Nothing rings it again: its wake files go now, as for an
		 * exit, once every shard has passed a turn (no burst is at it). */
		if (p->wake) {
			char why[MV_ERRLEN];
			mv_call_all(mv, MV_CMD_SYNC, NULL, why, sizeof(why));
			mv_wake_peer_close(p);
		}
	}
}
