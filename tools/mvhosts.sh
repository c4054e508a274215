#!/bin/bash
# SPDX-License-Identifier: MIT
# Two "hosts" for the demo and the tests: two network namespaces joined by a
# veth pair (10.77.0.1 <-> 10.77.0.2, addresses that exist only inside
# them), one mover in each. Falls back to two movers on loopback when
# namespaces are not permitted (no root, no CAP_NET_ADMIN, no iproute2).
#
#   mvhosts.sh up DIR PROVIDER SHARDS   starts both, writes DIR/env
#   mvhosts.sh down DIR                 stops both (SIGTERM), removes namespaces
#   mvhosts.sh restart DIR A|B [SIG]    stops one (SIGKILL unless SIG, e.g. TERM)
#                                       and starts it again on its socket
#
# DIR/env sets MV_SOCK_A, MV_SOCK_B, MV_PID_A, MV_PID_B, MV_NETNS (1 or 0),
# MV_NS_A, MV_NS_B, MV_IF_A, MV_IF_B (the veth ends, or lo).
# $MV_MOVER_ARGS: more options for both movers (e.g. "--heartbeat 0.25");
# $MV_MOVER_WRAP: a command both run under (e.g. "unshare --pid --fork
# --kill-child", so that neither can watch the other's pid). Both apply to
# restarts too.
set -u
cmd=$1 dir=$2
B=${MV_BUILD:-build}
tag=${MV_TAG:-$$}
nsA=mvA$tag nsB=mvB$tag
vA=mva$tag vB=mvb$tag

netns_ok() {
	[ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1 || return 1
	ip netns add "$nsA" 2>/dev/null || return 1
	if ! ip netns add "$nsB" 2>/dev/null; then
		ip netns del "$nsA"
		return 1
	fi
	ip link add "$vA" type veth peer name "$vB" 2>/dev/null &&
		ip link set "$vA" netns "$nsA" && ip link set "$vB" netns "$nsB" &&
		ip -n "$nsA" addr add 10.77.0.1/24 dev "$vA" && ip -n "$nsB" addr add 10.77.0.2/24 dev "$vB" &&
		ip -n "$nsA" link set "$vA" up && ip -n "$nsB" link set "$vB" up &&
		ip -n "$nsA" link set lo up && ip -n "$nsB" link set lo up && return 0
	ip netns del "$nsA" 2>/dev/null
	ip netns del "$nsB" 2>/dev/null
	return 1
}

wait_sock() {
	for _ in $(seq 100); do
		[ -S "$1" ] && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# start_mover a|b PROVIDER IFACE SHARDS PREFIX: in the background ($! its pid)
start_mover() {
	local iface="--iface $3"
	[ "$2" = shm ] && iface=""
	$5 ${MV_MOVER_WRAP:-} "$B"/bin/mover --no-config --provider "$2" $iface --shards "$4" \
		--socket "$dir/$1.sock" ${MV_MOVER_ARGS:-} >>"$dir/$1.log" 2>&1 &
}

case $cmd in
restart)
	[ -f "$dir"/env ] || exit 1
	. "$dir"/env
	which=$3 sig=${4:-KILL}
	case $which in
	A) pid=$MV_PID_A name=a ifc=$MV_IF_A pre="" ;;
	B) pid=$MV_PID_B name=b ifc=$MV_IF_B pre="" ;;
	*) echo "usage: $0 restart DIR A|B [SIG]" >&2; exit 2 ;;
	esac
	[ "$MV_NETNS" = 1 ] && pre="ip netns exec $( [ "$which" = A ] && echo "$MV_NS_A" || echo "$MV_NS_B")"
	kill -"$sig" "$pid" 2>/dev/null
	# SIGTERM drains what clients committed: up to 15 s.
	for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	kill -KILL "$pid" 2>/dev/null
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	rm -f /dev/shm/"$pid":* /dev/shm/mv."$pid".* "$dir/$name.sock"
	start_mover "$name" "$MV_PROVIDER" "$ifc" "$MV_SHARDS" "$pre"
	new=$!
	sed -i "s/^MV_PID_$which=.*/MV_PID_$which=$new/" "$dir"/env
	wait_sock "$dir/$name.sock" $new || { echo "mvhosts: mover $which did not come back" >&2; exit 1; }
	;;
up)
	prov=$3 shards=$4
	mkdir -p "$dir"
	rm -f "$dir"/a.sock "$dir"/b.sock "$dir"/a.log "$dir"/b.log
	ifA=lo ifB=lo pre_a="" pre_b="" netns=0
	if [ "$prov" = tcp ] && [ "${MV_NO_NETNS:-0}" != 1 ] && netns_ok; then
		netns=1 ifA=$vA ifB=$vB
		pre_a="ip netns exec $nsA" pre_b="ip netns exec $nsB"
	fi
	start_mover a "$prov" "$ifA" "$shards" "$pre_a"
	pa=$!
	start_mover b "$prov" "$ifB" "$shards" "$pre_b"
	pb=$!
	cat >"$dir"/env <<EOT
MV_SOCK_A=$dir/a.sock
MV_SOCK_B=$dir/b.sock
MV_PID_A=$pa
MV_PID_B=$pb
MV_NETNS=$netns
MV_NS_A=$nsA
MV_NS_B=$nsB
MV_IF_A=$ifA
MV_IF_B=$ifB
MV_PROVIDER=$prov
MV_SHARDS=$shards
EOT
	if ! wait_sock "$dir"/a.sock $pa || ! wait_sock "$dir"/b.sock $pb; then
		echo "mvhosts: a mover did not start:" >&2
		cat "$dir"/a.log "$dir"/b.log >&2
		"$0" down "$dir"
		exit 1
	fi
	if [ $netns = 1 ]; then
		echo "mvhosts: two hosts: namespaces $nsA (10.77.0.1) and $nsB (10.77.0.2), veth"
	else
		echo "mvhosts: two movers on one host (${prov}; namespaces ${MV_NO_NETNS:+disabled}$([ "$prov" = tcp ] || echo "not used for $prov"))"
	fi
	;;
down)
	[ -f "$dir"/env ] || exit 0
	. "$dir"/env
	for p in $MV_PID_A $MV_PID_B; do kill -TERM "$p" 2>/dev/null; done
	for p in $MV_PID_A $MV_PID_B; do
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
		kill -KILL "$p" 2>/dev/null
	done
	if [ "$MV_NETNS" = 1 ]; then
		ip netns del "$MV_NS_A" 2>/dev/null
		ip netns del "$MV_NS_B" 2>/dev/null
	fi
	rm -f "$dir"/env
	;;
*)
	echo "usage: $0 up DIR PROVIDER SHARDS | down DIR" >&2
	exit 2
	;;
esac
