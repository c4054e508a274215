/* SPDX-License-Identifier: MIT */
/*
 * trace_import.h: what mvtrace's files share. mvtrace.c is the command
 * line, dump, summary, start and stop; trace_import.c the import command.
 */
#ifndef MV_TRACE_IMPORT_H
#define MV_TRACE_IMPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MOONCAKE_BLOCK 512u /* tokens per hash_id in the Mooncake traces */

/* mvtrace import ARGS: 0, 1 on failure, 2 on a usage error. */
int mvt_cmd_import(int argc, char **argv);
/* mvtrace.c: the usage text, and bytes in words ("4 KiB"). */
void usage(FILE *f);
const char *fmt_bytes(uint64_t b, char *buf, size_t len);

#endif
