/* SPDX-License-Identifier: MIT */
/*
 * The cluster thread: registers this mover in etcd under a lease it keeps
 * alive, watches the cluster's prefix and keeps the tables of members and
 * names of cluster.h, and writes and deletes our own names. It alone
 * talks to etcd, and every call it makes blocks at most a few seconds:
 * never a shard's time, never the main thread's. When etcd stops
 * answering, the mover keeps serving the peers it knows; the thread says
 * so in the log (and the listing mvstat prints), retries every second,
 * and on its return renews or re-grants the lease, puts our keys again,
 * and reads the whole prefix to learn what changed meanwhile.
 */
#include "cluster.h"
#include "mover.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define MEMBERS        "members/"
#define REGIONS        "regions/"
#define MV_ETCD_JOIN_S 15 /* how long a start asks an etcd that does not answer */

static void notify(struct mv_cluster *c, struct mv_cev *ev)
{
	uint64_t one = 1;

	/* under c->mu */
	if (c->ev_tail)
		c->ev_tail->next = ev;
	else
		c->ev_head = ev;
	c->ev_tail = ev;
	if (write(c->notify_fd, &one, sizeof(one)) < 0) {
		/* saturated: the main thread is due to read anyway */
	}
}

static void event(struct mv_cluster *c, enum mv_cev_type type, uint64_t id, const char *why)
{
	struct mv_cev *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return;
	ev->type = type;
	ev->id = id;
	if (why)
		snprintf(ev->why, sizeof(ev->why), "%s", why);
	notify(c, ev);
}

struct mv_cev *mv_cluster_events(struct mv_cluster *c)
{
	pthread_mutex_lock(&c->mu);
	struct mv_cev *ev = c->ev_head;
	c->ev_head = c->ev_tail = NULL;
	pthread_mutex_unlock(&c->mu);
	return ev;
}

void mv_cluster_kick(struct mv_cluster *c)
{
	uint64_t one = 1;

	if (write(c->wake_fd, &one, sizeof(one)) < 0) {
		/* saturated: the thread is due to wake anyway */
	}
}

/* Grows *arr of *cap elements of size sz to hold n + 1. */
static int grow(void **arr, uint32_t n, uint32_t *cap, size_t sz)
{
	if (n < *cap)
		return 0;
	uint32_t ncap = *cap ? *cap * 2 : 16;
	void *p = realloc(*arr, ncap * sz);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}

static char *member_value(struct mover *mv)
{
	struct json_object *o = json_object_new_object();
	struct mv_addr_blob b;
	char id[20], host[64] = "", *enc = malloc((sizeof(b) + 2) / 3 * 4 + 1), *val = NULL;

	mv_addr_blob(mv, &b);
	gethostname(host, sizeof(host) - 1);
	if (o && enc) {
		snprintf(id, sizeof(id), "%016llx", (unsigned long long)mv->mover_id);
		mv_b64_encode(&b, sizeof(b), enc, (sizeof(b) + 2) / 3 * 4 + 1);
		json_object_object_add(o, "mover", json_object_new_string(id));
		json_object_object_add(o, "host", json_object_new_string(host));
		json_object_object_add(o, "shards", json_object_new_int((int)mv->nshards));
		json_object_object_add(o, "provider", json_object_new_string(mv->prov));
		json_object_object_add(o, "release", json_object_new_string(MVC_VERSION));
		json_object_object_add(o, "pid", json_object_new_int((int)getpid()));
		json_object_object_add(o, "addr", json_object_new_string(enc));
		val = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	}
	json_object_put(o);
	free(enc);
	return val;
}

static struct mv_member *member_find(struct mv_cluster *c, uint64_t id)
{
	for (uint32_t i = 0; i < c->nmembers; i++)
		if (c->members[i].id == id)
			return &c->members[i];
	return NULL;
}

static void member_drop(struct mv_cluster *c, uint32_t i, const char *how)
{
	struct mv_member *m = &c->members[i];
	char why[MV_ERRLEN];

	snprintf(why, sizeof(why), "peer mover %016llx left cluster %s (%s; host %s)",
	         (unsigned long long)m->id, c->mv->cfg.cluster, how, m->host);
	if (m->id != c->mv->mover_id) {
		c->departures++;
		event(c, MV_CEV_DEPARTED, m->id, why);
	}
	c->members[i] = c->members[--c->nmembers];
}

static struct mv_named *name_find(struct mv_cluster *c, const char *name)
{
	for (uint32_t i = 0; i < c->nnames; i++)
		if (!strcmp(c->names[i].name, name))
			return &c->names[i];
	return NULL;
}

/* One key under the prefix, from the watch or a full read. Under c->mu. */
static void on_kv(void *arg, const char *key, const char *val, size_t vlen, int deleted)
{
	struct mv_cluster *c = arg;
	const char *rest = key + strlen(c->prefix);
	char why[MV_ERRLEN];

	if (strncmp(key, c->prefix, strlen(c->prefix)))
		return; /* not ours to judge: outside the range we asked for */
	if (!strncmp(rest, MEMBERS, strlen(MEMBERS))) {
		const char *hex = rest + strlen(MEMBERS);
		char *end;
		uint64_t id = strtoull(hex, &end, 16);
		if (strlen(hex) != 16 || *end) {
			mv_warn("etcd: ignoring %s: not members/<16 hex digits>", key);
			return;
		}
		struct mv_member *m = member_find(c, id);
		if (deleted) {
			if (m)
				member_drop(c, (uint32_t)(m - c->members), "key or lease gone");
			/* Our own key, deleted under our live lease: the others
			 * count us departed; while we run, we are a member. */
			if (id == c->mv->mover_id)
				c->reput = 1;
			return;
		}
		struct mv_member nm;
		if (mv_cluster_parse_member(val, c->mv->prov, &nm, why, sizeof(why))) {
			mv_warn("etcd: ignoring %s: %s", key, why);
			return;
		}
		if (nm.id != id) {
			mv_warn("etcd: ignoring %s: it carries mover %016llx", key,
			        (unsigned long long)nm.id);
			return;
		}
		nm.seen = 1;
		if (m) {
			*m = nm;
			return;
		}
		if (grow((void **)&c->members, c->nmembers, &c->members_cap, sizeof(*m)))
			return;
		c->members[c->nmembers++] = nm;
		if (id != c->mv->mover_id) {
			mv_log("cluster %s: mover %016llx joined (host %s, %u shards, %s, %s)",
			       c->mv->cfg.cluster, (unsigned long long)id, nm.host, nm.nshards,
			       nm.prov, nm.release);
			event(c, MV_CEV_JOINED, id, NULL);
		}
		return;
	}
	if (!strncmp(rest, REGIONS, strlen(REGIONS))) {
		const char *name = rest + strlen(REGIONS);
		struct mv_named *n = name_find(c, name), nn;
		if (!mv_name_ok(name) || strlen(name) >= MV_NAME_MAX) {
			mv_warn("etcd: ignoring %s: a name is 1 to %u bytes of %s", key,
			        MV_NAME_MAX - 1, MV_NAME_CHARS);
			return;
		}
		if (deleted) {
			if (n)
				c->names[n - c->names] = c->names[--c->nnames];
			event(c, MV_CEV_NAMES, 0, NULL);
			return;
		}
		if (mv_cluster_parse_name(val, &nn, why, sizeof(why))) {
			mv_warn("etcd: ignoring %s: %s", key, why);
			return;
		}
		snprintf(nn.name, sizeof(nn.name), "%s", name);
		nn.seen = 1;
		if (!n) {
			if (grow((void **)&c->names, c->nnames, &c->names_cap, sizeof(*n)))
				return;
			n = &c->names[c->nnames++];
		}
		*n = nn;
		event(c, MV_CEV_NAMES, 0, NULL);
		return;
	}
	(void)vlen;
	mv_warn("etcd: ignoring %s: not a members/ or regions/ key", key);
}

static void on_watch(void *arg, const char *key, const char *val, size_t vlen, int deleted)
{
	struct mv_cluster *c = arg;

	pthread_mutex_lock(&c->mu);
	on_kv(c, key, val, vlen, deleted);
	pthread_mutex_unlock(&c->mu);
}

static void on_range(void *arg, const char *key, const char *val, size_t vlen)
{
	on_watch(arg, key, val, vlen, 0);
}

/* Reads the whole prefix and starts the watch after it: members and names
 * not found are gone. */
static int resync(struct mv_cluster *c, char *why, size_t whylen)
{
	int64_t rev;
	int ret;

	pthread_mutex_lock(&c->mu);
	for (uint32_t i = 0; i < c->nmembers; i++)
		c->members[i].seen = 0;
	for (uint32_t i = 0; i < c->nnames; i++)
		c->names[i].seen = 0;
	pthread_mutex_unlock(&c->mu);
	if ((ret = mv_etcd_range(&c->etcd, c->prefix, on_range, c, &rev, why, whylen)))
		return ret;
	pthread_mutex_lock(&c->mu);
	for (uint32_t i = c->nmembers; i-- > 0;)
		if (!c->members[i].seen)
			member_drop(c, i, "key gone from etcd");
	for (uint32_t i = c->nnames; i-- > 0;)
		if (!c->names[i].seen)
			c->names[i] = c->names[--c->nnames];
	event(c, MV_CEV_NAMES, 0, NULL);
	pthread_mutex_unlock(&c->mu);
	return mv_etcd_watch(&c->etcd, c->prefix, rev + 1, why, whylen);
}

static void name_key(struct mv_cluster *c, const char *name, char *key, size_t len)
{
	snprintf(key, len, "%s" REGIONS "%s", c->prefix, name);
}

/* Grants a lease (keep: unless one was granted already) and puts our
 * member key and live names under it. */
static int register_all(struct mv_cluster *c, int keep, char *why, size_t whylen)
{
	char key[256];
	int64_t lease;
	int ret;

	if (!keep || !c->lease) {
		if ((ret = mv_etcd_grant(&c->etcd, c->ttl, &lease, why, whylen)))
			return ret;
		pthread_mutex_lock(&c->mu); /* the listing reads it */
		c->lease = lease;
		pthread_mutex_unlock(&c->mu);
	}
	if ((ret = mv_etcd_put(&c->etcd, c->self_key, c->self_value, c->lease, 0, why, whylen)))
		return ret;
	pthread_mutex_lock(&c->mu);
	for (uint32_t i = 0; i < c->npubs && !ret; i++) {
		if (c->pubs[i].state != MV_PUB_LIVE)
			continue;
		name_key(c, c->pubs[i].name, key, sizeof(key));
		ret = mv_etcd_put(&c->etcd, key, c->pubs[i].value, c->lease, 0, why, whylen);
	}
	pthread_mutex_unlock(&c->mu);
	return ret;
}

static void reply(struct mv_cluster *c, const struct mv_pub *p, int status, const char *why)
{
	struct mv_cev *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return;
	ev->type = MV_CEV_REPLY;
	ev->client = p->client;
	ev->seq = p->seq;
	ev->rtype = p->type;
	ev->status = status;
	snprintf(ev->why, sizeof(ev->why), "%s", why ? why : "");
	notify(c, ev);
}

static void pub_forget(struct mv_cluster *c, uint32_t i)
{
	free(c->pubs[i].value);
	c->pubs[i] = c->pubs[--c->npubs];
}

/*
 * Writes the names the main thread asked for. Each call to etcd is made
 * outside the lock, on a copy; the main thread only adds WANT and marks
 * DROP, so the entry found again by name is the same one.
 */
static int do_pubs(struct mv_cluster *c, char *why, size_t whylen)
{
	char key[256], name[MV_NAME_MAX];
	int ret = 0;

	for (;;) {
		struct mv_pub *p = NULL;
		pthread_mutex_lock(&c->mu);
		for (uint32_t i = 0; i < c->npubs && !p; i++)
			if (c->pubs[i].state != MV_PUB_LIVE)
				p = &c->pubs[i];
		if (!p) {
			pthread_mutex_unlock(&c->mu);
			return 0;
		}
		enum mv_pub_state st = p->state;
		char *val = strdup(p->value ? p->value : "");
		snprintf(name, sizeof(name), "%s", p->name);
		pthread_mutex_unlock(&c->mu);
		name_key(c, name, key, sizeof(key));
		char w[MV_ERRLEN] = "";
		if (!val)
			ret = -ENOMEM;
		else if (st == MV_PUB_WANT)
			ret = mv_etcd_put(&c->etcd, key, val, c->lease, 1, w, sizeof(w));
		else
			ret = mv_etcd_del(&c->etcd, key, w, sizeof(w));
		free(val);
		pthread_mutex_lock(&c->mu);
		for (uint32_t i = 0; i < c->npubs; i++) {
			p = &c->pubs[i];
			if (strcmp(p->name, name) || p->state != st)
				continue;
			if (st == MV_PUB_DROP && ret != -EHOSTUNREACH) {
				pub_forget(c, i);
			} else if (st == MV_PUB_WANT && ret == -EEXIST) {
				struct mv_named *n = name_find(c, name);
				char msg[MV_ERRLEN];
				snprintf(msg, sizeof(msg),
				         "name '%s' is published already in cluster %s%s%.16llx",
				         name, c->mv->cfg.cluster, n ? " by mover " : "",
				         n ? (unsigned long long)n->owner : 0ull);
				reply(c, p, -EEXIST, msg);
				pub_forget(c, i);
			} else if (st == MV_PUB_WANT) {
				reply(c, p, ret, ret ? w : NULL);
				if (ret)
					pub_forget(c, i);
				else
					p->state = MV_PUB_LIVE;
			}
			break;
		}
		pthread_mutex_unlock(&c->mu);
		if (ret == -EHOSTUNREACH) {
			snprintf(why, whylen, "%s", w);
			return ret;
		}
	}
}

static void set_down(struct mv_cluster *c, const char *why)
{
	pthread_mutex_lock(&c->mu);
	snprintf(c->down_why, sizeof(c->down_why), "%s", why);
	c->down_since = mv_now_ns();
	/* Publishes waiting for an answer get one now: etcd is away. */
	for (uint32_t i = c->npubs; i-- > 0;) {
		if (c->pubs[i].state != MV_PUB_WANT)
			continue;
		char msg[MV_ERRLEN];
		snprintf(msg, sizeof(msg), "etcd does not answer (%s); try again", why);
		reply(c, &c->pubs[i], -ENOTCONN, msg);
		pub_forget(c, i);
	}
	pthread_mutex_unlock(&c->mu);
	atomic_store(&c->up, 0);
	mv_etcd_unwatch(&c->etcd);
	mv_error("etcd lost: %s; serving the peers known, retrying every second", why);
}

/* etcd is back: our lease (or a new one), our keys, the whole prefix. */
static int come_back(struct mv_cluster *c, char *why, size_t whylen)
{
	int64_t ttl = 0;
	int ret = mv_etcd_keepalive(&c->etcd, c->lease, &ttl, why, whylen);

	if (ret)
		return ret;
	if (ttl <= 0 && (ret = register_all(c, 0, why, whylen)))
		return ret;
	if ((ret = resync(c, why, whylen)))
		return ret;
	atomic_store(&c->up, 1);
	/* Names dropped while etcd was away go now. */
	if ((ret = do_pubs(c, why, whylen)))
		return ret;
	mv_log("etcd back: %s in cluster %s (%s)", ttl > 0 ? "lease kept" : "registered again",
	       c->mv->cfg.cluster, c->etcd.urls[c->etcd.cur]);
	return 0;
}

static void *cluster_main(void *arg)
{
	struct mv_cluster *c = arg;
	int64_t period = (int64_t)c->ttl * 1000000000ll / 3, next_ka = mv_now_ns() + period;
	char why[MV_ERRLEN];

	while (!atomic_load(&c->stop)) {
		int64_t now = mv_now_ns();
		uint64_t v;

		if (!atomic_load(&c->up)) {
			if (come_back(c, why, sizeof(why))) {
				usleep(1000000);
				continue;
			}
			next_ka = mv_now_ns() + period;
		}
		int wait = next_ka > now ? (int)((next_ka - now) / 1000000) : 0;
		if (mv_etcd_watch_poll(&c->etcd, wait > 1000 ? 1000 : wait, c->wake_fd, why,
		                       sizeof(why))) {
			set_down(c, why);
			continue;
		}
		if (read(c->wake_fd, &v, sizeof(v)) > 0 && do_pubs(c, why, sizeof(why))) {
			set_down(c, why);
			continue;
		}
		if (c->reput) {
			c->reput = 0;
			mv_error("etcd: our member key %s was deleted; putting it back",
			         c->self_key);
			if (mv_etcd_put(&c->etcd, c->self_key, c->self_value, c->lease, 0, why,
			                sizeof(why))) {
				set_down(c, why);
				continue;
			}
		}
		if (mv_now_ns() < next_ka)
			continue;
		int64_t ttl;
		if (mv_etcd_keepalive(&c->etcd, c->lease, &ttl, why, sizeof(why))) {
			set_down(c, why);
			continue;
		}
		if (ttl <= 0) {
			mv_error("etcd: our lease %llx expired: registering again",
			         (unsigned long long)c->lease);
			if (register_all(c, 0, why, sizeof(why))) {
				set_down(c, why);
				continue;
			}
		}
		next_ka = mv_now_ns() + period;
	}
	return NULL;
}

int mv_cluster_start(struct mover *mv, char *why, size_t whylen)
{
	struct mv_cluster *c = calloc(1, sizeof(*c));
	int ret;

	if (!mv->cfg.cluster || !mv->cfg.cluster[0] ||
	    strspn(mv->cfg.cluster,
	           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
	        strlen(mv->cfg.cluster)) {
		snprintf(why, whylen,
		         "--etcd needs --cluster NAME (letters, digits, '.', '_', '-')%s%s",
		         mv->cfg.cluster ? "; got " : "", mv->cfg.cluster ? mv->cfg.cluster : "");
		free(c);
		return -EINVAL;
	}
	if (!c)
		return -ENOMEM;
	c->mv = mv;
	c->ttl = mv->cfg.etcd_ttl_ms / 1000 ?: 1;
	pthread_mutex_init(&c->mu, NULL);
	snprintf(c->prefix, sizeof(c->prefix), "/mover/%s/", mv->cfg.cluster);
	snprintf(c->self_key, sizeof(c->self_key), "%s" MEMBERS "%016llx", c->prefix,
	         (unsigned long long)mv->mover_id);
	c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->self_value = member_value(mv);
	if (c->wake_fd < 0 || c->notify_fd < 0 || !c->self_value) {
		ret = -ENOMEM;
		goto err_free;
	}
	if ((ret = mv_etcd_open(&c->etcd, mv->cfg.etcd, why, whylen)))
		goto err_free;
	c->etcd.on_event = on_watch;
	c->etcd.arg = c;
	/* An etcd that took our connection but did not answer in time (a
	 * loaded host: fleet.sh saw a 2-core machine's etcd not answer a
	 * joining mover in 2 s) is asked again, under the lease it granted if
	 * it did, until MV_ETCD_JOIN_S have passed (a try under way ends
	 * first); one that refuses or cannot be reached fails the start now. */
	int64_t until = mv_now_ns() + MV_ETCD_JOIN_S * 1000000000ll;
	while (((ret = register_all(c, 1, why, whylen)) || (ret = resync(c, why, whylen))) &&
	       c->etcd.timed_out && mv_now_ns() < until)
		mv_log("cluster %s: %s; asking again", mv->cfg.cluster, why);
	if (ret) {
		char tmp[256], w[MV_ERRLEN];
		/* Keys put under it go now, not at the lease's end (best
		 * effort: etcd may be what failed). */
		if (c->lease)
			mv_etcd_revoke(&c->etcd, c->lease, w, sizeof(w));
		snprintf(tmp, sizeof(tmp), "%s", why);
		snprintf(why, whylen, "cannot join cluster %s: %s (is etcd running there?)",
		         mv->cfg.cluster, tmp);
		goto err_etcd;
	}
	atomic_store(&c->up, 1);
	mv_log("cluster %s: registered as %s (lease %llx, %d s), %u members, %u names",
	       mv->cfg.cluster, c->self_key, (unsigned long long)c->lease, c->ttl, c->nmembers,
	       c->nnames);
	mv->cluster = c;
	if ((ret = -pthread_create(&c->thread, NULL, cluster_main, c))) {
		mv->cluster = NULL;
		goto err_etcd;
	}
	pthread_setname_np(c->thread, "mv-cluster");
	return 0;

err_etcd:
	mv_etcd_close(&c->etcd);
err_free:
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	if (c->notify_fd >= 0)
		close(c->notify_fd);
	free(c->self_value);
	free(c->members);
	free(c->names);
	free(c);
	return ret;
}

void mv_cluster_stop(struct mover *mv)
{
	struct mv_cluster *c = mv->cluster;
	char why[MV_ERRLEN];

	if (!c)
		return;
	atomic_store(&c->stop, 1);
	mv_cluster_kick(c);
	pthread_join(c->thread, NULL);
	/* Our keys go now rather than at the lease's end: peers fail their
	 * writes to us at once. */
	if (atomic_load(&c->up) && mv_etcd_revoke(&c->etcd, c->lease, why, sizeof(why)))
		mv_log("etcd: revoking our lease: %s (our keys go with its TTL)", why);
	mv_etcd_close(&c->etcd);
	for (struct mv_cev *ev = c->ev_head, *next; ev; ev = next) {
		next = ev->next;
		free(ev);
	}
	while (c->npubs)
		pub_forget(c, 0);
	free(c->pubs);
	free(c->members);
	free(c->names);
	free(c->self_value);
	close(c->wake_fd);
	close(c->notify_fd);
	pthread_mutex_destroy(&c->mu);
	free(c);
	mv->cluster = NULL;
}
