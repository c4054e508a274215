/* SPDX-License-Identifier: MIT */
/*
 * Staying connected across mover restarts. Every region, peer and import a
 * connection makes is kept here with what a new mover needs to make it
 * again (the region's memfd, the peer's address blob, the import's region
 * blob), under the id the application holds. When the mover goes, the
 * batches in flight fail once with MVC_CAUSE_MOVER_GONE (events.c); then,
 * on later calls of mvc_poll, mvc_wait and the batch calls, this file
 * connects to the same socket again with a backoff, makes new rings and a
 * new list arena, and registers, adds and imports everything again. The new
 * mover's ids may differ from the old one's: the application keeps its
 * own, and the library translates them (mvc_cur, mvc_app) on the way to the
 * rings and back in events. One MVC_EV_MOVER_BACK event reports the
 * reconnect. Single-threaded, like the rest of a struct mvc.
 */
#include "mvc_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define REJOIN_FIRST_NS   10000000ll   /* the first try, after the loss */
#define REJOIN_MAX_NS     1000000000ll /* tries at least once a second */
#define REJOIN_TIMEOUT_MS 2000         /* a control reply while reconnecting */
#define REJOIN_MS_PER_GIB 1000         /* and more for registering a large region */
#define SYNTH_BIT         0x80000000u  /* no mover hands out such ids */

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int mvc_rejoin_init(struct mvc *c, uint32_t flags)
{
	const char *env = getenv("MVC_RECONNECT");

	if (flags & ~MVC_OPT_NO_RECONNECT)
		return mvc_fail(c, -EINVAL, "mvc_opts.flags 0x%x: unknown flags 0x%x", flags,
		                flags & ~MVC_OPT_NO_RECONNECT);
	c->rejoin = !(flags & MVC_OPT_NO_RECONNECT) && !(env && !strcmp(env, "0"));
	return 0;
}

static struct mvc_obj *find_app(const struct mvc *c, uint32_t kind, uint32_t app)
{
	for (uint32_t i = 0; i < c->nobj; i++)
		if (c->objs[i].kind == kind && c->objs[i].app == app)
			return &c->objs[i];
	return NULL;
}

struct mvc_obj *mvc_obj_find(const struct mvc *c, uint32_t kind, uint32_t app)
{
	return find_app(c, kind, app);
}

uint32_t mvc_cur_slow(const struct mvc *c, uint32_t kind, uint32_t app)
{
	const struct mvc_obj *o = find_app(c, kind, app);

	if (o)
		return o->cur;
	/* An id we never handed out (or one freed) goes as it is, and the
	 * mover refuses it naming it; unless the new mover gave that number
	 * to another of our objects, which it must not reach by mistake. */
	for (uint32_t i = 0; i < c->nobj; i++)
		if (c->objs[i].kind == kind && c->objs[i].cur == app)
			return MVC_ID_LOST;
	return app;
}

uint32_t mvc_app_slow(const struct mvc *c, uint32_t kind, uint32_t cur)
{
	for (uint32_t i = 0; i < c->nobj; i++)
		if (c->objs[i].kind == kind && c->objs[i].cur == cur)
			return c->objs[i].app;
	return cur;
}

int mvc_obj_has_cur(const struct mvc *c, uint32_t kind, uint32_t cur)
{
	for (uint32_t i = 0; i < c->nobj; i++)
		if (c->objs[i].kind == kind && c->objs[i].cur == cur)
			return 1;
	return 0;
}

static void remapped_update(struct mvc *c)
{
	c->remapped = 0;
	for (uint32_t i = 0; i < c->nobj; i++)
		c->remapped |= c->objs[i].app != c->objs[i].cur;
}

/*
 * Keeps o (its blob copied) and names it for the application: the mover's
 * id, unless an object of the same kind already holds that id (possible
 * once a new mover hands out ids again), then one no mover hands out.
 * 0 or -ENOMEM.
 */
int mvc_obj_add(struct mvc *c, const struct mvc_obj *o, const void *blob, uint32_t blob_len,
                uint32_t *app)
{
	if (c->nobj == c->obj_cap) {
		uint32_t cap = c->obj_cap ? c->obj_cap * 2 : 16;
		struct mvc_obj *t = realloc(c->objs, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		c->objs = t;
		c->obj_cap = cap;
	}
	struct mvc_obj *n = &c->objs[c->nobj];
	*n = *o;
	n->blob = NULL;
	n->blob_len = 0;
	if (blob_len) {
		n->blob = malloc(blob_len);
		if (!n->blob)
			return -ENOMEM;
		memcpy(n->blob, blob, blob_len);
		n->blob_len = blob_len;
	}
	n->app = o->cur;
	if (o->kind == MVC_OBJ_PEER) {
		/* Peer ids index the liveness table (mvc_imm_expect_from): the
		 * lowest free one, never a made-up id. One is free: the mover
		 * caps a client's peers below MVC_MAX_PEERS. */
		for (n->app = 0; n->app < MVC_MAX_PEERS && find_app(c, o->kind, n->app); n->app++)
			;
		if (find_app(c, o->kind, o->cur) == NULL)
			n->app = o->cur;
	}
	while (find_app(c, o->kind, n->app))
		n->app = SYNTH_BIT | ++c->synth;
	c->nobj++;
	c->remapped |= n->app != n->cur;
	*app = n->app;
	return 0;
}

static void obj_drop(struct mvc *c, uint32_t i)
{
	if (c->objs[i].kind == MVC_OBJ_IMPORT)
		mvc_copied_set(c, c->objs[i].app, 0);
	free(c->objs[i].blob);
	c->objs[i] = c->objs[--c->nobj];
}

/* Forgets the object the application calls app; returns the mover's id
 * for it (app itself if unknown, MVC_ID_LOST if no mover has it). The fd
 * stays the caller's to close. */
uint32_t mvc_obj_del(struct mvc *c, uint32_t kind, uint32_t app)
{
	struct mvc_obj *o = find_app(c, kind, app);

	if (!o)
		return app;
	uint32_t cur = o->cur;
	obj_drop(c, (uint32_t)(o - c->objs));
	remapped_update(c);
	return cur;
}

void mvc_obj_del_imports_of(struct mvc *c, uint32_t peer)
{
	for (uint32_t i = 0; i < c->nobj;)
		if (c->objs[i].kind == MVC_OBJ_IMPORT && c->objs[i].peer == peer)
			obj_drop(c, i);
		else
			i++;
	remapped_update(c);
}

void mvc_objs_free(struct mvc *c)
{
	while (c->nobj)
		obj_drop(c, c->nobj - 1);
	free(c->objs);
	c->objs = NULL;
	c->obj_cap = 0;
}

/* The mover is gone (or a control call found it gone): the first try
 * comes REJOIN_FIRST_NS from now. */
void mvc_gone(struct mvc *c)
{
	if (!c->expects_failed) {
		c->expects_failed = 1;
		mvc_expects_gone(c);
	}
	c->dead = 1;
	if (!c->backoff) {
		c->backoff = REJOIN_FIRST_NS;
		c->retry_at = mono_ns() + c->backoff;
	}
}

/* Whether a reconnect can be tried at all: only once every batch in
 * flight has been reported failed, with no batch open, and never after a
 * cut-off (the mover's verdict on this client, not an accident). */
static int can_rejoin(const struct mvc *c)
{
	return c->rejoin && c->dead && !c->cut[0] && !c->open && !c->inflight && !c->back;
}

int64_t mvc_rejoin_wait_ns(const struct mvc *c)
{
	if (!can_rejoin(c))
		return -1;
	int64_t left = c->retry_at - mono_ns();
	return left > 0 ? left : 0;
}

static const char *kind_name(uint32_t kind)
{
	return kind == MVC_OBJ_REGION ? "region" : kind == MVC_OBJ_PEER ? "peer" : "import";
}

/* Makes object o again on the new mover; 0 or -errno, c->err saying why. */
/* A CUDA region again: a new IPC handle or VMM fd for the same memory
 * (the mover's old mapping went with it). Without CUDA here it is lost. */
static int restore_cuda(struct mvc *c, struct mvc_obj *o)
{
#ifdef MV_HAVE_CUDA
	struct mv_reg_rep rr;
	int ret = mvc_cuda_reg(c, o->dptr, o->len, &rr);

	if (ret)
		return ret;
	o->cur = rr.region;
	for (uint32_t i = 0; i < c->nnear; i++)
		if (c->near[i].region == o->app)
			c->near[i].mask = rr.shard_mask;
	return 0;
#else
	return mvc_fail(c, -ENOTSUP, "libmvc was built without CUDA");
#endif
}

/* How long a reply may take: a mover maps and populates a region's pages
 * before it answers. */
static void reply_timeout(struct mvc *c, uint64_t len)
{
	uint64_t ms = REJOIN_TIMEOUT_MS + (len >> 30) * REJOIN_MS_PER_GIB;
	struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (long)(ms % 1000) * 1000};

	setsockopt(c->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* A peer or import found by name: found again the same way (the new mover
 * learns the names from etcd; a moment's wait covers its first read). The
 * peer's own lookup drops the import it made on the way. */
static int restore_named(struct mvc *c, struct mvc_obj *o)
{
	struct mv_lookup_req req = {.timeout_ms = REJOIN_TIMEOUT_MS / 2};
	struct mv_lookup_rep rep;
	size_t n = o->blob_len < sizeof(req.name) ? o->blob_len : sizeof(req.name) - 1;
	int ret;

	memcpy(req.name, o->blob, n);
	ret = mvc_call(c, MV_MSG_LOOKUP, &req, sizeof(req), NULL, 0, &rep, sizeof(rep), NULL, 0,
	               NULL);
	if (ret)
		return ret;
	if (o->kind == MVC_OBJ_PEER) {
		o->cur = rep.peer;
		mvc_id_call(c, MV_MSG_UNIMPORT, rep.handle);
		/* Its mover may be another since (it restarted too). */
		mvc_peer_added(c, o->app, rep.mover_id, rep.live,
		               rep.live == MV_LIVE_OK ? "" : "the peer mover is down");
	} else {
		o->cur = rep.handle;
		mvc_copied_set(c, o->app, rep.path);
	}
	return 0;
}

/* Makes object o again on the new mover; 0 or -errno, c->err saying why. */
static int restore(struct mvc *c, struct mvc_obj *o)
{
	struct mv_import_req req = {.blob_len = o->blob_len};
	struct mv_id_rep rep;
	struct mvc_obj *p;
	int ret;

	reply_timeout(c, o->kind == MVC_OBJ_REGION ? o->len : 0);
	if (o->named)
		return restore_named(c, o);
	if (o->kind == MVC_OBJ_REGION)
		return o->fd >= 0 ? mvc_reg_fd(c, o->fd, o->off, o->len, o->reg_flags, o->reg_why,
		                               &o->cur, NULL)
		                  : restore_cuda(c, o);
	if (o->kind == MVC_OBJ_PEER) {
		ret = mvc_call(c, MV_MSG_PEER_ADD, o->blob, o->blob_len, NULL, 0, &rep, sizeof(rep),
		               NULL, 0, NULL);
		if (!ret) {
			/* What this mover knows of the peer now, not what the last
			 * one did: a peer silent then may answer again. */
			uint64_t id = 0;
			if (o->blob_len >= offsetof(struct mv_addr_blob, mover_id) + sizeof(id))
				memcpy(&id, o->blob + offsetof(struct mv_addr_blob, mover_id),
				       sizeof(id));
			rep.r.msg[sizeof(rep.r.msg) - 1] = 0;
			o->cur = rep.id;
			mvc_peer_added(c, o->app, id, rep.live, rep.r.msg);
		}
		return ret;
	}
	p = find_app(c, MVC_OBJ_PEER, o->peer);
	if (!p || p->cur == MVC_ID_LOST)
		return mvc_fail(c, -EHOSTUNREACH, "its peer %u was not added again", o->peer);
	req.peer = p->cur;
	memcpy(&req.blob, o->blob, o->blob_len);
	ret = mvc_call(c, MV_MSG_IMPORT, &req, offsetof(struct mv_import_req, blob) + o->blob_len,
	               NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);
	if (!ret) {
		o->cur = rep.id;
		/* The new mover may copy where the last went by the fabric. */
		mvc_copied_set(c, o->app, rep.path);
	}
	return ret;
}

/* One try: a new session, then every object again, regions first (imports
 * need their peers). 0 once the mover took us back (objects it refused
 * are lost, and said so in the event), or -errno for the next try. */
static int rejoin(struct mvc *c)
{
	uint32_t done[MVC_OBJ_KINDS] = {0}, lost = 0;
	struct mvc_event ev = {.type = MVC_EV_MOVER_BACK};
	char first[sizeof(ev.msg)] = "";
	int ret;

	mvc_session_close(c);
	c->ctl_timeout_ms = REJOIN_TIMEOUT_MS;
	ret = mvc_session_open(c);
	for (uint32_t kind = 0; !ret && kind < MVC_OBJ_KINDS; kind++)
		for (uint32_t i = 0; i < c->nobj && !c->dead; i++) {
			struct mvc_obj *o = &c->objs[i];
			if (o->kind != kind)
				continue;
			o->cur = MVC_ID_LOST;
			int r = restore(c, o);
			if (!r) {
				done[kind]++;
				continue;
			}
			o->cur = MVC_ID_LOST;
			if (kind == MVC_OBJ_PEER)
				mvc_peer_down(
				    c, o->app, -EHOSTUNREACH, MVC_CAUSE_PEER_GONE,
				    "the peer was not added again after the mover came back");
			if (!lost++) {
				ev.status = r;
				ev.region = o->app;
				ev.cause = kind == MVC_OBJ_REGION   ? MVC_CAUSE_NO_REGION
				           : kind == MVC_OBJ_IMPORT ? MVC_CAUSE_NO_IMPORT
				                                    : MVC_CAUSE_PEER_GONE;
				snprintf(first, sizeof(first), "%s %u: %s", kind_name(kind), o->app,
				         c->err);
			}
		}
	c->ctl_timeout_ms = 0;
	if (!ret && c->dead)
		ret = -EPIPE; /* it went again while we restored */
	if (ret) {
		if (c->sock >= 0)
			mvc_session_close(c);
		c->dead = 1;
		return ret;
	}
	struct timeval tv = {0};
	setsockopt(c->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	remapped_update(c);
	ev.count = done[0] + done[1] + done[2];
	if (lost)
		snprintf(ev.msg, sizeof(ev.msg), "mover back; %u not restored, first %s", lost,
		         first);
	else
		snprintf(ev.msg, sizeof(ev.msg),
		         "mover back: %u regions, %u peers, %u imports restored", done[0], done[1],
		         done[2]);
	c->back_ev = ev;
	c->back = 1;
	c->backoff = 0;
	c->expects_failed = 0; /* the next loss fails what is open then */
	return 0;
}

int mvc_rejoin_due(struct mvc *c)
{
	if (!can_rejoin(c))
		return 0;
	if (!c->backoff)
		mvc_gone(c); /* found gone by a control call: the first try is due later */
	if (mono_ns() < c->retry_at)
		return 0;
	char keep[sizeof(c->err)];
	if (rejoin(c) == 0)
		return 1;
	/* Keep why the last try failed for mvc_error(), and try later. */
	snprintf(keep, sizeof(keep), "%s", c->err);
	c->backoff = c->backoff * 2 > REJOIN_MAX_NS ? REJOIN_MAX_NS : c->backoff * 2;
	c->retry_at = mono_ns() + c->backoff;
	mvc_fail(c, -EPIPE, "the mover is gone; reconnecting to %s (last try: %.120s)", c->path,
	         keep);
	return 0;
}
