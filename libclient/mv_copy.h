/* SPDX-License-Identifier: MIT */
/*
 * A copy whose stores stream past the caches (non-temporal stores), for
 * bytes that another core reads next or nobody reads soon: libmvc's page
 * and segment lists going into the arena (the mover reads them), a mover's
 * large same-host copies (their lines would be written back before the
 * receiver reads them). Shared by libclient and the mover; header-only.
 * Weakly ordered stores: mv_copy_nt() ends with a store fence, so whatever
 * the caller publishes next (a ring slot, an immediate) is seen after them.
 */
#ifndef MV_COPY_H
#define MV_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __x86_64__
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#ifdef __x86_64__
/* 32-byte streaming stores: on the EPYC of the build machine the 16-byte
 * ones stream no faster than memcpy (15.6-17.9 GB/s), these 18.1-20.4; on
 * the H100 machine's Xeon the same or better (10.4 against 8.1 GB/s at
 * 16 MiB streaming). d is 32-byte aligned. */
__attribute__((target("avx"))) static inline void mv_copy_nt_avx(uint8_t *d, const uint8_t *s,
                                                                 size_t n)
{
	for (; n >= 128; n -= 128, d += 128, s += 128) {
		__m256i a = _mm256_loadu_si256((const __m256i *)s);
		__m256i b = _mm256_loadu_si256((const __m256i *)(s + 32));
		__m256i c = _mm256_loadu_si256((const __m256i *)(s + 64));
		__m256i e = _mm256_loadu_si256((const __m256i *)(s + 96));
		_mm256_stream_si256((__m256i *)d, a);
		_mm256_stream_si256((__m256i *)(d + 32), b);
		_mm256_stream_si256((__m256i *)(d + 64), c);
		_mm256_stream_si256((__m256i *)(d + 96), e);
	}
	memcpy(d, s, n);
	_mm256_zeroupper();
}
#endif

/* Copies n bytes from s to d (not overlapping) with streaming stores where
 * the CPU has them (AVX, else SSE2), else memcpy; the stores are fenced. */
static inline void mv_copy_nt(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
#ifdef __SSE2__
	size_t head = (32 - ((uintptr_t)d & 31)) & 31;

	if (head > n)
		head = n;
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
#ifdef __x86_64__
	if (__builtin_cpu_supports("avx")) {
		mv_copy_nt_avx(d, s, n);
		n = 0;
	}
#endif
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
	_mm_sfence();
#else
	memcpy(d, s, n);
#endif
}

#endif /* MV_COPY_H */
