/* SPDX-License-Identifier: MIT */
/*
 * The same-host path's state and calls, the daemon's side: a peer mover's
 * host region mapped here for copies (samehost.c, the copier's side) and
 * the peer movers that copy into our regions with their fence segments
 * (samehost_owner.c, the owner's side). The segment's layout, which both
 * movers read, is samehost_layout.h.
 */
#ifndef MV_SAMEHOST_H
#define MV_SAMEHOST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mv_wire.h"

struct mover;
struct mv_client;
struct mv_import;
struct mv_peer;
struct mv_region;
struct mv_region_blob;
struct mv_host_fd_req;
struct mv_host_fd_rep;

/* A same-host peer's host region, its memfd mapped here: shards copy into
 * it (samehost.c). Freed only after the quarantine of a dropped import. */
struct mv_fence;
struct mv_host_remote {
	struct mv_host_remote *next; /* live list, then the quarantine */
	uint64_t mover_id;
	uint32_t region;
	struct mv_region_blob blob; /* the one its owner checked: later imports must show it */
	struct mv_addr_blob addr;   /* and the address of its owner they come through */
	int refs;
	uint8_t *map;
	size_t map_len;
	uint8_t *base; /* the region's first byte, in our mapping */
	uint64_t len;
	struct mv_fence *fence; /* its owner's (samehost_layout.h) */
	uint32_t slot;          /* our shard k's busy word there: slot + k */
	int64_t expires;
};

/* A same-host peer mover that copies into our clients' host regions, and
 * the fence segment it was given, its own (samehost_owner.c). Main thread. */
struct mv_fence_peer {
	uint64_t mover_id;
	pid_t pid;
	int pidfd; /* its exit, on the main epoll (MV_TAG_FENCE | index); or -1 */
	int fd;    /* the segment's memfd, handed with each HOST_FD reply */
	struct mv_fence *f;
	uint32_t nshards, index;
	int draining;       /* cut off: every region revoked in its segment */
	uint64_t idle_seen; /* draining: bit k once its shard k was seen out of any copy */
};
#define MV_FENCE_PEERS 64u /* same-host peer movers copying into ours at once */

/* A HOST_FD request in flight (samehost.c): the copier's side. */
struct mv_host_fetch;

/* samehost_owner.c: the peers that copy into our host regions. Main thread. */
/* HOST_FD from a peer mover: the owner's word on the region's blob (0:
 * the region is ours and the secret its blob's; rep says what our blobs
 * say), and, when asked for, the region's memfd and the peer's fence
 * segment in fds (rep->nfds of them, borrowed: the caller sends them);
 * -errno with why. */
int mv_host_fd_serve(struct mover *mv, struct mv_client *cl, const struct mv_host_fd_req *req,
                     struct mv_host_fd_rep *rep, int fds[2], char *why, size_t whylen);
/* Before r is overlaid: no peer shard copies into it once this returns. */
void mv_host_revoke(struct mover *mv, struct mv_region *r);
/* The process of fence peer index exited (its pidfd): its segment goes. */
void mv_host_fence_exited(struct mover *mv, uint32_t index);
/* Peer mover id is cut off: it may copy into none of our regions again. */
void mv_host_fence_cut(struct mover *mv, uint64_t mover_id, const char *why);
/* Forgets cut-off peers once seen out of every copy. */
void mv_host_fence_tick(struct mover *mv);
void mv_host_fence_close_all(struct mover *mv);

/* samehost.c: copies into same-host peers' host regions. Main thread. */
/* Starts mapping p's region b for imp when it is host memory on this host:
 * the HOST_FD request goes out and imp writes through the fabric until its
 * answer (mv_host_fetch_events()) switches it to copies; a refusal of the
 * copies is logged once, with its cause, and leaves imp on the fabric.
 * Where the fabric does not check keys (mv_fabric_unchecked()), an import
 * of another mover's region waits for its owner's word on the blob (imp is
 * held: mv_import_get() does not give it) and is refused without it. 0, or
 * -errno with why: the import is refused now. */
int mv_host_import_open(struct mover *mv, struct mv_import *imp, struct mv_peer *p,
                        const struct mv_region_blob *b, char *why, size_t whylen);
/* Holds the reply (rep, len bytes, to request h) that gives cl import
 * handle while its HOST_FD is in flight: for up to MV_HOST_PARK_MS, or,
 * when it waits for its owner's word, until the answer (MV_HOST_FETCH_MS
 * at most; an error reply then if the word was not given). 1 if held
 * (answered later), 0 if the caller answers now. */
struct mv_msg_hdr;
/* MV_PATH_SAMEHOST when the shards copy into client cl's import handle
 * now, else 0: what an IMPORT or LOOKUP reply tells the client, which
 * stripes its writes for the copies (mv_host_parts()). Control thread. */
uint32_t mv_host_import_path(struct mv_client *cl, uint32_t handle);
int mv_host_import_park(struct mover *mv, struct mv_client *cl, const struct mv_msg_hdr *h,
                        const void *rep, size_t len, uint32_t handle);
void mv_host_import_close(struct mover *mv, struct mv_import *imp);
/* samehost_ask.c: imp waits for no HOST_FD answer any more. */
void mv_host_fetch_forget(struct mover *mv, struct mv_import *imp);
void mv_host_fetch_close_all(struct mover *mv);
/* HOST_FD answers that came (MV_TAG_HOSTFD); requests past their time. */
void mv_host_fetch_events(struct mover *mv);
void mv_host_fetch_tick(struct mover *mv);
void mv_host_reap(struct mover *mv, int all);
/* At exit: every mapping, request and fence segment. */
void mv_host_close_all(struct mover *mv);
#define MV_HOST_PARK_MS  1000 /* an IMPORT waits this long for its peer's memfd */
#define MV_HOST_FETCH_MS 5000 /* then the request goes on alone this long */

#endif
