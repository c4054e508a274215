/* SPDX-License-Identifier: MIT */
/*
 * The GPU paths of a write: CUDA copies into a same-host peer's GPU memory
 * (path 2), and GPU memory the provider cannot register staged through the
 * bounce pool, then written from there (path 3), so the copy of one chunk
 * overlaps the fabric write of the one before. The CUDA calls are in
 * gpu.c.
 */
#include "shard_int.h"

#include <stdio.h>

/*
 * Copies on one stream finish in order, so one event can stand for many:
 * the copies queued since the last fence form a group, and the event
 * recorded after the group's last copy tells when all of them are done.
 * Groups stay contiguous in the queue, one device each.
 */
int mv_fence(struct mv_shard *s, char *why, size_t whylen)
{
	int dev = s->gpu_open_dev, ret;

	if (dev < 0)
		return 0;
	s->gpu_open_dev = -1;
	ret = mv_gpu_event(s, dev, &s->gq_tail->ev, why, whylen);
	if (ret) {
		/* Without an event nobody learns the group finished: wait for
		 * the stream here instead (a stall, never a hang). */
		mv_log("shard %d: %s; waiting for device %d", s->id, why, dev);
		mv_gpu_sync(s, dev, why, whylen);
		s->gq_tail->ev = MV_GPU_EV_DONE;
	}
	return ret;
}

/* A failed CUDA copy, naming the regions (the source may have been freed by
 * its owner mid-write). */
static const char *copy_failed(const struct mv_wr *op, const char *why)
{
	static _Thread_local char msg[MV_ERRLEN];

	snprintf(msg, sizeof(msg), "%s from region %u into peer region %u: %s",
	         op->kind == MV_OPK_COPY ? "CUDA copy" : "staging copy", op->src_region,
	         op->dst_region, why);
	return msg;
}

/* Paths 2 and 3: one op per chunk, copies issued (or queued for a bounce
 * chunk) at once, on the stream of the device that runs them. */
void mv_take_gpu(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d,
                 const struct mv_region *src, const struct mv_import *dst, uint8_t path, int land)
{
	struct mv_part *p = &at->parts[d->batch];
	int dev = path == MV_PATH_COPY ? dst->remote->map.dev : src->gpu.dev;
	uint32_t t = (uint32_t)s->id % dst->nshards;
	char why[MV_ERRLEN];
	int ret;

	ret = mv_gpu_shard_ready(s, dev, why, sizeof(why));
	if (ret) {
		mv_fail_part(p, ret, MV_CAUSE_PROVIDER, d->src, why);
		return;
	}
	for (uint64_t off = 0; off < d->len;) {
		/* A CUDA copy takes the whole descriptor at once; a staged write
		 * goes chunk by chunk through the bounce pool. */
		uint64_t n =
		    path == MV_PATH_COPY || d->len - off < MV_CHUNK ? d->len - off : MV_CHUNK;
		struct mv_wr *op = mv_op_get(s);

		op->kind = path == MV_PATH_COPY ? MV_OPK_COPY : MV_OPK_STAGE;
		op->path = path;
		op->src_region = src->id;
		op->dst_region = dst->region;
		op->at = at;
		op->batch = d->batch;
		op->peer = dst->peer;
		op->bytes = n;
		op->dev = dev;
		op->src_dev = src->is_gpu ? src->gpu.dev : -1;
		op->csrc = src->is_gpu ? src->gpu.dptr + d->src_off + off
		                       : (uint64_t)(uintptr_t)(src->base + d->src_off + off);
		p->outstanding++;
		mv_op_own(s, at, op);
		s->ngpu++;
		if (path == MV_PATH_COPY) {
			op->dst_dev = dst->remote->map.dev;
			op->cdst = dst->remote->map.dptr + d->dst_off + off;
			if (s->gpu_open_dev >= 0 && s->gpu_open_dev != dev)
				mv_fence(s, why, sizeof(why));
			ret = mv_gpu_copy(s, dev, op->cdst, op->dst_dev, op->csrc, op->src_dev, n,
			                  why, sizeof(why));
			if (ret) {
				s->ngpu--;
				mv_op_done(s, op, ret, copy_failed(op, why));
			} else {
				mv_wr_append(&s->gq_head, &s->gq_tail, op);
				s->gpu_open_dev = dev; /* fenced after this consume round */
			}
		} else {
			op->dst_dev = -1;
			op->niov = 1;
			op->riov[0] = (struct fi_rma_iov){
			    .addr = dst->addr[t] + d->dst_off + off, .len = n, .key = dst->key[t]};
			/* Into GPU memory the fabric cannot reach: after the copy to
			 * the bounce chunk it goes as a landing message. */
			op->land = land;
			if (land) {
				mv_land_hdr(s, op, dst, d->dst_off + off, n);
				op->kind = MV_OPK_STAGE; /* until its chunk is filled */
			}
			mv_wr_append(&at->sq_head, &at->sq_tail, op);
			s->nsq++;
		}
		off += n;
	}
}

/*
 * Whether op's peer may hold one more bounce chunk. A chunk is held until
 * its write completes, and on tcp a peer whose process stopped after its
 * connection was made completes none: its writes would take every chunk of
 * the shard, and every other client's staged writes would wait for good.
 * So the chunks of one peer's writes are at most half of what those to
 * every other peer leave, as room_for() in post.c keeps the provider's
 * queue; a client alone too, since one that came later found every chunk
 * held by writes made while the first was alone. Four chunks of one peer
 * moved 6 GiB as fast as eight did on the H100 (tcp, staged: 1.63-1.91 s
 * against 1.84-2.10, 3 runs). And since each stopped peer takes its share
 * of what the others leave, four of them held all eight chunks: so the
 * writes of one uid's clients hold at most three quarters of what other
 * uids' leave, as the op pool does (mv_pool_room()). Returns 1 where op
 * may take a chunk, 0 where its peer holds its share (op parks), -1 where
 * its uid does (its client's writes wait in their order).
 */
static int chunk_room(const struct mv_shard *s, const struct mv_wr *op)
{
	uint32_t held = mv_chunks_held(&s->gpu);
	uint32_t mine = s->chunks_to[op->peer->index], uid = s->uids[op->uix].chunks;

	if (!mv_within_share(uid, held - uid, MV_BOUNCE_CHUNKS, 3, 4))
		return -1;
	return mv_within_share(mine, held - mine, MV_BOUNCE_CHUNKS, 1, 2);
}

/* Parked writes go back ahead of their client's queue, in their order: a
 * chunk came free, so their peer may have room again. A write whose peer
 * completed a chunk's write meanwhile waits for a
 * chunk again from now: its peer is moving, and writes cannot overtake one
 * another to reach it sooner. */
static void unpark(struct mv_shard *s)
{
	uint32_t nf = s->nfreed;

	s->unpark = 0;
	s->nfreed = 0;
	for (uint32_t k = 0; k < s->natt && s->npk; k++) {
		struct mv_attach *at = s->att[k];
		if (!at->pk_head)
			continue;
		for (struct mv_wr *op = at->pk_head; op; op = op->next) {
			for (uint32_t i = 0; i < nf; i++)
				if (s->freed_pix[i] == op->peer->index) {
					op->posted_at = s->now;
					break;
				}
			s->npk--;
			s->nsq++;
		}
		at->pk_tail->next = at->sq_head;
		if (!at->sq_head)
			at->sq_tail = at->pk_tail;
		at->sq_head = at->pk_head;
		at->pk_head = at->pk_tail = NULL;
	}
}

/*
 * The staged write that takes the next free chunk: the clients' queues take
 * turns (a client's backlog of staged writes made another's wait for all
 * of it: 1.3-1.9 s for 4 MiB beside 6 GiB on the H100), each from its
 * head, a write whose peer holds its share parked on the way. NULL when
 * none may.
 */
static struct mv_wr *next_staged(struct mv_shard *s)
{
	for (uint32_t k = 0; k < s->natt; k++) {
		uint32_t i = (s->sq_rr + k) % s->natt;
		struct mv_attach *at = s->att[i];
		while (at->sq_head) {
			struct mv_wr *op = at->sq_head;
			int room = chunk_room(s, op);
			if (room <= 0 && !op->posted_at)
				op->posted_at = s->now; /* waits for a chunk since */
			if (room < 0)
				break; /* until a chunk of its uid's frees */
			at->sq_head = op->next;
			if (!at->sq_head)
				at->sq_tail = NULL;
			s->nsq--;
			if (room) {
				s->sq_rr = i + 1;
				return op;
			}
			mv_wr_append(&at->pk_head, &at->pk_tail, op);
			s->npk++;
		}
	}
	return NULL;
}

/* Why the staged writes waiting for a chunk fail: every chunk held for
 * op_timeout by writes whose peers completed none. The words name the
 * peer that holds the most (a client's message is short); the log, once
 * a time it happens, every holder. */
static void chunks_held(struct mv_shard *s, char *text, size_t len)
{
	char all[256] = "";
	const struct mv_peer *top = NULL;
	uint32_t most = 0;
	size_t n = 0;

	for (uint32_t i = 0; i < MV_MAX_PEERS; i++) {
		const struct mv_peer *p =
		    s->chunks_to[i] ? atomic_load_explicit(&s->mv->peers[i], memory_order_acquire)
		                    : NULL;
		if (!p)
			continue;
		if (s->chunks_to[i] > most) {
			most = s->chunks_to[i];
			top = p;
		}
		if (n < sizeof(all))
			n += (size_t)snprintf(all + n, sizeof(all) - n, " %016llx: %u",
			                      (unsigned long long)p->mover_id, s->chunks_to[i]);
	}
	snprintf(text, len, "no bounce chunk freed in %d ms: peer mover %016llx holds %u of %u",
	         s->mv->cfg.op_timeout_ms, top ? (unsigned long long)top->mover_id : 0ull, most,
	         MV_BOUNCE_CHUNKS);
	if (s->chunks_told != s->chunks_full_since) {
		s->chunks_told = s->chunks_full_since;
		mv_warn("shard %d: no bounce chunk freed in %d ms; staged writes waiting for one "
		        "fail. Held by writes to peer movers that take nothing:%s",
		        s->id, s->mv->cfg.op_timeout_ms, all);
	}
}

/*
 * Staged writes whose chunk does not come: parked ones that waited
 * op_timeout for a chunk, their peer completing none of its writes
 * meanwhile (unpark() restamps them when it does), fail as a write to a
 * peer that took none would. And where every chunk has been held for
 * op_timeout, none freed (each held until its write completes, and
 * libfabric cannot take a posted write back: on tcp a few peers that
 * stopped after meeting hold them all, each its share of what the others
 * leave), the writes queued for one fail too, naming the holders: before,
 * they waited for as long as those peers stayed stopped. So do those of a
 * client whose first has waited op_timeout on its uid's share of the
 * chunks, held still, with no chunk of the uid's taken or freed meanwhile
 * (its writes wait for chunks that their peers do not give back).
 */
int mv_gpu_expire(struct mv_shard *s, int64_t limit)
{
	int n = 0, wedged = s->nsq && s->chunks_full_since && !s->gpu.free_chunks &&
	                    s->now - s->chunks_full_since > limit;
	char held[MV_ERRLEN];

	if (wedged)
		chunks_held(s, held, sizeof(held));
	for (uint32_t k = 0; k < s->natt; k++) {
		struct mv_attach *at = s->att[k];
		for (struct mv_wr **pp = &at->pk_head, *op; (op = *pp);) {
			if (s->now - op->posted_at <= limit) {
				at->pk_tail = op;
				pp = &op->next;
				continue;
			}
			char text[MV_ERRLEN];
			*pp = op->next;
			s->npk--;
			s->ngpu--;
			mv_took_none(s, op->peer, text, sizeof(text));
			mv_op_done(s, op, -ETIMEDOUT, text);
			n++;
		}
		if (!at->pk_head)
			at->pk_tail = NULL;
		/* Its head waited op_timeout on its uid's share, held now, and
		 * no chunk of the uid's was taken or freed meanwhile. */
		const struct mv_uid_ops *u = &s->uids[at->uix];
		const struct mv_wr *h = at->sq_head;
		int capped = !wedged && h && s->gpu.free_chunks && h->posted_at &&
		             s->now - h->posted_at > limit && s->now - u->moved_at > limit &&
		             chunk_room(s, h) < 0;
		char mine[MV_ERRLEN];
		if (capped)
			snprintf(
			    mine, sizeof(mine),
			    "uid %u holds %u of %u bounce chunks, its share, none freed in %d ms",
			    (unsigned)u->uid, u->chunks, MV_BOUNCE_CHUNKS,
			    s->mv->cfg.op_timeout_ms);
		while ((wedged || capped) && at->sq_head) {
			struct mv_wr *op = at->sq_head;
			at->sq_head = op->next;
			s->nsq--;
			s->ngpu--;
			mv_op_done(s, op, -ETIMEDOUT, wedged ? held : mine);
			n++;
		}
		if (!at->sq_head)
			at->sq_tail = NULL;
	}
	return n;
}

/*
 * GPU work of the shard: staged writes take a free bounce chunk and start
 * their device-to-host copy; finished copies either complete (path 2) or
 * become fabric writes from their chunk (path 3), so the copy of one chunk
 * overlaps the RDMA write of the one before.
 */
int mv_gpu_progress(struct mv_shard *s)
{
	char why[MV_ERRLEN];
	int n = 0;

	if (s->unpark)
		unpark(s);
	while (s->nsq && s->gpu.free_chunks) {
		struct mv_wr *op = next_staged(s);
		if (!op)
			break;
		int c = __builtin_ctz(s->gpu.free_chunks);
		uint64_t buf = (uint64_t)(uintptr_t)s->gpu.bounce + (uint64_t)c * MV_CHUNK;

		s->gpu.free_chunks &= ~(1u << c);
		if (!s->gpu.free_chunks)
			s->chunks_full_since = s->now;
		s->uids[op->uix].chunks++;
		s->uids[op->uix].moved_at = s->now;
		op->chunk = c;
		op->pix = (uint16_t)op->peer->index;
		s->chunks_to[op->pix]++;
		op->cdst = buf;
		mv_fence(s, why, sizeof(why)); /* a staged op is a group of its own */
		int ret = mv_gpu_copy(s, op->dev, buf, -1, op->csrc, op->src_dev, op->bytes, why,
		                      sizeof(why));
		if (!ret)
			ret = mv_gpu_event(s, op->dev, &op->ev, why, sizeof(why));
		if (ret) {
			s->ngpu--;
			mv_op_done(s, op, ret, copy_failed(op, why));
			if (s->unpark)
				break; /* its chunk came free: the parked go first */
		} else {
			mv_wr_append(&s->gq_head, &s->gq_tail, op);
		}
		n++;
	}
	while (s->gq_head) {
		struct mv_wr *f = s->gq_head;

		while (f && !f->ev)
			f = f->next; /* the group's fence: its last op */
		if (!f)
			break; /* the open group is fenced after this round */
		int done = mv_gpu_event_done(s, f->dev, f->ev, why, sizeof(why));
		if (done == 0)
			break; /* one stream per device runs them in order */
		/* The whole group, head through the fence, is done. */
		for (struct mv_wr *op = s->gq_head, *next;; op = next) {
			next = op->next;
			s->gq_head = next;
			if (!next)
				s->gq_tail = NULL;
			s->ngpu--;
			n++;
			int last = op == f;
			if (done < 0 || op->kind == MV_OPK_COPY) {
				mv_op_done(s, op, done < 0 ? -EIO : 0,
				           done < 0 ? copy_failed(op, why) : why);
			} else if (op->land) {
				op->kind = MV_OPK_LAND;
				op->niov = 2;
				op->iov[0] = (struct iovec){&op->lhdr, sizeof(op->lhdr)};
				op->desc[0] = s->ops_desc;
				op->iov[1] = (struct iovec){(void *)(uintptr_t)op->cdst, op->bytes};
				op->desc[1] = s->gpu.bounce_desc;
				mv_pend_push(s, op);
			} else {
				op->kind = MV_OPK_WRITE;
				op->iov[0] = (struct iovec){(void *)(uintptr_t)op->cdst, op->bytes};
				op->desc[0] = s->gpu.bounce_desc;
				mv_pend_push(s, op);
			}
			if (last)
				break;
		}
	}
	return n;
}
