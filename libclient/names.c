/* SPDX-License-Identifier: MIT */
/*
 * Named regions, the client's side: PUBLISH, UNPUBLISH and LOOKUP on the
 * control socket (the mover's names.c answers; only the mover talks to
 * etcd, so libmvc links nothing new). Each call is one request and its
 * reply; a LOOKUP that waits for its name waits in the mover.
 */
#include "mvc_int.h"
#include "mv_wire.h"

#include <errno.h>
#include <string.h>

static_assert(MVC_NAME_MAX == MV_NAME_MAX, "names fit the wire's field");

static int name_copy(struct mvc *c, char out[MV_NAME_MAX], const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n >= MV_NAME_MAX)
		return mvc_fail(c, -EINVAL, "a region name is 1 to %u bytes; got %zu",
		                MV_NAME_MAX - 1, n);
	memset(out, 0, MV_NAME_MAX);
	memcpy(out, name, n);
	return 0;
}

int mvc_publish(struct mvc *c, uint32_t region, const char *name)
{
	/* The mover's id for it: another since a reconnect, maybe. */
	struct mv_publish_req req = {.region = mvc_cur(c, MVC_OBJ_REGION, region)};
	struct mv_reply_hdr rep;
	int ret = name_copy(c, req.name, name);

	if (ret)
		return ret;
	if (req.region == MVC_ID_LOST)
		return mvc_fail(c, -ENOENT,
		                "region %u was not registered again after the mover "
		                "came back",
		                region);
	return mvc_call(c, MV_MSG_PUBLISH, &req, sizeof(req), NULL, 0, &rep, sizeof(rep), NULL, 0,
	                NULL);
}

int mvc_unpublish(struct mvc *c, const char *name)
{
	struct mv_publish_req req = {0};
	struct mv_reply_hdr rep;
	int ret = name_copy(c, req.name, name);

	if (ret)
		return ret;
	return mvc_call(c, MV_MSG_UNPUBLISH, &req, sizeof(req), NULL, 0, &rep, sizeof(rep), NULL, 0,
	                NULL);
}

int mvc_lookup(struct mvc *c, const char *name, int timeout_ms, struct mvc_found *out)
{
	struct mv_lookup_req req = {.timeout_ms = timeout_ms < 0 ? 0 : timeout_ms};
	struct mv_lookup_rep rep;
	int ret = name_copy(c, req.name, name);

	if (ret)
		return ret;
	ret = mvc_call(c, MV_MSG_LOOKUP, &req, sizeof(req), NULL, 0, &rep, sizeof(rep), NULL, 0,
	               NULL);
	if (ret)
		return ret;
	/* Kept like any peer and import, for a reconnect (found again by
	 * name) and for mvc_imm_expect_from. The mover reuses this client's
	 * slot for a peer it already has. */
	uint32_t peer = mvc_app(c, MVC_OBJ_PEER, rep.peer);
	size_t nlen = strlen(name) + 1;
	if (!mvc_obj_has_cur(c, MVC_OBJ_PEER, rep.peer)) {
		struct mvc_obj p = {.kind = MVC_OBJ_PEER, .cur = rep.peer, .fd = -1, .named = 1};
		ret = mvc_obj_add(c, &p, name, (uint32_t)nlen, &peer);
		if (ret) {
			mvc_id_call(c, MV_MSG_UNIMPORT, rep.handle);
			mvc_id_call(c, MV_MSG_PEER_DEL, rep.peer);
			return mvc_fail(c, ret, "no memory to keep the peer for a reconnect");
		}
		mvc_peer_added(c, peer, rep.mover_id, rep.live,
		               rep.live == MV_LIVE_OK ? "" : "the peer mover is down");
	}
	struct mvc_obj i = {
	    .kind = MVC_OBJ_IMPORT, .cur = rep.handle, .fd = -1, .peer = peer, .named = 1};
	ret = mvc_obj_add(c, &i, name, (uint32_t)nlen, &out->dst);
	if (ret) {
		mvc_id_call(c, MV_MSG_UNIMPORT, rep.handle);
		return mvc_fail(c, ret, "no memory to keep the import for a reconnect");
	}
	mvc_copied_set(c, out->dst, rep.path);
	out->peer = peer;
	out->len = rep.len;
	out->mover_id = rep.mover_id;
	return 0;
}
