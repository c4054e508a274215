#!/bin/bash
# SPDX-License-Identifier: MIT
# The mover's etcd membership against bad input, with Debian's etcd on
# loopback (started and stopped here): etcd unreachable at start (a clear
# error, at once also where the connect times out), --etcd without
# --cluster, malformed and foreign keys under the prefix (ignored, with a
# log line each), and etcd lost while the movers
# run (they keep serving the peers they know, say so in the log and in
# mvstat --cluster) and back with its data gone (they register again);
# and an etcd that answers late at a mover's start (it asks again).
# Skipped, with the reason, where etcd is not installed.
set -u
B=${MV_BUILD:-build}
command -v etcd >/dev/null || { echo "cluster: SKIPPED: no etcd (Debian's etcd-server)"; exit 0; }
command -v curl >/dev/null || { echo "cluster: SKIPPED: no curl"; exit 0; }
dir=$(mktemp -d /tmp/h18cluster.XXXXXX)
pids=()
cleanup() {
	exec 2>/dev/null # no "Killed" notices for what we kill here
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
fail() {
	echo "cluster: FAILED: $*"
	for f in "$dir"/*.log; do [ -s "$f" ] && { echo "--- $f"; tail -n 12 "$f"; }; done
	exit 1
}
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cport=$(free_port) pport=$(free_port)
url=http://127.0.0.1:$cport
cl=c$$

start_etcd() {
	etcd --name h18 --data-dir "$dir/etcd$1" --listen-client-urls "$url" --advertise-client-urls "$url" \
		--listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
		--initial-cluster "h18=http://127.0.0.1:$pport" >>"$dir/etcd.log" 2>&1 &
	etcd_pid=$!
	pids+=($!)
	for _ in $(seq 100); do
		curl -s -m 1 --noproxy '*' "$url/health" | grep -q true && return 0
		sleep 0.1
	done
	fail "etcd did not start"
}
# Waits up to 10 s for a line matching $2 in log $1.
await_log() {
	for _ in $(seq 100); do
		grep -q "$2" "$1" && return 0
		sleep 0.1
	done
	fail "no '$2' in $1"
}
start_mover_bg() {
	"$B"/bin/mover --no-config --provider tcp --iface lo --shards 1 --socket "$dir/$1.sock" \
		--etcd "127.0.0.1:$cport" --cluster "$cl" --etcd-ttl 2 "${@:2}" >"$dir/$1.log" 2>&1 &
	pids+=($!)
	eval "pid_$1=$!"
}
await_socket() {
	for _ in $(seq 200); do
		[ -S "$dir/$1.sock" ] && return 0
		sleep 0.05
	done
	fail "mover $1 did not start"
}
start_mover() {
	start_mover_bg "$@"
	await_socket "$1"
}
b64() { printf %s "$1" | base64 -w0; }

# 1. etcd not there at start: a clear error, exit status non-zero.
"$B"/bin/mover --no-config --provider tcp --iface lo --shards 1 --socket "$dir/x.sock" \
	--etcd "127.0.0.1:$cport" --cluster "$cl" >"$dir/x.log" 2>&1 &
pids+=($!)
wait $! && fail "a mover started with no etcd to join"
grep -q "cannot join cluster $cl.*is etcd running" "$dir/x.log" || fail "no clear error without etcd"
echo "cluster: etcd unreachable at start: $(grep -o 'cannot join.*' "$dir/x.log" | head -n 1)"
# An etcd address that takes no connection (a listener whose accept queue
# is full: the kernel drops the SYN, as a host that drops packets does):
# the connect times out, and the mover fails at once, not asking again.
/usr/bin/python3 - >"$dir/blk.port" <<'BLK' &
import socket, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(0)
cs = [socket.socket() for _ in range(4)]
for c in cs:
    c.setblocking(False)
    try: c.connect(l.getsockname())
    except BlockingIOError: pass
time.sleep(0.3)
print(l.getsockname()[1], flush=True)
time.sleep(30)
BLK
blk_pid=$!
pids+=($blk_pid)
for _ in $(seq 50); do [ -s "$dir/blk.port" ] && break; sleep 0.1; done
t0=$(date +%s%N)
"$B"/bin/mover --no-config --provider tcp --iface lo --shards 1 --socket "$dir/z.sock" \
	--etcd "127.0.0.1:$(cat "$dir/blk.port")" --cluster "$cl" >"$dir/z.log" 2>&1 &&
	fail "a mover started with an etcd that takes no connection"
ms=$((($(date +%s%N) - t0) / 1000000))
grep -q "cannot join cluster $cl.*Failed to connect" "$dir/z.log" || fail "no clear error for an etcd that takes no connection"
grep -q "asking again" "$dir/z.log" && fail "a connect that timed out was asked again"
[ "$ms" -lt 8000 ] || fail "an etcd that takes no connection failed the start after $ms ms"
echo "cluster: etcd taking no connection at start: failed in $ms ms, not asked again"
# Its sockets hold ephemeral ports, one of which may be the port chosen for
# etcd (a CI run saw etcd's bind fail): they go before etcd starts.
kill "$blk_pid"
wait "$blk_pid" 2>/dev/null
"$B"/bin/mover --no-config --provider tcp --iface lo --shards 1 --socket "$dir/y.sock" \
	--etcd "127.0.0.1:$cport" >"$dir/y.log" 2>&1 && fail "--etcd without --cluster started"
grep -q -- "--etcd needs --cluster" "$dir/y.log" || fail "no clear error for --etcd without --cluster"

# 2. Two movers; keys that are not theirs to make sense of.
start_etcd 1
start_mover a
start_mover b
put() { curl -s -m 2 --noproxy '*' "$url/v3/kv/put" -d "{\"key\":\"$(b64 "$1")\",\"value\":\"$(b64 "$2")\"}" >/dev/null; }
put "/mover/$cl/junk" x
put "/mover/$cl/members/zz" x
put "/mover/$cl/members/0000000000000001" 'not json'
put "/mover/$cl/regions/forged" '{"owner":"1","blob":"eA=="}'
await_log "$dir/a.log" "ignoring /mover/$cl/regions/forged"
n=$(grep -c "etcd: ignoring /mover/$cl/" "$dir/a.log")
[ "$n" = 4 ] || fail "mover a logged $n of 4 malformed or foreign keys"
"$B"/bin/mvstat --socket "$dir/a.sock" --cluster >"$dir/st1" || fail "mvstat --cluster"
[ "$(grep -c '^member ' "$dir/st1")" = 2 ] || fail "mvstat lists: $(cat "$dir/st1")"
echo "cluster: 4 malformed or foreign keys ignored, each with a log line; 2 members listed"

# A member's key deleted: the others count it departed; the member, alive,
# puts it back and is a member again.
bid=$(sed -n 's/.*registered as .*members\/\([0-9a-f]*\) .*/\1/p' "$dir/b.log" | head -n 1)
curl -s -m 2 --noproxy '*' "$url/v3/kv/deleterange" -d "{\"key\":\"$(b64 "/mover/$cl/members/$bid")\"}" >/dev/null
await_log "$dir/a.log" "peer mover $bid left cluster $cl"
await_log "$dir/b.log" "our member key .* was deleted; putting it back"
for _ in $(seq 50); do
	[ "$(grep -c "mover $bid joined" "$dir/a.log")" = 2 ] && break
	sleep 0.1
done
[ "$(grep -c "mover $bid joined" "$dir/a.log")" = 2 ] || fail "mover b did not join again"
echo "cluster: a member's key deleted: the other saw it leave, it put its key back and joined again"

# 3. etcd lost: the movers keep serving, and say so.
kill -9 "$etcd_pid"
wait "$etcd_pid" 2>/dev/null
await_log "$dir/a.log" "etcd lost"
"$B"/bin/mvstat --socket "$dir/a.sock" --cluster >"$dir/st2"
grep -q "LOST" "$dir/st2" || fail "mvstat --cluster does not say etcd is lost: $(cat "$dir/st2")"
timeout 60 "$B"/bin/mvkv --send "$dir/a.sock" --recv "$dir/b.sock" --pages 256 --pool 512 \
	--page-size 4096 --seconds 1 >"$dir/kv.log" 2>&1 || fail "transfer while etcd is away"
echo "cluster: etcd lost: $(head -n 1 "$dir/st2" | cut -c1-100)...; a transfer between the movers still verified"

# 4. etcd back, its data gone: both register again under new leases.
start_etcd 2
await_log "$dir/a.log" "etcd back: registered again"
await_log "$dir/b.log" "etcd back: registered again"
for _ in $(seq 50); do
	"$B"/bin/mvstat --socket "$dir/a.sock" --cluster >"$dir/st3"
	[ "$(grep -c '^member ' "$dir/st3")" = 2 ] && grep -q ', up,' "$dir/st3" && break
	sleep 0.1
done
[ "$(grep -c '^member ' "$dir/st3")" = 2 ] || fail "after etcd came back: $(cat "$dir/st3")"
echo "cluster: etcd back with its data gone: both movers registered again, 2 members listed"

# 5. An etcd that takes the connection but answers late at a mover's start
# (stopped until the mover has waited out one request's 2 s): the mover
# asks again and joins, where it used to give up.
kill -STOP "$etcd_pid"
start_mover_bg c
await_log "$dir/c.log" "cluster $cl: .*asking again"
kill -CONT "$etcd_pid"
await_socket c
for _ in $(seq 50); do
	"$B"/bin/mvstat --socket "$dir/c.sock" --cluster >"$dir/st4"
	[ "$(grep -c '^member ' "$dir/st4")" = 3 ] && break
	sleep 0.1
done
[ "$(grep -c '^member ' "$dir/st4")" = 3 ] || fail "mover c after a late etcd: $(cat "$dir/st4")"
echo "cluster: etcd answering late at start: $(grep -o 'etcd at .*asking again' "$dir/c.log" | head -n 1 | cut -c1-90); joined, 3 members listed"
kill "$pid_a" "$pid_b" "$pid_c"
wait "$pid_a" "$pid_b" "$pid_c" 2>/dev/null
# A sanitizer build (make SANITIZE=...) reports into the movers' logs.
if grep -l "Sanitizer\|runtime error:" "$dir"/*.log; then fail "a sanitizer report"; fi
echo "cluster: passed"
