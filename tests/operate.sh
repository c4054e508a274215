#!/bin/bash
# SPDX-License-Identifier: MIT
# The mover as an operator meets it: every binary's --version names the one
# release; every option of every --help is in its man page, every libmvc
# call has a page, and man renders each page without a warning; a bad
# config file or environment stops the mover with FILE:LINE and status 78;
# the command line wins over the file; the log carries the mover id and
# reopens on SIGHUP; `make install DESTDIR=...` lays out everything; the
# systemd units pass `systemd-analyze verify` and the sysusers line parses.
set -u
B=${MV_BUILD:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1
dir=$(mktemp -d /tmp/mvop.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); }
fail() {
	echo "operate: FAILED: $*"
	failed=$((failed + 1))
}
check() { # check WHAT COMMAND...: the command's success is the check
	local what=$1
	shift
	if "$@"; then ok; else fail "$what"; fi
}

version=$(sed -n 's/^#define MVC_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9][0-9]*\).*/\2/p' \
	libclient/mvc.h | paste -sd. -)
bins="mover mvstat mvtrace mvreplay mvbench mvkv mvgpubench shmring_bench mvhostbench"

# ---- --version ----
for b in $bins; do
	out=$("$B/bin/$b" --version 2>&1)
	rc=$?
	first=$(echo "$out" | head -1)
	case "$first" in
	"$b $version" | "$b $version "*) [ $rc = 0 ] && ok || fail "$b --version exits $rc" ;;
	*) fail "$b --version says '$first', want '$b $version'" ;;
	esac
done

# ---- man pages ----
have_man=1
if ! command -v man >/dev/null || ! command -v groff >/dev/null; then
	echo "operate: SKIPPED man page checks: no man-db/groff (tools/install-deps installs them)"
	have_man=0
fi
render() { LC_ALL=C MANWIDTH=250 man --nh --nj -l "$1" 2>/dev/null; }
page_of() {
	case $1 in
	mover) echo "$B/man/mover.8" ;;
	*) echo "$B/man/$1.1" ;;
	esac
}
if [ $have_man = 1 ]; then
	# Every page renders without a warning (links resolve in the install below).
	for p in "$B"/man/*.[1-8]; do
		head -1 "$p" | grep -q '^\.so ' && continue
		err=$(MANWIDTH=80 man --warnings -l "$p" 2>&1 >/dev/null)
		[ -z "$err" ] && ok || fail "man --warnings -l $p: $err"
	done
	# Every option each --help names is in its page.
	for b in $bins; do
		p=$(page_of "$b")
		[ -f "$p" ] || { fail "$b has no man page ($p)"; continue; }
		text=$(render "$p")
		help=$("$B/bin/$b" --help 2>&1)
		[ "$b" = mvtrace ] && help="$help $("$B/bin/mvtrace" import --help 2>&1)"
		opts=$(echo "$help" | grep -oE '(^|[^A-Za-z0-9_-])--?[A-Za-z][A-Za-z0-9-]*' |
			sed 's/^[^-]*//' | sort -u)
		[ -n "$opts" ] || fail "$b --help names no option"
		for o in $opts; do
			echo "$text" | grep -qE -- "(^|[^A-Za-z0-9-])$o([^A-Za-z0-9-]|$)" && ok ||
				fail "$b: '$o' of --help is not in $p"
		done
	done
	# Every call mvc.h declares has its page, or a link to its family's.
	for f in $(grep -oE '\bmvc_[a-z_]+\(' libclient/mvc.h | tr -d '(' | sort -u); do
		[ -f "$B/man/$f.3" ] && ok || fail "libmvc's $f has no man page"
	done
	# Every config key is in mover.conf(5) and, commented out, in the example.
	keys=$("$B"/bin/mover --no-config --check-config | sed -n 's/^#\{0,1\} *\([a-z_]*\) = .*/\1/p')
	conf5=$(render "$B/man/mover.conf.5")
	for k in $keys; do
		echo "$conf5" | grep -qE "(^|[^a-z_])$k =" && ok || fail "key $k is not in mover.conf(5)"
		grep -qE "^#$k =( |$)" dist/mover.conf && ok || fail "key $k is not in dist/mover.conf"
	done
fi

# ---- the config file ----
# The example as installed, and with every key that has a value uncommented.
check "the example config does not check" "$B"/bin/mover --config dist/mover.conf --check-config >/dev/null
sed -n 's/^#\([a-z_]* = ..*\)$/\1/p' dist/mover.conf >"$dir"/all.conf
out=$("$B"/bin/mover --config "$dir"/all.conf --check-config 2>&1) ||
	fail "the example with its keys uncommented does not check: $out"
[ "$(grep -c . "$dir"/all.conf)" -ge 8 ] && ok || fail "few keys uncommented: $(cat "$dir"/all.conf)"

# Bad files and environments: status 78, FILE:LINE: reason.
bad() { # bad WANT-TEXT CONFIG-TEXT
	printf '%b' "$2" >"$dir"/bad.conf
	err=$("$B"/bin/mover --config "$dir"/bad.conf 2>&1 >/dev/null)
	rc=$?
	[ $rc = 78 ] && echo "$err" | grep -qF -- "$dir/bad.conf:$1" && ok ||
		fail "config '$2': status $rc, '$err'; want 78 and '$dir/bad.conf:$1'"
}
bad "2: unknown key 'shard' (did you mean 'shards'?)" 'provider = tcp\nshard = 2\n'
bad "1: shards = many: give a whole number from 1 to 64" 'shards = many\n'
bad "3: expected 'key = value'" '# c\n\niface lo\n'
bad "1: unknown section [quota]" '[quota]\n'
bad "2: op_timeout is set again (first at line 1)" 'op_timeout = 1\nop_timeout = 2\n'
err=$(MOVER_CONFIG=$dir/none.conf "$B"/bin/mover 2>&1)
rc=$?
[ $rc = 78 ] && echo "$err" | grep -q "MOVER_CONFIG=$dir/none.conf" && ok ||
	fail "a missing \$MOVER_CONFIG: status $rc, '$err'"
err=$(MOVER_SOCKET=/$(printf 'x%.0s' $(seq 120)) "$B"/bin/mover --no-config 2>&1)
rc=$?
[ $rc = 78 ] && echo "$err" | grep -q "MOVER_SOCKET=" && ok ||
	fail "a \$MOVER_SOCKET too long: status $rc, '$err'"
"$B"/bin/mover --no-config --shards 0 >/dev/null 2>&1
rc=$?
[ $rc = 2 ] && ok || fail "a bad --shards: status $rc, want 2"

# The command line wins: shown by --check-config and by a running mover.
cat >"$dir"/run.conf <<EOF
provider = tcp
iface = lo
shards = 1
op_timeout = 4
socket = $dir/from-file.sock
log_level = debug
EOF
out=$("$B"/bin/mover --config "$dir"/run.conf --shards 2 --check-config)
echo "$out" | grep -qE '^shards = 2 +# --shards$' && echo "$out" | grep -qE "^op_timeout = 4 +# $dir/run.conf:4$" &&
	ok || fail "--check-config does not show the option over the file: $out"
"$B"/bin/mover --config "$dir"/run.conf --shards 2 --socket "$dir"/m.sock -q --log "$dir"/m.log &
pid=$!
for _ in $(seq 100); do [ -S "$dir"/m.sock ] && break; sleep 0.1; done
if [ -S "$dir"/m.sock ]; then
	json=$("$B"/bin/mvstat --socket "$dir"/m.sock --json --interval 0.1)
	echo "$json" | grep -q "\"version\":\"$version\"" && ok || fail "mvstat --json has no version $version"
	n=$(echo "$json" | grep -o '"shard":[0-9]*' | sort -u | wc -l)
	[ "$n" = 2 ] && ok || fail "the mover runs $n shards, not the command line's 2"
	[ ! -e "$dir"/from-file.sock ] && ok || fail "the file's socket was used over --socket"
	"$B"/bin/mvstat --socket "$dir"/m.sock --prometheus --interval 0.1 --output "$dir"/m.prom &&
		grep -q "^mover_build_info{.*version=\"$version\"" "$dir"/m.prom && ok ||
		fail "mvstat --prometheus --output: no mover_build_info with $version"
	# SIGHUP: the log moves away, a new one starts at the path.
	mv "$dir"/m.log "$dir"/m.log.1
	kill -HUP $pid
	for _ in $(seq 50); do [ -e "$dir"/m.log ] && break; sleep 0.1; done
	[ -e "$dir"/m.log ] && ok || fail "no new log after SIGHUP"
	kill -0 $pid 2>/dev/null && ok || fail "SIGHUP ended the mover"
	kill -TERM $pid
	wait $pid
	rc=$?
	pid=
	[ $rc = 0 ] && ok || fail "the mover exited $rc after SIGTERM"
else
	fail "the mover did not listen: $(cat "$dir"/m.log 2>/dev/null)"
	kill $pid 2>/dev/null
	pid=
fi
grep -q ' info: ' "$dir"/m.log.1 "$dir"/m.log 2>/dev/null && fail "-q wrote info lines" || ok
# The file's own settings where the command line is silent (shards = 1,
# log_level = debug); the lines: time, pid, mover id, level; the release
# in the first.
"$B"/bin/mover --config "$dir"/run.conf --socket "$dir"/v.sock --log "$dir"/v.log &
pid=$!
for _ in $(seq 100); do [ -S "$dir"/v.sock ] && break; sleep 0.1; done
"$B"/bin/mvstat --socket "$dir"/v.sock --interval 0.1 >/dev/null 2>&1
kill -TERM $pid
wait $pid
pid=
grep -q "info: mover $version (wire protocol [0-9]*) starting" "$dir"/v.log && ok ||
	fail "no start line naming the release: $(head -3 "$dir"/v.log)"
grep -q "1 shards on tcp" "$dir"/v.log && grep -q " debug: " "$dir"/v.log && ok ||
	fail "the file's shards = 1 and log_level = debug were not used: $(cat "$dir"/v.log)"
log=$(cat "$dir"/v.log)
[ -n "$log" ] && ! echo "$log" | grep -vqE '^[0-9T:.-]+Z mover\[[0-9]+\] [0-9a-f]{16} (error|warn|info|debug): ' &&
	ok || fail "log lines not of the form TIME mover[PID] ID LEVEL: ...: $log"

# ---- make install ----
inst=$dir/inst
if make --no-print-directory -s B="$B" install DESTDIR="$inst" PREFIX=/usr/local >"$dir"/install.log 2>&1; then
	ok
	for f in bin/mover bin/mvstat bin/mvtrace bin/mvreplay bin/mvbench bin/mvkv include/mvc.h \
		lib/libmvc.so.1 lib/libmvc.a lib/pkgconfig/mvc.pc share/man/man8/mover.8 \
		share/man/man5/mover.conf.5 share/man/man1/mvstat.1 share/man/man3/mvc.3 \
		share/man/man3/mvc_connect.3 share/man/man3/mvc_write_paged.3 \
		share/man/man3/mvc_wait.3 lib/systemd/system/mover.service \
		lib/systemd/system/mover-metrics.service lib/sysusers.d/mover.conf; do
		[ -e "$inst/usr/local/$f" ] && ok || fail "make install did not install $f"
	done
	[ -e "$inst/etc/mover.conf" ] && ok || fail "make install did not install /etc/mover.conf"
	pc=$(sed -n 's/^Version: //p' "$inst"/usr/local/lib/pkgconfig/mvc.pc)
	[ "$pc" = "$version" ] && ok || fail "mvc.pc says version '$pc', not $version"
	# The README names the file make install writes.
	name=$(grep -o 'pkg-config [-a-z ]*mvc[a-z]*' README.md | head -1 | awk '{print $NF}')
	[ -e "$inst/usr/local/lib/pkgconfig/$name.pc" ] && ok ||
		fail "the README's pkg-config name '$name' is not what make install writes"
	grep -q 'mover\.pc' README.md && fail "the README still names mover.pc" || ok
	if [ $have_man = 1 ]; then
		out=$(MANWIDTH=80 man --warnings -M "$inst"/usr/local/share/man mvc_wait 2>&1 >/dev/null)
		[ -z "$out" ] && MANWIDTH=80 man -M "$inst"/usr/local/share/man mvc_wait 2>/dev/null |
			grep -q "mvc_poll, mvc_wait" && ok || fail "man mvc_wait (a .so link) does not render: $out"
	fi
else
	fail "make install DESTDIR=$inst: $(tail -5 "$dir"/install.log)"
fi

# ---- systemd ----
if command -v systemd-analyze >/dev/null && [ -e "$inst"/usr/local/lib/systemd/system/mover.service ]; then
	# verify wants the binaries where the units name them: point them there.
	for u in mover mover-metrics; do
		sed "s|=/usr/local/bin/|=$inst/usr/local/bin/|" \
			"$inst"/usr/local/lib/systemd/system/$u.service >"$dir"/$u.service
	done
	out=$(MANPATH=$inst/usr/local/share/man:/usr/share/man systemd-analyze verify \
		"$dir"/mover.service "$dir"/mover-metrics.service 2>&1)
	[ $? = 0 ] && [ -z "$out" ] && ok || fail "systemd-analyze verify: $out"
	out=$(systemd-sysusers --dry-run "$inst"/usr/local/lib/sysusers.d/mover.conf 2>&1) && ok ||
		fail "systemd-sysusers --dry-run: $out"
	u="$inst"/usr/local/lib/systemd/system/mover.service
	for want in '^User=mover$' '^RuntimeDirectory=mover$' 'MOVER_SOCKET=/run/mover/mover.sock' \
		'^ProtectSystem=strict$' '^NoNewPrivileges=yes$' '^CapabilityBoundingSet=CAP_IPC_LOCK$' \
		'^Restart=on-failure$' '^KillSignal=SIGTERM$' '^ExecStart=/usr/local/bin/mover$'; do
		grep -qE "$want" "$u" && ok || fail "mover.service lacks $want"
	done
else
	echo "operate: SKIPPED systemd-analyze verify: no systemd-analyze (the 'systemd' package)"
fi

echo "operate: $passed passed, $failed failed"
[ $failed = 0 ]
