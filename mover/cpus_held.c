/* SPDX-License-Identifier: MIT */
/*
 * The CPUs other movers of this host pin shards to, so that two movers
 * started side by side (one per NIC set, one per network namespace, a
 * test's two) do not pin their busy shards to the same core: two spinning
 * threads on one core take turns of the scheduler's slice, milliseconds,
 * and a round trip through both waits several of them (on a 16-core
 * machine, 3,000 small batches took 27 s against 2 s on cores of their
 * own). Each mover keeps its shards' CPUs in
 *
 *   /dev/shm/mv.ID.cpus     "1,5\n", ID its mover id; locked (flock) for life
 *   /dev/shm/mv.place.lock  held while a mover reads the others and writes its own
 *
 * A file whose lock is free is a dead mover's and goes. The lock dies with
 * the process, however it ends, so a crashed mover's CPUs are free again.
 * Main thread, at start and exit.
 */
#include "mover.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define HELD_DIR   "/dev/shm"
#define PLACE_LOCK HELD_DIR "/mv.place.lock"

/* Held across mv_cpus_held_read() and mv_cpus_held_publish(). */
static int place_fd = -1;

static int held_name(const char *name)
{
	size_t n = strlen(name);

	return n > 8 && !strncmp(name, "mv.", 3) && !strcmp(name + n - 5, ".cpus");
}

/* Adds the CPUs listed in fd's text to used (those < max); how many. */
static int add_listed(int fd, int *used, int max)
{
	char text[4096];
	ssize_t len = pread(fd, text, sizeof(text) - 1, 0);
	int n = 0;

	if (len <= 0)
		return 0;
	text[len] = 0;
	for (char *p = text, *end; *p;) {
		long c = strtol(p, &end, 10);
		if (end == p)
			break;
		if (c >= 0 && c < max) {
			used[c]++;
			n++;
		}
		p = *end ? end + 1 : end;
	}
	return n;
}

/*
 * Takes the placement lock and adds to used[] (max entries) each CPU a live
 * mover of this host pins a shard to; how many movers hold some. The lock
 * stays taken until mv_cpus_held_publish(). 0 and nothing taken where
 * /dev/shm cannot hold the files (a mover alone with its cores then).
 */
int mv_cpus_held_read(int *used, int max)
{
	int movers = 0;
	DIR *d;
	struct dirent *e;

	place_fd = open(PLACE_LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
	if (place_fd < 0) /* made by another user: a lock needs no write access */
		place_fd = open(PLACE_LOCK, O_RDONLY | O_CLOEXEC);
	if (place_fd < 0)
		return 0;
	(void)fchmod(place_fd, 0666); /* movers of other users lock it too */
	while (flock(place_fd, LOCK_EX) < 0 && errno == EINTR)
		;
	d = opendir(HELD_DIR);
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		if (!held_name(e->d_name))
			continue;
		int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
			/* Nobody holds it: its mover is gone (whoever made it, a
			 * live one holds its lock from before we took ours). */
			(void)unlinkat(dirfd(d), e->d_name, 0);
		} else if (errno == EWOULDBLOCK && add_listed(fd, used, max)) {
			movers++;
		}
		close(fd);
	}
	closedir(d);
	return movers;
}

/*
 * Writes this mover's shards' CPUs where the others read them, keeps the
 * file locked while the mover lives, and lets the next mover place its
 * shards. The file's fd in mv->cpus_fd (-1 where it could not be made:
 * then the others do not see these CPUs, and the log says so).
 */
void mv_cpus_held_publish(struct mover *mv)
{
	char path[64], text[MV_MAX_SHARDS * 6 + 2];
	size_t len = 0;
	int fd;

	snprintf(path, sizeof(path), HELD_DIR "/mv.%016llx.cpus", (unsigned long long)mv->mover_id);
	for (uint32_t s = 0; s < mv->nshards && len + 8 < sizeof(text); s++)
		len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%d", s ? "," : "",
		                        mv->shards[s].cpu);
	text[len++] = '\n';
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd >= 0 && (flock(fd, LOCK_EX | LOCK_NB) < 0 || fchmod(fd, 0644) < 0 ||
	                write(fd, text, len) != (ssize_t)len)) {
		mv_warn("%s: %s: other movers on this host may pin shards to this one's CPUs", path,
		        strerror(errno));
		close(fd);
		(void)unlink(path);
		fd = -1;
	} else if (fd < 0) {
		mv_warn("%s: %s: other movers on this host may pin shards to this one's CPUs", path,
		        strerror(errno));
	}
	mv->cpus_fd = fd;
	if (place_fd >= 0)
		close(place_fd); /* unlocks */
	place_fd = -1;
}

/* At exit: the CPUs are free for others. */
void mv_cpus_held_drop(struct mover *mv)
{
	char path[64];

	if (mv->cpus_fd < 0)
		return;
	snprintf(path, sizeof(path), HELD_DIR "/mv.%016llx.cpus", (unsigned long long)mv->mover_id);
	(void)unlink(path);
	close(mv->cpus_fd);
	mv->cpus_fd = -1;
}
