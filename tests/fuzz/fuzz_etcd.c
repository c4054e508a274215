/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes what a mover reads from etcd: the values under its cluster's
 * prefix, which anyone who can write the store controls, through the very
 * parsers the cluster thread calls (mover/cluster_keys.c): a member's JSON
 * with its base64 address blob, a name's JSON with its base64 region blob,
 * and base64 itself. Beside "no crash, no UB, no leak", it asserts that an
 * accepted value is whole: its blob decoded into the struct's bounds, its
 * ids agree, and its text fields are terminated; and that base64 decodes
 * what it encodes.
 *
 * Input: byte 0 picks the parser (0 member, 1 name, else base64), the rest
 * is the value as it came.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "mover.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[MV_ERRLEN] = "";

	if (size < 1)
		return 0;
	char *val = malloc(size);
	if (!val)
		return 0;
	memcpy(val, data + 1, size - 1);
	val[size - 1] = 0;
	switch (data[0] % 3) {
	case 0: {
		struct mv_member m;
		if (mv_cluster_parse_member(val, "tcp;ofi_rxm", &m, why, sizeof(why))) {
			assert(why[0]);
			break;
		}
		assert(m.bloblen <= sizeof(m.blob) && m.id == m.blob.mover_id);
		assert(memchr(m.host, 0, sizeof(m.host)) &&
		       memchr(m.release, 0, sizeof(m.release)));
		assert(m.nshards == m.blob.nshards && m.nshards >= 1 && m.nshards <= MV_MAX_SHARDS);
		break;
	}
	case 1: {
		struct mv_named n;
		if (mv_cluster_parse_name(val, &n, why, sizeof(why))) {
			assert(why[0]);
			break;
		}
		assert(n.bloblen <= sizeof(n.blob) && n.owner == n.blob.mover_id);
		assert(n.bloblen >= MV_REGION_BLOB_SIZE(n.blob.nshards));
		break;
	}
	default: {
		uint8_t out[4096], again[4096];
		char enc[4096 / 3 * 4 + 8];
		size_t len = strlen(val);
		long n = mv_b64_decode(val, len, out, sizeof(out));
		if (n < 0)
			break;
		assert((size_t)n <= len / 4 * 3);
		size_t e = mv_b64_encode(out, (size_t)n, enc, sizeof(enc));
		assert(e == ((size_t)n + 2) / 3 * 4);
		assert(mv_b64_decode(enc, e, again, sizeof(again)) == n &&
		       !memcmp(out, again, (size_t)n));
	}
	}
	free(val);
	return 0;
}
