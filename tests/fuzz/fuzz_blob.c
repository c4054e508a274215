/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the address and region blobs that come from peers, through the
 * checks PEER_ADD and IMPORT apply (mv_check_addr_blob(),
 * mv_check_region_blob()), copied into a zeroed blob the way control.c
 * copies a payload. An accepted blob must hold every byte registry.c then
 * reads from it inside what arrived: each shard's fabric address and key,
 * never the zeros past the end of a truncated blob.
 *
 * Input: byte 0 picks the blob (even: address, odd: region), the rest is
 * the blob as it arrived.
 */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "mover.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[MV_ERRLEN] = "";

	if (size < 1)
		return 0;
	size_t len = size - 1;
	if (!(data[0] & 1)) {
		struct mv_addr_blob b = {0};
		memcpy(&b, data + 1, len < sizeof(b) ? len : sizeof(b));
		if (mv_check_addr_blob(&b, len, "tcp;ofi_rxm", why, sizeof(why))) {
			assert(why[0]);
			return 0;
		}
		assert(b.magic == MV_BLOB_MAGIC_ADDR && b.version == MV_WIRE_VERSION);
		assert(b.nshards >= 1 && b.nshards <= MV_MAX_SHARDS);
		assert(b.addrlen >= 1 && b.addrlen <= MV_MAX_ADDRLEN);
		assert(!strncmp(b.provider, "tcp;ofi_rxm", sizeof(b.provider)));
		/* mv_peer_add() and the shards read addr[s][0, addrlen) and bell[s]. */
		size_t last = offsetof(struct mv_addr_blob, addr) +
		              (size_t)(b.nshards - 1) * MV_MAX_ADDRLEN + b.addrlen;
		assert(last <= len);
		assert(offsetof(struct mv_addr_blob, bell) + b.nshards * 16u <= len);
	} else {
		struct mv_region_blob b = {0};
		memcpy(&b, data + 1, len < sizeof(b) ? len : sizeof(b));
		if (mv_check_region_blob(&b, len, why, sizeof(why))) {
			assert(why[0]);
			return 0;
		}
		assert(b.magic == MV_BLOB_MAGIC_REGION && b.version == MV_WIRE_VERSION);
		assert(b.nshards >= 1 && b.nshards <= MV_MAX_SHARDS && b.len);
		/* mv_import_add() reads shard[s] for every s below nshards. */
		assert(offsetof(struct mv_region_blob, shard) + b.nshards * 16u <= len);
	}
	return 0;
}
