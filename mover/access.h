/* SPDX-License-Identifier: MIT */
/*
 * Tenant policy, main thread only: which roles a connection has and which
 * control messages each may send (access.c), and what each client and uid
 * may hold (quota.c). Refusals are -EACCES / -EDQUOT with why.
 */
#ifndef MV_ACCESS_H
#define MV_ACCESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h> /* struct ucred */

#include "config.h" /* enum mv_quota_res */

struct mover;
struct mv_client;

/* access.c: who may send which control message. */
enum mv_role {
	MV_ROLE_CLIENT = 1, /* moves its own memory: the mover's uid, or any with --allow-any-uid */
	MV_ROLE_ADMIN = 2,  /* stats and traces: the mover's uid, root, or --admin-group */
	MV_ROLE_MOVER = 4,  /* a peer mover on this host: the mover's uid or root */
};
/* The roles of a connection from cred on sock (SO_PEERGROUPS for groups). */
uint32_t mv_access_roles(const struct mover *mv, int sock, const struct ucred *cred);
/* 0 when cl may send a message of type, else -EACCES with why, logged once
 * per refusal (the first few of each connection) with its pid and uid. */
int mv_access_check(struct mover *mv, struct mv_client *cl, uint16_t type, char *why,
                    size_t whylen);
/* Whether a message of type must wait for the client's HELLO and ATTACH:
 * a client's do, an admin's or a peer mover's do not. */
int mv_access_needs_attach(uint16_t type);
/* Resolves cfg.admin_group; 0, or -errno with why. */
int mv_access_init(struct mover *mv, char *why, size_t whylen);

/* quota.c (main thread only) */
/* 0 when cl (and its uid) may hold more of res, else -EDQUOT with why. */
int mv_quota_take(struct mover *mv, struct mv_client *cl, enum mv_quota_res res, uint64_t more,
                  char *why, size_t whylen);
/* The batches in flight cl may have (its ids run below it); -EDQUOT when its
 * uid's other clients hold the uid's whole quota. */
int mv_quota_batches(struct mover *mv, struct mv_client *cl, uint32_t *grant, char *why,
                     size_t whylen);

#endif
