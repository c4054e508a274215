/* SPDX-License-Identifier: MIT */
/*
 * mover: the daemon. Takes its settings (config.c), finds the NICs of the best
 * provider, places one shard per NIC (or --shards N) on a core near it,
 * starts the shard threads, logs one line per shard, and serves the control
 * socket until SIGTERM, when it drains what clients committed and exits.
 */
#include "cluster.h"
#include "mover.h"
#include "mv_host.h"
#include "mv_sock.h"

#include <fcntl.h>
#include <glob.h>
#include <stdalign.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_errno.h>

/* A failure before the shards started: what was set up goes. */
static int fail_early(struct mover *mv)
{
	mv_topo_close(mv); /* where placed: the CPUs are free for others */
	if (mv->shards)
		for (uint32_t s = 0; s < mv->nshards; s++)
			if (mv->shards[s].efd > 0)
				close(mv->shards[s].efd);
	if (mv->efd > 0)
		close(mv->efd);
	free(mv->shards);
	mv_config_free(&mv->cfg);
	free(mv);
	mv_log_close();
	return 1;
}

int main(int argc, char **argv)
{
	struct mover *mv = calloc(1, sizeof(*mv));
	char why[MV_ERRLEN] = "", cwhy[300] = "";
	char names[MV_MAX_SHARDS][64], pci[MV_MAX_SHARDS][32];
	int ret, nnic;

	if (!mv)
		return 1;
	mv->cpus_fd = -1;
	/* Settings: config.c (command line, config file, environment). */
	ret = mv_config_load(&mv->cfg, argc, argv, cwhy, sizeof(cwhy));
	if (ret != MV_CONFIG_RUN) {
		if (ret)
			fprintf(stderr, "mover: %s\n", cwhy);
		mv_config_free(&mv->cfg);
		free(mv);
		return ret;
	}
	if (mv_access_init(mv, cwhy, sizeof(cwhy))) {
		fprintf(stderr, "mover: %s\n", cwhy);
		mv_config_free(&mv->cfg);
		free(mv);
		return MV_EX_CONFIG;
	}
	/* Before any thread starts and before libfabric reads its settings. */
	mv_fabric_env();
	mv_log_level(mv->cfg.log_level);
	if (mv->cfg.log && mv_log_file(mv->cfg.log, cwhy, sizeof(cwhy))) {
		fprintf(stderr, "mover: --log: %s\n", cwhy);
		mv_config_free(&mv->cfg);
		free(mv);
		return MV_EX_CONFIG;
	}

	/* Signals go to the control thread's signalfd, never to a shard. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGPIPE);
	sigaddset(&sigs, SIGHUP); /* the log's thread takes it: reopen */
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	if (getrandom(&mv->mover_id, sizeof(mv->mover_id), 0) != sizeof(mv->mover_id))
		mv->mover_id = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid();
	srandom((unsigned)(mv->mover_id ^ (mv->mover_id >> 32)));
	mv_log_id(mv->mover_id);
	mv_log_hup_start();
	mv_log("mover %s (wire protocol %u) starting: provider %s%s%s, config %s", MVC_VERSION,
	       MV_WIRE_VERSION, mv->cfg.provider, mv->cfg.iface ? ", interface " : "",
	       mv->cfg.iface ? mv->cfg.iface : "", mv->cfg.file ? mv->cfg.file : "none");

	nnic = mv_fabric_list(mv->cfg.provider, mv->cfg.iface, names, pci, MV_MAX_SHARDS, mv->prov,
	                      sizeof(mv->prov));
	if (nnic <= 0) {
		mv_error("no usable provider for --provider %s%s%s: %s; it needs RDM endpoints "
		         "with RMA writes and remote CQ data ('fi_info -l' lists what this host "
		         "has)",
		         mv->cfg.provider, mv->cfg.iface ? " --iface " : "",
		         mv->cfg.iface ? mv->cfg.iface : "", fi_strerror(-nnic));
		return fail_early(mv);
	}
	mv->nshards = mv->cfg.nshards ? (uint32_t)mv->cfg.nshards : (uint32_t)nnic;
	mv->shards = aligned_alloc(alignof(struct mv_shard), mv->nshards * sizeof(*mv->shards));
	if (mv->shards)
		memset(mv->shards, 0, mv->nshards * sizeof(*mv->shards));
	mv->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!mv->shards || mv->efd < 0)
		return fail_early(mv);
	for (uint32_t s = 0; s < mv->nshards; s++) {
		struct mv_shard *sh = &mv->shards[s];
		sh->id = (int)s;
		sh->mv = mv;
		snprintf(sh->iface, sizeof(sh->iface), "%s", names[s % (uint32_t)nnic]);
		snprintf(sh->pci, sizeof(sh->pci), "%s", pci[s % (uint32_t)nnic]);
		sh->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		sh->wake_fd = -1;
		if (sh->efd < 0)
			return fail_early(mv);
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
	/* Each host region keeps its client's memfd for same-host peers
	 * (samehost.c): as many fds as the hard limit allows. */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	struct stat ns;
	if (stat("/proc/self/ns/pid", &ns) == 0)
		mv->pidns = (uint64_t)ns.st_ino;
	/* Path 1 only if the provider really registers GPU memory: try it. */
	if (mv_gpu_hmem_probe(mv, why, sizeof(why)) == 0)
		mv->hmem = 1;
	mv_log("GPU memory: %s",
	       mv->hmem ? mv->hmem_dmabuf ? "the provider registers it by dma-buf (FI_HMEM, path 1)"
	                                  : "the provider registers it (FI_HMEM, path 1)"
	                : why);
	/* Which path each kind of GPU write takes: measured, unless forced. */
	if (mv_gpu_path_parse(mv->cfg.gpu_path) == -1) /* auto; a bad value fails below */
		mv_gpu_calibrate(mv);
	ret = mv_gpu_paths_choose(mv, why, sizeof(why));
	if (ret) {
		mv_error("%s", why);
		return fail_early(mv);
	}
	mv_gpu_paths_log(mv);
	ret = mv_topo_place(mv, why, sizeof(why));
	if (ret) {
		mv_error("topology: %s", why);
		return fail_early(mv);
	}

	ret = mv_stats_init(mv);
	if (ret) {
		mv_error("stats segment: %s", strerror(-ret));
		return fail_early(mv);
	}
	/* Before the shards start: they read their wake FIFO when idle. */
	if (mv_wake_open(mv, why, sizeof(why)))
		mv_log("same-host wake files: %s (idle shards wake by their backoff only)", why);
	uint32_t started = 0;
	for (; started < mv->nshards; started++) {
		struct mv_shard *sh = &mv->shards[started];
		ret = mv_shard_start(sh);
		if (ret) {
			mv_error("shard %u: %s", started, sh->start_msg);
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
		if (sh->fab.small_err)
			mv_warn("shard %u: no second endpoint for small writes on %s (%s): they "
			        "share the connection of large ones and may wait behind a flood "
			        "(this build's libfabric or its limits on endpoints)",
			        started, sh->fab.prov, fi_strerror(-sh->fab.small_err));
	}
	if (started == mv->nshards) {
		mv_log("mover %016llx: %u shards on %s", (unsigned long long)mv->mover_id,
		       mv->nshards, mv->prov);
		ret = 0;
		if (mv->cfg.trace) {
			/* The operator's own path, so the mover opens it itself. */
			int tfd =
			    open(mv->cfg.trace, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			if (tfd < 0) {
				ret = -errno;
				snprintf(why, sizeof(why), "cannot create %s: %s", mv->cfg.trace,
				         strerror(errno));
			} else {
				ret = mv_trace_start(mv, tfd, mv->cfg.trace,
				                     mv->cfg.trace_hops ? MV_TRACE_HOPS : 0, why,
				                     sizeof(why));
			}
		}
		if (ret)
			mv_error("--trace: %s", why);
		else if ((ret = mv_names_init(mv)))
			mv_error("names: %s", strerror(-ret));
		else if (mv->cfg.etcd && (ret = mv_cluster_start(mv, cwhy, sizeof(cwhy))))
			mv_error("--etcd: %s", cwhy);
		else if (!mv->cfg.etcd && mv->cfg.cluster)
			mv_warn("--cluster %s without --etcd: joining no cluster", mv->cfg.cluster);
		if (!ret) {
			ret = mv_control_run(mv);
		} else {
			/* No control loop to stop them: the shards stop here. */
			mv_call_all(mv, MV_CMD_STOP, NULL, why, sizeof(why));
			atomic_store(&mv->shards_stopped, 1);
		}
		mv_cluster_stop(mv);
		mv_names_free(mv);
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
			if (r->host_fd >= 0)
				close(r->host_fd);
			munmap(r->map, r->map_len);
			free(r);
		}
	}
	mv_region_reap(mv, 1);
	mv_host_close_all(mv);
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
	mv_config_free(&mv->cfg);
	free(mv);
	mv_log("stopped");
	mv_log_close();
	return ret ? 1 : 0;
}
