/* SPDX-License-Identifier: MIT */
/*
 * The mover's log (log.h says what a line looks like). Every line is built
 * whole in a buffer and written with one write(), so lines from shard
 * threads never interleave, on a pipe, a file opened O_APPEND or journald's
 * stream alike. Only the rate limiter's table takes a lock.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int mv_verbose;

static int level = MV_LOG_INFO;
static _Atomic int log_fd = 2;
static char log_path[4096];
static int journal = -1; /* stderr is journald's stream: -1 not looked yet */
static uint64_t log_id;
static int have_id;

static const char *const names[] = {"error", "warn", "info", "debug"};
static const int prio[] = {3, 4, 6, 7}; /* syslog's err, warning, info, debug */

const char *mv_level_name(int l)
{
	return l >= MV_LOG_ERROR && l <= MV_LOG_DEBUG ? names[l] : NULL;
}

int mv_level_parse(const char *s)
{
	for (int l = MV_LOG_ERROR; l <= MV_LOG_DEBUG; l++)
		if (!strcmp(s, names[l]))
			return l;
	if (!strcmp(s, "warning"))
		return MV_LOG_WARN;
	return -1;
}

static int on_journal(void);

void mv_log_level(int l)
{
	level = l;
	mv_verbose = l >= MV_LOG_DEBUG;
}

void mv_log_id(uint64_t id)
{
	log_id = id;
	have_id = 1;
	journal = on_journal(); /* here, before the threads: they only read it */
}

/* $JOURNAL_STREAM names the device and inode of the stream systemd gave
 * us; stderr is it when they match (not when redirected elsewhere). */
static int on_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	return e && sscanf(e, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0 &&
	       (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

static void emit(int l, const char *msg, const char *suffix)
{
	char line[1024], id[20] = "----------------";
	int fd = atomic_load(&log_fd), n;

	if (have_id)
		snprintf(id, sizeof(id), "%016llx", (unsigned long long)log_id);
	if (journal < 0)
		journal = on_journal();
	if (fd == 2 && journal) {
		n = snprintf(line, sizeof(line), "<%d>%s %s: %s%s", prio[l], id, names[l], msg,
		             suffix);
	} else {
		struct timespec ts;
		struct tm tm;
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		n = snprintf(line, sizeof(line),
		             "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ mover[%d] %s %s: %s%s",
		             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
		             tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(), id, names[l], msg,
		             suffix);
	}
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	/* One event, one line: a message's own newlines would forge others. */
	for (int i = 0; i < n; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	line[n++] = '\n';
	if (write(fd, line, (size_t)n) < 0) {
		/* Nowhere left to say it. */
	}
}

static void vlog(int l, const char *fmt, va_list ap)
{
	char msg[900];

	if (l > level)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	emit(l, msg, "");
}

void mv_logl(int l, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(l, fmt, ap);
	va_end(ap);
}

#define LEVEL_FN(name, l)                                                                          \
	void name(const char *fmt, ...)                                                            \
	{                                                                                          \
		va_list ap;                                                                        \
		va_start(ap, fmt);                                                                 \
		vlog(l, fmt, ap);                                                                  \
		va_end(ap);                                                                        \
	}
LEVEL_FN(mv_log, MV_LOG_INFO)
LEVEL_FN(mv_dbg, MV_LOG_DEBUG)
LEVEL_FN(mv_warn, MV_LOG_WARN)
LEVEL_FN(mv_error, MV_LOG_ERROR)

/*
 * The rate limiter: a small table of (who, call site) slots, each with the
 * start of its window, the lines written in it and those held back. A
 * slot is found by hashing and probing 4 places; when all 4 are taken the
 * oldest window is reused (and what it held back said first).
 */
#define RL_SLOTS 256
#define RL_PROBE 4
struct rl_slot {
	uint64_t who;
	const char *fmt;
	int level;
	int64_t start;  /* of the window, s */
	uint32_t count; /* lines written in it */
	uint32_t held;  /* lines held back */
	char last[120]; /* the last held back, to say at close */
};
static struct rl_slot rl[RL_SLOTS];
static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec;
}

static void rl_flush(struct rl_slot *s)
{
	char msg[200];

	if (!s->held)
		return;
	snprintf(msg, sizeof(msg), "%u more like this were not logged: %s", s->held, s->last);
	emit(s->level, msg, "");
	s->held = 0;
}

void mv_log_client(int l, uint64_t who, const char *fmt, ...)
{
	char msg[900], suffix[96] = "";
	va_list ap;

	if (l > level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	int64_t now = now_s();
	uint64_t h = (who * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(uintptr_t)fmt >> 3);
	struct rl_slot *s = NULL, *oldest = NULL;
	int write_it = 1;

	pthread_mutex_lock(&rl_lock);
	for (int k = 0; k < RL_PROBE; k++) {
		struct rl_slot *x = &rl[(h + (uint64_t)k) % RL_SLOTS];
		if (x->fmt == fmt && x->who == who) {
			s = x;
			break;
		}
		if (!oldest || !x->fmt || (oldest->fmt && x->start < oldest->start))
			oldest = x;
	}
	if (!s) {
		s = oldest;
		rl_flush(s);
		memset(s, 0, sizeof(*s));
		s->who = who;
		s->fmt = fmt;
		s->start = now;
	}
	s->level = l;
	if (now - s->start >= MV_LOG_WINDOW_S) {
		if (s->held)
			snprintf(suffix, sizeof(suffix),
			         " (and %u more like it in the %lld s before, not logged)", s->held,
			         (long long)(now - s->start));
		s->start = now;
		s->count = 0;
		s->held = 0;
	}
	if (s->count >= MV_LOG_BURST) {
		s->held++;
		snprintf(s->last, sizeof(s->last), "%s", msg);
		write_it = 0;
	} else if (++s->count == MV_LOG_BURST) {
		snprintf(suffix, sizeof(suffix),
		         " (%d lines like this in %d s: more are counted, not logged)",
		         MV_LOG_BURST, MV_LOG_WINDOW_S);
	}
	if (write_it)
		emit(l, msg, suffix);
	pthread_mutex_unlock(&rl_lock);
}

int mv_log_file(const char *path, char *why, int whylen)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);

	if (fd < 0) {
		int e = errno;
		snprintf(why, (size_t)whylen, "cannot open log file %s: %s", path, strerror(e));
		return -e;
	}
	snprintf(log_path, sizeof(log_path), "%s", path);
	int old = atomic_exchange(&log_fd, fd);
	if (old != 2)
		close(old);
	return 0;
}

/* SIGHUP: logrotate moved the file away; start a new one at the path. A
 * lost race with a writer costs that writer's line in the old file only. */
static pthread_t hup_thread;
static int hup_running;
static atomic_int hup_stop;

static void *hup_main(void *arg)
{
	sigset_t set;
	int sig;

	(void)arg;
	sigemptyset(&set);
	sigaddset(&set, SIGHUP);
	while (!sigwait(&set, &sig) && !atomic_load(&hup_stop)) {
		char why[256];
		if (!log_path[0]) {
			mv_log("SIGHUP: logging to stderr, nothing to reopen");
			continue;
		}
		int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
		if (fd < 0) {
			snprintf(why, sizeof(why), "%s", strerror(errno));
			mv_error("SIGHUP: cannot reopen %s: %s; logging on to the old file",
			         log_path, why);
			continue;
		}
		int old = atomic_exchange(&log_fd, fd);
		if (old != 2)
			close(old);
		mv_log("SIGHUP: reopened %s", log_path);
	}
	return NULL;
}

int mv_log_hup_start(void)
{
	int ret = pthread_create(&hup_thread, NULL, hup_main, NULL);

	if (ret)
		return -ret;
	hup_running = 1;
	return 0;
}

void mv_log_close(void)
{
	pthread_mutex_lock(&rl_lock);
	for (int i = 0; i < RL_SLOTS; i++)
		rl_flush(&rl[i]);
	pthread_mutex_unlock(&rl_lock);
	if (hup_running) {
		atomic_store(&hup_stop, 1);
		pthread_kill(hup_thread, SIGHUP);
		pthread_join(hup_thread, NULL);
		hup_running = 0;
	}
	int old = atomic_exchange(&log_fd, 2);
	if (old != 2)
		close(old);
}

/*
 * systemd's readiness protocol without libsystemd: one datagram to
 * $NOTIFY_SOCKET (a path, or '@' for the abstract namespace). Nothing when
 * not run by systemd with Type=notify.
 */
void mv_sd_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	size_t len;
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@') || strlen(path) >= sizeof(a.sun_path))
		return;
	len = strlen(path);
	memcpy(a.sun_path, path, len);
	if (a.sun_path[0] == '@')
		a.sun_path[0] = 0;
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&a,
	           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0)
		mv_warn("telling systemd '%s': %s", state, strerror(errno));
	close(fd);
}
