/* SPDX-License-Identifier: MIT */
/*
 * harness.h: what the parts of mvbench share. The harness (procs.c,
 * harness.c, books.c) lays out the processes of a run, two movers, this
 * process as a client of A and a forked receiver process as a client of B,
 * pairs mover and direct runs, and reports them; direct.c is the direct
 * libfabric baseline, sender threads here and receiver endpoints in the
 * receiver process; each rows_*.c is one family of rows, the batches it
 * builds and how it checks what landed. Everything runs in the bench's
 * main thread unless a comment says otherwise.
 */
#ifndef MV_BENCH_HARNESS_H
#define MV_BENCH_HARNESS_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_rma.h>

#include "mover.h"
#include "mvc.h"
#include "../mvtool.h"

#define BATCH_BYTES       (4u << 20)     /* a batch carries about this much */
#define BATCH_WRITES_MAX  64u            /* and at most this many writes */
#define BATCHES_PER_SHARD 8u             /* in flight per shard */
#define WINDOW_BYTES      (128ull << 20) /* but never more than this in flight (--window) */
#define SLOT_GAP          4096u          /* keeps neighbouring writes apart */
#define STALL_S           10.0           /* no completion this long: something is stuck */
#define CALL_S            30             /* a receiver command answers within this */
#define CQ_BATCH          64
#define MAX_LIST          32

/* The payload: the word at byte offset o of the source is pat(o). Writes
 * keep their offset (slot k is at the same place in both regions), so the
 * receiver can check any landed word without knowing the source. */
static inline uint64_t pat(uint64_t o)
{
	return mix(o ^ 0x6d7662656e6368ull);
}

const char *size_str(uint64_t s, char *buf, size_t len);

/* ---- the shape of one measurement ---- */

struct geom {
	uint64_t size;   /* bytes per write */
	uint64_t stride; /* slot pitch, the same in both regions */
	uint32_t k;      /* writes per batch */
	uint32_t window; /* batches in flight over all shards */
	uint32_t nshards;
	int striped; /* libclient splits each write over the shards */
};

/* One measurement: bytes that completed between the first post and the
 * last completion. */
struct meas {
	double secs;
	uint64_t bytes;
	uint64_t checked; /* window positions whose slots were verified */
	int cut;          /* the time limit ended it before its bytes were done */
	int failed;       /* the run could not go on: err says why */
	char err[200];
};

/* ---- the receiver process and its commands ---- */

enum tcmd_op {
	T_MOVER_UP = 1, /* connect to mover B, allocate the region (a bytes, b: enum mvc_huge),
	                   return blobs */
	T_MOVER_DOWN,
	T_DIRECT_UP, /* N endpoints registering the same region, parked */
	T_DIRECT_GO, /* endpoints poll their CQs */
	T_DIRECT_PARK,
	T_DIRECT_DOWN,
	T_CLEAR,       /* zero the first a bytes of the region */
	T_CHECK,       /* verify c window positions of geometry (a = stride, b = size, d = k) */
	T_PAGES,       /* make the page lists: a pages in the pool, b the seed */
	T_PAGES_CLEAR, /* zero the pages of the first b positions of a pages each */
	T_PAGES_CHECK, /* verify the pages of the first b positions of a pages each */
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

/* One direct receiver endpoint, a thread of the receiver process. */
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

/* The receiver process's state: its client of mover B, the one region,
 * and the direct endpoints while they are up. */
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
	uint32_t *perm;     /* scattered rows: every page of the pool once, shuffled */
	uint64_t nperm;
};

int target_main(int sock);

/* ---- processes this bench started (procs.c) ---- */

struct mvproc {
	_Atomic int pid;
	char sock[256];
	char log[256];
};

extern struct mvproc mover_a, mover_b;
extern _Atomic int target_pid;
extern pid_t main_pid;

/* Forks the receiver, makes the work directory, installs the signal
 * handlers; dies on failure. */
void procs_start(void);
void cleanup(int show_logs);
void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void mover_start(struct mvproc *m, const char *bin, const char *name, const char *prov,
                 const char *iface, uint32_t n, const char *cpus, int host_copy);
void mover_stop(struct mvproc *m, const char *name);
/* One command to the receiver and its reply; dies when it fails. */
void tcall(const struct tcmd *c, struct trep *rep);
void tsimple(uint32_t op, uint64_t a);

/* ---- where the time went (books.c) ---- */

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

extern struct book book_mover, book_direct;
extern int book_on;

void book_snap(struct book *b, int begin);
void book_print(struct book *b, const char *what);

/* ---- the direct baseline's sender threads (direct.c) ---- */

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

struct djob;
struct dsend;

/* What a row family tells the sender threads about its batches. */
struct dfamily {
	/* Fabric writes one batch can take on thread id at most; 0 when no
	 * part of a striped batch falls to it. */
	uint64_t (*ops_per_batch)(const struct djob *j, uint32_t id);
	/* Queues thread t's part of batch b with dsend_queue(), tagged track. */
	void (*build)(struct dsend *t, const struct djob *j, uint64_t b, uint32_t track);
};

struct djob {
	struct geom g;
	const struct dfamily *fam;
	const void *arg;   /* the family's own description of its batches */
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
	int wait;      /* the client sleeps in mvc_wait even when it has a core */
	int contig;    /* contiguous rows at each of sizes[] */
	int scattered; /* scattered-page rows at each of pages[] */
	uint32_t pages[MAX_LIST];
	int npages;
	uint64_t pool; /* bytes per side the scattered pages are drawn from */
	int latency;   /* round-trip rows at each of lat[] */
	uint64_t lat[MAX_LIST];
	int nlat;
	int fairness; /* a client's small batches, alone and beside a flood */
	int reg;      /* registering memory (mvc_alloc) beside a memset of as much */
	int external; /* fi_rma_bw and ucx_perftest beside the mover (rows_ext.c) */
	/* The pages of the pools, per run (enum mvc_backing: 4k, hugetlb,
	 * thp): every row family runs once per backing; register rows take
	 * reg_backings (default all three) in the same run. */
	uint32_t backings[3];
	int nbackings;
	uint32_t reg_backings[3];
	int nreg_backings;
	uint64_t reg_size; /* register rows: bytes per region (default 1G, 256M quick) */
};

/* "4k", "hugetlb", "thp" */
const char *backing_name(uint32_t b);
/* The mvc_alloc_huge mode that asks for backing b and nothing else. */
enum mvc_huge backing_huge(uint32_t b);
/* 0 when the kernel can back bytes of memory on b now; else why not. */
int backing_check(uint32_t b, uint64_t bytes, char *why, size_t whylen);

struct plan {
	int a[MV_MAX_SHARDS], b[MV_MAX_SHARDS]; /* movers' shard CPUs, -1 unpinned */
	int client;
	int pinned;
	char alist[400], blist[400];
};

struct row {
	const char *prov;
	uint32_t backing; /* enum mvc_backing of the pools */
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
	uint32_t pages;     /* scattered rows: pages per batch; 0 on contiguous rows */
	double vs_contig;   /* scattered: mover pages/s over the 4 KiB row's writes/s */
	double d_vs_contig; /* the same for direct */
	/* scattered on huge pages: over the 4 KiB row of the same provider
	 * and shards on 4 KiB pages, where this run has one (else 0) */
	double vs_contig_4k, d_vs_contig_4k;
	int failed; /* the row could not be measured: err says why */
	char err[200];
};

struct cfg {
	const struct opts *o;
	const char *prov, *iface;
	uint32_t backing; /* of both pools (enum mvc_backing) */
	/* The fabric both movers and the direct baseline open: prov, except
	 * for "samehost", shm movers that copy host memory between them
	 * (mover/samehost.c). Every other configuration keeps its movers on
	 * the fabric (--no-host-copy), like for like with direct. */
	const char *fab;
	int host_copy;
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
	uint64_t pool_len; /* scattered rows: the pool, at the start of the region */
};

/* How a family of rows measures each side of a pair. */
struct rowkind {
	/* Through the mover: nbatches batches, or until limit_s. */
	void (*mover)(struct cfg *x, const struct geom *g, uint64_t nbatches, double limit_s,
	              struct meas *m);
	/* The direct baseline; coupled: a striped batch is done when all its
	 * stripes are. b books the threads' CPU (NULL: not booked). */
	void (*direct)(struct cfg *x, const struct geom *g, uint64_t nbatches, double limit_s,
	               int coupled, struct book *b, struct meas *m);
	int uncoupled; /* striped rows also show an uncoupled direct run */
};

extern uint64_t window_bytes;
/* --mover-arg: options every mover the bench starts gets after its own
 * (a knob to sweep, such as --fair-piece 16384), in the order given. */
#define MOVER_EXTRA_MAX 8
extern const char *mover_extra[MOVER_EXTRA_MAX];
extern int nmover_extra;
extern int avail_cpus[1024], navail;

/* harness.c */
int config_run(const struct opts *o, const char *bin, const char *prov, uint32_t n,
               uint32_t backing, struct row *rows, int *nrows, FILE *csv, int first);
void pairs_run(struct cfg *x, const struct rowkind *rk, const struct geom *g, struct row *r,
               int first);
void csv_head(FILE *f);
void print_bench(const struct row *r, double seconds);
void meas_fail(struct meas *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* direct.c: receiver endpoints (in the receiver process) */
int direct_up(struct target *tg, const struct tcmd *c, struct trep *rep);
void direct_down(struct target *tg);
void target_state(struct target *tg, int st);
int target_park(struct target *tg);

/* direct.c: sender threads (in this process) */
void direct_pool_start(struct cfg *x);
void direct_pool_stop(struct cfg *x);
/* Runs job j on every sender thread while the receivers poll; dies when a
 * thread fails. */
void direct_job(struct cfg *x, const struct djob *j, struct book *b);
/* Queues len bytes from src_off to dst_off as the shard would: 4 MiB
 * pieces, merged into the last queued write of the same batch. */
void dsend_queue(struct dsend *t, uint32_t track, uint64_t src_off, uint64_t dst_off, uint64_t len);

/* rows_scatter.c: scattered 4 KiB pages, one paged write per batch */
#define SC_PAGE       4096u
#define SC_BAR_RATIO  0.90 /* mover / direct pages per second */
#define SC_BAR_CONTIG 0.80 /* mover pages/s over the 4 KiB row's writes/s */
uint64_t sc_pool_bytes(const struct opts *o);
void sc_pages_setup(struct cfg *x);
void sc_row(struct cfg *x, uint32_t pages, const struct row *contig, struct row *r, int first);
int sc_target_pages(struct target *tg, const struct tcmd *c, char *why, size_t len);
int sc_land_clear(const struct target *tg, const struct tcmd *c, char *why, size_t len);
int sc_land_check(const struct target *tg, const struct tcmd *c, char *why, size_t len);

/* rows_bw.c: contiguous writes of one size */
struct geom geom_of(uint64_t size, uint32_t n);
uint64_t geom_bytes(const struct geom *g);
void bw_row(struct cfg *x, uint64_t size, struct row *r, int first);
int bw_land_check(const struct target *tg, const struct tcmd *c, char *why, size_t len);

/* The mover's own runs of geometry g for about limit_s (stride 0: every
 * write from offset 0 to offset 0, one buffer each side). */
void bw_mover_run(struct cfg *x, const struct geom *g, double limit_s, struct meas *m);

/* rows_ext.c: fi_rma_bw and ucx_perftest beside the mover */
#define EXT_TOOLS    2
#define EXT_BAR      1.0 /* mover reuse / the configuration's first tool */
#define EXT_ROWS_MAX 256
struct xtool {
	char name[24];
	double bps, ratio; /* the tool's median rate; median of pairs' mover / tool */
	int goal;          /* held against EXT_BAR */
	int pass, absent, failed;
	char why[200];
};
struct xrow {
	const char *prov;
	uint32_t shards;
	uint64_t size;
	int reps;
	double m_reuse;            /* the mover, one buffer each side: median bytes/s */
	double m_stream, d_stream; /* the contiguous row of the same size, mover and direct */
	int ntools;
	struct xtool t[EXT_TOOLS];
};
extern struct xrow ext_done[EXT_ROWS_MAX];
extern int next_done;
/* The external rows of configuration x at each contiguous size, beside
 * that size's row among rows; appends to ext_done, and to csv. */
int ext_rows(struct cfg *x, const struct row *rows, int nrows, FILE *csv);
void ext_print_bench(const struct xrow *r);

/* rows_lat.c: round trips of one small write, mover and direct */
struct lrow {
	const char *prov;
	uint32_t shards;
	uint64_t size;
	int sleep;                  /* the clients sleep in mvc_wait */
	int stalled;                /* beside a client of A that reads no completions */
	int gap_us;                 /* each round after a pause this long; 0: back to back */
	int rounds;                 /* per side */
	double m_p50, m_p99, m_min; /* microseconds */
	double d_p50, d_p99, d_min; /* direct, the writes the shards post */
	double dp_p50, dp_p99,
	    dp_min;   /* direct, plain writes (tcp: no delivery-complete); 0: same */
	double ratio; /* mover p50 / direct p50 */
	double bar_p50;
	double hop_p50[MV_HOPS + 1]; /* the movers' hops, then the ping's wait; < 0: none */
	double hop_p99[MV_HOPS + 1]; /* the same hops' tails: where a slow round's time went */
	uint64_t sleeps[2];          /* over the row's rounds, mover A's shards and B's */
	int pass;
	int failed;
	char err[200];
};

struct idle_cpu {
	const char *prov;
	uint32_t shards;
	double secs;
	double a_pct, b_pct; /* of one core */
	int pass;
};

#define LAT_ROWS_MAX 512
#define IDLE_MAX     64
extern struct lrow lat_done[LAT_ROWS_MAX];
extern int nlat_done;
extern struct idle_cpu idle_done[IDLE_MAX];
extern int nidle_done;
/* Every latency row of configuration x (x->o->lat at both waits, then the
 * stalled rows), then the movers' idle CPU; appends to lat_done and
 * idle_done. < 0 when a row failed. */
int lat_rows(struct cfg *x);
void lat_print_head(void);
void lat_print_row(const struct lrow *r);
void lat_print_bench(const struct lrow *r);
void idle_print_bench(const struct idle_cpu *c);
/* The first CPU after everything plan_cpus() gave out, or -1 (unpinned). */
int spare_cpu(const struct cfg *x);
/* Lets client `from` write into `region` of client `owner`: adds owner's
 * mover as a peer of from's and imports the region. 0 or -errno. */
int reach_region(struct mvc *from, struct mvc *owner, uint32_t region, uint32_t *handle);

/* rows_fair.c: a client's small batches alone and beside a client that
 * floods the same mover with 64 MiB writes */
#define FAIR_BAR 2.0 /* loaded p99 over alone p99 */
struct frow {
	const char *prov;
	uint32_t shards;
	uint64_t size, flood_size;
	int rounds_alone, rounds_loaded;
	double a_p50, a_p99, l_p50, l_p99; /* microseconds: alone, beside the flood */
	double ratio;                      /* l_p99 / a_p99 */
	/* The same ratio within each rep (its alone chunk, then its loaded
	 * one): median, lowest, highest. A noisy moment moves both sides of
	 * one rep; shown beside ratio, which decides the bar. */
	double rep_ratio_med, rep_ratio_min, rep_ratio_max;
	/* Each rep's p99s, alone and loaded, in the reps' order: whether a
	 * jump is the first rep's (something the flood's start does) or a
	 * moment of the machine's, on either side. */
	int nrep;
	double rep_a99[64], rep_l99[64];
	double flood_bps, flood_alone_bps; /* the flood beside the small batches, and alone */
	double i_p50, i_max; /* a small batch after 150 ms idle, the flood on: p50, max */
	/* Per hop (mover/stats_layout.h), us: alone p50, p99; loaded p50, p99. */
	int hops; /* whether the movers' histograms were read */
	double hop_a50[MV_HOPS], hop_a99[MV_HOPS], hop_l50[MV_HOPS], hop_l99[MV_HOPS];
	int pass;
	int failed;
	char err[200];
};
#define FAIR_ROWS_MAX 64
extern struct frow fair_done[FAIR_ROWS_MAX];
extern int nfair_done;
/* The fairness row of configuration x; appends to fair_done. < 0 when it
 * failed. */
int fair_rows(struct cfg *x);
void fair_print_bench(const struct frow *r);

/* rows_reg.c: making memory the mover can reach, against making as much
 * memory at all. */
struct rrow {
	const char *prov;
	uint32_t shards;
	uint32_t backing; /* enum mvc_backing asked for and got */
	uint64_t size;
	uint64_t memset_size; /* the memset baseline's bytes (at most REG_MEMSET_MAX) */
	int reps;
	double gbps, memset_gbps, ratio, free_ms; /* medians over the reps */
	double alloc_ms, map_ms, mr_ms; /* medians: client pages, mover mapping, fi_mr_reg */
	double free_stream_ms;          /* mvc_free while a peer streams writes into it */
	uint32_t stream_batches, stream_failed; /* that stream's batches, and failed ones */
	int pass;
	int failed;
	int skipped; /* the kernel could not back it: err says why */
	char err[200];
};
#define REG_MEMSET_MAX (4ull << 30) /* larger regions are compared with a memset of this */
#define REG_ROWS_MAX   96
#define REG_BAR        0.5 /* registration at least half a memset's rate */
extern struct rrow reg_done[REG_ROWS_MAX];
extern int nreg_done;
/* The register row of configuration x (its client of mover A); appends to
 * reg_done. < 0 when it failed. */
int reg_rows(struct cfg *x);
void reg_print_bench(const struct rrow *r);

#endif
