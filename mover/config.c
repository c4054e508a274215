/* SPDX-License-Identifier: MIT */
/*
 * The mover's settings from its command line, its config file and its
 * environment (config.h says the rules). One table, opts[], drives all
 * three, --help and --check-config.
 */
#include "config.h"
#include "log.h"
#include "mv_sock.h" /* mv_default_socket, MVC_VERSION, MV_MAX_SHARDS */

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

enum mv_src { SRC_BUILTIN = 0, SRC_ENV, SRC_FILE, SRC_CMDLINE };

#define F(field) offsetof(struct mv_config, field)
#define SUN_MAX  (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* Every setting of the top section, in --help's order. */
static const struct mv_key opts[] = {
    {"socket", "socket", 0, MV_KEY_PATH, F(socket_path), 0, SUN_MAX, NULL, "PATH",
     "$MOVER_SOCKET, else $XDG_RUNTIME_DIR/mover.sock, else /tmp/mover-UID.sock",
     "control socket, mode 0600 (default $MOVER_SOCKET, else\n"
     "$XDG_RUNTIME_DIR/mover.sock, else /tmp/mover-UID.sock)"},
    {"provider", "provider", 0, MV_KEY_STR, F(provider), 0, 63, NULL, "P", "auto",
     "auto|efa|verbs|tcp|shm (default auto: efa, verbs, tcp)"},
    {"iface", "iface", 0, MV_KEY_STR, F(iface), 0, 63, NULL, "NAME", "every one",
     "use this interface/domain only (e.g. lo, veth0)"},
    {"shards", "shards", 0, MV_KEY_INT, F(nshards), 1, MV_MAX_SHARDS, NULL, "N", "one per NIC",
     "N shards; NICs are reused round-robin when fewer\n(default: one shard per NIC)"},
    {"cpus", "cpus", 0, MV_KEY_STR, F(cpus), 0, 4095, NULL, "LIST", "hwloc: near each NIC",
     "pin shard i to the i-th CPU of LIST (default: hwloc)"},
    {"op_timeout", "op-timeout", 0, MV_KEY_SECONDS, F(op_timeout_ms), 0, 86400, NULL, "S", "10",
     "fail a write the fabric has not completed in S seconds\n"
     "(default 10: a peer that died or never answered)"},
    {"heartbeat", "heartbeat", 0, MV_KEY_SECONDS, F(heartbeat_ms), 0, 3600, NULL, "S", "1",
     "send each peer mover a heartbeat every S seconds over the\n"
     "fabric; one silent for 2 S is hung or unreachable, and\n"
     "the expectations naming it fail (default 1)"},
    {"trace", "trace", 0, MV_KEY_PATH, F(trace), 0, 4095, NULL, "FILE", "none",
     "record every batch to FILE (see mvtrace; also switched\n"
     "at run time with 'mvtrace start|stop')"},
    {"trace_hops", "trace-hops", 0, MV_KEY_BOOL, F(trace_hops), 0, 0, "yes", NULL, "no",
     "each batch's record followed by its hops: when its END\n"
     "was taken, its last write posted, its data done, its\n"
     "immediate done, its completion published"},
    {"no_gpu_copy", "no-gpu-copy", 0, MV_KEY_BOOL, F(no_gpu_copy), 0, 0, "yes", NULL, "no",
     "never copy into a same-host peer's GPU memory with CUDA;\n"
     "send it as landing messages, as to another host"},
    {"gpu_path", "gpu-path", 0, MV_KEY_STR, F(gpu_path), 0, 15, NULL, "PATH", "auto",
     "auto|fabric|copy|staged: how writes of GPU memory move\n"
     "(default auto: the fastest the mover measured at start;\n"
     "a forced path is used wherever it can work)"},
    {"no_host_copy", "no-host-copy", 0, MV_KEY_BOOL, F(no_host_copy), 0, 0, "yes", NULL, "no",
     "never copy into a same-host peer mover's host memory;\n"
     "write it through the fabric, as to another host"},
    {"allow_any_uid", "allow-any-uid", 0, MV_KEY_BOOL, F(allow_any_uid), 0, 0, "yes", NULL, "no",
     "serve clients of every uid (default: own uid only)"},
    {"admin_group", "admin-group", 0, MV_KEY_STR, F(admin_group), 0, 255, NULL, "G", "none",
     "members of group G (name or number) may read stats and\n"
     "start traces (always: the mover's own uid and root)"},
    {"weight_uid", "weight-uid", 0, MV_KEY_WEIGHTS, F(weights), 0, 0, NULL, "UID:W,...", "1 each",
     "clients of uid UID get W shares (1-100) of a shard that\n"
     "several clients use at once (default 1 each)"},
    {"fair_piece", "fair-piece", 0, MV_KEY_INT, F(fair_piece), 4096, 4 << 20, NULL, "BYTES",
     "32768",
     "bytes one post carries at most while a shard is shared,\n"
     "a weight-1 client's credit per turn (default 32768, and less,\n"
     "8192 at least, where posts copy slowly; set, it is fixed)"},
    {"fair_inflight", "fair-inflight", 0, MV_KEY_INT, F(fair_inflight), 65536, 1 << 30, NULL,
     "BYTES", "262144; 65536 on tcp",
     "bytes all clients of a shared shard may have in flight,\n"
     "shared by weight (default 262144, and 65536 on tcp)"},
    {"etcd", "etcd", 0, MV_KEY_STR, F(etcd), 0, 1023, NULL, "ENDPOINTS", "none",
     "join a cluster in etcd at ENDPOINTS (host:port,...): register\n"
     "there, watch the members, publish and look up named regions"},
    {"cluster", "cluster", 0, MV_KEY_STR, F(cluster), 0, 63, NULL, "NAME", "none",
     "the cluster's name with --etcd (keys under /mover/NAME/)"},
    {"etcd_ttl", "etcd-ttl", 0, MV_KEY_SECONDS, F(etcd_ttl_ms), 0, 3600, NULL, "S", "10",
     "the etcd lease: a mover that dies leaves the cluster\n"
     "about S seconds later (default 10)"},
#define QUOTA(who, res, idx, what)                                                                 \
	{                                                                                          \
		"quota_" #who "_" #res, "quota-" #who "-" #res, 0, MV_KEY_AMOUNT,                  \
		    F(quota.who[idx]), 0, 0, NULL, "N", "unlimited", what                          \
	}
    QUOTA(client, bytes, MV_Q_BYTES, "bytes one client may register (K, M, G, T)"),
    QUOTA(client, regions, MV_Q_REGIONS, "regions one client may hold"),
    QUOTA(client, peers, MV_Q_PEERS, "peers one client may add"),
    QUOTA(client, imports, MV_Q_IMPORTS, "regions one client may import"),
    QUOTA(client, batches, MV_Q_BATCHES, "batches one client may have in flight"),
    QUOTA(client, arena, MV_Q_ARENA, "list-arena bytes of one client (K, M, G, T)"),
    QUOTA(uid, bytes, MV_Q_BYTES, "bytes the clients of one uid may register together"),
    QUOTA(uid, regions, MV_Q_REGIONS, "regions the clients of one uid may hold together"),
    QUOTA(uid, peers, MV_Q_PEERS, "peers the clients of one uid may add together"),
    QUOTA(uid, imports, MV_Q_IMPORTS, "imports of the clients of one uid together"),
    QUOTA(uid, batches, MV_Q_BATCHES, "batches in flight of one uid's clients together"),
    QUOTA(uid, arena, MV_Q_ARENA, "list-arena bytes of one uid's clients together"),
#undef QUOTA
    {"log_level", "log-level", 0, MV_KEY_LEVEL, F(log_level), 0, 0, NULL, "LEVEL", "info",
     "error, warn, info (default) or debug"},
    {"log_level", "verbose", 'v', MV_KEY_LEVEL, F(log_level), 0, 0, "debug", NULL, NULL,
     "log client events too (log_level debug)"},
    {"log_level", "quiet", 'q', MV_KEY_LEVEL, F(log_level), 0, 0, "warn", NULL, NULL,
     "log warnings and errors only (log_level warn)"},
    {"log", "log", 0, MV_KEY_PATH, F(log), 0, 4095, NULL, "FILE", "stderr",
     "append the log to FILE, reopened on SIGHUP (default:\n"
     "stderr, which journald takes under systemd)"},
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))
_Static_assert(NOPTS <= sizeof(((struct mv_config *)0)->from), "from[] has a slot per row");

/*
 * Sections: today only the top one. A section with an argument ("[uid
 * 1000]") gets open() to find or make its struct; see config.h.
 */
struct mv_section {
	const char *name; /* "" for the top section */
	const struct mv_key *keys;
	size_t nkeys;
	void *(*open)(struct mv_config *cfg, const char *arg, char *why, size_t whylen);
};

static void *top_open(struct mv_config *cfg, const char *arg, char *why, size_t whylen)
{
	(void)arg;
	(void)why;
	(void)whylen;
	return cfg;
}

static const struct mv_section sections[] = {
    {"", opts, NOPTS, top_open},
};

/* Options that are no setting (no key): codes past the table's. */
enum { O_CONFIG = 1000, O_NO_CONFIG, O_CHECK, O_HELP = 'h', O_VERSION = 'V' };

static int is_key_row(const struct mv_key *k)
{
	return !k->fixed || k->type == MV_KEY_BOOL;
}

static char *own(struct mv_config *cfg, const char *s)
{
	char *d = strdup(s);

	if (d && cfg->nowned < (int)(sizeof(cfg->owned) / sizeof(cfg->owned[0])))
		cfg->owned[cfg->nowned++] = d;
	return d; /* (past 40 strings, leaked: never with today's 14 rows) */
}

void mv_config_free(struct mv_config *cfg)
{
	for (int i = 0; i < cfg->nowned; i++)
		free(cfg->owned[i]);
	cfg->nowned = 0;
}

static int parse_bool(const char *v)
{
	static const char *const yes[] = {"yes", "true", "on", "1"}, *const no[] = {"no", "false",
	                                                                            "off", "0"};
	for (int i = 0; i < 4; i++) {
		if (!strcmp(v, yes[i]))
			return 1;
		if (!strcmp(v, no[i]))
			return 0;
	}
	return -1;
}

/* Sets k's field of base from text v; 0, or -1 with why saying what to give. */
static int set_value(struct mv_config *cfg, void *base, const struct mv_key *k, const char *v,
                     char *why, size_t whylen)
{
	char *end;
	void *field = (char *)base + k->off;

	if (!*v) {
		snprintf(why, whylen, "no value");
		return -1;
	}
	switch (k->type) {
	case MV_KEY_STR:
	case MV_KEY_PATH:
		if (strlen(v) > (size_t)k->max) {
			snprintf(why, whylen, "%zu bytes; at most %.0f", strlen(v), k->max);
			return -1;
		}
		*(const char **)field = own(cfg, v);
		return 0;
	case MV_KEY_INT: {
		errno = 0;
		long n = strtol(v, &end, 10);
		if (errno || *end || end == v || n < k->min || n > k->max) {
			snprintf(why, whylen, "give a whole number from %.0f to %.0f", k->min,
			         k->max);
			return -1;
		}
		*(int *)field = (int)n;
		return 0;
	}
	case MV_KEY_SECONDS: {
		errno = 0;
		double s = strtod(v, &end);
		if (errno || *end || end == v || !isfinite(s) || s <= k->min || s > k->max ||
		    (int)(s * 1000) <= 0) {
			snprintf(why, whylen, "give seconds above %g, at most %g (0.001 at least)",
			         k->min, k->max);
			return -1;
		}
		*(int *)field = (int)(s * 1000);
		return 0;
	}
	case MV_KEY_BOOL: {
		int b = parse_bool(v);
		if (b < 0) {
			snprintf(why, whylen, "give yes or no (true/false, on/off, 1/0)");
			return -1;
		}
		*(int *)field = b;
		return 0;
	}
	case MV_KEY_AMOUNT: {
		unsigned long long n;
		unsigned shift = 0;
		if (!strcmp(v, "unlimited")) {
			*(uint64_t *)field = UINT64_MAX;
			return 0;
		}
		errno = 0;
		n = strtoull(v, &end, 10);
		switch (end != v ? *end : 0) {
		case 'K':
		case 'k':
			shift = 10;
			end++;
			break;
		case 'M':
		case 'm':
			shift = 20;
			end++;
			break;
		case 'G':
		case 'g':
			shift = 30;
			end++;
			break;
		case 'T':
		case 't':
			shift = 40;
			end++;
			break;
		}
		if (errno || *end || end == v || *v == '-' || n == 0 ||
		    (shift && n > UINT64_MAX >> shift)) {
			snprintf(why, whylen,
			         "give a number above 0 (sizes take K, M, G or T) or 'unlimited'");
			return -1;
		}
		*(uint64_t *)field = (uint64_t)n << shift;
		return 0;
	}
	case MV_KEY_WEIGHTS: {
		struct mv_config *c = base;
		const char *p = v;
		c->nweights = 0;
		while (*p) {
			unsigned long uid, w = 0;
			errno = 0;
			uid = strtoul(p, &end, 10);
			if (end != p && *end == ':')
				w = strtoul(end + 1, &end, 10);
			while (*end == ' ')
				end++;
			if (errno || w < 1 || w > MV_WEIGHT_MAX || uid > UINT32_MAX ||
			    (*end && *end != ',') || c->nweights == MV_MAX_WEIGHTS) {
				snprintf(
				    why, whylen,
				    "give UID:W pairs split by commas, W from 1 to %u, at most "
				    "%u of them",
				    MV_WEIGHT_MAX, MV_MAX_WEIGHTS);
				return -1;
			}
			c->weights[c->nweights++] =
			    (struct mv_uid_weight){(uint32_t)uid, (uint32_t)w};
			p = *end ? end + 1 : end;
			while (*p == ' ')
				p++;
		}
		return 0;
	}
	case MV_KEY_LEVEL: {
		int l = mv_level_parse(v);
		if (l < 0) {
			snprintf(why, whylen, "give error, warn, info or debug");
			return -1;
		}
		*(int *)field = l;
		return 0;
	}
	}
	return -1;
}

/* Edit distance of two short words, for "did you mean". */
static int distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	int d[64];

	if (la > 62 || lb > 62)
		return 99;
	for (size_t j = 0; j <= lb; j++)
		d[j] = (int)j;
	for (size_t i = 1; i <= la; i++) {
		int prev = d[0];
		d[0] = (int)i;
		for (size_t j = 1; j <= lb; j++) {
			int t = d[j], c = prev + (a[i - 1] != b[j - 1]);
			if (d[j] + 1 < c)
				c = d[j] + 1;
			if (d[j - 1] + 1 < c)
				c = d[j - 1] + 1;
			d[j] = c;
			prev = t;
		}
	}
	return d[lb];
}

static const struct mv_key *find_key(const struct mv_section *sec, const char *key, int *row)
{
	for (size_t i = 0; i < sec->nkeys; i++)
		if (is_key_row(&sec->keys[i]) && !strcmp(sec->keys[i].key, key)) {
			*row = (int)i;
			return &sec->keys[i];
		}
	return NULL;
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
		s[--n] = 0;
	return s;
}

/* Rows of the top section that share row r's key (log_level's -v, -q). */
static int same_key(int a, int b)
{
	return !strcmp(opts[a].key, opts[b].key);
}

static int key_from(const struct mv_config *cfg, int row)
{
	int src = SRC_BUILTIN;

	for (size_t i = 0; i < NOPTS; i++)
		if (same_key((int)i, row) && cfg->from[i] > src)
			src = cfg->from[i];
	return src;
}

static int read_file(struct mv_config *cfg, const char *path, char *why, size_t whylen)
{
	FILE *f = fopen(path, "re");
	struct mv_config scratch = {0};
	const struct mv_section *sec = &sections[0];
	void *base = sec->open(cfg, NULL, why, whylen);
	char *buf = NULL, err[160];
	size_t cap = 0;
	ssize_t n;
	int lineno = 0, ret = -1;
	struct stat st;

	if (!f) {
		snprintf(why, whylen, "%s: cannot read: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s: not a regular file", path);
		goto out;
	}
	while ((n = getline(&buf, &cap, f)) >= 0) {
		lineno++;
		if ((size_t)n != strlen(buf)) {
			snprintf(why, whylen, "%s:%d: a NUL byte: not a text file", path, lineno);
			goto out;
		}
		if (n > 4096) {
			snprintf(why, whylen, "%s:%d: line of %zd bytes; at most 4096", path,
			         lineno, n);
			goto out;
		}
		char *s = trim(buf);
		if (!*s || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			char *close = strchr(s, ']');
			if (!close || trim(close + 1)[0]) {
				snprintf(why, whylen, "%s:%d: a section header is [name] alone",
				         path, lineno);
				goto out;
			}
			*close = 0;
			snprintf(why, whylen,
			         "%s:%d: unknown section [%.40s]: this mover's settings are all "
			         "top-level keys",
			         path, lineno, trim(s + 1));
			goto out;
		}
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(why, whylen, "%s:%d: expected 'key = value', found '%.40s'", path,
			         lineno, s);
			goto out;
		}
		*eq = 0;
		char *key = trim(s), *val = trim(eq + 1);
		size_t vl = strlen(val);
		if (val[0] == '"') {
			if (vl < 2 || val[vl - 1] != '"') {
				snprintf(why, whylen, "%s:%d: %s: unterminated quote", path, lineno,
				         key);
				goto out;
			}
			val[vl - 1] = 0;
			val++;
		}
		int row;
		const struct mv_key *k = find_key(sec, key, &row);
		if (!k) {
			const char *near = NULL;
			for (size_t i = 0; i < sec->nkeys; i++)
				if (is_key_row(&sec->keys[i]) &&
				    distance(key, sec->keys[i].key) <= 2)
					near = sec->keys[i].key;
			snprintf(why, whylen, "%s:%d: unknown key '%.40s'%s%s%s", path, lineno, key,
			         near ? " (did you mean '" : "", near ? near : "",
			         near ? "'?)" : "");
			goto out;
		}
		if (cfg->line[row]) {
			snprintf(why, whylen, "%s:%d: %s is set again (first at line %d)", path,
			         lineno, key, cfg->line[row]);
			goto out;
		}
		cfg->line[row] = lineno;
		/* The command line wins; its value is checked all the same. */
		int cmdline = key_from(cfg, row) == SRC_CMDLINE;
		if (set_value(cfg, cmdline ? (void *)&scratch : base, k, val, err, sizeof(err))) {
			snprintf(why, whylen, "%s:%d: %s = %.60s: %s", path, lineno, key, val, err);
			goto out;
		}
		if (!cmdline)
			cfg->from[row] = SRC_FILE;
	}
	if (ferror(f)) {
		snprintf(why, whylen, "%s: cannot read: %s", path, strerror(errno));
		goto out;
	}
	ret = 0;
out:
	mv_config_free(&scratch);
	free(buf);
	fclose(f);
	return ret;
}

static void print_opt(FILE *f, const char *shortname, const char *name, const char *arg,
                      const char *help)
{
	char head[64];

	snprintf(head, sizeof(head), "  %s%s--%s%s%s", shortname ? shortname : "",
	         shortname ? ", " : "", name, arg ? " " : "", arg ? arg : "");
	fprintf(f, "%-22s", head);
	if (strlen(head) >= 22)
		fprintf(f, "\n%22s", "");
	for (const char *p = help; *p; p++) {
		fputc(*p, f);
		if (*p == '\n')
			fprintf(f, "%22s", "");
	}
	fputc('\n', f);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: mover [options]\n");
	for (size_t i = 0; i < NOPTS; i++) {
		char s[4] = {'-', (char)opts[i].shortopt, 0};
		print_opt(f, opts[i].shortopt ? s : NULL, opts[i].opt, opts[i].arg, opts[i].help);
	}
	print_opt(f, NULL, "config", "FILE",
	          "read settings from FILE (default $MOVER_CONFIG, else\n" MV_CONFIG_DEFAULT
	          " when it exists)");
	print_opt(f, NULL, "no-config", NULL, "read no config file");
	print_opt(f, NULL, "check-config", NULL,
	          "check the settings, print them as a config file, exit");
	print_opt(f, "-h", "help", NULL, "print this help and exit");
	print_opt(f, "-V", "version", NULL, "print the version and exit");
	fprintf(f, "Every option above --config is also a key of the config file, with '_'\n"
	           "for '-': --op-timeout S is 'op_timeout = S', -v is 'log_level = debug'\n"
	           "(mover.conf(5)). The command line wins over the file, the file over the\n"
	           "environment. Exit status: 0 after SIGTERM's drain, 1 on a failure at\n"
	           "start, 2 on a bad command line, 78 on a bad config file or environment.\n");
}

static const char *src_name(const struct mv_config *cfg, int row, char *buf, size_t len)
{
	switch (key_from(cfg, row)) {
	case SRC_CMDLINE:
		for (size_t i = 0; i < NOPTS; i++)
			if (same_key((int)i, row) && cfg->from[i] == SRC_CMDLINE)
				snprintf(buf, len, "--%s", opts[i].opt);
		return buf;
	case SRC_FILE:
		snprintf(buf, len, "%s:%d", cfg->file, cfg->line[row]);
		return buf;
	case SRC_ENV:
		return "$MOVER_SOCKET";
	}
	return "built-in";
}

static void mv_config_print(const struct mv_config *cfg, void *file)
{
	FILE *f = file;
	char where[4200], val[4200];

	fprintf(f, "# mover %s: the settings it would run with (config file: %s)\n", MVC_VERSION,
	        cfg->file ? cfg->file : "none");
	for (size_t i = 0; i < NOPTS; i++) {
		const struct mv_key *k = &opts[i];
		const void *field = (const char *)cfg + k->off;
		int set = 1;
		if (!is_key_row(k))
			continue;
		switch (k->type) {
		case MV_KEY_STR:
		case MV_KEY_PATH: {
			const char *s = *(const char *const *)field;
			set = s != NULL;
			snprintf(val, sizeof(val), "%s", s ? s : "");
			break;
		}
		case MV_KEY_INT:
			set = *(const int *)field != 0;
			snprintf(val, sizeof(val), "%d", *(const int *)field);
			break;
		case MV_KEY_SECONDS:
			snprintf(val, sizeof(val), "%g", *(const int *)field / 1000.0);
			break;
		case MV_KEY_BOOL:
			snprintf(val, sizeof(val), "%s", *(const int *)field ? "yes" : "no");
			break;
		case MV_KEY_LEVEL:
			snprintf(val, sizeof(val), "%s", mv_level_name(*(const int *)field));
			break;
		case MV_KEY_WEIGHTS: {
			size_t o = 0;
			val[0] = 0;
			set = cfg->nweights > 0;
			for (uint32_t w = 0; w < cfg->nweights && o < sizeof(val) - 32; w++)
				o += (size_t)snprintf(val + o, sizeof(val) - o, "%s%u:%u",
				                      w ? "," : "", cfg->weights[w].uid,
				                      cfg->weights[w].weight);
			break;
		}
		case MV_KEY_AMOUNT: {
			uint64_t a = *(const uint64_t *)field;
			if (a == UINT64_MAX)
				snprintf(val, sizeof(val), "unlimited");
			else
				snprintf(val, sizeof(val), "%llu", (unsigned long long)a);
			break;
		}
		}
		const char *src = src_name(cfg, (int)i, where, sizeof(where));
		if (set)
			fprintf(f, "%s = %s%*s# %s\n", k->key, val,
			        (int)(strlen(k->key) + strlen(val) < 40
			                  ? 40 - strlen(k->key) - strlen(val)
			                  : 1),
			        "", src);
		else
			fprintf(f, "# %s = (%s)\n", k->key, k->dflt);
	}
}

int mv_config_load(struct mv_config *cfg, int argc, char **argv, char *why, size_t whylen)
{
	struct option lo[NOPTS + 6];
	char shorts[16] = "+hV", err[160];
	const char *config = NULL;
	int no_config = 0, check = 0, c, n = 0;

	memset(cfg, 0, sizeof(*cfg));
	cfg->provider = "auto";
	cfg->op_timeout_ms = 10000;
	cfg->heartbeat_ms = 1000;
	cfg->etcd_ttl_ms = 10000;
	for (int i = 0; i < MV_Q_N; i++)
		cfg->quota.client[i] = cfg->quota.uid[i] = UINT64_MAX; /* unlimited */
	cfg->log_level = MV_LOG_INFO;
	for (size_t i = 0; i < NOPTS; i++) {
		lo[n++] = (struct option){
		    opts[i].opt, opts[i].arg ? required_argument : no_argument, NULL, 256 + (int)i};
		if (opts[i].shortopt)
			shorts[strlen(shorts)] = (char)opts[i].shortopt;
	}
	lo[n++] = (struct option){"config", required_argument, NULL, O_CONFIG};
	lo[n++] = (struct option){"no-config", no_argument, NULL, O_NO_CONFIG};
	lo[n++] = (struct option){"check-config", no_argument, NULL, O_CHECK};
	lo[n++] = (struct option){"help", no_argument, NULL, O_HELP};
	lo[n++] = (struct option){"version", no_argument, NULL, O_VERSION};
	lo[n] = (struct option){0, 0, 0, 0};

	optind = 0; /* a full restart of getopt (tests call this more than once) */
	while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		int row = -1;
		if (c >= 256 && c < 256 + (int)NOPTS)
			row = c - 256;
		for (size_t i = 0; row < 0 && i < NOPTS; i++)
			if (opts[i].shortopt && opts[i].shortopt == c)
				row = (int)i;
		if (row >= 0) {
			const struct mv_key *k = &opts[row];
			const char *v = k->fixed ? k->fixed : optarg;
			if (set_value(cfg, cfg, k, v, err, sizeof(err))) {
				snprintf(why, whylen, "--%s %.60s: %s", k->opt, v, err);
				return MV_EX_USAGE;
			}
			for (size_t i = 0; i < NOPTS; i++) /* -q after -v: the last wins */
				if (same_key((int)i, row))
					cfg->from[i] = SRC_BUILTIN;
			cfg->from[row] = SRC_CMDLINE;
			continue;
		}
		switch (c) {
		case O_CONFIG:
			config = optarg;
			break;
		case O_NO_CONFIG:
			no_config = 1;
			break;
		case O_CHECK:
			check = 1;
			break;
		case O_HELP:
			usage(stdout);
			return 0;
		case O_VERSION:
			printf("mover %s (wire protocol %u)\n", MVC_VERSION, MV_WIRE_VERSION);
			return 0;
		default:
			snprintf(why, whylen, "bad command line; 'mover --help' lists the options");
			return MV_EX_USAGE;
		}
	}
	if (optind < argc) {
		snprintf(why, whylen, "unexpected argument '%.60s' (see --help)", argv[optind]);
		return MV_EX_USAGE;
	}
	if (config && no_config) {
		snprintf(why, whylen, "--config and --no-config together");
		return MV_EX_USAGE;
	}

	/* The file: --config, else $MOVER_CONFIG, else the default if there. */
	const char *env = getenv("MOVER_CONFIG");
	struct stat st;
	if (!config && !no_config && env) {
		if (*env && stat(env, &st)) {
			snprintf(why, whylen, "MOVER_CONFIG=%.60s: %s", env, strerror(errno));
			return MV_EX_CONFIG;
		}
		config = *env ? env : NULL;
	} else if (!config && !no_config && stat(MV_CONFIG_DEFAULT, &st) == 0) {
		config = MV_CONFIG_DEFAULT;
	}
	if (config) {
		cfg->file = own(cfg, config);
		if (read_file(cfg, cfg->file, why, whylen))
			return MV_EX_CONFIG;
	}

	/* The environment, under both. */
	int srow;
	find_key(&sections[0], "socket", &srow);
	if (key_from(cfg, srow) == SRC_BUILTIN) {
		const char *ms = getenv("MOVER_SOCKET");
		char buf[4200];
		if (ms && *ms) {
			if (set_value(cfg, cfg, &opts[srow], ms, err, sizeof(err))) {
				snprintf(why, whylen, "MOVER_SOCKET=%.60s: %s", ms, err);
				return MV_EX_CONFIG;
			}
			cfg->from[srow] = SRC_ENV;
		} else {
			cfg->socket_path = own(cfg, mv_default_socket(buf, sizeof(buf)));
			if (strlen(cfg->socket_path) > SUN_MAX) {
				snprintf(why, whylen, "the default socket %.60s is over %zu bytes",
				         cfg->socket_path, SUN_MAX);
				return MV_EX_CONFIG;
			}
		}
	}
	if (check) {
		mv_config_print(cfg, stdout);
		return 0;
	}
	return MV_CONFIG_RUN;
}
