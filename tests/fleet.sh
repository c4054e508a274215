#!/bin/bash
# SPDX-License-Identifier: MIT
# A fleet that finds itself: HOSTS movers (default 8) in as many network
# namespaces on tcp, joined by veths to a bridge in one more namespace
# where Debian's etcd runs; every mover joins the cluster with --etcd, and
# the hosts find each other's regions by name (tests/fleet_host.c), nothing
# passed out of band. Then:
#   1. all-to-all dispatch/combine (the MoE pattern) for ROUNDS rounds,
#      every byte checked;
#   2. under load (every host writing to every other it knows), the last
#      host is killed with kill -9 (mover and client), and later a new host
#      joins: the script prints how long the writers took to see the
#      departure (a write failing with "left cluster") and to complete a
#      first write to the newcomer.
# Every address lives inside namespaces this script makes, and it removes
# them. Skipped, with the reason, without root, namespaces or etcd.
#
# Knobs (the short run is check's; `make soak-fleet` the long one):
#   FLEET_HOSTS=8 FLEET_ROUNDS=3 FLEET_SLICE=65536 FLEET_LOAD=60 (at most) FLEET_TTL=2
set -u
B=${MV_BUILD:-build}
N=${FLEET_HOSTS:-8}
ROUNDS=${FLEET_ROUNDS:-3}
SLICE=${FLEET_SLICE:-65536}
LOAD=${FLEET_LOAD:-60}
TTL=${FLEET_TTL:-2}
tag=${MV_TAG:-$$}
tag=${tag:0:6}
pre=h18f$tag
nse=${pre}e
# A tag need not be a number (MV_TAG=huge): its checksum picks the subnet.
num=$(printf '%s' "$tag" | cksum | cut -d' ' -f1)
net=10.118.$((num % 200 + 20))
etcd_url=http://$net.254:2379

skip() {
	echo "fleet: SKIPPED: $*"
	exit 0
}
[ "$(id -u)" = 0 ] && command -v ip >/dev/null || skip "network namespaces need root and iproute2"
command -v etcd >/dev/null || skip "no etcd (Debian's etcd-server; tools/install-deps installs it)"
command -v curl >/dev/null || skip "no curl to ask etcd whether it is up"
ip netns add "$nse" 2>/dev/null || skip "network namespaces are not permitted here"

dir=$(mktemp -d /tmp/h18fleet.XXXXXX)
pids=()
cleanup() {
	exec 2>/dev/null # no "Killed" notices for what we kill here
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	for i in $(seq 0 "$N"); do ip netns del "$pre$i" 2>/dev/null; done
	ip netns del "$nse" 2>/dev/null
	[ "${FLEET_KEEP:-0}" = 1 ] && echo "fleet: kept $dir" || rm -rf "$dir"
}
trap cleanup EXIT
fail() {
	echo "fleet: FAILED: $*"
	for f in "$dir"/*.log "$dir"/*.out; do
		[ -s "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }
	done
	exit 1
}
now_ms() { date +%s%3N; }
# The cluster's keys in etcd, each with its lease's TTL and time left.
etcd_leases() {
	local from to range key lease ttl
	from=$(printf '/mover/fleet%s/' "$tag" | base64 -w0)
	to=$(printf '/mover/fleet%s0' "$tag" | base64 -w0)
	range=$(ip netns exec "$nse" curl -s -m 2 -X POST "$etcd_url/v3/kv/range" \
		-d "{\"key\":\"$from\",\"range_end\":\"$to\",\"keys_only\":true}")
	if ! printf '%s' "$range" | grep -q '"key"'; then
		echo "fleet: etcd at $(now_ms): no keys of the cluster (answer: ${range:-none})"
		return
	fi
	printf '%s' "$range" | grep -o '"key":"[^"]*"\|"lease":"[^"]*"' | paste -d' ' - - |
		while read -r key lease; do
			key=${key#\"key\":\"}
			lease=${lease#\"lease\":\"}
			lease=${lease%\"}
			ttl=$(ip netns exec "$nse" curl -s -m 2 -X POST "$etcd_url/v3/lease/timetolive" \
				-d "{\"ID\":\"$lease\"}")
			echo "fleet: etcd at $(now_ms): $(printf '%s' "${key%\"}" | base64 -d) lease $lease: $ttl"
		done
}

# The bridge namespace, then one namespace per host (N + 1: a newcomer).
ip -n "$nse" link add br0 type bridge && ip -n "$nse" addr add "$net.254/24" dev br0 &&
	ip -n "$nse" link set br0 up && ip -n "$nse" link set lo up || fail "bridge"
for i in $(seq 0 "$N"); do
	ns=$pre$i
	ip netns add "$ns" || fail "namespace $ns"
	ip link add v$i netns "$ns" type veth peer name p$i netns "$nse" || fail "veth $i"
	ip -n "$ns" addr add "$net.$((i + 1))/24" dev v$i
	ip -n "$ns" link set v$i up
	ip -n "$ns" link set lo up
	ip -n "$nse" link set p$i master br0
	ip -n "$nse" link set p$i up
done

ip netns exec "$nse" etcd --name h18 --data-dir "$dir/etcd" \
	--listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
	--listen-peer-urls "http://$net.254:2380" --initial-advertise-peer-urls "http://$net.254:2380" \
	--initial-cluster "h18=http://$net.254:2380" >"$dir/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	ip netns exec "${pre}0" curl -s -m 1 "$etcd_url/health" 2>/dev/null | grep -q true && break
	sleep 0.1
done
ip netns exec "${pre}0" curl -s -m 1 "$etcd_url/health" | grep -q true || fail "etcd did not start"

# Each host is a network namespace and a pid namespace (unshare): as
# between real hosts, no mover can watch another's process, so a departure
# is found through etcd alone. The mover is its namespace's init: kill -9
# of it takes its client along, as a host that dies would.
declare -A mpid cpid
start_mover() {
	local i=$1 u c=""
	ip netns exec "$pre$i" unshare --pid --fork "$B"/bin/mover --no-config --provider tcp \
		--iface v$i --shards 1 --socket "$dir/m$i.sock" --etcd "$net.254:2379" \
		--cluster fleet$tag --etcd-ttl "$TTL" --op-timeout 3 >"$dir/m$i.log" 2>&1 &
	u=$!
	pids+=($u)
	for _ in $(seq 100); do
		c=$(pgrep -P "$u") && break
		sleep 0.02
	done
	[ -n "$c" ] || fail "mover $i: unshare made no process in 2 s"
	mpid[$i]=$c
	pids+=($c)
}
# A client of host i, inside its namespaces.
on_host() {
	local i=$1
	shift
	nsenter --target "${mpid[$i]}" --pid --net -- "$@"
}
wait_movers() {
	for i in "$@"; do
		for _ in $(seq 200); do
			[ -S "$dir/m$i.sock" ] && break
			kill -0 "${mpid[$i]}" 2>/dev/null || fail "mover $i exited before it listened"
			sleep 0.05
		done
		[ -S "$dir/m$i.sock" ] || fail "mover $i did not listen on its socket in 10 s"
	done
}
t0=$(now_ms)
for i in $(seq 0 $((N - 1))); do start_mover "$i"; done
wait_movers $(seq 0 $((N - 1)))
echo "fleet: $N movers in namespaces ${pre}0..$pre$((N - 1)) on tcp, etcd at $etcd_url, up in $(($(now_ms) - t0)) ms"

# 1. All to all, every byte checked.
t0=$(now_ms)
for i in $(seq 0 $((N - 1))); do
	on_host "$i" "$B"/tests/fleet_host --socket "$dir/m$i.sock" --me "$i" --hosts "$N" \
		--max $((N + 1)) --slice "$SLICE" --rounds "$ROUNDS" --prefix "r$tag-" >"$dir/r$i.out" 2>&1 &
	cpid[$i]=$!
done
for i in $(seq 0 $((N - 1))); do
	wait "${cpid[$i]}" || fail "host $i's dispatch/combine rounds"
done
grep -h "rounds verified" "$dir"/r*.out | head -n 1
echo "fleet: all-to-all: $N hosts x $ROUNDS rounds of dispatch and combine, $SLICE-byte slices" \
	"in 4 KiB pages, every byte verified, in $(($(now_ms) - t0)) ms"
# 2. Leave and join under load: writers run until the stop file appears.
last=$((N - 1)) new=$N
# Waits until every writer 0..last-1 printed a line, $1 $2: 0 once they
# have, 1 after $3 tries (default 200, 20 s) a tenth of a second apart.
await_all() {
	for _ in $(seq "${3:-200}"); do
		local missing=0
		for i in $(seq 0 $((last - 1))); do
			awk -v k="$1" -v n="$2" '$1 == k && $2 == n { f = 1 } END { exit !f }' \
				"$dir/l$i.out" || missing=1
		done
		[ $missing = 0 ] && return 0
		sleep 0.1
	done
	return 1
}
load_host() {
	on_host "$1" "$B"/tests/fleet_host --socket "$dir/m$1.sock" --me "$1" --hosts "$N" \
		--max $((N + 1)) --slice "$SLICE" --load "$LOAD" --stop "$dir/stop" \
		--prefix "l$tag-" >"$dir/l$1.out" 2>&1 &
	cpid[$1]=$!
	pids+=($!)
}
for i in $(seq 0 $last); do load_host "$i"; done
await_all first_write "l$tag-$last" || fail "the writers did not all reach host $last"
"$B"/bin/mvstat --socket "$dir/m0.sock" --cluster >"$dir/cluster.txt" 2>&1 ||
	fail "mvstat --cluster: $(cat "$dir/cluster.txt")"
members=$(grep -c '^member ' "$dir/cluster.txt")
names=$(grep -c "^name l$tag-" "$dir/cluster.txt")
[ "$members" = "$N" ] && [ "$names" = "$N" ] ||
	fail "mvstat lists $members members and $names names, want $N of each: $(cat "$dir/cluster.txt")"
echo "fleet: mvstat --cluster on host 0 under load: $members members, $names names"
sleep 1
t_kill=$(now_ms)
kill -9 "${mpid[$last]}"
if ! await_all departed "l$tag-$last"; then
	# What etcd holds then, and when the departure came if it came late.
	etcd_leases
	late="not in 90 s"
	while [ $(($(now_ms) - t_kill)) -lt 90000 ]; do
		await_all departed "l$tag-$last" 1 && late="$(($(now_ms) - t_kill)) ms after the kill" && break
	done
	fail "a writer never saw host $last leave the cluster in 20 s (seen $late)"
fi
t_join=$(now_ms)
start_mover "$new"
wait_movers "$new"
load_host "$new"
await_all first_write "l$tag-$new" || fail "a writer never wrote to the newcomer, host $new"
touch "$dir/stop"
for i in $(seq 0 $((last - 1))) "$new"; do
	wait "${cpid[$i]}" || fail "host $i's load"
done

# Per writer: when it saw the departure, and its first write to the newcomer.
det=() any=() first=()
for i in $(seq 0 $((last - 1))); do
	d=$(awk -v n="l$tag-$last" '$1 == "departed" && $2 == n { print $3; exit }' "$dir/l$i.out")
	a=$(awk -v n="l$tag-$last" '($1 == "departed" || $1 == "fail") && $2 == n { print $3; exit }' "$dir/l$i.out")
	w=$(awk -v n="l$tag-$new" '$1 == "first_write" && $2 == n { print $3; exit }' "$dir/l$i.out")
	det+=($((d - t_kill)))
	any+=($((a - t_kill)))
	first+=($((w - t_join)))
done
stats() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { printf "min %d, median %d, max %d ms", v[1], v[int((NR + 1) / 2)], v[NR] }'; }
grep -h "left cluster" "$dir/m0.log" | head -n 1 | sed 's/^/fleet: mover 0 log: /'
echo "fleet: departure of host $last (kill -9, --etcd-ttl $TTL) seen by $((last)) writers:" \
	"first failed write $(stats "${any[@]}"); failure naming the departure $(stats "${det[@]}")"
# The newcomer's registration, from its log's UTC stamp.
t_reg=$(date -d "$(grep -m 1 'registered as' "$dir/m$new.log" | cut -c1-24)" +%s%3N 2>/dev/null)
reg=()
for i in $(seq 0 $((last - 1))); do
	w=$(awk -v n="l$tag-$new" '$1 == "first_write" && $2 == n { print $3; exit }' "$dir/l$i.out")
	reg+=($((w - ${t_reg:-$t_join})))
done
echo "fleet: newcomer host $new: first completed write from each of $((last)) writers," \
	"from its mover's start: $(stats "${first[@]}"); from its registration in etcd:" \
	"$(stats "${reg[@]}")"
# A sanitizer build (make SANITIZE=...) reports into the movers' logs.
if grep -l "Sanitizer\|runtime error:" "$dir"/m*.log; then fail "a sanitizer report"; fi
echo "fleet: passed"
