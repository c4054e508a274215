/* SPDX-License-Identifier: MIT */
/*
 * mvbench: write bandwidth and message rate through the mover, against a
 * direct baseline measured in the same run. For each provider and shard
 * count it starts two movers (A sends, B receives) and keeps a receiver
 * process, forked before anything else, as a client of B with one region.
 * Through the mover, this process is a client of A and writes into that
 * region with a window of batches in flight. The direct baseline drives the
 * same provider with no daemon and no rings: N sender threads, each with its
 * own endpoint opened by mover/fabric.c and pinned where shard i of A runs,
 * post exactly the fabric writes the shards would (same iov merging, 4 MiB
 * chunks, flags, FI_MORE rule, window) to N endpoints in the receiver
 * process, pinned like B's shards and polling their CQs. Both move the same
 * bytes between the same two mappings. A striped batch is done, for both,
 * when every thread's stripe of it is, and a new one starts only as an old
 * one is done: the client's window is counted in batches. For striped rows
 * an uncoupled direct run, where each thread keeps its own window of
 * stripes and waits for no other, is shown beside the ratio: the price of
 * the batch contract itself, paid by any program that needs to know when a
 * whole batch landed. Runs come in pairs, mover and direct, in turns of
 * order (mover first in even reps, direct first in odd ones), then the
 * uncoupled run on striped rows; the table gives medians and the median
 * over pairs of mover/direct, a BENCH line per row
 * follows, and every run's data is checked where it landed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "mover.h"
#include "mvc.h"
#include "mvtool.h"

#define BATCH_BYTES       (4u << 20)     /* a batch carries about this much */
#define BATCH_WRITES_MAX  64u            /* and at most this many writes */
#define BATCHES_PER_SHARD 8u             /* in flight per shard */
#define WINDOW_BYTES      (128ull << 20) /* but never more than this in flight (--window) */
#define SLOT_GAP          4096u          /* keeps neighbouring writes apart */
#define STALL_S           10.0           /* no completion this long: something is stuck */
#define CALL_S            30             /* a receiver command answers within this */
#define CQ_BATCH          64
#define MAX_LIST          32

/* ---- small helpers ---- */

/* The payload: the word at byte offset o of the source is pat(o). Writes
 * keep their offset (slot k is at the same place in both regions), so the
 * receiver can check any landed word without knowing the source. */
static uint64_t pat(uint64_t o)
{
	return mix(o ^ 0x6d7662656e6368ull);
}

static const char *size_str(uint64_t s, char *buf, size_t len)
{
	if (s >= (1ull << 30) && s % (1ull << 30) == 0)
		snprintf(buf, len, "%" PRIu64 " GiB", s >> 30);
	else if (s >= (1u << 20) && s % (1u << 20) == 0)
		snprintf(buf, len, "%" PRIu64 " MiB", s >> 20);
	else if (s >= 1024 && s % 1024 == 0)
		snprintf(buf, len, "%" PRIu64 " KiB", s >> 10);
	else
		snprintf(buf, len, "%" PRIu64 " B", s);
	return buf;
}

/* ---- the shape of one measurement ---- */

struct geom {
	uint64_t size;   /* bytes per write */
	uint64_t stride; /* slot pitch, the same in both regions */
	uint32_t k;      /* writes per batch */
	uint32_t window; /* batches in flight over all shards */
	uint32_t nshards;
	int striped; /* libclient splits each write over the shards */
};

static uint64_t window_bytes = WINDOW_BYTES;

static struct geom geom_of(uint64_t size, uint32_t n)
{
	struct geom g = {.size = size, .nshards = n};
	uint64_t k = BATCH_BYTES / size, w;

	g.k = k < 1 ? 1 : k > BATCH_WRITES_MAX ? BATCH_WRITES_MAX : (uint32_t)k;
	/* A gap after each write: contiguous neighbours would merge into one
	 * long fabric write and the size would no longer be the size. */
	g.stride = (size + 4095) / 4096 * 4096 + SLOT_GAP;
	w = window_bytes / ((uint64_t)g.k * size);
	if (w > (uint64_t)BATCHES_PER_SHARD * n)
		w = (uint64_t)BATCHES_PER_SHARD * n;
	g.window = w < 2 ? 2 : (uint32_t)w;
	g.striped = size >= MV_STRIPE_MIN && n > 1;
	return g;
}

static uint64_t slot_off(const struct geom *g, uint64_t batch, uint32_t w)
{
	return ((batch % g->window) * g->k + w) * g->stride;
}

static uint64_t geom_bytes(const struct geom *g)
{
	return (uint64_t)g->window * g->k * g->stride;
}

/* One measurement: bytes that completed between the first post and the
 * last completion. */
struct meas {
	double secs;
	uint64_t bytes;
	uint64_t checked; /* window positions whose slots were verified */
	int cut;          /* the time limit ended it before its bytes were done */
};

/* ---- the receiver process ---- */

enum tcmd_op {
	T_MOVER_UP = 1, /* connect to mover B, allocate the region, return blobs */
	T_MOVER_DOWN,
	T_DIRECT_UP, /* N endpoints registering the same region, parked */
	T_DIRECT_GO, /* endpoints poll their CQs */
	T_DIRECT_PARK,
	T_DIRECT_DOWN,
	T_CLEAR, /* zero the first a bytes of the region */
	T_CHECK, /* verify c window positions of geometry (a = stride, b = size, d = k) */
};

struct tcmd {
	uint32_t op;
	uint32_t nshards;
	uint64_t a, b, c, d;
	int yield;
	int cpus[MV_MAX_SHARDS];
	char path[256];
	char prov[32];
	char iface[64];
	char tag[40]; /* for messages: which run asked */
};

struct tep {
	uint8_t addr[MV_MAX_ADDRLEN];
	uint64_t addrlen;
	uint64_t base; /* 0 (offsets) or the region's virtual address */
	uint64_t key;
};

struct trep {
	int32_t status;
	char msg[256];
	uint64_t alen, rlen;
	uint8_t addr[MVC_BLOB_MAX];
	uint8_t region[MVC_BLOB_MAX];
	struct tep ep[MV_MAX_SHARDS];
};

enum { RX_PARK, RX_RUN, RX_STOP };

struct target;

struct drecv {
	struct target *tg;
	uint32_t id;
	int cpu;
	pthread_t thread;
	int made; /* the thread exists and must be joined */
	struct mv_fabric fab;
	struct fid_mr *mr;
	int status;
	char msg[200];
};

struct target {
	struct mvc *c;
	struct mvc_mem pool;
	uint32_t n;
	int yield;
	char prov[32];
	char iface[64];
	struct drecv *rx;
	sem_t started;
	pthread_mutex_t mu;
	pthread_cond_t go, parked_cv;
	_Atomic int state;
	uint32_t parked; /* under mu */
	_Atomic int failed;
	char fail_msg[256]; /* written once, by whoever set failed */
};

static void rx_fail(struct target *tg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rx_fail(struct target *tg, const char *fmt, ...)
{
	int zero = 0;
	va_list ap;

	if (!atomic_compare_exchange_strong(&tg->failed, &zero, 1))
		return;
	va_start(ap, fmt);
	vsnprintf(tg->fail_msg, sizeof(tg->fail_msg), fmt, ap);
	va_end(ap);
}

/* Progress: target-side writes complete nothing here, but errors may. */
static void rx_poll(struct drecv *r, struct fi_cq_data_entry *ent)
{
	ssize_t n = fi_cq_read(r->fab.cq, ent, CQ_BATCH);
	struct fi_cq_err_entry e = {0};
	char buf[128];

	if (n == -FI_EAVAIL) {
		if (fi_cq_readerr(r->fab.cq, &e, 0) != 1)
			return;
		const char *pe =
		    fi_cq_strerror(r->fab.cq, e.prov_errno, e.err_data, buf, sizeof(buf));
		rx_fail(r->tg, "receiver endpoint %u: error completion: %s: %s", r->id,
		        fi_strerror(e.err), pe ? pe : "");
	} else if (n < 0 && n != -FI_EAGAIN) {
		rx_fail(r->tg, "receiver endpoint %u: fi_cq_read: %s", r->id, fi_strerror((int)-n));
	}
}

/* One receiving endpoint: writes land without it, but both providers
 * progress only when the owner reads the CQ, so it polls while a direct run
 * is on and parks otherwise (the movers then have the cores). */
static void *drecv_main(void *arg)
{
	struct drecv *r = arg;
	struct target *tg = r->tg;
	struct fi_cq_data_entry ent[CQ_BATCH];
	void *desc;
	uint64_t key;
	int ret;

	ret = mv_topo_pin(r->cpu);
	if (ret) {
		snprintf(r->msg, sizeof(r->msg), "pinning receiver endpoint %u to CPU %d: %s",
		         r->id, r->cpu, strerror(-ret));
		goto out_start;
	}
	ret = mv_fabric_open(&r->fab, tg->prov, tg->iface[0] ? tg->iface : NULL, 0);
	if (ret) {
		snprintf(r->msg, sizeof(r->msg), "receiver endpoint %u: opening %s%s%s: %s", r->id,
		         tg->prov, tg->iface[0] ? " on " : "", tg->iface, fi_strerror(-ret));
		goto out_start;
	}
	ret = mv_fabric_reg(&r->fab, tg->pool.addr, tg->pool.len, 0x100 + r->id, &r->mr, &desc,
	                    &key, r->msg, sizeof(r->msg));
	if (ret)
		mv_fabric_close(&r->fab);
out_start:
	r->status = ret;
	sem_post(&tg->started);
	if (ret)
		return NULL;

	for (;;) {
		/* A1 pairs with R1 in target_state() */
		int st = atomic_load_explicit(&tg->state, memory_order_acquire);
		if (st == RX_RUN) {
			rx_poll(r, ent);
			if (tg->yield)
				sched_yield();
			continue;
		}
		if (st == RX_STOP)
			break;
		pthread_mutex_lock(&tg->mu);
		tg->parked++;
		pthread_cond_signal(&tg->parked_cv);
		while (atomic_load_explicit(&tg->state, memory_order_relaxed) == RX_PARK)
			pthread_cond_wait(&tg->go, &tg->mu);
		tg->parked--;
		pthread_mutex_unlock(&tg->mu);
	}
	fi_close(&r->mr->fid);
	mv_fabric_close(&r->fab);
	return NULL;
}

static void target_state(struct target *tg, int st)
{
	pthread_mutex_lock(&tg->mu);
	/* R1 pairs with A1 in drecv_main() */
	atomic_store_explicit(&tg->state, st, memory_order_release);
	pthread_cond_broadcast(&tg->go);
	pthread_mutex_unlock(&tg->mu);
}

/* Waits until every endpoint thread parked; 0, or -ETIMEDOUT after 5 s. */
static int target_park(struct target *tg)
{
	struct timespec ts;
	int ret = 0;

	target_state(tg, RX_PARK);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	pthread_mutex_lock(&tg->mu);
	while (tg->parked < tg->n && ret == 0)
		ret = pthread_cond_timedwait(&tg->parked_cv, &tg->mu, &ts);
	pthread_mutex_unlock(&tg->mu);
	return ret ? -ret : 0;
}

static void direct_down(struct target *tg)
{
	if (!tg->rx)
		return;
	target_state(tg, RX_STOP);
	for (uint32_t i = 0; i < tg->n; i++)
		if (tg->rx[i].made)
			pthread_join(tg->rx[i].thread, NULL);
	free(tg->rx);
	tg->rx = NULL;
	tg->n = 0;
}

static int direct_up(struct target *tg, const struct tcmd *c, struct trep *rep)
{
	struct timespec ts;
	uint32_t i, made = 0;
	int ret = 0;

	if (!tg->c) {
		snprintf(rep->msg, sizeof(rep->msg), "no region: set up the mover side first");
		return -EINVAL;
	}
	if (c->nshards == 0 || c->nshards > MV_MAX_SHARDS)
		return -EINVAL;
	snprintf(tg->prov, sizeof(tg->prov), "%s", c->prov);
	snprintf(tg->iface, sizeof(tg->iface), "%s", c->iface);
	tg->yield = c->yield;
	tg->rx = calloc(c->nshards, sizeof(*tg->rx));
	if (!tg->rx)
		return -ENOMEM;
	tg->n = c->nshards;
	tg->parked = 0;
	atomic_store(&tg->state, RX_PARK);
	for (i = 0; i < c->nshards; i++) {
		struct drecv *r = &tg->rx[i];
		r->tg = tg;
		r->id = i;
		r->cpu = c->cpus[i];
		r->status = -EINPROGRESS;
		if (pthread_create(&r->thread, NULL, drecv_main, r)) {
			r->status = -EAGAIN;
			snprintf(rep->msg, sizeof(rep->msg), "cannot start receiver thread %u", i);
			ret = -EAGAIN;
			break;
		}
		r->made = 1;
		made++;
		char name[16];
		snprintf(name, sizeof(name), "recv%u", i);
		pthread_setname_np(r->thread, name);
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += CALL_S - 5;
	for (i = 0; i < made; i++)
		if (sem_timedwait(&tg->started, &ts)) {
			snprintf(rep->msg, sizeof(rep->msg), "endpoints did not open in time");
			/* Threads still opening cannot be joined: the bench
			 * stops on this answer and the process goes with it. */
			return -ETIMEDOUT;
		}
	for (i = 0; i < made && !ret; i++)
		if (tg->rx[i].status) {
			ret = tg->rx[i].status;
			snprintf(rep->msg, sizeof(rep->msg), "%s", tg->rx[i].msg);
		}
	if (ret) {
		direct_down(tg);
		return ret;
	}
	for (i = 0; i < tg->n; i++) {
		struct drecv *r = &tg->rx[i];
		memcpy(rep->ep[i].addr, r->fab.addr, r->fab.addrlen);
		rep->ep[i].addrlen = r->fab.addrlen;
		/* Follow the mr_mode the provider returned: shm wants virtual
		 * addresses, tcp;ofi_rxm offsets into the registration. */
		rep->ep[i].base = r->fab.virt_addr ? (uint64_t)(uintptr_t)tg->pool.addr : 0;
		rep->ep[i].key = fi_mr_key(r->mr);
	}
	return target_park(tg);
}

/* 0 when every sampled word of the first npos window positions holds the
 * source's pattern, else -EIO with the first miss described in why. */
static int check_once(const struct target *tg, const struct tcmd *c, char *why, size_t len)
{
	uint64_t stride = c->a, size = c->b, npos = c->c, k = c->d;
	const uint8_t *base = tg->pool.addr;

	for (uint64_t s = 0; s < npos * k; s++) {
		/* Nine words: both ends and seven between, so every stripe of a
		 * write split over up to eight shards is looked at. */
		for (uint64_t j = 0; j <= 8; j++) {
			uint64_t o = j == 8 ? size - 8 : (j * size / 8) & ~7ull;
			uint64_t at = s * stride + o, w;
			memcpy(&w, base + at, 8);
			if (w != pat(at)) {
				snprintf(why, len,
				         "the write of slot %" PRIu64
				         " did not land: its word at +%" PRIu64 " is %016" PRIx64
				         ", expected %016" PRIx64,
				         s, o, w, pat(at));
				return -EIO;
			}
		}
	}
	return 0;
}

/* Some providers complete small writes on transmit, so late ones get a
 * moment before they count as lost. Direct receivers copy data in on their
 * own threads: parking them (a mutex handshake) orders their copies before
 * each look, and they run again while we wait. */
static int target_check(struct target *tg, const struct tcmd *c, struct trep *rep)
{
	int running = tg->rx && atomic_load(&tg->state) == RX_RUN;
	double end = now_s() + 2.0;

	if (!tg->c || c->c * c->d * c->a > tg->pool.len) {
		snprintf(rep->msg, sizeof(rep->msg), "check beyond the region");
		return -EINVAL;
	}
	if (c->b < 8)
		return 0;
	for (;;) {
		if (running && target_park(tg)) {
			snprintf(rep->msg, sizeof(rep->msg), "endpoints did not park");
			return -ETIMEDOUT;
		}
		int ret = check_once(tg, c, rep->msg, sizeof(rep->msg));
		if (!ret || now_s() > end)
			return ret;
		if (running)
			target_state(tg, RX_RUN);
		usleep(1000);
	}
}

static int target_cmd(struct target *tg, const struct tcmd *c, struct trep *rep)
{
	int ret = 0;

	switch (c->op) {
	case T_MOVER_UP:
		ret = mvc_connect(&tg->c, c->path);
		if (ret) {
			snprintf(rep->msg, sizeof(rep->msg), "connecting to mover B at %s: %s",
			         c->path, strerror(-ret));
			return ret;
		}
		rep->alen = rep->rlen = MVC_BLOB_MAX;
		ret = mvc_alloc(tg->c, c->a, &tg->pool);
		if (!ret)
			ret = mvc_address(tg->c, rep->addr, &rep->alen);
		if (!ret)
			ret = mvc_region_blob(tg->c, tg->pool.region, rep->region, &rep->rlen);
		if (ret) {
			snprintf(rep->msg, sizeof(rep->msg), "receiver: %s", mvc_error(tg->c));
			if (tg->pool.addr)
				mvc_free(tg->c, &tg->pool);
			mvc_disconnect(tg->c);
			tg->c = NULL;
		}
		return ret;
	case T_MOVER_DOWN:
		if (tg->c) {
			mvc_free(tg->c, &tg->pool);
			mvc_disconnect(tg->c);
			tg->c = NULL;
		}
		return 0;
	case T_DIRECT_UP:
		return direct_up(tg, c, rep);
	case T_DIRECT_GO:
		if (!tg->rx)
			return -EINVAL;
		target_state(tg, RX_RUN);
		return 0;
	case T_DIRECT_PARK:
		if (!tg->rx)
			return -EINVAL;
		ret = target_park(tg);
		if (ret)
			snprintf(rep->msg, sizeof(rep->msg), "receiver endpoints did not park");
		return ret;
	case T_DIRECT_DOWN:
		direct_down(tg);
		return 0;
	case T_CLEAR:
		if (!tg->c)
			return -EINVAL;
		memset(tg->pool.addr, 0, c->a < tg->pool.len ? c->a : tg->pool.len);
		return 0;
	case T_CHECK:
		ret = target_check(tg, c, rep);
		if (!ret && atomic_load(&tg->failed)) {
			snprintf(rep->msg, sizeof(rep->msg), "%s", tg->fail_msg);
			ret = -EIO;
		}
		return ret;
	default:
		return -EINVAL;
	}
}

/* The receiver's life: one command, one reply, until the bench goes away. */
static int target_main(int sock)
{
	static struct target tg;
	static struct tcmd c;
	static struct trep rep;

	sem_init(&tg.started, 0, 0);
	pthread_mutex_init(&tg.mu, NULL);
	pthread_cond_init(&tg.go, NULL);
	pthread_cond_init(&tg.parked_cv, NULL);
	for (;;) {
		ssize_t n = recv(sock, &c, sizeof(c), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof(c))
			break;
		memset(&rep, 0, sizeof(rep));
		rep.status = target_cmd(&tg, &c, &rep);
		if (send(sock, &rep, sizeof(rep), MSG_NOSIGNAL) != (ssize_t)sizeof(rep))
			break;
	}
	direct_down(&tg);
	if (tg.c) {
		mvc_free(tg.c, &tg.pool);
		mvc_disconnect(tg.c);
	}
	return 0;
}

/* ---- processes this bench started, and stopping them whatever happens ---- */

struct mvproc {
	_Atomic int pid;
	char sock[256];
	char log[256];
};

static struct mvproc mover_a, mover_b;
static _Atomic int target_pid;
static int target_sock = -1;
static char workdir[64];
static pid_t main_pid;

/* Sends sig (none if 0), waits up to wait_s, then SIGKILL; the wait status,
 * or 0 when there was no process. */
static int stop_pid(_Atomic int *pidp, int sig, double wait_s)
{
	int pid = atomic_exchange(pidp, 0), st = 0;
	double end = now_s() + wait_s;

	if (pid <= 0)
		return 0;
	if (sig)
		kill(pid, sig);
	while (now_s() < end) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return st;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return st;
}

static void tail_log(const char *what, const char *path)
{
	char lines[12][256], buf[256];
	int n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	while (fgets(buf, sizeof(buf), f))
		snprintf(lines[n++ % 12], sizeof(lines[0]), "%s", buf);
	fclose(f);
	if (!n)
		return;
	fprintf(stderr, "mvbench: last lines of %s (%s):\n", what, path);
	for (int i = n > 12 ? n - 12 : 0; i < n; i++)
		fprintf(stderr, "  %s", lines[i % 12]);
}

/* What the work directory can hold, named once so a signal handler can
 * remove it without formatting anything. */
static char work_files[4][96];

static void remove_workdir(void)
{
	if (!workdir[0])
		return;
	for (int i = 0; i < 4; i++)
		unlink(work_files[i]);
	rmdir(workdir);
}

/* Stops everything it started: the receiver first (its client leaves B),
 * then both movers with SIGTERM, SIGKILL if they do not go in 10 s. */
static void cleanup(int show_logs)
{
	if (target_sock >= 0) {
		close(target_sock);
		target_sock = -1;
	}
	/* Its socket closed, the receiver closes its endpoints and leaves. */
	stop_pid(&target_pid, 0, 5);
	if (show_logs) {
		struct mvproc *mp[2] = {&mover_a, &mover_b};
		for (int i = 0; i < 2; i++) {
			int pid = atomic_load(&mp[i]->pid), st;
			if (pid <= 0)
				continue;
			if (waitpid(pid, &st, WNOHANG) == pid) {
				atomic_store(&mp[i]->pid, 0);
				int sig = WIFSIGNALED(st);
				fprintf(stderr, "mvbench: mover %c (pid %d) %s %d\n", 'A' + i, pid,
				        sig ? "was killed by signal" : "exited with status",
				        sig ? WTERMSIG(st) : WEXITSTATUS(st));
			}
			tail_log(i ? "mover B" : "mover A", mp[i]->log);
		}
	}
	stop_pid(&mover_a.pid, SIGTERM, 10);
	stop_pid(&mover_b.pid, SIGTERM, 10);
	remove_workdir();
	workdir[0] = 0;
}

/* shm names an endpoint's segment /dev/shm/PID:... and unlinks it when the
 * endpoint closes; a bench that dies with endpoints open removes its own. */
static void remove_shm_names(void)
{
	char prefix[24], path[300];
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	size_t n;

	if (!d)
		return;
	n = (size_t)snprintf(prefix, sizeof(prefix), "%d:", (int)getpid());
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, prefix, n)) {
			snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
			unlink(path);
		}
	closedir(d);
}

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	va_start(ap, fmt);
	fprintf(stderr, "mvbench: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	cleanup(1);
	remove_shm_names();
	fflush(NULL);
	/* Sender threads may still own fabric objects: no atexit handlers. */
	_exit(1);
}

static void on_signal(int sig)
{
	int pid;

	/* Async-signal-safe only: ask every child to go, then go. SIGTERM lets
	 * the shm provider's own handler unlink its segments in each. */
	if ((pid = atomic_load(&target_pid)) > 0)
		kill(pid, SIGTERM);
	if ((pid = atomic_load(&mover_a.pid)) > 0)
		kill(pid, SIGTERM);
	if ((pid = atomic_load(&mover_b.pid)) > 0)
		kill(pid, SIGTERM);
	remove_workdir();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void mover_start(struct mvproc *m, const char *bin, const char *name, const char *prov,
                        const char *iface, uint32_t n, const char *cpus)
{
	char shards[16], cpuarg[600];
	const char *argv[16];
	int argc = 0, st;
	struct stat sb;

	snprintf(m->sock, sizeof(m->sock), "%s/%s.sock", workdir, name);
	snprintf(m->log, sizeof(m->log), "%s/%s.log", workdir, name);
	snprintf(shards, sizeof(shards), "%u", n);
	snprintf(cpuarg, sizeof(cpuarg), "--cpus=%s", cpus);
	unlink(m->sock);
	argv[argc++] = bin;
	argv[argc++] = "--provider";
	argv[argc++] = prov;
	if (iface) {
		argv[argc++] = "--iface";
		argv[argc++] = iface;
	}
	argv[argc++] = "--shards";
	argv[argc++] = shards;
	argv[argc++] = "--socket";
	argv[argc++] = m->sock;
	argv[argc++] = cpuarg;
	argv[argc] = NULL;

	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		/* The mover drains and exits on SIGTERM; so it does if we die. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != main_pid)
			_exit(1);
		int fd = open(m->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execv(bin, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	atomic_store(&m->pid, pid);
	for (double end = now_s() + 15; now_s() < end;) {
		if (stat(m->sock, &sb) == 0 && S_ISSOCK(sb.st_mode))
			return;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			atomic_store(&m->pid, 0);
			tail_log(name[0] == 'a' ? "mover A" : "mover B", m->log);
			die("mover %s (%s --provider %s --shards %u) exited with status %d before "
			    "listening",
			    name[0] == 'a' ? "A" : "B", bin, prov, n,
			    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
		}
		usleep(20000);
	}
	die("mover %s did not listen on %s within 15 s", name[0] == 'a' ? "A" : "B", m->sock);
}

static void mover_stop(struct mvproc *m, const char *name)
{
	int st = stop_pid(&m->pid, SIGTERM, 10);

	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "mvbench: warning: %s did not stop cleanly on SIGTERM (%s %d)\n",
		        name, WIFEXITED(st) ? "status" : "signal",
		        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		tail_log(name, m->log);
	}
	unlink(m->sock);
}

/* One command to the receiver process and its reply, bounded in time. */
static void tcall(const struct tcmd *c, struct trep *rep)
{
	struct pollfd pf = {.fd = target_sock, .events = POLLIN};
	int timeout = CALL_S * 1000;

	if (send(target_sock, c, sizeof(*c), MSG_NOSIGNAL) != (ssize_t)sizeof(*c))
		die("the receiver process is gone (sending: %s)", strerror(errno));
	for (;;) {
		int p = poll(&pf, 1, timeout);
		if (p < 0 && errno == EINTR)
			continue;
		if (p == 0)
			die("the receiver process did not answer command %u within %d s", c->op,
			    CALL_S);
		break;
	}
	ssize_t n = recv(target_sock, rep, sizeof(*rep), 0);
	if (n != (ssize_t)sizeof(*rep))
		die("the receiver process is gone (command %u)", c->op);
	if (rep->status) {
		static const char *const what[] = {
		    [T_MOVER_UP] = "setting up the region on mover B",
		    [T_MOVER_DOWN] = "freeing the region",
		    [T_DIRECT_UP] = "opening the direct receiver endpoints",
		    [T_DIRECT_GO] = "starting the direct receivers",
		    [T_DIRECT_PARK] = "parking the direct receivers",
		    [T_DIRECT_DOWN] = "closing the direct receivers",
		    [T_CLEAR] = "clearing the region",
		    [T_CHECK] = "checking what landed",
		};
		die("receiver, %s%s: %s", c->op <= T_CHECK ? what[c->op] : "?", c->tag,
		    rep->msg[0] ? rep->msg : strerror(-rep->status));
	}
}

static void tsimple(uint32_t op, uint64_t a)
{
	struct tcmd c = {.op = op, .a = a};
	static struct trep rep;

	tcall(&c, &rep);
}

/* ---- the direct baseline's sender threads ---- */

struct dop {
	struct fi_context2 ctx; /* first: the provider's scratch, and our cookie */
	struct dop *next;
	uint32_t track; /* the batch it belongs to */
	uint32_t niov;
	uint64_t bytes;
	struct iovec iov[MV_IOV_MAX];
	void *desc[MV_IOV_MAX];
	struct fi_rma_iov riov[MV_IOV_MAX];
};

struct djob {
	struct geom g;
	uint64_t nbatches; /* over all threads, as the mover would see them */
	double limit_s;
	int yield;
	int coupled; /* striped: a batch is done when every thread's stripe is */
};

struct dpool;

struct dsend {
	struct dpool *p;
	uint32_t id;
	int cpu;
	pthread_t thread;
	int status;
	char err[256];
	struct mv_fabric fab;
	struct fid_mr *mr;
	void *desc;
	fi_addr_t peer;
	uint64_t rbase, rkey;

	/* one job */
	struct dop *ops, *free_ops, *pend_head, *pend_tail;
	uint32_t *track_left; /* ops outstanding per in-flight batch */
	uint32_t *track_free;
	uint32_t ntrack_free;
	uint32_t posted;
	uint64_t issued, done, bytes;
	double t0, t1;
	int cut;
	/* done, for the other threads of a coupled run; its own line. Relaxed
	 * both ways: it paces issue and publishes no data. */
	_Alignas(64) _Atomic uint64_t done_pub;
};

struct dpool {
	pthread_mutex_t mu;
	pthread_cond_t go, done_cv;
	uint64_t gen;
	uint32_t ndone, nstarted;
	int stop;
	struct djob job;
	uint32_t n;
	struct dsend *t;
	const char *prov, *iface;
	uint8_t *src;
	uint64_t src_len;
	const struct trep *eps;
	_Atomic int abort;
};

static struct dop *dop_get(struct dsend *t)
{
	struct dop *op = t->free_ops;

	t->free_ops = op->next;
	memset(op, 0, offsetof(struct dop, iov));
	return op;
}

static void dop_put(struct dsend *t, struct dop *op)
{
	op->next = t->free_ops;
	t->free_ops = op;
}

/*
 * One batch's writes on this thread, turned into fabric writes the way
 * take_write() in mover/take.c does: cut into MV_CHUNK pieces, each merged
 * into the previous write of the same batch when it has room, by extending
 * its last iov where both sides are contiguous, else by adding an iov up to
 * the provider's limit.
 */
static void build_batch(struct dsend *t, const struct geom *g, uint64_t batch, uint32_t track,
                        uint64_t soff, uint64_t slen)
{
	for (uint32_t w = 0; w < g->k; w++) {
		uint64_t off = slot_off(g, batch, w) + soff;
		for (uint64_t x = 0; x < slen;) {
			uint64_t n = slen - x < MV_CHUNK ? slen - x : MV_CHUNK;
			uint8_t *la = t->p->src + off + x;
			uint64_t ra = t->rbase + off + x;
			struct dop *tail = t->pend_tail;

			if (tail && tail->track == track && tail->bytes + n <= MV_CHUNK) {
				struct iovec *li = &tail->iov[tail->niov - 1];
				struct fi_rma_iov *ri = &tail->riov[tail->niov - 1];
				if ((uint8_t *)li->iov_base + li->iov_len == la &&
				    ri->addr + ri->len == ra) {
					li->iov_len += n;
					ri->len += n;
					tail->bytes += n;
					x += n;
					continue;
				}
				if (tail->niov < t->fab.iov_limit) {
					tail->iov[tail->niov] = (struct iovec){la, n};
					tail->desc[tail->niov] = t->desc;
					tail->riov[tail->niov] = (struct fi_rma_iov){
					    .addr = ra, .len = n, .key = t->rkey};
					tail->niov++;
					tail->bytes += n;
					x += n;
					continue;
				}
			}
			struct dop *op = dop_get(t);
			op->track = track;
			op->niov = 1;
			op->bytes = n;
			op->iov[0] = (struct iovec){la, n};
			op->desc[0] = t->desc;
			op->riov[0] = (struct fi_rma_iov){.addr = ra, .len = n, .key = t->rkey};
			op->next = NULL;
			if (t->pend_tail)
				t->pend_tail->next = op;
			else
				t->pend_head = op;
			t->pend_tail = op;
			t->track_left[track]++;
			x += n;
		}
	}
}

/* Posts the pending FIFO as mv_post() in mover/post.c does: same flags,
 * FI_MORE while the queue surely takes the next one and the burst's byte
 * budget lasts, EAGAIN ends it. */
static int dpost(struct dsend *t)
{
	uint64_t burst = 0;
	int n = 0;

	while (t->pend_head && burst < MV_BURST_BYTES) {
		struct dop *op = t->pend_head;
		uint64_t flags = FI_COMPLETION | t->fab.dc_flag;
		struct fi_msg_rma msg = {
		    .msg_iov = op->iov,
		    .desc = op->desc,
		    .iov_count = op->niov,
		    .addr = t->peer,
		    .rma_iov = op->riov,
		    .rma_iov_count = op->niov,
		    .context = &op->ctx,
		};

		if (op->next && burst + op->bytes < MV_BURST_BYTES &&
		    t->posted + 1 < t->fab.tx_size)
			flags |= FI_MORE;
		ssize_t ret = fi_writemsg(t->fab.ep, &msg, flags);
		if (ret == -FI_EAGAIN)
			break;
		if (ret) {
			snprintf(t->err, sizeof(t->err), "direct sender %u: fi_writemsg: %s", t->id,
			         fi_strerror((int)-ret));
			return -1;
		}
		t->pend_head = op->next;
		if (!t->pend_head)
			t->pend_tail = NULL;
		t->posted++;
		burst += op->bytes;
		n++;
	}
	return n;
}

static int dreap(struct dsend *t)
{
	struct fi_cq_data_entry ent[CQ_BATCH];
	int total = 0;

	for (;;) {
		ssize_t n = fi_cq_read(t->fab.cq, ent, CQ_BATCH);
		if (n == -FI_EAGAIN || n == 0)
			break;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry e = {0};
			char buf[128];
			const char *pe = NULL;
			if (fi_cq_readerr(t->fab.cq, &e, 0) == 1)
				pe = fi_cq_strerror(t->fab.cq, e.prov_errno, e.err_data, buf,
				                    sizeof(buf));
			snprintf(t->err, sizeof(t->err), "direct sender %u: a write failed: %s: %s",
			         t->id, fi_strerror(e.err), pe ? pe : "");
			return -1;
		}
		if (n < 0) {
			snprintf(t->err, sizeof(t->err), "direct sender %u: fi_cq_read: %s", t->id,
			         fi_strerror((int)-n));
			return -1;
		}
		for (ssize_t i = 0; i < n; i++) {
			struct dop *op = ent[i].op_context;
			t->posted--;
			t->bytes += op->bytes;
			if (--t->track_left[op->track] == 0) {
				t->track_free[t->ntrack_free++] = op->track;
				t->done++;
			}
			dop_put(t, op);
		}
		total += (int)n;
		if (n < CQ_BATCH)
			break;
	}
	if (total)
		t->t1 = now_s();
	return total;
}

/* This thread's share of a job: a stripe of every write when striped, as
 * shard id carries it under libclient; else every n-th batch whole, with a
 * window of its own (libclient gives a batch to its least loaded shard,
 * which at best keeps every shard as busy as this does). */
static void dsend_run(struct dsend *t, const struct djob *j)
{
	const struct geom *g = &j->g;
	uint32_t n = g->nshards;
	uint64_t mine, win, soff = 0, slen = g->size, part, per_batch;

	if (g->striped) {
		part = mv_stripe_part(g->size, n);
		soff = (uint64_t)t->id * part;
		slen = soff >= g->size ? 0 : g->size - soff < part ? g->size - soff : part;
		mine = slen ? j->nbatches : 0;
		win = g->window;
	} else {
		mine = j->nbatches / n + (t->id < j->nbatches % n);
		win = (g->window + n - 1) / n;
	}
	per_batch = (uint64_t)g->k * ((slen + MV_CHUNK - 1) / MV_CHUNK);
	t->issued = t->done = t->bytes = 0;
	t->posted = 0;
	t->cut = 0;
	t->err[0] = 0;
	t->pend_head = t->pend_tail = t->free_ops = NULL;
	t->ops = calloc(win * per_batch + 1, sizeof(*t->ops));
	t->track_left = calloc(win, sizeof(*t->track_left));
	t->track_free = calloc(win, sizeof(*t->track_free));
	if (!t->ops || !t->track_left || !t->track_free) {
		snprintf(t->err, sizeof(t->err), "direct sender %u: out of memory", t->id);
		goto out;
	}
	for (uint64_t i = 0; i < win * per_batch + 1; i++)
		dop_put(t, &t->ops[i]);
	for (uint32_t i = 0; i < win; i++)
		t->track_free[i] = (uint32_t)(win - 1 - i);
	t->ntrack_free = (uint32_t)win;

	double start = now_s(), deadline = start + j->limit_s, last = start;
	t->t0 = t->t1 = start;
	while (t->done < mine || t->issued > t->done) {
		if (!t->cut && (now_s() > deadline ||
		                atomic_load_explicit(&t->p->abort, memory_order_relaxed)))
			t->cut = 1;
		if (t->cut && t->issued == t->done)
			break;
		uint64_t limit = mine;
		if (j->coupled && g->striped) {
			/* As through the mover: batch b may start once batch
			 * b - window completed everywhere. */
			uint64_t low = UINT64_MAX;
			for (uint32_t i = 0; i < n; i++) {
				uint64_t d = atomic_load_explicit(&t->p->t[i].done_pub,
				                                  memory_order_relaxed);
				low = d < low ? d : low;
			}
			if (low + win < limit)
				limit = low + win;
		}
		while (!t->cut && t->issued < limit && t->ntrack_free) {
			uint64_t b = g->striped ? t->issued : t->issued * n + t->id;
			build_batch(t, g, b, t->track_free[--t->ntrack_free], soff, slen);
			t->issued++;
		}
		int post = dpost(t), got = post < 0 ? -1 : dreap(t);
		if (post < 0 || got < 0)
			goto out; /* ops stay allocated: the provider may still hold them */
		if (got > 0)
			atomic_store_explicit(&t->done_pub, t->done, memory_order_relaxed);
		double tn = now_s();
		if (got > 0) {
			last = tn;
		} else if (tn - last > STALL_S) {
			snprintf(t->err, sizeof(t->err),
			         "direct sender %u: no completion for %.0f s with %u writes posted",
			         t->id, STALL_S, t->posted);
			goto out;
		} else if (j->yield && !post) {
			sched_yield();
		}
	}
	free(t->ops);
	t->ops = NULL;
out:
	free(t->track_left);
	free(t->track_free);
	t->track_left = t->track_free = NULL;
	if (t->err[0])
		atomic_store(&t->p->abort, 1);
}

static void *dsend_main(void *arg)
{
	struct dsend *t = arg;
	struct dpool *p = t->p;
	const struct tep *ep = &p->eps->ep[t->id % p->n];
	uint64_t key, seen = 0;
	int ret;

	ret = mv_topo_pin(t->cpu);
	if (ret) {
		snprintf(t->err, sizeof(t->err), "pinning direct sender %u to CPU %d: %s", t->id,
		         t->cpu, strerror(-ret));
		goto out_start;
	}
	/* Opened after pinning, like a shard's, so its memory is near it. */
	ret = mv_fabric_open(&t->fab, p->prov, p->iface, 0);
	if (ret) {
		snprintf(t->err, sizeof(t->err), "direct sender %u: opening %s: %s", t->id, p->prov,
		         fi_strerror(-ret));
		goto out_start;
	}
	ret = mv_fabric_reg(&t->fab, p->src, p->src_len, 0x200 + t->id, &t->mr, &t->desc, &key,
	                    t->err, sizeof(t->err));
	if (!ret) {
		ret = mv_fabric_av_insert(&t->fab, ep->addr, &t->peer);
		if (ret) {
			snprintf(t->err, sizeof(t->err), "direct sender %u: fi_av_insert: %s",
			         t->id, fi_strerror(-ret));
			fi_close(&t->mr->fid);
		}
	}
	if (ret)
		mv_fabric_close(&t->fab);
	t->rbase = ep->base;
	t->rkey = ep->key;
out_start:
	pthread_mutex_lock(&p->mu);
	t->status = ret;
	p->nstarted++;
	pthread_cond_broadcast(&p->done_cv);
	pthread_mutex_unlock(&p->mu);
	if (ret)
		return NULL;

	for (;;) {
		struct djob j;
		pthread_mutex_lock(&p->mu);
		while (p->gen == seen && !p->stop)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->stop) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		seen = p->gen;
		j = p->job;
		pthread_mutex_unlock(&p->mu);

		dsend_run(t, &j);

		pthread_mutex_lock(&p->mu);
		p->ndone++;
		pthread_cond_broadcast(&p->done_cv);
		pthread_mutex_unlock(&p->mu);
		if (t->err[0])
			return NULL; /* the bench stops; the fabric may still hold ops */
	}
	fi_close(&t->mr->fid);
	mv_fabric_close(&t->fab);
	return NULL;
}

/* Waits under p->mu until *count reaches want; 0, or -ETIMEDOUT. */
static int pool_wait(struct dpool *p, uint32_t *count, uint32_t want, double secs)
{
	struct timespec ts;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)secs + 1;
	pthread_mutex_lock(&p->mu);
	while (*count < want && ret == 0)
		ret = pthread_cond_timedwait(&p->done_cv, &p->mu, &ts);
	pthread_mutex_unlock(&p->mu);
	return ret ? -ret : 0;
}

/* ---- where the time went: every thread's CPU, from /proc ---- */

#define BOOK_MAX 256

/* One thread's scheduler counters, and their growth over the runs booked. */
struct tacc {
	int pid, tid, cpu;
	char comm[16];
	uint64_t run_ns, wait_ns, vcs, ivcs;   /* at the last snapshot */
	uint64_t d_run, d_wait, d_vcs, d_ivcs; /* summed over booked runs */
};

struct book {
	struct tacc t[BOOK_MAX];
	int n;
	double secs; /* wall time booked */
	double t0;
};

static struct book book_mover, book_direct;
static int book_on;

static int thread_read(int pid, int tid, struct tacc *a)
{
	char path[96], buf[1024];
	unsigned long long run, wait;
	FILE *f;
	int ok = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", pid, tid);
	if (!(f = fopen(path, "r")))
		return -ENOENT;
	ok = fscanf(f, "%llu %llu", &run, &wait) == 2;
	fclose(f);
	if (!ok)
		return -EIO;
	a->run_ns = run;
	a->wait_ns = wait;
	/* A thread that ends between these reads is skipped, not counted
	 * with zeros that would wrap its deltas. */
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	if (!(f = fopen(path, "r")))
		return -ENOENT;
	ok = 0;
	while (fgets(buf, sizeof(buf), f)) {
		unsigned long long v;
		if (sscanf(buf, "voluntary_ctxt_switches: %llu", &v) == 1) {
			a->vcs = v;
			ok |= 1;
		} else if (sscanf(buf, "nonvoluntary_ctxt_switches: %llu", &v) == 1) {
			a->ivcs = v;
			ok |= 2;
		}
	}
	fclose(f);
	if (ok != 3)
		return -EIO;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", pid, tid);
	if ((f = fopen(path, "r"))) {
		if (fgets(a->comm, sizeof(a->comm), f))
			a->comm[strcspn(a->comm, "\n")] = 0;
		fclose(f);
	}
	/* The CPU it last ran on: field 39 of stat, after the ')' of comm. */
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	if ((f = fopen(path, "r"))) {
		size_t len = fread(buf, 1, sizeof(buf) - 1, f);
		buf[len] = 0;
		char *p = strrchr(buf, ')');
		for (int field = 2; p && field < 39; field++)
			p = strchr(p + 1, ' ');
		a->cpu = p ? atoi(p + 1) : -1;
		fclose(f);
	}
	return 0;
}

/* Starts (begin) or ends a booked run: at the end, what every thread of the
 * client, the receiver and both movers used since the start is added up. */
static void book_snap(struct book *b, int begin)
{
	int pids[4] = {main_pid, atomic_load(&target_pid), atomic_load(&mover_a.pid),
	               atomic_load(&mover_b.pid)};
	char path[64];

	if (!book_on || !b)
		return;
	if (begin)
		b->t0 = now_s();
	else
		b->secs += now_s() - b->t0;
	for (int i = 0; i < 4; i++) {
		struct dirent *e;
		DIR *d;

		if (pids[i] <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task", pids[i]);
		if (!(d = opendir(path)))
			continue;
		while ((e = readdir(d))) {
			struct tacc now = {.pid = pids[i], .tid = atoi(e->d_name)}, *a = NULL;
			if (now.tid <= 0 || thread_read(now.pid, now.tid, &now))
				continue;
			for (int k = 0; k < b->n && !a; k++)
				if (b->t[k].tid == now.tid && b->t[k].pid == now.pid)
					a = &b->t[k];
			if (!a) {
				if (b->n == BOOK_MAX)
					continue;
				a = &b->t[b->n++];
				*a = now;
				continue; /* first seen: counted from here */
			}
			if (!begin) {
				a->d_run += now.run_ns - a->run_ns;
				a->d_wait += now.wait_ns - a->wait_ns;
				a->d_vcs += now.vcs - a->vcs;
				a->d_ivcs += now.ivcs - a->ivcs;
			}
			uint64_t dr = a->d_run, dw = a->d_wait, dv = a->d_vcs, di = a->d_ivcs;
			*a = now;
			a->d_run = dr;
			a->d_wait = dw;
			a->d_vcs = dv;
			a->d_ivcs = di;
		}
		closedir(d);
	}
}

static const char *proc_name(int pid)
{
	if (pid == main_pid)
		return "client";
	if (pid == atomic_load(&target_pid))
		return "receiver";
	if (pid == atomic_load(&mover_a.pid))
		return "mover A";
	if (pid == atomic_load(&mover_b.pid))
		return "mover B";
	return "?";
}

/* Threads that used at least 1% of a CPU over the booked runs. */
static void book_print(struct book *b, const char *what)
{
	if (!book_on || b->secs <= 0)
		return;
	printf("     threads during %s runs (%.2f s): %%busy %%waiting-for-CPU sleeps/s "
	       "preempted/s last-CPU\n",
	       what, b->secs);
	for (int i = 0; i < b->n; i++) {
		const struct tacc *a = &b->t[i];
		double busy = (double)a->d_run / 1e9 / b->secs;
		if (busy < 0.01)
			continue;
		printf("       %-8s %-15s %6.1f %6.1f %9.0f %9.0f %4d\n", proc_name(a->pid),
		       a->comm, 100 * busy, 100 * (double)a->d_wait / 1e9 / b->secs,
		       (double)a->d_vcs / b->secs, (double)a->d_ivcs / b->secs, a->cpu);
	}
	b->n = 0;
	b->secs = 0;
}

/* ---- one configuration: a provider and a shard count ---- */

struct opts {
	const char *provs[8];
	int nprov;
	const char *iface;
	uint32_t shards[MAX_LIST];
	int nshards;
	uint64_t sizes[MAX_LIST];
	int nsizes;
	double seconds;
	int reps;
	int quick;
	const char *csv;
	const char *mover;
	int check_bars;
	int verbose;
	int threads;
	int wait; /* the client sleeps in mvc_wait even when it has a core */
};

struct plan {
	int a[MV_MAX_SHARDS], b[MV_MAX_SHARDS]; /* movers' shard CPUs, -1 unpinned */
	int client;
	int pinned;
	char alist[400], blist[400];
};

struct row {
	const char *prov;
	uint32_t shards;
	uint64_t size;
	int reps;
	double m_med, m_min, m_max; /* bytes per second */
	double d_med, d_min, d_max;
	double f_med;     /* direct, uncoupled; 0 when the row is not striped */
	double f_ratio;   /* median over reps of mover run / the uncoupled run */
	double ratio;     /* median over reps of mover run / the direct run paired with it */
	double ratio_med; /* median mover / median direct */
	double ratio_q1, ratio_q3; /* quartiles of the pairs' ratios */
	double bar;
	int pass, cut;
};

struct cfg {
	const struct opts *o;
	const char *prov, *iface;
	uint32_t n;
	struct plan cpu;
	struct mvc *c;
	struct mvc_mem src;
	uint32_t dst;
	uint64_t region_len;
	struct trep eps;
	char mover_prov[32];
	struct dpool dp;
	double warm_s;
};

static int avail_cpus[1024], navail;

/* Each busy thread its own core, as on separate hosts: A's shards, B's
 * shards (and the direct threads standing in for them), then the client.
 * The first allowed CPU stays free for the kernel when there is room.
 * Without room for all, nobody is pinned and the scheduler shares. */
static void plan_cpus(uint32_t n, struct plan *p)
{
	int base = navail >= (int)(2 * n + 2) ? 1 : 0;
	size_t la = 0, lb = 0;

	memset(p, 0, sizeof(*p));
	p->pinned = navail - base >= (int)(2 * n + 1);
	p->client = p->pinned ? avail_cpus[base + 2 * n] : -1;
	for (uint32_t i = 0; i < n; i++) {
		p->a[i] = p->pinned ? avail_cpus[base + i] : -1;
		p->b[i] = p->pinned ? avail_cpus[base + n + i] : -1;
		la += (size_t)snprintf(p->alist + la, sizeof(p->alist) - la, "%s%d", i ? "," : "",
		                       p->a[i]);
		lb += (size_t)snprintf(p->blist + lb, sizeof(p->blist) - lb, "%s%d", i ? "," : "",
		                       p->b[i]);
		if (la >= sizeof(p->alist) - 8 || lb >= sizeof(p->blist) - 8)
			break;
	}
}

static void set_main_affinity(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	if (cpu >= 0) {
		CPU_SET(cpu, &set);
	} else {
		for (int i = 0; i < navail; i++)
			CPU_SET(avail_cpus[i], &set);
	}
	sched_setaffinity(0, sizeof(set), &set);
}

static void clear_and_check(const struct geom *g, uint64_t npos, int check, const char *who)
{
	struct tcmd c = {.op = check ? T_CHECK : T_CLEAR};
	static struct trep rep;
	char sz[32];

	snprintf(c.tag, sizeof(c.tag), " %s a %s run of %s writes", check ? "after" : "before", who,
	         size_str(g->size, sz, sizeof(sz)));

	if (npos > g->window)
		npos = g->window;
	if (check) {
		c.a = g->stride;
		c.b = g->size;
		c.c = npos;
		c.d = g->k;
	} else {
		c.a = npos * g->k * g->stride;
	}
	tcall(&c, &rep);
}

/* Through the mover: a window of batches, each k writes of one size. */
static void mover_meas(struct cfg *x, const struct geom *g, uint64_t nbatches, double limit_s,
                       struct meas *m)
{
	struct mvc_event ev[64];
	uint64_t submitted = 0, done = 0, bytes = 0;
	uint32_t inflight = 0;
	int spin = x->cpu.pinned && !x->o->wait, ret;

	clear_and_check(g, nbatches, 0, "mover");
	memset(m, 0, sizeof(*m));
	book_snap(&book_mover, 1);
	double t0 = now_s(), deadline = t0 + limit_s, last = t0, t1 = t0;
	while (done < submitted || (!m->cut && submitted < nbatches)) {
		if (!m->cut && now_s() > deadline)
			m->cut = 1;
		while (!m->cut && submitted < nbatches && inflight < g->window) {
			uint32_t w;
			for (w = 0, ret = 0; w < g->k && !ret; w++) {
				uint64_t off = slot_off(g, submitted, w);
				ret = mvc_write(x->c, x->src.region, off, x->dst, off, g->size);
			}
			if (!ret)
				ret = mvc_submit(x->c, submitted);
			if (ret == -EAGAIN) {
				mvc_abort(x->c);
				break; /* rings full: reap first */
			}
			if (ret)
				die("through the mover: building batch %" PRIu64 ": %s", submitted,
				    mvc_error(x->c));
			submitted++;
			inflight++;
		}
		int n = spin ? mvc_poll(x->c, ev, 64) : mvc_wait(x->c, ev, 64, 100);
		if (n < 0)
			die("through the mover: waiting for completions: %s", mvc_error(x->c));
		for (int i = 0; i < n; i++) {
			if (ev[i].type != MVC_EV_BATCH)
				continue;
			if (ev[i].status)
				die("through the mover: batch %" PRIu64
				    " failed (cause %d): %s: %s",
				    ev[i].cookie, ev[i].cause, ev[i].msg, strerror(-ev[i].status));
			if (ev[i].bytes != (uint64_t)g->k * g->size)
				die("through the mover: batch %" PRIu64 " reports %" PRIu64
				    " bytes written; it had %" PRIu64,
				    ev[i].cookie, ev[i].bytes, (uint64_t)g->k * g->size);
			bytes += ev[i].bytes;
			done++;
			inflight--;
		}
		double tn = now_s();
		if (n > 0)
			last = t1 = tn;
		else if (tn - last > STALL_S)
			die("through the mover: no completion for %.0f s with %u batches in flight",
			    STALL_S, inflight);
	}
	book_snap(&book_mover, 0);
	m->secs = t1 - t0;
	m->bytes = bytes;
	m->checked = submitted < g->window ? submitted : g->window;
	clear_and_check(g, m->checked, 1, "mover");
}

/* The baseline: the same batches, posted by the threads directly. */
static void direct_meas(struct cfg *x, const struct geom *g, uint64_t nbatches, double limit_s,
                        int coupled, struct book *b, struct meas *m)
{
	struct dpool *p = &x->dp;
	uint64_t min_cover = UINT64_MAX;

	clear_and_check(g, nbatches, 0, "direct");
	tsimple(T_DIRECT_GO, 0);
	book_snap(b, 1);
	for (uint32_t i = 0; i < p->n; i++) {
		/* A thread no stripe falls to never holds a batch back. */
		uint64_t part = mv_stripe_part(g->size, x->n);
		atomic_store(&p->t[i].done_pub, g->striped && i * part >= g->size ? UINT64_MAX : 0);
	}
	pthread_mutex_lock(&p->mu);
	p->job = (struct djob){.g = *g,
	                       .nbatches = nbatches,
	                       .limit_s = limit_s,
	                       .yield = !x->cpu.pinned,
	                       .coupled = coupled};
	p->ndone = 0;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	if (pool_wait(p, &p->ndone, p->n, limit_s + STALL_S + 5))
		die("direct: the sender threads did not finish within %.0f s",
		    limit_s + STALL_S + 5);
	book_snap(b, 0);
	for (uint32_t i = 0; i < p->n; i++)
		if (p->t[i].err[0])
			die("%s", p->t[i].err);

	memset(m, 0, sizeof(*m));
	double t0 = p->t[0].t0, t1 = p->t[0].t1;
	for (uint32_t i = 0; i < p->n; i++) {
		const struct dsend *t = &p->t[i];
		uint64_t part = mv_stripe_part(g->size, x->n);
		t0 = t->t0 < t0 ? t->t0 : t0;
		t1 = t->t1 > t1 ? t->t1 : t1;
		m->bytes += t->bytes;
		m->cut |= t->cut;
		/* Batches below cover were all issued (and completed) by this
		 * thread's share: its first batch not issued. */
		uint64_t cover, slen = g->size;
		if (g->striped) {
			if ((uint64_t)i * part >= g->size)
				continue; /* no stripe falls to this thread */
			slen = g->size - i * part < part ? g->size - i * part : part;
		}
		if (t->bytes != t->issued * g->k * slen)
			die("direct sender %u: %" PRIu64 " bytes completed; its %" PRIu64
			    " batches carry %" PRIu64,
			    i, t->bytes, t->issued, t->issued * g->k * slen);
		cover = g->striped ? t->issued : t->issued * x->n + i;
		min_cover = cover < min_cover ? cover : min_cover;
	}
	if (min_cover > nbatches)
		min_cover = nbatches;
	m->secs = t1 - t0;
	m->checked = min_cover < g->window ? min_cover : g->window;
	clear_and_check(g, m->checked, 1, "direct");
	tsimple(T_DIRECT_PARK, 0);
}

static double rate(const struct meas *m, const char *what)
{
	if (m->bytes == 0 || m->secs <= 0)
		die("%s: nothing completed", what);
	return (double)m->bytes / m->secs;
}

static double bar_for(uint64_t size)
{
	if (size >= 65536)
		return 0.97; /* bandwidth */
	if (size <= 4096)
		return 0.90; /* message rate */
	return 0;
}

static void cell_run(struct cfg *x, uint64_t size, struct row *r, int first)
{
	const struct opts *o = x->o;
	struct geom g = geom_of(size, x->n);
	double mv[64], dr[64], df[64], pr[64], pf[64];
	struct meas m, d;
	char sz[32];

	/* Warm-up, time-bounded: connections (tcp;ofi_rxm connects on the
	 * first write) once per configuration, then the pace to size the
	 * measured runs by, so that the faster side takes --seconds. */
	if (first) {
		mover_meas(x, &g, UINT64_MAX, x->warm_s, &m);
		direct_meas(x, &g, UINT64_MAX, x->warm_s, 1, NULL, &d);
	}
	mover_meas(x, &g, UINT64_MAX, x->warm_s, &m);
	direct_meas(x, &g, UINT64_MAX, x->warm_s, 1, NULL, &d);
	double rm = rate(&m, "mover warm-up"), rd = rate(&d, "direct warm-up");
	double fast = rm > rd ? rm : rd;
	uint64_t batch = (uint64_t)g.k * g.size;
	uint64_t nb = (uint64_t)(fast * o->seconds / (double)batch) + 1;
	if (nb < 2ull * g.window)
		nb = 2ull * g.window;
	/* A side this much slower than the other is cut short (and flagged):
	 * its rate still counts, and a broken mover cannot stretch the run. */
	double limit = 3 * o->seconds + 0.5;

	book_mover.n = book_direct.n = 0;
	book_mover.secs = book_direct.secs = 0;
	memset(r, 0, sizeof(*r));
	r->prov = x->prov;
	r->shards = x->n;
	r->size = size;
	r->reps = o->reps;
	for (int i = 0; i < o->reps; i++) {
		/* Odd reps run direct first: whatever the order itself does
		 * (the caches and page tables the run before left warm, a host
		 * that speeds up or slows down over the row) falls on both. */
		if (i % 2)
			direct_meas(x, &g, nb, limit, 1, &book_direct, &d);
		mover_meas(x, &g, nb, limit, &m);
		if (i % 2 == 0)
			direct_meas(x, &g, nb, limit, 1, &book_direct, &d);
		mv[i] = rate(&m, "through the mover");
		dr[i] = rate(&d, "direct");
		pr[i] = mv[i] / dr[i];
		r->cut |= m.cut | d.cut;
		if (o->verbose)
			printf("   rep %d: %s mover %.3f GB/s (%" PRIu64 " B in %.3f s%s), "
			       "direct %.3f GB/s (%" PRIu64 " B in %.3f s%s)\n",
			       i, size_str(size, sz, sizeof(sz)), mv[i] / 1e9, m.bytes, m.secs,
			       m.cut ? ", cut" : "", dr[i] / 1e9, d.bytes, d.secs,
			       d.cut ? ", cut" : "");
		if (!g.striped)
			continue;
		/* Uncoupled: each thread runs its own stripes, none waits for
		 * another's; shown beside the row, not held to the bar. */
		direct_meas(x, &g, nb, limit, 0, NULL, &d);
		df[i] = rate(&d, "direct, uncoupled");
		pf[i] = mv[i] / df[i];
		if (o->verbose)
			printf("   rep %d: %s direct uncoupled %.3f GB/s (%" PRIu64
			       " B in %.3f s%s)\n",
			       i, size_str(size, sz, sizeof(sz)), df[i] / 1e9, d.bytes, d.secs,
			       d.cut ? ", cut" : "");
	}
	/* median() sorts in place: the ends are then the extremes. */
	r->m_med = median(mv, o->reps);
	r->d_med = median(dr, o->reps);
	r->m_min = mv[0];
	r->m_max = mv[o->reps - 1];
	r->d_min = dr[0];
	r->d_max = dr[o->reps - 1];
	/* Pairs of neighbouring runs share the machine's state of the
	 * moment (a shared host drifts between speeds over seconds), so the
	 * median of their ratios is the steadier estimate of the cost. */
	r->ratio = median(pr, o->reps);
	/* The middle half of the pairs: how far one pair can be trusted. */
	r->ratio_q1 = pr[o->reps / 4];
	r->ratio_q3 = pr[(3 * o->reps) / 4];
	if (o->verbose)
		printf(
		    "   pairs mover/direct: lowest %.3f, quartiles %.3f %.3f %.3f, highest %.3f\n",
		    pr[0], r->ratio_q1, r->ratio, r->ratio_q3, pr[o->reps - 1]);
	r->ratio_med = r->m_med / r->d_med;
	r->f_med = g.striped ? median(df, o->reps) : 0;
	r->f_ratio = g.striped ? median(pf, o->reps) : 0;
	r->bar = bar_for(size);
	r->pass = r->bar == 0 || r->ratio >= r->bar;
}

static void print_head(void)
{
	printf("%-5s %6s %8s | %9s %8s %9s | %9s %8s %9s | %6s  %-12s %-13s | %s\n", "prov",
	       "shards", "size", "mover", "", "", "direct", "", "", "ratio", "bar", "range m/d",
	       "uncoupled");
	printf("%-5s %6s %8s | %9s %8s %9s | %9s %8s %9s | %6s  %-12s %-13s | %s\n", "", "", "",
	       "Gbit/s", "GB/s", "Mmsg/s", "Gbit/s", "GB/s", "Mmsg/s", "m/d", "", "(max-min)/med",
	       "GB/s  m/d");
}

static void print_row(const struct row *r)
{
	char sz[32], bar[32], unc[32];
	double s = (double)r->size;

	if (r->bar > 0)
		snprintf(bar, sizeof(bar), ">=%.2f %s", r->bar, r->pass ? "ok" : "LOW");
	else
		snprintf(bar, sizeof(bar), "-");
	if (r->f_med > 0)
		snprintf(unc, sizeof(unc), "%6.2f %5.3f", r->f_med / 1e9, r->f_ratio);
	else
		snprintf(unc, sizeof(unc), "%6s %5s", "-", "-");
	printf("%-5s %6u %8s | %9.3f %8.3f %9.5f | %9.3f %8.3f %9.5f | %6.3f%s %-12s %3.0f%% / "
	       "%3.0f%%    | %s\n",
	       r->prov, r->shards, size_str(r->size, sz, sizeof(sz)), r->m_med * 8 / 1e9,
	       r->m_med / 1e9, r->m_med / s / 1e6, r->d_med * 8 / 1e9, r->d_med / 1e9,
	       r->d_med / s / 1e6, r->ratio, r->cut ? "*" : " ", bar,
	       (r->m_max - r->m_min) / r->m_med * 100, (r->d_max - r->d_min) / r->d_med * 100, unc);
	fflush(stdout);
}

static void print_bench(const struct row *r, double seconds)
{
	double s = (double)r->size;

	printf("BENCH mvbench prov=%s shards=%u size=%" PRIu64 " reps=%d seconds=%.2f "
	       "mover_gbps=%.4f mover_gBps=%.4f mover_mmsgs=%.6f direct_gbps=%.4f direct_gBps=%.4f "
	       "direct_mmsgs=%.6f ratio=%.4f bar=%.2f pass=%d mover_min_gbps=%.4f "
	       "mover_max_gbps=%.4f direct_min_gbps=%.4f direct_max_gbps=%.4f cut=%d "
	       "uncoupled_gbps=%.4f uncoupled_ratio=%.4f ratio_of_medians=%.4f ratio_q1=%.4f "
	       "ratio_q3=%.4f\n",
	       r->prov, r->shards, r->size, r->reps, seconds, r->m_med * 8 / 1e9, r->m_med / 1e9,
	       r->m_med / s / 1e6, r->d_med * 8 / 1e9, r->d_med / 1e9, r->d_med / s / 1e6, r->ratio,
	       r->bar, r->pass, r->m_min * 8 / 1e9, r->m_max * 8 / 1e9, r->d_min * 8 / 1e9,
	       r->d_max * 8 / 1e9, r->cut, r->f_med * 8 / 1e9, r->f_ratio, r->ratio_med,
	       r->ratio_q1, r->ratio_q3);
}

static void csv_row(FILE *f, const struct row *r, double seconds)
{
	double s = (double)r->size;

	if (!f)
		return;
	fprintf(f,
	        "%s,%u,%" PRIu64 ",%d,%.2f,%.4f,%.4f,%.6f,%.4f,%.4f,%.6f,%.4f,%.2f,%d,%.4f,%.4f,"
	        "%.4f,%.4f,%d,%.4f,%.4f,%.4f,%.4f,%.4f\n",
	        r->prov, r->shards, r->size, r->reps, seconds, r->m_med * 8 / 1e9, r->m_med / 1e9,
	        r->m_med / s / 1e6, r->d_med * 8 / 1e9, r->d_med / 1e9, r->d_med / s / 1e6,
	        r->ratio, r->bar, r->pass, r->m_min * 8 / 1e9, r->m_max * 8 / 1e9,
	        r->d_min * 8 / 1e9, r->d_max * 8 / 1e9, r->cut, r->f_med * 8 / 1e9, r->f_ratio,
	        r->ratio_med, r->ratio_q1, r->ratio_q3);
	fflush(f);
}

/* Starts both movers and both clients, opens the direct endpoints, runs
 * every size, and undoes it all in reverse. */
static int config_run(const struct opts *o, const char *bin, const char *prov, uint32_t n,
                      struct row *rows, int *nrows, FILE *csv, int first)
{
	static struct cfg x;
	static struct trep rep;
	struct tcmd c;
	struct mvc_info info;
	uint32_t peer;
	int ret;

	memset(&x, 0, sizeof(x));
	x.o = o;
	x.prov = prov;
	x.n = n;
	x.iface = o->iface ? o->iface : !strcmp(prov, "tcp") ? "lo" : NULL;
	if (!strcmp(prov, "shm"))
		x.iface = NULL;
	x.warm_s = o->seconds / 4 < 0.1 ? 0.1 : o->seconds / 4;
	plan_cpus(n, &x.cpu);
	for (int i = 0; i < o->nsizes; i++) {
		struct geom g = geom_of(o->sizes[i], n);
		if (geom_bytes(&g) > x.region_len)
			x.region_len = geom_bytes(&g);
	}

	mover_start(&mover_a, bin, "a", prov, x.iface, n, x.cpu.alist);
	mover_start(&mover_b, bin, "b", prov, x.iface, n, x.cpu.blist);

	memset(&c, 0, sizeof(c));
	c.op = T_MOVER_UP;
	c.a = x.region_len;
	snprintf(c.path, sizeof(c.path), "%s", mover_b.sock);
	tcall(&c, &rep);

	set_main_affinity(x.cpu.client);
	ret = mvc_connect(&x.c, mover_a.sock);
	if (ret)
		die("connecting to mover A at %s: %s", mover_a.sock, strerror(-ret));
	mvc_info(x.c, &info);
	if (info.nshards != n)
		die("mover A runs %u shards; asked for %u", info.nshards, n);
	snprintf(x.mover_prov, sizeof(x.mover_prov), "%s", info.provider);
	ret = mvc_alloc(x.c, x.region_len, &x.src);
	if (!ret)
		ret = mvc_peer_add(x.c, rep.addr, rep.alen, &peer);
	if (!ret)
		ret = mvc_import(x.c, peer, rep.region, rep.rlen, &x.dst);
	if (ret)
		die("through the mover: setting up %" PRIu64 " bytes: %s", x.region_len,
		    mvc_error(x.c));
	uint64_t *w = x.src.addr;
	for (uint64_t i = 0; i < x.region_len / 8; i++)
		w[i] = pat(i * 8);

	memset(&c, 0, sizeof(c));
	c.op = T_DIRECT_UP;
	c.nshards = n;
	c.yield = !x.cpu.pinned;
	memcpy(c.cpus, x.cpu.b, sizeof(c.cpus));
	snprintf(c.prov, sizeof(c.prov), "%s", prov);
	snprintf(c.iface, sizeof(c.iface), "%s", x.iface ? x.iface : "");
	tcall(&c, &x.eps);

	struct dpool *p = &x.dp;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	p->n = n;
	p->prov = prov;
	p->iface = x.iface;
	p->src = x.src.addr;
	p->src_len = x.src.len;
	p->eps = &x.eps;
	p->t = calloc(n, sizeof(*p->t));
	if (!p->t)
		die("out of memory");
	uint32_t made = 0;
	for (; made < n; made++) {
		p->t[made].p = p;
		p->t[made].id = made;
		p->t[made].cpu = x.cpu.a[made];
		if (pthread_create(&p->t[made].thread, NULL, dsend_main, &p->t[made]))
			die("cannot start direct sender thread %u", made);
		char name[16];
		snprintf(name, sizeof(name), "send%u", made);
		pthread_setname_np(p->t[made].thread, name);
	}
	if (pool_wait(p, &p->nstarted, n, CALL_S))
		die("direct: sender endpoints did not open within %d s", CALL_S);
	for (uint32_t i = 0; i < n; i++)
		if (p->t[i].status)
			die("%s", p->t[i].err);
	const struct mv_fabric *f = &p->t[0].fab;

	if (first) {
		printf("\n== mvbench %s: fabric %s%s%s, iov %zu, tx queue %zu, %s, "
		       "remote addresses are %s\n",
		       prov, f->prov, x.iface ? " on " : "", x.iface ? x.iface : "", f->iov_limit,
		       f->tx_size, f->dc_flag ? "FI_DELIVERY_COMPLETE" : "completion on transmit",
		       f->virt_addr ? "virtual" : "offsets");
		printf("   %d reps of ~%.2f s each (after a %.2f s warm-up), mover and direct "
		       "in pairs, each pair in the other order from the last; ratio = median "
		       "of the pairs' mover / direct\n",
		       o->reps, o->seconds, x.warm_s);
		printf("   batches of min(64, 4 MiB/size) writes, %u per shard in flight (at most "
		       "%llu MiB); direct posts the fabric writes the shards would\n",
		       BATCHES_PER_SHARD, (unsigned long long)(window_bytes >> 20));
		printf("   striped rows: a batch is done when all its stripes are, for mover "
		       "and direct alike; 'uncoupled' lets each direct thread run ahead alone\n");
		print_head();
	}
	if (strcmp(f->prov, x.mover_prov))
		die("the mover runs %s but the direct endpoints opened %s", x.mover_prov, f->prov);
	if (x.cpu.pinned)
		printf("   (%u shard%s: mover A / direct senders on CPUs %s, mover B / direct "
		       "receivers on %s, client on %d)\n",
		       n, n > 1 ? "s" : "", x.cpu.alist, x.cpu.blist, x.cpu.client);
	else
		printf("   (%u shard%s: unpinned; %d CPUs cannot give %u busy threads a core "
		       "each)\n",
		       n, n > 1 ? "s" : "", navail, 2 * n + 1);
	fflush(stdout);

	for (int i = 0; i < o->nsizes; i++) {
		struct row *r = &rows[(*nrows)++];
		cell_run(&x, o->sizes[i], r, i == 0);
		print_row(r);
		book_print(&book_mover, "mover");
		book_print(&book_direct, "direct");
		csv_row(csv, r, o->seconds);
	}

	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (uint32_t i = 0; i < n; i++)
		pthread_join(p->t[i].thread, NULL);
	free(p->t);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done_cv);
	pthread_mutex_destroy(&p->mu);
	tsimple(T_DIRECT_DOWN, 0);
	mvc_free(x.c, &x.src);
	mvc_disconnect(x.c);
	set_main_affinity(-1);
	tsimple(T_MOVER_DOWN, 0);
	mover_stop(&mover_a, "mover A");
	mover_stop(&mover_b, "mover B");
	return 0;
}

/* ---- command line ---- */

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);
	uint64_t mul = 1;

	if (end == s)
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		mul = 1ull << 10;
		end++;
		break;
	case 'm':
	case 'M':
		mul = 1ull << 20;
		end++;
		break;
	case 'g':
	case 'G':
		mul = 1ull << 30;
		end++;
		break;
	default:
		break;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return -EINVAL;
	*out = v * mul;
	return 0;
}

static int parse_list(const char *arg, uint64_t *v, int max)
{
	char *dup = strdup(arg), *save = NULL;
	int n = 0;

	if (!dup)
		return -ENOMEM;
	for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == max || parse_size(tok, &v[n])) {
			free(dup);
			return -EINVAL;
		}
		n++;
	}
	free(dup);
	return n;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: mvbench [options]\n"
	        "  --provider LIST   tcp, shm, or both: tcp,shm (default tcp)\n"
	        "  --iface NAME      interface for tcp (default lo)\n"
	        "  --shards LIST     shard counts, e.g. 1,2,4 (default 1,2,... up to nproc/4)\n"
	        "  --sizes LIST      write sizes, K/M/G suffixes (default 4K,64K,1M,16M,64M)\n"
	        "  --seconds S       length of one measured run (default 0.5)\n"
	        "  --reps N          measured runs of each side per row, medians (default 15)\n"
	        "  --quick           --seconds 0.25 --reps 3 unless given\n"
	        "  --csv FILE        the table as CSV too\n"
	        "  --mover PATH      the mover binary (default: next to mvbench)\n"
	        "  --check-bars      exit 3 when a row misses its bar (0.97x direct from 64 KiB,\n"
	        "                    0.9x at 4 KiB and below)\n"
	        "  --window SIZE     at most this many bytes in flight (default 128M)\n"
	        "  --wait            the client sleeps in mvc_wait, never polls\n"
	        "  --threads         per row, each busy thread's CPU use, waits and switches\n"

	        "  -v, --verbose     every run's figures\n");
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
	    {"provider", required_argument, 0, 'p'}, {"iface", required_argument, 0, 'i'},
	    {"shards", required_argument, 0, 'n'},   {"sizes", required_argument, 0, 's'},
	    {"seconds", required_argument, 0, 't'},  {"reps", required_argument, 0, 'r'},
	    {"quick", no_argument, 0, 'q'},          {"csv", required_argument, 0, 'c'},
	    {"mover", required_argument, 0, 'm'},    {"check-bars", no_argument, 0, 'b'},
	    {"verbose", no_argument, 0, 'v'},        {"threads", no_argument, 0, 'T'},
	    {"wait", no_argument, 0, 'W'},           {"window", required_argument, 0, 'w'},
	    {"help", no_argument, 0, 'h'},           {0, 0, 0, 0},
	};
	uint64_t v[MAX_LIST];
	char *provs = NULL;
	int ch, n;

	memset(o, 0, sizeof(*o));
	while ((ch = getopt_long(argc, argv, "v", lo, NULL)) != -1) {
		switch (ch) {
		case 'p':
			free(provs);
			provs = strdup(optarg);
			break;
		case 'i':
			o->iface = optarg;
			break;
		case 'n':
			n = parse_list(optarg, v, MAX_LIST);
			if (n <= 0) {
				fprintf(stderr, "mvbench: --shards %s: give a list like 1,2,4\n",
				        optarg);
				exit(2);
			}
			for (int i = 0; i < n; i++) {
				if (v[i] < 1 || v[i] > MV_MAX_SHARDS) {
					fprintf(stderr,
					        "mvbench: --shards: %" PRIu64 " is not 1 to %u\n",
					        v[i], MV_MAX_SHARDS);
					exit(2);
				}
				o->shards[i] = (uint32_t)v[i];
			}
			o->nshards = n;
			break;
		case 's':
			n = parse_list(optarg, o->sizes, MAX_LIST);
			if (n <= 0) {
				fprintf(stderr, "mvbench: --sizes %s: give a list like 4K,64K,1M\n",
				        optarg);
				exit(2);
			}
			for (int i = 0; i < n; i++)
				if (o->sizes[i] < 8 || o->sizes[i] > (1ull << 30)) {
					fprintf(stderr,
					        "mvbench: --sizes: %" PRIu64
					        " is outside 8 bytes to 1 GiB\n",
					        o->sizes[i]);
					exit(2);
				}
			o->nsizes = n;
			break;
		case 't':
			o->seconds = atof(optarg);
			if (o->seconds <= 0 || o->seconds > 600) {
				fprintf(stderr, "mvbench: --seconds %s: give 0 to 600\n", optarg);
				exit(2);
			}
			break;
		case 'r':
			o->reps = atoi(optarg);
			if (o->reps < 1 || o->reps > 64) {
				fprintf(stderr, "mvbench: --reps %s: give 1 to 64\n", optarg);
				exit(2);
			}
			break;
		case 'q':
			o->quick = 1;
			break;
		case 'c':
			o->csv = optarg;
			break;
		case 'm':
			o->mover = optarg;
			break;
		case 'b':
			o->check_bars = 1;
			break;
		case 'v':
			o->verbose = 1;
			break;
		case 'T':
			o->threads = 1;
			break;
		case 'W':
			o->wait = 1;
			break;
		case 'w':
			if (parse_size(optarg, &window_bytes) || window_bytes < (1u << 20) ||
			    window_bytes > (16ull << 30)) {
				fprintf(stderr, "mvbench: --window %s: give 1M to 16G\n", optarg);
				exit(2);
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind < argc) {
		usage(stderr);
		exit(2);
	}
	if (!provs)
		provs = strdup("tcp");
	for (char *save = NULL, *tok = strtok_r(provs, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (o->nprov == (int)(sizeof(o->provs) / sizeof(o->provs[0]))) {
			fprintf(stderr, "mvbench: --provider: too many\n");
			exit(2);
		}
		o->provs[o->nprov++] = tok; /* provs lives as long as the process */
	}
	if (!o->seconds)
		o->seconds = o->quick ? 0.25 : 0.5;
	if (!o->reps)
		o->reps = o->quick ? 3 : 15;
	if (!o->nsizes) {
		const uint64_t def[] = {4096, 65536, 1 << 20, 16 << 20, 64 << 20};
		memcpy(o->sizes, def, sizeof(def));
		o->nsizes = 5;
	}
	if (!o->nshards) {
		uint32_t top = navail / 4 > 2 ? (uint32_t)navail / 4 : 2;
		for (uint32_t s = 1; s <= top && o->nshards < MAX_LIST; s *= 2)
			o->shards[o->nshards++] = s;
	}
}

int main(int argc, char **argv)
{
	static struct row rows[8 * MAX_LIST * MAX_LIST];
	struct opts o;
	char bin[4096];
	int sv[2], nrows = 0, missed = 0;
	FILE *csv = NULL;
	cpu_set_t set;

	main_pid = getpid();
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		for (int i = 0; i < CPU_SETSIZE && navail < 1024; i++)
			if (CPU_ISSET(i, &set))
				avail_cpus[navail++] = i;
	if (!navail)
		avail_cpus[navail++] = 0;
	parse_opts(argc, argv, &o);
	book_on = o.threads;

	/* The mover binary sits next to this one unless told otherwise. */
	if (o.mover) {
		snprintf(bin, sizeof(bin), "%s", o.mover);
	} else {
		ssize_t n = readlink("/proc/self/exe", bin, sizeof(bin) - 8);
		if (n <= 0)
			snprintf(bin, sizeof(bin), "build/bin/mover");
		else {
			bin[n] = 0;
			char *slash = strrchr(bin, '/'), *name = slash ? slash + 1 : bin;
			snprintf(name, sizeof(bin) - (size_t)(name - bin), "mover");
		}
	}
	if (access(bin, X_OK))
		die("no mover binary at %s (%s): build it with make, or give --mover PATH", bin,
		    strerror(errno));

	/* The receiver first, while this process is small and has no threads
	 * and no libfabric state. */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		die("socketpair: %s", strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != main_pid)
			_exit(1);
		close(sv[0]);
		_exit(target_main(sv[1]));
	}
	close(sv[1]);
	target_sock = sv[0];
	atomic_store(&target_pid, pid);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, SIG_IGN);

	snprintf(workdir, sizeof(workdir), "/tmp/mvbench.XXXXXX");
	if (!mkdtemp(workdir)) {
		workdir[0] = 0;
		die("mkdtemp: %s", strerror(errno));
	}
	const char *names[4] = {"a.sock", "b.sock", "a.log", "b.log"};
	for (int i = 0; i < 4; i++)
		snprintf(work_files[i], sizeof(work_files[i]), "%s/%s", workdir, names[i]);
	if (o.csv) {
		csv = fopen(o.csv, "w");
		if (!csv)
			die("--csv %s: %s", o.csv, strerror(errno));
		fprintf(csv, "provider,shards,size,reps,seconds,mover_gbps,mover_GBps,mover_mmsgs,"
		             "direct_gbps,direct_GBps,direct_mmsgs,ratio,bar,pass,mover_min_gbps,"
		             "mover_max_gbps,direct_min_gbps,direct_max_gbps,cut,uncoupled_gbps,"
		             "uncoupled_ratio,ratio_of_medians,ratio_q1,ratio_q3\n");
	}

	double t0 = now_s();
	printf("mvbench: %d CPUs, shards", navail);
	for (int i = 0; i < o.nshards; i++)
		printf("%s%u", i ? "," : " ", o.shards[i]);
	printf(", %d sizes, %d reps of %.2f s%s\n", o.nsizes, o.reps, o.seconds,
	       o.quick ? " (quick)" : "");
	for (int pi = 0; pi < o.nprov; pi++) {
		int first_row = nrows;
		for (int si = 0; si < o.nshards; si++)
			config_run(&o, bin, o.provs[pi], o.shards[si], rows, &nrows, csv, si == 0);
		int cut = 0;
		for (int i = first_row; i < nrows; i++)
			cut |= rows[i].cut;
		if (cut)
			printf("   * a run hit its time limit (3 x --seconds + 0.5 s); its rate "
			       "counts what completed by then\n");
		for (int i = first_row; i < nrows; i++)
			print_bench(&rows[i], o.seconds);
	}
	for (int i = 0; i < nrows; i++)
		missed += !rows[i].pass;
	printf("mvbench: %d rows, %d below their bar, %.0f s\n", nrows, missed, now_s() - t0);
	if (csv)
		fclose(csv);
	cleanup(0);
	return o.check_bars && missed ? 3 : 0;
}
