#!/usr/bin/env bats
# delta-push.bats - pushes sent as deltas (wsync-push --base, wsync(7) DELTAS):
# a pusher that holds the version the hub has sends only what changed; the hub
# rebuilds the version from its own copy, verified, and anything amiss (a
# retired base, another content, a damaged base) sends the version whole.

load test_helper
load hub_helper

# steps N: $TMP/sV.wsync for V in 1..N, unnumbered files of model "policy",
# 8 MiB of bf16 each, 1% changed a step (over the 4 MiB a push sends in one
# message, which always goes whole). A push sends them as they are.
steps() {
	"$PY" "$FIXTURES/mkstep.py" chain bf16 0.01 8388608 "$1" "$TMP/step"
	for ((v = 1; v <= $1; v++)); do
		wsync-convert -m policy "$TMP/step$v.wsync" "$TMP/s$v.wsync"
	done
}

DELTA=$WSYNC_BIN/../bench/delta

# same_but_number A B: the two .wsync files are equal past their version number.
same_but_number() {
	cmp <(tail -c +64 "$1") <(tail -c +64 "$2")
}

# A hub on tcp, so that pushes go over the socket; version 1 pushed and pulled into p1.wsync.
hub_with_v1() {
	local port
	port=$(free_port)
	start_hub -e "tcp://127.0.0.1:$port" "$@"
	export WSYNC_ENDPOINT="tcp://127.0.0.1:$port"
	run -0 wsync-push -q --transfer socket -m policy s1.wsync
	run -0 wsync-pull -q --transfer socket -m policy -o p1.wsync
}

@test "a push with --base sends the delta, and the hub's version equals the one pushed whole" {
	steps 2
	hub_with_v1
	run -0 --separate-stderr wsync-push --transfer socket --base p1.wsync -m policy s2.wsync
	assert_output "2"
	assert_equal "$stderr" ""
	bytes=$(sed -n 's/.*event=begin upload=[0-9]* models=policy .*deltas=policy@1:\([0-9]*\)$/\1/p' hub.log)
	size=$(stat -c %s s2.wsync)
	[ -n "$bytes" ] && ((bytes * 40 < size)) || fail "delta of ${bytes:-?} bytes for $size"
	run -0 wsync-push -q --transfer socket -m policy s2.wsync
	assert_output "3"
	same_but_number "$STORE/policy/2.wsync" "$STORE/policy/3.wsync"
	run -0 wsync-inspect --verify "$STORE/policy/2.wsync"
}

@test "a push with --base of a safetensors file sends the delta of the version it lays out" {
	steps 2
	hub_with_v1
	wsync-convert s2.wsync s2.safetensors
	run -0 --separate-stderr wsync-push --transfer socket --base p1.wsync -m policy s2.safetensors
	assert_output "2"
	run -0 grep -c 'deltas=policy@1:' hub.log
	run -0 wsync-push -q --transfer socket -m policy s2.safetensors
	same_but_number "$STORE/policy/2.wsync" "$STORE/policy/3.wsync"
}

@test "a base the hub retired sends the version whole, saying why" {
	steps 3
	hub_with_v1 --keep 1
	run -0 wsync-push -q --transfer socket -m policy s2.wsync
	run -0 --separate-stderr wsync-push --transfer socket --base p1.wsync -m policy s3.wsync
	assert_output "3"
	assert_equal "$stderr" 'wsync-push: policy version 3 sent whole: p1.wsync: model "policy" has no version 1 any more (retired: the hub keeps the last 1)'
	same_but_number "$STORE/policy/3.wsync" s3.wsync
}

@test "a delta whose base the commit retired (--keep 1) is applied and not kept: nobody can ask for it" {
	steps 2
	hub_with_v1 --keep 1
	run -0 wsync-push -q --transfer socket --base p1.wsync -m policy s2.wsync
	assert_output "2"
	run -0 grep -c 'models=policy .*deltas=policy@1:' hub.log
	run -1 grep "event=delta " hub.log
	run -1 compgen -G "$STORE/.deltas/policy/*"
}

@test "a base of another content than the hub's version sends the version whole" {
	steps 2
	hub_with_v1
	# Version 1 of policy at another hub: another content under the same number.
	wsync-serve --store "$TMP/other.store" -e "ipc://$TMP/other" 2>other.log &
	PIDS+=("$!")
	WSYNC_ENDPOINT="ipc://$TMP/other" wait_until hub_answers
	WSYNC_ENDPOINT="ipc://$TMP/other" wsync-push -q -m policy s2.wsync
	WSYNC_ENDPOINT="ipc://$TMP/other" wsync-pull -q -m policy -o q1.wsync
	theirs=$(wsync-inspect --json q1.wsync | jq -r .content_id)
	ours=$(wsync-inspect --json p1.wsync | jq -r .content_id)
	run -0 --separate-stderr wsync-push --transfer socket --base q1.wsync -m policy s2.wsync
	assert_output "2"
	assert_equal "$stderr" "wsync-push: policy version 2 sent whole: q1.wsync: model policy version 1 is content $ours here, not $theirs: send the version whole"
	run -1 grep -c 'deltas=' hub.log
}

@test "a flipped byte in the pusher's base is caught by the hub: the version goes whole, never damaged" {
	steps 2
	hub_with_v1
	# In the data of a tensor: the header, and so the content id, stays as it was.
	size=$(stat -c %s p1.wsync)
	printf '\x55' | dd of=p1.wsync bs=1 seek=$((size / 2)) conv=notrunc status=none
	run -0 --separate-stderr wsync-push --transfer socket --base p1.wsync -m policy s2.wsync
	assert_output "2"
	assert_regex "$stderr" '^wsync-push: policy version 2 sent whole: p1.wsync: model policy: delta from version 1: .*tensor'
	run -0 grep -c 'event=abort upload=2 model=policy reason="the delta did not apply"' hub.log
	run -0 wsync-inspect --verify "$STORE/policy/2.wsync"
	same_but_number "$STORE/policy/2.wsync" s2.wsync
	run -1 compgen -G "$STORE/.uploads/*"
}

@test "a --base read from a pipe (a process substitution) is read once and sends the delta" {
	steps 2
	hub_with_v1
	wsync-convert s1.wsync s1.safetensors
	wsync-convert s2.wsync s2.safetensors
	run -0 --separate-stderr wsync-push --transfer socket --base <(cat s1.safetensors) \
		-m policy s2.safetensors
	assert_output "2"
	assert_equal "$stderr" ""
	run -0 grep -c 'models=policy .*deltas=policy@1:' hub.log
	run -0 wsync-push -q --transfer socket -m policy s2.safetensors
	same_but_number "$STORE/policy/2.wsync" "$STORE/policy/3.wsync"
}

@test "a push with --base of the safetensors file pushed before sends the delta, matched by content" {
	steps 2
	hub_with_v1
	wsync-convert s1.wsync s1.safetensors
	wsync-convert s2.wsync s2.safetensors
	run -0 --separate-stderr wsync-push --transfer socket --base s1.safetensors -m policy s2.safetensors
	assert_output "2"
	assert_equal "$stderr" ""
	run -0 grep -c 'models=policy .*deltas=policy@1:' hub.log
	run -0 wsync-push -q --transfer socket -m policy s2.safetensors
	same_but_number "$STORE/policy/2.wsync" "$STORE/policy/3.wsync"
}

@test "a push remembers the hashes of the safetensors file it pushed: the next push naming it --base sends the delta, equal to the version pushed whole" {
	steps 3
	for v in 2 3; do wsync-convert s$v.wsync s$v.safetensors; done
	hub_with_v1
	run -0 wsync-push -q --transfer socket -m policy s2.safetensors
	# One entry, private to the user: it says which files were pushed.
	run -0 find "$XDG_CACHE_HOME/wsync/pushed" -type f
	assert_equal "${#lines[@]}" 1
	run -0 stat -c %a "$XDG_CACHE_HOME/wsync/pushed"
	assert_output 700
	run -0 --separate-stderr wsync-push --transfer socket --base s2.safetensors -m policy s3.safetensors
	assert_output "3"
	assert_equal "$stderr" ""
	run -0 grep -c 'models=policy .*deltas=policy@2:' hub.log
	run -0 wsync-push -q --transfer socket -m policy s3.safetensors
	same_but_number "$STORE/policy/3.wsync" "$STORE/policy/4.wsync"
	run -0 find "$XDG_CACHE_HOME/wsync/pushed" -type f
	assert_equal "${#lines[@]}" 2
}

@test "a base changed since its push without its times moving (a write through a tmpfs mapping) is read again: the version is never damaged" {
	steps 3
	# On tmpfs, where a store through a shared mapping leaves the times as they were.
	shm=$(mktemp -d /dev/shm/wsync-test.XXXXXX)
	CLEANUP+=("$shm")
	for v in 2 3; do wsync-convert s$v.wsync "$shm/s$v.safetensors"; done
	hub_with_v1
	run -0 wsync-push -q --transfer socket --base s1.wsync -m policy "$shm/s2.safetensors"
	assert_output "2"
	before=$(stat -c '%s %y %z' "$shm/s2.safetensors")
	size=$(stat -c %s "$shm/s2.safetensors")
	"$PY" -c 'import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 0)
m[int(sys.argv[2])] ^= 0x55
m.close()' "$shm/s2.safetensors" $((size / 2))
	assert_equal "$(stat -c '%s %y %z' "$shm/s2.safetensors")" "$before"
	content=$(wsync-convert "$shm/s2.safetensors" - | wsync-inspect --json - | jq -r .content_id)
	# The remembered hashes name version 2, whose rebuild fails its hashes; read
	# again, the base is a content the hub never held: the version goes whole.
	run -0 --separate-stderr wsync-push --transfer socket --base "$shm/s2.safetensors" -m policy \
		"$shm/s3.safetensors"
	assert_output "3"
	assert_equal "$stderr" "wsync-push: policy version 3 sent whole: $shm/s2.safetensors: model policy holds no version of content $content (never pushed here, or retired)"
	run -0 grep -c 'event=abort upload=3 model=policy reason="the delta did not apply"' hub.log
	run -0 wsync-inspect --verify "$STORE/policy/3.wsync"
	same_but_number "$STORE/policy/3.wsync" s3.wsync
}

@test "a push with --base of the checkpoint directory pushed before sends the delta" {
	steps 2
	hub_with_v1
	mkdir ck1 ck2
	wsync-convert s1.wsync ck1/model.safetensors
	wsync-convert s2.wsync ck2/model.safetensors
	printf '{"model_type": "llama"}\n' | tee ck1/config.json >ck2/config.json
	run -0 wsync-push -q --transfer socket -m policy ck1
	assert_output "2"
	run -0 --separate-stderr wsync-push --transfer socket --base ck1 -m policy ck2
	assert_output "3"
	assert_equal "$stderr" ""
	run -0 grep -c 'models=policy .*deltas=policy@2:' hub.log
	run -0 wsync-push -q --transfer socket -m policy ck2
	same_but_number "$STORE/policy/3.wsync" "$STORE/policy/4.wsync"
}

@test "a base of a content the hub never held sends the version whole, naming it" {
	steps 3
	hub_with_v1
	wsync-convert s2.wsync s2.safetensors
	content=$(wsync-inspect --json s2.wsync | jq -r .content_id)
	run -0 --separate-stderr wsync-push --transfer socket --base s2.safetensors -m policy s3.wsync
	assert_output "2"
	assert_equal "$stderr" "wsync-push: policy version 2 sent whole: s2.safetensors: model policy holds no version of content $content (never pushed here, or retired)"
	run -1 grep -c 'deltas=' hub.log
	same_but_number "$STORE/policy/2.wsync" s3.wsync
}

@test "--base takes a file or directory with one model" {
	steps 2
	hub_with_v1
	run -64 wsync-push --base p1.wsync -m policy=s1.wsync -m critic=s2.wsync
	assert_line -n 0 "wsync-push: --base names what was pushed before of the one model pushed"
	run -66 wsync-push --transfer socket --base nope.wsync -m policy s2.wsync
	assert_output --partial "nope.wsync"
	run -64 wsync-push --transfer socket --base - -m policy s2.wsync
	assert_line -n 0 "wsync-push: --base -: the base is a file or directory, not stdin"
}

@test "wsync-push --batch sends each version as a delta from the one it pushed before; --no-delta whole" {
	steps 3
	hub_with_v1
	run -0 wsync-push --batch --transfer socket <<-EOF
	-m policy $TMP/s2.wsync
	-m policy $TMP/s3.wsync
	EOF
	assert_output "ok policy 2
ok policy 3"
	# The first has no version of this coprocess to start from: whole.
	run -0 grep -c 'models=policy .*transfer=socket$' hub.log
	assert_output 2
	run -0 grep -c 'models=policy .*deltas=policy@2:' hub.log
	same_but_number "$STORE/policy/3.wsync" s3.wsync
	run -0 wsync-push --batch --no-delta --transfer socket <<-EOF
	-m policy $TMP/s2.wsync
	-m policy $TMP/s3.wsync
	EOF
	run -0 grep -c 'deltas=' hub.log
	assert_output 1
	run -64 wsync-push --no-delta -m policy s2.wsync
	assert_line -n 0 "wsync-push: --no-delta goes with --batch: a single push sends a delta only with --base"
}

# batch_over: --batch pushes safetensors files, each delta made over the
# version kept (in $TMPDIR), through a new layout too; every version is the file pushed.
batch_over() {
	steps 4
	hub_with_v1 --keep 8
	for v in 2 3 4; do
		wsync-convert "$TMP/s$v.wsync" "$TMP/s$v.safetensors"
	done
	# Another layout: version 3's tensors but the last.
	"$PY" "$FIXTURES/droplast.py" s3.safetensors small.safetensors
	# 2 goes whole (nothing kept yet); 3 and 6 are made over the version before,
	# 4 and 5 (a layout the version before does not have) from the two files.
	run -0 wsync-push --batch --transfer socket <<-EOF
	-m policy $TMP/s2.safetensors
	-m policy $TMP/s3.safetensors
	-m policy $TMP/small.safetensors
	-m policy $TMP/s4.safetensors
	-m policy $TMP/s2.safetensors
	EOF
	assert_output "ok policy 2
ok policy 3
ok policy 4
ok policy 5
ok policy 6"
	for v in 3 4 5 6; do
		run -0 grep -c "models=policy .*deltas=policy@$((v - 1)):" hub.log
		assert_output 1
	done
	# Every delta applied as it came: none was refused and sent again whole.
	run -1 grep -E "event=abort|fetched whole|sent whole" hub.log
	for f in 2:s2 3:s3 4:small 5:s4 6:s2; do
		wsync-convert -m policy "$TMP/${f#*:}.safetensors" "$TMP/c.wsync"
		same_but_number "$STORE/policy/${f%%:*}.wsync" "$TMP/c.wsync"
	done
}

@test "--batch of safetensors files makes each delta over the version it keeps: every version is the file pushed, through a new layout too" {
	batch_over
}

@test "--batch with its scratch on tmpfs makes each delta over the version it keeps mapped: the same versions" {
	[ "$(stat -f -c %T /dev/shm)" = tmpfs ] || skip "needs a tmpfs at /dev/shm"
	TMPDIR=$(mktemp -d /dev/shm/wsync-test.XXXXXX)
	CLEANUP+=("$TMPDIR")
	export TMPDIR
	batch_over
	# A coprocess of its own: after its second push (made over its copy of the
	# first) and its third, that one copy is what it holds mapped, once.
	coproc BATCH { exec wsync-push --batch --transfer socket 2>"$TMP/batch.err"; }
	local pid=$BATCH_PID v answer
	PIDS+=("$pid")
	for v in 2 3 4; do
		echo "-m policy $TMP/s$v.safetensors" >&"${BATCH[1]}"
		IFS= read -r -t 60 answer <&"${BATCH[0]}" || fail "no answer for s$v"
		[[ $answer == "ok policy "* ]] || fail "s$v: $answer"
		[ "$v" = 2 ] || { run -0 grep -c "$TMPDIR/#" "/proc/$pid/maps"; assert_output 1; }
	done
	exec {BATCH[1]}>&-
	wait "$pid"
	run -0 grep -c "deltas=policy@" hub.log
	assert_output 6
}

@test "a delta pushed with --base is the one two watchers on that base receive: the hub diffs nothing" {
	steps 2
	hub_with_v1
	wsync-convert s1.wsync s1.safetensors
	wsync-convert s2.wsync s2.safetensors
	for w in a b; do
		start_watcher "$w" --transfer socket
		wait_until watcher_at "$w" 1
	done
	run -0 wsync-push -q --transfer socket --base s1.safetensors -m policy s2.safetensors
	assert_output "2"
	pushed=$(sed -n 's/.*deltas=policy@1:\([0-9]*\)$/\1/p' hub.log)
	for w in a b; do
		wait_until watcher_at "$w" 2
		cmp "$w.wsync" "$STORE/policy/2.wsync"
	done
	run -0 grep -c "event=delta model=policy base=1 version=2 state=ready made=0 pushed=1 bytes=" hub.log
	assert_output 1
	run -0 grep -c "event=ack worker=[ab] model=policy version=2 transfer=delta " hub.log
	assert_output 2
	run -1 grep "made=1" hub.log
	# The same encoded tensors: only the skeleton's version stamp and the numbers differ.
	served=$(stat -c %s "$STORE/.deltas/policy/1-2.delta")
	((served - pushed < 32 && pushed - served < 32)) || fail "pushed $pushed bytes, served $served"
}

@test "the hub makes a delta itself, once, only from a base no push brought one from" {
	steps 3
	hub_with_v1
	run -0 wsync-push -q --transfer socket --base p1.wsync -m policy s2.wsync
	run -0 wsync-push -q --transfer socket -m policy s3.wsync
	for w in a b; do
		run -0 wsync-pull -q --transfer socket --base p1.wsync -m policy -o "$w.wsync"
		assert_output "3"
		cmp "$w.wsync" "$STORE/policy/3.wsync"
	done
	run -0 grep -c "event=delta model=policy base=1 version=3 state=ready made=1 " hub.log
	assert_output 1
	run -0 grep -c "made=0" hub.log
	assert_output 1
}

@test "a signed push with --base of a safetensors file reaches a verifying pull through the delta" {
	steps 2
	hub_with_v1
	wsync-keygen --sign key >/dev/null
	wsync-convert s1.wsync s1.safetensors
	wsync-convert s2.wsync s2.safetensors
	run -0 wsync-push -q --transfer socket --sign-key key.key -m policy s1.safetensors
	assert_output "2"
	run -0 wsync-pull -q --transfer socket --verify-key key.pub -m policy -o p.wsync
	run -0 --separate-stderr wsync-push --transfer socket --sign-key key.key --base s1.safetensors -m policy s2.safetensors
	assert_output "3"
	assert_equal "$stderr" ""
	run -0 grep -c "event=delta model=policy base=2 version=3 state=ready made=0 " hub.log
	run -0 wsync-pull -q --transfer socket --verify-key key.pub -m policy -o p.wsync
	assert_output "3"
	cmp p.wsync "$STORE/policy/3.wsync"
	run -1 grep "made=1" hub.log
}

@test "a pushed delta is rebuilt into a retired version's file when the hub recycles, and equals the version pushed whole" {
	steps 4
	hub_with_v1 --keep 2 --recycle 1
	run -0 wsync-push -q --transfer socket -m policy s2.wsync
	run -0 wsync-pull -q --transfer socket -m policy -o p2.wsync
	# Version 3 retires version 1: its file is the spare version 4 is rebuilt into.
	run -0 wsync-push -q --transfer socket -m policy s3.wsync
	run -0 wsync-pull -q --transfer socket -m policy -o p3.wsync
	run -0 wsync-push -q --transfer socket --base p3.wsync -m policy s4.wsync
	assert_output "4"
	run -0 grep "event=rebuild " hub.log
	assert_output --regexp "event=rebuild upload=[0-9]+ model=policy base=3 size=$(stat -c %s "$STORE/policy/4.wsync") recycled=1 mapped=(none|version)\$"
	run -0 wsync-push -q --transfer socket -m policy s4.wsync
	assert_output "5"
	same_but_number "$STORE/policy/4.wsync" "$STORE/policy/5.wsync"
	run -0 wsync-inspect --verify "$STORE/policy/4.wsync"
}

@test "on tmpfs a recycling hub rebuilds pushed deltas from and into files it keeps mapped, never one a pusher on its host wrote" {
	[ "$(stat -f -c %T /dev/shm)" = tmpfs ] || skip "needs a tmpfs at /dev/shm"
	steps 8
	STORE=$(mktemp -d /dev/shm/wsync-test.XXXXXX)
	CLEANUP+=("$STORE")
	hub_with_v1 --keep 2 --recycle 1
	# Versions 2-5 as deltas: 2 and 3 into new files; 4 into version 1's
	# file, mapped as it is written; 5 from 4's mapping into version 2's file.
	for v in 2 3 4 5; do
		run -0 wsync-push -q --transfer socket --base "p$((v - 1)).wsync" -m policy "s$v.wsync"
		assert_output "$v"
		run -0 wsync-pull -q --transfer socket -m policy -o "p$v.wsync"
		run -0 wsync-inspect --verify "p$v.wsync"
		run -0 wsync-inspect diff "s$v.wsync" "p$v.wsync"
	done
	# 6 and 7 handed over on the hub's host: 7 is written by the pusher into
	# 4's file, which the hub lets go of; 8, from 7, reads it without a mapping.
	run -0 wsync-push -q -m policy s6.wsync
	run -0 wsync-push -q -m policy s7.wsync
	run -0 grep -c "event=begin .*recycled=1 transfer=copy" hub.log
	assert_output 2
	run -0 wsync-pull -q --transfer socket -m policy -o p7.wsync
	run -0 wsync-push -q --transfer socket --base p7.wsync -m policy s8.wsync
	assert_output "8"
	run -0 sh -c "grep -o 'event=rebuild .*' hub.log | sed 's/ upload=[0-9]* / /; s/ size=[0-9]* / /'"
	assert_output "event=rebuild model=policy base=1 recycled=0 mapped=none
event=rebuild model=policy base=2 recycled=0 mapped=none
event=rebuild model=policy base=3 recycled=1 mapped=version
event=rebuild model=policy base=4 recycled=1 mapped=base,version
event=rebuild model=policy base=7 recycled=1 mapped=version"
	run -0 wsync-inspect --verify "$STORE/policy/8.wsync"
	run -0 wsync-inspect diff s8.wsync "$STORE/policy/8.wsync"
}

# raw_delta_push SIZE COMMIT...: begin, chunk and the COMMIT requests (JSON
# lines), over one connection (hubclient.py session), as upload 2 (the hub's
# second: hub_with_v1 made the first), of the delta from
# p1.wsync to s2.wsync (d12.wdelta), its begin saying the version has SIZE
# bytes; each reply a line in $output.
raw_delta_push() {
	local content dsize size=$1
	shift
	"$DELTA" p1.wsync s2.wsync d12.wdelta >/dev/null
	content=$("$PY" -c 'import sys; print(int(sys.argv[1], 16))' "$(wsync-inspect --json p1.wsync | jq -r .content_id)")
	dsize=$(stat -c %s d12.wdelta)
	run "$PY" "$FIXTURES/hubclient.py" "$WSYNC_ENDPOINT" session < <(
		echo '{"op":"begin","files":[{"model":"policy","size":'"$size"',"delta":'"$dsize"',"base":1,"base_content":'"$content"'}]}'
		echo '{"op":"chunk","upload":2,"file":0,"off":0} d12.wdelta'
		printf '%s\n' "$@")
}

@test "a pushed delta that rebuilds another size than its begin said is refused with 65, the head unchanged" {
	steps 2
	hub_with_v1
	size=$(stat -c %s s2.wsync)
	raw_delta_push $((size + 4096)) '{"op":"commit","upload":2}'
	assert_equal "$status" 65
	assert_line --index 2 "{\"code\":65,\"error\":\"model policy: delta from version 1: it rebuilds a version of $size bytes, where its begin said $((size + 4096))\",\"id\":3,\"ok\":false}"
	[ ! -e "$STORE/policy/2.wsync" ]
	run -0 wsync-push -q --transfer socket -m policy s2.wsync
	assert_output "2"
}

@test "a pushed delta's commit refused after its rebuild commits when sent again" {
	steps 2
	hub_with_v1
	raw_delta_push "$(stat -c %s s2.wsync)" '{"op":"commit","upload":2,"trust":true}' '{"op":"commit","upload":2}'
	assert_line --index 2 '{"code":64,"error":"upload 2 came through the socket: the hub verifies it (trust is for files written in its store)","id":3,"ok":false}'
	run -0 jq -c '[.ok, .versions[0].version]' <<<"${lines[3]}"
	assert_output '[true,2]'
	run -0 wsync-push -q --transfer socket -m policy s2.wsync
	assert_output "3"
	same_but_number "$STORE/policy/2.wsync" "$STORE/policy/3.wsync"
}
