/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes ring attachment and the indices a peer writes: each input makes a
 * real memfd segment (its header bytes, size and seals from the input),
 * shmring_attach() takes it as consumer or producer, and on success a
 * script plays both the hostile peer (rewriting its index and the header
 * in shared memory) and the local side (peek, release, reserve, commit).
 * Asserts that an attached ring's geometry is the checked one, that no
 * slot handed out lies outside the segment, and that an impossible index
 * is refused for good rather than believed.
 *
 * Input: [role][seal bits][extra size, 2 bytes LE][script length] then up
 * to 1024 header bytes, then the script: per op one byte (low 3 bits the
 * op, high 5 a count) and for index ops 4 more bytes.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shmring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void slot_inside(const struct shmring *r, uint32_t pos)
{
	const uint8_t *base = (const uint8_t *)r->lay, *p = shmring_slot(r, pos);

	assert(p >= base + SHMRING_SLOTS_OFF && p + r->slot_size <= base + r->map_size);
}

static void run(struct shmring *r, const uint8_t *s, size_t n)
{
	struct shmring_layout *lay = r->lay;
	int cons = r->role == SHMRING_CONSUMER;

	for (size_t i = 0; i < n;) {
		uint8_t op = s[i] & 7, cnt = (uint8_t)(s[i] >> 3);
		uint32_t v = 0, pos;
		int got;
		i++;
		switch (op) {
		case 0: /* the peer writes its index */
		case 6: /* the peer rewrites the header */
			if (n - i < 4)
				return;
			memcpy(&v, s + i, 4);
			i += 4;
			if (op == 6)
				memcpy((uint8_t *)&lay->hdr + (cnt % 8) * 4, &v, 4);
			else if (cons)
				atomic_store(&lay->prod.idx, v);
			else
				atomic_store(&lay->cons.idx, v);
			break;
		case 1: /* take what is there, as a shard does */
		case 3:
			if (cons) {
				got = shmring_peek(r, cnt + 1u, &pos);
				if (got < 0) {
					assert(got == -EPROTO && r->corrupt);
					assert(shmring_peek(r, 1, &pos) == -EPROTO);
					break;
				}
				assert((uint32_t)got <= cnt + 1u && (uint32_t)got <= r->capacity);
				for (int k = 0; k < got; k++) {
					uint8_t buf[SHMRING_MAX_SLOT];
					slot_inside(r, pos + (uint32_t)k);
					memcpy(buf, shmring_slot(r, pos + (uint32_t)k),
					       r->slot_size);
				}
				shmring_release(r, (uint32_t)got);
			} else {
				got = shmring_reserve(r, cnt + 1u, &pos);
				if (got < 0) {
					assert(got == -EPROTO && r->corrupt);
					break;
				}
				for (int k = 0; k < got; k++) {
					slot_inside(r, pos + (uint32_t)k);
					memset(shmring_slot(r, pos + (uint32_t)k), 0xa5,
					       r->slot_size);
				}
				shmring_commit(r);
			}
			break;
		case 2: /* the local side arms and disarms its sleep */
			if (cons && !shmring_arm(r))
				shmring_disarm(r);
			break;
		default: /* the peer writes slots, the local side looks */
			if (cons)
				memset(r->slots, cnt, r->slot_size);
			break;
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct shmring r;
	uint8_t seg[SHMRING_SLOTS_OFF] = {0};

	if (size < 5)
		return 0;
	enum shmring_role role = data[0] & 1 ? SHMRING_PRODUCER : SHMRING_CONSUMER;
	uint8_t seals = data[1];
	size_t extra = (size_t)data[2] | (size_t)data[3] << 8;
	size_t slen = data[4];
	data += 5;
	size -= 5;
	size_t hlen = size > slen ? size - slen : 0;
	if (hlen > sizeof(seg))
		hlen = sizeof(seg);
	memcpy(seg, data, hlen);
	/* Segments from a few bytes to the header and 64 KiB of slots. */
	size_t segsize = seals & 8 ? extra % SHMRING_SLOTS_OFF : SHMRING_SLOTS_OFF + extra;

	int fd = memfd_create("fuzz_ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)segsize) ||
	    pwrite(fd, seg, segsize < sizeof(seg) ? segsize : sizeof(seg), 0) < 0)
		abort();
	int want = (seals & 1 ? 0 : F_SEAL_SHRINK) | (seals & 2 ? 0 : F_SEAL_GROW);
	if (want && fcntl(fd, F_ADD_SEALS, want))
		abort();
	int ret = shmring_attach(&r, fd, role);
	if (ret) {
		assert(ret < 0 && shmring_error(&r)[0]);
		close(fd);
		return 0;
	}
	/* Attached: a sealed segment whose header said what the handle holds. */
	struct shmring_hdr h;
	memcpy(&h, seg, sizeof(h));
	assert(!(seals & 3) && segsize >= SHMRING_SLOTS_OFF);
	assert(h.magic == SHMRING_MAGIC && h.abi == SHMRING_ABI && h.seg_size == segsize);
	assert(r.capacity == h.capacity && r.slot_size == h.slot_size);
	assert(r.capacity && !(r.capacity & (r.capacity - 1)));
	assert(h.slots_off + (uint64_t)r.capacity * r.slot_size <= segsize);
	run(&r, data + hlen, size - hlen);
	shmring_close(&r);
	return 0;
}
