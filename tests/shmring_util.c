/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the shmring check suites; what each does is in
 * tests/shmring_util.h.
 */
#include "shmring_util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmring_desc.h"

int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

void backoff(unsigned *spins)
{
	if (++*spins > SPINS) {
		sched_yield();
		*spins = 0;
	}
	cpu_relax();
}

void pair_open(struct ring_pair *p, const struct shmring_opts *o)
{
	int err, fd;

	err = shmring_create(&p->prod, o, SHMRING_PRODUCER);
	ck_assert_msg(err == 0, "create: %d (%s)", err, shmring_error(&p->prod));
	fd = dup(shmring_fd(&p->prod));
	ck_assert_int_ge(fd, 0);
	err = shmring_attach(&p->cons, fd, SHMRING_CONSUMER);
	ck_assert_msg(err == 0, "attach: %d (%s)", err, shmring_error(&p->cons));
}

void pair_close(struct ring_pair *p)
{
	shmring_close(&p->cons);
	shmring_close(&p->prod);
}

int push_values(struct shmring *r, uint64_t first, uint32_t n)
{
	uint32_t pos = 0;
	int got = shmring_reserve(r, n, &pos);

	for (int i = 0; i < got; i++)
		*(uint64_t *)shmring_slot(r, pos + (uint32_t)i) = first + (uint64_t)i;
	if (got > 0)
		shmring_commit(r);
	return got;
}

int pop_values(struct shmring *r, uint64_t first, uint32_t n)
{
	uint32_t pos = 0;
	int got = shmring_peek(r, n, &pos);

	for (int i = 0; i < got; i++) {
		uint64_t v = *(uint64_t *)shmring_slot(r, pos + (uint32_t)i);

		require(v == first + (uint64_t)i, "entry %" PRIu64 " holds %" PRIu64,
		        first + (uint64_t)i, v);
	}
	if (got > 0)
		shmring_release(r, (uint32_t)got);
	return got;
}

static const char *peer_path(void)
{
	static char path[PATH_MAX];
	const char *build = getenv("MV_BUILD");

	snprintf(path, sizeof(path), "%s/tests/shmring_peer", build && *build ? build : "build");
	return path;
}

pid_t spawn_peer(const char *const *args, const int *keep, int nkeep)
{
	const char *path = peer_path();
	char *argv[12];
	int argc = 0;
	pid_t pid;

	ck_assert_msg(access(path, X_OK) == 0, "helper %s: %s (build it: make all)", path,
	              strerror(errno));
	argv[argc++] = (char *)path;
	while (*args && argc < 11)
		argv[argc++] = (char *)*args++;
	argv[argc] = NULL;

	pid = fork();
	ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		/* Never outlive a failed test: die with the test process. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int i = 0; i < nkeep; i++)
			fcntl(keep[i], F_SETFD, 0);
		execv(path, argv);
		_exit(127);
	}
	return pid;
}

const char *fd_arg(char buf[16], int fd)
{
	snprintf(buf, 16, "%d", fd);
	return buf;
}

void assert_peer_exited_ok(pid_t pid, const char *what)
{
	int st;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	              "%s: shmring_peer %s %d (1 bad descriptor, 2 usage, 3 ring broke)", what,
	              WIFEXITED(st) ? "exited with" : "killed by signal",
	              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

int pidfd_supported(struct shmring *r)
{
	int err = shmring_watch_peer(r, getpid());

	if (err == -ENOSYS) {
		printf("SKIP: pidfd_open is not supported by this kernel: %s\n", shmring_error(r));
		return 0;
	}
	ck_assert_msg(err == 0, "watch_peer(self): %s", shmring_error(r));
	return 1;
}

TCase *tcase(Suite *s, const char *name, double timeout_s)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, timeout_s);
	suite_add_tcase(s, tc);
	return tc;
}
