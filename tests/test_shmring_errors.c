/* SPDX-License-Identifier: MIT */
/*
 * The check suite of what the shmring library refuses: segments written by
 * hand as a hostile or broken peer would (bad magic, ABI, sizes, offsets,
 * seals), impossible options, and producer or consumer indices a corrupt
 * peer wrote, which must stay refused once seen. Both ends of each ring are
 * in this process.
 */
#include "shmring.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shmring_util.h"

/* ================================ errors ================================ */

/* A header as shmring_create() writes it, for a ring of cap slots of slot bytes. */
static void layout_valid(struct shmring_layout *l, uint32_t cap, uint32_t slot)
{
	memset(l, 0, sizeof(*l));
	l->hdr.magic = SHMRING_MAGIC;
	l->hdr.abi = SHMRING_ABI;
	l->hdr.hdr_size = sizeof(struct shmring_layout);
	l->hdr.slot_size = slot;
	l->hdr.capacity = cap;
	l->hdr.slots_off = SHMRING_SLOTS_OFF;
	l->hdr.seg_size = SHMRING_SLOTS_OFF + (uint64_t)cap * slot;
}

/* A memfd of size bytes starting with l, sealed against resizing if seals. */
static int segment_from_layout(const struct shmring_layout *l, off_t size, int seals)
{
	int fd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	size_t len = sizeof(*l) < (size_t)size ? sizeof(*l) : (size_t)size;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, size), 0);
	ck_assert_int_eq(pwrite(fd, l, len, 0), (ssize_t)len);
	if (seals)
		ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

static int segment_sealed(const struct shmring_layout *l)
{
	return segment_from_layout(l, (off_t)l->hdr.seg_size, F_SEAL_SHRINK | F_SEAL_GROW);
}

/* Attaching fd must fail with want and an error naming why; fd stays ours. */
static void assert_attach_fails(int fd, int want, const char *why)
{
	struct shmring r;
	int err = shmring_attach(&r, fd, SHMRING_CONSUMER);

	ck_assert_msg(err == want, "attach returned %d (%s), expected %d", err, shmring_error(&r),
	              want);
	ck_assert_msg(strstr(shmring_error(&r), why) != NULL, "error \"%s\" does not name \"%s\"",
	              shmring_error(&r), why);
	ck_assert_ptr_null(r.lay);
	if (fd >= 0) {
		ck_assert_msg(fcntl(fd, F_GETFD) >= 0, "a failed attach closed the caller's fd");
		close(fd);
	}
}

START_TEST(test_attach_accepts_handwritten_valid_layout)
{
	struct shmring_layout l;
	struct shmring r;

	layout_valid(&l, 16, 64);
	ck_assert_int_eq(shmring_attach(&r, segment_sealed(&l), SHMRING_CONSUMER), 0);
	ck_assert_uint_eq(r.capacity, 16);
	shmring_close(&r);
}
END_TEST

START_TEST(test_create_rejects_impossible_opts)
{
	static const struct {
		struct shmring_opts o;
		const char *why;
	} bad[] = {
	    {{.capacity = 1000}, "capacity"},   {{.capacity = 1u << 25}, "capacity"},
	    {{.slot_size = 8}, "slot size"},    {{.slot_size = 24}, "slot size"},
	    {{.slot_size = 8192}, "slot size"},
	};
	struct shmring r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(shmring_create(&r, &bad[i].o, SHMRING_PRODUCER), -EINVAL);
		ck_assert_msg(strstr(shmring_error(&r), bad[i].why), "case %zu: \"%s\"", i,
		              shmring_error(&r));
		ck_assert_int_eq(r.fd, -1);
	}
	ck_assert_int_eq(shmring_create(&r, NULL, (enum shmring_role)7), -EINVAL);
	ck_assert_ptr_nonnull(strstr(shmring_error(&r), "role"));
}
END_TEST

START_TEST(test_attach_rejects_bad_magic)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	l.hdr.magic ^= 1;
	assert_attach_fails(segment_sealed(&l), -ENOEXEC, "magic");
}
END_TEST

START_TEST(test_attach_rejects_other_abi)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	l.hdr.abi = SHMRING_ABI + 1;
	assert_attach_fails(segment_sealed(&l), -EPROTO, "ABI");
	layout_valid(&l, 16, 64);
	l.hdr.hdr_size = 256;
	assert_attach_fails(segment_sealed(&l), -EPROTO, "header size");
}
END_TEST

START_TEST(test_attach_rejects_segment_smaller_than_header)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	assert_attach_fails(segment_from_layout(&l, 100, F_SEAL_SHRINK | F_SEAL_GROW), -EINVAL,
	                    "smaller");
	assert_attach_fails(segment_from_layout(&l, 0, F_SEAL_SHRINK | F_SEAL_GROW), -EINVAL,
	                    "smaller");
	assert_attach_fails(
	    segment_from_layout(&l, SHMRING_SLOTS_OFF - 1, F_SEAL_SHRINK | F_SEAL_GROW), -EINVAL,
	    "smaller");
}
END_TEST

START_TEST(test_attach_rejects_bad_capacity)
{
	static const uint32_t caps[] = {0, 3, 24, 1000, 1u << 25, 1u << 31, UINT32_MAX};
	struct shmring_layout l;

	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		layout_valid(&l, 16, 64);
		l.hdr.capacity = caps[i];
		assert_attach_fails(segment_sealed(&l), -EINVAL, "capacity");
	}
}
END_TEST

START_TEST(test_attach_rejects_capacity_beyond_segment)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	l.hdr.capacity = 1u << 20; /* 64 MiB of slots in a 2 KiB segment */
	assert_attach_fails(segment_sealed(&l), -EINVAL, "do not fit");
	layout_valid(&l, 16, 64);
	l.hdr.capacity = SHMRING_MAX_CAPACITY;
	l.hdr.slot_size = SHMRING_MAX_SLOT; /* 2^36 bytes: overflows 32 bits */
	assert_attach_fails(segment_sealed(&l), -EINVAL, "do not fit");
	layout_valid(&l, 16, 64);
	l.hdr.capacity = 32; /* one slot-ring too many for the segment */
	assert_attach_fails(segment_sealed(&l), -EINVAL, "do not fit");
}
END_TEST

START_TEST(test_attach_rejects_bad_slot_size)
{
	static const uint32_t sizes[] = {0, 3, 8, 24, 8192, 1u << 20, UINT32_MAX};
	struct shmring_layout l;

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		layout_valid(&l, 16, 64);
		l.hdr.slot_size = sizes[i];
		assert_attach_fails(segment_sealed(&l), -EINVAL, "slot size");
	}
}
END_TEST

START_TEST(test_attach_rejects_slots_off_out_of_range)
{
	struct shmring_layout l;
	uint64_t seg = SHMRING_SLOTS_OFF + 16 * 64;
	const uint64_t offs[] = {
	    0,                                  /* slots over the header */
	    sizeof(struct shmring_layout) - 64, /* last header line */
	    SHMRING_SLOTS_OFF + 1,              /* not 64-byte aligned */
	    SHMRING_SLOTS_OFF + 64,             /* last slot past the end */
	    seg,                                /* all slots past the end */
	    seg + 4096,                         /* outside the segment */
	    UINT64_MAX & ~63ull,                /* wraps a 64-bit sum */
	};

	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		layout_valid(&l, 16, 64);
		l.hdr.slots_off = offs[i];
		assert_attach_fails(segment_sealed(&l), -EINVAL, "do not fit");
	}
}
END_TEST

START_TEST(test_attach_rejects_seg_size_other_than_file)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	l.hdr.seg_size += 4096;
	assert_attach_fails(
	    segment_from_layout(&l, SHMRING_SLOTS_OFF + 16 * 64, F_SEAL_SHRINK | F_SEAL_GROW),
	    -EINVAL, "segment has");
}
END_TEST

START_TEST(test_attach_rejects_unsealed_memfd)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	assert_attach_fails(segment_from_layout(&l, (off_t)l.hdr.seg_size, 0), -EBADF, "sealed");
	assert_attach_fails(segment_from_layout(&l, (off_t)l.hdr.seg_size, F_SEAL_SHRINK), -EBADF,
	                    "sealed");
	assert_attach_fails(segment_from_layout(&l, (off_t)l.hdr.seg_size, F_SEAL_GROW), -EBADF,
	                    "sealed");
}
END_TEST

START_TEST(test_attach_rejects_bad_fd_and_role)
{
	struct shmring_layout l;
	struct shmring r;
	int fd;

	assert_attach_fails(-1, -EBADF, "fstat");
	layout_valid(&l, 16, 64);
	fd = segment_sealed(&l);
	ck_assert_int_eq(shmring_attach(&r, fd, (enum shmring_role)0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(shmring_error(&r), "role"));
	close(fd);
}
END_TEST

START_TEST(test_attach_rejects_indices_more_than_capacity_apart)
{
	struct shmring_layout l;

	layout_valid(&l, 16, 64);
	atomic_store(&l.prod.idx, 17); /* tail 17 ahead of head 0 */
	assert_attach_fails(segment_sealed(&l), -EPROTO, "indices");
	layout_valid(&l, 16, 64);
	atomic_store(&l.cons.idx, 1); /* head past the tail */
	assert_attach_fails(segment_sealed(&l), -EPROTO, "indices");
	layout_valid(&l, 16, 64);
	atomic_store(&l.prod.idx, 5);
	atomic_store(&l.cons.idx, UINT32_MAX - 10); /* 16 apart across 2^32: legal */
	struct shmring r;
	ck_assert_int_eq(shmring_attach(&r, segment_sealed(&l), SHMRING_CONSUMER), 0);
	ck_assert_uint_eq(shmring_count(&r), 16);
	shmring_close(&r);
}
END_TEST

START_TEST(test_peek_accepts_tail_a_full_ring_ahead)
{
	struct shmring_opts o = {.capacity = 16};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 16), 16);
	ck_assert_int_eq(pop_values(&p.cons, 0, 4), 4);
	uint32_t head = atomic_load(&p.prod.lay->cons.idx);

	/* A tail exactly capacity ahead of the head is a full ring, not corruption. */
	atomic_store(&p.prod.lay->prod.idx, head + 16);
	ck_assert_int_eq(shmring_peek(&p.cons, 100, &pos), 16);
	ck_assert_uint_eq(pos, head);
	pair_close(&p);
}
END_TEST

START_TEST(test_corrupt_peer_stays_rejected)
{
	struct shmring_opts o = {.capacity = 16};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 3), 3);
	uint32_t good = atomic_load(&p.prod.lay->prod.idx);
	atomic_store(&p.prod.lay->prod.idx, good + 1000);
	ck_assert_int_eq(shmring_peek(&p.cons, 16, &pos), -EPROTO);
	/* The peer puts a plausible index back: it is still not believed. */
	atomic_store(&p.prod.lay->prod.idx, good);
	ck_assert_int_eq(shmring_peek(&p.cons, 1, &pos), -EPROTO);
	ck_assert_int_eq(shmring_wait(&p.cons, 100), -EPROTO);
	/* Same on the producer side for an impossible consumer head. */
	atomic_store(&p.prod.lay->cons.idx, good + 1000);
	ck_assert_int_eq(shmring_reserve(&p.prod, 16, &pos), -EPROTO);
	atomic_store(&p.prod.lay->cons.idx, good);
	ck_assert_int_eq(shmring_reserve(&p.prod, 1, &pos), -EPROTO);
	pair_close(&p);
}
END_TEST

START_TEST(test_peek_rejects_producer_tail_far_ahead)
{
	static const uint32_t ahead[] = {17, 1000, 0x80000000u, UINT32_MAX /* one behind */};

	for (size_t i = 0; i < sizeof(ahead) / sizeof(ahead[0]); i++) {
		struct shmring_opts o = {.capacity = 16, .start = UINT32_MAX - 7};
		struct ring_pair p;
		uint32_t pos = 0;

		pair_open(&p, &o);
		ck_assert_int_eq(push_values(&p.prod, 0, 5), 5);
		ck_assert_int_eq(pop_values(&p.cons, 0, 5), 5);
		uint32_t head = atomic_load(&p.prod.lay->cons.idx);

		/* The consumer has nothing cached, so it must read the bad tail:
		 * no entries, a reason, and no sleeping on it. */
		atomic_store(&p.prod.lay->prod.idx, head + ahead[i]);
		ck_assert_int_eq(shmring_peek(&p.cons, 1, &pos), -EPROTO);
		ck_assert_int_eq(shmring_peek(&p.cons, 100, &pos), -EPROTO);
		ck_assert_msg(strstr(shmring_error(&p.cons), "producer tail"), "case %zu: \"%s\"",
		              i, shmring_error(&p.cons));
		ck_assert_int_eq(p.cons.corrupt, 1);
		ck_assert_int_eq(shmring_wait(&p.cons, 1000), -EPROTO);
		ck_assert_int_eq(shmring_arm(&p.cons), 1); /* "entries": go and peek, get -EPROTO */
		ck_assert_uint_le(shmring_count(&p.cons), 16);
		pair_close(&p);
	}
}
END_TEST

START_TEST(test_reserve_rejects_impossible_consumer_head)
{
	static const uint32_t behind[] = {UINT32_MAX /* one past the tail */, 17, 1000,
	                                  0x80000000u};

	for (size_t i = 0; i < sizeof(behind) / sizeof(behind[0]); i++) {
		struct shmring_opts o = {.capacity = 16, .start = UINT32_MAX - 7};
		struct ring_pair p;
		uint32_t pos = 0;

		pair_open(&p, &o);
		ck_assert_int_eq(push_values(&p.prod, 0, 16), 16);
		uint32_t tail = atomic_load(&p.prod.lay->prod.idx);

		/* A full ring makes the producer re-read the head. */
		atomic_store(&p.cons.lay->cons.idx, tail - behind[i]);
		ck_assert_int_eq(shmring_reserve(&p.prod, 1, &pos), -EPROTO);
		ck_assert_int_eq(shmring_reserve(&p.prod, 16, &pos), -EPROTO);
		ck_assert_msg(strstr(shmring_error(&p.prod), "consumer head"), "case %zu: \"%s\"",
		              i, shmring_error(&p.prod));
		ck_assert_int_eq(p.prod.corrupt, 1);
		pair_close(&p);
	}
}
END_TEST

START_TEST(test_reserve_accepts_every_possible_consumer_head)
{
	struct shmring_opts o = {.capacity = 16, .start = UINT32_MAX - 7};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 16), 16);
	uint32_t tail = atomic_load(&p.prod.lay->prod.idx);

	/* Any head from a full ring behind the tail up to the tail is possible;
	 * the room it leaves is exactly what it released. */
	for (uint32_t free_slots = 0; free_slots <= 16; free_slots++) {
		atomic_store(&p.cons.lay->cons.idx, tail - 16 + free_slots);
		ck_assert_int_eq(shmring_reserve(&p.prod, 100, &pos), free_slots);
		ck_assert_uint_eq(pos, tail);
		shmring_cancel(&p.prod);
	}
	pair_close(&p);
}
END_TEST

/* ================================ runner ================================ */

static Suite *errors_suite(void)
{
	Suite *s = suite_create("shmring_errors");
	TCase *tc;

	tc = tcase(s, "errors", 10);
	tcase_add_test(tc, test_attach_accepts_handwritten_valid_layout);
	tcase_add_test(tc, test_create_rejects_impossible_opts);
	tcase_add_test(tc, test_attach_rejects_bad_magic);
	tcase_add_test(tc, test_attach_rejects_other_abi);
	tcase_add_test(tc, test_attach_rejects_segment_smaller_than_header);
	tcase_add_test(tc, test_attach_rejects_bad_capacity);
	tcase_add_test(tc, test_attach_rejects_capacity_beyond_segment);
	tcase_add_test(tc, test_attach_rejects_bad_slot_size);
	tcase_add_test(tc, test_attach_rejects_slots_off_out_of_range);
	tcase_add_test(tc, test_attach_rejects_seg_size_other_than_file);
	tcase_add_test(tc, test_attach_rejects_unsealed_memfd);
	tcase_add_test(tc, test_attach_rejects_bad_fd_and_role);
	tcase_add_test(tc, test_attach_rejects_indices_more_than_capacity_apart);
	tcase_add_test(tc, test_peek_accepts_tail_a_full_ring_ahead);
	tcase_add_test(tc, test_peek_rejects_producer_tail_far_ahead);
	tcase_add_test(tc, test_corrupt_peer_stays_rejected);
	tcase_add_test(tc, test_reserve_rejects_impossible_consumer_head);
	tcase_add_test(tc, test_reserve_accepts_every_possible_consumer_head);

	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(errors_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
