/* SPDX-License-Identifier: MIT */
/*
 * soak_client: one client pair of the soak (tests/soak.sh), through the
 * public API only. A sender connection on one mover writes, without pause,
 * batches of three kinds in turn (a paged write of scattered pages, a writev
 * of scattered segments, one contiguous write), each with an immediate
 * carrying its sequence number, into a region of a receiver connection on
 * another mover. Every page carries its batch's sequence number, its page
 * numbers and a checksum of its body; when the receiver hears a batch's
 * immediate after the sender saw it succeed, every page of it is checked at
 * the target. Each batch must be reported exactly once, success or error.
 *
 * The counts live in a file the script maps too (struct soak_counts), so a
 * client killed with SIGKILL leaves them as they were: the batches it had in
 * flight are submitted - ok - failed. When a mover restarts, libmvc
 * reconnects by itself; when it is the receiver's, the receiver's address
 * and region blob are new, so the sender adds the peer and imports again,
 * as an application must. SIGTERM: stop submitting, drain, exit.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "mvc.h"
#include "soak_counts.h"

#define IMM_WAIT_S 15.0 /* a succeeded batch's immediate, at most */

struct page_hdr {
	uint64_t seq;
	uint32_t src_page, dst_page;
	uint64_t sum; /* of the body after the header */
};

enum slot_state { SLOT_FREE, SLOT_FLIGHT, SLOT_IMM };

struct slot {
	enum slot_state state;
	uint64_t seq;
	double since; /* when it entered SLOT_IMM */
	int imm_here; /* its immediate came before its batch's event */
	uint32_t npages;
	uint32_t ndesc;                  /* pages, segments or writes it carries */
	uint32_t *src_pages, *dst_pages; /* page numbers in the regions */
};

struct soak {
	struct mvc *s, *r;
	struct mvc_mem src, dst;
	uint32_t peer, imp;
	uint32_t window, pages;
	uint64_t page_size;
	uint64_t seq;
	uint64_t rng;
	double pause_until; /* after a failure: what an application would do */
	struct slot *slot;
	struct soak_counts *n;
};

static volatile sig_atomic_t stopping;

static void on_term(int sig)
{
	(void)sig;
	stopping = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static uint64_t body_sum(const uint8_t *p, size_t n)
{
	uint64_t s = 0x9e3779b97f4a7c15ull, w;

	for (size_t i = 0; i + 8 <= n; i += 8) {
		memcpy(&w, p + i, 8);
		s = (s ^ w) * 0x100000001b3ull + i;
	}
	return s;
}

static void fill_page(struct soak *k, uint8_t *p, uint64_t seq, uint32_t sp, uint32_t dp)
{
	struct page_hdr h = {.seq = seq, .src_page = sp, .dst_page = dp};
	uint64_t x = seq * 0x9e3779b97f4a7c15ull + sp + 1;

	for (size_t i = sizeof(h); i + 8 <= k->page_size; i += 8) {
		uint64_t w = next(&x);
		memcpy(p + i, &w, 8);
	}
	h.sum = body_sum(p + sizeof(h), k->page_size - sizeof(h));
	memcpy(p, &h, sizeof(h));
}

static void die(const char *what, struct mvc *c, int ret)
{
	fprintf(stderr, "soak_client %d: %s: %s (%s)\n", getpid(), what,
	        c ? mvc_error(c) : mvc_connect_error(), strerror(-ret));
	exit(1);
}

/* The receiver's address and region, imported by the sender (again after
 * the receiver's mover came back). 0 or -errno. */
static int link_peer(struct soak *k)
{
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	int ret = mvc_address(k->r, blob, &len);

	if (!ret)
		ret = mvc_peer_add(k->s, blob, len, &k->peer);
	if (ret)
		return ret;
	len = sizeof(blob);
	ret = mvc_region_blob(k->r, k->dst.region, blob, &len);
	if (!ret)
		ret = mvc_import(k->s, k->peer, blob, len, &k->imp);
	if (ret) {
		mvc_peer_remove(k->s, k->peer);
		k->imp = UINT32_MAX;
	}
	return ret;
}

/* Builds and submits the next batch on slot i; 1 if submitted, 0 if the
 * sender cannot now (its mover is away, or the rings are full). */
static int submit_one(struct soak *k, uint32_t i)
{
	struct slot *sl = &k->slot[i];
	uint64_t seq = k->seq + 1, ps = k->page_size;
	uint32_t base = i * k->pages, n = k->pages, kind = (uint32_t)(seq % 3);
	int ret;

	/* Scattered: each page of the slot goes to another page of the slot. */
	for (uint32_t j = 0; j < n; j++)
		sl->src_pages[j] = sl->dst_pages[j] = base + j;
	for (uint32_t j = n - 1; j > 0; j--) {
		uint32_t a = (uint32_t)(next(&k->rng) % (j + 1));
		uint32_t t = sl->dst_pages[j];
		sl->dst_pages[j] = sl->dst_pages[a];
		sl->dst_pages[a] = t;
	}
	if (kind == 2) /* contiguous: page j to page j */
		for (uint32_t j = 0; j < n; j++)
			sl->dst_pages[j] = base + j;
	for (uint32_t j = 0; j < n; j++)
		fill_page(k, (uint8_t *)k->src.addr + (uint64_t)sl->src_pages[j] * ps, seq,
		          sl->src_pages[j], sl->dst_pages[j]);
	if (kind == 0) {
		struct mvc_pages pg = {.src = k->src.region,
		                       .dst = k->imp,
		                       .src_stride = ps,
		                       .dst_stride = ps,
		                       .page_size = ps,
		                       .src_pages = sl->src_pages,
		                       .dst_pages = sl->dst_pages,
		                       .npages = n};
		ret = mvc_write_paged(k->s, &pg);
	} else if (kind == 1) {
		struct mvc_seg seg[n];
		for (uint32_t j = 0; j < n; j++)
			seg[j] = (struct mvc_seg){.src_off = (uint64_t)sl->src_pages[j] * ps,
			                          .dst_off = (uint64_t)sl->dst_pages[j] * ps,
			                          .len = ps};
		ret = mvc_writev(k->s, k->src.region, k->imp, seg, n);
	} else {
		ret = mvc_write(k->s, k->src.region, (uint64_t)base * ps, k->imp,
		                (uint64_t)base * ps, (uint64_t)n * ps);
	}
	if (!ret)
		ret = mvc_write_imm(k->s, k->imp, (uint32_t)seq);
	if (!ret)
		ret = mvc_submit(k->s, seq);
	if (ret) {
		mvc_abort(k->s);
		if (ret == -EPIPE || ret == -EAGAIN)
			return 0;
		die("building a batch", k->s, ret);
	}
	k->seq = seq;
	sl->state = SLOT_FLIGHT;
	sl->imm_here = 0;
	sl->seq = seq;
	sl->npages = n;
	sl->ndesc = kind == 2 ? 1 : n;
	k->n->submitted++;
	k->n->descs += sl->ndesc;
	k->n->kind[kind]++;
	return 1;
}

static struct slot *slot_of(struct soak *k, uint64_t seq)
{
	struct slot *sl = &k->slot[(seq - 1) % k->window];

	return sl->seq == seq ? sl : NULL;
}

/* The batch landed and its immediate came: every page of it, checked. */
static void verify(struct soak *k, struct slot *sl)
{
	uint64_t ps = k->page_size;

	for (uint32_t j = 0; j < sl->npages; j++) {
		const uint8_t *p = (const uint8_t *)k->dst.addr + (uint64_t)sl->dst_pages[j] * ps;
		struct page_hdr h;
		memcpy(&h, p, sizeof(h));
		if (h.seq != sl->seq || h.src_page != sl->src_pages[j] ||
		    h.dst_page != sl->dst_pages[j] ||
		    h.sum != body_sum(p + sizeof(h), ps - sizeof(h))) {
			if (k->n->verify_bad++ < 5)
				fprintf(stderr,
				        "soak_client %d: batch %" PRIu64
				        " page %u: header says batch %" PRIu64 " pages %u->%u\n",
				        getpid(), sl->seq, sl->dst_pages[j], h.seq, h.src_page,
				        h.dst_page);
			continue;
		}
		k->n->bytes_verified += ps;
	}
	k->n->verified++;
	sl->state = SLOT_FREE;
}

static void sender_events(struct soak *k, int timeout_ms)
{
	struct mvc_event ev[32];
	int n = timeout_ms ? mvc_wait(k->s, ev, 32, timeout_ms) : mvc_poll(k->s, ev, 32);

	if (n < 0 && n != -EPIPE)
		die("sender poll", k->s, n);
	for (int i = 0; i < n; i++) {
		if (ev[i].type == MVC_EV_MOVER_BACK) {
			k->n->back++;
			if (ev[i].status)
				fprintf(stderr, "soak_client %d: sender back: %s\n", getpid(),
				        ev[i].msg);
			continue;
		}
		if (ev[i].type != MVC_EV_BATCH)
			continue;
		struct slot *sl = slot_of(k, ev[i].cookie);
		if (!sl || sl->state != SLOT_FLIGHT) {
			k->n->dup++;
			continue;
		}
		if (ev[i].status == 0) {
			k->n->ok++;
			k->n->descs_ok += sl->ndesc;
			sl->state = SLOT_IMM;
			sl->since = now_s();
			if (sl->imm_here)
				verify(k, sl);
			continue;
		}
		k->n->failed++;
		k->n->cause[ev[i].cause < SOAK_CAUSES ? ev[i].cause : 0]++;
		sl->state = SLOT_FREE;
		/* A peer or mover that went fails the next batches at once:
		 * wait a little rather than fail thousands a second. */
		k->pause_until = now_s() + 0.02;
	}
}

static void receiver_events(struct soak *k)
{
	struct mvc_event ev[32];
	int n = mvc_poll(k->r, ev, 32);

	if (n < 0 && n != -EPIPE)
		die("receiver poll", k->r, n);
	for (int i = 0; i < n; i++) {
		if (ev[i].type == MVC_EV_MOVER_BACK) {
			/* New fabric address and keys: the sender must import
			 * again; the immediates of batches that landed in the
			 * old mover are gone with it. */
			k->n->back++;
			for (uint32_t j = 0; j < k->window; j++)
				if (k->slot[j].state == SLOT_IMM) {
					k->slot[j].state = SLOT_FREE;
					k->n->imm_lost++;
				}
			mvc_peer_remove(k->s, k->peer);
			k->imp = UINT32_MAX;
			continue;
		}
		if (ev[i].type != MVC_EV_IMM)
			continue;
		struct slot *sl = ev[i].imm ? slot_of(k, ev[i].imm) : NULL;
		if (sl && sl->state == SLOT_IMM)
			verify(k, sl);
		else if (sl && sl->state == SLOT_FLIGHT)
			sl->imm_here = 1; /* it landed; its event is on its way */
		else
			k->n->imm_early++; /* of a batch already failed or given up */
	}
}

/* Errors that say the mover went (or is not back yet) while we started. */
static int transient(int ret)
{
	return ret == -EPIPE || ret == -ECONNREFUSED || ret == -ENOENT || ret == -ECONNRESET ||
	       ret == -ETIMEDOUT;
}

#define START_WAIT_S 60.0 /* start-up tries, at most */

/*
 * Start-up: both connections and a region on each, then the receiver
 * added and imported. A client started just before a fault restarts one of
 * its movers (they come 1-4 s apart, and eight clients starting at once on
 * two cores take that long) saw the mover go in the middle of it and
 * exited ("client N exited"); an application would try again, and so does
 * this, from the start, for up to START_WAIT_S. A receiver that cannot be
 * imported yet is left to the main loop, which links it again every 50 ms
 * (as after a restart of the receiver's mover). Other errors end the soak.
 */
static void start(struct soak *k, const char *ssock, const char *rsock, uint64_t len)
{
	const char *what = "";
	int ret = 0;

	for (double end = now_s() + START_WAIT_S; !stopping; usleep(100000)) {
		struct mvc *bad = NULL;
		k->s = k->r = NULL;
		if ((ret = mvc_connect(&k->s, ssock)))
			what = "connecting the sender";
		else if ((ret = mvc_connect(&k->r, rsock)))
			what = "connecting the receiver";
		else if ((ret = mvc_alloc(k->s, len, &k->src)))
			what = "source region", bad = k->s;
		else if ((ret = mvc_alloc(k->r, len, &k->dst)))
			what = "destination region", bad = k->r;
		if (!ret) {
			if (link_peer(k))
				k->imp = UINT32_MAX; /* the main loop tries again */
			return;
		}
		if (!transient(ret) || now_s() > end)
			die(what, bad, ret);
		fprintf(stderr, "soak_client %d: %s: %s (%s); starting again\n", getpid(), what,
		        bad ? mvc_error(bad) : mvc_connect_error(), strerror(-ret));
		if (k->s)
			mvc_disconnect(k->s);
		if (k->r)
			mvc_disconnect(k->r);
	}
	k->n->clean_exit = 1; /* told to stop before it started: nothing to count */
	exit(0);
}

int main(int argc, char **argv)
{
	struct soak k = {.window = 8, .pages = 64, .page_size = 1024};
	const char *ssock = NULL, *rsock = NULL, *stats = NULL;
	uint64_t seed = (uint64_t)getpid();
	int o;

	while ((o = getopt(argc, argv, "s:r:o:w:p:b:x:")) != -1) {
		switch (o) {
		case 's':
			ssock = optarg;
			break;
		case 'r':
			rsock = optarg;
			break;
		case 'o':
			stats = optarg;
			break;
		case 'w':
			k.window = (uint32_t)atoi(optarg);
			break;
		case 'p':
			k.pages = (uint32_t)atoi(optarg);
			break;
		case 'b':
			k.page_size = strtoull(optarg, NULL, 0);
			break;
		case 'x':
			seed = strtoull(optarg, NULL, 0);
			break;
		default:
			goto usage;
		}
	}
	if (!ssock || !rsock || !stats || k.window < 1 || k.window > 64 || k.pages < 1 ||
	    k.pages > 4096 || k.page_size < 64 || k.page_size % 8)
		goto usage;
	int fd = open(stats, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, sizeof(*k.n)) < 0)
		die("the counts file", NULL, -errno);
	k.n = mmap(NULL, sizeof(*k.n), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (k.n == MAP_FAILED)
		die("mapping the counts file", NULL, -errno);
	k.n->magic = SOAK_MAGIC;
	k.n->pid = getpid();
	k.rng = seed * 0x9e3779b97f4a7c15ull | 1;
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);

	start(&k, ssock, rsock, (uint64_t)k.window * k.pages * k.page_size);
	k.slot = calloc(k.window, sizeof(*k.slot));
	for (uint32_t i = 0; i < k.window; i++) {
		k.slot[i].src_pages = calloc(k.pages, sizeof(uint32_t));
		k.slot[i].dst_pages = calloc(k.pages, sizeof(uint32_t));
	}
	k.n->running = 1;

	double drain_end = 0, relink_at = 0;
	for (;;) {
		uint32_t busy = 0;
		if (stopping && !drain_end)
			drain_end = now_s() + 30;
		if (k.imp == UINT32_MAX && now_s() > relink_at) {
			relink_at = now_s() + 0.05;
			if (link_peer(&k) == 0)
				k.n->relinked++;
		}
		for (uint32_t i = 0; i < k.window; i++) {
			struct slot *sl = &k.slot[(k.seq + i) % k.window];
			if (sl->state == SLOT_IMM && now_s() - sl->since > IMM_WAIT_S) {
				k.n->imm_lost++; /* succeeded, but its immediate never came */
				sl->state = SLOT_FREE;
			}
			busy += sl->state != SLOT_FREE;
		}
		if (stopping && (!busy || now_s() > drain_end))
			break;
		/* The slot after the newest: batches complete roughly in order. */
		while (!stopping && k.imp != UINT32_MAX && now_s() >= k.pause_until &&
		       k.slot[k.seq % k.window].state == SLOT_FREE)
			if (!submit_one(&k, (uint32_t)(k.seq % k.window)))
				break;
		sender_events(&k, busy ? 1 : 5);
		receiver_events(&k);
	}
	k.n->running = 0;
	k.n->clean_exit = 1;
	mvc_disconnect(k.s);
	mvc_disconnect(k.r);
	for (uint32_t i = 0; i < k.window; i++) {
		free(k.slot[i].src_pages);
		free(k.slot[i].dst_pages);
	}
	free(k.slot);
	return 0;

usage:
	fprintf(stderr, "usage: soak_client -s SEND_SOCK -r RECV_SOCK -o COUNTS_FILE [-w WINDOW] "
	                "[-p PAGES] [-b PAGE_SIZE] [-x SEED]\n");
	return 2;
}
