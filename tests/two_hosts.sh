#!/bin/bash
# SPDX-License-Identifier: MIT
# The two-host run: two movers in two network namespaces joined by veth,
# three shards each, and a KV-cache page transfer between a client of each,
# every page checked on the receiver. Skipped, with the reason, where
# namespaces cannot be made (no root or no CAP_NET_ADMIN).
set -u
B=${MV_BUILD:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! ip netns add mvprobe$$ 2>/dev/null; then
	echo "two_hosts: SKIPPED: network namespaces are not permitted here (need root and iproute2)"
	exit 0
fi
ip netns del mvprobe$$
dir=$(mktemp -d /tmp/mvtwo.XXXXXX)
trap '"$here"/tools/mvhosts.sh down "$dir"; rm -rf "$dir"' EXIT
MV_BUILD=$B MV_TAG=t$$ "$here"/tools/mvhosts.sh up "$dir" tcp 3 || exit 1
. "$dir"/env
if [ "$MV_NETNS" != 1 ]; then
	echo "two_hosts: FAILED: namespaces were permitted but the movers did not start in them"
	exit 1
fi
timeout 120 "$B"/bin/mvkv --send "$MV_SOCK_A" --recv "$MV_SOCK_B" --pages 2048 --pool 4096 \
	--page-size 16384 --seconds 2 || { echo "two_hosts: FAILED"; cat "$dir"/*.log; exit 1; }
echo "two_hosts: passed"
