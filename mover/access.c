/* SPDX-License-Identifier: MIT */
/*
 * Who may send which control message. A connection's roles come from its
 * credentials, read by the kernel when it was accepted (SO_PEERCRED, and
 * SO_PEERGROUPS for supplementary groups), never from what it says:
 *
 *   client  moves its own memory: the mover's uid, or any uid with
 *           --allow-any-uid;
 *   admin   reads the stats segment and starts and stops traces: the
 *           mover's uid, root, or a member of --admin-group;
 *   mover   a peer mover on this host asking for one of our GPU regions'
 *           fd (path 2) or host regions' memfd (the same-host copy): the
 *           mover's uid or root, and it must also show the region blob's
 *           secret.
 *
 * A connection with no role is refused at accept. Every message type needs
 * one role; a message whose sender lacks it is refused with -EACCES and a
 * message saying who may send it, and the mover logs the refusal with the
 * sender's pid and uid (through log.c's per-client rate limit: a tenant
 * cannot flood the log). Nothing here opens a path or hands out an fd.
 */
#include "mover.h"

#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct msg_rule {
	uint32_t roles; /* any of them may send it */
	const char *name;
};

static const struct msg_rule rules[] = {
    [MV_MSG_HELLO] = {MV_ROLE_CLIENT, "HELLO"},
    [MV_MSG_ATTACH] = {MV_ROLE_CLIENT, "ATTACH"},
    [MV_MSG_REG] = {MV_ROLE_CLIENT, "REG"},
    [MV_MSG_DEREG] = {MV_ROLE_CLIENT, "DEREG"},
    [MV_MSG_ADDR] = {MV_ROLE_CLIENT, "ADDR"},
    [MV_MSG_PEER_ADD] = {MV_ROLE_CLIENT, "PEER_ADD"},
    [MV_MSG_PEER_DEL] = {MV_ROLE_CLIENT, "PEER_DEL"},
    [MV_MSG_IMPORT] = {MV_ROLE_CLIENT, "IMPORT"},
    [MV_MSG_UNIMPORT] = {MV_ROLE_CLIENT, "UNIMPORT"},
    [MV_MSG_BLOB] = {MV_ROLE_CLIENT, "BLOB"},
    [MV_MSG_STATS] = {MV_ROLE_ADMIN, "STATS"},
    [MV_MSG_TRACE] = {MV_ROLE_ADMIN, "TRACE"},
    [MV_MSG_REG_GPU] = {MV_ROLE_CLIENT, "REG_GPU"},
    [MV_MSG_GPU_FD] = {MV_ROLE_MOVER, "GPU_FD"},
    /* Publishing shares the region's blob with the whole cluster: only a
     * client, for its own region (names.c checks the owner). */
    [MV_MSG_PUBLISH] = {MV_ROLE_CLIENT, "PUBLISH"},
    [MV_MSG_UNPUBLISH] = {MV_ROLE_CLIENT, "UNPUBLISH"},
    [MV_MSG_LOOKUP] = {MV_ROLE_CLIENT, "LOOKUP"},
    [MV_MSG_CLUSTER] = {MV_ROLE_ADMIN, "CLUSTER"},
    [MV_MSG_HOST_FD] = {MV_ROLE_MOVER, "HOST_FD"},
};

int mv_access_init(struct mover *mv, char *why, size_t whylen)
{
	const char *g = mv->cfg.admin_group;

	if (!g)
		return 0;
	struct group *gr = getgrnam(g);
	char *end;
	unsigned long n = strtoul(g, &end, 10);
	if (gr) {
		mv->cfg.admin_gid = gr->gr_gid;
	} else if (*g && !*end && n < (gid_t)-1) {
		mv->cfg.admin_gid = (gid_t)n;
	} else {
		snprintf(why, whylen, "--admin-group %s: no such group (name or number)", g);
		return -ENOENT;
	}
	return 0;
}

/* Whether the peer of sock (primary gid gid) is in group want. */
static int in_group(int sock, gid_t gid, gid_t want)
{
	gid_t groups[256];
	socklen_t len = sizeof(groups);

	if (gid == want)
		return 1;
	if (getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return 0; /* more than 256 groups, or an old kernel: primary only */
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == want)
			return 1;
	return 0;
}

uint32_t mv_access_roles(const struct mover *mv, int sock, const struct ucred *cred)
{
	uid_t self = geteuid();
	uint32_t roles = 0;

	if (cred->uid == self || mv->cfg.allow_any_uid)
		roles |= MV_ROLE_CLIENT;
	if (cred->uid == self || cred->uid == 0)
		roles |= MV_ROLE_ADMIN | MV_ROLE_MOVER;
	if (mv->cfg.admin_group && in_group(sock, cred->gid, mv->cfg.admin_gid))
		roles |= MV_ROLE_ADMIN;
	return roles;
}

/* Who holds a role, in words, for a refusal. */
static void holders(const struct mover *mv, uint32_t role, char *buf, size_t len)
{
	unsigned self = (unsigned)geteuid();

	switch (role) {
	case MV_ROLE_ADMIN:
		if (mv->cfg.admin_group)
			snprintf(buf, len, "the mover's admins (uid %u, root, or group %s)", self,
			         mv->cfg.admin_group);
		else
			snprintf(buf, len,
			         "the mover's admins (uid %u or root; --admin-group adds a group)",
			         self);
		break;
	case MV_ROLE_MOVER:
		snprintf(buf, len, "peer movers on this host (uid %u or root)", self);
		break;
	default:
		snprintf(buf, len, "clients (uid %u%s)", self,
		         mv->cfg.allow_any_uid ? " or any" : "; --allow-any-uid admits others");
	}
}

int mv_access_needs_attach(uint16_t type)
{
	/* A client's requests come after its HELLO and ATTACH; admins' and
	 * peer movers' need neither. Unknown types are a client's mistake. */
	if (type == MV_MSG_HELLO || type == MV_MSG_ATTACH)
		return 0;
	return type >= sizeof(rules) / sizeof(rules[0]) || !rules[type].roles ||
	       rules[type].roles == MV_ROLE_CLIENT;
}

int mv_access_check(struct mover *mv, struct mv_client *cl, uint16_t type, char *why, size_t whylen)
{
	char who[128];

	if (type >= sizeof(rules) / sizeof(rules[0]) || !rules[type].roles)
		return 0; /* unknown types get their own error from the handler */
	if (cl->roles & rules[type].roles)
		return 0;
	holders(mv, rules[type].roles, who, sizeof(who));
	snprintf(why, whylen, "%s is for %s; this connection is uid %u", rules[type].name, who,
	         (unsigned)cl->uid);
	mv_log_client(MV_LOG_WARN, (uint64_t)cl->pid,
	              "refused %s from pid %d uid %u: only %s may send it", rules[type].name,
	              cl->pid, (unsigned)cl->uid, who);
	return -EACCES;
}
