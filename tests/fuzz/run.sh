#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs the libFuzzer harnesses: run.sh BUILD SECONDS HARNESS...
# Each harness fuzzes for SECONDS on one core (-jobs and -workers stay 1:
# the machine is shared), starting from its committed seeds in
# tests/fuzz/corpus/NAME and keeping what it finds in BUILD/fuzz/work/NAME,
# then prints one FUZZ line: executions, exec/s, coverage (cov: edges, ft:
# features) and corpus size, from libFuzzer's final stats. With
# FUZZ_REPLAY=1 (make check) it first runs every committed crash input in
# tests/fuzz/regress/NAME and every seed once, and fuzzes from a fresh
# work directory. A crash, leak, timeout or failed assertion fails the run
# and names the input libFuzzer saved.
set -u
B=$1
SECS=$2
shift 2
here=$(dirname "$0")
fail=0
mkdir -p "$B/fuzz/artifacts"
for h in "$@"; do
	bin=$B/fuzz/$h
	seeds=$here/corpus/$h
	log=$B/fuzz/$h.log
	if [ "${FUZZ_REPLAY:-0}" = 1 ]; then
		regress=$(ls "$here/regress/$h/"* 2>/dev/null)
		if [ -n "$regress" ]; then
			# shellcheck disable=SC2086
			if ! "$bin" $regress >"$log" 2>&1; then
				echo "FUZZ $h FAILED: a committed crash input fails again (see $log)"
				tail -n 30 "$log"
				fail=1
				continue
			fi
			echo "FUZZ $h regress: $(echo "$regress" | wc -w) crash inputs pass"
		fi
		work=$B/fuzz/check-work/$h
		rm -rf "$work"
	else
		work=$B/fuzz/work/$h
	fi
	mkdir -p "$work"
	"$bin" -max_total_time="$SECS" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
		-max_len=8192 -artifact_prefix="$B/fuzz/artifacts/$h-" \
		"$work" "$seeds" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
	last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
	cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
	ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
	corp=$(echo "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
	if [ $rc -ne 0 ]; then
		echo "FUZZ $h FAILED (exit $rc) after ${execs:-?} executions; input saved as:"
		grep -E 'Test unit written to|artifact' "$log" | tail -n 2
		grep -E 'ERROR|Assertion|runtime error|SUMMARY' "$log" | head -n 5
		echo "(whole log: $log; replay with $bin FILE)"
		fail=1
		continue
	fi
	echo "FUZZ $h seconds=$SECS execs=${execs:-0} exec_per_s=${rate:-0} cov=${cov:-0} ft=${ft:-0} corpus=${corp:-0}"
done
exit $fail
