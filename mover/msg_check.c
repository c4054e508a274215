/* SPDX-License-Identifier: MIT */
/*
 * Control messages as they arrive, before any handler: one read off the
 * control socket with its header checked against what came, and the
 * payload bytes and fds each type needs. Kept apart from control.c (which
 * decides who may send what, and acts) so that tests/fuzz/fuzz_ctlmsg.c and
 * the unit tests run this very code over real sockets.
 */
#include "msg_check.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void mv_msg_close_fds(struct mv_rx *m)
{
	for (int i = 0; i < m->nfds; i++)
		if (m->fds[i] >= 0)
			close(m->fds[i]);
	m->nfds = 0;
}

int mv_msg_recv(int sock, struct mv_rx *m, char *why, size_t whylen)
{
	union mv_cmsg u;
	struct iovec iov[2] = {{&m->h, sizeof(m->h)}, {m->payload, sizeof(m->payload)}};
	struct msghdr mh = {
	    .msg_iov = iov, .msg_iovlen = 2, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);

	m->nfds = 0;
	if (n < 0)
		return errno == EAGAIN ? -EAGAIN : -errno;
	m->nfds = mv_fds_take(&mh, m->fds, MV_MAX_FDS);
	if (n == 0)
		return 0;
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		snprintf(why, whylen, "message larger than %zu bytes or with more than %u fds",
		         sizeof(m->h) + sizeof(m->payload), MV_MAX_FDS);
		return -EMSGSIZE;
	}
	if ((size_t)n < sizeof(m->h)) {
		snprintf(why, whylen, "message of %zd bytes is shorter than the %zu-byte header", n,
		         sizeof(m->h));
		return -EBADMSG;
	}
	if (m->h.magic != MV_WIRE_MAGIC) {
		snprintf(why, whylen, "bad magic %#x: not a mover client", m->h.magic);
		return -EBADMSG;
	}
	if (m->h.version != MV_WIRE_VERSION) {
		snprintf(why, whylen, "protocol version %u; this mover speaks %u", m->h.version,
		         MV_WIRE_VERSION);
		return -EPROTONOSUPPORT;
	}
	m->len = (size_t)n - sizeof(m->h);
	if (m->h.len != m->len) {
		snprintf(why, whylen, "header says %u payload bytes, %zu arrived", m->h.len,
		         m->len);
		return -EBADMSG;
	}
	return 1;
}

int mv_msg_need(const struct mv_rx *m, uint32_t nshards, char *why, size_t whylen)
{
	size_t len;
	int nfds = 0;

	switch (m->h.type) {
	case MV_MSG_HELLO:
	case MV_MSG_STATS:
	case MV_MSG_CLUSTER:
	case MV_MSG_ADDR:
	case MV_MSG_PEER_ADD: /* a short blob is refused with its reason by the handler */
		len = 0;
		break;
	case MV_MSG_ATTACH:
		len = sizeof(struct mv_attach_req);
		nfds = (int)(2 * nshards + 2);
		break;
	case MV_MSG_REG:
		len = sizeof(struct mv_reg_req);
		nfds = 1;
		break;
	case MV_MSG_REG_GPU: {
		struct mv_reg_gpu_req req;
		len = sizeof(req);
		if (m->len >= sizeof(req)) {
			memcpy(&req, m->payload, sizeof(req));
			nfds = req.gpu.kind == MV_GPU_VMM; /* IPC handles travel as bytes */
		}
		break;
	}
	case MV_MSG_GPU_FD:
		len = sizeof(struct mv_gpu_fd_req);
		break;
	case MV_MSG_HOST_FD:
		len = sizeof(struct mv_host_fd_req);
		break;
	case MV_MSG_BLOB:
	case MV_MSG_DEREG:
	case MV_MSG_PEER_DEL:
	case MV_MSG_UNIMPORT:
		len = sizeof(struct mv_id_req);
		break;
	case MV_MSG_IMPORT:
		len = offsetof(struct mv_import_req, blob);
		break;
	case MV_MSG_PUBLISH:
	case MV_MSG_UNPUBLISH:
		len = sizeof(struct mv_publish_req);
		break;
	case MV_MSG_LOOKUP:
		len = sizeof(struct mv_lookup_req);
		break;
	case MV_MSG_TRACE: {
		/* A start brings the trace file's fd (the mover opens no path). */
		struct mv_trace_req req;
		len = sizeof(req);
		if (m->len >= sizeof(req)) {
			memcpy(&req, m->payload, sizeof(req));
			nfds = req.on != 0;
		}
		break;
	}
	default:
		snprintf(why, whylen, "unknown message type %u", m->h.type);
		return -EBADMSG;
	}
	if (m->len < len) {
		snprintf(why, whylen, "message type %u needs %zu payload bytes, got %zu", m->h.type,
		         len, m->len);
		return -EBADMSG;
	}
	if (m->nfds != nfds) {
		snprintf(why, whylen, "message type %u needs %d fds, got %d", m->h.type, nfds,
		         m->nfds);
		return -EBADMSG;
	}
	return 0;
}

int mv_msg_trace(const struct mv_rx *m, struct mv_trace_req *req, char *why, size_t whylen)
{
	memcpy(req, m->payload, sizeof(*req));
	req->path[sizeof(req->path) - 1] = 0;
	if (!req->on)
		return 0;
	/* Only a label now (the file comes as an fd), but what mvtrace sends
	 * and mvstat shows is the file's absolute path. */
	if (req->path[0] != '/') {
		snprintf(why, whylen, "trace path '%.60s' must be absolute", req->path);
		return -EINVAL;
	}
	if (req->flags & ~MV_TRACE_HOPS) {
		snprintf(why, whylen, "trace flags 0x%x: only 0x%x (hops) is known", req->flags,
		         MV_TRACE_HOPS);
		return -EINVAL;
	}
	return 0;
}
