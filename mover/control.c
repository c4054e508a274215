/* SPDX-License-Identifier: MIT */
/*
 * The control socket: a SOCK_SEQPACKET Unix socket (mode 0600) where clients
 * say hello, pass their rings and memory as file descriptors, and manage
 * peers and imports. Every message is a versioned header and a payload whose
 * length must match what arrived; a malformed one gets an error reply and
 * closes that client alone. A client that hangs up or dies (its pidfd turns
 * readable) is detached: shards cancel its queued work, wait for what was
 * posted, and then its regions are deregistered. Runs on the main thread.
 */
#include "cluster.h"
#include "mover.h"
#include "msg_check.h"
#include "mv_sock.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#define TAG_LISTEN  0xffffff01u
#define TAG_SIGNAL  0xffffff02u
#define TAG_SHARDS  0xffffff03u
#define TAG_CLUSTER 0xffffff04u
#define TAG_PIDFD   0x01000000u

static uint16_t client_gen[MV_MAX_CLIENTS];

int mv_control_reply(int sock, const struct mv_msg_hdr *req, const void *payload, size_t len,
                     const int *fds, int nfds)
{
	struct mv_msg_hdr h = {.magic = MV_WIRE_MAGIC, .version = MV_WIRE_VERSION};
	struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)payload, len}};
	union mv_cmsg u;
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};

	h.type = (uint16_t)(req->type | MV_MSG_REPLY);
	h.len = (uint32_t)len;
	h.seq = req->seq;
	mv_fds_put(&mh, &u, fds, nfds);
	return sendmsg(sock, &mh, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

static int send_error(int sock, const struct mv_msg_hdr *req, int status, const char *msg)
{
	struct mv_reply_hdr r = {.status = status};

	snprintf(r.msg, sizeof(r.msg), "%s", msg);
	return mv_control_reply(sock, req, &r, sizeof(r), NULL, 0);
}

static int do_hello(struct mover *mv, struct mv_client *cl, struct mv_rx *m, char *why,
                    size_t whylen)
{
	struct mv_hello_rep rep = {0};
	int fds[MV_MAX_SHARDS];
	int ret = mv_msg_need(m, mv->nshards, why, whylen);

	if (ret)
		return ret;
	if (cl->state != MV_CL_NEW) {
		snprintf(why, whylen, "HELLO after the client attached");
		return -EBADMSG;
	}
	if ((ret = mv_quota_batches(mv, cl, &cl->max_batches, why, whylen)))
		return ret;
	rep.client_id = cl->id;
	rep.nshards = mv->nshards;
	rep.sub_capacity = MV_SUB_CAPACITY;
	rep.comp_capacity = MV_COMP_CAPACITY;
	rep.max_batches = cl->max_batches;
	rep.max_iov = (uint32_t)mv->shards[0].fab.iov_limit;
	rep.flags = mv->shards[0].fab.dc_flag ? 0 : MV_HELLO_IMM_ONE_SHARD;
	rep.mover_id = mv->mover_id;
	rep.max_write = MV_MAX_WRITE;
	snprintf(rep.provider, sizeof(rep.provider), "%s", mv->prov);
	for (uint32_t s = 0; s < mv->nshards; s++)
		fds[s] = mv->shards[s].efd;
	return mv_control_reply(cl->sock, &m->h, &rep, sizeof(rep), fds, (int)mv->nshards) ?: 1;
}

/*
 * Maps a client's list arena read-only, once its seals show it can neither
 * shrink nor grow under the mapping (which would fault a shard). 0 or
 * -errno with why.
 */
static int arena_map(struct mover *mv, struct mv_client *cl, int fd, char *why, size_t whylen)
{
	int seals = fcntl(fd, F_GET_SEALS);
	struct stat st;

	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
		snprintf(why, whylen, "the list arena is not a memfd sealed against resizing");
		return -EINVAL;
	}
	if (fstat(fd, &st) || (uint64_t)st.st_size < MV_ARENA_MIN ||
	    (uint64_t)st.st_size > MV_ARENA_MAX || st.st_size % MV_LIST_ALIGN) {
		snprintf(why, whylen,
		         "the list arena is %lld bytes; it must be %u to %llu, in %u's",
		         (long long)st.st_size, MV_ARENA_MIN, (unsigned long long)MV_ARENA_MAX,
		         MV_LIST_ALIGN);
		return -EINVAL;
	}
	int ret = mv_quota_take(mv, cl, MV_Q_ARENA, (uint64_t)st.st_size, why, whylen);
	if (ret)
		return ret;
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		snprintf(why, whylen, "mapping the list arena: %s", strerror(errno));
		return -errno;
	}
	cl->arena = p;
	cl->arena_size = (uint64_t)st.st_size;
	return 0;
}

static void arena_unmap(struct mv_client *cl)
{
	if (cl->arena)
		munmap((void *)cl->arena, cl->arena_size);
	cl->arena = NULL;
	cl->arena_size = 0;
}

static int do_attach(struct mover *mv, struct mv_client *cl, struct mv_rx *m, char *why,
                     size_t whylen)
{
	const struct mv_attach_req *req = (const void *)m->payload;
	int ret = mv_msg_need(m, mv->nshards, why, whylen);
	uint32_t s;

	if (ret)
		return ret;
	if (cl->state != MV_CL_NEW || req->nshards != mv->nshards) {
		snprintf(why, whylen, "ATTACH for %u shards; this mover has %u", req->nshards,
		         mv->nshards);
		return -EBADMSG;
	}
	cl->batches = calloc(MV_MAX_BATCHES, sizeof(*cl->batches));
	if (!cl->batches)
		return -ENOMEM;
	for (s = 0; s < mv->nshards; s++) {
		struct mv_attach *at = calloc(1, sizeof(*at));
		if (!at) {
			ret = -ENOMEM;
			goto err_rings;
		}
		at->cl = cl;
		cl->att[s] = at;
		at->parts = calloc(MV_MAX_BATCHES, sizeof(*at->parts));
		if (!at->parts) {
			ret = -ENOMEM;
			goto err_rings;
		}
		ret = shmring_attach(&at->sub, m->fds[s], SHMRING_CONSUMER);
		if (ret) {
			snprintf(why, whylen, "submission ring %u: %s", s, shmring_error(&at->sub));
			goto err_rings;
		}
		m->fds[s] = -1;
		ret = shmring_attach(&at->comp, m->fds[mv->nshards + s], SHMRING_PRODUCER);
		if (ret) {
			snprintf(why, whylen, "completion ring %u: %s", s,
			         shmring_error(&at->comp));
			goto err_rings;
		}
		m->fds[mv->nshards + s] = -1;
		if (at->sub.slot_size != sizeof(struct mv_desc) ||
		    at->comp.slot_size != sizeof(struct mv_cqe) ||
		    at->sub.capacity > MV_SUB_CAPACITY || at->comp.capacity < 64) {
			snprintf(
			    why, whylen,
			    "rings of shard %u: slots %u/%u bytes (want %zu/%zu), capacity %u/%u",
			    s, at->sub.slot_size, at->comp.slot_size, sizeof(struct mv_desc),
			    sizeof(struct mv_cqe), at->sub.capacity, at->comp.capacity);
			ret = -EINVAL;
			goto err_rings;
		}
		shmring_watch_peer(&at->sub, cl->pid);
	}
	ret = arena_map(mv, cl, m->fds[2 * mv->nshards + 1], why, whylen);
	if (ret)
		goto err_rings;
	cl->efd = m->fds[2 * mv->nshards];
	m->fds[2 * mv->nshards] = -1;
	ret = mv_call_all(mv, MV_CMD_ATTACH, cl, why, whylen);
	if (ret)
		goto err_rings;
	cl->state = MV_CL_READY;
	return 0;

err_rings:
	/* No shard holds at here: MV_CMD_ATTACH fails only where a shard has
	 * MV_MAX_CLIENTS attaches, and a shard drops a client's attach before
	 * the client's slot is freed (reap_clients()), so no shard has more
	 * attaches than slots are taken, this client's included: it fails on
	 * every shard or none. */
	for (s = 0; s < mv->nshards; s++) {
		struct mv_attach *at = cl->att[s];
		if (!at)
			continue;
		shmring_close(&at->sub);
		shmring_close(&at->comp);
		free(at->parts);
		free(at);
		cl->att[s] = NULL;
	}
	arena_unmap(cl);
	free(cl->batches);
	cl->batches = NULL;
	return ret;
}

/* The reply to REG, REG_GPU and BLOB: a region's id, blob and placement. */
static int reply_region(struct mover *mv, struct mv_client *cl, const struct mv_rx *m,
                        const struct mv_region *r)
{
	struct mv_reg_rep rep = {0};

	rep.region = r->id;
	rep.shard_mask = r->shard_mask;
	rep.path = !r->is_gpu ? MV_PATH_HOST : mv->hmem ? MV_PATH_HMEM : MV_PATH_STAGED;
	rep.backing = r->backing;
	rep.map_ns = r->map_ns;
	for (uint32_t s = 0; s < mv->nshards; s++)
		rep.mr_ns = r->mr_ns[s] > rep.mr_ns ? r->mr_ns[s] : rep.mr_ns;
	mv_region_blob(mv, r, &rep.blob);
	rep.blob_len = (uint32_t)MV_REGION_BLOB_SIZE(mv->nshards);
	return mv_control_reply(cl->sock, &m->h, &rep, sizeof(rep), NULL, 0) ?: 1;
}

/* Runs one request; 1 when it replied itself, 0 for a plain OK reply, <0 error. */
static int handle(struct mover *mv, struct mv_client *cl, struct mv_rx *m, char *why, size_t whylen)
{
	int ret;

	if ((ret = mv_access_check(mv, cl, m->h.type, why, whylen)))
		return ret;
	if (mv_access_needs_attach(m->h.type) && cl->state != MV_CL_READY) {
		snprintf(why, whylen, "message type %u before HELLO and ATTACH", m->h.type);
		return -EBADMSG;
	}
	/* A1 pairs with R1 in mv_cut_off(): cut_why is whole once cut is 2. */
	if (atomic_load_explicit(&cl->cut, memory_order_acquire) == 2) {
		snprintf(why, whylen, "this connection was cut off: %s", cl->cut_why);
		return -EPROTO;
	}
	switch (m->h.type) {
	case MV_MSG_HELLO:
		return do_hello(mv, cl, m, why, whylen);
	case MV_MSG_STATS: {
		struct mv_stats_rep rep = {.seg_size = mv->stats_size};
		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		return mv_control_reply(cl->sock, &m->h, &rep, sizeof(rep), &mv->stats_fd, 1) ?: 1;
	}
	case MV_MSG_TRACE: {
		/* Start carries the file, opened by the requester: the mover
		 * never opens a path that a connection names. */
		struct mv_trace_req req;
		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		if ((ret = mv_msg_trace(m, &req, why, whylen)))
			return ret;
		if (!req.on)
			return mv_trace_stop(mv, why, whylen);
		ret = mv_trace_start(mv, m->fds[0], req.path, req.flags, why, whylen);
		m->fds[0] = -1; /* the trace owns it now, or closed it */
		return ret;
	}
	case MV_MSG_ATTACH:
		return do_attach(mv, cl, m, why, whylen);
	case MV_MSG_REG: {
		const struct mv_reg_req *req = (const void *)m->payload;
		struct mv_region *r;

		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		ret = mv_region_add(mv, cl, m->fds[0], req, &r, why, whylen);
		if (ret)
			return ret;
		return reply_region(mv, cl, m, r);
	}
	case MV_MSG_REG_GPU: {
		const struct mv_reg_gpu_req *req = (const void *)m->payload;
		struct mv_region *r;
		int fds = m->len >= sizeof(*req) && req->gpu.kind == MV_GPU_VMM;

		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		ret = mv_region_add_gpu(mv, cl, &req->gpu, fds ? m->fds[0] : -1, req->len, &r, why,
		                        whylen);
		if (ret)
			return ret;
		return reply_region(mv, cl, m, r);
	}
	case MV_MSG_GPU_FD: {
		/* A peer mover on this host (its role: checked above) copying
		 * straight into one of our clients' VMM regions (path 2); it
		 * shows the secret of the region's blob, so it holds a blob
		 * the region's owner handed out. */
		const struct mv_gpu_fd_req *req = (const void *)m->payload;
		struct mv_gpu_fd_rep rep = {0};
		struct mv_region *r;

		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		r = mv_region_get(mv, req->id);
		if (r && r->secret != req->secret) {
			snprintf(why, whylen,
			         "GPU region %u: the request's secret is not its blob's", req->id);
			mv_log_client(
			    MV_LOG_WARN, (uint64_t)cl->pid,
			    "refused GPU_FD for region %u from pid %d uid %u: wrong secret",
			    req->id, cl->pid, (unsigned)cl->uid);
			return -EACCES;
		}
		if (!r || !r->is_gpu || r->gpu_fd < 0) {
			snprintf(why, whylen, "region %u is not a VMM GPU region of this mover",
			         req->id);
			return -ENOENT;
		}
		rep.gpu = r->gdesc;
		return mv_control_reply(cl->sock, &m->h, &rep, sizeof(rep), &r->gpu_fd, 1) ?: 1;
	}
	case MV_MSG_HOST_FD: {
		/* A peer mover on this host (its role: checked above) that
		 * copies straight into one of our clients' host regions, or
		 * asks our word on a blob before its fabric writes where the
		 * blob says; it shows the region blob's secret (samehost_ask.c). */
		struct mv_host_fd_rep rep = {0};
		int fds[2];

		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		ret = mv_host_fd_serve(mv, cl, (const void *)m->payload, &rep, fds, why, whylen);
		if (ret)
			return ret;
		return mv_control_reply(cl->sock, &m->h, &rep, sizeof(rep), fds, (int)rep.nfds)
		           ?: 1;
	}
	case MV_MSG_BLOB: {
		const struct mv_id_req *req = (const void *)m->payload;
		struct mv_region *r;

		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		r = mv_region_get(mv, req->id);
		if (!r || r->owner != cl->id) {
			snprintf(why, whylen, "region %u is not one of this client's regions",
			         req->id);
			return -ENOENT;
		}
		return reply_region(mv, cl, m, r);
	}
	case MV_MSG_DEREG: {
		const struct mv_id_req *req = (const void *)m->payload;
		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		return mv_region_del(mv, cl, req->id, why, whylen);
	}
	case MV_MSG_ADDR: {
		struct mv_addr_rep rep = {0};
		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		mv_addr_blob(mv, &rep.blob);
		rep.blob_len = sizeof(rep.blob);
		return mv_control_reply(cl->sock, &m->h, &rep, sizeof(rep), NULL, 0) ?: 1;
	}
	case MV_MSG_PEER_ADD: {
		struct mv_id_rep rep = {0};
		struct mv_addr_blob b = {0};
		/* A short blob is a bad argument, checked with its reason below. */
		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		memcpy(&b, m->payload, m->len < sizeof(b) ? m->len : sizeof(b));
		ret = mv_peer_add(mv, cl, &b, m->len, &rep.id, &rep.live, why, whylen);
		if (ret)
			return ret;
		if (rep.live != MV_LIVE_OK)
			snprintf(rep.r.msg, sizeof(rep.r.msg), "%s", why);
		return mv_control_reply(cl->sock, &m->h, &rep, sizeof(rep), NULL, 0) ?: 1;
	}
	case MV_MSG_PEER_DEL:
	case MV_MSG_UNIMPORT: {
		const struct mv_id_req *req = (const void *)m->payload;
		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		if (m->h.type == MV_MSG_PEER_DEL)
			return mv_peer_del(mv, cl, req->id, why, whylen);
		return mv_import_del(mv, cl, req->id, why, whylen);
	}
	case MV_MSG_IMPORT: {
		struct mv_import_req req = {0};
		struct mv_id_rep rep = {0};
		if ((ret = mv_msg_need(m, mv->nshards, why, whylen)))
			return ret;
		memcpy(&req, m->payload, m->len < sizeof(req) ? m->len : sizeof(req));
		size_t blen = m->len - offsetof(struct mv_import_req, blob);
		ret = mv_import_add(mv, cl, req.peer, &req.blob, blen, &rep.id, why, whylen);
		if (ret)
			return ret;
		rep.path = mv_host_import_path(cl, rep.id);
		/* A same-host peer's memfd, or its owner's word, on its way:
		 * answered when it came. */
		if (mv_host_import_park(mv, cl, &m->h, &rep, sizeof(rep), rep.id))
			return 1;
		return mv_control_reply(cl->sock, &m->h, &rep, sizeof(rep), NULL, 0) ?: 1;
	}
	case MV_MSG_PUBLISH:
	case MV_MSG_UNPUBLISH:
	case MV_MSG_LOOKUP:
	case MV_MSG_CLUSTER:
		return mv_names_handle(mv, cl, m, why, whylen);
	default:
		snprintf(why, whylen, "unknown message type %u", m->h.type);
		return -EBADMSG;
	}
}

static struct mv_client *client_new(struct mover *mv, int sock, int ep)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	uint32_t slot;

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return NULL;
	uint32_t roles = mv_access_roles(mv, sock, &cred);
	if (!roles) {
		struct mv_msg_hdr h = {.type = MV_MSG_HELLO};
		mv_log_client(MV_LOG_WARN, MV_WHO_UID | cred.uid,
		              "refusing client pid %d: uid %u is not the mover's uid %u", cred.pid,
		              cred.uid, geteuid());
		send_error(sock, &h, -EACCES,
		           "the mover serves its own uid only (--allow-any-uid serves all)");
		return NULL;
	}
	for (slot = 0; slot < MV_MAX_CLIENTS; slot++)
		if (!mv->clients[slot])
			break;
	if (slot == MV_MAX_CLIENTS) {
		struct mv_msg_hdr h = {.type = MV_MSG_HELLO};
		send_error(sock, &h, -ENOSPC, "the mover serves its maximum of clients");
		return NULL;
	}
	struct mv_client *cl = calloc(1, sizeof(*cl));
	if (!cl)
		return NULL;
	cl->id = (uint32_t)(++client_gen[slot]) << 8 | slot;
	cl->sock = sock;
	cl->pid = cred.pid;
	cl->uid = cred.uid;
	cl->roles = roles;
	cl->efd = -1;
	cl->pidfd = (int)syscall(SYS_pidfd_open, cred.pid, 0);
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = slot};
	epoll_ctl(ep, EPOLL_CTL_ADD, sock, &ev);
	if (cl->pidfd >= 0) {
		ev.events = EPOLLIN;
		ev.data.u32 = TAG_PIDFD | slot;
		epoll_ctl(ep, EPOLL_CTL_ADD, cl->pidfd, &ev);
	}
	mv->clients[slot] = cl;
	mv_dbg("client %u: pid %d connected", cl->id, cl->pid);
	return cl;
}

static void client_leave(struct mover *mv, struct mv_client *cl, int ep, const char *why)
{
	if (cl->state == MV_CL_DETACHING)
		return;
	/* Tools (mvstat, mvtrace) come and go without attaching: not news. */
	if (cl->state == MV_CL_NEW)
		mv_dbg("connection %u (pid %d): %s", cl->id, cl->pid, why);
	else
		mv_log_client(MV_LOG_INFO, (uint64_t)cl->pid, "client %u (pid %d): %s", cl->id,
		              cl->pid, why);
	epoll_ctl(ep, EPOLL_CTL_DEL, cl->sock, NULL);
	if (cl->pidfd >= 0)
		epoll_ctl(ep, EPOLL_CTL_DEL, cl->pidfd, NULL);
	mv_names_client_gone(mv, cl);
	if (cl->state == MV_CL_READY) {
		cl->state = MV_CL_DETACHING;
		struct mv_cmd *cmds = calloc(mv->nshards, sizeof(*cmds));
		for (uint32_t s = 0; cmds && s < mv->nshards; s++) {
			cmds[s].type = MV_CMD_DETACH;
			cmds[s].arg = cl;
			mv_shard_post(&mv->shards[s], &cmds[s]);
		}
		/* The shards count themselves out in shards_detached; the
		 * commands need no answer, so they can be freed once all did. */
		cl->detach_cmds = cmds;
		return;
	}
	cl->state = MV_CL_DETACHING;
	atomic_store(&cl->shards_detached, mv->nshards);
}

/* What a client holds of its own: its socket, pidfd, eventfd and memory. */
static void client_close(struct mv_client *cl)
{
	close(cl->sock);
	if (cl->pidfd >= 0)
		close(cl->pidfd);
	if (cl->efd >= 0)
		close(cl->efd);
	free(cl->detach_cmds);
	free(cl->batches);
	arena_unmap(cl);
	free(cl);
}

static void client_free(struct mover *mv, struct mv_client *cl)
{
	char why[MV_ERRLEN];

	mv_client_release_all(mv, cl);
	mv->clients[cl->id % MV_MAX_CLIENTS] = NULL;
	/* After this grace period no shard can be delivering to cl. */
	mv_call_all(mv, MV_CMD_SYNC, NULL, why, sizeof(why));
	client_close(cl);
}

static void reap_clients(struct mover *mv)
{
	for (uint32_t i = 0; i < MV_MAX_CLIENTS; i++) {
		struct mv_client *cl = mv->clients[i];
		if (cl && cl->state == MV_CL_DETACHING &&
		    atomic_load_explicit(&cl->shards_detached, memory_order_acquire) ==
		        mv->nshards) {
			mv_dbg("client %u: released", cl->id);
			client_free(mv, cl);
		}
	}
}

/*
 * Listens on path. The socket file is 0600, so only the mover's uid (and
 * root) reach it; with --allow-any-uid every uid may connect (0666) and
 * with --admin-group that group may (0660): who may do what once connected
 * is access.c's to say, from the kernel's credentials of the connection.
 */
static int listen_on(const struct mover *mv, const char *path, char *why, size_t whylen)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(a.sun_path)) {
		snprintf(why, whylen, "socket path '%s' is longer than %zu bytes", path,
		         sizeof(a.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(a.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A socket file nobody answers on is left from a dead mover: replace it. */
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
		close(fd);
		snprintf(why, whylen, "a mover already listens on %s", path);
		return -EADDRINUSE;
	}
	close(fd);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
	/* Bound under a name of its own and renamed into place once it
	 * listens: between bind() and listen() a client that found the path
	 * (a script, a test polling for it) was refused (ECONNREFUSED), on a
	 * busy host for milliseconds. A path too long for the suffix is bound
	 * as it is. */
	char tmp[sizeof(a.sun_path)];
	int tl = snprintf(tmp, sizeof(tmp), "%s.%ld", path, (long)getpid());
	const char *at = tl > 0 && (size_t)tl < sizeof(tmp) ? tmp : path;
	strcpy(a.sun_path, at);
	if (at != path && lstat(at, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(at); /* left by a dead mover of the same pid */
	mode_t old = umask(0077);
	int ret = bind(fd, (struct sockaddr *)&a, sizeof(a)), bound = ret == 0;
	umask(old);
	mode_t mode = mv->cfg.allow_any_uid ? 0666 : mv->cfg.admin_group ? 0660 : 0600;
	if (ret == 0 && mv->cfg.admin_group && !mv->cfg.allow_any_uid &&
	    chown(at, (uid_t)-1, mv->cfg.admin_gid) < 0)
		ret = -1;
	if (ret < 0 || chmod(at, mode) < 0 || listen(fd, 64) < 0 ||
	    (at != path && rename(at, path) < 0)) {
		ret = -errno;
		snprintf(why, whylen, "listening on %s: %s", path, strerror(errno));
		if (bound && at != path)
			unlink(at);
		close(fd);
		return ret;
	}
	return fd;
}

static void serve(struct mover *mv, struct mv_client *cl, int ep, struct mv_rx *m)
{
	char why[sizeof(((struct mv_reply_hdr *)0)->msg)] = "";
	int ret;

	for (;;) {
		ret = mv_msg_recv(cl->sock, m, why, sizeof(why));
		if (ret == -EAGAIN)
			return;
		if (ret == 0) {
			mv_msg_close_fds(m);
			client_leave(mv, cl, ep, "disconnected");
			return;
		}
		if (ret < 0) {
			mv_msg_close_fds(m);
			if (ret == -ECONNRESET || ret == -EPIPE) {
				client_leave(mv, cl, ep, "connection reset");
				return;
			}
			send_error(cl->sock, &m->h, ret, why);
			client_leave(mv, cl, ep, why);
			return;
		}
		why[0] = 0;
		ret = handle(mv, cl, m, why, sizeof(why));
		mv_msg_close_fds(m);
		if (ret == 0) {
			struct mv_reply_hdr ok = {0};
			mv_control_reply(cl->sock, &m->h, &ok, sizeof(ok), NULL, 0);
		} else if (ret < 0) {
			send_error(cl->sock, &m->h, ret, why[0] ? why : strerror(-ret));
			if (ret == -EBADMSG || ret == -EPROTONOSUPPORT) {
				client_leave(mv, cl, ep, why);
				return;
			}
		}
	}
}

int mv_control_run(struct mover *mv)
{
	char why[MV_ERRLEN] = "";
	sigset_t sigs;
	int lfd, sfd, ep;
	struct mv_rx *m = malloc(sizeof(*m));

	if (!m)
		return -ENOMEM;
	lfd = listen_on(mv, mv->cfg.socket_path, why, sizeof(why));
	if (lfd < 0) {
		mv_log("%s", why[0] ? why : strerror(-lfd));
		free(m);
		return lfd;
	}
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	ep = epoll_create1(EPOLL_CLOEXEC);
	mv->ep = ep;
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = TAG_LISTEN};
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	ev.data.u32 = TAG_SIGNAL;
	epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
	ev.data.u32 = TAG_SHARDS;
	epoll_ctl(ep, EPOLL_CTL_ADD, mv->efd, &ev);
	if (mv->cluster) {
		ev.data.u32 = TAG_CLUSTER;
		epoll_ctl(ep, EPOLL_CTL_ADD, mv->cluster->notify_fd, &ev);
	}
	mv_log("listening on %s", mv->cfg.socket_path);
	mv_sd_notify("READY=1");

	while (!atomic_load(&mv->stopping)) {
		struct epoll_event evs[32];
		int n = epoll_wait(ep, evs, 32, 200); /* also the stats heartbeat */

		for (int i = 0; i < n; i++) {
			uint32_t tag = evs[i].data.u32;
			if (tag == TAG_LISTEN) {
				int c;
				while ((c = accept4(lfd, NULL, NULL,
				                    SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0)
					if (!client_new(mv, c, ep))
						close(c);
			} else if (tag == TAG_SIGNAL) {
				struct signalfd_siginfo si;
				if (read(sfd, &si, sizeof(si)) == sizeof(si))
					mv_log("signal %u: draining and stopping", si.ssi_signo);
				atomic_store(&mv->stopping, 1);
			} else if (tag == TAG_SHARDS) {
				uint64_t v;
				if (read(mv->efd, &v, sizeof(v)) < 0) {
					/* drained by an earlier wake-up */
				}
				mv_peer_cut_check(mv);
			} else if (tag == TAG_CLUSTER) {
				mv_names_events(mv);
			} else if (tag == MV_TAG_HOSTFD) {
				mv_host_fetch_events(mv);
			} else if (tag & MV_TAG_FENCE) {
				mv_host_fence_exited(mv, tag & ~MV_TAG_FENCE);
			} else if (tag & MV_TAG_PEER) {
				struct mv_peer *p = mv->peers[(tag & ~MV_TAG_PEER) % MV_MAX_PEERS];
				if (p)
					mv_peer_exited(mv, p);
			} else if (tag & TAG_PIDFD) {
				struct mv_client *cl = mv->clients[tag & 0xff];
				if (cl)
					client_leave(mv, cl, ep, "process exited");
			} else {
				struct mv_client *cl = mv->clients[tag % MV_MAX_CLIENTS];
				if (!cl || cl->state == MV_CL_DETACHING)
					continue;
				if (evs[i].events & EPOLLIN)
					serve(mv, cl, ep, m);
				else if (evs[i].events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR))
					client_leave(mv, cl, ep, "disconnected");
			}
		}
		reap_clients(mv);
		mv_names_tick(mv);
		mv_host_fetch_tick(mv);
		mv_host_fence_tick(mv);
		mv_region_reap(mv, 0);
		mv_shm_locks_check(mv, 0);
		uint32_t ncl = 0;
		for (uint32_t i = 0; i < MV_MAX_CLIENTS; i++)
			ncl += mv->clients[i] && mv->clients[i]->state == MV_CL_READY;
		mv_stats_beat(mv, ncl);
	}

	/* Stop: shards finish what clients already committed, then leave;
	 * the trace gets every batch they completed. */
	close(lfd);
	unlink(mv->cfg.socket_path);
	mv_call_all(mv, MV_CMD_STOP, NULL, why, sizeof(why));
	atomic_store(&mv->shards_stopped, 1);
	if (atomic_load(&mv->tracer))
		mv_trace_stop(mv, why, sizeof(why));
	for (uint32_t i = 0; i < MV_MAX_CLIENTS; i++) {
		struct mv_client *cl = mv->clients[i];
		if (!cl)
			continue;
		/* The shards freed every attachment on their way out. */
		for (uint32_t s = 0; s < mv->nshards; s++)
			cl->att[s] = NULL;
		for (uint32_t h = 0; h < MV_CLIENT_MAX_IMPORTS; h++)
			free(atomic_exchange(&cl->imports[h], NULL));
		client_close(cl);
		mv->clients[i] = NULL;
	}
	close(sfd);
	close(ep);
	free(m);
	return 0;
}
