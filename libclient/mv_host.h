/* SPDX-License-Identifier: MIT */
/*
 * Which host is this: the kernel's boot id, 16 bytes. Two movers (or a
 * client and a mover) with the same boot id share the machine and its
 * GPUs. Internal to the project.
 */
#ifndef MV_HOST_H
#define MV_HOST_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static inline int mv_host_id(uint8_t id[16])
{
	char buf[64];
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	memset(id, 0, 16);
	if (n <= 0)
		return -EIO;
	buf[n] = 0;
	/* 36 characters of hex and dashes: keep the 32 hex digits as bytes. */
	for (int i = 0, k = 0; buf[i] && k < 32; i++) {
		char c = buf[i];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (v < 0)
			continue;
		id[k / 2] |= (uint8_t)(k % 2 ? v : v << 4);
		k++;
	}
	return 0;
}

#endif
