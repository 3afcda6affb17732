#!/usr/bin/env bats
# parts.bats - a version in parts (wsync-push --part R/N --group KEY, wsync(7)
# SHARDED TRAINERS): each rank of a sharded trainer pushes its own tensors, the
# hub commits one version, the union, once every part is in; before that
# nobody sees any of it, and a group that cannot be whole commits nothing.

load test_helper
load hub_helper

# parts N [TENSORS [BYTES]]: $TMP/m.safetensors, the whole checkpoint of model
# "policy", and $TMP/m.R.safetensors, its N parts (tensor I in part I % N).
parts() {
	"$PY" "$FIXTURES/mkparts.py" "$TMP/m" "$@"
}

# push_part R/N KEY [options...]: rank R's push in the background, its stdout
# in $TMP/rR.out, stderr in $TMP/rR.err, its status in $TMP/rR.rc; RPID[R].
declare -gA RPID
push_part() {
	local r=${1%/*} n=${1#*/} key=$2
	shift 2
	(
		rc=0
		wsync-push -q "$@" --part "$r/$n" --group "$key" -m policy "$TMP/m.$r.safetensors" \
			>"$TMP/r$r.out" 2>"$TMP/r$r.err" || rc=$?
		echo "$rc" >"$TMP/r$r.rc"
	) &
	RPID[$r]=$!
	PIDS+=("$!")
}

# ended R: rank R's push has exited.
ended() {
	[ -s "$TMP/r$1.rc" ]
}

# both_refused KEY MESSAGE: with a hub started, rank 0 of two pushes its part of
# group KEY and waits; rank 1's part is refused 65 with MESSAGE, so is rank 0's,
# and nothing is committed.
both_refused() {
	push_part 0/2 "$1"
	wait_log "event=part model=policy group=$1 part=0/2"
	run -65 wsync-push -q --part 1/2 --group "$1" -m policy "$TMP/m.1.safetensors"
	assert_output "$2"
	wait_until ended 0
	assert_equal "$(cat "$TMP/r0.rc") $(cat "$TMP/r0.err")" "65 $2"
	no_version
}

# no_version: the hub holds no version of policy.
no_version() {
	[ ! -e "$STORE/policy/1.wsync" ]
}

@test "two parts pushed at once make one version with the tensors of the whole checkpoint" {
	parts 2 8 3000000
	start_hub
	push_part 0/2 7
	run wsync-push -q --part 1/2 --group 7 -m policy "$TMP/m.1.safetensors"
	assert_success
	assert_output "1"
	wait_until ended 0
	assert_equal "$(cat "$TMP/r0.rc") $(cat "$TMP/r0.out")" "0 1"
	wsync-push -q -m policy "$TMP/m.safetensors"
	wsync-inspect "$STORE/policy/1.wsync" | tail -n +5 >"$TMP/parts.txt"
	wsync-inspect "$STORE/policy/2.wsync" | tail -n +5 >"$TMP/whole.txt"
	run diff "$TMP/parts.txt" "$TMP/whole.txt"
	assert_success
	cmp <(tail -c +64 "$STORE/policy/1.wsync") <(tail -c +64 "$STORE/policy/2.wsync")
}

@test "a watcher sees one ordinary version, once every part is in" {
	parts 2
	start_hub
	start_watcher w1
	wait_until hub_has_worker w1
	push_part 0/2 3 -w all
	wait_log "event=part model=policy group=3 part=0/2"
	no_version
	run wsync-push -q -w all --part 1/2 --group 3 -m policy "$TMP/m.1.safetensors"
	assert_success
	assert_output "1"
	wait_until ended 0
	assert_equal "$(cat "$TMP/r0.rc")" "0"
	wait_until watcher_at w1 1
	wsync-convert "$TMP/w1.wsync" "$TMP/w1.safetensors"
	run "$PY" "$FIXTURES/mksafetensors.py" dump "$TMP/w1.safetensors"
	expected=$("$PY" "$FIXTURES/mksafetensors.py" dump "$TMP/m.safetensors")
	assert_output "$expected"
}

@test "two parts holding one tensor are refused, naming both, and nothing is committed" {
	parts 2
	cp "$TMP/m.0.safetensors" "$TMP/m.1.safetensors"
	start_hub
	both_refused 1 'wsync-push: model policy group 1: parts 0 and 1 both hold tensor "layers.0.weight"; nothing committed'
}

@test "parts that disagree on the number of parts are refused, naming them" {
	parts 2
	start_hub
	push_part 0/2 1 -t 2
	wait_log "event=begin"
	run -64 wsync-push -q --part 1/3 --group 1 -m policy "$TMP/m.1.safetensors"
	assert_output "wsync-push: model policy group 1: part 1 says 3 parts, part 0 said 2"
}

@test "a group key not above the last committed one is refused" {
	parts 1
	start_hub
	wsync-push -q --part 0/1 --group 5 -m policy "$TMP/m.0.safetensors"
	run -65 wsync-push -q --part 0/1 --group 5 -m policy "$TMP/m.0.safetensors"
	assert_output "wsync-push: model policy group 5 (part 0 of 1) is not above the last group committed, 5"
	run wsync-push -q --part 0/1 --group 6 -m policy "$TMP/m.0.safetensors"
	assert_success
	assert_output "2"
}

@test "a group still open when a newer one commits is refused at once, and never follows it" {
	parts 2
	start_hub
	push_part 0/2 5
	wait_log "event=part model=policy group=5 part=0/2"
	# The newer step, whole in one part, commits first.
	run -0 wsync-push -q --part 0/1 --group 6 -m policy "$TMP/m.safetensors"
	assert_output "1"
	wait_until ended 0
	assert_equal "$(cat "$TMP/r0.rc") $(cat "$TMP/r0.err")" "65 wsync-push: model policy group 5 is not above the last group committed, 6 (committed while it was open); nothing committed"
	run -65 wsync-push -q --part 1/2 --group 5 -m policy "$TMP/m.1.safetensors"
	assert_output "wsync-push: model policy group 5 (part 1 of 2) is not above the last group committed, 6"
	[ ! -e "$STORE/policy/2.wsync" ]
}

@test "a second live push of one part is refused while the first is mid-upload" {
	need_test_hooks WSYNC_TEST_PUSH_GATE
	parts 2 2 6000000
	start_hub
	WSYNC_TEST_PUSH_GATE="$TMP/gate" push_part 0/2 1
	wait_log "event=begin upload=1"
	run -75 wsync-push -q --part 0/2 --group 1 -m policy "$TMP/m.0.safetensors"
	assert_output --regexp '^wsync-push: model policy group 1: part 0 is being pushed already \(upload 1, heard from [0-9]+ ms ago\); a part silent for 3000 ms may be pushed again$'
	touch "$TMP/gate"
	run wsync-push -q --part 1/2 --group 1 -m policy "$TMP/m.1.safetensors"
	assert_success
	assert_output "1"
}

@test "a rank killed mid-part leaves the head unchanged and the others exit 75 naming it" {
	need_test_hooks WSYNC_TEST_PUSH_GATE
	parts 3 3 6000000
	start_hub
	wsync-push -q -m policy "$TMP/m.safetensors"
	# Rank 1 in a subshell of its own, whose stderr takes the shell's word of its death.
	(
		WSYNC_TEST_PUSH_GATE="$TMP/gate" bash -c 'echo $$ >"$0"; exec wsync-push -q -t 3 \
			--part 1/3 --group 1 -m policy "$1"' "$TMP/r1.pid" "$TMP/m.1.safetensors" || true
	) 2>/dev/null &
	PIDS+=("$!")
	wait_log "event=begin upload=2"
	killed=$(cat "$TMP/r1.pid")
	PIDS+=("$killed")
	kill -KILL "$killed"
	push_part 2/3 1 -t 3
	run -75 wsync-push -q -t 3 --part 0/3 --group 1 -m policy "$TMP/m.0.safetensors"
	assert_output "wsync-push: model policy group 1: part 1 of 3 missing after 3.0 s; nothing committed"
	wait_until ended 2
	assert_equal "$(cat "$TMP/r2.rc") $(cat "$TMP/r2.err")" "75 $output"
	assert_equal "$(wsync-inspect --hub --json | jq -r '.models[0].head')" "1"
	[ ! -e "$STORE/policy/2.wsync" ]
	wait_log "event=drop model=policy group=1 parts=3 missing=1 reason=\"timeout\""
}

# push_alone: rank 0 of a group of one part, its version in $TMP/alone.out.
push_alone() {
	wsync-push -q --part 0/1 --group 1 -m policy "$TMP/m.0.safetensors" >"$TMP/alone.out" \
		2>/dev/null
}

@test "a part pushed again after its pusher was lost replaces the first attempt" {
	need_test_hooks WSYNC_TEST_PUSH_GATE
	parts 1 2 6000000
	start_hub
	(
		WSYNC_TEST_PUSH_GATE="$TMP/gate" bash -c 'echo $$ >"$0"; exec wsync-push -q \
			--part 0/1 --group 1 -m policy "$1"' "$TMP/r0.pid" "$TMP/m.0.safetensors" || true
	) 2>/dev/null &
	PIDS+=("$!")
	wait_log "event=begin upload=1"
	PIDS+=("$(cat "$TMP/r0.pid")")
	kill -KILL "$(cat "$TMP/r0.pid")"
	# Refused (75) while the lost attempt was heard from within 3 s, then taken.
	wait_until push_alone
	assert_equal "$(cat "$TMP/alone.out")" "1"
	wait_log "event=replace model=policy group=1 part=0 upload=1"
}

@test "a group of 64 parts commits one version of all their tensors: a group counts as one of the hub's 16 uploads" {
	parts 64 64 4096
	start_hub
	for ((r = 0; r < 63; r++)); do
		push_part "$r/64" 1 -t 60
	done
	run wsync-push -q -t 60 --part 63/64 --group 1 -m policy "$TMP/m.63.safetensors"
	assert_success
	assert_output "1"
	for ((r = 0; r < 63; r++)); do
		wait_until ended "$r"
		assert_equal "$r $(cat "$TMP/r$r.rc") $(cat "$TMP/r$r.out")" "$r 0 1"
	done
	assert_equal "$(wsync-inspect "$STORE/policy/1.wsync" | grep -c 'layers\.')" "64"
}

@test "--part without --group is a usage error" {
	run -64 wsync-push --part 0/2 -m policy m.safetensors
	assert_output "wsync-push: --part and --group go together: a part names the version it belongs to
Try 'wsync-push --help'."
}

@test "--part with R not below N is a usage error" {
	run -64 wsync-push --part 2/2 --group 1 -m policy m.safetensors
	assert_output "wsync-push: --part 2/2: not R/N, a part R from 0 to N-1 of 1 to 256
Try 'wsync-push --help'."
}

@test "--part with --seq is a usage error: a part is signed with its group's key" {
	run -64 wsync-push --part 0/2 --group 1 --sign-key k.key --seq 3 -m policy m.safetensors
	assert_output "wsync-push: --part goes over the socket to every worker, signed for its group: not with -W, --seq or --transfer copy|link
Try 'wsync-push --help'."
}

@test "a rank alone with a part of one message exits 75 naming the parts missing" {
	parts 3 3 100
	start_hub
	run -75 wsync-push -q -t 1 --part 2/3 --group 4 -m policy "$TMP/m.2.safetensors"
	assert_output "wsync-push: model policy group 4: parts 0,1 of 3 missing after 1.0 s; nothing committed"
	no_version
}

@test "parts that give one meta key two values are refused, naming both" {
	parts 2 2 100
	"$PY" - "$TMP/m.1.safetensors" <<'PYEOF'
import os, sys
sys.path.insert(0, os.environ["FIXTURES"])
from mksafetensors import build
open(sys.argv[1], "wb").write(build([("layers.1.weight", "BF16", [50], bytes(100))],
                                    {"format": "np"}, False))
PYEOF
	start_hub
	both_refused 2 'wsync-push: model policy group 2: parts 0 and 1 give meta "format" two values; nothing committed'
}

@test "a group key not above the last committed one is refused after the hub restarts too" {
	parts 1
	start_hub
	wsync-push -q --part 0/1 --group 5 -m policy "$TMP/m.0.safetensors"
	stop_hub
	start_hub
	run -65 wsync-push -q --part 0/1 --group 4 -m policy "$TMP/m.0.safetensors"
	assert_output "wsync-push: model policy group 4 (part 0 of 1) is not above the last group committed, 5"
	no_version_2
}

# no_version_2: the hub holds no second version of policy.
no_version_2() {
	[ ! -e "$STORE/policy/2.wsync" ]
}

# signed_group KEY [RANK1_FILE]: ranks 0 and 1 push their parts of group KEY,
# each signed with key.key (made once), rank 1 from RANK1_FILE when given
# (unsigned then: a part spliced in as a hub could); both print the version.
signed_group() {
	[ -e "$TMP/key.key" ] || wsync-keygen --sign "$TMP/key" >/dev/null
	push_part 0/2 "$1" --sign-key "$TMP/key.key"
	if [ -n "${2:-}" ]; then
		cp "$2" "$TMP/m.1.safetensors"
		run wsync-push -q --part 1/2 --group "$1" -m policy "$TMP/m.1.safetensors"
	else
		run wsync-push -q --part 1/2 --group "$1" --sign-key "$TMP/key.key" -m policy \
			"$TMP/m.1.safetensors"
	fi
	assert_success
	wait_until ended 0
	assert_equal "$(cat "$TMP/r0.rc") $(cat "$TMP/r0.out")" "0 $output"
}

@test "a group whose ranks each signed their part is applied by a verifying watcher" {
	parts 2
	start_hub
	wsync-keygen --sign "$TMP/key" >/dev/null
	start_watcher w1 --verify-key "$TMP/key.pub"
	signed_group 3
	assert_output "1"
	wait_until watcher_at w1 1
	run -0 wsync-pull -q --verify-key "$TMP/key.pub" -m policy -o "$TMP/p.wsync"
	assert_output "1"
	run -0 wsync-inspect --verify-key "$TMP/key.pub" "$TMP/p.wsync"
	assert_line 'signature holds'
}

@test "a version whose part was signed for another group is refused, naming both groups" {
	parts 2
	start_hub
	signed_group 7
	wsync-convert "$STORE/policy/1.wsync" "$TMP/v1.safetensors"
	# Rank 1's part as group 7 signed it: its tensors, its manifest and signature.
	"$PY" - "$TMP/v1.safetensors" "$TMP/m.1.safetensors" "$TMP/spliced.safetensors" <<'PYEOF'
import json, struct, sys
def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]
signed, _ = read(sys.argv[1])
head, data = read(sys.argv[2])
for k in ("wsync.manifest.1", "wsync.signature.1"):
    head["__metadata__"][k] = signed["__metadata__"][k]
t = json.dumps(head).encode()
t += b" " * (-len(t) % 8)
open(sys.argv[3], "wb").write(struct.pack("<Q", len(t)) + t + data)
PYEOF
	signed_group 8 "$TMP/spliced.safetensors"
	assert_output "2"
	run -77 wsync-pull -q --verify-key "$TMP/key.pub" -m policy -o "$TMP/p.wsync"
	assert_output "wsync-pull: refused (not-one-group): policy version 2: part 1 is signed for group 7, part 0 for group 8: its parts are not one signed group"
	[ ! -e "$TMP/p.wsync" ]
}

@test "a signed part naming more tensors than a manifest holds is refused before it is sent" {
	parts 1 3000 2
	wsync-keygen --sign "$TMP/key" >/dev/null
	start_hub
	run -65 wsync-push -q --sign-key "$TMP/key.key" --part 0/1 --group 1 -m policy \
		"$TMP/m.0.safetensors"
	assert_output "wsync-push: part 0 of 1: its manifest, naming 3000 tensors, is 74788 bytes in base64, over the 65536 of a meta value; push the model in more parts"
	no_version
}

# steps_in_parts: $TMP/sV.safetensors for V in 1 and 2, 16 MiB of bf16, 1%
# changed, and their halves $TMP/pV.R.safetensors (each over what a push sends
# in one message, which always goes whole).
steps_in_parts() {
	"$PY" "$FIXTURES/mkstep.py" chain bf16 0.01 16777216 2 "$TMP/s"
	for v in 1 2; do
		wsync-convert "$TMP/s$v.wsync" "$TMP/s$v.safetensors"
		"$PY" "$FIXTURES/mkparts.py" split "$TMP/s$v.safetensors" 2 "$TMP/p$v"
	done
}

# two_ranks KEY V [BASE0 [BASE1]]: ranks 0 and 1 push $TMP/pV.R.safetensors as
# group KEY, rank R with --base BASER when given and not "-"; rank 1's status
# and outputs in $status, $output and $stderr; rank 0 must exit 0.
two_ranks() {
	local -a base0=() base1=()
	[ "${3:--}" = - ] || base0=(--base "$3")
	[ "${4:--}" = - ] || base1=(--base "$4")
	wsync-push -q --part 0/2 --group "$1" "${base0[@]}" -m policy "$TMP/p$2.0.safetensors" \
		>/dev/null &
	local pid=$!
	run --separate-stderr wsync-push --part 1/2 --group "$1" "${base1[@]}" -m policy \
		"$TMP/p$2.1.safetensors"
	wait "$pid"
}

@test "two ranks push with --base, each the delta from its own part before: the checkpoint pushed whole, and its delta served as made" {
	steps_in_parts
	start_hub
	two_ranks 1 1
	assert_success
	run -0 wsync-pull -q --transfer socket -m policy -o "$TMP/w1.wsync"
	two_ranks 2 2 "$TMP/p1.0.safetensors" "$TMP/p1.1.safetensors"
	assert_success
	assert_output "2"
	assert_equal "$stderr" ""
	run -0 grep -c "models=policy .*deltas=policy@1:" hub.log
	assert_output 2
	run -0 grep -c "event=delta model=policy base=1 version=2 state=ready made=0 pushed=2 " hub.log
	# The union rebuilt at once from the parts' deltas, no part rebuilt alone.
	run -0 grep -c "event=commit model=policy version=2 .* union=delta " hub.log
	run -1 grep "event=rebuild " hub.log
	run -0 wsync-pull -q --transfer socket --base "$TMP/w1.wsync" -m policy -o "$TMP/w2.wsync"
	cmp "$TMP/w2.wsync" "$STORE/policy/2.wsync"
	run -1 grep "made=1" hub.log
	run -0 wsync-push -q -m policy "$TMP/s2.safetensors"
	assert_output "3"
	cmp <(tail -c +64 "$STORE/policy/2.wsync") <(tail -c +64 "$STORE/policy/3.wsync")
}

@test "a hub on WSYNC_THREADS=1 rebuilds the union of two parts' deltas on a thread a part (up to the CPUs), byte for byte the checkpoint pushed whole" {
	steps_in_parts
	WSYNC_THREADS=1 start_hub
	two_ranks 1 1
	assert_success
	two_ranks 2 2 "$TMP/p1.0.safetensors" "$TMP/p1.1.safetensors"
	assert_success
	assert_output "2"
	local n
	# The CPUs this process may run on, as the hub counts them (nproc heeds OMP_NUM_THREADS).
	n=$("$PY" -c 'import os; print(min(2, len(os.sched_getaffinity(0))))')
	run -0 grep -c "event=commit model=policy version=2 .* union=delta union_threads=$n " hub.log
	run -0 wsync-push -q -m policy "$TMP/s2.safetensors"
	assert_output "3"
	cmp <(tail -c +64 "$STORE/policy/2.wsync") <(tail -c +64 "$STORE/policy/3.wsync")
}

@test "a rank whose part before is in no group the hub holds sends its part whole, naming it" {
	steps_in_parts
	start_hub
	# Version 1 holds the tensors of p1.1, but as a version pushed whole, not as a part.
	run -0 wsync-push -q -m policy "$TMP/s1.safetensors"
	wsync-convert "$TMP/p1.1.safetensors" "$TMP/p1.1.wsync"
	content=$(wsync-inspect --json "$TMP/p1.1.wsync" | jq -r .content_id)
	two_ranks 1 2 - "$TMP/p1.1.safetensors"
	assert_success
	assert_output "2"
	assert_equal "$stderr" "wsync-push: policy version 2 sent whole: $TMP/p1.1.safetensors: model policy holds no version of content $content (never pushed here, or retired)"
}

# damage_part0: flips a byte in the middle of the data of part 0's first
# tensor in the store's version 1 (the ranks' base); $path names that tensor.
damage_part0() {
	local off
	path=$(wsync-inspect --json "$TMP/p1.0.safetensors" | jq -r '.tree[0].path')
	off=$(wsync-inspect --json "$STORE/policy/1.wsync" |
		jq --arg p "$path" '.tree[] | select(.path == $p) | .offset + (.bytes / 2 | floor)')
	printf '\377' | dd of="$STORE/policy/1.wsync" bs=1 seek="$off" conv=notrunc status=none
}

# same_as_whole V: the version V of policy holds what $TMP/s2.safetensors pushed
# whole does (every byte after the version number's).
same_as_whole() {
	run -0 wsync-push -q -m policy "$TMP/s2.safetensors"
	cmp <(tail -c +64 "$STORE/policy/$1.wsync") <(tail -c +64 "$STORE/policy/$output.wsync")
}

@test "a group of one part sent as a delta and one sent whole rebuilds the delta's part, then copies both" {
	steps_in_parts
	start_hub
	two_ranks 1 1
	assert_success
	two_ranks 2 2 "$TMP/p1.0.safetensors" -
	assert_success
	assert_output "2"
	assert_equal "$stderr" ""
	run -0 grep -c "event=rebuild upload=.* model=policy base=1 " hub.log
	assert_output 1
	run -0 grep -c "event=commit model=policy version=2 .* union=copy " hub.log
	same_as_whole 2
}

@test "parts' deltas whose union does not rebuild are rebuilt each on its own: the damaged part goes whole, the other stays a delta" {
	steps_in_parts
	start_hub
	two_ranks 1 1
	assert_success
	damage_part0
	# The bases read whole: a part whose base's hashes were remembered would
	# try once more, read whole, before going whole (wsync-push(1) FILES).
	rm -rf "$XDG_CACHE_HOME"
	two_ranks 2 2 "$TMP/p1.0.safetensors" "$TMP/p1.1.safetensors"
	assert_success
	assert_output "2"
	assert_equal "$stderr" ""
	run -0 grep -c "event=union model=policy group=2 reason=.*tensor $path: .*(a damaged base).* then=\"each part rebuilt on its own\"" hub.log
	# Part 0's delta did not apply: its rank sent it whole; part 1's rebuilt as sent.
	run -0 grep -c "event=abort upload=.* model=policy reason=\"the delta did not apply\"" hub.log
	assert_output 1
	run -0 grep -c "event=rebuild upload=.* model=policy base=1 " hub.log
	assert_output 1
	run -0 grep -c "event=commit model=policy version=2 .* union=copy " hub.log
	same_as_whole 2
}

@test "a rank takes the hashes of its part remembered from the push of it as its base's: a delta that does not rebuild is made again from the base read whole, then sent whole" {
	steps_in_parts
	start_hub
	two_ranks 1 1
	assert_success
	# Each rank's part, pushed whole, was remembered as its own (not its group's).
	run -0 find "$XDG_CACHE_HOME/wsync/pushed" -type f
	assert_equal "${#lines[@]}" 2
	damage_part0
	two_ranks 2 2 "$TMP/p1.0.safetensors" "$TMP/p1.1.safetensors"
	assert_success
	assert_output "2"
	# Rank 0's delta did not apply from the remembered hashes, nor from its base read whole.
	run -0 grep -c "event=abort upload=.* model=policy reason=\"the delta did not apply\"" hub.log
	assert_output 2
	run -0 grep -c "event=commit model=policy version=2 .* union=copy " hub.log
	same_as_whole 2
}

@test "a part waiting as a delta that no longer rebuilds once its pusher's bound ran out fails its group, naming it" {
	need_test_hooks WSYNC_TEST_PUSH_GATE
	steps_in_parts
	start_hub
	two_ranks 1 1
	assert_success
	damage_part0
	# Rank 1 begins and holds before sending a byte, with the longer bound.
	WSYNC_TEST_PUSH_GATE="$TMP/gate" wsync-push -q -t 30 --part 1/2 --group 2 \
		--base "$TMP/p1.1.safetensors" -m policy "$TMP/p2.1.safetensors" \
		>"$TMP/r1.out" 2>"$TMP/r1.err" &
	local pid=$!
	PIDS+=("$pid")
	wait_log "event=begin upload=3 "
	run -75 wsync-push -q -t 1 --part 0/2 --group 2 --base "$TMP/p1.0.safetensors" \
		-m policy "$TMP/p2.0.safetensors"
	assert_output "wsync-push: model policy group 2: part 1 of 2 missing after 1.0 s; nothing committed"
	touch "$TMP/gate"
	local rc=0
	wait "$pid" || rc=$?
	assert_equal "$rc" 65
	assert_regex "$(cat "$TMP/r1.err")" "^wsync-push: model policy group 2: part 0 did not rebuild once its pusher had gone \\(.*tensor $path: .*\\); nothing committed$"
	[ ! -e "$STORE/policy/2.wsync" ]
}
