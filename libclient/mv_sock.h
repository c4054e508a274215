/* SPDX-License-Identifier: MIT */
/*
 * Where a mover listens by default, and a one-shot request on its control
 * socket (tools and same-host movers use it: connect, one message, one reply
 * with at most one fd, close). Internal to the project.
 */
#ifndef MV_SOCK_H
#define MV_SOCK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "mv_wire.h"

/* $MOVER_SOCKET, else $XDG_RUNTIME_DIR/mover.sock, else /tmp/mover-UID.sock. */
static inline const char *mv_default_socket(char *buf, size_t len)
{
	const char *env = getenv("MOVER_SOCKET"), *xdg = getenv("XDG_RUNTIME_DIR");

	if (env && *env)
		snprintf(buf, len, "%s", env);
	else if (xdg && *xdg)
		snprintf(buf, len, "%s/mover.sock", xdg);
	else
		snprintf(buf, len, "/tmp/mover-%u.sock", getuid());
	return buf;
}

/* The most fds one control message carries: ATTACH's ring pair per shard,
 * the client's eventfd and its list arena. */
#define MV_MAX_FDS (2 * MV_MAX_SHARDS + 2)

/* Room for MV_MAX_FDS fds in a message's control data, aligned for it. */
union mv_cmsg {
	char buf[CMSG_SPACE(sizeof(int) * MV_MAX_FDS)];
	struct cmsghdr align;
};

/* Attaches nfds fds to mh as SCM_RIGHTS, in buf: CMSG_SPACE(nfds ints)
 * bytes at least, aligned for a struct cmsghdr. */
static inline void mv_fds_put_buf(struct msghdr *mh, void *buf, const int *fds, int nfds)
{
	if (nfds <= 0)
		return;
	mh->msg_control = buf;
	mh->msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
	struct cmsghdr *c = CMSG_FIRSTHDR(mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
}

/* Attaches nfds (at most MV_MAX_FDS) fds to mh as SCM_RIGHTS, in u. */
static inline void mv_fds_put(struct msghdr *mh, union mv_cmsg *u, const int *fds, int nfds)
{
	mv_fds_put_buf(mh, u->buf, fds, nfds);
}

/* The fds a received message carried: the first max go to fds, the rest
 * are closed. Returns how many fds holds. */
static inline int mv_fds_take(struct msghdr *mh, int *fds, int max)
{
	int n = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (n < max)
				fds[n++] = fd;
			else
				close(fd);
		}
	}
	return n;
}

/*
 * mv_request_fd - send one message of type with payload (and send_fd, when
 * it is not -1) to the mover at path and read its reply (header, then a
 * struct mv_reply_hdr first) into rep.
 * *fd gets the fd the reply carried, or -1. Returns 0, the mover's negative
 * status, or -errno, with why saying which. Never waits more than 10 s.
 */
static inline int mv_request_fd(const char *path, uint16_t type, const void *payload, uint32_t len,
                                int send_fd, void *rep, size_t replen, int *fd, char *why,
                                size_t whylen)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct mv_msg_hdr h = {
	    .magic = MV_WIRE_MAGIC, .version = MV_WIRE_VERSION, .type = type, .len = len, .seq = 1};
	struct iovec out[2] = {{&h, sizeof(h)}, {(void *)payload, len}};
	struct msghdr om = {.msg_iov = out, .msg_iovlen = 2};
	union mv_cmsg u, uo;
	struct iovec in = {rep, replen};
	struct msghdr im = {
	    .msg_iov = &in, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	struct timeval tv = {.tv_sec = 10};
	int s, e;

	*fd = -1;
	if (strlen(path) >= sizeof(a.sun_path)) {
		snprintf(why, whylen, "socket path %s is longer than %zu bytes", path,
		         sizeof(a.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(a.sun_path, path);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		e = errno;
		snprintf(why, whylen, "no mover at %s: %s%s", path, strerror(e),
		         e == ENOENT || e == ECONNREFUSED ? " (is it running?)" : "");
		if (s >= 0)
			close(s);
		return -e;
	}
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	mv_fds_put(&om, &uo, &send_fd, send_fd >= 0 ? 1 : 0);
	if (sendmsg(s, &om, MSG_NOSIGNAL) != (ssize_t)(sizeof(h) + len)) {
		e = errno;
		snprintf(why, whylen, "sending to the mover at %s: %s", path, strerror(e));
		close(s);
		return -e;
	}
	ssize_t n = recvmsg(s, &im, MSG_CMSG_CLOEXEC);
	e = errno;
	close(s);
	if (n > 0)
		mv_fds_take(&im, fd, 1);
	const struct mv_reply_hdr *r = (const void *)((const char *)rep + sizeof(h));
	if (n < (ssize_t)(sizeof(h) + sizeof(*r))) {
		snprintf(why, whylen, "no reply from the mover at %s: %s", path,
		         n < 0 ? strerror(e) : "short reply (an older mover?)");
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		return -EPROTO;
	}
	if (r->status) {
		snprintf(why, whylen, "the mover at %s: %.124s", path, r->msg);
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		return r->status;
	}
	return 0;
}

/* mv_request_fd() without an fd to send. */
static inline int mv_request(const char *path, uint16_t type, const void *payload, uint32_t len,
                             void *rep, size_t replen, int *fd, char *why, size_t whylen)
{
	return mv_request_fd(path, type, payload, len, -1, rep, replen, fd, why, whylen);
}

#endif
