/* SPDX-License-Identifier: MIT */
/*
 * mvstat's view of the stats header's memory facts (mvstat_mem.h): the GPU
 * path table and the host regions by their pages, as text, JSON and
 * Prometheus. Headers of older movers lack either; hdr_size says.
 */
#include "mvstat_mem.h"

#include <inttypes.h>
#include <stdatomic.h>

#include "mv_wire.h"

#define GET(x) atomic_load_explicit(&(x), memory_order_relaxed)

/* The GPU path table, when this mover's header has one and a GPU. */
static int has_gpu_paths(const struct mv_stats_hdr *h)
{
	return h->hdr_size >= MV_STATS_HDR_GPU_END && h->gpu;
}

static const char *const gpu_rate_names[7] = {
    "fabric_host_host", "fabric_gpu_gpu", "fabric_host_gpu", "fabric_gpu_host",
    "cuda_d2h",         "cuda_h2d",       "cuda_d2d"};

static void print_gpu_paths_text(FILE *f, const struct mv_stats_hdr *h)
{
	if (!has_gpu_paths(h))
		return;
	if (h->gpu_measured)
		fprintf(
		    f,
		    "GPU paths, measured at start (GB/s): fabric host->host %.1f, GPU->GPU %.1f, "
		    "host->GPU %.1f, GPU->host %.1f; CUDA D2H %.1f, H2D %.1f, D2D %.1f\n",
		    h->gpu_mbps[0] / 1e3, h->gpu_mbps[1] / 1e3, h->gpu_mbps[2] / 1e3,
		    h->gpu_mbps[3] / 1e3, h->gpu_mbps[4] / 1e3, h->gpu_mbps[5] / 1e3,
		    h->gpu_mbps[6] / 1e3);
	for (int i = 2; i < 8; i++)
		fprintf(f, "GPU path %-4s -> %-4s %-10s %-7s %.*s\n", i & 4 ? "GPU" : "host",
		        i & 2 ? "GPU" : "host", i & 1 ? "same host" : "other host",
		        mv_path_name(h->gpu_path[i]), (int)sizeof(h->gpu_why[i]), h->gpu_why[i]);
}

static void print_gpu_paths_json(FILE *f, const struct mv_stats_hdr *h)
{
	if (!has_gpu_paths(h))
		return;
	fprintf(f, ",\"gpu\":{\"measured\":%s,\"forced\":\"%s\",\"rates_GBps\":{",
	        h->gpu_measured ? "true" : "false",
	        h->gpu_forced < 0 ? "auto" : mv_path_name((unsigned)h->gpu_forced));
	for (int i = 0; i < 7; i++)
		fprintf(f, "%s\"%s\":%.3f", i ? "," : "", gpu_rate_names[i], h->gpu_mbps[i] / 1e3);
	fprintf(f, "},\"paths\":[");
	for (int i = 2; i < 8; i++) {
		char why[sizeof(h->gpu_why[i]) + 1];
		shown(h->gpu_why[i], sizeof(h->gpu_why[i]), why, sizeof(why), 1);
		fprintf(f,
		        "%s{\"src\":\"%s\",\"dst\":\"%s\",\"same_host\":%s,\"path\":\"%s\","
		        "\"why\":\"%s\"}",
		        i > 2 ? "," : "", i & 4 ? "gpu" : "host", i & 2 ? "gpu" : "host",
		        i & 1 ? "true" : "false", mv_path_name(h->gpu_path[i]), why);
	}
	fprintf(f, "]}");
}

static void print_gpu_paths_prom(FILE *f, const struct mv_stats_hdr *h)
{
	if (!has_gpu_paths(h))
		return;
	fprintf(f, "# HELP mover_gpu_path the path each kind of GPU write takes (always 1)\n"
	           "# TYPE mover_gpu_path gauge\n");
	for (int i = 2; i < 8; i++)
		fprintf(f,
		        "mover_gpu_path{mover=\"%016" PRIx64
		        "\",src=\"%s\",dst=\"%s\",same_host=\"%s\",path=\"%s\"} 1\n",
		        h->mover_id, i & 4 ? "gpu" : "host", i & 2 ? "gpu" : "host",
		        i & 1 ? "yes" : "no", mv_path_name(h->gpu_path[i]));
	if (!h->gpu_measured)
		return;
	fprintf(f, "# HELP mover_gpu_rate_bytes_per_second what GPU paths are made of, measured "
	           "at start\n# TYPE mover_gpu_rate_bytes_per_second gauge\n");
	for (int i = 0; i < 7; i++)
		fprintf(f,
		        "mover_gpu_rate_bytes_per_second{mover=\"%016" PRIx64
		        "\",what=\"%s\"} %.0f\n",
		        h->mover_id, gpu_rate_names[i], h->gpu_mbps[i] * 1e6);
}

static const char *const backing_names[3] = {"4k", "hugetlb", "thp"};

static int has_regions(const struct mv_stats_hdr *h)
{
	return h->hdr_size >= MV_STATS_HDR_REG_END;
}

static void print_regions_text(FILE *f, const struct mv_stats_hdr *h)
{
	char why[sizeof(h->reg_why) + 1];
	uint64_t total;

	if (!has_regions(h))
		return;
	total = GET(h->reg_total);
	fprintf(f, "regions by pages:");
	for (int b = 0; b < 3; b++)
		fprintf(f, " %s %" PRIu64 " (%.1f MiB)%s", backing_names[b], GET(h->reg_now[b]),
		        (double)GET(h->reg_bytes[b]) / (1 << 20), b < 2 ? "," : "");
	fprintf(f,
	        "; %" PRIu64 " registered since start, mapping %.2f ms and fi_mr_reg %.2f ms "
	        "each on average\n",
	        total, total ? (double)GET(h->reg_map_ns) / (double)total / 1e6 : 0,
	        total ? (double)GET(h->reg_mr_ns) / (double)total / 1e6 : 0);
	shown(h->reg_why, sizeof(h->reg_why), why, sizeof(why), 1);
	if (why[0])
		fprintf(f, "last region on 4 KiB pages, not huge: %s\n", why);
}

static void print_regions_json(FILE *f, const struct mv_stats_hdr *h)
{
	char why[sizeof(h->reg_why) + 1];

	if (!has_regions(h))
		return;
	fprintf(f, ",\"regions\":{");
	for (int b = 0; b < 3; b++)
		fprintf(f, "\"%s\":{\"count\":%" PRIu64 ",\"bytes\":%" PRIu64 "},",
		        backing_names[b], GET(h->reg_now[b]), GET(h->reg_bytes[b]));
	fprintf(f,
	        "\"registered\":%" PRIu64 ",\"map_ns\":%" PRIu64 ",\"mr_ns\":%" PRIu64
	        ",\"why_not_huge\":\"%s\"}",
	        GET(h->reg_total), GET(h->reg_map_ns), GET(h->reg_mr_ns),
	        shown(h->reg_why, sizeof(h->reg_why), why, sizeof(why), 1));
}

static void print_regions_prom(FILE *f, const struct mv_stats_hdr *h)
{
	if (!has_regions(h))
		return;
	fprintf(f, "# HELP mover_regions host regions registered now, by their pages\n"
	           "# TYPE mover_regions gauge\n");
	for (int b = 0; b < 3; b++)
		fprintf(f, "mover_regions{mover=\"%016" PRIx64 "\",pages=\"%s\"} %" PRIu64 "\n",
		        h->mover_id, backing_names[b], GET(h->reg_now[b]));
	fprintf(f, "# HELP mover_region_bytes bytes of host regions registered now, by their "
	           "pages\n# TYPE mover_region_bytes gauge\n");
	for (int b = 0; b < 3; b++)
		fprintf(f,
		        "mover_region_bytes{mover=\"%016" PRIx64 "\",pages=\"%s\"} %" PRIu64 "\n",
		        h->mover_id, backing_names[b], GET(h->reg_bytes[b]));
	fprintf(f, "# HELP mover_fi_mr_reg_seconds_total fi_mr_reg of host regions (slowest "
	           "shard), summed\n# TYPE mover_fi_mr_reg_seconds_total counter\n");
	fprintf(f, "mover_fi_mr_reg_seconds_total{mover=\"%016" PRIx64 "\"} %.6f\n", h->mover_id,
	        (double)GET(h->reg_mr_ns) / 1e9);
}

void mvstat_mem_text(FILE *f, const struct mv_stats_hdr *h)
{
	print_regions_text(f, h);
	print_gpu_paths_text(f, h);
}

void mvstat_mem_json(FILE *f, const struct mv_stats_hdr *h)
{
	print_regions_json(f, h);
	print_gpu_paths_json(f, h);
}

void mvstat_mem_prom(FILE *f, const struct mv_stats_hdr *h)
{
	print_regions_prom(f, h);
	print_gpu_paths_prom(f, h);
}
