#!/bin/bash
# SPDX-License-Identifier: MIT
# The main job (`make demo`): two movers as two hosts (network namespaces
# joined by veth where permitted, else loopback), several shards each, and a
# KV-cache-like transfer between a client of each: thousands of scattered
# pages per round with one paged write, an immediate saying they landed,
# every page checked on the receiver, for a few seconds. Prints per-shard and
# total throughput, then stops everything.
set -eu
B=${MV_BUILD:-build}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/mover-demo.XXXXXX)
shards=${DEMO_SHARDS:-$([ "$(nproc)" -ge 8 ] && echo 4 || echo 2)}
seconds=${DEMO_SECONDS:-5}
prov=${DEMO_PROVIDER:-tcp}

cleanup() {
	"$here"/mvhosts.sh down "$dir"
	rm -rf "$dir"
}
trap cleanup EXIT

echo "== mover demo: $prov, $shards shards per mover, ${seconds}s of KV-cache page transfers"
MV_BUILD=$B MV_TAG=demo$$ "$here"/mvhosts.sh up "$dir" "$prov" "$shards"
. "$dir"/env
grep -h "shard " "$dir"/a.log "$dir"/b.log | sed 's/^/   /'
"$B"/bin/mvkv --send "$MV_SOCK_A" --recv "$MV_SOCK_B" --pages "${DEMO_PAGES:-4096}" \
	--pool "${DEMO_POOL:-8192}" --page-size "${DEMO_PAGE_SIZE:-16384}" --seconds "$seconds"
echo "== demo done: both movers stop on SIGTERM"
