/* SPDX-License-Identifier: MIT */
/*
 * A shard's fabric objects and the calls of fabric.c that open, register
 * and address them. One struct mv_fabric belongs to one shard thread, which
 * opens it after pinning and is the only thread that posts on it; mvbench's
 * direct rows open their own with the same calls.
 */
#ifndef MV_FABRIC_H
#define MV_FABRIC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "mv_wire.h" /* MV_MAX_ADDRLEN */

struct mv_gpu_map;

/* iovs one fabric write carries at most (shm and tcp here offer 4) */
#define MV_FAB_IOV_MAX 4u

/* One shard's fabric objects: fabric.c. */
struct mv_fabric {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_ep *ep;
	/* A second endpoint that only transmits, for small writes and
	 * immediates (post.c): on the same AV, with a connection of its own to
	 * each peer (tcp), so that they do not queue behind a flood's bytes,
	 * and a CQ of its own (fabric.c says why). NULL where the provider
	 * gains nothing from it (shm). */
	struct fid_ep *ep_small;
	struct fid_cq *cq_small;
	int cq_small_fd; /* its wait fd, or -1 */
	int small_err;   /* why ep_small could not be opened where it is wanted, or 0 */
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_cntr *rx_cntr; /* remote writes received, where offered (shm) */
	int cq_fd;                /* wait fd of the CQ, or -1 when the provider has none */
	int virt_addr;            /* FI_MR_VIRT_ADDR: remote addresses are virtual */
	uint64_t dc_flag;         /* FI_DELIVERY_COMPLETE where the provider honours it, else 0 */
	size_t iov_limit;         /* min(iov_limit, rma_iov_limit, MV_FAB_IOV_MAX) */
	/* The target's progress copies what it receives (shm): a peer busy
	 * receiving can be slow to answer while its link cannot fail. */
	int rx_copies;
	/* Each peer is a byte stream (tcp): the target's progress reads one
	 * readable socket dry before the next, so a small write waits there
	 * behind whatever bytes of other writes are in flight to it (post.c). */
	int byte_stream;
	size_t tx_size;
	size_t key_size;
	uint8_t addr[MV_MAX_ADDRLEN];
	size_t addrlen;
	char prov[32];
	char iface[64];
};

/* Defaults for libfabric's own settings that suit a mover, each only where
 * the environment does not set it already; call before any other fabric
 * call and before any thread starts (setenv). */
void mv_fabric_env(void);
int mv_fabric_open(struct mv_fabric *f, const char *prov, const char *iface, int hmem);
void mv_fabric_close(struct mv_fabric *f);
int mv_fabric_list(const char *prov, const char *iface, char names[][64], char pci[][32], int max,
                   char *chosen, size_t chosen_len);
int mv_fabric_reg(struct mv_fabric *f, void *buf, size_t len, uint64_t key, struct fid_mr **mr,
                  void **desc, uint64_t *out_key, char *why, size_t whylen);
int mv_fabric_av_insert(struct mv_fabric *f, const void *addr, fi_addr_t *out);
int mv_fabric_reg_hmem(struct mv_fabric *f, const struct mv_gpu_map *m, size_t len, uint64_t key,
                       struct fid_mr **mr, void **desc, uint64_t *out_key, int *by_dmabuf,
                       char *why, size_t whylen);
int mv_fabric_shm_release(const void *addr, size_t addrlen, pid_t pid, char *why, size_t whylen);
void *mv_fabric_shm_mapping(const void *addr, size_t addrlen);
int mv_fabric_hmem_probe(const char *prov, const char *iface, const struct mv_gpu_map *m,
                         size_t len, int *by_dmabuf, char *why, size_t whylen);

#endif
