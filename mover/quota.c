/* SPDX-License-Identifier: MIT */
/*
 * Quotas: how much one client, and all the clients of one uid together,
 * may hold of the mover (the quota_client_X and quota_uid_X settings,
 * config.c): registered bytes, regions, peers, imports, batches
 * in flight and list-arena bytes. Each is read off what the clients hold
 * now (their own counts, summed over the uid's connections when asked), so
 * nothing needs giving back: a freed region or a departed client stops
 * counting at once, but for a freed GPU region, whose device memory the
 * mover keeps mapped (and so allocated) through its quarantine (registry.c):
 * its bytes and the region count against its client and uid until it is
 * reaped, the client gone or not. A request past a limit is refused with
 * -EDQUOT and a message naming the limit and its key; the defaults are
 * unlimited, so a single-user mover never meets them. Batches in flight are
 * granted when a client says hello: its batch ids run below its grant,
 * which the shards hold it to (take.c), and a uid's grants together stay
 * within its quota. Main thread only.
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

/* What follows an amount of each in a refusal. */
static const char *const res_words[MV_Q_N] = {
    [MV_Q_BYTES] = "registered",
    [MV_Q_REGIONS] = "regions",
    [MV_Q_PEERS] = "peers",
    [MV_Q_IMPORTS] = "imports",
    [MV_Q_BATCHES] = "batches in flight",
    [MV_Q_ARENA] = "of list arena",
};

/* v of res in words that fit a reply: bytes in the largest binary unit
 * that divides them (as the settings take them), counts as they are. */
static const char *amount(enum mv_quota_res res, uint64_t v, char *buf, size_t len)
{
	static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;

	if (res != MV_Q_BYTES && res != MV_Q_ARENA) {
		snprintf(buf, len, "%" PRIu64, v);
		return buf;
	}
	while (v && v % 1024 == 0 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%" PRIu64 " %s", v, unit[u]);
	return buf;
}

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

/* What of res freed GPU regions in quarantine hold (registry.c): client
 * cl's in *mine, those of every client of its uid, gone or not, in
 * *uid_all; one walk of the graveyard for both. */
static void quarantined(const struct mover *mv, const struct mv_client *cl, enum mv_quota_res res,
                        uint64_t *mine, uint64_t *uid_all)
{
	*mine = *uid_all = 0;
	if (res != MV_Q_BYTES && res != MV_Q_REGIONS)
		return;
	for (const struct mv_region *r = mv->graveyard; r; r = r->next_dead) {
		uint64_t n = res == MV_Q_BYTES ? r->len : 1;
		if (!r->is_gpu || r->owner_uid != cl->uid)
			continue;
		*uid_all += n;
		if (r->owner == cl->id)
			*mine += n;
	}
}

/* The refusal, the key and its limit first: a reply carries 123 bytes of
 * words, and the key is what an operator needs of them. */
static int refuse(const struct mover *mv, struct mv_client *cl, enum mv_quota_res res,
                  const char *scope, uint64_t have, uint64_t quar, uint64_t more, uint64_t limit,
                  char *why, size_t whylen)
{
	char lim[32], h[32], q[32], m[32], held_back[96] = "";

	if (quar)
		snprintf(held_back, sizeof(held_back),
		         " (%s of it freed GPU memory, kept up to %d s)",
		         amount(res, quar, q, sizeof(q)), 3 * mv->cfg.op_timeout_ms / 1000 + 30);
	snprintf(why, whylen, "quota_%s_%s is %s: %s holds %s %s%s and asks for %s more",
	         scope[0] == 'u' ? "uid" : "client", res_name[res],
	         amount(res, limit, lim, sizeof(lim)), scope, amount(res, have, h, sizeof(h)),
	         res_words[res], held_back, amount(res, more, m, sizeof(m)));
	mv_log_client(MV_LOG_WARN, (uint64_t)cl->pid, "pid %d uid %u: %s", cl->pid,
	              (unsigned)cl->uid, why);
	return -EDQUOT;
}

int mv_quota_take(struct mover *mv, struct mv_client *cl, enum mv_quota_res res, uint64_t more,
                  char *why, size_t whylen)
{
	const struct mv_quotas *q = &mv->cfg.quota;
	uint64_t qmine, qall;
	quarantined(mv, cl, res, &qmine, &qall);
	uint64_t mine = held(cl, res) + qmine, all = held_by_uid(mv, cl->uid, res) + qall;
	char scope[32];

	if (more > q->client[res] || mine > q->client[res] - more)
		return refuse(mv, cl, res, "this client", mine, qmine, more, q->client[res], why,
		              whylen);
	if (more > q->uid[res] || all > q->uid[res] - more) {
		snprintf(scope, sizeof(scope), "uid %u", (unsigned)cl->uid);
		return refuse(mv, cl, res, scope, all, qall, more, q->uid[res], why, whylen);
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
		return refuse(mv, cl, MV_Q_BATCHES, scope, others, 0, 1, q->uid[MV_Q_BATCHES], why,
		              whylen);
	}
	if (q->uid[MV_Q_BATCHES] - others < n)
		n = q->uid[MV_Q_BATCHES] - others;
	*grant = (uint32_t)n;
	return 0;
}
