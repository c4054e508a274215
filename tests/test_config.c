/* SPDX-License-Identifier: MIT */
/*
 * The mover's settings (mover/config.c) and log (mover/log.c) on their own:
 * the command line over the config file over the environment; every way a
 * config file can be wrong fails with FILE:LINE and exit status 78; log
 * lines carry the mover id and their level, and a client's flood of one
 * kind of line is cut to MV_LOG_BURST lines and a count.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

static char dir[64], path[128];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/mvconf.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/mover.conf", dir);
	unsetenv("MOVER_CONFIG");
	unsetenv("MOVER_SOCKET");
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd)) {
		/* a temporary directory left behind */
	}
}

static void write_file(const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

/* mv_config_load on a NULL-terminated argument list. */
static int load(struct mv_config *cfg, char *why, const char *const *args)
{
	char *argv[32];
	int argc = 0;

	argv[argc++] = "mover";
	for (; *args; args++)
		argv[argc++] = (char *)*args;
	argv[argc] = NULL;
	why[0] = 0;
	return mv_config_load(cfg, argc, argv, why, 300);
}
#define LOAD(cfg, why, ...) load(cfg, why, (const char *const[]){__VA_ARGS__, NULL})

START_TEST(test_defaults_without_a_file)
{
	struct mv_config c;
	char why[300];

	setenv("XDG_RUNTIME_DIR", dir, 1);
	ck_assert_int_eq(LOAD(&c, why, "--no-config"), MV_CONFIG_RUN);
	ck_assert_str_eq(c.provider, "auto");
	ck_assert_int_eq(c.op_timeout_ms, 10000);
	ck_assert_int_eq(c.nshards, 0);
	ck_assert_int_eq(c.log_level, MV_LOG_INFO);
	ck_assert_ptr_null(c.iface);
	ck_assert_ptr_null(c.file);
	char want[128];
	snprintf(want, sizeof(want), "%s/mover.sock", dir);
	ck_assert_str_eq(c.socket_path, want);
	mv_config_free(&c);
}
END_TEST

START_TEST(test_file_values_and_the_command_line_wins)
{
	struct mv_config c;
	char why[300];

	write_file("# a comment\n"
	           "; another\n"
	           "\n"
	           "  shards = 3  \n"
	           "provider=tcp\n"
	           "op_timeout = 2.5\n"
	           "iface = \"lo\"\n"
	           "trace = \"/tmp/a trace  with spaces\"\n"
	           "trace_hops = on\n"
	           "allow_any_uid = false\n"
	           "log_level = warn\n"
	           "socket = /tmp/from-file.sock\n");
	ck_assert_int_eq(LOAD(&c, why, "--config", path), MV_CONFIG_RUN);
	ck_assert_int_eq(c.nshards, 3);
	ck_assert_str_eq(c.provider, "tcp");
	ck_assert_int_eq(c.op_timeout_ms, 2500);
	ck_assert_str_eq(c.iface, "lo");
	ck_assert_str_eq(c.trace, "/tmp/a trace  with spaces");
	ck_assert_int_eq(c.trace_hops, 1);
	ck_assert_int_eq(c.allow_any_uid, 0);
	ck_assert_int_eq(c.log_level, MV_LOG_WARN);
	ck_assert_str_eq(c.socket_path, "/tmp/from-file.sock");
	ck_assert_str_eq(c.file, path);
	mv_config_free(&c);

	/* Options win, before or after --config; -v is log_level debug. */
	setenv("MOVER_SOCKET", "/tmp/from-env.sock", 1);
	ck_assert_int_eq(LOAD(&c, why, "--shards", "2", "--config", path, "--provider", "shm", "-v",
	                      "--op-timeout", "7"),
	                 MV_CONFIG_RUN);
	ck_assert_int_eq(c.nshards, 2);
	ck_assert_str_eq(c.provider, "shm");
	ck_assert_int_eq(c.op_timeout_ms, 7000);
	ck_assert_int_eq(c.log_level, MV_LOG_DEBUG);
	ck_assert_str_eq(c.iface, "lo");
	/* The file's socket wins over the environment's. */
	ck_assert_str_eq(c.socket_path, "/tmp/from-file.sock");
	mv_config_free(&c);
	/* The last of -v and -q wins. */
	ck_assert_int_eq(LOAD(&c, why, "--config", path, "-v", "-q"), MV_CONFIG_RUN);
	ck_assert_int_eq(c.log_level, MV_LOG_WARN);
	mv_config_free(&c);
	ck_assert_int_eq(LOAD(&c, why, "--config", path, "--log-level", "error"), MV_CONFIG_RUN);
	ck_assert_int_eq(c.log_level, MV_LOG_ERROR);
	mv_config_free(&c);
}
END_TEST

START_TEST(test_environment_under_file_and_command_line)
{
	struct mv_config c;
	char why[300];

	write_file("shards = 4\n");
	setenv("MOVER_CONFIG", path, 1);
	setenv("MOVER_SOCKET", "/tmp/from-env.sock", 1);
	ck_assert_int_eq(LOAD(&c, why, "--provider", "tcp"), MV_CONFIG_RUN);
	ck_assert_int_eq(c.nshards, 4);
	ck_assert_str_eq(c.file, path);
	ck_assert_str_eq(c.socket_path, "/tmp/from-env.sock");
	mv_config_free(&c);
	ck_assert_int_eq(LOAD(&c, why, "--socket", "/tmp/opt.sock"), MV_CONFIG_RUN);
	ck_assert_str_eq(c.socket_path, "/tmp/opt.sock");
	mv_config_free(&c);
	/* --no-config reads neither. */
	ck_assert_int_eq(LOAD(&c, why, "--no-config"), MV_CONFIG_RUN);
	ck_assert_int_eq(c.nshards, 0);
	mv_config_free(&c);
	/* An empty MOVER_CONFIG: no file. */
	setenv("MOVER_CONFIG", "", 1);
	ck_assert_int_eq(LOAD(&c, why, "--provider", "tcp"), MV_CONFIG_RUN);
	ck_assert_ptr_null(c.file);
	mv_config_free(&c);
	/* A malformed environment: 78, naming the variable. */
	setenv("MOVER_CONFIG", "/nonexistent/mover.conf", 1);
	ck_assert_int_eq(LOAD(&c, why, "--provider", "tcp"), MV_EX_CONFIG);
	ck_assert_msg(strstr(why, "MOVER_CONFIG=/nonexistent/mover.conf"), "%s", why);
	mv_config_free(&c);
	unsetenv("MOVER_CONFIG");
	char longp[300];
	memset(longp, 'x', 200);
	longp[0] = '/';
	longp[200] = 0;
	setenv("MOVER_SOCKET", longp, 1);
	ck_assert_int_eq(LOAD(&c, why, "--no-config"), MV_EX_CONFIG);
	ck_assert_msg(strstr(why, "MOVER_SOCKET") && strstr(why, "at most 107"), "%s", why);
	mv_config_free(&c);
}
END_TEST

/* Each bad file: status 78 and "FILE:LINE: ..." with the words given. */
static void bad(const char *text, int line, const char *words)
{
	struct mv_config c;
	char why[300], want[200];

	write_file(text);
	ck_assert_int_eq(LOAD(&c, why, "--config", path), MV_EX_CONFIG);
	snprintf(want, sizeof(want), "%s:%d: ", path, line);
	ck_assert_msg(!strncmp(why, want, strlen(want)) && strstr(why, words),
	              "for %s: got '%s', want '%s...%s'", text, why, want, words);
	mv_config_free(&c);
}

START_TEST(test_every_malformed_file_names_its_line)
{
	bad("shards = 2\nshard = 3\n", 2, "unknown key 'shard' (did you mean 'shards'?)");
	bad("frobnicate = 1\n", 1, "unknown key 'frobnicate'");
	bad("# ok\nshards = 2\nshards = 3\n", 3, "shards is set again (first at line 2)");
	bad("shards = 0\n", 1, "shards = 0: give a whole number from 1 to 64");
	bad("shards = 65\n", 1, "from 1 to 64");
	bad("shards = 2x\n", 1, "give a whole number");
	bad("op_timeout = -1\n", 1, "give seconds");
	bad("op_timeout = nan\n", 1, "give seconds");
	bad("op_timeout = 0.0001\n", 1, "give seconds");
	bad("trace_hops = maybe\n", 1, "give yes or no");
	bad("log_level = loud\n", 1, "give error, warn, info or debug");
	bad("\n\nprovider\n", 3, "expected 'key = value'");
	bad("provider =\n", 1, "provider = : no value");
	bad("provider = \"tcp\n", 1, "unterminated quote");
	bad("[uid 1000]\nregions = 4\n", 1, "unknown section [uid 1000]");
	bad("[broken\n", 1, "a section header is [name] alone");
	bad("verbose = yes\n", 1, "unknown key 'verbose'");
	/* The command line's value wins, but the file's is still checked. */
	write_file("shards = 0\n");
	struct mv_config c;
	char why[300];
	ck_assert_int_eq(LOAD(&c, why, "--config", path, "--shards", "2"), MV_EX_CONFIG);
	ck_assert_msg(strstr(why, ":1: shards = 0"), "%s", why);
	mv_config_free(&c);
	/* A socket path longer than a socket takes. */
	char longline[400];
	snprintf(longline, sizeof(longline), "socket = /%0200d\n", 0);
	bad(longline, 1, "at most 107");
	/* A line past 4096 bytes, a NUL byte. */
	char *big = malloc(5000);
	memset(big, 'x', 4999);
	memcpy(big, "cpus = ", 7);
	big[4998] = '\n';
	big[4999] = 0;
	bad(big, 1, "at most 4096");
	free(big);
	FILE *f = fopen(path, "w");
	fwrite("shards = 2\nprov\0ider = tcp\n", 1, 27, f);
	fclose(f);
	ck_assert_int_eq(LOAD(&c, why, "--config", path), MV_EX_CONFIG);
	ck_assert_msg(strstr(why, ":2: a NUL byte"), "%s", why);
	mv_config_free(&c);
	/* A file that is not there, or not a file. */
	ck_assert_int_eq(LOAD(&c, why, "--config", "/nonexistent.conf"), MV_EX_CONFIG);
	ck_assert_msg(strstr(why, "/nonexistent.conf: cannot read"), "%s", why);
	mv_config_free(&c);
	ck_assert_int_eq(LOAD(&c, why, "--config", dir), MV_EX_CONFIG);
	ck_assert_msg(strstr(why, "not a regular file"), "%s", why);
	mv_config_free(&c);
}
END_TEST

START_TEST(test_bad_command_lines_are_usage_errors)
{
	struct mv_config c;
	char why[300];

	ck_assert_int_eq(LOAD(&c, why, "--no-config", "--shards", "0"), MV_EX_USAGE);
	ck_assert_msg(strstr(why, "--shards 0: give a whole number"), "%s", why);
	mv_config_free(&c);
	ck_assert_int_eq(LOAD(&c, why, "--no-config", "--log-level", "loud"), MV_EX_USAGE);
	mv_config_free(&c);
	ck_assert_int_eq(LOAD(&c, why, "--no-config", "stray"), MV_EX_USAGE);
	ck_assert_msg(strstr(why, "unexpected argument 'stray'"), "%s", why);
	mv_config_free(&c);
	ck_assert_int_eq(LOAD(&c, why, "--no-config", "--config", path), MV_EX_USAGE);
	mv_config_free(&c);
}
END_TEST

/* ---- the log ---- */

static char *slurp(const char *p)
{
	static char buf[65536];
	FILE *f = fopen(p, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

	if (f)
		fclose(f);
	buf[n] = 0;
	return buf;
}

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

START_TEST(test_log_lines_rate_limit_and_levels)
{
	char why[256], lp[160];

	snprintf(lp, sizeof(lp), "%s/mover.log", dir);
	ck_assert_int_eq(mv_log_file(lp, why, sizeof(why)), 0);
	mv_log_id(0x1234abcd5678ef00ull);
	mv_log_level(MV_LOG_INFO);
	mv_log("hello %d", 42);
	mv_dbg("not written at info");
	mv_warn("a warning\nwith a forged second line");
	for (int i = 0; i < 25; i++)
		mv_log_client(MV_LOG_WARN, 777, "client (pid %d): bad message %d", 777, i);
	for (int i = 0; i < 3; i++)
		mv_log_client(MV_LOG_WARN, 778, "client (pid %d): bad message %d", 778, i);
	mv_log_level(MV_LOG_ERROR);
	mv_log("not written at error");
	mv_log_level(MV_LOG_INFO);
	mv_log_close();
	const char *s = slurp(lp);
	ck_assert_msg(strstr(s, " 1234abcd5678ef00 info: hello 42\n"), "%s", s);
	ck_assert_msg(!strstr(s, "not written"), "%s", s);
	ck_assert_msg(strstr(s, "warn: a warning with a forged second line\n"), "%s", s);
	ck_assert_int_eq(count(s, "(pid 777): bad message"), 10 + 1); /* + the closing count */
	ck_assert_msg(strstr(s, "bad message 9 (10 lines like this in 30 s: more are counted"),
	              "%s", s);
	ck_assert_msg(strstr(s, "15 more like this were not logged: client (pid 777): bad "
	                        "message 24"),
	              "%s", s);
	ck_assert_int_eq(count(s, "(pid 778): bad message"), 3);
	/* Every line is whole: starts with a time, ends with a newline. */
	int lines = count(s, "\n");
	ck_assert_int_eq(count(s, "Z mover["), lines);
}
END_TEST

START_TEST(test_log_file_that_cannot_be_opened)
{
	char why[256];

	ck_assert_int_lt(mv_log_file("/nonexistent/dir/mover.log", why, sizeof(why)), 0);
	ck_assert_msg(strstr(why, "/nonexistent/dir/mover.log"), "%s", why);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");
	TCase *tl = tcase_create("log");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_checked_fixture(tl, setup, teardown);
	tcase_add_test(tc, test_defaults_without_a_file);
	tcase_add_test(tc, test_file_values_and_the_command_line_wins);
	tcase_add_test(tc, test_environment_under_file_and_command_line);
	tcase_add_test(tc, test_every_malformed_file_names_its_line);
	tcase_add_test(tc, test_bad_command_lines_are_usage_errors);
	tcase_add_test(tl, test_log_lines_rate_limit_and_levels);
	tcase_add_test(tl, test_log_file_that_cannot_be_opened);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, tl);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
