#!/usr/bin/env bats
# wsync-push on real processes: commits, --wait, --workers, bad input.

load test_helper
load hub_helper

@test "--wait all returns once every watcher applied the version" {
	make_versions 1
	start_hub
	for w in a b c; do start_watcher "$w"; done
	WAIT_S=10 wait_until bash -c '[ "$(wsync-inspect --hub --json | jq ".workers | map(select(.alive)) | length")" = 3 ]'
	run -0 wsync-push --wait all --timeout 10 -m policy v1.wsync
	assert_output "1"
	for w in a b c; do
		assert_equal "$(content_of "$w.wsync")" "$(content_of v1.wsync)"
		run -0 grep -q "^policy 1 " "$w.out"
	done
}

@test "--wait all --timeout 2 with a stopped watcher exits 75 and names it" {
	make_versions 2
	start_hub
	start_watcher runs
	start_watcher stuck
	wsync-push -m policy v1.wsync
	wait_until watcher_at runs 1
	wait_until watcher_at stuck 1
	kill -STOP "${WPID[stuck]}"
	run -75 --separate-stderr wsync-push --wait all --timeout 2 -m policy v2.wsync
	assert_output "2"
	# The wait has what is left of the 2 s once the push is done.
	assert_regex "${stderr_lines[0]}" '^wsync-push: policy version 2: 1 of 2 workers have not applied it after (2\.0|1\.[0-9]) s$'
	assert_regex "${stderr_lines[1]}" '^  stuck: has version 1, last seen [0-9.]+ s ago$'
	assert_equal "${#stderr_lines[@]}" 2
}

@test "--wait all ends with 65 as soon as every watcher applied or failed, each failure named" {
	make_versions 1
	start_hub
	start_watcher good
	start_watcher bad -x 'echo no room for it >&2; exit 3'
	wait_until hub_has_worker good
	wait_until hub_has_worker bad
	run -65 --separate-stderr timeout 20 wsync-push --wait all --timeout 30 -m policy v1.wsync
	assert_output "1"
	assert_equal "${stderr_lines[0]}" "wsync-push: policy version 1: 1 of 2 workers could not apply it (a failed version is never retried)"
	assert_regex "${stderr_lines[1]}" '^  bad: has no version, last seen [0-9.]+ s ago, last failure: hook exited with status 3$'
	assert_equal "${#stderr_lines[@]}" 2
	wait_until watcher_at good 1
}

@test "--wait with an id the hub never heard from warns at the start and waits for it all the same" {
	make_versions 1
	start_hub
	run -75 --separate-stderr wsync-push --wait everyone --timeout 1 -m policy v1.wsync
	assert_output "1"
	assert_equal "${stderr_lines[0]}" "wsync-push: --wait: the hub has never heard from everyone; waiting for it all the same"
	# The wait has what is left of the 1 s once the push is done.
	assert_regex "${stderr_lines[1]}" '^wsync-push: policy version 1: 1 of 1 workers have not applied it after (1\.0|0\.[0-9]) s$'
	assert_equal "${stderr_lines[2]}" "  everyone: has no version, never seen"
}

@test "--wait for an id named before its watcher starts is satisfied once it applies" {
	make_versions 1
	start_hub
	wsync-push --wait late --timeout 30 -m policy v1.wsync >push.out 2>push.err &
	PIDS+=($!)
	local push=$!
	wait_until grep -q "never heard from late" push.err
	start_watcher late
	wait "$push"
	assert_equal "$(cat push.out)" "1"
	assert_equal "$(cat push.err)" "wsync-push: --wait: the hub has never heard from late; waiting for it all the same"
}

@test "a bad weight file is refused with 65 before anything is sent" {
	start_hub
	"$PY" "$FIXTURES/mkhostile.py" unknown-dtype bad.wsync
	run -65 wsync-push -m policy bad.wsync
	assert_output 'wsync-push: bad.wsync: tensor enc.w: unknown dtype "f17"'
	"$PY" "$FIXTURES/mkhostile.py" valid good.wsync
	printf '\377' | dd of=good.wsync bs=1 seek=128 conv=notrunc status=none
	run -65 wsync-push -m policy good.wsync
	assert_output 'wsync-push: good.wsync: tensor enc.w: data does not match its hash'
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq '.models | length' <<<"$output")" 0
}

@test "a safetensors file is pushed as .wsync of the named model" {
	"$PY" "$FIXTURES/mkmodel.py" m.safetensors w=float32:2:1,2
	start_hub
	run -0 wsync-push -m critic m.safetensors
	assert_output 1
	wsync-pull -m critic -o c.wsync
	run -0 wsync-inspect diff m.safetensors c.wsync
	assert_equal "$(wsync-inspect --json c.wsync | jq -r .model)" critic
}

@test "--workers announces a version only to the named workers" {
	make_versions 2
	start_hub
	start_watcher chosen
	start_watcher other
	wsync-push -m policy v1.wsync
	wait_until watcher_at chosen 1
	wait_until watcher_at other 1
	run -0 wsync-push --workers chosen --wait chosen --timeout 5 -m policy v2.wsync
	assert_output 2
	assert_equal "$(last_version chosen)" 2
	run -0 wsync-pull -m policy -o any.wsync
	assert_output 1
	assert_equal "$(last_version other)" 1
}

@test "wsync-push --wait-for waits for a version pushed earlier" {
	make_versions 1
	start_hub
	start_watcher w
	WAIT_S=10 wait_until bash -c '[ "$(wsync-inspect --hub --json | jq ".workers | length")" = 1 ]'
	run -0 wsync-push -m policy v1.wsync
	run -0 wsync-push --wait-for 1 --timeout 5 -m policy
	assert_output ""
	assert_equal "$(last_version w)" 1
}

@test "a model larger than one chunk goes up in chunks and comes back intact" {
	"$PY" - <<'PYEOF'
import json, struct
import numpy as np
w = np.arange(3 * 1024 * 1024, dtype="<f4").tobytes()   # 12 MiB: three chunks and more
h = json.dumps({"w": {"dtype": "F32", "shape": [3 * 1024 * 1024], "data_offsets": [0, len(w)]}}).encode()
h += b" " * (-len(h) % 8)
open("big.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + w)
PYEOF
	wsync-convert -m policy big.safetensors big.wsync
	start_hub
	run -0 wsync-push -m policy big.wsync
	assert_output 1
	run -0 grep -c "event=begin" hub.log
	assert_output 1
	run -0 wsync-pull -m policy -o back.wsync
	assert_equal "$(content_of back.wsync)" "$(content_of big.wsync)"
	run -0 wsync-inspect diff big.safetensors back.wsync
}

# Three tensors, 10 MiB, stored in another order than a .wsync file's (sorted keys), and meta.
make_unordered() {
	"$PY" - <<'PYEOF'
import json, struct
import numpy as np
parts = [("z.w", np.arange(1 << 20, dtype="<f4")), ("a.w", np.arange(1 << 19, dtype="<f8")),
         ("a.b", np.arange(1 << 20, dtype="<i2"))]
head, raw = {}, b""
for name, a in parts:
    head[name] = {"dtype": {"float32": "F32", "float64": "F64", "int16": "I16"}[a.dtype.name],
                  "shape": list(a.shape), "data_offsets": [len(raw), len(raw) + a.nbytes]}
    raw += a.tobytes()
head["__metadata__"] = {"step": "7", "run": "a"}
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
open("m.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + raw)
PYEOF
}

@test "a safetensors file or stream is pushed, handed over or sent, as the same .wsync" {
	make_unordered
	start_hub --keep 5
	run -0 wsync-push -m policy m.safetensors
	assert_output 1
	wsync-pull -m policy -o 1.wsync
	run -0 wsync-inspect diff m.safetensors 1.wsync
	run -0 bash -c 'cat m.safetensors | wsync-push -m policy -'
	assert_output 2
	run -0 wsync-push --transfer socket -m policy m.safetensors
	assert_output 3
	run -0 bash -c 'cat m.safetensors | wsync-push --transfer socket -m policy -'
	assert_output 4
	run -0 bash -c 'wsync-push -m policy - <m.safetensors'
	assert_output 5
	for v in 2 3 4 5; do
		wsync-pull -m policy -v "$v" -o "$v.wsync"
		assert_equal "$(content_of "$v.wsync")" "$(content_of 1.wsync)"
		run -0 cmp <(tail -c +200 1.wsync) <(tail -c +200 "$v.wsync")
		assert_equal "$(wsync-inspect --json "$v.wsync" | jq -c .meta)" '{"step":"7","run":"a"}'
	done
	run -0 grep -c "event=begin.*transfer=copy" hub.log
	assert_output 3
}

@test "a safetensors stream cut short is refused with 65 and nothing is committed" {
	make_unordered
	start_hub
	run -65 bash -c 'head -c 5000000 m.safetensors | wsync-push -m policy -'
	assert_output "wsync-push: stdin: truncated: ended after 5000000 bytes"
	run -65 bash -c 'head -c 5000000 m.safetensors | wsync-push --transfer socket -m policy -'
	assert_output "wsync-push: stdin: truncated: ended after 5000000 bytes"
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq '.models | length' <<<"$output")" 0
	run -0 find "$STORE/.uploads" -type f -name 'upload.*'
	assert_output ""
}

@test "wsync-push --progress on a terminal shows the upload's bytes, rate and ETA" {
	make_big 12
	start_hub
	run -0 on_tty wsync-push --transfer socket --progress -m big big.safetensors
	assert_line --index 0 --regexp '^wsync-push: [0-9.]+ MiB / 12.0 MiB +[0-9]+% '
	assert_line --index $((${#lines[@]} - 2)) \
	    --regexp '^wsync-push: 12.0 MiB / 12.0 MiB 100% [0-9.]+ (B|KiB|MiB|GiB)/s ETA 0:00$'
	assert_line --index $((${#lines[@]} - 1)) "1"
	run -0 on_tty wsync-push --transfer socket -q --progress -m big big.safetensors
	assert_output "2"
}

@test "a large bad .wsync handed over through the store is refused as it is written, 65" {
	make_big 6
	wsync-convert -m policy big.safetensors big.wsync
	local off
	off=$(wsync-inspect --json big.wsync | jq '.tree[0].offset + 1000')
	printf '\377' | dd of=big.wsync bs=1 seek="$off" conv=notrunc status=none
	start_hub
	run -65 wsync-push -m policy big.wsync
	assert_output 'wsync-push: big.wsync: tensor w: data does not match its hash'
	run -0 grep -c "event=begin.*transfer=copy" hub.log
	run -0 wsync-inspect --hub --json
	assert_equal "$(jq '.models | length' <<<"$output")" 0
	run -0 find "$STORE/.uploads" -type f
	assert_output ""
}

@test "wsync-push --batch answers one line per request on one connection" {
	make_versions 3
	"$PY" "$FIXTURES/mkhostile.py" valid bad.wsync
	printf '\377' | dd of=bad.wsync bs=1 seek=128 conv=notrunc status=none
	start_hub
	start_watcher w1
	wait_until hub_has_worker w1
	run -0 wsync-push --batch <<-'EOF'
	-m policy v1.wsync
	-m policy v2.wsync -w all -t 10

	-m policy
	--wait-for 2 -m policy -w w1
	-m policy bad.wsync
	-e ipc:///elsewhere -m policy v3.wsync
	-m policy v3.wsync --bogus
	-m policy -
	-m policy v3.wsync -w 3090box,w1 -t 0.2
	-m policy v3.wsync
	EOF
	# The wait's figure is what was left of its -t after the push: less on a busy machine.
	output=$(sed 's/after 0\.[12] s;/after 0.2 s;/' <<<"$output")
	assert_output "ok policy 1
ok policy 2
error 64 no file given (use - for stdin)
ok policy 2
error 65 bad.wsync: tensor enc.w: data does not match its hash
error 64 -e is an option of the wsync-push --batch command, not of a request
error 64 unknown option '--bogus'
error 64 - (stdin) carries the requests in --batch: give a file
error 75 policy version 3: 1 of 2 workers have not applied it after 0.2 s; 3090box: has no version, never seen
ok policy 4"
	run -0 grep -c "event=hello role=push" hub.log
	assert_output 1
	wait_until watcher_at w1 4
	assert_equal "$(content_of w1.wsync)" "$(content_of v3.wsync)"
}

@test "wsync-push --batch pushes a file whose name holds a blank, quoted" {
	make_versions 1
	cp v1.wsync "my v1.wsync"
	start_hub
	run -0 wsync-push --batch <<-'EOF'
	-m policy "my v1.wsync"
	-m policy my v1.wsync
	EOF
	assert_output "ok policy 1
error 64 one file per push; for several models use -m MODEL=FILE"
	run -0 wsync-pull -m policy -o got.wsync
	assert_equal "$(content_of got.wsync)" "$(content_of v1.wsync)"
}

@test "wsync-push --batch pushes a file whose name holds a quote and a backslash, escaped" {
	make_versions 2
	cp v1.wsync 'say "hi" \.wsync'
	cp v2.wsync 'it"s.wsync'
	start_hub
	run -0 wsync-push --batch <<-'EOF'
	-m "policy=say \"hi\" \\.wsync"
	-m policy it"s.wsync
	-m policy "v2.wsync
	EOF
	assert_output 'ok policy 1
ok policy 2
error 64 a quoted word has no closing quote'
	run -0 wsync-pull -m policy -v 1 -o got.wsync
	assert_equal "$(content_of got.wsync)" "$(content_of v1.wsync)"
}

@test "wsync-push --batch reports a timed-out wait with its missing workers and goes on" {
	make_versions 2
	start_hub
	start_watcher w1
	wait_until hub_has_worker w1
	kill -STOP "${WPID[w1]}"
	run -0 wsync-push --batch <<-'EOF'
	-m policy v1.wsync -w all -t 1
	-m policy v2.wsync
	EOF
	kill -CONT "${WPID[w1]}"
	assert_line --index 0 --regexp '^error 75 policy version 1: 1 of 1 workers have not applied it after (0\.[0-9]|1\.0) s; w1: has no version, last seen [0-9.]+ s ago$'
	assert_line --index 1 "ok policy 2"
}

@test "wsync-push --batch takes no push on its command line" {
	run -64 wsync-push --batch -m policy v1.wsync
	assert_output "wsync-push: --batch takes its pushes on stdin, not on the command line (only -e, -t, -q, --progress, --transfer, --sign-key, --no-delta and the keys go with it)
Try 'wsync-push --help'."
}

@test "wsync-push --batch refuses -q and --progress in a request: they are the command's" {
	make_versions 1
	start_hub
	run -0 wsync-push --batch <<-'EOF2'
	-q -m policy v1.wsync
	--progress -m policy v1.wsync
	-m policy v1.wsync
	EOF2
	assert_output "error 64 -q is an option of the wsync-push --batch command, not of a request
error 64 --progress is an option of the wsync-push --batch command, not of a request
ok policy 1"
}

@test "Ctrl-C after the commit was sent says the version may be committed and how to see it" {
	make_versions 1
	local port
	port=$(free_port)
	export WSYNC_ENDPOINT="tcp://127.0.0.2:$port"
	start_hub
	# Every byte 500 ms late each way: the hub logs the commit half a second
	# before its answer reaches the pusher, which is interrupted in between.
	"$PY" "$FIXTURES/delayproxy.py" 500 127.0.0.2 "$port" >"$TMP/proxy.out" 2>&1 &
	PIDS+=("$!")
	wait_until grep -q ready "$TMP/proxy.out"
	wsync-push -e "tcp://127.0.0.1:$port" --transfer socket -m policy v1.wsync \
		>push.out 2>push.err &
	local push=$!
	PIDS+=("$push")
	WAIT_S=30 wait_log "event=commit model=policy version=1"
	kill -INT "$push"
	local rc=0
	wait "$push" || rc=$?
	assert_equal "$rc" 130
	assert_equal "$(cat push.err)" "wsync-push: interrupted by signal 2 after the commit was sent to tcp://127.0.0.1:$port; the version may still have been committed (see wsync-inspect --hub)"
	[ ! -s push.out ]
	run -0 bash -c 'wsync-inspect --hub --json | jq ".models[0].head"'
	assert_output 1
}
