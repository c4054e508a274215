/* SPDX-License-Identifier: MIT */
/*
 * mvhostbench: what this host's cores do without any mover, the limits the
 * mover's own rows stand against. `copy`: one core copying one buffer into
 * another (reused, as the external baselines' rows do), by size and by the
 * instructions used (glibc's memcpy, 32- and 64-byte vector loops, rep
 * movsb), on private and on memfd-shared memory. `wake`: how long a thread
 * blocked in poll() on an eventfd takes to run after another thread, on its
 * own CPU, writes the eventfd, by how long the sleeper slept: on a virtual
 * machine an idle vCPU takes tens of microseconds to wake, which a sleeping
 * client pays before it can answer, whatever the mover does.
 *
 *   mvhostbench [copy] [wake] [--cpus A,B] [--rounds N]
 *
 * Prints a table and one BENCH line a measurement.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifdef __x86_64__
#include <immintrin.h>
#endif

#include "mvc.h" /* MVC_VERSION */

static int64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		fprintf(stderr, "mvhostbench: pinning to CPU %d: %s\n", cpu, strerror(errno));
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* ---- copy ---------------------------------------------------------------- */

enum copy_kind { K_MEMCPY, K_V32, K_V64, K_MOVSB, K_N };
static const char *const kind_name[K_N] = {"memcpy", "vec32", "vec64", "movsb"};

#ifdef __x86_64__
__attribute__((target("avx2"))) static void copy_v32(uint8_t *d, const uint8_t *s, size_t n)
{
	for (; n >= 128; n -= 128, d += 128, s += 128) {
		__m256i a = _mm256_loadu_si256((const __m256i *)s);
		__m256i b = _mm256_loadu_si256((const __m256i *)(s + 32));
		__m256i c = _mm256_loadu_si256((const __m256i *)(s + 64));
		__m256i e = _mm256_loadu_si256((const __m256i *)(s + 96));
		_mm256_storeu_si256((__m256i *)d, a);
		_mm256_storeu_si256((__m256i *)(d + 32), b);
		_mm256_storeu_si256((__m256i *)(d + 64), c);
		_mm256_storeu_si256((__m256i *)(d + 96), e);
	}
	memcpy(d, s, n);
	_mm256_zeroupper();
}

__attribute__((target("avx512f"))) static void copy_v64(uint8_t *d, const uint8_t *s, size_t n)
{
	for (; n >= 256; n -= 256, d += 256, s += 256) {
		__m512i a = _mm512_loadu_si512((const void *)s);
		__m512i b = _mm512_loadu_si512((const void *)(s + 64));
		__m512i c = _mm512_loadu_si512((const void *)(s + 128));
		__m512i e = _mm512_loadu_si512((const void *)(s + 192));
		_mm512_storeu_si512((void *)d, a);
		_mm512_storeu_si512((void *)(d + 64), b);
		_mm512_storeu_si512((void *)(d + 128), c);
		_mm512_storeu_si512((void *)(d + 192), e);
	}
	memcpy(d, s, n);
	_mm256_zeroupper();
}

static void copy_movsb(uint8_t *d, const uint8_t *s, size_t n)
{
	__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}
#endif

/* Whether kind k runs on this CPU. */
static int kind_runs(enum copy_kind k)
{
#ifdef __x86_64__
	if (k == K_V32)
		return __builtin_cpu_supports("avx2");
	if (k == K_V64)
		return __builtin_cpu_supports("avx512f");
	return 1;
#else
	return k == K_MEMCPY;
#endif
}

static void copy_one(enum copy_kind k, uint8_t *d, const uint8_t *s, size_t n)
{
#ifdef __x86_64__
	if (k == K_V32) {
		copy_v32(d, s, n);
		return;
	}
	if (k == K_V64) {
		copy_v64(d, s, n);
		return;
	}
	if (k == K_MOVSB) {
		copy_movsb(d, s, n);
		return;
	}
#endif
	(void)k;
	memcpy(d, s, n);
}

/* A buffer of n bytes, touched: private, or a memfd mapped shared (how a
 * mover maps its clients' regions). NULL on failure. */
static uint8_t *buffer(size_t n, int shared)
{
	void *p;

	if (shared) {
		int fd = memfd_create("mvhostbench", MFD_CLOEXEC);
		if (fd < 0)
			return NULL;
		if (ftruncate(fd, (off_t)n)) {
			close(fd);
			return NULL;
		}
		p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
	} else {
		p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	if (p == MAP_FAILED)
		return NULL;
	memset(p, 1, n);
	return p;
}

static int run_copy(int cpu)
{
	static const size_t sizes[] = {64 << 10, 1 << 20, 16 << 20};
	enum { NSIZES = sizeof(sizes) / sizeof(sizes[0]) };
	const size_t max = 16 << 20;
	double med[2][NSIZES][K_N] = {{{0}}};

	pin(cpu);
	printf("copy: one core (CPU %d) copying one buffer into another, reused; GB/s, median "
	       "(range) of 5 runs of ~2 GiB each\n",
	       cpu);
	printf("  %-7s %-9s", "memory", "size");
	for (int k = 0; k < K_N; k++)
		printf(" %21s", kind_name[k]);
	printf("\n");
	for (int shared = 0; shared < 2; shared++) {
		uint8_t *s = buffer(max, shared), *d = buffer(max, shared);
		if (!s || !d) {
			fprintf(stderr, "mvhostbench: %zu-byte buffers: %s\n", max,
			        strerror(errno));
			return 1;
		}
		for (size_t z = 0; z < NSIZES; z++) {
			size_t n = sizes[z];
			long it = (long)((2ull << 30) / n);
			printf("  %-7s %6zu KiB", shared ? "memfd" : "private", n >> 10);
			for (int k = 0; k < K_N; k++) {
				if (!kind_runs((enum copy_kind)k)) {
					printf(" %21s", "-");
					continue;
				}
				int64_t r[5];
				for (int j = 0; j < 5; j++) {
					int64_t t0 = now_ns();
					for (long i = 0; i < it; i++) {
						copy_one((enum copy_kind)k, d, s, n);
						__asm__ volatile("" : : "r"(d) : "memory");
					}
					r[j] = now_ns() - t0;
				}
				qsort(r, 5, sizeof(r[0]), cmp_i64);
				double gb = (double)n * (double)it;
				med[shared][z][k] = gb / (double)r[2];
				printf("      %5.1f (%4.1f-%4.1f)", med[shared][z][k],
				       gb / (double)r[4], gb / (double)r[0]);
			}
			printf("\n");
			fflush(stdout);
		}
		munmap(s, max);
		munmap(d, max);
	}
	for (int shared = 0; shared < 2; shared++)
		for (size_t z = 0; z < NSIZES; z++)
			for (int k = 0; k < K_N; k++)
				if (med[shared][z][k] > 0)
					printf(
					    "BENCH hostcopy memory=%s size=%zu kind=%s gBps=%.2f\n",
					    shared ? "memfd" : "private", sizes[z], kind_name[k],
					    med[shared][z][k]);
	return 0;
}

/* ---- wake ---------------------------------------------------------------- */

struct wake {
	int efd, cpu, rounds;
	_Atomic int ready; /* round the sleeper is about to poll for (1-based) */
	_Atomic int ack;   /* round whose stamp the writer has read */
	_Atomic int64_t ran;
};

static void *sleeper(void *arg)
{
	struct wake *w = arg;

	pin(w->cpu);
	for (int i = 1; i <= w->rounds; i++) {
		struct pollfd p = {.fd = w->efd, .events = POLLIN};
		uint64_t v;

		atomic_store(&w->ready, i);
		if (poll(&p, 1, -1) < 0)
			return NULL;
		atomic_store(&w->ran, now_ns());
		if (read(w->efd, &v, sizeof(v)) < 0)
			return NULL;
		while (atomic_load(&w->ack) != i)
			;
	}
	return NULL;
}

static int run_wake(int cpu_w, int cpu_s, int rounds)
{
	static const int gaps_us[] = {0, 100, 1000, 5000};
	enum { NGAPS = sizeof(gaps_us) / sizeof(gaps_us[0]) };
	double pct[NGAPS][3];
	int64_t *d = calloc((size_t)rounds, sizeof(*d));

	if (!d)
		return 1;
	pin(cpu_w);
	printf("wake: a thread blocked in poll() on an eventfd (CPU %d), written by another (CPU "
	       "%d) after the sleeper slept GAP; from the write to the sleeper running, %d "
	       "rounds\n",
	       cpu_s, cpu_w, rounds);
	printf("  %8s %9s %9s %9s\n", "gap", "p50 us", "p90 us", "p99 us");
	for (size_t g = 0; g < NGAPS; g++) {
		struct wake w = {.efd = eventfd(0, EFD_CLOEXEC), .cpu = cpu_s, .rounds = rounds};
		pthread_t t;

		if (w.efd < 0 || pthread_create(&t, NULL, sleeper, &w)) {
			fprintf(stderr, "mvhostbench: wake: %s\n", strerror(errno));
			return 1;
		}
		for (int i = 1; i <= rounds; i++) {
			uint64_t one = 1;
			int64_t at, ran;

			while (atomic_load(&w.ready) != i)
				;
			if (gaps_us[g]) {
				struct timespec ts = {.tv_sec = 0, .tv_nsec = gaps_us[g] * 1000L};
				nanosleep(&ts, NULL);
			} else {
				/* long enough for the sleeper to be in poll() */
				for (int64_t end = now_ns() + 20000; now_ns() < end;)
					;
			}
			at = now_ns();
			if (write(w.efd, &one, sizeof(one)) < 0)
				return 1;
			while (!(ran = atomic_load(&w.ran)))
				;
			d[i - 1] = ran - at;
			atomic_store(&w.ran, 0);
			atomic_store(&w.ack, i);
		}
		pthread_join(t, NULL);
		close(w.efd);
		qsort(d, (size_t)rounds, sizeof(*d), cmp_i64);
		pct[g][0] = (double)d[rounds / 2] / 1e3;
		pct[g][1] = (double)d[rounds * 9 / 10] / 1e3;
		pct[g][2] = (double)d[rounds * 99 / 100] / 1e3;
		printf("  %5d us %9.1f %9.1f %9.1f\n", gaps_us[g], pct[g][0], pct[g][1], pct[g][2]);
		fflush(stdout);
	}
	for (size_t g = 0; g < NGAPS; g++)
		printf("BENCH hostwake gap_us=%d rounds=%d p50_us=%.2f p90_us=%.2f p99_us=%.2f\n",
		       gaps_us[g], rounds, pct[g][0], pct[g][1], pct[g][2]);
	free(d);
	return 0;
}

int main(int argc, char **argv)
{
	int copy = 0, wake = 0, a = -1, b = -1, rounds = 3000;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "copy")) {
			copy = 1;
		} else if (!strcmp(argv[i], "wake")) {
			wake = 1;
		} else if (!strcmp(argv[i], "--cpus") && i + 1 < argc) {
			if (sscanf(argv[++i], "%d,%d", &a, &b) != 2 || a < 0 || b < 0 ||
			    a >= ncpu || b >= ncpu || a == b) {
				fprintf(stderr,
				        "mvhostbench: --cpus %s: give two CPUs, A,B, of 0-%ld\n",
				        argv[i], ncpu - 1);
				return 2;
			}
		} else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
			rounds = atoi(argv[++i]);
			if (rounds < 100 || rounds > 1000000) {
				fprintf(stderr, "mvhostbench: --rounds %s: give 100 to 1000000\n",
				        argv[i]);
				return 2;
			}
		} else if (!strcmp(argv[i], "--version")) {
			printf("mvhostbench %s\n", MVC_VERSION);
			return 0;
		} else {
			int help = !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help");
			fprintf(
			    help ? stdout : stderr,
			    "usage: mvhostbench [copy] [wake] [--cpus A,B] [--rounds N]\n"
			    "  copy         one core's copy rate by size and instructions\n"
			    "  wake         an eventfd wake-up's latency by how long the sleeper "
			    "slept\n"
			    "  --cpus A,B   the copier and writer on A, the sleeper on B (default "
			    "1,2)\n"
			    "  --rounds N   wake-ups a gap (default 3000)\n"
			    "  --version    print the version and exit\n");
			return help ? 0 : 2;
		}
	}
	if (!copy && !wake)
		copy = wake = 1;
	if (a < 0) {
		/* As mvbench places a shard and its peer: CPUs 1 and 2 where there are. */
		a = ncpu > 2 ? 1 : 0;
		b = ncpu > 2 ? 2 : (ncpu > 1 ? 1 : -1);
	}
	if (copy && run_copy(a))
		return 1;
	if (wake) {
		if (b < 0) {
			printf("wake: skipped: one CPU, and the writer and the sleeper need one "
			       "each\n");
			return 0;
		}
		if (ncpu < 3)
			printf("  (%ld CPUs: the spinning writer and anything else share them; the "
			       "figures say little)\n",
			       ncpu);
		return run_wake(a, b, rounds);
	}
	return 0;
}
