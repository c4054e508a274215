/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes control messages as the mover reads them: each input is sent as
 * one datagram, with a number of fds, over a real SOCK_SEQPACKET socket
 * pair, and read back with mv_msg_recv(); what it accepts goes through
 * mv_msg_need() for a mover of 1 to 64 shards, mv_msg_trace() for TRACE,
 * and the blob checks PEER_ADD and IMPORT hand their payloads to, exactly
 * as control.c's handlers call them. Beside "no crash, no UB", it asserts
 * that nothing accepted is wrong (payload length, fd counts), that a
 * well-formed ATTACH of any shard count is accepted, and that no fd leaks.
 *
 * Input: byte 0 the fds to send (0-255, beyond MV_MAX_FDS included),
 * byte 1 the shard count (low 6 bits + 1) and bit 7 "pad past the largest
 * message", then the datagram itself (header and payload).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mover.h"
#include "msg_check.h"

static int sock[2] = {-1, -1};
static int memfd = -1;
static struct mv_rx rx;
static uint8_t out[sizeof(struct mv_msg_hdr) + 2 * MV_MAX_MSG];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int big = 4 << 20;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sock) < 0)
		abort();
	setsockopt(sock[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	setsockopt(sock[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	memfd = memfd_create("fuzz_ctlmsg", MFD_CLOEXEC);
	if (memfd < 0)
		abort();
	return 0;
}

/* The lowest free fd: a leaked one would take it. */
static int lowest_free_fd(void)
{
	int fd = dup(0);

	close(fd);
	return fd;
}

static void send_with_fds(const uint8_t *buf, size_t len, int nfds)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * 256)];
		struct cmsghdr align;
	} cbuf;
	int fds[256];
	struct iovec iov = {(void *)buf, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

	for (int i = 0; i < nfds; i++)
		fds[i] = memfd;
	mv_fds_put_buf(&mh, cbuf.b, fds, nfds);
	if (sendmsg(sock[0], &mh, MSG_NOSIGNAL) != (ssize_t)len)
		abort(); /* the harness's own socket: must take any datagram */
}

/* What the PEER_ADD and IMPORT handlers do with an accepted payload. */
static void blobs(const struct mv_rx *m)
{
	char why[MV_ERRLEN];

	if (m->h.type == MV_MSG_PEER_ADD) {
		struct mv_addr_blob b = {0};
		memcpy(&b, m->payload, m->len < sizeof(b) ? m->len : sizeof(b));
		if (!mv_check_addr_blob(&b, m->len, "tcp;ofi_rxm", why, sizeof(why)))
			assert(m->len >= offsetof(struct mv_addr_blob, addr) +
			                     (size_t)b.nshards * MV_MAX_ADDRLEN &&
			       b.nshards >= 1 && b.nshards <= MV_MAX_SHARDS && b.addrlen >= 1 &&
			       b.addrlen <= MV_MAX_ADDRLEN);
	} else if (m->h.type == MV_MSG_IMPORT) {
		struct mv_import_req req = {0};
		memcpy(&req, m->payload, m->len < sizeof(req) ? m->len : sizeof(req));
		size_t blen = m->len - offsetof(struct mv_import_req, blob);
		if (!mv_check_region_blob(&req.blob, blen, why, sizeof(why)))
			assert(blen >= MV_REGION_BLOB_SIZE(req.blob.nshards) &&
			       req.blob.nshards >= 1 && req.blob.nshards <= MV_MAX_SHARDS &&
			       req.blob.len);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[sizeof(((struct mv_reply_hdr *)0)->msg)];
	size_t len;
	int nfds, ret;
	uint32_t nshards;

	if (size < 2)
		return 0;
	nfds = data[0] < 254 ? data[0] : 253; /* SCM_MAX_FD */
	nshards = (data[1] & 63) + 1;
	len = size - 2;
	if (len > sizeof(out) - MV_MAX_MSG)
		len = sizeof(out) - MV_MAX_MSG;
	memcpy(out, data + 2, len);
	if (data[1] & 0x80) { /* one byte or more past what a message may be */
		memset(out + len, 0, MV_MAX_MSG + 1);
		len += MV_MAX_MSG + 1;
	}
	int low = lowest_free_fd();

	send_with_fds(out, len, nfds);
	why[0] = 0;
	ret = mv_msg_recv(sock[1], &rx, why, sizeof(why));
	assert(ret != -EAGAIN); /* one datagram was sent */
	assert(rx.nfds >= 0 && rx.nfds <= (int)MV_MAX_FDS);
	if (ret < 0)
		assert(why[0]); /* every refusal says why */
	if (ret == 0)
		assert(len == 0); /* an empty datagram reads as a hang-up */
	if (ret == 1) {
		assert(len >= sizeof(struct mv_msg_hdr) && len <= sizeof(rx.h) + MV_MAX_MSG);
		assert(rx.len == len - sizeof(rx.h) && rx.h.len == rx.len);
		assert(rx.h.magic == MV_WIRE_MAGIC && rx.h.version == MV_WIRE_VERSION);
		assert(rx.nfds == nfds); /* all of them, or the message is refused */
		for (int i = 0; i < rx.nfds; i++)
			assert(fcntl(rx.fds[i], F_GETFD) & FD_CLOEXEC);

		why[0] = 0;
		int need = mv_msg_need(&rx, nshards, why, sizeof(why));
		if (need)
			assert(need == -EBADMSG && why[0]);
		/* libclient's ATTACH on a mover of nshards shards must pass. */
		if (rx.h.type == MV_MSG_ATTACH && rx.len >= sizeof(struct mv_attach_req) &&
		    nfds == (int)(2 * nshards + 2))
			assert(!need);
		if (!need) {
			if (rx.h.type == MV_MSG_ATTACH)
				assert(rx.nfds == (int)(2 * nshards + 2));
			else if (rx.h.type == MV_MSG_REG)
				assert(rx.nfds == 1 && rx.len >= sizeof(struct mv_reg_req));
			else
				assert(rx.nfds <= 1);
			if (rx.h.type == MV_MSG_TRACE) {
				struct mv_trace_req req;
				if (!mv_msg_trace(&rx, &req, why, sizeof(why)))
					assert(!req.on || (req.path[0] == '/' &&
					                   !(req.flags & ~MV_TRACE_HOPS)));
				assert(memchr(req.path, 0, sizeof(req.path)));
			}
			blobs(&rx);
		}
	} else if (nfds > (int)MV_MAX_FDS && len) {
		assert(ret == -EMSGSIZE);
	}
	/* A datagram past the largest message is refused, never cut. */
	if (len > sizeof(rx.h) + MV_MAX_MSG)
		assert(ret == -EMSGSIZE);
	mv_msg_close_fds(&rx);
	assert(lowest_free_fd() == low); /* every fd that came was closed */
	return 0;
}
