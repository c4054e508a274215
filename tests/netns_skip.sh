# SPDX-License-Identifier: MIT
# Sourced by the scripts that start two movers in network namespaces
# (tools/mvhosts.sh) and drive them from Python: each skips, saying why,
# where it cannot run. Needs $PY set.
#   netns_or_skip NAME [CMD...]  root, iproute2's ip and the right to make a
#                                namespace, and each CMD (e.g. tc) on PATH
#   numpy_or_skip NAME WHAT      $PY imports numpy, which WHAT needs

netns_or_skip() {
	local name=$1 c
	shift
	for c in ip "$@"; do
		if ! command -v "$c" >/dev/null; then
			echo "$name: SKIPPED: $c is not installed (iproute2)"
			exit 0
		fi
	done
	if [ "$(id -u)" != 0 ] || ! ip netns add "mvprobe$$" 2>/dev/null; then
		echo "$name: SKIPPED: network namespaces are not permitted here (need root)"
		exit 0
	fi
	ip netns del "mvprobe$$"
}

numpy_or_skip() {
	"$PY" -c 'import numpy' 2>/dev/null && return 0
	echo "$1: SKIPPED: $PY with numpy is needed for $2 (the Python binding)"
	exit 0
}
