/* SPDX-License-Identifier: MIT */
/*
 * A client's queue of ops for the fabric (shard_int.h's runs, queue.c's
 * promotion) driven without a mover: ops to a few peers are queued at the
 * tail or the head (a retry), go from the head, are promoted past a head
 * whose peer refused them, and are taken out by peer (a deadline). After
 * every step each peer's ops are in the order a FIFO per peer would have
 * them, none is lost, and the runs describe the queue. And the client's
 * bytes in flight by peer, for more peers than it has slots.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shard_int.h"

#define NPEERS 5
#define NOPS   512

static struct mv_shard *s;
static struct mv_attach *at;
static struct mv_peer peers[NPEERS];
static struct mv_wr ops[NOPS];
static struct mv_wr *free_list;

/* Per peer, its queued ops in the order they must go. */
static struct mv_wr *model[NPEERS][NOPS];
static uint32_t nmodel[NPEERS];

static void setup(void)
{
	s = calloc(1, sizeof(*s));
	at = calloc(1, sizeof(*at));
	ck_assert(s && at);
	memset(peers, 0, sizeof(peers));
	memset(ops, 0, sizeof(ops));
	memset(nmodel, 0, sizeof(nmodel));
	free_list = NULL;
	for (int i = 0; i < NPEERS; i++)
		peers[i].index = (uint32_t)i;
	for (int i = NOPS - 1; i >= 0; i--) {
		ops[i].next = free_list;
		free_list = &ops[i];
	}
}

static void teardown(void)
{
	free(s);
	free(at);
}

static int pix(const struct mv_wr *op)
{
	return (int)(op->peer - peers);
}

static struct mv_wr *op_new(int p)
{
	struct mv_wr *op = free_list;

	ck_assert_ptr_nonnull(op);
	free_list = op->next;
	memset(op, 0, sizeof(*op));
	op->at = at;
	op->peer = &peers[p];
	return op;
}

static void push(int p)
{
	struct mv_wr *op = op_new(p);

	mv_pend_push(s, op);
	model[p][nmodel[p]++] = op;
}

static void push_front(int p)
{
	struct mv_wr *op = op_new(p);

	mv_pend_push_front(s, op);
	memmove(&model[p][1], &model[p][0], nmodel[p] * sizeof(model[p][0]));
	model[p][0] = op;
	nmodel[p]++;
}

/* The head goes; it must be the first of its peer's. */
static struct mv_wr *went(void)
{
	struct mv_wr *op = mv_pend_went(s, at);
	int p = pix(op);

	ck_assert_msg(nmodel[p] && model[p][0] == op,
	              "an op to peer %d went before an earlier one to that peer", p);
	memmove(&model[p][0], &model[p][1], (nmodel[p] - 1) * sizeof(model[p][0]));
	nmodel[p]--;
	op->next = free_list;
	free_list = op;
	return op;
}

/* As complete.c's expire_to(): every queued op to peer p taken out. */
static void expire(int p)
{
	uint32_t n;

	for (struct mv_wr *op = mv_wr_take(&at->pq_head, &at->pq_tail, NULL, &peers[p], &n), *nx;
	     op; op = nx) {
		nx = op->next;
		at->npq--;
		s->npend--;
		op->next = free_list;
		free_list = op;
	}
	mv_pend_runs_fix(at);
	if (!at->pq_head)
		mv_round_leave(s, at);
	nmodel[p] = 0;
}

/* The queue against the model, and its runs. */
static void check_queue(void)
{
	uint32_t seen[NPEERS] = {0}, n = 0;
	struct mv_wr *last = NULL, *tail_first = NULL;

	for (struct mv_wr *op = at->pq_head; op; op = op->next, n++) {
		int p = pix(op);
		ck_assert_msg(seen[p] < nmodel[p] && model[p][seen[p]] == op,
		              "peer %d's op %u out of its order", p, seen[p]);
		seen[p]++;
		last = op;
		ck_assert_uint_le(n, NOPS);
	}
	for (int p = 0; p < NPEERS; p++)
		ck_assert_msg(seen[p] == nmodel[p], "peer %d: %u ops queued, %u expected", p,
		              seen[p], nmodel[p]);
	ck_assert_uint_eq(n, at->npq);
	ck_assert_ptr_eq(at->pq_tail, last);
	for (struct mv_wr *f = at->pq_head; f; f = f->run_last->next) {
		struct mv_wr *op = f;
		while (op != f->run_last) {
			ck_assert_msg(op->next && op->next->peer == f->peer,
			              "a run of peer %d's ops holds another peer's, or ends early",
			              pix(f));
			op = op->next;
		}
		tail_first = f;
	}
	ck_assert_ptr_eq(at->run_tail, tail_first);
}

START_TEST(test_a_refused_head_lets_the_next_peers_run_go_first)
{
	struct mv_refused r = {0};

	/* P P P Q Q P R */
	for (int p = 0; p < 3; p++)
		push(0);
	push(1);
	push(1);
	push(0);
	push(2);
	check_queue();
	s->now = 1000;
	struct mv_wr *h = at->pq_head;
	int64_t h_since = h->posted_at;
	ck_assert(mv_promote(s, at, &r)); /* P refused: Q's run comes first */
	check_queue();
	ck_assert_int_eq(pix(at->pq_head), 1);
	ck_assert(at->pq_head->promoted && at->pq_head->next->promoted);
	ck_assert_int_eq(at->pq_head->posted_at, 1000);
	s->now = 2000;
	went();
	ck_assert_int_eq(pix(at->pq_head), 1); /* the rest of the run: from now */
	ck_assert_int_eq(at->pq_head->posted_at, 2000);
	went();
	/* The head that could not go keeps its wait's start, */
	ck_assert_ptr_eq(at->pq_head, h);
	ck_assert_int_eq(h->posted_at, h_since);
	check_queue();
	/* and keeps it when a retry that went before it went, */
	s->now = 3000;
	push_front(3);
	went();
	ck_assert_ptr_eq(at->pq_head, h);
	ck_assert_int_eq(h->posted_at, h_since);
	check_queue();
	/* or when it went ahead of a retry that its peer refused. */
	s->now = 4000;
	push_front(3);
	struct mv_refused rr = {0};
	ck_assert(mv_promote(s, at, &rr));
	ck_assert_ptr_eq(at->pq_head, h);
	ck_assert_int_eq(h->posted_at, h_since);
	check_queue();
	ck_assert(mv_promote(s, at, &rr)); /* h's peer refuses too: back behind it */
	went();                            /* the retry goes */
	ck_assert_ptr_eq(at->pq_head, h);
	ck_assert_int_eq(h->posted_at, h_since);
	check_queue();
	/* P again this burst: past P's ops to R's. */
	ck_assert(mv_promote(s, at, &r));
	ck_assert_int_eq(pix(at->pq_head), 2);
	check_queue();
	/* R refuses too: back behind the head, and nothing else may go. */
	ck_assert(mv_promote(s, at, &r));
	ck_assert_ptr_eq(at->pq_head, h);
	check_queue();
	ck_assert(!mv_promote(s, at, &r));
	check_queue();
	/* A new burst: R may go again. */
	struct mv_refused r2 = {0};
	ck_assert(mv_promote(s, at, &r2));
	ck_assert_int_eq(pix(at->pq_head), 2);
	check_queue();
}
END_TEST

START_TEST(test_promotion_keeps_each_peers_order_whatever_happens)
{
	struct mv_refused r = {0};
	uint64_t x = 88172645463325252ull;
	uint32_t promoted = 0, demoted = 0;

	for (int step = 0; step < 200000; step++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint32_t what = (uint32_t)(x % 100), p = (uint32_t)(x >> 32) % NPEERS;
		s->now = step;
		if (what < 40 && free_list) {
			push((int)p);
		} else if (what < 44 && free_list) {
			push_front(at->pq_head && (x >> 40) % 2 ? pix(at->pq_head) : (int)p);
		} else if (what < 70 && at->pq_head) {
			went();
		} else if (what < 96 && at->pq_head) {
			if ((x >> 48) % 4 == 0)
				memset(&r, 0, sizeof(r)); /* a new burst */
			int was = at->pq_head->promoted;
			if (mv_promote(s, at, &r)) {
				if (was && !at->pq_head->promoted)
					demoted++;
				else
					promoted++;
			}
		} else if (what < 100) {
			expire((int)p);
			memset(&r, 0, sizeof(r));
		}
		check_queue();
	}
	ck_assert_uint_gt(promoted, 1000);
	ck_assert_uint_gt(demoted, 100);
}
END_TEST

/* at's bytes in flight by peer (shard_int.h's mv_inflight_to_add() and
 * mv_inflight_end()) for a client with writes in flight to up to 40 peers
 * at once, more than its MV_ATTACH_PEERS slots: ops posted and completed at
 * random, every peer's count checked against a model after each step. */
START_TEST(test_bytes_in_flight_are_counted_for_every_peer)
{
	enum { NP = 40, NF = 256 };
	static struct mv_wr fl[NF];
	uint64_t want[NP] = {0};
	uint32_t live[NF], nlive = 0, more = 0;
	unsigned seed = 7;

	memset(fl, 0, sizeof(fl));
	for (uint32_t i = 0; i < NF; i++)
		live[i] = i; /* [nlive, NF): free */
	for (int step = 0; step < 200000; step++) {
		if (nlive < NF && (nlive == 0 || rand_r(&seed) % 2)) {
			struct mv_wr *op = &fl[live[nlive++]];
			/* Skewed: a few peers often, the rest now and then. */
			uint32_t r = (uint32_t)rand_r(&seed);
			op->pix = (uint16_t)(r % 3 ? r % 6 : r % NP);
			op->bytes = 4096u << (r % 5);
			op->at = at;
			op->inflight_counted = 1;
			mv_inflight_to_add(at, op);
			ck_assert_uint_ne(op->tix, MV_TIX_NONE);
			more += op->tix == MV_TIX_MORE;
			want[op->pix] += op->bytes;
		} else {
			uint32_t k = (uint32_t)rand_r(&seed) % nlive;
			struct mv_wr *op = &fl[live[k]];
			want[op->pix] -= op->bytes;
			mv_inflight_end(op);
			uint32_t t = live[k];
			live[k] = live[--nlive];
			live[nlive] = t;
		}
		if (step % 97 == 0 || nlive == 0)
			for (uint32_t p = 0; p < NP; p++)
				ck_assert_msg(mv_inflight_to(at, p) == want[p],
				              "step %d peer %u: %llu, not %llu", step, p,
				              (unsigned long long)mv_inflight_to(at, p),
				              (unsigned long long)want[p]);
	}
	ck_assert_ptr_nonnull(at->to_more);
	ck_assert_uint_gt(more, 1000);
	free(at->to_more);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("queue");
	TCase *tc = tcase_create("runs");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_a_refused_head_lets_the_next_peers_run_go_first);
	tcase_add_test(tc, test_promotion_keeps_each_peers_order_whatever_happens);
	tcase_add_test(tc, test_bytes_in_flight_are_counted_for_every_peer);
	suite_add_tcase(su, tc);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
