/* SPDX-License-Identifier: MIT */
/*
 * The latency rows' baseline: two endpoints of the provider, each polled by
 * its own thread, write size bytes and FI_REMOTE_CQ_DATA to each other with
 * fi_writemsg, with the flags the shards post their writes with (so
 * FI_DELIVERY_COMPLETE on tcp) and, where that differs, plain. The ping
 * checks that each answer's first word is the one it sent.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "lat.h"

static int dpost(struct pong *p, uint64_t off, uint64_t roff, uint64_t size, uint64_t data)
{
	struct iovec iov = {p->buf + off, size};
	struct fi_rma_iov ri = {.addr = p->rbase + roff, .len = size, .key = p->rkey};
	struct fi_msg_rma m = {.msg_iov = &iov,
	                       .desc = &p->desc,
	                       .iov_count = 1,
	                       .addr = p->peer,
	                       .rma_iov = &ri,
	                       .rma_iov_count = 1,
	                       .context = p,
	                       .data = data};
	struct fi_cq_data_entry ent[CQ_BATCH];

	for (;;) {
		ssize_t ret = fi_writemsg(
		    p->fab.ep, &m, FI_COMPLETION | FI_REMOTE_CQ_DATA | atomic_load(&p->flags));
		if (ret != -FI_EAGAIN)
			return (int)ret;
		/* Progress, keeping what it brings: only our own sends can come
		 * before the peer has our write. */
		ssize_t n = fi_cq_read(p->fab.cq, ent, CQ_BATCH);
		if (n < 0 && n != -FI_EAGAIN)
			return (int)n;
	}
}

/* Reads the CQ until a remote write's data arrives: 1 with *data, 0 when
 * nothing came yet, < 0 on error. */
static int dreap(struct pong *p, uint64_t *data, char *why, size_t whylen)
{
	struct fi_cq_data_entry ent[CQ_BATCH];
	ssize_t n = fi_cq_read(p->fab.cq, ent, CQ_BATCH);
	int got = 0;

	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry e = {0};
		char buf[128];
		fi_cq_readerr(p->fab.cq, &e, 0);
		const char *pe =
		    fi_cq_strerror(p->fab.cq, e.prov_errno, e.err_data, buf, sizeof(buf));
		snprintf(why, whylen, "direct: %s: %s", fi_strerror(e.err), pe ? pe : "");
		return -EIO;
	}
	if (n < 0) {
		snprintf(why, whylen, "direct: fi_cq_read: %s", fi_strerror((int)-n));
		return (int)n;
	}
	for (ssize_t i = 0; i < n; i++)
		if (ent[i].flags & FI_REMOTE_CQ_DATA) {
			*data = ent[i].data;
			got = 1; /* one ping at a time: at most one such entry */
		}
	return got;
}

void *dpong_main(void *arg)
{
	struct pong *p = arg;
	char why[200];

	pin_self(p->cpu);
	while (!atomic_load_explicit(&p->stop, memory_order_relaxed)) {
		if (pong_parked(p))
			continue;
		uint64_t data;
		int got = dreap(p, &data, why, sizeof(why));
		if (got < 0) {
			pong_fail(p, "direct pong: %s", why);
			return NULL;
		}
		if (!got)
			continue;
		uint64_t first;
		memcpy(&first, p->buf, 8);
		if (first != data) {
			pong_fail(p, "direct: data %" PRIu64 " arrived before its data", data);
			return NULL;
		}
		int ret = dpost(p, 0, LAT_ECHO, atomic_load(&p->size), data);
		if (ret) {
			pong_fail(p, "direct pong: fi_writemsg: %s", fi_strerror(-ret));
			return NULL;
		}
	}
	return NULL;
}

/* One direct round trip; dc: both sides' writes with the flags the shards
 * post theirs with (FI_DELIVERY_COMPLETE where the provider honours it),
 * else plain. */
double direct_round(struct lat *L, uint64_t size, int dc, char *why, size_t whylen)
{
	struct pong *p = &L->dping;
	uint64_t seq = ++L->seq, data;

	/* The pong reads its flags once our write is there: set first. */
	atomic_store(&L->dpong.flags, dc ? p->fab.dc_flag : 0);
	atomic_store(&p->flags, dc ? p->fab.dc_flag : 0);

	memcpy(p->buf, &seq, 8);
	double t0 = now_s();
	int ret = dpost(p, 0, 0, size, seq);
	if (ret) {
		snprintf(why, whylen, "direct ping: fi_writemsg: %s", fi_strerror(-ret));
		return -1;
	}
	for (;;) {
		int got = dreap(p, &data, why, whylen);
		if (got < 0)
			return -1;
		if (got) {
			double us = (now_s() - t0) * 1e6;
			uint64_t first;
			memcpy(&first, p->buf + LAT_ECHO, 8);
			if (data != seq || first != seq) {
				snprintf(why, whylen, "direct: answer %" PRIu64 " to ping %" PRIu64,
				         data, seq);
				return -1;
			}
			return us;
		}
		if (atomic_load(&L->dpong.failed)) {
			snprintf(why, whylen, "%s", L->dpong.err);
			return -1;
		}
		if (now_s() - t0 > LAT_WAIT_S) {
			snprintf(why, whylen, "direct: no answer in %.0f s", LAT_WAIT_S);
			return -1;
		}
	}
}

int dside_open(struct cfg *x, struct pong *p, uint64_t key, char *why, size_t whylen)
{
	int ret = mv_fabric_open(&p->fab, x->fab, x->iface, 0);

	if (ret) {
		snprintf(why, whylen, "direct: opening %s: %s", x->fab, fi_strerror(-ret));
		return ret;
	}
	p->buf = aligned_alloc(4096, LAT_REGION);
	if (!p->buf) {
		mv_fabric_close(&p->fab);
		snprintf(why, whylen, "direct: no memory");
		return -ENOMEM;
	}
	memset(p->buf, 0, LAT_REGION);
	ret = mv_fabric_reg(&p->fab, p->buf, LAT_REGION, key, &p->mr, &p->desc, &p->rkey, why,
	                    whylen);
	if (ret) {
		free(p->buf);
		mv_fabric_close(&p->fab);
	}
	return ret;
}

void dside_close(struct pong *p)
{
	if (p->mr)
		fi_close(&p->mr->fid);
	mv_fabric_close(&p->fab);
	free(p->buf);
	p->mr = NULL;
	p->buf = NULL;
}

/* Each side learns the other's address, key and base. */
int dside_pair(struct pong *a, struct pong *b, char *why, size_t whylen)
{
	uint64_t ka = a->rkey, kb = b->rkey;
	int ret = mv_fabric_av_insert(&a->fab, b->fab.addr, &a->peer);

	if (!ret)
		ret = mv_fabric_av_insert(&b->fab, a->fab.addr, &b->peer);
	if (ret) {
		snprintf(why, whylen, "direct: fi_av_insert: %s", fi_strerror(-ret));
		return ret;
	}
	a->rkey = kb;
	b->rkey = ka;
	a->rbase = b->fab.virt_addr ? (uint64_t)(uintptr_t)b->buf : 0;
	b->rbase = a->fab.virt_addr ? (uint64_t)(uintptr_t)a->buf : 0;
	return 0;
}
