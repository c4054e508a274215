#!/bin/sh
# SPDX-License-Identifier: MIT
# Regenerates tests/fuzz/corpus/ (make fuzz-seeds): starts a mover on shm
# with 2 shards, lets $MV_BUILD/fuzz/seeds take real blobs from it and
# write every harness's seeds, and stops the mover.
set -eu
B=${MV_BUILD:-build}
here=$(cd "$(dirname "$0")" && pwd)
sock=/tmp/mvseeds.$$.sock
log=/tmp/mvseeds.$$.log
"$B/bin/mover" --provider shm --shards 2 --socket "$sock" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
i=0
while [ ! -S "$sock" ]; do
	i=$((i + 1))
	if [ $i -gt 200 ] || ! kill -0 $pid 2>/dev/null; then
		echo "make_seeds: the mover did not start; its log:" >&2
		cat "$log" >&2
		exit 1
	fi
	sleep 0.05
done
rm -rf "$here/corpus"
mkdir -p "$here/corpus"
"$B/fuzz/seeds" "$sock" "$here/corpus" "$here/../data"
for d in "$here"/corpus/*; do
	echo "make_seeds: $(basename "$d"): $(ls "$d" | wc -l) seeds, $(du -sb "$d" | cut -f1) bytes"
done
