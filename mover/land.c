/* SPDX-License-Identifier: MIT */
/*
 * Landing messages: writes into a peer's GPU memory that its fabric cannot
 * reach. The sender sends each chunk behind a header into receive buffers
 * the target shard keeps posted; the target copies the chunk to its GPU and
 * acks with remote CQ data written to the sender's doorbell. The sender's
 * side comes first, then the target's pool of landing buffers.
 */
#include "shard_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

enum { MV_LAND_POSTED, MV_LAND_COPYING, MV_LAND_ACKING, MV_LAND_ACKED };

/* The header a landing message carries ahead of its data; the token is
 * set when it is posted. */
void mv_land_hdr(struct mv_shard *s, struct mv_wr *op, const struct mv_import *dst,
                 uint64_t dst_off, uint64_t len)
{
	struct mv_land_hdr *h = &op->lhdr;

	memset(h, 0, sizeof(*h));
	h->magic = MV_LAND_MAGIC;
	h->region = dst->region;
	h->offset = dst_off;
	h->len = len;
	h->mover_id = s->mv->mover_id;
	h->shard = (uint16_t)s->id;
	h->addrlen = (uint16_t)s->fab.addrlen;
	h->bell_addr = s->fab.virt_addr ? (uint64_t)(uintptr_t)s->bell : 0;
	h->bell_key = s->bell_key;
	memcpy(h->addr, s->fab.addr, s->fab.addrlen);
	op->kind = MV_OPK_LAND;
	op->niov = 2;
	op->iov[0] = (struct iovec){h, sizeof(*h)};
	op->desc[0] = s->ops_desc;
}

/* Host memory into a peer's GPU region its fabric cannot reach: landing
 * messages, one per chunk, straight from the region. */
void mv_take_land(struct mv_shard *s, struct mv_attach *at, const struct mv_desc *d,
                  const struct mv_region *src, const struct mv_import *dst)
{
	struct mv_part *p = &at->parts[d->batch];

	for (uint64_t off = 0; off < d->len;) {
		uint64_t n = d->len - off < MV_CHUNK ? d->len - off : MV_CHUNK;
		struct mv_wr *op = mv_op_get(s);

		op->path = MV_PATH_STAGED;
		op->src_region = src->id;
		op->dst_region = dst->region;
		op->at = at;
		op->batch = d->batch;
		op->peer = dst->peer;
		op->bytes = n;
		mv_land_hdr(s, op, dst, d->dst_off + off, n);
		op->iov[1] = (struct iovec){src->base + d->src_off + off, n};
		op->desc[1] = src->desc[s->id];
		p->outstanding++;
		mv_op_own(s, at, op);
		mv_pend_push(s, op);
		off += n;
	}
}

/* ---- receiver-side staging: landing buffers ---- */

static void land_post(struct mv_shard *s, struct mv_land_buf *lb)
{
	ssize_t ret = fi_recv(s->fab.ep, lb->buf, MV_LAND_HDR + MV_CHUNK, s->land_desc,
	                      FI_ADDR_UNSPEC, &lb->ctx);

	lb->state = MV_LAND_POSTED;
	if (ret) /* retried from mv_land_progress */
		lb->state = MV_LAND_ACKED;
}

/* The pool of pinned receive buffers, posted the first time this shard
 * holds a GPU region the fabric cannot register. */
int mv_land_init(struct mv_shard *s, char *why, size_t whylen)
{
	size_t one = MV_LAND_HDR + MV_CHUNK;
	uint8_t *mem;
	uint64_t key;
	int ret;

	if (s->land)
		return 0;
	mem = mv_gpu_pinned(s, one * MV_LAND_BUFS, why, whylen);
	if (!mem)
		return -ENOMEM;
	ret = mv_fabric_reg(&s->fab, mem, one * MV_LAND_BUFS, 0x1a0d000000ull + (uint64_t)s->id,
	                    &s->land_mr, &s->land_desc, &key, why, whylen);
	if (ret) {
		mv_gpu_unpin(mem);
		return ret;
	}
	s->land = calloc(MV_LAND_BUFS, sizeof(*s->land));
	if (!s->land) {
		fi_close(&s->land_mr->fid);
		mv_gpu_unpin(mem);
		return -ENOMEM;
	}
	for (int i = 0; i < MV_LAND_BUFS; i++) {
		s->land[i].buf = mem + (size_t)i * one;
		land_post(s, &s->land[i]);
	}
	return 0;
}

static fi_addr_t land_sender(struct mv_shard *s, const struct mv_land_hdr *h)
{
	fi_addr_t fa;

	for (uint32_t i = 0; i < s->nsenders; i++)
		if (s->senders[i].mover_id == h->mover_id && s->senders[i].shard == h->shard)
			return s->senders[i].fa;
	if (h->addrlen != s->fab.addrlen || mv_fabric_av_insert(&s->fab, h->addr, &fa))
		return FI_ADDR_NOTAVAIL;
	uint32_t i = s->nsenders < 64 ? s->nsenders++ : (uint32_t)(h->mover_id % 64);
	s->senders[i].mover_id = h->mover_id;
	s->senders[i].shard = h->shard;
	s->senders[i].fa = fa;
	return fa;
}

/*
 * A landing header no mover would send (its length not the message's, a
 * region that is not a GPU region, a range outside it), naming a peer of
 * ours by its mover id and its shard's fabric address as that peer's
 * address blob has them: the peer is cut off (heartbeat.c). The fabric
 * says nothing of who sent a message, so a header naming no peer, or
 * naming one with another's address, is only dropped and logged.
 */
static void garbage(struct mv_shard *s, const struct mv_land_hdr *h, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void garbage(struct mv_shard *s, const struct mv_land_hdr *h, const char *fmt, ...)
{
	char what[MV_ERRLEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	for (uint32_t i = 0; i < MV_MAX_PEERS; i++) {
		struct mv_peer *p = atomic_load_explicit(&s->mv->peers[i], memory_order_acquire);
		if (!p || p->mover_id != h->mover_id)
			continue;
		if (h->shard < p->nshards && h->addrlen == p->blob.addrlen &&
		    h->addrlen <= MV_MAX_ADDRLEN &&
		    !memcmp(h->addr, p->blob.addr[h->shard], h->addrlen))
			mv_peer_garbage(s->mv, p->mover_id, "%s", what);
		return;
	}
	mv_log_client(MV_LOG_WARN, MV_WHO_SHARD | (uint64_t)s->id,
	              "shard %d: %s, naming no peer of ours; dropped", s->id, what);
}

static void lq_push(struct mv_shard *s, struct mv_land_buf *lb)
{
	lb->next = NULL;
	if (s->lq_tail)
		s->lq_tail->next = lb;
	else
		s->lq_head = lb;
	s->lq_tail = lb;
	s->nland_busy++;
}

/* A landing buffer's receive or ack completed (err: it failed). */
void mv_land_event(struct mv_shard *s, struct mv_land_buf *lb, void *ctx, size_t len, int err)
{
	char why[MV_ERRLEN];
	struct mv_land_hdr h;

	if (ctx == &lb->actx) {
		/* The ack is out: the buffer takes the next message. */
		s->nland_busy--;
		land_post(s, lb);
		return;
	}
	if (err) {
		land_post(s, lb);
		return;
	}
	memcpy(&h, lb->buf, sizeof(h));
	if (len >= MV_LAND_HDR && h.magic == MV_LAND_MAGIC) {
		struct mv_region *r = mv_region_get(s->mv, h.region);
		if (h.len != len - MV_LAND_HDR)
			garbage(s, &h, "a landing header says %llu bytes; %zu came",
			        (unsigned long long)h.len, len - MV_LAND_HDR);
		else if (r && (!r->is_gpu || h.offset > r->len || r->len - h.offset < h.len))
			garbage(s, &h,
			        "a landing message of %llu bytes at %llu for region %u (%s, %llu "
			        "bytes)",
			        (unsigned long long)h.len, (unsigned long long)h.offset, h.region,
			        r->is_gpu ? "GPU" : "host memory", (unsigned long long)r->len);
	}
	if (len < MV_LAND_HDR || h.magic != MV_LAND_MAGIC || h.len != len - MV_LAND_HDR) {
		mv_log_client(MV_LOG_WARN, MV_WHO_SHARD | (uint64_t)s->id,
		              "shard %d: a landing message of %zu bytes is malformed; dropped",
		              s->id, len);
		land_post(s, lb);
		return;
	}
	lb->ack_to = land_sender(s, &h);
	if (lb->ack_to == FI_ADDR_NOTAVAIL) {
		mv_log_client(MV_LOG_WARN, MV_WHO_SHARD | (uint64_t)s->id,
		              "shard %d: cannot answer the sender of a landing message; dropped",
		              s->id);
		land_post(s, lb);
		return;
	}
	lb->ack_addr = h.bell_addr;
	lb->ack_key = h.bell_key;
	lb->ack_data = MV_ACK | (h.token & (MV_ACK_ERR - 1));
	lb->ev = NULL;
	struct mv_region *r = mv_region_get(s->mv, h.region);
	if (!r || !r->is_gpu || h.offset > r->len || r->len - h.offset < h.len ||
	    mv_gpu_shard_ready(s, r->gpu.dev, why, sizeof(why)) ||
	    mv_gpu_copy(s, r->gpu.dev, r->gpu.dptr + h.offset, r->gpu.dev,
	                (uint64_t)(uintptr_t)(lb->buf + MV_LAND_HDR), -1, h.len, why,
	                sizeof(why)) ||
	    mv_gpu_event(s, r->gpu.dev, &lb->ev, why, sizeof(why))) {
		lb->ack_data |= MV_ACK_ERR; /* the sender's batch fails, naming us */
		lb->state = MV_LAND_ACKING;
	} else {
		lb->dev = r->gpu.dev;
		lb->state = MV_LAND_COPYING;
		s->st.path_bytes[MV_PATH_STAGED] += h.len;
	}
	lq_push(s, lb);
}

/* Copies done become acks; the data is on the device before the sender hears. */
int mv_land_progress(struct mv_shard *s)
{
	char why[MV_ERRLEN];
	int n = 0;

	while (s->lq_head) {
		struct mv_land_buf *lb = s->lq_head;
		if (lb->state == MV_LAND_COPYING) {
			int done = mv_gpu_event_done(s, lb->dev, lb->ev, why, sizeof(why));
			if (done == 0)
				break;
			if (done < 0)
				lb->ack_data |= MV_ACK_ERR;
			lb->state = MV_LAND_ACKING;
		}
		struct fi_rma_iov ri = {.addr = lb->ack_addr, .len = 0, .key = lb->ack_key};
		struct fi_msg_rma m = {.rma_iov = &ri,
		                       .rma_iov_count = 1,
		                       .addr = lb->ack_to,
		                       .context = &lb->actx,
		                       .data = lb->ack_data};
		ssize_t ret = fi_writemsg(s->fab.ep, &m, FI_COMPLETION | FI_REMOTE_CQ_DATA);
		if (ret == -FI_EAGAIN) {
			s->st.eagain++; /* a re-post too: mvstat's re-posts per write */
			break;
		}
		s->lq_head = lb->next;
		if (!s->lq_head)
			s->lq_tail = NULL;
		n++;
		if (ret) {
			mv_warn("shard %d: acking a landing message: %s", s->id,
			        fi_strerror((int)-ret));
			s->nland_busy--;
			land_post(s, lb);
		}
	}
	/* Buffers whose re-post failed try again. */
	for (int i = 0; s->land && i < MV_LAND_BUFS; i++)
		if (s->land[i].state == MV_LAND_ACKED)
			land_post(s, &s->land[i]);
	return n;
}
