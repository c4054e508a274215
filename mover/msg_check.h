/* SPDX-License-Identifier: MIT */
/*
 * The shape of control messages, checked before any handler looks at them:
 * reading one message off the control socket (header, payload length, the
 * fds it carried) and the payload bytes and fd count each message type
 * needs. Pure functions of what arrived and the mover's shard count, so the
 * unit tests and tests/fuzz/fuzz_ctlmsg.c drive exactly the code control.c
 * runs. Main thread only (no state of their own: any thread may call them).
 */
#ifndef MV_MSG_CHECK_H
#define MV_MSG_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "mv_sock.h"
#include "mv_wire.h"

/* One received control message. */
struct mv_rx {
	struct mv_msg_hdr h;
	uint8_t payload[MV_MAX_MSG];
	size_t len; /* payload bytes */
	int fds[MV_MAX_FDS];
	int nfds;
};

/*
 * mv_msg_recv - reads one message from sock (non-blocking). Returns 1 on a
 * message whose header is whole and says as many payload bytes as arrived,
 * 0 on hang-up, -EAGAIN when none is waiting, or -errno (-EMSGSIZE,
 * -EBADMSG, -EPROTONOSUPPORT) with why naming the cause. The fds the
 * message carried are in m->fds whatever it returns (close them with
 * mv_msg_close_fds()); fds past MV_MAX_FDS were closed already.
 */
int mv_msg_recv(int sock, struct mv_rx *m, char *why, size_t whylen);

/*
 * mv_msg_need - checks that m carries what its type needs on a mover of
 * nshards shards: enough payload bytes and exactly the fds it takes.
 * Returns 0, or -EBADMSG with why naming the type, the need and what came
 * (an unknown type included).
 */
int mv_msg_need(const struct mv_rx *m, uint32_t nshards, char *why, size_t whylen);

/*
 * mv_msg_trace - the TRACE request in m (shape checked by mv_msg_need) into
 * *req, its path (only the trace's name: the file comes as an fd) made a
 * string. Returns 0, or -EINVAL with why when it starts a trace with
 * unknown flags.
 */
int mv_msg_trace(const struct mv_rx *m, struct mv_trace_req *req, char *why, size_t whylen);

/* Closes the fds m still holds (those a handler took are -1). */
void mv_msg_close_fds(struct mv_rx *m);

#endif
