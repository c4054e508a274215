/* SPDX-License-Identifier: MIT */
/*
 * mvtool.h: the few small helpers more than one command in tools/ needs
 * (mvkv, mvbench, mvgpubench, mvreplay); header-only, since tools/ holds
 * one file per command. Everything here is safe from any thread.
 */
#ifndef MV_TOOL_H
#define MV_TOOL_H

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Seconds on the monotonic clock. */
static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A 64-bit finalizer (murmur3's): well-spread patterns from small seeds. */
static inline uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static inline int mv_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The median of n > 0 values; sorts v in place, so v[0] and v[n - 1] are
 * then the extremes. */
static inline double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), mv_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Writes all of buf, across short writes and EINTR; 0, or -1 on error. */
static inline int xwrite(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads all of len into buf, across short reads and EINTR, waiting at most
 * timeout_ms in all (< 0: for ever); 0, or -1 on EOF, error or time-out. */
static inline int xread(int fd, void *buf, size_t len, int timeout_ms)
{
	uint8_t *p = buf;
	double end = now_s() + timeout_ms / 1e3;

	while (len) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		int wait = -1;
		if (timeout_ms >= 0) {
			double left = end - now_s();
			if (left <= 0)
				return -1;
			wait = (int)(left * 1e3) + 1;
		}
		if (poll(&pf, 1, wait) < 0)
			return -1;
		if (!(pf.revents & (POLLIN | POLLHUP)))
			continue;
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

#endif
