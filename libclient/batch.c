/* SPDX-License-Identifier: MIT */
/*
 * Building batches: WRITE descriptors directly in the rings' reserved
 * slots, and long page and segment lists in the list arena with one LIST
 * descriptor per shard naming a slice of them. A batch is split over shards
 * (large writes striped evenly, pages and segments spread in contiguous
 * runs), each shard's part closed by an END descriptor that says how many
 * parts the batch has; the mover reports the batch once every part is done.
 */
#include "mvc_int.h"
#include "mv_copy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOCAL_GPU_STRIPE_MIN (64ull << 20) /* CUDA copies: split only large ones */

/* The per-batch tables for nb batch ids, all ids free. 0 or -ENOMEM; on
 * failure mvc_batch_tables_free() undoes what was made. */
int mvc_batch_tables_alloc(struct mvc *c, uint32_t nb)
{
	c->free_ids = malloc(sizeof(*c->free_ids) * nb);
	c->cookies = calloc(nb, sizeof(*c->cookies));
	c->busy = calloc(nb, 1);
	c->parts_of = calloc(nb, sizeof(*c->parts_of));
	c->share = calloc(nb, sizeof(*c->share));
	if (!c->free_ids || !c->cookies || !c->busy || !c->parts_of || !c->share)
		return -ENOMEM;
	for (uint32_t i = 0; i < nb; i++)
		c->free_ids[i] = nb - 1 - i;
	c->nfree = nb;
	return 0;
}

void mvc_batch_tables_free(struct mvc *c)
{
	free(c->free_ids);
	free(c->cookies);
	free(c->busy);
	free(c->parts_of);
	free(c->share);
	c->free_ids = NULL;
	c->cookies = NULL;
	c->busy = NULL;
	c->parts_of = NULL;
	c->share = NULL;
}

/* Batch b is reported (or failed for a gone mover): its id, load and list
 * bytes are free again. */
void mvc_batch_done(struct mvc *c, uint32_t b)
{
	c->busy[b] = 0;
	for (uint64_t m = c->parts_of[b]; m; m &= m - 1)
		c->sh[__builtin_ctzll(m)].load -= c->share[b];
	c->free_ids[c->nfree++] = b;
	c->inflight--;
	mvc_arena_batch_done(&c->arena, b);
}

/*
 * The shard for the k-th part of a write from src. A stripe (fixed) goes to
 * the same shard every time: stripe k of a buffer is copied by one shard,
 * whose caches and TLB keep its pages and page tables from the last time,
 * rather than by another shard each batch. A source with shards near its
 * GPU keeps to them: stripes in order over them; other parts from the least
 * loaded of them (the first from home among equals) on. Any other source's
 * parts start at home. Loads change only at submit, so every write of a
 * batch gets the same answer.
 */
static uint32_t pick(const struct mvc *c, uint32_t src, uint32_t k, int fixed)
{
	uint32_t n = c->info.nshards, base = fixed ? 0 : c->home;

	for (uint32_t i = 0; i < c->nnear; i++) {
		uint64_t m = c->near[i].mask;
		uint32_t near[MV_MAX_SHARDS], cnt = 0, best = 0;
		if (c->near[i].region != src || !m)
			continue;
		for (uint32_t j = 0; j < n; j++) {
			uint32_t sh = (base + j) % n;
			if (m >> sh & 1)
				near[cnt++] = sh;
		}
		if (!cnt)
			continue; /* a mask beyond this mover's shards */
		for (uint32_t j = 1; j < cnt && !fixed; j++)
			if (c->sh[near[j]].load < c->sh[near[best]].load)
				best = j;
		return near[(best + k) % cnt];
	}
	return (base + k) % n;
}

/* ---- batches ---- */

/*
 * The shard for a new batch's small writes (and the first stripe of its
 * large ones): the one with the fewest bytes in flight, the next in turn
 * among equals. A shard that fell behind gets less new work, so the others
 * are not left idle while the client's window fills with its batches.
 */
static uint32_t least_loaded(struct mvc *c)
{
	uint32_t n = c->info.nshards, best = c->turn % n;

	for (uint32_t i = 1; i < n; i++) {
		uint32_t s = (c->turn + i) % n;
		if (c->sh[s].load < c->sh[best].load)
			best = s;
	}
	c->turn = best + 1;
	return best;
}

static int batch_open(struct mvc *c)
{
	if (c->open)
		return 0;
	if (c->cut[0])
		return mvc_fail(c, -EPROTO, "the mover cut this connection off: %s", c->cut);
	if (c->dead && !mvc_rejoin_due(c))
		return mvc_fail(
		    c, -EPIPE, "the mover is gone%s",
		    c->rejoin ? "; reconnecting (reap its failed batches and call again)" : "");
	if (!c->nfree)
		return mvc_fail(c, -EAGAIN, "all %u batch ids are in flight; reap completions",
		                c->info.max_batches);
	c->batch = c->free_ids[--c->nfree];
	c->home = least_loaded(c);
	c->open = 1;
	c->has_imm = 0;
	c->uncopied = 0;
	c->kind = 0;
	c->nops = 0;
	c->page_size = 0;
	for (uint32_t s = 0; s < c->info.nshards; s++)
		c->sh[s].ndesc = 0, c->sh[s].nbytes = 0;
	mvc_arena_batch_open(&c->arena);
	return 0;
}

/* Saved ring and arena positions, so a call that runs out of room leaves
 * no trace. */
struct mark {
	uint64_t arena_head;
	uint32_t reserved[MV_MAX_SHARDS];
	uint32_t ndesc[MV_MAX_SHARDS];
	uint64_t nbytes[MV_MAX_SHARDS];
};

static void mark_take(struct mvc *c, struct mark *m)
{
	m->arena_head = c->arena.head;
	for (uint32_t s = 0; s < c->info.nshards; s++) {
		m->reserved[s] = shmring_reserved(&c->sh[s].sub);
		m->ndesc[s] = c->sh[s].ndesc;
		m->nbytes[s] = c->sh[s].nbytes;
	}
}

static int mark_undo(struct mvc *c, const struct mark *m, int err)
{
	c->arena.head = m->arena_head;
	for (uint32_t s = 0; s < c->info.nshards; s++) {
		shmring_unreserve(&c->sh[s].sub, shmring_reserved(&c->sh[s].sub) - m->reserved[s]);
		c->sh[s].ndesc = m->ndesc[s];
		c->sh[s].nbytes = m->nbytes[s];
	}
	return err;
}

/* One WRITE or LIST descriptor on shard s, moving bytes; always leaves room
 * for that shard's END. */
static int put_desc(struct mvc *c, uint32_t s, uint8_t op, uint32_t src, uint64_t src_off,
                    uint32_t dst, uint64_t dst_off, uint64_t len, uint64_t bytes)
{
	struct mvc_shard *sh = &c->sh[s];
	uint32_t pos;
	int n = shmring_reserve(&sh->sub, 2, &pos);

	if (n < 0)
		return mvc_fail(c, n, "submission ring of shard %u: %s", s,
		                shmring_error(&sh->sub));
	if (n < 2) {
		shmring_unreserve(&sh->sub, (uint32_t)n);
		if (shmring_reserved(&sh->sub) + 2 > sh->sub.capacity)
			return mvc_fail(
			    c, -E2BIG, "batch needs more than %u descriptors on shard %u; split it",
			    sh->sub.capacity - 1, s);
		return mvc_fail(c, -EAGAIN, "submission ring of shard %u is full", s);
	}
	shmring_unreserve(&sh->sub, 1);
	struct mv_desc *d = shmring_slot(&sh->sub, pos);
	*d = (struct mv_desc){.op = op,
	                      .batch = c->batch,
	                      .src = mvc_cur(c, MVC_OBJ_REGION, src),
	                      .dst = mvc_cur(c, MVC_OBJ_IMPORT, dst),
	                      .src_off = src_off,
	                      .dst_off = dst_off,
	                      .len = len};
	sh->ndesc++;
	sh->nbytes += bytes;
	return 0;
}

/* A contiguous write on one shard, cut to the mover's largest descriptor. */
static int put_span(struct mvc *c, uint32_t s, uint32_t src, uint64_t so, uint32_t dst,
                    uint64_t doff, uint64_t len)
{
	while (len) {
		uint64_t n = len < c->max_write ? len : c->max_write;
		int ret = put_desc(c, s, MV_OP_WRITE, src, so, dst, doff, n, n);
		if (ret)
			return ret;
		so += n;
		doff += n;
		len -= n;
	}
	return 0;
}

static int write_in(struct mvc *c, uint32_t src, uint64_t src_off, uint32_t dst, uint64_t dst_off,
                    uint64_t len)
{
	struct mark m;
	int ret = batch_open(c);
	uint32_t n = c->info.nshards; /* after the open, which may have reconnected */

	if (ret)
		return ret;
	if (len == 0)
		return mvc_fail(c, -EINVAL, "write of 0 bytes");
	mark_take(c, &m);
	int copied = mvc_copied(c, dst);
	c->uncopied |= !copied;
	/* Its parts. Into an import the shards copy into (same host): from
	 * 2 x MV_HOST_PART_MIN bytes, on as many shards as mv_host_parts()
	 * says, each on the shard its destination offset names
	 * (mv_host_shard()), so that a buffer written again and again is
	 * copied part by part by the same cores, and writes streaming through
	 * a region spread over all of them. Else striped from MV_STRIPE_MIN
	 * (a local GPU's CUDA copies from LOCAL_GPU_STRIPE_MIN): equal,
	 * aligned parts, one per shard, stripe k on shard k (pick()). One
	 * part goes to pick()'s shard for the batch. */
	uint32_t parts = copied ? mv_host_parts(len, n) : n;
	if (!copied) {
		int local_gpu = 0;
		for (uint32_t i = 0; i < c->nlocal_gpu; i++)
			local_gpu |= c->local_gpu[i] == dst;
		if (len < (local_gpu ? LOCAL_GPU_STRIPE_MIN : MV_STRIPE_MIN))
			parts = 1;
	}
	uint64_t part = parts > 1 ? mv_stripe_part(len, parts) : len;
	for (uint32_t k = 0; k < parts && (uint64_t)k * part < len; k++) {
		uint64_t o = (uint64_t)k * part, l = len - o < part ? len - o : part;
		uint32_t sh = parts == 1 ? pick(c, src, 0, 0)
		              : copied   ? mv_host_shard(dst_off, part, k, n)
		                         : pick(c, src, k, 1);
		ret = put_span(c, sh, src, src_off + o, dst, dst_off + o, l);
		if (ret)
			return mark_undo(c, &m, ret);
	}
	c->kind |= MV_TK_WRITE;
	c->nops++;
	return 0;
}

/*
 * A list of n entries in the arena (hdr, then the entries at body, body_len
 * bytes), and one LIST descriptor per shard for a contiguous range of it:
 * range k on pick(k), so neighbours stay together and the mover merges
 * them. bytes_of(i, j) gives the bytes of entries [i, j).
 */
static int put_list(struct mvc *c, const struct mv_list_hdr *hdr, const void *a, size_t alen,
                    const void *b, size_t blen, uint32_t src, uint32_t dst,
                    uint64_t (*bytes_of)(const void *arg, uint32_t i, uint32_t j), const void *arg)
{
	uint32_t n = hdr->count, per = mv_list_per(n, c->info.nshards);
	int64_t off = mvc_arena_take(c, mv_list_bytes(hdr->kind, n));

	if (off < 0)
		return (int)off;
	uint8_t *p = c->arena.map + off;
	memcpy(p, hdr, sizeof(*hdr));
	/* Big lists by streaming stores (client.c's arena_nt_min()); the
	 * fence in mv_copy_nt() orders them before the descriptors below. */
	if (alen + blen >= c->arena_nt_min) {
		mv_copy_nt(p + sizeof(*hdr), a, alen);
		if (blen)
			mv_copy_nt(p + sizeof(*hdr) + alen, b, blen);
	} else {
		memcpy(p + sizeof(*hdr), a, alen);
		if (blen)
			memcpy(p + sizeof(*hdr) + alen, b, blen);
	}
	for (uint32_t k = 0, i = 0; i < n; k++, i += per) {
		uint32_t cnt = n - i < per ? n - i : per;
		int ret = put_desc(c, pick(c, src, k, 0), MV_OP_LIST, src, (uint64_t)off, dst, i,
		                   cnt, bytes_of(arg, i, i + cnt));
		if (ret)
			return ret;
	}
	return 0;
}

static uint64_t seg_bytes(const void *arg, uint32_t i, uint32_t j)
{
	const struct mvc_seg *segs = arg;
	uint64_t sum = 0;

	for (; i < j; i++)
		sum += segs[i].len;
	return sum;
}

static uint64_t page_bytes(const void *arg, uint32_t i, uint32_t j)
{
	return (uint64_t)(j - i) * *(const uint64_t *)arg;
}

static int writev_in(struct mvc *c, uint32_t src, uint32_t dst, const struct mvc_seg *segs,
                     uint32_t n)
{
	struct mark m;
	int ret = batch_open(c);

	if (ret)
		return ret;
	/* After the open: a connection whose mover is gone has no shards. */
	uint32_t ns = c->info.nshards;
	uint32_t per = (n + ns - 1) / ns; /* neighbours stay together: the mover merges them */
	for (uint32_t i = 0; i < n; i++)
		if (segs[i].len == 0)
			return mvc_fail(c, -EINVAL, "segment %u has length 0", i);
	mark_take(c, &m);
	c->uncopied |= !mvc_copied(c, dst);
	if (n >= MV_LIST_MIN && c->arena.map) {
		static_assert(sizeof(struct mvc_seg) == sizeof(struct mv_seg), "segments as sent");
		struct mv_list_hdr h = {.magic = MV_LIST_MAGIC, .kind = MV_LIST_SEGS, .count = n};
		ret = put_list(c, &h, segs, (size_t)n * sizeof(*segs), NULL, 0, src, dst, seg_bytes,
		               segs);
		if (ret)
			return mark_undo(c, &m, ret);
	} else {
		for (uint32_t i = 0; i < n; i++) {
			ret = put_span(c, pick(c, src, i / per, 0), src, segs[i].src_off, dst,
			               segs[i].dst_off, segs[i].len);
			if (ret)
				return mark_undo(c, &m, ret);
		}
	}
	c->kind |= MV_TK_WRITEV;
	c->nops += n;
	return 0;
}

/* Pages [i, k) of p from i on, as far as they are adjacent on both sides. */
static uint32_t run_end(const struct mvc_pages *p, uint32_t i)
{
	uint32_t k = i + 1;

	if (p->src_stride != p->page_size || p->dst_stride != p->page_size)
		return k;
	while (k < p->npages && p->src_pages[k] == p->src_pages[k - 1] + 1 &&
	       p->dst_pages[k] == p->dst_pages[k - 1] + 1)
		k++;
	return k;
}

static int write_paged_in(struct mvc *c, const struct mvc_pages *p)
{
	struct mark m;
	uint32_t runs = 0, i, k;
	int ret = batch_open(c);
	uint32_t ns = c->info.nshards; /* after the open, which may have reconnected */

	if (ret)
		return ret;
	if (p->page_size == 0 || p->npages == 0)
		return mvc_fail(c, -EINVAL, "paged write of %u pages of %llu bytes", p->npages,
		                (unsigned long long)p->page_size);
	if (!p->src_pages || !p->dst_pages)
		return mvc_fail(c, -EINVAL, "paged write without %s page array",
		                p->src_pages ? "a destination" : "a source");
	mark_take(c, &m);
	c->uncopied |= !mvc_copied(c, p->dst);
	if (p->npages >= MV_LIST_MIN && c->arena.map) {
		/* By reference: the mover merges runs of adjacent pages. */
		struct mv_list_hdr h = {.magic = MV_LIST_MAGIC,
		                        .kind = MV_LIST_PAGES,
		                        .count = p->npages,
		                        .src_base = p->src_base,
		                        .dst_base = p->dst_base,
		                        .src_stride = p->src_stride,
		                        .dst_stride = p->dst_stride,
		                        .page_size = p->page_size};
		size_t alen = (size_t)p->npages * sizeof(uint32_t);
		ret = put_list(c, &h, p->src_pages, alen, p->dst_pages, alen, p->src, p->dst,
		               page_bytes, &p->page_size);
		if (ret)
			return mark_undo(c, &m, ret);
	} else {
		/* Runs of pages adjacent on both sides become one descriptor. */
		for (i = 0; i < p->npages; i = run_end(p, i))
			runs++;
		uint32_t per = (runs + ns - 1) / ns, run = 0;
		for (i = 0; i < p->npages; i = k, run++) {
			k = run_end(p, i);
			uint64_t so = p->src_base + (uint64_t)p->src_pages[i] * p->src_stride;
			uint64_t doff = p->dst_base + (uint64_t)p->dst_pages[i] * p->dst_stride;
			ret = put_span(c, pick(c, p->src, run / per, 0), p->src, so, p->dst, doff,
			               (uint64_t)(k - i) * p->page_size);
			if (ret)
				return mark_undo(c, &m, ret);
		}
	}
	/* A batch of pages of more than one size records page size 0. */
	c->page_size = (c->kind & MV_TK_PAGED) && c->page_size != p->page_size ? 0 : p->page_size;
	c->kind |= MV_TK_PAGED;
	c->nops += p->npages;
	return 0;
}

static int write_imm_in(struct mvc *c, uint32_t dst, uint32_t imm)
{
	int ret = batch_open(c);

	if (ret)
		return ret;
	if (c->has_imm)
		return mvc_fail(c, -EBUSY, "this batch already carries an immediate");
	c->has_imm = 1;
	c->imm_dst = dst;
	c->imm = imm;
	c->kind |= MV_TK_IMM;
	return 0;
}

void mvc_abort(struct mvc *c)
{
	if (!c->open)
		return;
	for (uint32_t s = 0; s < c->info.nshards; s++) {
		shmring_cancel(&c->sh[s].sub);
		c->sh[s].ndesc = 0;
	}
	c->free_ids[c->nfree++] = c->batch;
	mvc_arena_batch_abort(&c->arena);
	c->open = 0;
}

/* The calls that add to the batch: one that opened it and then failed drops
 * it again, so whatever the error the open batch is as it was before the
 * call (else a refused first write left an empty batch open, which the next
 * mvc_submit() handed over). */
static int added(struct mvc *c, int was_open, int ret)
{
	if (ret < 0 && !was_open)
		mvc_abort(c);
	return ret;
}

int mvc_write(struct mvc *c, uint32_t src, uint64_t src_off, uint32_t dst, uint64_t dst_off,
              uint64_t len)
{
	int was_open = c->open;

	return added(c, was_open, write_in(c, src, src_off, dst, dst_off, len));
}

int mvc_writev(struct mvc *c, uint32_t src, uint32_t dst, const struct mvc_seg *segs, uint32_t n)
{
	int was_open = c->open;

	return added(c, was_open, writev_in(c, src, dst, segs, n));
}

int mvc_write_paged(struct mvc *c, const struct mvc_pages *p)
{
	int was_open = c->open;

	return added(c, was_open, write_paged_in(c, p));
}

int mvc_write_imm(struct mvc *c, uint32_t dst, uint32_t imm)
{
	int was_open = c->open;

	return added(c, was_open, write_imm_in(c, dst, imm));
}

/* Moves every reserved WRITE of the open batch onto the home shard. */
static int gather_home(struct mvc *c)
{
	struct mvc_shard *h = &c->sh[c->home];
	uint32_t need = 0, pos;

	for (uint32_t s = 0; s < c->info.nshards; s++)
		if (s != c->home)
			need += c->sh[s].ndesc;
	if (!need)
		return 0;
	/* Room for them and the END the home shard still owes. */
	int n = shmring_reserve(&h->sub, need + 1, &pos);
	if (n < 0)
		return mvc_fail(c, n, "submission ring of shard %u: %s", c->home,
		                shmring_error(&h->sub));
	if ((uint32_t)n < need + 1) {
		shmring_unreserve(&h->sub, (uint32_t)n);
		if (shmring_reserved(&h->sub) + need + 2 > h->sub.capacity)
			return mvc_fail(c, -E2BIG,
			                "a batch with an immediate must fit one shard's ring "
			                "(%u descriptors) on this provider",
			                h->sub.capacity - 1);
		return mvc_fail(c, -EAGAIN, "submission ring of shard %u is full", c->home);
	}
	shmring_unreserve(&h->sub, 1);
	for (uint32_t s = 0; s < c->info.nshards; s++) {
		struct mvc_shard *sh = &c->sh[s];
		uint32_t k = shmring_reserved(&sh->sub);
		if (s == c->home || !k)
			continue;
		uint32_t first = sh->sub.local - k;
		for (uint32_t i = 0; i < k; i++)
			memcpy(shmring_slot(&h->sub, pos++), shmring_slot(&sh->sub, first + i),
			       sizeof(struct mv_desc));
		shmring_unreserve(&sh->sub, k);
		h->ndesc += sh->ndesc;
		h->nbytes += sh->nbytes;
		sh->ndesc = 0;
		sh->nbytes = 0;
	}
	return 0;
}

int mvc_submit(struct mvc *c, uint64_t cookie)
{
	uint32_t parts = 0, s, pos;
	int ret;

	if (c->cut[0])
		return mvc_fail(c, -EPROTO, "the mover cut this connection off: %s", c->cut);
	if (!c->open)
		return mvc_fail(c, -EINVAL, "no open batch: add a write or an immediate first");
	if (c->has_imm && c->uncopied && (c->flags & MV_HELLO_IMM_ONE_SHARD) &&
	    (ret = gather_home(c)))
		return ret;
	for (s = 0; s < c->info.nshards; s++)
		parts += c->sh[s].ndesc > 0;
	/* A batch with no writes (a lone immediate) is one part, on home. */
	uint32_t lone = parts == 0;
	if (lone)
		parts = 1;
	uint64_t total = 0;
	for (s = 0; s < c->info.nshards; s++)
		total += c->sh[s].nbytes;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	uint64_t stamp = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
	for (s = 0; s < c->info.nshards; s++) {
		struct mvc_shard *sh = &c->sh[s];
		/* Shards with writes end their parts; a lone immediate uses home.
		 * (Not home whenever there is one part: writes kept near a GPU
		 * may all sit on another shard, and two ENDs of one part each
		 * would complete the batch twice.) */
		if (!sh->ndesc && !(lone && s == c->home))
			continue;
		/* put_write kept a slot free for this END. */
		if (shmring_reserve(&sh->sub, 1, &pos) != 1)
			return mvc_fail(c, -EAGAIN, "submission ring of shard %u is full", s);
		struct mv_desc *d = shmring_slot(&sh->sub, pos);
		*d = (struct mv_desc){.op = MV_OP_END,
		                      .batch = c->batch,
		                      .nparts = (uint16_t)parts,
		                      .cookie = cookie,
		                      .ndesc = sh->ndesc,
		                      .src = c->kind,
		                      .src_off = c->nops,
		                      .dst_off = c->page_size,
		                      .len = total,
		                      .stamp = stamp};
		if (c->has_imm) {
			d->flags = MV_END_IMM;
			d->dst = mvc_cur(c, MVC_OBJ_IMPORT, c->imm_dst);
			d->imm = c->imm;
		}
	}
	/* One commit per shard publishes the whole part at once. */
	uint64_t mask = 0, share = total / parts + 1;
	for (s = 0; s < c->info.nshards; s++) {
		struct mvc_shard *sh = &c->sh[s];
		if (!shmring_reserved(&sh->sub))
			continue;
		shmring_commit(&sh->sub);
		sh->bytes += sh->nbytes;
		sh->descs += sh->ndesc;
		sh->load += share;
		mask |= 1ull << s;
	}
	mvc_arena_batch_submit(&c->arena, c->batch);
	c->cookies[c->batch] = cookie;
	c->busy[c->batch] = 1;
	c->parts_of[c->batch] = mask;
	c->share[c->batch] = share;
	c->inflight++;
	c->open = 0;
	return 0;
}

int mvc_submit_paged(struct mvc *c, const struct mvc_pages *p, uint64_t cookie)
{
	int ret = mvc_write_paged(c, p);

	return ret ? ret : mvc_submit(c, cookie);
}
