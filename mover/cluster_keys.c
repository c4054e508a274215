/* SPDX-License-Identifier: MIT */
/*
 * What the cluster's keys hold (cluster.h has the schema): the JSON values
 * of members and names built and parsed with json-c, and the base64 the
 * gateway and the blobs in values use. Everything parsed here came from
 * etcd, written by any member or by anyone who can write the store, so it
 * is untrusted: a value is taken only if its JSON has the fields, its blob
 * decodes to a whole blob that the blob checks of validate.c accept, and
 * its ids agree with each other. Pure functions, no state: any thread
 * (the cluster thread calls them), and tests/fuzz/fuzz_etcd.c.
 */
#include "cluster.h"
#include "mover.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t mv_b64_encode(const void *in, size_t len, char *out, size_t outlen)
{
	const uint8_t *p = in;
	size_t o = 0;

	if (outlen < (len + 2) / 3 * 4 + 1)
		return 0;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < len)
			v |= p[i + 2];
		out[o++] = b64[v >> 18 & 63];
		out[o++] = b64[v >> 12 & 63];
		out[o++] = i + 1 < len ? b64[v >> 6 & 63] : '=';
		out[o++] = i + 2 < len ? b64[v & 63] : '=';
	}
	out[o] = 0;
	return o;
}

long mv_b64_decode(const char *in, size_t len, void *out, size_t outlen)
{
	uint8_t *p = out;
	size_t o = 0;
	uint32_t v = 0;
	int bits = 0;

	if (len % 4)
		return -1;
	for (size_t i = 0; i < len; i++) {
		const char *c = in[i] ? strchr(b64, in[i]) : NULL;
		if (in[i] == '=') {
			if (i < len - 2 || (i == len - 2 && in[i + 1] != '='))
				return -1;
			break;
		}
		if (!c)
			return -1;
		v = v << 6 | (uint32_t)(c - b64);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o == outlen)
				return -1;
			p[o++] = (uint8_t)(v >> bits);
		}
	}
	return (long)o;
}

static const char *str_field(struct json_object *o, const char *name)
{
	struct json_object *f;

	if (!json_object_object_get_ex(o, name, &f) || !json_object_is_type(f, json_type_string))
		return NULL;
	return json_object_get_string(f);
}

static int blob_field(struct json_object *o, const char *name, void *out, size_t outlen,
                      uint32_t *len)
{
	const char *s = str_field(o, name);
	long n = s ? mv_b64_decode(s, strlen(s), out, outlen) : -1;

	if (n < 0)
		return -EINVAL;
	*len = (uint32_t)n;
	return 0;
}

int mv_cluster_parse_member(const char *val, const char *prov, struct mv_member *m, char *why,
                            size_t whylen)
{
	struct json_object *o = json_tokener_parse(val), *f;
	const char *host, *id;
	int ret = -EINVAL;

	memset(m, 0, sizeof(*m));
	if (!o || !json_object_is_type(o, json_type_object)) {
		snprintf(why, whylen, "not a JSON object");
		goto out;
	}
	id = str_field(o, "mover");
	host = str_field(o, "host");
	if (!id || !host || blob_field(o, "addr", &m->blob, sizeof(m->blob), &m->bloblen)) {
		snprintf(why, whylen, "no mover, host or addr (base64) field");
		goto out;
	}
	if ((ret = mv_check_addr_blob(&m->blob, m->bloblen, prov, why, whylen)))
		goto out;
	m->id = strtoull(id, NULL, 16);
	if (m->id != m->blob.mover_id) {
		snprintf(why, whylen, "mover %s carries the address of mover %016llx", id,
		         (unsigned long long)m->blob.mover_id);
		ret = -EINVAL;
		goto out;
	}
	snprintf(m->host, sizeof(m->host), "%s", host);
	/* Shown in mvstat's listing and the log: printable, one word. */
	for (char *h = m->host; *h; h++)
		if (*h <= ' ' || *h > '~')
			*h = '?';
	snprintf(m->prov, sizeof(m->prov), "%.31s", m->blob.provider);
	mv_release_text(m->blob.release, m->release);
	m->nshards = m->blob.nshards;
	if (json_object_object_get_ex(o, "shards", &f) &&
	    json_object_get_int(f) != (int)m->nshards) {
		snprintf(why, whylen, "shards %d, but its address has %u", json_object_get_int(f),
		         m->nshards);
		ret = -EINVAL;
	}
out:
	json_object_put(o);
	return ret;
}

int mv_cluster_parse_name(const char *val, struct mv_named *n, char *why, size_t whylen)
{
	struct json_object *o = json_tokener_parse(val);
	const char *owner;
	int ret = -EINVAL;

	memset(n, 0, sizeof(*n));
	if (!o || !json_object_is_type(o, json_type_object)) {
		snprintf(why, whylen, "not a JSON object");
		goto out;
	}
	owner = str_field(o, "owner");
	if (!owner || blob_field(o, "blob", &n->blob, sizeof(n->blob), &n->bloblen)) {
		snprintf(why, whylen, "no owner or blob (base64) field");
		goto out;
	}
	if ((ret = mv_check_region_blob(&n->blob, n->bloblen, why, whylen)))
		goto out;
	n->owner = strtoull(owner, NULL, 16);
	if (n->owner != n->blob.mover_id) {
		snprintf(why, whylen, "owner %s, but the blob is of mover %016llx", owner,
		         (unsigned long long)n->blob.mover_id);
		ret = -EINVAL;
	}
out:
	json_object_put(o);
	return ret;
}

char *mv_cluster_name_value(const struct mv_region_blob *b, uint32_t bloblen)
{
	struct json_object *o = json_object_new_object();
	char id[20], *enc = malloc((bloblen + 2) / 3 * 4 + 1), *val = NULL;

	if (o && enc) {
		snprintf(id, sizeof(id), "%016llx", (unsigned long long)b->mover_id);
		mv_b64_encode(b, bloblen, enc, (bloblen + 2) / 3 * 4 + 1);
		json_object_object_add(o, "owner", json_object_new_string(id));
		json_object_object_add(o, "region", json_object_new_int64(b->region));
		json_object_object_add(o, "bytes", json_object_new_int64((int64_t)b->len));
		json_object_object_add(o, "blob", json_object_new_string(enc));
		val = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	}
	json_object_put(o);
	free(enc);
	return val;
}
