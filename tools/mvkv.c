/* SPDX-License-Identifier: MIT */
/*
 * mvkv: the KV-cache transfer the demo runs. A receiver process (a client of
 * one mover) allocates a page pool and hands its mover address and region
 * blob to a sender process (a client of another mover) through a pipe. The
 * sender then repeats, for a few seconds: fill N source pages, write them
 * with one paged write to N random destination pages, send an immediate
 * carrying the round number. The receiver waits for that immediate, checks
 * every page it was sent by checksum and page numbers, and acknowledges.
 * Prints per-shard and total throughput. Exit status 0 only if every page of
 * every round verified.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mvc.h"
#include "mvtool.h"

struct page_hdr {
	uint64_t round;
	uint32_t src_page;
	uint32_t dst_page;
	uint64_t sum; /* over the page after the header */
	uint64_t magic;
};
#define PAGE_MAGIC 0x45474150564b564dull

struct cfg {
	const char *send_sock, *recv_sock;
	uint32_t pages; /* pages per round */
	uint32_t pool;  /* destination pages */
	uint64_t page_size;
	double seconds;
	int quiet;
};

static uint64_t body_sum(const uint64_t *w, size_t n)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;

	for (size_t i = 0; i < n; i++)
		s = (s ^ w[i]) * 0x100000001b3ull + i;
	return s;
}

static void fill_page(uint8_t *p, uint64_t size, uint64_t round, uint32_t src, uint32_t dst)
{
	struct page_hdr *h = (struct page_hdr *)p;
	uint64_t *w = (uint64_t *)(p + sizeof(*h));
	size_t n = (size - sizeof(*h)) / 8;
	uint64_t x = mix(round * 0x10001 + src);

	for (size_t i = 0; i < n; i++) {
		x += 0x9e3779b97f4a7c15ull;
		w[i] = x ^ (x >> 29);
	}
	h->round = round;
	h->src_page = src;
	h->dst_page = dst;
	h->sum = body_sum(w, n);
	h->magic = PAGE_MAGIC;
}

struct blobs {
	size_t alen, rlen;
	uint8_t addr[MVC_BLOB_MAX];
	uint8_t region[MVC_BLOB_MAX];
};

static int receiver(const struct cfg *cf, int to_send, int from_send)
{
	struct mvc *c;
	struct mvc_mem pool;
	struct blobs b = {.alen = MVC_BLOB_MAX, .rlen = MVC_BLOB_MAX};
	struct mvc_event ev[16];
	uint64_t round, bad = 0;
	int ret;

	ret = mvc_connect(&c, cf->recv_sock);
	if (ret) {
		fprintf(stderr, "mvkv receiver: %s\n", mvc_connect_error());
		return 1;
	}
	ret = mvc_alloc(c, (uint64_t)cf->pool * cf->page_size, &pool);
	if (!ret)
		ret = mvc_address(c, b.addr, &b.alen);
	if (!ret)
		ret = mvc_region_blob(c, pool.region, b.region, &b.rlen);
	if (ret) {
		fprintf(stderr, "mvkv receiver: %s\n", mvc_error(c));
		return 1;
	}
	memset(pool.addr, 0, pool.len);
	if (xwrite(to_send, &b, sizeof(b)))
		return 1;
	for (;;) {
		if (xread(from_send, &round, sizeof(round), -1) || round == UINT64_MAX)
			break;
		ret = mvc_imm_expect(c, (uint32_t)round, 1, round);
		if (ret) {
			fprintf(stderr, "mvkv receiver: %s\n", mvc_error(c));
			return 1;
		}
		int got = 0;
		while (!got) {
			int n = mvc_wait(c, ev, 16, 10000);
			if (n <= 0) {
				fprintf(stderr,
				        "mvkv receiver: no immediate for round %" PRIu64 ": %s\n",
				        round, n ? mvc_error(c) : "timed out after 10 s");
				return 1;
			}
			for (int i = 0; i < n; i++)
				got |= ev[i].type == MVC_EV_IMM_COUNT && ev[i].cookie == round;
		}
		/* Every page of this round must be whole and where it was sent. */
		uint32_t seen = 0;
		for (uint32_t d = 0; d < cf->pool; d++) {
			uint8_t *p = (uint8_t *)pool.addr + (uint64_t)d * cf->page_size;
			struct page_hdr *h = (struct page_hdr *)p;
			if (h->magic != PAGE_MAGIC || h->round != round)
				continue;
			seen++;
			if (h->dst_page != d ||
			    h->sum != body_sum((uint64_t *)(p + sizeof(*h)),
			                       (cf->page_size - sizeof(*h)) / 8)) {
				if (bad++ < 5)
					fprintf(stderr,
					        "mvkv receiver: round %" PRIu64 " page %u corrupt "
					        "(says dst %u src %u)\n",
					        round, d, h->dst_page, h->src_page);
			}
		}
		if (seen != cf->pages) {
			fprintf(stderr,
			        "mvkv receiver: round %" PRIu64 ": %u of %u pages arrived\n", round,
			        seen, cf->pages);
			bad++;
		}
		uint64_t verdict = bad;
		if (xwrite(to_send, &verdict, sizeof(verdict)))
			return 1;
	}
	mvc_free(c, &pool);
	mvc_disconnect(c);
	return bad ? 1 : 0;
}

static int sender(const struct cfg *cf, int from_recv, int to_recv)
{
	struct mvc *c;
	struct mvc_mem src;
	struct mvc_info info;
	struct blobs b;
	uint32_t peer, dst;
	uint32_t *sp = malloc(sizeof(*sp) * cf->pages), *dp = malloc(sizeof(*dp) * cf->pool);
	struct mvc_event ev[16];
	uint64_t round = 0, bytes = 0;
	double busy = 0;
	int ret;

	if (!sp || !dp)
		return 1;
	ret = mvc_connect(&c, cf->send_sock);
	if (ret) {
		fprintf(stderr, "mvkv sender: %s\n", mvc_connect_error());
		return 1;
	}
	mvc_info(c, &info);
	if (xread(from_recv, &b, sizeof(b), -1))
		return 1;
	ret = mvc_alloc(c, (uint64_t)cf->pages * cf->page_size, &src);
	if (!ret)
		ret = mvc_peer_add(c, b.addr, b.alen, &peer);
	if (!ret)
		ret = mvc_import(c, peer, b.region, b.rlen, &dst);
	if (ret) {
		fprintf(stderr, "mvkv sender: %s\n", mvc_error(c));
		return 1;
	}
	uint64_t seed = 0x1234567;
	double t0 = now_s(), end = t0 + cf->seconds;
	while (now_s() < end || round == 0) {
		round++;
		/* A fresh random choice of destination pages each round. */
		for (uint32_t i = 0; i < cf->pool; i++)
			dp[i] = i;
		for (uint32_t i = 0; i < cf->pages; i++) {
			seed = mix(seed + i);
			uint32_t j = i + (uint32_t)(seed % (cf->pool - i));
			uint32_t t = dp[i];
			dp[i] = dp[j];
			dp[j] = t;
			sp[i] = i;
			fill_page((uint8_t *)src.addr + (uint64_t)i * cf->page_size, cf->page_size,
			          round, i, dp[i]);
		}
		if (xwrite(to_recv, &round, sizeof(round)))
			return 1;
		struct mvc_pages pg = {.src = src.region,
		                       .dst = dst,
		                       .src_stride = cf->page_size,
		                       .dst_stride = cf->page_size,
		                       .page_size = cf->page_size,
		                       .src_pages = sp,
		                       .dst_pages = dp,
		                       .npages = cf->pages};
		double ts = now_s();
		ret = mvc_write_paged(c, &pg);
		if (!ret)
			ret = mvc_write_imm(c, dst, (uint32_t)round);
		if (!ret)
			ret = mvc_submit(c, round);
		if (ret) {
			fprintf(stderr, "mvkv sender: round %" PRIu64 ": %s\n", round,
			        mvc_error(c));
			return 1;
		}
		int done = 0;
		while (!done) {
			int n = mvc_wait(c, ev, 16, 10000);
			if (n <= 0) {
				fprintf(stderr,
				        "mvkv sender: round %" PRIu64 " did not complete: %s\n",
				        round, n ? mvc_error(c) : "timed out after 10 s");
				return 1;
			}
			for (int i = 0; i < n; i++) {
				if (ev[i].type != MVC_EV_BATCH)
					continue;
				if (ev[i].status) {
					fprintf(stderr,
					        "mvkv sender: round %" PRIu64 " failed: %s\n",
					        round, ev[i].msg);
					return 1;
				}
				done = 1;
				bytes += ev[i].bytes;
			}
		}
		busy += now_s() - ts;
		uint64_t verdict;
		if (xread(from_recv, &verdict, sizeof(verdict), -1))
			return 1;
		if (verdict) {
			fprintf(stderr, "mvkv sender: receiver found %" PRIu64 " bad pages\n",
			        verdict);
			return 1;
		}
	}
	uint64_t stop = UINT64_MAX;
	xwrite(to_recv, &stop, sizeof(stop));
	double wall = now_s() - t0;
	printf("mvkv: %" PRIu64 " rounds of %u pages x %" PRIu64 " B over %s, %u shards, "
	       "every page verified\n",
	       round, cf->pages, cf->page_size, info.provider, info.nshards);
	printf("mvkv: per shard (bytes each shard carried / transfer time):\n");
	for (uint32_t s = 0; s < info.nshards; s++) {
		uint64_t sb = mvc_shard_bytes(c, s);
		printf("  shard %u: %8.3f Gbit/s  %7.3f GB/s  %8.0f msg/s\n", s,
		       (double)sb * 8 / busy / 1e9, (double)sb / busy / 1e9,
		       (double)mvc_shard_descs(c, s) / busy);
	}
	printf(
	    "  total  : %8.3f Gbit/s  %7.3f GB/s  %8.0f pages/s  (transfer time %.2f s of %.2f s;"
	    " the rest is filling and checking pages)\n",
	    (double)bytes * 8 / busy / 1e9, (double)bytes / busy / 1e9,
	    (double)round * cf->pages / busy, busy, wall);
	printf("RESULT mvkv rounds=%" PRIu64 " bytes=%" PRIu64 " gbit_s=%.3f\n", round, bytes,
	       (double)bytes * 8 / busy / 1e9);
	mvc_free(c, &src);
	mvc_disconnect(c);
	free(sp);
	free(dp);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"send", required_argument, 0, 's'},
	    {"recv", required_argument, 0, 'r'},
	    {"pages", required_argument, 0, 'n'},
	    {"pool", required_argument, 0, 'P'},
	    {"page-size", required_argument, 0, 'b'},
	    {"seconds", required_argument, 0, 't'},
	    {"help", no_argument, 0, 'h'},
	    {"version", no_argument, 0, 'V'},
	    {0, 0, 0, 0},
	};
	struct cfg cf = {.pages = 4096, .pool = 8192, .page_size = 16384, .seconds = 3};
	int c, a[2], b[2], st;

	while ((c = getopt_long(argc, argv, "s:r:n:P:b:t:hV", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			cf.send_sock = optarg;
			break;
		case 'r':
			cf.recv_sock = optarg;
			break;
		case 'n':
			cf.pages = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'P':
			cf.pool = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'b':
			cf.page_size = strtoull(optarg, NULL, 0);
			break;
		case 't':
			cf.seconds = atof(optarg);
			break;
		case 'V':
			printf("mvkv %s\n", MVC_VERSION);
			return 0;
		case 'h':
		default:
			fprintf(
			    c == 'h' ? stdout : stderr,
			    "usage: mvkv --send SOCK --recv SOCK [--pages N] [--pool N]"
			    " [--page-size B] [--seconds S]\n"
			    "The demo transfer: a client of the mover at --send writes --pages\n"
			    "scattered pages of --page-size bytes (default 16384) a round, drawn\n"
			    "from a pool of --pool pages (default 8192), into a client of the\n"
			    "mover at --recv, which checks every page, for --seconds S (default\n"
			    "3); --pages defaults to 4096. Prints throughput and a RESULT line.\n"
			    "  --help       print this help and exit\n"
			    "  --version    print the version and exit\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (!cf.send_sock || !cf.recv_sock || cf.pages == 0 || cf.pool < cf.pages ||
	    cf.page_size < 64 || cf.page_size % 8) {
		fprintf(stderr, "mvkv: need --send and --recv sockets, pages <= pool, page size a"
		                " multiple of 8 from 64\n");
		return 2;
	}
	if (pipe(a) || pipe(b))
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		close(a[0]);
		close(b[1]);
		_exit(receiver(&cf, a[1], b[0]));
	}
	close(a[1]);
	close(b[0]);
	int ret = sender(&cf, a[0], b[1]);
	close(b[1]);
	if (ret)
		kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "mvkv: receiver failed\n");
		ret = 1;
	}
	return ret;
}
