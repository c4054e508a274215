/* SPDX-License-Identifier: MIT */
/*
 * mvstat_mem.h: what a mover's stats header says beyond its shards, for
 * mvstat's three formats: the GPU paths it chose at start, and its host
 * regions by their pages (4 KiB, hugetlb, THP) with what registering them
 * cost and why the last large one got no huge pages.
 */
#ifndef MVSTAT_MEM_H
#define MVSTAT_MEM_H

#include <stdio.h>

#include "stats_layout.h"

/* Text from the segment is someone else's writing: up to n bytes of src
 * into buf, printable and needing no JSON escape (spaces kept if asked),
 * anything else as '?'. Returns buf. */
static inline char *shown(const char *src, size_t n, char *buf, size_t len, int spaces)
{
	size_t i = 0;

	for (; i < n && i + 1 < len && src[i]; i++) {
		char ch = src[i];
		buf[i] = (ch > ' ' || (spaces && ch == ' ')) && ch < 127 && ch != '"' && ch != '\\'
		             ? ch
		             : '?';
	}
	buf[i] = 0;
	return buf;
}

void mvstat_mem_text(FILE *f, const struct mv_stats_hdr *h);
void mvstat_mem_json(FILE *f, const struct mv_stats_hdr *h);
void mvstat_mem_prom(FILE *f, const struct mv_stats_hdr *h);

#endif
