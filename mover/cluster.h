/* SPDX-License-Identifier: MIT */
/*
 * Cluster membership and named regions on etcd (mover --etcd --cluster).
 * Keys, all under /mover/<cluster>/:
 *
 *   members/<mover id, 16 hex>  {"mover","host","shards","provider","release",
 *                                "pid","addr": base64 address blob}
 *   regions/<name>              {"owner": mover id, "region", "bytes",
 *                                "blob": base64 region blob}
 *
 * Every key a mover writes lives under its one lease, kept alive by the
 * cluster thread: when the mover dies its member key and its names go with
 * the lease. The cluster thread (cluster.c) is the only one that talks to
 * etcd; it keeps the tables below from a watch of the prefix and hands
 * what the main thread must act on (a member departed or came back, names
 * changed, a publish done) through an event queue and an eventfd. The
 * main thread (names.c) serves the control messages, marks departed
 * peers, and reads the tables under the lock.
 */
#ifndef MV_CLUSTER_H
#define MV_CLUSTER_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "etcd.h"
#include "mv_wire.h"

struct mover;

struct mv_member {
	uint64_t id;
	char host[64];
	char prov[32];
	char release[MV_RELEASE_LEN + 1];
	uint32_t nshards;
	int seen; /* found by the last full read */
	struct mv_addr_blob blob;
	uint32_t bloblen;
};

struct mv_named {
	char name[MV_NAME_MAX];
	uint64_t owner;
	int seen;
	uint32_t bloblen;
	struct mv_region_blob blob;
};

/* One of our own names: the main thread adds and drops, the cluster
 * thread writes etcd and answers. */
enum mv_pub_state {
	MV_PUB_WANT = 1, /* to put (only where absent); a reply is owed */
	MV_PUB_LIVE = 2, /* in etcd under our lease */
	MV_PUB_DROP = 3, /* to delete; then forgotten */
};

struct mv_pub {
	char name[MV_NAME_MAX];
	enum mv_pub_state state;
	uint32_t client; /* who published it */
	uint32_t region;
	uint16_t type; /* the request to answer (WANT) */
	uint32_t seq;
	char *value;
};

enum mv_cev_type {
	MV_CEV_DEPARTED = 1, /* a member's key went: id, why */
	MV_CEV_JOINED = 2,   /* a member's key came (back): id */
	MV_CEV_NAMES = 3,    /* names changed: parked lookups look again */
	MV_CEV_REPLY = 4,    /* answer client's request seq of type: status, why */
};

struct mv_cev {
	struct mv_cev *next;
	enum mv_cev_type type;
	uint64_t id;
	uint32_t client, seq;
	uint16_t rtype;
	int status;
	char why[MV_ERRLEN];
};

struct mv_cluster {
	struct mover *mv;
	pthread_t thread;
	pthread_mutex_t mu; /* everything below that both threads touch */
	struct mv_etcd etcd;
	char prefix[160]; /* "/mover/<cluster>/" */
	char self_key[200];
	char *self_value;
	int64_t lease;
	int ttl;
	int wake_fd;   /* main -> cluster: pubs changed, or stop */
	int notify_fd; /* cluster -> main: events queued (main's epoll) */
	_Atomic int stop;
	_Atomic int up;      /* etcd answers */
	char down_why[128];  /* why not, under mu */
	int64_t down_since;  /* CLOCK_MONOTONIC ns, under mu */
	uint64_t departures; /* members seen to leave, for the listing */
	int reput;           /* our member key was deleted: put it back (cluster thread) */
	struct mv_member *members;
	uint32_t nmembers, members_cap;
	struct mv_named *names;
	uint32_t nnames, names_cap;
	struct mv_pub *pubs;
	uint32_t npubs, pubs_cap;
	struct mv_cev *ev_head, *ev_tail;
};

/* Whether name (NUL-terminated within MV_NAME_MAX) is 1 or more bytes of
 * MV_NAME_CHARS: names from clients and from etcd alike. */
#define MV_NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/-"
static inline int mv_name_ok(const char *name)
{
	size_t n = strnlen(name, MV_NAME_MAX);

	return n > 0 && n < MV_NAME_MAX && strspn(name, MV_NAME_CHARS) == n;
}

/* Registers with etcd (a clear error when it does not answer) and starts
 * the cluster thread. 0 or -errno with why. Main thread, after the shards. */
int mv_cluster_start(struct mover *mv, char *why, size_t whylen);
/* Stops the thread and revokes the lease (our keys go at once). */
void mv_cluster_stop(struct mover *mv);
/* Wakes the cluster thread (pubs changed). */
void mv_cluster_kick(struct mv_cluster *c);
/* The queued events, oldest first, taken off the queue (free each). */
struct mv_cev *mv_cluster_events(struct mv_cluster *c);
/* Parses a value of each kind; 0, or -EINVAL with why. For the tests. */
int mv_cluster_parse_member(const char *val, const char *prov, struct mv_member *m, char *why,
                            size_t whylen);
int mv_cluster_parse_name(const char *val, struct mv_named *n, char *why, size_t whylen);
/* The value of a name for region blob b. malloc'd, or NULL. */
char *mv_cluster_name_value(const struct mv_region_blob *b, uint32_t bloblen);

#endif
