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
 * /dev/shm is everyone's: nothing there is followed where it is a link or
 * read where it is not a plain file, and a place lock someone keeps holds
 * a starting mover 2 s at most (it places alone then, and says so).
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

/* Where mover id keeps its CPUs. */
static void held_path(char *path, size_t len, uint64_t id)
{
	snprintf(path, len, HELD_DIR "/mv.%016llx.cpus", (unsigned long long)id);
}

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

#define PLACE_TRIES 200 /* 10 ms apart: 2 s, then a mover places alone */

/*
 * The placement lock, taken: its fd, or -1 (and a warning naming why)
 * where it could not be in 2 s. Anyone may hold it (movers of every user
 * lock it), so it is never waited for without end; never followed where
 * it is a link, and chmod'ed only by its owner.
 */
static int place_lock(void)
{
	int fd = -1, err = 0;
	struct stat st;

	for (int i = 0; fd < 0 && i < PLACE_TRIES; i++) {
		fd = open(PLACE_LOCK, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
		if (fd < 0 && errno == EACCES) /* another user's: a lock needs no write access */
			fd = open(PLACE_LOCK, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		err = errno;
		if (fd < 0 && err != EACCES) /* only its maker's chmod is worth waiting for */
			break;
		if (fd < 0)
			usleep(10000);
	}
	if (fd < 0) {
		mv_warn("%s: %s: shards placed without regard to other movers of this host",
		        PLACE_LOCK, strerror(err));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
		mv_warn("%s is not a plain file of one link: shards placed without regard to "
		        "other movers of this host (remove it)",
		        PLACE_LOCK);
		close(fd);
		return -1;
	}
	if (st.st_uid == geteuid() && (st.st_mode & 0777) != 0666)
		(void)fchmod(fd, 0666); /* movers of other users lock it too */
	for (int i = 0; i < PLACE_TRIES; i++) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return fd;
		if (errno != EWOULDBLOCK && errno != EINTR)
			break;
		usleep(10000);
	}
	mv_warn("%s: held by another process for 2 s: shards placed without regard to other "
	        "movers of this host",
	        PLACE_LOCK);
	close(fd);
	return -1;
}

/*
 * Takes the placement lock and adds to used[] (max entries, indexed by OS
 * CPU number) each CPU a live mover of this host pins a shard to; how many
 * movers hold some. The lock stays taken until mv_cpus_held_publish(). 0,
 * and nothing taken, where the lock cannot be had (a mover places alone
 * then).
 */
int mv_cpus_held_read(int *used, int max)
{
	int movers = 0;
	DIR *d;
	struct dirent *e;

	place_fd = place_lock();
	if (place_fd < 0)
		return 0;
	d = opendir(HELD_DIR);
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		struct stat st;
		if (!held_name(e->d_name))
			continue;
		/* Not blocking on a FIFO, not following a link. */
		int fd =
		    openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			close(fd);
			continue;
		}
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
	char path[64], text[MV_MAX_SHARDS * 12 + 2];
	size_t len = 0;
	int fd;

	held_path(path, sizeof(path), mv->mover_id);
	for (uint32_t s = 0; s < mv->nshards; s++) {
		int w = snprintf(text + len, sizeof(text) - len - 1, "%s%d", s ? "," : "",
		                 mv->shards[s].cpu);
		if (w < 0 || (size_t)w >= sizeof(text) - len - 1)
			break;
		len += (size_t)w;
	}
	text[len++] = '\n';
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd >= 0 && (flock(fd, LOCK_EX | LOCK_NB) < 0 || fchmod(fd, 0644) < 0 ||
	                write(fd, text, len) != (ssize_t)len)) {
		int err = errno;
		close(fd);
		(void)unlink(path);
		fd = -1;
		errno = err;
	}
	if (fd < 0)
		mv_warn("%s: %s: other movers on this host may pin shards to this one's CPUs", path,
		        strerror(errno));
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
	held_path(path, sizeof(path), mv->mover_id);
	(void)unlink(path);
	close(mv->cpus_fd);
	mv->cpus_fd = -1;
}
