/* SPDX-License-Identifier: MIT */
/*
 * mvbench: write bandwidth and message rate through the mover, against a
 * direct baseline measured in the same run. For each provider and shard
 * count it starts two movers (A sends, B receives) and keeps a receiver
 * process, forked before anything else, as a client of B with one region.
 * Through the mover, this process is a client of A and writes into that
 * region with a window of batches in flight. The direct baseline drives the
 * same provider with no daemon and no rings: N sender threads, each with its
 * own endpoint opened by mover/fabric.c and pinned where shard i of A runs,
 * post exactly the fabric writes the shards would (same iov merging, 4 MiB
 * chunks, flags, FI_MORE rule, window) to N endpoints in the receiver
 * process, pinned like B's shards and polling their CQs. Both move the same
 * bytes between the same two mappings. A striped batch is done, for both,
 * when every thread's stripe of it is, and a new one starts only as an old
 * one is done: the client's window is counted in batches. For striped rows
 * an uncoupled direct run, where each thread keeps its own window of
 * stripes and waits for no other, is shown beside the ratio: the price of
 * the batch contract itself, paid by any program that needs to know when a
 * whole batch landed. Runs come in pairs, mover and direct, in turns of
 * order (mover first in even reps, direct first in odd ones), then the
 * uncoupled run on striped rows; the table gives medians and the median
 * over pairs of mover/direct, a BENCH line per row
 * follows, and every run's data is checked where it landed.
 *
 * This file is the command line; tools/bench/ holds the rest: harness.c
 * (a configuration, pairs of runs, the figures), procs.c (the processes),
 * books.c (CPU accounting), direct.c (the direct baseline), rows_bw.c
 * (the contiguous rows) and rows_scatter.c (scattered 4 KiB pages, one
 * paged write per batch, against the 4 KiB contiguous row).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/harness.h"
#include "mvc.h"

/* ---- command line ---- */

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);
	uint64_t mul = 1;

	if (end == s)
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		mul = 1ull << 10;
		end++;
		break;
	case 'm':
	case 'M':
		mul = 1ull << 20;
		end++;
		break;
	case 'g':
	case 'G':
		mul = 1ull << 30;
		end++;
		break;
	default:
		break;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return -EINVAL;
	*out = v * mul;
	return 0;
}

static int parse_list(const char *arg, uint64_t *v, int max)
{
	char *dup = strdup(arg), *save = NULL;
	int n = 0;

	if (!dup)
		return -ENOMEM;
	for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == max || parse_size(tok, &v[n])) {
			free(dup);
			return -EINVAL;
		}
		n++;
	}
	free(dup);
	return n;
}

/*
 * 1 when no CPU of set below cpu shares cpu's core (its hardware-thread
 * siblings, from sysfs): the first thread of its core among those allowed.
 * 1 where sysfs does not say.
 */
static int first_thread(int cpu, const cpu_set_t *set)
{
	char path[96], list[256];
	FILE *f;

	snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
	         cpu);
	f = fopen(path, "r");
	if (!f)
		return 1;
	char *ok = fgets(list, sizeof(list), f);
	fclose(f);
	for (char *p = ok ? list : NULL; p && *p >= '0' && *p <= '9';) {
		char *e;
		long lo = strtol(p, &e, 10), hi = lo;
		if (*e == '-')
			hi = strtol(e + 1, &e, 10);
		for (long j = lo; j <= hi && j < cpu; j++)
			if (j >= 0 && j < CPU_SETSIZE && CPU_ISSET(j, set))
				return 0;
		p = *e == ',' ? e + 1 : NULL;
	}
	return 1;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: mvbench [options]\n"
	        "  --provider LIST   tcp, shm, samehost, or a list: tcp,shm,samehost (default\n"
	        "                    tcp); tcp and shm movers stay on the fabric between them\n"
	        "                    (--no-host-copy); samehost: shm movers that copy host\n"
	        "                    memory into each other (the direct baseline: shm)\n"
	        "  --iface NAME      interface for tcp (default lo)\n"
	        "  --shards LIST     shard counts, e.g. 1,2,4 (default 1,2,... up to nproc/4)\n"
	        "  --sizes LIST      write sizes, K/M/G suffixes (default 4K,64K,1M,16M,64M)\n"
	        "  --seconds S       length of one measured run (default 0.5)\n"
	        "  --reps N          measured runs of each side per row, medians (default 15)\n"
	        "  --quick           --seconds 0.25 --reps 3 unless given\n"
	        "  --csv FILE        the table as CSV too\n"
	        "  --mover PATH      the mover binary (default: next to mvbench)\n"
	        "  --mover-arg ARG   pass ARG to every mover the bench starts (repeat it for\n"
	        "                    more, e.g. --mover-arg=--fair-piece=16384)\n"
	        "  --check-bars      exit 3 when a row misses its bar (0.97x direct from 64 KiB,\n"
	        "                    0.9x at 4 KiB and below; scattered: 0.9x direct and\n"
	        "                    0.8x the 4 KiB row's writes/s, through the mover)\n"
	        "  --window SIZE     at most this many bytes in flight (default 128M)\n"
	        "  --wait            the client sleeps in mvc_wait, never polls\n"
	        "  --threads         per row, each busy thread's CPU use, waits and switches\n"
	        "  --pattern LIST    contig (writes of --sizes), scattered (batches of random\n"
	        "                    4 KiB pages, one mvc_write_paged each), latency (round\n"
	        "                    trips of one write and its immediate, clients polling\n"
	        "                    and sleeping, then the movers' idle CPU), fairness (a\n"
	        "                    client's 4 KiB batches alone and beside a second client\n"
	        "                    flooding the same mover with 64 MiB writes), register\n"
	        "                    (mvc_alloc of 1 GiB, 256 MiB with --quick, beside a\n"
	        "                    memset of as much fresh memory), external (at each\n"
	        "                    size, the mover writing one buffer over and over beside\n"
	        "                    fi_rma_bw and ucx_perftest put_bw doing the same), or all\n"
	        "                    six (default); scattered rows bring the 4 KiB\n"
	        "                    contiguous row they are compared with (vs_contig)\n"
	        "  --pages LIST      pages per scattered batch (default 512,65536)\n"
	        "  --lat-sizes LIST  write sizes of the latency rows (default 8,64,4K,64K)\n"
	        "  --pool SIZE       pages are drawn from this much memory per side (default 4G,\n"
	        "                    256M with --quick; at least two batches)\n"
	        "  --backing LIST    the pages of both pools: 4k, hugetlb, thp or a list; rows\n"
	        "                    run once per backing (default 4k; register rows: all\n"
	        "                    three); one the kernel cannot back now (vm.nr_hugepages,\n"
	        "                    shmem_enabled) is skipped, saying why\n"
	        "  --reg-size SIZE   register rows: bytes per region (default 1G, 256M with\n"
	        "                    --quick); the memset beside it takes at most 4G\n"

	        "  -v, --verbose     every run's figures\n"
	        "  --version         print the version and exit\n");
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
	    {"provider", required_argument, 0, 'p'},
	    {"iface", required_argument, 0, 'i'},
	    {"shards", required_argument, 0, 'n'},
	    {"sizes", required_argument, 0, 's'},
	    {"seconds", required_argument, 0, 't'},
	    {"reps", required_argument, 0, 'r'},
	    {"quick", no_argument, 0, 'q'},
	    {"csv", required_argument, 0, 'c'},
	    {"mover", required_argument, 0, 'm'},
	    {"check-bars", no_argument, 0, 'b'},
	    {"verbose", no_argument, 0, 'v'},
	    {"threads", no_argument, 0, 'T'},
	    {"wait", no_argument, 0, 'W'},
	    {"window", required_argument, 0, 'w'},
	    {"mover-arg", required_argument, 0, 'M'},
	    {"pattern", required_argument, 0, 'P'},
	    {"pages", required_argument, 0, 'g'},
	    {"pool", required_argument, 0, 'o'},
	    {"lat-sizes", required_argument, 0, 'L'},
	    {"backing", required_argument, 0, 'B'},
	    {"reg-size", required_argument, 0, 'R'},
	    {"help", no_argument, 0, 'h'},
	    {"version", no_argument, 0, 'V'},
	    {0, 0, 0, 0},
	};
	uint64_t v[MAX_LIST];
	char *provs = NULL;
	int ch, n, patterns = 0;

	memset(o, 0, sizeof(*o));
	while ((ch = getopt_long(argc, argv, "v", lo, NULL)) != -1) {
		switch (ch) {
		case 'p':
			free(provs);
			provs = strdup(optarg);
			break;
		case 'i':
			o->iface = optarg;
			break;
		case 'n':
			n = parse_list(optarg, v, MAX_LIST);
			if (n <= 0) {
				fprintf(stderr, "mvbench: --shards %s: give a list like 1,2,4\n",
				        optarg);
				exit(2);
			}
			for (int i = 0; i < n; i++) {
				if (v[i] < 1 || v[i] > MV_MAX_SHARDS) {
					fprintf(stderr,
					        "mvbench: --shards: %" PRIu64 " is not 1 to %u\n",
					        v[i], MV_MAX_SHARDS);
					exit(2);
				}
				o->shards[i] = (uint32_t)v[i];
			}
			o->nshards = n;
			break;
		case 's':
			n = parse_list(optarg, o->sizes, MAX_LIST);
			if (n <= 0) {
				fprintf(stderr, "mvbench: --sizes %s: give a list like 4K,64K,1M\n",
				        optarg);
				exit(2);
			}
			for (int i = 0; i < n; i++)
				if (o->sizes[i] < 8 || o->sizes[i] > (1ull << 30)) {
					fprintf(stderr,
					        "mvbench: --sizes: %" PRIu64
					        " is outside 8 bytes to 1 GiB\n",
					        o->sizes[i]);
					exit(2);
				}
			o->nsizes = n;
			break;
		case 't':
			o->seconds = atof(optarg);
			if (o->seconds <= 0 || o->seconds > 600) {
				fprintf(stderr, "mvbench: --seconds %s: give 0 to 600\n", optarg);
				exit(2);
			}
			break;
		case 'r':
			o->reps = atoi(optarg);
			if (o->reps < 1 || o->reps > 64) {
				fprintf(stderr, "mvbench: --reps %s: give 1 to 64\n", optarg);
				exit(2);
			}
			break;
		case 'q':
			o->quick = 1;
			break;
		case 'c':
			o->csv = optarg;
			break;
		case 'm':
			o->mover = optarg;
			break;
		case 'b':
			o->check_bars = 1;
			break;
		case 'v':
			o->verbose = 1;
			break;
		case 'T':
			o->threads = 1;
			break;
		case 'W':
			o->wait = 1;
			break;
		case 'w':
			if (parse_size(optarg, &window_bytes) || window_bytes < (1u << 20) ||
			    window_bytes > (16ull << 30)) {
				fprintf(stderr, "mvbench: --window %s: give 1M to 16G\n", optarg);
				exit(2);
			}
			break;
		case 'M':
			if (nmover_extra == MOVER_EXTRA_MAX) {
				fprintf(stderr, "mvbench: --mover-arg: %d at most\n",
				        MOVER_EXTRA_MAX);
				exit(2);
			}
			mover_extra[nmover_extra++] = optarg;
			break;
		case 'P': {
			char *dup = strdup(optarg), *save = NULL;
			o->contig = o->scattered = o->latency = o->fairness = o->reg = 0;
			o->external = 0;
			for (char *tok = dup ? strtok_r(dup, ",", &save) : NULL; tok;
			     tok = strtok_r(NULL, ",", &save)) {
				if (!strcmp(tok, "contig")) {
					o->contig = 1;
				} else if (!strcmp(tok, "scattered")) {
					o->scattered = 1;
				} else if (!strcmp(tok, "latency")) {
					o->latency = 1;
				} else if (!strcmp(tok, "fairness")) {
					o->fairness = 1;
				} else if (!strcmp(tok, "register")) {
					o->reg = 1;
				} else if (!strcmp(tok, "external")) {
					o->external = 1;
				} else {
					fprintf(stderr,
					        "mvbench: --pattern: %s is not contig, scattered, "
					        "latency, fairness, register or external\n",
					        tok);
					exit(2);
				}
			}
			free(dup);
			if (!o->contig && !o->scattered && !o->latency && !o->fairness && !o->reg &&
			    !o->external) {
				fprintf(stderr,
				        "mvbench: --pattern %s: give contig, scattered, latency, "
				        "fairness, register, external or a list of them\n",
				        optarg);
				exit(2);
			}
			patterns = 1;
			break;
		}
		case 'g':
			n = parse_list(optarg, v, MAX_LIST);
			if (n <= 0) {
				fprintf(stderr, "mvbench: --pages %s: give a list like 512,65536\n",
				        optarg);
				exit(2);
			}
			for (int i = 0; i < n; i++) {
				if (v[i] < 1 || v[i] > (1u << 20)) {
					fprintf(stderr,
					        "mvbench: --pages: %" PRIu64
					        " is not 1 to 1048576\n",
					        v[i]);
					exit(2);
				}
				o->pages[i] = (uint32_t)v[i];
			}
			o->npages = n;
			break;
		case 'o':
			if (parse_size(optarg, &o->pool) || o->pool < (1u << 20) ||
			    o->pool > (1ull << 40)) {
				fprintf(stderr, "mvbench: --pool %s: give 1M to 1T\n", optarg);
				exit(2);
			}
			break;
		case 'L':
			n = parse_list(optarg, o->lat, MAX_LIST);
			if (n <= 0) {
				fprintf(stderr,
				        "mvbench: --lat-sizes %s: give a list like 8,64,4K\n",
				        optarg);
				exit(2);
			}
			for (int i = 0; i < n; i++)
				if (o->lat[i] < 8 || o->lat[i] > (64u << 10)) {
					fprintf(stderr,
					        "mvbench: --lat-sizes: %" PRIu64
					        " is outside 8 bytes to 64 KiB\n",
					        o->lat[i]);
					exit(2);
				}
			o->nlat = n;
			break;
		case 'B': {
			char *dup = strdup(optarg), *save = NULL;
			o->nbackings = 0;
			for (char *tok = dup ? strtok_r(dup, ",", &save) : NULL; tok;
			     tok = strtok_r(NULL, ",", &save)) {
				uint32_t b = !strcmp(tok, "4k")        ? MVC_BACKING_4K
				             : !strcmp(tok, "hugetlb") ? MVC_BACKING_HUGETLB
				             : !strcmp(tok, "thp")     ? MVC_BACKING_THP
				                                       : 99;
				if (b == 99 || o->nbackings == 3) {
					fprintf(stderr,
					        "mvbench: --backing %s: give 4k, hugetlb, thp or a "
					        "list of them\n",
					        optarg);
					exit(2);
				}
				o->backings[o->nbackings++] = b;
			}
			free(dup);
			if (!o->nbackings) {
				fprintf(stderr, "mvbench: --backing: give 4k, hugetlb or thp\n");
				exit(2);
			}
			memcpy(o->reg_backings, o->backings, sizeof(o->backings));
			o->nreg_backings = o->nbackings;
			break;
		}
		case 'R':
			if (parse_size(optarg, &o->reg_size) || o->reg_size < (1u << 20) ||
			    o->reg_size > (1ull << 40)) {
				fprintf(stderr, "mvbench: --reg-size %s: give 1M to 1T\n", optarg);
				exit(2);
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("mvbench %s\n", MVC_VERSION);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind < argc) {
		usage(stderr);
		exit(2);
	}
	if (!provs)
		provs = strdup("tcp");
	for (char *save = NULL, *tok = strtok_r(provs, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (o->nprov == (int)(sizeof(o->provs) / sizeof(o->provs[0]))) {
			fprintf(stderr, "mvbench: --provider: too many\n");
			exit(2);
		}
		o->provs[o->nprov++] = tok; /* provs lives as long as the process */
	}
	if (!o->nbackings) {
		o->backings[o->nbackings++] = MVC_BACKING_4K;
		const uint32_t all[3] = {MVC_BACKING_4K, MVC_BACKING_HUGETLB, MVC_BACKING_THP};
		memcpy(o->reg_backings, all, sizeof(all));
		o->nreg_backings = 3;
	}
	if (!o->reg_size)
		o->reg_size = o->quick ? 256ull << 20 : 1ull << 30;
	if (!o->seconds)
		o->seconds = o->quick ? 0.25 : 0.5;
	if (!o->reps)
		o->reps = o->quick ? 3 : 15;
	if (!patterns)
		o->contig = o->scattered = o->latency = o->fairness = o->reg = o->external = 1;
	/* External rows stand beside the contiguous row of each size. */
	if (o->external)
		o->contig = 1;
	if (o->latency && !o->nlat) {
		const uint64_t def[] = {8, 64, 4096, 65536};
		memcpy(o->lat, def, sizeof(def));
		o->nlat = 4;
	}
	if (!o->contig)
		o->nsizes = 0;
	else if (!o->nsizes) {
		const uint64_t def[] = {4096, 65536, 1 << 20, 16 << 20, 64 << 20};
		memcpy(o->sizes, def, sizeof(def));
		o->nsizes = 5;
	}
	if (o->scattered) {
		int has4k = 0;
		for (int i = 0; i < o->nsizes; i++)
			has4k |= o->sizes[i] == SC_PAGE;
		/* Scattered rows are held against the 4 KiB row of their run. */
		if (!has4k && o->nsizes == MAX_LIST) {
			fprintf(stderr, "mvbench: --sizes: leave room for the 4 KiB row the "
			                "scattered rows are compared with\n");
			exit(2);
		}
		if (!has4k)
			o->sizes[o->nsizes++] = SC_PAGE;
		if (!o->npages) {
			o->pages[0] = 512;
			o->pages[1] = 65536;
			o->npages = 2;
		}
		if (!o->pool)
			o->pool = o->quick ? 256ull << 20 : 4ull << 30;
	}
	if (!o->nshards) {
		uint32_t top = navail / 4 > 2 ? (uint32_t)navail / 4 : 2;
		for (uint32_t s = 1; s <= top && o->nshards < MAX_LIST; s *= 2)
			o->shards[o->nshards++] = s;
	}
}

int main(int argc, char **argv)
{
	static struct row rows[8 * MAX_LIST * (2 * MAX_LIST + 1)];
	struct opts o;
	char bin[4096];
	int nrows = 0, missed = 0, failed = 0;
	FILE *csv = NULL;
	cpu_set_t set;

	main_pid = getpid();
	mv_fabric_env(); /* the direct threads' endpoints as the mover's */
	/* The first thread of each core, then the others: the busy threads
	 * plan_cpus() places each get a core of their own while there are
	 * cores, whichever way the machine numbers its threads. */
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		for (int pass = 1; pass >= 0; pass--)
			for (int i = 0; i < CPU_SETSIZE && navail < 1024; i++)
				if (CPU_ISSET(i, &set) && first_thread(i, &set) == pass)
					avail_cpus[navail++] = i;
	if (!navail)
		avail_cpus[navail++] = 0;
	parse_opts(argc, argv, &o);
	book_on = o.threads;

	/* The mover binary sits next to this one unless told otherwise. */
	if (o.mover) {
		snprintf(bin, sizeof(bin), "%s", o.mover);
	} else {
		ssize_t n = readlink("/proc/self/exe", bin, sizeof(bin) - 8);
		if (n <= 0)
			snprintf(bin, sizeof(bin), "build/bin/mover");
		else {
			bin[n] = 0;
			char *slash = strrchr(bin, '/'), *name = slash ? slash + 1 : bin;
			snprintf(name, sizeof(bin) - (size_t)(name - bin), "mover");
		}
	}
	if (access(bin, X_OK))
		die("no mover binary at %s (%s): build it with make, or give --mover PATH", bin,
		    strerror(errno));

	procs_start();
	if (o.csv) {
		csv = fopen(o.csv, "w");
		if (!csv)
			die("--csv %s: %s", o.csv, strerror(errno));
		csv_head(csv);
	}

	double t0 = now_s();
	printf("mvbench: %d CPUs, shards", navail);
	for (int i = 0; i < o.nshards; i++)
		printf("%s%u", i ? "," : " ", o.shards[i]);
	printf(", %d sizes", o.nsizes);
	if (o.scattered)
		printf(", %d scattered", o.npages);
	printf(", %d reps of %.2f s%s\n", o.reps, o.seconds, o.quick ? " (quick)" : "");
	for (int pi = 0; pi < o.nprov; pi++) {
		int first_row = nrows;
		/* Register rows run once per provider, in its first configuration,
		 * over their own backings; the other families once per backing. */
		int others = o.contig || o.scattered || o.latency || o.fairness || o.external;
		for (int bi = 0; bi < (others ? o.nbackings : 1); bi++)
			for (int si = 0; si < o.nshards; si++)
				config_run(&o, bin, o.provs[pi], o.shards[si],
				           others ? o.backings[bi] : MVC_BACKING_4K, rows, &nrows,
				           csv, si == 0 && bi == 0);
		int cut = 0;
		for (int i = first_row; i < nrows; i++)
			cut |= rows[i].cut;
		if (cut)
			printf("   * a run hit its time limit (3 x --seconds + 0.5 s); its rate "
			       "counts what completed by then\n");
		for (int i = first_row; i < nrows; i++)
			print_bench(&rows[i], o.seconds);
		for (int i = 0; i < nlat_done; i++)
			if (!strcmp(lat_done[i].prov, o.provs[pi]))
				lat_print_bench(&lat_done[i]);
		for (int i = 0; i < nidle_done; i++)
			if (!strcmp(idle_done[i].prov, o.provs[pi]))
				idle_print_bench(&idle_done[i]);
		for (int i = 0; i < nfair_done; i++)
			if (!strcmp(fair_done[i].prov, o.provs[pi]))
				fair_print_bench(&fair_done[i]);
		for (int i = 0; i < nreg_done; i++)
			if (!strcmp(reg_done[i].prov, o.provs[pi]))
				reg_print_bench(&reg_done[i]);
		for (int i = 0; i < next_done; i++)
			if (!strcmp(ext_done[i].prov, o.provs[pi]))
				ext_print_bench(&ext_done[i]);
	}
	for (int i = 0; i < next_done; i++)
		for (int k = 0; k < ext_done[i].ntools; k++) {
			const struct xtool *t = &ext_done[i].t[k];
			missed += t->goal && !t->pass && !t->absent && !t->failed;
			failed += t->goal && t->failed;
		}
	for (int i = 0; i < nreg_done; i++) {
		missed += !reg_done[i].pass && !reg_done[i].failed && !reg_done[i].skipped;
		failed += reg_done[i].failed;
	}
	for (int i = 0; i < nfair_done; i++) {
		missed += !fair_done[i].pass && !fair_done[i].failed;
		failed += fair_done[i].failed;
	}
	for (int i = 0; i < nlat_done; i++) {
		missed += !lat_done[i].pass && !lat_done[i].failed;
		failed += lat_done[i].failed;
	}
	for (int i = 0; i < nidle_done; i++)
		missed += !idle_done[i].pass;
	for (int i = 0; i < nrows; i++) {
		missed += !rows[i].pass && !rows[i].failed;
		failed += rows[i].failed;
	}
	printf("mvbench: %d rows, %d below their bar", nrows, missed);
	if (failed)
		printf(", %d failed (they count as missed with --check-bars)", failed);
	printf(", %.0f s\n", now_s() - t0);
	missed += failed;
	if (csv)
		fclose(csv);
	cleanup(0);
	return o.check_bars && missed ? 3 : 0;
}
