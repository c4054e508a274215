/* SPDX-License-Identifier: MIT */
/*
 * shmring: creation and validated attachment of ring segments, the slow
 * halves of the NEED_WAKEUP handshake (futex and eventfd wake-ups), and peer
 * liveness through pidfds. The per-slot fast paths are inline in shmring.h.
 */
#include "shmring.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* How long one futex sleep lasts before the peer's liveness is checked again. */
#define SHMRING_LIVENESS_SLICE_MS 20

static int fail(struct shmring *r, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->err, sizeof(r->err), fmt, ap);
	va_end(ap);
	return err;
}

static int is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

static void handle_init(struct shmring *r, void *base, size_t size, int fd, enum shmring_role role)
{
	struct shmring_layout *lay = base;
	struct shmring_side *mine = role == SHMRING_PRODUCER ? &lay->prod : &lay->cons;

	r->lay = lay;
	r->slots = (uint8_t *)base + lay->hdr.slots_off;
	r->capacity = lay->hdr.capacity;
	r->mask = r->capacity - 1;
	r->slot_size = lay->hdr.slot_size;
	r->role = role;
	r->fd = fd;
	r->map_size = size;
	r->doorbell = -1;
	r->pidfd = -1;
	r->corrupt = 0;
	r->err[0] = 0;
	if (role == SHMRING_PRODUCER) {
		r->local = atomic_load_explicit(&lay->prod.idx, memory_order_relaxed);
		r->cached =
		    atomic_load_explicit(&lay->cons.idx, memory_order_acquire) + r->capacity;
	} else {
		r->local = atomic_load_explicit(&lay->cons.idx, memory_order_relaxed);
		r->cached = r->local;
	}
	atomic_store_explicit(&mine->pid, (int32_t)getpid(), memory_order_release);
}

int shmring_create(struct shmring *r, const struct shmring_opts *o, enum shmring_role role)
{
	uint32_t cap = o && o->capacity ? o->capacity : 1024;
	uint32_t slot = o && o->slot_size ? o->slot_size : 64;
	uint64_t size;
	void *base;
	int fd, err;

	memset(r, 0, sizeof(*r));
	r->fd = r->doorbell = r->pidfd = -1;
	if (role != SHMRING_PRODUCER && role != SHMRING_CONSUMER)
		return fail(r, -EINVAL, "role must be SHMRING_PRODUCER or SHMRING_CONSUMER");
	if (!is_pow2(cap) || cap > SHMRING_MAX_CAPACITY)
		return fail(r, -EINVAL, "capacity %u must be a power of two up to %u", cap,
		            SHMRING_MAX_CAPACITY);
	if (!is_pow2(slot) || slot < SHMRING_MIN_SLOT || slot > SHMRING_MAX_SLOT)
		return fail(r, -EINVAL, "slot size %u must be a power of two in [%u, %u]", slot,
		            SHMRING_MIN_SLOT, SHMRING_MAX_SLOT);
	size = SHMRING_SLOTS_OFF + (uint64_t)cap * slot;

	fd = memfd_create(o && o->name ? o->name : "shmring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return fail(r, -errno, "memfd_create: %s", strerror(errno));
	if (ftruncate(fd, (off_t)size) < 0) {
		err = fail(r, -errno, "ftruncate to %llu: %s", (unsigned long long)size,
		           strerror(errno));
		goto err_close;
	}
	/* Sealed size: a peer can trust that the pages it maps stay there. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		err = fail(r, -errno, "sealing the ring: %s", strerror(errno));
		goto err_close;
	}
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (base == MAP_FAILED) {
		err = fail(r, -errno, "mmap %llu bytes: %s", (unsigned long long)size,
		           strerror(errno));
		goto err_close;
	}

	struct shmring_layout *lay = base;
	lay->hdr.abi = SHMRING_ABI;
	lay->hdr.hdr_size = sizeof(struct shmring_layout);
	lay->hdr.slot_size = slot;
	lay->hdr.capacity = cap;
	lay->hdr.slots_off = SHMRING_SLOTS_OFF;
	lay->hdr.seg_size = size;
	lay->hdr.user = o ? o->user : 0;
	atomic_store_explicit(&lay->prod.idx, o ? o->start : 0, memory_order_relaxed);
	atomic_store_explicit(&lay->cons.idx, o ? o->start : 0, memory_order_relaxed);
	/* Magic last: a segment with magic is complete. The fd reaches the other
	 * process through a system call, which orders these stores. */
	atomic_thread_fence(memory_order_release);
	lay->hdr.magic = SHMRING_MAGIC;

	handle_init(r, base, size, fd, role);
	return 0;

err_close:
	close(fd);
	r->fd = -1;
	return err;
}

int shmring_attach(struct shmring *r, int fd, enum shmring_role role)
{
	const struct shmring_hdr *h;
	struct stat st;
	void *base;
	int seals, err;

	memset(r, 0, sizeof(*r));
	r->fd = r->doorbell = r->pidfd = -1;
	if (role != SHMRING_PRODUCER && role != SHMRING_CONSUMER)
		return fail(r, -EINVAL, "role must be SHMRING_PRODUCER or SHMRING_CONSUMER");
	if (fstat(fd, &st) < 0)
		return fail(r, -errno, "fstat of ring fd %d: %s", fd, strerror(errno));
	if (st.st_size < (off_t)SHMRING_SLOTS_OFF)
		return fail(r, -EINVAL, "segment is %lld bytes, smaller than a ring header (%u)",
		            (long long)st.st_size, SHMRING_SLOTS_OFF);
	/* Unsealed, the creator could shrink the file and fault us with SIGBUS. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
		return fail(r, -EBADF, "ring fd %d is not a size-sealed memfd", fd);

	base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return fail(r, -errno, "mmap of ring: %s", strerror(errno));
	h = base;
	/* Copy what we check: the creator can still write the header. */
	struct shmring_hdr hdr;
	memcpy(&hdr, h, sizeof(hdr));

	if (hdr.magic != SHMRING_MAGIC) {
		err = fail(r, -ENOEXEC, "bad magic %#llx: not a shmring segment",
		           (unsigned long long)hdr.magic);
		goto err_unmap;
	}
	if (hdr.abi != SHMRING_ABI) {
		err = fail(r, -EPROTO, "ring ABI %u, this library speaks %u", hdr.abi, SHMRING_ABI);
		goto err_unmap;
	}
	if (hdr.hdr_size != sizeof(struct shmring_layout)) {
		err = fail(r, -EPROTO, "header size %u, expected %zu", hdr.hdr_size,
		           sizeof(struct shmring_layout));
		goto err_unmap;
	}
	if (!is_pow2(hdr.slot_size) || hdr.slot_size < SHMRING_MIN_SLOT ||
	    hdr.slot_size > SHMRING_MAX_SLOT) {
		err = fail(r, -EINVAL, "slot size %u is not a power of two in [%u, %u]",
		           hdr.slot_size, SHMRING_MIN_SLOT, SHMRING_MAX_SLOT);
		goto err_unmap;
	}
	if (!is_pow2(hdr.capacity) || hdr.capacity > SHMRING_MAX_CAPACITY) {
		err = fail(r, -EINVAL, "capacity %u is not a power of two up to %u", hdr.capacity,
		           SHMRING_MAX_CAPACITY);
		goto err_unmap;
	}
	if (hdr.seg_size != (uint64_t)st.st_size) {
		err = fail(r, -EINVAL, "header says %llu bytes, segment has %lld",
		           (unsigned long long)hdr.seg_size, (long long)st.st_size);
		goto err_unmap;
	}
	if (hdr.slots_off < sizeof(struct shmring_layout) || hdr.slots_off % 64 ||
	    hdr.slots_off > hdr.seg_size ||
	    (uint64_t)hdr.capacity * hdr.slot_size > hdr.seg_size - hdr.slots_off) {
		err =
		    fail(r, -EINVAL, "slots at %llu + %u x %u bytes do not fit a %llu-byte segment",
		         (unsigned long long)hdr.slots_off, hdr.capacity, hdr.slot_size,
		         (unsigned long long)hdr.seg_size);
		goto err_unmap;
	}
	uint32_t tail =
	    atomic_load_explicit(&((struct shmring_layout *)base)->prod.idx, memory_order_acquire);
	uint32_t head =
	    atomic_load_explicit(&((struct shmring_layout *)base)->cons.idx, memory_order_acquire);
	if ((uint32_t)(tail - head) > hdr.capacity) {
		err = fail(r, -EPROTO, "indices tail %u head %u are %u apart, capacity %u", tail,
		           head, tail - head, hdr.capacity);
		goto err_unmap;
	}

	/* Work from the checked copy from here on, never the live header. */
	struct shmring_layout *lay = base;
	handle_init(r, base, (size_t)st.st_size, fd, role);
	r->slots = (uint8_t *)base + hdr.slots_off;
	r->capacity = hdr.capacity;
	r->mask = hdr.capacity - 1;
	r->slot_size = hdr.slot_size;
	if (role == SHMRING_PRODUCER)
		r->cached =
		    atomic_load_explicit(&lay->cons.idx, memory_order_acquire) + r->capacity;
	if ((uint32_t)(r->cached - r->local) > r->capacity)
		r->cached = r->local; /* head moved since the check: re-read on first use */
	return 0;

err_unmap:
	munmap(base, (size_t)st.st_size);
	return err;
}

void shmring_close(struct shmring *r)
{
	if (r->lay)
		munmap(r->lay, r->map_size);
	if (r->fd >= 0)
		close(r->fd);
	if (r->pidfd >= 0)
		close(r->pidfd);
	r->lay = NULL;
	r->slots = NULL;
	r->fd = r->pidfd = -1;
}

int shmring_corrupt(struct shmring *r, const char *what, uint32_t seen)
{
	r->corrupt = 1;
	snprintf(r->err, sizeof(r->err),
	         "corrupt peer: %s %u is impossible from local index %u (capacity %u)", what, seen,
	         r->local, r->capacity);
	return -EPROTO;
}

static long futex(_Atomic uint32_t *uaddr, int op, uint32_t val, const struct timespec *ts)
{
	/* Not FUTEX_PRIVATE: the word is in memory shared between processes. */
	return syscall(SYS_futex, (uint32_t *)uaddr, op, val, ts, NULL, 0);
}

void shmring_wake(struct shmring *r)
{
	struct shmring_sleep *c = &r->lay->sleep;

	/* Clear first so a burst of commits before the consumer runs makes one
	 * system call, not one each. */
	uint32_t f = atomic_fetch_and_explicit(&c->flags, ~(SHMRING_NEED_WAKEUP | SHMRING_DOORBELL),
	                                       memory_order_seq_cst);
	if (!(f & SHMRING_NEED_WAKEUP))
		return;
	/* The consumer said where it sleeps; a producer without the eventfd
	 * still bumps the futex, so a wake-up is never lost, only slower. */
	if ((f & SHMRING_DOORBELL) && r->doorbell >= 0) {
		uint64_t one = 1;
		ssize_t n = write(r->doorbell, &one, sizeof(one));
		(void)n; /* EAGAIN means the counter is already non-zero: woken */
		return;
	}
	/* The producer's one write to the sleep block: see shmring_layout.h */
	atomic_fetch_add_explicit(&c->wake_seq, 1, memory_order_release);
	futex(&c->wake_seq, FUTEX_WAKE, 1, NULL);
}

static int arm(struct shmring *r, uint32_t how)
{
	/* F2 pairs with F1 in shmring_commit(): both sides store then load with
	 * seq_cst, so either we see the new tail or the producer sees the flag. */
	atomic_fetch_or_explicit(&r->lay->sleep.flags, how, memory_order_seq_cst);
	if (atomic_load_explicit(&r->lay->prod.idx, memory_order_seq_cst) != r->local) {
		shmring_disarm(r);
		return 1;
	}
	return 0;
}

int shmring_arm(struct shmring *r)
{
	return arm(r, SHMRING_NEED_WAKEUP);
}

int shmring_arm_doorbell(struct shmring *r)
{
	return arm(r, SHMRING_NEED_WAKEUP | SHMRING_DOORBELL);
}

void shmring_disarm(struct shmring *r)
{
	atomic_fetch_and_explicit(&r->lay->sleep.flags, ~(SHMRING_NEED_WAKEUP | SHMRING_DOORBELL),
	                          memory_order_relaxed);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int shmring_wait(struct shmring *r, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : now_ms() + timeout_ms;
	uint32_t pos;
	int n;

	for (;;) {
		n = shmring_peek(r, 1, &pos);
		if (n != 0)
			return n < 0 ? n : 1;
		if (r->pidfd >= 0 && shmring_peer_alive(r) == 0) {
			/* Entries committed before the exit are still there: drain first. */
			n = shmring_peek(r, 1, &pos);
			if (n != 0)
				return n < 0 ? n : 1;
			return fail(r, -EPIPE, "ring producer (pid %d) exited",
			            atomic_load_explicit(&r->lay->prod.pid, memory_order_relaxed));
		}
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return 0;
		if (left > SHMRING_LIVENESS_SLICE_MS && r->pidfd >= 0)
			left = SHMRING_LIVENESS_SLICE_MS;
		if (left > INT_MAX)
			left = INT_MAX;

		/* Read wake_seq before arming: a wake-up between arming and the
		 * futex call changes it, and FUTEX_WAIT then returns at once. */
		uint32_t seq = atomic_load_explicit(&r->lay->sleep.wake_seq, memory_order_acquire);
		if (shmring_arm(r))
			continue;
		struct timespec ts = {.tv_sec = left / 1000, .tv_nsec = (left % 1000) * 1000000};
		futex(&r->lay->sleep.wake_seq, FUTEX_WAIT, seq, &ts);
		shmring_disarm(r);
	}
}

int shmring_watch_peer(struct shmring *r, int pid)
{
	const struct shmring_side *other =
	    r->role == SHMRING_PRODUCER ? &r->lay->cons : &r->lay->prod;

	if (pid == 0)
		pid = atomic_load_explicit(&other->pid, memory_order_acquire);
	if (pid <= 0)
		return fail(r, -ENOTCONN, "the other side of the ring has not recorded a pid");
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return fail(r, -errno, "pidfd_open(%d): %s", pid, strerror(errno));
	if (r->pidfd >= 0)
		close(r->pidfd);
	r->pidfd = fd;
	return 0;
}

int shmring_peer_alive(struct shmring *r)
{
	struct pollfd p = {.fd = r->pidfd, .events = POLLIN};

	if (r->pidfd < 0)
		return -ENOTCONN;
	/* A pidfd polls readable once its process has exited. */
	if (poll(&p, 1, 0) < 0)
		return -errno;
	return p.revents ? 0 : 1;
}
