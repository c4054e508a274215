#!/bin/bash
# SPDX-License-Identifier: MIT
# mvstat against live movers under traffic: its numbers move while mvkv
# runs, and once mvkv is done the bytes the sending mover reports equal the
# bytes the client counted; a mover killed while mvstat watches is reported
# dead, and one that is not there is named, not shown as zeros.
set -u
B=${MV_BUILD:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/mvstat.XXXXXX)
fail() { echo "stat_tool: FAILED: $*"; cat "$dir"/*.log 2>/dev/null | tail -20; exit 1; }
trap 'MV_NO_NETNS=1 "$here"/tools/mvhosts.sh down "$dir"; rm -rf "$dir"' EXIT
MV_NO_NETNS=1 MV_BUILD=$B MV_TAG=s$$ "$here"/tools/mvhosts.sh up "$dir" tcp 2 >/dev/null || fail "movers did not start"
. "$dir"/env

field() { grep -o "\"$1\":[0-9]*" | cut -d: -f2 | awk '{s += $1} END {printf "%.0f\n", s}'; }

"$B"/bin/mvkv --send "$MV_SOCK_A" --recv "$MV_SOCK_B" --pages 512 --pool 1024 --seconds 3 \
	>"$dir"/kv.out 2>&1 &
kv=$!
sleep 1
j1=$("$B"/bin/mvstat --socket "$MV_SOCK_A" --json --interval 0.5) || fail "mvstat --json"
j2=$("$B"/bin/mvstat --socket "$MV_SOCK_A" --json --interval 0.5) || fail "mvstat --json"
b1=$(echo "$j1" | sed 's/"rings".*//' | field bytes)
b2=$(echo "$j2" | sed 's/"rings".*//' | field bytes)
[ "$b2" -gt "$b1" ] || fail "bytes did not move under traffic ($b1 -> $b2)"
echo "$j2" | grep -q '"state":"running"' || fail "a live mover is not 'running': $j2"
echo "$j2" | grep -q '"client":' || fail "no client ring rows under traffic"
wait $kv || fail "mvkv failed: $(cat "$dir"/kv.out)"
sent=$(sed -n 's/^RESULT mvkv .*bytes=\([0-9]*\).*/\1/p' "$dir"/kv.out)
sleep 0.3
j3=$("$B"/bin/mvstat --socket "$MV_SOCK_A" --json --interval 0.2) || fail "mvstat --json"
moved=$(echo "$j3" | sed 's/"rings".*//' | field bytes)
[ "$moved" = "$sent" ] || fail "mover A reports $moved bytes; the client counted $sent"
peer=$(echo "$j3" | sed 's/.*"peers"://' | field bytes)
[ "$peer" = "$sent" ] || fail "peer rows sum to $peer bytes; the client counted $sent"
"$B"/bin/mvstat --socket "$MV_SOCK_A" --prometheus --interval 0.1 | grep -q '^mover_shard_bytes_total{' ||
	fail "no mover_shard_bytes_total in --prometheus"
# Back-pressure: refused posts per write stay below one (each shard, JSON and Prometheus).
rp=$(echo "$j3" | grep -o '"reposts_per_write":[0-9.]*' | cut -d: -f2)
[ -n "$rp" ] || fail "no reposts_per_write in --json"
for r in $rp; do awk -v r="$r" 'BEGIN { exit !(r < 1) }' || fail "re-posts per write $r >= 1"; done
"$B"/bin/mvstat --socket "$MV_SOCK_A" --prometheus --interval 0.1 |
	grep -q '^mover_shard_reposts_per_write{' || fail "no mover_shard_reposts_per_write in --prometheus"

# Hops: every batch A published has its whole-batch hop, in the Prometheus
# histogram and in --hops; every immediate B delivered, its deliver hop.
batches=$(echo "$j3" | sed 's/"hops".*//' | field batches)
hopc() { "$B"/bin/mvstat --socket "$1" --prometheus --interval 0.1 |
	grep "^mover_hop_seconds_count{.*hop=\"$2\"" | awk '{s += $2} END {printf "%.0f\n", s}'; }
hb=$(hopc "$MV_SOCK_A" batch)
[ "$batches" -gt 0 ] && [ "$hb" = "$batches" ] ||
	fail "mover A published $batches batches but its batch hop counts $hb"
inf=$("$B"/bin/mvstat --socket "$MV_SOCK_A" --prometheus --interval 0.1 |
	grep '^mover_hop_seconds_bucket{.*hop="batch",le="+Inf"' | awk '{s += $2} END {printf "%.0f\n", s}')
[ "$inf" = "$hb" ] || fail "the batch histogram's +Inf bucket holds $inf of $hb"
imms=$("$B"/bin/mvstat --socket "$MV_SOCK_B" --json --interval 0.1 | sed 's/"hops".*//' | field imm_rx)
hd=$(hopc "$MV_SOCK_B" deliver)
[ "$imms" -gt 0 ] && [ "$hd" = "$imms" ] ||
	fail "mover B received $imms immediates but its deliver hop counts $hd"
"$B"/bin/mvstat --socket "$MV_SOCK_A" --hops --interval 0.1 >"$dir"/hops.out ||
	fail "mvstat --hops"
for h in queue post fabric batch; do
	grep -q "^[0-9]* *$h .*all time" "$dir"/hops.out || fail "no $h hop in mvstat --hops: $(cat "$dir"/hops.out)"
done

"$B"/bin/mvstat --socket "$MV_SOCK_B" --watch --interval 0.2 >"$dir"/watch.out 2>&1 &
w=$!
sleep 0.6
kill -9 "$MV_PID_B"
for _ in $(seq 50); do kill -0 $w 2>/dev/null || break; sleep 0.1; done
kill -0 $w 2>/dev/null && { kill $w; fail "mvstat --watch went on after the mover died"; }
wait $w
rc=$?
grep -q "is dead" "$dir"/watch.out || fail "a killed mover was not reported dead: $(tail -3 "$dir"/watch.out)"
[ $rc = 3 ] || fail "mvstat --watch exit status $rc for a dead mover, expected 3"
out=$("$B"/bin/mvstat --socket "$dir"/nothing.sock 2>&1) && fail "mvstat succeeded with no mover"
echo "$out" | grep -q "no mover at" || fail "no mover named: $out"
echo "stat_tool: passed (mover and client agree on $sent bytes)"
