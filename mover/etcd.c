/* SPDX-License-Identifier: MIT */
/*
 * The etcd v3 client of etcd.h: each call is one POST of a JSON body to the
 * gateway (libcurl), its answer parsed with json-c; the watch is one
 * long-lived POST whose answer is a stream of JSON objects, read through a
 * curl multi handle so the cluster thread can wait on it, its request
 * queue and its keepalive timer at once. etcd's 64-bit ids travel as JSON
 * strings; keys and values as base64.
 */
#include "etcd.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

int mv_etcd_open(struct mv_etcd *e, const char *endpoints, char *why, size_t whylen)
{
	char *list, *save = NULL;

	memset(e, 0, sizeof(*e));
	e->timeout_ms = 2000;
	pthread_once(&curl_once, curl_init_once);
	list = strdup(endpoints);
	if (!list)
		return -ENOMEM;
	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t n = strlen(t);
		while (n && t[n - 1] == '/')
			t[--n] = 0;
		if (!n)
			continue;
		if (e->nurls == MV_ETCD_MAX_URLS) {
			snprintf(why, whylen, "--etcd: more than %d endpoints", MV_ETCD_MAX_URLS);
			goto err_free;
		}
		if (asprintf(&e->urls[e->nurls], "%s%s", strstr(t, "://") ? "" : "http://", t) < 0)
			goto err_free;
		if (strncmp(e->urls[e->nurls], "http://", 7) &&
		    strncmp(e->urls[e->nurls], "https://", 8)) {
			snprintf(why, whylen, "--etcd %s: only http:// and https:// endpoints", t);
			e->nurls++;
			goto err_free;
		}
		e->nurls++;
	}
	free(list);
	if (!e->nurls) {
		snprintf(why, whylen, "--etcd '%s' names no endpoint", endpoints);
		return -EINVAL;
	}
	e->easy = curl_easy_init();
	e->multi = curl_multi_init();
	e->tok = json_tokener_new();
	if (!e->easy || !e->multi || !e->tok) {
		mv_etcd_close(e);
		return -ENOMEM;
	}
	return 0;

err_free:
	free(list);
	for (int i = 0; i < e->nurls; i++)
		free(e->urls[i]);
	e->nurls = 0;
	return -EINVAL;
}

void mv_etcd_close(struct mv_etcd *e)
{
	mv_etcd_unwatch(e);
	if (e->multi)
		curl_multi_cleanup(e->multi);
	if (e->easy)
		curl_easy_cleanup(e->easy);
	if (e->tok)
		json_tokener_free(e->tok);
	for (int i = 0; i < e->nurls; i++)
		free(e->urls[i]);
	free(e->sbuf);
	memset(e, 0, sizeof(*e));
}

struct body {
	char *p;
	size_t len, cap;
};

static size_t body_add(char *data, size_t sz, size_t n, void *arg)
{
	struct body *b = arg;
	size_t len = sz * n;

	if (b->len + len + 1 > b->cap) {
		size_t cap = (b->len + len + 1) * 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return 0; /* curl fails the transfer */
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, len);
	b->len += len;
	b->p[b->len] = 0;
	return len;
}

static void setup(CURL *h, const char *url, const char *json, struct curl_slist *hdr)
{
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
	/* A proxy in the environment is for the operator's browsing, not
	 * for the cluster's store. */
	curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
}

/*
 * POSTs req (consumed) to path on the current endpoint, moving on to the
 * next on a failure to connect. The parsed answer in *rep (the caller puts
 * it). 0 or -errno with why.
 */
static int call(struct mv_etcd *e, const char *path, struct json_object *req,
                struct json_object **rep, char *why, size_t whylen)
{
	const char *json = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	struct body b = {0};
	char url[512], err[CURL_ERROR_SIZE];
	long code = 0;
	int ret = -EHOSTUNREACH;

	*rep = NULL;
	for (int tries = 0; tries < e->nurls; tries++) {
		CURL *h = e->easy;
		curl_easy_reset(h);
		snprintf(url, sizeof(url), "%s%s", e->urls[e->cur], path);
		setup(h, url, json, hdr);
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_add);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
		curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
		err[0] = 0;
		b.len = 0;
		CURLcode rc = curl_easy_perform(h);
		/* Timed out once connected: the endpoint took the connection and
		 * did not answer (a connect that timed out is unreachable). */
		curl_off_t connected = 0;
		e->timed_out =
		    rc == CURLE_OPERATION_TIMEDOUT &&
		    curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connected) == CURLE_OK &&
		    connected > 0;
		if (rc == CURLE_OK) {
			curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
			ret = 0;
			break;
		}
		snprintf(why, whylen, "etcd at %s: %s", e->urls[e->cur],
		         err[0] ? err : curl_easy_strerror(rc));
		e->cur = (e->cur + 1) % e->nurls;
	}
	curl_slist_free_all(hdr);
	json_object_put(req);
	if (ret)
		goto out;
	*rep = b.p ? json_tokener_parse(b.p) : NULL;
	if (!*rep) {
		snprintf(why, whylen, "etcd at %s%s: HTTP %ld, not JSON", e->urls[e->cur], path,
		         code);
		ret = -EPROTO;
	} else if (code != 200) {
		struct json_object *m;
		snprintf(why, whylen, "etcd at %s%s: HTTP %ld: %s", e->urls[e->cur], path, code,
		         json_object_object_get_ex(*rep, "message", &m) ? json_object_get_string(m)
		                                                        : "no message");
		json_object_put(*rep);
		*rep = NULL;
		ret = -EPROTO;
	}
out:
	free(b.p);
	return ret;
}

/* A text as a base64 JSON string. */
static struct json_object *b64_string(const char *s, size_t len)
{
	char *out = malloc((len + 2) / 3 * 4 + 1);
	struct json_object *o;

	if (!out)
		return NULL;
	mv_b64_encode(s, len, out, (len + 2) / 3 * 4 + 1);
	o = json_object_new_string(out);
	free(out);
	return o;
}

/* A base64 field of o decoded into a fresh NUL-terminated buffer. */
static char *b64_field(struct json_object *o, const char *name, size_t *len)
{
	struct json_object *f;
	const char *s;
	char *out;

	*len = 0;
	if (!json_object_object_get_ex(o, name, &f))
		return strdup("");
	s = json_object_get_string(f);
	size_t n = strlen(s);
	out = malloc(n / 4 * 3 + 1);
	if (!out)
		return NULL;
	long got = mv_b64_decode(s, n, out, n / 4 * 3 + 1);
	if (got < 0) {
		free(out);
		return NULL;
	}
	out[got] = 0;
	*len = (size_t)got;
	return out;
}

/* etcd's int64s are JSON strings; absent ones are 0. */
static int64_t int_field(struct json_object *o, const char *name)
{
	struct json_object *f;

	if (!o || !json_object_object_get_ex(o, name, &f))
		return 0;
	return json_object_get_int64(f);
}

static struct json_object *id_string(int64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%" PRId64, v);
	return json_object_new_string(s);
}

int mv_etcd_grant(struct mv_etcd *e, int ttl, int64_t *lease, char *why, size_t whylen)
{
	struct json_object *req = json_object_new_object(), *rep;
	int ret;

	json_object_object_add(req, "TTL", json_object_new_int(ttl));
	if ((ret = call(e, "/v3/lease/grant", req, &rep, why, whylen)))
		return ret;
	*lease = int_field(rep, "ID");
	json_object_put(rep);
	if (!*lease) {
		snprintf(why, whylen, "etcd granted no lease");
		return -EPROTO;
	}
	return 0;
}

int mv_etcd_keepalive(struct mv_etcd *e, int64_t lease, int64_t *ttl, char *why, size_t whylen)
{
	struct json_object *req = json_object_new_object(), *rep, *res;
	int ret;

	json_object_object_add(req, "ID", id_string(lease));
	if ((ret = call(e, "/v3/lease/keepalive", req, &rep, why, whylen)))
		return ret;
	/* A stream of one answer: {"result": {"ID", "TTL"}}; no TTL when the
	 * lease is gone. */
	*ttl = int_field(json_object_object_get_ex(rep, "result", &res) ? res : NULL, "TTL");
	json_object_put(rep);
	return 0;
}

int mv_etcd_revoke(struct mv_etcd *e, int64_t lease, char *why, size_t whylen)
{
	struct json_object *req = json_object_new_object(), *rep;
	int ret;

	json_object_object_add(req, "ID", id_string(lease));
	if ((ret = call(e, "/v3/lease/revoke", req, &rep, why, whylen)))
		return ret;
	json_object_put(rep);
	return 0;
}

static struct json_object *put_op(const char *key, const char *val, int64_t lease)
{
	struct json_object *p = json_object_new_object();

	json_object_object_add(p, "key", b64_string(key, strlen(key)));
	json_object_object_add(p, "value", b64_string(val, strlen(val)));
	if (lease)
		json_object_object_add(p, "lease", id_string(lease));
	return p;
}

int mv_etcd_put(struct mv_etcd *e, const char *key, const char *val, int64_t lease, int create_only,
                char *why, size_t whylen)
{
	struct json_object *rep, *f;
	int ret;

	if (!create_only) {
		if ((ret = call(e, "/v3/kv/put", put_op(key, val, lease), &rep, why, whylen)))
			return ret;
		json_object_put(rep);
		return 0;
	}
	/* A transaction: put only if the key was never created (or is gone). */
	struct json_object *req = json_object_new_object(), *cmp = json_object_new_object();
	struct json_object *cmps = json_object_new_array(), *ok = json_object_new_array();
	struct json_object *put = json_object_new_object();
	json_object_object_add(cmp, "key", b64_string(key, strlen(key)));
	json_object_object_add(cmp, "target", json_object_new_string("CREATE"));
	json_object_object_add(cmp, "result", json_object_new_string("EQUAL"));
	json_object_object_add(cmp, "create_revision", json_object_new_string("0"));
	json_object_array_add(cmps, cmp);
	json_object_object_add(put, "request_put", put_op(key, val, lease));
	json_object_array_add(ok, put);
	json_object_object_add(req, "compare", cmps);
	json_object_object_add(req, "success", ok);
	if ((ret = call(e, "/v3/kv/txn", req, &rep, why, whylen)))
		return ret;
	int won = json_object_object_get_ex(rep, "succeeded", &f) && json_object_get_boolean(f);
	json_object_put(rep);
	if (!won) {
		snprintf(why, whylen, "key %s exists", key);
		return -EEXIST;
	}
	return 0;
}

int mv_etcd_del(struct mv_etcd *e, const char *key, char *why, size_t whylen)
{
	struct json_object *req = json_object_new_object(), *rep;
	int ret;

	json_object_object_add(req, "key", b64_string(key, strlen(key)));
	if ((ret = call(e, "/v3/kv/deleterange", req, &rep, why, whylen)))
		return ret;
	json_object_put(rep);
	return 0;
}

/* The end of a prefix's range: the prefix with its last byte plus one. */
static struct json_object *range_end(const char *prefix)
{
	size_t n = strlen(prefix);
	char *end = strdup(prefix);
	struct json_object *o;

	if (!end || !n)
		return NULL;
	end[n - 1]++;
	o = b64_string(end, n);
	free(end);
	return o;
}

/* One kv object of a range answer or a watch event: fn(key, value). */
static int kv_deliver(struct json_object *kv,
                      void (*fn)(void *, const char *, const char *, size_t, int), void *arg,
                      int deleted)
{
	size_t klen, vlen;
	char *k = b64_field(kv, "key", &klen), *v = b64_field(kv, "value", &vlen);

	if (k && v)
		fn(arg, k, v, vlen, deleted);
	free(k);
	free(v);
	return k && v ? 0 : -EPROTO;
}

struct range_arg {
	mv_etcd_kv_fn fn;
	void *arg;
};

static void range_one(void *arg, const char *key, const char *val, size_t vlen, int deleted)
{
	struct range_arg *ra = arg;

	ra->fn(ra->arg, key, val, vlen);
}

int mv_etcd_range(struct mv_etcd *e, const char *prefix, mv_etcd_kv_fn fn, void *arg, int64_t *rev,
                  char *why, size_t whylen)
{
	struct json_object *req = json_object_new_object(), *rep, *kvs, *hdr;
	struct range_arg ra = {fn, arg};
	int ret;

	json_object_object_add(req, "key", b64_string(prefix, strlen(prefix)));
	json_object_object_add(req, "range_end", range_end(prefix));
	if ((ret = call(e, "/v3/kv/range", req, &rep, why, whylen)))
		return ret;
	*rev = int_field(json_object_object_get_ex(rep, "header", &hdr) ? hdr : NULL, "revision");
	if (json_object_object_get_ex(rep, "kvs", &kvs))
		for (size_t i = 0; i < json_object_array_length(kvs); i++)
			kv_deliver(json_object_array_get_idx(kvs, i), range_one, &ra, 0);
	json_object_put(rep);
	return 0;
}

/* One object of the watch stream: {"result": {"header", "events", ...}}. */
static void watch_object(struct mv_etcd *e, struct json_object *o)
{
	struct json_object *res, *evs, *hdr, *f;

	if (!json_object_object_get_ex(o, "result", &res)) {
		e->watch_broken = 1;
		snprintf(e->watch_why, sizeof(e->watch_why), "watch stream: %.100s",
		         json_object_to_json_string(o));
		return;
	}
	if (json_object_object_get_ex(res, "canceled", &f) && json_object_get_boolean(f)) {
		e->watch_broken = 1;
		snprintf(e->watch_why, sizeof(e->watch_why), "etcd cancelled the watch");
		return;
	}
	if (json_object_object_get_ex(res, "events", &evs)) {
		for (size_t i = 0; i < json_object_array_length(evs); i++) {
			struct json_object *ev = json_object_array_get_idx(evs, i), *kv, *t;
			int del = json_object_object_get_ex(ev, "type", &t) &&
			          !strcmp(json_object_get_string(t), "DELETE");
			if (json_object_object_get_ex(ev, "kv", &kv))
				kv_deliver(kv, e->on_event, e->arg, del);
		}
	}
	if (json_object_object_get_ex(res, "header", &hdr))
		e->watch_rev = int_field(hdr, "revision");
}

/* Stream bytes: parse every whole object, keep the rest for later. */
static size_t watch_bytes(char *data, size_t sz, size_t n, void *arg)
{
	struct mv_etcd *e = arg;
	size_t len = sz * n, off = 0;

	while (off < len) {
		struct json_object *o = json_tokener_parse_ex(e->tok, data + off, (int)(len - off));
		enum json_tokener_error je = json_tokener_get_error(e->tok);
		if (je == json_tokener_continue)
			break; /* the tokener keeps the partial object */
		if (!o) {
			e->watch_broken = 1;
			snprintf(e->watch_why, sizeof(e->watch_why), "watch stream: %s",
			         json_tokener_error_desc(je));
			json_tokener_reset(e->tok);
			return len;
		}
		off += json_tokener_get_parse_end(e->tok);
		json_tokener_reset(e->tok);
		watch_object(e, o);
		json_object_put(o);
		while (off < len && (data[off] == '\n' || data[off] == '\r' || data[off] == ' '))
			off++;
	}
	return len;
}

int mv_etcd_watch(struct mv_etcd *e, const char *prefix, int64_t from, char *why, size_t whylen)
{
	struct json_object *req = json_object_new_object(), *cr = json_object_new_object();
	char url[512];

	mv_etcd_unwatch(e);
	json_object_object_add(cr, "key", b64_string(prefix, strlen(prefix)));
	json_object_object_add(cr, "range_end", range_end(prefix));
	json_object_object_add(cr, "start_revision", id_string(from));
	json_object_object_add(req, "create_request", cr);
	e->wbody = strdup(json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
	json_object_put(req);
	e->whdr = curl_slist_append(NULL, "Content-Type: application/json");
	e->watch = curl_easy_init();
	if (!e->wbody || !e->whdr || !e->watch) {
		mv_etcd_unwatch(e);
		return -ENOMEM;
	}
	snprintf(url, sizeof(url), "%s/v3/watch", e->urls[e->cur]);
	setup(e->watch, url, e->wbody, e->whdr);
	curl_easy_setopt(e->watch, CURLOPT_WRITEFUNCTION, watch_bytes);
	curl_easy_setopt(e->watch, CURLOPT_WRITEDATA, e);
	/* A stream that stays up: TCP keepalive finds a vanished server. */
	curl_easy_setopt(e->watch, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e->watch, CURLOPT_TCP_KEEPIDLE, 5L);
	curl_easy_setopt(e->watch, CURLOPT_TCP_KEEPINTVL, 2L);
	json_tokener_reset(e->tok);
	e->watch_broken = 0;
	e->watch_rev = from - 1;
	curl_multi_add_handle(e->multi, e->watch);
	(void)why;
	(void)whylen;
	return 0;
}

void mv_etcd_unwatch(struct mv_etcd *e)
{
	if (e->watch) {
		curl_multi_remove_handle(e->multi, e->watch);
		curl_easy_cleanup(e->watch);
		e->watch = NULL;
	}
	free(e->wbody);
	e->wbody = NULL;
	curl_slist_free_all(e->whdr);
	e->whdr = NULL;
}

int mv_etcd_watch_poll(struct mv_etcd *e, int timeout_ms, int wake_fd, char *why, size_t whylen)
{
	struct curl_waitfd extra = {.fd = wake_fd, .events = CURL_WAIT_POLLIN};
	int running = 0, left;

	if (!e->watch) {
		snprintf(why, whylen, "no watch");
		return -EPIPE;
	}
	curl_multi_poll(e->multi, &extra, wake_fd >= 0 ? 1 : 0, timeout_ms, NULL);
	curl_multi_perform(e->multi, &running);
	for (CURLMsg *msg; (msg = curl_multi_info_read(e->multi, &left));) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		e->watch_broken = 1;
		snprintf(e->watch_why, sizeof(e->watch_why), "watch stream on %s ended: %s",
		         e->urls[e->cur], curl_easy_strerror(msg->data.result));
	}
	if (e->watch_broken) {
		snprintf(why, whylen, "%s", e->watch_why);
		mv_etcd_unwatch(e);
		e->cur = (e->cur + 1) % e->nurls;
		return -EPIPE;
	}
	return 0;
}
