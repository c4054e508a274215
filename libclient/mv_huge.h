/* SPDX-License-Identifier: MIT */
/*
 * Huge pages for host regions, shared by libmvc (which makes a region's
 * memfd) and the mover (which maps it, and maps same-host peers' regions):
 * what the kernel offers (the hugetlb pool, shmem transparent huge pages),
 * why a region did not get them in words both processes log alike, and
 * mapping a range of a memfd or hugetlbfs file so that huge pages can be
 * mapped huge (offsets and lengths in whole hugetlb pages, 2 MiB-aligned
 * addresses, MADV_HUGEPAGE for THP). Internal to the project.
 */
#ifndef MV_HUGE_H
#define MV_HUGE_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << 26) /* linux/memfd.h: log2 of the page size << MFD_HUGE_SHIFT */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#define MV_HUGE_SIZE (2ull << 20) /* the pages asked for: x86-64's and arm64's PMD size */
#define MV_HUGE_SYS  "/sys/kernel/mm/hugepages/hugepages-2048kB/"
#define MV_THP_SYS   "/sys/kernel/mm/transparent_hugepage/"

/* Why a host region is on 4 KiB pages (mv_reg_req.why; 0: it is not, or
 * nobody said). */
enum mv_huge_why {
	MV_HUGE_WHY_NONE = 0,
	MV_HUGE_WHY_NEVER = 1,     /* the client asked for 4 KiB pages */
	MV_HUGE_WHY_SMALL = 2,     /* smaller than one huge page */
	MV_HUGE_WHY_NONE_FREE = 3, /* the pool could not back it and shmem THP is off */
};

/* What the kernel offers now: the 2 MiB hugetlb pool and shmem THP. */
struct mv_huge_state {
	long total, free, resv; /* 2 MiB hugetlb pages: nr_hugepages, free, reserved */
	char thp[16];           /* shmem_enabled for 2 MiB pages ("never" when absent) */
	int thp_ok;             /* shmem gets THP where a mapping asks (MADV_HUGEPAGE) */
};

static inline long mv_huge_read_long(const char *path)
{
	char buf[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return strtol(buf, NULL, 10);
}

/* The bracketed word of a sysfs choice file ("always [advise] never"). */
static inline void mv_huge_read_choice(const char *path, char *out, size_t outlen)
{
	char buf[128];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	char *a, *b;

	if (fd >= 0)
		close(fd);
	snprintf(out, outlen, "%s", "");
	if (n <= 0)
		return;
	buf[n] = 0;
	a = strchr(buf, '[');
	b = a ? strchr(a, ']') : NULL;
	if (a && b)
		snprintf(out, outlen, "%.*s", (int)(b - a - 1), a + 1);
}

static inline void mv_huge_read(struct mv_huge_state *h)
{
	char top[16], pmd[16];

	memset(h, 0, sizeof(*h));
	h->total = mv_huge_read_long(MV_HUGE_SYS "nr_hugepages");
	h->free = mv_huge_read_long(MV_HUGE_SYS "free_hugepages");
	h->resv = mv_huge_read_long(MV_HUGE_SYS "resv_hugepages");
	/* The 2 MiB size's own setting wins unless it says "inherit". */
	mv_huge_read_choice(MV_THP_SYS "shmem_enabled", top, sizeof(top));
	mv_huge_read_choice(MV_THP_SYS "hugepages-2048kB/shmem_enabled", pmd, sizeof(pmd));
	snprintf(h->thp, sizeof(h->thp), "%s",
	         pmd[0] && strcmp(pmd, "inherit") ? pmd
	         : top[0]                         ? top
	                                          : "never");
	h->thp_ok = !strcmp(h->thp, "always") || !strcmp(h->thp, "within_size") ||
	            !strcmp(h->thp, "advise") || !strcmp(h->thp, "force");
}

/* Free 2 MiB pages not promised to a mapping already. */
static inline long mv_huge_avail(const struct mv_huge_state *h)
{
	return h->free > h->resv ? h->free - h->resv : 0;
}

/* Why a region of len bytes is on 4 KiB pages, in words with the fix. */
static inline void mv_huge_why_text(char *buf, size_t n, uint32_t why, uint64_t len,
                                    const struct mv_huge_state *h)
{
	switch (why) {
	case MV_HUGE_WHY_NEVER:
		snprintf(buf, n,
		         "the client asked for 4 KiB pages (MVC_HUGEPAGES=never or "
		         "mvc_opts.hugepages)");
		break;
	case MV_HUGE_WHY_SMALL:
		snprintf(buf, n, "%llu bytes is less than one 2 MiB page", (unsigned long long)len);
		break;
	case MV_HUGE_WHY_NONE_FREE:
		snprintf(
		    buf, n,
		    "the hugetlb pool has %ld of %ld 2 MiB pages free, %llu needed (sysctl "
		    "vm.nr_hugepages), and shmem THP is %s (advise in shmem_enabled allows it)",
		    mv_huge_avail(h), h->total,
		    (unsigned long long)((len + MV_HUGE_SIZE - 1) / MV_HUGE_SIZE), h->thp);
		break;
	default:
		snprintf(buf, n, "%s", "");
	}
}

/* The page size of fd's file system: a hugetlbfs file's huge page, else
 * the base page. */
static inline uint64_t mv_huge_fd_page(int fd)
{
	struct statfs sf;

	if (fstatfs(fd, &sf) == 0 && (unsigned long)sf.f_type == HUGETLBFS_MAGIC && sf.f_bsize > 0)
		return (uint64_t)sf.f_bsize;
	return (uint64_t)sysconf(_SC_PAGESIZE);
}

/*
 * Maps [off, off + len) of fd shared, read-write: from the page of fd's
 * file system at or below off (a hugetlb page for hugetlbfs: the kernel
 * maps no less), at a 2 MiB-aligned address when thp (so that shmem's huge
 * pages map as such; MADV_HUGEPAGE asked for it first), and populates the
 * page tables when populate (MADV_POPULATE_WRITE: an error where
 * MAP_POPULATE would fault later; a kernel without it faults on use).
 * *map and *map_len: what to munmap; returns the address of off, or NULL
 * with errno set.
 */
static inline uint8_t *mv_huge_map(int fd, uint64_t off, uint64_t len, int thp, int populate,
                                   uint8_t **map, size_t *map_len)
{
	uint64_t pg = mv_huge_fd_page(fd), moff = off & ~(pg - 1);
	size_t mlen = (size_t)((len + (off - moff) + pg - 1) & ~(pg - 1));
	uint8_t *p;

	if (thp) {
		/* Room for an aligned start, then the file over it. */
		uint8_t *r = mmap(NULL, mlen + MV_HUGE_SIZE, PROT_NONE,
		                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (r == MAP_FAILED)
			return NULL;
		uint8_t *a = (uint8_t *)(((uintptr_t)r + MV_HUGE_SIZE - 1) & ~(MV_HUGE_SIZE - 1));
		p = mmap(a, mlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)moff);
		if (p == MAP_FAILED) {
			int e = errno;
			munmap(r, mlen + MV_HUGE_SIZE);
			errno = e;
			return NULL;
		}
		if (a > r)
			munmap(r, (size_t)(a - r));
		if (r + mlen + MV_HUGE_SIZE > a + mlen)
			munmap(a + mlen, (size_t)(r + mlen + MV_HUGE_SIZE - (a + mlen)));
		madvise(p, mlen, MADV_HUGEPAGE);
	} else {
		p = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)moff);
		if (p == MAP_FAILED)
			return NULL;
	}
	if (populate && madvise(p, mlen, MADV_POPULATE_WRITE) && errno != EINVAL) {
		int e = errno;
		munmap(p, mlen);
		errno = e;
		return NULL;
	}
	*map = p;
	*map_len = mlen;
	return p + (off - moff);
}

#endif
