/* SPDX-License-Identifier: MIT */
/*
 * Topology: which cores sit near each shard's NIC. hwloc finds the NIC's
 * PCI device (or the OS network device of its interface) and the NUMA node
 * above it; each shard is pinned to its own physical core on that node (one
 * hardware thread of it: two busy-polling shards on the two threads of one
 * core would share its pipeline, whatever the CPU numbering), never core 0
 * when another is free (the control thread and the kernel live there).
 * --cpus overrides the choice. Cores another mover of this host pinned
 * shards to count as taken (cpus_held.c).
 */
#include "mover.h"

#include <hwloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hwloc_obj_t nic_object(hwloc_topology_t t, const struct mv_shard *f)
{
	hwloc_obj_t o = NULL;

	if (f->pci[0])
		o = hwloc_get_pcidev_by_busidstring(t, f->pci);
	if (!o) {
		/* An OS network device named like the interface (eth0, veth0). */
		while ((o = hwloc_get_next_osdev(t, o)))
			if (o->name && !strcmp(o->name, f->iface))
				break;
	}
	return o;
}

static int parse_cpus(const char *list, int *cpus, int max)
{
	int n = 0;
	char *dup = strdup(list), *save = NULL;

	for (char *tok = strtok_r(dup, ",", &save); tok && n < max;
	     tok = strtok_r(NULL, ",", &save))
		cpus[n++] = atoi(tok);
	free(dup);
	return n;
}

/*
 * The PU (hardware thread) for the next shard within near: of the least
 * used core, its least used PU, where a core's use is the shards on any of
 * its PUs and the core holding PU 0 counts half a shard more while others
 * exist (the control thread and the kernel live there). So shards spread
 * over physical cores first and share one only once each core near the NIC
 * has a shard. While another mover of this host pins shards (others), core
 * 0 counts a shard and a half: on a machine of few cores its clients and
 * both movers' control threads need that core more than two shards need
 * one each (on 2 cores, 3,000 small batches beside a flood took 2.6 s with
 * the two movers' shards sharing core 1 and 10-13 s with one on core 0).
 * -1 when near holds no PU.
 */
static int least_used_pu(hwloc_topology_t t, hwloc_const_cpuset_t near, const int *used, int ncpu,
                         int others)
{
	int best = -1, bcost = 1 << 30;
	hwloc_obj_t pu = NULL;

	while ((pu = hwloc_get_next_obj_inside_cpuset_by_type(t, near, HWLOC_OBJ_PU, pu))) {
		int c = (int)pu->os_index;
		if (c >= 1024)
			continue;
		/* Its core: the PU itself where hwloc knows of no core above it. */
		hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu);
		hwloc_const_cpuset_t set = core && core->cpuset ? core->cpuset : pu->cpuset;
		int core_used = 0, zero = 0;
		int i;
		hwloc_bitmap_foreach_begin(i, set)
		{
			if (i < 1024)
				core_used += used[i];
			zero |= i == 0;
		}
		hwloc_bitmap_foreach_end();
		/* In units of half a shard: the core's shards, core 0's half, then
		 * the PU's own shards to choose within the core. */
		int cost = (core_used * 2 + (zero && ncpu > 1) * (others ? 3 : 1)) * 4096 +
		           used[c] * 2 + (c == 0);
		if (cost < bcost) {
			bcost = cost;
			best = c;
		}
	}
	return best;
}

/* Places shard s near its NIC on the least used core there (least_used_pu). */
static void place_shard(hwloc_topology_t t, struct mv_shard *sh, int *used, int ncpu, uint32_t s,
                        int others)
{
	hwloc_obj_t nic = nic_object(t, sh);
	hwloc_const_cpuset_t near = hwloc_topology_get_topology_cpuset(t);
	hwloc_obj_t anc = nic ? hwloc_get_non_io_ancestor_obj(t, nic) : NULL;

	if (anc && anc->cpuset && !hwloc_bitmap_iszero(anc->cpuset))
		near = anc->cpuset;
	sh->numa = -1;
	hwloc_obj_t numa = NULL;
	while ((numa = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, numa)))
		if (hwloc_bitmap_intersects(numa->cpuset, near)) {
			sh->numa = (int)numa->os_index;
			break;
		}

	int best = least_used_pu(t, near, used, ncpu, others);
	sh->cpu = best < 0 ? (int)(s % (uint32_t)ncpu) : best;
	used[sh->cpu]++;
}

/*
 * Loads the machine's topology once, with its important I/O devices, and
 * keeps it for GPU registrations (mv_topo_gpu_mask): loading takes
 * milliseconds. Main thread; mv_topo_close() frees it.
 */
int mv_topo_place(struct mover *mv, char *why, size_t whylen)
{
	hwloc_topology_t t;
	int ncpu, used[1024] = {0};

	if (hwloc_topology_init(&t) < 0)
		return -ENOMEM;
	hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	if (hwloc_topology_load(t) < 0) {
		hwloc_topology_destroy(t);
		snprintf(why, whylen, "hwloc could not load the topology");
		return -EIO;
	}
	mv->topo = t;
	ncpu = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
	if (ncpu > 1024)
		ncpu = 1024;

	if (mv->cfg.cpus) {
		int cpus[MV_MAX_SHARDS];
		int n = parse_cpus(mv->cfg.cpus, cpus, MV_MAX_SHARDS);

		if (n == 0) {
			snprintf(why, whylen, "--cpus '%s' names no CPU", mv->cfg.cpus);
			return -EINVAL;
		}
		for (uint32_t s = 0; s < mv->nshards; s++) {
			mv->shards[s].cpu = cpus[s % n];
			mv->shards[s].numa = -1;
		}
	}
	/* Another mover's shards count as ours, where the machine is ours
	 * to pick from (hwloc's synthetic topologies are not); --cpus only
	 * tells the others. */
	int others = 0, here = hwloc_topology_is_thissystem(t);
	if (here)
		others = mv_cpus_held_read(used, 1024); /* OS numbers, not counts */
	if (!mv->cfg.cpus)
		for (uint32_t s = 0; s < mv->nshards; s++)
			place_shard(t, &mv->shards[s], used, ncpu, s, others);
	if (here) {
		if (others && !mv->cfg.cpus)
			mv_log("%d other mover%s on this host pin%s shards: this one's keep off "
			       "their cores while others but core 0 are free",
			       others, others > 1 ? "s" : "", others > 1 ? "" : "s");
		mv_cpus_held_publish(mv);
	}
	return 0;
}

void mv_topo_close(struct mover *mv)
{
	mv_cpus_held_drop(mv);
	if (mv->topo)
		hwloc_topology_destroy(mv->topo);
	mv->topo = NULL;
}

/*
 * The shards near a GPU: those whose NIC shares the GPU's closest non-I/O
 * ancestor (the same PCIe root, socket or NUMA node), else those pinned to a
 * core there. 0 (any shard) when hwloc cannot place the GPU.
 */
uint64_t mv_topo_gpu_mask(struct mover *mv, const char *busid)
{
	hwloc_topology_t t = mv->topo;
	uint64_t mask = 0;

	if (!t)
		return 0;
	hwloc_obj_t gpu = hwloc_get_pcidev_by_busidstring(t, busid);
	hwloc_obj_t anc = gpu ? hwloc_get_non_io_ancestor_obj(t, gpu) : NULL;
	if (anc && anc->cpuset) {
		for (uint32_t s = 0; s < mv->nshards && s < 64; s++) {
			hwloc_obj_t nic = nic_object(t, &mv->shards[s]);
			hwloc_obj_t na = nic ? hwloc_get_non_io_ancestor_obj(t, nic) : NULL;
			if (na && na->cpuset) {
				if (hwloc_bitmap_intersects(na->cpuset, anc->cpuset))
					mask |= 1ull << s;
			} else if (mv->shards[s].cpu >= 0 &&
			           hwloc_bitmap_isset(anc->cpuset, (unsigned)mv->shards[s].cpu)) {
				mask |= 1ull << s;
			}
		}
	}
	return mask;
}
