/* SPDX-License-Identifier: MIT */
/*
 * Weights between the clients of one mover, end to end over tcp;ofi_rxm and
 * shm with one shard per mover: two flooding clients get bytes in the
 * proportion of their weights (the share a client asks for in mvc_opts, and
 * its uid's --weight-uid, which needs root to run a client as another uid);
 * a share out of range and a --weight-uid the mover cannot use are refused,
 * naming what is wrong. Counted in bytes over the same second, never in
 * time: timed bars belong to mvbench's fairness row.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mvc.h"

#include "mvtest.h"
#include "mvflood.h"

/* Bytes each of two flooders completed over the same second, both busy. */
static void race(struct flooder *x, struct flooder *y, uint64_t *bx, uint64_t *by)
{
	usleep(300000); /* both running, the shard shared */
	uint64_t x0 = atomic_load(&x->bytes), y0 = atomic_load(&y->bytes);
	usleep(1000000);
	*bx = atomic_load(&x->bytes) - x0;
	*by = atomic_load(&y->bytes) - y0;
	ck_assert_msg(!x->err[0] && !y->err[0], "%s%s", x->err, y->err);
}

/* A flooder that asks for a quarter of its weight gets about a quarter of
 * the other's bytes; beside an equal one, about as many. */
START_TEST(test_share_pct_divides_bytes_by_weight)
{
	struct mvc *owner;
	struct mvc_mem dst;
	struct flooder full, quarter, equal;
	struct mvc_opts q = {.share_pct = 25};
	uint64_t bf, bq, be;

	ck_assert_int_eq(mvc_connect(&owner, B.sock), 0);
	ck_assert_msg(mvc_alloc(owner, 8u << 20, &dst) == 0, "%s", mvc_error(owner));
	flooder_open(&full, owner, dst.region, NULL);
	flooder_open(&quarter, owner, dst.region, &q);
	race(&full, &quarter, &bf, &bq);
	/* mvstat shows each client's weight on the shard: 100 and 25. */
	char cmd[300], json[1 << 16];
	snprintf(cmd, sizeof(cmd), "%s/bin/mvstat --socket %s --json",
	         getenv("MV_BUILD") ? getenv("MV_BUILD") : "build", A.sock);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t n = fread(json, 1, sizeof(json) - 1, p);
	json[n] = 0;
	ck_assert_int_eq(pclose(p), 0);
	ck_assert_msg(strstr(json, "\"weight\":100,") && strstr(json, "\"weight\":25,"),
	              "mvstat --json shows no weights 100 and 25: %.300s", json);
	flooder_close(&quarter);
	double r = (double)bq / (double)bf;
	ck_assert_msg(bf > 0 && r > 0.1 && r < 0.45,
	              "share 25%% got %llu bytes beside %llu at 100%%: %.2f of them, want "
	              "about 0.25",
	              (unsigned long long)bq, (unsigned long long)bf, r);

	flooder_open(&equal, owner, dst.region, NULL);
	race(&full, &equal, &bf, &be);
	flooder_close(&equal);
	flooder_close(&full);
	r = (double)be / (double)bf;
	ck_assert_msg(bf > 0 && r > 0.6 && r < 1.6,
	              "equal weights: %llu and %llu bytes (%.2f), want about 1",
	              (unsigned long long)be, (unsigned long long)bf, r);
	mvc_disconnect(owner);
}
END_TEST

/* A share outside 1..100 is refused at connect, naming the field. */
START_TEST(test_share_pct_out_of_range_is_refused)
{
	struct mvc *c;
	struct mvc_opts o = {.share_pct = 101};

	ck_assert_int_eq(mvc_connect_opts(&c, A.sock, &o), -EINVAL);
	ck_assert_msg(strstr(mvc_connect_error(), "share_pct 101"), "%s", mvc_connect_error());
}
END_TEST

/* ---- --weight-uid ---- */

/* Runs the mover with one --weight-uid argument; its exit status, its
 * first line of output in out. */
static int mover_with(const char *arg, char *out, size_t outlen)
{
	const char *b = getenv("MV_BUILD") ? getenv("MV_BUILD") : "build";
	char cmd[512];

	snprintf(cmd, sizeof(cmd),
	         "%s/bin/mover --weight-uid '%s' --socket /tmp/mvt.%d.w.sock 2>&1", b, arg,
	         getpid());
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	out[0] = 0;
	if (!fgets(out, (int)outlen, p))
		out[0] = 0;
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_weight_uid_refuses_bad_values)
{
	const char *bad[] = {"1000", "1000:0", "1000:101", "x:2", "1000:2x", ":3"};
	char out[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(mover_with(bad[i], out, sizeof(out)), 2);
		ck_assert_msg(strstr(out, "--weight-uid") && strstr(out, "give UID:W"), "'%s': %s",
		              bad[i], out);
	}
}
END_TEST

/*
 * The uid's weight: with --weight-uid 65534:4 (and --allow-any-uid), a
 * flooder running as uid 65534 gets about four times the bytes of one
 * running as the test's own uid, weight 1. Needs root to switch uids.
 */
START_TEST(test_weight_uid_gives_that_uids_clients_more)
{
	if (geteuid() != 0) {
		printf("test_weight_uid_gives_that_uids_clients_more: skipped, needs root to run "
		       "a client as another uid\n");
		return;
	}
	const char *b = getenv("MV_BUILD") ? getenv("MV_BUILD") : "build";
	char bin[256];
	snprintf(bin, sizeof(bin), "%s/bin/mover", b);
	snprintf(A.sock, sizeof(A.sock), "/tmp/mvt.%d.a.sock", getpid());
	snprintf(A.log, sizeof(A.log), "/tmp/mvt.%d.a.log", getpid());
	const char *argv[] = {
	    bin,    "--provider",      prov,           "--shards", "1",       "--socket",
	    A.sock, "--allow-any-uid", "--weight-uid", "65534:4",  "--iface", "lo",
	    NULL};
	if (strcmp(prov, "tcp"))
		argv[10] = NULL;
	mover_spawn(&A, argv);
	mover_listening(&A, "a", 30);
	ck_assert_int_eq(chmod(A.sock, 0666), 0);

	struct mvc *owner;
	struct mvc_mem dst;
	ck_assert_int_eq(mvc_connect(&owner, B.sock), 0);
	ck_assert_msg(mvc_alloc(owner, 8u << 20, &dst) == 0, "%s", mvc_error(owner));
	uint8_t addr[MVC_BLOB_MAX], blob[MVC_BLOB_MAX];
	size_t alen = sizeof(addr), blen = sizeof(blob);
	ck_assert_int_eq(mvc_address(owner, addr, &alen), 0);
	ck_assert_int_eq(mvc_region_blob(owner, dst.region, blob, &blen), 0);

	/* The heavy flooder: a child as uid 65534, its byte count on a pipe. */
	int pfd[2], go[2];
	ck_assert_int_eq(pipe(pfd), 0);
	ck_assert_int_eq(pipe(go), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct flooder h;
		uint32_t peer;
		char c;
		memset(&h, 0, sizeof(h));
		if (setgid(65534) || setuid(65534) || mvc_connect(&h.c, A.sock) ||
		    mvc_alloc(h.c, 4u << 20, &h.src) || mvc_peer_add(h.c, addr, alen, &peer) ||
		    mvc_import(h.c, peer, blob, blen, &h.imp))
			_exit(3);
		h.size = 4u << 20;
		h.window = 8;
		if (pthread_create(&h.thread, NULL, flooder_main, &h))
			_exit(4);
		if (read(go[0], &c, 1) != 1) /* the parent's flooder runs */
			_exit(5);
		usleep(300000);
		uint64_t b0 = atomic_load(&h.bytes);
		usleep(1000000);
		uint64_t n = atomic_load(&h.bytes) - b0;
		if (write(pfd[1], &n, sizeof(n)) != sizeof(n))
			_exit(6);
		atomic_store(&h.stop, 1);
		pthread_join(h.thread, NULL);
		_exit(h.err[0] ? 7 : 0);
	}
	struct flooder light;
	flooder_open(&light, owner, dst.region, NULL);
	usleep(100000);
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	usleep(300000);
	uint64_t l0 = atomic_load(&light.bytes), heavy = 0;
	ck_assert_int_eq(read(pfd[0], &heavy, sizeof(heavy)), sizeof(heavy));
	uint64_t lbytes = atomic_load(&light.bytes) - l0;
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the uid 65534 client failed (%d)",
	              WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	flooder_close(&light);
	double r = (double)lbytes / (double)heavy;
	ck_assert_msg(heavy > 0 && r > 0.1 && r < 0.45,
	              "weight 1 got %llu bytes beside %llu at weight 4: %.2f of them, want "
	              "about 0.25",
	              (unsigned long long)lbytes, (unsigned long long)heavy, r);
	mvc_disconnect(owner);
}
END_TEST

static void setup_b_only_tcp(void)
{
	prov = "tcp";
	mover_start(&B, "b", 1);
}

static void setup_b_only_shm(void)
{
	prov = "shm";
	mover_start(&B, "b", 1);
}

static TCase *flows(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_share_pct_divides_bytes_by_weight);
	tcase_add_test(tc, test_share_pct_out_of_range_is_refused);
	return tc;
}

static TCase *uids(const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_weight_uid_gives_that_uids_clients_more);
	return tc;
}

int main(void)
{
	Suite *s = suite_create("weights");
	TCase *tc = tcase_create("options");

	tcase_add_test(tc, test_weight_uid_refuses_bad_values);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, flows("flows_tcp", setup_tcp1));
	suite_add_tcase(s, flows("flows_shm", setup_shm1));
	suite_add_tcase(s, uids("uids_tcp", setup_b_only_tcp));
	suite_add_tcase(s, uids("uids_shm", setup_b_only_shm));

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
