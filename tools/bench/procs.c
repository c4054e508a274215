/* SPDX-License-Identifier: MIT */
/*
 * The processes of an mvbench run and their lives. Besides this one, the
 * bench runs mover A (which this process is a client of), mover B, and a
 * receiver process, forked first while this process is small and has no
 * threads and no libfabric state: a client of B with the one region every
 * run writes into, and host of the direct receiver endpoints. The receiver
 * takes one command at a time over a socket pair and answers each within
 * CALL_S. Whatever way the bench ends, die(), a signal or the end of main,
 * everything it started is stopped and its work directory removed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* ---- the receiver process ---- */

/* Some providers complete small writes on transmit, so late ones get a
 * moment before they count as lost. Direct receivers copy data in on their
 * own threads: parking them (a mutex handshake) orders their copies before
 * each look, and they run again while we wait. */
static int target_check(struct target *tg, const struct tcmd *c, struct trep *rep,
                        int (*check)(const struct target *tg, const struct tcmd *c, char *why,
                                     size_t len))
{
	int running = tg->rx && atomic_load(&tg->state) == RX_RUN;
	double end = now_s() + 2.0;

	if (!tg->c) {
		snprintf(rep->msg, sizeof(rep->msg), "check beyond the region");
		return -EINVAL;
	}
	for (;;) {
		if (running && target_park(tg)) {
			snprintf(rep->msg, sizeof(rep->msg), "endpoints did not park");
			return -ETIMEDOUT;
		}
		int ret = check(tg, c, rep->msg, sizeof(rep->msg));
		if (ret != -EIO || now_s() > end)
			return ret;
		if (running)
			target_state(tg, RX_RUN);
		usleep(1000);
	}
}

static int target_cmd(struct target *tg, const struct tcmd *c, struct trep *rep)
{
	int ret = 0;

	switch (c->op) {
	case T_MOVER_UP:
		ret = mvc_connect(&tg->c, c->path);
		if (ret) {
			snprintf(rep->msg, sizeof(rep->msg), "connecting to mover B at %s: %s",
			         c->path, strerror(-ret));
			return ret;
		}
		rep->alen = rep->rlen = MVC_BLOB_MAX;
		ret = mvc_alloc_huge(tg->c, c->a, (enum mvc_huge)c->b, &tg->pool);
		if (!ret)
			ret = mvc_address(tg->c, rep->addr, &rep->alen);
		if (!ret)
			ret = mvc_region_blob(tg->c, tg->pool.region, rep->region, &rep->rlen);
		if (ret) {
			snprintf(rep->msg, sizeof(rep->msg), "receiver: %s", mvc_error(tg->c));
			if (tg->pool.addr)
				mvc_free(tg->c, &tg->pool);
			mvc_disconnect(tg->c);
			tg->c = NULL;
		}
		return ret;
	case T_MOVER_DOWN:
		if (tg->c) {
			mvc_free(tg->c, &tg->pool);
			mvc_disconnect(tg->c);
			tg->c = NULL;
		}
		return 0;
	case T_DIRECT_UP:
		return direct_up(tg, c, rep);
	case T_DIRECT_GO:
		if (!tg->rx)
			return -EINVAL;
		target_state(tg, RX_RUN);
		return 0;
	case T_DIRECT_PARK:
		if (!tg->rx)
			return -EINVAL;
		ret = target_park(tg);
		if (ret)
			snprintf(rep->msg, sizeof(rep->msg), "receiver endpoints did not park");
		return ret;
	case T_DIRECT_DOWN:
		direct_down(tg);
		return 0;
	case T_CLEAR:
		if (!tg->c)
			return -EINVAL;
		memset(tg->pool.addr, 0, c->a < tg->pool.len ? c->a : tg->pool.len);
		return 0;
	case T_PAGES:
		return sc_target_pages(tg, c, rep->msg, sizeof(rep->msg));
	case T_PAGES_CLEAR:
		return sc_land_clear(tg, c, rep->msg, sizeof(rep->msg));
	case T_CHECK:
	case T_PAGES_CHECK:
		ret = target_check(tg, c, rep, c->op == T_CHECK ? bw_land_check : sc_land_check);
		if (!ret && atomic_load(&tg->failed)) {
			snprintf(rep->msg, sizeof(rep->msg), "%s", tg->fail_msg);
			ret = -EIO;
		}
		return ret;
	default:
		return -EINVAL;
	}
}

/* The receiver's life: one command, one reply, until the bench goes away. */
int target_main(int sock)
{
	static struct target tg;
	static struct tcmd c;
	static struct trep rep;

	sem_init(&tg.started, 0, 0);
	pthread_mutex_init(&tg.mu, NULL);
	pthread_cond_init(&tg.go, NULL);
	pthread_cond_init(&tg.parked_cv, NULL);
	for (;;) {
		ssize_t n = recv(sock, &c, sizeof(c), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof(c))
			break;
		memset(&rep, 0, sizeof(rep));
		rep.status = target_cmd(&tg, &c, &rep);
		if (send(sock, &rep, sizeof(rep), MSG_NOSIGNAL) != (ssize_t)sizeof(rep))
			break;
	}
	direct_down(&tg);
	if (tg.c) {
		mvc_free(tg.c, &tg.pool);
		mvc_disconnect(tg.c);
	}
	free(tg.perm);
	return 0;
}

/* ---- processes this bench started, and stopping them whatever happens ---- */

struct mvproc mover_a, mover_b;
_Atomic int target_pid;
pid_t main_pid;
static int target_sock = -1;
static char workdir[64];

/* Sends sig (none if 0), waits up to wait_s, then SIGKILL; the wait status,
 * or 0 when there was no process. */
static int stop_pid(_Atomic int *pidp, int sig, double wait_s)
{
	int pid = atomic_exchange(pidp, 0), st = 0;
	double end = now_s() + wait_s;

	if (pid <= 0)
		return 0;
	if (sig)
		kill(pid, sig);
	while (now_s() < end) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return st;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return st;
}

static void tail_log(const char *what, const char *path)
{
	char lines[12][256], buf[256];
	int n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	while (fgets(buf, sizeof(buf), f))
		snprintf(lines[n++ % 12], sizeof(lines[0]), "%s", buf);
	fclose(f);
	if (!n)
		return;
	fprintf(stderr, "mvbench: last lines of %s (%s):\n", what, path);
	for (int i = n > 12 ? n - 12 : 0; i < n; i++)
		fprintf(stderr, "  %s", lines[i % 12]);
}

/* What the work directory can hold, named once so a signal handler can
 * remove it without formatting anything. */
static char work_files[4][96];

static void remove_workdir(void)
{
	if (!workdir[0])
		return;
	for (int i = 0; i < 4; i++)
		unlink(work_files[i]);
	rmdir(workdir);
}

/* Stops everything it started: the receiver first (its client leaves B),
 * then both movers with SIGTERM, SIGKILL if they do not go in 10 s. */
void cleanup(int show_logs)
{
	if (target_sock >= 0) {
		close(target_sock);
		target_sock = -1;
	}
	/* Its socket closed, the receiver closes its endpoints and leaves. */
	stop_pid(&target_pid, 0, 5);
	if (show_logs) {
		struct mvproc *mp[2] = {&mover_a, &mover_b};
		for (int i = 0; i < 2; i++) {
			int pid = atomic_load(&mp[i]->pid), st;
			if (pid <= 0)
				continue;
			if (waitpid(pid, &st, WNOHANG) == pid) {
				atomic_store(&mp[i]->pid, 0);
				int sig = WIFSIGNALED(st);
				fprintf(stderr, "mvbench: mover %c (pid %d) %s %d\n", 'A' + i, pid,
				        sig ? "was killed by signal" : "exited with status",
				        sig ? WTERMSIG(st) : WEXITSTATUS(st));
			}
			tail_log(i ? "mover B" : "mover A", mp[i]->log);
		}
	}
	stop_pid(&mover_a.pid, SIGTERM, 10);
	stop_pid(&mover_b.pid, SIGTERM, 10);
	remove_workdir();
	workdir[0] = 0;
}

/* shm names an endpoint's segment /dev/shm/PID:... and unlinks it when the
 * endpoint closes; a bench that dies with endpoints open removes its own. */
static void remove_shm_names(void)
{
	char prefix[24], path[300];
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	size_t n;

	if (!d)
		return;
	n = (size_t)snprintf(prefix, sizeof(prefix), "%d:", (int)getpid());
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, prefix, n)) {
			snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
			unlink(path);
		}
	closedir(d);
}

void die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	va_start(ap, fmt);
	fprintf(stderr, "mvbench: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	cleanup(1);
	remove_shm_names();
	fflush(NULL);
	/* Sender threads may still own fabric objects: no atexit handlers. */
	_exit(1);
}

static void on_signal(int sig)
{
	int pid;

	/* Async-signal-safe only: ask every child to go, then go. SIGTERM lets
	 * the shm provider's own handler unlink its segments in each. */
	if ((pid = atomic_load(&target_pid)) > 0)
		kill(pid, SIGTERM);
	if ((pid = atomic_load(&mover_a.pid)) > 0)
		kill(pid, SIGTERM);
	if ((pid = atomic_load(&mover_b.pid)) > 0)
		kill(pid, SIGTERM);
	remove_workdir();
	signal(sig, SIG_DFL);
	raise(sig);
}

void mover_start(struct mvproc *m, const char *bin, const char *name, const char *prov,
                 const char *iface, uint32_t n, const char *cpus, int host_copy)
{
	char shards[16], cpuarg[600];
	const char *argv[16 + MOVER_EXTRA_MAX];
	int argc = 0, st;
	struct stat sb;

	snprintf(m->sock, sizeof(m->sock), "%s/%s.sock", workdir, name);
	snprintf(m->log, sizeof(m->log), "%s/%s.log", workdir, name);
	snprintf(shards, sizeof(shards), "%u", n);
	snprintf(cpuarg, sizeof(cpuarg), "--cpus=%s", cpus);
	unlink(m->sock);
	argv[argc++] = bin;
	argv[argc++] = "--provider";
	argv[argc++] = prov;
	if (iface) {
		argv[argc++] = "--iface";
		argv[argc++] = iface;
	}
	argv[argc++] = "--shards";
	argv[argc++] = shards;
	argv[argc++] = "--socket";
	argv[argc++] = m->sock;
	argv[argc++] = cpuarg;
	argv[argc++] = "--no-config"; /* the host's /etc/mover.conf is not the row's */
	if (!host_copy)
		argv[argc++] = "--no-host-copy"; /* the fabric, like for like with direct */
	for (int i = 0; i < nmover_extra; i++)
		argv[argc++] = mover_extra[i];
	argv[argc] = NULL;

	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		/* The mover drains and exits on SIGTERM; so it does if we die. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != main_pid)
			_exit(1);
		int fd = open(m->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execv(bin, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	atomic_store(&m->pid, pid);
	for (double end = now_s() + 15; now_s() < end;) {
		if (stat(m->sock, &sb) == 0 && S_ISSOCK(sb.st_mode))
			return;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			atomic_store(&m->pid, 0);
			tail_log(name[0] == 'a' ? "mover A" : "mover B", m->log);
			die("mover %s (%s --provider %s --shards %u) exited with status %d before "
			    "listening",
			    name[0] == 'a' ? "A" : "B", bin, prov, n,
			    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
		}
		usleep(20000);
	}
	die("mover %s did not listen on %s within 15 s", name[0] == 'a' ? "A" : "B", m->sock);
}

void mover_stop(struct mvproc *m, const char *name)
{
	int st = stop_pid(&m->pid, SIGTERM, 10);

	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "mvbench: warning: %s did not stop cleanly on SIGTERM (%s %d)\n",
		        name, WIFEXITED(st) ? "status" : "signal",
		        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		tail_log(name, m->log);
	}
	unlink(m->sock);
}

/* One command to the receiver process and its reply, bounded in time. */
void tcall(const struct tcmd *c, struct trep *rep)
{
	struct pollfd pf = {.fd = target_sock, .events = POLLIN};
	int timeout = CALL_S * 1000;

	if (send(target_sock, c, sizeof(*c), MSG_NOSIGNAL) != (ssize_t)sizeof(*c))
		die("the receiver process is gone (sending: %s)", strerror(errno));
	for (;;) {
		int p = poll(&pf, 1, timeout);
		if (p < 0 && errno == EINTR)
			continue;
		if (p == 0)
			die("the receiver process did not answer command %u within %d s", c->op,
			    CALL_S);
		break;
	}
	ssize_t n = recv(target_sock, rep, sizeof(*rep), 0);
	if (n != (ssize_t)sizeof(*rep))
		die("the receiver process is gone (command %u)", c->op);
	if (rep->status) {
		static const char *const what[] = {
		    [T_MOVER_UP] = "setting up the region on mover B",
		    [T_MOVER_DOWN] = "freeing the region",
		    [T_DIRECT_UP] = "opening the direct receiver endpoints",
		    [T_DIRECT_GO] = "starting the direct receivers",
		    [T_DIRECT_PARK] = "parking the direct receivers",
		    [T_DIRECT_DOWN] = "closing the direct receivers",
		    [T_CLEAR] = "clearing the region",
		    [T_CHECK] = "checking what landed",
		    [T_PAGES] = "making the page lists",
		    [T_PAGES_CLEAR] = "clearing the pages",
		    [T_PAGES_CHECK] = "checking the pages that landed",
		};
		die("receiver, %s%s: %s", c->op <= T_PAGES_CHECK ? what[c->op] : "?", c->tag,
		    rep->msg[0] ? rep->msg : strerror(-rep->status));
	}
}

void tsimple(uint32_t op, uint64_t a)
{
	struct tcmd c = {.op = op, .a = a};
	static struct trep rep;

	tcall(&c, &rep);
}

void procs_start(void)
{
	int sv[2];

	/* The receiver first, while this process is small and has no threads
	 * and no libfabric state. */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		die("socketpair: %s", strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != main_pid)
			_exit(1);
		close(sv[0]);
		_exit(target_main(sv[1]));
	}
	close(sv[1]);
	target_sock = sv[0];
	atomic_store(&target_pid, pid);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, SIG_IGN);

	snprintf(workdir, sizeof(workdir), "/tmp/mvbench.XXXXXX");
	if (!mkdtemp(workdir)) {
		workdir[0] = 0;
		die("mkdtemp: %s", strerror(errno));
	}
	const char *names[4] = {"a.sock", "b.sock", "a.log", "b.log"};
	for (int i = 0; i < 4; i++)
		snprintf(work_files[i], sizeof(work_files[i]), "%s/%s", workdir, names[i]);
}
