/* SPDX-License-Identifier: MIT */
/*
 * GPU memory in the mover: what gpu.c (CUDA: regions, same-host peers'
 * regions, the shards' streams and bounce pools), gpu_path.c (paths 2 and 3
 * of a write) and gpu_calib.c (which path each kind of write takes, by
 * measurement) keep and offer. Included by mover.h, after MV_MAX_GPUS.
 */
#ifndef MV_GPU_H
#define MV_GPU_H

#include <stddef.h>
#include <stdint.h>

struct fid_mr;
struct mover;
struct mv_shard;
struct mv_region;
struct mv_import;
struct mv_gpu_desc;
struct mv_region_blob;

/* GPU memory opened in this process. */
struct mv_gpu_map {
	uint32_t kind; /* MV_GPU_IPC or MV_GPU_VMM */
	int dev;       /* CUDA ordinal in the mover */
	uint64_t base; /* of the allocation, as mapped here */
	uint64_t size;
	uint64_t dptr; /* the region's start */
	/* A dma-buf of the region's pages, for fabric registration by fd
	 * (FI_MR_DMABUF) where driver and provider offer it. */
	int has_dmabuf;
	int dmabuf_fd;
	uint64_t dmabuf_off; /* of dptr within the dma-buf */
};

/* What the paths of GPU memory are made of here, measured at start (GB/s). */
struct mv_gpu_rates {
	int gpu;                               /* a CUDA device is there */
	int measured;                          /* all of the below that can be, were */
	double fab_hh, fab_gg, fab_hg, fab_gh; /* the fabric writing to itself, src->dst */
	double dtoh, htod, dtod;               /* CUDA copies */
	char why[160];                         /* when not measured, why not */
};

/* The path one kind of write takes (gpu_calib.c), and why. */
struct mv_gpu_choice {
	uint8_t path; /* MV_PATH_* */
	double rate;  /* GB/s it was expected to reach, 0 unmeasured */
	char why[120];
};

/* A same-host peer's GPU region, opened for CUDA copies (path 2). */
struct mv_gpu_remote {
	struct mv_gpu_remote *next;
	uint64_t mover_id;
	uint32_t region;
	int refs;
	struct mv_gpu_map map;
};

/* A shard's CUDA resources: created on its thread on first use. */
struct mv_gpu_shard {
	void *stream[MV_MAX_GPUS];
	void *bounce; /* MV_BOUNCE_CHUNKS x MV_CHUNK pinned bytes */
	struct fid_mr *bounce_mr;
	void *bounce_desc;
	uint32_t free_chunks;           /* bit i: chunk i is free */
	void *ev_free[MV_MAX_GPUS][64]; /* finished events, for reuse */
	uint32_t nev_free[MV_MAX_GPUS];
};

/* Bounce chunks held now by staged writes (each until its write completes). */
static inline uint32_t mv_chunks_held(const struct mv_gpu_shard *g)
{
	return g->bounce ? MV_BOUNCE_CHUNKS - (uint32_t)__builtin_popcount(g->free_chunks) : 0;
}

/* gpu.c */
int mv_gpu_region_open(struct mover *mv, struct mv_region *r, const struct mv_gpu_desc *g, int fd,
                       char *why, size_t whylen);
void mv_gpu_region_close(struct mover *mv, struct mv_region *r);
int mv_gpu_import_open(struct mover *mv, struct mv_import *imp, const struct mv_region_blob *b,
                       char *why, size_t whylen);
void mv_gpu_import_close(struct mover *mv, struct mv_import *imp);
int mv_gpu_shard_ready(struct mv_shard *s, int dev, char *why, size_t whylen);
int mv_gpu_event(struct mv_shard *s, int dev, void **ev, char *why, size_t whylen);
int mv_gpu_event_done(struct mv_shard *s, int dev, void *ev, char *why, size_t whylen);
int mv_gpu_copy(struct mv_shard *s, int dev, uint64_t dst, int dst_dev, uint64_t src, int src_dev,
                uint64_t len, char *why, size_t whylen);
void mv_gpu_shard_close(struct mv_shard *s);
int mv_gpu_sync(struct mv_shard *s, int dev, char *why, size_t whylen);
void *mv_gpu_pinned(struct mv_shard *s, size_t len, char *why, size_t whylen);
void mv_gpu_unpin(void *p);
#define MV_GPU_EV_DONE ((void *)1) /* a group whose stream was waited for */
int mv_gpu_dev0(struct mover *mv, int *dev_out, char *why, size_t whylen);
int mv_gpu_hmem_probe(struct mover *mv, char *why, size_t whylen);

/* gpu_calib.c */
int mv_gpu_calibrate(struct mover *mv);
int mv_gpu_paths_choose(struct mover *mv, char *why, size_t whylen);
void mv_gpu_paths_log(struct mover *mv);
void mv_gpu_path_tell(struct mv_shard *s, const struct mv_region *src, struct mv_import *dst,
                      uint8_t path, const struct mv_gpu_choice *c);
int mv_gpu_path_parse(const char *v);

#endif
