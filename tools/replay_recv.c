/* SPDX-License-Identifier: MIT */
/*
 * mvreplay's receiver, a process forked by the sender: a client of the
 * --recv mover that allocates the destination pool, hands its address and
 * region blobs to the sender, and counts the immediates that arrive until
 * the sender says how many to expect.
 */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "mvtool.h"
#include "replay.h"

/*
 * The receiver: owns the destination pool and counts immediates until the
 * sender says how many to expect (UINT64_MAX: give up), then answers with
 * the count.
 */
int replay_receiver(const struct cfg *cf, int to_send, int from_send)
{
	struct mvc *c;
	struct mvc_mem pool;
	struct blobs b = {.alen = MVC_BLOB_MAX, .rlen = MVC_BLOB_MAX};
	struct mvc_event ev[64];
	uint64_t got = 0, want = 0, give_up = 0;
	int ret, asked = 0;

	ret = mvc_connect(&c, cf->recv_sock);
	if (ret) {
		fprintf(stderr,
		        "mvreplay receiver: connect to %s: %s (is a mover listening "
		        "there?)\n",
		        cf->recv_sock, strerror(-ret));
		return 1;
	}
	ret = mvc_alloc(c, cf->pool, &pool);
	if (ret) {
		fprintf(stderr,
		        "mvreplay receiver: a %" PRIu64 " MiB pool: %s (lower "
		        "--pool-mib)\n",
		        cf->pool >> 20, mvc_error(c));
		goto err_disconnect;
	}
	size_t alen = MVC_BLOB_MAX, rlen = MVC_BLOB_MAX;
	ret = mvc_address(c, b.addr, &alen);
	if (!ret)
		ret = mvc_region_blob(c, pool.region, b.region, &rlen);
	if (ret) {
		fprintf(stderr, "mvreplay receiver: %s\n", mvc_error(c));
		goto err_free;
	}
	b.alen = alen;
	b.rlen = rlen;
	b.pool_len = pool.len;
	if (xwrite(to_send, &b, sizeof(b)))
		goto err_free;
	for (;;) {
		int n = mvc_wait(c, ev, 64, 20);
		if (n < 0) {
			fprintf(stderr, "mvreplay receiver: %s\n", mvc_error(c));
			goto err_free;
		}
		for (int i = 0; i < n; i++)
			got += ev[i].type == MVC_EV_IMM;
		if (!asked) {
			struct pollfd pf = {.fd = from_send, .events = POLLIN};
			if (poll(&pf, 1, 0) == 1) {
				/* EOF or UINT64_MAX: the sender is gone or gave up. */
				if (xread(from_send, &want, sizeof(want), 1000) ||
				    want == UINT64_MAX)
					goto err_free;
				asked = 1;
				give_up = now_ns() + (uint64_t)IMM_WAIT_MS * 1000000u;
			}
		}
		if (asked && (got >= want || now_ns() > give_up))
			break;
	}
	ret = xwrite(to_send, &got, sizeof(got));
	mvc_free(c, &pool);
	mvc_disconnect(c);
	return ret ? 1 : 0;

err_free:
	mvc_free(c, &pool);
err_disconnect:
	mvc_disconnect(c);
	return 1;
}
