#!/usr/bin/env bats
# wsync-watch on real processes: initial weights, following, hooks, acks,
# restarts, failures.

load test_helper
load hub_helper

@test "4 watchers follow 20 pushes and end on the last pushed bytes, in order" {
	make_versions 20
	start_hub
	for w in w1 w2 w3 w4; do start_watcher "$w"; done
	for ((v = 1; v <= 20; v++)); do
		run -0 wsync-push -m policy "v$v.wsync"
		assert_output "$v"
	done
	for w in w1 w2 w3 w4; do
		wait_until watcher_at "$w" 20
		run -0 versions_increase "$w"
		assert_equal "$(content_of "$w.wsync")" "$(content_of v20.wsync)"
		run -0 wsync-inspect --verify "$w.wsync"
		assert_equal "$(wsync-inspect --json "$w.wsync" | jq .version)" 20
	done
}

@test "a watcher started after 5 pushes gets version 5 at once" {
	make_versions 5
	start_hub
	for ((v = 1; v <= 5; v++)); do wsync-push -m policy "v$v.wsync" >/dev/null; done
	run -0 --separate-stderr wsync-watch --once --id late -m policy -o late.wsync
	assert_output "policy 5 late.wsync"
	assert_equal "$(content_of late.wsync)" "$(content_of v5.wsync)"
}

@test "a watcher started before the hub waits, then gets the first push" {
	make_versions 1
	start_watcher early
	wait_until grep -q "waiting for a hub" early.err
	start_hub
	wsync-push -m policy v1.wsync
	wait_until watcher_at early 1
	assert_equal "$(cat early.out)" "policy 1 $TMP/early.wsync"
}

@test "a multi-model push is never seen half-applied by a watcher of both" {
	"$PY" "$FIXTURES/mkmodel.py" a.safetensors w=float32:2:1,2
	start_hub
	mkdir out
	# The hook checks that both files carry the same pair number when either is applied.
	wsync-watch --id both -m actor,critic -o out \
		-x 'a=$(wsync-inspect --json out/actor.wsync | jq -r .meta.pair)
		    c=$(wsync-inspect --json out/critic.wsync | jq -r .meta.pair)
		    [ "$a" = "$c" ] || { echo "half-applied: actor $a critic $c" >&2; exit 1; }' \
		>both.out 2>both.err &
	PIDS+=($!)
	for ((i = 1; i <= 10; i++)); do
		"$PY" "$FIXTURES/mkmodel.py" "p$i.safetensors" w=float32:2:$i,$i
		"$PY" - "$i" <<'PYEOF'
import json, struct, sys
i = sys.argv[1]
for name in ("actor", "critic"):
    raw = open(f"p{i}.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n]); h["__metadata__"] = {"pair": i}
    t = json.dumps(h).encode(); t += b" " * (-len(t) % 8)
    open(f"{name}{i}.safetensors", "wb").write(struct.pack("<Q", len(t)) + t + raw[8 + n:])
PYEOF
		wsync-push -m "actor=actor$i.safetensors" -m "critic=critic$i.safetensors" >/dev/null
	done
	wait_until bash -c 'grep -q "^critic 10 " both.out'
	run -1 grep -q "half-applied" both.err
	run -0 awk '{print $1}' both.out
	# Every update of the pair printed both lines together.
	[ "$(grep -c '^actor ' both.out)" = "$(grep -c '^critic ' both.out)" ]
}

@test "a failing --exec hook is reported by the hub and fails --wait" {
	make_versions 1
	start_hub
	start_watcher hooked -x 'exit 3'
	WAIT_S=10 wait_until bash -c '[ "$(wsync-inspect --hub --json | jq ".workers | length")" = 1 ]'
	run -65 --separate-stderr timeout 20 wsync-push --wait all --timeout 30 -m policy v1.wsync
	assert_equal "${stderr_lines[0]}" "wsync-push: policy version 1: 1 of 1 workers could not apply it (a failed version is never retried)"
	assert_regex "${stderr_lines[1]}" '^  hooked: has no version, last seen [0-9.]+ s ago, last failure: hook exited with status 3$'
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq -r '.workers[0].failure.reason' <<<"$output")" "hook exited with status 3"
	run -0 wsync-inspect --hub
	assert_line --regexp '^hooked +policy +0 +1 .* gone|alive .*version 1: hook exited with status 3$'
	[ ! -s hooked.out ]
}

@test "watchers survive a hub restart on the same store and versions keep increasing" {
	make_versions 6
	start_hub
	start_watcher w1
	for v in 1 2 3; do wsync-push -m policy "v$v.wsync" >/dev/null; done
	wait_until watcher_at w1 3
	stop_hub
	start_hub
	run -0 wsync-push -m policy v4.wsync
	assert_output 4
	wait_until watcher_at w1 4
	kill -KILL "$HUB_PID"
	wait "$HUB_PID" 2>/dev/null || true
	start_hub
	run -0 wsync-push -m policy v5.wsync
	assert_output 5
	wait_until watcher_at w1 5
	run -0 versions_increase w1
	assert_equal "$(content_of w1.wsync)" "$(content_of v5.wsync)"
}

@test "a watcher follows a hub restarted on a new store from its first version" {
	make_versions 4
	start_hub
	start_watcher w1
	for v in 1 2 3; do wsync-push -m policy "v$v.wsync" >/dev/null; done
	wait_until watcher_at w1 3
	stop_hub
	STORE="$TMP/store2"
	start_hub
	run -0 wsync-push --wait all --timeout 10 -m policy v4.wsync
	assert_output 1
	wait_until bash -c '[ "$(wc -l <w1.out)" -ge 4 ]'
	assert_equal "$(tail -n 1 w1.out)" "policy 1 $TMP/w1.wsync"
	assert_equal "$(content_of w1.wsync)" "$(content_of v4.wsync)"
	run -0 grep -c "the hub keeps another store" w1.err
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq -c '.workers[] | select(.worker == "w1") | .applied' <<<"$output")" '{"policy":1}'
}

@test "--wait all waits for a worker whose hook runs longer than the liveness window" {
	make_versions 2
	start_hub
	start_watcher slow -x 'if [ "$WSYNC_VERSION" = 2 ]; then sleep 7; fi'
	wsync-push -m policy v1.wsync
	wait_until watcher_at slow 1
	run -0 wsync-push --wait all --timeout 20 -m policy v2.wsync
	assert_output 2
	assert_equal "$(last_version slow)" 2
}

@test "a watcher that cannot write its output reports the failure and keeps running" {
	make_versions 1
	start_hub
	mkdir missing
	wsync-watch --id nowhere -m policy -o "$TMP/missing/p.wsync" >nowhere.out 2>nowhere.err &
	PIDS+=($!)
	wait_until hub_has_worker nowhere
	rmdir missing
	run -65 --separate-stderr timeout 20 wsync-push --wait all --timeout 30 -m policy v1.wsync
	assert_regex "${stderr_lines[1]}" "^  nowhere: has no version, last seen [0-9.]+ s ago, last failure: $TMP/missing/p.wsync: cannot create a temporary file: No such file or directory$"
	kill -0 "${PIDS[-1]}"
	run -0 grep -c "event=hello role=watch" hub.log
	assert_output 1
}

@test "SIGTERM stops a watcher while its hook runs, and the hook with it" {
	make_versions 1
	start_hub
	start_watcher hooked -x 'touch "$WSYNC_PATH.started"; exec sleep 30'
	wsync-push -m policy v1.wsync
	wait_until test -e hooked.wsync.started
	kill -TERM "${WPID[hooked]}"
	WAIT_S=5 wait_until bash -c "! kill -0 ${WPID[hooked]} 2>/dev/null"
	run -1 pgrep -f "sleep 30" -P "${WPID[hooked]}"
}

@test "--exec-timeout stops a hook that hangs and reports it failed" {
	make_versions 1
	start_hub
	start_watcher hung -x 'exec sleep 60' --exec-timeout 1
	wait_until hub_has_worker hung
	run -65 --separate-stderr timeout 20 wsync-push --wait all --timeout 30 -m policy v1.wsync
	assert_regex "${stderr_lines[1]}" '^  hung: has no version, last seen [0-9.]+ s ago, last failure: hook timed out after 1.0 s$'
	kill -0 "${WPID[hung]}"
}

@test "wsync-watch --log-format json writes its messages as JSON objects" {
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync
	run -0 --separate-stderr wsync-watch --log-format json --once -m policy -o w.wsync
	assert_output "policy 1 w.wsync"
	run -0 jq -r '"\(.program) \(.msg)"' <<<"$stderr"
	assert_output --regexp "^wsync-watch connected to hub [^ ]+ at $WSYNC_ENDPOINT, announcements from $WSYNC_ENDPOINT.pub\$"
}

@test "wsync-watch --quiet prints no message on stderr, only its update lines" {
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync
	run -0 --separate-stderr wsync-watch -q --once -m policy -o w.wsync
	assert_output "policy 1 w.wsync"
	assert_equal "$stderr" ""
}

@test "a watcher on the hub's host links each version; inspect shows how each came" {
	make_versions 2
	start_hub
	start_watcher near
	start_watcher far --transfer socket --no-delta
	wsync-push -m policy v1.wsync >/dev/null
	wsync-push -m policy v2.wsync >/dev/null
	wait_until watcher_at near 2
	wait_until watcher_at far 2
	assert_equal "$(stat -c %i near.wsync)" "$(stat -c %i "$STORE/policy/2.wsync")"
	[ "$(stat -c %i far.wsync)" != "$(stat -c %i "$STORE/policy/2.wsync")" ]
	cmp far.wsync near.wsync
	# The link to version 1 went when version 2 was applied.
	assert_equal "$(stat -c %h "$STORE/policy/1.wsync")" 1
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq -r '.workers[] | "\(.worker) \(.transfer)"' <<<"$output")" \
	    "$(printf 'far socket\nnear link')"
	run -0 wsync-inspect --hub
	assert_line --regexp '^near +policy +2 +0 .* alive  link +- +- +-$'
	run -0 grep -c "event=ack worker=near model=policy version=2 transfer=link" hub.log
}

@test "a reader holding an old version keeps its bytes after 10 newer ones retire it" {
	make_versions 11
	start_hub
	start_watcher w1
	wsync-push -m policy v1.wsync >/dev/null
	wait_until watcher_at w1 1
	wsync-pull -m policy --transfer socket -o saved1.wsync >/dev/null
	# The reader maps the watcher's file (a link to version 1) and keeps it.
	"$PY" - <<'PYEOF' &
import mmap, os, time
f = open("w1.wsync", "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
open("reader.ready", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists("reader.go") and time.monotonic() < deadline:
    time.sleep(0.02)
with open("dump.wsync", "wb") as out:
    out.write(m[:])
PYEOF
	local reader=$!
	PIDS+=("$reader")
	wait_until test -e reader.ready
	for ((v = 2; v <= 11; v++)); do wsync-push -m policy "v$v.wsync" >/dev/null; done
	wait_until watcher_at w1 11
	[ ! -e "$STORE/policy/1.wsync" ]
	touch reader.go
	wait "$reader"
	cmp dump.wsync saved1.wsync
	run -0 wsync-inspect --verify dump.wsync
	assert_equal "$(wsync-inspect --json dump.wsync | jq .version)" 1
}

@test "a byte flipped in the store's file is caught by a linking watcher, not applied" {
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync >/dev/null
	local off
	off=$(wsync-inspect --json "$STORE/policy/1.wsync" | jq '.tree[0].offset + 3')
	printf '\377' | dd of="$STORE/policy/1.wsync" bs=1 seek="$off" conv=notrunc status=none
	start_watcher w1
	wait_until grep -q "not applied" w1.err
	run -0 cat w1.err
	assert_line "wsync-watch: policy version 1 not applied: policy: tensor actor.0.bias: data does not match its hash"
	[ ! -e w1.wsync ]
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq -r '.workers[0].failure.version' <<<"$output")" 1
}

# start_ack_watcher ID [options...]: a watcher with --ack stdin whose stdin is the
# FIFO $TMP/ID.in, held open on descriptor 8 (bats has 3) so that answers can be written
# to it one at a time.
start_ack_watcher() {
	local id=$1
	shift
	mkfifo "$TMP/$id.in"
	exec 8<>"$TMP/$id.in"
	# The redirection on the command itself: a background job's stdin is /dev/null.
	wsync-watch --id "$id" -m policy -o "$TMP/$id.wsync" --ack stdin "$@" \
		<"$TMP/$id.in" >"$TMP/$id.out" 2>"$TMP/$id.err" &
	WPID[$id]=$!
	PIDS+=("$!")
}

# The number of lines a watcher printed.
lines_of() {
	[ "$(wc -l <"$TMP/$1.out")" -ge "$2" ]
}

@test "--ack stdin announces each update and acknowledges it only after the reader's ok" {
	make_versions 2
	start_hub
	start_ack_watcher r1
	wait_until hub_has_worker r1
	wsync-push -m policy v1.wsync
	wait_until lines_of r1 1
	assert_equal "$(cat r1.out)" "policy 1 $TMP/r1.wsync"
	run -0 sh -c 'wsync-inspect --hub --json | jq -c ".workers[0].applied"'
	assert_output '{}'
	echo ok >&8
	wait_until grep -q "event=ack worker=r1 model=policy version=1" hub.log
	wsync-push -m policy -w r1, -t 10 v2.wsync >push.out 2>push.err &
	local push=$!
	PIDS+=("$push")
	wait_until lines_of r1 2
	assert_equal "$(cat r1.out)" "policy 1 $TMP/r1.wsync
policy 2 $TMP/r1.wsync"
	run -0 sh -c 'wsync-inspect --hub --json | jq -c ".workers[0].applied"'
	assert_output '{"policy":1}'
	echo ok >&8
	local status=0
	wait "$push" || status=$?
	assert_equal "$status" 0
	assert_equal "$(cat push.out)" 2
}

@test "--ack stdin reports the reader's fail REASON to the hub and the waiting pusher" {
	make_versions 1
	start_hub
	start_ack_watcher r1
	wait_until hub_has_worker r1
	wsync-push -m policy v1.wsync &
	PIDS+=("$!")
	wait_until lines_of r1 1
	echo 'fail load_state_dict: missing key actor.0.bias' >&8
	wait_until grep -q "event=fail" hub.log
	run -65 --separate-stderr timeout 20 wsync-push --wait-for 1 -m policy -w r1, -t 30
	assert_equal "${stderr_lines[0]}" "wsync-push: policy version 1: 1 of 1 workers could not apply it (a failed version is never retried)"
	assert_equal "${stderr_lines[1]%%, last seen*}" "  r1: has no version"
	assert_equal "${stderr_lines[1]#*s ago, }" "last failure: load_state_dict: missing key actor.0.bias"
	run -0 grep -c 'event=fail worker=r1 model=policy version=1 reason="load_state_dict: missing key actor.0.bias"' hub.log
	assert_output 1
	run -0 cat r1.err
	assert_line "wsync-watch: policy version 1 not applied: load_state_dict: missing key actor.0.bias"
}

@test "--ack stdin reports an update the reader never answers, and skips its late answer" {
	make_versions 2
	start_hub
	start_ack_watcher r1 --ack-timeout 0.5
	wait_until hub_has_worker r1
	wsync-push -m policy v1.wsync
	wait_until grep -q "event=fail" hub.log
	run -0 sh -c 'wsync-inspect --hub --json | jq -c ".workers[0] | [.applied, .failure, .failures]"'
	assert_output '[{},{"model":"policy","version":1,"reason":"the reader did not answer within 0.5 s"},{"policy":1}]'
	# The late ok is v1's; v2 needs its own.
	echo ok >&8
	wsync-push -m policy v2.wsync
	wait_until lines_of r1 2
	echo ok >&8
	wait_until grep -q "event=ack worker=r1 model=policy version=2" hub.log
	run -1 grep -q "event=ack worker=r1 model=policy version=1" hub.log
}

@test "--ack stdin takes a line that is neither ok nor fail as a failure, naming it" {
	make_versions 1
	start_hub
	start_ack_watcher r1
	wait_until hub_has_worker r1
	wsync-push -m policy v1.wsync
	wait_until lines_of r1 1
	echo 'done' >&8
	wait_until grep -q "event=fail" hub.log
	run -0 grep -c 'reason="the reader answered \\"done\\", not ok or fail REASON"' hub.log
	assert_output 1
}

@test "--ack stdin with a reader that closes stdin reports the update failed and exits 0" {
	make_versions 1
	start_hub
	wsync-watch --id r1 -m policy -o r1.wsync --ack stdin </dev/null 2>r1.err &
	local pid=$!
	PIDS+=("$pid")
	wait_until hub_has_worker r1
	wsync-push -m policy v1.wsync
	local status=0
	wait "$pid" || status=$?
	assert_equal "$status" 0
	run -0 grep -c 'event=fail worker=r1 model=policy version=1 reason="the reader closed stdin"' hub.log
	assert_output 1
}

@test "--ack stdin and -x together, or --ack with another mode, are usage errors" {
	run -64 --separate-stderr wsync-watch --ack stdin -x true -m policy -o p.wsync
	assert_equal "${stderr_lines[0]}" "wsync-watch: --ack stdin or -x CMD: one says when an update is applied"
	run -64 --separate-stderr wsync-watch --ack hook -m policy -o p.wsync
	assert_equal "${stderr_lines[0]}" 'wsync-watch: --ack wants stdin, not "hook"'
}

@test "no tearing with --recycle: a leased, mapped output stays whole while 50 newer ones arrive" {
	make_versions 52
	start_hub
	# Whole versions: a delta is rebuilt into a new file, never into a spare.
	start_watcher w1 --transfer socket --recycle --no-delta
	wsync-push -m policy v1.safetensors
	wait_until watcher_at w1 1
	# A reader with the lease on version 1, through the watcher's output.
	start_reader leased "$TMP/w1.wsync"
	local leased_pid=$READER_PID leased_fd=$READER_FD
	wsync-push -m policy v2.safetensors
	wait_until watcher_at w1 2
	# A reader of version 2 without the lease: the control.
	start_reader plain "$TMP/w1.wsync" --no-lease
	for v in $(seq 3 52); do
		run -0 wsync-push --wait all -t 10 -m policy "v$v.safetensors"
		assert_output "$v"
		assert_equal "$(check_reader leased)" "same"
	done
	# The unleased reader's file was recycled: rewritten under it.
	assert_equal "$(check_reader plain)" "changed"
	# The leased file is still version 1, every hash checked.
	run -0 wsync-inspect --verify "/proc/$leased_pid/fd/$leased_fd"
	assert_equal "$(wsync-inspect --json "/proc/$leased_pid/fd/$leased_fd" | jq .version)" 1
	run -0 wsync-inspect --verify "$TMP/w1.wsync"
	assert_equal "$(wsync-inspect --json "$TMP/w1.wsync" | jq .version)" 52
}

@test "without --recycle a watcher writes every version into a new file: a reader's file never changes" {
	make_versions 6
	start_hub
	start_watcher w1 --transfer socket
	wsync-push -m policy v1.safetensors
	wait_until watcher_at w1 1
	start_reader plain "$TMP/w1.wsync" --no-lease
	for v in $(seq 2 6); do
		run -0 wsync-push --wait all -t 10 -m policy "v$v.safetensors"
		assert_equal "$(check_reader plain)" "same"
	done
	assert_equal "$(wsync-inspect --json "$TMP/w1.wsync" | jq .version)" 6
}

# The watcher $1 has a descriptor open on the file whose inode is $2.
holds_inode() {
	local f
	for f in /proc/"${WPID[$1]}"/fd/*; do
		[ "$(stat -L -c %i "$f" 2>/dev/null)" = "$2" ] && return 0
	done
	return 1
}

@test "a watcher killed while it writes a version into a recycled file leaves its output whole" {
	make_big 48
	local port pub
	port=$(free_port)
	export WSYNC_ENDPOINT="tcp://127.0.0.2:$port"
	start_hub
	pub=$(sed -n 's/.*event=listen .* pub=tcp:\/\/[^ ]*:\([0-9]*\) .*/\1/p' "$TMP/hub.log")
	# Every byte to and from the watcher 100 ms late: a version takes a while to arrive.
	"$PY" "$FIXTURES/delayproxy.py" 100 127.0.0.2 "$port" "$pub" >"$TMP/proxy.out" 2>&1 &
	PIDS+=("$!")
	wait_until grep -q ready "$TMP/proxy.out"
	start_watcher w1 -e "tcp://127.0.0.1:$port" --transfer socket --recycle --no-delta
	wsync-push -m policy big.safetensors
	WAIT_S=30 wait_until watcher_at w1 1
	local first
	first=$(stat -c %i "$TMP/w1.wsync")
	wsync-push -m policy big.safetensors
	WAIT_S=30 wait_until watcher_at w1 2
	wsync-push -m policy big.safetensors
	# Version 3 goes into version 1's file, which version 2 replaced: killed meanwhile.
	WAIT_S=30 wait_until holds_inode w1 "$first"
	kill -KILL "${WPID[w1]}"
	wait "${WPID[w1]}" 2>/dev/null || true
	assert_equal "$(last_version w1)" 2
	run -0 wsync-inspect --verify "$TMP/w1.wsync"
	assert_equal "$(wsync-inspect --json "$TMP/w1.wsync" | jq .version)" 2
	# Started again, it removes what was left and takes version 3, whole.
	start_watcher w1 -e "tcp://127.0.0.1:$port" --transfer socket --recycle --no-delta
	WAIT_S=30 wait_until watcher_at w1 3
	run -0 wsync-inspect --verify "$TMP/w1.wsync"
	assert_equal "$(wsync-inspect --json "$TMP/w1.wsync" | jq .version)" 3
	run -0 find "$TMP" -maxdepth 1 -name 'w1.wsync.tmp.*'
	assert_output ""
}


@test "an output in a directory that does not exist is refused at start with 66" {
	run -66 timeout 20 wsync-watch --id typo -m policy -o nodir/p.wsync
	assert_output "wsync-watch: nodir: no such directory for the output nodir/p.wsync"
}

@test "--once -t ends with 75 within its bound when the hub has no version of the model" {
	start_hub
	run -75 timeout 20 wsync-watch -q --once -t 1 --id early -m policy -o p.wsync
	assert_output "wsync-watch: policy: no version within 1.0 s (the hub at $WSYNC_ENDPOINT has none yet)"
}

@test "--once -t ends with 69 within its bound when no hub answers" {
	run -69 timeout 20 wsync-watch -q --once -t 0.5 --id alone -m policy -o p.wsync
	assert_output "wsync-watch: cannot reach $WSYNC_ENDPOINT after 0.5 s (is wsync-serve running?)"
}

@test "--once ends with 1 when the hook fails the version, which is reported" {
	make_versions 1
	start_hub
	run -0 wsync-push -m policy v1.wsync
	run -1 --separate-stderr timeout 20 wsync-watch -q --once -t 30 --id hooked -x 'exit 3' \
		-m policy -o p.wsync
	assert_equal "$stderr" "wsync-watch: policy version 1: hook exited with status 3
wsync-watch: policy version 1 not applied: hook exited with status 3"
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq -r '.workers[0].failure.reason' <<<"$output")" "hook exited with status 3"
}

@test "--once ends with 65 when the copy from the hub is corrupt" {
	need_test_hooks WSYNC_TEST_FLIP_GET
	make_versions 1
	WSYNC_TEST_FLIP_GET=1 start_hub
	run -0 wsync-push -m policy v1.wsync
	run -65 timeout 20 wsync-watch -q --once -t 30 --transfer socket --id w -m policy -o p.wsync
	assert_output "wsync-watch: policy version 1 not applied: policy: tensor actor.0.weight: data does not match its hash"
	[ ! -e p.wsync ]
}

@test "--once ends with 74 when the output's disk is full" {
	[ "$(id -u)" = 0 ] && command -v unshare >/dev/null ||
	    skip "needs root and unshare to mount a small tmpfs in a mount namespace"
	make_big 1
	start_hub
	run -0 wsync-push -m policy big.safetensors
	mkdir small
	run -74 timeout 20 unshare -m sh -c 'mount -t tmpfs -o size=64k none small && exec "$@"' _ \
		wsync-watch -q --once -t 30 --id full -m policy -o small/p.wsync
	assert_output --regexp "^wsync-watch: policy version 1 not applied: .*No space left on device\$"
}

@test "a second watcher with the id of one still connected is warned about, both named, and logged" {
	start_hub
	start_watcher twin
	wait_until hub_has_worker twin
	wsync-watch --id twin -m policy -o second.wsync >second.out 2>second.err &
	PIDS+=($!)
	local second=$!
	wait_until grep -q "another watcher" second.err
	run -0 grep "another watcher" second.err
	assert_output "wsync-watch: another watcher with id twin is connected to this hub (host $(hostname) pid ${WPID[twin]}, this one pid $second): the hub counts the two as one worker; give each its own id"
	run -0 grep -c "event=twin worker=twin host=$(hostname) pid=$second other_host=$(hostname) other_pid=${WPID[twin]}$" hub.log
	assert_output 1
}

@test "a watcher restarted with the same id after the old one exited is not a twin" {
	start_hub
	start_watcher again
	wait_until hub_has_worker again
	kill -KILL "${WPID[again]}"
	wait "${WPID[again]}" || true
	start_watcher again
	wait_until grep -q "connected to hub" again.err
	run -1 grep -q "another watcher" again.err
	run -1 grep -q "event=twin" hub.log
}

@test "a watcher of a model the hub lacks but has one close to names it, and still waits" {
	make_versions 1
	start_hub
	wsync-push -m policy v1.wsync >/dev/null
	start_watcher typo -m polcy
	wait_until grep -q "no version yet" typo.err
	run -0 grep "no version yet" typo.err
	assert_output "wsync-watch: no version yet of polcy (the hub has policy): waiting for one"
	kill -0 "${WPID[typo]}"
	wsync-push -m polcy v1.wsync >/dev/null
	wait_until watcher_at typo 1
}
