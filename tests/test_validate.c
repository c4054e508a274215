/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the mover's checks on untrusted input: WRITE descriptors
 * against the client's regions and imports (bounds written so no sum can
 * wrap), and the address and region blobs peers hand each other.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "mover.h"

void mv_log(const char *fmt, ...)
{
	(void)fmt;
}

void mv_dbg(const char *fmt, ...)
{
	(void)fmt;
}

static struct mv_region src = {.id = 0x10001, .owner = 7, .len = 65536};
static struct mv_import dst = {.len = 4096};
#define DST_HANDLE 3u /* the client's handle for dst */

static int check(uint64_t so, uint64_t doff, uint64_t len, char *why, uint8_t *cause)
{
	struct mv_desc d = {.op = MV_OP_WRITE,
	                    .src = src.id,
	                    .dst = DST_HANDLE,
	                    .src_off = so,
	                    .dst_off = doff,
	                    .len = len};

	return mv_check_write(&d, &src, &dst, 7, why, MV_ERRLEN, cause);
}

START_TEST(test_write_inside_both_regions_passes)
{
	char why[MV_ERRLEN];
	uint8_t cause;

	ck_assert_int_eq(check(0, 0, 4096, why, &cause), 0);
	ck_assert_int_eq(check(65536 - 10, 4096 - 10, 10, why, &cause), 0);
}
END_TEST

START_TEST(test_write_past_source_end_names_sizes)
{
	char why[MV_ERRLEN];
	uint8_t cause;

	ck_assert_int_eq(check(65000, 0, 1000, why, &cause), -ERANGE);
	ck_assert_int_eq(cause, MV_CAUSE_BOUNDS);
	ck_assert_str_eq(why,
	                 "region 65537 is 65536 bytes; write of 1000 at offset 65000 exceeds it");
}
END_TEST

START_TEST(test_write_past_destination_end_is_refused)
{
	char why[MV_ERRLEN];
	uint8_t cause;

	ck_assert_int_eq(check(0, 1, 4096, why, &cause), -ERANGE);
	ck_assert_msg(strstr(why, "import 3 is 4096 bytes"), "%s", why);
}
END_TEST

START_TEST(test_wrapping_offsets_are_refused)
{
	char why[MV_ERRLEN];
	uint8_t cause;

	/* offset + len wraps to a small number: must not pass as in bounds */
	ck_assert_int_eq(check(UINT64_MAX - 10, 0, 100, why, &cause), -ERANGE);
	ck_assert_int_eq(check(0, UINT64_MAX, 2, why, &cause), -ERANGE);
	ck_assert_int_eq(check(16, 0, UINT64_MAX - 8, why, &cause), -ERANGE);
}
END_TEST

START_TEST(test_zero_length_and_foreign_regions_are_refused)
{
	char why[MV_ERRLEN];
	uint8_t cause;
	struct mv_desc d = {.op = MV_OP_WRITE, .src = src.id, .dst = 3, .len = 8};

	ck_assert_int_eq(check(0, 0, 0, why, &cause), -EINVAL);
	ck_assert_int_eq(cause, MV_CAUSE_BAD_DESC);
	ck_assert_int_eq(mv_check_write(&d, &src, &dst, 8, why, sizeof(why), &cause), -ENOENT);
	ck_assert_int_eq(cause, MV_CAUSE_NO_REGION);
	ck_assert_int_eq(mv_check_write(&d, NULL, &dst, 7, why, sizeof(why), &cause), -ENOENT);
	ck_assert_int_eq(mv_check_write(&d, &src, NULL, 7, why, sizeof(why), &cause), -ENOENT);
	ck_assert_int_eq(cause, MV_CAUSE_NO_IMPORT);
	ck_assert_msg(strstr(why, "destination 3"), "%s", why);
}
END_TEST

static struct mv_addr_blob good_addr(void)
{
	struct mv_addr_blob b = {.magic = MV_BLOB_MAGIC_ADDR,
	                         .version = MV_WIRE_VERSION,
	                         .nshards = 2,
	                         .mover_id = 42,
	                         .addrlen = 16};

	strcpy(b.provider, "tcp;ofi_rxm");
	return b;
}

START_TEST(test_address_blob_checks)
{
	char why[MV_ERRLEN];
	struct mv_addr_blob b = good_addr();
	size_t full = offsetof(struct mv_addr_blob, addr) + 2 * MV_MAX_ADDRLEN;

	ck_assert_int_eq(mv_check_addr_blob(&b, full, "tcp;ofi_rxm", why, sizeof(why)), 0);
	ck_assert_int_eq(mv_check_addr_blob(&b, 10, "tcp;ofi_rxm", why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "shorter than its header"), "%s", why);
	ck_assert_int_eq(mv_check_addr_blob(&b, full - 1, "tcp;ofi_rxm", why, sizeof(why)),
	                 -EINVAL);
	ck_assert_msg(strstr(why, "truncated"), "%s", why);
	ck_assert_int_eq(mv_check_addr_blob(&b, full, "shm", why, sizeof(why)), -EPROTONOSUPPORT);
	ck_assert_msg(strstr(why, "'tcp;ofi_rxm'") && strstr(why, "'shm'"), "%s", why);
	b.nshards = 0;
	ck_assert_int_eq(mv_check_addr_blob(&b, full, "tcp;ofi_rxm", why, sizeof(why)), -EINVAL);
	b = good_addr();
	b.addrlen = 1000;
	ck_assert_int_eq(mv_check_addr_blob(&b, full, "tcp;ofi_rxm", why, sizeof(why)), -EINVAL);
	b = good_addr();
	b.magic ^= 1;
	ck_assert_int_eq(mv_check_addr_blob(&b, full, "tcp;ofi_rxm", why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "not a mover address blob"), "%s", why);
}
END_TEST

START_TEST(test_region_blob_checks)
{
	char why[MV_ERRLEN];
	struct mv_region_blob b = {
	    .magic = MV_BLOB_MAGIC_REGION, .version = MV_WIRE_VERSION, .nshards = 4, .len = 100};

	ck_assert_int_eq(mv_check_region_blob(&b, MV_REGION_BLOB_SIZE(4), why, sizeof(why)), 0);
	ck_assert_int_eq(mv_check_region_blob(&b, MV_REGION_BLOB_SIZE(3), why, sizeof(why)),
	                 -EINVAL);
	ck_assert_msg(strstr(why, "names 4 shards"), "%s", why);
	b.nshards = MV_MAX_SHARDS + 1;
	ck_assert_int_eq(mv_check_region_blob(&b, sizeof(b), why, sizeof(why)), -EINVAL);
	b.nshards = 1;
	b.len = 0;
	ck_assert_int_eq(mv_check_region_blob(&b, sizeof(b), why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(mv_check_region_blob(&b, 3, why, sizeof(why)), -EINVAL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("validate");
	TCase *tw = tcase_create("descriptors");
	TCase *tb = tcase_create("blobs");

	tcase_add_test(tw, test_write_inside_both_regions_passes);
	tcase_add_test(tw, test_write_past_source_end_names_sizes);
	tcase_add_test(tw, test_write_past_destination_end_is_refused);
	tcase_add_test(tw, test_wrapping_offsets_are_refused);
	tcase_add_test(tw, test_zero_length_and_foreign_regions_are_refused);
	tcase_add_test(tb, test_address_blob_checks);
	tcase_add_test(tb, test_region_blob_checks);
	suite_add_tcase(s, tw);
	suite_add_tcase(s, tb);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
