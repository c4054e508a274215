/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the mover's checks on untrusted input: WRITE descriptors
 * against the client's regions and imports (bounds written so no sum can
 * wrap), the lists LIST descriptors name in the client's arena, the
 * address and region blobs peers hand each other, and control messages as
 * they come off a real socket pair (mover/msg_check.c).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster.h"
#include "mover.h"
#include "msg_check.h"

void mv_log(const char *fmt, ...)
{
	(void)fmt;
}

void mv_dbg(const char *fmt, ...)
{
	(void)fmt;
}

void mv_warn(const char *fmt, ...)
{
	(void)fmt;
}

void mv_error(const char *fmt, ...)
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

START_TEST(test_write_longer_than_one_descriptor_carries_is_refused)
{
	char why[MV_ERRLEN];
	uint8_t cause;
	struct mv_region big = src;
	struct mv_import far = dst;
	struct mv_desc d = {.op = MV_OP_WRITE, .src = src.id, .dst = DST_HANDLE};

	big.len = far.len = UINT64_MAX;
	d.len = MV_MAX_WRITE;
	ck_assert_int_eq(mv_check_write(&d, &big, &far, 7, why, sizeof(why), &cause), 0);
	for (uint64_t len = MV_MAX_WRITE + 1; len; len = len < (1ull << 63) ? len * 2 : 0) {
		d.len = len;
		ck_assert_int_eq(mv_check_write(&d, &big, &far, 7, why, sizeof(why), &cause),
		                 -EINVAL);
		ck_assert_int_eq(cause, MV_CAUSE_BAD_DESC);
	}
	d.len = UINT64_MAX;
	ck_assert_int_eq(mv_check_write(&d, &big, &far, 7, why, sizeof(why), &cause), -EINVAL);
	ck_assert_str_eq(why,
	                 "write of 18446744073709551615 bytes; one WRITE carries at most 1024 MiB");
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

/* Movers of another wire version refuse each other naming both releases,
 * read from the bytes every version from 5 keeps in place. */
START_TEST(test_address_blob_of_another_release_names_both)
{
	char why[MV_ERRLEN], want[MV_ERRLEN];
	struct mv_addr_blob b = good_addr();
	size_t full = offsetof(struct mv_addr_blob, addr) + 2 * MV_MAX_ADDRLEN;

	b.version = MV_WIRE_VERSION + 1;
	strcpy(b.release, "0.3.0");
	ck_assert_int_eq(mv_check_addr_blob(&b, full, "tcp;ofi_rxm", why, sizeof(why)), -EPROTO);
	snprintf(want, sizeof(want),
	         "peer is mover 0.3.0 (protocol %u); this is mover %s (protocol %u)",
	         MV_WIRE_VERSION + 1, MVC_VERSION, MV_WIRE_VERSION);
	ck_assert_str_eq(why, want);
	/* A newer blob may be laid out otherwise past the release: 24 bytes do. */
	ck_assert_int_eq(mv_check_addr_blob(&b, 24, "tcp;ofi_rxm", why, sizeof(why)), -EPROTO);
	ck_assert_str_eq(why, want);
	/* An older one (0.1.x: version 4) has the mover id where the release is. */
	b.version = 4;
	memcpy(b.release, "\x01\x02garbage\xff", 11);
	ck_assert_int_eq(mv_check_addr_blob(&b, full, "tcp;ofi_rxm", why, sizeof(why)), -EPROTO);
	ck_assert_msg(strstr(why, "peer is mover 0.1.x (protocol 4)") && strstr(why, MVC_VERSION),
	              "%s", why);
	/* A release of a newer peer is someone else's bytes: printed safely. */
	b.version = MV_WIRE_VERSION + 1;
	memset(b.release, '\n', sizeof(b.release));
	ck_assert_int_eq(mv_check_addr_blob(&b, full, "tcp;ofi_rxm", why, sizeof(why)), -EPROTO);
	ck_assert_msg(!strchr(why, '\n') && strstr(why, "????????????????"), "%s", why);
	/* Region blobs name the protocol too. */
	struct mv_region_blob r = {
	    .magic = MV_BLOB_MAGIC_REGION, .version = 4, .nshards = 1, .len = 100};
	ck_assert_int_eq(mv_check_region_blob(&r, sizeof(r), why, sizeof(why)), -EPROTO);
	ck_assert_msg(strstr(why, "protocol 4") && strstr(why, MVC_VERSION), "%s", why);
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

/* ---- lists in the arena ---- */

static _Alignas(64) uint8_t arena[1 << 16];

static struct mv_desc list_desc(uint64_t off, uint64_t first, uint64_t n)
{
	return (struct mv_desc){.op = MV_OP_LIST, .src_off = off, .dst_off = first, .len = n};
}

static void put_hdr(uint64_t off, uint32_t kind, uint32_t count, uint64_t page)
{
	struct mv_list_hdr h = {
	    .magic = MV_LIST_MAGIC, .kind = kind, .count = count, .page_size = page};
	memcpy(arena + off, &h, sizeof(h));
}

START_TEST(test_list_inside_the_arena_passes)
{
	struct mv_list_hdr h;
	char why[MV_ERRLEN];
	struct mv_desc d = list_desc(128, 10, 90);

	put_hdr(128, MV_LIST_PAGES, 100, 4096);
	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), 0);
	ck_assert_uint_eq(h.count, 100);
	/* The last list that fits the arena exactly. */
	uint32_t n = (uint32_t)((sizeof(arena) - 64 - 64) / 24);
	put_hdr(0, MV_LIST_SEGS, n, 0);
	d = list_desc(0, 0, n);
	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), 0);
}
END_TEST

START_TEST(test_list_outside_the_arena_is_refused)
{
	struct mv_list_hdr h;
	char why[MV_ERRLEN];
	struct mv_desc d = list_desc(sizeof(arena), 0, 1);

	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), -ERANGE);
	ck_assert_msg(strstr(why, "outside the 65536-byte arena"), "%s", why);
	d = list_desc(UINT64_MAX - 63, 0, 1);
	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), -ERANGE);
	d = list_desc(100, 0, 1); /* not aligned */
	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), -ERANGE);
	/* A count whose entries run past the end. */
	put_hdr(sizeof(arena) - 128, MV_LIST_PAGES, 9, 4096);
	d = list_desc(sizeof(arena) - 128, 0, 1);
	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), -ERANGE);
	ck_assert_msg(strstr(why, "9 entries"), "%s", why);
	put_hdr(0, MV_LIST_SEGS, UINT32_MAX, 0);
	d = list_desc(0, 0, 1);
	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), -ERANGE);
	ck_assert_int_eq(mv_check_list(&d, NULL, 0, &h, why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "no list arena"), "%s", why);
}
END_TEST

START_TEST(test_list_slices_that_lie_are_refused)
{
	struct mv_list_hdr h;
	char why[MV_ERRLEN];
	struct mv_desc d = list_desc(0, 90, 11);

	put_hdr(0, MV_LIST_PAGES, 100, 4096);
	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), -ERANGE);
	ck_assert_msg(strstr(why, "entries 90+11 of a list of 100"), "%s", why);
	d = list_desc(0, UINT64_MAX, 2);
	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), -ERANGE);
	d = list_desc(0, 0, 0);
	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), -ERANGE);
	put_hdr(0, MV_LIST_PAGES, 100, 0);
	d = list_desc(0, 0, 1);
	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), -EINVAL);
	put_hdr(0, 7, 100, 4096);
	ck_assert_int_eq(mv_check_list(&d, arena, sizeof(arena), &h, why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "kind 7"), "%s", why);
}
END_TEST

START_TEST(test_spans_that_wrap_or_overrun_are_refused)
{
	uint64_t off = 0;

	ck_assert_int_eq(mv_check_span(64, 3, 4096, 4096, 65536, &off), 0);
	ck_assert_uint_eq(off, 64 + 3 * 4096);
	ck_assert_int_eq(mv_check_span(0, 15, 4096, 4096, 65536, &off), 0);
	ck_assert_int_eq(mv_check_span(0, 16, 4096, 4096, 65536, &off), -ERANGE);
	ck_assert_int_eq(mv_check_span(1, 15, 4096, 4096, 65536, &off), -ERANGE);
	ck_assert_int_eq(mv_check_span(0, 1u << 24, 1ull << 40, 1, UINT64_MAX, &off), -EOVERFLOW);
	ck_assert_int_eq(mv_check_span(UINT64_MAX, 1, 1, 1, UINT64_MAX, &off), -EOVERFLOW);
	ck_assert_int_eq(mv_check_span(0, 0, 0, 0, 65536, &off), -ERANGE);
}
END_TEST

/* Sends a message of type with len payload bytes and nfds copies of one fd. */
static void send_msg(int sock, uint16_t type, const void *payload, uint32_t len, int nfds)
{
	struct mv_msg_hdr h = {
	    .magic = MV_WIRE_MAGIC, .version = MV_WIRE_VERSION, .type = type, .len = len};
	struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)payload, len}};
	union {
		char b[CMSG_SPACE(sizeof(int) * 253)];
		struct cmsghdr align;
	} cbuf;
	int fds[253];
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
	int fd = memfd_create("test_msg", MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	for (int i = 0; i < nfds; i++)
		fds[i] = fd;
	mv_fds_put_buf(&mh, cbuf.b, fds, nfds);
	ck_assert_int_eq(sendmsg(sock, &mh, 0), (ssize_t)(sizeof(h) + len));
	close(fd);
}

static int lowest_free_fd(void)
{
	int fd = dup(0);

	close(fd);
	return fd;
}

/* Found by tests/fuzz/fuzz_ctlmsg: MV_MAX_FDS had room for one fd less
 * than ATTACH carries on a mover of 64 shards, so the last was closed
 * unseen and every client of such a mover was refused. */
START_TEST(test_attach_of_64_shards_arrives_with_all_its_fds)
{
	static struct mv_rx m;
	struct mv_attach_req req = {.nshards = 64};
	char why[MV_ERRLEN] = "";
	int sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	send_msg(sv[0], MV_MSG_ATTACH, &req, sizeof(req), 2 * 64 + 2);
	ck_assert_int_eq(mv_msg_recv(sv[1], &m, why, sizeof(why)), 1);
	ck_assert_int_eq(m.nfds, 2 * 64 + 2);
	ck_assert_msg(mv_msg_need(&m, 64, why, sizeof(why)) == 0, "%s", why);
	ck_assert_int_eq(mv_msg_need(&m, 63, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "message type 2 needs 128 fds, got 130");
	mv_msg_close_fds(&m);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(test_message_with_more_fds_than_any_is_refused_and_closes_them)
{
	static struct mv_rx m;
	char why[MV_ERRLEN] = "";
	int sv[2], low;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	low = lowest_free_fd();
	send_msg(sv[0], MV_MSG_HELLO, NULL, 0, (int)MV_MAX_FDS + 1);
	ck_assert_int_eq(mv_msg_recv(sv[1], &m, why, sizeof(why)), -EMSGSIZE);
	ck_assert_msg(strstr(why, "with more than 130 fds"), "%s", why);
	mv_msg_close_fds(&m);
	ck_assert_int_eq(lowest_free_fd(), low);
	/* A REG with its one fd but a short payload: refused by its shape. */
	send_msg(sv[0], MV_MSG_REG, "x", 1, 1);
	ck_assert_int_eq(mv_msg_recv(sv[1], &m, why, sizeof(why)), 1);
	ck_assert_int_eq(mv_msg_need(&m, 2, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "message type 3 needs 24 payload bytes, got 1");
	mv_msg_close_fds(&m);
	ck_assert_int_eq(lowest_free_fd(), low);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(test_named_region_messages_need_their_whole_payload)
{
	static struct mv_rx m;
	struct mv_publish_req pub = {.region = 0x10001, .name = "kv/0"};
	struct mv_lookup_req look = {.timeout_ms = 100, .name = "kv/0"};
	char why[MV_ERRLEN] = "";
	int sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	send_msg(sv[0], MV_MSG_PUBLISH, &pub, sizeof(pub), 0);
	ck_assert_int_eq(mv_msg_recv(sv[1], &m, why, sizeof(why)), 1);
	ck_assert_msg(mv_msg_need(&m, 2, why, sizeof(why)) == 0, "%s", why);
	send_msg(sv[0], MV_MSG_LOOKUP, &look, sizeof(look) - 1, 0);
	ck_assert_int_eq(mv_msg_recv(sv[1], &m, why, sizeof(why)), 1);
	ck_assert_int_eq(mv_msg_need(&m, 2, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "message type 17 needs 72 payload bytes, got 71");
	send_msg(sv[0], MV_MSG_UNPUBLISH, &pub, sizeof(pub), 1); /* no fd belongs with it */
	ck_assert_int_eq(mv_msg_recv(sv[1], &m, why, sizeof(why)), 1);
	ck_assert_int_eq(mv_msg_need(&m, 2, why, sizeof(why)), -EBADMSG);
	mv_msg_close_fds(&m);
	send_msg(sv[0], MV_MSG_CLUSTER, NULL, 0, 0);
	ck_assert_int_eq(mv_msg_recv(sv[1], &m, why, sizeof(why)), 1);
	ck_assert_msg(mv_msg_need(&m, 2, why, sizeof(why)) == 0, "%s", why);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* ---- what the cluster's keys in etcd hold (cluster_keys.c) ---- */

START_TEST(test_a_name_value_parses_back_to_its_blob)
{
	struct mv_region_blob b = {.magic = MV_BLOB_MAGIC_REGION,
	                           .version = MV_WIRE_VERSION,
	                           .nshards = 2,
	                           .mover_id = 0x1234abcd,
	                           .region = 0x10001,
	                           .len = 4096};
	struct mv_named n;
	char why[MV_ERRLEN] = "";
	char *val = mv_cluster_name_value(&b, (uint32_t)MV_REGION_BLOB_SIZE(2));

	ck_assert_ptr_nonnull(val);
	ck_assert_msg(mv_cluster_parse_name(val, &n, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(n.owner, 0x1234abcd);
	ck_assert_uint_eq(n.bloblen, MV_REGION_BLOB_SIZE(2));
	ck_assert_int_eq(memcmp(&n.blob, &b, MV_REGION_BLOB_SIZE(2)), 0);
	free(val);
	/* An owner that is not the blob's mover, and values that are not ours. */
	ck_assert_int_eq(
	    mv_cluster_parse_name("{\"owner\":\"1\",\"blob\":\"eA==\"}", &n, why, sizeof(why)),
	    -EINVAL);
	ck_assert_int_eq(mv_cluster_parse_name("not json", &n, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "not a JSON object");
	ck_assert_int_eq(
	    mv_cluster_parse_name("{\"owner\":\"1\",\"blob\":\"!!!!\"}", &n, why, sizeof(why)),
	    -EINVAL);
	ck_assert_msg(strstr(why, "base64"), "%s", why);
}
END_TEST

START_TEST(test_names_and_base64_are_checked)
{
	uint8_t out[16];
	char enc[32];

	ck_assert(mv_name_ok("job7/prefill-0"));
	ck_assert(!mv_name_ok(""));
	ck_assert(!mv_name_ok("has space"));
	ck_assert(!mv_name_ok("new\nline"));
	char longname[80];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[79] = 0;
	ck_assert(!mv_name_ok(longname));
	ck_assert_uint_eq(mv_b64_encode("hello", 5, enc, sizeof(enc)), 8);
	ck_assert_str_eq(enc, "aGVsbG8=");
	ck_assert_int_eq(mv_b64_decode(enc, 8, out, sizeof(out)), 5);
	ck_assert_int_eq(memcmp(out, "hello", 5), 0);
	ck_assert_int_eq(mv_b64_decode("aGVsbG8", 7, out, sizeof(out)), -1);  /* not whole */
	ck_assert_int_eq(mv_b64_decode("aG=sbG8=", 8, out, sizeof(out)), -1); /* pad inside */
	ck_assert_int_eq(mv_b64_decode(enc, 8, out, 4), -1);                  /* no room */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("validate");
	TCase *tw = tcase_create("descriptors");
	TCase *tb = tcase_create("blobs");
	TCase *tl = tcase_create("lists");
	TCase *tm = tcase_create("messages");

	tcase_add_test(tw, test_write_inside_both_regions_passes);
	tcase_add_test(tw, test_write_longer_than_one_descriptor_carries_is_refused);
	tcase_add_test(tw, test_write_past_source_end_names_sizes);
	tcase_add_test(tw, test_write_past_destination_end_is_refused);
	tcase_add_test(tw, test_wrapping_offsets_are_refused);
	tcase_add_test(tw, test_zero_length_and_foreign_regions_are_refused);
	tcase_add_test(tb, test_address_blob_checks);
	tcase_add_test(tb, test_address_blob_of_another_release_names_both);
	tcase_add_test(tb, test_region_blob_checks);
	suite_add_tcase(s, tw);
	tcase_add_test(tl, test_list_inside_the_arena_passes);
	tcase_add_test(tl, test_list_outside_the_arena_is_refused);
	tcase_add_test(tl, test_list_slices_that_lie_are_refused);
	tcase_add_test(tl, test_spans_that_wrap_or_overrun_are_refused);
	suite_add_tcase(s, tb);
	suite_add_tcase(s, tl);
	tcase_add_test(tm, test_attach_of_64_shards_arrives_with_all_its_fds);
	tcase_add_test(tm, test_message_with_more_fds_than_any_is_refused_and_closes_them);
	tcase_add_test(tm, test_named_region_messages_need_their_whole_payload);
	tcase_add_test(tb, test_a_name_value_parses_back_to_its_blob);
	tcase_add_test(tb, test_names_and_base64_are_checked);
	suite_add_tcase(s, tm);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
