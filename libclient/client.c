/* SPDX-License-Identifier: MIT */
/*
 * libclient: connects to the local mover, creates one submission and one
 * completion ring per mover shard and the list arena, and manages peers and
 * imports over the control socket (memory is memory.c's). Batches are built
 * in batch.c, completions read in events.c. The only system calls on the
 * data path are the wake-ups shmring makes when the other side sleeps.
 */
#include "mvc_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mv_host.h"
#include "mv_sock.h"

int mvc_fail(struct mvc *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return err;
}

const char *mvc_version(void)
{
	return MVC_VERSION;
}

const char *mvc_error(const struct mvc *c)
{
	return c->err;
}

int mvc_info(const struct mvc *c, struct mvc_info *info)
{
	*info = c->info;
	return 0;
}

uint64_t mvc_shard_bytes(const struct mvc *c, uint32_t shard)
{
	return shard < c->info.nshards ? c->sh[shard].bytes : 0;
}

uint64_t mvc_shard_descs(const struct mvc *c, uint32_t shard)
{
	return shard < c->info.nshards ? c->sh[shard].descs : 0;
}

uint32_t mvc_inflight(const struct mvc *c)
{
	return c->inflight;
}

/* One request, one reply: the control path is synchronous and rare. */
int mvc_call(struct mvc *c, uint16_t type, const void *payload, size_t len, const int *fds,
             int nfds, void *rep, size_t replen, int *rfds, int maxrfds, int *nrfds)
{
	struct mv_msg_hdr h = {.magic = MV_WIRE_MAGIC, .version = MV_WIRE_VERSION, .type = type};
	union mv_cmsg u;
	struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)payload, len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
	ssize_t n;

	if (c->cut[0])
		return mvc_fail(c, -EPROTO, "the mover cut this connection off: %s", c->cut);
	if (c->dead)
		return mvc_fail(c, -EPIPE, "the mover connection is gone");
	h.len = (uint32_t)len;
	h.seq = ++c->seq;
	mv_fds_put(&mh, &u, fds, nfds);
	/* A mover that refuses a connection says why (seq 0) and hangs up, so
	 * a failed send may still have that answer queued behind it. */
	int sent = sendmsg(c->sock, &mh, MSG_NOSIGNAL) < 0 ? -errno : 0;

	struct mv_msg_hdr rh;
	struct iovec riov[2] = {{&rh, sizeof(rh)}, {rep, replen}};
	struct msghdr rm = {.msg_iov = riov,
	                    .msg_iovlen = 2,
	                    .msg_control = u.buf,
	                    .msg_controllen = sizeof(u.buf)};
	/* ECONNRESET (the mover closed with our request unread) comes before
	 * what it had queued for us: read on past it once. */
	int resets = 0;
	do
		n = recvmsg(c->sock, &rm, MSG_CMSG_CLOEXEC | (sent ? MSG_DONTWAIT : 0));
	while (n < 0 && (errno == EINTR || (errno == ECONNRESET && !resets++)));
	if (n >= (ssize_t)(sizeof(rh) + sizeof(struct mv_reply_hdr)) && rh.magic == MV_WIRE_MAGIC &&
	    rh.seq == 0 && ((const struct mv_reply_hdr *)rep)->status) {
		const struct mv_reply_hdr *r = rep;
		c->dead = 1;
		return mvc_fail(c, r->status, "the mover refused this connection: %.124s", r->msg);
	}
	if (sent) {
		c->dead = 1;
		return mvc_fail(c, sent, "sending to the mover: %s", strerror(-sent));
	}
	if (n <= 0) {
		c->dead = 1;
		return mvc_fail(c, n ? -errno : -EPIPE, "the mover closed the connection");
	}
	int got = mv_fds_take(&rm, rfds, rfds && nrfds ? maxrfds : 0);
	if (nrfds)
		*nrfds = got;
	if ((size_t)n < sizeof(rh) + sizeof(struct mv_reply_hdr) || rh.magic != MV_WIRE_MAGIC ||
	    rh.seq != h.seq) {
		c->dead = 1;
		return mvc_fail(c, -EPROTO, "malformed reply from the mover");
	}
	const struct mv_reply_hdr *r = rep;
	if (r->status)
		return mvc_fail(c, r->status, "%.124s", r->msg);
	return 0;
}

static void close_rings(struct mvc *c)
{
	for (uint32_t s = 0; s < MV_MAX_SHARDS; s++) {
		shmring_close(&c->sh[s].sub);
		shmring_close(&c->sh[s].comp);
		if (c->sh[s].doorbell >= 0)
			close(c->sh[s].doorbell);
		c->sh[s].doorbell = -1;
	}
}

static __thread char connect_err[256];

const char *mvc_connect_error(void)
{
	return connect_err;
}

/* How long mvc_wait() polls before it sleeps: $MVC_WAIT_SPIN_US
 * (microseconds, 0 never), else MVC_WAIT_SPIN_DEFAULT_NS. */
#define MVC_WAIT_SPIN_DEFAULT_NS 20000
static int wait_spin(int64_t *out, char *why, size_t whylen)
{
	const char *env = getenv("MVC_WAIT_SPIN_US");
	char *end;

	*out = MVC_WAIT_SPIN_DEFAULT_NS;
	if (!env || !*env)
		return 0;
	errno = 0;
	unsigned long v = strtoul(env, &end, 10);
	if (errno || *end || v > 1000000) {
		snprintf(why, whylen, "MVC_WAIT_SPIN_US=%s: give microseconds, 0 to 1000000", env);
		return -EINVAL;
	}
	*out = (int64_t)v * 1000;
	return 0;
}

/* A size in bytes from environment variable name, the one grammar of
 * libmvc's size variables: decimal digits, then an optional K, M or G (in
 * either case; 1024-based), at most max. 1 and *out when set, 0 when unset
 * or empty, -EINVAL with why when it is not such a size. */
static int env_bytes(const char *name, uint64_t max, uint64_t *out, char *why, size_t whylen)
{
	const char *env = getenv(name), *p;
	uint64_t v = 0;
	int shift = 0;

	if (!env || !*env)
		return 0;
	for (p = env; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - 9) / 10)
			goto bad;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (p == env)
		goto bad;
	shift = *p == 'K' || *p == 'k'   ? 10
	        : *p == 'M' || *p == 'm' ? 20
	        : *p == 'G' || *p == 'g' ? 30
	                                 : 0;
	if (shift)
		p++;
	if (*p || v > max >> shift)
		goto bad;
	*out = v << shift;
	return 1;
bad:
	snprintf(why, whylen,
	         "%s=%s: give bytes as digits with an optional K, M or G (such as 64M), "
	         "at most %" PRIu64,
	         name, env, max);
	return -EINVAL;
}

/* From how many bytes a list goes into the arena by streaming stores
 * (mv_copy.h): $MVC_ARENA_NT_MIN (env_bytes(); 0 never), else
 * MVC_ARENA_NT_MIN_DEFAULT. The mover reads a list from another core,
 * so a list's lines cached here would only be fetched from this core's
 * caches there; with ordinary stores each line is also read for ownership
 * first. Measured (2026-11-26, bench_submit.py's C side, write_paged +
 * submit of 65,536 pages, two 256 KiB arrays; three interleaved pairs): on
 * the H100 machine's Xeon 61.1-62.8 us with memcpy, 32.6-33.7 with
 * streaming stores; on the 2-core EPYC 22.9-23.7 against 23.3-23.5. */
#define MVC_ARENA_NT_MIN_DEFAULT (64u << 10)
static int arena_nt_min(uint64_t *out, char *why, size_t whylen)
{
	int ret = env_bytes("MVC_ARENA_NT_MIN", 1ull << 40, out, why, whylen);

	if (ret <= 0) {
		if (!ret)
			*out = MVC_ARENA_NT_MIN_DEFAULT;
		return ret;
	}
	if (!*out)
		*out = UINT64_MAX; /* 0: never */
	return 0;
}

/* The arena size: opts, else $MVC_LIST_ARENA (env_bytes()), else the
 * default. */
static int arena_size(const struct mvc_opts *o, uint64_t *out, char *why, size_t whylen)
{
	if (o && o->list_arena) {
		*out = o->list_arena;
		return 0;
	}
	int ret = env_bytes("MVC_LIST_ARENA", MV_ARENA_MAX, out, why, whylen);
	if (!ret)
		*out = MV_ARENA_DEFAULT;
	return ret < 0 ? ret : 0;
}

int mvc_connect(struct mvc **out, const char *path)
{
	return mvc_connect_opts(out, path, NULL);
}

/*
 * One session with the mover at c->path: the socket, HELLO, a submission
 * and a completion ring per shard, the list arena and ATTACH, and the batch
 * tables. The eventfd c->efd outlives sessions (made here the first time).
 * 0, or -errno with c->err set and nothing of the session left open.
 */
int mvc_session_open(struct mvc *c)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct mv_hello_rep hello;
	int fds[2 * MV_MAX_SHARDS + 2], nfds = 0, ret;

	for (uint32_t s = 0; s < MV_MAX_SHARDS; s++) {
		c->sh[s].doorbell = -1;
		c->sh[s].sub.fd = c->sh[s].comp.fd = c->sh[s].sub.pidfd = c->sh[s].comp.pidfd = -1;
	}
	c->arena.fd = -1;
	c->dead = 0;
	if (strlen(c->path) >= sizeof(a.sun_path))
		return mvc_fail(c, -ENAMETOOLONG, "socket path %s is too long", c->path);
	strcpy(a.sun_path, c->path);
	c->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->sock < 0 || connect(c->sock, (struct sockaddr *)&a, sizeof(a)) < 0) {
		ret = mvc_fail(c, -errno, "connecting to the mover at %s: %s", c->path,
		               strerror(errno));
		goto err_sock;
	}
	if (c->ctl_timeout_ms) {
		/* A mover that accepted but does not answer must not hold the
		 * application's thread for ever (reconnect.c). */
		struct timeval tv = {.tv_sec = c->ctl_timeout_ms / 1000,
		                     .tv_usec = (c->ctl_timeout_ms % 1000) * 1000};
		setsockopt(c->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	ret = mvc_call(c, MV_MSG_HELLO, NULL, 0, NULL, 0, &hello, sizeof(hello), fds, MV_MAX_SHARDS,
	               &nfds);
	if (ret == -EPROTONOSUPPORT) {
		/* The mover names its protocol; we name ours and our release. */
		char m[sizeof(c->err)];
		snprintf(m, sizeof(m), "%s", c->err);
		snprintf(c->err, sizeof(c->err), "%s (this is libmvc %s, protocol %u)", m,
		         MVC_VERSION, MV_WIRE_VERSION);
	}
	if (ret)
		goto err_sock;
	if (hello.nshards == 0 || hello.nshards > MV_MAX_SHARDS ||
	    (uint32_t)nfds != hello.nshards || hello.max_batches == 0 ||
	    hello.max_batches > 1u << 20) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		ret = mvc_fail(c, -EPROTO, "the mover's hello is malformed (%u shards, %d fds)",
		               hello.nshards, nfds);
		goto err_sock;
	}
	c->info.client_id = hello.client_id;
	c->info.nshards = hello.nshards;
	c->info.max_batches = hello.max_batches;
	c->info.mover_id = hello.mover_id;
	memcpy(c->info.provider, hello.provider, sizeof(c->info.provider));
	c->info.provider[sizeof(c->info.provider) - 1] = 0;
	c->flags = hello.flags;
	c->max_write = hello.max_write;

	for (uint32_t s = 0; s < hello.nshards; s++) {
		/* hdr.user: the share this connection asks for (mv_wire.h). */
		struct shmring_opts so = {.capacity = hello.sub_capacity,
		                          .slot_size = 64,
		                          .user = c->share_pct,
		                          .name = "mvc-sub"};
		struct shmring_opts co = {
		    .capacity = hello.comp_capacity, .slot_size = 128, .name = "mvc-comp"};
		c->sh[s].doorbell = fds[s];
		ret = shmring_create(&c->sh[s].sub, &so, SHMRING_PRODUCER);
		if (!ret)
			ret = shmring_create(&c->sh[s].comp, &co, SHMRING_CONSUMER);
		if (ret) {
			mvc_fail(c, ret, "creating the rings of shard %u: %s", s,
			         shmring_error(&c->sh[s].sub));
			for (uint32_t k = s + 1; k < hello.nshards; k++)
				close(fds[k]);
			goto err_rings;
		}
		shmring_set_doorbell(&c->sh[s].sub, c->sh[s].doorbell);
	}
	if (c->efd < 0)
		c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0) {
		ret = mvc_fail(c, -errno, "eventfd: %s", strerror(errno));
		goto err_rings;
	}
	struct mv_attach_req req = {.nshards = hello.nshards};
	struct mv_reply_hdr rep;
	for (uint32_t s = 0; s < hello.nshards; s++) {
		fds[s] = shmring_fd(&c->sh[s].sub);
		fds[hello.nshards + s] = shmring_fd(&c->sh[s].comp);
	}
	fds[2 * hello.nshards] = c->efd;
	ret = mvc_arena_open(&c->arena, c->arena_size, hello.max_batches, c->err, sizeof(c->err));
	if (ret)
		goto err_rings;
	fds[2 * hello.nshards + 1] = c->arena.fd;
	ret = mvc_call(c, MV_MSG_ATTACH, &req, sizeof(req), fds, (int)(2 * hello.nshards + 2), &rep,
	               sizeof(rep), NULL, 0, NULL);
	if (ret)
		goto err_rings;
	ret = mvc_batch_tables_alloc(c, hello.max_batches);
	if (ret) {
		mvc_fail(c, ret, "no memory for %u batch ids", hello.max_batches);
		goto err_tables;
	}
	return 0;

err_tables:
	mvc_batch_tables_free(c);
err_rings:
	close_rings(c);
	mvc_arena_close(&c->arena);
err_sock:
	mvc_event_fd_unwatch(c);
	if (c->sock >= 0)
		close(c->sock);
	c->sock = -1;
	c->info.nshards = 0;
	c->info.max_batches = 0;
	c->dead = 1;
	return ret;
}

/* Undoes mvc_session_open but for the eventfd: the handle stays, with no
 * mover, no shards and no batch ids, until the next session. */
void mvc_session_close(struct mvc *c)
{
	mvc_event_fd_unwatch(c);
	if (c->sock >= 0)
		close(c->sock);
	c->sock = -1;
	close_rings(c);
	mvc_arena_close(&c->arena);
	mvc_batch_tables_free(c);
	c->info.nshards = 0;
	c->info.max_batches = 0; /* no batch tables to look into */
	c->nfree = 0;
	c->inflight = 0;
	c->open = 0;
	c->dead = 1;
}

int mvc_connect_opts(struct mvc **out, const char *path, const struct mvc_opts *opts)
{
	char buf[108];
	int ret;
	struct mvc *c = calloc(1, sizeof(*c));

	*out = NULL;
	connect_err[0] = 0;
	if (!c)
		return -ENOMEM;
	c->sock = c->efd = c->arena.fd = -1;
	c->epfd = c->tfd = c->ep_sock = -1;
	for (uint32_t s = 0; s < MV_MAX_SHARDS; s++)
		c->sh[s].doorbell = -1;
	ret = arena_size(opts, &c->arena_size, c->err, sizeof(c->err));
	if (ret)
		goto err_free;
	ret = wait_spin(&c->wait_spin_ns, c->err, sizeof(c->err));
	if (ret)
		goto err_free;
	ret = arena_nt_min(&c->arena_nt_min, c->err, sizeof(c->err));
	if (ret)
		goto err_free;
	if (opts && opts->share_pct > MV_SHARE_FULL) {
		snprintf(c->err, sizeof(c->err),
		         "mvc_opts.share_pct %u: give a percent of the uid's weight, 1 to %u "
		         "(0: all of it)",
		         opts->share_pct, MV_SHARE_FULL);
		ret = -EINVAL;
		goto err_free;
	}
	c->share_pct = opts && opts->share_pct ? opts->share_pct : MV_SHARE_FULL;
	ret = mvc_huge_default(opts, &c->huge, c->err, sizeof(c->err));
	if (ret)
		goto err_free;
	ret = mvc_rejoin_init(c, opts ? opts->flags : 0);
	if (ret)
		goto err_free;
	if (!path)
		path = mv_default_socket(buf, sizeof(buf));
	if (strlen(path) >= sizeof(c->path)) {
		ret = mvc_fail(c, -ENAMETOOLONG, "socket path %s is too long", path);
		goto err_free;
	}
	strcpy(c->path, path);
	ret = mvc_session_open(c);
	if (ret)
		goto err_efd;
	mv_host_id(c->host);
	*out = c;
	return 0;

err_efd:
	if (c->efd >= 0)
		close(c->efd);
err_free:
	/* The reason outlives the handle. */
	snprintf(connect_err, sizeof(connect_err), "%s", c->err[0] ? c->err : strerror(-ret));
	free(c);
	return ret;
}

void mvc_disconnect(struct mvc *c)
{
	if (!c)
		return;
	mvc_session_close(c);
	mvc_event_fd_close(c);
	if (c->efd >= 0)
		close(c->efd);
	mvc_objs_free(c);
	free(c->imm_tab);
	free(c->imm_due);
	mvc_events_free(c);
	free(c);
}

/* A request that names one id (region, peer, import) and wants no payload back. */
int mvc_id_call(struct mvc *c, uint16_t type, uint32_t id)
{
	struct mv_id_req req = {.id = id};
	struct mv_reply_hdr rep;

	return mvc_call(c, type, &req, sizeof(req), NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);
}

int mvc_address(struct mvc *c, void *buf, size_t *len)
{
	struct mv_addr_rep rep;
	size_t need = offsetof(struct mv_addr_blob, addr) + c->info.nshards * MV_MAX_ADDRLEN;
	int ret = mvc_call(c, MV_MSG_ADDR, NULL, 0, NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);

	if (ret)
		return ret;
	if (*len < need)
		return mvc_fail(c, -ENOSPC, "address blob needs %zu bytes, buffer has %zu", need,
		                *len);
	memcpy(buf, &rep.blob, need);
	*len = need;
	return 0;
}

int mvc_region_blob(struct mvc *c, uint32_t region, void *buf, size_t *len)
{
	/* Asking again is cheap and keeps the client free of per-region state. */
	struct mv_id_req req = {.id = mvc_cur(c, MVC_OBJ_REGION, region)};
	struct mv_reg_rep rep;
	int ret;

	memset(&rep, 0, sizeof(rep));
	ret =
	    mvc_call(c, MV_MSG_BLOB, &req, sizeof(req), NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);
	if (ret)
		return ret;
	/* The mover's word, checked before it sizes a copy out of rep. */
	if (rep.blob_len > sizeof(rep.blob))
		return mvc_fail(c, -EPROTO,
		                "the mover's reply claims a region blob of %u bytes; a blob is at "
		                "most %zu (mover and library from different builds?)",
		                rep.blob_len, sizeof(rep.blob));
	if (*len < rep.blob_len)
		return mvc_fail(c, -ENOSPC, "region blob needs %u bytes, buffer has %zu",
		                rep.blob_len, *len);
	memcpy(buf, &rep.blob, rep.blob_len);
	*len = rep.blob_len;
	return 0;
}

int mvc_peer_add(struct mvc *c, const void *addr, size_t len, uint32_t *peer)
{
	struct mv_id_rep rep;
	int ret;

	if (len > sizeof(struct mv_addr_blob))
		return mvc_fail(c, -EINVAL, "address blob of %zu bytes is larger than any mover's",
		                len);
	ret = mvc_call(c, MV_MSG_PEER_ADD, addr, len, NULL, 0, &rep, sizeof(rep), NULL, 0, NULL);
	if (ret)
		return ret;
	struct mvc_obj o = {.kind = MVC_OBJ_PEER, .cur = rep.id, .fd = -1};
	ret = mvc_obj_add(c, &o, addr, (uint32_t)len, peer);
	if (ret) {
		mvc_id_call(c, MV_MSG_PEER_DEL, rep.id);
		return mvc_fail(c, ret, "no memory to keep the peer for a reconnect");
	}
	rep.r.msg[sizeof(rep.r.msg) - 1] = 0;
	/* The mover checked the blob: its mover id is where it says. */
	uint64_t id = 0;
	if (len >= offsetof(struct mv_addr_blob, mover_id) + sizeof(id))
		memcpy(&id, (const char *)addr + offsetof(struct mv_addr_blob, mover_id),
		       sizeof(id));
	mvc_peer_added(c, *peer, id, rep.live, rep.r.msg);
	return 0;
}

int mvc_peer_remove(struct mvc *c, uint32_t peer)
{
	/* The mover drops the peer's imports with it; so do we. */
	mvc_obj_del_imports_of(c, peer);
	uint32_t cur = mvc_obj_del(c, MVC_OBJ_PEER, peer);
	int ret = cur == MVC_ID_LOST ? 0 : mvc_id_call(c, MV_MSG_PEER_DEL, cur);

	if (!ret)
		mvc_peer_removed(c, peer);
	return ret;
}

int mvc_unimport(struct mvc *c, uint32_t handle)
{
	for (uint32_t i = 0; i < c->nlocal_gpu; i++)
		if (c->local_gpu[i] == handle)
			c->local_gpu[i] = c->local_gpu[--c->nlocal_gpu];
	uint32_t cur = mvc_obj_del(c, MVC_OBJ_IMPORT, handle); /* clears its copied bit too */
	return cur == MVC_ID_LOST ? 0 : mvc_id_call(c, MV_MSG_UNIMPORT, cur);
}

int mvc_import(struct mvc *c, uint32_t peer, const void *blob, size_t len, uint32_t *handle)
{
	struct mv_import_req req = {.peer = mvc_cur(c, MVC_OBJ_PEER, peer),
	                            .blob_len = (uint32_t)len};
	struct mv_id_rep rep;
	int ret;

	if (len > sizeof(req.blob))
		return mvc_fail(c, -EINVAL, "region blob of %zu bytes is larger than any mover's",
		                len);
	memcpy(&req.blob, blob, len);
	ret = mvc_call(c, MV_MSG_IMPORT, &req, offsetof(struct mv_import_req, blob) + len, NULL, 0,
	               &rep, sizeof(rep), NULL, 0, NULL);
	/* The peer handed out a blob of another protocol: garbage from a
	 * mover that speaks ours. What we expect of it fails. */
	if (ret == -EPROTO)
		mvc_peer_down(c, peer, -EPROTO, MVC_CAUSE_PEER_BAD, mvc_error(c));
	if (ret)
		return ret;
	struct mvc_obj o = {.kind = MVC_OBJ_IMPORT, .cur = rep.id, .fd = -1, .peer = peer};
	ret = mvc_obj_add(c, &o, blob, (uint32_t)len, handle);
	if (ret) {
		mvc_id_call(c, MV_MSG_UNIMPORT, rep.id);
		return mvc_fail(c, ret, "no memory to keep the import for a reconnect");
	}
	mvc_copied_set(c, *handle, rep.path);
	/* A handle freed with its peer can come back for another region. */
	for (uint32_t i = 0; i < c->nlocal_gpu; i++)
		if (c->local_gpu[i] == *handle)
			c->local_gpu[i] = c->local_gpu[--c->nlocal_gpu];
	if (len >= offsetof(struct mv_region_blob, shard) && (req.blob.flags & MV_BLOB_GPU) &&
	    !memcmp(req.blob.host, c->host, sizeof(c->host)) &&
	    c->nlocal_gpu < sizeof(c->local_gpu) / sizeof(c->local_gpu[0]))
		c->local_gpu[c->nlocal_gpu++] = *handle;
	return 0;
}
