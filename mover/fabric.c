/* SPDX-License-Identifier: MIT */
/*
 * The libfabric wrapper: choosing a provider and interface, opening one
 * shard's fabric, domain, endpoint, CQ and AV, registering memory, and
 * inserting peer addresses. Offers every mr_mode real NICs want and records
 * what the provider kept, so callers do address arithmetic by its rules.
 */
#include "mover.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define MV_FI_VERSION FI_VERSION(1, 17)

static const char *prov_filter(const char *prov)
{
	if (!prov || !strcmp(prov, "auto"))
		return NULL;
	if (!strcmp(prov, "tcp"))
		return "tcp;ofi_rxm";
	if (!strcmp(prov, "verbs"))
		return "verbs;ofi_rxm";
	return prov;
}

static struct fi_info *make_hints(const char *prov, const char *iface, int hmem)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		return NULL;
	/* Messages carry writes into GPU memory the fabric cannot register
	 * (receiver-side staging); everything else is RMA. */
	h->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_MSG | FI_SEND | FI_RECV;
	h->ep_attr->type = FI_EP_RDM;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	/* Providers answer an FI_HMEM request only from applications that
	 * register every buffer they pass (FI_MR_HMEM); shm and efa both insist. */
	if (hmem) {
		h->caps |= FI_HMEM;
		h->domain_attr->mr_mode |= FI_MR_HMEM;
	}
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	if (prov_filter(prov))
		h->fabric_attr->prov_name = strdup(prov_filter(prov));
	if (iface)
		h->domain_attr->name = strdup(iface);
	return h;
}

static int prov_rank(const char *name)
{
	if (!strncmp(name, "efa", 3))
		return 0;
	if (!strncmp(name, "verbs", 5))
		return 1;
	if (!strncmp(name, "tcp", 3))
		return 2;
	if (!strncmp(name, "shm", 3))
		return 4;
	return 3;
}

/* Layered providers ignore the domain-name hint, so match it here too. */
static int named(const struct fi_info *i, const char *iface)
{
	return !iface || !strcmp(i->domain_attr->name, iface);
}

static int usable(const struct fi_info *i)
{
	/* Remote CQ data carries immediates; IPv6 tcp doubles every entry. */
	return i->domain_attr->cq_data_size >= 8 &&
	       (i->addr_format != FI_SOCKADDR_IN6 || strncmp(i->fabric_attr->prov_name, "tcp", 3));
}

/* Every usable (provider, interface) of the best provider, deduplicated. */
int mv_fabric_list(const char *prov, const char *iface, char names[][64], char pci[][32], int max,
                   char *chosen, size_t chosen_len)
{
	struct fi_info *h = make_hints(prov, iface, 0), *info = NULL, *i;
	int n = 0, best = 99, ret;

	if (!h)
		return -ENOMEM;
	ret = fi_getinfo(MV_FI_VERSION, NULL, NULL, 0, h, &info);
	fi_freeinfo(h);
	if (ret)
		return ret;
	for (i = info; i; i = i->next)
		if (usable(i) && named(i, iface) && prov_rank(i->fabric_attr->prov_name) < best)
			best = prov_rank(i->fabric_attr->prov_name);
	for (i = info; i && n < max; i = i->next) {
		if (!usable(i) || !named(i, iface) || prov_rank(i->fabric_attr->prov_name) != best)
			continue;
		/* Loopback is a NIC only when asked for by name. */
		if (!iface && !strcmp(i->domain_attr->name, "lo"))
			continue;
		int dup = 0;
		for (int k = 0; k < n; k++)
			dup |= !strcmp(names[k], i->domain_attr->name);
		if (dup)
			continue;
		snprintf(names[n], 64, "%s", i->domain_attr->name);
		pci[n][0] = 0;
		if (i->nic && i->nic->bus_attr && i->nic->bus_attr->bus_type == FI_BUS_PCI) {
			struct fi_pci_attr *p = &i->nic->bus_attr->attr.pci;
			snprintf(pci[n], 32, "%04x:%02x:%02x.%x", p->domain_id, p->bus_id,
			         p->device_id, p->function_id);
		}
		snprintf(chosen, chosen_len, "%s", i->fabric_attr->prov_name);
		n++;
	}
	fi_freeinfo(info);
	return n ? n : -FI_ENODATA;
}

/*
 * The small-write endpoint. rxm over tcp gives each pair of endpoints one
 * connection, a TCP byte stream: a 4 KiB write posted after a flood's
 * pieces waits in the kernel's socket buffer until the fair share's bytes
 * in flight (post.c) ahead of it are sent, and its delivery-complete
 * follows them. A second endpoint makes a connection of its own to each
 * peer, which the small writes and immediates take: nothing of a flood
 * is queued ahead of them there. It shares the AV (rxm keeps a connection
 * per endpoint and address, so an insert serves both) and only transmits:
 * its address is never published, and a target takes writes and remote
 * CQ data from any connection to its one endpoint. It has a CQ of its
 * own: reading a CQ progresses every endpoint bound to it, and the shard
 * reads its CQ on every turn, so on a shared CQ every read would progress
 * an endpoint that is idle nearly always (receivers' are); the shard reads
 * cq_small only while it has ops posted on ep_small (complete.c).
 *
 * Only tcp: shm copies a write inside fi_writemsg on the shard's own
 * thread, into a receiver whose queue lock is per receiver endpoint, so a
 * second sender endpoint would wait for the same copies and the same
 * lock; verbs would gain a queue pair of its own but is not measured
 * here. Returns 0 or a negative errno; on failure ep_small stays NULL and
 * the shard posts everything on f->ep.
 */
static int open_small(struct mv_fabric *f, struct fi_cq_attr *cqa)
{
	int ret;

	if (strncmp(f->info->fabric_attr->prov_name, "tcp", 3))
		return 0;
	ret = fi_cq_open(f->domain, cqa, &f->cq_small, NULL);
	if (ret) {
		f->cq_small = NULL;
		return ret;
	}
	if (cqa->wait_obj == FI_WAIT_FD &&
	    fi_control(&f->cq_small->fid, FI_GETWAIT, &f->cq_small_fd))
		f->cq_small_fd = -1;
	ret = fi_endpoint(f->domain, f->info, &f->ep_small, NULL);
	if (ret)
		goto err_cq;
	ret = fi_ep_bind(f->ep_small, &f->cq_small->fid, FI_TRANSMIT | FI_RECV);
	if (!ret)
		ret = fi_ep_bind(f->ep_small, &f->av->fid, 0);
	if (!ret)
		ret = fi_enable(f->ep_small);
	if (!ret)
		return 0;
	fi_close(&f->ep_small->fid);
	f->ep_small = NULL;
err_cq:
	fi_close(&f->cq_small->fid);
	f->cq_small = NULL;
	f->cq_small_fd = -1;
	return ret;
}

/*
 * rxm (tcp;ofi_rxm, verbs;ofi_rxm) gives each endpoint a shared receive
 * queue of FI_OFI_RXM_MSG_RX_SIZE preposted buffers, 4,096 of 16 KiB by
 * default: 64 MiB filled in at fi_enable, twice a tcp shard (its small-write
 * endpoint has one too). A shard receives few messages (landing messages,
 * LAND_WINDOW in flight per peer shard; its writes and immediates take
 * none), so 256 do: a tcp mover then starts in 0.74 s instead of 1.58 s
 * and holds 94 MB instead of 300 MB with 2 shards (the 2-core development
 * machine); test_gpu's landing messages over tcp pass with them.
 */
void mv_fabric_env(void)
{
	setenv("FI_OFI_RXM_MSG_RX_SIZE", "256", 0);
}

int mv_fabric_open(struct mv_fabric *f, const char *prov, const char *iface, int hmem)
{
	/* hmem: the probe found the provider registers GPU memory. */
	struct fi_info *h = make_hints(prov, iface, hmem), *info = NULL;
	int rma_event = 0;

	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_FD};
	struct fi_av_attr ava = {.type = FI_AV_TABLE};
	int ret;

	memset(f, 0, sizeof(*f));
	f->cq_fd = f->cq_small_fd = -1;
	if (!h)
		return -ENOMEM;
	/* Writes a shard receives make no CQ entry, yet need its progress: ask
	 * for a remote-write counter wherever it is offered (shm has one; tcp
	 * refuses it and relies on its CQ wait fd), so receiving counts as work
	 * and a receiving shard does not back off while data streams in. */
	{
		h->caps |= FI_RMA_EVENT;
		ret = fi_getinfo(MV_FI_VERSION, NULL, NULL, 0, h, &info);
		if (ret)
			h->caps &= ~FI_RMA_EVENT;
		else
			rma_event = 1;
	}
	if (!rma_event)
		ret = fi_getinfo(MV_FI_VERSION, NULL, NULL, 0, h, &info);
	fi_freeinfo(h);
	if (ret)
		return ret;
	struct fi_info *pick = info;
	while (pick && !(usable(pick) && named(pick, iface)))
		pick = pick->next;
	if (!pick) {
		fi_freeinfo(info);
		return -FI_ENODATA;
	}
	f->info = fi_dupinfo(pick);
	fi_freeinfo(info);
	if (!f->info)
		return -ENOMEM;
	info = f->info;

	ret = fi_fabric(info->fabric_attr, &f->fabric, NULL);
	if (ret)
		goto err_info;
	ret = fi_domain(f->fabric, info, &f->domain, NULL);
	if (ret)
		goto err_fabric;
	cqa.size = info->tx_attr->size * 2;
	ret = fi_cq_open(f->domain, &cqa, &f->cq, NULL);
	if (ret == -FI_ENOSYS || ret == -FI_EINVAL) {
		/* shm has no wait object: the shard polls with a backoff instead. */
		cqa.wait_obj = FI_WAIT_NONE;
		ret = fi_cq_open(f->domain, &cqa, &f->cq, NULL);
	}
	if (ret)
		goto err_domain;
	if (cqa.wait_obj == FI_WAIT_FD && fi_control(&f->cq->fid, FI_GETWAIT, &f->cq_fd))
		f->cq_fd = -1;
	ret = fi_av_open(f->domain, &ava, &f->av, NULL);
	if (ret)
		goto err_cq;
	ret = fi_endpoint(f->domain, info, &f->ep, NULL);
	if (ret)
		goto err_av;
	ret = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!ret)
		ret = fi_ep_bind(f->ep, &f->av->fid, 0);
	if (!ret && rma_event && (info->caps & FI_RMA_EVENT)) {
		struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE};
		if (fi_cntr_open(f->domain, &ca, &f->rx_cntr, NULL) == 0 &&
		    fi_ep_bind(f->ep, &f->rx_cntr->fid, FI_REMOTE_WRITE) != 0) {
			fi_close(&f->rx_cntr->fid);
			f->rx_cntr = NULL;
		}
	}
	if (!ret)
		ret = fi_enable(f->ep);
	if (ret)
		goto err_ep;
	f->addrlen = sizeof(f->addr);
	ret = fi_getname(&f->ep->fid, f->addr, &f->addrlen);
	if (ret)
		goto err_ep;
	f->small_err = open_small(f, &cqa); /* the shard goes on without it: main.c says so */

	snprintf(f->prov, sizeof(f->prov), "%s", info->fabric_attr->prov_name);
	int mm = info->domain_attr->mr_mode;
	f->virt_addr = !!(mm & FI_MR_VIRT_ADDR);
	f->iov_limit = info->tx_attr->iov_limit;
	if (info->tx_attr->rma_iov_limit < f->iov_limit)
		f->iov_limit = info->tx_attr->rma_iov_limit;
	if (f->iov_limit > MV_FAB_IOV_MAX)
		f->iov_limit = MV_FAB_IOV_MAX;
	if (f->iov_limit == 0)
		f->iov_limit = 1;
	f->rx_copies = !strncmp(f->prov, "shm", 3);
	f->byte_stream = !strncmp(f->prov, "tcp", 3);
	/* shm 1.17 never completes writes sent FI_DELIVERY_COMPLETE (its
	 * receiver-side CMA path stalls), so there a write completes on
	 * transmit, and batches with an immediate stay on one endpoint pair
	 * whose FIFO command queue orders the doorbell after the data. */
	f->dc_flag = f->rx_copies ? 0 : FI_DELIVERY_COMPLETE;
	f->tx_size = info->tx_attr->size;
	f->key_size = info->domain_attr->mr_key_size;
	snprintf(f->iface, sizeof(f->iface), "%s", info->domain_attr->name);
	return 0;

err_ep:
	fi_close(&f->ep->fid);
	if (f->rx_cntr)
		fi_close(&f->rx_cntr->fid);
err_av:
	fi_close(&f->av->fid);
err_cq:
	fi_close(&f->cq->fid);
err_domain:
	fi_close(&f->domain->fid);
err_fabric:
	fi_close(&f->fabric->fid);
err_info:
	fi_freeinfo(f->info);
	memset(f, 0, sizeof(*f));
	f->cq_fd = f->cq_small_fd = -1;
	return ret;
}

void mv_fabric_close(struct mv_fabric *f)
{
	if (f->ep_small)
		fi_close(&f->ep_small->fid);
	if (f->cq_small)
		fi_close(&f->cq_small->fid);
	if (f->ep)
		fi_close(&f->ep->fid);
	if (f->rx_cntr)
		fi_close(&f->rx_cntr->fid);
	if (f->av)
		fi_close(&f->av->fid);
	if (f->cq)
		fi_close(&f->cq->fid);
	if (f->domain)
		fi_close(&f->domain->fid);
	if (f->fabric)
		fi_close(&f->fabric->fid);
	if (f->info)
		fi_freeinfo(f->info);
	memset(f, 0, sizeof(*f));
	f->cq_fd = f->cq_small_fd = -1;
}

int mv_fabric_reg(struct mv_fabric *f, void *buf, size_t len, uint64_t key, struct fid_mr **mr,
                  void **desc, uint64_t *out_key, char *why, size_t whylen)
{
	int ret = fi_mr_reg(f->domain, buf, len, FI_REMOTE_WRITE | FI_WRITE, 0, key, 0, mr, NULL);

	if (ret) {
		snprintf(why, whylen, "fi_mr_reg of %zu bytes on %s: %s", len, f->prov,
		         fi_strerror(-ret));
		return ret;
	}
	*desc = fi_mr_desc(*mr);
	*out_key = fi_mr_key(*mr);
	return 0;
}

#ifdef MV_HAVE_CUDA
/*
 * Registers GPU memory with the provider: by dma-buf fd first where the
 * headers, the driver and the provider all offer it (how current efa and
 * verbs stacks pin GPU pages for the NIC), else by address with the CUDA
 * interface named. *by_dmabuf says which one took.
 */
int mv_fabric_reg_hmem(struct mv_fabric *f, const struct mv_gpu_map *m, size_t len, uint64_t key,
                       struct fid_mr **mr, void **desc, uint64_t *out_key, int *by_dmabuf,
                       char *why, size_t whylen)
{
	struct iovec iov = {(void *)(uintptr_t)m->dptr, len};
	struct fi_mr_attr a = {.mr_iov = &iov,
	                       .iov_count = 1,
	                       .access = FI_REMOTE_WRITE | FI_WRITE,
	                       .requested_key = key,
	                       .iface = FI_HMEM_CUDA};
	int ret = -FI_ENOSYS;

	a.device.cuda = m->dev;
	*by_dmabuf = 0;
#ifdef FI_MR_DMABUF
	if (m->has_dmabuf) {
		struct fi_mr_dmabuf db = {.fd = m->dmabuf_fd,
		                          .offset = m->dmabuf_off,
		                          .len = len,
		                          .base_addr =
		                              (void *)(uintptr_t)(m->dptr - m->dmabuf_off)};
		struct fi_mr_attr d = a;
		d.dmabuf = &db;
		ret = fi_mr_regattr(f->domain, &d, FI_MR_DMABUF, mr);
		if (!ret)
			*by_dmabuf = 1;
	}
#endif
	if (ret)
		ret = fi_mr_regattr(f->domain, &a, 0, mr);
	if (ret) {
		snprintf(why, whylen, "fi_mr_regattr(FI_HMEM_CUDA) of %zu bytes on %s: %s", len,
		         f->prov, fi_strerror(-ret));
		return ret;
	}
	*desc = fi_mr_desc(*mr);
	*out_key = fi_mr_key(*mr);
	return 0;
}

/* Path 1 is real only if a domain opened with FI_HMEM registers GPU memory. */
int mv_fabric_hmem_probe(const char *prov, const char *iface, const struct mv_gpu_map *m,
                         size_t len, int *by_dmabuf, char *why, size_t whylen)
{
	struct fi_info *h = make_hints(prov, iface, 1), *info = NULL;
	struct fid_fabric *fab = NULL;
	struct fid_domain *dom = NULL;
	int ret;

	if (!h)
		return -ENOMEM;
	ret = fi_getinfo(MV_FI_VERSION, NULL, NULL, 0, h, &info);
	fi_freeinfo(h);
	if (ret) {
		snprintf(why, whylen, "%s offers no FI_HMEM: %s", prov, fi_strerror(-ret));
		return ret;
	}
	ret = fi_fabric(info->fabric_attr, &fab, NULL);
	if (!ret)
		ret = fi_domain(fab, info, &dom, NULL);
	if (!ret) {
		struct mv_fabric f = {.domain = dom};
		struct fid_mr *mr;
		void *desc;
		uint64_t key;
		snprintf(f.prov, sizeof(f.prov), "%s", info->fabric_attr->prov_name);
		ret = mv_fabric_reg_hmem(&f, m, len, 1, &mr, &desc, &key, by_dmabuf, why, whylen);
		if (!ret)
			fi_close(&mr->fid);
	} else {
		snprintf(why, whylen, "opening %s with FI_HMEM: %s", prov, fi_strerror(-ret));
	}
	if (dom)
		fi_close(&dom->fid);
	if (fab)
		fi_close(&fab->fid);
	fi_freeinfo(info);
	return ret;
}
#else
int mv_fabric_reg_hmem(struct mv_fabric *f, const struct mv_gpu_map *m, size_t len, uint64_t key,
                       struct fid_mr **mr, void **desc, uint64_t *out_key, int *by_dmabuf,
                       char *why, size_t whylen)
{
	snprintf(why, whylen, "built without CUDA");
	return -ENOTSUP;
}
int mv_fabric_hmem_probe(const char *prov, const char *iface, const struct mv_gpu_map *m,
                         size_t len, int *by_dmabuf, char *why, size_t whylen)
{
	snprintf(why, whylen, "built without CUDA");
	return -ENOTSUP;
}
#endif

int mv_fabric_av_insert(struct mv_fabric *f, const void *addr, fi_addr_t *out)
{
	int n = fi_av_insert(f->av, addr, 1, out, 0, NULL);

	return n == 1 ? 0 : (n < 0 ? n : -FI_EADDRNOTAVAIL);
}

/*
 * libfabric 1.17's shm guards each endpoint's command queue with a pthread
 * spinlock inside the endpoint's shared region, and the endpoint's owner
 * holds it while it copies what peers wrote to it. An owner killed inside
 * that copy leaves the lock held for ever: every writer to it then spins in
 * fi_writemsg and its shard stops. Once the owner's process has exited
 * nobody reads that queue again, so releasing the lock harms no one and lets
 * a spinning shard return (its write then fails as the peer's).
 *
 * The region is found through this process's own mapping of it (made when
 * the address went into the AV; the file may be unlinked by now). Only the
 * layout of 1.17's shm is touched (region version 4: owner pid at byte 4,
 * lock at byte 24), and only in a region that names the exited pid.
 * Returns 1 if a held lock was released, 0 if it was free, -ENOENT if no
 * such region is mapped, -ENOTSUP for a layout this does not know.
 * Main thread; the pid must have exited.
 */
#define SHM_REGION_VERSION 4
#define SHM_OFF_PID        4
#define SHM_OFF_LOCK       24

/* This process's mapping of the shm region an address names (fi_shm://NAME
 * or NAME), or NULL; the file may be unlinked by now. */
void *mv_fabric_shm_mapping(const void *addr, size_t addrlen)
{
	char line[512], want[MV_MAX_ADDRLEN + 16], name[MV_MAX_ADDRLEN + 1];
	void *found = NULL;

	if (addrlen > MV_MAX_ADDRLEN)
		addrlen = MV_MAX_ADDRLEN;
	memcpy(name, addr, addrlen);
	name[addrlen] = 0;
	const char *sep = strstr(name, "://"); /* fi_shm://NAME, fi_ns://NAME */
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return NULL;
	snprintf(want, sizeof(want), "/dev/shm/%s", sep ? sep + 3 : name);
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long start, end, off;
		int path = 0;
		if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %n", &start, &end, &off, &path) < 3 ||
		    !path || off != 0 || end - start < 4096)
			continue;
		char *p = line + path;
		p[strcspn(p, "\n")] = 0;
		size_t n = strlen(want);
		if (!strncmp(p, want, n) && (!p[n] || !strcmp(p + n, " (deleted)")))
			found = (void *)start;
	}
	fclose(f);
	return found;
}

int mv_fabric_shm_release(const void *addr, size_t addrlen, pid_t pid, char *why, size_t whylen)
{
	uint8_t *region;

	if (fi_version() != MV_FI_VERSION) {
		snprintf(why, whylen, "shm of libfabric %u.%u: its region layout is not known here",
		         FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
		return -ENOTSUP;
	}
	region = mv_fabric_shm_mapping(addr, addrlen);
	if (!region) {
		snprintf(why, whylen, "no mapping of shm region '%.*s'", (int)addrlen,
		         (const char *)addr);
		return -ENOENT;
	}
	int owner;
	memcpy(&owner, region + SHM_OFF_PID, sizeof(owner));
	if (region[0] != SHM_REGION_VERSION || owner != pid) {
		snprintf(why, whylen,
		         "shm region '%.*s' is version %u of pid %d, not version %u of pid %d",
		         (int)addrlen, (const char *)addr, region[0], owner, SHM_REGION_VERSION,
		         (int)pid);
		return -ENOTSUP;
	}
	/* A live writer holds the lock for microseconds; the dead owner for
	 * ever. Held through 20 ms of tries, it is the dead owner's. */
	pthread_spinlock_t *lock = (pthread_spinlock_t *)(region + SHM_OFF_LOCK);
	for (int i = 0; i < 20; i++) {
		if (pthread_spin_trylock(lock) == 0) {
			pthread_spin_unlock(lock);
			return 0;
		}
		usleep(1000);
	}
	pthread_spin_unlock(lock);
	return 1;
}
