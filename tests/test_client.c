/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of libclient's batch placement, with no mover: the client
 * source is compiled in so its static choices can be driven directly, and
 * its submission rings are real shmrings read back from the consumer side.
 * Covers the least-loaded home shard, near-GPU shard masks, and the rule
 * that a batch has exactly one END per part; and the binding entry points'
 * reads of array objects (bind.c), on objects laid out here.
 */
/* libclient's sources, compiled in so their static choices can be driven. */
#include "arena.c"
#include "batch.c"
#include "client.c"
#include "events.c"
#include "rejoin.c"
#include "memory.c"
#include "bind.c"

#include <check.h>
#include <sys/wait.h>

#define NSH 4

/* A client handle as mvc_connect would leave it, minus the mover. */
struct rig {
	struct mvc *c;
	struct shmring cons[NSH]; /* the mover's side of each submission ring */
};

static void rig_open(struct rig *g)
{
	struct shmring_opts so = {.capacity = 256, .slot_size = sizeof(struct mv_desc)};
	const uint32_t nb = 64;

	memset(g, 0, sizeof(*g));
	g->c = calloc(1, sizeof(*g->c));
	ck_assert_ptr_nonnull(g->c);
	struct mvc *c = g->c;
	c->info.nshards = NSH;
	c->info.max_batches = nb;
	c->max_write = 1ull << 30;
	ck_assert_int_eq(mvc_batch_tables_alloc(c, nb), 0);
	for (int s = 0; s < NSH; s++) {
		ck_assert_int_eq(shmring_create(&c->sh[s].sub, &so, SHMRING_PRODUCER), 0);
		int fd = dup(shmring_fd(&c->sh[s].sub));
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(shmring_attach(&g->cons[s], fd, SHMRING_CONSUMER), 0);
	}
}

static void rig_close(struct rig *g)
{
	struct mvc *c = g->c;

	for (int s = 0; s < NSH; s++) {
		shmring_close(&g->cons[s]);
		shmring_close(&c->sh[s].sub);
	}
	mvc_batch_tables_free(c);
	free(c);
}

/* Takes everything committed on shard s; counts its WRITEs and ENDs. */
static void drain(struct rig *g, int s, int *writes, int *ends)
{
	uint32_t pos;
	int n = shmring_peek(&g->cons[s], 256, &pos);

	ck_assert_int_ge(n, 0);
	*writes = *ends = 0;
	for (int i = 0; i < n; i++) {
		const struct mv_desc *d = shmring_slot(&g->cons[s], pos + (uint32_t)i);
		*writes += d->op == MV_OP_WRITE;
		*ends += d->op == MV_OP_END;
	}
	shmring_release(&g->cons[s], (uint32_t)n);
}

/* The mover's completion of batch b, as translate() reads it: with the
 * cookie of its END, as the mover sends it. */
static void complete(struct mvc *c, uint32_t b)
{
	struct mv_cqe q = {.type = MV_CQE_BATCH, .batch = b, .cookie = c->cookies[b]};
	struct mvc_event ev;

	ck_assert_int_eq(translate(c, &q, &ev), 1);
}

START_TEST(test_home_is_the_least_loaded_shard)
{
	struct rig g;

	rig_open(&g);
	struct mvc *c = g.c;
	c->sh[0].load = 5;
	c->sh[3].load = 3;
	/* Shards 1 and 2 are empty: they take turns. */
	ck_assert_uint_eq(least_loaded(c), 1);
	ck_assert_uint_eq(least_loaded(c), 2);
	ck_assert_uint_eq(least_loaded(c), 1);
	c->sh[1].load = c->sh[2].load = 9;
	ck_assert_uint_eq(least_loaded(c), 3);
	rig_close(&g);
}
END_TEST

START_TEST(test_near_shards_are_chosen_by_load)
{
	struct rig g;

	rig_open(&g);
	struct mvc *c = g.c;
	c->near[0].region = 7;
	c->near[0].mask = 0xe; /* shards 1, 2, 3 */
	c->nnear = 1;
	c->home = 0;
	c->sh[0].load = 0; /* least loaded of all, but not near */
	c->sh[1].load = 100;
	c->sh[2].load = 0;
	c->sh[3].load = 50;
	ck_assert_uint_eq(pick(c, 7, 0, 0), 2);
	ck_assert_uint_eq(pick(c, 7, 1, 0), 3);
	ck_assert_uint_eq(pick(c, 7, 2, 0), 1);
	/* Among equals the first from home; other sources start at home. */
	c->sh[1].load = c->sh[3].load = 0;
	c->home = 2;
	ck_assert_uint_eq(pick(c, 7, 0, 0), 2);
	c->home = 0;
	ck_assert_uint_eq(pick(c, 7, 0, 0), 1);
	ck_assert_uint_eq(pick(c, 5, 3, 0), 3);
	rig_close(&g);
}
END_TEST

/* Writes kept near a GPU can all land on a shard that is not home: the
 * batch is then one part with one END, not a second END on home. */
START_TEST(test_one_part_off_home_has_one_end)
{
	struct rig g;
	int w, e, writes = 0, ends = 0;

	rig_open(&g);
	struct mvc *c = g.c;
	c->near[0].region = 7;
	c->near[0].mask = 0x4; /* shard 2 only */
	c->nnear = 1;
	ck_assert_int_eq(mvc_write(c, 7, 0, 1, 0, 4096), 0);
	ck_assert_uint_ne(c->home, 2);
	ck_assert_int_eq(mvc_submit(c, 1), 0);
	for (int s = 0; s < NSH; s++) {
		drain(&g, s, &w, &e);
		ck_assert_msg(s == 2 || (w == 0 && e == 0), "shard %d got %d writes, %d ENDs", s, w,
		              e);
		writes += w;
		ends += e;
	}
	ck_assert_int_eq(writes, 1);
	ck_assert_int_eq(ends, 1);
	rig_close(&g);
}
END_TEST

START_TEST(test_lone_immediate_ends_on_home)
{
	struct rig g;
	int w, e, ends = 0;

	rig_open(&g);
	struct mvc *c = g.c;
	ck_assert_int_eq(mvc_write_imm(c, 1, 42), 0);
	uint32_t home = c->home;
	ck_assert_int_eq(mvc_submit(c, 1), 0);
	for (int s = 0; s < NSH; s++) {
		drain(&g, s, &w, &e);
		ck_assert_msg(e == (s == (int)home), "shard %d got %d ENDs; home is %u", s, e,
		              home);
		ends += e;
	}
	ck_assert_int_eq(ends, 1);
	rig_close(&g);
}
END_TEST

/* Stripe k of a striped write lands on shard k whatever the batch's home
 * (shard k's caches hold its pages from the last time), and on the k-th
 * near shard for a source kept near its GPU. */
START_TEST(test_stripe_keeps_its_shard)
{
	struct rig g;
	uint32_t pos;

	rig_open(&g);
	struct mvc *c = g.c;
	for (int round = 0; round < 2; round++) {
		/* A different home each round: the least loaded shard moves. */
		for (int s = 0; s < NSH; s++)
			c->sh[s].load = s == round + 1 ? 0 : 1000;
		ck_assert_int_eq(mvc_write(c, 1, 0, 2, 0, 8u << 20), 0);
		ck_assert_uint_eq(c->home, (uint32_t)round + 1);
		ck_assert_int_eq(mvc_submit(c, (uint64_t)round), 0);
		for (int s = 0; s < NSH; s++) {
			int n = shmring_peek(&g.cons[s], 256, &pos);
			const struct mv_desc *d = shmring_slot(&g.cons[s], pos);
			ck_assert_int_eq(n, 2); /* the stripe and its END */
			ck_assert_int_eq(d->op, MV_OP_WRITE);
			ck_assert_msg(d->src_off == (uint64_t)s * (2u << 20),
			              "round %d: shard %d got the stripe at %llu", round, s,
			              (unsigned long long)d->src_off);
			shmring_release(&g.cons[s], (uint32_t)n);
		}
	}
	c->near[0].region = 7;
	c->near[0].mask = 0xe; /* shards 1, 2, 3 */
	c->nnear = 1;
	c->home = 2;
	c->sh[1].load = 100;
	for (uint32_t k = 0; k < 3; k++)
		ck_assert_uint_eq(pick(c, 7, k, 1), k + 1);
	rig_close(&g);
}
END_TEST

/* Load goes on at submit, on every shard of the batch, and comes off when
 * its completion is read: back to zero, whatever the split. */
START_TEST(test_load_returns_to_zero)
{
	struct rig g;
	uint32_t ids[3];

	rig_open(&g);
	struct mvc *c = g.c;
	ck_assert_int_eq(mvc_write(c, 1, 0, 2, 0, 200u << 10), 0);
	ids[0] = c->batch;
	ck_assert_int_eq(mvc_submit(c, 1), 0);
	ck_assert_int_eq(mvc_write(c, 1, 0, 2, 0, 8u << 20), 0); /* striped */
	ids[1] = c->batch;
	ck_assert_int_eq(mvc_submit(c, 2), 0);
	ck_assert_int_eq(mvc_write_imm(c, 2, 9), 0);
	ids[2] = c->batch;
	ck_assert_int_eq(mvc_submit(c, 3), 0);
	uint64_t sum = 0;
	for (int s = 0; s < NSH; s++)
		sum += c->sh[s].load;
	ck_assert_uint_ge(sum, (200u << 10) + (8u << 20));
	for (int i = 2; i >= 0; i--)
		complete(c, ids[i]);
	for (int s = 0; s < NSH; s++)
		ck_assert_msg(c->sh[s].load == 0, "shard %d keeps %llu bytes of load", s,
		              (unsigned long long)c->sh[s].load);
	rig_close(&g);
}
END_TEST

/* ---- a mover that lies in its replies ---- */

/* Answers the next request on sock with a BLOB reply that claims blob_len. */
static void lying_reply(int sock, uint32_t blob_len)
{
	struct {
		struct mv_msg_hdr h;
		struct mv_id_req r;
	} req;
	ssize_t n = recv(sock, &req, sizeof(req), 0);
	ck_assert_int_eq(n, (ssize_t)sizeof(req));
	struct {
		struct mv_msg_hdr h;
		struct mv_reg_rep r;
	} rep = {.h = {.magic = MV_WIRE_MAGIC,
	               .version = MV_WIRE_VERSION,
	               .type = MV_MSG_BLOB | MV_MSG_REPLY,
	               .len = sizeof(struct mv_reg_rep),
	               .seq = req.h.seq},
	         .r = {.region = req.r.id, .blob_len = blob_len}};
	ck_assert_int_eq(send(sock, &rep, sizeof(rep), 0), (ssize_t)sizeof(rep));
}

START_TEST(test_region_blob_longer_than_a_blob_is_refused)
{
	struct rig g;
	int sv[2];
	static uint8_t buf[1 << 20];
	size_t len = sizeof(buf);

	rig_open(&g);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	g.c->sock = sv[0];
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The mover: a lie, then the truth. */
		lying_reply(sv[1], 1u << 19);
		lying_reply(sv[1], (uint32_t)MV_REGION_BLOB_SIZE(NSH));
		_exit(0);
	}
	/* A reply that says its blob is longer than the reply itself: the
	 * library must not copy past what arrived, however large our buffer. */
	ck_assert_int_eq(mvc_region_blob(g.c, 7, buf, &len), -EPROTO);
	ck_assert_msg(strstr(mvc_error(g.c), "region blob of 524288 bytes"), "%s", mvc_error(g.c));
	ck_assert_uint_eq(len, sizeof(buf));
	/* An honest length goes through. */
	ck_assert_int_eq(mvc_region_blob(g.c, 7, buf, &len), 0);
	ck_assert_uint_eq(len, MV_REGION_BLOB_SIZE(NSH));
	int st;
	waitpid(pid, &st, 0);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the lying mover failed");
	close(sv[0]);
	close(sv[1]);
	g.c->sock = -1;
	rig_close(&g);
}
END_TEST

/* After a reconnect a new mover may hand out an id the application already
 * holds for another object: the new one gets an id no mover hands out, the
 * rings carry the mover's ids, and events name the application's. */
START_TEST(test_remapped_ids_reach_the_rings_and_come_back_in_events)
{
	struct rig g;
	uint32_t r1, r2, i1;
	int writes, ends;

	rig_open(&g);
	struct mvc *c = g.c;
	struct mvc_obj o = {.kind = MVC_OBJ_REGION, .cur = 65537, .fd = -1};
	ck_assert_int_eq(mvc_obj_add(c, &o, NULL, 0, &r1), 0);
	ck_assert_uint_eq(r1, 65537);
	ck_assert_int_eq(c->remapped, 0);
	o = (struct mvc_obj){.kind = MVC_OBJ_IMPORT, .cur = 65537, .fd = -1};
	ck_assert_int_eq(mvc_obj_add(c, &o, "blob", 4, &i1), 0);
	ck_assert_uint_eq(i1, 65537); /* another kind: no clash */
	/* The new mover gave r1 id 131073 and the next region 65537. */
	c->objs[0].cur = 131073;
	c->remapped = 1;
	o = (struct mvc_obj){.kind = MVC_OBJ_REGION, .cur = 65537, .fd = -1};
	ck_assert_int_eq(mvc_obj_add(c, &o, NULL, 0, &r2), 0);
	ck_assert_uint_ne(r2, 65537);
	ck_assert_uint_eq(mvc_cur(c, MVC_OBJ_REGION, r1), 131073);
	ck_assert_uint_eq(mvc_cur(c, MVC_OBJ_REGION, r2), 65537);
	ck_assert_uint_eq(mvc_app(c, MVC_OBJ_REGION, 65537), r2);
	ck_assert_int_eq(mvc_write(c, r1, 0, i1, 0, 64), 0);
	ck_assert_int_eq(mvc_submit(c, 1), 0);
	uint32_t pos;
	ck_assert_int_eq(shmring_peek(&g.cons[c->home], 8, &pos), 2);
	const struct mv_desc *d = shmring_slot(&g.cons[c->home], pos);
	ck_assert_uint_eq(d->src, 131073);
	ck_assert_uint_eq(d->dst, 65537);
	drain(&g, (int)c->home, &writes, &ends);
	/* An immediate into the mover's 65537 is one into r2. */
	struct mv_cqe q = {.type = MV_CQE_IMM, .imm = 5, .region = 65537};
	struct mvc_event ev;
	ck_assert_int_eq(translate(c, &q, &ev), 1);
	ck_assert_uint_eq(ev.region, r2);
	/* Forgetting r1 gives back the mover's id to free. */
	ck_assert_uint_eq(mvc_obj_del(c, MVC_OBJ_REGION, r1), 131073);
	ck_assert_uint_eq(mvc_obj_del(c, MVC_OBJ_REGION, r2), 65537);
	ck_assert_int_eq(c->remapped, 0); /* the import kept its id */
	mvc_objs_free(c);
	free(c->imm_tab);
	rig_close(&g);
}
END_TEST

/* An array object as a binding lays one out (numpy's order), and the
 * layout that describes it. */
struct fake_array {
	intptr_t refcnt;
	const void *type;
	uint32_t *data;
	int nd;
	int64_t *dims;
	void *strides;
	const void *descr;
	int flags;
};

static const char array_type, u32_type, other_type;

static const struct mvc_array_layout fake_layout = {
    .type = &array_type,
    .descr = &u32_type,
    .type_at = offsetof(struct fake_array, type),
    .data_at = offsetof(struct fake_array, data),
    .nd_at = offsetof(struct fake_array, nd),
    .dims_at = offsetof(struct fake_array, dims),
    .descr_at = offsetof(struct fake_array, descr),
    .flags_at = offsetof(struct fake_array, flags),
    .flags = 0x101,
};

START_TEST(test_array_take_reads_only_arrays_it_can_use)
{
	uint32_t pages[4] = {3, 1, 4, 1};
	int64_t len = 4;
	struct fake_array a = {1, &array_type, pages, 1, &len, NULL, &u32_type, 0x101 | 0x400};
	const uint32_t *data = NULL;
	uint64_t n = 0;

	ck_assert_int_eq(mvc_array_take(&fake_layout, &a, &data, &n), 1);
	ck_assert_ptr_eq(data, pages);
	ck_assert_uint_eq(n, 4);
	/* Each field that disqualifies an array, one at a time. */
	struct fake_array bad[] = {a, a, a, a, a, a, a};
	bad[0].type = &other_type;
	bad[1].descr = &other_type;
	bad[2].nd = 2;
	bad[3].flags = 0x001; /* contiguous, not aligned */
	int64_t zero = 0, huge = (int64_t)UINT32_MAX + 1;
	bad[4].dims = &zero;
	bad[5].dims = &huge;
	bad[6].dims = NULL;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		data = NULL;
		n = 0;
		ck_assert_msg(mvc_array_take(&fake_layout, &bad[i], &data, &n) == 0, "case %zu", i);
		ck_assert_ptr_null(data);
		ck_assert_uint_eq(n, 0);
	}
	ck_assert_int_eq(mvc_array_take(&fake_layout, NULL, &data, &n), 0);
	/* An object of another type is read no further than its type: one
	 * that ends there is safe to hand over. */
	struct {
		intptr_t refcnt;
		const void *type;
	} *small = malloc(sizeof(*small));
	ck_assert_ptr_nonnull(small);
	small->refcnt = 1;
	small->type = &other_type;
	ck_assert_int_eq(mvc_array_take(&fake_layout, small, &data, &n), 0);
	free(small);
}
END_TEST

START_TEST(test_paged_objs_leave_what_they_cannot_take)
{
	struct rig g;
	rig_open(&g);
	struct mvc *c = g.c;
	uint32_t pages[4] = {0, 1, 2, 3};
	int64_t four = 4, three = 3;
	struct fake_array a = {1, &array_type, pages, 1, &four, NULL, &u32_type, 0x101};
	struct fake_array b = a, shorter = a, other = a;
	shorter.dims = &three;
	other.descr = &other_type;
	struct mvc_pages p = {.src = 1,
	                      .dst = 2,
	                      .page_size = 64,
	                      .src_stride = 64,
	                      .dst_stride = 64,
	                      .src_base = 5,
	                      .dst_base = 6};
	struct mvc_pages before = p;
	const struct mvc_paged_objs refused[] = {
	    {&a, &shorter, 7, 8, 9},
	    {&other, &b, 7, 8, 9},
	    {&a, NULL, 7, 8, 9},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		ck_assert_int_eq(mvc_write_paged_objs(c, &p, &fake_layout, &refused[i]), 1);
		ck_assert_int_eq(mvc_submit_paged_objs(c, &p, &fake_layout, &refused[i]), 1);
		ck_assert_mem_eq(&p, &before, sizeof(p));
		ck_assert_int_eq(c->open, 0);
	}
	/* Taken: stored in p, and the write is mvc_write_paged's own (here
	 * refused the same way: the rig knows no region 1). */
	const struct mvc_paged_objs ok = {&a, &b, 7, 8, 9};
	int ret = mvc_write_paged_objs(c, &p, &fake_layout, &ok);
	ck_assert_ptr_eq(p.src_pages, pages);
	ck_assert_ptr_eq(p.dst_pages, pages);
	ck_assert_uint_eq(p.npages, 4);
	ck_assert_uint_eq(p.src_base, 7);
	ck_assert_uint_eq(p.dst_base, 8);
	ck_assert_int_eq(ret, mvc_write_paged(c, &p));
	ck_assert_int_eq(mvc_submit_paged_objs(c, &p, &fake_layout, &ok),
	                 mvc_submit_paged(c, &p, 9));
	rig_close(&g);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("client");
	TCase *tc = tcase_create("placement");

	tcase_add_test(tc, test_home_is_the_least_loaded_shard);
	tcase_add_test(tc, test_near_shards_are_chosen_by_load);
	tcase_add_test(tc, test_one_part_off_home_has_one_end);
	tcase_add_test(tc, test_lone_immediate_ends_on_home);
	tcase_add_test(tc, test_load_returns_to_zero);
	tcase_add_test(tc, test_stripe_keeps_its_shard);
	tcase_add_test(tc, test_remapped_ids_reach_the_rings_and_come_back_in_events);
	suite_add_tcase(s, tc);
	tc = tcase_create("errors");
	tcase_add_test(tc, test_region_blob_longer_than_a_blob_is_refused);
	suite_add_tcase(s, tc);
	tc = tcase_create("binding");
	tcase_add_test(tc, test_array_take_reads_only_arrays_it_can_use);
	tcase_add_test(tc, test_paged_objs_leave_what_they_cannot_take);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
