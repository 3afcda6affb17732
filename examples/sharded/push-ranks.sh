#!/bin/bash
# push-ranks.sh MODEL STEP SHARD...: what a sharded trainer's N ranks do at a
# step, on one host: rank R pushes the Rth SHARD (a safetensors file or a
# checkpoint directory of its own tensors) as part R of N of the version named
# STEP, all N at once. The hub commits one version, the union of the shards,
# once all are in; every rank then prints the version. On several hosts, each
# rank runs its one line: wsync-push --part R/N --group STEP -m MODEL SHARD.
# Exit status: 0 when every rank pushed; else the first failing rank's (75
# when a rank's part never came: the others name it).
[ $# -ge 3 ] || { echo "usage: push-ranks.sh MODEL STEP SHARD..." >&2; exit 64; }
model=$1 step=$2
shift 2
n=$#
pids=()
for ((r = 0; r < n; r++)); do
	shard=${*:r+1:1}
	wsync-push -q --part "$r/$n" --group "$step" -m "$model" "$shard" &
	pids+=("$!")
done
rc=0
for pid in "${pids[@]}"; do
	wait "$pid" || { s=$?; ((rc == 0)) && rc=$s; }
done
exit "$rc"
