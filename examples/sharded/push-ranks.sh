#!/bin/bash
# push-ranks.sh MODEL STEP SHARD...: what a sharded trainer's N ranks do at a
# step, on one host: rank R pushes the Rth SHARD (a safetensors file or a
# checkpoint directory of its own tensors) as part R of N of the version named
# STEP, all N at once. The hub commits one version, the union of the shards,
# once all are in; every rank then prints the version. On several hosts, each
# rank runs its one line: wsync-push --part R/N --group STEP -m MODEL SHARD.
# With SIGN_KEY=FILE in the environment, every rank signs its part with that
# key (the trainer's, which every rank holds): workers run with --verify-key
# take the version only when all its parts are signed for STEP.
# Exit status: 0 when every rank pushed; else the first failing rank's (75
# when a rank's part never came: the others name it).
[ $# -ge 3 ] || { echo "usage: push-ranks.sh MODEL STEP SHARD..." >&2; exit 64; }
model=$1 step=$2
shift 2
n=$#
pids=()
for ((r = 0; r < n; r++)); do
	shard=${*:r+1:1}
	wsync-push -q ${SIGN_KEY:+--sign-key "$SIGN_KEY"} --part "$r/$n" --group "$step" \
		-m "$model" "$shard" &
	pids+=("$!")
done
rc=0
for pid in "${pids[@]}"; do
	wait "$pid" || { s=$?; ((rc == 0)) && rc=$s; }
done
exit "$rc"
