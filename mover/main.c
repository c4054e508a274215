/* SPDX-License-Identifier: MIT */
/*
 * mover: the daemon. Parses the command line, finds the NICs of the best
 * provider, places one shard per NIC (or --shards N) on a core near it,
 * starts the shard threads, logs one line per shard, and serves the control
 * socket until SIGTERM, when it drains what clients committed and exits.
 */
#include "mover.h"
#include "mv_host.h"
#include "mv_sock.h"

#include <getopt.h>
#include <glob.h>
#include <stdalign.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_errno.h>

int mv_verbose;

static void vlog(const char *fmt, va_list ap)
{
	struct timespec ts;
	char buf[512];

	clock_gettime(CLOCK_REALTIME, &ts);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	fprintf(stderr, "mover[%d] %ld.%03ld %s\n", getpid(), (long)ts.tv_sec, ts.tv_nsec / 1000000,
	        buf);
}

void mv_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

void mv_dbg(const char *fmt, ...)
{
	va_list ap;

	if (!mv_verbose)
		return;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: mover [options]\n"
	           "  --socket PATH     control socket (default $MOVER_SOCKET, else\n"
	           "                    $XDG_RUNTIME_DIR/mover.sock,\n"
	           "                    else /tmp/mover-UID.sock), mode 0600\n"
	           "  --provider P      auto|efa|verbs|tcp|shm (default auto: efa, verbs, tcp)\n"
	           "  --iface NAME      use this interface/domain only (e.g. lo, veth0)\n"
	           "  --shards N        N shards; NICs are reused round-robin when fewer\n"
	           "                    (default: one shard per NIC)\n"
	           "  --cpus LIST       pin shard i to the i-th CPU of LIST (default: hwloc)\n"
	           "  --op-timeout S    fail a write the fabric has not completed in S seconds\n"
	           "                    (default 10: a peer that died or never answered)\n"
	           "  --trace FILE      record every batch to FILE (see mvtrace; also switched\n"
	           "                    at run time with 'mvtrace start|stop')\n"
	           "  --trace-hops      each batch's record followed by its hops: when its END\n"
	           "                    was taken, its last write posted, its data done, its\n"
	           "                    immediate done, its completion published\n"
	           "  --no-gpu-copy     never copy into a same-host peer's GPU memory with CUDA;\n"
	           "                    send it as landing messages, as to another host\n"
	           "  --allow-any-uid   serve clients of every uid (default: own uid only)\n"
	           "  --weight-uid UID:W  clients of UID get W shares of a shard (1-100,\n"
	           "                    default 1) when several are active; repeatable\n"
	           "  -v, --verbose     log client events\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"socket", required_argument, 0, 's'}, {"provider", required_argument, 0, 'p'},
	    {"iface", required_argument, 0, 'i'},  {"shards", required_argument, 0, 'n'},
	    {"cpus", required_argument, 0, 'c'},   {"allow-any-uid", no_argument, 0, 'u'},
	    {"verbose", no_argument, 0, 'v'},      {"op-timeout", required_argument, 0, 't'},
	    {"trace", required_argument, 0, 'T'},  {"no-gpu-copy", no_argument, 0, 'G'},
	    {"trace-hops", no_argument, 0, 'O'},   {"weight-uid", required_argument, 0, 'W'},
	    {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
	};
	struct mover *mv = calloc(1, sizeof(*mv));
	char sockbuf[256], why[MV_ERRLEN] = "";
	char names[MV_MAX_SHARDS][64], pci[MV_MAX_SHARDS][32];
	int c, ret, nnic;

	if (!mv)
		return 1;
	mv->cfg.provider = "auto";
	mv->cfg.op_timeout_ms = 10000;
	while ((c = getopt_long(argc, argv, "s:p:i:n:c:t:T:Guvh", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			mv->cfg.socket_path = optarg;
			break;
		case 'p':
			mv->cfg.provider = optarg;
			break;
		case 'i':
			mv->cfg.iface = optarg;
			break;
		case 'n':
			mv->cfg.nshards = atoi(optarg);
			if (mv->cfg.nshards < 1 || mv->cfg.nshards > (int)MV_MAX_SHARDS) {
				fprintf(stderr, "mover: --shards %s: give 1 to %u\n", optarg,
				        MV_MAX_SHARDS);
				return 2;
			}
			break;
		case 'c':
			mv->cfg.cpus = optarg;
			break;
		case 't':
			mv->cfg.op_timeout_ms = (int)(atof(optarg) * 1000);
			if (mv->cfg.op_timeout_ms <= 0) {
				fprintf(stderr, "mover: --op-timeout %s: give seconds > 0\n",
				        optarg);
				return 2;
			}
			break;
		case 'O':
			mv->cfg.trace_hops = 1;
			break;
		case 'T':
			mv->cfg.trace = optarg;
			break;
		case 'G':
			mv->cfg.no_gpu_copy = 1;
			break;
		case 'u':
			mv->cfg.allow_any_uid = 1;
			break;
		case 'W': {
			char *end;
			unsigned long uid = strtoul(optarg, &end, 10), w = 0;
			if (end != optarg && *end == ':')
				w = strtoul(end + 1, &end, 10);
			if (*end || w < 1 || w > MV_WEIGHT_MAX || uid > UINT32_MAX ||
			    mv->cfg.nweights == MV_MAX_WEIGHTS) {
				fprintf(stderr,
				        "mover: --weight-uid %s: give UID:W, W from 1 to %u, at "
				        "most %u times\n",
				        optarg, MV_WEIGHT_MAX, MV_MAX_WEIGHTS);
				return 2;
			}
			mv->cfg.weights[mv->cfg.nweights++] =
			    (struct mv_uid_weight){(uint32_t)uid, (uint32_t)w};
			break;
		}
		case 'v':
			mv_verbose = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!mv->cfg.socket_path)
		mv->cfg.socket_path = mv_default_socket(sockbuf, sizeof(sockbuf));

	/* Signals go to the control thread's signalfd, never to a shard. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	if (getrandom(&mv->mover_id, sizeof(mv->mover_id), 0) != sizeof(mv->mover_id))
		mv->mover_id = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid();
	srandom((unsigned)(mv->mover_id ^ (mv->mover_id >> 32)));

	nnic = mv_fabric_list(mv->cfg.provider, mv->cfg.iface, names, pci, MV_MAX_SHARDS, mv->prov,
	                      sizeof(mv->prov));
	if (nnic <= 0) {
		fprintf(stderr,
		        "mover: no usable provider for --provider %s%s%s: %s\n"
		        "mover: it needs RDM endpoints with RMA writes and remote CQ data; "
		        "'fi_info -l' lists what this host has\n",
		        mv->cfg.provider, mv->cfg.iface ? " --iface " : "",
		        mv->cfg.iface ? mv->cfg.iface : "", fi_strerror(-nnic));
		return 1;
	}
	mv->nshards = mv->cfg.nshards ? (uint32_t)mv->cfg.nshards : (uint32_t)nnic;
	mv->shards = aligned_alloc(alignof(struct mv_shard), mv->nshards * sizeof(*mv->shards));
	if (mv->shards)
		memset(mv->shards, 0, mv->nshards * sizeof(*mv->shards));
	mv->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!mv->shards || mv->efd < 0)
		return 1;
	for (uint32_t s = 0; s < mv->nshards; s++) {
		struct mv_shard *sh = &mv->shards[s];
		sh->id = (int)s;
		sh->mv = mv;
		snprintf(sh->iface, sizeof(sh->iface), "%s", names[s % (uint32_t)nnic]);
		snprintf(sh->pci, sizeof(sh->pci), "%s", pci[s % (uint32_t)nnic]);
		sh->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		sh->wake_fd = -1;
		if (sh->efd < 0)
			return 1;
	}
	/* shm names its endpoints PID:N:M under /dev/shm. One left there by a
	 * killed process whose pid we now have would make our endpoint fail
	 * with EBUSY; no live process can own it, so it goes. */
	if (!strncmp(mv->prov, "shm", 3)) {
		char pat[64];
		glob_t g;
		snprintf(pat, sizeof(pat), "/dev/shm/%d:*", getpid());
		if (glob(pat, 0, NULL, &g) == 0) {
			for (size_t i = 0; i < g.gl_pathc; i++)
				if (unlink(g.gl_pathv[i]) == 0)
					mv_log("removed %s, left by an earlier process of our pid",
					       g.gl_pathv[i]);
			globfree(&g);
		}
	}
	mv_host_id(mv->host_id);
	struct stat ns;
	if (stat("/proc/self/ns/pid", &ns) == 0)
		mv->pidns = (uint64_t)ns.st_ino;
	/* Path 1 only if the provider really registers GPU memory: try it. */
	if (mv_gpu_hmem_probe(mv, why, sizeof(why)) == 0)
		mv->hmem = 1;
	mv_log("GPU memory: %s", mv->hmem ? "the provider registers it (FI_HMEM, path 1)" : why);
	ret = mv_topo_place(mv, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "mover: topology: %s\n", why);
		return 1;
	}

	ret = mv_stats_init(mv);
	if (ret) {
		fprintf(stderr, "mover: stats segment: %s\n", strerror(-ret));
		return 1;
	}
	/* Before the shards start: they read their wake FIFO when idle. */
	if (mv_wake_open(mv, why, sizeof(why)))
		mv_log("same-host wake files: %s (idle shards wake by their backoff only)", why);
	uint32_t started = 0;
	for (; started < mv->nshards; started++) {
		struct mv_shard *sh = &mv->shards[started];
		ret = mv_shard_start(sh);
		if (ret) {
			mv_log("shard %u: %s", started, sh->start_msg);
			pthread_join(sh->thread, NULL);
			break;
		}
		mv_stats_shard_info(sh);
		mv_log("shard %u: provider %s, interface %s, NUMA node %d, CPU %d, "
		       "%s progress, iov %zu, tx queue %zu",
		       started, sh->fab.prov, sh->fab.iface, sh->numa, sh->cpu,
		       sh->fab.cq_fd >= 0 ? "fd-wait"
		       : sh->fab.rx_cntr  ? "polled, receive counter"
		                          : "polled",
		       sh->fab.iov_limit, sh->fab.tx_size);
	}
	if (started == mv->nshards) {
		mv_log("mover %016llx: %u shards on %s", (unsigned long long)mv->mover_id,
		       mv->nshards, mv->prov);
		ret = mv->cfg.trace
		          ? mv_trace_start(mv, mv->cfg.trace,
		                           mv->cfg.trace_hops ? MV_TRACE_HOPS : 0, why, sizeof(why))
		          : 0;
		if (ret)
			mv_log("--trace: %s", why);
		else
			ret = mv_control_run(mv);
	} else {
		/* Stop the shards that did start. */
		uint32_t n = mv->nshards;
		mv->nshards = started;
		mv_call_all(mv, MV_CMD_STOP, NULL, why, sizeof(why));
		mv->nshards = n;
		ret = -1;
	}
	for (uint32_t s = 0; s < started; s++)
		pthread_join(mv->shards[s].thread, NULL);
	mv_wake_close(mv);
	mv_topo_close(mv);
	mv_stats_stop(mv);
	for (uint32_t i = 0; i < MV_MAX_REGIONS; i++) {
		struct mv_region *r = atomic_load(&mv->regions[i]);
		if (r) {
			munmap(r->map, r->map_len);
			free(r);
		}
	}
	mv_region_reap(mv, 1);
	for (uint32_t i = 0; i < MV_MAX_PEERS; i++) {
		if (mv->peers[i] && mv->peers[i]->pidfd >= 0)
			close(mv->peers[i]->pidfd);
		if (mv->peers[i])
			mv_wake_peer_close(mv->peers[i]);
		free(mv->peers[i]);
	}
	for (uint32_t s = 0; s < mv->nshards; s++)
		close(mv->shards[s].efd);
	close(mv->efd);
	free(mv->shards);
	free(mv);
	mv_log("stopped");
	return ret ? 1 : 0;
}
