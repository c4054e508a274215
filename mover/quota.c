/* SPDX-License-Identifier: MIT */
/*
 * Quotas: how much one client, and all the clients of one uid together,
 * may hold of the mover (the quota_client_X and quota_uid_X settings,
 * config.c): registered bytes, regions, peers, imports, batches
 * in flight and list-arena bytes. Each is read off what the clients hold
 * now (their own counts, summed over the uid's connections when asked), so
 * nothing needs giving back: a freed region or a departed client stops
 * counting at once. A request past a limit is refused with -EDQUOT and a
 * message naming the limit and its key; the defaults are unlimited, so a
 * single-user mover never meets them. Batches in flight are granted when a
 * client says hello: its batch ids run below its grant, which the shards
 * hold it to (take.c), and a uid's grants together stay within its quota.
 * Main thread only.
 */
#include "mover.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* As the settings name them: quota_client_regions, quota_uid_bytes. */
static const char *const res_name[MV_Q_N] = {
    [MV_Q_BYTES] = "bytes",     [MV_Q_REGIONS] = "regions", [MV_Q_PEERS] = "peers",
    [MV_Q_IMPORTS] = "imports", [MV_Q_BATCHES] = "batches", [MV_Q_ARENA] = "arena",
};

/* What the words mean in a refusal. */
static const char *const res_words[MV_Q_N] = {
    [MV_Q_BYTES] = "bytes registered",
    [MV_Q_REGIONS] = "regions",
    [MV_Q_PEERS] = "peers",
    [MV_Q_IMPORTS] = "imports",
    [MV_Q_BATCHES] = "batches in flight",
    [MV_Q_ARENA] = "list-arena bytes",
};

/* What cl holds of res now. */
static uint64_t held(const struct mv_client *cl, enum mv_quota_res res)
{
	uint64_t n = 0;

	switch (res) {
	case MV_Q_BYTES:
		return cl->reg_bytes;
	case MV_Q_REGIONS:
		return cl->nregions;
	case MV_Q_PEERS:
		for (uint32_t i = 0; i < MV_CLIENT_MAX_PEERS; i++)
			n += cl->peers[i] != NULL;
		return n;
	case MV_Q_IMPORTS:
		for (uint32_t i = 0; i < MV_CLIENT_MAX_IMPORTS; i++)
			n += atomic_load_explicit(&cl->imports[i], memory_order_relaxed) != NULL;
		return n;
	case MV_Q_BATCHES:
		return cl->max_batches;
	case MV_Q_ARENA:
		return cl->arena_size;
	default:
		return 0;
	}
}

/* What every connection of uid holds of res, cl's own included. */
static uint64_t held_by_uid(const struct mover *mv, uid_t uid, enum mv_quota_res res)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < MV_MAX_CLIENTS; i++) {
		const struct mv_client *o = mv->clients[i];
		if (o && o->uid == uid)
			n += held(o, res);
	}
	return n;
}

static int refuse(struct mv_client *cl, enum mv_quota_res res, const char *scope, uint64_t have,
                  uint64_t more, uint64_t limit, char *why, size_t whylen)
{
	snprintf(why, whylen,
	         "quota: %s holds %" PRIu64 " %s and asks for %" PRIu64
	         " more; its limit is %" PRIu64 " (quota_%s_%s)",
	         scope, have, res_words[res], more, limit, scope[0] == 'u' ? "uid" : "client",
	         res_name[res]);
	mv_log_client(MV_LOG_WARN, (uint64_t)cl->pid, "pid %d uid %u: %s", cl->pid,
	              (unsigned)cl->uid, why);
	return -EDQUOT;
}

int mv_quota_take(struct mover *mv, struct mv_client *cl, enum mv_quota_res res, uint64_t more,
                  char *why, size_t whylen)
{
	const struct mv_quotas *q = &mv->cfg.quota;
	uint64_t mine = held(cl, res), all = held_by_uid(mv, cl->uid, res);
	char scope[32];

	if (more > q->client[res] || mine > q->client[res] - more)
		return refuse(cl, res, "this client", mine, more, q->client[res], why, whylen);
	if (more > q->uid[res] || all > q->uid[res] - more) {
		snprintf(scope, sizeof(scope), "uid %u", (unsigned)cl->uid);
		return refuse(cl, res, scope, all, more, q->uid[res], why, whylen);
	}
	return 0;
}

int mv_quota_batches(struct mover *mv, struct mv_client *cl, uint32_t *grant, char *why,
                     size_t whylen)
{
	const struct mv_quotas *q = &mv->cfg.quota;
	uint64_t n = MV_MAX_BATCHES, others = held_by_uid(mv, cl->uid, MV_Q_BATCHES);
	char scope[32];

	if (q->client[MV_Q_BATCHES] < n)
		n = q->client[MV_Q_BATCHES];
	if (others >= q->uid[MV_Q_BATCHES]) {
		snprintf(scope, sizeof(scope), "uid %u", (unsigned)cl->uid);
		return refuse(cl, MV_Q_BATCHES, scope, others, 1, q->uid[MV_Q_BATCHES], why,
		              whylen);
	}
	if (q->uid[MV_Q_BATCHES] - others < n)
		n = q->uid[MV_Q_BATCHES] - others;
	*grant = (uint32_t)n;
	return 0;
}
