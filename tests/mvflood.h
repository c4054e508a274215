/* SPDX-License-Identifier: MIT */
/*
 * What the fair-share suites (test_fair.c, test_weights.c) share: two
 * movers of one shard each with A's writes on the fabric, a client's
 * import of another's region, and a flooder, a client that keeps batches
 * of one large write in flight from a thread of its own and counts the
 * bytes that completed. Include after mvtest.h.
 */
#ifndef MVFLOOD_H
#define MVFLOOD_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

/* Lets client `from` write into `region` of `owner` (a client of B). */
static inline uint32_t reach(struct mvc *from, struct mvc *owner, uint32_t region)
{
	uint8_t blob[MVC_BLOB_MAX];
	size_t len = sizeof(blob);
	uint32_t peer, imp;

	ck_assert_int_eq(mvc_address(owner, blob, &len), 0);
	ck_assert_msg(mvc_peer_add(from, blob, len, &peer) == 0, "%s", mvc_error(from));
	len = sizeof(blob);
	ck_assert_int_eq(mvc_region_blob(owner, region, blob, &len), 0);
	ck_assert_msg(mvc_import(from, peer, blob, len, &imp) == 0, "%s", mvc_error(from));
	return imp;
}

/* The flows go through the fabric (--no-host-copy on the sender): the
 * shares are the shard's to make where the provider is what limits both
 * floods. Copied at memory speed (mover/samehost.c) a shard outruns the
 * floods' clients, whose refills then decide the bytes (on a loaded 2-core
 * machine, 0.64 for a 25% client was seen): test_fair.c's flows_shm_copy keeps the tests
 * that count order, not shares. */
static inline void setup_fabric1(const char *provider)
{
	prov = provider;
	mover_extra = "--no-host-copy";
	mover_launch(&A, "a", 1);
	mover_extra = NULL;
	mover_launch(&B, "b", 1);
	movers_listening();
}

static inline void setup_tcp1(void)
{
	setup_fabric1("tcp");
}

static inline void setup_shm1(void)
{
	setup_fabric1("shm");
}

/* A client that keeps `window` batches of one `size` write in flight and
 * counts the bytes that completed. */
struct flooder {
	struct mvc *c;
	struct mvc_mem src;
	uint32_t imp;
	uint64_t size;
	int window;
	pthread_t thread;
	_Atomic int stop;
	_Atomic uint64_t bytes;
	char err[160];
};

static inline void *flooder_main(void *arg)
{
	struct flooder *f = arg;
	struct mvc_event ev[16];
	uint64_t cookie = 0;
	int inflight = 0;

	while (!atomic_load(&f->stop) || inflight) {
		if (!atomic_load(&f->stop) && inflight < f->window) {
			int ret = mvc_write(f->c, f->src.region, 0, f->imp, 0, f->size);
			if (!ret)
				ret = mvc_submit(f->c, ++cookie);
			if (!ret) {
				inflight++;
				continue;
			}
			if (ret != -EAGAIN) {
				snprintf(f->err, sizeof(f->err), "submit: %s", mvc_error(f->c));
				return NULL;
			}
			mvc_abort(f->c);
		}
		int n = mvc_wait(f->c, ev, 16, 50);
		if (n < 0) {
			snprintf(f->err, sizeof(f->err), "wait: %s", mvc_error(f->c));
			return NULL;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].type != MVC_EV_BATCH)
				continue;
			if (ev[i].status) {
				snprintf(f->err, sizeof(f->err), "batch: %s", ev[i].msg);
				return NULL;
			}
			atomic_fetch_add(&f->bytes, ev[i].bytes);
			inflight--;
		}
	}
	return NULL;
}

static inline void flooder_open(struct flooder *f, struct mvc *owner, uint32_t region,
                                const struct mvc_opts *o)
{
	memset(f, 0, sizeof(*f));
	ck_assert_msg(mvc_connect_opts(&f->c, A.sock, o) == 0, "%s", mvc_connect_error());
	f->size = 4u << 20;
	f->window = 8;
	ck_assert_msg(mvc_alloc(f->c, f->size, &f->src) == 0, "%s", mvc_error(f->c));
	fill(f->src.addr, f->size, 9);
	f->imp = reach(f->c, owner, region);
	ck_assert_int_eq(pthread_create(&f->thread, NULL, flooder_main, f), 0);
}

static inline void flooder_close(struct flooder *f)
{
	atomic_store(&f->stop, 1);
	pthread_join(f->thread, NULL);
	ck_assert_msg(!f->err[0], "flooder: %s", f->err);
	mvc_disconnect(f->c);
}

#endif
