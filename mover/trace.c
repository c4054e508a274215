/* SPDX-License-Identifier: MIT */
/*
 * Trace capture (format in trace_format.h): each shard appends one 64-byte
 * record per completed batch to its own in-process shmring; a writer thread
 * gathers them into one of two 1 MiB buffers and writes full buffers with
 * io_uring, so a shard never waits on the disk. A shard whose ring is full
 * counts the record as dropped and goes on. Started by --trace FILE or the
 * TRACE control message, stopped by TRACE off or at exit, when the writer
 * drains the rings and appends an MV_TR_END record with the totals.
 */
#include "mover.h"

#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stats_layout.h"
#include "trace_format.h"

#define TRACE_RING     65536u     /* records a shard may queue: 4 MiB */
#define TRACE_BUF      (1u << 20) /* bytes per write */
#define TRACE_FLUSH_NS 20000000ll

struct mv_tracer {
	struct mover *mv;
	int fd;
	char path[256];
	struct io_uring uring;
	struct shmring q[MV_MAX_SHARDS][2]; /* [shard][producer, consumer] */
	pthread_t thread;
	_Atomic int run;
	uint8_t *buf[2];
	size_t fill[2];
	int busy[2];
	int cur;
	uint64_t off;
	uint64_t written;
	uint64_t dropped_at_start;
	int failed;
	int hops; /* MV_TRACE_HOPS: batch records come with their hops */
};

/* Shard side: never blocks. */
void mv_trace_batch(struct mv_shard *s, const struct mv_trace_rec *rec,
                    const struct mv_trace_hops *hops)
{
	/* A7 pairs with R7 in mv_trace_start() */
	struct mv_tracer *t = atomic_load_explicit(&s->mv->tracer, memory_order_acquire);
	uint32_t pos, n;

	if (!t)
		return;
	n = t->hops && hops ? 2 : 1; /* a batch and its hops go together or not at all */
	int got = shmring_reserve(&t->q[s->id][0], n, &pos);
	if (got != (int)n) {
		if (got > 0)
			shmring_unreserve(&t->q[s->id][0], (uint32_t)got);
		s->st.trace_dropped++;
		return;
	}
	memcpy(shmring_slot(&t->q[s->id][0], pos), rec, sizeof(*rec));
	if (n == 2)
		memcpy(shmring_slot(&t->q[s->id][0], pos + 1), hops, sizeof(*hops));
	shmring_commit(&t->q[s->id][0]);
}

int mv_tracing_hops(const struct mover *mv)
{
	struct mv_tracer *t = atomic_load_explicit(&mv->tracer, memory_order_relaxed);
	return t && t->hops;
}

static int reap_writes(struct mv_tracer *t, int wait)
{
	struct io_uring_cqe *cqe;
	int n = 0;

	while ((wait ? io_uring_wait_cqe(&t->uring, &cqe) : io_uring_peek_cqe(&t->uring, &cqe)) ==
	       0) {
		int b = (int)io_uring_cqe_get_data64(cqe);
		if (cqe->res < 0 || (size_t)cqe->res != t->fill[b]) {
			mv_error("trace %s: write failed (%s); tracing stops", t->path,
			         cqe->res < 0 ? strerror(-cqe->res) : "short write");
			t->failed = 1;
		} else {
			t->written += t->fill[b] / sizeof(struct mv_trace_rec);
		}
		t->busy[b] = 0;
		t->fill[b] = 0;
		io_uring_cqe_seen(&t->uring, cqe);
		n++;
		wait = 0;
	}
	return n;
}

static void submit_buf(struct mv_tracer *t)
{
	int b = t->cur;
	struct io_uring_sqe *sqe;

	if (!t->fill[b] || t->failed)
		return;
	sqe = io_uring_get_sqe(&t->uring);
	io_uring_prep_write(sqe, t->fd, t->buf[b], (unsigned)t->fill[b], t->off);
	io_uring_sqe_set_data64(sqe, (uint64_t)b);
	io_uring_submit(&t->uring);
	t->busy[b] = 1;
	t->off += t->fill[b];
	t->cur = !b;
	/* Both buffers in flight: the disk is behind. Waiting here only stalls
	 * this thread; the shards' rings absorb the backlog or count drops. */
	if (t->busy[t->cur])
		reap_writes(t, 1);
}

static void *writer(void *arg)
{
	struct mv_tracer *t = arg;
	struct mover *mv = t->mv;
	uint64_t last_flush = (uint64_t)mv_now_ns();

	for (;;) {
		int running = atomic_load_explicit(&t->run, memory_order_acquire);
		uint32_t moved = 0;

		for (uint32_t s = 0; s < mv->nshards; s++) {
			struct shmring *q = &t->q[s][1];
			uint32_t pos, room = (uint32_t)((TRACE_BUF - t->fill[t->cur]) /
			                                sizeof(struct mv_trace_rec));
			int n = shmring_peek(q, room, &pos);
			for (int i = 0; i < n; i++)
				memcpy(t->buf[t->cur] + t->fill[t->cur] + (size_t)i * 64,
				       shmring_slot(q, pos + (uint32_t)i), 64);
			if (n > 0) {
				t->fill[t->cur] += (size_t)n * 64;
				shmring_release(q, (uint32_t)n);
				moved += (uint32_t)n;
			}
			if (t->fill[t->cur] == TRACE_BUF)
				submit_buf(t);
		}
		reap_writes(t, 0);
		uint64_t now = (uint64_t)mv_now_ns();
		if (t->fill[t->cur] && (now - last_flush > TRACE_FLUSH_NS || !running)) {
			submit_buf(t);
			last_flush = now;
		}
		atomic_store_explicit(&mv->stats->trace_records, t->written, memory_order_relaxed);
		if (!running && !moved)
			break;
		if (!moved) {
			struct timespec ts = {0, 5000000};
			nanosleep(&ts, NULL);
		}
	}
	while (t->busy[0] || t->busy[1])
		reap_writes(t, 1);
	return NULL;
}

static uint64_t dropped_total(struct mover *mv)
{
	uint64_t d = 0;

	for (uint32_t s = 0; s < mv->nshards; s++)
		d += atomic_load_explicit(&mv->shards[s].trace_dropped_pub, memory_order_relaxed);
	return d;
}

int mv_trace_start(struct mover *mv, int fd, const char *name, uint32_t flags, char *why,
                   size_t whylen)
{
	const char *path = name[0] ? name : "(unnamed)";
	struct mv_tracer *t;
	struct timespec wall;
	struct stat st;
	int ret, fl = fcntl(fd, F_GETFL);

	if (atomic_load(&mv->tracer)) {
		snprintf(why, whylen, "already tracing to %s; stop it first",
		         mv->stats->trace_path);
		close(fd);
		return -EBUSY;
	}
	if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY || (fl & O_APPEND) || fstat(fd, &st) ||
	    !S_ISREG(st.st_mode)) {
		snprintf(why, whylen,
		         "trace %s: the fd must be a regular file opened for writing, without "
		         "O_APPEND",
		         path);
		close(fd);
		return -EBADF;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		close(fd);
		return -ENOMEM;
	}
	t->mv = mv;
	t->hops = !!(flags & MV_TRACE_HOPS);
	snprintf(t->path, sizeof(t->path), "%s", path);
	t->fd = fd;
	if (ftruncate(fd, 0)) {
		ret = -errno;
		snprintf(why, whylen, "cannot truncate trace %s: %s", path, strerror(errno));
		goto err_close;
	}
	struct mv_trace_hdr h = {.magic = MV_TRACE_MAGIC,
	                         .version = MV_TRACE_VERSION,
	                         .hdr_size = sizeof(h),
	                         .rec_size = sizeof(struct mv_trace_rec),
	                         .nshards = mv->nshards,
	                         .mover_id = mv->mover_id,
	                         .start_ns = (uint64_t)mv_now_ns()};
	clock_gettime(CLOCK_REALTIME, &wall);
	h.start_unix_ns = (uint64_t)wall.tv_sec * 1000000000ull + (uint64_t)wall.tv_nsec;
	snprintf(h.provider, sizeof(h.provider), "%s", mv->prov);
	gethostname(h.source, sizeof(h.source) - 1);
	if (pwrite(t->fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		ret = -EIO;
		snprintf(why, whylen, "cannot write trace %s: %s", path, strerror(errno));
		goto err_close;
	}
	t->off = sizeof(h);
	ret = io_uring_queue_init(8, &t->uring, 0);
	if (ret) {
		snprintf(why, whylen, "io_uring_queue_init: %s", strerror(-ret));
		goto err_close;
	}
	t->buf[0] = aligned_alloc(4096, TRACE_BUF);
	t->buf[1] = aligned_alloc(4096, TRACE_BUF);
	if (!t->buf[0] || !t->buf[1]) {
		ret = -ENOMEM;
		goto err_uring;
	}
	for (uint32_t s = 0; s < mv->nshards; s++) {
		struct shmring_opts o = {
		    .capacity = TRACE_RING, .slot_size = 64, .name = "mv-trace"};
		ret = shmring_create(&t->q[s][0], &o, SHMRING_PRODUCER);
		if (!ret) {
			int rfd = dup(shmring_fd(&t->q[s][0]));
			ret = rfd < 0 ? -errno : shmring_attach(&t->q[s][1], rfd, SHMRING_CONSUMER);
			if (ret && rfd >= 0)
				close(rfd);
		}
		if (ret) {
			snprintf(why, whylen, "trace ring of shard %u: %s", s,
			         shmring_error(&t->q[s][0]));
			goto err_rings;
		}
	}
	atomic_store(&t->run, 1);
	ret = -pthread_create(&t->thread, NULL, writer, t);
	if (!ret)
		pthread_setname_np(t->thread, "mv-trace");
	if (ret)
		goto err_rings;
	snprintf(mv->stats->trace_path, sizeof(mv->stats->trace_path), "%s", path);
	atomic_store(&mv->stats->tracing, 1);
	t->dropped_at_start = dropped_total(mv);
	/* R7 pairs with A7 in mv_trace_batch(): the rings are ready */
	atomic_store_explicit(&mv->tracer, t, memory_order_release);
	mv_log("tracing batches%s to %s", t->hops ? " and their hops" : "", path);
	return 0;

err_rings:
	for (uint32_t s = 0; s < mv->nshards; s++) {
		shmring_close(&t->q[s][0]);
		shmring_close(&t->q[s][1]);
	}
err_uring:
	free(t->buf[0]);
	free(t->buf[1]);
	io_uring_queue_exit(&t->uring);
err_close:
	close(t->fd);
	free(t);
	return ret;
}

int mv_trace_stop(struct mover *mv, char *why, size_t whylen)
{
	struct mv_tracer *t = atomic_exchange(&mv->tracer, NULL);
	char tmp[MV_ERRLEN];

	if (!t) {
		snprintf(why, whylen, "no trace is being written");
		return -ENOENT;
	}
	/* Grace period: after it no shard is inside mv_trace_batch(). Shards
	 * that already stopped answer nothing, and need no grace. */
	if (!atomic_load(&mv->shards_stopped))
		mv_call_all(mv, MV_CMD_SYNC, NULL, tmp, sizeof(tmp));
	atomic_store_explicit(&t->run, 0, memory_order_release);
	pthread_join(t->thread, NULL);

	uint64_t dropped = dropped_total(mv) - t->dropped_at_start;
	struct mv_trace_rec end = {.type = MV_TR_END,
	                           .bytes = t->written,
	                           .nops = (uint32_t)dropped,
	                           .complete_ns = (uint64_t)mv_now_ns()};
	if (!t->failed && pwrite(t->fd, &end, sizeof(end), (off_t)t->off) != (ssize_t)sizeof(end))
		t->failed = 1;
	mv_log("trace %s: %llu records, %llu dropped%s", t->path, (unsigned long long)t->written,
	       (unsigned long long)dropped, t->failed ? ", write errors" : "");
	atomic_store(&mv->stats->tracing, 0);
	atomic_store(&mv->stats->trace_dropped, dropped);
	close(t->fd);
	for (uint32_t s = 0; s < mv->nshards; s++) {
		shmring_close(&t->q[s][0]);
		shmring_close(&t->q[s][1]);
	}
	io_uring_queue_exit(&t->uring);
	free(t->buf[0]);
	free(t->buf[1]);
	free(t);
	return 0;
}
