/* SPDX-License-Identifier: MIT */
/*
 * When a shard has no work: how long it busy-polls after its last work,
 * whether the host has a CPU to spare for that, and how it sleeps on its
 * doorbell, its clients' ring doorbells and the CQ's wait fd until
 * something comes.
 */
#include "shard_int.h"

#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

int mv_rings_empty(struct mv_shard *s)
{
	for (uint32_t i = 0; i < s->natt; i++) {
		struct mv_attach *at = s->att[i];
		uint32_t pos;
		if (mv_serving(at) && (at->cur.active || shmring_peek(&at->sub, 1, &pos) > 0))
			return 0;
	}
	return 1;
}

/* Returns 1 when something woke the shard (doorbell, CQ fd), 0 otherwise. */
int mv_sleep_once(struct mv_shard *s, int64_t idle_ns)
{
	struct pollfd pf[3] = {{.fd = s->efd, .events = POLLIN},
	                       {.fd = s->fab.cq_fd, .events = POLLIN},
	                       {.fd = s->fab.cq_small_fd, .events = POLLIN}};
	uint32_t armed = 0;
	int64_t timeout; /* ns */
	int nfds = 1, woke = 1, wake = 0;

	for (; armed < s->natt; armed++) {
		struct mv_attach *at = s->att[armed];
		/* A list still being expanded is work no doorbell announces. */
		if (mv_serving(at) && (at->cur.active || shmring_arm_doorbell(&at->sub)))
			goto disarm;
	}
	if (s->posted > s->abandoned || s->npend || s->ngpu || s->nretry || s->nland_busy) {
		/* Work is in flight: yield the core briefly, never block long. */
		timeout = s->fab.cq_fd >= 0 ? 1000000 : 0;
	} else if (s->fab.cq_fd >= 0) {
		timeout = 100000000;
	} else {
		/* No wait object (shm): nothing wakes a shard when a peer writes
		 * here, and shm's receiver does the copy, so a sleeping receiver
		 * stalls its senders. Poll in short steps first (a stream with
		 * gaps is the common case), backing off the longer nothing comes;
		 * the first write after a long idle waits at most 50 ms. A 20 us
		 * step sleeps up to 70 us with the default 50 us timer slack. */
		timeout = idle_ns < 2000000ll      ? 20000
		          : idle_ns < 50000000ll   ? 1000000
		          : idle_ns < 1000000000ll ? 10000000
		                                   : 50000000;
		/* Past the polling steps, a same-host sender wakes us (wake.c). */
		if (timeout >= 1000000) {
			wake = mv_wake_arm(s);
			if (wake < 0)
				goto disarm; /* a write came in meanwhile */
			if (wake) {
				pf[1].fd = s->wake_fd;
				nfds = 2;
			}
		}
	}
	/* The next look at the peers' heartbeats is due (heartbeat.c). */
	if (s->hb && s->hb_n) {
		int64_t due = s->hb_next - mv_now_ns();
		if (due < timeout)
			timeout = due > 1000 ? due : 1000;
	}
	if (s->fab.cq_fd >= 0) {
		/* The small-write endpoint's CQ too while ops are posted on it
		 * (mv_reap() reads it then only). */
		struct fid *f[2] = {&s->fab.cq->fid,
		                    s->fab.cq_small ? &s->fab.cq_small->fid : NULL};
		int both = s->posted_small && s->fab.cq_small_fd >= 0;
		if (fi_trywait(s->fab.fabric, f, both ? 2 : 1) != FI_SUCCESS)
			goto disarm;
		nfds = both ? 3 : 2;
	}
	if (timeout == 0) {
		sched_yield();
		woke = 0;
	} else {
		struct timespec ts = {.tv_sec = timeout / 1000000000,
		                      .tv_nsec = timeout % 1000000000};
		woke = ppoll(pf, (nfds_t)nfds, &ts, NULL) > 0;
		if (woke && (pf[0].revents & POLLIN)) {
			uint64_t v;
			if (read(s->efd, &v, sizeof(v)) < 0) {
				/* EAGAIN: another reader drained it */
			}
		}
	}
	if (wake > 0)
		mv_wake_disarm(s, woke && (pf[1].revents & POLLIN));
disarm:
	for (uint32_t i = 0; i < armed && i < s->natt; i++)
		shmring_disarm(&s->att[i]->sub);
	return woke;
}

/* How long to busy-poll after the last work. A stream whose pieces come
 * further apart than the spin (a receiving tcp shard sees socket data but
 * no work until a whole write lands; a big shm write lands every few
 * hundred us) would sleep between every two pieces, and on a virtual
 * machine every wake from a sleep costs tens of us in which the socket is
 * not drained; and small writes that come a millisecond or two apart (a
 * layer's KV, an expert's tokens) would each find the shards asleep. So a
 * sleep that the stream cut short, or work that came back soon after one,
 * doubles the spin, at least to twice that gap, up to SPIN_MAX_NS (10 ms,
 * so traffic up to 5 ms apart keeps its shards awake); a sleep that ran its
 * whole timeout, or a gap longer than that, sets it back. An idle mover
 * still sleeps within SPIN_MAX_NS of its last work. Only while the host has
 * a CPU for every runnable thread does a shard spin longer: on a crowded
 * host (two movers and their clients on two cores) it would spin on time
 * that other threads, its own clients among them, are waiting for. */
int64_t mv_spin_after_sleep(int64_t spin, int64_t gap, int cut_short, int crowded)
{
	if (!cut_short || gap >= SPIN_MAX_NS || crowded)
		return SPIN_NS;
	spin *= 2;
	if (spin < 2 * gap)
		spin = 2 * gap;
	return spin > SPIN_MAX_NS ? SPIN_MAX_NS : spin;
}

/* Whether the host has no CPU to spare right now: as many runnable threads
 * (this one among them) as CPUs, so a thread that wakes would have to wait.
 * The fourth field of /proc/loadavg (fd) is runnable/all. 1 when unknown. */
int mv_host_crowded(int fd, long ncpu)
{
	double l1, l5, l15;
	long running, all;
	char buf[128];
	ssize_t n = fd < 0 ? -1 : pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0 || ncpu <= 0)
		return 1;
	buf[n] = 0;
	if (sscanf(buf, "%lf %lf %lf %ld/%ld", &l1, &l5, &l15, &running, &all) != 5)
		return 1;
	return running >= ncpu;
}
