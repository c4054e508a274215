/* SPDX-License-Identifier: MIT */
/*
 * Where the time went (--threads): every thread of the client, the
 * receiver and both movers, read from /proc before and after each booked
 * run, its CPU use, its waits for a CPU, its sleeps and preemptions added up
 * per side (mover runs and direct runs apart) and printed under each row.
 * Nothing is read when --threads is off.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

struct book book_mover, book_direct;
int book_on;

static int thread_read(int pid, int tid, struct tacc *a)
{
	char path[96], buf[1024];
	unsigned long long run, wait;
	FILE *f;
	int ok = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", pid, tid);
	if (!(f = fopen(path, "r")))
		return -ENOENT;
	ok = fscanf(f, "%llu %llu", &run, &wait) == 2;
	fclose(f);
	if (!ok)
		return -EIO;
	a->run_ns = run;
	a->wait_ns = wait;
	/* A thread that ends between these reads is skipped, not counted
	 * with zeros that would wrap its deltas. */
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	if (!(f = fopen(path, "r")))
		return -ENOENT;
	ok = 0;
	while (fgets(buf, sizeof(buf), f)) {
		unsigned long long v;
		if (sscanf(buf, "voluntary_ctxt_switches: %llu", &v) == 1) {
			a->vcs = v;
			ok |= 1;
		} else if (sscanf(buf, "nonvoluntary_ctxt_switches: %llu", &v) == 1) {
			a->ivcs = v;
			ok |= 2;
		}
	}
	fclose(f);
	if (ok != 3)
		return -EIO;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", pid, tid);
	if ((f = fopen(path, "r"))) {
		if (fgets(a->comm, sizeof(a->comm), f))
			a->comm[strcspn(a->comm, "\n")] = 0;
		fclose(f);
	}
	/* The CPU it last ran on: field 39 of stat, after the ')' of comm. */
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	if ((f = fopen(path, "r"))) {
		size_t len = fread(buf, 1, sizeof(buf) - 1, f);
		buf[len] = 0;
		char *p = strrchr(buf, ')');
		for (int field = 2; p && field < 39; field++)
			p = strchr(p + 1, ' ');
		a->cpu = p ? atoi(p + 1) : -1;
		fclose(f);
	}
	return 0;
}

/* Starts (begin) or ends a booked run: at the end, what every thread of the
 * client, the receiver and both movers used since the start is added up. */
void book_snap(struct book *b, int begin)
{
	int pids[4] = {main_pid, atomic_load(&target_pid), atomic_load(&mover_a.pid),
	               atomic_load(&mover_b.pid)};
	char path[64];

	if (!book_on || !b)
		return;
	if (begin)
		b->t0 = now_s();
	else
		b->secs += now_s() - b->t0;
	for (int i = 0; i < 4; i++) {
		struct dirent *e;
		DIR *d;

		if (pids[i] <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task", pids[i]);
		if (!(d = opendir(path)))
			continue;
		while ((e = readdir(d))) {
			struct tacc now = {.pid = pids[i], .tid = atoi(e->d_name)}, *a = NULL;
			if (now.tid <= 0 || thread_read(now.pid, now.tid, &now))
				continue;
			for (int k = 0; k < b->n && !a; k++)
				if (b->t[k].tid == now.tid && b->t[k].pid == now.pid)
					a = &b->t[k];
			if (!a) {
				if (b->n == BOOK_MAX)
					continue;
				a = &b->t[b->n++];
				*a = now;
				continue; /* first seen: counted from here */
			}
			if (!begin) {
				a->d_run += now.run_ns - a->run_ns;
				a->d_wait += now.wait_ns - a->wait_ns;
				a->d_vcs += now.vcs - a->vcs;
				a->d_ivcs += now.ivcs - a->ivcs;
			}
			uint64_t dr = a->d_run, dw = a->d_wait, dv = a->d_vcs, di = a->d_ivcs;
			*a = now;
			a->d_run = dr;
			a->d_wait = dw;
			a->d_vcs = dv;
			a->d_ivcs = di;
		}
		closedir(d);
	}
}

static const char *proc_name(int pid)
{
	if (pid == main_pid)
		return "client";
	if (pid == atomic_load(&target_pid))
		return "receiver";
	if (pid == atomic_load(&mover_a.pid))
		return "mover A";
	if (pid == atomic_load(&mover_b.pid))
		return "mover B";
	return "?";
}

/* Threads that used at least 1% of a CPU over the booked runs. */
void book_print(struct book *b, const char *what)
{
	if (!book_on || b->secs <= 0)
		return;
	printf("     threads during %s runs (%.2f s): %%busy %%waiting-for-CPU sleeps/s "
	       "preempted/s last-CPU\n",
	       what, b->secs);
	for (int i = 0; i < b->n; i++) {
		const struct tacc *a = &b->t[i];
		double busy = (double)a->d_run / 1e9 / b->secs;
		if (busy < 0.01)
			continue;
		printf("       %-8s %-15s %6.1f %6.1f %9.0f %9.0f %4d\n", proc_name(a->pid),
		       a->comm, 100 * busy, 100 * (double)a->d_wait / 1e9 / b->secs,
		       (double)a->d_vcs / b->secs, (double)a->d_ivcs / b->secs, a->cpu);
	}
	b->n = 0;
	b->secs = 0;
}
