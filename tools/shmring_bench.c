/* SPDX-License-Identifier: MIT */
/*
 * shmring_bench: throughput and round-trip latency of shmring between two
 * processes pinned to different cores, against DPDK's rte_ring (SP/SC) as the
 * baseline measured in the same run. The parent creates both rings in sealed
 * memfds and forks; the child attaches to the shmring through the memfd and
 * uses the inherited rte_ring mapping (rte_ring_init on our own memory, no
 * EAL). Both move 64-byte descriptors, each side the way its API is meant to
 * be used: shmring producers write a descriptor straight into the slot and
 * consumers read it in place; rte_ring copies descriptors in and out of
 * 64-byte elements (rte_ring_sp_enqueue_burst_elem / sc_dequeue_burst_elem).
 * Every consumer checks every sequence number. Each (ring, batch) pair runs
 * RUNS times, interleaved, and the table shows medians; then a ping-pong over
 * two rings gives the median and p99 round trip of one descriptor. The last
 * lines are machine-readable: "BENCH shmring batch=N ...".
 *
 *   shmring_bench [--quick]     --quick: fewer descriptors and runs (about 5 s)
 */
#include "mvc.h" /* MVC_VERSION */
#include "shmring.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_DPDK
#include <rte_ring.h>
#include <rte_ring_elem.h>
#include <rte_version.h>
#endif

#define BENCH_CAPACITY  1024
#define BENCH_MAX_BATCH 256

static const uint32_t bench_batches[] = {1, 8, 32, 256};
#define BENCH_NBATCH (sizeof(bench_batches) / sizeof(bench_batches[0]))

enum bench_ring { RING_SHM, RING_RTE, RING_COUNT };
static const char *const ring_names[RING_COUNT] = {"shmring", "rte_ring"};

enum bench_job { JOB_STREAM = 1, JOB_ECHO, JOB_EXIT };

/* One 64-byte descriptor: a sequence number and a payload the consumer sums. */
struct bench_desc {
	uint64_t seq;
	uint64_t w[7];
};

_Static_assert(sizeof(struct bench_desc) == 64, "descriptors are 64 bytes");

/*
 * The parent posts a job, the child acknowledges it, both run their side, the
 * child reports. Shared anonymous memory, inherited by fork.
 */
struct bench_ctl {
	alignas(64) _Atomic uint32_t job_seq; /* parent writes: a new job is posted */
	uint32_t job;
	uint32_t ring;
	uint32_t batch;
	uint64_t count;
	alignas(64) _Atomic uint32_t ready_seq; /* child writes: it is running job_seq */
	alignas(64) _Atomic uint32_t done_seq;  /* child writes: job_seq finished */
	int64_t t_end;                          /* child: CLOCK_MONOTONIC when it got the last */
	uint64_t bad;                           /* child: descriptors with a wrong seq */
	uint64_t sum;                           /* child: payload sum, keeps the reads alive */
};

struct bench_rings {
	struct shmring shm_a; /* parent -> child: the stream, and the ping */
	struct shmring shm_b; /* child -> parent: the pong */
#ifdef HAVE_DPDK
	struct rte_ring *rte_a;
	struct rte_ring *rte_b;
#endif
};

struct bench_cfg {
	uint64_t count; /* descriptors per stream run */
	int runs;       /* interleaved runs per (ring, batch) */
	int rounds;     /* ping-pong rounds per latency run */
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static inline void desc_fill(struct bench_desc *d, uint64_t seq)
{
	d->seq = seq;
	for (int i = 0; i < 7; i++)
		d->w[i] = seq + (uint64_t)i;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- the stream: parent produces, child consumes ---- */

static void shm_produce(struct shmring *r, uint32_t batch, uint64_t count)
{
	uint64_t seq = 0;

	while (seq < count) {
		uint32_t want = count - seq < batch ? (uint32_t)(count - seq) : batch, pos;
		int n = shmring_reserve(r, want, &pos);

		if (n <= 0) {
			if (n < 0) {
				fprintf(stderr, "shmring_bench: %s\n", shmring_error(r));
				exit(1);
			}
			cpu_relax();
			continue;
		}
		for (int i = 0; i < n; i++)
			desc_fill(shmring_slot(r, pos + (uint32_t)i), seq + (uint64_t)i);
		shmring_commit(r);
		seq += (uint64_t)n;
	}
}

static void shm_consume(struct shmring *r, uint32_t batch, uint64_t count, struct bench_ctl *c)
{
	uint64_t seq = 0, bad = 0, sum = 0;

	while (seq < count) {
		uint32_t pos;
		int n = shmring_peek(r, batch, &pos);

		if (n <= 0) {
			if (n < 0) {
				fprintf(stderr, "shmring_bench: %s\n", shmring_error(r));
				exit(1);
			}
			cpu_relax();
			continue;
		}
		for (int i = 0; i < n; i++) {
			const struct bench_desc *d = shmring_slot(r, pos + (uint32_t)i);

			bad += d->seq != seq + (uint64_t)i;
			sum += d->w[6];
		}
		shmring_release(r, (uint32_t)n);
		seq += (uint64_t)n;
	}
	c->t_end = now_ns();
	c->bad = bad;
	c->sum = sum;
}

#ifdef HAVE_DPDK
static void rte_produce(struct rte_ring *r, uint32_t batch, uint64_t count)
{
	struct bench_desc buf[BENCH_MAX_BATCH];
	uint64_t seq = 0;
	uint32_t off = 0, have = 0;

	/* Fill a batch once, then enqueue what fits until it is all in. */
	while (seq < count) {
		if (off == have) {
			have = count - seq < batch ? (uint32_t)(count - seq) : batch;
			for (uint32_t i = 0; i < have; i++)
				desc_fill(&buf[i], seq + i);
			off = 0;
		}
		unsigned n =
		    rte_ring_sp_enqueue_burst_elem(r, &buf[off], sizeof(buf[0]), have - off, NULL);
		if (n == 0) {
			cpu_relax();
			continue;
		}
		off += n;
		seq += n;
	}
}

static void rte_consume(struct rte_ring *r, uint32_t batch, uint64_t count, struct bench_ctl *c)
{
	struct bench_desc buf[BENCH_MAX_BATCH];
	uint64_t seq = 0, bad = 0, sum = 0;

	while (seq < count) {
		unsigned n = rte_ring_sc_dequeue_burst_elem(r, buf, sizeof(buf[0]), batch, NULL);

		if (n == 0) {
			cpu_relax();
			continue;
		}
		for (unsigned i = 0; i < n; i++) {
			bad += buf[i].seq != seq + i;
			sum += buf[i].w[6];
		}
		seq += n;
	}
	c->t_end = now_ns();
	c->bad = bad;
	c->sum = sum;
}
#endif

/* ---- the ping-pong: parent sends one and waits for it back ---- */

static void shm_send_one(struct shmring *r, uint64_t seq)
{
	uint32_t pos;

	while (shmring_reserve(r, 1, &pos) != 1)
		cpu_relax();
	desc_fill(shmring_slot(r, pos), seq);
	shmring_commit(r);
}

static uint64_t shm_recv_one(struct shmring *r)
{
	uint32_t pos;
	uint64_t seq;

	while (shmring_peek(r, 1, &pos) != 1)
		cpu_relax();
	seq = ((const struct bench_desc *)shmring_slot(r, pos))->seq;
	shmring_release(r, 1);
	return seq;
}

static void shm_ping(struct bench_rings *rr, int rounds, int64_t *rtt)
{
	for (int i = 0; i < rounds; i++) {
		int64_t t0 = now_ns();

		shm_send_one(&rr->shm_a, (uint64_t)i);
		if (shm_recv_one(&rr->shm_b) != (uint64_t)i) {
			fprintf(stderr, "shmring_bench: pong %d out of order\n", i);
			exit(1);
		}
		rtt[i] = now_ns() - t0;
	}
}

static void shm_pong(struct bench_rings *rr, int rounds)
{
	for (int i = 0; i < rounds; i++)
		shm_send_one(&rr->shm_b, shm_recv_one(&rr->shm_a));
}

#ifdef HAVE_DPDK
static void rte_send_one(struct rte_ring *r, uint64_t seq)
{
	struct bench_desc d;

	desc_fill(&d, seq);
	while (rte_ring_sp_enqueue_burst_elem(r, &d, sizeof(d), 1, NULL) != 1)
		cpu_relax();
}

static uint64_t rte_recv_one(struct rte_ring *r)
{
	struct bench_desc d;

	while (rte_ring_sc_dequeue_burst_elem(r, &d, sizeof(d), 1, NULL) != 1)
		cpu_relax();
	return d.seq;
}

static void rte_ping(struct bench_rings *rr, int rounds, int64_t *rtt)
{
	for (int i = 0; i < rounds; i++) {
		int64_t t0 = now_ns();

		rte_send_one(rr->rte_a, (uint64_t)i);
		if (rte_recv_one(rr->rte_b) != (uint64_t)i) {
			fprintf(stderr, "shmring_bench: rte_ring pong %d out of order\n", i);
			exit(1);
		}
		rtt[i] = now_ns() - t0;
	}
}

static void rte_pong(struct bench_rings *rr, int rounds)
{
	for (int i = 0; i < rounds; i++)
		rte_send_one(rr->rte_b, rte_recv_one(rr->rte_a));
}
#endif

/* ---- the two processes ---- */

static int pin_to(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) < 0 ? -errno : 0;
}

/* The child: attach its ends, then run jobs until told to exit. */
static void child_main(struct bench_ctl *c, struct bench_rings *rr, int fd_a, int fd_b)
{
	struct shmring a, b;
	uint32_t seen = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (shmring_attach(&a, fd_a, SHMRING_CONSUMER) < 0 ||
	    shmring_attach(&b, fd_b, SHMRING_PRODUCER) < 0) {
		fprintf(stderr, "shmring_bench: child attach: %s / %s\n", shmring_error(&a),
		        shmring_error(&b));
		_exit(1);
	}
	/* The parent's copies of these handles are the other ends: use ours. */
	rr->shm_a = a;
	rr->shm_b = b;
	for (;;) {
		uint32_t seq;

		/* A1 pairs with R1 in post(): the job fields before job_seq. */
		while ((seq = atomic_load_explicit(&c->job_seq, memory_order_acquire)) == seen)
			cpu_relax();
		seen = seq;
		/* R2 pairs with A2 in post(). */
		atomic_store_explicit(&c->ready_seq, seq, memory_order_release);
		if (c->job == JOB_EXIT)
			_exit(0);
		if (c->job == JOB_STREAM) {
			if (c->ring == RING_SHM)
				shm_consume(&rr->shm_a, c->batch, c->count, c);
#ifdef HAVE_DPDK
			else
				rte_consume(rr->rte_a, c->batch, c->count, c);
#endif
		} else {
			if (c->ring == RING_SHM)
				shm_pong(rr, (int)c->count);
#ifdef HAVE_DPDK
			else
				rte_pong(rr, (int)c->count);
#endif
		}
		/* R3 pairs with A3 in finish(): t_end, bad, sum before done_seq. */
		atomic_store_explicit(&c->done_seq, seq, memory_order_release);
	}
}

/* Post a job and wait until the child runs it. */
static uint32_t post(struct bench_ctl *c, uint32_t job, uint32_t ring, uint32_t batch,
                     uint64_t count)
{
	uint32_t seq = atomic_load_explicit(&c->job_seq, memory_order_relaxed) + 1;

	c->job = job;
	c->ring = ring;
	c->batch = batch;
	c->count = count;
	/* R1 pairs with A1 in child_main() */
	atomic_store_explicit(&c->job_seq, seq, memory_order_release);
	/* A2 pairs with R2 in child_main() */
	while (atomic_load_explicit(&c->ready_seq, memory_order_acquire) != seq)
		cpu_relax();
	return seq;
}

static void finish(struct bench_ctl *c, uint32_t seq)
{
	/* A3 pairs with R3 in child_main() */
	while (atomic_load_explicit(&c->done_seq, memory_order_acquire) != seq)
		cpu_relax();
}

/* One stream run: descriptors per second, as seen from the first send to the last receipt. */
static double stream_run(struct bench_ctl *c, struct bench_rings *rr, uint32_t ring, uint32_t batch,
                         uint64_t count)
{
	uint32_t seq = post(c, JOB_STREAM, ring, batch, count);
	int64_t t0 = now_ns();

	if (ring == RING_SHM)
		shm_produce(&rr->shm_a, batch, count);
#ifdef HAVE_DPDK
	else
		rte_produce(rr->rte_a, batch, count);
#endif
	finish(c, seq);
	if (c->bad) {
		fprintf(stderr,
		        "shmring_bench: %s batch %u: %" PRIu64 " descriptors out of order\n",
		        ring_names[ring], batch, c->bad);
		exit(1);
	}
	return (double)count / ((double)(c->t_end - t0) / 1e9);
}

static void echo_run(struct bench_ctl *c, struct bench_rings *rr, uint32_t ring, int rounds,
                     int64_t *rtt)
{
	uint32_t seq = post(c, JOB_ECHO, ring, 1, (uint64_t)rounds);

	if (ring == RING_SHM)
		shm_ping(rr, rounds, rtt);
#ifdef HAVE_DPDK
	else
		rte_ping(rr, rounds, rtt);
#endif
	finish(c, seq);
}

#ifdef HAVE_DPDK
/* An rte_ring in a sealed memfd mapping of our own: rte_ring_init needs no EAL. */
static struct rte_ring *rte_ring_in_memfd(const char *name)
{
	ssize_t size = rte_ring_get_memsize_elem(sizeof(struct bench_desc), BENCH_CAPACITY);
	struct rte_ring *r;
	int fd, err;

	if (size < 0) {
		fprintf(stderr, "shmring_bench: rte_ring_get_memsize_elem: %zd\n", size);
		return NULL;
	}
	fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		perror("shmring_bench: rte_ring memfd");
		goto err_close;
	}
	r = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (r == MAP_FAILED) {
		perror("shmring_bench: rte_ring mmap");
		goto err_close;
	}
	err = rte_ring_init(r, name, BENCH_CAPACITY, RING_F_SP_ENQ | RING_F_SC_DEQ);
	if (err < 0) {
		fprintf(stderr, "shmring_bench: rte_ring_init: %s\n", strerror(-err));
		munmap(r, (size_t)size);
		goto err_close;
	}
	close(fd); /* the mapping keeps the memory; fork shares it */
	return r;

err_close:
	if (fd >= 0)
		close(fd);
	return NULL;
}
#endif

static void print_rtt(const char *name, int64_t *v, int n, double *med, double *p99)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_i64);
	*med = (double)v[n / 2];
	*p99 = (double)v[(int)((int64_t)n * 99 / 100)];
	printf("  %-9s %9.0f %9.0f %9" PRId64 "\n", name, *med, *p99, v[0]);
}

int main(int argc, char **argv)
{
	struct bench_cfg cfg = {.count = 1u << 22, .runs = 7, .rounds = 20000};
	struct shmring_opts o = {.capacity = BENCH_CAPACITY,
	                         .slot_size = sizeof(struct bench_desc)};
	struct bench_rings rr;
	struct bench_ctl *c;
	int nrings = 1, cpus[2], ncpu = 0, status;
	cpu_set_t set;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			cfg.count = 1u << 19;
			cfg.runs = 5;
			cfg.rounds = 5000;
		} else if (!strcmp(argv[i], "--version")) {
			printf("shmring_bench %s\n", MVC_VERSION);
			return 0;
		} else {
			int help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
			fprintf(help ? stdout : stderr,
			        "usage: shmring_bench [--quick]\n"
			        "The ring across two pinned processes at batch 1, 8, 32 and 256\n"
			        "(against DPDK's rte_ring where built with it).\n"
			        "  --quick      fewer and shorter runs\n"
			        "  --help       print this help and exit\n"
			        "  --version    print the version and exit\n");
			return help ? 0 : 2;
		}
	}

	/* Producer and consumer on the first two CPUs we may use. */
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		for (int i = 0; i < CPU_SETSIZE && ncpu < 2; i++)
			if (CPU_ISSET(i, &set))
				cpus[ncpu++] = i;
	if (ncpu < 2)
		printf("NOTE: fewer than two CPUs available: both sides share one, unpinned; "
		       "numbers mean little\n");

	if (shmring_create(&rr.shm_a, &o, SHMRING_PRODUCER) < 0 ||
	    shmring_create(&rr.shm_b, &o, SHMRING_CONSUMER) < 0) {
		fprintf(stderr, "shmring_bench: %s%s\n", shmring_error(&rr.shm_a),
		        shmring_error(&rr.shm_b));
		return 1;
	}
#ifdef HAVE_DPDK
	rr.rte_a = rte_ring_in_memfd("bench_rte_a");
	rr.rte_b = rte_ring_in_memfd("bench_rte_b");
	if (!rr.rte_a || !rr.rte_b)
		return 1;
	nrings = 2;
#endif
	c = mmap(NULL, sizeof(*c), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (c == MAP_FAILED) {
		perror("shmring_bench: mmap");
		return 1;
	}
	memset(c, 0, sizeof(*c));

	pid_t pid = fork();
	if (pid < 0) {
		perror("shmring_bench: fork");
		return 1;
	}
	if (pid == 0) {
		if (ncpu == 2 && pin_to(cpus[1]) < 0)
			fprintf(stderr, "shmring_bench: pinning the consumer: %s\n",
			        strerror(errno));
		child_main(c, &rr, dup(shmring_fd(&rr.shm_a)), dup(shmring_fd(&rr.shm_b)));
		_exit(1); /* not reached: the child exits on JOB_EXIT */
	}
	if (ncpu == 2 && pin_to(cpus[0]) < 0)
		fprintf(stderr, "shmring_bench: pinning the producer: %s\n", strerror(errno));

	printf("SPSC ring, 64-byte descriptors, capacity %u, producer on cpu %d, consumer on cpu "
	       "%d\n",
	       BENCH_CAPACITY, ncpu == 2 ? cpus[0] : -1, ncpu == 2 ? cpus[1] : -1);
#ifdef HAVE_DPDK
	printf("baseline: %s rte_ring SP/SC, 64-byte elements, burst API, %u usable slots\n",
	       rte_version(), BENCH_CAPACITY - 1);
#else
	printf("baseline: none (DPDK's rte_ring.h was not found at build time)\n");
#endif
	printf("%d interleaved runs of %" PRIu64 " descriptors per ring and batch; medians\n\n",
	       cfg.runs, cfg.count);

	/* Warm up both rings and the page tables before measuring. */
	for (int k = 0; k < nrings; k++)
		stream_run(c, &rr, (uint32_t)k, 32, cfg.count / 4);

	double rate[BENCH_NBATCH][RING_COUNT][16];
	for (int run = 0; run < cfg.runs; run++)
		for (size_t b = 0; b < BENCH_NBATCH; b++)
			for (int k = 0; k < nrings; k++) {
				/* Alternate who goes first so drift does not favour one ring. */
				int ring = (run & 1) && nrings == 2 ? 1 - k : k;

				rate[b][ring][run] =
				    stream_run(c, &rr, (uint32_t)ring, bench_batches[b], cfg.count);
			}

	double med[BENCH_NBATCH][RING_COUNT], spread[BENCH_NBATCH][RING_COUNT];
	for (size_t b = 0; b < BENCH_NBATCH; b++)
		for (int k = 0; k < nrings; k++) {
			double *v = rate[b][k];

			med[b][k] = median(v, cfg.runs); /* sorts v */
			spread[b][k] = (v[cfg.runs - 1] - v[0]) / med[b][k] * 100;
		}

	printf(" batch |   shmring Mdesc/s  ns/desc  spread |  rte_ring Mdesc/s  ns/desc  spread "
	       "| shmring/rte_ring\n");
	for (size_t b = 0; b < BENCH_NBATCH; b++) {
		printf(" %5u |   %15.1f %8.2f %6.0f%% ", bench_batches[b], med[b][0] / 1e6,
		       1e9 / med[b][0], spread[b][0]);
		if (nrings == 2)
			printf("| %16.1f %8.2f %6.0f%% | %16.2fx\n", med[b][1] / 1e6,
			       1e9 / med[b][1], spread[b][1], med[b][0] / med[b][1]);
		else
			printf("|                  -        -       - |                -\n");
	}
	printf("(spread: (max - min) / median over the runs)\n\n");

	/* Round trip of one descriptor: interleaved runs, all samples pooled. */
	int64_t *rtt[RING_COUNT];
	int64_t t_clock = now_ns();
	for (int i = 0; i < 1000; i++)
		(void)now_ns();
	t_clock = (now_ns() - t_clock) / 1000;
	for (int k = 0; k < nrings; k++) {
		rtt[k] = malloc(sizeof(int64_t) * (size_t)cfg.rounds * (size_t)cfg.runs);
		if (!rtt[k]) {
			perror("shmring_bench: malloc");
			return 1;
		}
	}
	for (int run = 0; run < cfg.runs; run++)
		for (int k = 0; k < nrings; k++) {
			int ring = (run & 1) && nrings == 2 ? 1 - k : k;

			echo_run(c, &rr, (uint32_t)ring, cfg.rounds,
			         rtt[ring] + (size_t)run * (size_t)cfg.rounds);
		}
	printf("round trip of one descriptor (ping-pong over two rings), %d x %d rounds, ns, "
	       "including ~%" PRId64 " ns of clock reads:\n",
	       cfg.runs, cfg.rounds, t_clock);
	printf("  %-9s %9s %9s %9s\n", "", "median", "p99", "min");
	double rtt_med[RING_COUNT] = {0}, rtt_p99[RING_COUNT] = {0};
	for (int k = 0; k < nrings; k++)
		print_rtt(ring_names[k], rtt[k], cfg.rounds * cfg.runs, &rtt_med[k], &rtt_p99[k]);
	printf("\n");

	post(c, JOB_EXIT, 0, 0, 0);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "shmring_bench: the consumer process failed\n");
		return 1;
	}

	for (size_t b = 0; b < BENCH_NBATCH; b++) {
		printf("BENCH shmring batch=%u mdesc_s=%.2f ns_desc=%.3f", bench_batches[b],
		       med[b][0] / 1e6, 1e9 / med[b][0]);
		if (nrings == 2)
			printf(" rte_ring_mdesc_s=%.2f rte_ring_ns_desc=%.3f ratio=%.3f",
			       med[b][1] / 1e6, 1e9 / med[b][1], med[b][0] / med[b][1]);
		printf("\n");
	}
	printf("BENCH shmring rtt_median_ns=%.0f rtt_p99_ns=%.0f", rtt_med[0], rtt_p99[0]);
	if (nrings == 2)
		printf(" rte_ring_rtt_median_ns=%.0f rte_ring_rtt_p99_ns=%.0f", rtt_med[1],
		       rtt_p99[1]);
	printf("\n");
	for (int k = 0; k < nrings; k++)
		free(rtt[k]);
	shmring_close(&rr.shm_b);
	shmring_close(&rr.shm_a);
	return 0;
}
