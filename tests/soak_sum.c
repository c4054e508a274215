/* SPDX-License-Identifier: MIT */
/*
 * soak_sum: adds up the counts files of every soak client (tests/soak.sh)
 * and checks what the soak promises: every batch a client that exited
 * cleanly submitted was reported exactly once (ok + failed = submitted, no
 * report of a batch not in flight), no page arrived wrong, and bytes were
 * verified at the target. A client killed with SIGKILL had its batches in
 * flight die with it: counted apart, as submitted - ok - failed. Prints the
 * totals and a RESULT line; exit status 0 only if the checks hold.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "soak_counts.h"

static const char *cause_name[SOAK_CAUSES] = {"none",       "bad_desc",  "no_region", "no_import",
                                              "bounds",     "peer_gone", "provider",  "cancelled",
                                              "mover_gone", "protocol"};

int main(int argc, char **argv)
{
	struct soak_counts t = {0};
	uint64_t clients = 0, killed = 0, lost_inflight = 0, unreported = 0, unreadable = 0;

	for (int i = 1; i < argc; i++) {
		struct soak_counts n;
		int fd = open(argv[i], O_RDONLY);
		if (fd < 0 || read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n) ||
		    n.magic != SOAK_MAGIC) {
			/* Killed before it made its file: it submitted nothing. */
			unreadable++;
			if (fd >= 0)
				close(fd);
			continue;
		}
		close(fd);
		clients++;
		uint64_t open_batches = n.submitted - n.ok - n.failed;
		if (n.clean_exit) {
			unreported += open_batches;
		} else {
			killed++;
			lost_inflight += open_batches;
		}
		t.submitted += n.submitted;
		t.ok += n.ok;
		t.failed += n.failed;
		t.dup += n.dup;
		t.descs += n.descs;
		t.descs_ok += n.descs_ok;
		for (int k = 0; k < 3; k++)
			t.kind[k] += n.kind[k];
		t.verified += n.verified;
		t.bytes_verified += n.bytes_verified;
		t.verify_bad += n.verify_bad;
		t.imm_early += n.imm_early;
		t.imm_lost += n.imm_lost;
		t.back += n.back;
		t.relinked += n.relinked;
		for (int k = 0; k < SOAK_CAUSES; k++)
			t.cause[k] += n.cause[k];
	}
	printf("clients                %" PRIu64 " (%" PRIu64 " killed, %" PRIu64
	       " killed before they counted)\n",
	       clients, killed, unreadable);
	printf("batches submitted      %" PRIu64 " (paged %" PRIu64 ", writev %" PRIu64
	       ", write %" PRIu64 ")\n",
	       t.submitted, t.kind[0], t.kind[1], t.kind[2]);
	printf("  completed ok         %" PRIu64 "\n", t.ok);
	printf("  failed               %" PRIu64, t.failed);
	for (int k = 0; k < SOAK_CAUSES; k++)
		if (t.cause[k])
			printf(" %s=%" PRIu64, k < 10 && cause_name[k] ? cause_name[k] : "other",
			       t.cause[k]);
	printf("\n  in flight at a kill  %" PRIu64 " (died with their client)\n", lost_inflight);
	printf("  never reported       %" PRIu64 " (must be 0)\n", unreported);
	printf("  reported twice       %" PRIu64 " (must be 0)\n", t.dup);
	printf("descriptors            %" PRIu64 " (pages, segments and writes), %" PRIu64
	       " of them in batches that completed ok\n",
	       t.descs, t.descs_ok);
	printf("verified at the target %" PRIu64 " batches, %" PRIu64 " bytes; %" PRIu64
	       " pages wrong (must be 0)\n",
	       t.verified, t.bytes_verified, t.verify_bad);
	printf("immediates lost        %" PRIu64 " (their receiver's mover went), %" PRIu64
	       " of batches already failed\n",
	       t.imm_lost, t.imm_early);
	printf("mover came back        %" PRIu64 " events; peers imported again %" PRIu64 "\n",
	       t.back, t.relinked);
	int ok = unreported == 0 && t.dup == 0 && t.verify_bad == 0 && t.bytes_verified > 0;
	printf("RESULT soak ok=%d batches=%" PRIu64 " completed=%" PRIu64 " failed=%" PRIu64
	       " lost_with_client=%" PRIu64 " unreported=%" PRIu64 " dup=%" PRIu64 " descs=%" PRIu64
	       " descs_ok=%" PRIu64 " bytes_verified=%" PRIu64 " bad_pages=%" PRIu64
	       " back=%" PRIu64 "\n",
	       ok, t.submitted, t.ok, t.failed, lost_inflight, unreported, t.dup, t.descs,
	       t.descs_ok, t.bytes_verified, t.verify_bad, t.back);
	return ok ? 0 : 1;
}
