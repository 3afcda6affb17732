#!/usr/bin/env bats
# Slots: a trainer writes a version straight into the hub's store through
# wsync-push --batch (--slot, --commit, --abort), and a hub run with --recycle
# makes slots of retired versions' files that nobody links or leases
# (wsync(7) LEASES). Real hub, watchers, coprocesses and files.

load test_helper
load hub_helper

# Starts wsync-push --batch as the test's coprocess (BATCH_PID is wsync-push's).
start_batch() {
	coproc BATCH { exec wsync-push --batch 2>"$TMP/batch.err"; }
	PIDS+=("$BATCH_PID")
}

# Ends the coprocess as a trainer does: end of its input.
stop_batch() {
	local pid=$BATCH_PID
	exec {BATCH[1]}>&-
	wait "$pid" 2>/dev/null || true
}

# ask REQUEST...: sends one request line; ANSWER is the answer line (10 s bound).
ask() {
	echo "$*" >&"${BATCH[1]}"
	ANSWER=
	IFS= read -r -t 10 ANSWER <&"${BATCH[0]}" || fail "no answer to: $*"
}

# push_slot FILE [COMMIT OPTIONS...]: writes FILE into a new slot of "policy"
# in place and commits it; SLOT_PATH is the slot, ANSWER the commit's answer.
push_slot() {
	local file=$1
	shift
	ask --slot -m "policy=$(stat -c %s "$file")"
	[[ $ANSWER =~ ^slot\ ([0-9]+)\ (/.*)$ ]] || fail "slot answer: $ANSWER"
	SLOT_PATH=${BASH_REMATCH[2]}
	dd if="$file" of="$SLOT_PATH" conv=notrunc status=none
	ask --commit "${BASH_REMATCH[1]}" "$@"
}

# A recycling hub keeping 1 version, watcher w1 linking, and version 1 pushed
# through a slot by the test's coprocess.
recycling_with_watcher() {
	start_hub --keep 1 --recycle 4
	start_watcher w1 --transfer link
	wait_until hub_has_worker w1
	start_batch
	push_slot v1.wsync -w all -t 10
	assert_equal "$ANSWER" "ok policy 1"
}

@test "a slot is a file of the asked size in the store; written in place and committed, it is the version" {
	make_versions 1
	start_hub
	start_watcher w1 --transfer link
	wait_until hub_has_worker w1
	start_batch
	ask --slot -m "policy=$(stat -c %s v1.wsync)"
	assert_regex "$ANSWER" "^slot 1 $STORE/\.uploads/upload\.[A-Za-z0-9]{6}$"
	local path=${ANSWER##* }
	[ "$(stat -c %s "$path")" = "$(stat -c %s v1.wsync)" ]
	dd if=v1.wsync of="$path" conv=notrunc status=none
	ask --commit 1 -w all -t 10
	assert_equal "$ANSWER" "ok policy 1"
	run -0 wsync-inspect --verify w1.wsync
	assert_equal "$(content_of w1.wsync)" "$(content_of v1.wsync)"
	assert_equal "$(wsync-inspect --json w1.wsync | jq .version)" 1
	# The slot became the version: the watcher's output is that very file.
	assert_equal "$(stat -c %i w1.wsync)" "$(stat -c %i "$STORE/policy/1.wsync")"
	[ ! -e "$path" ]
}

@test "a slot with a wrong byte is refused at commit, naming the tensor, and nothing is announced" {
	make_versions 1
	start_hub
	start_watcher w1 --transfer link
	wait_until hub_has_worker w1
	cp v1.wsync bad.wsync
	printf '\x7f' | dd of=bad.wsync bs=1 seek=$(($(stat -c %s bad.wsync) - 3)) conv=notrunc status=none
	start_batch
	push_slot bad.wsync -t 10
	assert_regex "$ANSWER" '^error 65 model "policy": tensor actor\.0\.[a-z]+: .*hash'
	run -1 grep -c "event=commit" "$TMP/hub.log"
	assert_output 0
	[ "$(last_version w1)" = 0 ]
	# An error ends the request, not the coprocess: the good bytes commit as version 1.
	push_slot v1.wsync -w all -t 10
	assert_equal "$ANSWER" "ok policy 1"
}

@test "--trust-hashes commits what the writer declares without reading the data" {
	make_versions 1
	start_hub
	cp v1.wsync bad.wsync
	printf '\x7f' | dd of=bad.wsync bs=1 seek=$(($(stat -c %s bad.wsync) - 3)) conv=notrunc status=none
	start_batch
	push_slot bad.wsync --trust-hashes -t 10
	assert_equal "$ANSWER" "ok policy 1"
	run -0 grep "event=commit model=policy version=1 " "$TMP/hub.log"
	assert_output --partial " verified=no"
	# Which is why it is for writers that hash what they wrote: the bytes are bad.
	run -65 wsync-inspect --verify "$STORE/policy/1.wsync"
}

@test "slot requests: usage errors are answered and the coprocess goes on" {
	make_versions 1
	start_hub
	run -0 wsync-push --batch <<-'EOF'
	--slot
	--slot -m policy
	--slot -m policy=0
	--slot -m policy=10 -w all
	--slot -m policy=10 v1.wsync
	--commit x
	--commit 3 -m policy
	--abort 3 -w all
	--slot --commit 1
	--trust-hashes v1.wsync -m policy
	--next-slot --slot -m policy=10
	--commit 7
	--abort 7
	EOF
	assert_output - <<-'EOF'
	error 64 --slot wants -m MODEL=SIZE for each model
	error 64 --slot wants -m MODEL=SIZE (bytes, 1 or more), not -m policy
	error 64 --slot wants -m MODEL=SIZE (bytes, 1 or more), not -m policy=0
	error 64 --slot takes no wait: give -w with --commit
	error 64 a slot request takes no file
	error 64 --commit wants the upload number a slot answer gave, not "x"
	error 64 --commit takes only the upload, -t, -w, --trust-hashes and --next-slot
	error 64 --abort takes only the upload
	error 64 one of --slot, --commit and --abort a request
	error 64 --trust-hashes goes with --commit
	error 64 --next-slot goes with --commit
	error 66 no open slot 7 (committed, aborted or never given)
	error 66 no open slot 7 (committed, aborted or never given)
	EOF
	run -64 wsync-push --slot -m policy=10
	assert_output "wsync-push: --slot is a request of wsync-push --batch
Try 'wsync-push --help'."
}

@test "an aborted slot leaves nothing: its file is gone and the next commit is version 1" {
	make_versions 1
	start_hub
	start_batch
	ask --slot -m "policy=$(stat -c %s v1.wsync)"
	local path=${ANSWER##* }
	dd if=v1.wsync of="$path" conv=notrunc status=none
	ask --abort 1
	assert_equal "$ANSWER" "ok"
	[ ! -e "$path" ]
	run -1 grep -c "event=commit" "$TMP/hub.log"
	assert_output 0
	push_slot v1.wsync -t 10
	assert_equal "$ANSWER" "ok policy 1"
}

@test "slots of several models commit together" {
	make_versions 2
	# A version is pushed under its own model's name: value's file says value.
	wsync-convert -m value v2.safetensors value2.wsync
	start_hub
	start_batch
	ask --slot -m "policy=$(stat -c %s v1.wsync)" -m "value=$(stat -c %s value2.wsync)"
	[[ $ANSWER =~ ^slot\ 1\ (/[^ ]+)\ (/[^ ]+)$ ]] || fail "slot answer: $ANSWER"
	dd if=v1.wsync of="${BASH_REMATCH[1]}" conv=notrunc status=none
	dd if=value2.wsync of="${BASH_REMATCH[2]}" conv=notrunc status=none
	ask --commit 1 -t 10
	assert_equal "$ANSWER" "ok policy 1 value 1"
	assert_equal "$(content_of "$STORE/value/1.wsync")" "$(content_of value2.wsync)"
}

@test "without --recycle no slot reuses a file; with it, retired files nobody holds are written again" {
	make_versions 4
	start_hub --keep 1
	start_batch
	for v in 1 2 3 4; do
		push_slot v$v.wsync -t 10
		assert_equal "$ANSWER" "ok policy $v"
	done
	run -0 grep -o "recycled=[0-9]*" "$TMP/hub.log"
	assert_output $'recycled=0\nrecycled=0\nrecycled=0\nrecycled=0'
	stop_batch
	stop_hub
	: >"$TMP/hub.log"
	start_hub --keep 1 --recycle 2
	start_batch
	for v in 1 2 3 4; do
		push_slot v$v.wsync -t 10
		assert_equal "$ANSWER" "ok policy $((v + 4))"
		wsync-pull -m policy -o - | cmp - "$STORE/policy/$((v + 4)).wsync"
		assert_equal "$(content_of "$STORE/policy/$((v + 4)).wsync")" "$(content_of v$v.wsync)"
	done
	run -0 grep -o "recycled=[0-9]*" "$TMP/hub.log"
	assert_output $'recycled=0\nrecycled=1\nrecycled=1\nrecycled=1'
	run -0 grep -c "event=store .* recycle=2" "$TMP/hub.log"
}

@test "a linked output keeps its version: a file someone links is never recycled" {
	make_versions 6
	start_hub --keep 1 --recycle 4
	start_batch
	push_slot v1.wsync -t 10
	wsync-pull --transfer link -m policy -o kept.wsync
	for v in 2 3 4 5 6; do
		push_slot v$v.wsync -t 10
		assert_equal "$ANSWER" "ok policy $v"
	done
	run -0 wsync-inspect --verify kept.wsync
	assert_equal "$(wsync-inspect --json kept.wsync | jq .version)" 1
	assert_equal "$(content_of kept.wsync)" "$(content_of v1.wsync)"
	# The others were recycled meanwhile.
	run -0 grep -c "recycled=1" "$TMP/hub.log"
	assert_output 3
}

@test "no tearing: a leased, mapped version stays byte for byte while 50 newer ones go through recycled slots" {
	make_versions 52
	recycling_with_watcher
	# A reader with the lease on version 1, through the watcher's output.
	start_reader leased "$TMP/w1.wsync"
	local leased_pid=$READER_PID leased_fd=$READER_FD
	push_slot v2.wsync -w all -t 10
	# A reader of version 2 without the lease: the control.
	start_reader plain "$TMP/w1.wsync" --no-lease
	for v in $(seq 3 52); do
		push_slot v$v.wsync -w all -t 10
		assert_equal "$ANSWER" "ok policy $v"
		assert_equal "$(check_reader leased)" "same"
	done
	# Slots 1 and 2 had no spare yet, and 3 only version 1's, leased: the 49
	# after them were all written into recycled files...
	run -0 grep -c "recycled=1" "$TMP/hub.log"
	assert_output 49
	# ...the unleased reader's among them, rewritten under it.
	assert_equal "$(check_reader plain)" "changed"
	# The leased file is still version 1, every hash checked.
	run -0 wsync-inspect --verify "/proc/$leased_pid/fd/$leased_fd"
	assert_equal "$(wsync-inspect --json "/proc/$leased_pid/fd/$leased_fd" | jq .version)" 1
	assert_equal "$(content_of "/proc/$leased_pid/fd/$leased_fd")" "$(content_of v1.wsync)"
	run -0 wsync-inspect --verify w1.wsync
	assert_equal "$(content_of w1.wsync)" "$(content_of v52.wsync)"
}

@test "a trainer killed while writing a slot commits nothing, and no reader sees its bytes" {
	make_versions 2
	recycling_with_watcher
	# The trainer: its own coprocess, a slot, half the bytes, then SIGKILL.
	bash -c '
		coproc P { wsync-push --batch; }
		echo "--slot -m policy=$(stat -c %s v2.wsync)" >&"${P[1]}"
		read -r -t 10 answer <&"${P[0]}"
		echo "${answer##* }" >slot.path
		head -c $(($(stat -c %s v2.wsync) / 2)) v2.wsync | dd of="${answer##* }" conv=notrunc status=none
		kill -KILL $$' || true
	local path
	path=$(cat slot.path)
	# Its coprocess saw the end of its input and gave the slot back.
	wait_until grep -q "event=abort upload=2" "$TMP/hub.log"
	wait_until test ! -e "$path"
	run -0 grep -c "event=commit" "$TMP/hub.log"
	assert_output 1
	run -0 wsync-inspect --verify w1.wsync
	assert_equal "$(wsync-inspect --json w1.wsync | jq .version)" 1
	run -0 wsync-inspect --verify "$STORE/policy/1.wsync"
	[ ! -e "$STORE/policy/2.wsync" ]
	# The next push is version 2, whole.
	push_slot v2.wsync -w all -t 10
	assert_equal "$ANSWER" "ok policy 2"
	wait_until watcher_at w1 2
	assert_equal "$(content_of w1.wsync)" "$(content_of v2.wsync)"
}

@test "a coprocess killed with a slot open leaves it invisible until the hub drops it" {
	make_versions 1
	start_hub --keep 1 --recycle 4
	start_batch
	ask --slot -m "policy=$(stat -c %s v1.wsync)"
	local path=${ANSWER##* }
	dd if=v1.wsync of="$path" conv=notrunc status=none
	kill -KILL "$BATCH_PID"
	wait "$BATCH_PID" 2>/dev/null || true
	run -66 wsync-pull -m policy -o out.wsync
	[ ! -d "$STORE/policy" ] || [ -z "$(ls "$STORE/policy")" ]
	# Still the hub's until it expires (60 s): not a version, and never renamed into one.
	[ -e "$path" ]
	run -1 grep -c "event=commit" "$TMP/hub.log"
	assert_output 0
}

@test "wsync-watch --keep 1 leases the version before the current one: an unleased reader of it is safe for one more update" {
	make_versions 4
	start_hub --keep 1 --recycle 4
	start_watcher w2 --transfer link --keep 1
	wait_until hub_has_worker w2
	start_batch
	push_slot v1.wsync -w all -t 10
	assert_equal "$ANSWER" "ok policy 1"
	start_reader plain "$TMP/w2.wsync" --no-lease
	push_slot v2.wsync -w all -t 10
	assert_equal "$ANSWER" "ok policy 2"
	push_slot v3.wsync -w all -t 10
	assert_equal "$ANSWER" "ok policy 3"
	# Version 1's file was free for slot 3 but for w2's lease: a new file was made.
	assert_equal "$(check_reader plain)" "same"
	push_slot v4.wsync -w all -t 10
	assert_equal "$ANSWER" "ok policy 4"
	# Two updates on, w2 let go of it, and it was written again.
	assert_equal "$(check_reader plain)" "changed"
}

@test "without --keep, the same unleased reader loses its version one update earlier" {
	make_versions 3
	recycling_with_watcher
	start_reader plain "$TMP/w1.wsync" --no-lease
	push_slot v2.wsync -w all -t 10
	push_slot v3.wsync -w all -t 10
	assert_equal "$ANSWER" "ok policy 3"
	assert_equal "$(check_reader plain)" "changed"
}

@test "a recycled slot committed before it is written is refused: the retired version it was never comes back" {
	make_versions 2
	start_hub --keep 1 --recycle 4
	start_batch
	push_slot v1.wsync -t 10
	push_slot v2.wsync -t 10
	assert_equal "$ANSWER" "ok policy 2"
	# Version 1's file, retired, is free: the next slot, for another model, is it.
	ask --slot -m "value=$(stat -c %s v1.wsync)"
	[[ $ANSWER =~ ^slot\ 3\ / ]] || fail "slot answer: $ANSWER"
	run -0 grep -c "recycled=1" "$TMP/hub.log"
	ask --commit 3 --trust-hashes -t 10
	assert_regex "$ANSWER" '^error 65 model "value": '
	run -1 grep "event=commit model=value" "$TMP/hub.log"
}

@test "a slot is its client's: another can neither commit nor abort it, and none sends it bytes" {
	start_hub
	run -0 "$PY" - "$WSYNC_ENDPOINT" <<-'PYEOF'
	import sys
	import msgpack, zmq
	ctx = zmq.Context.instance()
	def dealer():
	    s = ctx.socket(zmq.DEALER)
	    s.setsockopt(zmq.LINGER, 0)
	    s.connect(sys.argv[1])
	    return s
	def call(s, req, data=None):
	    s.send_multipart([b"", msgpack.packb(req)] + ([data] if data is not None else []))
	    assert s.poll(5000), req
	    r = msgpack.unpackb(s.recv_multipart()[1], raw=False)
	    return "ok" if r.get("ok") else f"{r['code']} {r['error']}"
	mine, other = dealer(), dealer()
	files = [{"model": "policy", "size": 100}]
	print(call(mine, {"op": "begin", "id": 1, "files": files, "local": True}))
	print(call(other, {"op": "commit", "id": 1, "upload": 1, "trust": True}))
	print(call(other, {"op": "abort", "id": 2, "upload": 1}))
	print(call(other, {"op": "chunk", "id": 3, "upload": 1, "file": 0, "off": 0}, b"x" * 100))
	print(call(mine, {"op": "chunk", "id": 2, "upload": 1, "file": 0, "off": 0}, b"x" * 100))
	print(call(mine, {"op": "put", "id": 3, "files": files, "local": True, "trust": True},
	           b"x" * 100))
	print(call(mine, {"op": "abort", "id": 4, "upload": 1}))
	PYEOF
	assert_output - <<-'EOF'
	ok
	77 upload 1 is another client's
	77 upload 1 is another client's
	77 upload 1 is another client's
	64 upload 1 is written in place in the store, not sent
	64 upload 2 is written in place in the store, not sent
	ok
	EOF
	run -1 grep "event=commit" "$TMP/hub.log"
}

@test "--commit --next-slot asks for the next slot at the commit: a --slot of the same size gets it, another size or the end of input gives it back" {
	make_versions 3
	start_hub --keep 1 --recycle 4
	start_watcher w1 --transfer link
	wait_until hub_has_worker w1
	start_batch
	push_slot v1.wsync --trust-hashes --next-slot -w all -t 10
	assert_equal "$ANSWER" "ok policy 1"
	# Upload 2 was begun at that commit, before any request asked for it...
	run -0 grep -c "event=begin upload=2 " "$TMP/hub.log"
	# ...and is the next slot of that size: no other begin.
	push_slot v2.wsync --trust-hashes --next-slot -w all -t 10
	assert_equal "$ANSWER" "ok policy 2"
	run -0 grep -c "event=commit model=policy version=2 .* upload=2 " "$TMP/hub.log"
	run -0 grep -c "event=begin" "$TMP/hub.log"
	assert_output 3
	wait_until watcher_at w1 2
	assert_equal "$(content_of w1.wsync)" "$(content_of v2.wsync)"
	# A slot of another size: the one asked for ahead (3) is given back.
	ask --slot -m policy=10
	assert_regex "$ANSWER" '^slot 4 /'
	run -0 grep -c "event=abort upload=3$" "$TMP/hub.log"
	ask --abort 4
	assert_equal "$ANSWER" "ok"
	push_slot v3.wsync --trust-hashes --next-slot -w all -t 10
	assert_equal "$ANSWER" "ok policy 3"
	stop_batch
	wait_until grep -q "event=abort upload=6$" "$TMP/hub.log"
	run -0 grep -c "event=begin" "$TMP/hub.log"
	assert_output 6
	assert_equal "$(content_of w1.wsync)" "$(content_of v3.wsync)"
}

@test "a slot's commit that waits in the same request: 75 with the missing workers when they do not apply it, and the version stays committed" {
	make_versions 2
	start_hub
	start_watcher w1
	wait_until hub_has_worker w1
	start_batch
	kill -STOP "${WPID[w1]}"
	push_slot v1.wsync --next-slot -w all -t 1
	kill -CONT "${WPID[w1]}"
	assert_regex "$ANSWER" '^error 75 policy version 1: 1 of 1 workers have not applied it after (0\.[0-9]|1\.0) s; w1: has no version, last seen [0-9.]+ s ago$'
	# One request: the hub waited for the commit itself (no wait request after it).
	run -0 grep -c "event=wait model=policy version=1 mode=all workers=1" "$TMP/hub.log"
	run -0 grep -o "event=[a-z]*" "$TMP/hub.log"
	assert_output --partial $'event=commit\nevent=wait\nevent=begin\nevent=timeout'
	# Committed all the same, and the slot is closed.
	assert_equal "$(content_of "$STORE/policy/1.wsync")" "$(content_of v1.wsync)"
	ask --abort 1
	assert_equal "$ANSWER" "error 66 no open slot 1 (committed, aborted or never given)"
	wait_until watcher_at w1 1
	# The slot asked for ahead serves the next version.
	push_slot v2.wsync -w all -t 10
	assert_equal "$ANSWER" "ok policy 2"
	run -0 grep -c "event=commit model=policy version=2 .* upload=2$" "$TMP/hub.log"
}

@test "--next-slot keeps a slot's -W workers for the slot it asks for, however long the next request" {
	make_versions 2
	start_hub
	start_watcher w1
	wait_until hub_has_worker w1
	start_batch
	ask --slot -m "policy=$(stat -c %s v1.wsync)" -W w1,w2
	[[ $ANSWER =~ ^slot\ 1\ (/.*)$ ]] || fail "slot answer: $ANSWER"
	dd if=v1.wsync of="${BASH_REMATCH[1]}" conv=notrunc status=none
	# A commit line longer than the slot's: its buffer is not where the names are.
	ask --commit 1 --next-slot -w w1 -t "10.$(printf '0%.0s' {1..200})"
	assert_equal "$ANSWER" "ok policy 1"
	run -0 grep -c "event=commit model=policy version=1 .* upload=1 workers=w1,w2$" "$TMP/hub.log"
	# The slot asked for ahead is for w1,w2 too: the same request gets it.
	ask --slot -m "policy=$(stat -c %s v2.wsync)" -W w1,w2
	assert_regex "$ANSWER" '^slot 2 /'
	run -0 grep -c "event=begin" "$TMP/hub.log"
	assert_output 2
	run -1 grep "event=abort" "$TMP/hub.log"
}

@test "a slot asked for ahead of a hub that restarted since is replaced by a new one, not an error" {
	make_versions 2
	start_hub
	start_batch
	push_slot v1.wsync --next-slot -t 10
	assert_equal "$ANSWER" "ok policy 1"
	wait_until grep -q "event=begin upload=2 " "$TMP/hub.log"
	stop_hub
	start_hub
	# The new hub emptied .uploads: the kept answer names a file gone.
	push_slot v2.wsync -t 10
	assert_equal "$ANSWER" "ok policy 2"
	assert_equal "$(content_of "$STORE/policy/2.wsync")" "$(content_of v2.wsync)"
}
