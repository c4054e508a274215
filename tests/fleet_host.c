/* SPDX-License-Identifier: MIT */
/*
 * fleet_host: one host's part of tests/fleet.sh, through the public API
 * only. It allocates one region (send | dispatch | combine, a slice per
 * host in each) and publishes it in the mover's cluster as PREFIX<me>;
 * the others find it with mvc_lookup(), nothing passes out of band.
 *
 * --rounds R: the MoE dispatch/combine pattern, R times among --hosts N:
 * every host writes its slice for every other host into that host's
 * dispatch part with one paged write (pages reversed, so the writes
 * scatter), with an immediate; once all N-1 arrived it checks every byte,
 * then writes each slice it received back into its sender's combine part,
 * and checks every byte of what comes back. Exit 0 only if all verified.
 *
 * --load S: for S seconds (or until the file --stop names exists), write a slice to every host of
 * PREFIX0 .. PREFIX<max-1> it can find (looked up again and again), one batch in flight per host,
 * and print, with CLOCK_REALTIME milliseconds (the script's clock), the first write that completed
 * to each host and the first that failed, and the first failure whose cause says the host left the
 * cluster: first_write NAME MS / fail NAME MS CAUSE MSG / departed NAME MS MSG
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mvc.h"

#define MAXH 16

struct fleet {
	struct mvc *c;
	struct mvc_mem mem;
	const char *prefix;
	int me, hosts, max;
	uint64_t slice, page;
	uint32_t npages;
	uint32_t *fwd, *rev; /* page lists: identity and reversed */
	struct mvc_found peer[MAXH];
	int known[MAXH];
	uint32_t imm_seen; /* the highest immediate counted in full: a count can
	                      come while we wait for something else */
};

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Offsets in our region: part 0 send, 1 dispatch, 2 combine; slice h. */
static uint64_t off(const struct fleet *f, int part, int h)
{
	return ((uint64_t)part * (uint64_t)f->max + (uint64_t)h) * f->slice;
}

/* The byte at position i of page p of what src sends dst in round r. */
static uint8_t pat(uint32_t r, int src, int dst, uint32_t p, uint64_t i)
{
	uint64_t x = ((uint64_t)r * 131 + (uint64_t)src * 17 + (uint64_t)dst * 7 + p) * 2654435761u;

	return (uint8_t)(x >> 13 ^ i * 29 ^ i >> 8);
}

static void fill(struct fleet *f, uint32_t r, int dst)
{
	uint8_t *b = (uint8_t *)f->mem.addr + off(f, 0, dst);

	for (uint32_t p = 0; p < f->npages; p++)
		for (uint64_t i = 0; i < f->page; i++)
			b[p * f->page + i] = pat(r, f->me, dst, p, i);
}

/* Page q of slice at b holds page map(q) of what src sent dst. */
static int check(struct fleet *f, const uint8_t *b, uint32_t r, int src, int dst, int reversed,
                 const char *what)
{
	for (uint32_t q = 0; q < f->npages; q++) {
		uint32_t p = reversed ? f->npages - 1 - q : q;
		for (uint64_t i = 0; i < f->page; i++)
			if (b[q * f->page + i] != pat(r, src, dst, p, i)) {
				fprintf(
				    stderr,
				    "fleet_host %d: round %u %s from host %d: page %u byte %llu is "
				    "%#x, want %#x\n",
				    f->me, r, what, src == f->me ? dst : src, q,
				    (unsigned long long)i, b[q * f->page + i],
				    pat(r, src, dst, p, i));
				return -1;
			}
	}
	return 0;
}

static int write_slice(struct fleet *f, int dst, uint64_t src_off, uint64_t dst_off,
                       const uint32_t *dpages, uint32_t imm, uint64_t cookie)
{
	struct mvc_pages pg = {.src = f->mem.region,
	                       .dst = f->peer[dst].dst,
	                       .src_base = src_off,
	                       .dst_base = dst_off,
	                       .src_stride = f->page,
	                       .dst_stride = f->page,
	                       .page_size = f->page,
	                       .src_pages = f->fwd,
	                       .dst_pages = dpages,
	                       .npages = f->npages};
	int ret = mvc_write_paged(f->c, &pg);

	if (!ret && imm)
		ret = mvc_write_imm(f->c, f->peer[dst].dst, imm);
	if (!ret)
		ret = mvc_submit(f->c, cookie);
	return ret;
}

/* Waits for n batches to complete and for the count of imm; -1 on a failure. */
static int await(struct fleet *f, int batches, uint32_t imm, uint32_t r)
{
	int got_imm = f->imm_seen >= imm;
	int64_t until = wall_ms() + 30000;

	while ((batches > 0 || !got_imm) && wall_ms() < until) {
		struct mvc_event ev[32];
		int n = mvc_wait(f->c, ev, 32, 1000);
		if (n < 0) {
			fprintf(stderr, "fleet_host %d: mvc_wait: %s\n", f->me, strerror(-n));
			return -1;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].type == MVC_EV_BATCH) {
				if (ev[i].status) {
					fprintf(stderr,
					        "fleet_host %d: round %u: write to host %llu: %s\n",
					        f->me, r, (unsigned long long)ev[i].cookie,
					        ev[i].msg);
					return -1;
				}
				batches--;
			} else if (ev[i].type == MVC_EV_IMM_COUNT) {
				/* Counts come in order of value: a combine's after its
				 * round's dispatch, a round's after the one before. */
				if (ev[i].imm > f->imm_seen)
					f->imm_seen = ev[i].imm;
				got_imm = f->imm_seen >= imm;
			}
		}
	}
	if (batches > 0 || !got_imm) {
		fprintf(stderr, "fleet_host %d: round %u: timed out (%d batches, imm %s)\n", f->me,
		        r, batches, got_imm ? "in" : "missing");
		return -1;
	}
	return 0;
}

static int rounds(struct fleet *f, uint32_t R)
{
	int64_t t0 = wall_ms();

	for (uint32_t r = 0; r < R; r++) {
		uint32_t imm_d = r * 2 + 1, imm_c = r * 2 + 2;
		if (mvc_imm_expect(f->c, imm_d, (uint32_t)f->hosts - 1, imm_d) ||
		    mvc_imm_expect(f->c, imm_c, (uint32_t)f->hosts - 1, imm_c))
			return -1;
		/* Dispatch: our slice for j into j's dispatch part, slot me. */
		for (int j = 0; j < f->hosts; j++) {
			if (j == f->me)
				continue;
			fill(f, r, j);
			if (write_slice(f, j, off(f, 0, j), off(f, 1, f->me), f->rev, imm_d,
			                (uint64_t)j))
				return -1;
		}
		if (await(f, f->hosts - 1, imm_d, r))
			return -1;
		for (int i = 0; i < f->hosts; i++)
			if (i != f->me && check(f, (uint8_t *)f->mem.addr + off(f, 1, i), r, i,
			                        f->me, 1, "dispatch"))
				return -1;
		/* Combine: what i sent us goes back into i's combine part, slot me. */
		for (int i = 0; i < f->hosts; i++)
			if (i != f->me && write_slice(f, i, off(f, 1, i), off(f, 2, f->me), f->fwd,
			                              imm_c, (uint64_t)i))
				return -1;
		if (await(f, f->hosts - 1, imm_c, r))
			return -1;
		for (int j = 0; j < f->hosts; j++)
			if (j != f->me && check(f, (uint8_t *)f->mem.addr + off(f, 2, j), r, f->me,
			                        j, 1, "combine"))
				return -1;
	}
	int64_t ms = wall_ms() - t0;
	double bytes = 2.0 * R * (f->hosts - 1) * (double)f->slice;
	printf("fleet_host %d: %u rounds verified with %d hosts, %.1f MB written in %lld ms "
	       "(%.1f MB/s from this host)\n",
	       f->me, R, f->hosts, bytes / 1e6, (long long)ms, ms ? bytes / 1e3 / ms : 0.0);
	return 0;
}

static int load(struct fleet *f, int seconds, const char *stop)
{
	int inflight[MAXH] = {0}, wrote[MAXH] = {0}, failed[MAXH] = {0}, departed[MAXH] = {0};
	int64_t end = wall_ms() + seconds * 1000ll, next_look = 0;
	char name[MVC_NAME_MAX];

	while (wall_ms() < end) {
		if (wall_ms() >= next_look) {
			if (stop && access(stop, F_OK) == 0)
				break;
			for (int j = 0; j < f->max; j++) {
				if (j == f->me || f->known[j])
					continue;
				snprintf(name, sizeof(name), "%s%d", f->prefix, j);
				if (mvc_lookup(f->c, name, 0, &f->peer[j]) == 0)
					f->known[j] = 1;
			}
			next_look = wall_ms() + 20;
		}
		for (int j = 0; j < f->max; j++)
			if (f->known[j] && !inflight[j] && !departed[j] &&
			    write_slice(f, j, off(f, 0, j), off(f, 1, f->me), f->rev, 0,
			                (uint64_t)j) == 0)
				inflight[j] = 1;
		struct mvc_event ev[32];
		int n = mvc_wait(f->c, ev, 32, 5);
		for (int i = 0; i < n; i++) {
			if (ev[i].type != MVC_EV_BATCH || ev[i].cookie >= MAXH)
				continue;
			int j = (int)ev[i].cookie;
			inflight[j] = 0;
			if (!ev[i].status && !wrote[j]++) {
				printf("first_write %s%d %lld\n", f->prefix, j,
				       (long long)wall_ms());
			} else if (ev[i].status && strstr(ev[i].msg, "left cluster")) {
				printf("departed %s%d %lld %s\n", f->prefix, j,
				       (long long)wall_ms(), ev[i].msg);
				departed[j] = 1;
			} else if (ev[i].status && !failed[j]++) {
				printf("fail %s%d %lld %d %s\n", f->prefix, j, (long long)wall_ms(),
				       ev[i].cause, ev[i].msg);
			}
			fflush(stdout);
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct fleet f = {.prefix = "h", .hosts = 0, .slice = 64 << 10, .page = 4096, .me = -1};
	const char *sock = NULL, *stop = NULL;
	uint32_t R = 0;
	int seconds = 0, o;
	char name[MVC_NAME_MAX];
	static const struct option lo[] = {
	    {"socket", 1, 0, 's'}, {"me", 1, 0, 'm'},   {"hosts", 1, 0, 'n'},  {"max", 1, 0, 'M'},
	    {"slice", 1, 0, 'S'},  {"page", 1, 0, 'p'}, {"rounds", 1, 0, 'r'}, {"load", 1, 0, 'l'},
	    {"prefix", 1, 0, 'P'}, {"stop", 1, 0, 'x'}, {0, 0, 0, 0}};

	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case 's':
			sock = optarg;
			break;
		case 'm':
			f.me = atoi(optarg);
			break;
		case 'n':
			f.hosts = atoi(optarg);
			break;
		case 'M':
			f.max = atoi(optarg);
			break;
		case 'S':
			f.slice = strtoull(optarg, NULL, 0);
			break;
		case 'p':
			f.page = strtoull(optarg, NULL, 0);
			break;
		case 'r':
			R = (uint32_t)atoi(optarg);
			break;
		case 'l':
			seconds = atoi(optarg);
			break;
		case 'P':
			f.prefix = optarg;
			break;
		case 'x':
			stop = optarg;
			break;
		default:
			fprintf(stderr, "usage: fleet_host --socket S --me K --hosts N [--max M] "
			                "[--slice B] [--page B] [--prefix P] (--rounds R | --load "
			                "S [--stop FILE])\n");
			return 2;
		}
	}
	if (!f.max)
		f.max = f.hosts;
	if (f.me < 0 || f.me >= f.max || f.max > MAXH || f.hosts > f.max || !f.page ||
	    f.slice % f.page || (!R && !seconds)) {
		fprintf(stderr, "fleet_host: bad arguments (see the usage in the source)\n");
		return 2;
	}
	f.npages = (uint32_t)(f.slice / f.page);
	f.fwd = calloc(f.npages, sizeof(uint32_t));
	f.rev = calloc(f.npages, sizeof(uint32_t));
	for (uint32_t i = 0; i < f.npages; i++) {
		f.fwd[i] = i;
		f.rev[i] = f.npages - 1 - i;
	}
	int ret = mvc_connect(&f.c, sock);
	if (ret) {
		fprintf(stderr, "fleet_host %d: connect %s: %s\n", f.me, sock, strerror(-ret));
		return 1;
	}
	if ((ret = mvc_alloc(f.c, 3 * (uint64_t)f.max * f.slice, &f.mem))) {
		fprintf(stderr, "fleet_host %d: alloc: %s\n", f.me, mvc_error(f.c));
		return 1;
	}
	snprintf(name, sizeof(name), "%s%d", f.prefix, f.me);
	if ((ret = mvc_publish(f.c, f.mem.region, name))) {
		fprintf(stderr, "fleet_host %d: publish %s: %s\n", f.me, name, mvc_error(f.c));
		return 1;
	}
	if (R) {
		for (int j = 0; j < f.hosts; j++) {
			if (j == f.me)
				continue;
			snprintf(name, sizeof(name), "%s%d", f.prefix, j);
			if ((ret = mvc_lookup(f.c, name, 30000, &f.peer[j]))) {
				fprintf(stderr, "fleet_host %d: lookup %s: %s\n", f.me, name,
				        mvc_error(f.c));
				return 1;
			}
			if (f.peer[j].len != f.mem.len) {
				fprintf(stderr, "fleet_host %d: %s is %llu bytes, want %llu\n",
				        f.me, name, (unsigned long long)f.peer[j].len,
				        (unsigned long long)f.mem.len);
				return 1;
			}
			f.known[j] = 1;
		}
		ret = rounds(&f, R);
	} else {
		ret = load(&f, seconds, stop);
	}
	mvc_disconnect(f.c);
	free(f.fwd);
	free(f.rev);
	return ret ? 1 : 0;
}
