#!/bin/bash
# SPDX-License-Identifier: MIT
# Builds the tree against the libfabric installed under PREFIX (not the
# system's) in its own build folder, and runs make targets there (default:
# check). Not part of make check: a whole second build and run takes
# minutes. The providers come from PREFIX alone: FI_PROVIDER_PATH is
# emptied so that the system's provider plug-ins are not loaded beside a
# library of another version.
#
#   tests/with-libfabric.sh PREFIX [TARGET...]
#
# A libfabric to try, from source (CUDA optional):
#   ./configure --prefix=PREFIX [--with-cuda=/usr/local/cuda] --enable-shm \
#       --enable-tcp --enable-rxm && make -j install
set -eu
prefix=${1:?usage: tests/with-libfabric.sh PREFIX [TARGET...]}
shift
prefix=$(cd "$prefix" && pwd)
if [ ! -f "$prefix/include/rdma/fabric.h" ] || ! ls "$prefix"/lib/libfabric.so* >/dev/null 2>&1; then
	echo "with-libfabric: $prefix has no include/rdma/fabric.h and lib/libfabric.so" >&2
	exit 2
fi
b=${MV_BUILD_LF:-build/lf-$(basename "$prefix")}
export FI_PROVIDER_PATH=
export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ver=$("$prefix/bin/fi_info" --version 2>/dev/null | sed -n 's/^libfabric: *//p' || true)
echo "with-libfabric: libfabric ${ver:-?} from $prefix, build in $b"
mkdir -p "$b"
# The system packages the rest of the build needs, as for any build.
[ -f build/.deps-ok ] && [ ! -f "$b/.deps-ok" ] && cp build/.deps-ok "$b/.deps-ok"
make --no-print-directory B="$b" LIBFABRIC="$prefix" all
for t in "${@:-check}"; do
	make --no-print-directory B="$b" LIBFABRIC="$prefix" "$t"
done
echo "with-libfabric: ${*:-check} passed against libfabric ${ver:-?}"
