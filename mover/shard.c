/* SPDX-License-Identifier: MIT */
/*
 * The shard loop: one thread per NIC shard, pinned near its NIC, owning its
 * fabric objects. Each turn it runs mailbox commands, consumes descriptors
 * from the submission rings of its clients (a budget per ring), validates
 * them and turns them into fabric writes on each client's queue, posts the
 * queues as the provider has room, in fair shares by weight when several
 * clients are active (FI_MORE on all but the last of a burst, -FI_EAGAIN
 * just ends the burst), reads the CQ in batches, and
 * publishes completions. Idle, it spins briefly, then sleeps on its doorbell
 * eventfd and, where the provider has one, the CQ's wait fd. This file holds
 * the loop, the mailbox, start-up and the clients' attachments; the stages
 * of the loop live in the files that shard_int.h lists.
 */
#include "shard_int.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define STOP_DRAIN_NS       10000000000ll
#define CROWD_CHECK_NS      1000000ll /* how often a spinning shard looks at the host's load */
#define YIELD_AFTER_WAKE_NS 200000ll  /* a crowded shard yields this long after a wake */

void mv_shard_post(struct mv_shard *s, struct mv_cmd *c)
{
	uint64_t one = 1;

	c->next = NULL;
	pthread_mutex_lock(&s->mbox_mu);
	if (s->mbox_tail)
		s->mbox_tail->next = c;
	else
		s->mbox_head = c;
	s->mbox_tail = c;
	/* R3 pairs with A3 in shard_loop(): the command is queued before the flag */
	atomic_store_explicit(&s->mbox_pending, 1, memory_order_release);
	pthread_mutex_unlock(&s->mbox_mu);
	if (write(s->efd, &one, sizeof(one)) < 0) {
		/* The counter saturated: the shard is already due to wake. */
	}
}

static void cmd_done(struct mv_shard *s, struct mv_cmd *c, int status)
{
	c->status = status;
	if (c->done)
		sem_post(c->done);
}

static void attach_free(struct mv_attach *at)
{
	shmring_close(&at->sub);
	shmring_close(&at->comp);
	free(at->parts);
	free(at->ovf);
	free(at->waits);
	free(at->to_more);
	free(at);
}

/* Takes a leaving client's ops out of one queue; returns how many. */
static uint32_t drop_queued(struct mv_shard *s, struct mv_wr **head, struct mv_wr **tail,
                            struct mv_attach *at, int report)
{
	uint32_t n;

	for (struct mv_wr *op = mv_wr_take(head, tail, at, NULL, &n), *next; op; op = next) {
		next = op->next;
		if (report)
			mv_op_report(s, op, -ECANCELED, "the client left");
		else
			at->outstanding--;
		mv_op_put(s, op);
	}
	return n;
}

/* Pending (never posted) ops of a leaving client end as cancelled. */
static void cancel_pending(struct mv_shard *s, struct mv_attach *at)
{
	/* Staged writes still waiting for a bounce chunk: nothing started. */
	uint32_t nsq = drop_queued(s, &at->sq_head, &at->sq_tail, at, 0);
	uint32_t npk = drop_queued(s, &at->pk_head, &at->pk_tail, at, 0);
	s->nsq -= nsq;
	s->npk -= npk;
	s->ngpu -= nsq + npk;
	/* Writes waiting to be retried: nothing of them is in the provider. */
	s->nretry -= drop_queued(s, &s->rq_head, &s->rq_tail, at, 1);
	while (at->pq_head) {
		mv_op_put(s, mv_pend_pop(s, at));
		at->outstanding--;
	}
	at->cur.active = 0; /* the rest of a list being expanded: never taken */
}

/*
 * A client's weight on this shard: its uid's (mv_config.weights: weight_uid,
 * default 1) times the percent of it the client asked for in its submission
 * ring's header (mv_wire.h; anything outside 1..100 counts as 100, so a
 * client can only lower its own weight).
 */
static uint32_t weight_of(const struct mover *mv, const struct mv_attach *at)
{
	uint64_t asked = at->sub.lay->hdr.user; /* the client's word: one read */
	uint32_t w = 1;

	if (asked < MV_SHARE_MIN || asked > MV_SHARE_FULL)
		asked = MV_SHARE_FULL;
	for (uint32_t i = 0; i < mv->cfg.nweights; i++)
		if (mv->cfg.weights[i].uid == at->cl->uid)
			w = mv->cfg.weights[i].weight; /* the last one given wins */
	return w * (uint32_t)asked;
}

/* The slot of uid in s->uids, taken if it has none. The last slot is
 * shared by the uids that find every other slot taken (more than
 * MV_MAX_CLIENTS uids whose clients left still hold ops of writes that
 * their peers never took): they count as one. */
static uint16_t uid_slot(struct mv_shard *s, uid_t uid)
{
	int free = -1;

	for (int i = 0; i < (int)MV_UID_SLOTS - 1; i++) {
		const struct mv_uid_ops *u = &s->uids[i];
		if (!u->natt && !u->ops) {
			if (free < 0)
				free = i;
		} else if (u->uid == uid) {
			return (uint16_t)i;
		}
	}
	if (free < 0) {
		mv_warn("shard %d: uid %u shares the last of %u uid slots", s->id, (unsigned)uid,
		        MV_UID_SLOTS);
		return MV_UID_SLOTS - 1;
	}
	s->uids[free].uid = uid;
	return (uint16_t)free;
}

static void run_cmd(struct mv_shard *s, struct mv_cmd *c)
{
	struct mv_region *r;
	struct mv_peer *p;
	struct mv_attach *at;
	struct mv_client *cl;
	int ret = 0;

	switch (c->type) {
	case MV_CMD_ATTACH:
		at = ((struct mv_client *)c->arg)->att[s->id];
		if (s->natt >= MV_MAX_CLIENTS) {
			ret = -ENOSPC;
			break;
		}
		at->uix = uid_slot(s, at->cl->uid);
		s->uids[at->uix].natt++;
		shmring_set_doorbell(&at->comp, at->cl->efd);
		at->weight = weight_of(s->mv, at);
		mv_dbg("shard %d: client %u (pid %d) weighs %u", s->id, at->cl->id, at->cl->pid,
		       at->weight);
		s->att[s->natt++] = at;
		break;
	case MV_CMD_DETACH:
		cl = c->arg;
		at = cl->att[s->id];
		if (at) {
			at->detaching = 1;
			cancel_pending(s, at);
		}
		break;
	case MV_CMD_REG: {
		uint64_t want = 0, key = 0;
		int dmabuf;
		r = c->arg;
		if (s->fab.key_size >= 8)
			want = (uint64_t)(uint32_t)random() << 32;
		want |= r->id;
		if (r->is_gpu && s->mv->gpu_land) {
			/* Reached by CUDA copies or by landing messages, into
			 * buffers this shard posts (and, with FI_HMEM, by the
			 * fabric too: the writer picks). */
			ret = mv_gpu_shard_ready(s, r->gpu.dev, c->msg, sizeof(c->msg));
			if (!ret)
				ret = mv_land_init(s, c->msg, sizeof(c->msg));
			if (ret || !s->mv->hmem)
				break;
		}
		if (r->is_gpu) {
			ret = mv_fabric_reg_hmem(
			    &s->fab, &r->gpu, r->len, want, &r->mr[s->id], &r->desc[s->id], &key,
			    s->id ? &dmabuf : &r->by_dmabuf, c->msg, sizeof(c->msg));
			/* Refused (pinning limits, memory the driver will not
			 * export): the region is staged instead, both ways. */
			if (ret && !mv_gpu_shard_ready(s, r->gpu.dev, c->msg, sizeof(c->msg)) &&
			    !mv_land_init(s, c->msg, sizeof(c->msg))) {
				mv_warn(
				    "shard %d: the provider refused GPU region %u (%d: %s); it is "
				    "staged through host memory instead",
				    s->id, r->id, ret, fi_strerror(-ret));
				atomic_store_explicit(&r->fabric_refused, 1, memory_order_relaxed);
				r->mr[s->id] = NULL;
				ret = 0;
			}
		} else {
			int64_t t0 = mv_now_ns();
			ret = mv_fabric_reg(&s->fab, r->base, r->len, want, &r->mr[s->id],
			                    &r->desc[s->id], &key, c->msg, sizeof(c->msg));
			r->mr_ns[s->id] = (uint64_t)(mv_now_ns() - t0);
		}
		r->key[s->id] = key;
		break;
	}
	case MV_CMD_DEREG:
		r = c->arg;
		if (r->mr[s->id])
			fi_close(&r->mr[s->id]->fid);
		r->mr[s->id] = NULL;
		break;
	case MV_CMD_PEER_ADD: {
		p = c->arg;
		uint32_t t = (uint32_t)s->id % p->nshards;
		ret = mv_fabric_av_insert(&s->fab, p->blob.addr[t], &p->fiaddr[s->id]);
		if (ret)
			snprintf(c->msg, sizeof(c->msg), "fi_av_insert of peer shard %u: %s", t,
			         fi_strerror(-ret));
		else
			mv_hb_peer_add(s, p);
		break;
	}
	case MV_CMD_SYNC:
		mv_stats_publish(s, 1);
		break;
	case MV_CMD_STOP:
		s->stop_cmd = c;
		return; /* acknowledged once drained */
	}
	if (c->type == MV_CMD_DETACH)
		return; /* acknowledged by the detach path below */
	cmd_done(s, c, ret);
}

static void mailbox(struct mv_shard *s)
{
	struct mv_cmd *c;

	/* A3 pairs with R3 in mv_shard_post() */
	if (!atomic_load_explicit(&s->mbox_pending, memory_order_acquire))
		return;
	pthread_mutex_lock(&s->mbox_mu);
	c = s->mbox_head;
	s->mbox_head = s->mbox_tail = NULL;
	atomic_store_explicit(&s->mbox_pending, 0, memory_order_relaxed);
	pthread_mutex_unlock(&s->mbox_mu);
	while (c) {
		struct mv_cmd *next = c->next;
		run_cmd(s, c);
		c = next;
	}
}

/* Attachments whose client left and whose last op finished go away. */
static void reap_detached(struct mv_shard *s)
{
	for (uint32_t i = 0; i < s->natt; i++) {
		struct mv_attach *at = s->att[i];
		if (!at->detaching || at->outstanding)
			continue;
		struct mv_client *cl = at->cl;
		s->att[i] = s->att[--s->natt];
		s->uids[at->uix].natt--;
		i--;
		cl->att[s->id] = NULL;
		attach_free(at);
		uint64_t one = 1;
		atomic_fetch_add_explicit(&cl->shards_detached, 1, memory_order_release);
		if (write(s->mv->efd, &one, sizeof(one)) < 0) {
			/* saturated counter: the main thread wakes anyway */
		}
	}
}

static void shard_loop(struct mv_shard *s)
{
	int64_t last_work = mv_now_ns(), last_active = last_work, spin = SPIN_NS, stop_at = 0;
	int64_t crowd_at = 0;
	uint64_t hb_seen = 0; /* s->hb_rx when the receive counter was last read */
	int load_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int slept = 0, crowded = 1;

	for (;;) {
		int work = 0;

		s->now = mv_now_ns();
		mailbox(s);
		if (s->nretry)
			work += mv_retry_due(s);
		work += mv_consume(s);
		if (s->gpu_open_dev >= 0) {
			char why[MV_ERRLEN];
			mv_fence(s, why, sizeof(why));
		}
		work += mv_post(s);
		if (s->ring_cut) {
			/* The burst ended because another client has
			 * descriptors in its ring: take and post them now,
			 * before the completion queue is read (on tcp that
			 * read runs the provider's progress, several us
			 * beside a flood). Once a turn; the reap follows. */
			work += mv_consume(s);
			work += mv_post(s);
		}
		work += mv_reap(s);
		if (s->ngpu)
			work += mv_gpu_progress(s);
		if (s->nland_busy || s->land)
			work += mv_land_progress(s);
		work += mv_expire(s);
		mv_hb_tick(s);
		work += mv_flush_all(s);
		reap_detached(s);
		mv_stats_publish(s, 0);
		if (s->stop_cmd) {
			if (!stop_at)
				stop_at = mv_now_ns() + STOP_DRAIN_NS;
			if ((mv_rings_empty(s) && !s->npend && !s->ngpu &&
			     s->posted == s->abandoned) ||
			    mv_now_ns() > stop_at) {
				if (s->npend || s->posted)
					mv_log(
					    "shard %d: stopping with %u queued and %u posted ops",
					    s->id, s->npend, s->posted);
				break;
			}
		}
		/* Writes landing here make no CQ entry, but they are work: read
		 * the counter only on a turn that found nothing else, since on
		 * some providers reading it runs progress again. Peers'
		 * heartbeats land too, one a second from each peer that watches
		 * us; counted as work they would start the short sleeps again
		 * every time (mv_reap() leaves them out for the same reason). A
		 * heartbeat counted here before mv_reap() read its CQ entry
		 * makes one turn look busy, or a later write look like a
		 * heartbeat: the idle policy's guess, never the data's. */
		if (!work && s->fab.rx_cntr) {
			uint64_t v = fi_cntr_read(s->fab.rx_cntr);
			if (v != s->rx_seen) {
				if (v - s->rx_seen > s->hb_rx - hb_seen)
					work++;
				s->rx_seen = v;
				hb_seen = s->hb_rx;
			}
		}
		/* Stamped when the work ended, not when the turn began: a long
		 * turn (a big post, or preemption) must not count as idle time. */
		if (work) {
			int64_t now = mv_now_ns();
			if (slept)
				spin = mv_spin_after_sleep(spin, now - last_work, 1, crowded);
			slept = 0;
			last_work = last_active = now;
			continue;
		}
		if (mv_now_ns() - last_active < spin || s->stop_cmd) {
			/* On a crowded host a thread this shard just woke (a
			 * client with a completion to read, a same-host peer's
			 * shard) may be waiting for this very core: let it have
			 * it now, not after the scheduler's wake-up granularity.
			 * Threads that poll wake nobody and get no yield: they
			 * would keep the core for a whole time slice. */
			if (crowded && s->now - s->woke_at < YIELD_AFTER_WAKE_NS)
				sched_yield();
			if (s->now - crowd_at > CROWD_CHECK_NS) {
				crowd_at = s->now;
				crowded = mv_host_crowded(load_fd, ncpu);
			}
			continue;
		}
		s->st.sleeps++;
		mv_stats_publish(s, 1);
		crowded = mv_host_crowded(load_fd, ncpu);
		crowd_at = mv_now_ns();
		/* Woken by data (the CQ fd of a receiving shard: its writes make
		 * no CQ entry) or a doorbell: spin again rather than sleep per
		 * message while a stream lasts. How long it then sleeps counts
		 * from its last work, not from the wake: a wake that brought
		 * none (a peer's heartbeat) leaves it in its long sleeps. Counted
		 * from the wake, every heartbeat started the 20 us steps again:
		 * an idle shm mover with one peer woke ~250 times a second (0.8%
		 * of a core on the 2-core machine, 1.3% with eight peers). */
		int64_t t0 = mv_now_ns();
		int woke = mv_sleep_once(s, t0 - last_work);
		int64_t now = mv_now_ns();
		slept = 1;
		if (woke)
			last_active = now;
		spin = mv_spin_after_sleep(spin, now - t0, woke, crowded);
	}
	if (load_fd >= 0)
		close(load_fd);
}

void *mv_shard_main(void *arg)
{
	struct mv_shard *s = arg;
	int ret;

	s->gpu_open_dev = -1;
	ret = mv_topo_pin(s->cpu);
	if (ret)
		mv_warn("shard %d: pinning to CPU %d failed: %s", s->id, s->cpu, strerror(-ret));
	/* The idle shard's short sleeps (20 us on shm, where nothing wakes a
	 * receiver) last what they say, not the 50 us of default slack more:
	 * a write arriving during one waits for its end. */
	prctl(PR_SET_TIMERSLACK, 1000UL);
	/* Everything the shard owns is allocated after pinning, on its node. */
	ret = mv_fabric_open(&s->fab, s->mv->prov, s->iface, s->mv->hmem);
	if (ret) {
		s->start_status = ret;
		snprintf(s->start_msg, sizeof(s->start_msg), "opening %s on %s: %s", s->mv->prov,
		         s->iface, fi_strerror(-ret));
		sem_post(&s->started);
		return NULL;
	}
	s->ops = calloc(MV_OPS_PER_SHARD, sizeof(*s->ops));
	if (!s->ops) {
		s->start_status = -ENOMEM;
		snprintf(s->start_msg, sizeof(s->start_msg), "no memory for the op pool");
		mv_fabric_close(&s->fab);
		sem_post(&s->started);
		return NULL;
	}
	/* Handed out in order by mv_op_get() as first needed: of the pool's
	 * MV_OPS_PER_SHARD ops (~1 KiB each) a shard touches only as many
	 * pages as its traffic reaches, so its start spends no page faults on
	 * them and an idle mover keeps them unresident. */
	s->free_ops = NULL;
	s->ops_fresh = 0;
	s->nfree = MV_OPS_PER_SHARD;
	/* Landing headers live in the ops: register them, for providers that
	 * want local buffers registered (FI_MR_LOCAL). */
	ret = mv_fabric_reg(&s->fab, s->ops, MV_OPS_PER_SHARD * sizeof(*s->ops),
	                    0x0b5000000ull + (uint64_t)s->id, &s->ops_mr, &s->ops_desc,
	                    &(uint64_t){0}, s->start_msg, sizeof(s->start_msg));
	if (ret) {
		s->start_status = ret;
		free(s->ops);
		mv_fabric_close(&s->fab);
		sem_post(&s->started);
		return NULL;
	}
	/* Peers write immediates here, and heartbeats of up to MV_BELL_SIZE
	 * bytes (heartbeat.c); ours are sent from it too. */
	s->bell = aligned_alloc(4096, MV_BELL_SIZE);
	ret = s->bell ? mv_fabric_reg(&s->fab, s->bell, MV_BELL_SIZE,
	                              0xbe11000000ull + (uint64_t)s->id, &s->bell_mr, &s->bell_desc,
	                              &s->bell_key, s->start_msg, sizeof(s->start_msg))
	              : -ENOMEM;
	if (ret) {
		s->start_status = ret;
		free(s->bell);
		free(s->ops);
		mv_fabric_close(&s->fab);
		sem_post(&s->started);
		return NULL;
	}
	if (mv_hb_init(s)) {
		s->start_status = -ENOMEM;
		snprintf(s->start_msg, sizeof(s->start_msg), "no memory for heartbeats");
		fi_close(&s->bell_mr->fid);
		free(s->bell);
		free(s->ops);
		mv_fabric_close(&s->fab);
		sem_post(&s->started);
		return NULL;
	}
	sem_post(&s->started);

	shard_loop(s);

	struct mv_cmd *stop = s->stop_cmd;
	for (uint32_t i = 0; i < s->natt; i++)
		attach_free(s->att[i]);
	s->natt = 0;
	if (s->land) {
		fi_close(&s->land_mr->fid);
		mv_gpu_unpin(s->land[0].buf);
		free(s->land);
	}
	mv_gpu_shard_close(s);
	fi_close(&s->bell_mr->fid);
	fi_close(&s->ops_mr->fid);
	free(s->bell);
	/* Registrations before the domain they belong to. */
	for (uint32_t i = 0; i < MV_MAX_REGIONS; i++) {
		struct mv_region *r =
		    atomic_load_explicit(&s->mv->regions[i], memory_order_acquire);
		if (r && r->mr[s->id]) {
			fi_close(&r->mr[s->id]->fid);
			r->mr[s->id] = NULL;
		}
	}
	mv_fabric_close(&s->fab);
	mv_hb_fini(s);
	free(s->ops);
	cmd_done(s, stop, 0);
	return NULL;
}

int mv_shard_start(struct mv_shard *s)
{
	int ret;

	pthread_mutex_init(&s->mbox_mu, NULL);
	sem_init(&s->started, 0, 0);
	ret = pthread_create(&s->thread, NULL, mv_shard_main, s);
	if (ret)
		return -ret;
	/* Named so top -H, perf and mvbench --threads can tell shards apart. */
	char name[16];
	snprintf(name, sizeof(name), "mv-shard%d", s->id);
	pthread_setname_np(s->thread, name);
	sem_wait(&s->started);
	return s->start_status;
}
