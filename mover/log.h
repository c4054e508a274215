/* SPDX-License-Identifier: MIT */
/*
 * The mover's log: one line per event, each with the mover's id and level,
 * to stderr (journald takes it: under systemd the lines carry their syslog
 * priority as "<N>" and no time stamp of their own) or appended to a file
 * (--log FILE; reopened on SIGHUP, for logrotate). Lines below the level
 * (--log-level, -v, -q, log_level) are not written.
 *
 *   2026-11-24T10:00:00.123Z mover[4242] 7f3a9c01d2e4b5a6 info: listening on /run/mover/mover.sock
 *
 * Errors a client or a remote peer can cause over and over (a refused uid,
 * a client leaving on a malformed message, a cut-off, a malformed landing
 * message, a remote write error) go through mv_log_client(), which writes at most
 * MV_LOG_BURST lines of one kind per client every MV_LOG_WINDOW_S seconds
 * and then says how many it held back.
 */
#ifndef MV_LOG_H
#define MV_LOG_H

#include <stdint.h>

enum mv_level { MV_LOG_ERROR = 0, MV_LOG_WARN, MV_LOG_INFO, MV_LOG_DEBUG };

#define MV_LOG_BURST    10
#define MV_LOG_WINDOW_S 30

extern int mv_verbose; /* 1 when debug lines are written */

void mv_logl(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));   /* info */
void mv_dbg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));   /* debug */
void mv_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));  /* warn */
void mv_error(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* error */
/* Rate-limited per (who, fmt): who names the client (its pid, or a uid
 * with MV_WHO_UID set) so that one client's flood leaves others' lines. */
#define MV_WHO_UID   (1ull << 40)
#define MV_WHO_SHARD (1ull << 41) /* errors a remote peer causes, per shard */
void mv_log_client(int level, uint64_t who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Set-up, from main before the threads start. */
void mv_log_level(int level);
void mv_log_id(uint64_t mover_id);
/* Appends to path from now on; -errno with why on failure. */
int mv_log_file(const char *path, char *why, int whylen);
/* A thread that reopens the log file on SIGHUP, which the caller has
 * blocked in every thread (so SIGHUP no longer ends the mover). */
int mv_log_hup_start(void);
/* Says what the rate limit held back, stops the SIGHUP thread, closes. */
void mv_log_close(void);
/* Tells systemd (Type=notify) a state: "READY=1" once the socket listens. */
void mv_sd_notify(const char *state);
/* The name of a level ("warn"), or NULL; and back (-1 if none). */
const char *mv_level_name(int level);
int mv_level_parse(const char *s);

#endif
