#!/bin/bash
# SPDX-License-Identifier: MIT
# The public LLM request traces replayed whole through two movers: each
# trace is imported with one model's KV geometry (by default Llama-3-70B at
# TP=8, 16-token pages: 8 KiB pages, 80 layers) and replayed with mvreplay,
# as fast as the window allows (--asap) and at the trace's own pace
# (--speed 1), on each provider. Every request is one batch, whatever its
# page count. Prints one line per replay and exits non-zero if any batch
# failed (too_big included) or any immediate was missed.
#
#   tools/replay_traces.sh [TRACES_DIR]     default ../shared/traces
#
# REPLAY_PROVIDERS (default "shm tcp"), REPLAY_SHARDS (2), REPLAY_ASAP_LIMIT
# (requests per trace with --asap; default 200; 0 takes every request),
# REPLAY_PACED_LIMIT (requests with --speed 1; default 100, since the traces
# span an hour each), REPLAY_GEOMETRY (mvtrace import's model options).
set -u
B=${MV_BUILD:-build}
here=$(cd "$(dirname "$0")" && pwd)
traces=${1:-$here/../../shared/traces}
provs=${REPLAY_PROVIDERS:-shm tcp}
shards=${REPLAY_SHARDS:-2}
asap_limit=${REPLAY_ASAP_LIMIT:-200}
paced_limit=${REPLAY_PACED_LIMIT:-100}
geometry=${REPLAY_GEOMETRY:---layers 80 --kv-heads 1 --head-dim 128 --dtype-bytes 2 --tokens-per-page 16}
dir=$(mktemp -d /tmp/mvreplay.XXXXXX)
up=""
trap '[ -n "$up" ] && MV_NO_NETNS=1 "$here"/mvhosts.sh down "$dir"; rm -rf "$dir"' EXIT

inputs=(
	"mooncake $traces/mooncake/conversation_trace.jsonl"
	"mooncake $traces/mooncake/synthetic_trace.jsonl"
	"azure $traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv"
	"azure $traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
)
for i in "${inputs[@]}"; do
	set -- $i
	[ -r "$2" ] || { echo "replay_traces: no trace at $2"; exit 2; }
done

# import KIND INPUT LIMIT OUT
import() {
	local lim=""
	[ "$3" != 0 ] && lim="--limit $3"
	# shellcheck disable=SC2086
	"$B"/bin/mvtrace import "$1" "$2" "$4" $geometry $lim >"$dir"/import.log 2>&1 ||
		{ cat "$dir"/import.log; exit 2; }
}

bad=0
for prov in $provs; do
	MV_NO_NETNS=1 MV_BUILD=$B MV_TAG=r$$ "$here"/mvhosts.sh up "$dir" "$prov" "$shards" >/dev/null ||
		{ echo "replay_traces: movers did not start on $prov"; exit 2; }
	up=1
	. "$dir"/env
	for i in "${inputs[@]}"; do
		set -- $i
		name=$(basename "$2")
		for pace in asap paced; do
			if [ $pace = asap ]; then
				import "$1" "$2" "$asap_limit" "$dir"/t.trace
				how=--asap
			else
				import "$1" "$2" "$paced_limit" "$dir"/t.trace
				how="--speed 1"
			fi
			# shellcheck disable=SC2086
			"$B"/bin/mvreplay --trace "$dir"/t.trace --send "$MV_SOCK_A" --recv "$MV_SOCK_B" \
				$how --quiet >"$dir"/replay.out 2>&1
			rc=$?
			res=$(grep '^RESULT' "$dir"/replay.out)
			too_big=$(grep -c 'too_big' "$dir"/replay.out)
			most=$("$B"/bin/mvtrace dump "$dir"/t.trace --csv |
				awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == "nops") c = i; next}
				         $c > m {m = $c} END {print m + 0}')
			printf 'REPLAY prov=%s trace=%s pace=%s rc=%d largest_pages=%s too_big_lines=%d %s\n' \
				"$prov" "$name" "$pace" "$rc" "$most" "$too_big" "${res#RESULT mvreplay }"
			[ $rc = 0 ] || { bad=1; tail -15 "$dir"/replay.out; }
		done
	done
	MV_NO_NETNS=1 "$here"/mvhosts.sh down "$dir"
	up=""
done
exit $bad
