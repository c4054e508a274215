#!/bin/bash
# SPDX-License-Identifier: MIT
# Draws mvbench's CSV as a picture: bandwidth (GB/s) against write size,
# through the mover (solid) and direct (dashed), one colour per provider and
# shard count, with the ratio as a second panel. Uses gnuplot (Debian's
# gnuplot-nox, installed on first use as root).
#   mvplot.sh BENCH.csv OUT.png
set -eu
csv=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
command -v gnuplot >/dev/null || MV_EXTRA_PKGS=gnuplot-nox sh "$here"/install-deps
[ -s "$csv" ] || { echo "mvplot: $csv is empty or missing; run mvbench --csv first" >&2; exit 1; }
head -1 "$csv" | grep -q '^provider,shards,size,.*mover_GBps.*direct_GBps.*ratio' ||
	{ echo "mvplot: $csv is not an mvbench CSV (header: $(head -1 "$csv"))" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One data file per (provider, shards): size, mover GB/s, direct GB/s, ratio.
# Contiguous rows only: scattered-page rows are not sizes, and the external
# rows (pattern reuse_vs_TOOL: the mover and a tool on one reused buffer) stay
# in the CSV.
awk -F, -v d="$tmp" 'NR > 1 && $25 == "contig" {
	f = d "/" $1 "_" $2 ".dat"
	print $3, $7, $10, $12 > f
	if (!(f in seen)) { seen[f] = 1; print f "\t" $1 " " $2 (($2 == 1) ? " shard" : " shards") >> (d "/series") }
}' "$csv"
plots="" ratios="" i=1
while IFS=$'\t' read -r f title; do
	plots="$plots${plots:+, }'$f' using 1:2 with linespoints lw 2 lc $i pt 7 title '$title, mover',"
	plots="$plots '$f' using 1:3 with linespoints lw 2 lc $i dt 2 pt 6 title '$title, direct'"
	ratios="$ratios${ratios:+, }'$f' using 1:4 with linespoints lw 2 lc $i pt 7 title '$title'"
	i=$((i + 1))
done <"$tmp"/series

gnuplot <<EOT
set terminal pngcairo size 1100,900 font ",11"
set output "$out"
set multiplot layout 2,1 title "mover vs direct libfabric writes ($(basename "$csv"))"
set logscale x 2
set format x "%.0b%B"
set xlabel "write size (bytes)"
set grid
set key outside right
set ylabel "GB/s"
plot $plots
set ylabel "mover / direct"
set yrange [0:*]
set arrow from graph 0, first 0.97 to graph 1, first 0.97 nohead dt 3 lc rgb "red"
plot $ratios
unset multiplot
EOT
echo "mvplot: wrote $out"
