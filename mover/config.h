/* SPDX-License-Identifier: MIT */
/*
 * The mover's settings: one table (config.c) gives every setting its
 * command-line option, its key in the config file, its type, range and
 * help, so that the two can never drift apart. Precedence, highest first:
 *
 *   command line  >  config file  >  environment ($MOVER_SOCKET)  >  built-in
 *
 * The config file is --config FILE, else $MOVER_CONFIG (empty: none), else
 * /etc/mover.conf when it exists; --no-config reads none. Its format
 * (mover.conf(5)):
 *
 *   # comment                       whole lines only ('#' or ';' first)
 *   key = value                     value to the end of the line, trimmed;
 *   key = "value with  spaces"      double quotes keep spaces (no escapes)
 *   [section]  or  [section ARG]    starts a section: the keys after it are
 *                                   that section's
 *
 * Keys before any section header are the top section's: one per option,
 * its long name with '_' for '-' (--op-timeout S is "op_timeout = S"). An
 * unknown key or section, a key given twice, a value out of range or a
 * malformed line fails start-up with FILE:LINE: reason and exit status 78
 * (EX_CONFIG); so does a malformed $MOVER_SOCKET or $MOVER_CONFIG.
 *
 * Adding settings. A key of the top section: one row in opts[] (config.c)
 * and a field in struct mv_config; the option, the key, --help, the example
 * file's check and --check-config follow. A new section (per-uid quotas,
 * say: "[uid 1000]" or "[group render]" with keys registered_bytes,
 * regions, peers, imports, batches, list_arena, weight): a table of
 * struct mv_key whose offsets are into the section's own struct, and one
 * row in sections[] whose open() finds or makes that struct for the
 * section's argument (checking it: a uid, a group name) and returns it.
 * Keys of sections have no command-line option (opt NULL).
 */
#ifndef MV_CONFIG_H
#define MV_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MV_EX_USAGE       2  /* a bad command line (getopt's convention) */
#define MV_EX_CONFIG      78 /* EX_CONFIG: a bad config file or environment */
#define MV_CONFIG_DEFAULT "/etc/mover.conf"

/* quota.c: what a client, and a uid's clients together, may hold. */
enum mv_quota_res {
	MV_Q_BYTES,   /* bytes registered */
	MV_Q_REGIONS, /* regions */
	MV_Q_PEERS,   /* peers added */
	MV_Q_IMPORTS, /* regions imported */
	MV_Q_BATCHES, /* batches in flight */
	MV_Q_ARENA,   /* list-arena bytes */
	MV_Q_N,
};
struct mv_quotas {
	uint64_t client[MV_Q_N]; /* UINT64_MAX: unlimited */
	uint64_t uid[MV_Q_N];
};

/* The weight of a uid's clients on a shard they share (weight_uid). */
struct mv_uid_weight {
	uint32_t uid;
	uint32_t weight; /* 1 to MV_WEIGHT_MAX; uids not listed weigh 1 */
};
#define MV_WEIGHT_MAX  100u
#define MV_MAX_WEIGHTS 64u

struct mv_config {
	const char *socket_path;
	const char *provider; /* auto, efa, verbs, tcp, shm */
	const char *iface;    /* domain/interface name, e.g. lo or veth0 */
	const char *cpus;     /* comma list overriding topology */
	int nshards;          /* 0: one per NIC */
	int allow_any_uid;
	const char *admin_group; /* --admin-group: its members administer the mover */
	gid_t admin_gid;         /* admin_group resolved at start-up (access.c) */
	struct mv_quotas quota;  /* --quota-client-X, --quota-uid-X */
	int op_timeout_ms;       /* a write whose peer completed none in this long fails */
	int heartbeat_ms;        /* between heartbeats to each peer mover (heartbeat.c) */
	int no_gpu_copy;         /* never path 2: same-host GPU regions land as messages */
	const char *gpu_path;    /* auto, or the path GPU memory takes where it can */
	int no_host_copy;        /* never copy into same-host peers' host regions: the fabric */
	struct mv_uid_weight weights[MV_MAX_WEIGHTS]; /* weight_uid = UID:W, ... */
	uint32_t nweights;
	/* Fair share while a shard is shared (post.c), 0 for its defaults (32
	 * KiB, 256 KiB, 64 KiB on tcp): the bytes one post carries at most, which is also a
	 * weight-1 client's credit per turn, and the bytes all clients may
	 * have in flight, shared by weight. post.c keeps a piece within 4 KiB
	 * to MV_CHUNK. */
	int fair_piece, fair_inflight;
	const char *etcd;    /* --etcd ENDPOINTS: join a cluster there (cluster.c) */
	const char *cluster; /* --cluster NAME: the cluster's name (keys /mover/NAME/) */
	int etcd_ttl_ms;     /* --etcd-ttl S: the lease; a dead mover is found in about S */
	const char *trace;   /* --trace FILE */
	int trace_hops;      /* --trace-hops */
	int log_level;       /* enum mv_level (log.h) */
	const char *log;     /* --log FILE: append there, not to stderr */
	const char *file;    /* the config file read, or NULL */
	/* Where each top-section key came from (enum mv_src) and, for the
	 * config file, its line; the strings this struct owns. */
	unsigned char from[64];
	int line[64];
	char *owned[40];
	int nowned;
};

enum mv_key_type {
	MV_KEY_STR,     /* any non-empty text; choices restricts it */
	MV_KEY_PATH,    /* a file name: non-empty, under 4096 bytes */
	MV_KEY_INT,     /* an integer in [min, max] */
	MV_KEY_SECONDS, /* seconds in (min, max], stored as int milliseconds */
	MV_KEY_BOOL,    /* yes/no, true/false, on/off, 1/0 */
	MV_KEY_LEVEL,   /* error, warn, info, debug */
	MV_KEY_AMOUNT,  /* a uint64_t count or size above 0 (K, M, G, T), or "unlimited" */
	MV_KEY_WEIGHTS, /* UID:W[,UID:W...] into weights[] and nweights */
};

/* One setting. For a top-section key, opt is its long option; fixed makes
 * the option a flag that sets the key to that value (-v: log_level debug). */
struct mv_key {
	const char *key; /* in the config file */
	const char *opt; /* long option without "--", or NULL */
	int shortopt;    /* 'v', or 0 */
	enum mv_key_type type;
	size_t off;        /* of the field in the section's struct */
	double min, max;   /* MV_KEY_INT, MV_KEY_SECONDS */
	const char *fixed; /* flag options: the value they set */
	const char *arg;   /* the argument's name in --help ("N", "FILE") */
	const char *dflt;  /* the default, as the example file writes it */
	const char *help;
};

/* mv_config_load()'s answer when the mover is to start. */
#define MV_CONFIG_RUN (-1)

/*
 * Fills cfg from the command line, the config file and the environment.
 * MV_CONFIG_RUN: start the mover with cfg. Else the exit status: 0 after
 * --help, --version or --check-config (their output on stdout), MV_EX_USAGE
 * or MV_EX_CONFIG after an error, which why says ("FILE:LINE: reason",
 * "--shards 0: ...", "MOVER_SOCKET: ...").
 */
int mv_config_load(struct mv_config *cfg, int argc, char **argv, char *why, size_t whylen);
/* Frees what mv_config_load() allocated. */
void mv_config_free(struct mv_config *cfg);

#endif
