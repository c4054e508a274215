/* SPDX-License-Identifier: MIT */
/*
 * Checks of everything a client or a remote mover hands us: WRITE
 * descriptors against the client's own regions and imports, and address and
 * region blobs. Pure functions of their inputs, so the unit tests drive them
 * directly; every refusal says what was wrong in numbers.
 */
#include "mover.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int mv_check_write(const struct mv_desc *d, const struct mv_region *src,
                   const struct mv_import *dst, uint32_t owner, char *why, size_t whylen,
                   uint8_t *cause)
{
	if (!src || src->owner != owner) {
		*cause = MV_CAUSE_NO_REGION;
		snprintf(why, whylen, "source region %u is not one of this client's regions",
		         d->src);
		return -ENOENT;
	}
	if (!dst) {
		*cause = MV_CAUSE_NO_IMPORT;
		snprintf(why, whylen, "destination %u is not an imported region of this client",
		         d->dst);
		return -ENOENT;
	}
	if (d->len == 0) {
		*cause = MV_CAUSE_BAD_DESC;
		snprintf(why, whylen, "write of 0 bytes from region %u", d->src);
		return -EINVAL;
	}
	/* Written so that no sum can wrap: off <= len and len - off >= n. */
	if (d->src_off > src->len || src->len - d->src_off < d->len) {
		*cause = MV_CAUSE_BOUNDS;
		snprintf(why, whylen,
		         "region %u is %" PRIu64 " bytes; write of %" PRIu64 " at offset %" PRIu64
		         " exceeds it",
		         d->src, src->len, d->len, d->src_off);
		return -ERANGE;
	}
	if (d->dst_off > dst->len || dst->len - d->dst_off < d->len) {
		*cause = MV_CAUSE_BOUNDS;
		snprintf(why, whylen,
		         "remote region of import %u is %" PRIu64 " bytes; write of %" PRIu64
		         " at offset %" PRIu64 " exceeds it",
		         d->dst, dst->len, d->len, d->dst_off);
		return -ERANGE;
	}
	/* Bounds what one descriptor can ask of the shard's op pool. */
	if (d->len > MV_MAX_WRITE) {
		*cause = MV_CAUSE_BAD_DESC;
		snprintf(why, whylen,
		         "write of %" PRIu64 " bytes; one WRITE carries at most %llu MiB", d->len,
		         (unsigned long long)(MV_MAX_WRITE >> 20));
		return -EINVAL;
	}
	return 0;
}

void mv_release_text(const char *raw, char out[MV_RELEASE_LEN + 1])
{
	size_t i;

	for (i = 0; i < MV_RELEASE_LEN && raw[i]; i++)
		out[i] = raw[i] > ' ' && raw[i] < 127 ? raw[i] : '?';
	out[i] = 0;
}

int mv_check_addr_blob(const struct mv_addr_blob *b, size_t len, const char *prov, char *why,
                       size_t whylen)
{
	/* The version first, from the bytes every version keeps in place, so a
	 * peer of another release is named as such and not as a bad blob. */
	if (len < offsetof(struct mv_addr_blob, nshards) || b->magic != MV_BLOB_MAGIC_ADDR) {
		snprintf(why, whylen, "not a mover address blob (%zu bytes, magic %#x)", len,
		         len >= sizeof(b->magic) ? b->magic : 0);
		return -EINVAL;
	}
	if (b->version != MV_WIRE_VERSION) {
		char rel[MV_RELEASE_LEN + 1] = "";
		if (b->version >= 5 && len >= MV_ADDR_RELEASE_END)
			mv_release_text(b->release, rel);
		if (rel[0])
			snprintf(why, whylen,
			         "peer is mover %s (protocol %u); this is mover %s (protocol %u)",
			         rel, b->version, MVC_VERSION, MV_WIRE_VERSION);
		else
			snprintf(why, whylen,
			         "peer is mover %s (protocol %u); this is mover %s (protocol %u)",
			         b->version == 4  ? "0.1.x"
			         : b->version < 4 ? "< 0.1"
			                          : "?",
			         b->version, MVC_VERSION, MV_WIRE_VERSION);
		return -EPROTO;
	}
	if (len < offsetof(struct mv_addr_blob, addr)) {
		snprintf(why, whylen, "address blob is %zu bytes, shorter than its header (%zu)",
		         len, offsetof(struct mv_addr_blob, addr));
		return -EINVAL;
	}
	if (b->nshards == 0 || b->nshards > MV_MAX_SHARDS || b->addrlen == 0 ||
	    b->addrlen > MV_MAX_ADDRLEN) {
		snprintf(why, whylen, "address blob has %u shards of %u-byte addresses", b->nshards,
		         b->addrlen);
		return -EINVAL;
	}
	if (len < offsetof(struct mv_addr_blob, addr) + (size_t)b->nshards * MV_MAX_ADDRLEN) {
		snprintf(why, whylen, "address blob of %u shards is truncated at %zu bytes",
		         b->nshards, len);
		return -EINVAL;
	}
	if (strncmp(b->provider, prov, sizeof(b->provider))) {
		snprintf(why, whylen, "peer speaks provider '%.32s', this mover '%s'", b->provider,
		         prov);
		return -EPROTONOSUPPORT;
	}
	return 0;
}

int mv_check_region_blob(const struct mv_region_blob *b, size_t len, char *why, size_t whylen)
{
	if (len < offsetof(struct mv_region_blob, shard)) {
		snprintf(why, whylen, "region blob is %zu bytes, shorter than its header", len);
		return -EINVAL;
	}
	if (b->magic != MV_BLOB_MAGIC_REGION) {
		snprintf(why, whylen, "not a mover region blob (magic %#x)", b->magic);
		return -EINVAL;
	}
	if (b->version != MV_WIRE_VERSION) {
		snprintf(why, whylen, "region blob of protocol %u; this is mover %s (protocol %u)",
		         b->version, MVC_VERSION, MV_WIRE_VERSION);
		return -EPROTO;
	}
	if (b->nshards == 0 || b->nshards > MV_MAX_SHARDS ||
	    len < MV_REGION_BLOB_SIZE(b->nshards)) {
		snprintf(why, whylen, "region blob names %u shards in %zu bytes", b->nshards, len);
		return -EINVAL;
	}
	if (b->len == 0) {
		snprintf(why, whylen, "region blob describes an empty region");
		return -EINVAL;
	}
	return 0;
}

int mv_check_list(const struct mv_desc *d, const uint8_t *arena, uint64_t arena_size,
                  struct mv_list_hdr *h, char *why, size_t whylen)
{
	uint64_t off = d->src_off;

	if (!arena) {
		snprintf(why, whylen, "LIST descriptor from a client with no list arena");
		return -EINVAL;
	}
	if (off % MV_LIST_ALIGN || off > arena_size || arena_size - off < sizeof(*h)) {
		snprintf(why, whylen,
		         "list at arena offset %" PRIu64 " is outside the %" PRIu64
		         "-byte arena or not %u-byte aligned",
		         off, arena_size, MV_LIST_ALIGN);
		return -ERANGE;
	}
	/* One copy: the client may rewrite the arena while we look. */
	memcpy(h, arena + off, sizeof(*h));
	if (h->magic != MV_LIST_MAGIC || (h->kind != MV_LIST_PAGES && h->kind != MV_LIST_SEGS)) {
		snprintf(why, whylen, "no list at arena offset %" PRIu64 " (magic %#x kind %u)",
		         off, h->magic, h->kind);
		return -EINVAL;
	}
	if (mv_list_bytes(h->kind, h->count) > arena_size - off) {
		snprintf(why, whylen,
		         "list of %u entries at arena offset %" PRIu64 " runs past the %" PRIu64
		         "-byte arena",
		         h->count, off, arena_size);
		return -ERANGE;
	}
	if (d->len == 0 || d->dst_off > h->count || h->count - d->dst_off < d->len) {
		snprintf(why, whylen, "LIST names entries %" PRIu64 "+%" PRIu64 " of a list of %u",
		         d->dst_off, d->len, h->count);
		return -ERANGE;
	}
	if (h->kind == MV_LIST_PAGES && h->page_size == 0) {
		snprintf(why, whylen, "page list with pages of 0 bytes");
		return -EINVAL;
	}
	return 0;
}
