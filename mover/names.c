/* SPDX-License-Identifier: MIT */
/*
 * Named regions and membership, the main thread's side (the etcd side is
 * cluster.c): PUBLISH hands a region's blob to the cluster thread to put
 * under a name and answers when etcd has it; UNPUBLISH takes it back;
 * LOOKUP finds a name in the cluster thread's table and adds the owner as
 * a peer and imports the region in one step, or parks until the name
 * appears or its time is up (the mover never blocks for it); CLUSTER
 * lists members and names for mvstat. Events from the cluster thread mark
 * a departed member's peers so that writes to them fail at once, with a
 * cause that names it. Main thread only; the cluster tables are read
 * under their lock.
 */
#include "cluster.h"
#include "mover.h"
#include "msg_check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A LOOKUP waiting for its name. */
struct mv_parked {
	uint32_t client, seq;
	int64_t deadline, since;
	char name[MV_NAME_MAX];
};

#define MV_MAX_PARKED 1024u

struct mv_names {
	struct mv_parked parked[MV_MAX_PARKED];
	uint32_t nparked;
};

int mv_names_init(struct mover *mv)
{
	mv->names = calloc(1, sizeof(*mv->names));
	return mv->names ? 0 : -ENOMEM;
}

void mv_names_free(struct mover *mv)
{
	free(mv->names);
	mv->names = NULL;
}

/* A name as it arrived: a NUL within MV_NAME_MAX, 1 or more bytes of
 * [A-Za-z0-9._:/-]. 0 or -EINVAL with why. */
static int name_check(char name[MV_NAME_MAX], char *why, size_t whylen)
{
	size_t n = strnlen(name, MV_NAME_MAX);

	if (n == 0 || n == MV_NAME_MAX) {
		snprintf(why, whylen, "a region name is 1 to %u bytes", MV_NAME_MAX - 1);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		if (!strchr(MV_NAME_CHARS, name[i])) {
			snprintf(why, whylen,
			         "region name '%.*s': byte %zu is not a letter, digit or ._:/-",
			         (int)n, name, i);
			return -EINVAL;
		}
	return 0;
}

static int no_cluster(char *why, size_t whylen)
{
	snprintf(why, whylen,
	         "this mover is in no cluster: start it with --etcd ENDPOINTS --cluster NAME");
	return -ENOTCONN;
}

static struct mv_client *client_by_id(struct mover *mv, uint32_t id)
{
	struct mv_client *cl = mv->clients[id % MV_MAX_CLIENTS];

	return cl && cl->id == id && cl->state == MV_CL_READY ? cl : NULL;
}

static void send_status(struct mv_client *cl, uint16_t type, uint32_t seq, int status,
                        const char *why)
{
	struct mv_msg_hdr h = {.type = type, .seq = seq};
	struct mv_reply_hdr r = {.status = status};

	snprintf(r.msg, sizeof(r.msg), "%s", why);
	mv_control_reply(cl->sock, &h, &r, sizeof(r), NULL, 0);
}

static int do_publish(struct mover *mv, struct mv_client *cl, struct mv_rx *m, char *why,
                      size_t whylen)
{
	struct mv_cluster *c = mv->cluster;
	struct mv_publish_req req;
	struct mv_region_blob b;
	int ret;

	memcpy(&req, m->payload, sizeof(req));
	if ((ret = name_check(req.name, why, whylen)))
		return ret;
	struct mv_region *r = mv_region_get(mv, req.region);
	if (!r || r->owner != cl->id) {
		snprintf(why, whylen, "region %u is not one of this client's regions", req.region);
		return -ENOENT;
	}
	if (!atomic_load(&c->up)) {
		pthread_mutex_lock(&c->mu);
		snprintf(why, whylen, "etcd does not answer (%.60s); try again", c->down_why);
		pthread_mutex_unlock(&c->mu);
		return -ENOTCONN;
	}
	mv_region_blob(mv, r, &b);
	char *val = mv_cluster_name_value(&b, (uint32_t)MV_REGION_BLOB_SIZE(mv->nshards));
	if (!val)
		return -ENOMEM;
	pthread_mutex_lock(&c->mu);
	for (uint32_t i = 0; i < c->npubs; i++)
		if (!strcmp(c->pubs[i].name, req.name)) {
			pthread_mutex_unlock(&c->mu);
			free(val);
			snprintf(why, whylen, "name '%s' is published already by this mover",
			         req.name);
			return -EEXIST;
		}
	if (c->npubs == c->pubs_cap) {
		uint32_t cap = c->pubs_cap ? c->pubs_cap * 2 : 16;
		void *p = realloc(c->pubs, cap * sizeof(*c->pubs));
		if (!p) {
			pthread_mutex_unlock(&c->mu);
			free(val);
			return -ENOMEM;
		}
		c->pubs = p;
		c->pubs_cap = cap;
	}
	struct mv_pub *p = &c->pubs[c->npubs++];
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", req.name);
	p->state = MV_PUB_WANT;
	p->client = cl->id;
	p->region = r->id;
	p->type = m->h.type;
	p->seq = m->h.seq;
	p->value = val;
	pthread_mutex_unlock(&c->mu);
	mv_cluster_kick(c);
	mv_dbg("client %u: publishing region %u as '%s'", cl->id, r->id, req.name);
	return 1; /* the cluster thread's answer is the reply */
}

/* Marks our names matching (client, or region) for deletion; 1 if any. */
static int drop_pubs(struct mv_cluster *c, uint32_t client, uint32_t region, const char *name)
{
	int n = 0;

	pthread_mutex_lock(&c->mu);
	for (uint32_t i = 0; i < c->npubs; i++) {
		struct mv_pub *p = &c->pubs[i];
		if (p->state != MV_PUB_LIVE || (client && p->client != client) ||
		    (region && p->region != region) || (name && strcmp(p->name, name)))
			continue;
		p->state = MV_PUB_DROP;
		n++;
	}
	pthread_mutex_unlock(&c->mu);
	if (n)
		mv_cluster_kick(c);
	return n > 0;
}

/*
 * The name's owner added as the client's peer (its slot for that mover
 * when it has one) and the region imported: 0 with *rep filled, -ENOENT
 * while the name (or its owner's membership) is not there, or another
 * -errno with why.
 */
static int try_lookup(struct mover *mv, struct mv_client *cl, const char *name,
                      struct mv_lookup_rep *rep, char *why, size_t whylen)
{
	struct mv_cluster *c = mv->cluster;
	struct mv_region_blob b;
	struct mv_addr_blob a;
	uint32_t blen = 0, alen = 0, slot = MV_CLIENT_MAX_PEERS;
	uint64_t owner = 0;
	int ret, added = 0;

	pthread_mutex_lock(&c->mu);
	for (uint32_t i = 0; i < c->nnames; i++)
		if (!strcmp(c->names[i].name, name)) {
			owner = c->names[i].owner;
			b = c->names[i].blob;
			blen = c->names[i].bloblen;
		}
	for (uint32_t i = 0; blen && i < c->nmembers; i++)
		if (c->members[i].id == owner) {
			a = c->members[i].blob;
			alen = c->members[i].bloblen;
		}
	pthread_mutex_unlock(&c->mu);
	if (!blen || !alen) {
		snprintf(why, whylen, "no region named '%s' in cluster %s%s", name, mv->cfg.cluster,
		         blen ? " (its owner is not a member now)" : "");
		return -ENOENT;
	}
	for (uint32_t i = 0; i < MV_CLIENT_MAX_PEERS; i++)
		if (cl->peers[i] && cl->peers[i]->mover_id == owner &&
		    atomic_load(&cl->peers[i]->gone) == MV_PEER_LIVE) {
			slot = i;
			break;
		}
	if (slot == MV_CLIENT_MAX_PEERS) {
		if ((ret = mv_peer_add(mv, cl, &a, alen, &slot, &rep->live, why, whylen)))
			return ret;
		added = 1;
	}
	ret = mv_import_add(mv, cl, slot, &b, blen, &rep->handle, why, whylen);
	if (ret) {
		char tmp[MV_ERRLEN];
		if (added)
			mv_peer_del(mv, cl, slot, tmp, sizeof(tmp));
		return ret;
	}
	rep->peer = slot;
	rep->len = b.len;
	rep->mover_id = owner;
	return 0;
}

static int do_lookup(struct mover *mv, struct mv_client *cl, struct mv_rx *m, char *why,
                     size_t whylen)
{
	struct mv_lookup_req req;
	struct mv_lookup_rep rep = {0};
	struct mv_names *nm = mv->names;
	int ret;

	memcpy(&req, m->payload, sizeof(req));
	if ((ret = name_check(req.name, why, whylen)))
		return ret;
	ret = try_lookup(mv, cl, req.name, &rep, why, whylen);
	if (ret == 0)
		rep.path = mv_host_import_path(cl, rep.handle);
	/* Its import may wait for the owner's memfd or word (samehost_ask.c). */
	if (ret == 0 && mv_host_import_park(mv, cl, &m->h, &rep, sizeof(rep), rep.handle))
		return 1;
	if (ret == 0)
		return mv_control_reply(cl->sock, &m->h, &rep, sizeof(rep), NULL, 0) ?: 1;
	if (ret != -ENOENT || req.timeout_ms <= 0)
		return ret;
	if (nm->nparked == MV_MAX_PARKED) {
		snprintf(why, whylen, "%u lookups wait already; look again later", MV_MAX_PARKED);
		return -EAGAIN;
	}
	struct mv_parked *p = &nm->parked[nm->nparked++];
	p->client = cl->id;
	p->seq = m->h.seq;
	p->since = mv_now_ns();
	p->deadline = p->since + (int64_t)req.timeout_ms * 1000000ll;
	snprintf(p->name, sizeof(p->name), "%s", req.name);
	return 1; /* answered when the name comes, or at the deadline */
}

/* Appends to the CLUSTER listing; the text stays NUL-terminated. */
static void add(struct mv_cluster_rep *rep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add(struct mv_cluster_rep *rep, const char *fmt, ...)
{
	va_list ap;
	size_t room = sizeof(rep->text) - rep->len;

	if (room <= 1)
		return;
	va_start(ap, fmt);
	int n = vsnprintf(rep->text + rep->len, room, fmt, ap);
	va_end(ap);
	rep->len += n < 0 ? 0 : (size_t)n < room ? (uint32_t)n : (uint32_t)room - 1;
}

static int do_listing(struct mover *mv, struct mv_client *cl, struct mv_rx *m)
{
	struct mv_cluster *c = mv->cluster;
	struct mv_cluster_rep *rep = calloc(1, sizeof(*rep));
	int ret;

	if (!rep)
		return -ENOMEM;
	if (!c) {
		add(rep, "cluster: none (start the mover with --etcd ENDPOINTS --cluster NAME)\n");
	} else {
		pthread_mutex_lock(&c->mu);
		int up = atomic_load(&c->up);
		add(rep, "cluster %s: etcd %s, ", mv->cfg.cluster, mv->cfg.etcd);
		if (up)
			add(rep, "up, lease %llx (%d s)\n", (unsigned long long)c->lease, c->ttl);
		else
			add(rep, "LOST %.1f s ago: %s (serving the peers known)\n",
			    (double)(mv_now_ns() - c->down_since) / 1e9, c->down_why);
		add(rep, "members %u, names %u, departures seen %llu\n", c->nmembers, c->nnames,
		    (unsigned long long)c->departures);
		for (uint32_t i = 0; i < c->nmembers; i++) {
			const struct mv_member *mb = &c->members[i];
			add(rep, "member %016llx host %s shards %u provider %s release %s%s\n",
			    (unsigned long long)mb->id, mb->host, mb->nshards, mb->prov,
			    mb->release, mb->id == mv->mover_id ? " (this mover)" : "");
		}
		for (uint32_t i = 0; i < c->nnames; i++) {
			const struct mv_named *n = &c->names[i];
			add(rep, "name %s owner %016llx region %u bytes %llu%s\n", n->name,
			    (unsigned long long)n->owner, n->blob.region,
			    (unsigned long long)n->blob.len,
			    n->owner == mv->mover_id ? " (this mover)" : "");
		}
		pthread_mutex_unlock(&c->mu);
	}
	ret = mv_control_reply(cl->sock, &m->h, rep,
	                       offsetof(struct mv_cluster_rep, text) + rep->len + 1, NULL, 0);
	free(rep);
	return ret ?: 1;
}

int mv_names_handle(struct mover *mv, struct mv_client *cl, struct mv_rx *m, char *why,
                    size_t whylen)
{
	int ret;

	if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
		return ret;
	if (m->h.type == MV_MSG_CLUSTER)
		return do_listing(mv, cl, m);
	if (!mv->cluster)
		return no_cluster(why, whylen);
	switch (m->h.type) {
	case MV_MSG_PUBLISH:
		return do_publish(mv, cl, m, why, whylen);
	case MV_MSG_UNPUBLISH: {
		struct mv_publish_req req;
		memcpy(&req, m->payload, sizeof(req));
		if ((ret = name_check(req.name, why, whylen)))
			return ret;
		if (drop_pubs(mv->cluster, cl->id, 0, req.name))
			return 0;
		snprintf(why, whylen, "'%s' is not a name this client published", req.name);
		return -ENOENT;
	}
	case MV_MSG_LOOKUP:
		return do_lookup(mv, cl, m, why, whylen);
	}
	snprintf(why, whylen, "unknown message type %u", m->h.type);
	return -EBADMSG;
}

/* Parked lookups try again (names came), or fail once their time is up. */
static void parked_scan(struct mover *mv, int names_changed)
{
	struct mv_names *nm = mv->names;
	int64_t now = mv_now_ns();

	for (uint32_t i = 0; i < nm->nparked;) {
		struct mv_parked *p = &nm->parked[i];
		struct mv_client *cl = client_by_id(mv, p->client);
		struct mv_lookup_rep rep = {0};
		struct mv_msg_hdr h = {.type = MV_MSG_LOOKUP, .seq = p->seq};
		char why[MV_ERRLEN] = "";
		int ret = -ENOENT;

		if (cl && names_changed)
			ret = try_lookup(mv, cl, p->name, &rep, why, sizeof(why));
		if (cl && ret == 0) {
			rep.path = mv_host_import_path(cl, rep.handle);
			if (!mv_host_import_park(mv, cl, &h, &rep, sizeof(rep), rep.handle))
				mv_control_reply(cl->sock, &h, &rep, sizeof(rep), NULL, 0);
		} else if (cl && ret != -ENOENT) {
			send_status(cl, MV_MSG_LOOKUP, p->seq, ret, why);
		} else if (cl && now >= p->deadline) {
			snprintf(why, sizeof(why),
			         "no region named '%s' in cluster %s after %lld ms", p->name,
			         mv->cfg.cluster, (long long)(now - p->since) / 1000000);
			send_status(cl, MV_MSG_LOOKUP, p->seq, -ETIMEDOUT, why);
		} else if (cl) {
			i++;
			continue;
		}
		*p = nm->parked[--nm->nparked];
	}
}

void mv_names_events(struct mover *mv)
{
	struct mv_cluster *c = mv->cluster;
	uint64_t v;
	int names = 0;

	if (!c)
		return;
	if (read(c->notify_fd, &v, sizeof(v)) < 0) {
		/* drained by an earlier wake-up */
	}
	for (struct mv_cev *ev = mv_cluster_events(c), *next; ev; ev = next) {
		next = ev->next;
		switch (ev->type) {
		case MV_CEV_DEPARTED:
			for (uint32_t i = 0; i < MV_MAX_PEERS; i++)
				if (mv->peers[i] && mv->peers[i]->mover_id == ev->id)
					mv_peer_departed(mv, mv->peers[i], ev->why);
			mv_log("%s", ev->why);
			break;
		case MV_CEV_JOINED:
			for (uint32_t i = 0; i < MV_MAX_PEERS; i++)
				if (mv->peers[i] && mv->peers[i]->mover_id == ev->id)
					mv_peer_rejoined(mv, mv->peers[i]);
			names = 1;
			break;
		case MV_CEV_NAMES:
			names = 1;
			break;
		case MV_CEV_REPLY: {
			struct mv_client *cl = client_by_id(mv, ev->client);
			if (cl)
				send_status(cl, ev->rtype, ev->seq, ev->status, ev->why);
			if (!cl && !ev->status) /* nobody to answer: the name goes */
				drop_pubs(c, ev->client, 0, NULL);
			break;
		}
		}
		free(ev);
	}
	if (names)
		parked_scan(mv, 1);
}

void mv_names_tick(struct mover *mv)
{
	if (mv->names && mv->names->nparked)
		parked_scan(mv, 0);
}

void mv_names_client_gone(struct mover *mv, struct mv_client *cl)
{
	struct mv_names *nm = mv->names;

	for (uint32_t i = 0; nm && i < nm->nparked;)
		if (nm->parked[i].client == cl->id)
			nm->parked[i] = nm->parked[--nm->nparked];
		else
			i++;
	if (mv->cluster)
		drop_pubs(mv->cluster, cl->id, 0, NULL);
}

void mv_names_region_gone(struct mover *mv, uint32_t region)
{
	if (mv->cluster)
		drop_pubs(mv->cluster, 0, region, NULL);
}
