/* SPDX-License-Identifier: MIT */
/*
 * A small etcd v3 client over etcd's JSON gateway (/v3/..., etcd 3.4 and
 * later), built on libcurl for HTTP and json-c for JSON: grant and keep a
 * lease, put (optionally only where a key is absent), delete, read a
 * prefix, and watch a prefix as a stream. Keys and values are text here;
 * the base64 the gateway wants on the wire is this file's business. Every
 * call blocks for at most its timeout, so only the cluster thread
 * (cluster.c) calls it: never a shard, never the main thread after
 * start-up. One struct mv_etcd per thread.
 */
#ifndef MV_ETCD_H
#define MV_ETCD_H

#include <stddef.h>
#include <stdint.h>

#define MV_ETCD_MAX_URLS 8

struct mv_etcd {
	char *urls[MV_ETCD_MAX_URLS]; /* "http://host:port", no trailing '/' */
	int nurls;
	int cur;             /* the endpoint that answered last */
	int timeout_ms;      /* of one request */
	int timed_out;       /* the last request, connected, had no answer in timeout_ms */
	void *easy;          /* CURL *: requests */
	void *multi;         /* CURLM *: the watch stream */
	void *watch;         /* CURL *: the watch stream, or NULL */
	void *tok;           /* struct json_tokener *: the stream's parser */
	int watch_broken;    /* the stream ended or said it was cancelled */
	char watch_why[128]; /* why */
	char *sbuf;          /* stream bytes not yet parsed */
	size_t slen, scap;
	int64_t watch_rev; /* the revision the watch has seen up to */
	char *wbody;       /* the watch request, alive as long as it */
	void *whdr;        /* struct curl_slist *: its headers */
	/* Called for each event of the watch stream (deleted: a DELETE). */
	void (*on_event)(void *arg, const char *key, const char *val, size_t vlen, int deleted);
	void *arg;
};

/* Called by mv_etcd_range() for each key. */
typedef void (*mv_etcd_kv_fn)(void *arg, const char *key, const char *val, size_t vlen);

/*
 * mv_etcd_open - endpoints is a comma list ("127.0.0.1:2379,http://h:2379").
 * Returns 0, or -EINVAL/-ENOMEM with why. Nothing is contacted yet.
 */
int mv_etcd_open(struct mv_etcd *e, const char *endpoints, char *why, size_t whylen);
void mv_etcd_close(struct mv_etcd *e);

/* A lease of ttl seconds: its id in *lease. 0 or -errno with why. */
int mv_etcd_grant(struct mv_etcd *e, int ttl, int64_t *lease, char *why, size_t whylen);
/* Renews the lease: *ttl its seconds left, 0 when etcd no longer has it. */
int mv_etcd_keepalive(struct mv_etcd *e, int64_t lease, int64_t *ttl, char *why, size_t whylen);
/* Revokes the lease (every key under it goes). */
int mv_etcd_revoke(struct mv_etcd *e, int64_t lease, char *why, size_t whylen);
/*
 * Puts key = val under lease (0: none). create_only: only where the key is
 * absent, else -EEXIST with the current value's first bytes in why.
 */
int mv_etcd_put(struct mv_etcd *e, const char *key, const char *val, int64_t lease, int create_only,
                char *why, size_t whylen);
int mv_etcd_del(struct mv_etcd *e, const char *key, char *why, size_t whylen);
/* Every key under prefix, through fn; the store's revision in *rev. */
int mv_etcd_range(struct mv_etcd *e, const char *prefix, mv_etcd_kv_fn fn, void *arg, int64_t *rev,
                  char *why, size_t whylen);
/* Starts watching prefix from revision from (events after the range). */
int mv_etcd_watch(struct mv_etcd *e, const char *prefix, int64_t from, char *why, size_t whylen);
/*
 * Waits up to timeout_ms for watch events (or a read on wake_fd, which it
 * does not drain), delivering them to e->on_event. Returns 0, or -EPIPE
 * with why when the stream broke (then mv_etcd_watch() again).
 */
int mv_etcd_watch_poll(struct mv_etcd *e, int timeout_ms, int wake_fd, char *why, size_t whylen);
void mv_etcd_unwatch(struct mv_etcd *e);

/* Base64 (RFC 4648, padded), for the gateway and for blobs in values. */
size_t mv_b64_encode(const void *in, size_t len, char *out, size_t outlen);
/* Bytes decoded into out, or -1 on malformed input or too small an out. */
long mv_b64_decode(const char *in, size_t len, void *out, size_t outlen);

#endif
