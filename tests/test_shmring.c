/* SPDX-License-Identifier: MIT */
/*
 * The check suite of the shmring library's API in one process, both ends of
 * a ring mapped here: api, wrap (indices across 2^32) and full_empty. A
 * hostile or corrupt peer is tests/test_shmring_errors.c; producer and
 * consumer in two processes or two threads, tests/test_shmring_procs.c.
 */
#include "shmring.h"

#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmring_desc.h"
#include "shmring_util.h"

/* ================================ api ================================ */

START_TEST(test_create_and_attach_map_one_sealed_segment)
{
	struct shmring_opts o = {.capacity = 64, .slot_size = 128, .user = 0xfeedull};
	struct ring_pair p;
	struct stat st;
	int seals;

	pair_open(&p, &o);
	ck_assert_uint_eq(p.cons.capacity, 64);
	ck_assert_uint_eq(p.cons.slot_size, 128);
	ck_assert_uint_eq(p.cons.mask, 63);
	ck_assert_uint_eq(p.cons.lay->hdr.user, 0xfeedull);
	ck_assert_int_eq(p.cons.lay->hdr.magic == SHMRING_MAGIC, 1);
	ck_assert_uint_eq(p.cons.lay->hdr.abi, SHMRING_ABI);
	ck_assert_int_eq(atomic_load(&p.cons.lay->prod.pid), getpid());
	ck_assert_int_eq(atomic_load(&p.cons.lay->cons.pid), getpid());

	ck_assert_int_eq(fstat(shmring_fd(&p.prod), &st), 0);
	ck_assert_int_eq(st.st_size, SHMRING_SLOTS_OFF + 64 * 128);
	seals = fcntl(shmring_fd(&p.prod), F_GET_SEALS);
	ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
	                 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);

	/* Two mappings of one segment: a write through one is read through the other. */
	ck_assert_ptr_ne(p.prod.lay, p.cons.lay);
	memset(shmring_slot(&p.prod, 5), 0xa5, 128);
	ck_assert_int_eq(((uint8_t *)shmring_slot(&p.cons, 5))[127], 0xa5);
	pair_close(&p);
}
END_TEST

START_TEST(test_batches_round_trip_in_order)
{
	struct shmring_opts o = {.capacity = 256};
	struct ring_pair p;
	uint64_t sent = 0, got = 0;

	pair_open(&p, &o);
	for (uint32_t batch = 1; batch <= 256; batch += 17) {
		for (int round = 0; round < 20; round++) {
			ck_assert_int_eq(push_values(&p.prod, sent, batch), batch);
			sent += batch;
			/* Consume in two parts to check partial releases too. */
			uint32_t half = batch / 2;
			ck_assert_int_eq(pop_values(&p.cons, got, half), half);
			got += half;
			ck_assert_int_eq(pop_values(&p.cons, got, batch), batch - half);
			got += batch - half;
		}
	}
	ck_assert_uint_eq(sent, got);
	pair_close(&p);
}
END_TEST

START_TEST(test_uncommitted_slots_stay_invisible)
{
	struct ring_pair p;
	uint32_t pos = 0, cpos = 0;

	pair_open(&p, NULL);
	ck_assert_int_eq(shmring_reserve(&p.prod, 3, &pos), 3);
	for (uint32_t i = 0; i < 3; i++)
		*(uint64_t *)shmring_slot(&p.prod, pos + i) = 40 + i;
	ck_assert_int_eq(shmring_peek(&p.cons, 3, &cpos), 0);
	ck_assert_uint_eq(shmring_count(&p.cons), 0);
	shmring_commit(&p.prod);
	ck_assert_uint_eq(shmring_count(&p.cons), 3);
	ck_assert_int_eq(pop_values(&p.cons, 40, 3), 3);
	pair_close(&p);
}
END_TEST

START_TEST(test_peek_without_release_returns_same_slots)
{
	struct ring_pair p;
	uint32_t pos1 = 0, pos2 = 0;

	pair_open(&p, NULL);
	ck_assert_int_eq(push_values(&p.prod, 100, 5), 5);
	ck_assert_int_eq(shmring_peek(&p.cons, 8, &pos1), 5);
	ck_assert_int_eq(shmring_peek(&p.cons, 8, &pos2), 5);
	ck_assert_uint_eq(pos1, pos2);
	shmring_release(&p.cons, 2);
	ck_assert_int_eq(shmring_peek(&p.cons, 8, &pos2), 3);
	ck_assert_uint_eq(pos2, pos1 + 2);
	ck_assert_uint_eq(*(uint64_t *)shmring_slot(&p.cons, pos2), 102);
	pair_close(&p);
}
END_TEST

START_TEST(test_cancel_and_unreserve_drop_uncommitted_slots)
{
	struct shmring_opts o = {.capacity = 16};
	struct ring_pair p;
	uint32_t pos = 0, again = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 2), 2);
	ck_assert_uint_eq(shmring_reserved(&p.prod), 0);
	ck_assert_int_eq(shmring_reserve(&p.prod, 10, &pos), 10);
	ck_assert_uint_eq(shmring_reserved(&p.prod), 10);

	/* Give back the last 4: the next reserve starts where they began. */
	shmring_unreserve(&p.prod, 4);
	ck_assert_uint_eq(shmring_reserved(&p.prod), 6);
	ck_assert_int_eq(shmring_reserve(&p.prod, 1, &again), 1);
	ck_assert_uint_eq(again, pos + 6);

	/* Cancel all of them: none is ever seen, the room is back. */
	shmring_cancel(&p.prod);
	ck_assert_uint_eq(shmring_reserved(&p.prod), 0);
	shmring_commit(&p.prod);
	ck_assert_uint_eq(shmring_count(&p.cons), 2);
	ck_assert_int_eq(shmring_reserve(&p.prod, 100, &again), 14);
	ck_assert_uint_eq(again, pos);
	shmring_cancel(&p.prod);
	ck_assert_int_eq(pop_values(&p.cons, 0, 16), 2);
	ck_assert_int_eq(push_values(&p.prod, 2, 3), 3);
	ck_assert_int_eq(pop_values(&p.cons, 2, 16), 3);
	pair_close(&p);
}
END_TEST

START_TEST(test_slot_size_chosen_at_creation)
{
	static const uint32_t sizes[] = {16, 64, 256, 4096};

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		struct shmring_opts o = {.capacity = 32, .slot_size = sizes[s]};
		struct ring_pair p;
		uint32_t pos = 0;

		pair_open(&p, &o);
		ck_assert_uint_eq(p.prod.slot_size, sizes[s]);
		ck_assert_uint_eq(p.cons.slot_size, sizes[s]);
		ck_assert_uint_eq((uint8_t *)shmring_slot(&p.prod, 1) -
		                      (uint8_t *)shmring_slot(&p.prod, 0),
		                  sizes[s]);
		/* Fill every slot to its last byte; no slot may overwrite a neighbour. */
		for (int lap = 0; lap < 3; lap++) {
			ck_assert_int_eq(shmring_reserve(&p.prod, 32, &pos), 32);
			for (uint32_t i = 0; i < 32; i++)
				memset(shmring_slot(&p.prod, pos + i), (int)(i + (uint32_t)lap),
				       sizes[s]);
			shmring_commit(&p.prod);
			ck_assert_int_eq(shmring_peek(&p.cons, 32, &pos), 32);
			for (uint32_t i = 0; i < 32; i++) {
				const uint8_t *b = shmring_slot(&p.cons, pos + i);

				for (uint32_t k = 0; k < sizes[s]; k++)
					require(b[k] == (uint8_t)(i + (uint32_t)lap),
					        "slot %u byte %u of %u", i, k, sizes[s]);
			}
			shmring_release(&p.cons, 32);
		}
		pair_close(&p);
	}
}
END_TEST

START_TEST(test_default_sizes_without_opts)
{
	struct shmring r;
	struct stat st;

	ck_assert_int_eq(shmring_create(&r, NULL, SHMRING_PRODUCER), 0);
	ck_assert_uint_eq(r.capacity, 1024);
	ck_assert_uint_eq(r.slot_size, 64);
	ck_assert_int_eq(fstat(shmring_fd(&r), &st), 0);
	ck_assert_int_eq(st.st_size, SHMRING_SLOTS_OFF + 1024 * 64);
	ck_assert_uint_eq(r.lay->hdr.seg_size, (uint64_t)st.st_size);
	shmring_close(&r);
}
END_TEST

START_TEST(test_creator_may_take_either_role)
{
	struct shmring c, pr;

	ck_assert_int_eq(shmring_create(&c, NULL, SHMRING_CONSUMER), 0);
	ck_assert_int_eq(shmring_attach(&pr, dup(shmring_fd(&c)), SHMRING_PRODUCER), 0);
	ck_assert_int_eq(push_values(&pr, 7, 1024), 1024);
	ck_assert_int_eq(push_values(&pr, 0, 1), 0);
	ck_assert_int_eq(pop_values(&c, 7, 2000), 1024);
	shmring_close(&pr);
	shmring_close(&c);
}
END_TEST

START_TEST(test_close_is_safe_on_zeroed_and_closed_handles)
{
	struct shmring r = {0};

	r.fd = r.pidfd = -1;
	shmring_close(&r);
	ck_assert_int_eq(shmring_create(&r, NULL, SHMRING_PRODUCER), 0);
	shmring_close(&r);
	shmring_close(&r);
	ck_assert_ptr_null(r.lay);
}
END_TEST

START_TEST(test_arm_reports_entries_or_sets_need_wakeup)
{
	struct ring_pair p;

	pair_open(&p, NULL);
	ck_assert_int_eq(shmring_arm(&p.cons), 0);
	ck_assert_uint_eq(atomic_load(&p.cons.lay->sleep.flags) & SHMRING_NEED_WAKEUP,
	                  SHMRING_NEED_WAKEUP);
	/* The commit sees the flag, clears it and bumps the futex word. */
	uint32_t seq = atomic_load(&p.cons.lay->sleep.wake_seq);
	ck_assert_int_eq(push_values(&p.prod, 1, 1), 1);
	ck_assert_uint_eq(atomic_load(&p.cons.lay->sleep.flags) & SHMRING_NEED_WAKEUP, 0);
	ck_assert_uint_eq(atomic_load(&p.cons.lay->sleep.wake_seq), seq + 1);
	shmring_disarm(&p.cons);

	/* Entries already there: arming reports them and leaves no flag behind. */
	ck_assert_int_eq(shmring_arm(&p.cons), 1);
	ck_assert_uint_eq(atomic_load(&p.cons.lay->sleep.flags) & SHMRING_NEED_WAKEUP, 0);
	ck_assert_int_eq(shmring_wait(&p.cons, -1), 1);
	pair_close(&p);
}
END_TEST

START_TEST(test_watch_peer_needs_a_recorded_pid)
{
	struct shmring c;

	ck_assert_int_eq(shmring_create(&c, NULL, SHMRING_CONSUMER), 0);
	ck_assert_int_eq(shmring_peer_alive(&c), -ENOTCONN);
	ck_assert_int_eq(shmring_watch_peer(&c, 0), -ENOTCONN);
	ck_assert_ptr_nonnull(strstr(shmring_error(&c), "pid"));
	if (pidfd_supported(&c)) {
		ck_assert_int_ge(shmring_peer_pidfd(&c), 0);
		ck_assert_int_eq(shmring_peer_alive(&c), 1);
	}
	shmring_close(&c);
}
END_TEST

/* ================================ wrap ================================ */

/* Stream count values through a ring whose indices start at start, in batches
 * of varying size, keeping up to a full ring in flight. Returns whether the
 * index wrapped past 2^32 on the way. */
static int stream_across(uint32_t start, uint32_t capacity, uint64_t count)
{
	struct shmring_opts o = {.capacity = capacity, .start = start};
	struct ring_pair p;
	uint64_t sent = 0, got = 0, state = 88172645463325252ull;
	int wrapped = 0;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(shmring_reserve(&p.prod, 0, &pos), 0);
	ck_assert_uint_eq(pos, start);
	while (got < count) {
		uint32_t n = next_batch(&state, 0);

		if (sent < count) {
			if (n > count - sent)
				n = (uint32_t)(count - sent);
			sent += (uint64_t)push_values(&p.prod, sent, n);
		}
		int k = shmring_peek(&p.cons, next_batch(&state, 0), &pos);
		require(k >= 0, "peek: %s", shmring_error(&p.cons));
		if (k > 0 && pos + (uint32_t)k - 1 < pos)
			wrapped = 1;
		if (k > 0 && pos < start)
			wrapped = 1;
		require(pop_values(&p.cons, got, (uint32_t)k) == k, "entries vanished at %" PRIu64,
		        got);
		got += (uint64_t)k;
	}
	ck_assert_uint_eq(shmring_count(&p.cons), 0);
	pair_close(&p);
	return wrapped;
}

START_TEST(test_stream_crosses_2_32_from_max_minus_5)
{
	ck_assert_int_eq(stream_across(UINT32_MAX - 5, 16, 2000), 1);
}
END_TEST

START_TEST(test_stream_crosses_2_32_from_max_minus_1000)
{
	ck_assert_int_eq(stream_across(UINT32_MAX - 1000, 1024, 20000), 1);
}
END_TEST

START_TEST(test_full_and_empty_detected_across_2_32)
{
	struct shmring_opts o = {.capacity = 8, .start = UINT32_MAX - 3};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 8), 8); /* tail is now 4 */
	ck_assert_uint_eq(atomic_load(&p.prod.lay->prod.idx), 4);
	ck_assert_int_eq(shmring_reserve(&p.prod, 1, &pos), 0);
	ck_assert_uint_eq(shmring_count(&p.cons), 8);
	ck_assert_int_eq(pop_values(&p.cons, 0, 9), 8);
	ck_assert_int_eq(shmring_peek(&p.cons, 1, &pos), 0);
	ck_assert_int_eq(push_values(&p.prod, 8, 3), 3);
	ck_assert_int_eq(pop_values(&p.cons, 8, 3), 3);
	pair_close(&p);
}
END_TEST

START_TEST(test_attach_accepts_indices_straddling_2_32)
{
	struct shmring_opts o = {.capacity = 16, .start = UINT32_MAX - 2};
	struct ring_pair p;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 50, 10), 10); /* tail 7, head 2^32 - 3 */
	shmring_close(&p.cons);
	ck_assert_int_eq(shmring_attach(&p.cons, dup(shmring_fd(&p.prod)), SHMRING_CONSUMER), 0);
	ck_assert_int_eq(pop_values(&p.cons, 50, 16), 10);
	pair_close(&p);
}
END_TEST

/* ============================= full_empty ============================= */

START_TEST(test_reserve_on_full_ring_returns_zero)
{
	struct shmring_opts o = {.capacity = 16};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 16), 16);
	ck_assert_int_eq(shmring_reserve(&p.prod, 1, &pos), 0);
	ck_assert_int_eq(shmring_reserve(&p.prod, 100, &pos), 0);
	ck_assert_uint_eq(shmring_count(&p.prod), 16);
	/* One release makes room for exactly one. */
	ck_assert_int_eq(pop_values(&p.cons, 0, 1), 1);
	ck_assert_int_eq(shmring_reserve(&p.prod, 100, &pos), 1);
	ck_assert_int_eq(shmring_reserve(&p.prod, 1, &pos), 0);
	pair_close(&p);
}
END_TEST

START_TEST(test_peek_on_empty_ring_returns_zero)
{
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, NULL);
	ck_assert_int_eq(shmring_peek(&p.cons, 1, &pos), 0);
	ck_assert_int_eq(shmring_peek(&p.cons, 1000, &pos), 0);
	ck_assert_int_eq(push_values(&p.prod, 0, 4), 4);
	ck_assert_int_eq(pop_values(&p.cons, 0, 4), 4);
	ck_assert_int_eq(shmring_peek(&p.cons, 1, &pos), 0);
	ck_assert_int_eq(shmring_wait(&p.cons, 0), 0);
	pair_close(&p);
}
END_TEST

START_TEST(test_reserve_returns_what_fits)
{
	struct shmring_opts o = {.capacity = 8};
	struct ring_pair p;
	uint32_t pos = 0, first = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(shmring_reserve(&p.prod, 5, &first), 5);
	ck_assert_int_eq(shmring_reserve(&p.prod, 5, &pos), 3);
	ck_assert_uint_eq(pos, first + 5);
	/* Reserved but uncommitted slots count toward full. */
	ck_assert_int_eq(shmring_reserve(&p.prod, 5, &pos), 0);
	for (uint32_t i = 0; i < 8; i++)
		*(uint64_t *)shmring_slot(&p.prod, first + i) = i;
	shmring_commit(&p.prod);
	ck_assert_int_eq(pop_values(&p.cons, 0, 2), 2);
	ck_assert_int_eq(shmring_reserve(&p.prod, 5, &pos), 2);
	pair_close(&p);
}
END_TEST

START_TEST(test_peek_returns_what_is_committed)
{
	struct shmring_opts o = {.capacity = 64};
	struct ring_pair p;
	uint32_t pos = 0;

	pair_open(&p, &o);
	ck_assert_int_eq(push_values(&p.prod, 0, 3), 3);
	ck_assert_int_eq(shmring_peek(&p.cons, 10, &pos), 3);
	ck_assert_int_eq(push_values(&p.prod, 3, 20), 20);
	/* A cached tail that covers the request is enough; a larger request re-reads it. */
	ck_assert_int_eq(shmring_peek(&p.cons, 2, &pos), 2);
	ck_assert_int_eq(shmring_peek(&p.cons, 30, &pos), 23);
	ck_assert_int_eq(pop_values(&p.cons, 0, 23), 23);
	pair_close(&p);
}
END_TEST

/* ================================ runner ================================ */

static Suite *shmring_suite(void)
{
	Suite *s = suite_create("shmring");
	TCase *tc;

	tc = tcase(s, "api", 10);
	tcase_add_test(tc, test_create_and_attach_map_one_sealed_segment);
	tcase_add_test(tc, test_batches_round_trip_in_order);
	tcase_add_test(tc, test_uncommitted_slots_stay_invisible);
	tcase_add_test(tc, test_peek_without_release_returns_same_slots);
	tcase_add_test(tc, test_cancel_and_unreserve_drop_uncommitted_slots);
	tcase_add_test(tc, test_slot_size_chosen_at_creation);
	tcase_add_test(tc, test_default_sizes_without_opts);
	tcase_add_test(tc, test_creator_may_take_either_role);
	tcase_add_test(tc, test_close_is_safe_on_zeroed_and_closed_handles);
	tcase_add_test(tc, test_arm_reports_entries_or_sets_need_wakeup);
	tcase_add_test(tc, test_watch_peer_needs_a_recorded_pid);

	tc = tcase(s, "wrap", 10);
	tcase_add_test(tc, test_stream_crosses_2_32_from_max_minus_5);
	tcase_add_test(tc, test_stream_crosses_2_32_from_max_minus_1000);
	tcase_add_test(tc, test_full_and_empty_detected_across_2_32);
	tcase_add_test(tc, test_attach_accepts_indices_straddling_2_32);

	tc = tcase(s, "full_empty", 10);
	tcase_add_test(tc, test_reserve_on_full_ring_returns_zero);
	tcase_add_test(tc, test_peek_on_empty_ring_returns_zero);
	tcase_add_test(tc, test_reserve_returns_what_fits);
	tcase_add_test(tc, test_peek_returns_what_is_committed);

	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(shmring_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
