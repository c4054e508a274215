#!/bin/bash
# SPDX-License-Identifier: MIT
# The soak: two movers as two hosts (network namespaces joined by a veth
# pair where permitted, else loopback), several soak clients on each
# (tests/soak_client.c: paged, writev and write batches with immediates,
# every page checked at the target), for SECONDS, while faults come every
# few seconds: a client killed with SIGKILL (and a new one started), a
# mover stopped with SIGSTOP for up to a second, the veth link taken down
# and up, a mover restarted (SIGKILL or SIGTERM) under its clients. Then the
# clients drain and tests/soak_sum.c adds up their counts: every batch of a
# client that lived to the end reported exactly once, no page wrong. Prints
# the totals and the movers' RSS and open fds at the start and the end, and
# fails if those grew.
#
#   tests/soak.sh [SECONDS]     default 60 ($SOAK_SECONDS); `make soak` runs 600
#   SOAK_CLIENTS=N              clients per direction (default 2)
#   SOAK_PROVIDER=tcp|shm       default tcp (shm: no namespaces, no link flaps)
#   SOAK_FAULTS=kill,stop,flap,restart   which faults (default all)
#   MV_TAG=NAME                 names the namespaces (mvA$MV_TAG, mvB$MV_TAG)
set -u
secs=${1:-${SOAK_SECONDS:-60}}
per=${SOAK_CLIENTS:-2}
prov=${SOAK_PROVIDER:-tcp}
faults=${SOAK_FAULTS:-kill,stop,flap,restart}
B=${MV_BUILD:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1
dir=$(mktemp -d /tmp/mvsoak.XXXXXX)
export MV_TAG=${MV_TAG:-sk$$} MV_BUILD=$B
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	[ -f "$dir"/env ] && . "$dir"/env && kill -CONT "$MV_PID_A" "$MV_PID_B" 2>/dev/null
	tools/mvhosts.sh down "$dir" >/dev/null 2>&1
	[ "${SOAK_KEEP:-0}" = 1 ] || rm -rf "$dir"
}
trap cleanup EXIT
fail() {
	echo "soak: FAILED: $*"
	tail -n 5 "$dir"/a.log "$dir"/b.log "$dir"/client.*.err 2>/dev/null
	exit 1
}

tools/mvhosts.sh up "$dir" "$prov" 2 || fail "the movers did not start"
. "$dir"/env

nclient=0
start_client() { # start_client SLOT: even slots send A to B, odd ones B to A
	local s=$MV_SOCK_A r=$MV_SOCK_B
	[ $(($1 % 2)) = 1 ] && s=$MV_SOCK_B r=$MV_SOCK_A
	nclient=$((nclient + 1))
	"$B"/tests/soak_client -s "$s" -r "$r" -o "$dir/counts.$nclient" -x $((RANDOM * 65536 + nclient)) \
		2>>"$dir/client.$nclient.err" &
	pids[$1]=$!
}
n=$((2 * per))
# What a mover holds: resident memory (kB) and open fds.
usage() { # usage PID
	local rss fds
	rss=$(awk '/^VmRSS/ {print $2}' /proc/"$1"/status 2>/dev/null)
	fds=$(ls /proc/"$1"/fd 2>/dev/null | wc -l)
	echo "${rss:-0} $fds"
}
# Fds with no client attached: every mover of this configuration has as
# many, so the end's, once the clients left, must match (whatever restarted)
# but for the peer it now knows.
read -r _ idle_a0 <<<"$(usage "$MV_PID_A")"
read -r _ idle_b0 <<<"$(usage "$MV_PID_B")"
for i in $(seq 0 $((n - 1))); do start_client "$i"; done

sleep 2
. "$dir"/env
read -r rss_a0 fds_a0 <<<"$(usage "$MV_PID_A")"
read -r rss_b0 fds_b0 <<<"$(usage "$MV_PID_B")"
first_a="$rss_a0 kB, $fds_a0 fds" first_b="$rss_b0 kB, $fds_b0 fds"

has() { case ",$faults," in *",$1,"*) return 0 ;; esac; return 1; }
if has flap && [ "$MV_NETNS" != 1 ]; then
	echo "soak: link flaps SKIPPED: no network namespaces here (not root, or $prov)"
	faults=${faults//flap/}
fi
kinds=()
for f in kill stop flap restart; do has $f && kinds+=("$f"); done
n_kill=0 n_stop=0 n_flap=0 n_restart=0 rs_A=0 rs_B=0
end=$((SECONDS + secs))
while [ $SECONDS -lt $((end - 4)) ] && [ ${#kinds[@]} -gt 0 ]; do
	sleep "$((1 + RANDOM % 3)).$((RANDOM % 10))"
	. "$dir"/env
	case ${kinds[RANDOM % ${#kinds[@]}]} in
	kill)
		i=$((RANDOM % n))
		kill -KILL "${pids[$i]}" 2>/dev/null
		wait "${pids[$i]}" 2>/dev/null
		start_client "$i"
		n_kill=$((n_kill + 1))
		;;
	stop)
		p=$MV_PID_A
		[ $((RANDOM % 2)) = 1 ] && p=$MV_PID_B
		kill -STOP "$p" && sleep "0.$((2 + RANDOM % 8))" && kill -CONT "$p"
		n_stop=$((n_stop + 1))
		;;
	flap)
		ns=$MV_NS_A ifc=$MV_IF_A
		[ $((RANDOM % 2)) = 1 ] && ns=$MV_NS_B ifc=$MV_IF_B
		ip -n "$ns" link set "$ifc" down && sleep "0.$((2 + RANDOM % 6))" &&
			ip -n "$ns" link set "$ifc" up
		n_flap=$((n_flap + 1))
		;;
	restart)
		which=A sig=KILL
		[ $((RANDOM % 2)) = 1 ] && which=B
		[ $((RANDOM % 3)) = 0 ] && sig=TERM
		tools/mvhosts.sh restart "$dir" $which $sig || fail "mover $which did not come back"
		n_restart=$((n_restart + 1))
		eval "rs_$which=\$((rs_$which + 1))"
		# Flat is judged within one process: the new one's numbers,
		# once its clients are back, are its baseline.
		sleep 2
		. "$dir"/env
		if [ $which = A ]; then
			read -r rss_a0 fds_a0 <<<"$(usage "$MV_PID_A")"
		else
			read -r rss_b0 fds_b0 <<<"$(usage "$MV_PID_B")"
		fi
		;;
	esac
	for i in $(seq 0 $((n - 1))); do
		kill -0 "${pids[$i]}" 2>/dev/null || fail "client $i exited: $(tail -n 3 "$dir"/client.*.err)"
	done
done
while [ $SECONDS -lt $end ]; do sleep 0.5; done
. "$dir"/env
read -r rss_a1 fds_a1 <<<"$(usage "$MV_PID_A")"
read -r rss_b1 fds_b1 <<<"$(usage "$MV_PID_B")"
# Back-pressure: posts the provider refused, per write, on every shard
# (since each mover's start: the last restart's, for a restarted one).
reposts=$(for s in "$MV_SOCK_A" "$MV_SOCK_B"; do
	"$B"/bin/mvstat --socket "$s" --json --interval 0.1 2>/dev/null |
		grep -o '"reposts_per_write":[0-9.]*' | cut -d: -f2
done | sort -g | tail -1)
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
pids=()
[ $rc = 0 ] || echo "soak: a client failed: $(cat "$dir"/client.*.err)"
sleep 0.5 # the movers close what the clients left
read -r _ idle_a1 <<<"$(usage "$MV_PID_A")"
read -r _ idle_b1 <<<"$(usage "$MV_PID_B")"

echo "soak: $secs s, $n clients, provider $prov, namespaces $MV_NETNS; faults: $n_kill client kills," \
	"$n_stop mover stops, $n_flap link flaps, $n_restart mover restarts"
"$B"/tests/soak_sum "$dir"/counts.* || rc=1
# A client whose mover went while it started (connect, regions, import)
# starts again rather than exit (soak_client.c start()).
echo "client start-ups tried again: $(cat "$dir"/client.*.err 2>/dev/null | grep -c 'starting again')"
echo "mover A rss ${rss_a0} -> ${rss_a1} kB, fds ${fds_a0} -> ${fds_a1} (restarted $rs_A times; the first: $first_a)"
echo "mover B rss ${rss_b0} -> ${rss_b1} kB, fds ${fds_b0} -> ${fds_b1} (restarted $rs_B times; the first: $first_b)"
echo "fds with no client: mover A $idle_a0 -> $idle_a1, mover B $idle_b0 -> $idle_b1"
echo "re-posts per write, the most of any shard: ${reposts:-none read}"
# The other mover stays known as a peer (a pidfd, and on shm a wake fd per
# shard): one peer's worth more, no more. On tcp each shard's small-write
# endpoint (fabric.c) keeps a connection to the peer's shard, and the
# peer's to ours: two sockets a shard more.
peer_fds=$((2 + 1 + MV_SHARDS))
[ "$prov" = tcp ] && peer_fds=$((peer_fds + 2 * MV_SHARDS))
[ "$idle_a1" -le $((idle_a0 + peer_fds)) ] && [ "$idle_b1" -le $((idle_b0 + peer_fds)) ] ||
	{ echo "soak: a mover holds more fds than it started with"; rc=1; }
awk -v r="${reposts:-0}" 'BEGIN { exit !(r < 1) }' || { echo "soak: re-posts per write $reposts >= 1"; rc=1; }
# Flat under load too: no more fds than at the start (a few for a client
# starting now), and RSS within 64 MiB or half again of the start.
for m in "a $rss_a0 $rss_a1 $fds_a0 $fds_a1" "b $rss_b0 $rss_b1 $fds_b0 $fds_b1"; do
	set -- $m
	[ "$5" -le $(($4 + 16)) ] || { echo "soak: mover $1 fds grew $4 -> $5"; rc=1; }
	[ "$3" -le $(($2 + $2 / 2 + 65536)) ] || { echo "soak: mover $1 rss grew $2 -> $3 kB"; rc=1; }
done
[ $rc = 0 ] && echo "soak: passed" || echo "soak: FAILED"
exit $rc
